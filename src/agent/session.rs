//! One agent session, start to finish: spawn → `initialize` → `session/new` → model selection
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

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::activity::{self, Activity, ActivityObserver, ActivityReporter};
use super::fs;
use super::gate::{self, PermissionGate};
use super::process::{AgentProcess, Launch};
use super::rpc::{self, Incoming, RpcClient, RpcError};
use super::sandbox::Sandbox;

/// ACP protocol version spoken.
pub const PROTOCOL_VERSION: u64 = 1;

/// How long a cancelled turn gets to answer before the process is stopped.
const CANCEL_GRACE: Duration = Duration::from_secs(2);

/// Runner settings (from `agent.*` in the configuration).
#[derive(Debug, Clone)]
pub struct RunnerSettings {
    /// Executable.
    pub command: String,
    /// Arguments.
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
}

impl<F: Fn() -> bool + Send + Sync> ResponseProbe for F {
    fn responded(&self) -> bool {
        self()
    }
}

/// One session to run.
pub struct SessionRun {
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

impl SessionRun {
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

/// What an agent process is started with and keeps for its life (see [`SessionRun`] for the
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
}

impl std::fmt::Debug for AgentSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentSpec")
            .field("session_id", &self.session_id)
            .field("workspace", &self.workspace)
            .field("dm", &self.dm)
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

impl std::fmt::Debug for SessionRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionRun")
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
            Outcome::TimedOut { .. } => "timed_out",
            Outcome::Terminated => "terminated",
            Outcome::Cancelled => "cancelled",
        }
    }
}

/// Runs ACP sessions with a permission gate, each agent inside the sandbox.
#[derive(Debug, Clone)]
pub struct AgentRunner {
    settings: RunnerSettings,
    gate: PermissionGate,
    sandbox: Sandbox,
    /// Told what each session's agent is doing (the chat console's status line).
    activity: ActivityReporter,
}

/// How one prompt turn ended.
#[derive(Debug)]
enum TurnEnd {
    Stop(String),
    Error(RpcError),
    Idle,
    MaxTurn,
    Terminated,
    Shutdown,
    /// No work on the prompt shown within [`TurnSpec::first_sign_within`].
    Unresponsive,
}

impl AgentRunner {
    /// A runner.
    /// A runner without a sandbox; the daemon adds its sandbox with
    /// [`with_sandbox`](Self::with_sandbox).
    pub fn new(settings: RunnerSettings, gate: PermissionGate) -> Self {
        Self {
            settings,
            gate,
            sandbox: Sandbox::none(),
            activity: ActivityReporter::default(),
        }
    }

    /// The runner's settings.
    pub fn settings(&self) -> &RunnerSettings {
        &self.settings
    }

    /// Reports every session's [`Activity`] to `observer`.
    pub fn with_activity_observer(mut self, observer: Arc<dyn ActivityObserver>) -> Self {
        self.activity = ActivityReporter::new(observer);
        self
    }

    /// Runs every agent inside `sandbox`.
    pub fn with_sandbox(mut self, sandbox: Sandbox) -> Self {
        self.sandbox = sandbox;
        self
    }

    /// Runs one session to its end and stops the agent process.
    pub async fn run(&self, run: SessionRun) -> Outcome {
        let (spec, turn) = run.split();
        let mut agent = match self.start(spec, &turn.terminate, &turn.shutdown).await {
            Ok(agent) => agent,
            Err(outcome) => return outcome,
        };
        let outcome = agent.prompt(&turn).await;
        agent.stop().await;
        outcome
    }

