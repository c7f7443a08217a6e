//! What `air-friends stats` reports: skill calls per hour (table `skill_calls`,
//! `schema_v3.sql`, filled by the Skill API's call log), memories and reminders by state per
//! workspace, and the gateway's tokens per day.
//!
//! A skill call is counted in one row per (hour, skill, outcome code) with its latency in
//! fixed buckets ([`LATENCY_BUCKETS_MS`]), so percentiles over a day or a week are read from
//! merged buckets (an upper bound: the bucket the percentile falls in) without keeping a row
//! per call.

use std::collections::BTreeMap;

use chrono::{DateTime, NaiveDate, Utc};
use rusqlite::{Connection, OptionalExtension, params};

use super::StoreError;
use super::llm_usage::{LlmUsage, VoiceUsage};

/// Upper bounds (ms) of the latency buckets; a last bucket holds everything slower.
pub const LATENCY_BUCKETS_MS: [u64; 12] =
    [1, 2, 5, 10, 25, 50, 100, 250, 500, 1_000, 2_500, 10_000];

/// Buckets per row: [`LATENCY_BUCKETS_MS`] and the overflow.
pub const BUCKETS: usize = LATENCY_BUCKETS_MS.len() + 1;

/// The outcome code of a successful call.
pub const OK_CODE: &str = "OK";

/// Calls of one skill with one outcome in one hour.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkillCallRow {
    /// The hour (its start).
    pub hour: DateTime<Utc>,
    /// The skill.
    pub skill: String,
    /// [`OK_CODE`] or the error code.
    pub code: String,
    /// Calls with this skill and code in the hour.
    pub calls: u64,
    /// Latency counts per bucket.
    pub buckets: [u64; BUCKETS],
}

/// The bucket of a latency.
pub fn bucket_of(ms: u64) -> usize {
    LATENCY_BUCKETS_MS
        .iter()
        .position(|bound| ms <= *bound)
        .unwrap_or(LATENCY_BUCKETS_MS.len())
}

/// Calls of one skill over a period.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SkillCallSummary {
    /// Every call.
    pub calls: u64,
    /// Failed calls per error code.
    pub errors: BTreeMap<String, u64>,
    /// Latency counts per bucket (all outcomes).
    pub buckets: [u64; BUCKETS],
}

impl SkillCallSummary {
    /// Failed calls.
    pub fn error_count(&self) -> u64 {
        self.errors.values().sum()
    }

    /// The upper bound (ms) of the bucket the `q` quantile falls in; `None` without calls or in
    /// the overflow bucket.
    pub fn quantile_ms(&self, q: f64) -> Option<u64> {
        let total: u64 = self.buckets.iter().sum();
        if total == 0 {
            return None;
        }
        let rank = ((total as f64) * q).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, n) in self.buckets.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return LATENCY_BUCKETS_MS.get(i).copied();
            }
        }
        None
    }
}

/// Memories and reminders of one workspace, by state.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WorkspaceOverview {
    /// Enabled memories.
    pub enabled: u64,
    /// Disabled memories.
    pub disabled: u64,
    /// Enabled high-importance memories (the prompt's candidates).
    pub important: u64,
    /// Private memories (enabled or not).
    pub private: u64,
    /// Reminders by state (`pending`, `delivered`, `cancelled`, `failed`).
    pub reminders: BTreeMap<String, u64>,
}

fn hour_ms(t: DateTime<Utc>) -> i64 {
    let ms = t.timestamp_millis();
    ms - ms.rem_euclid(3_600_000)
}

