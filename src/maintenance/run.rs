//! One maintenance run: one workspace, one visibility. The daemon picks the memories (enabled,
//! of that visibility, older than `minAgeDays`, oldest first), starts an agent session through
//! the same [`Launcher`] a conversation uses (so the same sandbox, socket and model gateway)
//! with a [`SessionPurpose::Maintenance`] context — no channel, no message, only the memory
//! skills, the handlers holding it to the [`MaintenancePolicy`] — prompts it once, and records
//! what it did.

use std::sync::Arc;

use chrono::Utc;
use tokio_util::sync::CancellationToken;

use super::metrics::RunOutcome;
use super::prompt;
use crate::agent::Outcome;
use crate::platform::{Origin, PlatformKind};
use crate::session::{MaintenancePolicy, SessionContext, SessionPurpose};
use crate::store::{MaintenanceRun, Memory, Visibility, WorkspaceKey};

use super::Maintenance;

/// The fewest memories worth a run: one memory has nothing to merge with.
const MIN_CANDIDATES: usize = 2;

impl Maintenance {
    /// Consolidates `ws`'s public memories, then its private ones, each in a run of its own,
    /// and returns both records (also stored, logged and counted).
    pub async fn maintain(
        &self,
        ws: &WorkspaceKey,
        stop: &CancellationToken,
    ) -> Vec<MaintenanceRun> {
        let mut runs = Vec::with_capacity(2);
        for visibility in [Visibility::Public, Visibility::Private] {
            if stop.is_cancelled() {
                break;
            }
            let run = self.pass(ws, visibility, stop).await;
            self.finish(&run).await;
            runs.push(run);
        }
        runs
    }

    /// One run: the candidates, the session's context and prompt, then the agent's one turn;
    /// the record says how far it got.
    async fn pass(
        &self,
        ws: &WorkspaceKey,
        visibility: Visibility,
        stop: &CancellationToken,
    ) -> MaintenanceRun {
        let mut run = self.new_record(ws, visibility);
        let created_before =
            run.started_at - chrono::Duration::days(i64::from(self.config.min_age_days));
        let Some((memories, total)) = self.candidates(&mut run, created_before).await else {
            return run;
        };
        let Some(context) = self.context(ws, visibility, created_before) else {
            return run;
        };
        let Some(template) = self.template().await else {
            return run;
        };
        let resources = match self.launcher.open(context).await {
            Ok(r) => r,
            Err(e) => {
                tracing::error!(workspace = %ws, error = %e, "cannot start a maintenance session");
                return run;
            }
        };
        run.read = memories.len() as u64;
        let handle = resources.registered.handle.clone();
        let session_id = handle.id().clone();
        let spec = self.launcher.agent_spec(&resources, None);
        let terminate = stop.child_token();
        tracing::info!(
            workspace = %ws,
            session_id = %session_id,
            visibility = visibility.as_str(),
            memories = memories.len(),
            dry_run = self.config.dry_run,
            "memory maintenance started"
        );
        let outcome = self
            .launcher
            // Nobody is waiting for an answer: a turn that ends is a run that completed.
            .one_turn(spec, &terminate, Arc::new(|| false), || {
                prompt::build(
                    &template,
                    &session_id,
                    &self.launcher.env.skills_dir,
                    visibility,
                    &memories,
                    total,
                )
            })
            .await;
        let state = handle.state();
        resources.release().await;
        run.outcome = outcome_of(&outcome).as_str().into();
        run.saved = u64::from(state.memories_saved);
        run.disabled = u64::from(state.memories_disabled);
        run.tokens = state.model_tokens;
        run.finished_at = Utc::now();
        run
    }

    /// The record of a run starting now, `Failed` until it gets further.
    fn new_record(&self, ws: &WorkspaceKey, visibility: Visibility) -> MaintenanceRun {
        let started_at = Utc::now();
        MaintenanceRun {
            workspace: ws.clone(),
            visibility,
            started_at,
            finished_at: started_at,
            outcome: RunOutcome::Failed.as_str().into(),
            dry_run: self.config.dry_run,
            read: 0,
            saved: 0,
            disabled: 0,
            tokens: 0,
        }
    }

