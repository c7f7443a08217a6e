//! Memory search: turning user text into safe FTS5 queries, and the CJK-aware short-keyword index.
//!
//! The query is split on whitespace into keywords, lowercased and de-duplicated; keywords are
//! OR'd. Two FTS5 indexes answer them:
//!
//! * `memories_fts` (trigram tokenizer, case-insensitive) finds any keyword of **3+ characters** as
//!   a substring, in any script: `"猫が好き"` is found inside `私は猫が好きです`.
//! * `memories_grams` (unicode61 over text the store generates, see [`short_grams`]) answers
//!   keywords of **1–2 characters**, which trigram cannot: every CJK character and every pair of
//!   adjacent CJK characters is indexed as a token (so `咖啡` finds `我喜欢喝咖啡`), and Latin words
//!   of at most 2 characters are indexed whole (so `go` finds "I go", not "good").
//!
//! Every keyword reaches FTS5 only inside a double-quoted string with `"` doubled, and the whole
//! expression is a bound parameter, so no user input can form FTS5 syntax (`AND`, `NEAR(`, `col:`,
//! `*`, parentheses) or SQL. Results are limited to one workspace, enabled memories and the
//! caller's scope, ranked by relevance (sum of the bm25 scores of both indexes), then high
//! importance, then recency.
//!
//! **Bounded ranking.** Each keyword ranks only its most recently stored eligible matches (a
//! share of [`RANK_WINDOW`], 1 000 rows per query), so a search costs O(window) instead of
//! O(matches). A keyword with fewer matches than its window (any rare keyword, any workspace under
//! ~1 000 memories) is ranked exactly; a very common keyword stops adding to the score of memories
//! older than its window, like a stopword (see `search` and `docs/PERFORMANCE.md`).

use std::collections::HashMap;

use rusqlite::Connection;

use super::StoreError;
use super::memories::{MEMORY_COLUMNS, memory_from_row, workspace_range};
use super::types::{Scope, ScoredMemory, WorkspaceKey};
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

/// Most keywords used from one query (the rest are ignored).
const MAX_KEYWORDS: usize = 32;
/// Longest keyword used, in characters (longer ones are cut).
const MAX_KEYWORD_CHARS: usize = 128;

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

/// Quotes `text` as one FTS5 string: the only special character inside quotes is `"` itself.
fn quote(text: &str) -> String {
    format!("\"{}\"", text.replace('"', "\"\""))
}

/// Which FTS5 index answers a keyword.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Index {
    /// `memories_fts` (trigram): keywords of 3+ characters, found as substrings.
    Trigram,
    /// `memories_grams`: keywords of 1–2 characters, found as grams tokens.
    Grams,
}

impl Index {
    fn table(self) -> &'static str {
        match self {
            Index::Trigram => "memories_fts",
            Index::Grams => "memories_grams",
        }
    }
}

/// One keyword of a query (the query is the OR of its keywords).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Keyword {
    /// The index that answers it.
    pub index: Index,
    /// Its FTS5 expression (quoted; a bound parameter).
    pub expr: String,
    /// What is counted for its term frequency: the lowercased keyword (trigram), or the grams
    /// tokens it needs (all of them, for a mixed short keyword like `猫a`).
    pub terms: Vec<String>,
}

/// Builds one FTS5 expression per keyword of `query` (see the module docs). Never fails: text
/// that is not a usable keyword (e.g. a lone `"` or `(`) is dropped.
pub(crate) fn build_query(query: &str) -> Vec<Keyword> {
    let mut keywords: Vec<String> = Vec::new();
    for raw in query.split_whitespace() {
        let kw: String = raw.to_lowercase().chars().take(MAX_KEYWORD_CHARS).collect();
        if !keywords.contains(&kw) {
            keywords.push(kw);
        }
        if keywords.len() == MAX_KEYWORDS {
            break;
        }
    }
    let mut out = Vec::new();
    for kw in keywords {
        if kw.chars().count() >= 3 {
            out.push(Keyword {
                index: Index::Trigram,
                expr: quote(&kw),
                terms: vec![kw],
            });
        } else {
            // Tokens the grams index would hold for this keyword: one CJK unigram/bigram, or the
            // short Latin word; punctuation is dropped. A mixed keyword needs all its parts.
            let parts = short_keyword_tokens(&kw);
            let expr = match parts.len() {
                0 => continue,
                1 => quote(&parts[0]),
                _ => format!(
                    "({})",
                    parts
                        .iter()
                        .map(|p| quote(p))
                        .collect::<Vec<_>>()
                        .join(" AND ")
                ),
            };
            if !out.iter().any(|k: &Keyword| k.expr == expr) {
                out.push(Keyword {
                    index: Index::Grams,
                    expr,
                    terms: parts,
                });
            }
        }
    }
    out
}

