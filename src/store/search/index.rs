//! Writing the two full-text indexes: the writer's settings and queue, the batch's index step,
//! the idle merge, and the text of the short-keyword index ([`short_grams`]).
//!
//! What each index answers is in the parent module's docs.

use rusqlite::Connection;

use crate::store::StoreError;
use crate::text::writes_without_spaces;

/// Creates the writer's list of rows to index (a temporary table: this connection only, never
/// on disk). Called once when the writer's connection opens.
///
/// Also configures both indexes' merging: `automerge` 0, so a save never merges segments
/// (FTS5 still merges a level that reaches `crisismerge`, 16 segments, so a long burst of saves
/// stays bounded), and `usermerge` 2, so the writer's idle [`merge_step`] merges any level that
/// holds two segments or more. Merges thus happen when the writer has nothing else to do:
/// 12 % less writer CPU per save at 16 callers (`docs/PERFORMANCE.md`).
pub(crate) fn prepare_writer(conn: &Connection) -> Result<(), StoreError> {
    conn.execute_batch(
        "CREATE TEMP TABLE IF NOT EXISTS index_pending (
             seq   INTEGER PRIMARY KEY,
             grams TEXT    NOT NULL
         );",
    )?;
    // One transaction for the four settings (they persist in each index's `_config` table).
    conn.execute_batch(
        "BEGIN;
         INSERT INTO memories_fts(memories_fts, rank) VALUES('automerge', 0);
         INSERT INTO memories_fts(memories_fts, rank) VALUES('usermerge', 2);
         INSERT INTO memories_grams(memories_grams, rank) VALUES('automerge', 0);
         INSERT INTO memories_grams(memories_grams, rank) VALUES('usermerge', 2);
         COMMIT;",
    )?;
    Ok(())
}

/// The two full-text indexes.
const INDEXES: [&str; 2] = ["memories_fts", "memories_grams"];
/// Pages of merged index one idle step writes at most, per index (a few milliseconds).
const MERGE_PAGES: u32 = 256;

/// One idle step: merges segments of both full-text indexes, at most [`MERGE_PAGES`] pages of
/// each, and answers whether either did any work (so another step may have more to do).
///
/// Every batch adds a segment to each index, and saves do not merge them (see
/// [`prepare_writer`]), so a big workspace is spread over a dozen or two segments, and every
/// search walks all of them (`docs/PERFORMANCE.md`, "search and stats by workspace size": 22 → 2
/// segments made a common-word search at 100 000 memories 1.2–1.5× cheaper). The writer runs
/// this when it has nothing else to do, so the merge costs no save anything.
pub(crate) fn merge_step(conn: &Connection) -> Result<bool, StoreError> {
    let mut worked = false;
    for table in INDEXES {
        let before = conn.total_changes();
        conn.prepare_cached(&format!(
            "INSERT INTO {table}({table}, rank) VALUES('merge', {MERGE_PAGES})"
        ))?
        .execute([])?;
        // FTS5 counts two or more changes when the merge did work, fewer when it was a no-op.
        worked |= conn.total_changes() - before >= 2;
    }
    Ok(worked)
}

/// Queues a new memory row for both full-text indexes (inside the job's savepoint, so a job that
/// fails takes its row back out). [`index_pending`] indexes the batch's rows before it commits.
pub(crate) fn queue_for_index(
    conn: &Connection,
    seq: i64,
    content: &str,
) -> Result<(), StoreError> {
    conn.prepare_cached("INSERT INTO temp.index_pending (seq, grams) VALUES (?1, ?2)")?
        .execute(rusqlite::params![seq, short_grams(content)])?;
    Ok(())
}

/// Indexes every row queued in this batch, in one statement per index, and empties the queue.
/// Runs at the end of each write batch, inside its transaction (the rows and their index entries
/// commit together).
///
/// Why not a trigger per insert: FTS5 writes its pending terms to disk at every savepoint, and
/// every job of a batch runs in a savepoint of its own, so indexing inside the job wrote one tiny
/// segment per memory (and merged them again). Indexing the batch at once writes one segment per
/// batch: about half of the writer's CPU per save (`docs/PERFORMANCE.md`, "Saves").
pub(crate) fn index_pending(conn: &Connection) -> Result<(), StoreError> {
    let pending: i64 = conn
        .prepare_cached("SELECT count(*) FROM temp.index_pending")?
        .query_row([], |r| r.get(0))?;
    if pending == 0 {
        return Ok(());
    }
    conn.prepare_cached(
        "INSERT INTO memories_fts (rowid, content)
         SELECT p.seq, m.content FROM temp.index_pending p JOIN memories m ON m.seq = p.seq
         ORDER BY p.seq",
    )?
    .execute([])?;
    conn.prepare_cached(
        "INSERT INTO memories_grams (rowid, grams)
         SELECT seq, grams FROM temp.index_pending WHERE grams <> '' ORDER BY seq",
    )?
    .execute([])?;
    conn.prepare_cached("DELETE FROM temp.index_pending")?
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
        use crate::store::memories::{MemoryInsert, insert};
        use crate::store::types::{Importance, NewMemory, Visibility};
        use crate::store::{Store, new_id};

        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("t.db")).await.unwrap();
        let ws = WorkspaceKey::new("discord", "1").unwrap();
        let row = |content: &str| {
            MemoryInsert::new(
                NewMemory {
                    workspace: ws.clone(),
                    content: content.into(),
                    visibility: Visibility::Public,
                    importance: Importance::Normal,
                },
                Vec::new(),
                new_id("mem"),
            )
            .unwrap()
        };
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
            let left: i64 =
                c.query_row("SELECT count(*) FROM temp.index_pending", [], |r| r.get(0))?;
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

    #[test]
    fn grams_cover_cjk_pairs_and_short_latin_words() {
        assert_eq!(short_grams("我喜欢"), "我 我喜 喜 喜欢 欢");
        assert_eq!(short_grams("I go to Tokyo"), "i go to");
        assert_eq!(short_grams("猫が好き。AI"), "猫 猫が が が好 好 好き き ai");
        assert_eq!(short_grams("hello world"), "");
    }
}
