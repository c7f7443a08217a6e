//! One-time confirmation codes for `/forget`: the command says what it would do and hands the
//! person a short code; only `/forget-confirm CODE` from the same person, within
//! [`VALID_FOR`], does it, once. A new `/forget` replaces the person's earlier code.
//!
//! Codes are 6 characters of an alphabet without look-alikes (30 bits) from the thread-local
//! CSPRNG. They guard against a slip, not against a stranger: a code works only for the person
//! it was given to.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::RngExt;
use tokio::time::Instant;

use crate::platform::PlatformKind;
use crate::sync::lock;

/// How long a code stays good.
pub const VALID_FOR: Duration = Duration::from_secs(600);

/// Characters a code is made of (no 0/O, 1/I/L).
const ALPHABET: &[u8] = b"ABCDEFGHJKMNPQRSTUVWXYZ23456789";
/// A code's length.
const LENGTH: usize = 6;

/// Who a code was given to.
type Person = (PlatformKind, String);

/// The codes handed out and not used yet, with what each confirms. Cloning shares them.
#[derive(Debug)]
pub struct Confirmations<A> {
    pending: Arc<Mutex<HashMap<Person, Pending<A>>>>,
}

impl<A> Clone for Confirmations<A> {
    fn clone(&self) -> Self {
        Self {
            pending: Arc::clone(&self.pending),
        }
    }
}

impl<A> Default for Confirmations<A> {
    fn default() -> Self {
        Self {
            pending: Arc::new(Mutex::new(HashMap::new())),
        }
    }
}

#[derive(Debug)]
struct Pending<A> {
    code: String,
    action: A,
    until: Instant,
}

impl<A> Confirmations<A> {
    /// Hands `user` of `platform` a code confirming `action` (their earlier one is gone).
    pub fn issue(&self, platform: PlatformKind, user: &str, action: A) -> String {
        let mut rng = rand::rng();
        let code: String = (0..LENGTH)
            .map(|_| char::from(ALPHABET[rng.random_range(0..ALPHABET.len())]))
            .collect();
        let now = Instant::now();
        let mut pending = lock(&self.pending);
        pending.retain(|_, p| p.until > now);
        pending.insert(
            (platform, user.to_owned()),
            Pending {
                code: code.clone(),
                action,
                until: now + VALID_FOR,
            },
        );
        code
    }

    /// The action `code` confirms, when it is `user`'s current code and still good; the code
    /// is used up either way once it matched. Case and spaces around it do not matter.
    pub fn take(&self, platform: PlatformKind, user: &str, code: &str) -> Option<A> {
        let code = code.trim().to_ascii_uppercase();
        let key = (platform, user.to_owned());
        let mut pending = lock(&self.pending);
        let matches = pending
            .get(&key)
            .is_some_and(|p| crate::session::constant_time_eq(p.code.as_bytes(), code.as_bytes()));
        if !matches {
            return None;
        }
        let found = pending.remove(&key)?;
        (found.until > Instant::now()).then_some(found.action)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_code_works_once_for_its_person_until_it_expires() {
        let confirmations = Confirmations::default();
        let code = confirmations.issue(PlatformKind::Discord, "1", "erase");
        assert_eq!(code.len(), LENGTH);
        assert!(code.bytes().all(|b| ALPHABET.contains(&b)));
        assert_eq!(
            confirmations.take(PlatformKind::Discord, "2", &code),
            None,
            "another person's code"
        );
        assert_eq!(
            confirmations.take(PlatformKind::Misskey, "1", &code),
            None,
            "the same id on another platform"
        );
        assert_eq!(
            confirmations.take(PlatformKind::Discord, "1", "WRONG1"),
            None
        );
        assert_eq!(
            confirmations.take(
                PlatformKind::Discord,
                "1",
                &format!(" {} ", code.to_lowercase())
            ),
            Some("erase")
        );
        assert_eq!(
            confirmations.take(PlatformKind::Discord, "1", &code),
            None,
            "used up"
        );

        let old = confirmations.issue(PlatformKind::Discord, "1", "first");
        let new = confirmations.issue(PlatformKind::Discord, "1", "second");
        if old != new {
            assert_eq!(confirmations.take(PlatformKind::Discord, "1", &old), None);
        }
        assert_eq!(
            confirmations.take(PlatformKind::Discord, "1", &new),
            Some("second")
        );

        let late = confirmations.issue(PlatformKind::Discord, "1", "late");
        tokio::time::advance(VALID_FOR + Duration::from_secs(1)).await;
        assert_eq!(confirmations.take(PlatformKind::Discord, "1", &late), None);
    }
}
