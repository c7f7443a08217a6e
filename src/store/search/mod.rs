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

mod index;
mod query;

pub(crate) use index::{index_pending, merge_step, prepare_writer, queue_for_index, short_grams};
use query::{Index, Keyword, build_query};

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
