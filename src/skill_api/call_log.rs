//! The skill calls `air-friends stats` reports: every call the audit records is counted here
//! in memory per (hour, skill, outcome code) with its latency bucket, and [`CallLog::run`]
//! writes the counts to the store once a minute and at shutdown. Nothing per call reaches the
//! database: a busy daemon adds one small row per skill and outcome each hour.

use crate::sync::Recover;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Timelike, Utc};
use tokio_util::sync::CancellationToken;

use crate::store::Store;
use crate::store::analytics::{BUCKETS, SkillCallRow, bucket_of};

/// How often the counts are written.
pub const FLUSH_EVERY: Duration = Duration::from_secs(60);

type Key = (DateTime<Utc>, String, String);

/// Calls and latency buckets of one key.
type Counts = (u64, [u64; BUCKETS]);

/// Skill calls counted since the last flush. Cloning shares it.
#[derive(Debug, Clone, Default)]
pub struct CallLog {
    pending: Arc<Mutex<HashMap<Key, Counts>>>,
}

fn hour_of(t: DateTime<Utc>) -> DateTime<Utc> {
    t.with_minute(0)
        .and_then(|t| t.with_second(0))
        .and_then(|t| t.with_nanosecond(0))
        .unwrap_or(t)
}

impl CallLog {
    /// An empty log.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Counts>> {
        self.pending.locked()
    }

    /// Counts one call of `skill` that ended with `code` (`OK` or the error code) after
    /// `elapsed`.
    pub fn record(&self, skill: &str, code: &str, elapsed: Duration) {
        let ms = u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX);
        let key = (hour_of(Utc::now()), skill.to_owned(), code.to_owned());
        let mut pending = self.lock();
        let (calls, buckets) = pending.entry(key).or_insert((0, [0; BUCKETS]));
        *calls += 1;
        buckets[bucket_of(ms)] += 1;
    }

    /// Takes the counts gathered so far.
    pub fn take(&self) -> Vec<SkillCallRow> {
        std::mem::take(&mut *self.lock())
            .into_iter()
            .map(|((hour, skill, code), (calls, buckets))| SkillCallRow {
                hour,
                skill,
                code,
                calls,
                buckets,
            })
            .collect()
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
            let (calls, buckets) = pending
                .entry((row.hour, row.skill, row.code))
                .or_insert((0, [0; BUCKETS]));
            *calls += row.calls;
            for (b, n) in buckets.iter_mut().zip(row.buckets) {
                *b += n;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
