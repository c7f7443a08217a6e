//! The built-in skill handlers and the registry that builds them from the loaded
//! skill manifests.
//!
//! * [`HandlerDeps`] — what the handlers act on: the [`Store`], the [`PlatformRegistry`], the
//!   relevant configuration sections and a [`Clock`].
//! * [`build_registry`] — one [`crate::skill_api::SkillSpec`] per built-in skill,
//!   built **from its manifest** (schema, rate limit) plus configuration (enabled flags); the
//!   handlers themselves contain no parameter validation beyond what the schema cannot say.
//! * `memory` (save / search / patch / stats), `export` (memory-export), `reply` (send-reply /
//!   edit-reply / get-message), `files` + `preflight` (send-file), `voice` (send-voice: the
//!   reply spoken), `context` (fetch-context),
//!   `reaction` (react-message), `reminder` (set / cancel / list).
//! * `upkeep` — what a maintenance session's memory calls may change (its visibility, old
//!   memories only, dry runs), in one place for memory-save and memory-patch.
//! * `common` — shared plumbing: typed parameters, error mapping ([`PlatformError`] and
//!   [`StoreError`] → [`SkillError`]), the outgoing-text pipeline.
//! * [`commands`] (+ `render`) — the user-command entry point for humans: the same
//!   handlers, run without an agent, answered as short readable text.
//!
//! Per-turn state lives in the handlers, each in a slot owned by the handler that needs it
//! ([`ReplySlot`], [`FileSlot`], [`ReactionSlot`], [`ReminderSlot`]: a
//! [`TurnSlot`](crate::session::TurnSlot) kept by the session and reset at each turn), used
//! under the session's lock; every platform or store call happens outside that lock. A handler with a doom-loop limit declares it
//! ([`crate::skill_api::SkillHandler::stops_agent_at`]); the call
//! pipeline counts attempts before its rate limit, and the handler reads the count.
//!
//! [`PlatformError`]: crate::platform::PlatformError
//! [`StoreError`]: crate::store::StoreError
//! [`SkillError`]: crate::skill_api::SkillError

pub mod commands;
mod common;
mod context;
mod export;
mod files;
mod memory;
pub mod preflight;
mod reaction;
mod reminder;
mod render;
mod reply;
mod upkeep;
mod voice;

pub use files::FileSlot;
pub use reaction::{Reaction, ReactionSlot};
pub use reminder::ReminderSlot;
pub use reply::ReplySlot;

use std::fmt;
use std::sync::Arc;

use chrono::{DateTime, Utc};

use crate::config::{MemoryConfig, RemindersConfig, SkillsConfig};
use crate::platform::PlatformRegistry;
use crate::skill_api::{RegistryError, SkillHandler, SkillRegistry, SkillSpec};
use crate::skills::LoadedSkills;
use crate::store::Store;

pub use commands::UserCommandRunner;

/// Names of the built-in skills, each of which has a handler here (the table is
/// [`crate::skills::builtin::BUILTIN_MANIFESTS`]; `tests/handlers_misc.rs` checks that the
/// registry serves exactly these).
pub use crate::skills::builtin::BUILTIN_SKILLS;

/// The current time, injectable so reminder time bounds can be tested without waiting.
#[derive(Clone)]
pub struct Clock(Arc<dyn Fn() -> DateTime<Utc> + Send + Sync>);

impl Clock {
    /// The system clock (`Utc::now`).
    pub fn system() -> Self {
        Self(Arc::new(Utc::now))
    }

    /// A clock reading `now()` (tests).
    pub fn from_fn(now: impl Fn() -> DateTime<Utc> + Send + Sync + 'static) -> Self {
        Self(Arc::new(now))
    }

    /// The current time.
    pub fn now(&self) -> DateTime<Utc> {
        (self.0)()
    }
}

impl Default for Clock {
    fn default() -> Self {
        Self::system()
    }
}

impl fmt::Debug for Clock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Clock")
    }
}

