//! Users own their data: what the daemon does when a user's data must go.
//!
//! * [`erase`]: [`Eraser`] erases everything kept about one user — the store's rows
//!   (`store::erasure`), their workspace folder (with `private/` and the sessions' files) and
//!   their conversations' agent state — after stopping their agents, refusing while one of
//!   their turns runs unless told to stop it. `air-friends forget-user` reaches it through the
//!   daemon's control socket (`control`), or runs it directly when no daemon holds the database.
//!
//! Nothing here is a skill: no agent, and so no prompt injection, can reach an erasure.

pub mod erase;

pub use erase::{EraseError, Eraser, ForgetReport};
