//! The Skill API: the authenticated HTTP server the agent's skill scripts call.
//!
//! * [`server`] — `POST /api/skill/{name}`, the request pipeline, audit events; [`router`] and
//!   [`serve`].
//! * [`auth`] — the [`AuthenticatedCall`] extractor (body parse, the per-session channel check,
//!   session lookup, constant-time caller-token check).
//! * [`socket`] — [`SessionSocket`]: the Skill API served on a per-session Unix socket whose
//!   folder is bound into that session's sandbox, so the OS decides who is calling.
//! * [`handler`] — the seam for skill handlers: [`SkillHandler`], [`CallContext`],
//!   [`SkillSpec`] (schema, rate limit, cacheable, enabled) and [`SkillRegistry`].
//! * `listener` — the accept loop shared by the TCP listener and the session sockets
//!   (connection cap, header-read timeout, drain on shutdown).
//! * [`mod@invoke`] — the in-process call pipeline (rate limit, parameters, handler time-out) shared
//!   by the HTTP server and the user commands.
//! * [`dedup`] — sharing of identical calls' outcomes (in-flight joining + 1 s cache).
//! * [`ratelimit`] — per-(skill, user) limits from manifests.
//! * [`error`] — [`SkillError`] and its single mapping to HTTP.
//! * [`metrics`] — Prometheus families.
//! * [`call_log`] — hourly call counts per skill and outcome for `air-friends stats`.
//! * [`state`] — [`SkillApiState`] and [`SkillApiSettings`].
//! * [`runtime`] — [`ServingRuntime`], the one-thread runtime the daemon serves the Skill API
//!   on ([`SkillApiState::serve_on`]).

pub mod auth;
pub mod call_log;
pub mod dedup;
pub mod error;
pub mod handler;
pub mod invoke;
pub mod listener;
pub mod metrics;
pub mod ratelimit;
pub mod runtime;
pub mod server;
pub mod socket;
pub mod state;

pub use auth::{AuthenticatedCall, CallRejection, SocketSession, socket_session_matches};
pub use error::{ErrorResponse, ParamProblem, SkillError};
pub use handler::{
    CallContext, RateLimit, RegisteredSkill, RegistryError, SkillHandler, SkillRegistry, SkillSpec,
};
pub use invoke::invoke;
pub use metrics::SkillApiMetrics;
pub use runtime::ServingRuntime;
pub use server::{router, serve};
pub use socket::{SessionSocket, SocketError};
pub use state::{SkillApiSettings, SkillApiState};
