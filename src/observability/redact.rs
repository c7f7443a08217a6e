//! Scrubbing secrets out of log output before it is written.
//!
//! Secrets are kept out of log fields by construction (`Secret`'s `Debug` prints `***`), but a
//! token can still arrive inside a foreign error message, a URL, a line the agent wrote to its
//! stderr or a command the permission gate logs. The log writer therefore passes every formatted
//! line through a [`Redactor`] that replaces with `***`:
//!
//! * the configured secret values (fixed at start-up), also in their JSON-escaped form;
//! * every **live** secret in its [`LiveSecrets`] set — the Skill API's session registry adds a
//!   session's caller token when it registers the session and removes it when the session ends or
//!   expires (the set is shared explicitly: the composition root hands
//!   [`Redactor::live_secrets`] to the registry);
//! * the value after `--token` (`--token x`, `--token=x`) and after `Bearer `.
//!
//! Each secret set is searched in one pass over the line (an Aho-Corasick automaton), so a
//! line's cost does not grow with the number of live sessions; every occurrence is found,
//! overlapping ones included, and the union of their bytes becomes `***`. A line with nothing
//! to mask is written without a copy (`benches/redact.rs`).

use crate::sync::RecoverRw;
use std::borrow::Cow;
use std::collections::HashSet;
use std::fmt;
use std::io::{self, Write};
use std::ops::Range;
use std::sync::{Arc, RwLock};

use aho_corasick::AhoCorasick;

use tracing_subscriber::fmt::MakeWriter;

use crate::config::MASK;

/// Secrets shorter than this are not scrubbed (they would mangle ordinary words).
const MIN_SECRET_LEN: usize = 6;

/// Finds every occurrence of a set of secrets, overlapping ones included, in one pass over the
/// text (an Aho-Corasick automaton), so the cost of a line does not grow with the number of
/// secrets. Hand-built search is only the fallback for a set too large for an automaton.
#[derive(Debug, Default)]
enum SecretMatcher {
    /// No secrets.
    #[default]
    Empty,
    /// The usual case.
    Automaton(AhoCorasick),
    /// The automaton could not be built (a size limit): one search per secret.
    PerSecret(Vec<String>),
}

impl SecretMatcher {
    fn new<'a>(secrets: impl IntoIterator<Item = &'a str>) -> Self {
        let secrets: Vec<&str> = secrets.into_iter().collect();
        if secrets.is_empty() {
            return Self::Empty;
        }
        // Standard match semantics: the overlapping search reports every occurrence.
        match AhoCorasick::new(&secrets) {
            Ok(automaton) => Self::Automaton(automaton),
            Err(_) => Self::PerSecret(secrets.into_iter().map(str::to_owned).collect()),
        }
    }

    /// Appends the byte range of every occurrence in `text`. Secrets are UTF-8, so every range
    /// starts and ends on a character boundary.
    fn spans_into(&self, text: &str, spans: &mut Vec<Range<usize>>) {
        match self {
            Self::Empty => {}
            Self::Automaton(automaton) => spans.extend(
                automaton
                    .find_overlapping_iter(text)
                    .map(|found| found.start()..found.end()),
            ),
            Self::PerSecret(secrets) => {
                for secret in secrets {
                    let mut from = 0;
                    while let Some(found) = text.get(from..).and_then(|rest| rest.find(secret)) {
                        let at = from + found;
                        spans.push(at..at + secret.len());
                        from = at + text[at..].chars().next().map_or(1, char::len_utf8);
                    }
                }
            }
        }
    }
}

/// Secrets that exist only for a while (the caller tokens of live Skill API sessions), shared
/// between the [`Redactor`] and whoever mints them. Cloning shares the set.
#[derive(Clone, Default)]
pub struct LiveSecrets {
    set: Arc<RwLock<LiveSet>>,
}

#[derive(Default)]
struct LiveSet {
    secrets: HashSet<String>,
    /// The matcher of `secrets`; `None` once they changed, until the next line needs it.
    matcher: Option<Arc<SecretMatcher>>,
}