    /// Spawns the agent (inside the sandbox) and connects: initialize, session/new, model
    /// selection, within the connect timeout. `terminate` and `shutdown` end the wait early.
    /// On failure the process is already stopped and the outcome says why.
    pub async fn start(
        &self,
        spec: AgentSpec,
        terminate: &CancellationToken,
        shutdown: &CancellationToken,
    ) -> Result<LiveAgent, Outcome> {
        let session_id = spec.session_id.clone();
        self.activity.report(&session_id, Activity::Started);
        let ended = |outcome: Outcome| {
            self.activity.report(&session_id, Activity::Ended);
            tracing::info!(session_id = %session_id, outcome = outcome.label(), detail = ?outcome, "agent session ended");
            Err(outcome)
        };
        let (mut process, mut conn) = match self.spawn(spec).await {
            Ok(p) => p,
            Err(outcome) => return ended(outcome),
        };
        let connected = tokio::select! {
            r = tokio::time::timeout(self.settings.connect_timeout, self.connect(&mut conn)) => match r {
                Ok(Ok(id)) => Ok(id),
                Ok(Err(reason)) => Err(Outcome::Failed { reason }),
                Err(_) => Err(Outcome::TimedOut { phase: "connect" }),
            },
            _ = terminate.cancelled() => Err(Outcome::Terminated),
            _ = shutdown.cancelled() => Err(Outcome::Cancelled),
        };
        match connected {
            Ok((acp_session, accepts_images)) => Ok(LiveAgent {
                process,
                conn,
                acp_session,
                accepts_images,
                settings: self.settings.clone(),
                turn_open: true,
                turns: 0,
            }),
            Err(outcome) => {
                process.snapshot_descendants();
                let Connection { client, .. } = conn;
                client.close();
                process.shutdown(self.settings.kill_grace).await;
                ended(outcome)
            }
        }
    }

    /// The sandboxed process and its connection.
    async fn spawn(&self, mut spec: AgentSpec) -> Result<(AgentProcess, Connection), Outcome> {
        let (workspace, staging) =
            self.prepare_workspace(&spec)
                .await
                .map_err(|e| Outcome::Failed {
                    reason: format!("cannot prepare the workspace for the agent: {e}"),
                })?;
        // Inside the sandbox only the canonical path exists; use it everywhere (cwd, fs/*).
        let staging_in_env = staging_of(&spec.env, &spec.workspace)
            .and_then(|s| Some(workspace.join(s.strip_prefix(&spec.workspace).ok()?)));
        spec.workspace = workspace.clone();
        if !self.sandbox.is_enabled() {
            tracing::warn!(session_id = %spec.session_id, "agent.sandbox.mode is none: this agent runs unconfined");
        }
        let mut env = spec.env.clone();
        self.sandbox.adjust_env(&mut env);
        self.sandbox
            .adjust_network_env(&mut env, spec.api_socket_dir.as_deref());
        let command = self.sandbox.wrap(
            Path::new(&self.settings.command),
            &self.settings.args,
            &workspace,
            spec.dm,
            spec.api_socket_dir.as_deref(),
            staging.as_deref(),
        );
        let launch = Launch {
            program: &command.program,
            args: &command.args,
            cwd: &workspace,
            env: &env,
            label: &spec.session_id,
        };
        let (process, client, incoming) =
            AgentProcess::spawn(&launch).map_err(|e| Outcome::Failed {
                reason: e.to_string(),
            })?;
        Ok((
            process,
            Connection {
                client,
                incoming,
                gate: self.gate.clone(),
                session_id: spec.session_id,
                workspace: spec.workspace,
                dm: spec.dm,
                staging: staging_in_env,
                activity: self.activity.clone(),
                fs_tasks: JoinSet::new(),
            },
        ))
    }

    /// The canonical workspace with the sandbox's mount points in place (blocking file-system
    /// work, so on the blocking pool).
    /// Also returns the session's staging folder when it exists as a real folder (only then can
    /// the sandbox bind it over the otherwise private `$TMPDIR`).
    async fn prepare_workspace(
        &self,
        spec: &AgentSpec,
    ) -> std::io::Result<(PathBuf, Option<PathBuf>)> {
        let sandbox = self.sandbox.clone();
        let workspace = spec.workspace.clone();
        let env = spec.env.clone();
        tokio::task::spawn_blocking(move || {
            let canonical = workspace.canonicalize()?;
            sandbox.prepare_workspace(&canonical)?;
            let staging = staging_of(&env, &workspace)
                .and_then(|s| Some(canonical.join(s.strip_prefix(&workspace).ok()?)))
                .filter(|s| std::fs::symlink_metadata(s).is_ok_and(|m| m.is_dir()));
            Ok((canonical, staging))
        })
        .await
        .map_err(std::io::Error::other)?
    }

