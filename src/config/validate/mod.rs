//! Every cross-field and value check of the configuration, in one place: the sections' checks
//! here and in `agent.rs`, the checks of single values in `values.rs`.
//!
//! `Config::validate` collects all problems (not just the first) so an operator fixes a file in
//! one pass. Each problem names the exact key path.

mod agent;
mod mcp;
mod places;
mod schedules;
mod values;

use std::path::Component;

use super::{Config, ConfigError, ConfigIssue, ReplyTo};
use values::{LOG_LEVELS, check_base_url, check_log_filter, check_whitelist_entry, is_snowflake};
pub use values::{is_skill_name, parse_host};

impl Config {
    /// Checks the whole configuration; returns every problem found.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let mut v = Problems::default();
        self.check_platforms(&mut v);
        self.check_access_control(&mut v);
        self.check_places(&mut v);
        self.check_schedules(&mut v);
        self.check_agent(&mut v);
        self.check_gateway(&mut v);
        self.check_listeners(&mut v);
        self.check_skills(&mut v);
        self.check_reminders_and_memory(&mut v);
        self.check_attachments(&mut v);
        self.check_transcription(&mut v);
        self.check_speech(&mut v);
        self.check_mcp(&mut v);
        self.check_admin(&mut v);
        self.check_paths_and_logging(&mut v);
        if v.0.is_empty() {
            Ok(())
        } else {
            Err(ConfigError::Problems(v.0))
        }
    }

    /// A service the daemon calls (embeddings, transcription): a provider of `agent.providers`,
    /// or a `baseUrl` of its own, not both.
    fn check_service(
        &self,
        v: &mut Problems,
        at: &str,
        provider: &str,
        base_url: &str,
        api_key_env: &str,
    ) {
        match (provider.is_empty(), base_url.is_empty()) {
            (true, true) => v.add(at, "needs a provider (one of agent.providers) or a baseUrl"),
            (false, false) => v.add(
                format!("{at}.baseUrl"),
                "set either provider or baseUrl, not both",
            ),
            (false, true) if !self.agent.providers.contains_key(provider) => v.add(
                format!("{at}.provider"),
                format!("{provider:?} is not one of agent.providers"),
            ),
            (true, false) => {
                if let Err(why) = check_base_url(base_url, !api_key_env.is_empty()) {
                    v.add(format!("{at}.baseUrl"), why);
                }
            }
            _ => {}
        }
    }

    fn check_transcription(&self, v: &mut Problems) {
        let Some(t) = &self.attachments.transcription else {
            return;
        };
        const AT: &str = "attachments.transcription";
        self.check_service(v, AT, &t.provider, &t.base_url, &t.api_key_env);
        if t.model.trim().is_empty() {
            v.add(
                format!("{AT}.model"),
                "required (the transcription model's name)",
            );
        }
        let language = t.language.trim();
        let code =
            (2..=3).contains(&language.len()) && language.bytes().all(|b| b.is_ascii_lowercase());
        if !language.is_empty() && !code {
            v.add(
                format!("{AT}.language"),
                format!("{language:?} is not an ISO-639-1 code such as en or ja (empty: detected)"),
            );
        }
        if !(1..=3_600).contains(&t.max_seconds) {
            v.add(format!("{AT}.maxSeconds"), "must be between 1 and 3600");
        }
        if t.max_mb == 0 {
            v.add(format!("{AT}.maxMb"), "must be greater than 0");
        }
        if t.timeout_ms == 0 {
            v.add(format!("{AT}.timeoutMs"), "must be greater than 0");
        }
        if t.minutes_per_user_per_day == Some(0) {
            v.add(
                format!("{AT}.minutesPerUserPerDay"),
                "must be at least 1 (null: no limit; remove transcription to turn it off)",
            );
        }
    }

    fn check_speech(&self, v: &mut Problems) {
        let Some(t) = &self.speech else {
            return;
        };
        const AT: &str = "speech";
        self.check_service(v, AT, &t.provider, &t.base_url, &t.api_key_env);
        for (key, value) in [("model", &t.model), ("voice", &t.voice)] {
            if value.trim().is_empty() {
                v.add(format!("{AT}.{key}"), "required");
            }
        }
        if !(1..=4_096).contains(&t.max_chars) {
            v.add(format!("{AT}.maxChars"), "must be between 1 and 4096");
        }
        if t.timeout_ms == 0 {
            v.add(format!("{AT}.timeoutMs"), "must be greater than 0");
        }
        if t.minutes_per_user_per_day == Some(0) {
            v.add(
                format!("{AT}.minutesPerUserPerDay"),
                "must be at least 1 (null: no limit; remove speech to turn voice replies off)",
            );
        }
    }

    fn check_attachments(&self, v: &mut Problems) {
        let a = &self.attachments;
        if !a.enabled {
            return;
        }
        for (key, zero) in [
            ("attachments.maxFileMb", a.max_file_mb == 0),
            ("attachments.maxTotalMb", a.max_total_mb == 0),
            ("attachments.timeoutMs", a.timeout_ms == 0),
            ("attachments.maxImagePixels", a.max_image_pixels == 0),
        ] {
            if zero {
                v.add(
                    key,
                    "must be greater than 0 (attachments.enabled: false stops downloads)",
                );
            }
        }
        if a.max_total_mb < a.max_file_mb {
            v.add(
                "attachments.maxTotalMb",
                format!(
                    "{} is less than attachments.maxFileMb ({}): a file of the largest size could never be fetched",
                    a.max_total_mb, a.max_file_mb
                ),
            );
        }
        if a.max_file_mb > 1_024 {
            v.add(
                "attachments.maxFileMb",
                "must be at most 1024 (files are held in memory while they are checked)",
            );
        }
        for (i, host) in a.allow_hosts.iter().enumerate() {
            if crate::egress::parse_allow_entry(host).is_err() {
                v.add(
                    format!("attachments.allowHosts.{i}"),
                    format!(
                        "{host:?} is not a host name (lowercase, no scheme or path, optional :port)"
                    ),
                );
            }
        }
    }

    fn check_platforms(&self, v: &mut Problems) {
        let d = &self.platforms.discord;
        if d.enabled && d.token.is_empty() {
            v.add(
                "platforms.discord.token",
                "required when platforms.discord.enabled (or set DISCORD_TOKEN)",
            );
        }
        for (key, url) in [
            ("platforms.discord.apiBaseUrl", &d.api_base_url),
            ("platforms.discord.gatewayUrl", &d.gateway_url),
        ] {
            if let Some(url) = url {
                let ok = ["http://", "https://", "ws://", "wss://"]
                    .iter()
                    .any(|p| url.starts_with(p) && url.len() > p.len());
                if !ok {
                    v.add(key, format!("{url:?} is not an http(s) or ws(s) URL"));
                }
            }
        }
        for (i, id) in d.guild_ids.iter().enumerate() {
            if !is_snowflake(id) {
                v.add(
                    format!("platforms.discord.guildIds.{i}"),
                    format!("{id:?} is not a Discord id (digits only)"),
                );
            }
        }

        let m = &self.platforms.misskey;
        if m.enabled {
            if m.host.trim().is_empty() {
                v.add(
                    "platforms.misskey.host",
                    "required when platforms.misskey.enabled (or set MISSKEY_HOST)",
                );
            }
            if m.token.is_empty() {
                v.add(
                    "platforms.misskey.token",
                    "required when platforms.misskey.enabled (or set MISSKEY_TOKEN)",
                );
            }
        }
        if m.host.contains("://") || m.host.contains('/') {
            v.add(
                "platforms.misskey.host",
                format!(
                    "{:?} must be host[:port] without scheme or path (use `secure` for http/https)",
                    m.host
                ),
            );
        }
    }

    fn check_access_control(&self, v: &mut Problems) {
        let ac = &self.access_control;
        for (i, entry) in ac.whitelist.iter().enumerate() {
            if let Err(problem) = check_whitelist_entry(entry) {
                v.add(format!("accessControl.whitelist.{i}"), problem);
            }
        }
        if ac.reply_to == ReplyTo::Whitelist && ac.whitelist.is_empty() {
            v.add(
                "accessControl.whitelist",
                "empty while accessControl.replyTo is `whitelist`: the bot would answer nobody",
            );
        }
        let rl = &self.rate_limit;
        if rl.enabled {
            if rl.max_messages == 0 {
                v.add("rateLimit.maxMessages", "must be at least 1");
            }
            if rl.window_ms == 0 {
                v.add("rateLimit.windowMs", "must be greater than 0");
            }
        }
        if self.catch_up.retention_days == 0 {
            v.add(
                "catchUp.retentionDays",
                "must be at least 1: a message id must be remembered to be answered only once",
            );
        }
        if self.catch_up.max_per_channel == 0 {
            v.add(
                "catchUp.maxPerChannel",
                "must be at least 1 (channelsActiveWithinHours: 0 turns the catch-up off)",
            );
        }
    }

    fn check_listeners(&self, v: &mut Problems) {
        let s = &self.skill_api;
        match parse_host(&s.host) {
            None => v.add(
                "skillApi.host",
                format!("{:?} is not an IP address or `localhost`", s.host),
            ),
            Some(ip) if !ip.is_loopback() && !s.allow_non_loopback => v.add(
                "skillApi.host",
                format!(
                    "{} is not a loopback address; the Skill API is for local agent processes \
                     (set skillApi.allowNonLoopback: true to override)",
                    s.host
                ),
            ),
            Some(_) => {}
        }
        if s.session_timeout_ms == 0 {
            v.add("skillApi.sessionTimeoutMs", "must be greater than 0");
        }
        let warm = &self.agent.warm;
        if warm.enabled && warm.idle_ms > s.session_timeout_ms {
            v.add(
                "agent.warm.idleMs",
                format!(
                    "{} is longer than skillApi.sessionTimeoutMs ({}): a warm agent's Skill API \
                     session would expire while it waits",
                    warm.idle_ms, s.session_timeout_ms
                ),
            );
        }
        if s.header_read_timeout_ms == 0 {
            v.add("skillApi.headerReadTimeoutMs", "must be greater than 0");
        }
        if s.max_connections == 0 {
            v.add("skillApi.maxConnections", "must be greater than 0");
        }
        if parse_host(&self.health.host).is_none() {
            v.add(
                "health.host",
                format!("{:?} is not an IP address or `localhost`", self.health.host),
            );
        }
        if s.port != 0 && s.port == self.health.port {
            v.add(
                "health.port",
                format!("{} is also skillApi.port; use two different ports", s.port),
            );
        }
    }

    fn check_skills(&self, v: &mut Problems) {
        for (i, name) in self.skills.disabled.iter().enumerate() {
            if !is_skill_name(name) {
                v.add(
                    format!("skills.disabled.{i}"),
                    format!("{name:?} is not a skill name"),
                );
            }
        }
        let f = &self.skills.send_file;
        if f.max_file_size_mb == 0 {
            v.add("skills.sendFile.maxFileSizeMb", "must be at least 1");
        }
        if f.max_files_per_invocation == 0 {
            v.add(
                "skills.sendFile.maxFilesPerInvocation",
                "must be at least 1",
            );
        }
        if f.max_total_size_mb < f.max_file_size_mb {
            v.add(
                "skills.sendFile.maxTotalSizeMb",
                format!(
                    "{} is smaller than skills.sendFile.maxFileSizeMb ({})",
                    f.max_total_size_mb, f.max_file_size_mb
                ),
            );
        }
        for (i, ext) in f.allowed_extensions.iter().enumerate() {
            if ext.is_empty() || ext.starts_with('.') || ext.contains(['/', '\\']) {
                v.add(
                    format!("skills.sendFile.allowedExtensions.{i}"),
                    format!("{ext:?}: write extensions without the dot, e.g. `png`"),
                );
            }
        }
    }

    fn check_reminders_and_memory(&self, v: &mut Problems) {
        let r = &self.reminders;
        if r.min_interval_ms == 0 {
            v.add("reminders.minIntervalMs", "must be greater than 0");
        }
        if !(1..=366).contains(&r.max_days_ahead) {
            v.add("reminders.maxDaysAhead", "must be between 1 and 366");
        }
        if r.max_reminders_per_user == 0 {
            v.add("reminders.maxRemindersPerUser", "must be at least 1");
        }
        if r.max_delivery_attempts == 0 {
            v.add("reminders.maxDeliveryAttempts", "must be at least 1");
        }
        let m = &self.memory;
        if m.recent_message_limit > 100 {
            v.add(
                "memory.recentMessageLimit",
                "must be at most 100 (platform history pages)",
            );
        }
        if m.max_content_chars == 0 {
            v.add("memory.maxContentChars", "must be at least 1");
        }
        let mm = &m.maintenance;
        if mm.interval_hours == 0 {
            v.add("memory.maintenance.intervalHours", "must be at least 1");
        }
        if !(2..=1_000).contains(&mm.max_memories_per_run) {
            v.add(
                "memory.maintenance.maxMemoriesPerRun",
                "must be between 2 and 1000 (the memories shown to one run)",
            );
        }
        if let Some(e) = &m.embeddings {
            self.check_service(
                v,
                "memory.embeddings",
                &e.provider,
                &e.base_url,
                &e.api_key_env,
            );
            if e.model.trim().is_empty() {
                v.add(
                    "memory.embeddings.model",
                    "required (the embedding model's name)",
                );
            }
            if !(1..=8_192).contains(&e.dimensions) {
                v.add(
                    "memory.embeddings.dimensions",
                    "must be between 1 and 8192 (the length of the model's vectors)",
                );
            }
            if e.timeout_ms == 0 || e.batch_size == 0 || e.batch_size > 2_048 {
                v.add(
                    "memory.embeddings",
                    "timeoutMs must be greater than 0 and batchSize between 1 and 2048",
                );
            }
        }
    }

    fn check_paths_and_logging(&self, v: &mut Problems) {
        let dir = std::path::Path::new(&self.workspace.workspaces_dir);
        let safe = !self.workspace.workspaces_dir.is_empty()
            && dir.components().all(|c| matches!(c, Component::Normal(_)));
        if !safe {
            v.add(
                "workspace.workspacesDir",
                format!(
                    "{:?} must be a relative folder name under workspace.repoPath (no `..`, no leading `/`)",
                    self.workspace.workspaces_dir
                ),
            );
        }
        if self.workspace.repo_path.as_os_str().is_empty() {
            v.add("workspace.repoPath", "must not be empty");
        }
        if !crate::names::is_language_tag(&self.prompts.language) {
            v.add("prompts.language", not_a_language(&self.prompts.language));
        }
        if let Err(problem) = check_log_filter(&self.logging.level) {
            v.add(
                "logging.level",
                format!(
                    "{:?} {problem}; use one of {}, or directives such as `info,air_friends=debug`",
                    self.logging.level,
                    LOG_LEVELS.join(", ")
                ),
            );
        }
    }
}

