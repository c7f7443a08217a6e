//! Looking up a common keyword by one of its trigrams.
//!
//! The trigram index answers a keyword as the phrase of its trigrams: `topic3` is
//! `top opi pic ic3`, and FTS5 steps through every one of those doclists over the memories it
//! reads. When some of them are in nearly every memory (`top`, `opi`, `pic` here), that walk
//! costs far more than the matches: a word found in 2 % of the memories makes FTS5 step through
//! three full doclists over the 25 000 memories it takes to find 500 matches.
//!
//! So once the first stretch has shown how common the keyword is, the store may look up only
//! its *pivot*, the rarest of its trigrams in the newest memories, and check the whole keyword
//! in each memory that has it. The check must say exactly what FTS5 would: it folds case the
//! way the trigram tokenizer does (ASCII letters, and the two other characters that fold to
//! ASCII, `ſ` → `s` and the Kelvin sign → `k`; a test compares this with the bundled SQLite for
//! every character) and, like the tokenizer, skips NUL characters. Only
//! keywords written in ASCII (after lowercasing) are looked up this way; any other keyword is
//! always the phrase.

use memchr::memmem::Finder;
use rusqlite::Connection;

use super::query::{Index, Keyword, quote};
use crate::store::StoreError;

/// Newest memories of the workspace whose trigram counts choose the pivot.
const PROBE_MEMORIES: i64 = 256;
/// Most trigrams of one keyword counted (spread over the keyword).
const MAX_PROBES: usize = 6;
/// What checking one memory the pivot found costs (reading its row, checking and counting the
/// keyword), in steps of one FTS5 doclist entry: about 20 (≈ 0.4 µs against ≈ 20 ns, measured
/// on the bench's 100 000 memories).
const CHECK_COST: f64 = 20.0;

/// Matches the first stretch must have found for the pivot to be considered.
const MIN_FOUND: usize = 2;
/// Doclist entries per memory read below which the phrase is kept (see [`choose`]).
const MIN_PHRASE_STEPS: f64 = 1.0;

/// How the rest of a keyword's matches are looked up.
pub(super) enum Lookup {
    /// The keyword's own FTS5 expression.
    Phrase,
    /// One trigram; every memory it finds is checked with [`Pivot::contains`].
    Pivot(Box<Pivot>),
}

/// A pivot trigram and the check for the whole keyword.
pub(super) struct Pivot {
    /// The FTS5 expression of the trigram (quoted).
    pub expr: String,
    finder: Finder<'static>,
    folded: Vec<u8>,
}

impl Pivot {
    /// Whether `content`, folded as the trigram tokenizer folds it, contains the keyword.
    pub fn contains(&mut self, content: &str) -> bool {
        self.folded.clear();
        for c in content.chars() {
            self.folded.push(match c {
                // The tokenizer skips NUL characters (the bundled SQLite; 3.40 stopped at them).
                '\0' => continue,
                c if c.is_ascii() => c.to_ascii_lowercase() as u8,
                '\u{17F}' => b's',
                '\u{212A}' => b'k',
                // Anything else folds to a non-ASCII character, which an ASCII keyword never
                // holds: one byte stands for it.
                _ => 0x80,
            });
        }
        self.finder.find(&self.folded).is_some()
    }
}

/// What chooses the lookup: [`choose`], or a test's stand-in.
pub(super) type Chooser =
    fn(&Connection, &Keyword, (i64, i64), (usize, i64)) -> Result<Lookup, StoreError>;

