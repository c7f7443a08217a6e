//! air-friends: a daemon that turns an ACP coding agent into a chat companion on Discord and
//! Misskey.
//!
//! Map of the crate (one line per module):
//! * [`store`]: SQLite persistence for memories and reminders (one async API, FTS5 search, JSONL import).
#![forbid(unsafe_code)]

pub mod store;