    /// initialize + session/new (+ model selection). Returns the ACP session id and whether
    /// the agent takes image content blocks.
    async fn connect(&self, conn: &mut Connection) -> Result<(String, bool), String> {
        let far = Duration::from_secs(24 * 3600); // bounded by the caller's connect timeout
        let init = conn
            .request_serving(
                "initialize",
                json!({
                    "protocolVersion": PROTOCOL_VERSION,
                    "clientCapabilities": {
                        "fs": {"readTextFile": true, "writeTextFile": true},
                        "terminal": false
                    },
                    "clientInfo": {"name": "air-friends", "version": env!("CARGO_PKG_VERSION")}
                }),
                far,
            )
            .await
            .map_err(|e| format!("initialize failed: {e}"))?;
        match init.get("protocolVersion").and_then(Value::as_u64) {
            Some(PROTOCOL_VERSION) => {}
            other => {
                return Err(format!(
                    "agent speaks ACP protocol version {other:?}, we speak {PROTOCOL_VERSION}"
                ));
            }
        }
        let images = init
            .pointer("/agentCapabilities/promptCapabilities/image")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let cwd = std::path::absolute(&conn.workspace).unwrap_or_else(|_| conn.workspace.clone());
        let new = conn
            .request_serving("session/new", json!({"cwd": cwd, "mcpServers": []}), far)
            .await
            .map_err(|e| format!("session/new failed: {e}"))?;
        let session = new
            .get("sessionId")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .ok_or("session/new returned no sessionId")?
            .to_owned();
        if let Some(model) = &self.settings.model {
            self.select_model(conn, &session, &new, model).await;
        }
        Ok((session, images))
    }

    async fn select_model(&self, conn: &mut Connection, session: &str, new: &Value, model: &str) {
        let option = new
            .get("configOptions")
            .and_then(Value::as_array)
            .and_then(|opts| {
                opts.iter()
                    .find(|o| o.get("id").and_then(Value::as_str) == Some("model"))
            });
        let Some(option) = option else {
            tracing::debug!(session_id = %conn.session_id, "agent offers no model option; using its default");
            return;
        };
        if option.get("currentValue").and_then(Value::as_str) == Some(model) {
            return;
        }
        let offered = option
            .get("options")
            .and_then(Value::as_array)
            .is_some_and(|vals| {
                vals.iter()
                    .any(|v| v.get("value").and_then(Value::as_str) == Some(model))
            });
        if !offered {
            tracing::warn!(session_id = %conn.session_id, model, "configured model is not offered by the agent; using its default");
            return;
        }
        let params = json!({"sessionId": session, "configId": "model", "value": model});
        match conn
            .request_serving(
                "session/set_config_option",
                params,
                Duration::from_secs(24 * 3600),
            )
            .await
        {
            Ok(_) => tracing::debug!(session_id = %conn.session_id, model, "model selected"),
            Err(e) => {
                tracing::warn!(session_id = %conn.session_id, model, error = %e, "model selection failed")
            }
        }
    }
}

/// A running agent connected to its ACP session, between turns or in one.
pub struct LiveAgent {
    process: AgentProcess,
    conn: Connection,
    acp_session: String,
    /// `promptCapabilities.image` of the agent's `initialize` answer.
    accepts_images: bool,
    settings: RunnerSettings,
    /// The console's status: a turn is open from `start` (or the prompt) to its end.
    turn_open: bool,
    turns: u32,
}

impl std::fmt::Debug for LiveAgent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveAgent")
            .field("session_id", &self.conn.session_id)
            .field("pid", &self.process.pid())
            .field("turns", &self.turns)
            .finish_non_exhaustive()
    }
}

impl LiveAgent {
    /// Our session id.
    pub fn session_id(&self) -> &str {
        &self.conn.session_id
    }

    /// The agent's OS process id.
    pub fn pid(&self) -> Option<u32> {
        self.process.pid()
    }

    /// Whether the agent takes pictures in a prompt (`promptCapabilities.image`); without it,
    /// [`TurnSpec::images`] are not sent.
    pub fn accepts_images(&self) -> bool {
        self.accepts_images
    }

    /// Turns prompted so far.
    pub fn turns(&self) -> u32 {
        self.turns
    }

    /// Whether the process has exited: it can take no further turn.
    pub fn has_exited(&mut self) -> bool {
        self.process.has_exited()
    }

    /// Runs one turn on the agent's ACP session: the prompt, and the retry prompt once when
    /// the turn ended without an answer for the user.
    pub async fn prompt(&mut self, turn: &TurnSpec) -> Outcome {
        let sid = self.conn.session_id.clone();
        if !self.turn_open {
            self.conn.activity.report(&sid, Activity::Started);
        }
        self.turn_open = false;
        self.turns += 1;
        let outcome = self.drive(turn).await;
        self.conn.activity.report(&sid, Activity::Ended);
        tracing::info!(session_id = %sid, outcome = outcome.label(), detail = ?outcome, turn = self.turns, "agent turn ended");
        outcome
    }

