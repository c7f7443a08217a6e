//! A running agent between turns or in one: the prompt turn with its timeouts, the retry
//! prompt when the user got no answer, and stopping the process.

use std::time::Duration;

use serde_json::{Value, json};
use tokio::time::Instant;

use super::connection::{Connection, works_on_the_turn};
use super::{Outcome, PromptImage, RunnerSettings, TurnSpec};
use crate::agent::activity::Activity;
use crate::agent::process::AgentProcess;
use crate::agent::rpc::RpcError;

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

/// A running agent connected to its ACP session, between turns or in one.
pub struct LiveAgent {
    pub(super) process: AgentProcess,
    pub(super) conn: Connection,
    pub(super) acp_session: String,
    /// `promptCapabilities.image` of the agent's `initialize` answer.
    pub(super) accepts_images: bool,
    pub(super) settings: RunnerSettings,
    /// Processes between the spawned program and the agent (3 in the sandbox, 0 without).
    pub(super) wrapper_depth: usize,
    /// The console's status: a turn is open from `start` (or the prompt) to its end.
    pub(super) turn_open: bool,
    pub(super) turns: u32,
    /// The ACP session is an earlier one, resumed (it remembers the earlier turns).
    pub(super) resumed: bool,
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
    /// Whether the agent resumed an earlier session ([`AgentSpec::resume`](super::AgentSpec::resume))
    /// rather than starting a new one.
    pub fn resumed(&self) -> bool {
        self.resumed
    }

    /// The agent's own session id (what a later agent resumes).
    pub fn acp_session(&self) -> &str {
        &self.acp_session
    }

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

    /// Closes a turn of an agent that is kept: every process it started (or orphaned) that
    /// still runs is ended, so nothing of this turn acts after it. Returns how many were.
    pub async fn end_turn(&self) -> usize {
        let Some(pid) = self.process.pid() else {
            return 0;
        };
        let depth = self.wrapper_depth;
        let label = self.conn.session_id.clone();
        tokio::task::spawn_blocking(move || {
            crate::agent::process::end_leftovers_of(pid, depth, &label)
        })
        .await
        .unwrap_or(0)
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
                        (Some(retry), false, "end_turn") if !run.probe.cannot_answer() => {
                            tracing::info!(session_id = %self.conn.session_id, "no reply yet; sending the retry prompt");
                            retried = true;
                            prompt = retry.clone();
                        }
                        _ => return Outcome::NoResponse { retried },
                    }
                }
                TurnEnd::Error(e) => {
                    if self.process.memory_kills() > 0 {
                        tracing::warn!(session_id = %self.conn.session_id, error = %e, cause = "memory_limit", "the agent was killed at its sandbox's memory limit");
                        return Outcome::MemoryLimit;
                    }
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
        // Marks the end of start-up for the first prompt (`benches/agent_startup.rs` times it,
        // matching the session module's target).
        tracing::debug!(target: super::LOG_TARGET, session_id = %conn.session_id, bytes = text.len(), images = images.len(), "prompt sent");
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
