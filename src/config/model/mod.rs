//! The configuration file's shape: one typed struct per section of `config.yaml`. The top-level
//! [`Config`] is here; its sections are grouped by subject in the files below (platforms, agent,
//! skills, context, daemon), all re-exported so every type is `crate::config::X`.
//!
//! Keys are camelCase in the file. Every default is defined in this module, once, in the
//! `Default` impls (`config.example.yaml` is tested against them). Durations are milliseconds in
//! keys ending in `Ms`; a section whose durations the daemon converts has `Duration` accessors
//! for them (`AgentConfig::max_turn`), so the unit is turned into a `Duration` in one place.
//! Each section is a plain struct with `#[serde(default)]`, so a file only needs the keys it
//! changes; unknown keys are caught by the loader (`load.rs`), cross-field rules by
//! `validate.rs`.

mod agent;
mod context;
mod daemon;
mod mcp;
mod places;
mod platforms;
mod schedules;
mod skills;

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use agent::*;
pub use context::*;
pub use daemon::*;
pub use mcp::*;
pub use places::*;
pub use platforms::*;
pub use schedules::*;
pub use skills::*;

/// The whole daemon configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Config {
    /// Chat platforms to connect to.
    pub platforms: PlatformsConfig,
    /// Who the bot answers.
    pub access_control: AccessControlConfig,
    /// Rules that shape the bot per server, channel, thread and DM; the first that fits a
    /// message wins.
    pub places: Vec<PlaceRule>,
    /// Per-user message rate limit.
    pub rate_limit: RateLimitConfig,
    /// Messages left unanswered across a restart, and the inbox's memory.
    pub catch_up: CatchUpConfig,
    /// How long what is kept about users stays.
    pub retention: RetentionConfig,
    /// The ACP agent that is started per interaction.
    pub agent: AgentConfig,
    /// The HTTP API the agent's skill scripts call.
    pub skill_api: SkillApiConfig,
    /// Per-skill switches and limits.
    pub skills: SkillsConfig,
    /// Reminder limits and delivery.
    pub reminders: RemindersConfig,
    /// Posts the bot makes on its own, on a timetable, in a place.
    pub schedules: Vec<ScheduleConfig>,
    /// Conversation context fed to the agent.
    pub memory: MemoryConfig,
    /// How the prompt's context is budgeted.
    pub context: ContextConfig,
    /// Files and pictures users attach: fetched by the daemon, read by the agent.
    pub attachments: AttachmentsConfig,
    /// Voice replies: the speech service send-voice speaks through (`None`: no voice replies).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speech: Option<SpeechConfig>,
    /// MCP servers whose tools the agent may use, through the daemon.
    pub mcp: McpConfig,
    /// Where user workspaces live.
    pub workspace: WorkspaceConfig,
    /// The SQLite database.
    pub storage: StorageConfig,
    /// Prompt templates.
    pub prompts: PromptsConfig,
    /// Log output.
    pub logging: LoggingConfig,
    /// The ops listener: `/healthz`, `/readyz`, `/metrics`.
    pub health: HealthConfig,
    /// The operator console in the browser, on the ops listener under `/admin/`.
    pub admin: AdminConfig,
    /// How long running sessions may finish after SIGTERM before they are cancelled.
    pub shutdown_grace_ms: u64,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            platforms: PlatformsConfig::default(),
            access_control: AccessControlConfig::default(),
            places: Vec::new(),
            rate_limit: RateLimitConfig::default(),
            catch_up: CatchUpConfig::default(),
            retention: RetentionConfig::default(),
            agent: AgentConfig::default(),
            skill_api: SkillApiConfig::default(),
            skills: SkillsConfig::default(),
            reminders: RemindersConfig::default(),
            schedules: Vec::new(),
            memory: MemoryConfig::default(),
            context: ContextConfig::default(),
            attachments: AttachmentsConfig::default(),
            speech: None,
            mcp: McpConfig::default(),
            workspace: WorkspaceConfig::default(),
            storage: StorageConfig::default(),
            prompts: PromptsConfig::default(),
            logging: LoggingConfig::default(),
            health: HealthConfig::default(),
            admin: AdminConfig::default(),
            shutdown_grace_ms: 30_000,
        }
    }
}

