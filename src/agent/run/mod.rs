//! One agent run, start to finish: spawn → `initialize` → `session/new` → model selection
//! → `session/prompt` (serving permission and fs requests meanwhile) → at most one retry prompt
//! when the agent ended its turn without answering the user → stop the process.
//!
//! The three steps are also separate, for an agent kept warm across the turns of a
//! conversation (`conversation::warm`): [`AgentRunner::start`] spawns and connects and returns a
//! [`LiveAgent`], [`LiveAgent::prompt`] runs one turn on its ACP session (any number of times),
//! and [`LiveAgent::stop`] stops the process. [`AgentRunner::run`] is the three in a row.
//!
//! Timeouts: `connect` covers initialize + session/new; per prompt, `idle` (no message from the
//! agent) and `max_turn` (total). A timeout, a termination request from the Skill API
//! (doom-loop protection) or daemon shutdown sends `session/cancel`, answers pending permission
//! requests with `cancelled`, waits briefly, then stops the process.
//!
//! * `runner` — spawning inside the sandbox and connecting.
//! * `live` — the prompt turn, its timeouts and the retry prompt; stopping the process.
//! * `connection` — serving the agent's messages and requests; cancelling a turn.

mod connection;
mod live;
mod runner;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

pub use live::LiveAgent;
pub use runner::AgentRunner;

/// The target of the run's "prompt sent" event (`air_friends::agent::run`), which the start-up
/// bench listens for.
const LOG_TARGET: &str = module_path!();

/// ACP protocol version spoken.
pub const PROTOCOL_VERSION: u64 = 1;

/// Runner settings (from `agent.*` in the configuration).
#[derive(Debug, Clone)]
pub struct RunnerSettings {
    /// The agent's program (resolved on `PATH` when it has no slash).
    pub command: String,
    /// Arguments after the program.
    pub args: Vec<String>,
    /// Model to select when offered (`provider/model`).
    pub model: Option<String>,
    /// initialize + session/new deadline.
    pub connect_timeout: Duration,
    /// Per prompt: longest silence from the agent.
    pub idle_timeout: Duration,
    /// Per prompt: longest turn.
    pub max_turn: Duration,
    /// Between stdin EOF, SIGTERM and SIGKILL.
    pub kill_grace: Duration,
}

/// Tells the runner whether the user has received anything yet (reply, reaction or file).
pub trait ResponseProbe: Send + Sync {
    /// True once the session replied, reacted or sent a file.
    fn responded(&self) -> bool;

    /// True when prompting again cannot bring an answer (every model request of the turn
    /// failed): the turn ends without the retry prompt.
    fn cannot_answer(&self) -> bool {
        false
    }
}

impl<F: Fn() -> bool + Send + Sync> ResponseProbe for F {
    fn responded(&self) -> bool {
        self()
    }
}

/// One run of the agent for a message: start it (or reuse a kept one), send the prompt,
/// serve it until the turn ends. Not a "session": the Skill API session the run acts through is
/// named by `session_id`.
pub struct AgentRun {
    /// Our session id (log correlation only).
    pub session_id: String,
    /// The user workspace: the agent's cwd and the fs/* boundary.
    pub workspace: PathBuf,
    /// A direct-message session: `{workspace}/private/` is visible to it (never in public ones).
    pub dm: bool,
    /// The folder holding this session's Skill API socket `api.sock`; with the sandbox on, it
    /// is bound at `/run/air-friends` and the agent has no network but a relay to it
    /// (`http://127.0.0.1:3001`, see `agent::sandbox`). `None` leaves the sandbox on the
    /// host's network: only for callers that serve no Skill API to the agent (runner-level
    /// tests); unused without a sandbox.
    pub api_socket_dir: Option<PathBuf>,
    /// The agent's complete environment (see `env::build_agent_env`).
    pub env: BTreeMap<String, String>,
    /// The assembled prompt.
    pub prompt: String,
    /// Sent once when the turn ends without a response; `None` disables the retry.
    pub retry_prompt: Option<String>,
    /// Fired by the Skill API to stop this agent (doom-loop protection).
    pub terminate: CancellationToken,
    /// Fired when the daemon stops.
    pub shutdown: CancellationToken,
    /// Whether the user got an answer.
    pub probe: Arc<dyn ResponseProbe>,
}

