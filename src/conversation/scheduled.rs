//! A scheduled run's agent turn (`schedules:`): the bot speaks first in a place, as a message
//! there would make it answer — the place's persona, model, skills and budgets, the same
//! sandbox, socket and model gateway ([`Launcher`](super::launch::Launcher)) — but with no
//! message: the session's purpose is [`SessionPurpose::Scheduled`], its user is the bot
//! itself, and the prompt carries the schedule's task and the place's recent messages. The
//! agent posts through send-reply, which without a trigger sends a new message.
//!
//! Nobody waits for a scheduled post, so a run that cannot happen tells nobody in the place:
//! the operator gets the run's record, a log line and a metric (`schedules::Scheduler`).

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::context::{ScheduledPrompt, gather_scheduled};
use super::interaction::{Interactions, TurnProbe, model_failure};
use crate::agent::Outcome;
use crate::places::{Place, Spot};
use crate::platform::{ChannelId, ChatMessage, Origin, PlatformAdapter, UserId};
use crate::session::{SessionContext, SessionHandle, SessionPurpose};
use crate::store::WorkspaceKey;
use crate::text::estimate_tokens;

/// One run of a schedule, as the scheduler asks for it.
#[derive(Debug, Clone)]
pub struct ScheduledTask {
    /// The schedule's name.
    pub name: String,
    /// Its timetable, `cron (zone)` (named in the prompt).
    pub timetable: String,
    /// Where it posts.
    pub spot: Spot,
    /// The channel (or thread) posted in.
    pub channel: ChannelId,
    /// The task, the prompt file's text.
    pub task: String,
    /// The occurrence this run is for.
    pub due: DateTime<Utc>,
    /// Skip the run when nobody but bots wrote in the place after this instant (the previous
    /// run's start, with `quietIfNoActivity`).
    pub quiet_since: Option<DateTime<Utc>>,
}

/// How a run ended: its outcome (the metric's label), why in words, the tokens it used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduledEnd {
    /// `posted`, `silent` (the agent chose not to post), `skipped_quiet`, `over_budget`,
    /// `workspace_full`, `unavailable` (the platform or the place cannot be reached),
    /// `model_failed`, `failed`, `timeout`, `cancelled`.
    pub outcome: &'static str,
    /// Why, when it did not post.
    pub detail: Option<String>,
    /// Model tokens the run used.
    pub tokens: u64,
}

impl ScheduledEnd {
    fn without_agent(outcome: &'static str, detail: impl Into<String>) -> Self {
        Self {
            outcome,
            detail: Some(detail.into()),
            tokens: 0,
        }
    }
}

impl Interactions {
    /// Runs `task` to its end (or until `stop`).
    pub async fn scheduled(&self, task: &ScheduledTask, stop: &CancellationToken) -> ScheduledEnd {
        let Some(platform) = self.platforms.get(task.spot.platform) else {
            return ScheduledEnd::without_agent(
                "unavailable",
                format!("{} is not enabled", task.spot.platform),
            );
        };
        // A run caught up at start may come before the platform's connection is ready.
        let Some(bot) = connected(platform.as_ref(), stop).await else {
            return ScheduledEnd::without_agent(
                "unavailable",
                format!(
                    "not connected to {} within {} s",
                    task.spot.platform,
                    CONNECT_WAIT.as_secs()
                ),
            );
        };
        let recent = match platform
            .recent_messages(&task.channel, self.prompt.recent_limit.max(1))
            .await
        {
            Ok(recent) => recent,
            Err(e) => {
                return ScheduledEnd::without_agent(
                    "unavailable",
                    format!("cannot read {}: {e}", task.channel),
                );
            }
        };
        if let Some(since) = task.quiet_since
            && !active_since(&recent, since, &bot)
        {
            return ScheduledEnd::without_agent(
                "skipped_quiet",
                format!(
                    "nobody wrote there since {}",
                    since.format("%Y-%m-%d %H:%M UTC")
                ),
            );
        }
        let place = self.places.current().resolve(&task.spot);
        let workspace = match self
            .launcher
            .workspaces
            .path_for(task.spot.platform, bot.as_str())
        {
            Ok(w) => w,
            Err(e) => return ScheduledEnd::without_agent("failed", e.to_string()),
        };
        if let Ok(key) = WorkspaceKey::new(task.spot.platform.as_str(), bot.as_str())
            && let Err(refused) = self
                .budget
                .check_in(&self.store, &key, &place.grant())
                .await
        {
            return ScheduledEnd::without_agent("over_budget", refused.to_string());
        }
        if let Some(full) = self.launcher.workspaces.full(&workspace).await {
            return ScheduledEnd::without_agent(
                "workspace_full",
                format!("{} of {} bytes used", full.used, full.cap),
            );
        }
        let context = SessionContext {
            origin: Origin {
                platform: task.spot.platform,
                channel_id: task.channel.clone(),
                guild_id: task.spot.guild.clone(),
                user_id: bot,
                username: format!("schedule:{}", task.name),
                is_dm: false,
            },
            purpose: SessionPurpose::Scheduled,
            place: place.grant(),
            trigger_message_id: None,
            workspace,
        };
        let resources = match self.launcher.open(context).await {
            Ok(r) => r,
            Err(e) => return ScheduledEnd::without_agent("failed", e.to_string()),
        };
        let handle = resources.registered.handle.clone();
        let session_id = handle.id().clone();
        let span = tracing::info_span!("session", session_id = %session_id, platform = %task.spot.platform, channel = %task.channel, place = %place.name, schedule = %task.name);
        let outcome = async {
            let system = self.system_prompt(task.spot.platform, &place).await;
            let scheduled = ScheduledPrompt {
                name: task.name.clone(),
                timetable: task.timetable.clone(),
                due: task.due,
                task: task.task.clone(),
            };
            let parts = gather_scheduled(
                self.sources(platform.as_ref(), &place),
                &task.channel,
                recent,
                system,
                &session_id,
                scheduled,
            )
            .await;
            let prompt = super::context::assemble(&parts, self.prompt.token_limit);
            tracing::info!(
                prompt_tokens = estimate_tokens(&prompt),
                "scheduled run started"
            );
            self.one_turn(&resources, &place, &handle, prompt, stop)
                .await
        }
        .instrument(span)
        .await;
        let tokens = handle.state().model_tokens;
        let model = model_failure(&handle);
        resources.release().await;
        end_of(&outcome, handle.responded(), model.is_some(), tokens)
    }

