//! What the agent's skill scripts reach: the Skill API listener (`skillApi`), the per-skill
//! switches (`skills`) and the reminder limits (`reminders`).

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The Skill API listener and sessions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct SkillApiConfig {
    /// Bind address.
    pub host: String,
    /// Bind port (env `SKILL_API_PORT`); 0 picks a free port.
    pub port: u16,
    /// Allow a non-loopback `host`. The API is meant for local agent processes only.
    pub allow_non_loopback: bool,
    /// Idle time after which a session's token stops working.
    pub session_timeout_ms: u64,
    /// A connection that has not sent a complete request head this long after it opened (or
    /// after its last response) is closed, so idle, slow or half-open clients free their slot.
    pub header_read_timeout_ms: u64,
    /// Connections served at once; further connections wait for a free slot (at most about
    /// `headerReadTimeoutMs` when idle clients hold the slots).
    pub max_connections: u32,
    /// Folder of the per-session sockets the sandboxed agents reach the API through
    /// (`{socketDir}/{sessionId}/api.sock`); unset = `{workspace.repoPath}/run`. Created with
    /// mode 0700 when missing; refused when it is a symlink, not ours, or open to group or
    /// others. Keep it short: a socket path has at most 107 bytes.
    pub socket_dir: Option<PathBuf>,
}

impl Default for SkillApiConfig {
    fn default() -> Self {
        Self {
            host: "127.0.0.1".into(),
            port: 3001,
            allow_non_loopback: false,
            session_timeout_ms: 1_800_000,
            header_read_timeout_ms: 10_000,
            max_connections: 512,
            socket_dir: None,
        }
    }
}

impl SkillApiConfig {
    /// `sessionTimeoutMs`: idle time after which a session's token stops working.
    pub fn session_timeout(&self) -> Duration {
        Duration::from_millis(self.session_timeout_ms)
    }

    /// `headerReadTimeoutMs`: how long a connection may take to send a complete request head.
    pub fn header_read_timeout(&self) -> Duration {
        Duration::from_millis(self.header_read_timeout_ms)
    }
}

/// The reminder skills: off unless `reminders.enabled`.
pub const REMINDER_SKILLS: [&str; 3] = ["set-reminder", "cancel-reminder", "list-reminders"];

/// The services a skill may need besides the daemon itself.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SkillServices {
    /// A speech service is configured (`speech`): send-voice can speak.
    pub speech: bool,
}

/// Whether the configuration lets skill `name` run: not in `skills.disabled`, `send-file` only
/// with `skills.sendFile.enabled`, the reminder skills only with `reminders.enabled`,
/// `send-voice` only with a speech service. The one rule the Skill API's registry, the
/// platforms' user commands, the agent's credentials and the Discord invite's permissions all
/// follow ([`Config::skill_enabled`](super::Config::skill_enabled)).
pub fn skill_enabled(
    skills: &SkillsConfig,
    reminders: &RemindersConfig,
    services: SkillServices,
    name: &str,
) -> bool {
    if skills.disabled.iter().any(|d| d == name) {
        return false;
    }
    if name == "send-file" && !skills.send_file.enabled {
        return false;
    }
    if name == "send-voice" && !services.speech {
        return false;
    }
    reminders.enabled || !REMINDER_SKILLS.contains(&name)
}

/// Per-skill configuration.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct SkillsConfig {
    /// Skills turned off (their calls answer 503 `SKILL_DISABLED`).
    pub disabled: Vec<String>,
    /// The send-file skill.
    pub send_file: SendFileConfig,
}

/// send-file limits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct SendFileConfig {
    /// send-file is off unless enabled.
    pub enabled: bool,
    /// Per-file size limit.
    pub max_file_size_mb: u64,
    /// Files per call.
    pub max_files_per_invocation: u32,
    /// Total size per call.
    pub max_total_size_mb: u64,
    /// Allowed extensions without the dot (empty = any).
    pub allowed_extensions: Vec<String>,
}

impl Default for SendFileConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            max_file_size_mb: 25,
            max_files_per_invocation: 10,
            max_total_size_mb: 50,
            allowed_extensions: Vec::new(),
        }
    }
}

/// `reminders`: the reminder skills and the scheduler that delivers them by DM.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct RemindersConfig {
    /// Offer the reminder skills and run the scheduler.
    pub enabled: bool,
    /// A reminder must be at least this far in the future.
    pub min_interval_ms: u64,
    /// A reminder may be at most this many days ahead.
    pub max_days_ahead: u32,
    /// Pending reminders per user.
    pub max_reminders_per_user: u32,
    /// Delivery attempts before a reminder is marked failed.
    pub max_delivery_attempts: u32,
    /// First retry delay (doubles per attempt).
    pub retry_backoff_ms: u64,
    /// The IANA time zone whose wall clock recurring reminders keep, unless the place says
    /// (`places[].timeZone`) or the agent names one.
    pub time_zone: String,
}

impl Default for RemindersConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            min_interval_ms: 60_000,
            max_days_ahead: 366,
            max_reminders_per_user: 20,
            max_delivery_attempts: 5,
            retry_backoff_ms: 5_000,
            time_zone: "UTC".to_owned(),
        }
    }
}
