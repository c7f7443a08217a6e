//! The daemon's own places and outputs: the workspaces root, the database, the inbox's catch-up
//! and retention, how long what is kept about users stays (`retention`), the prompt templates,
//! logging and the ops listener.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// `workspace`: where every user's workspace folder lives (and, by default, the database).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct WorkspaceConfig {
    /// Data root: holds workspaces and, by default, the database.
    pub repo_path: PathBuf,
    /// Folder under `repoPath` with one workspace per `platform/userId`.
    pub workspaces_dir: String,
}

impl Default for WorkspaceConfig {
    fn default() -> Self {
        Self {
            repo_path: PathBuf::from("./data"),
            workspaces_dir: "workspaces".into(),
        }
    }
}

/// `storage`: the SQLite database file.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct StorageConfig {
    /// Database file; unset = `{workspace.repoPath}/air-friends.db`.
    pub path: Option<PathBuf>,
}

/// `retention`: how long what is kept about users stays before the daily retention job deletes
/// it (`privacy::retention`, `docs/PRIVACY.md`). 0 keeps it. The inbox's records and the
/// conversations' agent state have their own settings (`catchUp.retentionDays`,
/// `agent.continuity.keepDays`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct RetentionConfig {
    /// Days after a memory was disabled (by the user, the agent, or maintenance superseding
    /// it) before it is deleted with its changes, index entries and vector.
    pub disabled_memory_days: u64,
    /// Days the model usage records (tokens per user and day) and the records of schedule
    /// runs are kept.
    pub usage_days: u64,
    /// Hours a file stays in a workspace's session folders (`tmp/`: the attachments and
    /// payload files of turns; each is normally removed when its session ends).
    pub session_file_hours: u64,
}

impl Default for RetentionConfig {
    fn default() -> Self {
        Self {
            disabled_memory_days: 90,
            usage_days: 90,
            session_file_hours: 24,
        }
    }
}

/// `catchUp`: messages the daemon did not answer because it stopped (a deploy, a crash) and
/// how long it remembers every message it was handed (the inbox).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct CatchUpConfig {
    /// A message left unanswered when the daemon stopped is answered at the next start when it
    /// is younger than this; older ones are recorded as skipped (`too_old`).
    pub max_age_minutes: u64,
    /// Inbox records (and the message texts they keep) older than this are deleted; a message
    /// id is answered at most once within it.
    pub retention_days: u64,
    /// After a start or a fresh platform connection, the feeds (channels, DMs, threads, chats,
    /// Misskey's mentions) where the bot was addressed within this many hours are read back for
    /// what arrived meanwhile; 0 turns the catch-up off.
    pub channels_active_within_hours: u64,
    /// Most messages one catch-up answers per channel (oldest first); the rest are recorded as
    /// skipped (`catch_up_limit`).
    pub max_per_channel: u32,
}

impl Default for CatchUpConfig {
    fn default() -> Self {
        Self {
            max_age_minutes: 15,
            retention_days: 7,
            channels_active_within_hours: 24,
            max_per_channel: 5,
        }
    }
}

impl CatchUpConfig {
    /// `maxAgeMinutes` as a duration.
    pub fn max_age(&self) -> Duration {
        Duration::from_secs(self.max_age_minutes.saturating_mul(60))
    }

    /// `retentionDays` as a duration.
    pub fn retention(&self) -> Duration {
        Duration::from_secs(self.retention_days.saturating_mul(86_400))
    }

    /// `channelsActiveWithinHours` as a duration (zero: catch-up off).
    pub fn active_within(&self) -> Duration {
        Duration::from_secs(self.channels_active_within_hours.saturating_mul(3_600))
    }
}

/// The language whose daemon texts are built in (English).
pub const BUILT_IN_LANGUAGE: &str = "en";

/// Prompt templates.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct PromptsConfig {
    /// Folder with `system.md` and its `{{fragment}}` files. Unset (empty): the prompts
    /// shipped with air-friends (`config::paths`).
    #[serde(with = "super::shipped_path")]
    pub dir: PathBuf,
    /// The language of the daemon's own texts to users (busy, rate limit, budget, failures):
    /// `{dir}/texts/{language}.md`, or the built-in English for `en`. A place may set its own
    /// (`places[].language`).
    pub language: String,
}

impl Default for PromptsConfig {
    fn default() -> Self {
        Self {
            dir: PathBuf::new(),
            language: BUILT_IN_LANGUAGE.to_owned(),
        }
    }
}

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// One JSON object per line.
    #[default]
    Json,
    /// Human-readable, for a terminal.
    Pretty,
}

/// `logging`: level or filter, format and destination of the daemon's log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct LoggingConfig {
    /// `error` | `warn` | `info` | `debug` | `trace`, or a full filter such as
    /// `info,air_friends=debug` (env `LOG_LEVEL`; `RUST_LOG` wins over both).
    pub level: String,
    /// `json` | `pretty`.
    pub format: LogFormat,
}

impl Default for LoggingConfig {
    fn default() -> Self {
        Self {
            level: "info".into(),
            format: LogFormat::Json,
        }
    }
}

/// The ops listener.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct HealthConfig {
    /// Bind address.
    pub host: String,
    /// Bind port (env `HEALTH_PORT`); 0 picks a free port.
    pub port: u16,
}

/// `admin`: the operator console (`docs/CONSOLE.md`), served on the ops listener under
/// `/admin/`; off unless enabled. Logging in takes a one-time link from
/// `air-friends admin-link`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct AdminConfig {
    /// Serve the console.
    pub enabled: bool,
    /// How long a login link is valid, in minutes (it works once).
    pub link_minutes: u64,
    /// How long a console session lasts, in hours.
    pub session_hours: u64,
    /// What the model's tokens cost, for *Now*'s estimate of today's cost; none: no estimate.
    pub cost: Option<TokenPrices>,
}

/// `admin.cost`: the provider's prices, per million tokens, in `currency`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TokenPrices {
    /// The price of a million input (prompt) tokens.
    pub input_per_million: f64,
    /// The price of a million output (completion) tokens.
    pub output_per_million: f64,
    /// What the prices are in (shown beside the estimate), e.g. `USD`.
    #[serde(default = "default_currency")]
    pub currency: String,
}

fn default_currency() -> String {
    "USD".into()
}

impl TokenPrices {
    /// The cost of `input` and `output` tokens.
    pub fn cost(&self, input: u64, output: u64) -> f64 {
        (input as f64 * self.input_per_million + output as f64 * self.output_per_million)
            / 1_000_000.0
    }
}

impl Default for AdminConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            link_minutes: 10,
            session_hours: 12,
            cost: None,
        }
    }
}

impl Default for HealthConfig {
    fn default() -> Self {
        Self {
            host: "127.0.0.1".into(),
            port: 8080,
        }
    }
}
