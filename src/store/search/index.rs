//! Writing the two full-text indexes: the writer's settings and queue, the batch's index step,
//! the idle merge, and the text of the short-keyword index ([`short_grams`]).
//!
//! What each index answers is in the parent module's docs.

use rusqlite::{Connection, Transaction, TransactionBehavior};

use crate::store::StoreError;
use crate::text::writes_without_spaces;

/// Rows the queue gathers before the step after a batch indexes them ([`index_batch`]).
///
/// Each indexing writes a new segment into both indexes, whatever the number of rows, so
/// indexing small batches one by one cost a third of the writer's CPU per save at 16 callers;
/// with 64 rows a segment, writer CPU per save fell from 31.5–39 to 22–24 µs
/// (`docs/performance/skill-api.md`, "Saves: indexing the queue").
pub(crate) const INDEX_AT: i64 = 64;

/// Sets both indexes' merging, and indexes any rows left queued by the last run (a crash, or a
/// stop without `close`). Called once when the writer's connection opens.
///
/// The merge settings: `automerge` 0, so indexing never merges segments by itself;
/// `crisismerge` [`CRISIS_MERGE`], far above where [`index_batch`]'s small steps keep each level
/// ([`LOAD_MERGE`] segments), so FTS5 never merges a whole level inside one save's batch; and
/// `usermerge` [`LOAD_MERGE`], which the idle [`idle_step`] lowers to 2 for its own steps, so
/// that when the writer has nothing else to do it merges any level of two segments or more
/// (fewer segments, cheaper searches: `docs/performance/skill-api.md`, "search and stats by
/// workspace size").
///
/// Why not FTS5's own crisis merge: it merges all 16 segments of a level at once, inside the
/// insert that adds the 16th. Under steady saves that was a 6–10 ms batch every 1 024 saves, a
/// 50 ms one every 16 384 and a 770 ms one every 262 144 (`benches/save_stalls.rs`,
/// `docs/PERFORMANCE.md`, "Save stalls").
pub(crate) fn prepare_writer(conn: &Connection) -> Result<(), StoreError> {
    // One transaction for the six settings (they persist in each index's `_config` table) and
    // the left-over rows.
    let rows = in_transaction(conn, |conn| {
        for table in INDEXES {
            conn.execute_batch(&format!(
                "INSERT INTO {table}({table}, rank) VALUES('automerge', 0);
                 INSERT INTO {table}({table}, rank) VALUES('crisismerge', {CRISIS_MERGE});
                 INSERT INTO {table}({table}, rank) VALUES('usermerge', {LOAD_MERGE});"
            ))?;
        }
        index_queued(conn, 1)
    })?;
    if rows > 0 {
        tracing::info!(rows, "store: indexed memories left queued by the last run");
    }
    Ok(())
}

/// Runs `f` in a transaction of its own (the writer's hooks outside a batch): committed when it
/// succeeds, rolled back when it fails (rusqlite's `Transaction` rolls back on drop).
fn in_transaction<R>(
    conn: &Connection,
    f: impl FnOnce(&Connection) -> Result<R, StoreError>,
) -> Result<R, StoreError> {
    let tx = Transaction::new_unchecked(conn, TransactionBehavior::Immediate)?;
    let r = f(&tx)?;
    tx.commit()?;
    Ok(r)
}

/// The two full-text indexes.
const INDEXES: [&str; 2] = ["memories_fts", "memories_grams"];
/// Pages of merged index one idle step writes at most, per index (a few milliseconds).
const MERGE_PAGES: u32 = 256;
/// Segments a level gathers before the steps that follow each indexing start merging it:
/// FTS5's own fan-out (each row is rewritten as often as with its crisis merges).
const LOAD_MERGE: u32 = 16;
/// Pages of merged index one step writes at most, per index: about a millisecond, unless a
/// single word's entries are longer (a merge step ends between words only).
const LOAD_MERGE_PAGES: u32 = 16;
/// The batches that take a merge step: the one that indexes, and those while fewer rows than
/// this wait in the queue after it (two or three batches at 16 callers, so several steps per
/// indexing, enough to keep up; an idle batch's check of whether a level needs merging costs a
/// read of each index's structure, so not every batch makes it).
const MERGE_WINDOW: i64 = 24;
/// FTS5's crisis merge, which merges a whole level inside one insert: only if the steps fell
/// this far behind.
const CRISIS_MERGE: u32 = 64;

