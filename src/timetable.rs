//! When something recurring happens next: a cron expression read in an IANA time zone
//! ([`Timetable`]), and the one rule for an occurrence that fell due while nobody was there to
//! run it ([`catch_up`]). Operator schedules (`schedules:`) are built on it, and
//! `check-config` and `air-friends schedules list` read it the same way.
//!
//! Cron expressions have five fields (minute, hour, day of month, month, day of week) or six
//! with a leading seconds field, and the `@daily`-style nicknames (the `croner` crate; day of
//! month and day of week combine with OR, as in Vixie cron). Time zones come from the IANA
//! database compiled into the binary (`chrono-tz`), so a host without `/usr/share/zoneinfo`
//! reads them the same.
//!
//! A calendar repetition ([`Repeat`]: every day, week or month at the same wall-clock time in a
//! zone, from a first occurrence) is what recurring reminders follow.
//!
//! Daylight saving time, as Vixie cron: a time the clocks skip (02:30 on a spring-forward night
//! in Europe) runs at the first instant after the gap; a time the clocks pass twice (02:30 on a
//! fall-back night) runs once, at its first pass. A repetition keeps its wall-clock time across
//! the change the same way, and a monthly one on the 31st falls on a shorter month's last day.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use chrono::{DateTime, LocalResult, Months, NaiveDateTime, TimeZone, Utc};
use chrono_tz::Tz;
use croner::Cron;

/// How far ahead an occurrence is looked for before a pattern counts as never matching.
const SEARCH_LIMIT_TRIES: usize = 4;

/// Why a timetable could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TimetableError {
    /// The cron expression is malformed.
    #[error("{cron:?} is not a cron expression ({reason})")]
    Cron {
        /// The expression.
        cron: String,
        /// What the parser said.
        reason: String,
    },
    /// The time zone is not in the IANA database.
    #[error("{0:?} is not an IANA time zone (e.g. UTC, Europe/Berlin, Asia/Tokyo)")]
    Zone(String),
    /// The expression can never match (e.g. 30 February).
    #[error("{0:?} never matches a date")]
    Never(String),
}

/// A cron expression in a time zone.
#[derive(Debug, Clone)]
pub struct Timetable {
    cron: Cron,
    text: String,
    zone: Tz,
}

impl Timetable {
    /// Reads `cron` in the time zone named `zone` (`UTC`, `Europe/Berlin`, …).
    pub fn parse(cron: &str, zone: &str) -> Result<Self, TimetableError> {
        let text = cron.trim().to_owned();
        let parsed = Cron::new(&text)
            .with_seconds_optional()
            .parse()
            .map_err(|e| TimetableError::Cron {
                cron: text.clone(),
                reason: e.to_string(),
            })?;
        let zone = self::zone(zone)?;
        let table = Self {
            cron: parsed,
            text,
            zone,
        };
        // A pattern that matches no date is refused now rather than never running.
        let probe = Utc.with_ymd_and_hms(2000, 1, 1, 0, 0, 0).single();
        if probe.and_then(|t| table.next_after(t)).is_none() {
            return Err(TimetableError::Never(table.text));
        }
        Ok(table)
    }

    /// The time zone.
    pub fn zone(&self) -> Tz {
        self.zone
    }

