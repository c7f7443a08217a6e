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

use rusqlite::{Connection, ToSql};

use super::StoreError;
use super::memories::{MEMORY_COLUMNS, memory_from_row, workspace_range};
use super::types::{Importance, Scope, ScoredMemory, WorkspaceKey};

/// Most keywords used from one query (the rest are ignored).
const MAX_KEYWORDS: usize = 32;
/// Longest keyword used, in characters (longer ones are cut).
const MAX_KEYWORD_CHARS: usize = 128;

/// True for characters of scripts written without spaces between words (Han, kana, hangul).
pub(crate) fn is_cjk(c: char) -> bool {
    matches!(c as u32,
        0x3040..=0x30FF      // hiragana, katakana
        | 0x31F0..=0x31FF    // katakana phonetic extensions
        | 0x3400..=0x4DBF    // CJK extension A
        | 0x4E00..=0x9FFF    // CJK unified ideographs
        | 0xAC00..=0xD7AF    // hangul syllables
        | 0x1100..=0x11FF    // hangul jamo
        | 0x3130..=0x318F    // hangul compatibility jamo
        | 0xF900..=0xFAFF    // CJK compatibility ideographs
        | 0xFF66..=0xFF9F    // half-width katakana
        | 0x20000..=0x3134F  // CJK extensions B..G
    )
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
        if is_cjk(c) {
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

/// The two FTS5 expressions for a user query; `None` when that index has nothing to look for.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct FtsQuery {
    /// For `memories_fts` (trigram): keywords of 3+ characters.
    pub trigram: Option<String>,
    /// For `memories_grams`: keywords of 1–2 characters.
    pub grams: Option<String>,
}

/// Builds the FTS5 expressions for `query` (see the module docs). Never fails: text that is not a
/// usable keyword (e.g. a lone `"` or `(`) is dropped.
pub(crate) fn build_query(query: &str) -> FtsQuery {
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
    let mut trigram = Vec::new();
    let mut grams = Vec::new();
    for kw in keywords {
        if kw.chars().count() >= 3 {
            trigram.push(quote(&kw));
        } else {
            // Tokens the grams index would hold for this keyword: one CJK unigram/bigram, or the
            // short Latin word; punctuation is dropped. A mixed keyword needs all its parts.
            let parts = short_keyword_tokens(&kw);
            match parts.len() {
                0 => {}
                1 => grams.push(quote(&parts[0])),
                _ => grams.push(format!(
                    "({})",
                    parts
                        .iter()
                        .map(|p| quote(p))
                        .collect::<Vec<_>>()
                        .join(" AND ")
                )),
            }
        }
    }
    let join = |v: Vec<String>| (!v.is_empty()).then(|| v.join(" OR "));
    FtsQuery {
        trigram: join(trigram),
        grams: join(grams),
    }
}

fn short_keyword_tokens(kw: &str) -> Vec<String> {
    let mut tokens: Vec<String> = Vec::new();
    let mut cjk = String::new();
    let mut latin = String::new();
    for c in kw.chars() {
        if is_cjk(c) {
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

/// Candidates fetched first from the FTS5 rank sorter when only one index is involved.
const FIRST_CANDIDATES: i64 = 64;

/// Runs a search (see the module docs). `limit` is clamped to 1..=1000.
///
/// Both indexes are restricted to the workspace's rowid range. When the query uses one index,
/// the best `K` candidates come from FTS5's rank sorter and are filtered (enabled, visible);
/// that answer is used when it is provably the same as ranking every match (all matches seen,
/// or the last result scores strictly better than every candidate left out); otherwise, and
/// when both indexes are involved (scores summed), every match in the workspace is ranked.
pub(crate) fn search(
    conn: &Connection,
    ws: &WorkspaceKey,
    query: &str,
    scope: Scope,
    limit: u32,
) -> Result<Vec<ScoredMemory>, StoreError> {
    let fts = build_query(query);
    let Some((lo, hi)) = workspace_range(conn, ws)? else {
        return Ok(Vec::new());
    };
    let limit = limit.clamp(1, 1000) as usize;
    let private = scope.includes_private();
    match (&fts.trigram, &fts.grams) {
        (None, None) => Ok(Vec::new()),
        (Some(q), None) => top_k(conn, "memories_fts", q, lo, hi, private, limit),
        (None, Some(q)) => top_k(conn, "memories_grams", q, lo, hi, private, limit),
        (Some(t), Some(g)) => exact(
            conn,
            &[("memories_fts", t), ("memories_grams", g)],
            lo,
            hi,
            private,
            limit,
        ),
    }
}

fn visible_memory(
    conn: &Connection,
    seq: i64,
    private: bool,
) -> Result<Option<crate::store::Memory>, StoreError> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {MEMORY_COLUMNS} FROM memories m WHERE m.seq = ?1 AND m.enabled = 1 \
         AND (m.visibility = 'public' OR ?2)"
    ))?;
    let mut rows = stmt.query(rusqlite::params![seq, private])?;
    match rows.next()? {
        Some(row) => Ok(Some(memory_from_row(row)?)),
        None => Ok(None),
    }
}

fn rank_order(a: &ScoredMemory, b: &ScoredMemory) -> std::cmp::Ordering {
    let high = |m: &ScoredMemory| m.memory.importance == Importance::High;
    b.score
        .total_cmp(&a.score)
        .then_with(|| high(b).cmp(&high(a)))
        .then_with(|| b.memory.created_at.cmp(&a.memory.created_at))
        .then_with(|| b.memory.id.cmp(&a.memory.id))
}

fn top_k(
    conn: &Connection,
    table: &str,
    fts_query: &str,
    lo: i64,
    hi: i64,
    private: bool,
    limit: usize,
) -> Result<Vec<ScoredMemory>, StoreError> {
    let sql = format!(
        "SELECT rowid, rank FROM {table} WHERE {table} MATCH ?1 AND rowid BETWEEN ?2 AND ?3 \
         ORDER BY rank LIMIT ?4"
    );
    let k = FIRST_CANDIDATES.max(limit as i64 * 4);
    let mut stmt = conn.prepare_cached(&sql)?;
    let candidates: Vec<(i64, f64)> = stmt
        .query_map(rusqlite::params![fts_query, lo, hi, k], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })?
        .collect::<Result<_, _>>()?;
    let mut hits = Vec::new();
    for (seq, rank) in &candidates {
        if let Some(memory) = visible_memory(conn, *seq, private)? {
            hits.push(ScoredMemory {
                memory,
                score: -rank,
            });
        }
    }
    hits.sort_by(rank_order);
    let complete = (candidates.len() as i64) < k;
    let settled = match (hits.get(limit - 1), candidates.last()) {
        // Everything left out scores at most -worst, strictly below our last result.
        (Some(last_hit), Some((_, worst))) => last_hit.score > -worst,
        _ => false,
    };
    if complete || settled {
        hits.truncate(limit);
        return Ok(hits);
    }
    // Too many hidden candidates, or a tie across the cut: rank every match exactly.
    exact(conn, &[(table, fts_query)], lo, hi, private, limit)
}

