//! Operator schedules (`schedules:` in the configuration, `docs/SCHEDULES.md`): the bot
//! speaks first. The [`Scheduler`] sleeps until the next schedule is due, then starts its run —
//! an agent turn in the schedule's place (`conversation::scheduled`) — and records it.
//!
//! * `schedule` — a configured schedule made ready to run, or why it cannot.
//! * `plan` — what a schedule does at a start: keep, compute, or catch up what it missed.
//! * `metrics` — runs by schedule and outcome.
//!
//! Durable: each schedule's next run is in the store, computed before its run starts, so a
//! crash during a run never runs it twice, and a run still going when the daemon stopped is
//! recorded as interrupted at the next start. A run missed while the daemon was down runs once
//! at start when it is young enough, else it is recorded as skipped. A schedule's runs never
//! overlap: an occurrence that falls due while the previous run is still going is recorded as
//! skipped (`skipped_overlap`). Every run and skip is a row of `schedule_runs`, a log record and
//! a count in `air_friends_schedule_runs_total`. A reload replaces the schedules in force
//! ([`Scheduler::replace`]): unchanged ones keep their next run.

mod metrics;
mod plan;
mod schedule;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub use metrics::ScheduleMetrics;
pub use plan::{AtStart, at_start};
pub use schedule::{Schedule, ScheduleError};

use crate::conversation::interaction::Interactions;
use crate::conversation::scheduled::{ScheduledEnd, ScheduledTask};
use crate::store::{RunEnd, RunTrigger, Store};
use crate::sync::Recover;

/// Longest sleep before the clock is looked at again (guards against clock changes).
const MAX_SLEEP: Duration = Duration::from_secs(3600);
/// The outcome of an occurrence missed while the daemon was down.
pub const SKIPPED_MISSED: &str = "skipped_missed";
/// The outcome of an occurrence that fell due while the previous run still went on.
pub const SKIPPED_OVERLAP: &str = "skipped_overlap";

/// Runs one scheduled task: the conversation pipeline, or a test double.
#[async_trait]
pub trait ScheduledRuns: Send + Sync + 'static {
    /// Runs `task` to its end (or until `stop`).
    async fn run_scheduled(&self, task: &ScheduledTask, stop: &CancellationToken) -> ScheduledEnd;
}

#[async_trait]
impl ScheduledRuns for Interactions {
    async fn run_scheduled(&self, task: &ScheduledTask, stop: &CancellationToken) -> ScheduledEnd {
        self.scheduled(task, stop).await
    }
}

/// Why a run asked for by hand did not start.
#[derive(Debug, thiserror::Error)]
pub enum TriggerError {
    /// No schedule has this name.
    #[error("no schedule is named {0:?}")]
    Unknown(String),
    /// Its previous run is still going.
    #[error("the schedule {0:?} is running now")]
    Running(String),
    /// The daemon is shutting down.
    #[error("the daemon is shutting down")]
    Draining,
}

impl TriggerError {
    /// The error's code (the control socket's answer).
    pub fn code(&self) -> &'static str {
        match self {
            Self::Unknown(_) => "unknown_schedule",
            Self::Running(_) => "running",
            Self::Draining => "draining",
        }
    }
}

/// What the scheduler is built from.
pub struct SchedulerParts {
    /// The schedules (disabled ones run only by hand).
    pub schedules: Vec<Schedule>,
    /// Where next runs and run records are kept.
    pub store: Store,
    /// Runs a task.
    pub runs: Arc<dyn ScheduledRuns>,
    /// Where runs are counted.
    pub metrics: ScheduleMetrics,
    /// No run starts once this is cancelled (the daemon drains).
    pub draining: CancellationToken,
    /// Running agents stop when this is cancelled (the end of the shutdown grace period).
    pub stop: CancellationToken,
    /// The cap on agent sessions running at once, shared with the conversations
    /// (`agent.maxConcurrentSessions`): a run waits for a permit.
    pub permits: Arc<tokio::sync::Semaphore>,
}

struct Inner {
    /// The schedules in force (a reload replaces them, `Scheduler::replace`).
    schedules: Mutex<Arc<[Arc<Schedule>]>>,
    /// Woken when the schedules are replaced.
    replaced: tokio::sync::Notify,
    store: Store,
    runs: Arc<dyn ScheduledRuns>,
    metrics: ScheduleMetrics,
    draining: CancellationToken,
    stop: CancellationToken,
    permits: Arc<tokio::sync::Semaphore>,
    running: Mutex<HashSet<String>>,
    last_run: Mutex<HashMap<String, DateTime<Utc>>>,
    tasks: TaskTracker,
}