/// Chooses how to find the rest of `keyword`'s matches, given that the first stretch found
/// `found` in `read` memories, from the density of its trigrams among the newest
/// [`PROBE_MEMORIES`] of `(lo, top)`. A keyword found fewer than [`MIN_FOUND`] times is rare:
/// FTS5 skips through its doclists well, and the probe would only add its cost.
///
/// In steps of one doclist entry per memory read, the phrase costs the sum of its trigrams'
/// densities plus [`CHECK_COST`] per match; the pivot costs its density times one step plus one
/// check. The pivot is taken when it is cheaper and the phrase's trigrams hold at least
/// [`MIN_PHRASE_STEPS`] entries per memory between them (a rare keyword keeps its phrase).
pub(super) fn choose(
    conn: &Connection,
    keyword: &Keyword,
    (lo, top): (i64, i64),
    (found, read): (usize, i64),
) -> Result<Lookup, StoreError> {
    let needle = &keyword.terms[0];
    if keyword.index != Index::Trigram
        || !needle.is_ascii()
        || needle.len() < 4
        || found < MIN_FOUND
    {
        return Ok(Lookup::Phrase);
    }
    let density = found as f64 / read.max(1) as f64;
    let mut trigrams: Vec<&str> = Vec::new();
    for start in 0..=needle.len() - 3 {
        let trigram = &needle[start..start + 3];
        if !trigrams.contains(&trigram) {
            trigrams.push(trigram);
        }
    }
    let probed = spread(&trigrams, MAX_PROBES);
    let lower = top.saturating_sub(PROBE_MEMORIES - 1).max(lo);
    let span = (top - lower + 1) as f64;
    let mut stmt = conn.prepare_cached(
        "SELECT count(*) FROM memories_fts WHERE memories_fts MATCH ?1 AND rowid BETWEEN ?2 AND ?3",
    )?;
    let mut rarest: Option<(&str, f64)> = None;
    let mut sum = 0.0;
    for trigram in &probed {
        let hits: i64 =
            stmt.query_row(rusqlite::params![quote(trigram), lower, top], |r| r.get(0))?;
        let d = hits as f64 / span;
        sum += d;
        if rarest.is_none_or(|(_, best)| d < best) {
            rarest = Some((trigram, d));
        }
    }
    let Some((pivot, d_min)) = rarest else {
        return Ok(Lookup::Phrase);
    };
    // The trigrams not probed are counted at the probed ones' mean.
    let steps = sum / probed.len() as f64 * trigrams.len() as f64;
    let phrase = steps + CHECK_COST * density;
    let by_pivot = d_min * (1.0 + CHECK_COST);
    // A probe of a few hundred memories cannot tell rare trigrams apart (a trigram it did not
    // see may be in 3 % of the workspace), so only a phrase that steps through at least one
    // doclist entry per memory read is worth avoiding: its common trigrams are measured well.
    if steps < MIN_PHRASE_STEPS || by_pivot >= phrase {
        return Ok(Lookup::Phrase);
    }
    Ok(Lookup::Pivot(Box::new(Pivot {
        expr: quote(pivot),
        finder: Finder::new(needle.as_bytes()).into_owned(),
        folded: Vec::new(),
    })))
}

