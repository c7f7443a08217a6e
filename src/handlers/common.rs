//! Plumbing shared by the handlers: the shared dependencies, typed parameters, the mapping of
//! platform and store failures to Skill API errors (with messages written for the agent), and the
//! outgoing-text pipeline (strip XML-like tags, unescape `\n`, reject empty text).

use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde_json::Value;

use super::{Clock, HandlerDeps};
use crate::config::{MemoryConfig, RemindersConfig, SkillsConfig};
use crate::platform::{PlatformAdapter, PlatformError, PlatformRegistry};
use crate::session::SessionContext;
use crate::skill_api::{CallContext, ParamProblem, SkillError};
use crate::store::{Scope, Store, StoreError, WorkspaceKey};

/// The dependencies every handler holds (one `Arc` shared by all of them).
#[derive(Debug)]
pub(crate) struct Shared {
    pub store: Store,
    pub platforms: PlatformRegistry,
    pub skills_config: SkillsConfig,
    pub reminders_config: RemindersConfig,
    pub memory_config: MemoryConfig,
    pub clock: Clock,
    pub semantic: Option<crate::embeddings::Semantic>,
    pub speaker: Option<crate::voice::Speaker>,
}

impl Shared {
    pub fn new(deps: HandlerDeps) -> Self {
        Self {
            store: deps.store,
            platforms: deps.platforms,
            skills_config: deps.skills_config,
            reminders_config: deps.reminders_config,
            memory_config: deps.memory_config,
            clock: deps.clock,
            semantic: deps.semantic,
            speaker: deps.speaker,
        }
    }

    /// The adapter of the session's platform. A session on a platform that is not configured is
    /// a wiring bug (the router only starts sessions for running adapters): 500.
    pub fn adapter(
        &self,
        session: &SessionContext,
    ) -> Result<Arc<dyn PlatformAdapter>, SkillError> {
        self.platforms
            .require(session.origin.platform)
            .map_err(|_| {
                SkillError::internal(anyhow::anyhow!(
                    "no adapter for platform {} of a live session",
                    session.origin.platform
                ))
            })
    }
}

/// The handlers' shared dependencies, cloned into each handler.
pub(crate) type Deps = Arc<Shared>;

/// Deserialises schema-validated parameters into the handler's typed form. A mismatch means the
/// manifest and the handler disagree; it is reported as `INVALID_PARAMS` rather than a panic.
pub(crate) fn params<T: DeserializeOwned>(params: Value) -> Result<T, SkillError> {
    serde_json::from_value(params).map_err(|e| invalid("", e.to_string()))
}

/// `INVALID_PARAMS` with one problem at `path` (a JSON Pointer such as `/message`).
pub(crate) fn invalid(path: &str, problem: impl Into<String>) -> SkillError {
    SkillError::InvalidParams {
        details: vec![ParamProblem {
            path: path.to_owned(),
            problem: problem.into(),
        }],
    }
}

/// The memory/reminder owner of the session: `platform/userId`.
pub(crate) fn workspace_key(session: &SessionContext) -> Result<WorkspaceKey, SkillError> {
    WorkspaceKey::new(
        session.origin.platform.as_str(),
        session.origin.user_id.as_str(),
    )
    .map_err(SkillError::internal)
}

/// Which memories the session may see: private ones only in a DM.
pub(crate) fn scope(session: &SessionContext) -> Scope {
    Scope::for_dm(session.origin.is_dm)
}

/// The content pipeline for text that goes to a platform: [`crate::text::process_outgoing`];
/// an empty result is `INVALID_PARAMS` at `path`.
pub(crate) fn outgoing_text(raw: &str, path: &str) -> Result<String, SkillError> {
    let text = crate::text::process_outgoing(raw);
    if text.is_empty() {
        return Err(invalid(
            path,
            "the text is empty once XML-like tags and surrounding whitespace are removed; write \
             the actual words for the user into the payload file and call the skill again",
        ));
    }
    Ok(text)
}

