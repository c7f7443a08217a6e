//! The inbox's rules: every message that passed the trigger rules is recorded (the store's
//! `inbox` table) in the step that hands it to the router, and settles when its turn ends.
//!
//! * **At most once.** The record is the duplicate guard across restarts: a message id already
//!   recorded (answered, failed, skipped or still queued) is a duplicate. The router's
//!   in-memory guard stays in front as a cache.
//! * **Nothing lost in a restart.** A message still `queued` at start was received while the
//!   daemon stopped (it arrived while draining) or was cut by a crash. It is handed to the router
//!   again once, when younger than `catchUp.maxAgeMinutes`; an older one is `skipped: too_old`,
//!   and one already tried after a restart is `failed: interrupted_again` (it may be what brings
//!   the daemon down).
//! * **Answered when answered.** A message is marked `answered` as soon as its user received
//!   something, while the turn goes on ([`Inbox::answered_hook`]); a crash later in the turn
//!   does not answer it again.
//! * **Where each ends.** `answered` (replied or reacted), `failed` with the turn's outcome
//!   (the user was told in words), `skipped` with why (rate limited, busy, over budget, ...).
//! * **Forgotten in time.** Records older than `catchUp.retentionDays` are deleted, with the
//!   text they keep.
//!
//! The chat console's messages are not recorded: its ids start again with every run, and its
//! user is gone with the process.
//!
//! The store failing never stops a message: it is answered (and may then be answered again
//! after a restart), with one error record per failure.

use std::time::Duration;

use chrono::Utc;

use super::metrics::ConversationMetrics;
use crate::platform::{IncomingMessage, PlatformKind};
use crate::store::{InboxRecord, InboxState, Store};

/// How the inbox is kept (`catchUp`).
#[derive(Debug, Clone, Copy)]
pub struct InboxSettings {
    /// A message left queued at a stop is answered at the next start when younger than this.
    pub max_age: Duration,
    /// Records older than this are deleted.
    pub retention: Duration,
}

/// The inbox (cheap to clone).
#[derive(Clone, Debug)]
pub struct Inbox {
    store: Store,
    settings: InboxSettings,
    metrics: ConversationMetrics,
}

/// Whether `msg` is kept in the inbox (not the console's).
fn kept(msg: &IncomingMessage) -> bool {
    msg.platform != PlatformKind::Console
}

/// Where a turn's outcome (`turns_total`'s label) leaves its message.
pub fn settled(outcome: &str) -> (InboxState, Option<&str>) {
    match outcome {
        "replied" | "retried" => (InboxState::Answered, None),
        "over_budget" | "workspace_full" | "cancelled" | "erasing" => {
            (InboxState::Skipped, Some(outcome))
        }
        other => (InboxState::Failed, Some(other)),
    }
}

impl Inbox {
    /// The inbox of `store`.
    pub fn new(store: Store, settings: InboxSettings, metrics: ConversationMetrics) -> Self {
        Self {
            store,
            settings,
            metrics,
        }
    }

    /// Records `msg` as queued. False when its id was recorded before: a duplicate.
    pub async fn record(&self, msg: &IncomingMessage) -> bool {
        if !kept(msg) {
            return true;
        }
        let payload = match serde_json::to_string(msg) {
            Ok(payload) => payload,
            Err(e) => {
                tracing::error!(message_id = %msg.message_id, error = %e, "cannot record the message in the inbox; answering it anyway");
                return true;
            }
        };
        let record = InboxRecord {
            platform: msg.platform.as_str().to_owned(),
            message_id: msg.message_id.as_str().to_owned(),
            channel_id: msg.channel_id.as_str().to_owned(),
            user_id: msg.user_id.as_str().to_owned(),
            received_at: Utc::now(),
            payload,
        };
        match self.store.inbox_record(record).await {
            Ok(true) => {
                self.metrics.inbox(InboxState::Queued.as_str(), "");
                true
            }
            Ok(false) => false,
            Err(e) => {
                tracing::error!(message_id = %msg.message_id, error = %e, "cannot record the message in the inbox; answering it anyway");
                true
            }
        }
    }

    /// `msg`'s turn ended with `outcome` (`turns_total`'s label).
    pub async fn finished(&self, msg: &IncomingMessage, outcome: &str) {
        let (state, reason) = settled(outcome);
        self.settle(msg, state, reason).await;
    }

