//! Who and where a session answers ([`SessionContext`]), and what it is for
//! ([`SessionPurpose`]): both fixed at registration, so every call of the session is judged by
//! the same facts.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;

use crate::platform::{MessageId, Origin};

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionContext {
    /// Who the session answers and where: the user, their platform and channel, whether it is
    /// a DM (private memories, reminders). Selects the adapter the handlers act through.
    pub origin: Origin,
    /// The message that started the session; `None` for sessions without a trigger.
    pub trigger_message_id: Option<MessageId>,
    /// The user's workspace directory (`{repo}/{workspacesDir}/{platform}/{userId}`).
    pub workspace: PathBuf,
    /// What the session is for: answering a user, or maintaining their memories.
    pub purpose: SessionPurpose,
    /// What the place it answers in allows (`places:`).
    pub place: PlaceGrant,
}

impl SessionContext {
    /// Whether the session may call `skill`: its purpose and its place both allow it.
    pub fn allows_skill(&self, skill: &str) -> bool {
        self.purpose.allows_skill(skill) && self.place.allows_skill(skill)
    }
}

/// What the place a session answers in allows it (`places:` in the configuration, resolved by
/// `crate::places`): its skills, and its own daily token limit. The default allows every
/// enabled skill.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlaceGrant {
    /// The rule that chose the place's settings (`default` when none did): the label in logs,
    /// metrics and the usage table.
    pub name: Arc<str>,
    /// The skills the place allows; `None`: every skill the configuration enables.
    pub skills: Option<Arc<BTreeSet<String>>>,
    /// Model tokens a user may use per UTC day in this place (`places[].tokensPerUserPerDay`).
    pub tokens_per_user_per_day: Option<u64>,
    /// The IANA time zone of the people here (`places[].timeZone`, else `reminders.timeZone`).
    pub time_zone: Arc<str>,
}

pub use crate::config::DEFAULT_PLACE;

impl Default for PlaceGrant {
    fn default() -> Self {
        Self {
            name: Arc::from(DEFAULT_PLACE),
            skills: None,
            tokens_per_user_per_day: None,
            time_zone: Arc::from("UTC"),
        }
    }
}

impl PlaceGrant {
    /// Whether the place lets the agent call `skill`.
    pub fn allows_skill(&self, skill: &str) -> bool {
        self.skills.as_ref().is_none_or(|s| s.contains(skill))
    }
}

/// The skills a maintenance session may call: reading and writing memories, nothing that
/// reaches a user or a platform.
pub const MAINTENANCE_SKILLS: [&str; 4] = [
    "memory-search",
    "memory-save",
    "memory-patch",
    "memory-stats",
];

/// The skills a scheduled run may not call: a run belongs to no user, so it keeps nothing
/// (memories or reminders) that no user could see, export or erase; and it has no user to
/// remind or export for.
pub const SCHEDULED_REFUSED: [&str; 6] = [
    "memory-save",
    "memory-patch",
    "memory-export",
    "set-reminder",
    "list-reminders",
    "cancel-reminder",
];

/// What a session is for, fixed at registration.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum SessionPurpose {
    /// Answering a user's message: every enabled skill.
    #[default]
    Conversation,
    /// The memory maintenance job: no message, no user, only [`MAINTENANCE_SKILLS`], and the
    /// memory handlers keep to the [`MaintenancePolicy`].
    Maintenance(MaintenancePolicy),
    /// An operator schedule's run (`schedules:`): no message; it posts in a public place as
    /// the bot, with the place's skills but none in [`SCHEDULED_REFUSED`].
    Scheduled,
}

impl SessionPurpose {
    /// Whether a session of this purpose may call `skill` (the Skill API answers 403 before
    /// anything else runs when it may not).
    pub fn allows_skill(&self, skill: &str) -> bool {
        match self {
            Self::Conversation => true,
            Self::Maintenance(_) => MAINTENANCE_SKILLS.contains(&skill),
            Self::Scheduled => !SCHEDULED_REFUSED.contains(&skill),
        }
    }

    /// Why a session of this purpose may not call `skill` (the Skill API's 403 text).
    pub fn refusal(&self, skill: &str) -> String {
        match self {
            Self::Maintenance(_) => format!(
                "{skill} is not available in a maintenance session: only {} are",
                MAINTENANCE_SKILLS.join(", ")
            ),
            Self::Scheduled => format!(
                "{skill} is not available in a scheduled run: a run belongs to no user, so it \
                 keeps no memories or reminders and exports nothing"
            ),
            Self::Conversation => format!("{skill} is not available in this session"),
        }
    }

    /// The maintenance rules, for a maintenance session.
    pub fn maintenance(&self) -> Option<&MaintenancePolicy> {
        match self {
            Self::Conversation | Self::Scheduled => None,
            Self::Maintenance(policy) => Some(policy),
        }
    }

    /// The label in logs and errors.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Conversation => "conversation",
            Self::Maintenance(_) => "maintenance",
            Self::Scheduled => "scheduled",
        }
    }
}

/// What a maintenance session may change, enforced by the memory handlers whatever the agent
/// asks: public and private memories are consolidated in separate runs, so a run saves only at
/// its own visibility and touches only memories of that visibility; memories created at or
/// after `created_before` are left alone; visibility never changes; in a dry run nothing is
/// written and the handlers answer (and log) what would have been done.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MaintenancePolicy {
    /// The visibility of the memories this run consolidates (and of every summary it saves).
    pub visibility: crate::store::Visibility,
    /// Only log what would be saved or disabled.
    pub dry_run: bool,
    /// Memories created at or after this instant are too young to be merged or disabled.
    pub created_before: chrono::DateTime<chrono::Utc>,
}