fn short_keyword_tokens(kw: &str) -> Vec<String> {
    let mut tokens: Vec<String> = Vec::new();
    let mut cjk = String::new();
    let mut latin = String::new();
    for c in kw.chars() {
        if writes_without_spaces(c) {
            if !latin.is_empty() {
                tokens.push(std::mem::take(&mut latin));
            }
            cjk.push(c);
        } else if c.is_alphanumeric() {
            if !cjk.is_empty() {
                tokens.push(std::mem::take(&mut cjk));
            }
            latin.push(c);
        } else {
            for t in [&mut cjk, &mut latin] {
                if !t.is_empty() {
                    tokens.push(std::mem::take(t));
                }
            }
        }
    }
    for t in [cjk, latin] {
        if !t.is_empty() {
            tokens.push(t);
        }
    }
    tokens
}

/// Matches ranked per search, shared among the query's keywords: each keyword ranks its
/// `RANK_WINDOW / keywords` (at least `limit`) most recently stored matches that the caller may see.
///
/// Ranking every match is O(matches): a keyword found in 6 000 of a workspace's 100 000 memories
/// costs tens of milliseconds of bm25 work, most of it on memories that end up far below the
/// limit. Reading a keyword's matches newest first from FTS5 (rowid order, no sorter) stops after
/// its window, so a search costs O(min(matches, window)) per keyword.
pub(crate) const RANK_WINDOW: usize = 1000;

/// bm25 term-frequency saturation (FTS5's value).
const BM25_K1: f64 = 1.2;
/// bm25 length normalisation (FTS5's value).
const BM25_B: f64 = 0.75;