    /// The memories to maintain (and how many there are in all), or `None` with the run's
    /// outcome set: too few of them, the user's budget used up, or a store error.
    async fn candidates(
        &self,
        run: &mut MaintenanceRun,
        created_before: chrono::DateTime<Utc>,
    ) -> Option<(Vec<Memory>, u64)> {
        let ws = &run.workspace;
        let (memories, total) = match self
            .store
            .maintenance_candidates(
                ws,
                run.visibility,
                created_before,
                self.config.max_memories_per_run,
            )
            .await
        {
            Ok(found) => found,
            Err(e) => {
                tracing::error!(workspace = %ws, error = %e, "cannot read the memories to maintain");
                return None;
            }
        };
        if memories.len() < MIN_CANDIDATES {
            run.outcome = RunOutcome::Skipped.as_str().into();
            return None;
        }
        if self.budget.check(&self.store, ws).await.is_err() {
            run.outcome = RunOutcome::OverBudget.as_str().into();
            return None;
        }
        Some((memories, total))
    }

    /// The maintenance session's context: no channel, no message, the policy of this
    /// visibility. `None` (logged) when the workspace cannot be mapped.
    fn context(
        &self,
        ws: &WorkspaceKey,
        visibility: Visibility,
        created_before: chrono::DateTime<Utc>,
    ) -> Option<SessionContext> {
        let Ok(platform) = ws.platform().parse::<PlatformKind>() else {
            tracing::error!(workspace = %ws, "the workspace's platform is unknown; not maintained");
            return None;
        };
        let workspace = match self.launcher.workspaces.path_for(platform, ws.user_id()) {
            Ok(path) => path,
            Err(e) => {
                tracing::error!(workspace = %ws, error = %e, "cannot map the workspace");
                return None;
            }
        };
        let is_dm = visibility == Visibility::Private;
        Some(SessionContext {
            // A maintenance run answers in no place: its purpose limits it to memory skills.
            place: crate::session::PlaceGrant::default(),
            purpose: SessionPurpose::Maintenance(MaintenancePolicy {
                visibility,
                dry_run: self.config.dry_run,
                created_before,
            }),
            origin: Origin {
                platform,
                channel_id: String::new().into(),
                guild_id: None,
                user_id: ws.user_id().into(),
                username: String::new(),
                is_dm,
            },
            trigger_message_id: None,
            workspace,
        })
    }

    /// The prompt template: `prompts/maintenance.md`, else the built-in one. `None` (logged)
    /// when the file cannot be read.
    async fn template(&self) -> Option<String> {
        match self.prompts.render_template("maintenance").await {
            Ok(Some(text)) => Some(text),
            Ok(None) => Some(prompt::BUILTIN.to_owned()),
            Err(e) => {
                tracing::error!(error = %e, "cannot read prompts/maintenance.md");
                None
            }
        }
    }

    /// Stores, logs and counts a finished run.
    async fn finish(&self, run: &MaintenanceRun) {
        self.metrics.run(&run.outcome, 1);
        self.metrics.memories("read", run.read);
        self.metrics.memories("saved", run.saved);
        self.metrics.memories("disabled", run.disabled);
        let elapsed_ms = (run.finished_at - run.started_at).num_milliseconds().max(0);
        tracing::info!(
            workspace = %run.workspace,
            visibility = run.visibility.as_str(),
            outcome = %run.outcome,
            dry_run = run.dry_run,
            read = run.read,
            saved = run.saved,
            disabled = run.disabled,
            tokens = run.tokens,
            elapsed_ms,
            "memory maintenance finished"
        );
        if let Err(e) = self.store.record_maintenance_run(run.clone()).await {
            tracing::error!(workspace = %run.workspace, error = %e, "cannot record the maintenance run");
        }
    }
}

/// A run's outcome: the agent's turn ended (whatever it did) → `Completed`.
fn outcome_of(outcome: &Outcome) -> RunOutcome {
    match outcome {
        Outcome::Responded { .. } | Outcome::NoResponse { .. } => RunOutcome::Completed,
        Outcome::TimedOut { .. } => RunOutcome::TimedOut,
        Outcome::Cancelled | Outcome::Terminated => RunOutcome::Cancelled,
        Outcome::Failed { .. } | Outcome::MemoryLimit => RunOutcome::Failed,
    }
}