    /// Starts the agent for `resources`, prompts it once and stops it; a termination the
    /// Skill API asks for ends the turn as it would a conversation's.
    async fn one_turn(
        &self,
        resources: &super::warm::SessionResources,
        place: &Arc<Place>,
        handle: &SessionHandle,
        prompt: String,
        stop: &CancellationToken,
    ) -> Outcome {
        let terminate = stop.child_token();
        let signal = resources.registered.termination.clone();
        let bridge = {
            let terminate = terminate.clone();
            tokio::spawn(async move {
                let reason = signal.requested().await;
                tracing::warn!(reason = %reason, "Skill API asked to terminate the agent");
                terminate.cancel();
            })
        };
        let spec = self.launcher.agent_spec(resources, place.model.clone());
        let probe = Arc::new(TurnProbe(handle.clone()));
        let outcome = self
            .launcher
            .one_turn(spec, &terminate, probe, || prompt)
            .await;
        bridge.abort();
        outcome
    }
}

/// How long a run waits for its platform's connection (the bot's own id).
const CONNECT_WAIT: Duration = Duration::from_secs(120);

/// The bot's id on `platform` once it is connected; `None` after [`CONNECT_WAIT`] or `stop`.
async fn connected(platform: &dyn PlatformAdapter, stop: &CancellationToken) -> Option<UserId> {
    let deadline = tokio::time::Instant::now() + CONNECT_WAIT;
    loop {
        if let Some(bot) = platform.bot_user_id() {
            return Some(bot);
        }
        if tokio::time::Instant::now() >= deadline {
            return None;
        }
        tokio::select! {
            _ = stop.cancelled() => return None,
            _ = tokio::time::sleep(Duration::from_millis(250)) => {}
        }
    }
}

/// Whether anyone but a bot wrote in `recent` after `since`.
fn active_since(recent: &[ChatMessage], since: DateTime<Utc>, bot: &UserId) -> bool {
    recent
        .iter()
        .any(|m| m.timestamp > since && !m.is_bot && &m.user_id != bot)
}

/// The run's end from the agent's outcome: posted when send-reply delivered, else why not.
fn end_of(outcome: &Outcome, posted: bool, model_failed: bool, tokens: u64) -> ScheduledEnd {
    let (label, detail) = if posted {
        ("posted", None)
    } else if model_failed {
        (
            super::interaction::MODEL_FAILED,
            Some("every model request of the run failed".to_owned()),
        )
    } else {
        match outcome {
            Outcome::Responded { .. } | Outcome::NoResponse { .. } => {
                ("silent", Some("the agent posted nothing".to_owned()))
            }
            other => (other.label(), Some(format!("{other:?}"))),
        }
    };
    ScheduledEnd {
        outcome: label,
        detail,
        tokens,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(user: &str, is_bot: bool, at: &str) -> ChatMessage {
        ChatMessage {
            message_id: format!("m-{user}-{at}").into(),
            user_id: user.into(),
            username: user.into(),
            content: "hi".into(),
            timestamp: DateTime::parse_from_rfc3339(at).unwrap().to_utc(),
            is_bot,
            attachments: Vec::new(),
        }
    }

    #[test]
    fn only_a_person_writing_after_the_last_run_counts_as_activity() {
        let since = DateTime::parse_from_rfc3339("2026-01-01T08:00:00Z")
            .unwrap()
            .to_utc();
        let bot = UserId::from("bot");
        let before = message("alice", false, "2026-01-01T07:59:00Z");
        let own = message("bot", false, "2026-01-01T08:01:00Z");
        let other_bot = message("webhook", true, "2026-01-01T08:02:00Z");
        let after = message("bob", false, "2026-01-01T08:03:00Z");
        assert!(!active_since(&[], since, &bot));
        assert!(!active_since(
            &[before.clone(), own.clone(), other_bot.clone()],
            since,
            &bot
        ));
        assert!(active_since(&[before, own, other_bot, after], since, &bot));
    }
}
