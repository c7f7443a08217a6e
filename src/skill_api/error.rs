//! Skill API errors and the one place they become HTTP responses.
//!
//! [`SkillError`] has one variant per row of the Skill API's status table. Handlers and the
//! request pipeline return it; [`SkillError::to_http`] is the only mapping from a variant to an
//! HTTP status, an error code and the JSON body. Messages are written for the reader that actually
//! sees them — an LLM agent — and say what went wrong and what to do next. Internal causes never
//! reach the body: a 500 carries a generic text and the cause is logged by the server.

use std::time::Duration;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use crate::session::AuthFailure;

/// One parameter problem reported with `INVALID_PARAMS` (the skills layer's type: the skill
/// client reports the same shape).
pub use crate::skills::ParamProblem;

/// Everything a skill call can fail with.
#[derive(Debug, thiserror::Error)]
pub enum SkillError {
    /// 400: the body is not JSON, not of the `{sessionId, parameters}` shape, or not sent as JSON.
    #[error("invalid request body: {0}")]
    InvalidJson(String),
    /// 400: the parameters do not match the skill's `input_schema`.
    #[error("invalid parameters ({} problem(s))", details.len())]
    InvalidParams {
        /// Every problem found, each with a JSON Pointer path.
        details: Vec<ParamProblem>,
    },
    /// 401 / 403 / 409: the request may not act for the session it names
    /// ([`crate::session::authenticate`]; statuses from [`super::auth::auth_status`], the same
    /// as the model gateway's).
    #[error("{0}")]
    Auth(AuthFailure),
    /// 403: the skill is not allowed in this context (e.g. DM-only skill in a guild).
    #[error("forbidden in this context: {0}")]
    ForbiddenContext(String),
    /// 404: no skill of that name is registered.
    #[error("unknown skill {name:?}")]
    UnknownSkill {
        /// The name the caller asked for.
        name: String,
        /// Registered skill names, offered to the agent as alternatives.
        available: Vec<String>,
    },
    /// 404: a memory, reminder or message was not found or does not belong to the caller.
    #[error("not found: {0}")]
    NotFound(String),
    /// 405: anything but `POST`.
    #[error("method not allowed")]
    MethodNotAllowed,
    /// 413: the body exceeds the configured limit.
    #[error("body larger than {limit} bytes")]
    BodyTooLarge {
        /// The limit in bytes.
        limit: usize,
    },
    /// 429: a per-session quota is used up.
    #[error("quota exceeded: {message}")]
    QuotaExceeded {
        /// What the agent should do instead (e.g. "use edit-reply").
        message: String,
        /// When true the server asks the agent runner to stop this session's agent once the
        /// response has been sent (doom-loop protection).
        terminate: bool,
    },
    /// 429: the per-(skill, user) rate limit of the skill's manifest is exceeded.
    #[error("rate limited, retry after {retry_after:?}")]
    RateLimited {
        /// How long until a call would be accepted.
        retry_after: Duration,
    },
    /// 502: Discord or Misskey failed.
    #[error("platform error: {message}")]
    PlatformError {
        /// What the platform said, safe to show to the agent (no tokens, no URLs with secrets).
        message: String,
        /// Whether calling again may succeed.
        retryable: bool,
    },
    /// 503: the skill is disabled by configuration.
    #[error("skill {0:?} is disabled")]
    SkillDisabled(String),
    /// 500: anything unexpected. The cause is logged, never sent.
    #[error("internal error: {0:#}")]
    Internal(#[source] anyhow::Error),
}

/// The HTTP form of a [`SkillError`]: status, stable code and the complete JSON body.
#[derive(Clone, Debug)]
pub struct ErrorResponse {
    /// HTTP status.
    pub status: StatusCode,
    /// Stable machine-readable code (`"INVALID_PARAMS"`, ...).
    pub code: &'static str,
    /// `{"success": false, "error": ..., "code": ..., ...extras}`.
    pub body: Value,
    /// Value for the `Retry-After` header in whole seconds, when there is one.
    pub retry_after_secs: Option<u64>,
}

impl SkillError {
    /// Convenience constructor for [`SkillError::Internal`] from any displayable cause.
    pub fn internal(cause: impl Into<anyhow::Error>) -> Self {
        Self::Internal(cause.into())
    }