    /// Stops the process (stdin EOF, then SIGTERM, then SIGKILL to its group, and whatever
    /// it left behind).
    pub async fn stop(self) {
        let LiveAgent {
            mut process,
            conn,
            settings,
            ..
        } = self;
        let Connection { client, .. } = conn;
        process.snapshot_descendants();
        client.close();
        process.shutdown(settings.kill_grace).await;
    }

    async fn drive(&mut self, run: &TurnSpec) -> Outcome {
        let mut retried = false;
        let mut prompt = run.prompt.clone();
        let images: &[PromptImage] = if self.accepts_images {
            &run.images
        } else {
            &[]
        };
        loop {
            // The retry prompt is text alone: the pictures are in the session already.
            let end = self
                .turn(&prompt, if retried { &[] } else { images }, run)
                .await;
            match end {
                TurnEnd::Stop(reason) => {
                    if run.probe.responded() {
                        return Outcome::Responded { retried };
                    }
                    if reason != "end_turn" {
                        tracing::warn!(session_id = %self.conn.session_id, stop_reason = %reason, "turn ended without an answer");
                    }
                    match (&run.retry_prompt, retried, reason.as_str()) {
                        (Some(retry), false, "end_turn") => {
                            tracing::info!(session_id = %self.conn.session_id, "no reply yet; sending the retry prompt");
                            retried = true;
                            prompt = retry.clone();
                        }
                        _ => return Outcome::NoResponse { retried },
                    }
                }
                TurnEnd::Error(e) => {
                    return Outcome::Failed {
                        reason: format!("session/prompt failed: {e}"),
                    };
                }
                // `turn` has sent `session/cancel` already.
                other => {
                    return match other {
                        TurnEnd::Idle => Outcome::TimedOut { phase: "idle" },
                        TurnEnd::MaxTurn => Outcome::TimedOut { phase: "max_turn" },
                        TurnEnd::Terminated => Outcome::Terminated,
                        TurnEnd::Unresponsive => Outcome::Failed {
                            reason: "the agent showed no work on the prompt".into(),
                        },
                        _ => Outcome::Cancelled,
                    };
                }
            }
        }
    }

    /// Sends one prompt and serves the agent until the turn ends.
    async fn turn(&mut self, text: &str, images: &[PromptImage], run: &TurnSpec) -> TurnEnd {
        let session = self.acp_session.clone();
        let conn = &mut self.conn;
        let mut blocks = vec![json!({"type": "text", "text": text})];
        blocks.extend(
            images
                .iter()
                .map(|i| json!({"type": "image", "mimeType": i.mime, "data": i.data})),
        );
        let params = json!({"sessionId": session, "prompt": blocks});
        let client = conn.client.clone();
        // The RPC timeout is a backstop; max_turn below is the real bound.
        let backstop = self.settings.max_turn + Duration::from_secs(60);
        // Marks the end of start-up for the first prompt (`benches/agent_startup.rs` times it).
        tracing::debug!(session_id = %conn.session_id, bytes = text.len(), images = images.len(), "prompt sent");
        conn.activity.report(&conn.session_id, Activity::Thinking);
        let prompt = client.request("session/prompt", params, backstop);
        tokio::pin!(prompt);
        let turn_deadline = Instant::now() + self.settings.max_turn;
        let mut idle_deadline = Instant::now() + self.settings.idle_timeout;
        // A warm agent must show a sign of life soon (see `TurnSpec::first_sign_within`).
        let far = Instant::now() + Duration::from_secs(24 * 3600);
        let mut first_sign_deadline = run.first_sign_within.map_or(far, |d| Instant::now() + d);
        let end = loop {
            tokio::select! {
                result = &mut prompt => {
                    // The agent's messages written before its answer are queued by now (the
                    // reader delivers in order): serve them as this turn's, or a warm agent's
                    // next turn would take this one's last updates for its own.
                    while let Ok(m) = conn.incoming.try_recv() {
                        conn.serve(m).await;
                    }
                    return match result {
                        Ok(v) => TurnEnd::Stop(
                            v.get("stopReason").and_then(Value::as_str).unwrap_or("unknown").to_owned(),
                        ),
                        Err(e) => TurnEnd::Error(e),
                    };
                }
                msg = conn.incoming.recv() => match msg {
                    Some(m) => {
                        idle_deadline = Instant::now() + self.settings.idle_timeout;
                        if works_on_the_turn(&m) {
                            first_sign_deadline = far;
                        }
                        conn.serve(m).await;
                    }
                    // stdout closed: the prompt future resolves with `Closed` next.
                    None => {
                        return match (&mut prompt).await {
                            Ok(v) => TurnEnd::Stop(v.get("stopReason").and_then(Value::as_str).unwrap_or("unknown").to_owned()),
                            Err(e) => TurnEnd::Error(e),
                        };
                    }
                },
                _ = tokio::time::sleep_until(idle_deadline) => break TurnEnd::Idle,
                _ = tokio::time::sleep_until(turn_deadline) => break TurnEnd::MaxTurn,
                _ = tokio::time::sleep_until(first_sign_deadline) => break TurnEnd::Unresponsive,
                _ = run.terminate.cancelled() => break TurnEnd::Terminated,
                _ = run.shutdown.cancelled() => break TurnEnd::Shutdown,
            }
        };
        conn.cancel(&session, prompt).await;
        end
    }
}

