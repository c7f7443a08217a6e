//! The live ACP connection of one session: serving the agent's notifications, permission
//! and fs requests while we wait on it, and cancelling a turn.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::agent::activity::{self, ActivityReporter};
use crate::agent::fs;
use crate::agent::gate::{self, PermissionGate};
use crate::agent::rpc::{self, Incoming, RpcClient, RpcError};

/// How long a cancelled turn gets to answer before the process is stopped.
const CANCEL_GRACE: Duration = Duration::from_secs(2);

/// The live connection of one session.
pub(super) struct Connection {
    pub(super) client: RpcClient,
    pub(super) incoming: mpsc::Receiver<Incoming>,
    pub(super) gate: PermissionGate,
    /// Our session id.
    pub(super) session_id: String,
    /// The canonical workspace (the fs/* boundary).
    pub(super) workspace: PathBuf,
    /// A direct-message session (`private/` visible).
    pub(super) dm: bool,
    /// The session's staging folder (see [`super::AgentRun::staging_dir`]).
    pub(super) staging: Option<PathBuf>,
    pub(super) activity: ActivityReporter,
    /// fs/* requests being served off the turn loop (see [`Connection::spawn_fs`]); dropping
    /// the connection at the session's end aborts those still waiting.
    pub(super) fs_tasks: JoinSet<()>,
}

impl Connection {
    /// A request whose wait also serves incoming agent messages (agents may ask things while
    /// we wait for them).
    pub(super) async fn request_serving(
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
    pub(super) async fn serve(&mut self, msg: Incoming) {
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
    pub(super) async fn cancel<F>(&mut self, session: &str, mut prompt: std::pin::Pin<&mut F>)
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
pub(super) fn works_on_the_turn(msg: &Incoming) -> bool {
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
