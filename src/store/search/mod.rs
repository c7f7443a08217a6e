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
//! older than its window, like a stopword (see `search` and `docs/performance/store.md`, "What
//! exactness is traded in search").
//!
//! **Common keywords by one trigram.** After the first stretch of a keyword's window, a common
//! ASCII keyword may be looked up by its rarest trigram instead of all of them, each memory
//! found being checked for the whole keyword exactly as FTS5 would match it (`pivot`): the
//! same matches, without stepping through trigrams that are in nearly every memory.
//!
//! **New memories wait in a queue** (`index_queue`, committed with the memory) until the writer
//! indexes [`index::INDEX_AT`] of them at once, or is idle, or a search of their workspace finds them
//! waiting ([`waiting_in`]: the store then indexes the queue before it searches), or the store
//! checkpoints or closes. One indexing writes one segment per index whatever its size, so
//! saves no longer pay for a segment each batch; a search still finds every memory whose save
//! was acknowledged before it began (`index`).

use rusqlite::Connection;

use super::StoreError;
use super::memories::{MEMORY_COLUMNS, memory_from_row, workspace_range};
use super::types::{Scope, ScoredMemory, WorkspaceKey};

mod index;
mod pivot;
mod query;
mod terms;

#[cfg(test)]
pub(crate) use index::INDEX_AT;
pub(crate) use index::{
    idle_step, index_all, index_batch, prepare_writer, queue_for_index, short_grams,
};
use pivot::Lookup;
use query::{Keyword, build_query};
use terms::TermCounter;

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

/// Whether memories of `ws` wait in the queue for the indexes ([`index_batch`]); a search must
/// have them indexed first ([`index_all`]).
pub(crate) fn waiting_in(conn: &Connection, ws: &WorkspaceKey) -> Result<bool, StoreError> {
    match workspace_range(conn, ws)? {
        Some(range) => index::waiting(conn, range),
        None => Ok(false),
    }
}

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

    // Every keyword's scored matches; a memory found by several keywords is in it once per
    // keyword (in keyword order) until `best` adds them up.
    let mut scored: Vec<Candidate> = Vec::with_capacity(window * keywords.len());
    let mut counter = TermCounter::default();
    for keyword in &keywords {
        let range = (lo, top);
        let matches = newest_matches(
            conn,
            keyword,
            range,
            (private, window),
            &mut counter,
            pivot::choose,
        )?;
        let (Some(newest), Some(oldest)) = (matches.first(), matches.last()) else {
            continue;
        };
        let found = matches.len() as f64;
        let df = if matches.len() < window {
            found
        } else {
            // Seqs of a workspace are consecutive, so the stretch is a count of memories.
            let stretch = (newest.seq - oldest.seq + 1) as f64;
            (found * docs / stretch).min(docs)
        };
        let idf = ((docs - df + 0.5) / (df + 0.5)).ln().max(1e-6);
        let avg_len = matches.iter().map(|m| m.len).sum::<f64>() / found;
        scored.extend(matches.into_iter().map(|m| {
            let norm = BM25_K1 * (1.0 - BM25_B + BM25_B * m.len / avg_len);
            Candidate {
                seq: m.seq,
                score: idf * m.tf * (BM25_K1 + 1.0) / (m.tf + norm),
                high: m.high,
                created_at: m.created_at,
            }
        }));
    }
    let ranked = best(scored, limit);
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

/// Adds up each memory's scores over the keywords (in keyword order, as they were found) and
/// returns the best `limit`, ranked: score, then high importance, then creation time, then
/// storage order, all newest first.
fn best(mut scored: Vec<Candidate>, limit: usize) -> Vec<Candidate> {
    // Stable: a memory's scores are added in keyword order, so its sum is the same whatever
    // order the other memories are in.
    scored.sort_by_key(|c| c.seq);
    let mut merged: Vec<Candidate> = Vec::with_capacity(scored.len());
    for c in scored {
        match merged.last_mut() {
            Some(last) if last.seq == c.seq => last.score += c.score,
            _ => merged.push(c),
        }
    }
    let order = |a: &Candidate, b: &Candidate| {
        b.score
            .total_cmp(&a.score)
            .then_with(|| b.high.cmp(&a.high))
            .then_with(|| b.created_at.cmp(&a.created_at))
            .then_with(|| b.seq.cmp(&a.seq))
    };
    if merged.len() > limit {
        // The order is total (seqs are unique), so selecting then sorting the best is sorting all.
        merged.select_nth_unstable_by(limit, order);
        merged.truncate(limit);
    }
    merged.sort_unstable_by(order);
    merged
}

