//! Memory maintenance (consolidation): in the configured quiet hours, each workspace with more
//! than `memory.maintenance.minMemories` enabled memories and no run within `intervalHours` gets
//! an agent run that merges its old memories into summaries, superseding (disabling) what they
//! replace. Off unless `memory.maintenance.enabled`.
//!
//! * `run` — one run (one workspace, one visibility): picks the memories, starts the agent
//!   through the conversation's [`Launcher`] with a maintenance session, records the result.
//! * `prompt` — the run's prompt: `prompts/maintenance.md` plus the memories as data.
//! * `metrics` — runs by outcome, memories read/saved/disabled.
//!
//! What a maintenance session may do is enforced where the calls arrive, not here: the Skill
//! API refuses every skill but the memory ones (`SessionPurpose::allows_skill`), and the memory
//! handlers keep to the run's visibility, its age cut-off and its dry-run flag
//! (`handlers::upkeep`). The scheduler runs one workspace at a time, so a run never competes
//! with another for the machine; conversations keep their own concurrency limit.

mod metrics;
pub mod prompt;
mod run;

use std::sync::Arc;
use std::time::Duration;

use chrono::{Local, Utc};
use tokio_util::sync::CancellationToken;

pub use metrics::{MaintenanceMetrics, RunOutcome};

use crate::config::MaintenanceConfig;
use crate::conversation::Launcher;
use crate::conversation::prompts::PromptLibrary;
use crate::gateway::Budget;
use crate::store::Store;

/// Longest sleep before the clock is looked at again (guards against clock changes).
const MAX_SLEEP: Duration = Duration::from_secs(3600);
/// Inside the window with nothing due: look again after this long.
const RECHECK: Duration = Duration::from_secs(600);
/// Workspaces taken per look.
const BATCH: u32 = 16;

/// The maintenance job: the scheduler ([`run`](Self::run)) and its runs
/// ([`maintain`](Self::maintain)).
#[derive(Clone)]
pub struct Maintenance {
    launcher: Arc<Launcher>,
    store: Store,
    prompts: Arc<PromptLibrary>,
    budget: Budget,
    config: MaintenanceConfig,
    metrics: MaintenanceMetrics,
}

impl std::fmt::Debug for Maintenance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Maintenance")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Maintenance {
    /// A job starting its agents through `launcher`, with `config` (`memory.maintenance`).
    pub fn new(
        launcher: Arc<Launcher>,
        store: Store,
        prompts: Arc<PromptLibrary>,
        budget: Budget,
        config: MaintenanceConfig,
        metrics: MaintenanceMetrics,
    ) -> Self {
        Self {
            launcher,
            store,
            prompts,
            budget,
            config,
            metrics,
        }
    }

    /// The scheduler: sleeps until the quiet hours open, then maintains the due workspaces one
    /// after the other while the window lasts, and looks again every few minutes. Returns when
    /// `draining` is cancelled (a running agent is stopped with it).
    pub async fn run(self, draining: CancellationToken) -> anyhow::Result<()> {
        tracing::info!(
            quiet_hours = %self.config.quiet_hours,
            min_memories = self.config.min_memories,
            interval_hours = self.config.interval_hours,
            dry_run = self.config.dry_run,
            "memory maintenance scheduled"
        );
        loop {
            let wait = self
                .config
                .quiet_hours
                .until_open(Local::now().naive_local());
            let wait = if wait.is_zero() {
                self.maintain_due(&draining).await
            } else {
                wait.min(MAX_SLEEP)
            };
            tokio::select! {
                _ = draining.cancelled() => return Ok(()),
                _ = tokio::time::sleep(wait) => {}
            }
        }
    }

    /// Maintains the workspaces due now, while the window lasts; returns how long to wait
    /// before looking again.
    async fn maintain_due(&self, draining: &CancellationToken) -> Duration {
        let not_since = Utc::now() - chrono::Duration::hours(i64::from(self.config.interval_hours));
        let due = match self
            .store
            .maintenance_due(u64::from(self.config.min_memories), not_since, BATCH)
            .await
        {
            Ok(due) => due,
            Err(e) => {
                tracing::error!(error = %e, "cannot find the workspaces due for memory maintenance");
                return RECHECK;
            }
        };
        if due.is_empty() {
            return RECHECK;
        }
        for ws in &due {
            if draining.is_cancelled() || !self.config.quiet_hours.contains(Local::now().time()) {
                return Duration::ZERO;
            }
            self.maintain(ws, draining).await;
        }
        // A full batch: more may be due, look again at once (each maintained workspace has a
        // run recorded, so it is not picked again within the interval). Otherwise (or when a
        // record could not be stored) look again later.
        if due.len() == BATCH as usize {
            Duration::ZERO
        } else {
            RECHECK
        }
    }
}
