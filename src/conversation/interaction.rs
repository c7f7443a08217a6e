//! One interaction end to end: workspace and staging folder, session
//! registration with a caller token, prompt assembly, the agent run with the typing indicator,
//! and the finish — a short error reply when the user got nothing, never on top of a real
//! answer — then unregistration and clean-up.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::context::{assemble, gather};
use super::metrics::ConversationMetrics;
use super::prompts::PromptLibrary;
use super::router::MessageHandler;
use super::workspace::Workspaces;
use crate::agent::env::{EnvInputs, ModelGateway, SessionIdentity, build_agent_env};
use crate::agent::{AgentRunner, Outcome, SessionRun};
use crate::config::{AgentConfig, ProcessEnv};
use crate::egress::EgressProxy;
use crate::gateway::Budget;
use crate::platform::{IncomingMessage, PlatformAdapter, PlatformKind, PlatformRegistry};
use crate::skill_api::SkillApiState;
use crate::skill_api::sessions::{SessionContext, SessionRegistry};
use crate::store::Store;
use crate::store::WorkspaceKey;

/// Sent when the agent produced nothing for the user.
pub const ERROR_TEXT: &str = "I ran into a problem answering that, please try again.";

/// Sent instead of starting an agent when a daily token budget is used up.
pub const BUDGET_TEXT: &str = "I've used up what I'm allowed to think for today, so I can't answer right now. Let's talk again tomorrow!";

/// How often the typing indicator is refreshed (Discord shows it for about 10 s).
const TYPING_EVERY: Duration = Duration::from_secs(8);

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
}

/// Prompt sizes.
#[derive(Debug, Clone, Copy)]
pub struct PromptSettings {
    /// Token budget.
    pub token_limit: usize,
    /// Recent messages.
    pub recent_limit: usize,
    /// Related messages (guilds).
    pub related_limit: usize,
}

/// The pipeline behind the router.
pub struct Interactions {
    /// Platform adapters.
    pub platforms: PlatformRegistry,
    /// Skill API sessions.
    pub sessions: SessionRegistry,
    /// With the sandbox on: the Skill API, to open each session's own socket (its only channel
    /// to the daemon). `None`: agents reach the Skill API over TCP (`agent.sandbox.mode: none`).
    pub channels: Option<SkillApiState>,
    /// With the sandbox on and `agent.sandbox.egressAllowHosts` set: the CONNECT proxy served
    /// on each session's socket folder (`proxy.sock`, relayed to the agent's `HTTPS_PROXY`).
    pub egress: Option<EgressProxy>,
    /// Daily token budgets: checked before an agent is started.
    pub budget: Budget,
    /// The agent runner.
    pub runner: AgentRunner,
    /// Memories (for the prompt).
    pub store: Store,
    /// Prompt templates.
    pub prompts: Arc<PromptLibrary>,
    /// Workspaces.
    pub workspaces: Workspaces,
    /// Agent environment inputs.
    pub env: AgentEnvTemplate,
    /// Prompt sizes.
    pub prompt: PromptSettings,
    /// The retry prompt (quotes send-reply and react-message).
    pub retry_prompt: Option<String>,
    /// Metrics.
    pub metrics: ConversationMetrics,
    /// Cancelled when running sessions must stop (end of the shutdown grace period).
    pub stop: CancellationToken,
}

impl std::fmt::Debug for Interactions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Interactions").finish_non_exhaustive()
    }
}

#[async_trait]
impl MessageHandler for Interactions {
    async fn handle(&self, msg: IncomingMessage) {
        let Some(platform) = self.platforms.get(msg.platform) else {
            tracing::error!(platform = %msg.platform, "no adapter for this platform");
            return;
        };
        let mut timer = self.metrics.session_started(msg.platform.as_str());
        let outcome = self.run(platform.as_ref(), &msg).await;
        timer.outcome(outcome);
    }
}

impl Interactions {
    async fn run(&self, platform: &dyn PlatformAdapter, msg: &IncomingMessage) -> &'static str {
        let workspace = match self.workspaces.path_for(msg.platform, &msg.user_id) {
            Ok(w) => w,
            Err(e) => {
                tracing::warn!(platform = %msg.platform, error = %e, "cannot map the user to a workspace");
                self.error_reply(platform, msg).await;
                return "failed";
            }
        };
        if !self.budget.is_unlimited()
            && let Ok(key) = WorkspaceKey::new(msg.platform.as_str(), &msg.user_id)
            && self.budget.check(&self.store, &key).await.is_err()
        {
            // The budget check logged and counted the refusal; no agent is started.
            if let Err(e) = platform
                .send_message(&msg.channel_id, BUDGET_TEXT, Some(&msg.message_id))
                .await
            {
                tracing::warn!(platform = %msg.platform, error = %e, "could not send the budget reply");
            }
            return "over_budget";
        }
        let registered = match self.sessions.register(SessionContext {
            platform: msg.platform,
            channel_id: msg.channel_id.clone(),
            user_id: msg.user_id.clone(),
            username: msg.username.clone(),
            is_dm: msg.is_dm,
            guild_id: msg.guild_id.clone(),
            trigger_message_id: Some(msg.message_id.clone()),
            workspace: workspace.clone(),
        }) {
            Ok(r) => r,
            Err(e) => {
                tracing::error!(error = %e, "cannot register a session");
                self.error_reply(platform, msg).await;
                return "failed";
            }
        };
        let session_id = registered.session_id.as_str().to_owned();
        let span = tracing::info_span!("session", session_id = %session_id, platform = %msg.platform, channel = %msg.channel_id);