impl fmt::Debug for LiveSecrets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LiveSecrets")
            .field("count", &self.len())
            .finish()
    }
}

impl LiveSecrets {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Starts scrubbing `secret` (values shorter than 6 characters are ignored).
    pub fn insert(&self, secret: &str) {
        if secret.len() >= MIN_SECRET_LEN {
            let mut set = self.write();
            if set.secrets.insert(secret.to_owned()) {
                set.matcher = None;
            }
        }
    }

    /// Stops scrubbing `secret` (it no longer grants anything).
    pub fn remove(&self, secret: &str) {
        let mut set = self.write();
        if set.secrets.remove(secret) {
            set.matcher = None;
        }
    }

    /// How many secrets are live.
    pub fn len(&self) -> usize {
        self.set.read_locked().secrets.len()
    }

    /// Whether no secret is live.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, LiveSet> {
        self.set.write_locked()
    }

    /// The matcher of the secrets live now: built by the first line after a change (one pass
    /// over the secrets; sessions start and end far less often than lines are logged), shared
    /// by every line until the next change.
    fn matcher(&self) -> Arc<SecretMatcher> {
        if let Some(matcher) = &self.set.read_locked().matcher {
            return Arc::clone(matcher);
        }
        let mut set = self.write();
        let set = &mut *set;
        Arc::clone(set.matcher.get_or_insert_with(|| {
            Arc::new(SecretMatcher::new(set.secrets.iter().map(String::as_str)))
        }))
    }
}

/// Replaces known secret values, live secrets, `--token` values and bearer tokens in text.
#[derive(Debug, Clone, Default)]
pub struct Redactor {
    /// The configured secrets and their JSON-escaped spellings.
    configured: Arc<SecretMatcher>,
    live: LiveSecrets,
}

impl Redactor {
    /// A redactor for these secret values (empty and very short values are ignored), with an
    /// empty set of live secrets.
    pub fn new(secrets: impl IntoIterator<Item = String>) -> Self {
        let mut list: Vec<String> = Vec::new();
        for secret in secrets {
            if secret.len() < MIN_SECRET_LEN {
                continue;
            }
            // A JSON log line carries `"` and `\` escaped; scrub that spelling too.
            let quoted = serde_json::to_string(&secret).unwrap_or_default();
            let escaped = quoted
                .strip_prefix('"')
                .and_then(|q| q.strip_suffix('"'))
                .unwrap_or(&secret);
            if escaped != secret {
                list.push(escaped.to_owned());
            }
            list.push(secret);
        }
        list.sort();
        list.dedup();
        Self {
            configured: Arc::new(SecretMatcher::new(list.iter().map(String::as_str))),
            live: LiveSecrets::new(),
        }
    }

    /// The set of live secrets this redactor scrubs; give it to the component that mints them
    /// (the Skill API's session registry).
    pub fn live_secrets(&self) -> LiveSecrets {
        self.live.clone()
    }

    /// The text with every secret value and bearer token replaced by `***`.
    ///
    /// ```
    /// use air_friends::observability::Redactor;
    /// let r = Redactor::new(["discord-token-123".to_owned()]);
    /// r.live_secrets().insert("live-session-token");
    /// assert_eq!(
    ///     r.redact("login with discord-token-123, header Bearer abc.def, live-session-token"),
    ///     "login with ***, header Bearer ***, ***"
    /// );
    /// assert_eq!(r.redact("run --token s3cr3t --x"), "run --token *** --x");
    /// ```
    pub fn redact(&self, text: &str) -> String {
        self.redact_cow(text).into_owned()
    }

    /// [`redact`](Self::redact), borrowing `text` back when there is nothing to replace (the
    /// usual log line: no copy).
    ///
    /// Every byte of every occurrence of a secret is covered: occurrences that overlap (one
    /// secret containing or running into another) are masked as one `***`.
    fn redact_cow<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let mut spans = Vec::new();
        self.configured.spans_into(text, &mut spans);
        self.live.matcher().spans_into(text, &mut spans);
        let mut out = mask_spans(text, spans);
        for marker in [&TOKEN_FLAG, &BEARER] {
            if let Some(masked) = mask_values_after(&out, marker) {
                out = Cow::Owned(masked);
            }
        }
        out
    }
}