impl AgentRun {
    /// The session's staging folder, `$TMPDIR/$SESSION_ID` of its environment (the payload
    /// files the skills read), when that lies inside the workspace.
    pub fn staging_dir(&self) -> Option<PathBuf> {
        staging_of(&self.env, &self.workspace)
    }

    /// The agent's fixed part and the turn's part.
    pub fn split(self) -> (AgentSpec, TurnSpec) {
        (
            AgentSpec {
                session_id: self.session_id,
                workspace: self.workspace,
                dm: self.dm,
                api_socket_dir: self.api_socket_dir,
                env: self.env,
                model: None,
                skills: None,
                state_dir: None,
                resume: None,
                mcp_servers: Vec::new(),
            },
            TurnSpec {
                prompt: self.prompt,
                images: Vec::new(),
                retry_prompt: self.retry_prompt,
                terminate: self.terminate,
                shutdown: self.shutdown,
                probe: self.probe,
                first_sign_within: None,
            },
        )
    }
}

/// What an agent process is started with and keeps for its life (see [`AgentRun`] for the
/// fields).
#[derive(Clone)]
pub struct AgentSpec {
    /// Our session id (log correlation only).
    pub session_id: String,
    /// The user workspace: the agent's cwd and the fs/* boundary.
    pub workspace: PathBuf,
    /// A direct-message session.
    pub dm: bool,
    /// The folder holding this session's Skill API socket.
    pub api_socket_dir: Option<PathBuf>,
    /// The agent's complete environment.
    pub env: BTreeMap<String, String>,
    /// The model to select (a place's `model`); `None`: the runner's (`agent.model`).
    pub model: Option<String>,
    /// The only skills whose scripts the permission gate approves (a place's `skills`);
    /// `None`: every one.
    pub skills: Option<std::sync::Arc<std::collections::BTreeSet<String>>>,
    /// The conversation's agent-state folder, the agent's data folder (its session database):
    /// `conversation::continuity`. `None`: the agent's data lives and dies with the process.
    pub state_dir: Option<PathBuf>,
    /// The agent session to resume there instead of starting a new one.
    pub resume: Option<String>,
    /// The MCP servers offered to the agent (the daemon's broker endpoints), when it takes
    /// HTTP MCP servers (`mcpCapabilities.http`).
    pub mcp_servers: Vec<McpEndpoint>,
}

/// An MCP server as the agent is given it in `session/new`'s `mcpServers`: the daemon's broker
/// endpoint for it (`{api}/mcp/<session>/<name>`) and the session's caller token as its
/// `Authorization`. The server's own URL and credentials never reach the agent.
#[derive(Clone, PartialEq, Eq)]
pub struct McpEndpoint {
    /// The server's name.
    pub name: String,
    /// The broker's URL for it.
    pub url: String,
    /// Headers the agent sends (the caller token).
    pub headers: Vec<(String, String)>,
}

impl std::fmt::Debug for McpEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpEndpoint")
            .field("name", &self.name)
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

impl McpEndpoint {
    /// The ACP `McpServer` entry (`type: http`).
    pub fn acp(&self) -> serde_json::Value {
        let headers: Vec<serde_json::Value> = self
            .headers
            .iter()
            .map(|(name, value)| serde_json::json!({"name": name, "value": value}))
            .collect();
        serde_json::json!({"type": "http", "name": self.name, "url": self.url, "headers": headers})
    }
}

impl std::fmt::Debug for AgentSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentSpec")
            .field("session_id", &self.session_id)
            .field("workspace", &self.workspace)
            .field("dm", &self.dm)
            .field("model", &self.model)
            .finish_non_exhaustive()
    }
}