/// Ranks every match of every `(table, query)` branch inside the workspace range, summing the
/// scores of a memory found by several branches.
fn exact(
    conn: &Connection,
    branches: &[(&str, &str)],
    lo: i64,
    hi: i64,
    private: bool,
    limit: usize,
) -> Result<Vec<ScoredMemory>, StoreError> {
    let union = branches
        .iter()
        .enumerate()
        .map(|(i, (table, _))| {
            format!(
                "SELECT rowid, rank FROM {table} \
                 WHERE {table} MATCH ?{} AND rowid BETWEEN ?1 AND ?2",
                i + 5
            )
        })
        .collect::<Vec<_>>()
        .join(" UNION ALL ");
    let sql = format!(
        "WITH hits(seq, r) AS ({union}) \
         SELECT {MEMORY_COLUMNS}, -SUM(h.r) AS score \
         FROM hits h JOIN memories m ON m.seq = h.seq \
         WHERE m.enabled = 1 AND (m.visibility = 'public' OR ?3) \
         GROUP BY m.seq \
         ORDER BY score DESC, m.importance = 'high' DESC, m.created_at DESC, m.id DESC \
         LIMIT ?4"
    );
    let limit = limit as i64;
    let mut params: Vec<&dyn ToSql> = vec![&lo, &hi, &private, &limit];
    for (_, q) in branches {
        params.push(q);
    }
    let mut stmt = conn.prepare_cached(&sql)?;
    let rows = stmt.query_map(&params[..], |row| {
        Ok((memory_from_row(row), row.get::<_, f64>("score")?))
    })?;
    let mut out = Vec::new();
    for row in rows {
        let (memory, score) = row?;
        out.push(ScoredMemory {
            memory: memory?,
            score,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(q.trigram.as_deref(), Some(r#""coffee" OR "喝咖啡""#));
        assert_eq!(q.grams.as_deref(), Some(r#""咖啡" OR "go""#));
    }

    #[test]
    fn fts_syntax_is_always_quoted() {
        let q = build_query(r#"a"b" NEAR( col:x AND *"#);
        assert_eq!(
            q.trigram.as_deref(),
            Some(r#""a""b""" OR "near(" OR "col:x" OR "and""#)
        );
        assert_eq!(q.grams, None);
        // Pure punctuation keywords are dropped; a mixed short keyword needs all its parts.
        let q = build_query(r#"" ( * 猫a"#);
        assert_eq!(q.trigram, None);
        assert_eq!(q.grams.as_deref(), Some(r#"("猫" AND "a")"#));
    }

    #[test]
    fn empty_query_has_nothing_to_search() {
        assert_eq!(build_query("   "), FtsQuery::default());
    }
}
