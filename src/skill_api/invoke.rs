//! The in-process call pipeline, one for every caller of a skill handler: the agent's calls
//! over HTTP (`server`, which adds authentication, de-duplication, the audit event and the
//! termination guard around it) and the user commands humans run (`handlers::commands`).
//!
//! In this order: whether the skill may run at all — enabled by the configuration (503
//! `SKILL_DISABLED`), allowed for the session's purpose (a maintenance run reaches the
//! memory skills only, a scheduled run none that keeps a user's data, 403 `FORBIDDEN_CONTEXT`)
//! and by its place's rule (`places[].skills`,
//! `places[].memory`; 403 `FORBIDDEN_CONTEXT`) — checked here only, for every caller; the
//! doom-loop count of a counted skill (so an attempt the rate limit, the schema or the quota
//! refuses still counts), the per-(skill, user) rate limit, parameter
//! preparation (schema defaults filled, validation, control characters refused), the handler
//! under the handler time-out. An internal failure is logged here, once.

use serde_json::{Map, Value};

use super::error::SkillError;
use super::handler::{CallContext, RegisteredSkill};
use super::state::SkillApiState;

/// Runs `skill` for the session of `ctx` with the caller's raw `params`.
pub async fn invoke(
    state: &SkillApiState,
    skill: &RegisteredSkill,
    ctx: &CallContext,
    params: Map<String, Value>,
) -> Result<Value, SkillError> {
    let result = run(state, skill, ctx, params).await;
    if let Err(SkillError::Internal(cause)) = &result {
        tracing::error!(
            session_id = %ctx.session_id(),
            skill = skill.name(),
            error = %format!("{cause:#}"),
            "skill call failed internally"
        );
    }
    result
}

async fn run(
    state: &SkillApiState,
    skill: &RegisteredSkill,
    ctx: &CallContext,
    params: Map<String, Value>,
) -> Result<Value, SkillError> {
    if !skill.spec().enabled {
        return Err(SkillError::SkillDisabled(skill.name().to_owned()));
    }
    let purpose = &ctx.session().purpose;
    if !purpose.allows_skill(skill.name()) {
        return Err(SkillError::ForbiddenContext(purpose.refusal(skill.name())));
    }
    let place = &ctx.session().place;
    if !place.allows_skill(skill.name()) {
        return Err(SkillError::ForbiddenContext(format!(
            "{} is not available here: the place's rule ({}) does not allow it",
            skill.name(),
            place.name
        )));
    }
    if let Some(limit) = skill.handler().stops_agent_at() {
        ctx.count_attempt(limit);
    }
    if let Some(limit) = &skill.spec().rate_limit {
        let session = ctx.session();
        state
            .rate_limiter()
            .check(
                skill.name(),
                session.origin.platform.as_str(),
                session.origin.user_id.as_str(),
                limit,
            )
            .map_err(|retry_after| SkillError::RateLimited { retry_after })?;
    }
    let params = skill.prepare_params(params)?;
    let timeout = state.settings().handler_timeout;
    match tokio::time::timeout(timeout, skill.handler().call(ctx, params)).await {
        Ok(result) => result,
        Err(_) => Err(SkillError::internal(anyhow::anyhow!(
            "skill handler did not finish within {timeout:?}"
        ))),
    }
}
