//! Scrubbing secrets out of log output before it is written.
//!
//! Secrets are kept out of log fields by construction (`Secret`'s `Debug` prints `***`), but a
//! token can still arrive inside a foreign error message or a URL. The log writer therefore
//! passes every formatted line through a [`Redactor`] that replaces configured secret values
//! and anything after `Bearer ` with `***`.

use std::io::{self, Write};
use std::sync::Arc;

use tracing_subscriber::fmt::MakeWriter;

use crate::config::MASK;

/// Secrets shorter than this are not scrubbed (they would mangle ordinary words).
const MIN_SECRET_LEN: usize = 6;

/// Replaces known secret values and bearer tokens in text.
#[derive(Debug, Clone, Default)]
pub struct Redactor {
    secrets: Arc<[String]>,
}

impl Redactor {
    /// A redactor for these secret values (empty and very short values are ignored).
    pub fn new(secrets: impl IntoIterator<Item = String>) -> Self {
        let mut list: Vec<String> = secrets
            .into_iter()
            .filter(|s| s.len() >= MIN_SECRET_LEN)
            .collect();
        // Longest first, so a secret that contains another is replaced whole.
        list.sort_by_key(|s| std::cmp::Reverse(s.len()));
        Self {
            secrets: list.into(),
        }
    }

    /// The text with every secret value and bearer token replaced by `***`.
    ///
    /// ```
    /// use air_friends::observability::Redactor;
    /// let r = Redactor::new(["discord-token-123".to_owned()]);
    /// assert_eq!(
    ///     r.redact("login with discord-token-123, header Bearer abc.def"),
    ///     "login with ***, header Bearer ***"
    /// );
    /// ```
    pub fn redact(&self, text: &str) -> String {
        let mut out = text.to_owned();
        for secret in self.secrets.iter() {
            if out.contains(secret.as_str()) {
                out = out.replace(secret.as_str(), MASK);
            }
        }
        redact_bearer(&out)
    }
}

/// Replaces the token after every (case-insensitive) `Bearer ` with `***`.
fn redact_bearer(text: &str) -> String {
    const WORD: &str = "bearer ";
    let lower = text.to_ascii_lowercase();
    if !lower.contains(WORD) {
        return text.to_owned();
    }
    let mut out = String::with_capacity(text.len());
    let mut pos = 0;
    while let Some(found) = lower[pos..].find(WORD) {
        let start = pos + found + WORD.len();
        out.push_str(&text[pos..start]);
        let token_len = text[start..]
            .find(|c: char| !(c.is_ascii_alphanumeric() || "-._~+/=".contains(c)))
            .unwrap_or(text.len() - start);
        if token_len > 0 {
            out.push_str(MASK);
        }
        pos = start + token_len;
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