/// The scheduler (cheap to clone).
#[derive(Clone)]
pub struct Scheduler {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Scheduler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scheduler")
            .field("schedules", &self.inner.schedules.locked().len())
            .finish_non_exhaustive()
    }
}

impl Scheduler {
    /// A scheduler of `parts.schedules`.
    pub fn new(parts: SchedulerParts) -> Self {
        Self {
            inner: Arc::new(Inner {
                schedules: Mutex::new(parts.schedules.into_iter().map(Arc::new).collect()),
                replaced: tokio::sync::Notify::new(),
                store: parts.store,
                runs: parts.runs,
                metrics: parts.metrics,
                draining: parts.draining,
                stop: parts.stop,
                permits: parts.permits,
                running: Mutex::new(HashSet::new()),
                last_run: Mutex::new(HashMap::new()),
                tasks: TaskTracker::new(),
            }),
        }
    }

    /// Runs the schedules until the daemon drains, then waits for the runs under way.
    pub async fn run(self) -> anyhow::Result<()> {
        let mut plan = self.start_up(Utc::now()).await;
        let inner = &self.inner;
        loop {
            let now = Utc::now();
            for (schedule, slot) in &mut plan {
                let Some(due) = *slot else { continue };
                if due > now {
                    continue;
                }
                // The next run is kept before this one starts: a crash during it never runs
                // it again.
                *slot = schedule.timetable.next_after(now.max(due));
                self.save_next(schedule, *slot).await;
                self.launch(schedule.clone(), due, RunTrigger::Timetable);
            }
            let wait = plan
                .iter()
                .filter_map(|(_, at)| *at)
                .min()
                .map_or(MAX_SLEEP, |at| {
                    (at - Utc::now())
                        .to_std()
                        .unwrap_or(Duration::ZERO)
                        .min(MAX_SLEEP)
                });
            tokio::select! {
                _ = inner.draining.cancelled() => break,
                _ = tokio::time::sleep(wait) => {}
                _ = inner.replaced.notified() => plan = self.replan(plan).await,
            }
        }
        inner.tasks.close();
        inner.tasks.wait().await;
        Ok(())
    }

    /// Puts `schedules` in force (a reload): a schedule whose timetable is unchanged keeps its
    /// next run; a new, changed or re-enabled one runs next from now; a removed one runs no
    /// more (a run under way ends as it would).
    pub fn replace(&self, schedules: Vec<Schedule>) {
        *self.inner.schedules.locked() = schedules.into_iter().map(Arc::new).collect();
        self.inner.replaced.notify_one();
    }

    /// The schedules in force.
    fn current(&self) -> Arc<[Arc<Schedule>]> {
        self.inner.schedules.locked().clone()
    }

    /// The plan for the schedules now in force, from the one before a replacement.
    async fn replan(&self, old: Plan) -> Plan {
        let now = Utc::now();
        let mut plan = Vec::new();
        for schedule in self.current().iter() {
            let kept = old.iter().find(|(s, _)| {
                s.name() == schedule.name()
                    && s.timetable_key() == schedule.timetable_key()
                    && s.config.enabled
            });
            let at = match kept {
                _ if !schedule.config.enabled => None,
                Some((_, at)) => *at,
                None => {
                    let at = schedule.timetable.next_after(now);
                    self.save_next(schedule, at).await;
                    at
                }
            };
            plan.push((schedule.clone(), at));
        }
        tracing::info!(schedules = plan.len(), "schedules replaced");
        plan
    }

    /// Runs schedule `name` now, outside its timetable, and answers how the run ended.
    pub async fn run_now(&self, name: &str) -> Result<ScheduledEnd, TriggerError> {
        let inner = &self.inner;
        let schedule = self
            .current()
            .iter()
            .find(|s| s.name() == name)
            .cloned()
            .ok_or_else(|| TriggerError::Unknown(name.to_owned()))?;
        if inner.draining.is_cancelled() {
            return Err(TriggerError::Draining);
        }
        let run = self
            .spawn(schedule, Utc::now(), RunTrigger::Manual)
            .ok_or_else(|| TriggerError::Running(name.to_owned()))?;
        run.await.map_err(|_| TriggerError::Draining)
    }

