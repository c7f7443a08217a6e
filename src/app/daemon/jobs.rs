//! The scheduled jobs started last: reminder delivery and memory maintenance, each only when
//! its section enables it, the daily retention job, and the operator schedules when any is
//! configured.

use std::sync::Arc;

use super::Ctx;
use crate::conversation::interaction::Interactions;
use crate::conversation::launch::Launcher;
use crate::conversation::prompts::PromptLibrary;
use crate::gateway::Gateway;
use crate::maintenance::{Maintenance, MaintenanceMetrics};
use crate::platform::PlatformRegistry;
use crate::privacy::retention::Retention;
use crate::reminders::{ReminderMetrics, ReminderScheduler};
use crate::schedules::{Schedule, ScheduleMetrics, Scheduler, SchedulerParts};

/// The reminder scheduler, when `reminders.enabled`.
pub(super) fn start_reminders(ctx: Ctx<'_>, platforms: &PlatformRegistry) {
    if ctx.config.reminders.enabled {
        let scheduler = ReminderScheduler::new(
            ctx.store.clone(),
            platforms.clone(),
            ctx.config.reminders.clone(),
            ReminderMetrics::new(ctx.metrics),
        );
        ctx.shutdown
            .spawn("reminders", scheduler.run(ctx.shutdown.draining()));
    }
}

/// `memory.maintenance`: the consolidation scheduler, when enabled.
pub(super) fn start_maintenance(
    ctx: Ctx<'_>,
    launcher: Arc<Launcher>,
    prompts: Arc<PromptLibrary>,
    gateway: &Gateway,
) {
    if ctx.config.memory.maintenance.enabled {
        let job = Maintenance::new(
            launcher,
            ctx.store.clone(),
            prompts,
            gateway.budget().clone(),
            ctx.config.memory.maintenance.clone(),
            MaintenanceMetrics::new(ctx.metrics),
        );
        ctx.shutdown
            .spawn("memory_maintenance", job.run(ctx.shutdown.draining()));
    }
}

/// `retention`: the daily job deleting what is kept no longer (`privacy::retention`).
pub(super) fn start_retention(ctx: Ctx<'_>) {
    let job = Retention::new(
        ctx.store.clone(),
        super::workspaces_root(ctx.config),
        ctx.config.retention.clone(),
    );
    ctx.shutdown
        .spawn("retention", job.run(ctx.shutdown.draining()));
}

/// `schedules`: the scheduler of the configured schedules (none yet is fine: a reload may add
/// them), running their turns through `interactions`, each holding one of the conversations'
/// `permits` while it runs. Its loop starts with [`start_schedules`].
pub(super) fn schedules(
    ctx: Ctx<'_>,
    interactions: &Interactions,
    permits: Arc<tokio::sync::Semaphore>,
) -> anyhow::Result<Scheduler> {
    let config = ctx.config;
    let schedules = config
        .schedules
        .iter()
        .enumerate()
        .map(|(i, s)| {
            Schedule::new(s, &config.prompts.dir)
                .map_err(|e| anyhow::anyhow!("schedules.{i} ({}): {e}", s.name))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let metrics = ScheduleMetrics::new(
        ctx.metrics,
        config.schedules.iter().map(|s| s.name.as_str()),
    );
    Ok(Scheduler::new(SchedulerParts {
        schedules,
        store: ctx.store.clone(),
        runs: Arc::new(interactions.clone()),
        metrics,
        draining: ctx.shutdown.draining(),
        stop: ctx.shutdown.stop(),
        permits,
    }))
}

/// Starts the schedules' loop.
pub(super) fn start_schedules(ctx: Ctx<'_>, scheduler: Scheduler) {
    ctx.shutdown.spawn("schedules", scheduler.run());
}
