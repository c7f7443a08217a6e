//! Starting an agent session, whatever it is for: a Skill API session (id, caller token), the
//! workspace and staging folders, the sandboxed agent's own socket and egress proxy, and the
//! agent's environment (its identity, the model gateway route, never a secret).
//!
//! A conversation's cold turn ([`Interactions`](super::interaction::Interactions)) and the memory
//! maintenance job both start their agents here, so a maintenance run gets exactly the
//! sandbox, socket and gateway a conversation gets.

use std::path::PathBuf;

use tokio_util::sync::CancellationToken;

use super::warm::SessionResources;
use super::workspace::{WorkspaceError, Workspaces};
use crate::agent::env::{EnvInputs, ModelGateway, SessionIdentity, build_agent_env};
use std::sync::Arc;

use crate::agent::{AgentRunner, AgentSpec, McpEndpoint, Outcome, ResponseProbe, TurnSpec};
use crate::config::{AgentConfig, McpServerConfig, ProcessEnv};
use crate::egress::EgressProxy;
use crate::session::{SessionContext, SessionError, SessionPurpose, SessionRegistry};
use crate::skill_api::{SkillApiState, SocketError};

/// What the agent's environment is built from, fixed for the daemon's life.
#[derive(Debug, Clone)]
pub struct AgentEnvTemplate {
    /// `agent.*` configuration.
    pub agent: AgentConfig,
    /// Absolute skills folder.
    pub skills_dir: PathBuf,
    /// This executable.
    pub air_friends_bin: PathBuf,
    /// Skill API base URL (`http://127.0.0.1:PORT`).
    pub api_url: String,
    /// Credential variables of enabled skills.
    pub skill_credentials: Vec<String>,
    /// The daemon's secret values (never passed on).
    pub secret_values: Vec<String>,
    /// Providers served by the model gateway: (provider id, variable holding its key). The
    /// agent is pointed at `{api_url}/llm/<session>/<id>` and never gets the key.
    pub gateway_providers: Vec<(String, String)>,
    /// The MCP servers (`mcp.servers`): a session gets those of its place, as the broker's
    /// endpoints `{api_url}/mcp/<session>/<name>`.
    pub mcp_servers: Vec<McpServerConfig>,
}

