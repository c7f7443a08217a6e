//! What a schedule does when the daemon starts, from its stored state ([`at_start`]): keep its
//! next run, compute one (a new schedule, or a changed cron or zone), or deal with the runs it
//! missed while the daemon was down — the latest runs once when it is young enough
//! (`catchUpMinutes`, [`crate::timetable::catch_up`]), and the rest are recorded as skipped,
//! never a burst. Pure, so every case is tested at chosen instants.

use chrono::{DateTime, Duration as ChronoDuration, Utc};

use super::Schedule;
use crate::store::ScheduleState;
use crate::timetable::{Overdue, catch_up};

/// Most missed runs counted one by one (an every-second schedule down for a week counts this
/// many, then stops counting).
const MISSED_CAP: usize = 100_000;

/// A schedule's start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AtStart {
    /// The stored next run is still ahead.
    Keep(DateTime<Utc>),
    /// New, or its timetable changed: the next run from now (`None`: never).
    Fresh(Option<DateTime<Utc>>),
    /// Runs fell due while the daemon was down.
    Missed {
        /// The latest of them.
        latest: DateTime<Utc>,
        /// How many (at most [`MISSED_CAP`]).
        count: usize,
        /// The latest runs now; otherwise every one is skipped.
        run_latest: bool,
        /// The next run after now.
        next: Option<DateTime<Utc>>,
    },
}

/// What `schedule`, stored as `state`, does at a start at `now`.
pub fn at_start(schedule: &Schedule, state: Option<&ScheduleState>, now: DateTime<Utc>) -> AtStart {
    let table = &schedule.timetable;
    let due = match state {
        Some(s) if s.timetable == schedule.timetable_key() => s.next_run_at,
        _ => None,
    };
    let Some(due) = due else {
        return AtStart::Fresh(table.next_after(now));
    };
    if due > now {
        return AtStart::Keep(due);
    }
    // `due` itself is the first missed run: count from just before it.
    let (latest, count) = table
        .latest_until(due - ChronoDuration::milliseconds(1), now, MISSED_CAP)
        .unwrap_or((due, 1));
    AtStart::Missed {
        latest,
        count,
        run_latest: catch_up(latest, now, schedule.config.catch_up()) == Overdue::Run,
        next: table.next_after(now),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ScheduleConfig;

    fn utc(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text).unwrap().to_utc()
    }

    fn hourly() -> Schedule {
        let config = ScheduleConfig {
            name: "hourly".into(),
            cron: "0 * * * *".into(),
            place: "discord/guild/1/channel/2".into(),
            prompt: "p.md".into(),
            catch_up_minutes: 30,
            ..ScheduleConfig::default()
        };
        Schedule::new(&config, std::path::Path::new("/p")).unwrap()
    }

    fn stored(s: &Schedule, next: &str) -> ScheduleState {
        ScheduleState {
            name: s.name().into(),
            timetable: s.timetable_key(),
            next_run_at: Some(utc(next)),
            last_run_at: None,
        }
    }

    #[test]
    fn a_new_or_changed_schedule_starts_from_now() {
        let s = hourly();
        let now = utc("2026-01-01T10:20:00Z");
        assert_eq!(
            at_start(&s, None, now),
            AtStart::Fresh(Some(utc("2026-01-01T11:00:00Z")))
        );
        let mut changed = stored(&s, "2026-01-01T09:00:00Z");
        changed.timetable = "0 8 * * * (UTC)".into();
        assert_eq!(
            at_start(&s, Some(&changed), now),
            AtStart::Fresh(Some(utc("2026-01-01T11:00:00Z")))
        );
    }

    #[test]
    fn a_run_still_ahead_is_kept() {
        let s = hourly();
        assert_eq!(
            at_start(
                &s,
                Some(&stored(&s, "2026-01-01T11:00:00Z")),
                utc("2026-01-01T10:20:00Z")
            ),
            AtStart::Keep(utc("2026-01-01T11:00:00Z"))
        );
    }

    #[test]
    fn a_young_missed_run_runs_once_and_an_old_one_is_skipped() {
        let s = hourly();
        // Down from 9:50 to 10:20: the 10:00 run is 20 minutes late, within 30.
        assert_eq!(
            at_start(
                &s,
                Some(&stored(&s, "2026-01-01T10:00:00Z")),
                utc("2026-01-01T10:20:00Z")
            ),
            AtStart::Missed {
                latest: utc("2026-01-01T10:00:00Z"),
                count: 1,
                run_latest: true,
                next: Some(utc("2026-01-01T11:00:00Z")),
            }
        );
        // Down from 6:50 to 10:40: four runs missed, the latest 40 minutes late: none runs.
        assert_eq!(
            at_start(
                &s,
                Some(&stored(&s, "2026-01-01T07:00:00Z")),
                utc("2026-01-01T10:40:00Z")
            ),
            AtStart::Missed {
                latest: utc("2026-01-01T10:00:00Z"),
                count: 4,
                run_latest: false,
                next: Some(utc("2026-01-01T11:00:00Z")),
            }
        );
        // Down from 6:50 to 10:05: four missed, only the latest runs.
        let AtStart::Missed {
            count, run_latest, ..
        } = at_start(
            &s,
            Some(&stored(&s, "2026-01-01T07:00:00Z")),
            utc("2026-01-01T10:05:00Z"),
        )
        else {
            panic!("missed runs expected");
        };
        assert_eq!((count, run_latest), (4, true));
    }
}
