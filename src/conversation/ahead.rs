//! Agents started ahead of a message, so a conversation's first reply does not wait for a
//! cold start (`docs/PERFORMANCE.md`, `tests/prestart.rs`):
//!
//! * **A typing user** ([`PlatformEvent::Typing`](crate::platform::PlatformEvent::Typing)):
//!   when whatever they send will be answered — the router asks the policy first
//!   ([`Policy::expects_message`](super::policy::Policy::expects_message)) — and their place
//!   keeps agents warm, their agent is started now, resumed on the conversation's kept session
//!   when there is one, and waits in the warm pool unprompted.
//! * **A retired agent's successor**: an agent retired after `maxTurns` turns or
//!   `maxContextTokens` of prompts is followed at once by a fresh one for the same
//!   conversation.
//!
//! Either way the agent gets exactly what a cold start would (the same launcher, sandbox,
//! state folder and checks: budget, full workspace), its session refuses every Skill API and
//! model call until its first turn begins, and it counts against the pool's cap without ever
//! pushing out an agent that served a conversation ([`WarmPool::begin_ahead`]); a typing user
//! whose conversation is being answered gets none (its agent comes back). A message that
//! arrives while it starts waits for it ([`WarmPool::take_waiting`]); its first prompt is the
//! whole one (`interaction.rs`). One typing user who never sends costs one idle agent until
//! `idleMs`; `air_friends_prestart_total{outcome}` counts what became of each.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::interaction::Interactions;
use super::warm::{AheadOf, ConversationKey, WarmAgent, WarmPool};
use crate::places::{Place, Spot};
use crate::platform::{IncomingMessage, Origin, Typing};
use crate::session::{SessionContext, SessionPurpose};
use crate::store::WorkspaceKey;

/// Where a message is expected, and why (the log's `why`).
struct Expected {
    origin: Origin,
    key: ConversationKey,
    place: Arc<Place>,
    why: AheadOf,
}

impl Interactions {
    /// A typing user (whose message the router expects to answer): their agent is started
    /// ahead, where the place keeps agents warm.
    pub(super) async fn start_for_typing(&self, typing: Typing) {
        let Some(pool) = &self.warm else {
            return;
        };
        let place = self
            .places
            .current()
            .resolve(&Spot::at(&typing.origin, &typing.location));
        if !place.warm {
            return;
        }
        let key = ConversationKey::of_typing(&typing);
        let expected = Expected {
            origin: typing.origin,
            key,
            place,
            why: AheadOf::Typing,
        };
        self.start_ahead(pool, expected).await;
    }

    /// After `msg`'s turn: when its agent was just retired for its age (`retired`:
    /// `max_turns` or `context`), a successor is started for the conversation's next message,
    /// on the pool's tracked tasks.
    pub(super) fn succeed(
        &self,
        msg: &IncomingMessage,
        place: &Arc<Place>,
        retired: Option<&'static str>,
    ) {
        let (Some(pool), Some("max_turns" | "context")) = (&self.warm, retired) else {
            return;
        };
        let expected = Expected {
            origin: msg.origin(),
            key: ConversationKey::of(msg),
            place: place.clone(),
            why: AheadOf::Successor,
        };
        let (this, pool) = (self.clone(), pool.clone());
        pool.clone()
            .spawn(async move { this.start_ahead(&pool, expected).await });
    }

    /// Starts the agent of `expected`'s conversation and keeps it in `pool` unprompted —
    /// unless the pool has no room or the conversation has an agent, the user is over their
    /// budget or their workspace is full (then nothing is started: the message, if it comes,
    /// gets its answer in words as a cold start would).
    async fn start_ahead(&self, pool: &WarmPool, expected: Expected) {
        let Expected {
            origin,
            key,
            place,
            why,
        } = expected;
        let Some(ahead) = pool.begin_ahead(&key, why) else {
            return;
        };
        let why = why.as_str();
        let Ok(workspace) = self
            .launcher
            .workspaces
            .path_for(origin.platform, origin.user_id.as_str())
        else {
            return;
        };
        if let Ok(owner) = WorkspaceKey::new(origin.platform.as_str(), origin.user_id.as_str())
            && self
                .budget
                .would_refuse(&self.store, &owner, &place.grant())
                .await
        {
            return;
        }
        if self.launcher.workspaces.full(&workspace).await.is_some() {
            return;
        }
        let system = self.system_prompt(origin.platform, &place).await;
        let fingerprint = self.fingerprint(&system, &place).await;
        let context = SessionContext {
            origin,
            purpose: SessionPurpose::Conversation,
            place: place.grant(),
            trigger_message_id: None,
            workspace,
        };
        let resources = match self.launcher.open(context).await {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(platform = %key.platform(), why, error = %e, "could not start an agent ahead of the message");
                pool.metrics().prestarted("failed");
                return;
            }
        };
        // Nothing of the session is callable until its first turn begins.
        resources.registered.handle.end_turn();
        let session_id = resources.registered.session_id.clone();
        let spec = self.launcher.agent_spec(&resources, place.model.clone());
        let never = CancellationToken::new();
        let (started, prepared) = self.start_on_state(spec, &key, fingerprint, &never).await;
        match started {
            Ok(live) => {
                let resumed = prepared.and_then(|p| p.resume).filter(|_| live.resumed());
                tracing::info!(session_id = %session_id, platform = %key.platform(), place = %place.name, why, resumed = resumed.is_some(), "agent started ahead of the message");
                pool.put_ahead(
                    ahead,
                    WarmAgent::ahead(live, resources, fingerprint, resumed),
                );
            }
            Err(outcome) => {
                tracing::warn!(session_id = %session_id, platform = %key.platform(), why, detail = ?outcome, "the agent started ahead of the message did not start");
                pool.metrics().prestarted("failed");
                resources.release().await;
            }
        }
    }
}
