//! The checks of `schedules` that need only the file: names, the cron expression in its time
//! zone (read as the daemon reads it, `crate::timetable`), the prompt file's name and the
//! catch-up window. Whether the place can be posted in and the prompt file is there are the
//! machine's (`app/check.rs`).

use std::path::Component;

use super::Problems;
use super::places::is_place_name;
use crate::config::Config;
use crate::timetable::{Timetable, TimetableError};

/// The longest catch-up window: a week (a run later than that is news to nobody).
const MAX_CATCH_UP_MINUTES: u64 = 7 * 24 * 60;

impl Config {
    /// Every entry of `schedules`.
    pub(super) fn check_schedules(&self, v: &mut Problems) {
        let mut names: Vec<&str> = Vec::new();
        for (i, s) in self.schedules.iter().enumerate() {
            let key = format!("schedules.{i}");
            if !is_place_name(&s.name) {
                v.add(
                    format!("{key}.name"),
                    format!(
                        "{:?} is not a schedule name (1-40 of a-z, 0-9, `-`, `_`, starting with a letter or digit)",
                        s.name
                    ),
                );
            } else if let Some(first) = names.iter().position(|n| *n == s.name) {
                v.add(
                    format!("{key}.name"),
                    format!("{:?} is already the name of schedules.{first}", s.name),
                );
            }
            names.push(&s.name);
            match Timetable::parse(&s.cron, &s.time_zone) {
                Ok(_) => {}
                Err(e @ TimetableError::Zone(_)) => v.add(format!("{key}.timeZone"), e.to_string()),
                Err(e) => v.add(format!("{key}.cron"), e.to_string()),
            }
            if s.place.trim().is_empty() {
                v.add(
                    format!("{key}.place"),
                    "is required: where the bot posts, e.g. discord/guild/1/channel/2",
                );
            }
            if s.prompt.as_os_str().is_empty() {
                v.add(
                    format!("{key}.prompt"),
                    "is required: the task, a Markdown file under prompts/schedules/",
                );
            } else if s
                .prompt
                .components()
                .any(|c| matches!(c, Component::ParentDir))
            {
                v.add(
                    format!("{key}.prompt"),
                    "may not contain `..` (name a file under prompts/schedules/, or an absolute path)",
                );
            }
            if s.catch_up_minutes > MAX_CATCH_UP_MINUTES {
                v.add(
                    format!("{key}.catchUpMinutes"),
                    format!("must be at most {MAX_CATCH_UP_MINUTES} (a week)"),
                );
            }
        }
    }
}
