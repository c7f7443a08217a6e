//! The configuration file's shape: one typed struct per section of `config.yaml`.
//!
//! Keys are camelCase in the file. Every default is defined here, once, in the `Default` impls
//! (`config.example.yaml` is tested against them). Durations are milliseconds in keys ending in
//! `Ms`. Each section is a plain struct with `#[serde(default)]`, so a file only needs the keys
//! it changes; unknown keys are caught by the loader (`load.rs`), cross-field rules by
//! `validate.rs`.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::Secret;

/// The whole daemon configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Config {
    /// Chat platforms to connect to.
    pub platforms: PlatformsConfig,
    /// Who the bot answers.
    pub access_control: AccessControlConfig,
    /// Per-user message rate limit.
    pub rate_limit: RateLimitConfig,
    /// The ACP agent that is started per interaction.
    pub agent: AgentConfig,
    /// The HTTP API the agent's skill scripts call.
    pub skill_api: SkillApiConfig,
    /// Per-skill switches and limits.
    pub skills: SkillsConfig,
    /// Reminder limits and delivery.
    pub reminders: RemindersConfig,
    /// Conversation context fed to the agent.
    pub memory: MemoryConfig,
    /// How the prompt's context is budgeted.
    pub context: ContextConfig,
    /// Files and pictures users attach: fetched by the daemon, read by the agent.
    pub attachments: AttachmentsConfig,
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
    /// How long running sessions may finish after SIGTERM before they are cancelled.
    pub shutdown_grace_ms: u64,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            platforms: PlatformsConfig::default(),
            access_control: AccessControlConfig::default(),
            rate_limit: RateLimitConfig::default(),
            agent: AgentConfig::default(),
            skill_api: SkillApiConfig::default(),
            skills: SkillsConfig::default(),
            reminders: RemindersConfig::default(),
            memory: MemoryConfig::default(),
            context: ContextConfig::default(),
            attachments: AttachmentsConfig::default(),
            workspace: WorkspaceConfig::default(),
            storage: StorageConfig::default(),
            prompts: PromptsConfig::default(),
            logging: LoggingConfig::default(),
            health: HealthConfig::default(),
            shutdown_grace_ms: 30_000,
        }
    }
}

/// Chat platforms.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct PlatformsConfig {
    /// Discord (serenity gateway + REST).
    pub discord: DiscordConfig,
    /// Misskey (REST + streaming websocket).
    pub misskey: MisskeyConfig,
}

/// Discord connection and trigger rules.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct DiscordConfig {
    /// Connect to Discord.
    pub enabled: bool,
    /// Bot token (env `DISCORD_TOKEN`).
    pub token: Secret,
    /// Base URL for Discord's REST API (a proxy, or a fake Discord in tests); unset = Discord.
    pub api_base_url: Option<String>,
    /// Gateway websocket URL override (tests); unset = the URL Discord announces.
    pub gateway_url: Option<String>,
    /// Only answer in these guilds (empty = all); slash commands are registered per guild here.
    pub guild_ids: Vec<String>,
    /// Answer direct messages.
    pub allow_dm: bool,
    /// Answer messages that mention the bot.
    pub respond_to_mention: bool,
    /// Answer messages starting with this prefix (empty = off).
    pub command_prefix: String,
}

impl Default for DiscordConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            token: Secret::default(),
            api_base_url: None,
            gateway_url: None,
            guild_ids: Vec::new(),
            allow_dm: true,
            respond_to_mention: true,
            command_prefix: String::new(),
        }
    }
}

/// Misskey connection and trigger rules.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct MisskeyConfig {
    /// Connect to Misskey.
    pub enabled: bool,
    /// Instance `host[:port]`, no scheme (env `MISSKEY_HOST`).
    pub host: String,
    /// Access token (env `MISSKEY_TOKEN`).
    pub token: Secret,
    /// https/wss when true; http/ws for a local instance or a fake in tests.
    pub secure: bool,
    /// Answer chat (direct) messages.
    pub allow_dm: bool,
    /// Answer notes that mention the bot.
    pub respond_to_mention: bool,
    /// Answer notes starting with this prefix (empty = off).
    pub command_prefix: String,
}

impl Default for MisskeyConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            host: String::new(),
            token: Secret::default(),
            secure: true,
            allow_dm: true,
            respond_to_mention: true,
            command_prefix: String::new(),
        }
    }
}