/// Why `tag` cannot name a language of the daemon's texts.
pub(super) fn not_a_language(tag: &str) -> String {
    format!(
        "{tag:?} is not a language tag (like `en`, `ja` or `pt-BR`: it names the file texts/{{language}}.md of prompts.dir)"
    )
}

/// Collected problems.
#[derive(Default)]
struct Problems(Vec<ConfigIssue>);

impl Problems {
    fn add(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.0.push(ConfigIssue::new(path, message));
    }
}

impl Config {
    /// `admin`: the link and session lifetimes.
    fn check_admin(&self, v: &mut Problems) {
        if !(1..=1_440).contains(&self.admin.link_minutes) {
            v.add("admin.linkMinutes", "must be 1 to 1440 (a day)");
        }
        if !(1..=720).contains(&self.admin.session_hours) {
            v.add("admin.sessionHours", "must be 1 to 720 (30 days)");
        }
        if let Some(cost) = &self.admin.cost {
            for (key, price) in [
                ("admin.cost.inputPerMillion", cost.input_per_million),
                ("admin.cost.outputPerMillion", cost.output_per_million),
            ] {
                if !price.is_finite() || price < 0.0 {
                    v.add(key, "must be a price of 0 or more");
                }
            }
            if cost.currency.trim().is_empty() || cost.currency.chars().count() > 8 {
                v.add(
                    "admin.cost.currency",
                    "must be a short name such as USD or EUR",
                );
            }
        }
    }
}