    /// The first occurrence strictly after `after`; `None` when the expression has no further
    /// occurrence (within the crate's search limit of several years).
    pub fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let mut from = after.with_timezone(&self.zone);
        for _ in 0..SEARCH_LIMIT_TRIES {
            let found = self.cron.find_next_occurrence(&from, false).ok()?;
            let at = found.with_timezone(&Utc);
            if at > after {
                return Some(at);
            }
            // A wall-clock time the clocks pass twice was found at its first pass, which is
            // already over: it does not run again at the second.
            from = match self.zone.from_local_datetime(&found.naive_local()) {
                LocalResult::Ambiguous(_, second) => second,
                _ => found,
            };
        }
        None
    }

    /// The next `n` occurrences after `after`.
    pub fn upcoming(&self, after: DateTime<Utc>, n: usize) -> Vec<DateTime<Utc>> {
        let mut out = Vec::with_capacity(n);
        let mut at = after;
        while out.len() < n {
            let Some(next) = self.next_after(at) else {
                break;
            };
            out.push(next);
            at = next;
        }
        out
    }

    /// The latest occurrence in `(after, until]`, and how many there were (at most `cap` are
    /// counted; past it the count is `cap` and the latest is the `cap`-th). `None` when there
    /// were none.
    pub fn latest_until(
        &self,
        after: DateTime<Utc>,
        until: DateTime<Utc>,
        cap: usize,
    ) -> Option<(DateTime<Utc>, usize)> {
        let mut latest = None;
        let mut count = 0;
        let mut at = after;
        while count < cap {
            match self.next_after(at) {
                Some(next) if next <= until => {
                    latest = Some(next);
                    count += 1;
                    at = next;
                }
                _ => break,
            }
        }
        latest.map(|l| (l, count))
    }

    /// `at` as a wall-clock time of the timetable's zone, e.g. `2026-03-29 03:00 CEST`.
    pub fn local(&self, at: DateTime<Utc>) -> String {
        at.with_timezone(&self.zone)
            .format("%Y-%m-%d %H:%M:%S %Z")
            .to_string()
    }
}

impl fmt::Display for Timetable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.text, self.zone)
    }
}

/// How often a repetition comes back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Every {
    /// Every day.
    Day,
    /// Every week (same weekday).
    Week,
    /// Every month (same day of the month, or the month's last day when it is shorter).
    Month,
}

impl Every {
    /// The spelling in skills and the store.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Day => "day",
            Self::Week => "week",
            Self::Month => "month",
        }
    }
}

impl FromStr for Every {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "day" => Ok(Self::Day),
            "week" => Ok(Self::Week),
            "month" => Ok(Self::Month),
            other => Err(format!("{other:?} is not day, week or month")),
        }
    }
}

/// Whether `zone` names an IANA time zone.
pub fn zone(name: &str) -> Result<Tz, TimetableError> {
    Tz::from_str(name.trim()).map_err(|_| TimetableError::Zone(name.to_owned()))
}

/// Every day, week or month at the wall-clock time of `first` in `zone`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repeat {
    /// How often.
    pub every: Every,
    /// Whose wall clock.
    pub zone: Tz,
    /// The first occurrence.
    pub first: DateTime<Utc>,
}

/// Occurrences looked through for the next one (a repetition missed for longer is over).
const REPEAT_SEARCH: u32 = 100_000;

impl Repeat {
    /// The `n`-th occurrence (the first is 0): `n` days, weeks or months after the first, at
    /// its wall-clock time; `None` past the calendar's end.
    pub fn occurrence(&self, n: u32) -> Option<DateTime<Utc>> {
        let local: NaiveDateTime = self.first.with_timezone(&self.zone).naive_local();
        let at = match self.every {
            Every::Day => local.checked_add_days(chrono::Days::new(u64::from(n)))?,
            Every::Week => local.checked_add_days(chrono::Days::new(7 * u64::from(n)))?,
            // `checked_add_months` keeps the day, or takes the month's last day when shorter.
            Every::Month => local.checked_add_months(Months::new(n))?,
        };
        resolve(self.zone, at)
    }

    /// The first occurrence strictly after `after`, with its number.
    pub fn next_after(&self, after: DateTime<Utc>) -> Option<(u32, DateTime<Utc>)> {
        // A first guess from the elapsed time, then forward (months and DST make it inexact).
        let unit_days = match self.every {
            Every::Day => 1,
            Every::Week => 7,
            Every::Month => 31,
        };
        let elapsed = (after - self.first).num_days().max(0) / unit_days;
        let mut n = u32::try_from(elapsed.saturating_sub(1).max(0)).ok()?;
        for _ in 0..REPEAT_SEARCH {
            let at = self.occurrence(n)?;
            if at > after {
                return Some((n, at));
            }
            n = n.checked_add(1)?;
        }
        None
    }
}

