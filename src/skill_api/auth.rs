//! Authentication of a skill call: the axum extractor [`AuthenticatedCall`], and the HTTP side
//! of [`crate::session::authenticate`] that the model gateway shares: the caller tokens a
//! request presents ([`presented_tokens`]) and the one status per failure ([`auth_status`]).
//!
//! The session id travels in the JSON body, so authentication is done by a body-consuming
//! extractor that runs the first pipeline steps in order: read and parse the body
//! (`Content-Type` JSON, size limit, a body that has not fully arrived within `body_read_timeout`
//! is `INVALID_JSON`, `{sessionId, parameters}` shape) → [`crate::session::authenticate`]
//! (the channel, the session (401), the caller token in constant time (401 missing, 403
//! wrong), an open turn (409)), which touches the session. The route handler receives a typed,
//! authenticated call or a [`CallRejection`] that still carries what the audit log needs.
//!
//! On a per-session Unix socket ([`SessionSocket`](super::SessionSocket)) the session is known
//! before the body is read: every request carries a [`SocketSession`] extension naming the
//! session whose socket it arrived on, and the operating system decides who can reach that
//! socket (only the daemon and that session's sandbox). A body naming any other session is
//! refused with 403 `AUTH_FAILED` ([`SkillError::WrongSessionChannel`]) right after parsing,
//! before the session lookup, so a hijacked agent cannot act for another live session even
//! holding its id and token, and cannot probe which session ids exist
//! (`tests/skill_api_socket.rs`). The caller token remains the second check.

use axum::extract::{FromRequest, Request};
use axum::http::{Extensions, HeaderMap, header};
use axum::response::{IntoResponse, Response};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use serde::Deserialize;
use serde_json::{Map, Value};

use axum::http::StatusCode;

use super::error::SkillError;
use super::state::SkillApiState;
use crate::session::{AuthFailure, Presented, SessionHandle, auth::channel_matches, authenticate};

/// The session whose per-session socket a request arrived on: a request extension set by the
/// server for every request of a [`SessionSocket`](super::SessionSocket), never by the client.
/// Absent on the TCP listener.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SocketSession(pub String);

/// Checks that a request's channel may act for `session_id`: `Ok` on the TCP listener (no
/// [`SocketSession`]) or when the socket belongs to that session, otherwise
/// [`SkillError::WrongSessionChannel`] (403 `AUTH_FAILED`). Routes served on the session
/// sockets besides the skills (the model gateway) call it with the session they were given.
pub fn socket_session_matches(extensions: &Extensions, session_id: &str) -> Result<(), SkillError> {
    Ok(channel_matches(socket_channel(extensions), session_id)?)
}

/// The session whose socket a request arrived on (`None` on the TCP listener).
pub fn socket_channel(extensions: &Extensions) -> Option<&str> {
    extensions.get::<SocketSession>().map(|s| s.0.as_str())
}

/// What a request presents for itself: its socket's session and its caller tokens.
pub fn presented<'a>(headers: &'a HeaderMap, extensions: &'a Extensions) -> Presented<'a> {
    Presented {
        channel: socket_channel(extensions),
        tokens: presented_tokens(headers),
    }
}

/// The one HTTP status of each authentication failure, for the Skill API and the gateway
/// alike: 401 when the caller is not known (no such session, no token), 403 when it is refused
/// (wrong token, another session's channel), 409 between turns.
pub fn auth_status(failure: AuthFailure) -> StatusCode {
    match failure {
        AuthFailure::SessionNotFound | AuthFailure::TokenMissing => StatusCode::UNAUTHORIZED,
        AuthFailure::WrongChannel | AuthFailure::TokenMismatch => StatusCode::FORBIDDEN,
        AuthFailure::NoTurnOpen => StatusCode::CONFLICT,
    }
}