/// Why a session could not be started (everything it had opened is released again).
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    /// No session could be registered (the OS random number generator failed).
    #[error("cannot register a session: {0}")]
    Register(#[from] SessionError),
    /// The workspace or staging folder could not be created.
    #[error("cannot prepare the workspace: {0}")]
    Workspace(#[from] WorkspaceError),
    /// The session's Skill API socket could not be opened.
    #[error("cannot open the session's Skill API socket: {0}")]
    Socket(#[from] SocketError),
    /// The session's egress proxy could not be opened.
    #[error("cannot open the session's egress proxy: {0}")]
    Egress(#[source] std::io::Error),
}

/// Starts agent sessions: everything a session needs, with the same rules for every kind.
pub struct Launcher {
    /// Skill API sessions.
    pub sessions: SessionRegistry,
    /// With the sandbox on: the Skill API, to open each session's own socket (its only channel
    /// to the daemon). `None`: agents reach the Skill API over TCP (`agent.sandbox.mode: none`).
    pub channels: Option<SkillApiState>,
    /// With the sandbox on and `agent.sandbox.egressAllowHosts` set: the CONNECT proxy served
    /// on each session's socket folder (`proxy.sock`, relayed to the agent's `HTTPS_PROXY`).
    pub egress: Option<EgressProxy>,
    /// The agent runner.
    pub runner: AgentRunner,
    /// Maps a user to their workspace folder.
    pub workspaces: Workspaces,
    /// Agent environment inputs.
    pub env: AgentEnvTemplate,
    /// Cancelled when running sessions must stop (end of the shutdown grace period).
    pub stop: CancellationToken,
}

impl std::fmt::Debug for Launcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Launcher").finish_non_exhaustive()
    }
}

impl Launcher {
    /// Registers a session for `context` and opens what its agent needs: the workspace and
    /// staging folder, and with the sandbox on its socket and egress proxy. On an error,
    /// whatever was opened is released before returning.
    pub async fn open(&self, context: SessionContext) -> Result<SessionResources, LaunchError> {
        let (platform, user_id) = (context.origin.platform, context.origin.user_id.clone());
        let needs_no_files = context.purpose.maintenance().is_some();
        let registered = self.sessions.register(context)?;
        let session_id = registered.session_id.clone();
        // A maintenance run works on memories only: it gets an empty folder, never the user's
        // workspace (whose `private/` a private run would otherwise see and copy out).
        let dirs = if needs_no_files {
            self.workspaces.prepare_scratch(&session_id).await
        } else {
            self.workspaces
                .prepare(platform, user_id.as_str(), &session_id)
                .await
        };
        let dirs = match dirs {
            Ok(dirs) => dirs,
            Err(e) => {
                self.sessions.unregister(&registered.session_id);
                return Err(e.into());
            }
        };
        let mut resources = SessionResources {
            registered,
            dirs,
            socket: None,
            egress: None,
            sessions: self.sessions.clone(),
            workspaces: self.workspaces.clone(),
        };
        // A sandboxed agent's only way to the daemon: its session's own socket.
        if let Some(api) = &self.channels {
            match api
                .open_session_socket(&resources.registered.session_id)
                .await
            {
                Ok(socket) => resources.socket = Some(socket),
                Err(e) => {
                    resources.release().await;
                    return Err(e.into());
                }
            }
        }
        // Its egress proxy, next to the socket in the same private folder.
        if let (Some(proxy), Some(open)) = (&self.egress, resources.socket.as_ref()) {
            match proxy.serve_session(open.dir()) {
                Ok(egress) => resources.egress = Some(egress),
                Err(e) => {
                    resources.release().await;
                    return Err(LaunchError::Egress(e));
                }
            }
        }
        Ok(resources)
    }

    /// Starts the agent of `spec`, prompts it once with `prompt()` (built only once it runs),
    /// and stops it: a turn nobody answers in a chat (a maintenance run, a scheduled run).
    /// `terminate` ends the turn early; `probe` is asked whether it answered.
    pub async fn one_turn(
        &self,
        spec: AgentSpec,
        terminate: &CancellationToken,
        probe: Arc<dyn ResponseProbe>,
        prompt: impl FnOnce() -> String,
    ) -> Outcome {
        match self.runner.start(spec, terminate, &self.stop).await {
            Ok(mut live) => {
                let turn = TurnSpec {
                    prompt: prompt(),
                    images: Vec::new(),
                    retry_prompt: None,
                    terminate: terminate.clone(),
                    shutdown: self.stop.clone(),
                    probe,
                    first_sign_within: None,
                };
                let outcome = live.prompt(&turn).await;
                live.stop().await;
                outcome
            }
            Err(outcome) => outcome,
        }
    }

    /// The agent for an opened session: its folders, socket, and environment (the session's
    /// identity and gateway route); the sandbox shows `private/` when the session is a DM.
    /// `model` is the place's (`None`: `agent.model`).
    pub fn agent_spec(&self, resources: &SessionResources, model: Option<String>) -> AgentSpec {
        // A scratch workspace has no `private/`; never more than a public session's view.
        let dm = resources.registered.handle.context().origin.is_dm && !resources.dirs.scratch;
        let session_id = resources.registered.session_id.as_str().to_owned();
        let identity = SessionIdentity {
            session_id: session_id.clone(),
            token: resources.registered.caller_token.expose_secret().to_owned(),
            api_url: self.env.api_url.clone(),
        };
        let gateway_route = format!("{}/llm/{session_id}", self.env.api_url);
        let env = build_agent_env(
            &EnvInputs {
                agent: &self.env.agent,
                identity: &identity,
                workspace: &resources.dirs.workspace,
                air_friends_bin: &self.env.air_friends_bin,
                skills_dir: &self.env.skills_dir,
                skill_credentials: &self.env.skill_credentials,
                secret_values: &self.env.secret_values,
                gateway: Some(ModelGateway {
                    route: &gateway_route,
                    providers: &self.env.gateway_providers,
                }),
            },
            &ProcessEnv,
        );
        let context = resources.registered.handle.context();
        // A maintenance run works on memories only: no tools of anyone's.
        let mcp_servers = if matches!(context.purpose, SessionPurpose::Maintenance(_)) {
            Vec::new()
        } else {
            self.env
                .mcp_servers
                .iter()
                .filter(|s| s.serves_place(&context.place.name))
                .map(|s| McpEndpoint {
                    name: s.name.clone(),
                    url: format!("{}/mcp/{session_id}/{}", self.env.api_url, s.name),
                    headers: vec![(
                        "Authorization".to_owned(),
                        format!("Bearer {}", identity.token),
                    )],
                })
                .collect()
        };
        AgentSpec {
            session_id,
            workspace: resources.dirs.workspace.clone(),
            dm,
            api_socket_dir: resources.socket.as_ref().map(|s| s.dir().to_path_buf()),
            env,
            model,
            skills: context.place.skills.clone(),
            state_dir: None,
            resume: None,
            mcp_servers,
        }
    }
}