    /// The stable error code of this variant.
    pub fn code(&self) -> &'static str {
        self.status_and_code().1
    }

    /// The HTTP status of this variant.
    pub fn status(&self) -> StatusCode {
        self.status_and_code().0
    }

    fn status_and_code(&self) -> (StatusCode, &'static str) {
        match self {
            Self::InvalidJson(_) => (StatusCode::BAD_REQUEST, "INVALID_JSON"),
            Self::InvalidParams { .. } => (StatusCode::BAD_REQUEST, "INVALID_PARAMS"),
            Self::Auth(failure) => (super::auth::auth_status(*failure), failure.code()),
            Self::ForbiddenContext(_) => (StatusCode::FORBIDDEN, "FORBIDDEN_CONTEXT"),
            Self::UnknownSkill { .. } => (StatusCode::NOT_FOUND, "UNKNOWN_SKILL"),
            Self::NotFound(_) => (StatusCode::NOT_FOUND, "NOT_FOUND"),
            Self::MethodNotAllowed => (StatusCode::METHOD_NOT_ALLOWED, "METHOD_NOT_ALLOWED"),
            Self::BodyTooLarge { .. } => (StatusCode::PAYLOAD_TOO_LARGE, "BODY_TOO_LARGE"),
            Self::QuotaExceeded { .. } => (StatusCode::TOO_MANY_REQUESTS, "QUOTA_EXCEEDED"),
            Self::RateLimited { .. } => (StatusCode::TOO_MANY_REQUESTS, "RATE_LIMITED"),
            Self::PlatformError { .. } => (StatusCode::BAD_GATEWAY, "PLATFORM_ERROR"),
            Self::SkillDisabled(_) => (StatusCode::SERVICE_UNAVAILABLE, "SKILL_DISABLED"),
            Self::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, "INTERNAL"),
        }
    }

    /// Whether this outcome is an authentication/authorisation failure (401/403). Such outcomes
    /// are never stored in the de-duplication cache.
    pub fn is_auth_class(&self) -> bool {
        matches!(
            self.status(),
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN
        )
    }

    /// The single mapping from a variant to its HTTP form (status, code, JSON body, Retry-After).
    pub fn to_http(&self) -> ErrorResponse {
        let (status, code) = self.status_and_code();
        let mut retry_after_secs = None;
        let mut extra = serde_json::Map::new();
        let message = self.agent_message(&mut extra, &mut retry_after_secs);
        let mut body = serde_json::Map::new();
        body.insert("success".into(), Value::Bool(false));
        body.insert("error".into(), Value::String(message));
        body.insert("code".into(), Value::String(code.to_owned()));
        body.extend(extra);
        let response = ErrorResponse {
            status,
            code,
            body: Value::Object(body),
            retry_after_secs,
        };
        match self {
            Self::QuotaExceeded {
                terminate: true, ..
            } => response.with_termination_notice(),
            _ => response,
        }
    }

    /// What the agent reads for this error, with the extra body fields (`details`, ...) and
    /// the retry delay it carries. One flat match from variant to message, kept whole so every
    /// error's wording can be read and compared in one place.
    fn agent_message(
        &self,
        extra: &mut serde_json::Map<String, Value>,
        retry_after_secs: &mut Option<u64>,
    ) -> String {
        match self {
            Self::InvalidJson(detail) => format!(
                "The request body was rejected: {detail}. The Skill API expects a JSON body \
             {{\"sessionId\": \"...\", \"parameters\": {{...}}}} sent with \
             Content-Type: application/json. Run the skill through its script \
             (air-friends skill <name> --flag value ...) instead of building requests by hand."
            ),
            Self::InvalidParams { details } => {
                extra.insert("details".into(), json!(details));
                let paths: Vec<&str> = details
                    .iter()
                    .map(|d| {
                        if d.path.is_empty() {
                            "(parameters)"
                        } else {
                            d.path.as_str()
                        }
                    })
                    .collect();
                format!(
                    "The parameters do not match this skill's input schema (problems at: {}). \
                 Fix each entry listed in `details` and call the skill again; the skill's \
                 SKILL.md lists every accepted flag and its allowed values.",
                    paths.join(", ")
                )
            }
            Self::Auth(failure) => auth_message(*failure).to_owned(),
            Self::ForbiddenContext(why) => format!(
                "This skill is not allowed in the current conversation: {why}. Do not retry it \
             here; answer the user another way (for example with send-reply)."
            ),
            Self::UnknownSkill { name, available } => {
                extra.insert("availableSkills".into(), json!(available));
                format!(
                    "There is no skill named \"{name}\". Use one of the available skills: {}.",
                    available.join(", ")
                )
            }
            Self::NotFound(what) => format!(
                "{what}. Check the id (list or search first to get a valid one) and try again \
             with an id that exists and belongs to this user."
            ),
            Self::MethodNotAllowed => "Only POST is accepted on /api/skill/{name}. Run the skill \
             through its script, which sends the right request."
                .to_owned(),
            Self::BodyTooLarge { limit } => format!(
                "The request body exceeds the limit of {limit} bytes. Send less data in one \
             call: shorten the text or split the work across several calls."
            ),
            Self::QuotaExceeded { message, .. } => message.clone(),
            Self::RateLimited { retry_after } => {
                let ms = u64::try_from(retry_after.as_millis()).unwrap_or(u64::MAX);
                let secs = ms.div_ceil(1000).max(1);
                *retry_after_secs = Some(secs);
                extra.insert("retryAfterMs".into(), json!(ms));
                format!(
                    "This skill is being called too often for this user. Wait at least {secs} \
                 second(s) before calling it again, or answer without it."
                )
            }
            Self::PlatformError { message, retryable } => {
                extra.insert("retryable".into(), json!(retryable));
                if *retryable {
                    format!(
                        "The chat platform failed: {message}. This is temporary; you may call \
                     the skill again once."
                    )
                } else {
                    format!(
                        "The chat platform rejected the request: {message}. Calling again with \
                     the same parameters will fail the same way; change the request or \
                     answer without this skill."
                    )
                }
            }
            Self::SkillDisabled(name) => format!(
                "The skill \"{name}\" is disabled by the operator's configuration. Do not retry \
             it; answer the user without it."
            ),
            Self::Internal(_) => "An internal error occurred while running the skill. You may \
             retry once; if it fails again, answer the user without this skill."
                .to_owned(),
        }
    }
}

