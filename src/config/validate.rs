//! Every cross-field and value check of the configuration, in one place.
//!
//! `Config::validate` collects all problems (not just the first) so an operator fixes a file in
//! one pass. Each problem names the exact key path.

use std::net::IpAddr;
use std::path::Component;

use super::{AuthHeader, Config, ConfigError, ConfigIssue, ReplyTo};

impl Config {
    /// Checks the whole configuration; returns every problem found.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let mut v = Problems::default();
        self.check_platforms(&mut v);
        self.check_access_control(&mut v);
        self.check_agent(&mut v);
        self.check_gateway(&mut v);
        self.check_listeners(&mut v);
        self.check_skills(&mut v);
        self.check_reminders_and_memory(&mut v);
        self.check_attachments(&mut v);
        self.check_paths_and_logging(&mut v);
        if v.0.is_empty() {
            Ok(())
        } else {
            Err(ConfigError::Problems(v.0))
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
    }

    fn check_agent(&self, v: &mut Problems) {
        let a = &self.agent;
        if a.command.trim().is_empty() {
            v.add("agent.command", "must not be empty");
        }
        if a.max_concurrent_sessions == 0 {
            v.add("agent.maxConcurrentSessions", "must be at least 1");
        }
        if a.max_queued_per_conversation == 0 {
            v.add("agent.maxQueuedPerConversation", "must be at least 1");
        }
        for (key, ms) in [
            ("agent.connectTimeoutMs", a.connect_timeout_ms),
            ("agent.idleTimeoutMs", a.idle_timeout_ms),
            ("agent.maxTurnMs", a.max_turn_ms),
        ] {
            if ms == 0 {
                v.add(key, "must be greater than 0");
            }
        }
        if a.idle_timeout_ms > a.max_turn_ms {
            v.add(
                "agent.idleTimeoutMs",
                format!(
                    "{} is longer than agent.maxTurnMs ({}); it would never fire",
                    a.idle_timeout_ms, a.max_turn_ms
                ),
            );
        }
        let w = &a.warm;
        if w.enabled {
            for (key, zero) in [
                ("agent.warm.idleMs", w.idle_ms == 0),
                ("agent.warm.maxProcesses", w.max_processes == Some(0)),
                ("agent.warm.maxTurns", w.max_turns == 0),
                ("agent.warm.maxContextTokens", w.max_context_tokens == 0),
            ] {
                if zero {
                    v.add(
                        key,
                        "must be greater than 0 (agent.warm.enabled: false turns warm agents off)",
                    );
                }
            }
        }
        if self.context.important_memories_budget >= a.token_limit {
            v.add(
                "context.importantMemoriesBudget",
                format!(
                    "{} is not less than agent.tokenLimit ({}): the memories would leave no room for the conversation",
                    self.context.important_memories_budget, a.token_limit
                ),
            );
        }
        if a.token_limit < 1_000 {
            v.add(
                "agent.tokenLimit",
                "must be at least 1000 (the instructions alone need several hundred tokens)",
            );
        }
        if let Some(model) = &a.model
            && !model.contains('/')
        {
            v.add(
                "agent.model",
                format!("{model:?} must be `provider/model`, e.g. `openrouter/anthropic/claude-sonnet-4`"),
            );
        }
        for (i, name) in a.auto_approve_skills.iter().enumerate() {
            if !is_skill_name(name) {
                v.add(
                    format!("agent.autoApproveSkills.{i}"),
                    format!("{name:?} is not a skill name (lowercase letters, digits, hyphens)"),
                );
            }
        }
        for (key, names) in [
            ("agent.providerEnvVars", &a.provider_env_vars),
            ("agent.sandbox.allowedEnvVars", &a.sandbox.allowed_env_vars),
        ] {
            for (i, name) in names.iter().enumerate() {
                if !is_env_name(name) {
                    v.add(
                        format!("{key}.{i}"),
                        format!("{name:?} is not an environment variable name"),
                    );
                }
            }
        }
        for (i, entry) in a.sandbox.egress_allow_hosts.iter().enumerate() {
            if let Err(problem) = crate::egress::parse_allow_entry(entry) {
                v.add(
                    format!("agent.sandbox.egressAllowHosts.{i}"),
                    problem.to_string(),
                );
            }
        }
        for name in a.env.keys() {
            if !is_env_name(name) {
                v.add(
                    format!("agent.env.{name}"),
                    "not an environment variable name",
                );
            }
        }
    }