/// Who may talk to the bot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReplyTo {
    /// Everyone, in DMs and in public.
    #[default]
    All,
    /// Everyone in public channels/notes; DMs only from whitelisted accounts.
    Public,
    /// Only whitelisted accounts and channels.
    Whitelist,
}

/// Access control.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct AccessControlConfig {
    /// `all` | `public` | `whitelist`.
    pub reply_to: ReplyTo,
    /// Entries `platform/account/ID` or `platform/channel/ID`.
    pub whitelist: Vec<String>,
}

/// Per-user sliding-window rate limit on incoming messages.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct RateLimitConfig {
    /// Enforce the limit (whitelisted accounts always bypass it).
    pub enabled: bool,
    /// Messages allowed per window.
    pub max_messages: u32,
    /// Window length.
    pub window_ms: u64,
    /// Silence after the limit is hit.
    pub cooldown_ms: u64,
}

impl Default for RateLimitConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            max_messages: 10,
            window_ms: 60_000,
            cooldown_ms: 300_000,
        }
    }
}

/// The ACP agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct AgentConfig {
    /// Executable (looked up on PATH).
    pub command: String,
    /// Arguments.
    pub args: Vec<String>,
    /// Model id `provider/model` selected through ACP when offered (env `AGENT_MODEL`).
    pub model: Option<String>,
    /// Global cap on concurrently running agent sessions.
    pub max_concurrent_sessions: u32,
    /// Queued messages per conversation before "busy" replies.
    pub max_queued_per_conversation: u32,
    /// initialize + session/new must finish within this.
    pub connect_timeout_ms: u64,
    /// A prompt is cancelled after this long without any message from the agent.
    pub idle_timeout_ms: u64,
    /// A prompt is cancelled after this long in total.
    pub max_turn_ms: u64,
    /// Time between SIGTERM and SIGKILL when stopping an agent.
    pub kill_grace_ms: u64,
    /// Prompt token budget (estimated).
    pub token_limit: u32,
    /// Approve every permission request. Dangerous; logged loudly.
    pub yolo: bool,
    /// Skills whose invocations are auto-approved (env `AGENT_AUTO_APPROVE_SKILLS`, comma
    /// separated); empty = every skill found in `skillsDir`.
    pub auto_approve_skills: Vec<String>,
    /// Skill packages (`<name>/SKILL.md`, `manifest.json`, `scripts/`).
    pub skills_dir: PathBuf,
    /// The agent's own configuration shipped with air-friends (`opencode.json`).
    pub config_dir: PathBuf,
    /// Provider API key variables passed from the daemon's environment to the agent when set.
    pub provider_env_vars: Vec<String>,
    /// Static, non-secret variables added to the agent's environment.
    pub env: BTreeMap<String, String>,
    /// Sandbox settings for the agent process.
    pub sandbox: SandboxConfig,
    /// Model providers the daemon's gateway serves, by provider id (the id OpenCode uses).
    /// Entries are merged over the built-in ones ([`ProviderConfig::builtins`]), key by key.
    #[serde(deserialize_with = "deserialize_providers")]
    pub providers: BTreeMap<String, ProviderConfig>,
    /// Daily token budgets enforced by the gateway.
    pub budget: BudgetConfig,
    /// Agents kept alive between the turns of a conversation.
    pub warm: WarmConfig,
}

/// `agent.warm`: after a turn, the conversation's agent process and its ACP session stay alive
/// for the next message of the same conversation (no spawn, no `initialize`, no `session/new`,
/// and a prompt with only what is new).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct WarmConfig {
    /// `false`: every message starts a fresh agent that is stopped when its turn ends.
    pub enabled: bool,
    /// An idle warm agent is stopped after this long without a message. At most
    /// `skillApi.sessionTimeoutMs` (its Skill API session must outlive the wait).
    pub idle_ms: u64,
    /// Idle warm agents kept at once; the least recently used is stopped to make room. `null`:
    /// sized from the machine's memory (half of it, at about 0.6 GB per OpenCode process).
    pub max_processes: Option<u32>,
    /// A warm agent is retired after this many turns; the next message starts afresh.
    pub max_turns: u32,
    /// ... or when the prompts it was sent add up to more than this many estimated tokens.
    pub max_context_tokens: u32,
}