/// At most `n` of `items`, spread evenly, the first and the last included.
fn spread<'a>(items: &[&'a str], n: usize) -> Vec<&'a str> {
    if items.len() <= n {
        return items.to_vec();
    }
    (0..n)
        .map(|i| items[i * (items.len() - 1) / (n - 1)])
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pivot(needle: &str) -> Pivot {
        Pivot {
            expr: String::new(),
            finder: Finder::new(needle.as_bytes()).into_owned(),
            folded: Vec::new(),
        }
    }

    #[test]
    fn the_check_folds_like_the_trigram_tokenizer() {
        let mut p = pivot("stop");
        assert!(p.contains("a STOP sign"));
        assert!(p.contains("ſtop"), "long s folds to s");
        assert!(!p.contains("st\u{30A}op"));
        assert!(p.contains("sto\0p"), "NUL characters are skipped");
        assert!(p.contains("x\0stop"));
        let mut k = pivot("kkk");
        assert!(k.contains("\u{212A}Kk"), "the Kelvin sign folds to k");
        assert!(!pivot("i").contains("İ"));
    }

    /// The check's fold is the bundled SQLite's: of all characters outside ASCII, the trigram
    /// tokenizer folds exactly `ſ` and the Kelvin sign to ASCII letters (read from the index's
    /// own vocabulary: one row per block of characters, each character between two `|`).
    #[test]
    fn only_two_characters_outside_ascii_fold_into_it() {
        let db = Connection::open_in_memory().unwrap();
        db.execute_batch(
            "CREATE VIRTUAL TABLE t USING fts5(x, tokenize = 'trigram case_sensitive 0');
             CREATE VIRTUAL TABLE v USING fts5vocab(t, 'instance');",
        )
        .unwrap();
        const BLOCK: u32 = 4096;
        for start in (0x80..=0x10FFFF_u32).step_by(BLOCK as usize) {
            let mut text = String::from("|");
            for code in start..(start + BLOCK).min(0x110000) {
                // Surrogates are not characters; keep the positions regular anyway.
                text.push(char::from_u32(code).unwrap_or('\u{FFFD}'));
                text.push('|');
            }
            db.execute(
                "INSERT INTO t (rowid, x) VALUES (?1, ?2)",
                rusqlite::params![start, text],
            )
            .unwrap();
        }
        let mut stmt = db.prepare("SELECT term, doc, offset FROM v").unwrap();
        let mut rows = stmt.query([]).unwrap();
        let mut into_ascii = Vec::new();
        while let Some(row) = rows.next().unwrap() {
            let term: String = row.get(0).unwrap();
            let chars: Vec<char> = term.chars().collect();
            if let ['|', c, '|'] = chars[..]
                && c.is_ascii()
            {
                let (doc, offset): (u32, u32) = (row.get(1).unwrap(), row.get(2).unwrap());
                into_ascii.push((char::from_u32(doc + offset / 2).unwrap(), c));
            }
        }
        into_ascii.sort_unstable();
        assert_eq!(into_ascii, [('\u{17F}', 's'), ('\u{212A}', 'k')]);
    }

    /// Looking up the pivot and checking each memory finds exactly what the phrase finds, for
    /// every ASCII keyword of a set of memories full of case, folding and NUL traps.
    #[test]
    fn the_pivot_and_the_check_find_what_the_phrase_finds() {
        let db = Connection::open_in_memory().unwrap();
        db.execute_batch(
            "CREATE VIRTUAL TABLE memories_fts USING fts5(content, tokenize = 'trigram case_sensitive 0');",
        )
        .unwrap();
        let pieces = [
            "Stop",
            "stop",
            "ſtop",
            "STOP",
            "\u{212A}ayak",
            "kayak",
            "İstanbul",
            "straße",
            "s\0top",
            "top\0",
            "猫が好き",
            "to",
            "p",
            " ",
            "-",
            "ic3",
            "topic3",
            "Topic30",
            "a\u{301}",
        ];
        let mut x: u64 = 0x2545_F491_4F6C_DD1D;
        let mut memories = Vec::new();
        for rowid in 1..=400_i64 {
            let mut text = String::new();
            for _ in 0..(1 + rowid % 5) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                text.push_str(pieces[(x % pieces.len() as u64) as usize]);
            }
            db.execute(
                "INSERT INTO memories_fts (rowid, content) VALUES (?1, ?2)",
                rusqlite::params![rowid, text],
            )
            .unwrap();
            memories.push((rowid, text));
        }
        let ids = |expr: &str| -> Vec<i64> {
            let mut stmt = db
                .prepare(
                    "SELECT rowid FROM memories_fts WHERE memories_fts MATCH ?1 ORDER BY rowid",
                )
                .unwrap();
            stmt.query_map([expr], |r| r.get(0))
                .unwrap()
                .map(Result::unwrap)
                .collect()
        };
        for keyword in [
            "stop", "sto", "kayak", "ayak", "topic3", "pic3", "p st", "opto", "kkay",
        ] {
            let needle = keyword.to_owned();
            let all = ids(&quote(&needle));
            for start in 0..=needle.len() - 3 {
                let mut p = pivot(&needle);
                let text_of = |id: i64| &memories[(id - 1) as usize].1;
                let checked: Vec<i64> = ids(&quote(&needle[start..start + 3]))
                    .into_iter()
                    .filter(|id| p.contains(text_of(*id)))
                    .collect();
                let differ: Vec<&String> = all
                    .iter()
                    .filter(|id| !checked.contains(id))
                    .map(|id| text_of(*id))
                    .collect();
                assert_eq!(
                    checked,
                    all,
                    "{keyword} by {}: {differ:?}",
                    &needle[start..start + 3]
                );
            }
        }
    }

    #[test]
    fn spread_keeps_the_ends() {
        let items = ["a", "b", "c", "d", "e", "f", "g", "h"];
        assert_eq!(spread(&items, 3), ["a", "d", "h"]);
        assert_eq!(spread(&items[..2], 6), ["a", "b"]);
    }
}
