//! What a session's current turn has done that the layers around the handlers read
//! ([`SessionState`]): calls counted toward the skills' doom-loop limits, memory changes (the
//! maintenance run's record) and metered tokens. The Skill API, the model gateway and the
//! handlers update it through [`SessionHandle::with_state`]; the runner reads it when the turn
//! ends. Each handler keeps its own per-turn state in a slot ([`TurnSlots`]). A new turn
//! starts from the default.
//!
//! [`SessionHandle::with_state`]: super::SessionHandle::with_state
//! [`TurnSlots`]: super::TurnSlots

use std::collections::BTreeMap;

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

/// Mutable per-turn counters the session layer and the runners read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SessionState {
    /// Every call of each skill with a doom-loop limit, successful or not, refused ones
    /// included (kept by [`SessionState::record_attempt`]).
    attempts: BTreeMap<String, u32>,
    /// Memories saved by memory-save (in a dry run: that would have been saved).
    pub memories_saved: u32,
    /// Memories disabled by memory-save `--supersedes` or memory-patch (in a dry run: that
    /// would have been).
    pub memories_disabled: u32,
    /// Model tokens (input + output) the model gateway metered for this session's turn.
    pub model_tokens: u64,
}

impl SessionState {
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
}

#[cfg(test)]
mod tests {
    use super::*;

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
