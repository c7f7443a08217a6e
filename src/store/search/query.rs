//! Turning user text into FTS5 expressions: keywords split, lowercased and de-duplicated, each
//! routed to the index that can answer it, and always quoted.

use crate::text::writes_without_spaces;

/// Most keywords used from one query (the rest are ignored).
const MAX_KEYWORDS: usize = 32;
/// Longest keyword used, in characters (longer ones are cut).
const MAX_KEYWORD_CHARS: usize = 128;

/// Quotes `text` as one FTS5 string: the only special character inside quotes is `"` itself.
pub(super) fn quote(text: &str) -> String {
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
    pub(super) fn table(self) -> &'static str {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn exprs(q: &[Keyword], index: Index) -> String {
        q.iter()
            .filter(|k| k.index == index)
            .map(|k| k.expr.as_str())
            .collect::<Vec<_>>()
            .join(" OR ")
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