/// `text` with each of `spans` (merged where they overlap) replaced by `***`.
fn mask_spans(text: &str, mut spans: Vec<Range<usize>>) -> Cow<'_, str> {
    if spans.is_empty() {
        return Cow::Borrowed(text);
    }
    spans.sort_unstable_by_key(|span| span.start);
    let mut out = String::with_capacity(text.len());
    let mut pos = 0;
    let mut spans = spans.into_iter().peekable();
    while let Some(span) = spans.next() {
        let mut end = span.end;
        while let Some(next) = spans.next_if(|next| next.start < end) {
            end = end.max(next.end);
        }
        out.push_str(&text[pos..span.start]);
        out.push_str(MASK);
        pos = end;
    }
    out.push_str(&text[pos..]);
    Cow::Owned(out)
}

/// A marker in text whose following value is a secret.
struct Marker {
    /// Lowercase marker text, matched case-insensitively.
    word: &'static str,
    /// Whether `=` or whitespace must come between the marker and the value (so `--token-file`
    /// is not a `--token`).
    separated: bool,
    /// Characters the value is made of.
    value_char: fn(char) -> bool,
}

/// `Authorization: Bearer <token>`.
const BEARER: Marker = Marker {
    word: "bearer ",
    separated: false,
    value_char: |c| c.is_ascii_alphanumeric() || "-._~+/=".contains(c),
};

/// `--token <x>` / `--token=<x>` on a logged command line.
const TOKEN_FLAG: Marker = Marker {
    word: "--token",
    separated: true,
    value_char: |c| !c.is_whitespace() && !matches!(c, '"' | '\'' | '\\'),
};

/// Where `word` (lowercase ASCII) next occurs in `text` at or after byte `from`, in any letter
/// case.
fn find_ignore_ascii_case(text: &str, from: usize, word: &str) -> Option<usize> {
    let hay = text.as_bytes();
    let word = word.as_bytes();
    let first = *word.first()?;
    let rest = hay.get(from..)?;
    memchr::memchr2_iter(first, first.to_ascii_uppercase(), rest)
        .map(|at| from + at)
        .find(|&at| {
            hay.get(at..at + word.len())
                .is_some_and(|candidate| candidate.eq_ignore_ascii_case(word))
        })
}

/// Replaces the value after every occurrence of `marker` with `***`; `None` when `marker` does
/// not occur. An opening quote (plain or JSON-escaped) before the value is kept.
fn mask_values_after(text: &str, marker: &Marker) -> Option<String> {
    let mut next = Some(find_ignore_ascii_case(text, 0, marker.word)?);
    let mut out = String::with_capacity(text.len());
    let mut pos = 0;
    while let Some(found) = next {
        // The marker is ASCII, so the byte after it is a character boundary.
        let after = found + marker.word.len();
        pos = match value_start(text, after, marker) {
            Some(start) => {
                out.push_str(&text[pos..start]);
                let value_len = text[start..]
                    .find(|c: char| !(marker.value_char)(c))
                    .unwrap_or(text.len() - start);
                if value_len > 0 {
                    out.push_str(MASK);
                }
                start + value_len
            }
            None => {
                out.push_str(&text[pos..after]);
                after
            }
        };
        next = find_ignore_ascii_case(text, pos, marker.word);
    }
    out.push_str(&text[pos..]);
    Some(out)
}

/// Where the value after a marker ending at byte `after` starts: past the separator a
/// separated marker needs (`None` when there is none: `--token-file` is not a `--token`) and
/// past an opening quote, plain or JSON-escaped.
fn value_start(text: &str, after: usize, marker: &Marker) -> Option<usize> {
    let mut start = after;
    if marker.separated {
        let rest = &text[start..];
        let gap = if rest.starts_with('=') {
            1
        } else {
            rest.len() - rest.trim_start_matches([' ', '\t']).len()
        };
        if gap == 0 {
            return None;
        }
        start += gap;
    }
    let rest = &text[start..];
    Some(
        start
            + ["\\\"", "\"", "'"]
                .iter()
                .find(|q| rest.starts_with(*q))
                .map_or(0, |q| q.len()),
    )
}

