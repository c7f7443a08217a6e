//! Erasing a user's data from the store (`store::erasure`, schema v11): every table the schema
//! has is either in `erasure::TABLES` or this test fails; after an erasure no table holds a row
//! of the user, the full-text indexes and vectors no longer find their text, the database file
//! no longer holds its bytes, and every other user's rows are unchanged.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use air_friends::store::erasure::{self, Holds, RequestedBy, TABLES};
use air_friends::store::{
    ContinuityRecord, Importance, InboxRecord, MaintenanceRun, MemoryPatch, NewMemory, NewReminder,
    Scope, Store, Visibility, WorkspaceKey,
};
use chrono::{Duration, Utc};
use rusqlite::Connection;

/// Text only alice's memories hold: a Latin word (trigram index) and CJK (short-keyword index).
const LATIN_MARK: &str = "qzxvortle";
const CJK_MARK: &str = "鬱鸞";

fn ws(user: &str) -> WorkspaceKey {
    WorkspaceKey::new("discord", user).unwrap()
}

/// Disables memory `id` of `key` (as the user, the agent or maintenance would).
async fn disable(store: &Store, key: &WorkspaceKey, id: &str) {
    store
        .patch_memory(
            key,
            id,
            MemoryPatch {
                enabled: Some(false),
                ..MemoryPatch::default()
            },
            Scope::IncludePrivate,
        )
        .await
        .unwrap();
}

/// A fresh store in a temporary folder, with its file's path.
async fn fresh_store() -> (tempfile::TempDir, PathBuf, Store) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("air.db");
    let store = Store::open(&path).await.unwrap();
    (dir, path, store)
}

/// Saves `content` for `key`, public when `n` is even and private when odd; answers its id.
async fn save_alternating(store: &Store, key: &WorkspaceKey, n: usize, content: String) -> String {
    store
        .save_memory(NewMemory {
            workspace: key.clone(),
            content,
            visibility: if n.is_multiple_of(2) {
                Visibility::Public
            } else {
                Visibility::Private
            },
            importance: Importance::Normal,
        })
        .await
        .unwrap()
        .id
}

/// Gives `user` a row in every kind of table: memories (indexed and still queued, public and
/// private, patched, used, with vectors), reminders, usage, a maintenance run, inbox messages
/// and a conversation's state.
async fn fill(store: &Store, user: &str, marks: bool) {
    let key = ws(user);
    let text = |n: usize| {
        if marks {
            format!("{user} note {n}: likes {LATIN_MARK} and {CJK_MARK}茶")
        } else {
            format!("{user} note {n}: likes tea")
        }
    };
    let mut ids = Vec::new();
    for n in 0..70 {
        ids.push(save_alternating(store, &key, n, text(n)).await);
    }
    // Indexed (a search indexes its workspace first) and marked used; then some still queued.
    let found = store
        .search_memories(&key, "note", Scope::IncludePrivate, 5)
        .await
        .unwrap();
    assert!(!found.is_empty());
    store.note_memories_used(&key, found.into_iter().map(|m| m.memory.id).collect());
    for n in 70..73 {
        store
            .save_memory(NewMemory {
                workspace: key.clone(),
                content: text(n),
                visibility: Visibility::Public,
                importance: Importance::High,
            })
            .await
            .unwrap();
    }
    disable(store, &key, &ids[0]).await;
    let pending = store.embedding_queue(1000).await.unwrap();
    let rows = pending
        .iter()
        .filter(|p| p.workspace == key.to_string())
        .map(|p| (p.seq, vec![0.5_f32, 0.5, 0.5, 0.5]))
        .collect();
    store.put_vectors("test-model", rows).await.unwrap();
    store
        .create_reminder(
            NewReminder {
                workspace: key.clone(),
                message: format!("{user} reminder"),
                scheduled_at: Utc::now() + Duration::hours(1),
            },
            10,
        )
        .await
        .unwrap();
    let today = Utc::now().date_naive();
    store
        .add_llm_usage_in(&key, "default", today, 100, 20)
        .await
        .unwrap();
    store
        .record_maintenance_run(MaintenanceRun {
            workspace: key.clone(),
            visibility: Visibility::Public,
            started_at: Utc::now(),
            finished_at: Utc::now(),
            outcome: "completed".into(),
            dry_run: false,
            read: 3,
            saved: 1,
            disabled: 2,
            tokens: 50,
        })
        .await
        .unwrap();
    store
        .inbox_record(InboxRecord {
            platform: "discord".into(),
            message_id: format!("{user}-m1"),
            channel_id: "c1".into(),
            user_id: user.into(),
            received_at: Utc::now(),
            payload: format!("{{\"text\":\"{}\"}}", text(99)),
        })
        .await
        .unwrap();
    store
        .continuity_put(ContinuityRecord {
            conversation: format!("discord/private/dm-{user}/{user}"),
            platform: "discord".into(),
            user_id: user.into(),
            folder: format!("folder-{user}"),
            acp_session: Some("ses_1".into()),
            fingerprint: 7,
            shown: vec![format!("{user}-m1")],
            turns: 1,
            context_tokens: 300,
            updated_at: Utc::now(),
        })
        .await
        .unwrap();
}