/// Runs a search (see the module docs). `limit` is clamped to 1..=1000.
///
/// Every keyword is looked up on its own in its index, restricted to the workspace's rowid range
/// and joined with `memories` so that only enabled memories visible in `scope` count, newest
/// first, up to the keyword's window (no FTS5 `rank`: FTS5's bm25 scans every match of every
/// phrase in the whole table for its IDF and reads the docsize table per row).
///
/// Relevance is bm25 (k1 = 1.2, b = 0.75, as FTS5) over the workspace, summed over keywords:
/// * term frequency: occurrences of the keyword in the memory (substring, case-folded, for 3+
///   characters; grams tokens for 1–2 characters), at least 1 since FTS5 matched it;
/// * document length: trigram or grams tokens of the memory; average length: over the keyword's
///   candidates;
/// * IDF from the workspace's memory count `N` and the keyword's eligible matches `n`: counted
///   when the window holds them all, otherwise estimated from their density in the window's
///   stretch of the workspace (`window × N / stretch`).
///
/// A memory's score is the sum over the keywords whose window holds it: a very common keyword stops
/// counting for memories older than its newest window matches (a stopword there), while a rare
/// keyword always finds all of its matches. Candidates are ranked by score, then high importance,
/// then creation time, then storage order (all newest first), and the best `limit` are loaded.
pub(crate) fn search(
    conn: &Connection,
    ws: &WorkspaceKey,
    query: &str,
    scope: Scope,
    limit: u32,
) -> Result<Vec<ScoredMemory>, StoreError> {
    let keywords = build_query(query);
    if keywords.is_empty() {
        return Ok(Vec::new());
    }
    let Some((lo, _)) = workspace_range(conn, ws)? else {
        return Ok(Vec::new());
    };
    let docs: i64 = conn
        .prepare_cached("SELECT next_doc FROM workspaces WHERE key = ?1")?
        .query_row([ws.to_string()], |r| r.get(0))?;
    // The workspace's newest seq (n counts from 1).
    let top = lo | docs;
    let docs = docs.max(1) as f64;
    let limit = limit.clamp(1, 1000) as usize;
    let window = (RANK_WINDOW / keywords.len()).max(limit);
    let private = scope.includes_private();

    let mut candidates: HashMap<i64, Candidate> = HashMap::new();
    for keyword in &keywords {
        // (seq, term frequency, document length) of this keyword's matches, newest first.
        let matches = newest_matches(conn, keyword, (lo, top), private, window, &mut candidates)?;
        let (Some(newest), Some(oldest)) = (matches.first(), matches.last()) else {
            continue;
        };
        let found = matches.len() as f64;
        let df = if matches.len() < window {
            found
        } else {
            // Seqs of a workspace are consecutive, so the stretch is a count of memories.
            let stretch = (newest.0 - oldest.0 + 1) as f64;
            (found * docs / stretch).min(docs)
        };
        let idf = ((docs - df + 0.5) / (df + 0.5)).ln().max(1e-6);
        let avg_len = matches.iter().map(|m| m.2).sum::<f64>() / found;
        for (seq, tf, len) in matches {
            let norm = BM25_K1 * (1.0 - BM25_B + BM25_B * len / avg_len);
            if let Some(c) = candidates.get_mut(&seq) {
                c.score += idf * tf * (BM25_K1 + 1.0) / (tf + norm);
            }
        }
    }
    let mut ranked: Vec<Candidate> = candidates.into_values().collect();
    ranked.sort_by(|a, b| {
        b.score
            .total_cmp(&a.score)
            .then_with(|| b.high.cmp(&a.high))
            .then_with(|| b.created_at.cmp(&a.created_at))
            .then_with(|| b.seq.cmp(&a.seq))
    });
    ranked.truncate(limit);
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {MEMORY_COLUMNS} FROM memories m WHERE m.seq = ?1"
    ))?;
    let mut out = Vec::with_capacity(ranked.len());
    for c in ranked {
        let memory = stmt.query_row([c.seq], |row| Ok(memory_from_row(row)))??;
        out.push(ScoredMemory {
            memory,
            score: c.score,
        });
    }
    Ok(out)
}

/// The newest `window` matches of `keyword` among the memories `range` (inclusive) that are
/// enabled and visible, newest first, as `(seq, term frequency, length)`; adds each to
/// `candidates` (score 0).
///
/// FTS5 reads a rowid range quickly in ascending order but slowly in descending order (a reverse
/// seek walks the doclists of big tables from their end: 1.8 ms against 0.09 ms for one
/// workspace of 1 000 among 1 000 000 memories), so the range is read in ascending stretches from
/// the newest end: `window` memories first, then as many as the density of matches seen so far
/// says are needed, until the window is full or the workspace exhausted. Only the matches kept are
/// scored.
fn newest_matches(
    conn: &Connection,
    keyword: &Keyword,
    (lo, top): (i64, i64),
    private: bool,
    window: usize,
    candidates: &mut HashMap<i64, Candidate>,
) -> Result<Vec<(i64, f64, f64)>, StoreError> {
    let table = keyword.index.table();
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT f.rowid, m.importance = 'high', m.created_at, m.content \
         FROM {table} f CROSS JOIN memories m ON m.seq = f.rowid \
         WHERE {table} MATCH ?1 AND f.rowid BETWEEN ?2 AND ?3 \
           AND m.enabled = 1 AND (m.visibility = 'public' OR ?4) \
         ORDER BY f.rowid"
    ))?;
    let mut matches: Vec<(i64, f64, f64)> = Vec::new();
    let mut upper = top;
    let mut stretch = window as i64;
    while upper >= lo && matches.len() < window {
        let lower = upper.saturating_sub(stretch - 1).max(lo);
        let mut chunk: Vec<(Candidate, String)> = Vec::new();
        let mut rows = stmt.query(rusqlite::params![keyword.expr, lower, upper, private])?;
        while let Some(row) = rows.next()? {
            let candidate = Candidate {
                seq: row.get(0)?,
                score: 0.0,
                high: row.get(1)?,
                created_at: row.get(2)?,
            };
            chunk.push((candidate, row.get(3)?));
        }
        for (candidate, content) in chunk.into_iter().rev().take(window - matches.len()) {
            let (tf, len) = term_stats(keyword, &content);
            candidates.entry(candidate.seq).or_insert(candidate);
            matches.push((candidate.seq, tf, len));
        }
        // Next stretch: enough for the matches still missing at the density seen so far (plus a
        // quarter), at least as much as and at most 16 times what has been read.
        let read = top - lower + 1;
        let missing = window.saturating_sub(matches.len()) as f64;
        let guess = if matches.is_empty() {
            read * 16
        } else {
            (missing * read as f64 / matches.len() as f64 * 1.25) as i64 + 16
        };
        stretch = guess.max(read).min(16 * read);
        upper = lower - 1;
    }
    Ok(matches)
}