    /// `agent.providers`: ids usable as one URL path segment, upstream URLs that keep the key
    /// on TLS (plain `http` only to loopback or without a key), header names the gateway can
    /// send without clobbering its own framing or auth.
    fn check_gateway(&self, v: &mut Problems) {
        for (id, p) in &self.agent.providers {
            let key = format!("agent.providers.{id}");
            if !is_provider_id(id) {
                v.add(
                    &key,
                    format!("{id:?} is not a provider id (1-64 of a-z, 0-9, `.`, `_`, `-`; starting with a letter or digit)"),
                );
            }
            if let Err(problem) = check_base_url(&p.base_url, !p.api_key_env.is_empty()) {
                v.add(format!("{key}.baseUrl"), problem);
            }
            if !p.api_key_env.is_empty() && !is_env_name(&p.api_key_env) {
                v.add(
                    format!("{key}.apiKeyEnv"),
                    format!("{:?} is not an environment variable name", p.api_key_env),
                );
            }
            if let AuthHeader::Custom(name) = &p.auth_header
                && (!is_header_name(name) || RESERVED_HEADERS.contains(&name.as_str()))
            {
                v.add(
                    format!("{key}.authHeader"),
                    format!(
                        "{name:?} must be `bearer`, `x-api-key` or a header name other than {}",
                        RESERVED_HEADERS.join(", ")
                    ),
                );
            }
            for (i, name) in p.pass_headers.iter().enumerate() {
                let lower = name.to_ascii_lowercase();
                if !is_header_name(&lower)
                    || RESERVED_HEADERS.contains(&lower.as_str())
                    || ["authorization", "x-api-key", p.auth_header.as_str()]
                        .contains(&lower.as_str())
                {
                    v.add(
                        format!("{key}.passHeaders.{i}"),
                        format!("{name:?} cannot be passed: not a header name, an auth header or one the gateway sets itself"),
                    );
                }
            }
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
            match (e.provider.is_empty(), e.base_url.is_empty()) {
                (true, true) => v.add(
                    "memory.embeddings",
                    "needs a provider (one of agent.providers) or a baseUrl",
                ),
                (false, false) => v.add(
                    "memory.embeddings.baseUrl",
                    "set either provider or baseUrl, not both",
                ),
                (false, true) if !self.agent.providers.contains_key(&e.provider) => v.add(
                    "memory.embeddings.provider",
                    format!("{:?} is not one of agent.providers", e.provider),
                ),
                (true, false) => {
                    if let Err(why) = check_base_url(&e.base_url, !e.api_key_env.is_empty()) {
                        v.add("memory.embeddings.baseUrl", why);
                    }
                }
                _ => {}
            }
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

/// The levels `logging.level` accepts on its own or after `target=`.
const LOG_LEVELS: &[&str] = &["off", "error", "warn", "info", "debug", "trace"];

/// `logging.level`: a tracing `EnvFilter` whose every directive is a level or ends in `=level`.
/// `EnvFilter` alone would take a bare word such as `loud` as "everything from target `loud`",
/// which silences the daemon's own logs.
fn check_log_filter(filter: &str) -> Result<(), String> {
    let is_level = |s: &str| LOG_LEVELS.iter().any(|l| l.eq_ignore_ascii_case(s.trim()));
    let directives: Vec<&str> = filter
        .split(',')
        .map(str::trim)
        .filter(|d| !d.is_empty())
        .collect();
    if directives.is_empty() {
        return Err("is empty".into());
    }
    for d in &directives {
        let level_ok = match d.rsplit_once('=') {
            Some((_, level)) => is_level(level),
            None => is_level(d),
        };
        if !level_ok {
            return Err(format!(
                "is not a log level or filter (`{d}` names no level)"
            ));
        }
    }
    tracing_subscriber::EnvFilter::try_new(filter)
        .map(drop)
        .map_err(|e| format!("is not a log level or filter ({e})"))
}

/// Collected problems.
#[derive(Default)]
struct Problems(Vec<ConfigIssue>);

impl Problems {
    fn add(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.0.push(ConfigIssue::new(path, message));
    }
}

/// Parses a listener host: an IP address or `localhost`.
pub fn parse_host(host: &str) -> Option<IpAddr> {
    if host.eq_ignore_ascii_case("localhost") {
        return Some(IpAddr::from([127, 0, 0, 1]));
    }
    host.trim_start_matches('[')
        .trim_end_matches(']')
        .parse()
        .ok()
}

fn is_snowflake(id: &str) -> bool {
    crate::names::parse_snowflake(id).is_some()
}

/// Skill names (see [`crate::names::is_skill_name`]).
pub fn is_skill_name(name: &str) -> bool {
    crate::names::is_skill_name(name)
}

/// Headers a provider entry may not name: the gateway sets or strips them itself.
const RESERVED_HEADERS: &[&str] = &[
    "host",
    "content-length",
    "content-type",
    "content-encoding",
    "accept-encoding",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "te",
    "trailer",
    "upgrade",
    "proxy-authorization",
    "proxy-authenticate",
    "proxy-connection",
    "cookie",
];

fn is_provider_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 64
        && id.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && id.bytes().all(|b| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'_' | b'-')
        })
}

fn is_header_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// A provider's `baseUrl`: `http(s)://host[:port][/path]`, no credentials, query or fragment;
/// plain `http` only to a loopback host when a key would be sent.
fn check_base_url(url: &str, sends_key: bool) -> Result<(), String> {
    let parsed = reqwest::Url::parse(url).map_err(|e| format!("{url:?} is not a URL ({e})"))?;
    if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none() {
        return Err(format!("{url:?} must be an http(s) URL with a host"));
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err("must not carry credentials; name the key variable in apiKeyEnv".into());
    }
    if parsed.query().is_some() || parsed.fragment().is_some() {
        return Err(format!("{url:?} must not have a query or fragment"));
    }
    let loopback = parsed
        .host_str()
        .and_then(parse_host)
        .is_some_and(|ip| ip.is_loopback());
    if sends_key && parsed.scheme() == "http" && !loopback {
        return Err(format!(
            "{url:?} would send the key unencrypted; use https (plain http only to loopback or with apiKeyEnv: \"\")"
        ));
    }
    Ok(())
}

fn is_env_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

fn check_whitelist_entry(entry: &str) -> Result<(), String> {
    let parts: Vec<&str> = entry.split('/').collect();
    let [platform, kind, id] = parts.as_slice() else {
        return Err(format!(
            "{entry:?} must look like `platform/account/ID` or `platform/channel/ID`"
        ));
    };
    if !matches!(*platform, "discord" | "misskey" | "console") {
        return Err(format!(
            "{entry:?}: platform must be discord, misskey or console"
        ));
    }
    if !matches!(*kind, "account" | "channel") {
        return Err(format!(
            "{entry:?}: the middle part must be account or channel"
        ));
    }
    if id.is_empty() {
        return Err(format!("{entry:?}: the ID is missing"));
    }
    Ok(())
}