/// Whether `line` holds `word` as a word of its own (a random id such as `mem_…bobm…` that
/// happens to contain it does not name anyone).
fn names(line: &str, word: &str) -> bool {
    line.match_indices(word).any(|(i, _)| {
        let before = line[..i].chars().next_back();
        let after = line[i + word.len()..].chars().next();
        !before.is_some_and(char::is_alphanumeric) && !after.is_some_and(char::is_alphanumeric)
    })
}

/// Every row of every table the schema has (FTS shadow tables included), as text, keyed by
/// table, for the rows whose text names `needle` (as a word) (or all rows when `None`).
fn dump(conn: &Connection, needle: Option<&str>) -> BTreeMap<String, Vec<String>> {
    let tables: Vec<String> = conn
        .prepare("SELECT name FROM sqlite_schema WHERE type = 'table' AND sql NOT LIKE 'CREATE VIRTUAL%' ORDER BY name")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let mut out = BTreeMap::new();
    for table in tables {
        let mut stmt = conn.prepare(&format!("SELECT * FROM \"{table}\"")).unwrap();
        let columns = stmt.column_count();
        let rows: Vec<String> = stmt
            .query_map([], |r| {
                let mut line = Vec::new();
                for i in 0..columns {
                    let v: rusqlite::types::Value = r.get(i)?;
                    line.push(format!("{v:?}"));
                }
                Ok(line.join("|"))
            })
            .unwrap()
            .map(Result::unwrap)
            .filter(|line| needle.is_none_or(|n| names(line, n)))
            .collect::<Vec<String>>();
        // Compared as sets: a scan's order is the planner's choice.
        let mut rows = rows;
        rows.sort();
        out.insert(table, rows);
    }
    out
}

fn file_holds(path: &Path, needle: &str) -> bool {
    let needle = needle.as_bytes();
    [path.to_owned(), path.with_extension("db-wal")]
        .iter()
        .filter_map(|p| std::fs::read(p).ok())
        .any(|bytes| bytes.windows(needle.len()).any(|w| w == needle))
}

fn vocab_has(conn: &Connection, table: &str, term: &str) -> bool {
    conn.execute_batch(&format!(
        "CREATE VIRTUAL TABLE IF NOT EXISTS temp.{table}_v USING fts5vocab(main, {table}, row)"
    ))
    .unwrap();
    conn.query_row(
        &format!("SELECT count(*) FROM temp.{table}_v WHERE term = ?1"),
        [term],
        |r| r.get::<_, i64>(0),
    )
    .unwrap()
        > 0
}