    /// What marks `msg` answered as soon as its user has received something, while its turn
    /// goes on (for [`SessionHandle::on_first_answer`](crate::session::SessionHandle::on_first_answer)):
    /// a crash later in the turn then does not answer it again after the restart. The turn's
    /// end still settles it (and counts it). `None` for a message not kept.
    pub fn answered_hook(&self, msg: &IncomingMessage) -> Option<impl FnOnce() + Send + 'static> {
        if !kept(msg) {
            return None;
        }
        let store = self.store.clone();
        let (platform, message_id) = (msg.platform, msg.message_id.clone());
        Some(move || {
            let Ok(runtime) = tokio::runtime::Handle::try_current() else {
                return;
            };
            runtime.spawn(async move {
                if let Err(e) = store
                    .inbox_mark_answered(platform.as_str(), message_id.as_str())
                    .await
                {
                    tracing::error!(platform = %platform, message_id = %message_id, error = %e, "cannot record in the inbox that the message was answered");
                }
            });
        })
    }

    /// `msg` is not answered, for `reason` (`rate_limited`, `busy`).
    pub async fn skipped(&self, msg: &IncomingMessage, reason: &str) {
        self.settle(msg, InboxState::Skipped, Some(reason)).await;
    }

    async fn settle(&self, msg: &IncomingMessage, state: InboxState, reason: Option<&str>) {
        if !kept(msg) {
            return;
        }
        self.settle_id(
            msg.platform.as_str(),
            msg.message_id.as_str(),
            state,
            reason,
        )
        .await;
    }

    async fn settle_id(
        &self,
        platform: &str,
        message_id: &str,
        state: InboxState,
        reason: Option<&str>,
    ) {
        self.metrics.inbox(state.as_str(), reason.unwrap_or(""));
        if let Err(e) = self
            .store
            .inbox_settle(platform, message_id, state, reason)
            .await
        {
            tracing::error!(platform, message_id, state = state.as_str(), error = %e, "cannot record where the message stands in the inbox");
        }
    }

    /// The messages to answer after a start: those still queued, younger than the age limit,
    /// not tried after a restart before (each counted as tried now), oldest first. The others
    /// are settled (`too_old`, `interrupted_again`, `unreadable`) with one record each.
    pub async fn resumable(&self) -> Vec<IncomingMessage> {
        let queued = match self.store.inbox_queued().await {
            Ok(queued) => queued,
            Err(e) => {
                tracing::error!(error = %e, "cannot read the inbox; messages left unanswered at the last stop are not answered");
                return Vec::new();
            }
        };
        let now = Utc::now();
        let mut resume = Vec::new();
        for queued in queued {
            let (platform, id) = (queued.platform.as_str(), queued.message_id.as_str());
            let age = (now - queued.received_at).to_std().unwrap_or_default();
            let (state, reason) = if queued.attempts > 0 {
                (InboxState::Failed, "interrupted_again")
            } else if age > self.settings.max_age {
                (InboxState::Skipped, "too_old")
            } else {
                match serde_json::from_str::<IncomingMessage>(&queued.payload) {
                    Ok(msg) => {
                        if let Err(e) = self.store.inbox_count_attempt(platform, id).await {
                            tracing::error!(platform, message_id = id, error = %e, "cannot count the attempt in the inbox; not answering the message again");
                            continue;
                        }
                        self.metrics.inbox(InboxState::Queued.as_str(), "resumed");
                        resume.push(msg);
                        continue;
                    }
                    Err(_) => (InboxState::Failed, "unreadable"),
                }
            };
            tracing::warn!(
                platform,
                message_id = id,
                age_s = age.as_secs(),
                state = state.as_str(),
                reason,
                "a message left unanswered at the last stop is not answered"
            );
            self.settle_id(platform, id, state, Some(reason)).await;
        }
        if !resume.is_empty() {
            tracing::info!(
                count = resume.len(),
                "answering the messages left unanswered at the last stop"
            );
        }
        resume
    }

    /// Deletes the records older than the retention window.
    pub async fn prune(&self) {
        let Ok(retention) = chrono::Duration::from_std(self.settings.retention) else {
            return;
        };
        match self.store.inbox_prune(Utc::now() - retention).await {
            Ok(0) => {}
            Ok(n) => tracing::debug!(deleted = n, "inbox records past their retention deleted"),
            Err(e) => tracing::warn!(error = %e, "cannot delete old inbox records"),
        }
    }

    /// Prunes now and every `every` until `stop`.
    pub async fn run_pruning(self, every: Duration, stop: tokio_util::sync::CancellationToken) {
        loop {
            self.prune().await;
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(every) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_settle_as_answered_failed_or_skipped() {
        assert_eq!(settled("replied"), (InboxState::Answered, None));
        assert_eq!(settled("retried"), (InboxState::Answered, None));
        assert_eq!(
            settled("model_failed"),
            (InboxState::Failed, Some("model_failed"))
        );
        assert_eq!(
            settled("no_response"),
            (InboxState::Failed, Some("no_response"))
        );
        assert_eq!(
            settled("over_budget"),
            (InboxState::Skipped, Some("over_budget"))
        );
    }
}