/// One match of one keyword: what ranking needs, without loading the memory.
#[derive(Debug, Clone, Copy)]
struct Match {
    seq: i64,
    high: bool,
    created_at: i64,
    /// Occurrences of the keyword in the memory (at least 1).
    tf: f64,
    /// The memory's length, in the units of the keyword's index.
    len: f64,
}

/// The newest `window` matches of `keyword` among the memories `range` (inclusive) that are
/// enabled and visible, newest first.
///
/// FTS5 reads a rowid range quickly in ascending order but slowly in descending order (a reverse
/// seek walks the doclists of big tables from their end: 1.8 ms against 0.09 ms for one
/// workspace of 1 000 among 1 000 000 memories), so the range is read in ascending stretches from
/// the newest end: `window` memories first, then as many as the density of matches seen so far
/// says are needed, until the window is full or the workspace exhausted. The stretches after the
/// first may look up the keyword by one of its trigrams instead (`pivot`: the same matches, for
/// less FTS5 work when the keyword's other trigrams are in nearly every memory).
fn newest_matches(
    conn: &Connection,
    keyword: &Keyword,
    (lo, top): (i64, i64),
    (private, window): (bool, usize),
    counter: &mut TermCounter,
    choose: pivot::Chooser,
) -> Result<Vec<Match>, StoreError> {
    let table = keyword.index.table();
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT f.rowid, m.importance = 'high', m.created_at, m.content \
         FROM {table} f CROSS JOIN memories m ON m.seq = f.rowid \
         WHERE {table} MATCH ?1 AND f.rowid BETWEEN ?2 AND ?3 \
           AND m.enabled = 1 AND (m.visibility = 'public' OR ?4) \
         ORDER BY f.rowid"
    ))?;
    let mut matches: Vec<Match> = Vec::with_capacity(window);
    let mut chunk: Vec<Match> = Vec::new();
    let mut upper = top;
    let mut stretch = window as i64;
    // The first stretch uses the keyword's phrase; what it found chooses the rest's lookup.
    let mut lookup = Lookup::Phrase;
    while upper >= lo && matches.len() < window {
        let lower = upper.saturating_sub(stretch - 1).max(lo);
        chunk.clear();
        let expr = match &lookup {
            Lookup::Phrase => keyword.expr.as_str(),
            Lookup::Pivot(pivot) => pivot.expr.as_str(),
        };
        let mut rows = stmt.query(rusqlite::params![expr, lower, upper, private])?;
        while let Some(row) = rows.next()? {
            // Borrowed: the text is counted, not kept.
            let content = row.get_ref(3)?.as_str().map_err(|e| {
                rusqlite::Error::FromSqlConversionFailure(3, rusqlite::types::Type::Text, e.into())
            })?;
            if let Lookup::Pivot(pivot) = &mut lookup
                && !pivot.contains(content)
            {
                continue;
            }
            let (tf, len) = counter.stats(keyword, content);
            chunk.push(Match {
                seq: row.get(0)?,
                high: row.get(1)?,
                created_at: row.get(2)?,
                tf,
                len,
            });
        }
        let missing = window - matches.len();
        matches.extend(chunk.iter().rev().take(missing).copied());
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
        if upper == top && matches.len() < window && lower > lo {
            lookup = choose(conn, keyword, (lo, top), (matches.len(), read))?;
        }
        upper = lower - 1;
    }
    Ok(matches)
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
    use crate::store::Store;
    use crate::store::types::{Importance, NewMemory, Visibility};

    /// Where the store chooses to look a common keyword up by its pivot trigram, the matches
    /// (which memories, their term counts and lengths, in order) are exactly those the phrase
    /// finds; and the search really chooses the pivot for such keywords.
    #[tokio::test]
    async fn the_pivot_finds_the_same_matches_as_the_phrase() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("t.db")).await.unwrap();
        let ws = WorkspaceKey::new("discord", "1").unwrap();
        for i in 0..3_000 {
            let content = match i % 7 {
                0 => format!("likes Topic{} and ſtopic{}, fact {i}", i % 50, i % 13),
                1 => format!("TOPIC{}\0 and topic {} - 猫が好き {i}", i % 50, i % 9),
                _ => format!(
                    "likes topic{} and item{}, remembered fact {i}",
                    i % 50,
                    i % 97
                ),
            };
            store
                .save_memory(NewMemory {
                    workspace: ws.clone(),
                    content,
                    visibility: if i % 11 == 0 {
                        Visibility::Private
                    } else {
                        Visibility::Public
                    },
                    importance: Importance::Normal,
                })
                .await
                .unwrap();
        }
        let phrase_only: pivot::Chooser = |_, _, _, _| Ok(Lookup::Phrase);
        thread_local! {
            /// The keywords `recording` gave a pivot (the writer's thread runs them all).
            static PIVOTED: std::cell::RefCell<Vec<String>> = const { std::cell::RefCell::new(Vec::new()) };
        }
        // `pivot::choose`, noting each keyword it gives a pivot to.
        let recording: pivot::Chooser = |conn, keyword, range, first| {
            let lookup = pivot::choose(conn, keyword, range, first)?;
            if let Lookup::Pivot(_) = lookup {
                PIVOTED.with(|p| p.borrow_mut().push(keyword.terms[0].clone()));
            }
            Ok(lookup)
        };
        // On the writer's connection (the test has no reader of its own); nothing is written
        // but the queue's last memories into the indexes, so every memory is compared.
        store
            .db()
            .write(move |conn| {
                index_all(conn)?;
                let (lo, _) = workspace_range(conn, &ws)?.unwrap();
                let top = lo | 3_000;
                for query in [
                    "topic7",
                    "topic3",
                    "opic1",
                    "item5",
                    "topic",
                    "fact 12",
                    "and topic 4",
                ] {
                    for keyword in build_query(query) {
                        for (private, window) in [(true, 500), (false, 500), (true, 100)] {
                            let mut counter = TermCounter::default();
                            let args = (private, window);
                            let got = newest_matches(
                                conn,
                                &keyword,
                                (lo, top),
                                args,
                                &mut counter,
                                recording,
                            )?;
                            let want = newest_matches(
                                conn,
                                &keyword,
                                (lo, top),
                                args,
                                &mut counter,
                                phrase_only,
                            )?;
                            let key = |m: &Vec<Match>| {
                                m.iter().map(|m| (m.seq, m.tf, m.len)).collect::<Vec<_>>()
                            };
                            assert_eq!(key(&got), key(&want), "{query}: {keyword:?}");
                        }
                    }
                }
                // The comparison covered the pivot: the search chose it, from what its own first
                // stretches found.
                let mut pivoted = PIVOTED.with(|p| p.take());
                pivoted.dedup();
                assert!(
                    pivoted.contains(&"topic7".to_owned()) && pivoted.contains(&"item5".to_owned()),
                    "the keywords looked up by a pivot: {pivoted:?}"
                );
                Ok(())
            })
            .await
            .unwrap();
    }

    /// `best` ranks as sorting every summed candidate would: ties on score fall to importance,
    /// then creation time, then storage order.
    #[test]
    fn best_sums_per_memory_and_ranks_like_a_full_sort() {
        let mut scored = Vec::new();
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for keyword in 0..3 {
            for _ in 0..400 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let seq = (x % 700) as i64;
                scored.push(Candidate {
                    seq,
                    // Few distinct scores, so the tie-breakers decide often.
                    score: ((x >> 20) % 4) as f64 + f64::from(keyword) * 0.5,
                    high: seq % 3 == 0,
                    created_at: seq / 5,
                });
            }
        }
        // Reference: a map of sums, then a full sort.
        let mut sums: std::collections::BTreeMap<i64, Candidate> = Default::default();
        for c in &scored {
            sums.entry(c.seq)
                .and_modify(|s| s.score += c.score)
                .or_insert(*c);
        }
        let mut all: Vec<Candidate> = sums.into_values().collect();
        all.sort_by(|a, b| {
            b.score
                .total_cmp(&a.score)
                .then_with(|| b.high.cmp(&a.high))
                .then_with(|| b.created_at.cmp(&a.created_at))
                .then_with(|| b.seq.cmp(&a.seq))
        });
        for limit in [1, 10, 100, all.len(), all.len() + 5] {
            let got: Vec<(i64, f64)> = best(scored.clone(), limit)
                .iter()
                .map(|c| (c.seq, c.score))
                .collect();
            let want: Vec<(i64, f64)> = all.iter().take(limit).map(|c| (c.seq, c.score)).collect();
            assert_eq!(got, want, "limit {limit}");
        }
    }
}