impl Default for WarmConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            idle_ms: 600_000,
            max_processes: None,
            max_turns: 20,
            max_context_tokens: 64_000,
        }
    }
}

impl Default for AgentConfig {
    fn default() -> Self {
        Self {
            command: "opencode".into(),
            args: vec!["acp".into()],
            model: None,
            max_concurrent_sessions: 4,
            max_queued_per_conversation: 8,
            connect_timeout_ms: 30_000,
            idle_timeout_ms: 300_000,
            max_turn_ms: 900_000,
            kill_grace_ms: 3_000,
            token_limit: 16_000,
            yolo: false,
            auto_approve_skills: Vec::new(),
            skills_dir: PathBuf::from("./skills"),
            config_dir: PathBuf::from("./agent-config"),
            provider_env_vars: [
                "OPENROUTER_API_KEY",
                "OPENCODE_API_KEY",
                "ANTHROPIC_API_KEY",
                "OPENAI_API_KEY",
                "GEMINI_API_KEY",
                "GOOGLE_GENERATIVE_AI_API_KEY",
                "DEEPSEEK_API_KEY",
            ]
            .map(String::from)
            .to_vec(),
            env: BTreeMap::new(),
            sandbox: SandboxConfig::default(),
            providers: ProviderConfig::builtins(),
            budget: BudgetConfig::default(),
            warm: WarmConfig::default(),
        }
    }
}

impl AgentConfig {
    /// [`KEYLESS_DEFAULT_MODEL`] when nothing else chooses a model: `model` is unset, the
    /// operator's own OpenCode configuration (`env.OPENCODE_CONFIG_CONTENT`) names none, no
    /// provider has its key in `env` (or is a keyless local server), and the `opencode`
    /// provider still offers its anonymous access. The first conversation then works without
    /// an account; `None` leaves the choice to the configuration or the agent.
    pub fn keyless_default_model(&self, env: &impl super::EnvSource) -> Option<&'static str> {
        if self.model.is_some() {
            return None;
        }
        let operator_model = self
            .env
            .get("OPENCODE_CONFIG_CONTENT")
            .and_then(|text| serde_json::from_str::<serde_json::Value>(text).ok())
            .is_some_and(|config| config.get("model").is_some());
        let some_provider_usable = self.providers.values().any(|p| {
            p.api_key_env.is_empty()
                || env
                    .var(&p.api_key_env)
                    .is_some_and(|key| !key.trim().is_empty())
        });
        let anonymous = self
            .providers
            .get(KEYLESS_DEFAULT_MODEL.split('/').next().unwrap_or_default())
            .is_some_and(|p| p.anonymous_key.is_some());
        (!operator_model && !some_provider_usable && anonymous).then_some(KEYLESS_DEFAULT_MODEL)
    }
}

/// How the gateway presents a provider's key upstream (`authHeader`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthHeader {
    /// `Authorization: Bearer <key>` (`bearer`; OpenAI, OpenRouter, most compatible servers).
    Bearer,
    /// `x-api-key: <key>` (`x-api-key`; Anthropic).
    XApiKey,
    /// `<name>: <key>` for any other header name (lowercase), e.g. `api-key` for Azure.
    Custom(String),
}

impl AuthHeader {
    /// The configuration spelling, which for the two named schemes is also the header name.
    pub fn as_str(&self) -> &str {
        match self {
            AuthHeader::Bearer => "bearer",
            AuthHeader::XApiKey => "x-api-key",
            AuthHeader::Custom(name) => name,
        }
    }
}

impl Serialize for AuthHeader {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for AuthHeader {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = String::deserialize(deserializer)?
            .trim()
            .to_ascii_lowercase();
        Ok(match name.as_str() {
            "bearer" | "authorization" => AuthHeader::Bearer,
            "x-api-key" => AuthHeader::XApiKey,
            _ => AuthHeader::Custom(name),
        })
    }
}

