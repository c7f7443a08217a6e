//! Operator schedules' durable state (schema v12): each schedule's next run and the timetable
//! it was computed from, and a record of every run — run, skipped or interrupted. The rules
//! (when a run is due, caught up or skipped) are `schedules::Scheduler`'s; this module only
//! stores.

use chrono::{DateTime, Utc};
use rusqlite::{Connection, params};

use super::{Store, StoreError, from_ms, to_ms};

/// One schedule's stored state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduleState {
    /// The schedule's name.
    pub name: String,
    /// The timetable (`cron (zone)`) `next_run_at` was computed from.
    pub timetable: String,
    /// When it runs next; `None`: never again.
    pub next_run_at: Option<DateTime<Utc>>,
    /// When its last run started (a skipped run does not count).
    pub last_run_at: Option<DateTime<Utc>>,
}

/// What started a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunTrigger {
    /// Its time came.
    Timetable,
    /// It fell due while the daemon was down, and ran at start.
    CatchUp,
    /// `air-friends schedules run NAME`.
    Manual,
}

impl RunTrigger {
    /// The stored and logged name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Timetable => "timetable",
            Self::CatchUp => "catch_up",
            Self::Manual => "manual",
        }
    }
}

/// The outcome of a run that is still going.
pub const RUNNING: &str = "running";
/// The outcome of a run that was going when the daemon stopped.
pub const INTERRUPTED: &str = "interrupted";

/// One recorded run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduleRun {
    /// Row id.
    pub id: i64,
    /// The schedule.
    pub name: String,
    /// The occurrence it was for.
    pub due_at: DateTime<Utc>,
    /// When it started (or was skipped).
    pub started_at: DateTime<Utc>,
    /// When it ended; `None` while it runs.
    pub finished_at: Option<DateTime<Utc>>,
    /// What started it (`timetable`, `catch_up`, `manual`).
    pub trigger: String,
    /// `running`, a finished outcome (`posted`, `silent`, `failed`, …) or a skip
    /// (`skipped_missed`, `skipped_overlap`, `skipped_quiet`).
    pub outcome: String,
    /// Why, in words (a skip's reason, a failure's cause).
    pub detail: Option<String>,
    /// Model tokens the run used.
    pub tokens: u64,
}

/// One schedule's runs over a period ([`Store::schedule_summary`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduleSummary {
    /// Runs and skipped runs.
    pub runs: u64,
    /// Runs that posted.
    pub posted: u64,
    /// Occurrences skipped (`skipped_*`).
    pub skipped: u64,
    /// Runs that failed (neither posted, silent, skipped nor running).
    pub failed: u64,
    /// Model tokens used.
    pub tokens: u64,
    /// The latest run (its name is the schedule's).
    pub last: ScheduleRun,
}

/// How a finished run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunEnd {
    /// The outcome.
    pub outcome: String,
    /// Why, in words.
    pub detail: Option<String>,
    /// Model tokens used.
    pub tokens: u64,
}

impl Store {
    /// Every schedule's stored state.
    pub async fn schedule_states(&self) -> Result<Vec<ScheduleState>, StoreError> {
        self.db.read(states).await
    }

    /// Sets `name`'s next run, computed from `timetable`.
    pub async fn schedule_set_next(
        &self,
        name: &str,
        timetable: &str,
        next: Option<DateTime<Utc>>,
    ) -> Result<(), StoreError> {
        let (name, timetable) = (name.to_owned(), timetable.to_owned());
        self.db
            .write(move |c| {
                c.prepare_cached(
                    "INSERT INTO schedules (name, timetable, next_run_ms) VALUES (?1, ?2, ?3)
                     ON CONFLICT (name) DO UPDATE SET timetable = ?2, next_run_ms = ?3",
                )?
                .execute(params![name, timetable, next.map(to_ms)])?;
                Ok(())
            })
            .await
    }

    /// Records that a run of `name` for the occurrence `due` starts now, and that it is the
    /// schedule's last run; answers the run's id.
    pub async fn schedule_run_started(
        &self,
        name: &str,
        due: DateTime<Utc>,
        trigger: RunTrigger,
    ) -> Result<i64, StoreError> {
        let name = name.to_owned();
        let now = to_ms(Utc::now());
        self.db
            .write(move |c| {
                c.prepare_cached(
                    "INSERT INTO schedule_runs (name, due_ms, started_ms, trigger, outcome)
                     VALUES (?1, ?2, ?3, ?4, ?5)",
                )?
                .execute(params![
                    name,
                    to_ms(due),
                    now,
                    trigger.as_str(),
                    RUNNING
                ])?;
                let id = c.last_insert_rowid();
                c.prepare_cached(
                    "INSERT INTO schedules (name, timetable, last_run_ms) VALUES (?1, '', ?2)
                     ON CONFLICT (name) DO UPDATE SET last_run_ms = ?2",
                )?
                .execute(params![name, now])?;
                Ok(id)
            })
            .await
    }