/// One step of the writer's idle work, answering whether it did any (so another step may have
/// more to do): indexes the queue if it holds any row, else merges segments of both full-text
/// indexes, at most [`MERGE_PAGES`] pages of each.
///
/// Every indexing adds a segment to each index, and indexing does not merge them (see
/// [`prepare_writer`]), so a big workspace is spread over a dozen or two segments, and every
/// search walks all of them (`docs/performance/skill-api.md`, "search and stats by workspace
/// size": 22 → 2
/// segments made a common-word search at 100 000 memories 1.2–1.5× cheaper). The writer runs
/// this when it has nothing else to do, so the merge costs no save anything.
pub(crate) fn idle_step(conn: &Connection) -> Result<bool, StoreError> {
    // Outside a batch: the queue's three statements must commit together, or a crash between
    // them would leave rows both indexed and queued (and indexed twice at the next start).
    if in_transaction(conn, |conn| index_queued(conn, 1))? > 0 {
        return Ok(true);
    }
    // Idle, a level of two segments is worth merging; the next batch's steps wait for sixteen.
    in_transaction(conn, |conn| {
        set_usermerge(conn, 2)?;
        let worked = merge_step(conn, MERGE_PAGES)?;
        set_usermerge(conn, LOAD_MERGE)?;
        Ok(worked)
    })
}

/// Sets `usermerge` on both indexes (the fewest segments a level needs to be merged by a
/// positive `merge`).
fn set_usermerge(conn: &Connection, segments: u32) -> Result<(), StoreError> {
    for table in INDEXES {
        conn.prepare_cached(&format!(
            "INSERT INTO {table}({table}, rank) VALUES('usermerge', {segments})"
        ))?
        .execute([])?;
    }
    Ok(())
}

/// Queues a new memory row for both full-text indexes, in the transaction that inserts it (a
/// job that fails takes its queue row back out with its memory).
pub(crate) fn queue_for_index(
    conn: &Connection,
    seq: i64,
    content: &str,
) -> Result<(), StoreError> {
    conn.prepare_cached("INSERT INTO index_queue (seq, grams) VALUES (?1, ?2)")?
        .execute(rusqlite::params![seq, short_grams(content)])?;
    Ok(())
}

/// The step after every write batch ([`crate::store::db::WriterHooks::after_batch`], in a
/// transaction of its own once the batch's callers are answered): indexes the queue once it
/// holds [`INDEX_AT`] rows, and then, and after the batches right after it, takes a small merge
/// step ([`LOAD_MERGE_PAGES`]), so merges keep up with the saves a little at a time instead of
/// FTS5 merging a whole level in one batch.
pub(crate) fn index_batch(conn: &Connection) -> Result<(), StoreError> {
    let queued = queued(conn)?;
    if queued >= INDEX_AT {
        index_rows(conn)?;
        merge_step(conn, LOAD_MERGE_PAGES)?;
    } else if queued < MERGE_WINDOW {
        merge_step(conn, LOAD_MERGE_PAGES)?;
    }
    Ok(())
}

/// Merges at most `pages` pages of each index, on a level that holds `usermerge` segments or
/// more, or continues a merge begun by an earlier step; answers whether either index did work.
fn merge_step(conn: &Connection, pages: u32) -> Result<bool, StoreError> {
    let mut worked = false;
    for table in INDEXES {
        let before = conn.total_changes();
        conn.prepare_cached(&format!(
            "INSERT INTO {table}({table}, rank) VALUES('merge', {pages})"
        ))?
        .execute([])?;
        // FTS5 counts two or more changes when the merge did work, fewer when it was a no-op.
        worked |= conn.total_changes() - before >= 2;
    }
    Ok(worked)
}

/// Indexes every queued row: a write job before a search that found rows waiting, and the
/// writer's last job before a checkpoint or close ([`crate::store::db::WriterHooks::settle`]).
pub(crate) fn index_all(conn: &Connection) -> Result<(), StoreError> {
    index_queued(conn, 1).map(|_| ())
}

