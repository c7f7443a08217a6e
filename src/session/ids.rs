//! Session ids and caller tokens: random from the OS, the token a secret that never prints,
//! and the one constant-time comparison every presented token goes through.

use std::fmt;

use rand::TryRng;
use rand::rngs::SysRng;
use subtle::ConstantTimeEq;

/// Bytes of randomness in a session id (128 bits).
pub(super) const SESSION_ID_BYTES: usize = 16;
/// Characters of a session id (lowercase hex of [`SESSION_ID_BYTES`]); the session sockets'
/// path length is checked against it.
pub(crate) const SESSION_ID_CHARS: usize = SESSION_ID_BYTES * 2;
/// Bytes of randomness in a caller token (256 bits).
pub(super) const CALLER_TOKEN_BYTES: usize = 32;

/// Errors of the session registry.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// The operating system's random number generator failed; no session can be minted safely.
    #[error("the OS random number generator failed: {0}")]
    Entropy(String),
    /// The user's data is being erased ([`SessionRegistry::hold_user`]): no session starts for
    /// them until it is done.
    ///
    /// [`SessionRegistry::hold_user`]: super::SessionRegistry::hold_user
    #[error("this user's data is being erased")]
    UserHeld,
}

/// A session id: 128 random bits, lowercase hex (URL-safe). Not a secret on its own.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SessionId(pub(super) String);

impl SessionId {
    /// The id as text (what goes into `SESSION_ID` and the request body).
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
impl SessionId {
    /// A session id with the given text, for unit tests that need a known one.
    pub(crate) fn for_test(id: &str) -> Self {
        Self(id.to_owned())
    }
}

impl std::borrow::Borrow<str> for SessionId {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SessionId({})", self.0)
    }
}

impl fmt::Display for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The per-session caller token (256 random bits, lowercase hex). A secret: its `Debug` prints
/// `***` and it has no `Display`. Only [`expose_secret`](Self::expose_secret) reveals it, for
/// putting it into the agent's `SKILL_API_TOKEN`.
#[derive(Clone)]
pub struct CallerToken(pub(super) String);

impl CallerToken {
    /// The token text. Use only to build the agent's environment; never log it.
    pub fn expose_secret(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for CallerToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("CallerToken(***)")
    }
}
/// Compares two byte strings in time independent of their contents (via `subtle`). Lengths are
/// not secret (every caller token has the same length) and may short-circuit.
///
/// Compared eight bytes at a time (`u64::ct_eq`), so a 64-character token costs eight
/// constant-time word comparisons instead of 64 byte ones; the rest byte by byte.
pub fn constant_time_eq(expected: &[u8], presented: &[u8]) -> bool {
    if expected.len() != presented.len() {
        return false;
    }
    let mut expected_words = expected.chunks_exact(8);
    let mut presented_words = presented.chunks_exact(8);
    let mut equal = expected_words
        .remainder()
        .ct_eq(presented_words.remainder());
    for (a, b) in (&mut expected_words).zip(&mut presented_words) {
        equal &= word(a).ct_eq(&word(b));
    }
    equal.into()
}

/// The eight bytes of an exact chunk as one word.
fn word(chunk: &[u8]) -> u64 {
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(chunk);
    u64::from_ne_bytes(bytes)
}

/// `N` bytes from the OS random number generator.
pub(super) fn random_bytes<const N: usize>() -> Result<[u8; N], SessionError> {
    let mut bytes = [0u8; N];
    SysRng
        .try_fill_bytes(&mut bytes)
        .map_err(|e| SessionError::Entropy(e.to_string()))?;
    Ok(bytes)
}

/// Lowercase hex (ids and tokens; the console's tokens too).
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0x0f)]));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constant_time_eq_matches_only_identical_bytes() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"ab"));
        assert!(!constant_time_eq(b"abc", b""));
        assert!(constant_time_eq(b"", b""));
    }

    #[test]
    fn constant_time_eq_compares_every_byte_of_word_sized_and_odd_lengths() {
        for len in [1, 7, 8, 9, 16, 31, 64, 65] {
            let a: Vec<u8> = (0..len).map(|i| b'a' + (i % 26) as u8).collect();
            assert!(constant_time_eq(&a, &a.clone()), "len {len}");
            for at in 0..len {
                let mut b = a.clone();
                b[at] ^= 0x01;
                assert!(!constant_time_eq(&a, &b), "len {len}, byte {at} differs");
            }
        }
    }
}
