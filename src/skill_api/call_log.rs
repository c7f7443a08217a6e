//! The skill calls `air-friends stats` reports: every call the audit records is counted here
//! in memory per (hour, skill, outcome code) with its latency bucket, and [`CallLog::run`]
//! writes the counts to the store once a minute and at shutdown. Nothing per call reaches the
//! database: a busy daemon adds one small row per skill and outcome each hour.

use crate::sync::Recover;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio_util::sync::CancellationToken;

use crate::store::Store;
use crate::store::analytics::{BUCKETS, SkillCallRow, bucket_of};

/// How often the counts are written.
pub const FLUSH_EVERY: Duration = Duration::from_secs(60);

/// Calls and latency buckets of one (hour, skill, outcome code).
type Counts = (u64, [u64; BUCKETS]);

/// Counts by hour, then skill, then outcome code: nested so that counting a call looks its
/// entry up by the borrowed names and allocates only for the first call of a key.
type Pending = HashMap<DateTime<Utc>, HashMap<String, HashMap<String, Counts>>>;

/// Skill calls counted since the last flush. Cloning shares it.
#[derive(Debug, Clone, Default)]
pub struct CallLog {
    pending: Arc<Mutex<Pending>>,
}

fn hour_of(t: DateTime<Utc>) -> DateTime<Utc> {
    let secs = t.timestamp();
    DateTime::from_timestamp(secs - secs.rem_euclid(3600), 0).unwrap_or(t)
}

/// Applies `update` to the counts of `(hour, skill, code)`, created at zero the first time.
fn update(
    pending: &mut Pending,
    hour: DateTime<Utc>,
    skill: &str,
    code: &str,
    apply: impl FnOnce(&mut Counts),
) {
    if let Some(counts) = pending
        .get_mut(&hour)
        .and_then(|by_skill| by_skill.get_mut(skill))
        .and_then(|by_code| by_code.get_mut(code))
    {
        apply(counts);
        return;
    }
    let counts = pending
        .entry(hour)
        .or_default()
        .entry(skill.to_owned())
        .or_default()
        .entry(code.to_owned())
        .or_insert((0, [0; BUCKETS]));
    apply(counts);
}

impl CallLog {
    /// An empty log.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Pending> {
        self.pending.locked()
    }

    /// Counts one call of `skill` that ended with `code` (`OK` or the error code) after
    /// `elapsed`.
    pub fn record(&self, skill: &str, code: &str, elapsed: Duration) {
        let ms = u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX);
        let hour = hour_of(Utc::now());
        update(&mut self.lock(), hour, skill, code, |(calls, buckets)| {
            *calls += 1;
            buckets[bucket_of(ms)] += 1;
        });
    }

    /// Takes the counts gathered so far.
    pub fn take(&self) -> Vec<SkillCallRow> {
        let pending = std::mem::take(&mut *self.lock());
        let mut rows = Vec::new();
        for (hour, by_skill) in pending {
            for (skill, by_code) in by_skill {
                for (code, (calls, buckets)) in by_code {
                    rows.push(SkillCallRow {
                        hour,
                        skill: skill.clone(),
                        code,
                        calls,
                        buckets,
                    });
                }
            }
        }
        rows
    }

    /// Writes the counts to `store` every `every` and once more when `stop` fires. A failed
    /// write is logged and its counts are put back for the next try.
    pub async fn run(self, store: Store, every: Duration, stop: CancellationToken) {
        loop {
            let stopping = tokio::select! {
                _ = tokio::time::sleep(every) => false,
                _ = stop.cancelled() => true,
            };
            let rows = self.take();
            if !rows.is_empty()
                && let Err(e) = store.add_skill_calls(rows.clone()).await
            {
                tracing::warn!(error = %e, rows = rows.len(), "could not record skill call counts");
                self.put_back(rows);
            }
            if stopping {
                return;
            }
        }
    }

    fn put_back(&self, rows: Vec<SkillCallRow>) {
        let mut pending = self.lock();
        for row in rows {
            update(
                &mut pending,
                row.hour,
                &row.skill,
                &row.code,
                |(calls, buckets)| {
                    *calls += row.calls;
                    for (b, n) in buckets.iter_mut().zip(row.buckets) {
                        *b += n;
                    }
                },
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Timelike;

    #[test]
    fn calls_are_counted_per_skill_and_outcome_with_their_latency_bucket() {
        let log = CallLog::new();
        log.record("send-reply", "OK", Duration::from_millis(3));
        log.record("send-reply", "OK", Duration::from_millis(30));
        log.record("send-reply", "RATE_LIMITED", Duration::from_millis(1));
        let mut rows = log.take();
        rows.sort_by(|a, b| a.code.cmp(&b.code));
        assert_eq!(rows.len(), 2);
        assert_eq!((rows[0].code.as_str(), rows[0].calls), ("OK", 2));
        assert_eq!(rows[0].buckets[bucket_of(3)], 1);
        assert_eq!(rows[0].buckets[bucket_of(30)], 1);
        assert_eq!((rows[1].code.as_str(), rows[1].calls), ("RATE_LIMITED", 1));
        assert_eq!(rows[0].hour.minute(), 0);
        assert!(log.take().is_empty(), "taken once");
        log.put_back(rows);
        assert_eq!(log.take().iter().map(|r| r.calls).sum::<u64>(), 3);
    }
}
