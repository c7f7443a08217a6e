//! The `schedules` section: the bot speaks first. Each schedule names a cron expression and a
//! time zone (`crate::timetable`), the place it posts in (written as `air-friends places
//! explain` takes one, e.g. `discord/guild/1/channel/2`), and a prompt file under
//! `{prompts.dir}/schedules/`. At each run the daemon starts an agent turn in that place as a
//! message would (`docs/SCHEDULES.md`). The file's own checks are in `validate/mod.rs`; the
//! place and the prompt file are the machine's (`app/check.rs`).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// One `schedules:` entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ScheduleConfig {
    /// The schedule's name: how logs, metrics (a bounded label), the store and `air-friends
    /// schedules run NAME` name it.
    pub name: String,
    /// When it runs: five cron fields (minute hour day-of-month month day-of-week), six with a
    /// leading seconds field, or `@daily`, `@weekly`, ….
    pub cron: String,
    /// The IANA time zone the cron fields are read in.
    pub time_zone: String,
    /// Where the bot posts: a Discord channel or thread (`discord/guild/G/channel/C`; the guild
    /// lets `places:` rules naming it fit), a Misskey channel (`misskey/channel/C`), or the
    /// bot's own Misskey timeline (`misskey`).
    pub place: String,
    /// A post on the bot's Misskey timeline: `public`, `home` (the default) or `followers`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub visibility: Option<String>,
    /// The task, a Markdown file: relative paths are under `{prompts.dir}/schedules/`.
    pub prompt: PathBuf,
    /// Skip a run when nobody wrote in the place since the previous run.
    pub quiet_if_no_activity: bool,
    /// A run missed while the daemon was down runs once at start when it is at most this many
    /// minutes late; older ones are recorded as skipped.
    pub catch_up_minutes: u64,
    /// Off: never runs (its state is kept).
    pub enabled: bool,
}

impl Default for ScheduleConfig {
    fn default() -> Self {
        Self {
            name: String::new(),
            cron: String::new(),
            time_zone: "UTC".to_owned(),
            place: String::new(),
            prompt: PathBuf::new(),
            visibility: None,
            quiet_if_no_activity: false,
            catch_up_minutes: 30,
            enabled: true,
        }
    }
}

impl ScheduleConfig {
    /// The catch-up window.
    pub fn catch_up(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.catch_up_minutes.saturating_mul(60))
    }

    /// The prompt file: `prompt` when absolute, else under `{prompts_dir}/schedules/`.
    pub fn prompt_path(&self, prompts_dir: &std::path::Path) -> PathBuf {
        if self.prompt.is_absolute() {
            self.prompt.clone()
        } else {
            prompts_dir.join("schedules").join(&self.prompt)
        }
    }
}