impl ErrorResponse {
    /// Tells the agent that this call ends its session (doom-loop protection): adds
    /// `"sessionTerminated": true` and a sentence to the message. The server applies it to every
    /// failed call that terminates the agent, whatever its code (a `RATE_LIMITED` 4th
    /// `send-reply` too). Applying it twice changes nothing.
    pub fn with_termination_notice(mut self) -> Self {
        if let Value::Object(body) = &mut self.body
            && body
                .insert("sessionTerminated".into(), Value::Bool(true))
                .is_none()
            && let Some(Value::String(message)) = body.get_mut("error")
        {
            message.push_str(
                " This session has made too many such calls and is being ended now; do not \
                 call any more skills.",
            );
        }
        self
    }

    /// Turns the mapped error into an axum response (JSON body, `Retry-After` when set).
    pub fn into_response(self) -> Response {
        let mut response = (self.status, axum::Json(self.body)).into_response();
        if let Some(secs) = self.retry_after_secs {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        response
    }
}

impl IntoResponse for SkillError {
    fn into_response(self) -> Response {
        self.to_http().into_response()
    }
}

/// What an agent is told when its call may not act for the session it names.
fn auth_message(failure: AuthFailure) -> &'static str {
    match failure {
        AuthFailure::SessionNotFound => {
            "This session is unknown, has already ended or expired after inactivity. Do not \
             retry: the conversation turn is over and no further skill calls can be made from it."
        }
        AuthFailure::TokenMissing => {
            "The request carried no caller token. Skill scripts send `Authorization: Bearer \
             $SKILL_API_TOKEN` automatically: run the skill through its script with the \
             environment you were started with."
        }
        AuthFailure::TokenMismatch => {
            "The caller token does not match this session. Use the SESSION_ID and \
             SKILL_API_TOKEN of your own environment unchanged; do not copy them from messages, \
             files or other sessions."
        }
        AuthFailure::WrongChannel => {
            "This request came on another session's channel: the connection it arrived on \
             belongs to a different session than the sessionId in the body. Use the SESSION_ID \
             of your own environment unchanged; a session can only act for itself."
        }
        AuthFailure::NoTurnOpen => {
            "No turn is open for this session: the message it answered is done, and nothing was \
             delivered or saved. Work that runs on after a turn (a background process) cannot \
             act; finish within the turn."
        }
    }
}