/// A picture sent with a prompt as an ACP `image` content block (only to an agent whose
/// `initialize` answer advertised `promptCapabilities.image`, see [`LiveAgent::accepts_images`]).
#[derive(Clone, PartialEq, Eq)]
pub struct PromptImage {
    /// `image/png`, `image/jpeg`, `image/gif` or `image/webp`.
    pub mime: String,
    /// The image bytes, base64 (standard alphabet, padded).
    pub data: String,
}

impl std::fmt::Debug for PromptImage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PromptImage")
            .field("mime", &self.mime)
            .field("base64_bytes", &self.data.len())
            .finish()
    }
}

/// One prompt turn of a running agent.
pub struct TurnSpec {
    /// The prompt text.
    pub prompt: String,
    /// Pictures sent after the text, in order (the text names them "image 1", "image 2", ...).
    /// Dropped for an agent that cannot take images.
    pub images: Vec<PromptImage>,
    /// Sent once when the turn ends without a response; `None` disables the retry.
    pub retry_prompt: Option<String>,
    /// Fired by the Skill API to stop this agent (doom-loop protection).
    pub terminate: CancellationToken,
    /// Fired when the daemon stops.
    pub shutdown: CancellationToken,
    /// Whether the user got an answer in this turn.
    pub probe: Arc<dyn ResponseProbe>,
    /// A warm agent that shows no work on the prompt (no request, no update about the turn,
    /// no answer; see `works_on_the_turn`) this long after it is taken for hung: the turn ends [`Outcome::Failed`] at once, for the
    /// caller to start a fresh agent. `None`: only the idle timeout applies.
    pub first_sign_within: Option<Duration>,
}

impl std::fmt::Debug for TurnSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TurnSpec")
            .field("prompt_bytes", &self.prompt.len())
            .field("images", &self.images.len())
            .finish_non_exhaustive()
    }
}

/// `$TMPDIR/$SESSION_ID` of `env` when it lies inside `workspace` and the id is a plain name.
fn staging_of(env: &BTreeMap<String, String>, workspace: &Path) -> Option<PathBuf> {
    let tmp = Path::new(env.get("TMPDIR")?);
    let id = env.get("SESSION_ID")?;
    let plain = !id.is_empty()
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    (plain && tmp.is_absolute() && tmp.starts_with(workspace)).then(|| tmp.join(id))
}

impl std::fmt::Debug for AgentRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentRun")
            .field("session_id", &self.session_id)
            .field("workspace", &self.workspace)
            .finish_non_exhaustive()
    }
}

/// How a session ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The user received a reply, reaction or file.
    Responded {
        /// Only after the retry prompt.
        retried: bool,
    },
    /// The agent finished without answering the user, even after the retry.
    NoResponse {
        /// A retry prompt was sent.
        retried: bool,
    },
    /// The agent could not be started, crashed, or broke the protocol.
    Failed {
        /// What went wrong.
        reason: String,
    },
    /// The sandbox reached its memory limit (`agent.sandbox.limits.maxMemoryMb`) and the kernel
    /// killed the agent.
    MemoryLimit,
    /// A timeout fired.
    TimedOut {
        /// `connect`, `idle` or `max_turn`.
        phase: &'static str,
    },
    /// The Skill API asked to stop the agent.
    Terminated,
    /// The daemon is shutting down.
    Cancelled,
}

impl Outcome {
    /// Label for metrics and logs.
    pub fn label(&self) -> &'static str {
        match self {
            Outcome::Responded { retried: false } => "replied",
            Outcome::Responded { retried: true } => "retried",
            Outcome::NoResponse { .. } => "no_response",
            Outcome::Failed { .. } => "failed",
            Outcome::MemoryLimit => "memory_limit",
            Outcome::TimedOut { .. } => "timed_out",
            Outcome::Terminated => "terminated",
            Outcome::Cancelled => "cancelled",
        }
    }
}