fn from_sql(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

fn to_sql(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn parse_buckets(text: &str) -> [u64; BUCKETS] {
    let mut out = [0; BUCKETS];
    if let Ok(list) = serde_json::from_str::<Vec<u64>>(text) {
        for (slot, n) in out.iter_mut().zip(list) {
            *slot = n;
        }
    }
    out
}

/// Adds `rows` to the hourly counts.
pub(crate) fn add_skill_calls(conn: &Connection, rows: &[SkillCallRow]) -> Result<(), StoreError> {
    let mut read = conn.prepare_cached(
        "SELECT calls, buckets FROM skill_calls WHERE hour = ?1 AND skill = ?2 AND code = ?3",
    )?;
    let mut write = conn.prepare_cached(
        "INSERT INTO skill_calls (hour, skill, code, calls, buckets) VALUES (?1, ?2, ?3, ?4, ?5)
         ON CONFLICT (hour, skill, code) DO UPDATE SET calls = excluded.calls,
             buckets = excluded.buckets",
    )?;
    for row in rows {
        let hour = hour_ms(row.hour);
        let existing: Option<(i64, String)> = read
            .query_row(params![hour, row.skill, row.code], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })
            .optional()?;
        let (mut calls, mut buckets) = existing
            .map(|(c, b)| (from_sql(c), parse_buckets(&b)))
            .unwrap_or((0, [0; BUCKETS]));
        calls = calls.saturating_add(row.calls);
        for (b, n) in buckets.iter_mut().zip(row.buckets) {
            *b = b.saturating_add(n);
        }
        let text = serde_json::to_string(&buckets.to_vec()).unwrap_or_else(|_| "[]".into());
        write.execute(params![hour, row.skill, row.code, to_sql(calls), text])?;
    }
    Ok(())
}

/// Every skill's calls since `since`.
pub(crate) fn skill_calls_since(
    conn: &Connection,
    since: DateTime<Utc>,
) -> Result<BTreeMap<String, SkillCallSummary>, StoreError> {
    let mut stmt = conn
        .prepare_cached("SELECT skill, code, calls, buckets FROM skill_calls WHERE hour >= ?1")?;
    let mut rows = stmt.query([hour_ms(since)])?;
    let mut out: BTreeMap<String, SkillCallSummary> = BTreeMap::new();
    while let Some(r) = rows.next()? {
        let skill: String = r.get(0)?;
        let code: String = r.get(1)?;
        let calls = from_sql(r.get(2)?);
        let buckets = parse_buckets(&r.get::<_, String>(3)?);
        let s = out.entry(skill).or_default();
        s.calls += calls;
        if code != OK_CODE {
            *s.errors.entry(code).or_default() += calls;
        }
        for (b, n) in s.buckets.iter_mut().zip(buckets) {
            *b += n;
        }
    }
    Ok(out)
}

/// Memories (from the kept counts) and reminders by state, per workspace.
pub(crate) fn workspaces(
    conn: &Connection,
) -> Result<BTreeMap<String, WorkspaceOverview>, StoreError> {
    let mut out: BTreeMap<String, WorkspaceOverview> = BTreeMap::new();
    let mut stmt = conn.prepare_cached(
        "SELECT workspace, visibility, enabled, importance, n FROM memory_counts WHERE n > 0",
    )?;
    let mut rows = stmt.query([])?;
    while let Some(r) = rows.next()? {
        let ws: String = r.get(0)?;
        let visibility: String = r.get(1)?;
        let enabled: bool = r.get(2)?;
        let importance: String = r.get(3)?;
        let n = from_sql(r.get(4)?);
        let o = out.entry(ws).or_default();
        if enabled {
            o.enabled += n;
            if importance == "high" {
                o.important += n;
            }
        } else {
            o.disabled += n;
        }
        if visibility == "private" {
            o.private += n;
        }
    }
    let mut stmt = conn.prepare_cached(
        "SELECT workspace, state, count(*) FROM reminders GROUP BY workspace, state",
    )?;
    let mut rows = stmt.query([])?;
    while let Some(r) = rows.next()? {
        let ws: String = r.get(0)?;
        let state: String = r.get(1)?;
        let n = from_sql(r.get(2)?);
        *out.entry(ws)
            .or_default()
            .reminders
            .entry(state)
            .or_default() += n;
    }
    Ok(out)
}

/// The gateway's tokens per UTC day since `since` (all workspaces), oldest first.
pub(crate) fn tokens_per_day(
    conn: &Connection,
    since: NaiveDate,
) -> Result<Vec<(NaiveDate, LlmUsage)>, StoreError> {
    per_day(
        conn,
        "SELECT day, sum(input_tokens), sum(output_tokens), sum(requests) FROM llm_usage
         WHERE day >= ?1 GROUP BY day ORDER BY day",
        since,
        |r| {
            Ok(LlmUsage {
                input_tokens: from_sql(r.get(1)?),
                output_tokens: from_sql(r.get(2)?),
                requests: from_sql(r.get(3)?),
            })
        },
    )
}

/// Voice per UTC day since `since` (all workspaces), oldest first; days without any left out.
pub(crate) fn voice_per_day(
    conn: &Connection,
    since: NaiveDate,
) -> Result<Vec<(NaiveDate, VoiceUsage)>, StoreError> {
    per_day(
        conn,
        "SELECT day, sum(audio_in_ms), sum(transcriptions), sum(audio_out_ms), sum(speeches)
         FROM llm_usage WHERE day >= ?1 AND (transcriptions > 0 OR speeches > 0)
         GROUP BY day ORDER BY day",
        since,
        |r| {
            Ok(VoiceUsage {
                audio_in_ms: from_sql(r.get(1)?),
                transcriptions: from_sql(r.get(2)?),
                audio_out_ms: from_sql(r.get(3)?),
                speeches: from_sql(r.get(4)?),
            })
        },
    )
}

/// The rows of `sql` (its first column a day, its one parameter `since`), each read by `read`;
/// a row whose day does not parse is left out.
fn per_day<T>(
    conn: &Connection,
    sql: &str,
    since: NaiveDate,
    read: impl Fn(&rusqlite::Row<'_>) -> rusqlite::Result<T>,
) -> Result<Vec<(NaiveDate, T)>, StoreError> {
    let mut stmt = conn.prepare_cached(sql)?;
    let mut rows = stmt.query([since.format("%Y-%m-%d").to_string()])?;
    let mut out = Vec::new();
    while let Some(r) = rows.next()? {
        let day: String = r.get(0)?;
        let Ok(day) = NaiveDate::parse_from_str(&day, "%Y-%m-%d") else {
            continue;
        };
        out.push((day, read(r)?));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latencies_fall_in_their_bucket() {
        assert_eq!(bucket_of(0), 0);
        assert_eq!(bucket_of(1), 0);
        assert_eq!(bucket_of(2), 1);
        assert_eq!(bucket_of(26), 5);
        assert_eq!(bucket_of(10_000), 11);
        assert_eq!(bucket_of(10_001), 12);
    }

    #[test]
    fn quantiles_are_the_upper_bound_of_their_bucket() {
        let mut s = SkillCallSummary::default();
        assert_eq!(s.quantile_ms(0.5), None);
        s.buckets[bucket_of(3)] = 98; // ≤ 5 ms
        s.buckets[bucket_of(400)] = 2; // ≤ 500 ms
        assert_eq!(s.quantile_ms(0.5), Some(5));
        assert_eq!(s.quantile_ms(0.98), Some(5));
        assert_eq!(s.quantile_ms(0.99), Some(500));
        s.buckets[BUCKETS - 1] = 100;
        assert_eq!(s.quantile_ms(0.99), None, "in the overflow bucket");
    }
}