/// The caller tokens a request presents: `Authorization: Bearer X` and `x-api-key: X`,
/// whichever it sent (model SDKs send either). `Err(TokenMismatch)` when a header is present
/// but unusable (not text, another scheme, empty).
pub fn presented_tokens(headers: &HeaderMap) -> Result<Vec<&[u8]>, AuthFailure> {
    let mut tokens = Vec::new();
    for value in headers.get_all(header::AUTHORIZATION) {
        let text = value
            .to_str()
            .map_err(|_| AuthFailure::TokenMismatch)?
            .trim();
        let token = text
            .split_once(' ')
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map(|(_, token)| token.trim())
            .filter(|token| !token.is_empty())
            .ok_or(AuthFailure::TokenMismatch)?;
        tokens.push(token.as_bytes());
    }
    for value in headers.get_all("x-api-key") {
        let key = value.as_bytes().trim_ascii();
        if key.is_empty() {
            return Err(AuthFailure::TokenMismatch);
        }
        tokens.push(key);
    }
    Ok(tokens)
}

/// The wire body of a skill call.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct CallBody {
    session_id: String,
    #[serde(default)]
    parameters: Option<Map<String, Value>>,
}

/// A parsed call whose session exists and whose caller token matched.
#[derive(Debug)]
pub struct AuthenticatedCall {
    /// The calling session (already touched).
    pub session: SessionHandle,
    /// The raw `parameters` object (`{}` when absent or `null`), not yet schema-checked.
    pub parameters: Map<String, Value>,
    /// Size of the request body in bytes (for the audit log; content is never logged).
    pub body_bytes: usize,
}

/// A call rejected before it was authenticated, with what is known for the audit log.
#[derive(Debug)]
pub struct CallRejection {
    /// Why (`INVALID_JSON`, `BODY_TOO_LARGE`, `SESSION_NOT_FOUND`, `AUTH_*`).
    pub error: SkillError,
    /// The session id the body named, when it could be parsed.
    pub session_id: Option<String>,
    /// Bytes of body read (0 when not read).
    pub body_bytes: usize,
}

impl CallRejection {
    fn new(error: SkillError) -> Self {
        Self {
            error,
            session_id: None,
            body_bytes: 0,
        }
    }
}

impl IntoResponse for CallRejection {
    fn into_response(self) -> Response {
        self.error.into_response()
    }
}

impl FromRequest<SkillApiState> for AuthenticatedCall {
    type Rejection = CallRejection;

    async fn from_request(req: Request, state: &SkillApiState) -> Result<Self, Self::Rejection> {
        let limit = state.settings().body_limit;
        let (parts, body) = req.into_parts();
        check_content_type(&parts.headers).map_err(CallRejection::new)?;
        let declared = parts
            .headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if declared.is_some_and(|len| len > limit as u64) {
            return Err(CallRejection::new(SkillError::BodyTooLarge { limit }));
        }
        let read_timeout = state.settings().body_read_timeout;
        let collected = tokio::time::timeout(read_timeout, Limited::new(body, limit).collect())
            .await
            .map_err(|_| {
                CallRejection::new(SkillError::InvalidJson(format!(
                    "the request body did not arrive within {} s",
                    read_timeout.as_secs_f32()
                )))
            })?;
        let bytes = match collected {
            Ok(collected) => collected.to_bytes(),
            Err(e) if e.downcast_ref::<LengthLimitError>().is_some() => {
                return Err(CallRejection::new(SkillError::BodyTooLarge { limit }));
            }
            Err(_) => {
                return Err(CallRejection::new(SkillError::InvalidJson(
                    "the request body could not be read".into(),
                )));
            }
        };
        let body_bytes = bytes.len();
        let parsed: CallBody = serde_json::from_slice(&bytes).map_err(|e| CallRejection {
            error: SkillError::InvalidJson(e.to_string()),
            session_id: None,
            body_bytes,
        })?;
        // On a session socket, a body naming another session learns nothing (not even whether
        // that session exists), and the audit names the session that sent it.
        let session = authenticate(
            state.sessions(),
            &parsed.session_id,
            &presented(&parts.headers, &parts.extensions),
        )
        .map_err(|failure| CallRejection {
            error: failure.into(),
            session_id: match failure {
                AuthFailure::WrongChannel => socket_channel(&parts.extensions).map(str::to_owned),
                _ => Some(parsed.session_id.clone()),
            },
            body_bytes,
        })?;
        Ok(Self {
            session,
            parameters: parsed.parameters.unwrap_or_default(),
            body_bytes,
        })
    }
}