/// Where a service the daemon calls (embeddings, transcription) is: its API root and the
/// variable holding its key (empty: no key).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceEndpoint {
    /// API root.
    pub base_url: String,
    /// Variable of the daemon's environment holding the key; empty = send none.
    pub api_key_env: String,
}

impl Config {
    /// The endpoint of a service configured with `provider` (one of `agent.providers`, whose
    /// `baseUrl` and key it shares) or, when that is empty, its own `base_url` and
    /// `api_key_env`. `None`: the provider is not defined (validation refuses that).
    pub fn service_endpoint(
        &self,
        provider: &str,
        base_url: &str,
        api_key_env: &str,
    ) -> Option<ServiceEndpoint> {
        if provider.is_empty() {
            return Some(ServiceEndpoint {
                base_url: base_url.to_owned(),
                api_key_env: api_key_env.to_owned(),
            });
        }
        let p = self.agent.providers.get(provider)?;
        Some(ServiceEndpoint {
            base_url: p.base_url.clone(),
            api_key_env: p.api_key_env.clone(),
        })
    }

    /// `shutdownGraceMs`: how long running sessions may finish after SIGTERM.
    pub fn shutdown_grace(&self) -> Duration {
        Duration::from_millis(self.shutdown_grace_ms)
    }

    /// Whether the configuration lets skill `name` run (see [`skill_enabled`]).
    pub fn skill_enabled(&self, name: &str) -> bool {
        let services = SkillServices {
            speech: self.speech.is_some(),
        };
        skill_enabled(&self.skills, &self.reminders, services, name)
    }

    /// The database file: `storage.path`, else `{workspace.repoPath}/air-friends.db`.
    pub fn database_path(&self) -> PathBuf {
        self.storage
            .path
            .clone()
            .unwrap_or_else(|| self.workspace.repo_path.join("air-friends.db"))
    }

    /// The per-session sockets' folder: `skillApi.socketDir`, else `{workspace.repoPath}/run`.
    pub fn skill_api_socket_dir(&self) -> PathBuf {
        self.skill_api
            .socket_dir
            .clone()
            .unwrap_or_else(|| self.workspace.repo_path.join("run"))
    }

    /// `agent` as the model gateway serves it: the providers of the places' models
    /// (`places[].model`) are served too, as if listed in `agent.extraProviders`.
    pub fn gateway_agent(&self) -> AgentConfig {
        let mut agent = self.agent.clone();
        for model in self.places.iter().filter_map(|r| r.model.as_deref()) {
            if let Some((provider, _)) = model.split_once('/')
                && !agent.extra_providers.iter().any(|p| p == provider)
            {
                agent.extra_providers.push(provider.to_owned());
            }
        }
        agent
    }

    /// Every configured secret value, for log redaction.
    pub fn secret_values(&self) -> Vec<String> {
        PLATFORMS
            .iter()
            .flat_map(|p| (p.secrets)(&self.platforms))
            .filter(|s| !s.is_empty())
            .map(|s| s.expose().to_owned())
            .collect()
    }
}

/// A folder whose unset value is a shipped folder (`agent.skillsDir`, `agent.configDir`,
/// `prompts.dir`): `null` in the file, an empty path in the model until `config::paths`
/// resolves it.
pub(crate) mod shipped_path {
    use std::path::PathBuf;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(path: &PathBuf, s: S) -> Result<S::Ok, S::Error> {
        if path.as_os_str().is_empty() {
            s.serialize_none()
        } else {
            s.serialize_some(path)
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<PathBuf, D::Error> {
        Ok(Option::<PathBuf>::deserialize(d)?.unwrap_or_default())
    }
}