/// One upstream model API the gateway proxies (`agent.providers.<id>`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProviderConfig {
    /// Upstream API root; `/llm/<session>/<id>/<rest>` is forwarded to `{baseUrl}/<rest>`.
    pub base_url: String,
    /// Variable of the daemon's environment holding the key, read once at start; empty = send
    /// no key (a local model server without authentication).
    pub api_key_env: String,
    /// `bearer`, `x-api-key`, or the name of the header that carries the key.
    pub auth_header: AuthHeader,
    /// Request headers passed from the agent to the upstream besides `content-type` and
    /// `accept` (every other client header is dropped), e.g. `anthropic-version`.
    pub pass_headers: Vec<String>,
    /// Sent as the key when `apiKeyEnv` is unset and `agent.model` is one of this provider's
    /// models: the provider's anonymous access (OpenCode Zen serves its free models for the key
    /// `public`). Never for another model's requests: a hijacked agent must not reach a
    /// service the operator did not choose. Absent, or `""` in the file: a
    /// provider without its key answers 503.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub anonymous_key: Option<String>,
}

/// The model used when `agent.model` is unset and no provider has a key: OpenCode's own
/// default, served by OpenCode Zen without a key (see [`AgentConfig::keyless_default_model`]).
pub const KEYLESS_DEFAULT_MODEL: &str = "opencode/big-pickle";

impl ProviderConfig {
    /// The built-in providers: `openrouter`, `openai`, `anthropic`, and `opencode` (OpenCode
    /// Zen, whose free models need no key).
    pub fn builtins() -> BTreeMap<String, ProviderConfig> {
        let entry = |url: &str, env: &str, auth: AuthHeader, pass: &[&str]| ProviderConfig {
            base_url: url.into(),
            api_key_env: env.into(),
            auth_header: auth,
            pass_headers: pass.iter().map(|h| (*h).to_owned()).collect(),
            anonymous_key: None,
        };
        BTreeMap::from([
            (
                "opencode".to_owned(),
                ProviderConfig {
                    anonymous_key: Some("public".into()),
                    ..entry(
                        "https://opencode.ai/zen/v1",
                        "OPENCODE_API_KEY",
                        AuthHeader::Bearer,
                        &[],
                    )
                },
            ),
            (
                "openrouter".to_owned(),
                entry(
                    "https://openrouter.ai/api/v1",
                    "OPENROUTER_API_KEY",
                    AuthHeader::Bearer,
                    &[],
                ),
            ),
            (
                "openai".to_owned(),
                entry(
                    "https://api.openai.com/v1",
                    "OPENAI_API_KEY",
                    AuthHeader::Bearer,
                    &[],
                ),
            ),
            (
                "anthropic".to_owned(),
                entry(
                    "https://api.anthropic.com/v1",
                    "ANTHROPIC_API_KEY",
                    AuthHeader::XApiKey,
                    &["anthropic-version", "anthropic-beta"],
                ),
            ),
        ])
    }
}

/// A provider entry as written in the file: every key optional, so an entry for a built-in id
/// changes only what it names.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ProviderOverride {
    base_url: Option<String>,
    api_key_env: Option<String>,
    auth_header: Option<AuthHeader>,
    pass_headers: Option<Vec<String>>,
    anonymous_key: Option<String>,
}

/// `agent.providers`: the file's entries merged over [`ProviderConfig::builtins`]. A new id
/// starts from an empty URL (caught by validation), no key and `bearer`.
fn deserialize_providers<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<BTreeMap<String, ProviderConfig>, D::Error> {
    let overrides = BTreeMap::<String, ProviderOverride>::deserialize(deserializer)?;
    let mut providers = ProviderConfig::builtins();
    for (id, o) in overrides {
        let base = providers.remove(&id).unwrap_or(ProviderConfig {
            base_url: String::new(),
            api_key_env: String::new(),
            auth_header: AuthHeader::Bearer,
            pass_headers: Vec::new(),
            anonymous_key: None,
        });
        providers.insert(
            id,
            ProviderConfig {
                base_url: o.base_url.unwrap_or(base.base_url),
                api_key_env: o.api_key_env.unwrap_or(base.api_key_env),
                auth_header: o.auth_header.unwrap_or(base.auth_header),
                pass_headers: o.pass_headers.unwrap_or(base.pass_headers),
                // `anonymousKey: ""` turns a built-in's anonymous access off.
                anonymous_key: match o.anonymous_key {
                    Some(k) if k.is_empty() => None,
                    Some(k) => Some(k),
                    None => base.anonymous_key,
                },
            },
        );
    }
    Ok(providers)
}

/// Daily token budgets (`agent.budget`), counted from the usage the gateway meters, per UTC
/// day. `null` = unlimited; `0` = nothing allowed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct BudgetConfig {
    /// Input + output tokens one user (`platform/userId`) may use per day.
    pub tokens_per_user_per_day: Option<u64>,
    /// Input + output tokens all users together may use per day.
    pub tokens_per_day: Option<u64>,
}

