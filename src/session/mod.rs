//! Sessions: who may call the Skill API, on behalf of which conversation.
//!
//! One session per agent run (or per kept agent, across its turns). The agent runner
//! [`register`](SessionRegistry::register)s it and gets a session id (128 random bits), a
//! distinct caller token (256 random bits, both from the OS RNG), a [`SessionHandle`] to read
//! the session's state when the run ends, and a [`TerminationSignal`] it must await alongside
//! the agent: the Skill API fires it (doom-loop protection) after the offending call's response
//! went out.
//!
//! This module sits below both the Skill API (which authenticates calls against the registry)
//! and the conversation layer (which registers sessions and starts agents): it knows nothing of
//! HTTP or of any skill. Each quota lives with the handler that enforces it (`handlers/`), in
//! that handler's own per-turn slot ([`TurnSlot`], kept in the session's [`TurnSlots`]); a
//! session only counts calls ([`SessionState::record_attempt`]), memory changes and tokens, and
//! asks the slots whether the user was answered.
//!
//! * [`auth`] — [`authenticate`]: who may act for a session (channel, token, open turn), the
//!   one check of the Skill API and the model gateway.
//! * [`ids`] — [`SessionId`], [`CallerToken`], the constant-time token check.
//! * [`context`] — [`SessionContext`] (who and where) and [`SessionPurpose`].
//! * [`state`] — [`SessionState`]: what this turn has done that the session's users read.
//! * [`slots`] — [`TurnSlots`]: the handlers' per-turn state, one [`TurnSlot`] per type.
//! * [`termination`] — [`TerminationSignal`].
//! * [`registry`] — [`SessionRegistry`], [`SessionHandle`], idle expiry and the reaper.

pub mod auth;
pub mod context;
pub mod ids;
pub mod registry;
pub mod slots;
pub mod state;
pub mod termination;

pub use auth::{AuthFailure, Presented, authenticate};
pub use context::{
    DEFAULT_PLACE, MAINTENANCE_SKILLS, MaintenancePolicy, PlaceGrant, SCHEDULED_REFUSED,
    SessionContext, SessionPurpose,
};
pub use ids::{CallerToken, SessionError, SessionId, constant_time_eq};
pub use registry::{RegisteredSession, SessionHandle, SessionRegistry, UserHold};
pub use slots::{TurnSlot, TurnSlots};
pub use state::{Attempt, SessionState};
pub use termination::TerminationSignal;
