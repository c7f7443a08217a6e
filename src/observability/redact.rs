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

use crate::sync::RecoverRw;
use std::collections::HashSet;
use std::fmt;
use std::io::{self, Write};
use std::sync::{Arc, RwLock};

use tracing_subscriber::fmt::MakeWriter;

use crate::config::MASK;

/// Secrets shorter than this are not scrubbed (they would mangle ordinary words).
const MIN_SECRET_LEN: usize = 6;

/// Secrets that exist only for a while (the caller tokens of live Skill API sessions), shared
/// between the [`Redactor`] and whoever mints them. Cloning shares the set.
#[derive(Clone, Default)]
pub struct LiveSecrets {
    set: Arc<RwLock<HashSet<String>>>,
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
            self.write().insert(secret.to_owned());
        }
    }

    /// Stops scrubbing `secret` (it no longer grants anything).
    pub fn remove(&self, secret: &str) {
        self.write().remove(secret);
    }

    /// How many secrets are live.
    pub fn len(&self) -> usize {
        self.set.read_locked().len()
    }

    /// Whether no secret is live.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, HashSet<String>> {
        self.set.write_locked()
    }

    /// Replaces every live secret in `text`; cost is one substring search per live secret
    /// (a handful: one per running agent session).
    fn redact_into(&self, text: &mut String) {
        let set = self.set.read_locked();
        for secret in set.iter() {
            if text.contains(secret.as_str()) {
                *text = text.replace(secret.as_str(), MASK);
            }
        }
    }
}

/// Replaces known secret values, live secrets, `--token` values and bearer tokens in text.
#[derive(Debug, Clone, Default)]
pub struct Redactor {
    secrets: Arc<[String]>,
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
        // Longest first, so a secret that contains another is replaced whole.
        list.sort_by_key(|s| std::cmp::Reverse(s.len()));
        list.dedup();
        Self {
            secrets: list.into(),
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
        let mut out = text.to_owned();
        for secret in self.secrets.iter() {
            if out.contains(secret.as_str()) {
                out = out.replace(secret.as_str(), MASK);
            }
        }
        self.live.redact_into(&mut out);
        let out = mask_values_after(&out, &TOKEN_FLAG);
        mask_values_after(&out, &BEARER)
    }
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

/// Replaces the value after every occurrence of `marker` with `***`. An opening quote (plain or
/// JSON-escaped) before the value is kept.
fn mask_values_after(text: &str, marker: &Marker) -> String {
    let lower = text.to_ascii_lowercase();
    if !lower.contains(marker.word) {
        return text.to_owned();
    }
    let mut out = String::with_capacity(text.len());
    let mut pos = 0;
    while let Some(found) = lower[pos..].find(marker.word) {
        let mut start = pos + found + marker.word.len();
        if marker.separated {
            let rest = &text[start..];
            let gap = if rest.starts_with('=') {
                1
            } else {
                rest.len() - rest.trim_start_matches([' ', '\t']).len()
            };
            if gap == 0 {
                out.push_str(&text[pos..start]);
                pos = start;
                continue;
            }
            start += gap;
        }
        let rest = &text[start..];
        start += ["\\\"", "\"", "'"]
            .iter()
            .find(|q| rest.starts_with(*q))
            .map_or(0, |q| q.len());
        out.push_str(&text[pos..start]);
        let value_len = text[start..]
            .find(|c: char| !(marker.value_char)(c))
            .unwrap_or(text.len() - start);
        if value_len > 0 {
            out.push_str(MASK);
        }
        pos = start + value_len;
    }
    out.push_str(&text[pos..]);
    out
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
        let clean = self.redactor.redact(&text);
        self.buf.clear();
        self.inner.write_all(clean.as_bytes())?;
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