/// Whether memories in the rowid range `(lo, hi)` (one workspace) wait for the indexes. A search
/// that finds some has the writer run [`index_all`] first, so it never misses a memory whose
/// save was acknowledged before it began.
pub(super) fn waiting(conn: &Connection, (lo, hi): (i64, i64)) -> Result<bool, StoreError> {
    Ok(conn
        .prepare_cached("SELECT EXISTS (SELECT 1 FROM index_queue WHERE seq BETWEEN ?1 AND ?2)")?
        .query_row([lo, hi], |r| r.get(0))?)
}

/// Indexes every queued row, in one statement per index, and empties the queue, when it holds
/// at least `at_least` rows; answers how many rows it indexed. Runs inside the caller's
/// transaction, so rows leave the queue exactly when their index entries commit.
///
/// Why not a trigger per insert: FTS5 writes its pending terms to disk at every savepoint, and
/// every job of a batch runs in a savepoint of its own, so indexing inside the job wrote one tiny
/// segment per memory (and merged them again). Indexing the queue at once writes one segment per
/// index for all of its rows (`docs/performance/skill-api.md`, "Skill API: CPU per call" and
/// "Saves: indexing the queue").
fn index_queued(conn: &Connection, at_least: i64) -> Result<i64, StoreError> {
    let queued = queued(conn)?;
    if queued < at_least.max(1) {
        return Ok(0);
    }
    index_rows(conn)?;
    Ok(queued)
}

/// Rows waiting in the index queue.
fn queued(conn: &Connection) -> Result<i64, StoreError> {
    Ok(conn
        .prepare_cached("SELECT count(*) FROM index_queue")?
        .query_row([], |r| r.get(0))?)
}

/// Indexes every queued row and empties the queue (see [`index_queued`]).
fn index_rows(conn: &Connection) -> Result<(), StoreError> {
    conn.prepare_cached(
        "INSERT INTO memories_fts (rowid, content)
         SELECT q.seq, m.content FROM index_queue q JOIN memories m ON m.seq = q.seq
         ORDER BY q.seq",
    )?
    .execute([])?;
    conn.prepare_cached(
        "INSERT INTO memories_grams (rowid, grams)
         SELECT seq, grams FROM index_queue WHERE grams <> '' ORDER BY seq",
    )?
    .execute([])?;
    conn.prepare_cached("DELETE FROM index_queue")?
        .execute([])?;
    Ok(())
}