    /// The schedules' state after a stop: runs left `running` are interrupted, each enabled
    /// schedule's next run is kept or computed, and what was missed meanwhile is caught up or
    /// skipped (`plan::at_start`). Answers each schedule's next run.
    async fn start_up(&self, now: DateTime<Utc>) -> Plan {
        let inner = &self.inner;
        match inner.store.schedule_runs_interrupted().await {
            Ok(0) => {}
            Ok(n) => tracing::warn!(runs = n, "schedule runs were interrupted by the last stop"),
            Err(e) => tracing::error!(error = %e, "cannot mark interrupted schedule runs"),
        }
        let states = inner.store.schedule_states().await.unwrap_or_else(|e| {
            tracing::error!(error = %e, "cannot read the schedules' state; computing from now");
            Vec::new()
        });
        {
            let mut last = inner.last_run.locked();
            for s in &states {
                if let Some(at) = s.last_run_at {
                    last.insert(s.name.clone(), at);
                }
            }
        }
        let schedules = self.current();
        let mut next = Vec::with_capacity(schedules.len());
        for schedule in schedules.iter() {
            if !schedule.config.enabled {
                next.push((schedule.clone(), None));
                continue;
            }
            let state = states.iter().find(|s| s.name == schedule.name());
            let plan = at_start(schedule, state, now);
            let at = match plan {
                AtStart::Keep(at) => Some(at),
                AtStart::Fresh(at) => {
                    self.save_next(schedule, at).await;
                    at
                }
                AtStart::Missed {
                    latest,
                    count,
                    run_latest,
                    next: at,
                } => {
                    self.save_next(schedule, at).await;
                    self.missed(schedule, latest, count, run_latest, now).await;
                    at
                }
            };
            tracing::info!(
                schedule = schedule.name(),
                timetable = %schedule.timetable,
                next_run = ?at.map(|t| schedule.timetable.local(t)),
                "schedule loaded"
            );
            next.push((schedule.clone(), at));
        }
        next
    }

    /// Records the runs `schedule` missed while the daemon was down, and runs the latest when
    /// `run_latest`.
    async fn missed(
        &self,
        schedule: &Arc<Schedule>,
        latest: DateTime<Utc>,
        count: usize,
        run_latest: bool,
        now: DateTime<Utc>,
    ) {
        let late_min = (now - latest).num_minutes();
        let skipped = if run_latest { count - 1 } else { count };
        if skipped > 0 {
            let detail = if run_latest {
                format!(
                    "{skipped} earlier runs missed while the daemon was down; only the latest ran"
                )
            } else {
                format!(
                    "{count} runs missed while the daemon was down; the latest was {late_min} minutes late (catchUpMinutes: {})",
                    schedule.config.catch_up_minutes
                )
            };
            self.record_skip(
                schedule,
                latest,
                RunTrigger::CatchUp,
                SKIPPED_MISSED,
                detail,
            )
            .await;
        }
        if run_latest {
            tracing::info!(schedule = schedule.name(), due = %latest, late_minutes = late_min, "running a schedule's run missed while the daemon was down");
            self.launch(schedule.clone(), latest, RunTrigger::CatchUp);
        }
    }

    /// Starts `schedule`'s run for `due`, or records the occurrence as skipped when the
    /// previous run is still going.
    fn launch(&self, schedule: Arc<Schedule>, due: DateTime<Utc>, trigger: RunTrigger) {
        if self.spawn(schedule.clone(), due, trigger).is_none() {
            let this = self.clone();
            self.inner.tasks.spawn(async move {
                this.record_skip(
                    &schedule,
                    due,
                    trigger,
                    SKIPPED_OVERLAP,
                    "the previous run was still going".to_owned(),
                )
                .await;
            });
        }
    }

    /// Spawns `schedule`'s run for `due`; `None` when one of its runs is going.
    fn spawn(
        &self,
        schedule: Arc<Schedule>,
        due: DateTime<Utc>,
        trigger: RunTrigger,
    ) -> Option<tokio::task::JoinHandle<ScheduledEnd>> {
        let name = schedule.name().to_owned();
        if !self.inner.running.locked().insert(name.clone()) {
            return None;
        }
        let this = self.clone();
        Some(self.inner.tasks.spawn(async move {
            let _running = Running(&this.inner, name);
            this.execute(&schedule, due, trigger).await
        }))
    }