/// How the agent process is confined (see `docs/SECURITY.md`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SandboxMode {
    /// Every agent runs inside bubblewrap: own PID namespace and `/proc`, private `/tmp`,
    /// read-only system and runtime paths, only its workspace writable.
    #[default]
    Bwrap,
    /// No confinement (the permission gate is the only wall); logged at every session.
    None,
}

impl SandboxMode {
    /// The configuration spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            SandboxMode::Bwrap => "bwrap",
            SandboxMode::None => "none",
        }
    }
}

/// Agent sandbox.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct SandboxConfig {
    /// `bwrap` (default) or `none`.
    pub mode: SandboxMode,
    /// The bubblewrap executable (looked up on `PATH`).
    pub bwrap_path: PathBuf,
    /// More read-only paths the agent needs (for example an agent installed outside `/usr`
    /// whose files are not next to its executable). They may not contain the database, the
    /// configuration, the prompts or the workspaces.
    pub read_only_paths: Vec<PathBuf>,
    /// Size of the sandbox's private `/tmp` (which also holds the agent's home), in MiB.
    pub tmp_size_mb: u64,
    /// Extra variables copied from the daemon's environment into the agent's.
    pub allowed_env_vars: Vec<String>,
    /// Hosts a sandboxed agent may reach through the daemon's CONNECT proxy (`src/egress.rs`),
    /// exactly as written: lowercase names, optional `:port` (443 when absent), no wildcards,
    /// no IP literals. Empty (the default): no egress at all.
    pub egress_allow_hosts: Vec<String>,
}

impl Default for SandboxConfig {
    fn default() -> Self {
        Self {
            mode: SandboxMode::Bwrap,
            bwrap_path: PathBuf::from("bwrap"),
            read_only_paths: Vec::new(),
            tmp_size_mb: 512,
            allowed_env_vars: Vec::new(),
            egress_allow_hosts: Vec::new(),
        }
    }
}

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

/// Reminders.
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
        }
    }
}

/// Conversation context.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct MemoryConfig {
    /// Recent channel messages included in the prompt.
    pub recent_message_limit: u32,
    /// Related messages (keyword search of the channel) included in guild prompts.
    pub related_message_limit: u32,
    /// Longest memory content accepted by memory-save, in characters.
    pub max_content_chars: u32,
    /// Meaning-based recall: an OpenAI-compatible `/embeddings` endpoint. `null` (the
    /// default): memory-search is full-text only.
    pub embeddings: Option<EmbeddingsConfig>,
    /// Consolidation: an agent run in quiet hours merges a workspace's old memories into
    /// summaries (off by default).
    pub maintenance: MaintenanceConfig,
}

/// `memory.maintenance`: memory consolidation. In the quiet hours, each workspace with more
/// than `minMemories` enabled memories and no run within `intervalHours` gets an agent run of
/// its own (the same runner and sandbox, the `maintenance.md` prompt, memory skills only, no
/// message and nothing sent to anyone) that saves merged summaries superseding the memories
/// they replace. Public and private memories are consolidated in separate runs; memories newer
/// than `minAgeDays` are left alone; nothing is deleted (superseded memories are disabled).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct MaintenanceConfig {
    /// Run the job at all.
    pub enabled: bool,
    /// Only log (and answer the agent) what would be saved and disabled; nothing is written.
    pub dry_run: bool,
    /// Daily window of the daemon's local time, `"HH:MM-HH:MM"` (may cross midnight; equal
    /// ends mean all day).
    pub quiet_hours: crate::config::QuietHours,
    /// A workspace is maintained once it has more enabled memories than this.
    pub min_memories: u32,
    /// At most one run per workspace in this many hours.
    pub interval_hours: u32,
    /// Memories younger than this many days are never merged or disabled.
    pub min_age_days: u32,
    /// Most memories shown to one run (the oldest first); the rest wait for the next run.
    pub max_memories_per_run: u32,
}

impl Default for MaintenanceConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            dry_run: false,
            quiet_hours: crate::config::QuietHours::default(),
            min_memories: 200,
            interval_hours: 168,
            min_age_days: 7,
            max_memories_per_run: 200,
        }
    }
}

