//! The reminder scheduler: sleeps until the next due reminder (woken early when
//! reminders are added, cancelled or rescheduled — no coarse polling), delivers each by DM
//! through its platform adapter, retries failures with exponential back-off, then marks them
//! failed. Reminders that fell due while the daemon was down are delivered at once on start and
//! marked late. Nothing pending is lost: a reminder leaves `pending` only by being delivered,
//! cancelled or failing its last attempt.
//!
//! A recurring reminder (`set-reminder --every`) is one row: once an occurrence is delivered
//! (or failed its last attempt) it moves to its next occurrence after now — occurrences missed
//! while the daemon was down are not sent in a burst — until its count or end date, and its DM
//! says how to stop it.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use tokio_util::sync::CancellationToken;

use crate::backoff::Backoff;
use crate::config::RemindersConfig;
use crate::observability::Metrics;
use crate::platform::{PlatformKind, PlatformRegistry, UserId, send_dm_text};
use crate::store::{Reminder, Store};
use crate::text::process_outgoing;

/// A delivery later than this after its time counts as late.
pub const LATE_AFTER: Duration = Duration::from_secs(60);
/// Longest sleep without re-checking (guards against clock jumps).
const MAX_SLEEP: Duration = Duration::from_secs(3600);
/// Reminders taken per wake-up.
const BATCH: u32 = 100;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EventLabels {
    event: String,
}

/// The `event` labels of `air_friends_reminders_total`, all at 0 from registration on.
const EVENTS: [&str; 4] = ["delivered", "late", "retried", "failed"];

/// Reminder metrics (`air_friends_reminders_total{event}`, events in `EVENTS`).
#[derive(Clone, Debug, Default)]
pub struct ReminderMetrics {
    events: Family<EventLabels, Counter>,
}

impl ReminderMetrics {
    /// Registers the family.
    pub fn new(metrics: &Metrics) -> Self {
        let m = Self::default();
        for event in EVENTS {
            drop(m.events.get_or_create(&EventLabels {
                event: event.to_owned(),
            }));
        }
        metrics.register(|r| {
            r.register(
                "reminders",
                "Reminder events: delivered, late, retried, failed",
                m.events.clone(),
            )
        });
        m
    }

    fn count(&self, event: &str) {
        self.events
            .get_or_create(&EventLabels {
                event: event.to_owned(),
            })
            .inc();
    }
}

/// What the scheduler reads the time from (the system clock; tests move it).
pub type Now = Arc<dyn Fn() -> DateTime<Utc> + Send + Sync>;

/// The scheduler.
#[derive(Clone)]
pub struct ReminderScheduler {
    store: Store,
    platforms: PlatformRegistry,
    config: RemindersConfig,
    metrics: ReminderMetrics,
    now: Now,
}