    /// One run: the task, the record, the turn, how it ended.
    async fn execute(
        &self,
        schedule: &Schedule,
        due: DateTime<Utc>,
        trigger: RunTrigger,
    ) -> ScheduledEnd {
        let inner = &self.inner;
        let name = schedule.name();
        let started = Instant::now();
        let quiet_since = schedule
            .config
            .quiet_if_no_activity
            .then(|| inner.last_run.locked().get(name).copied())
            .flatten();
        let id = match inner.store.schedule_run_started(name, due, trigger).await {
            Ok(id) => Some(id),
            Err(e) => {
                tracing::error!(schedule = name, error = %e, "cannot record a schedule run");
                None
            }
        };
        inner.last_run.locked().insert(name.to_owned(), Utc::now());
        let end = match tokio::fs::read_to_string(&schedule.prompt_path).await {
            Ok(task) => {
                let task = ScheduledTask {
                    name: name.to_owned(),
                    timetable: schedule.timetable.to_string(),
                    spot: schedule.spot.clone(),
                    channel: schedule.channel.clone(),
                    task,
                    due,
                    quiet_since,
                };
                // One of the sessions running at once, as a conversation's turn.
                let permit = tokio::select! {
                    permit = inner.permits.clone().acquire_owned() => permit.ok(),
                    _ = inner.stop.cancelled() => None,
                };
                match permit {
                    Some(_permit) => inner.runs.run_scheduled(&task, &inner.stop).await,
                    None => ScheduledEnd {
                        outcome: "cancelled",
                        detail: Some("the daemon stopped before the run could start".into()),
                        tokens: 0,
                    },
                }
            }
            Err(e) => ScheduledEnd {
                outcome: "failed",
                detail: Some(format!(
                    "cannot read the prompt file {}: {e}",
                    schedule.prompt_path.display()
                )),
                tokens: 0,
            },
        };
        if let Some(id) = id {
            let record = RunEnd {
                outcome: end.outcome.to_owned(),
                detail: end.detail.clone(),
                tokens: end.tokens,
            };
            if let Err(e) = inner.store.schedule_run_finished(id, record).await {
                tracing::error!(schedule = name, error = %e, "cannot record how a schedule run ended");
            }
        }
        inner.metrics.run(name, end.outcome);
        let elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        macro_rules! finished {
            ($level:ident, $message:literal) => {
                tracing::$level!(
                    schedule = name,
                    trigger = trigger.as_str(),
                    outcome = end.outcome,
                    detail = end.detail.as_deref(),
                    tokens = end.tokens,
                    elapsed_ms,
                    $message
                )
            };
        }
        if matches!(end.outcome, "posted" | "silent" | "skipped_quiet") {
            finished!(info, "schedule run finished");
        } else {
            finished!(warn, "schedule run did not post");
        }
        end
    }

    /// Records, logs and counts an occurrence that did not run.
    async fn record_skip(
        &self,
        schedule: &Schedule,
        due: DateTime<Utc>,
        trigger: RunTrigger,
        outcome: &str,
        detail: String,
    ) {
        let name = schedule.name();
        tracing::warn!(schedule = name, due = %due, trigger = trigger.as_str(), outcome, detail = %detail, "schedule run skipped");
        self.inner.metrics.run(name, outcome);
        if let Err(e) = self
            .inner
            .store
            .schedule_run_skipped(name, due, trigger, outcome, detail)
            .await
        {
            tracing::error!(schedule = name, error = %e, "cannot record a skipped schedule run");
        }
    }

    async fn save_next(&self, schedule: &Schedule, at: Option<DateTime<Utc>>) {
        if let Err(e) = self
            .inner
            .store
            .schedule_set_next(schedule.name(), &schedule.timetable_key(), at)
            .await
        {
            tracing::error!(schedule = schedule.name(), error = %e, "cannot keep a schedule's next run");
        }
    }
}

/// Each schedule in force with its next run (`None`: none, or disabled).
type Plan = Vec<(Arc<Schedule>, Option<DateTime<Utc>>)>;

/// A schedule's mark as running, removed when its run ends however it ends.
struct Running<'a>(&'a Inner, String);

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.running.locked().remove(&self.1);
    }
}

#[cfg(test)]
mod tests;
