//! What a session's current turn has done so far ([`SessionState`]): calls counted toward the
//! skills' doom-loop limits, what was sent and where, the reaction, memory changes and metered
//! tokens. Handlers update it through [`SessionHandle::with_state`] and enforce their own quotas
//! on it; the agent runner reads it when the turn ends. A new turn starts from the default.
//!
//! [`SessionHandle::with_state`]: super::SessionHandle::with_state

use std::collections::{BTreeMap, HashSet};

use super::SessionContext;

/// The reaction this session currently has on the trigger message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reaction {
    /// Unicode emoji or custom emoji reference as sent to the platform.
    pub emoji: String,
    /// The message the reaction is on.
    pub message_id: String,
}

/// One counted call of a skill with a doom-loop limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Attempt {
    /// 1 for the turn's first call of that skill, 2 for the second, ...
    pub number: u32,
    /// The call that also stops the agent (the skill handler's limit).
    pub stops_agent_at: u32,
}

impl Attempt {
    /// Whether this attempt reaches the skill's limit.
    pub fn terminates(self) -> bool {
        self.number >= self.stops_agent_at
    }
}

/// Mutable per-turn counters and anchors.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SessionState {
    /// Every call of each skill with a doom-loop limit, successful or not, refused ones
    /// included (kept by [`SessionState::record_attempt`]).
    attempts: BTreeMap<String, u32>,
    /// Successful `send-reply` calls (the handler's quota).
    pub reply_successes: u32,
    /// Successful `send-file` calls (the handler's quota).
    pub file_successes: u32,
    /// The current reaction; a second `react-message` replaces it.
    pub reaction: Option<Reaction>,
    /// Whether `set-reminder` already succeeded (one per session).
    pub reminder_set: bool,
    /// Last message sent by `send-reply`/`edit-reply`.
    pub last_sent_message_id: Option<String>,
    /// Last message delivered by `send-file`.
    pub last_file_message_id: Option<String>,
    /// The anchor the reply was threaded to when created; keeps `edit-reply` on that parent.
    pub last_reply_anchor_message_id: Option<String>,
    /// Every message id this session sent; `edit-reply` may only edit these.
    pub sent_message_ids: HashSet<String>,
    /// Memories saved by memory-save (in a dry run: that would have been saved).
    pub memories_saved: u32,
    /// Memories disabled by memory-save `--supersedes` or memory-patch (in a dry run: that
    /// would have been).
    pub memories_disabled: u32,
    /// Model tokens (input + output) the model gateway metered for this session's turn.
    pub model_tokens: u64,
}

impl SessionState {
    /// Whether the user has received something: a reply, a reaction or a file.
    pub fn responded(&self) -> bool {
        self.reply_successes > 0 || self.reaction.is_some() || self.file_successes > 0
    }

    /// Where a new reply threads to: `lastFileMessageId ?? triggerMessageId`.
    pub fn reply_anchor<'a>(&'a self, context: &'a SessionContext) -> Option<&'a str> {
        self.last_file_message_id
            .as_deref()
            .or(context.trigger_message_id.as_deref())
    }

    /// Counts one call of `skill` toward its doom-loop limit and returns which call it is.
    pub fn record_attempt(&mut self, skill: &str) -> u32 {
        let counter = match self.attempts.get_mut(skill) {
            Some(counter) => counter,
            None => self.attempts.entry(skill.to_owned()).or_default(),
        };
        *counter = counter.saturating_add(1);
        *counter
    }

    /// How many calls of `skill` this turn has counted.
    pub fn attempts(&self, skill: &str) -> u32 {
        self.attempts.get(skill).copied().unwrap_or(0)
    }

    /// Counts memories this session saved and disabled (in a maintenance dry run: would have).
    pub fn count_memory_changes(&mut self, saved: usize, disabled: usize) {
        let n = |v: usize| u32::try_from(v).unwrap_or(u32::MAX);
        self.memories_saved = self.memories_saved.saturating_add(n(saved));
        self.memories_disabled = self.memories_disabled.saturating_add(n(disabled));
    }

    /// Records a message this session sent (so `edit-reply` may edit it later).
    pub fn record_sent_message(&mut self, message_id: impl Into<String>) {
        self.sent_message_ids.insert(message_id.into());
    }

    /// Whether this session sent the message.
    pub fn sent_message(&self, message_id: &str) -> bool {
        self.sent_message_ids.contains(message_id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::platform::Origin;
    use std::path::PathBuf;

    #[test]
    fn reply_anchor_prefers_the_file_message() {
        let ctx = SessionContext {
            origin: Origin {
                platform: crate::platform::PlatformKind::Discord,
                channel_id: "c1".into(),
                guild_id: None,
                user_id: "u1".into(),
                username: "alice".into(),
                is_dm: false,
            },
            purpose: Default::default(),
            trigger_message_id: Some("m1".into()),
            workspace: PathBuf::from("/tmp/ws"),
        };
        let mut st = SessionState::default();
        assert_eq!(st.reply_anchor(&ctx), Some("m1"));
        st.last_file_message_id = Some("f1".into());
        assert_eq!(st.reply_anchor(&ctx), Some("f1"));
    }

    #[test]
    fn attempts_are_counted_per_skill() {
        let mut st = SessionState::default();
        assert_eq!(st.attempts("send-reply"), 0);
        assert_eq!(st.record_attempt("send-reply"), 1);
        assert_eq!(st.record_attempt("send-reply"), 2);
        assert_eq!(st.record_attempt("send-file"), 1);
        assert_eq!(st.attempts("send-reply"), 2);
        assert_eq!(st.attempts("edit-reply"), 0);
    }
}
