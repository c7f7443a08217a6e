//! Who may use the console: one-time login links and the sessions they open.
//!
//! `air-friends admin-link` asks the running daemon (its control socket) for a link: a random
//! 256-bit token, valid once and for `admin.linkMinutes`. Opening it swaps the token for a
//! session: another random token in an `HttpOnly`, `SameSite=Strict` cookie scoped to
//! `/admin`, valid for `admin.sessionHours`, with a CSRF token of its own that every form
//! carries. Tokens live only in the daemon's memory, stored as their SHA-256 (a dump of the
//! process shows no usable token), and are compared by hash lookup of 256-bit values.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use rand::TryRng;
use rand::rngs::SysRng;
use subtle::ConstantTimeEq;
use tokio::time::Instant;

use crate::sync::lock;

/// The session cookie's name.
pub const COOKIE: &str = "af_admin";

/// Why a token could not be minted.
#[derive(Debug, thiserror::Error)]
#[error("the OS random number generator failed: {0}")]
pub struct Entropy(String);

/// An open console session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdminSession {
    /// A short name for the audit log (the first 8 hex digits of the session's hash; the
    /// token itself never prints).
    pub who: String,
    /// The token every form of this session carries.
    pub csrf: String,
    expires: Instant,
}

/// Links and sessions.
#[derive(Debug)]
pub struct Auth {
    link_ttl: Duration,
    session_ttl: Duration,
    /// Unused links by their token's hash, with when they expire.
    links: Mutex<HashMap<[u8; 32], Instant>>,
    /// Open sessions by their token's hash.
    sessions: Mutex<HashMap<[u8; 32], AdminSession>>,
}

impl Auth {
    /// Links valid for `link_ttl`, sessions for `session_ttl`.
    pub fn new(link_ttl: Duration, session_ttl: Duration) -> Self {
        Auth {
            link_ttl,
            session_ttl,
            links: Mutex::new(HashMap::new()),
            sessions: Mutex::new(HashMap::new()),
        }
    }

    /// How long a link is valid.
    pub fn link_ttl(&self) -> Duration {
        self.link_ttl
    }

    /// How long a session lasts.
    pub fn session_ttl(&self) -> Duration {
        self.session_ttl
    }

    /// A new one-time link token.
    pub fn mint_link(&self) -> Result<String, Entropy> {
        let token = random_token()?;
        let now = Instant::now();
        let mut links = lock(&self.links);
        links.retain(|_, expires| *expires > now);
        links.insert(digest(&token), now + self.link_ttl);
        Ok(token)
    }

    /// Swaps a link token for a session: the session's cookie token and the session. `None`
    /// when the link is unknown, used or expired (it is used now either way).
    pub fn open(&self, link: &str) -> Option<(String, AdminSession)> {
        let expires = lock(&self.links).remove(&digest(link))?;
        let now = Instant::now();
        if expires <= now {
            return None;
        }
        let token = random_token().ok()?;
        let csrf = random_token().ok()?;
        let key = digest(&token);
        let session = AdminSession {
            who: crate::session::ids::hex(&key[..4]),
            csrf,
            expires: now + self.session_ttl,
        };
        let mut sessions = lock(&self.sessions);
        sessions.retain(|_, s| s.expires > now);
        sessions.insert(key, session.clone());
        Some((token, session))
    }

    /// The open session of a cookie token, if it has not expired.
    pub fn session(&self, token: &str) -> Option<AdminSession> {
        let key = digest(token);
        let mut sessions = lock(&self.sessions);
        match sessions.get(&key) {
            Some(s) if s.expires > Instant::now() => Some(s.clone()),
            Some(_) => {
                sessions.remove(&key);
                None
            }
            None => None,
        }
    }

    /// Ends the session of a cookie token.
    pub fn close(&self, token: &str) -> bool {
        lock(&self.sessions).remove(&digest(token)).is_some()
    }
}

impl AdminSession {
    /// Whether `presented` is this session's CSRF token (constant time).
    pub fn csrf_matches(&self, presented: &str) -> bool {
        bool::from(self.csrf.as_bytes().ct_eq(presented.as_bytes()))
    }
}

/// 256 random bits, lowercase hex.
fn random_token() -> Result<String, Entropy> {
    let mut bytes = [0u8; 32];
    SysRng
        .try_fill_bytes(&mut bytes)
        .map_err(|e| Entropy(e.to_string()))?;
    Ok(crate::session::ids::hex(&bytes))
}

fn digest(token: &str) -> [u8; 32] {
    let hash = ring::digest::digest(&ring::digest::SHA256, token.as_bytes());
    let mut out = [0u8; 32];
    out.copy_from_slice(hash.as_ref());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn auth() -> Auth {
        Auth::new(Duration::from_secs(600), Duration::from_secs(3600))
    }

    #[tokio::test]
    async fn a_link_opens_one_session_once() {
        let auth = auth();
        let link = auth.mint_link().unwrap();
        let (token, session) = auth.open(&link).expect("the first use opens");
        assert!(auth.open(&link).is_none(), "the second use does not");
        assert_eq!(auth.session(&token), Some(session.clone()));
        assert!(session.csrf_matches(&session.csrf.clone()));
        assert!(!session.csrf_matches("nope"));
        assert!(auth.session(&link).is_none(), "a link is not a session");
        assert!(auth.close(&token));
        assert!(auth.session(&token).is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn links_and_sessions_expire() {
        let auth = auth();
        let late = auth.mint_link().unwrap();
        let link = auth.mint_link().unwrap();
        let (token, _) = auth.open(&link).unwrap();
        tokio::time::advance(Duration::from_secs(601)).await;
        assert!(auth.open(&late).is_none(), "an expired link");
        assert!(auth.session(&token).is_some());
        tokio::time::advance(Duration::from_secs(3000)).await;
        assert!(auth.session(&token).is_none(), "an expired session");
    }
}