impl From<AuthFailure> for SkillError {
    fn from(failure: AuthFailure) -> Self {
        SkillError::Auth(failure)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn internal_error_hides_its_cause() {
        let err = SkillError::internal(anyhow::anyhow!("db password=hunter2 at /secret/path"));
        let http = err.to_http();
        assert_eq!(http.status, StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(http.code, "INTERNAL");
        let text = http.body.to_string();
        assert!(!text.contains("hunter2"), "{text}");
        assert!(!text.contains("/secret"), "{text}");
    }

    #[test]
    fn rate_limited_rounds_retry_after_up() {
        let http = SkillError::RateLimited {
            retry_after: Duration::from_millis(1500),
        }
        .to_http();
        assert_eq!(http.retry_after_secs, Some(2));
        assert_eq!(http.body["retryAfterMs"], 1500);
        let tiny = SkillError::RateLimited {
            retry_after: Duration::from_millis(1),
        }
        .to_http();
        assert_eq!(tiny.retry_after_secs, Some(1));
    }

    #[test]
    fn termination_notice_is_added_once_to_any_failure() {
        let quota = SkillError::QuotaExceeded {
            message: "Already sent.".into(),
            terminate: true,
        }
        .to_http()
        .with_termination_notice();
        assert_eq!(quota.body["sessionTerminated"], true);
        let text = quota.body["error"].as_str().unwrap_or_default();
        assert_eq!(text.matches("being ended now").count(), 1, "{text}");

        let limited = SkillError::RateLimited {
            retry_after: Duration::from_secs(3),
        }
        .to_http();
        assert!(limited.body.get("sessionTerminated").is_none());
        let limited = limited.with_termination_notice();
        assert_eq!(limited.code, "RATE_LIMITED");
        assert_eq!(limited.body["sessionTerminated"], true);
        assert_eq!(limited.retry_after_secs, Some(3));
        assert!(
            limited.body["error"]
                .as_str()
                .is_some_and(|e| e.ends_with("do not call any more skills."))
        );
    }

    #[test]
    fn every_body_has_the_failure_shape() {
        let all = [
            SkillError::InvalidJson("x".into()),
            SkillError::InvalidParams { details: vec![] },
            SkillError::Auth(AuthFailure::SessionNotFound),
            SkillError::Auth(AuthFailure::TokenMissing),
            SkillError::Auth(AuthFailure::TokenMismatch),
            SkillError::Auth(AuthFailure::WrongChannel),
            SkillError::Auth(AuthFailure::NoTurnOpen),
            SkillError::ForbiddenContext("x".into()),
            SkillError::UnknownSkill {
                name: "x".into(),
                available: vec![],
            },
            SkillError::NotFound("x".into()),
            SkillError::MethodNotAllowed,
            SkillError::BodyTooLarge { limit: 1 },
            SkillError::QuotaExceeded {
                message: "x".into(),
                terminate: false,
            },
            SkillError::RateLimited {
                retry_after: Duration::from_secs(1),
            },
            SkillError::PlatformError {
                message: "x".into(),
                retryable: true,
            },
            SkillError::SkillDisabled("x".into()),
            SkillError::internal(anyhow::anyhow!("x")),
        ];
        for err in all {
            let http = err.to_http();
            assert_eq!(http.body["success"], false);
            assert_eq!(http.body["code"], http.code);
            assert!(http.body["error"].as_str().is_some_and(|s| !s.is_empty()));
            assert!(http.status.is_client_error() || http.status.is_server_error());
        }
    }
}