    /// Records how run `id` ended.
    pub async fn schedule_run_finished(&self, id: i64, end: RunEnd) -> Result<(), StoreError> {
        let now = to_ms(Utc::now());
        self.db
            .write(move |c| {
                c.prepare_cached(
                    "UPDATE schedule_runs SET finished_ms = ?2, outcome = ?3, detail = ?4,
                     tokens = ?5 WHERE id = ?1",
                )?
                .execute(params![
                    id,
                    now,
                    end.outcome,
                    end.detail,
                    i64::try_from(end.tokens).unwrap_or(i64::MAX)
                ])?;
                Ok(())
            })
            .await
    }

    /// Records that the occurrence `due` of `name` did not run, with `outcome` and why.
    pub async fn schedule_run_skipped(
        &self,
        name: &str,
        due: DateTime<Utc>,
        trigger: RunTrigger,
        outcome: &str,
        detail: String,
    ) -> Result<(), StoreError> {
        let (name, outcome) = (name.to_owned(), outcome.to_owned());
        let now = to_ms(Utc::now());
        self.db
            .write(move |c| {
                c.prepare_cached(
                    "INSERT INTO schedule_runs
                     (name, due_ms, started_ms, finished_ms, trigger, outcome, detail)
                     VALUES (?1, ?2, ?3, ?3, ?4, ?5, ?6)",
                )?
                .execute(params![
                    name,
                    to_ms(due),
                    now,
                    trigger.as_str(),
                    outcome,
                    detail
                ])?;
                Ok(())
            })
            .await
    }

    /// Marks every run still `running` as `interrupted` (the daemon stopped during it); answers
    /// how many.
    pub async fn schedule_runs_interrupted(&self) -> Result<usize, StoreError> {
        let now = to_ms(Utc::now());
        self.db
            .write(move |c| {
                Ok(c.prepare_cached(
                    "UPDATE schedule_runs SET outcome = ?1, finished_ms = ?2,
                     detail = 'the daemon stopped during the run' WHERE outcome = ?3",
                )?
                .execute(params![INTERRUPTED, now, RUNNING])?)
            })
            .await
    }

    /// The runs that started at or after `since`, newest first, at most `limit`.
    pub async fn schedule_runs_since(
        &self,
        since: DateTime<Utc>,
        limit: u32,
    ) -> Result<Vec<ScheduleRun>, StoreError> {
        self.db
            .read(move |c| {
                let mut stmt = c.prepare_cached(
                    "SELECT id, name, due_ms, started_ms, finished_ms, trigger, outcome, detail,
                     tokens FROM schedule_runs WHERE started_ms >= ?1
                     ORDER BY started_ms DESC, id DESC LIMIT ?2",
                )?;
                let mut rows = stmt.query(params![to_ms(since), limit])?;
                let mut out = Vec::new();
                while let Some(row) = rows.next()? {
                    out.push(run_from_row(row)?);
                }
                Ok(out)
            })
            .await
    }

    /// Each schedule's runs that started at or after `since`, counted by kind, with its
    /// latest run; by name. A run counts as `posted`, as skipped (`skipped_*`), or as failed
    /// (anything else but `silent` and `running`).
    pub async fn schedule_summary(
        &self,
        since: DateTime<Utc>,
    ) -> Result<Vec<ScheduleSummary>, StoreError> {
        self.db
            .read(move |c| {
                let mut stmt = c.prepare_cached(&format!(
                    "WITH tally AS (
                         SELECT name, COUNT(*) AS runs,
                             SUM(outcome = 'posted') AS posted,
                             SUM(outcome LIKE 'skipped!_%' ESCAPE '!') AS skipped,
                             SUM(outcome NOT IN ('posted', 'silent', '{RUNNING}')
                                 AND outcome NOT LIKE 'skipped!_%' ESCAPE '!') AS failed,
                             SUM(tokens) AS tokens, MAX(id) AS last_id
                         FROM schedule_runs WHERE started_ms >= ?1 GROUP BY name)
                     SELECT r.id, r.name, r.due_ms, r.started_ms, r.finished_ms, r.trigger,
                         r.outcome, r.detail, r.tokens,
                         t.runs, t.posted, t.skipped, t.failed, t.tokens
                     FROM tally t JOIN schedule_runs r ON r.id = t.last_id ORDER BY t.name"
                ))?;
                let mut rows = stmt.query([to_ms(since)])?;
                let count = |row: &rusqlite::Row<'_>, i| -> Result<u64, StoreError> {
                    Ok(u64::try_from(row.get::<_, i64>(i)?).unwrap_or(0))
                };
                let mut out = Vec::new();
                while let Some(row) = rows.next()? {
                    out.push(ScheduleSummary {
                        runs: count(row, 9)?,
                        posted: count(row, 10)?,
                        skipped: count(row, 11)?,
                        failed: count(row, 12)?,
                        tokens: count(row, 13)?,
                        last: run_from_row(row)?,
                    });
                }
                Ok(out)
            })
            .await
    }

    /// Deletes the records of runs that started before `before`; answers how many.
    pub async fn schedule_runs_prune(&self, before: DateTime<Utc>) -> Result<usize, StoreError> {
        self.db
            .write(move |c| {
                Ok(
                    c.prepare_cached("DELETE FROM schedule_runs WHERE started_ms < ?1")?
                        .execute([to_ms(before)])?,
                )
            })
            .await
    }
}

