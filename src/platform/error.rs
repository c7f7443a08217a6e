//! [`PlatformError`]: what a platform call can fail with, in terms callers branch on (retry later,
//! report "not found" to the agent, give up) rather than in serenity's or Misskey's vocabulary.
//!
//! Adapters build these from their transport errors and must keep tokens out of every message
//! (no request URLs with `?i=…`, no `Authorization` headers).

use std::time::Duration;

/// A failed platform call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlatformError {
    /// The platform asked us to slow down (Discord 429, Misskey `RATE_LIMIT_EXCEEDED`).
    #[error("rate limited by the platform, retry after {} ms", retry_after.as_millis())]
    RateLimited {
        /// How long to wait before trying again (the platform's hint, or the adapter's back-off
        /// when the platform gives none).
        retry_after: Duration,
    },
    /// The message, channel or user does not exist (or is not visible to the bot).
    #[error("not found: {0}")]
    NotFound(String),
    /// The bot may not do this (missing permission, blocked by the user, not its own message).
    #[error("forbidden: {0}")]
    Forbidden(String),
    /// An id is malformed for this platform (e.g. a non-numeric Discord snowflake, a Misskey
    /// channel id without the `note:`/`chat:` prefix).
    #[error("invalid id: {0}")]
    InvalidId(String),
    /// The request itself is unacceptable before reaching the platform (empty text, text over the
    /// limit, no files, an emoji that is not one).
    #[error("invalid input: {0}")]
    InvalidInput(String),
    /// The platform could not be reached or the connection broke (timeouts, DNS, TLS, reset).
    #[error("transport error: {0}")]
    Transport(String),
    /// The platform answered with an error not covered above.
    #[error("platform API error {status}{}: {message}", code_suffix(code.as_deref()))]
    Api {
        /// HTTP status (0 when the error did not come with one, e.g. a gateway error).
        status: u16,
        /// The platform's error code (Misskey `error.code`, Discord's JSON `code`) when known.
        code: Option<String>,
        /// The platform's error message, token-free.
        message: String,
    },
    /// This platform cannot do that at all (e.g. custom emojis on the console).
    #[error("not supported on this platform: {0}")]
    Unsupported(&'static str),
}

/// ` (CODE)` for an API error's code, or nothing.
fn code_suffix(code: Option<&str>) -> String {
    code.map(|c| format!(" ({c})")).unwrap_or_default()
}

impl PlatformError {
    /// Whether trying the same call again later may succeed: rate limits, transport failures and
    /// server-side (5xx, 408) API errors. The Skill API reports this as `retryable`.
    pub fn is_retryable(&self) -> bool {
        match self {
            PlatformError::RateLimited { .. } | PlatformError::Transport(_) => true,
            PlatformError::Api { status, .. } => *status >= 500 || *status == 408,
            PlatformError::NotFound(_)
            | PlatformError::Forbidden(_)
            | PlatformError::InvalidId(_)
            | PlatformError::InvalidInput(_)
            | PlatformError::Unsupported(_) => false,
        }
    }

    /// The wait the platform asked for, for a rate limit.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            PlatformError::RateLimited { retry_after } => Some(*retry_after),
            _ => None,
        }
    }

    /// A short, stable name of the variant for logs and metrics labels (`rate_limited`,
    /// `not_found`, …).
    pub fn kind(&self) -> &'static str {
        match self {
            PlatformError::RateLimited { .. } => "rate_limited",
            PlatformError::NotFound(_) => "not_found",
            PlatformError::Forbidden(_) => "forbidden",
            PlatformError::InvalidId(_) => "invalid_id",
            PlatformError::InvalidInput(_) => "invalid_input",
            PlatformError::Transport(_) => "transport",
            PlatformError::Api { .. } => "api",
            PlatformError::Unsupported(_) => "unsupported",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retryable_errors_are_the_transient_ones() {
        let api = |status| PlatformError::Api {
            status,
            code: None,
            message: "x".into(),
        };
        assert!(
            PlatformError::RateLimited {
                retry_after: Duration::from_secs(1)
            }
            .is_retryable()
        );
        assert!(PlatformError::Transport("reset".into()).is_retryable());
        assert!(api(502).is_retryable());
        assert!(api(408).is_retryable());
        assert!(!api(400).is_retryable());
        assert!(!PlatformError::NotFound("message 1".into()).is_retryable());
        assert!(!PlatformError::Forbidden("x".into()).is_retryable());
        assert!(!PlatformError::InvalidId("x".into()).is_retryable());
        assert!(!PlatformError::Unsupported("emoji").is_retryable());
    }

    #[test]
    fn messages_carry_what_a_log_reader_needs() {
        let err = PlatformError::Api {
            status: 400,
            code: Some("NO_SUCH_NOTE".into()),
            message: "No such note.".into(),
        };
        assert_eq!(
            err.to_string(),
            "platform API error 400 (NO_SUCH_NOTE): No such note."
        );
        let err = PlatformError::RateLimited {
            retry_after: Duration::from_millis(1500),
        };
        assert_eq!(
            err.to_string(),
            "rate limited by the platform, retry after 1500 ms"
        );
        assert_eq!(err.retry_after(), Some(Duration::from_millis(1500)));
        assert_eq!(err.kind(), "rate_limited");
    }
}
