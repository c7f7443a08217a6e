//! air-friends: a daemon that turns an ACP coding agent into a chat companion on Discord and
//! Misskey.
//!
//! Map of the crate (one line per module):
#![forbid(unsafe_code)]

pub mod platform;
pub mod text;