fn check_content_type(headers: &HeaderMap) -> Result<(), SkillError> {
    let value = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let mime = value.split(';').next().unwrap_or("").trim();
    if is_json_mime(mime) {
        Ok(())
    } else if mime.is_empty() {
        Err(SkillError::InvalidJson(
            "the Content-Type header is missing; it must be application/json".into(),
        ))
    } else {
        Err(SkillError::InvalidJson(format!(
            "the Content-Type is {:?}; it must be application/json",
            mime.to_ascii_lowercase()
        )))
    }
}

/// `application/json` or `application/<anything>+json`, in any letter case.
fn is_json_mime(mime: &str) -> bool {
    let bytes = mime.as_bytes();
    let has_prefix = |prefix: &str| {
        bytes.len() >= prefix.len() && bytes[..prefix.len()].eq_ignore_ascii_case(prefix.as_bytes())
    };
    let has_suffix = |suffix: &str| {
        bytes.len() >= suffix.len()
            && bytes[bytes.len() - suffix.len()..].eq_ignore_ascii_case(suffix.as_bytes())
    };
    mime.eq_ignore_ascii_case("application/json")
        || (has_prefix("application/") && has_suffix("+json"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn tokens_are_parsed_strictly_from_both_headers() {
        let mut h = HeaderMap::new();
        assert_eq!(presented_tokens(&h), Ok(vec![]));
        for (value, token) in [("Bearer tok", "tok"), ("bearer  tok ", "tok")] {
            h.insert(header::AUTHORIZATION, HeaderValue::from_static(value));
            assert_eq!(presented_tokens(&h), Ok(vec![token.as_bytes()]));
        }
        h.insert("x-api-key", HeaderValue::from_static(" other "));
        assert_eq!(presented_tokens(&h), Ok(vec![&b"tok"[..], &b"other"[..]]));
        for unusable in ["Bearer ", "Basic dXNlcg==", "tok"] {
            let mut h = HeaderMap::new();
            h.insert(header::AUTHORIZATION, HeaderValue::from_static(unusable));
            assert_eq!(
                presented_tokens(&h),
                Err(AuthFailure::TokenMismatch),
                "{unusable}"
            );
        }
        let mut h = HeaderMap::new();
        h.insert("x-api-key", HeaderValue::from_static(""));
        assert_eq!(presented_tokens(&h), Err(AuthFailure::TokenMismatch));
    }

    #[test]
    fn one_status_per_failure() {
        for (failure, status) in [
            (AuthFailure::SessionNotFound, 401),
            (AuthFailure::TokenMissing, 401),
            (AuthFailure::TokenMismatch, 403),
            (AuthFailure::WrongChannel, 403),
            (AuthFailure::NoTurnOpen, 409),
        ] {
            assert_eq!(auth_status(failure).as_u16(), status, "{failure:?}");
            let error = SkillError::from(failure);
            assert_eq!(
                (error.status(), error.code()),
                (auth_status(failure), failure.code())
            );
        }
    }

    #[test]
    fn socket_session_must_name_the_body_session() {
        let mut extensions = Extensions::new();
        assert!(
            socket_session_matches(&extensions, "anything").is_ok(),
            "the TCP listener has no socket session"
        );
        extensions.insert(SocketSession("aaaa".into()));
        assert!(socket_session_matches(&extensions, "aaaa").is_ok());
        let refused = socket_session_matches(&extensions, "bbbb").expect_err("other session");
        assert_eq!(refused.status(), axum::http::StatusCode::FORBIDDEN);
        assert_eq!(refused.code(), "AUTH_FAILED");
        assert!(refused.is_auth_class(), "never cached");
        assert!(socket_session_matches(&extensions, "").is_err());
    }

    #[test]
    fn content_type_must_be_json() {
        let mut h = HeaderMap::new();
        assert!(check_content_type(&h).is_err());
        h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
        assert!(check_content_type(&h).is_err());
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("Application/JSON; charset=utf-8"),
        );
        assert!(check_content_type(&h).is_ok());
        for accepted in ["application/ld+json", "APPLICATION/VND.API+JSON"] {
            assert!(is_json_mime(accepted), "{accepted}");
        }
        for refused in [
            "application/jsonx",
            "text/json",
            "application+json",
            "+json",
            "",
        ] {
            assert!(!is_json_mime(refused), "{refused}");
        }
    }
}