impl std::fmt::Debug for ReminderScheduler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReminderScheduler")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl ReminderScheduler {
    /// A scheduler delivering through `platforms`.
    pub fn new(
        store: Store,
        platforms: PlatformRegistry,
        config: RemindersConfig,
        metrics: ReminderMetrics,
    ) -> Self {
        Self {
            store,
            platforms,
            config,
            metrics,
            now: Arc::new(Utc::now),
        }
    }

    /// The same scheduler reading the time from `now` (a test's clock, moved a day at a time;
    /// it wakes on the store's reminder changes as ever).
    pub fn with_clock(mut self, now: Now) -> Self {
        self.now = now;
        self
    }

    /// Runs until `stop` is cancelled.
    pub async fn run(self, stop: CancellationToken) -> anyhow::Result<()> {
        let mut changes = self.store.reminder_changes();
        loop {
            changes.borrow_and_update();
            self.deliver_due(&stop).await;
            let wait = match self.store.next_due_at().await {
                Ok(Some(at)) => (at - (self.now)())
                    .to_std()
                    .unwrap_or(Duration::ZERO)
                    .min(MAX_SLEEP),
                Ok(None) => MAX_SLEEP,
                Err(e) => {
                    tracing::error!(error = %e, "cannot read the next reminder time");
                    Duration::from_secs(5)
                }
            };
            tokio::select! {
                _ = stop.cancelled() => return Ok(()),
                _ = tokio::time::sleep(wait) => {}
                changed = changes.changed() => {
                    if changed.is_err() {
                        return Ok(());
                    }
                }
            }
        }
    }

    async fn deliver_due(&self, stop: &CancellationToken) {
        loop {
            let due = match self.store.due_reminders((self.now)(), BATCH).await {
                Ok(d) => d,
                Err(e) => {
                    tracing::error!(error = %e, "cannot read due reminders");
                    return;
                }
            };
            let full = due.len() == BATCH as usize;
            for r in due {
                if stop.is_cancelled() {
                    return;
                }
                self.deliver(r).await;
            }
            if !full {
                return;
            }
        }
    }

    async fn deliver(&self, r: Reminder) {
        let now = (self.now)();
        let late = (now - r.scheduled_at)
            .to_std()
            .is_ok_and(|d| d > LATE_AFTER);
        let result = self.send(&r).await;
        // A recurring reminder's next occurrence: after this one (and after now: occurrences
        // missed while the daemon was down are not sent in a burst).
        let next = |delivered: u32| {
            r.recurrence
                .as_ref()
                .and_then(|rec| rec.next_after(now.max(r.scheduled_at), delivered))
        };
        match result {
            Ok(()) => {
                let recorded = if r.recurrence.is_some() {
                    self.store
                        .mark_occurrence_delivered(
                            &r.id,
                            (self.now)(),
                            late,
                            next(r.occurrences + 1),
                        )
                        .await
                } else {
                    self.store
                        .mark_reminder_delivered(&r.id, (self.now)(), late)
                        .await
                };
                match recorded {
                    Ok(_) => {
                        self.metrics.count(if late { "late" } else { "delivered" });
                        tracing::info!(reminder_id = %r.id, platform = %r.platform, late, lag_ms = (now - r.scheduled_at).num_milliseconds(), "reminder delivered");
                    }
                    Err(e) => {
                        tracing::error!(reminder_id = %r.id, error = %e, "reminder sent but not recorded")
                    }
                }
            }
            Err(error) => {
                let attempt = r.attempts + 1;
                let retry_at = (attempt < self.config.max_delivery_attempts)
                    .then(|| now + backoff(self.config.retry_backoff_ms, attempt));
                self.metrics.count(if retry_at.is_some() {
                    "retried"
                } else {
                    "failed"
                });
                tracing::warn!(reminder_id = %r.id, attempt, error = %error, retry_at = ?retry_at, "reminder delivery failed");
                // A series goes on at its next occurrence after an occurrence that failed.
                let recorded = match (retry_at, next(r.occurrences)) {
                    (None, Some(next)) => {
                        self.store
                            .skip_reminder_occurrence(&r.id, &error, next)
                            .await
                    }
                    _ => {
                        self.store
                            .record_reminder_failure(&r.id, &error, retry_at)
                            .await
                    }
                };
                if let Err(e) = recorded {
                    tracing::error!(reminder_id = %r.id, error = %e, "cannot record the failed delivery");
                }
            }
        }
    }

    async fn send(&self, r: &Reminder) -> Result<(), String> {
        let kind: PlatformKind = r
            .platform
            .parse()
            .map_err(|_| format!("unknown platform {:?}", r.platform))?;
        let platform = self
            .platforms
            .get(kind)
            .ok_or_else(|| format!("platform {kind} is not connected"))?;
        let mut text = format!("⏰ Reminder: {}", r.message);
        if let Some(rec) = &r.recurrence {
            text.push_str(&format!(
                "\n(repeats every {} — /cancel-reminder {} stops it)",
                rec.every.as_str(),
                r.id
            ));
        }
        let text = process_outgoing(&text);
        send_dm_text(platform.as_ref(), &UserId::new(r.user_id.clone()), &text)
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    }
}

/// `base · 2^(attempt-1)`, capped at one hour (the ceiling of the shared [`Backoff`]: a
/// reminder's retry is a stored due time, so it takes no jitter).
pub fn backoff(base_ms: u64, attempt: u32) -> chrono::Duration {
    let schedule = Backoff::new(Duration::from_millis(base_ms), Duration::from_secs(3600));
    chrono::Duration::from_std(schedule.ceiling(attempt.saturating_sub(1)))
        .unwrap_or(chrono::Duration::hours(1))
}

/// When a reminder will be attempted, for display.
pub fn describe(at: DateTime<Utc>) -> String {
    at.format("%Y-%m-%d %H:%M UTC").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_label_sets_are_exported_at_zero() {
        let metrics = Metrics::new();
        ReminderMetrics::new(&metrics);
        let text = metrics
            .encode(crate::observability::Format::PrometheusText)
            .unwrap();
        for event in EVENTS {
            let line = format!(r#"air_friends_reminders_total{{event="{event}"}} 0"#);
            assert!(text.contains(&line), "{line} missing in\n{text}");
        }
    }

    #[test]
    fn backoff_doubles_and_caps() {
        assert_eq!(backoff(5000, 1).num_milliseconds(), 5000);
        assert_eq!(backoff(5000, 2).num_milliseconds(), 10_000);
        assert_eq!(backoff(5000, 4).num_milliseconds(), 40_000);
        assert_eq!(backoff(5000, 40).num_milliseconds(), 3_600_000);
    }
}