/// A platform failure as the agent sees it: 502 `PLATFORM_ERROR` with `retryable`. A platform
/// rate limit is reported as retryable with the wait in the message (the agent's own pacing is
/// the Skill API's 429; this one is the platform's).
pub(crate) fn platform_error(error: PlatformError) -> SkillError {
    let retryable = error.is_retryable();
    let message = match &error {
        PlatformError::RateLimited { retry_after } => format!(
            "the platform is rate limiting the bot; wait at least {} second(s) before trying \
             again",
            retry_after.as_millis().div_ceil(1000).max(1)
        ),
        other => other.to_string(),
    };
    tracing::debug!(kind = error.kind(), retryable, "platform call failed");
    SkillError::PlatformError { message, retryable }
}

/// A platform failure where "not found" / "invalid id" mean the id the agent passed is wrong
/// (404 `NOT_FOUND`), everything else as [`platform_error`].
pub(crate) fn platform_lookup_error(error: PlatformError, what: &str) -> SkillError {
    match error {
        PlatformError::NotFound(_) | PlatformError::InvalidId(_) => {
            SkillError::NotFound(format!("{what} was not found in this conversation"))
        }
        other => platform_error(other),
    }
}

/// A store failure: user-facing variants keep their meaning, the rest become 500 (logged by the
/// server, never shown).
pub(crate) fn store_error(error: StoreError, not_found: &str) -> SkillError {
    match error {
        StoreError::NotFound => SkillError::NotFound(not_found.to_owned()),
        StoreError::InvalidReference { ids } => SkillError::NotFound(format!(
            "these memory ids do not exist for this user (or are private and this is not a \
             direct message): {}",
            ids.join(", ")
        )),
        StoreError::Invalid(message) => invalid("", message),
        StoreError::LimitReached { limit } => SkillError::QuotaExceeded {
            message: format!(
                "The user already has {limit} pending reminders, the maximum. Tell the user; \
                 they can cancel one (list-reminders shows them, cancel-reminder removes one) \
                 before a new one can be set."
            ),
            terminate: false,
        },
        other => SkillError::internal(other),
    }
}

/// 403 `FORBIDDEN_CONTEXT` unless the session is a direct message.
pub(crate) fn require_dm(ctx: &CallContext, what: &str) -> Result<(), SkillError> {
    if ctx.session().origin.is_dm {
        Ok(())
    } else {
        Err(SkillError::ForbiddenContext(format!(
            "{what} only works in a direct message with the user; if the user wants it, suggest \
             they send you a DM"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn empty_text_after_processing_is_invalid() {
        assert!(matches!(
            outgoing_text("<reply>  </reply>\\n ", "/message"),
            Err(SkillError::InvalidParams { details }) if details[0].path == "/message"
        ));
        assert_eq!(
            outgoing_text("<reply>Hi\\nthere</reply>", "/message").ok(),
            Some("Hi\nthere".to_owned())
        );
    }

    #[test]
    fn platform_errors_carry_retryable() {
        let limited = platform_error(PlatformError::RateLimited {
            retry_after: Duration::from_millis(1500),
        });
        assert!(matches!(
            &limited,
            SkillError::PlatformError { retryable: true, message } if message.contains("2 second")
        ));
        assert!(matches!(
            platform_error(PlatformError::Forbidden("blocked".into())),
            SkillError::PlatformError {
                retryable: false,
                ..
            }
        ));
        assert!(matches!(
            platform_lookup_error(PlatformError::InvalidId("x".into()), "message x"),
            SkillError::NotFound(_)
        ));
    }

    #[test]
    fn store_limits_map_to_quota() {
        assert!(matches!(
            store_error(StoreError::LimitReached { limit: 20 }, "x"),
            SkillError::QuotaExceeded {
                terminate: false,
                ..
            }
        ));
        assert!(matches!(
            store_error(StoreError::Closed, "x"),
            SkillError::Internal(_)
        ));
    }
}
