//! The rules of a maintenance session (the memory consolidation job) for the memory handlers,
//! in one place. Whatever the agent asks:
//! * a summary is saved at the run's visibility (public and private memories are consolidated
//!   in separate runs, and a public run cannot even see private memories);
//! * only memories of the run's visibility created before its cut-off may be superseded or
//!   patched (younger ones are left alone);
//! * visibility never changes;
//! * in a dry run nothing is written: the handler logs and answers what it would have done.

use serde_json::{Value, json};

use super::common::{Deps, scope, store_error, workspace_key};
use crate::session::MaintenancePolicy;
use crate::skill_api::{CallContext, SkillError};

/// Refuses `ids` that this maintenance run may not touch: not visible (404), of the other
/// visibility, or created at or after the run's cut-off (403, naming the id and why).
pub(crate) async fn check_targets(
    deps: &Deps,
    ctx: &CallContext,
    policy: &MaintenancePolicy,
    ids: &[String],
) -> Result<(), SkillError> {
    let session = ctx.session();
    let ws = workspace_key(session)?;
    for id in ids {
        let memory = deps
            .store
            .get_memory(&ws, id, scope(session))
            .await
            .map_err(|e| store_error(e, "memory"))?
            .ok_or_else(|| SkillError::NotFound(format!("memory {id} does not exist")))?;
        if memory.visibility != policy.visibility {
            return Err(SkillError::ForbiddenContext(format!(
                "memory {id} is {}; this run consolidates only {} memories",
                memory.visibility.as_str(),
                policy.visibility.as_str()
            )));
        }
        if memory.created_at >= policy.created_before {
            return Err(SkillError::ForbiddenContext(format!(
                "memory {id} is too recent to be merged or changed; leave it as it is"
            )));
        }
    }
    Ok(())
}

/// The answer of a dry-run call (`would` says what would have happened), logged at info and
/// counted in the session's tally like the real thing.
pub(crate) fn dry_run(ctx: &CallContext, saved: usize, disabled: &[String], would: Value) -> Value {
    tracing::info!(
        session_id = %ctx.session_id(),
        skill = ctx.skill(),
        would = %would,
        "memory maintenance dry run: nothing written"
    );
    ctx.with_state(|s| s.count_memory_changes(saved, disabled.len()));
    json!({"dryRun": true, "wouldDo": would, "note": "dry run: nothing was saved or changed"})
}
