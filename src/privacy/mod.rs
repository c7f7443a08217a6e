//! Users own their data: what the daemon does when a user's data must go.
//!
//! * [`erase`]: [`Eraser`] erases everything kept about one user — the store's rows
//!   (`store::erasure`), their workspace folder (with `private/` and the sessions' files) and
//!   their conversations' agent state — after stopping their agents, refusing while one of
//!   their turns runs unless told to stop it. `air-friends forget-user` reaches it through the
//!   daemon's control socket (`control`), or runs it directly when no daemon holds the database.
//! * [`commands`]: `/privacy`, `/forget` and `/forget-confirm`, the daemon's own user commands:
//!   what is kept about the person who asks and for how long; forgetting memories, or
//!   everything, once confirmed with a one-time code ([`confirm`]).
//! * [`metrics`]: `air_friends_erasures_total{requested_by, outcome}`.
//! * [`retention`]: the daily job that deletes what `retention:` keeps no longer (disabled
//!   memories, usage records, session files).
//!
//! Nothing here is a skill: no agent, and so no prompt injection, can reach an erasure.

pub mod commands;
pub mod confirm;
pub mod erase;
pub mod metrics;
pub mod retention;

pub use erase::{EraseError, Eraser, ForgetReport};