impl Default for MemoryConfig {
    fn default() -> Self {
        Self {
            recent_message_limit: 20,
            related_message_limit: 5,
            max_content_chars: 4_000,
            embeddings: None,
            maintenance: MaintenanceConfig::default(),
        }
    }
}

/// `memory.embeddings`: each memory gets a vector in the background (a save never waits for
/// it), and memory-search ranks by full-text rank and vector similarity together. With the
/// service down, search is full text and says so.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct EmbeddingsConfig {
    /// A provider of `agent.providers` whose `baseUrl` and key to use (e.g. `openai`); or
    /// leave empty and set `baseUrl`.
    pub provider: String,
    /// API root serving `POST {baseUrl}/embeddings` (when `provider` is empty).
    pub base_url: String,
    /// Variable holding the key (when `provider` is empty; empty = no key).
    pub api_key_env: String,
    /// Model name sent to the endpoint.
    pub model: String,
    /// Length of the vectors the model returns.
    pub dimensions: u32,
    /// Longest wait for the endpoint; a search falls back to full text after it.
    pub timeout_ms: u64,
    /// Memories embedded per request in the background.
    pub batch_size: u32,
}

impl Default for EmbeddingsConfig {
    fn default() -> Self {
        Self {
            provider: String::new(),
            base_url: String::new(),
            api_key_env: String::new(),
            model: String::new(),
            dimensions: 0,
            timeout_ms: 3_000,
            batch_size: 32,
        }
    }
}

/// `context`: budgets inside the prompt (`agent.tokenLimit` is the whole).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ContextConfig {
    /// Estimated tokens the important memories may take. When more exist, the most recently
    /// saved or used are shown and the prompt says how many more the memory-search skill can
    /// find. 0 shows none (only the count).
    pub important_memories_budget: u32,
}

impl Default for ContextConfig {
    fn default() -> Self {
        Self {
            important_memories_budget: 2_000,
        }
    }
}

/// `attachments`: the files of the message being answered are downloaded by the daemon (never
/// by the agent, which has no network), saved read-only in the session's staging folder under
/// `in/`, listed in the prompt; pictures also go to the model as images, short text files
/// inline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct AttachmentsConfig {
    /// `false`: attachments are only listed by name, type and size, never downloaded.
    pub enabled: bool,
    /// Largest file downloaded, in MB; a larger one is listed as skipped.
    pub max_file_mb: u32,
    /// Most bytes downloaded for one turn, in MB (files past it are listed as skipped).
    pub max_total_mb: u32,
    /// Longest download of one file (redirects included).
    pub timeout_ms: u64,
    /// Pictures with more pixels than this are downscaled (aspect kept) before they are sent
    /// to the model as images; the saved file keeps the original.
    pub max_image_pixels: u64,
    /// Text files up to this many KB are shown in the prompt inline (within the token budget).
    pub max_inline_kb: u32,
    /// Extra hosts attachments may come from, besides the platform's own (the Discord API host
    /// and CDN, the Misskey instance), e.g. a Misskey instance's object storage or media proxy.
    /// `https` only, and only when the name resolves to public addresses.
    pub allow_hosts: Vec<String>,
}

impl Default for AttachmentsConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            max_file_mb: 20,
            max_total_mb: 50,
            timeout_ms: 20_000,
            max_image_pixels: 1_200_000,
            max_inline_kb: 32,
            allow_hosts: Vec::new(),
        }
    }
}

/// Workspaces.
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

/// SQLite.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct StorageConfig {
    /// Database file; unset = `{workspace.repoPath}/air-friends.db`.
    pub path: Option<PathBuf>,
}

/// Prompt templates.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct PromptsConfig {
    /// Folder with `system.md` and its `{{fragment}}` files.
    pub dir: PathBuf,
}

impl Default for PromptsConfig {
    fn default() -> Self {
        Self {
            dir: PathBuf::from("./prompts"),
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

/// Logging.
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

impl Default for HealthConfig {
    fn default() -> Self {
        Self {
            host: "127.0.0.1".into(),
            port: 8080,
        }
    }
}

impl Config {
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

    /// Every configured secret value, for log redaction.
    pub fn secret_values(&self) -> Vec<String> {
        [&self.platforms.discord.token, &self.platforms.misskey.token]
            .into_iter()
            .filter(|s| !s.is_empty())
            .map(|s| s.expose().to_owned())
            .collect()
    }
}