/// The text indexed in `memories_grams` for `content`: CJK unigrams and bigrams, and Latin words
/// of at most two characters, separated by spaces. Empty when there is nothing short to index.
pub(crate) fn short_grams(content: &str) -> String {
    let mut out = String::new();
    let mut push = |token: &str| {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(token);
    };
    let mut run: Vec<char> = Vec::new(); // current CJK run
    let mut word = String::new(); // current non-CJK alphanumeric word
    let mut word_chars = 0usize;
    let flush_run = |run: &mut Vec<char>, push: &mut dyn FnMut(&str)| {
        let mut buf = [0u8; 8];
        for (i, c) in run.iter().enumerate() {
            push(c.encode_utf8(&mut buf));
            if let Some(next) = run.get(i + 1) {
                let pair: String = [*c, *next].iter().collect();
                push(&pair);
            }
        }
        run.clear();
    };
    let flush_word = |word: &mut String, chars: &mut usize, push: &mut dyn FnMut(&str)| {
        if *chars > 0 && *chars <= 2 {
            push(&word.to_lowercase());
        }
        word.clear();
        *chars = 0;
    };
    for c in content.chars() {
        if writes_without_spaces(c) {
            flush_word(&mut word, &mut word_chars, &mut push);
            run.push(c);
        } else if c.is_alphanumeric() {
            flush_run(&mut run, &mut push);
            word.push(c);
            word_chars += 1;
        } else {
            flush_run(&mut run, &mut push);
            flush_word(&mut word, &mut word_chars, &mut push);
        }
    }
    flush_run(&mut run, &mut push);
    flush_word(&mut word, &mut word_chars, &mut push);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::types::{Scope, WorkspaceKey};

    /// The batch's index step indexes exactly the rows that commit: a job that inserted a memory
    /// and then failed leaves nothing in either index, its neighbours in the same batch are
    /// found, and FTS5's own integrity check passes.
    #[tokio::test]
    async fn a_failed_job_leaves_no_index_entry_and_its_batch_neighbours_are_found() {
        use crate::store::Store;
        use crate::store::memories::insert;

        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("t.db")).await.unwrap();
        let ws = WorkspaceKey::new("discord", "1").unwrap();
        let row = |content: &str| memory(&ws, content);
        let (kept, failed, also) = (
            row("kept kayak 猫"),
            row("failed kayak 犬"),
            row("also kayak"),
        );
        let db = store.db();
        let (a, b, c) = tokio::join!(
            db.write(move |c| insert(c, &kept)),
            db.write(move |c| {
                insert(c, &failed)?;
                Err::<(), _>(StoreError::Invalid("after the insert".into()))
            }),
            db.write(move |c| insert(c, &also)),
        );
        assert!(a.is_ok() && b.is_err() && c.is_ok());
        let hits = store
            .search_memories(&ws, "kayak", Scope::PublicOnly, 10)
            .await
            .unwrap();
        let mut found: Vec<&str> = hits.iter().map(|h| h.memory.content.as_str()).collect();
        found.sort_unstable();
        assert_eq!(found, ["also kayak", "kept kayak 猫"]);
        for short in ["犬", "猫"] {
            let n = store
                .search_memories(&ws, short, Scope::PublicOnly, 10)
                .await
                .unwrap()
                .len();
            assert_eq!(n, usize::from(short == "猫"), "{short}");
        }
        db.write(|c| {
            for t in ["memories_fts", "memories_grams"] {
                c.execute_batch(&format!("INSERT INTO {t}({t}) VALUES ('integrity-check')"))?;
            }
            let left: i64 = c.query_row("SELECT count(*) FROM index_queue", [], |r| r.get(0))?;
            assert_eq!(left, 0);
            // Read the indexes themselves, not through the memories (a search joins them and
            // would hide an entry left by the failed job).
            let count = |sql: &str| c.query_row(sql, [], |r| r.get::<_, i64>(0));
            let grams = "SELECT count(*) FROM memories_grams WHERE memories_grams MATCH";
            assert_eq!(count(&format!("{grams} '犬'"))?, 0);
            assert_eq!(count(&format!("{grams} '猫'"))?, 1);
            let trigram = "SELECT count(*) FROM memories_fts WHERE memories_fts MATCH 'kayak'";
            assert_eq!(count(trigram)?, 2);
            Ok(())
        })
        .await
        .unwrap();
    }

    fn memory(ws: &WorkspaceKey, content: &str) -> crate::store::memories::MemoryInsert {
        crate::store::memories::test_row(ws, content)
    }

    fn count(c: &Connection, sql: &str) -> i64 {
        c.query_row(sql, [], |r| r.get(0)).unwrap()
    }

    const QUEUED: &str = "SELECT count(*) FROM index_queue";
    const INDEXED: &str = "SELECT count(*) FROM memories_fts WHERE memories_fts MATCH 'kayak'";

    /// The store's writer hooks without idle work, so nothing but the rule under test indexes.
    const NO_IDLE: crate::store::db::WriterHooks = crate::store::db::WriterHooks {
        prepare: prepare_writer,
        after_batch: index_batch,
        idle: |_| Ok(false),
        settle: |_| Ok(()),
    };

    /// Segments in `table` (each data row's id holds its segment's number above bit 37; the
    /// structure record is segment 0).
    fn segments(c: &Connection, table: &str) -> i64 {
        count(
            c,
            &format!("SELECT count(DISTINCT id >> 37) FROM {table}_data WHERE id >> 37 > 0"),
        )
    }

    /// Under saves that never stop (no idle step), each batch merges a little: the segments
    /// stay far below one per indexing, FTS5's crisis merge is set out of the way, the idle
    /// step leaves `usermerge` as the batches want it, and after it all the indexes are whole
    /// and every memory is found.
    #[tokio::test]
    async fn steady_saves_merge_a_little_per_batch_and_lose_nothing() {
        use crate::store::db::Db;
        use crate::store::memories::insert;

        let dir = tempfile::tempdir().unwrap();
        let db = Db::open_blocking(&dir.path().join("t.db"), NO_IDLE).unwrap();
        let ws = WorkspaceKey::new("discord", "a").unwrap();
        let total = 60 * INDEX_AT;
        for n in 0..total {
            let row = memory(&ws, &format!("kayak trip number {n} 猫"));
            db.write(move |c| insert(c, &row)).await.unwrap();
        }
        let (fts, grams, found, short, settings) = db
            .write(|c| {
                let settings: Vec<(String, i64)> = c
                    .prepare(
                        "SELECT k, v FROM memories_fts_config WHERE k LIKE '%merge' ORDER BY k",
                    )?
                    .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
                    .collect::<Result<_, _>>()?;
                Ok((
                    segments(c, "memories_fts"),
                    segments(c, "memories_grams"),
                    count(c, INDEXED),
                    count(
                        c,
                        "SELECT count(*) FROM memories_grams WHERE memories_grams MATCH '猫'",
                    ),
                    settings,
                ))
            })
            .await
            .unwrap();
        assert!(
            fts < 2 * i64::from(LOAD_MERGE) && grams < 2 * i64::from(LOAD_MERGE),
            "{fts} {grams}"
        );
        assert_eq!((found, short), (total, total));
        assert_eq!(
            settings,
            [
                ("automerge".to_owned(), 0),
                ("crisismerge".to_owned(), i64::from(CRISIS_MERGE)),
                ("usermerge".to_owned(), i64::from(LOAD_MERGE)),
            ]
        );
        db.close().await.unwrap();
        // Idle steps (the writer's, when no save comes for a second) merge down to a segment
        // or two per level, and hand usermerge back.
        let c = Connection::open(dir.path().join("t.db")).unwrap();
        while idle_step(&c).unwrap() {}
        for t in INDEXES {
            c.execute_batch(&format!("INSERT INTO {t}({t}) VALUES ('integrity-check')"))
                .unwrap();
        }
        let fts_idle = segments(&c, "memories_fts");
        assert!(fts_idle < fts.max(4), "{fts_idle} after idle, {fts} before");
        assert_eq!(
            count(
                &c,
                "SELECT v FROM memories_fts_config WHERE k = 'usermerge'"
            ),
            i64::from(LOAD_MERGE)
        );
        assert_eq!(count(&c, INDEXED), total);
    }

    /// Saves wait in the queue until it holds `INDEX_AT` rows; the batch that brings it there
    /// indexes them all. `waiting` sees the rows of one workspace's range only.
    #[tokio::test]
    async fn the_queue_is_indexed_once_it_holds_enough_rows() {
        use crate::store::db::Db;
        use crate::store::memories::insert;

        let dir = tempfile::tempdir().unwrap();
        let db = Db::open_blocking(&dir.path().join("t.db"), NO_IDLE).unwrap();
        let (a, b) = (
            WorkspaceKey::new("discord", "a").unwrap(),
            WorkspaceKey::new("discord", "b").unwrap(),
        );
        let row = memory(&a, "a kayak trip");
        db.write(move |c| insert(c, &row)).await.unwrap();
        let (queued, a_waits, b_waits) = db
            .write(move |c| {
                let waits = |ws| super::super::waiting_in(c, ws).unwrap();
                Ok((count(c, QUEUED), waits(&a), waits(&b)))
            })
            .await
            .unwrap();
        assert_eq!((queued, a_waits, b_waits), (1, true, false));
        for n in 2..INDEX_AT {
            let row = memory(
                &WorkspaceKey::new("discord", "a").unwrap(),
                &format!("kayak {n}"),
            );
            db.write(move |c| insert(c, &row)).await.unwrap();
        }
        let seen = db
            .write(|c| Ok((count(c, QUEUED), count(c, INDEXED))))
            .await
            .unwrap();
        assert_eq!(seen, (INDEX_AT - 1, 0));
        let row = memory(
            &WorkspaceKey::new("discord", "a").unwrap(),
            "the last kayak",
        );
        db.write(move |c| insert(c, &row)).await.unwrap();
        let seen = db
            .write(|c| Ok((count(c, QUEUED), count(c, INDEXED))))
            .await
            .unwrap();
        assert_eq!(seen, (0, INDEX_AT));
        db.close().await.unwrap();
    }

    /// Rows still queued when the writer stopped (a crash, or a stop without the store's
    /// `close`) are in the file, and the next start indexes them before anything else: a search
    /// finds them, and FTS5's integrity check passes.
    #[tokio::test]
    async fn rows_left_queued_are_indexed_at_the_next_start() {
        use crate::store::Store;
        use crate::store::db::Db;
        use crate::store::memories::insert;

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.db");
        let ws = WorkspaceKey::new("discord", "a").unwrap();
        let db = Db::open_blocking(&path, NO_IDLE).unwrap();
        for content in ["kayak one", "kayak two 猫", "kayak three"] {
            let row = memory(&ws, content);
            db.write(move |c| insert(c, &row)).await.unwrap();
        }
        db.close().await.unwrap();
        let raw = Connection::open(&path).unwrap();
        assert_eq!((count(&raw, QUEUED), count(&raw, INDEXED)), (3, 0));

        let store = Store::open(&path).await.unwrap();
        assert_eq!((count(&raw, QUEUED), count(&raw, INDEXED)), (0, 3));
        for t in ["memories_fts", "memories_grams"] {
            raw.execute_batch(&format!("INSERT INTO {t}({t}) VALUES ('integrity-check')"))
                .unwrap();
        }
        let hits = store
            .search_memories(&ws, "猫", Scope::PublicOnly, 10)
            .await
            .unwrap();
        assert_eq!(hits.len(), 1);
        store.close().await.unwrap();
    }

    /// A search never misses an acknowledged save: the rows it finds waiting are indexed first.
    /// A checkpoint (`flush`, before a backup) and close index the rest, so the file at rest is
    /// fully indexed.
    #[tokio::test]
    async fn a_search_indexes_its_workspace_first_and_checkpoints_and_close_index_the_rest() {
        use crate::store::Store;
        use crate::store::types::{Importance, NewMemory, Visibility};

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.db");
        let store = Store::open(&path).await.unwrap();
        let (a, b) = (
            WorkspaceKey::new("discord", "a").unwrap(),
            WorkspaceKey::new("discord", "b").unwrap(),
        );
        let save = |ws: &WorkspaceKey, content: &str| {
            store.save_memory(NewMemory {
                workspace: ws.clone(),
                content: content.into(),
                visibility: Visibility::Public,
                importance: Importance::Normal,
            })
        };
        save(&a, "kayak in a").await.unwrap();
        save(&b, "kayak in b").await.unwrap();
        let hits = store
            .search_memories(&a, "kayak", Scope::PublicOnly, 10)
            .await
            .unwrap();
        assert_eq!(hits.len(), 1);
        assert_eq!(hits[0].memory.content, "kayak in a");
        store.flush().await.unwrap();
        let raw = Connection::open(&path).unwrap();
        assert_eq!((count(&raw, QUEUED), count(&raw, INDEXED)), (0, 2));
        save(&b, "another kayak in b").await.unwrap();
        store.close().await.unwrap();
        assert_eq!((count(&raw, QUEUED), count(&raw, INDEXED)), (0, 3));
    }

    /// The idle step indexes the queue in one transaction: when its last statement fails, the
    /// index entries it wrote are gone too, and the rows stay queued (indexed once, later).
    #[tokio::test]
    async fn idle_indexing_commits_whole_or_not_at_all() {
        use crate::store::db::Db;
        use crate::store::memories::insert;

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.db");
        let db = Db::open_blocking(&path, NO_IDLE).unwrap();
        let row = memory(&WorkspaceKey::new("discord", "a").unwrap(), "a kayak trip");
        db.write(move |c| insert(c, &row)).await.unwrap();
        db.close().await.unwrap();

        let conn = Connection::open(&path).unwrap();
        conn.execute_batch(
            "CREATE TEMP TRIGGER fail_dequeue BEFORE DELETE ON main.index_queue
             BEGIN SELECT RAISE(ABORT, 'injected'); END;",
        )
        .unwrap();
        assert!(idle_step(&conn).is_err());
        assert_eq!((count(&conn, QUEUED), count(&conn, INDEXED)), (1, 0));
        conn.execute_batch("DROP TRIGGER fail_dequeue").unwrap();
        assert!(idle_step(&conn).unwrap());
        assert_eq!((count(&conn, QUEUED), count(&conn, INDEXED)), (0, 1));
        conn.execute_batch("INSERT INTO memories_fts(memories_fts) VALUES ('integrity-check')")
            .unwrap();
    }

    #[test]
    fn grams_cover_cjk_pairs_and_short_latin_words() {
        assert_eq!(short_grams("我喜欢"), "我 我喜 喜 喜欢 欢");
        assert_eq!(short_grams("I go to Tokyo"), "i go to");
        assert_eq!(short_grams("猫が好き。AI"), "猫 猫が が が好 好 好き き ai");
        assert_eq!(short_grams("hello world"), "");
    }
}
