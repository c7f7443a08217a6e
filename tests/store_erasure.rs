//! Erasing a user's data from the store (`store::erasure`, schema v11): every table the schema
//! has is either in `erasure::TABLES` or this test fails; after an erasure no table holds a row
//! of the user, the full-text indexes and vectors no longer find their text, the database file
//! no longer holds its bytes, and every other user's rows are unchanged.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

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
        let memory = store
            .save_memory(NewMemory {
                workspace: key.clone(),
                content: text(n),
                visibility: if n % 2 == 0 {
                    Visibility::Public
                } else {
                    Visibility::Private
                },
                importance: Importance::Normal,
            })
            .await
            .unwrap();
        ids.push(memory.id);
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
    store
        .patch_memory(
            &key,
            &ids[0],
            MemoryPatch {
                enabled: Some(false),
                ..MemoryPatch::default()
            },
            Scope::IncludePrivate,
        )
        .await
        .unwrap();
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

/// Every row of every table the schema has (FTS shadow tables included), as text, keyed by
/// table, for the rows whose text mentions `needle` (or all rows when `None`).
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
            .filter(|line| needle.is_none_or(|n| line.contains(n)))
            .collect();
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
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("air.db");
    let store = Store::open(&path).await.unwrap();
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
    assert_eq!(dump(&conn, Some("bob")), bob_before, "bob's rows changed");
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
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("air.db");
    let store = Store::open(&path).await.unwrap();
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
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("air.db");
    let store = Store::open(&path).await.unwrap();
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
    // Back to v10 as an older build left it: its index, its triggers, none of v11's tables.
    let conn = Connection::open(&path).unwrap();
    conn.execute_batch(
        "DROP TABLE erasing; DROP TABLE privacy_log; DROP TABLE privacy_key;
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