/// A run from a row whose first nine columns are `id, name, due_ms, started_ms, finished_ms,
/// trigger, outcome, detail, tokens`.
fn run_from_row(row: &rusqlite::Row<'_>) -> Result<ScheduleRun, StoreError> {
    let tokens: i64 = row.get(8)?;
    Ok(ScheduleRun {
        id: row.get(0)?,
        name: row.get(1)?,
        due_at: from_ms(row.get(2)?)?,
        started_at: from_ms(row.get(3)?)?,
        finished_at: row.get::<_, Option<i64>>(4)?.map(from_ms).transpose()?,
        trigger: row.get(5)?,
        outcome: row.get(6)?,
        detail: row.get(7)?,
        tokens: u64::try_from(tokens).unwrap_or(0),
    })
}

fn states(c: &Connection) -> Result<Vec<ScheduleState>, StoreError> {
    let mut stmt = c.prepare_cached(
        "SELECT name, timetable, next_run_ms, last_run_ms FROM schedules ORDER BY name",
    )?;
    let mut rows = stmt.query([])?;
    let mut out = Vec::new();
    while let Some(row) = rows.next()? {
        out.push(ScheduleState {
            name: row.get(0)?,
            timetable: row.get(1)?,
            next_run_at: row.get::<_, Option<i64>>(2)?.map(from_ms).transpose()?,
            last_run_at: row.get::<_, Option<i64>>(3)?.map(from_ms).transpose()?,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[tokio::test]
    async fn a_schedules_next_run_and_its_runs_are_kept() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("air.db")).await.unwrap();
        let at = |h| Utc.with_ymd_and_hms(2026, 1, 1, h, 0, 0).unwrap();
        store
            .schedule_set_next("morning", "0 8 * * * (UTC)", Some(at(8)))
            .await
            .unwrap();
        let id = store
            .schedule_run_started("morning", at(8), RunTrigger::Timetable)
            .await
            .unwrap();
        store
            .schedule_run_skipped(
                "evening",
                at(20),
                RunTrigger::CatchUp,
                "skipped_missed",
                "2 runs missed".into(),
            )
            .await
            .unwrap();
        let states = store.schedule_states().await.unwrap();
        // The evening schedule only skipped: it has no state of its own.
        assert_eq!(states.len(), 1);
        let morning = &states[0];
        assert_eq!(morning.name, "morning");
        assert_eq!(morning.timetable, "0 8 * * * (UTC)");
        assert_eq!(morning.next_run_at, Some(at(8)));
        assert!(morning.last_run_at.is_some());
        // A restart during the run marks it interrupted.
        assert_eq!(store.schedule_runs_interrupted().await.unwrap(), 1);
        store
            .schedule_run_finished(
                id,
                RunEnd {
                    outcome: "posted".into(),
                    detail: None,
                    tokens: 42,
                },
            )
            .await
            .unwrap();
        let runs = store.schedule_runs_since(at(0), 10).await.unwrap();
        assert_eq!(runs.len(), 2);
        let posted = runs.iter().find(|r| r.name == "morning").unwrap();
        assert_eq!((posted.outcome.as_str(), posted.tokens), ("posted", 42));
        // A silent run and one still going count as neither posted, skipped nor failed.
        for outcome in ["silent", RUNNING, "model_failed"] {
            let id = store
                .schedule_run_started("morning", at(9), RunTrigger::Manual)
                .await
                .unwrap();
            if outcome != RUNNING {
                let end = RunEnd {
                    outcome: outcome.into(),
                    detail: None,
                    tokens: 1,
                };
                store.schedule_run_finished(id, end).await.unwrap();
            }
        }
        let summary = store.schedule_summary(at(0)).await.unwrap();
        let counts: Vec<_> = summary
            .iter()
            .map(|s| {
                (
                    s.last.name.as_str(),
                    s.runs,
                    s.posted,
                    s.skipped,
                    s.failed,
                    s.tokens,
                )
            })
            .collect();
        assert_eq!(
            counts,
            [("evening", 1, 0, 1, 0, 0), ("morning", 4, 1, 0, 1, 44)]
        );
        assert_eq!(summary[1].last.outcome, "model_failed", "the latest run");
        assert_eq!(
            store
                .schedule_runs_prune(Utc::now() + chrono::Duration::hours(1))
                .await
                .unwrap(),
            5
        );
        store.close().await.unwrap();
    }
}