/// The live connection of one session.
struct Connection {
    client: RpcClient,
    incoming: mpsc::Receiver<Incoming>,
    gate: PermissionGate,
    /// Our session id.
    session_id: String,
    /// The canonical workspace (the fs/* boundary).
    workspace: PathBuf,
    /// A direct-message session (`private/` visible).
    dm: bool,
    /// The session's staging folder (see [`SessionRun::staging_dir`]).
    staging: Option<PathBuf>,
    activity: ActivityReporter,
    /// fs/* requests being served off the turn loop (see [`Connection::spawn_fs`]); dropping
    /// the connection at the session's end aborts those still waiting.
    fs_tasks: JoinSet<()>,
}

impl Connection {
    /// A request whose wait also serves incoming agent messages (agents may ask things while
    /// we wait for them).
    async fn request_serving(
        &mut self,
        method: &str,
        params: Value,
        timeout: Duration,
    ) -> Result<Value, RpcError> {
        let client = self.client.clone();
        let fut = client.request(method, params, timeout);
        tokio::pin!(fut);
        loop {
            tokio::select! {
                r = &mut fut => return r,
                msg = self.incoming.recv() => match msg {
                    Some(m) => self.serve(m).await,
                    None => return (&mut fut).await,
                },
            }
        }
    }

    /// Handles one notification or request from the agent.
    async fn serve(&mut self, msg: Incoming) {
        let sid = &self.session_id;
        match msg {
            Incoming::Notification { method, params } => {
                if method == "session/update" {
                    log_update(sid, &params);
                    if let Some(now) = activity::of_update(&params) {
                        self.activity.report(sid, now);
                    }
                } else {
                    tracing::debug!(session_id = %sid, method = %method, "agent notification ignored");
                }
            }
            Incoming::Request { id, method, params } => {
                let reply = match method.as_str() {
                    "session/request_permission" => {
                        let tool_call = params.get("toolCall").cloned().unwrap_or(Value::Null);
                        let decision = self.gate.decide(&tool_call, &self.workspace);
                        let command = gate::command_of(&tool_call);
                        if decision.allow && self.gate.is_yolo() {
                            tracing::warn!(session_id = %sid, command = ?command, reason = %decision.reason, "permission approved (YOLO)");
                        } else {
                            tracing::info!(session_id = %sid, command = ?command, allow = decision.allow, reason = %decision.reason, "permission decision");
                        }
                        let options = params.get("options").cloned().unwrap_or(Value::Null);
                        Ok(gate::permission_response(&options, decision.allow))
                    }
                    "fs/read_text_file" | "fs/write_text_file" => {
                        self.spawn_fs(id, method, params);
                        return;
                    }
                    _ => {
                        tracing::debug!(session_id = %sid, method = %method, "unsupported agent request");
                        Err((rpc::METHOD_NOT_FOUND, format!("Method not found: {method}")))
                    }
                };
                let sent = match reply {
                    Ok(result) => self.client.respond(id, result).await,
                    Err((code, message)) => self.client.respond_error(id, code, &message).await,
                };
                if sent.is_err() {
                    tracing::debug!(session_id = %sid, "agent went away before our answer");
                }
            }
        }
    }

