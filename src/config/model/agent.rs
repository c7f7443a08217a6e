//! The `agent` section: the ACP agent command and its limits, warm agents, model providers,
//! daily token budgets and the sandbox the agent process runs in.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The ACP agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct AgentConfig {
    /// Executable (looked up on PATH).
    pub command: String,
    /// Arguments after the command (`["acp"]` for OpenCode).
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
    /// A turn whose model requests all failed is ended this long after it began (and at least a
    /// quarter of it after its first failure), and the user told in words, instead of waiting
    /// for the agent's own retries.
    pub model_failure_grace_ms: u64,
    /// Prompt token budget (estimated).
    pub token_limit: u32,
    /// Approve every permission request. Dangerous; logged loudly.
    pub yolo: bool,
    /// Skills whose invocations are auto-approved (env `AGENT_AUTO_APPROVE_SKILLS`, comma
    /// separated); empty = every skill found in `skillsDir`.
    pub auto_approve_skills: Vec<String>,
    /// Skill packages (`<name>/SKILL.md`, `manifest.json`, `scripts/`). Unset (empty): the
    /// skills shipped with air-friends (`config::paths`).
    #[serde(with = "super::shipped_path")]
    pub skills_dir: PathBuf,
    /// The agent's own configuration (`opencode.json`). Unset (empty): the one shipped with
    /// air-friends.
    #[serde(with = "super::shipped_path")]
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
    /// Providers (ids of `providers`) the gateway serves besides those of the models the
    /// operator names ([`AgentConfig::served_providers`]); every other provider's route
    /// answers 404, so a hijacked agent cannot spend a key the daemon holds for something else.
    pub extra_providers: Vec<String>,
    /// Daily token budgets enforced by the gateway.
    pub budget: BudgetConfig,
    /// Agents kept alive between the turns of a conversation.
    pub warm: WarmConfig,
    /// A conversation's agent session kept on disk, resumed after a restart or eviction.
    pub continuity: ContinuityConfig,
}

/// `agent.continuity`: each conversation's agent keeps its own session data in a folder of its
/// own (`{workspace.repoPath}/agent-state/`), and the next agent of a conversation whose agent
/// was stopped — a restart, the idle timeout, eviction — resumes that session
/// (`session/resume`, else `session/load`) and is prompted with only what is new.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ContinuityConfig {
    /// `false`: a stopped conversation's next agent starts a new session.
    pub enabled: bool,
    /// A conversation not written to for this many days is forgotten (its folder deleted).
    pub keep_days: u32,
    /// A conversation's folder over this size starts afresh.
    pub max_state_mb: u64,
}

impl Default for ContinuityConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            keep_days: 14,
            max_state_mb: 256,
        }
    }
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
    /// Start a conversation's agent before its message when the message is predictable: a
    /// user typing in a DM or in a place that answers every message (Discord), and a retired
    /// agent's successor. Such agents take only free places of `maxProcesses`.
    pub start_ahead: bool,
}

impl Default for WarmConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            idle_ms: 600_000,
            max_processes: None,
            max_turns: 20,
            max_context_tokens: 64_000,
            start_ahead: true,
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
            model_failure_grace_ms: 10_000,
            token_limit: 16_000,
            yolo: false,
            auto_approve_skills: Vec::new(),
            skills_dir: PathBuf::new(),
            config_dir: PathBuf::new(),
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
            extra_providers: Vec::new(),
            budget: BudgetConfig::default(),
            warm: WarmConfig::default(),
            continuity: ContinuityConfig::default(),
        }
    }
}

impl AgentConfig {
    /// `connectTimeoutMs`: initialize + session/new must finish within this.
    pub fn connect_timeout(&self) -> Duration {
        Duration::from_millis(self.connect_timeout_ms)
    }

    /// `idleTimeoutMs`: a prompt is cancelled after this long without a message from the agent.
    pub fn idle_timeout(&self) -> Duration {
        Duration::from_millis(self.idle_timeout_ms)
    }

    /// `maxTurnMs`: a prompt is cancelled after this long in total.
    pub fn max_turn(&self) -> Duration {
        Duration::from_millis(self.max_turn_ms)
    }

    /// `killGraceMs`: time between SIGTERM and SIGKILL when stopping an agent.
    pub fn kill_grace(&self) -> Duration {
        Duration::from_millis(self.kill_grace_ms)
    }

    /// `modelFailureGraceMs`: how long a turn whose model requests all failed may go on.
    pub fn model_failure_grace(&self) -> Duration {
        Duration::from_millis(self.model_failure_grace_ms)
    }