/// Everything the handlers act on. Built once by the composition root.
#[derive(Debug, Clone)]
pub struct HandlerDeps {
    /// Memories and reminders.
    pub store: Store,
    /// The adapters of the configured platforms; a session's platform selects one.
    pub platforms: PlatformRegistry,
    /// `skills`: the disabled list and the send-file limits.
    pub skills_config: SkillsConfig,
    /// `reminders`: enabled flag, time bounds, per-user limit.
    pub reminders_config: RemindersConfig,
    /// `memory`: the memory-save content limit.
    pub memory_config: MemoryConfig,
    /// The current time (reminder bounds, export time stamps).
    pub clock: Clock,
    /// Meaning-based recall for memory-search (`memory.embeddings`); `None`: full text only.
    pub semantic: Option<crate::embeddings::Semantic>,
    /// The speech service send-voice speaks through (`speech`); `None`: send-voice is off.
    pub speaker: Option<crate::voice::Speaker>,
}

/// Why the handler registry could not be built.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// A built-in skill has no manifest in the loaded skills directory.
    #[error(
        "built-in skill {0:?} has no package in the skills directory (expected \
         skills/{0}/manifest.json); restore it from the release or remove nothing from skills/"
    )]
    MissingManifest(String),
    /// Registering a skill failed (schema does not compile, bad rate limit, ...).
    #[error(transparent)]
    Register(#[from] RegistryError),
}

/// Builds the Skill API registry: every built-in handler, with a spec taken from its manifest.
///
/// * schema = the manifest's `input_schema`, rate limit = its `rate_limit`;
/// * `send-file` is never cacheable (a retried upload must really run again);
/// * disabled (503 `SKILL_DISABLED`): skills listed in `skills.disabled`, `send-file` unless
///   `skills.sendFile.enabled`, the reminder skills unless `reminders.enabled`, `send-voice`
///   without `speech`.
///
/// A built-in skill whose manifest is missing from `loaded` is an error. Loaded skills without a
/// built-in handler (the operator's own script or command skills) are not registered: they talk
/// to their own services, not to the Skill API.
pub fn build_registry(
    deps: HandlerDeps,
    loaded: &LoadedSkills,
) -> Result<SkillRegistry, BuildError> {
    let shared = Arc::new(common::Shared::new(deps));
    let handlers: Vec<Arc<dyn SkillHandler>> = vec![
        Arc::new(memory::MemorySave(shared.clone())),
        Arc::new(memory::MemorySearch(shared.clone())),
        Arc::new(memory::MemoryPatch(shared.clone())),
        Arc::new(memory::MemoryStats(shared.clone())),
        Arc::new(export::MemoryExport(shared.clone())),
        Arc::new(reply::SendReply(shared.clone())),
        Arc::new(reply::EditReply(shared.clone())),
        Arc::new(reply::GetMessage(shared.clone())),
        Arc::new(files::SendFile(shared.clone())),
        Arc::new(voice::SendVoice(shared.clone())),
        Arc::new(context::FetchContext(shared.clone())),
        Arc::new(reaction::ReactMessage(shared.clone())),
        Arc::new(reminder::SetReminder(shared.clone())),
        Arc::new(reminder::CancelReminder(shared.clone())),
        Arc::new(reminder::ListReminders(shared.clone())),
    ];
    let mut registry = SkillRegistry::new();
    for handler in handlers {
        let name = handler.name().to_owned();
        let skill = loaded
            .get(&name)
            .ok_or_else(|| BuildError::MissingManifest(name.clone()))?;
        let spec = SkillSpec::from_package(skill)
            .with_cacheable(name != "send-file" && name != "send-voice")
            .with_enabled(enabled_by_config(&name, &shared));
        if !spec.enabled {
            tracing::info!(skill = %name, "skill disabled by configuration");
        }
        registry.register(handler, spec)?;
    }
    for name in loaded.names() {
        if !BUILTIN_SKILLS.contains(&name) {
            tracing::debug!(
                skill = name,
                "operator skill has no built-in handler; not served"
            );
        }
    }
    Ok(registry)
}

fn enabled_by_config(name: &str, shared: &common::Shared) -> bool {
    let services = crate::config::SkillServices {
        speech: shared.speaker.is_some(),
    };
    crate::config::skill_enabled(
        &shared.skills_config,
        &shared.reminders_config,
        services,
        name,
    )
}
