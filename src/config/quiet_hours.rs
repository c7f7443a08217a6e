//! `memory.maintenance.quietHours`: a daily window of local wall-clock time, written
//! `"HH:MM-HH:MM"`. The window may run past midnight (`"23:00-05:00"`); the same start and end
//! (`"00:00-00:00"`) means all day. A bad value is a configuration error naming the key.

use std::fmt;

use chrono::{Duration, NaiveDateTime, NaiveTime, Timelike};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A daily window `[from, to)` of local time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuietHours {
    from: NaiveTime,
    to: NaiveTime,
}

impl QuietHours {
    /// A window from `from` to `to` (all day when they are equal).
    pub fn new(from: NaiveTime, to: NaiveTime) -> Self {
        Self { from, to }
    }

    /// Parses `"HH:MM-HH:MM"` (24-hour clock).
    pub fn parse(text: &str) -> Result<Self, String> {
        let bad = || format!("{text:?} is not a window like \"03:00-06:00\" (24-hour HH:MM-HH:MM)");
        let (from, to) = text.trim().split_once('-').ok_or_else(bad)?;
        let time = |t: &str| NaiveTime::parse_from_str(t.trim(), "%H:%M").map_err(|_| bad());
        Ok(Self::new(time(from)?, time(to)?))
    }

    /// Whether the window is the whole day.
    pub fn is_all_day(&self) -> bool {
        self.from == self.to
    }

    /// Whether local time `t` is inside the window.
    pub fn contains(&self, t: NaiveTime) -> bool {
        let t = t.with_nanosecond(0).unwrap_or(t);
        match self.from.cmp(&self.to) {
            std::cmp::Ordering::Equal => true,
            std::cmp::Ordering::Less => self.from <= t && t < self.to,
            std::cmp::Ordering::Greater => t >= self.from || t < self.to,
        }
    }

    /// How long from local time `now` until the window next opens (zero inside it).
    pub fn until_open(&self, now: NaiveDateTime) -> std::time::Duration {
        if self.contains(now.time()) {
            return std::time::Duration::ZERO;
        }
        let mut start = now.date().and_time(self.from);
        if start <= now {
            start += Duration::days(1);
        }
        (start - now).to_std().unwrap_or_default()
    }
}

impl Default for QuietHours {
    /// 03:00 to 06:00.
    fn default() -> Self {
        Self::new(
            NaiveTime::from_hms_opt(3, 0, 0).unwrap_or_default(),
            NaiveTime::from_hms_opt(6, 0, 0).unwrap_or_default(),
        )
    }
}

impl fmt::Display for QuietHours {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}-{}",
            self.from.format("%H:%M"),
            self.to.format("%H:%M")
        )
    }
}

impl Serialize for QuietHours {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for QuietHours {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        Self::parse(&text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::NaiveDate;

    fn t(h: u32, m: u32) -> NaiveTime {
        NaiveTime::from_hms_opt(h, m, 0).unwrap()
    }

    fn at(h: u32, m: u32) -> NaiveDateTime {
        NaiveDate::from_ymd_opt(2026, 12, 1)
            .unwrap()
            .and_time(t(h, m))
    }

    #[test]
    fn a_window_inside_one_day() {
        let q = QuietHours::parse("03:00-06:00").unwrap();
        assert!(!q.contains(t(2, 59)));
        assert!(q.contains(t(3, 0)));
        assert!(q.contains(t(5, 59)));
        assert!(!q.contains(t(6, 0)));
        assert_eq!(q.until_open(at(2, 30)).as_secs(), 30 * 60);
        assert_eq!(q.until_open(at(4, 0)).as_secs(), 0);
        assert_eq!(q.until_open(at(7, 0)).as_secs(), 20 * 3600);
        assert_eq!(q.to_string(), "03:00-06:00");
    }

    #[test]
    fn a_window_past_midnight_and_all_day() {
        let q = QuietHours::parse(" 23:30 - 01:00 ").unwrap();
        assert!(q.contains(t(23, 45)) && q.contains(t(0, 30)));
        assert!(!q.contains(t(1, 0)) && !q.contains(t(12, 0)));
        assert_eq!(q.until_open(at(22, 30)).as_secs(), 3600);
        let all = QuietHours::parse("00:00-00:00").unwrap();
        assert!(all.is_all_day() && all.contains(t(12, 0)));
        assert_eq!(all.until_open(at(9, 0)).as_secs(), 0);
    }

    #[test]
    fn bad_windows_are_refused_with_the_expected_shape() {
        for bad in [
            "",
            "03:00",
            "3-6",
            "25:00-06:00",
            "03:00-06:61",
            "03:00–06:00",
        ] {
            let e = QuietHours::parse(bad).unwrap_err();
            assert!(e.contains("HH:MM-HH:MM"), "{bad}: {e}");
        }
    }
}