        let outcome = async {
            let dirs = match self.workspaces.prepare(msg.platform, &msg.user_id, &session_id).await {
                Ok(d) => d,
                Err(e) => {
                    tracing::error!(session_id = %session_id, error = %e, "cannot prepare the workspace");
                    return None;
                }
            };
            let system = match self.prompts.system_prompt().await {
                Ok(s) => s,
                Err(e) => {
                    tracing::error!(session_id = %session_id, error = %e, "cannot render the system prompt");
                    String::new()
                }
            };
            let parts = gather(
                platform,
                &self.store,
                msg,
                system,
                &session_id,
                &self.env.skills_dir,
                self.prompt.recent_limit,
                self.prompt.related_limit,
            )
            .await;
            let prompt = assemble(&parts, self.prompt.token_limit);
            // A sandboxed agent's only way to the daemon: its session's own socket.
            let socket = match &self.channels {
                Some(api) => match api.open_session_socket(&registered.session_id).await {
                    Ok(socket) => Some(socket),
                    Err(e) => {
                        tracing::error!(session_id = %session_id, error = %e, "cannot open the session's Skill API socket");
                        self.workspaces.cleanup(&dirs).await;
                        return None;
                    }
                },
                None => None,
            };
            // Its egress proxy, next to the socket in the same private folder.
            let egress = match (&self.egress, socket.as_ref()) {
                (Some(proxy), Some(open)) => match proxy.serve_session(open.dir()) {
                    Ok(egress) => Some(egress),
                    Err(e) => {
                        tracing::error!(session_id = %session_id, error = %e, "cannot open the session's egress proxy");
                        if let Some(socket) = socket {
                            socket.close().await;
                        }
                        self.workspaces.cleanup(&dirs).await;
                        return None;
                    }
                },
                _ => None,
            };
            let identity = SessionIdentity {
                session_id: session_id.clone(),
                token: registered.caller_token.expose_secret().to_owned(),
                api_url: self.env.api_url.clone(),
            };
            let gateway_route = format!("{}/llm/{session_id}", self.env.api_url);
            let env = build_agent_env(
                &EnvInputs {
                    agent: &self.env.agent,
                    identity: &identity,
                    workspace: &dirs.workspace,
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

            // Bridge the Skill API's termination request to the runner.
            let terminate = CancellationToken::new();
            let done = CancellationToken::new();
            let signal = registered.termination.clone();
            let (t, d) = (terminate.clone(), done.clone());
            let bridge = tokio::spawn(async move {
                tokio::select! {
                    reason = signal.requested() => {
                        tracing::warn!(reason = %reason, "Skill API asked to terminate the agent");
                        t.cancel();
                    }
                    _ = d.cancelled() => {}
                }
            });
            let typing = self.spawn_typing(msg, done.clone());

            let handle = registered.handle.clone();
            let outcome = self
                .runner
                .run(SessionRun {
                    session_id: session_id.clone(),
                    workspace: dirs.workspace.clone(),
                    dm: msg.is_dm,
                    api_socket_dir: socket.as_ref().map(|s| s.dir().to_path_buf()),
                    env,
                    prompt,
                    retry_prompt: self.retry_prompt.clone(),
                    terminate,
                    shutdown: self.stop.clone(),
                    probe: Arc::new(move || handle.responded()),
                })
                .await;
            done.cancel();
            let _ = bridge.await;
            if let Some(t) = typing {
                let _ = t.await;
            }
            if let Some(egress) = egress {
                egress.close().await;
            }
            if let Some(socket) = socket {
                socket.close().await;
            }
            self.workspaces.cleanup(&dirs).await;
            Some(outcome)
        }
        .instrument(span)
        .await;

        let responded = registered.handle.responded();
        self.sessions.unregister(&registered.session_id);
        let label = match &outcome {
            Some(o) => o.label(),
            None => "failed",
        };
        if !responded && !cancelled_by_the_user(msg, outcome.as_ref()) {
            self.error_reply(platform, msg).await;
        }
        tracing::info!(session_id = %session_id, outcome = label, responded, "interaction finished");
        label
    }

    fn spawn_typing(
        &self,
        msg: &IncomingMessage,
        done: CancellationToken,
    ) -> Option<tokio::task::JoinHandle<()>> {
        let platform = self.platforms.get(msg.platform)?;
        let channel = msg.channel_id.clone();
        Some(tokio::spawn(async move {
            loop {
                if let Err(e) = platform.start_typing(&channel).await {
                    tracing::debug!(error = %e, "typing indicator failed");
                }
                tokio::select! {
                    _ = done.cancelled() => break,
                    _ = tokio::time::sleep(TYPING_EVERY) => {}
                }
            }
        }))
    }

    async fn error_reply(&self, platform: &dyn PlatformAdapter, msg: &IncomingMessage) {
        if let Err(e) = platform
            .send_message(&msg.channel_id, ERROR_TEXT, Some(&msg.message_id))
            .await
        {
            tracing::warn!(platform = %msg.platform, error = %e, "could not send the error reply");
        }
    }
}

/// A turn the user stopped themselves: in the chat console, a cancelled session means Ctrl-C
/// (the console said so), so no error reply follows it. On Discord and Misskey a cancelled
/// session means the daemon stopped, and the user is told to try again.
fn cancelled_by_the_user(msg: &IncomingMessage, outcome: Option<&Outcome>) -> bool {
    msg.platform == PlatformKind::Console && outcome == Some(&Outcome::Cancelled)
}
