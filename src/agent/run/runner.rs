//! The runner: spawns an agent inside the sandbox and connects it (initialize, session/new,
//! model selection) within the connect timeout, handing back a [`LiveAgent`].

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::connection::Connection;
use super::live::LiveAgent;
use super::{
    AgentRun, AgentSpec, McpEndpoint, Outcome, PROTOCOL_VERSION, RunnerSettings, staging_of,
};
use crate::agent::activity::{Activity, ActivityObserver, ActivityReporter};
use crate::agent::gate::PermissionGate;
use crate::agent::process::{AgentProcess, Launch};
use crate::agent::sandbox::cgroup::AgentCgroup;
use crate::agent::sandbox::{Mounts, Sandbox};

/// Runs ACP sessions with a permission gate, each agent inside the sandbox.
#[derive(Debug, Clone)]
pub struct AgentRunner {
    settings: RunnerSettings,
    gate: PermissionGate,
    sandbox: Sandbox,
    /// Told what each session's agent is doing (the chat console's status line).
    activity: ActivityReporter,
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
    pub async fn run(&self, run: AgentRun) -> Outcome {
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
        let model = spec.model.clone().or_else(|| self.settings.model.clone());
        self.activity.report(&session_id, Activity::Started);
        let ended = |outcome: Outcome| {
            self.activity.report(&session_id, Activity::Ended);
            tracing::info!(session_id = %session_id, outcome = outcome.label(), detail = ?outcome, "agent session ended");
            Err(outcome)
        };
        let resume = spec.resume.clone();
        let mcp = spec.mcp_servers.clone();
        let (mut process, mut conn) = match self.spawn(spec).await {
            Ok(p) => p,
            Err(outcome) => return ended(outcome),
        };
        let connected = tokio::select! {
            r = tokio::time::timeout(self.settings.connect_timeout, self.connect(&mut conn, model.as_deref(), resume.as_deref(), &mcp)) => match r {
                Ok(Ok(id)) => Ok(id),
                Ok(Err(reason)) => Err(Outcome::Failed { reason }),
                Err(_) => Err(Outcome::TimedOut { phase: "connect" }),
            },
            _ = terminate.cancelled() => Err(Outcome::Terminated),
            _ = shutdown.cancelled() => Err(Outcome::Cancelled),
        };
        match connected {
            Ok(Connected {
                acp_session,
                accepts_images,
                resumed,
            }) => Ok(LiveAgent {
                process,
                conn,
                acp_session,
                accepts_images,
                resumed,
                settings: self.settings.clone(),
                wrapper_depth: if self.sandbox.is_enabled() { 3 } else { 0 },
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
        let (workspace, staging, cgroup) =
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
        self.sandbox.adjust_env(&mut env, spec.state_dir.as_deref());
        self.sandbox
            .adjust_network_env(&mut env, spec.api_socket_dir.as_deref());
        let command = self.sandbox.wrap(
            Path::new(&self.settings.command),
            &self.settings.args,
            &Mounts {
                workspace: &workspace,
                dm: spec.dm,
                api_socket_dir: spec.api_socket_dir.as_deref(),
                staging: staging.as_deref(),
                state: spec.state_dir.as_deref(),
            },
        );
        let launch = Launch {
            program: &command.program,
            args: &command.args,
            cwd: &workspace,
            env: &env,
            label: &spec.session_id,
        };
        let (process, client, incoming) =
            AgentProcess::spawn_in(&launch, cgroup).map_err(|e| Outcome::Failed {
                reason: e.to_string(),
            })?;
        Ok((
            process,
            Connection {
                client,
                incoming,
                gate: self.gate.scoped(spec.skills),
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
    /// the sandbox bind it over the otherwise private `$TMPDIR`), and the agent's cgroup when
    /// agents get one.
    async fn prepare_workspace(
        &self,
        spec: &AgentSpec,
    ) -> std::io::Result<(PathBuf, Option<PathBuf>, Option<AgentCgroup>)> {
        let sandbox = self.sandbox.clone();
        let workspace = spec.workspace.clone();
        let env = spec.env.clone();
        let socket_dir = spec.api_socket_dir.clone();
        let state_dir = spec.state_dir.clone();
        let label = spec.session_id.clone();
        tokio::task::spawn_blocking(move || {
            let canonical = workspace.canonicalize()?;
            sandbox.prepare_workspace(&canonical)?;
            let staging = staging_of(&env, &workspace)
                .and_then(|s| Some(canonical.join(s.strip_prefix(&workspace).ok()?)))
                .filter(|s| std::fs::symlink_metadata(s).is_ok_and(|m| m.is_dir()));
            if let Some(user) = sandbox.agent_user() {
                hand_over_session_paths(staging.as_deref(), socket_dir.as_deref(), user)?;
                if let Some(state) = &state_dir {
                    crate::agent::sandbox::hand_over(state, user)?;
                }
            }
            let cgroup = sandbox
                .agent_cgroup(&label)
                .map_err(std::io::Error::other)?;
            Ok((canonical, staging, cgroup))
        })
        .await
        .map_err(std::io::Error::other)?
    }

    /// initialize + session/new (+ selection of `model`), or the resumption of `resume` when
    /// the agent can (`session/resume`, else `session/load`; a refusal falls back to
    /// `session/new`, logged).
    async fn connect(
        &self,
        conn: &mut Connection,
        model: Option<&str>,
        resume: Option<&str>,
        mcp: &[McpEndpoint],
    ) -> Result<Connected, String> {
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
        let servers = mcp_servers(&init, mcp, &conn.session_id);
        if let Some(earlier) = resume
            && let Some(session) = self.resume(conn, &init, earlier, &cwd, &servers).await
        {
            if let Some(model) = model {
                self.reselect_model(conn, &session, model).await;
            }
            return Ok(Connected {
                acp_session: session,
                accepts_images: images,
                resumed: true,
            });
        }
        let new = conn
            .request_serving(
                "session/new",
                json!({"cwd": cwd, "mcpServers": servers}),
                far,
            )
            .await
            .map_err(|e| format!("session/new failed: {e}"))?;
        let session = new
            .get("sessionId")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .ok_or("session/new returned no sessionId")?
            .to_owned();
        if let Some(model) = model {
            self.select_model(conn, &session, &new, model).await;
        }
        Ok(Connected {
            acp_session: session,
            accepts_images: images,
            resumed: false,
        })
    }

    /// Resumes session `earlier` with the method the agent advertised in `init`
    /// (`sessionCapabilities.resume`, else `loadSession`); `None` (logged) when it cannot or
    /// refuses, so a new session starts. A `session/load` replays the history as updates, which
    /// the connection serves and nobody shows.
    async fn resume(
        &self,
        conn: &mut Connection,
        init: &Value,
        earlier: &str,
        cwd: &Path,
        servers: &Value,
    ) -> Option<String> {
        let caps = init.get("agentCapabilities");
        let method = if caps
            .and_then(|c| c.pointer("/sessionCapabilities/resume"))
            .is_some_and(|r| !r.is_null())
        {
            "session/resume"
        } else if caps
            .and_then(|c| c.get("loadSession"))
            .and_then(Value::as_bool)
            == Some(true)
        {
            "session/load"
        } else {
            tracing::info!(session_id = %conn.session_id, "the agent cannot resume a session; starting a new one");
            return None;
        };
        let far = Duration::from_secs(24 * 3600);
        let params = json!({"sessionId": earlier, "cwd": cwd, "mcpServers": servers});
        match conn.request_serving(method, params, far).await {
            Ok(_) => {
                tracing::info!(session_id = %conn.session_id, acp_session = earlier, method, "agent session resumed");
                Some(earlier.to_owned())
            }
            Err(e) => {
                tracing::warn!(session_id = %conn.session_id, acp_session = earlier, method, error = %e, "the agent did not resume the conversation's session; starting a new one");
                None
            }
        }
    }

    /// Selects `model` on a resumed session (which announces no options): asked once, a
    /// refusal logged at debug (the session keeps the model it had).
    async fn reselect_model(&self, conn: &mut Connection, session: &str, model: &str) {
        let params = json!({"sessionId": session, "configId": "model", "value": model});
        if let Err(e) = conn
            .request_serving(
                "session/set_config_option",
                params,
                Duration::from_secs(24 * 3600),
            )
            .await
        {
            tracing::debug!(session_id = %conn.session_id, model, error = %e, "model selection on a resumed session failed");
        }
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

/// What connecting gave.
/// The `mcpServers` of `session/new` (and of a resumption): `mcp` when the agent's
/// `initialize` answer takes HTTP MCP servers, else none (logged).
fn mcp_servers(init: &Value, mcp: &[McpEndpoint], session_id: &str) -> Value {
    if mcp.is_empty() {
        return json!([]);
    }
    let http = init.pointer("/agentCapabilities/mcpCapabilities/http") == Some(&json!(true));
    if !http {
        tracing::warn!(
            session_id,
            servers = mcp.len(),
            "the agent takes no HTTP MCP servers: the configured MCP servers are not offered to it"
        );
        return json!([]);
    }
    Value::Array(mcp.iter().map(McpEndpoint::acp).collect())
}

struct Connected {
    acp_session: String,
    accepts_images: bool,
    resumed: bool,
}

/// Gives a root daemon's agent user what the sandbox binds for it beside its workspace: its
/// staging folder, and its session's socket folder with the sockets in it (the relay inside
/// connects as that user). Nothing else of the daemon's folders.
fn hand_over_session_paths(
    staging: Option<&Path>,
    socket_dir: Option<&Path>,
    user: crate::agent::lockdown::HostUser,
) -> std::io::Result<()> {
    use crate::agent::sandbox::{API_SOCKET_NAME, hand_over};
    if let Some(staging) = staging {
        hand_over(staging, user)?;
    }
    if let Some(dir) = socket_dir {
        hand_over(dir, user)?;
        for name in [API_SOCKET_NAME, crate::egress::PROXY_SOCKET_NAME] {
            let socket = dir.join(name);
            if socket.exists() {
                hand_over(&socket, user)?;
            }
        }
    }
    Ok(())
}