    /// [`KEYLESS_DEFAULT_MODEL`] when nothing else chooses a model: `model` is unset, the
    /// operator's own OpenCode configuration (`env.OPENCODE_CONFIG_CONTENT`) names none, no
    /// provider has its key in `env` (or is a keyless local server), and the `opencode`
    /// provider still offers its anonymous access. The first conversation then works without
    /// an account; `None` leaves the choice to the configuration or the agent.
    pub fn keyless_default_model(
        &self,
        env: &impl crate::config::EnvSource,
    ) -> Option<&'static str> {
        if self.model.is_some() {
            return None;
        }
        let operator_model = self
            .operator_opencode_config()
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

    /// The providers the model gateway serves: the provider of `model` and of the `model` and
    /// `small_model` the operator's own OpenCode configuration (`env.OPENCODE_CONFIG_CONTENT`)
    /// names, and `extraProviders`. Only the operator chooses them; nothing the agent sends
    /// adds one. Empty when no model is named anywhere.
    pub fn served_providers(&self) -> BTreeSet<String> {
        let inline = self.operator_opencode_config();
        let inline_models = ["model", "small_model"]
            .into_iter()
            .filter_map(|key| inline.as_ref()?.get(key)?.as_str().map(str::to_owned));
        self.model
            .iter()
            .cloned()
            .chain(inline_models)
            .filter_map(|model| Some(model.split_once('/')?.0.to_owned()))
            .chain(self.extra_providers.iter().cloned())
            .collect()
    }

    /// The operator's inline OpenCode configuration (`env.OPENCODE_CONFIG_CONTENT`), when it is
    /// JSON.
    fn operator_opencode_config(&self) -> Option<serde_json::Value> {
        self.env
            .get("OPENCODE_CONFIG_CONTENT")
            .and_then(|text| serde_json::from_str(text).ok())
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

/// The host user a root daemon's agents run as, unless `agent.sandbox.user` names another.
pub const DEFAULT_AGENT_USER: &str = "air-friends-agent";

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
    /// The host user agents run as when the daemon runs as root (never host root: the kernel's
    /// sysctl checks look at the host uid). Created by `air-friends setup`; ignored when the
    /// daemon is not root (agents then run as the daemon's own user).
    pub user: String,
    /// Resource limits of every agent's processes (`sandbox-init` sets them inside the
    /// sandbox's user namespace).
    pub limits: SandboxLimits,
    /// Whether each agent gets a cgroup bounding its memory, processes and CPU.
    pub cgroup: CgroupMode,
}

/// `agent.sandbox.cgroup`: a cgroup per agent, the only bound on its memory.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CgroupMode {
    /// Used where the daemon can have one (a v2 group delegated by systemd, or a v1 hierarchy
    /// it may write); otherwise agents run with the rlimits only, and `/readyz` says so.
    #[default]
    Auto,
    /// The daemon refuses to start unless every agent's memory can be bounded.
    Required,
    /// No cgroup: the rlimits only.
    Off,
}

/// `agent.sandbox.limits`. 0 turns a limit off.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct SandboxLimits {
    /// Processes and threads in one sandbox (`RLIMIT_NPROC`, counted per sandbox).
    pub max_processes: u64,
    /// The largest file an agent may write or allocate, in MiB (`RLIMIT_FSIZE`).
    pub max_file_mb: u64,
    /// Open files per process (`RLIMIT_NOFILE`).
    pub max_open_files: u64,
    /// All the memory of one sandbox, in MiB: its processes' and the pages of its tmpfs folders
    /// (the cgroup's `memory.max`; see `agent.sandbox.cgroup`). Past it the kernel kills a
    /// process of that sandbox, never another.
    pub max_memory_mb: u64,
    /// CPU time of one sandbox, in percent of one core (the cgroup's `cpu.max`). Two cores by
    /// default: OpenCode's start uses more than one (capped at one it starts ~1.4× slower,
    /// `docs/performance/agents.md`, "The agent's cgroup").
    pub max_cpu_percent: u64,
    /// Heap and private writable mappings per process, in MiB (`RLIMIT_DATA`); off by default:
    /// OpenCode's runtime reserves ~74 GB of address space it never touches.
    pub max_data_mb: u64,
    /// What one user's workspace may occupy on disk, in MiB: a message that finds it full is
    /// answered in words, no agent is started, and no attachment is saved into it.
    pub max_workspace_mb: u64,
}

impl Default for SandboxLimits {
    fn default() -> Self {
        Self {
            max_processes: 256,
            max_file_mb: 1024,
            max_open_files: 4096,
            max_memory_mb: 2048,
            max_cpu_percent: 200,
            max_data_mb: 0,
            max_workspace_mb: 1024,
        }
    }
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
            user: DEFAULT_AGENT_USER.to_owned(),
            limits: SandboxLimits::default(),
            cgroup: CgroupMode::Auto,
        }
    }
}