/// Term frequency of `keyword` in `content` and the length of `content`, in the units of the
/// keyword's index (trigrams, or grams tokens).
fn term_stats(keyword: &Keyword, content: &str) -> (f64, f64) {
    match keyword.index {
        Index::Trigram => {
            let lower = content.to_lowercase();
            let kw = &keyword.terms[0];
            // Overlapping occurrences, as FTS5 counts phrase instances.
            let mut count = 0usize;
            let mut from = 0;
            while let Some(at) = lower[from..].find(kw.as_str()) {
                count += 1;
                from += at + lower[from + at..].chars().next().map_or(1, char::len_utf8);
            }
            let len = lower.chars().count().saturating_sub(2).max(1);
            (count.max(1) as f64, len as f64)
        }
        Index::Grams => {
            let grams = short_grams(content);
            let mut count = 0usize;
            let mut len = 0usize;
            for token in grams.split(' ').filter(|t| !t.is_empty()) {
                len += 1;
                count += keyword.terms.iter().filter(|t| *t == token).count();
            }
            (count.max(1) as f64, len.max(1) as f64)
        }
    }
}

/// A match being ranked: what the ordering needs, without loading the memory.
#[derive(Debug, Clone, Copy)]
struct Candidate {
    seq: i64,
    /// Sum of the keywords' bm25 scores.
    score: f64,
    high: bool,
    created_at: i64,
}

#[cfg(test)]
mod tests {
    use super::*;

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

    fn exprs(q: &[Keyword], index: Index) -> String {
        q.iter()
            .filter(|k| k.index == index)
            .map(|k| k.expr.as_str())
            .collect::<Vec<_>>()
            .join(" OR ")
    }

    #[test]
    fn grams_cover_cjk_pairs_and_short_latin_words() {
        assert_eq!(short_grams("我喜欢"), "我 我喜 喜 喜欢 欢");
        assert_eq!(short_grams("I go to Tokyo"), "i go to");
        assert_eq!(short_grams("猫が好き。AI"), "猫 猫が が が好 好 好き き ai");
        assert_eq!(short_grams("hello world"), "");
    }

    #[test]
    fn keywords_are_split_lowercased_deduplicated_and_routed_by_length() {
        let q = build_query("  Coffee  coffee 咖啡 喝咖啡 go ");
        assert_eq!(exprs(&q, Index::Trigram), r#""coffee" OR "喝咖啡""#);
        assert_eq!(exprs(&q, Index::Grams), r#""咖啡" OR "go""#);
        assert_eq!(q[0].terms, ["coffee"]);
    }

    #[test]
    fn fts_syntax_is_always_quoted() {
        let q = build_query(r#"a"b" NEAR( col:x AND *"#);
        assert_eq!(
            exprs(&q, Index::Trigram),
            r#""a""b""" OR "near(" OR "col:x" OR "and""#
        );
        assert_eq!(exprs(&q, Index::Grams), "");
        // Pure punctuation keywords are dropped; a mixed short keyword needs all its parts.
        let q = build_query(r#"" ( * 猫a"#);
        assert_eq!(exprs(&q, Index::Trigram), "");
        assert_eq!(exprs(&q, Index::Grams), r#"("猫" AND "a")"#);
        assert_eq!(q[0].terms, ["猫", "a"]);
    }

    #[test]
    fn empty_query_has_nothing_to_search() {
        assert!(build_query("   ").is_empty());
    }
}
