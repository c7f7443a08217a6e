//! What the `places:` rules ask of the bot in one server channel, as a platform adapter sees it
//! ([`PlaceDuties`]): whether it answers there, which skills it may use, how threads are
//! answered. An adapter checks with it that the bot holds what that takes (Discord:
//! `discord::permissions`, at each GUILD_CREATE). The rules' module implements it
//! (`places`), so adapters never depend on the rules themselves.

use std::collections::BTreeSet;
use std::sync::Arc;

use crate::config::ThreadsPolicy;

/// A server channel, as the rules match it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChannelAt {
    /// The server (Discord guild).
    pub guild: String,
    /// The category the channel sits in.
    pub category: Option<String>,
    /// The channel.
    pub channel: String,
}

/// What the bot is asked to do in one channel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Duties {
    /// The place's name (a rule's, or `default`).
    pub place: Arc<str>,
    /// Whether any message there is answered (`reply: never` answers none).
    pub answers: bool,
    /// The skills the agent may use there; `None`: every enabled skill.
    pub skills: Option<Arc<BTreeSet<String>>>,
    /// How threads of the channel are answered.
    pub threads: ThreadsPolicy,
}

impl Duties {
    /// Everything the configuration enables, everywhere (no `places:` rules).
    pub fn everything() -> Self {
        Self {
            place: Arc::from(crate::config::DEFAULT_PLACE),
            answers: true,
            skills: None,
            threads: ThreadsPolicy::Follow,
        }
    }

    /// Whether the agent may use `skill` there.
    pub fn allows(&self, skill: &str) -> bool {
        self.skills.as_ref().is_none_or(|s| s.contains(skill))
    }
}

/// The rules, asked per channel.
pub trait PlaceDuties: Send + Sync + std::fmt::Debug + 'static {
    /// What the bot is asked to do in `at`.
    fn duties(&self, at: &ChannelAt) -> Duties;
}

/// No rules: [`Duties::everything`] everywhere.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoRules;

impl PlaceDuties for NoRules {
    fn duties(&self, _at: &ChannelAt) -> Duties {
        Duties::everything()
    }
}