#[tokio::test]
async fn every_table_of_the_schema_is_classified_and_user_columns_are_never_called_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("air.db");
    Store::open(&path).await.unwrap().close().await.unwrap();
    let conn = Connection::open(&path).unwrap();
    let live: BTreeSet<String> = conn
        .prepare(
            "SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%'
             AND name NOT IN (SELECT name || suffix FROM sqlite_schema,
                 (SELECT '_data' AS suffix UNION SELECT '_idx' UNION SELECT '_docsize'
                  UNION SELECT '_content' UNION SELECT '_config')
                 WHERE sql LIKE 'CREATE VIRTUAL TABLE%')",
        )
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let classified: BTreeSet<String> = TABLES.iter().map(|(t, _)| (*t).to_owned()).collect();
    assert_eq!(
        live, classified,
        "every table must say how it holds a user's data (store::erasure::TABLES)"
    );
    // A table with a column that names a user or a workspace cannot be classified as holding
    // nothing.
    for (table, holds) in TABLES {
        let columns: Vec<String> = conn
            .prepare(&format!("SELECT name FROM pragma_table_info('{table}')"))
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        let names_someone = columns
            .iter()
            .any(|c| ["workspace", "user_id", "user", "memory_seq", "key"].contains(&c.as_str()));
        if let Holds::Nothing(why) = holds
            && *table != "privacy_key"
        {
            assert!(
                !names_someone,
                "{table} has a user column but is classified as holding nothing ({why})"
            );
        }
    }
}

#[tokio::test]
async fn an_erasure_leaves_no_row_no_index_entry_no_vector_and_no_byte_of_the_user() {
    let (_dir, path, store) = fresh_store().await;
    store.set_embedding_queue(true).await.unwrap();
    fill(&store, "alice", true).await;
    fill(&store, "bob", false).await;
    store.flush().await.unwrap();
    let (alice, bob) = (ws("alice"), ws("bob"));

    let conn = Connection::open(&path).unwrap();
    let range = erasure::memory_range(&conn, &alice).unwrap();
    let before = erasure::rows_of(&conn, &alice, range).unwrap();
    for (table, n) in &before {
        if !["erasing", "embedding_queue", "index_queue"].contains(table) {
            assert!(*n > 0, "the fixture gives alice rows in {table}");
        }
    }
    assert!(vocab_has(&conn, "memories_fts", "qzx"));
    assert!(vocab_has(&conn, "memories_grams", CJK_MARK));
    assert!(file_holds(&path, LATIN_MARK));
    let bob_before = dump(&conn, Some("bob"));
    assert!(
        !bob_before["memories"].is_empty() && !bob_before["llm_usage"].is_empty(),
        "the fixture gives bob rows that name him"
    );
    // Bob's rows in the tables keyed by a memory's row (patches, vectors, use marks, index
    // entries), which hold no text naming him.
    let bob_range = erasure::memory_range(&conn, &bob).unwrap();
    let bob_keyed = erasure::rows_of(&conn, &bob, bob_range).unwrap();
    assert!(bob_keyed["memory_patches"] > 0 && bob_keyed["memory_vectors"] > 0);
    let kept = store.privacy_kept(&alice).await.unwrap();
    assert_eq!(
        (
            kept.public_memories + kept.private_memories + kept.disabled_memories,
            kept.disabled_memories
        ),
        (73, 1)
    );
    assert_eq!(
        (
            kept.pending_reminders,
            kept.usage_days,
            kept.inbox_messages,
            kept.conversations
        ),
        (1, 1, 1, 1)
    );

    let erasure = store
        .erase_user(&alice, RequestedBy::Operator)
        .await
        .unwrap();
    assert_eq!(erasure.erased.memories, 73);
    assert_eq!(erasure.erased.memory_patches, 1);
    assert_eq!(erasure.erased.reminders, 1);
    assert_eq!(erasure.erased.inbox_messages, 1);
    assert_eq!(erasure.erased.conversations, 1);
    assert_eq!(erasure.folders, vec!["folder-alice".to_owned()]);
    assert!(erasure.erased.vectors > 0);
    assert!(erasure.vacuumed);

    let after = erasure::rows_of(&conn, &alice, range).unwrap();
    assert!(after.values().all(|n| *n == 0), "rows left: {after:?}");
    assert!(
        !vocab_has(&conn, "memories_fts", "qzx"),
        "trigram entries stay"
    );
    assert!(
        !vocab_has(&conn, "memories_grams", CJK_MARK),
        "short-keyword entries stay"
    );
    for table in ["memories_fts", "memories_grams"] {
        conn.execute_batch(&format!(
            "INSERT INTO {table}({table}) VALUES ('integrity-check')"
        ))
        .unwrap();
    }
    assert!(
        !file_holds(&path, LATIN_MARK),
        "the text's bytes stay in the file"
    );
    assert!(
        !file_holds(&path, "alice"),
        "the user's id stays in the file"
    );
    let bob_after = dump(&conn, Some("bob"));
    let changed: Vec<&String> = bob_after
        .keys()
        .filter(|t| bob_after.get(*t) != bob_before.get(*t))
        .collect();
    assert!(changed.is_empty(), "bob's rows changed in {changed:?}");
    assert_eq!(
        erasure::rows_of(&conn, &bob, bob_range).unwrap(),
        bob_keyed,
        "bob's memory-keyed rows changed"
    );
    assert!(
        store
            .search_memories(&bob, "tea", Scope::IncludePrivate, 100)
            .await
            .unwrap()
            .len()
            >= 70
    );
    assert_eq!(
        store.privacy_kept(&alice).await.unwrap(),
        Default::default()
    );

    // The record names alice only by its keyed hash, and is found again by her key.
    let records = store.privacy_records(&alice).await.unwrap();
    assert_eq!(records.len(), 1);
    assert_eq!(
        (records[0].action.as_str(), records[0].requested_by.as_str()),
        ("erase", "operator")
    );
    assert_eq!(records[0].subject.len(), 64);
    assert!(records[0].detail.contains("\"memories\":73"));
    assert!(store.privacy_records(&bob).await.unwrap().is_empty());

    // Alice can start again from nothing: her new memory is found, the old text is not.
    store
        .save_memory(NewMemory {
            workspace: alice.clone(),
            content: "a fresh start 鬱".into(),
            visibility: Visibility::Public,
            importance: Importance::Normal,
        })
        .await
        .unwrap();
    let again = store
        .search_memories(
            &alice,
            &format!("{LATIN_MARK} fresh {CJK_MARK}"),
            Scope::IncludePrivate,
            10,
        )
        .await
        .unwrap();
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].memory.content, "a fresh start 鬱");
    store.close().await.unwrap();
}