/// A wall-clock time of `zone` as an instant: after the gap when the clocks skip it, its first
/// pass when they pass it twice.
fn resolve(zone: Tz, local: NaiveDateTime) -> Option<DateTime<Utc>> {
    match zone.from_local_datetime(&local) {
        LocalResult::Single(t) | LocalResult::Ambiguous(t, _) => Some(t.with_timezone(&Utc)),
        LocalResult::None => (1..=180).find_map(|minutes| {
            zone.from_local_datetime(&(local + chrono::Duration::minutes(minutes)))
                .earliest()
                .map(|t| t.with_timezone(&Utc))
        }),
    }
}

/// What becomes of an occurrence found due later than its time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Overdue {
    /// Young enough: it runs now, once.
    Run,
    /// Older than the catch-up window: recorded as skipped, never run.
    Skip,
}

/// The catch-up rule: an occurrence due at `due` runs at `now` when it is at most `window` old,
/// else it is skipped.
pub fn catch_up(due: DateTime<Utc>, now: DateTime<Utc>, window: Duration) -> Overdue {
    let late = (now - due).to_std().unwrap_or(Duration::ZERO);
    if late <= window {
        Overdue::Run
    } else {
        Overdue::Skip
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn utc(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text).unwrap().to_utc()
    }

    #[test]
    fn a_daily_time_follows_the_zone_across_both_daylight_saving_changes() {
        let t = Timetable::parse("0 8 * * *", "Europe/Berlin").unwrap();
        // Winter: 08:00 CET is 07:00 UTC; after the spring change 08:00 CEST is 06:00 UTC.
        assert_eq!(
            t.upcoming(utc("2026-03-28T00:00:00Z"), 2),
            [utc("2026-03-28T07:00:00Z"), utc("2026-03-29T06:00:00Z")]
        );
        // Autumn: back to 07:00 UTC the day the clocks go back.
        assert_eq!(
            t.upcoming(utc("2026-10-24T12:00:00Z"), 2),
            [utc("2026-10-25T07:00:00Z"), utc("2026-10-26T07:00:00Z")]
        );
    }

    #[test]
    fn a_skipped_time_runs_after_the_gap_and_a_doubled_time_runs_once() {
        let t = Timetable::parse("30 2 * * *", "Europe/Berlin").unwrap();
        // 2026-03-29 02:30 does not exist in Berlin: it runs at 03:00 CEST (01:00 UTC).
        assert_eq!(
            t.upcoming(utc("2026-03-28T12:00:00Z"), 2),
            [utc("2026-03-29T01:00:00Z"), utc("2026-03-30T00:30:00Z")]
        );
        // 2026-10-25 02:30 happens twice (CEST, then CET): it runs at the first only.
        assert_eq!(
            t.upcoming(utc("2026-10-24T12:00:00Z"), 2),
            [utc("2026-10-25T00:30:00Z"), utc("2026-10-26T01:30:00Z")]
        );
        // Asked from between the two passes, the next is the next day's.
        assert_eq!(
            t.next_after(utc("2026-10-25T01:00:00Z")),
            Some(utc("2026-10-26T01:30:00Z"))
        );
    }

    #[test]
    fn seconds_and_nicknames_are_read() {
        let t = Timetable::parse("*/20 * * * * *", "UTC").unwrap();
        assert_eq!(
            t.upcoming(utc("2026-01-01T00:00:05Z"), 3),
            [
                utc("2026-01-01T00:00:20Z"),
                utc("2026-01-01T00:00:40Z"),
                utc("2026-01-01T00:01:00Z")
            ]
        );
        let weekly = Timetable::parse("@weekly", "Asia/Tokyo").unwrap();
        // Sunday 00:00 in Tokyo is Saturday 15:00 UTC.
        assert_eq!(
            weekly.next_after(utc("2026-12-01T00:00:00Z")),
            Some(utc("2026-12-05T15:00:00Z"))
        );
        assert_eq!(
            weekly.local(utc("2026-12-05T15:00:00Z")),
            "2026-12-06 00:00:00 JST"
        );
    }

    #[test]
    fn bad_expressions_and_zones_say_what_is_wrong() {
        let err = |cron: &str, zone: &str| Timetable::parse(cron, zone).unwrap_err().to_string();
        assert!(err("0 25 * * *", "UTC").contains("is not a cron expression"));
        assert!(err("every day", "UTC").contains("is not a cron expression"));
        assert!(err("0 8 * * *", "Mars/Olympus").contains("is not an IANA time zone"));
        assert!(err("0 0 30 2 *", "UTC").contains("never matches"));
    }

    #[test]
    fn the_latest_missed_occurrence_is_found_and_counted() {
        let t = Timetable::parse("0 * * * *", "UTC").unwrap();
        let (latest, count) = t
            .latest_until(
                utc("2026-01-01T00:30:00Z"),
                utc("2026-01-01T05:10:00Z"),
                100,
            )
            .unwrap();
        assert_eq!((latest, count), (utc("2026-01-01T05:00:00Z"), 5));
        assert_eq!(
            t.latest_until(
                utc("2026-01-01T00:30:00Z"),
                utc("2026-01-01T00:50:00Z"),
                100
            ),
            None
        );
        let (_, capped) = t
            .latest_until(utc("2026-01-01T00:30:00Z"), utc("2026-02-01T00:00:00Z"), 10)
            .unwrap();
        assert_eq!(capped, 10);
    }

    #[test]
    fn a_repetition_keeps_its_wall_clock_time_and_its_day_of_the_month() {
        let berlin = zone("Europe/Berlin").unwrap();
        // 09:00 in Berlin on the day before the spring change: the next is 09:00 CEST.
        let daily = Repeat {
            every: Every::Day,
            zone: berlin,
            first: utc("2026-03-28T08:00:00Z"),
        };
        assert_eq!(daily.occurrence(1), Some(utc("2026-03-29T07:00:00Z")));
        assert_eq!(
            daily.next_after(utc("2026-03-28T08:00:00Z")),
            Some((1, utc("2026-03-29T07:00:00Z")))
        );
        assert_eq!(
            daily.next_after(utc("2026-01-01T00:00:00Z")),
            Some((0, utc("2026-03-28T08:00:00Z")))
        );
        assert_eq!(
            daily.next_after(utc("2026-04-10T07:30:00Z")),
            Some((14, utc("2026-04-11T07:00:00Z")))
        );
        // Monthly on the 31st: February's last day, then the 31st again.
        let monthly = Repeat {
            every: Every::Month,
            zone: zone("UTC").unwrap(),
            first: utc("2027-01-31T12:00:00Z"),
        };
        assert_eq!(
            (1..=2)
                .filter_map(|n| monthly.occurrence(n))
                .collect::<Vec<_>>(),
            [utc("2027-02-28T12:00:00Z"), utc("2027-03-31T12:00:00Z")]
        );
        assert_eq!(
            monthly.next_after(utc("2027-03-31T12:00:00Z")),
            Some((3, utc("2027-04-30T12:00:00Z")))
        );
        // Weekly, skipped time: 02:30 on the spring-forward Sunday runs at 03:00 CEST.
        let weekly = Repeat {
            every: Every::Week,
            zone: berlin,
            first: utc("2026-03-22T01:30:00Z"),
        };
        assert_eq!(weekly.occurrence(1), Some(utc("2026-03-29T01:00:00Z")));
        assert_eq!(weekly.occurrence(2), Some(utc("2026-04-05T00:30:00Z")));
        assert_eq!(
            "fortnight".parse::<Every>().unwrap_err(),
            "\"fortnight\" is not day, week or month"
        );
    }

    #[test]
    fn an_occurrence_runs_late_only_within_the_window() {
        let due = utc("2026-01-01T08:00:00Z");
        let window = Duration::from_secs(30 * 60);
        assert_eq!(
            catch_up(due, utc("2026-01-01T08:29:00Z"), window),
            Overdue::Run
        );
        assert_eq!(
            catch_up(due, utc("2026-01-01T08:31:00Z"), window),
            Overdue::Skip
        );
        assert_eq!(
            catch_up(due, utc("2026-01-01T07:59:00Z"), window),
            Overdue::Run
        );
    }
}
