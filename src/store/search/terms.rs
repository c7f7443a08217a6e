//! Term statistics for ranking: how often a keyword occurs in a memory and how long the memory
//! is, in the units of the keyword's index (trigrams, or grams tokens).
//!
//! A search counts them for every match it ranks (about a thousand memories at 100 000), so the
//! counter keeps its buffer between memories and searches an ASCII memory's bytes without
//! allocating; any other text is case-folded with `str::to_lowercase`, as it always was.

use memchr::memmem::Finder;

use super::index::short_grams;
use super::query::{Index, Keyword};

/// Counts keywords in memories, reusing one lowercasing buffer and the last keyword's searcher.
pub(super) struct TermCounter {
    lower: Vec<u8>,
    needle: String,
    finder: Finder<'static>,
}

impl Default for TermCounter {
    fn default() -> Self {
        Self {
            lower: Vec::new(),
            needle: String::new(),
            finder: Finder::new(b"").into_owned(),
        }
    }
}

impl TermCounter {
    /// The term frequency of `keyword` in `content` (at least 1: the index matched it) and the
    /// length of `content`.
    ///
    /// * Trigram keywords: overlapping occurrences of the lowercased keyword in the lowercased
    ///   memory (as FTS5 counts phrase instances), and the memory's trigram count.
    /// * Grams keywords: occurrences of its tokens among the memory's grams tokens, and their
    ///   number.
    pub(super) fn stats(&mut self, keyword: &Keyword, content: &str) -> (f64, f64) {
        match keyword.index {
            Index::Trigram => {
                let (count, chars) = self.occurrences(&keyword.terms[0], content);
                (count.max(1) as f64, chars.saturating_sub(2).max(1) as f64)
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

    /// Overlapping occurrences of `needle` (already lowercase) in lowercased `content`, and the
    /// number of characters of lowercased `content`.
    fn occurrences(&mut self, needle: &str, content: &str) -> (usize, usize) {
        if self.needle != needle {
            self.needle = needle.to_owned();
            self.finder = Finder::new(needle.as_bytes()).into_owned();
        }
        let owned;
        let (hay, chars): (&[u8], usize) = if content.is_ascii() {
            self.lower.clear();
            self.lower
                .extend(content.bytes().map(|b| b.to_ascii_lowercase()));
            (&self.lower, content.len())
        } else {
            owned = content.to_lowercase();
            (owned.as_bytes(), owned.chars().count())
        };
        let mut count = 0;
        let mut from = 0;
        while let Some(at) = self.finder.find(&hay[from..]) {
            count += 1;
            // Step over the first character of the match (a valid UTF-8 needle only matches at
            // character boundaries).
            from += at + utf8_len(hay[from + at]);
        }
        (count, chars)
    }
}

/// Length of the UTF-8 sequence that starts with `first`.
fn utf8_len(first: u8) -> usize {
    match first {
        0xF0.. => 4,
        0xE0.. => 3,
        0xC0.. => 2,
        _ => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::search::query::build_query;

    /// The reference: what ranking counted before the counter existed.
    fn reference(keyword: &str, content: &str) -> (f64, f64) {
        let lower = content.to_lowercase();
        let mut count = 0usize;
        let mut from = 0;
        while let Some(at) = lower[from..].find(keyword) {
            count += 1;
            from += at + lower[from + at..].chars().next().map_or(1, char::len_utf8);
        }
        let len = lower.chars().count().saturating_sub(2).max(1);
        (count.max(1) as f64, len as f64)
    }

    #[test]
    fn trigram_counts_match_lowercasing_the_whole_text() {
        let mut counter = TermCounter::default();
        let cases = [
            ("aaa", "AAAAA aaa"),
            ("topic3", "likes Topic3 and TOPIC30, topic3"),
            ("ing", "Kayaking, hiking"),
            ("猫が好", "私は猫が好きです。猫が好き"),
            ("straße", "STRASSE straße Straße"),
            ("ǅ", "ǄǅǆǄ"),
            ("ab", "İabİAB"),
            ("zzz", "nothing here"),
            ("a", ""),
        ];
        for (needle, content) in cases {
            let kw = build_query(needle).remove(0);
            let expected = match kw.index {
                Index::Trigram => reference(&kw.terms[0], content),
                Index::Grams => continue,
            };
            assert_eq!(
                counter.stats(&kw, content),
                expected,
                "{needle} in {content}"
            );
            // The buffer and searcher are reused: a second count is the same.
            assert_eq!(counter.stats(&kw, content), expected, "{needle} again");
        }
    }

    #[test]
    fn grams_count_tokens() {
        let mut counter = TermCounter::default();
        let kw = build_query("猫").remove(0);
        assert_eq!(counter.stats(&kw, "猫が猫"), (2.0, 5.0));
    }
}