#[tokio::test]
async fn memories_patches_and_reminders_stay_append_only_outside_an_erasure() {
    let (_dir, path, store) = fresh_store().await;
    fill(&store, "carol", false).await;
    store.close().await.unwrap();
    let conn = Connection::open(&path).unwrap();
    for sql in [
        "DELETE FROM memories",
        "DELETE FROM memory_patches",
        "DELETE FROM reminders",
    ] {
        let error = conn.execute(sql, []).unwrap_err().to_string();
        assert!(
            error.contains("append-only") || error.contains("never deleted"),
            "{sql}: {error}"
        );
    }
    // An `erasing` row for another workspace does not open carol's.
    conn.execute(
        "INSERT INTO erasing (workspace) VALUES ('discord/dave')",
        [],
    )
    .unwrap();
    assert!(conn.execute("DELETE FROM memories", []).is_err());
}

/// Schema v11 rebuilds the short-keyword index (now able to delete by row id) from the
/// memories of an existing database: what was found by a 1–2 character keyword before the
/// upgrade is found after it, rows still queued are indexed as before, and the index passes
/// FTS5's own check.
#[tokio::test]
async fn the_upgrade_to_v11_rebuilds_the_short_keyword_index_from_the_memories() {
    let (_dir, path, store) = fresh_store().await;
    let key = ws("erin");
    for n in 0..80 {
        store
            .save_memory(NewMemory {
                workspace: key.clone(),
                content: format!("{n} 我喜欢喝咖啡 go"),
                visibility: Visibility::Public,
                importance: Importance::Normal,
            })
            .await
            .unwrap();
    }
    store.close().await.unwrap();
    // Back to v10 as an older build left it: its index, its triggers, none of the tables and
    // columns of v11 and later.
    let conn = Connection::open(&path).unwrap();
    conn.execute_batch(
        "ALTER TABLE llm_usage DROP COLUMN mcp_calls;
         ALTER TABLE llm_usage DROP COLUMN audio_in_ms; ALTER TABLE llm_usage DROP COLUMN transcriptions;
         ALTER TABLE llm_usage DROP COLUMN audio_out_ms; ALTER TABLE llm_usage DROP COLUMN speeches;
         DROP TABLE schedules; DROP TABLE schedule_runs;
         ALTER TABLE reminders DROP COLUMN recur_every; ALTER TABLE reminders DROP COLUMN recur_zone;
         ALTER TABLE reminders DROP COLUMN recur_first; ALTER TABLE reminders DROP COLUMN recur_until;
         ALTER TABLE reminders DROP COLUMN recur_count; ALTER TABLE reminders DROP COLUMN occurrences;
         DROP TABLE erasing; DROP TABLE privacy_log; DROP TABLE privacy_key;
         DROP TABLE user_controls;
         DROP TABLE memories_grams;
         CREATE VIRTUAL TABLE memories_grams USING fts5 (grams, content = '', detail = 'none',
             tokenize = 'unicode61 remove_diacritics 0');
         PRAGMA user_version = 10;",
    )
    .unwrap();
    drop(conn);
    let store = Store::open(&path).await.unwrap();
    for keyword in ["咖啡", "go", "喝"] {
        let found = store
            .search_memories(&key, keyword, Scope::PublicOnly, 100)
            .await
            .unwrap();
        assert_eq!(found.len(), 80, "{keyword}");
    }
    store.close().await.unwrap();
    let conn = Connection::open(&path).unwrap();
    conn.execute_batch("INSERT INTO memories_grams(memories_grams) VALUES ('integrity-check')")
        .unwrap();
    let sql: String = conn
        .query_row(
            "SELECT sql FROM sqlite_schema WHERE name = 'memories_grams'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert!(sql.contains("contentless_delete"), "{sql}");
}

/// The retention job's store side: memories disabled before the cut-off go with everything
/// keyed by them, enabled ones and those disabled later stay, the counts by state stay exact,
/// both indexes pass FTS5's check; usage rows before the cut-off day go.
#[tokio::test]
async fn retention_deletes_only_what_is_past_its_age() {
    let (_dir, path, store) = fresh_store().await;
    let key = ws("frank");
    let mut ids = Vec::new();
    for n in 0..10 {
        ids.push(
            save_alternating(&store, &key, n, format!("frank {n} 咖啡 {LATIN_MARK}{n}")).await,
        );
    }
    for id in &ids[..4] {
        disable(&store, &key, id).await;
    }
    let cutoff = Utc::now() + Duration::milliseconds(5);
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    disable(&store, &key, &ids[4]).await; // disabled after the cut-off: stays
    let today = Utc::now().date_naive();
    store
        .add_llm_usage_in(&key, "default", today - chrono::Days::new(100), 5, 5)
        .await
        .unwrap();
    store
        .add_llm_usage_in(&key, "default", today, 5, 5)
        .await
        .unwrap();

    assert_eq!(store.purge_disabled_memories(cutoff, 3).await.unwrap(), 4);
    assert_eq!(
        store
            .prune_usage(today - chrono::Days::new(90))
            .await
            .unwrap(),
        2
    );
    let kept = store.privacy_kept(&key).await.unwrap();
    assert_eq!(
        (
            kept.public_memories,
            kept.private_memories,
            kept.disabled_memories
        ),
        (2, 3, 1)
    );
    assert_eq!(kept.usage_days, 1);
    for (n, id) in ids.iter().enumerate() {
        let found = store
            .get_memory(&key, id, Scope::IncludePrivate)
            .await
            .unwrap()
            .is_some();
        assert_eq!(found, n >= 4, "memory {n}");
    }
    let hits = store
        .search_memories(&key, "咖啡", Scope::IncludePrivate, 100)
        .await
        .unwrap();
    assert_eq!(hits.len(), 5, "the enabled ones");
    store.close().await.unwrap();
    let conn = Connection::open(&path).unwrap();
    for t in ["memories_fts", "memories_grams"] {
        conn.execute_batch(&format!("INSERT INTO {t}({t}) VALUES ('integrity-check')"))
            .unwrap();
    }
    let (counted, actual): (i64, i64) = conn
        .query_row(
            "SELECT (SELECT sum(n) FROM memory_counts), (SELECT count(*) FROM memories)",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!((counted, actual), (6, 6));
    assert_eq!(
        conn.query_row("SELECT count(*) FROM memory_patches", [], |r| r
            .get::<_, i64>(0))
            .unwrap(),
        1,
        "only the kept disabled memory's patch"
    );
}

/// One pass of the retention job over a store and a workspaces folder: what is past its age
/// goes (a disabled memory, an old usage day, an old session file), the rest stays, the pass
/// is recorded in `privacy_log` with its counts and no subject; a second pass finds nothing
/// and records nothing.
#[tokio::test]
async fn a_retention_pass_removes_what_is_past_its_age_and_records_it() {
    use air_friends::config::RetentionConfig;
    use air_friends::privacy::retention::{Removed, Retention};

    let (dir, path, store) = fresh_store().await;
    let key = ws("gina");
    let memory = store
        .save_memory(NewMemory {
            workspace: key.clone(),
            content: "gina likes tea".into(),
            visibility: Visibility::Public,
            importance: Importance::Normal,
        })
        .await
        .unwrap();
    disable(&store, &key, &memory.id).await;
    let today = Utc::now().date_naive();
    store
        .add_llm_usage_in(&key, "default", today - chrono::Days::new(3), 1, 1)
        .await
        .unwrap();
    let workspaces = dir.path().join("workspaces");
    let session = workspaces.join("discord/gina/tmp/s1");
    std::fs::create_dir_all(&session).unwrap();
    let old = session.join("old.png");
    std::fs::write(&old, "x").unwrap();
    std::fs::File::options()
        .write(true)
        .open(&old)
        .unwrap()
        .set_modified(std::time::SystemTime::now() - std::time::Duration::from_secs(3 * 3600))
        .unwrap();
    std::fs::write(session.join("new.png"), "y").unwrap();

    // Everything younger than its period stays.
    let keep_all = RetentionConfig {
        disabled_memory_days: 1,
        usage_days: 5,
        session_file_hours: 4,
    };
    let job = Retention::new(store.clone(), workspaces.clone(), keep_all);
    assert_eq!(job.pass().await.unwrap(), Removed::default());
    // A memory disabled now is not one day old; a usage day 3 days ago is older than 2 days.
    let job = Retention::new(
        store.clone(),
        workspaces.clone(),
        RetentionConfig {
            disabled_memory_days: 1,
            usage_days: 2,
            session_file_hours: 2,
        },
    );
    let removed = job.pass().await.unwrap();
    assert_eq!(
        (
            removed.disabled_memories,
            removed.usage_rows,
            removed.session_files
        ),
        (0, 2, 1)
    );
    assert!(!old.exists() && session.join("new.png").exists());
    assert_eq!(job.pass().await.unwrap(), Removed::default());
    // Periods longer than time goes back keep everything (and are no panic).
    let forever = Retention::new(
        store.clone(),
        workspaces.clone(),
        RetentionConfig {
            disabled_memory_days: u64::MAX,
            usage_days: 200_000_000_000,
            session_file_hours: u64::MAX,
        },
    );
    assert_eq!(forever.pass().await.unwrap(), Removed::default());
    store.close().await.unwrap();
    let conn = Connection::open(&path).unwrap();
    let records: Vec<(String, String, String)> = conn
        .prepare("SELECT requested_by, subject, detail FROM privacy_log WHERE action = 'retention'")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0].0, "retention");
    assert_eq!(records[0].1, "", "no subject");
    assert!(records[0].2.contains("\"usageRows\":2"), "{}", records[0].2);
}

#[tokio::test]
async fn an_erasure_does_not_lift_the_operators_block() {
    let (_dir, _path, store) = fresh_store().await;
    let alice = ws("alice");
    fill(&store, "alice", false).await;
    let block = air_friends::store::controls::ControlChange {
        blocked: Some(true),
        tokens_per_day: Some(Some(100)),
    };
    store.set_user_control(&alice, block, "op").await.unwrap();
    store.erase_user(&alice, RequestedBy::User).await.unwrap();
    assert!(store.controls().is_blocked("discord", "alice"));
    assert_eq!(store.controls().tokens_per_day(&alice), Some(100));
    store.close().await.unwrap();
}
