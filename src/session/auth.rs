//! Who may act for a session: [`authenticate`], the one check the Skill API and the model
//! gateway both run before anything else, in this order (the first failure answers):
//!
//! 1. the channel: a request that arrived on a per-session socket may act only for that
//!    socket's session — checked before the lookup, so a hijacked agent learns nothing about
//!    other sessions, not even whether one exists;
//! 2. the named session is live (registered, not expired);
//! 3. a caller token was presented, and every token presented is the session's (compared in
//!    constant time, all of them, no short cut on the first);
//! 4. a turn is open: a kept agent between turns acts for nobody.
//!
//! Then the session is marked active. HTTP stays with the servers: each turns its request into
//! [`Presented`] and maps an [`AuthFailure`] to the same status
//! (`skill_api::auth::auth_status`, used by both).

use super::registry::{SessionHandle, SessionRegistry};

/// Why a request may not act for the session it names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AuthFailure {
    /// The request arrived on another session's channel (its per-session socket).
    #[error("this channel belongs to another session")]
    WrongChannel,
    /// No live session has this id (unknown, ended or expired).
    #[error("no such session")]
    SessionNotFound,
    /// No caller token was presented.
    #[error("no caller token presented")]
    TokenMissing,
    /// A presented token is not the session's caller token (or a credential header was
    /// unusable: not text, another scheme, empty).
    #[error("the caller token is not valid for this session")]
    TokenMismatch,
    /// The session's agent is kept between turns and no turn is open.
    #[error("no turn is open for this session")]
    NoTurnOpen,
}

impl AuthFailure {
    /// The stable error code both servers put in their bodies.
    pub fn code(self) -> &'static str {
        match self {
            AuthFailure::WrongChannel | AuthFailure::TokenMismatch => "AUTH_FAILED",
            AuthFailure::SessionNotFound => "SESSION_NOT_FOUND",
            AuthFailure::TokenMissing => "AUTH_MISSING",
            AuthFailure::NoTurnOpen => "NO_TURN_OPEN",
        }
    }
}

/// What a request presents for itself.
#[derive(Debug, Clone)]
pub struct Presented<'a> {
    /// The session whose per-session socket the request arrived on; `None` on a shared
    /// listener (TCP, no sandbox).
    pub channel: Option<&'a str>,
    /// Every caller token it carries (its credential headers, parsed by the server);
    /// `Err(TokenMismatch)` when one of them was unusable.
    pub tokens: Result<Vec<&'a [u8]>, AuthFailure>,
}

/// Checks that a request arriving on `channel` may act for `session_id`: `Ok` on a shared
/// listener (`None`) or on that session's own socket.
pub fn channel_matches(channel: Option<&str>, session_id: &str) -> Result<(), AuthFailure> {
    match channel {
        Some(owner) if owner != session_id => Err(AuthFailure::WrongChannel),
        _ => Ok(()),
    }
}

/// The checks of this module's header, in order; the session, marked active, when they pass.
pub fn authenticate(
    registry: &SessionRegistry,
    session_id: &str,
    presented: &Presented<'_>,
) -> Result<SessionHandle, AuthFailure> {
    channel_matches(presented.channel, session_id)?;
    let session = registry
        .lookup(session_id)
        .ok_or(AuthFailure::SessionNotFound)?;
    let tokens = presented.tokens.as_ref().map_err(|e| *e)?;
    if tokens.is_empty() {
        return Err(AuthFailure::TokenMissing);
    }
    let all_match = tokens
        .iter()
        .fold(true, |all, token| session.token_matches(token) & all);
    if !all_match {
        return Err(AuthFailure::TokenMismatch);
    }
    if !session.turn_is_open() {
        return Err(AuthFailure::NoTurnOpen);
    }
    session.mark_active();
    Ok(session)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::registry::tests::context;
    use std::time::Duration;

    fn registry_with_one() -> (SessionRegistry, String, String) {
        let registry = SessionRegistry::new(Duration::from_secs(60));
        let registered = registry.register(context()).unwrap();
        let id = registered.session_id.as_str().to_owned();
        let token = registered.caller_token.expose_secret().to_owned();
        (registry, id, token)
    }

    fn presented<'a>(channel: Option<&'a str>, tokens: &[&'a str]) -> Presented<'a> {
        Presented {
            channel,
            tokens: Ok(tokens.iter().map(|t| t.as_bytes()).collect()),
        }
    }

    #[test]
    fn every_check_answers_in_order() {
        let (registry, id, token) = registry_with_one();
        let ok = authenticate(&registry, &id, &presented(None, &[&token]));
        assert!(ok.is_ok());
        assert!(authenticate(&registry, &id, &presented(Some(&id), &[&token])).is_ok());
        // The channel is checked first: another socket learns nothing, not even existence.
        for target in [id.as_str(), "no-such-session"] {
            assert_eq!(
                authenticate(&registry, target, &presented(Some("other"), &[&token])).err(),
                Some(AuthFailure::WrongChannel)
            );
        }
        assert_eq!(
            authenticate(&registry, "no-such-session", &presented(None, &[])).err(),
            Some(AuthFailure::SessionNotFound)
        );
        assert_eq!(
            authenticate(&registry, &id, &presented(None, &[])).err(),
            Some(AuthFailure::TokenMissing)
        );
        assert_eq!(
            authenticate(&registry, &id, &presented(None, &["wrong"])).err(),
            Some(AuthFailure::TokenMismatch)
        );
        // Every presented token must be the session's.
        assert_eq!(
            authenticate(&registry, &id, &presented(None, &[&token, "other"])).err(),
            Some(AuthFailure::TokenMismatch)
        );
        let unusable = Presented {
            channel: None,
            tokens: Err(AuthFailure::TokenMismatch),
        };
        assert_eq!(
            authenticate(&registry, &id, &unusable).err(),
            Some(AuthFailure::TokenMismatch)
        );
        let session = registry.lookup(&id).unwrap();
        session.end_turn();
        assert_eq!(
            authenticate(&registry, &id, &presented(None, &[&token])).err(),
            Some(AuthFailure::NoTurnOpen)
        );
    }

    #[test]
    fn codes_are_shared_by_both_servers() {
        assert_eq!(AuthFailure::WrongChannel.code(), "AUTH_FAILED");
        assert_eq!(AuthFailure::TokenMismatch.code(), "AUTH_FAILED");
        assert_eq!(AuthFailure::TokenMissing.code(), "AUTH_MISSING");
        assert_eq!(AuthFailure::SessionNotFound.code(), "SESSION_NOT_FOUND");
        assert_eq!(AuthFailure::NoTurnOpen.code(), "NO_TURN_OPEN");
    }
}