/// A `MakeWriter` for tracing-subscriber that redacts each event before writing it.
#[derive(Clone)]
pub struct RedactingMakeWriter<W> {
    redactor: Redactor,
    make_inner: W,
}

impl<W> RedactingMakeWriter<W> {
    /// Wraps `make_inner` (e.g. `std::io::stdout`).
    pub fn new(redactor: Redactor, make_inner: W) -> Self {
        Self {
            redactor,
            make_inner,
        }
    }
}

impl<'a, W> MakeWriter<'a> for RedactingMakeWriter<W>
where
    W: MakeWriter<'a>,
{
    type Writer = RedactingWriter<W::Writer>;

    fn make_writer(&'a self) -> Self::Writer {
        RedactingWriter {
            redactor: self.redactor.clone(),
            buf: Vec::new(),
            inner: self.make_inner.make_writer(),
        }
    }
}

/// Buffers one event and writes it redacted when dropped or flushed.
pub struct RedactingWriter<W: Write> {
    redactor: Redactor,
    buf: Vec<u8>,
    inner: W,
}

impl<W: Write> RedactingWriter<W> {
    fn write_out(&mut self) -> io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let text = String::from_utf8_lossy(&self.buf);
        let result = self
            .inner
            .write_all(self.redactor.redact_cow(&text).as_bytes());
        self.buf.clear();
        result?;
        self.inner.flush()
    }
}

impl<W: Write> Write for RedactingWriter<W> {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        self.buf.extend_from_slice(data);
        Ok(data.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.write_out()
    }
}