    /// Serves an fs request in a task of its own that answers the agent itself: the blocking
    /// work runs under `fs::FS_REQUEST_TIMEOUT`, and the turn loop's idle and max-turn timers
    /// keep running meanwhile (a FIFO or a slow disk never stalls the session).
    fn spawn_fs(&mut self, id: Value, method: String, params: Value) {
        while self.fs_tasks.try_join_next().is_some() {}
        let busy = self.fs_tasks.len() >= fs::MAX_FS_IN_FLIGHT;
        let client = self.client.clone();
        let sid = self.session_id.clone();
        let workspace = self.workspace.clone();
        let dm = self.dm;
        let staging = self.staging.clone();
        self.fs_tasks.spawn(async move {
            let reply = if busy {
                Err(fs::FsError::Busy)
            } else {
                fs::serve(&method, workspace, dm, staging, params).await
            };
            let sent = match reply {
                Ok(result) => client.respond(id, result).await,
                Err(e) => {
                    tracing::warn!(session_id = %sid, method = %method, error = %e, "fs request refused");
                    client.respond_error(id, e.rpc_code(), &e.to_string()).await
                }
            };
            if sent.is_err() {
                tracing::debug!(session_id = %sid, "agent went away before our answer");
            }
        });
    }

    /// `session/cancel`, then answer permission requests with `cancelled` until the agent
    /// answers the turn's `prompt` (ACP: with `stopReason: cancelled`), for a short grace
    /// period at most: an agent that honours the cancel lets the session end at once (the chat
    /// console's Ctrl-C, `tests/chat_console.rs`).
    async fn cancel<F>(&mut self, session: &str, mut prompt: std::pin::Pin<&mut F>)
    where
        F: std::future::Future<Output = Result<Value, RpcError>>,
    {
        let sid = self.session_id.clone();
        if self
            .client
            .notify("session/cancel", json!({"sessionId": session}))
            .await
            .is_err()
        {
            return;
        }
        let deadline = Instant::now() + CANCEL_GRACE;
        loop {
            tokio::select! {
                msg = self.incoming.recv() => match msg {
                    Some(Incoming::Request { id, method, .. }) if method == "session/request_permission" => {
                        let _ = self.client.respond(id, gate::cancelled_response()).await;
                    }
                    Some(Incoming::Request { id, method, .. }) => {
                        let _ = self.client.respond_error(id, rpc::METHOD_NOT_FOUND, &format!("session cancelled ({method})")).await;
                    }
                    Some(Incoming::Notification { params, .. }) => log_update(&sid, &params),
                    None => return,
                },
                _ = &mut prompt => return,
                _ = tokio::time::sleep_until(deadline) => return,
            }
        }
    }
}

/// Whether an agent message shows it working on the prompt: any request (a permission, a
/// file), or a session update about the turn (text, thoughts, a tool call, a plan). Updates of
/// the session's metadata (its commands, mode, config options, title), which an agent sends
/// whether or not it works, are not.
fn works_on_the_turn(msg: &Incoming) -> bool {
    match msg {
        Incoming::Request { .. } => true,
        Incoming::Notification { method, params } => {
            let kind = params
                .pointer("/update/sessionUpdate")
                .and_then(Value::as_str)
                .unwrap_or("");
            method == "session/update"
                && !matches!(
                    kind,
                    "available_commands_update"
                        | "current_mode_update"
                        | "config_option_update"
                        | "session_info_update"
                )
        }
    }
}

/// Logs tool calls and failures; agent text is never forwarded anywhere (only its length).
fn log_update(sid: &str, params: &Value) {
    let update = params.get("update").unwrap_or(&Value::Null);
    let kind = update
        .get("sessionUpdate")
        .and_then(Value::as_str)
        .unwrap_or("unknown");
    match kind {
        "tool_call" | "tool_call_update" => {
            let status = update.get("status").and_then(Value::as_str).unwrap_or("");
            let title = update.get("title").and_then(Value::as_str).unwrap_or("");
            let id = update
                .get("toolCallId")
                .and_then(Value::as_str)
                .unwrap_or("");
            if status == "failed" {
                tracing::warn!(session_id = %sid, tool_call = id, title, "agent tool call failed");
            } else {
                tracing::debug!(session_id = %sid, tool_call = id, title, status, "agent tool call");
            }
        }
        "agent_message_chunk" | "agent_thought_chunk" => {
            let len = update
                .pointer("/content/text")
                .and_then(Value::as_str)
                .map_or(0, str::len);
            tracing::trace!(session_id = %sid, kind, len, "agent text (not forwarded)");
        }
        other => tracing::trace!(session_id = %sid, kind = other, "session update"),
    }
}