impl<W: Write> Drop for RedactingWriter<W> {
    fn drop(&mut self) {
        // Nowhere to report a failed log write; losing the line is the only option.
        let _ = self.write_out();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_secret_values_longest_first() {
        let r = Redactor::new(["abcdef".to_owned(), "abcdefghij".to_owned()]);
        assert_eq!(r.redact("x abcdefghij y abcdef"), "x *** y ***");
    }

    #[test]
    fn short_secrets_are_ignored() {
        let r = Redactor::new(["ab".to_owned()]);
        assert_eq!(r.redact("about"), "about");
    }

    #[test]
    fn bearer_tokens_are_masked_case_insensitively() {
        let r = Redactor::default();
        assert_eq!(
            r.redact(r#"{"authorization":"Bearer abc.DEF-123_x=","n":1} bearer zz"#),
            r#"{"authorization":"Bearer ***","n":1} bearer ***"#
        );
        assert_eq!(r.redact("no token here"), "no token here");
    }

    #[test]
    fn live_secrets_are_masked_only_while_live() {
        let r = Redactor::new(Vec::new());
        let live = r.live_secrets();
        let token = "0f1e2d3c4b5a69788796a5b4c3d2e1f0";
        assert_eq!(r.redact(&format!("x{token}y")), format!("x{token}y"));
        live.insert(token);
        assert_eq!(r.redact(&format!("x{token}y {token}")), "x***y ***");
        assert_eq!(live.len(), 1);
        live.remove(token);
        assert!(live.is_empty());
        assert_eq!(
            r.redact(token),
            token,
            "an ended session's token is not tracked"
        );
    }

    #[test]
    fn thousands_of_live_secrets_are_all_masked_and_changes_are_followed() {
        let r = Redactor::default();
        let live = r.live_secrets();
        let tokens: Vec<String> = (0..3_000u32).map(|i| format!("{i:064x}")).collect();
        for token in &tokens {
            live.insert(token);
        }
        let line = format!("a {} b {} c", tokens[0], tokens[2_999]);
        assert_eq!(r.redact(&line), "a *** b *** c");
        live.remove(&tokens[0]);
        assert_eq!(r.redact(&line), format!("a {} b *** c", tokens[0]));
        live.insert("fresh-secret");
        assert_eq!(r.redact("x fresh-secret y"), "x *** y");
    }

    #[test]
    fn overlapping_and_adjacent_secrets_leave_no_fragment() {
        let r = Redactor::new(["abcdefgh".to_owned(), "efghijkl".to_owned()]);
        r.live_secrets().insert("klmnopqr");
        assert_eq!(r.redact("1abcdefghijklmnopqr2"), "1***2", "one span");
        assert_eq!(r.redact("abcdefghklmnopqr"), "******", "two adjacent spans");
        // The same secret overlapping itself.
        let r = Redactor::new(["aaaaaa".to_owned()]);
        assert_eq!(r.redact("xaaaaaaax"), "x***x");
    }

    #[test]
    fn the_fallback_search_finds_what_the_automaton_finds() {
        let secrets = ["aaaaaa", "abcdefgh", "efghijkl", "ünïcødé"];
        let automaton = SecretMatcher::new(secrets);
        assert!(matches!(automaton, SecretMatcher::Automaton(_)));
        let per_secret = SecretMatcher::PerSecret(secrets.map(str::to_owned).to_vec());
        for text in [
            "xaaaaaaax",
            "1abcdefghijkl2",
            "-ünïcødé-ünïcødé",
            "nothing here",
        ] {
            let (mut a, mut b) = (Vec::new(), Vec::new());
            automaton.spans_into(text, &mut a);
            per_secret.spans_into(text, &mut b);
            a.sort_by_key(|s| (s.start, s.end));
            b.sort_by_key(|s| (s.start, s.end));
            assert_eq!(a, b, "{text}");
        }
    }

    #[test]
    fn a_line_without_secrets_is_written_as_it_is() {
        let r = Redactor::new(["discord-token-123".to_owned()]);
        r.live_secrets().insert("live-session-token");
        let line = r#"{"level":"INFO","fields":{"message":"skill_call","skill":"fetch-context"}}"#;
        assert!(matches!(r.redact_cow(line), Cow::Borrowed(_)));
        assert!(matches!(r.redact_cow("a --token-file f"), Cow::Owned(_)));
        assert_eq!(r.redact("a --token-file f"), "a --token-file f");
    }

    #[test]
    fn token_flag_values_are_masked_in_both_spellings() {
        let r = Redactor::default();
        for (input, expected) in [
            ("skill x --token abc123 --y 1", "skill x --token *** --y 1"),
            ("skill x --token=abc123", "skill x --token=***"),
            ("--TOKEN   'abc123' rest", "--TOKEN   '***' rest"),
            (
                r#"{"command":"run --token \"abc123\""}"#,
                r#"{"command":"run --token \"***\""}"#,
            ),
            (
                "--token-file /tmp/t --tokens",
                "--token-file /tmp/t --tokens",
            ),
            ("--token", "--token"),
        ] {
            assert_eq!(r.redact(input), expected, "{input}");
        }
    }

    #[test]
    fn json_escaped_spellings_of_secrets_are_masked() {
        let r = Redactor::new([r#"pa"ss\word"#.to_owned()]);
        assert_eq!(r.redact(r#"{"e":"pa\"ss\\word"}"#), r#"{"e":"***"}"#);
        assert_eq!(r.redact(r#"pa"ss\word"#), "***");
    }

    #[test]
    fn writer_redacts_what_it_buffers() {
        let out = std::sync::Arc::new(std::sync::Mutex::new(Vec::<u8>::new()));
        struct Sink(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);
        impl Write for Sink {
            fn write(&mut self, d: &[u8]) -> io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(d);
                Ok(d.len())
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        {
            let mut w = RedactingWriter {
                redactor: Redactor::new(["s3cr3t-token".to_owned()]),
                buf: Vec::new(),
                inner: Sink(out.clone()),
            };
            w.write_all(b"token=s3cr3t-").unwrap();
            w.write_all(b"token end\n").unwrap();
        }
        assert_eq!(out.lock().unwrap().as_slice(), b"token=*** end\n");
    }
}
