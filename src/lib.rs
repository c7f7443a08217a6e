//! air-friends: a daemon that turns an ACP coding agent into a chat companion on Discord and
//! Misskey.
//!
//! Map of the crate:
//! * [`cli`] — command-line definitions (clap).
//! * [`app`] — composition root: builds every component, runs, shuts down.
//! * [`config`] — `config.yaml` types, defaults, loading, validation.
//! * [`observability`] — JSON/pretty logging with secret redaction, the metrics registry.
//! * [`ops`] — `/healthz`, `/readyz`, `/metrics` listener and readiness checks.
//! * [`skills`] — skill packages: manifests, validator, the `air-friends skill` client.
//! * [`shutdown`] — cancellation tokens, task tracking, signal handling.
//! * [`systemd`] — `Type=notify` readiness, watchdog and stopping notifications.
#![forbid(unsafe_code)]

pub mod app;
pub mod cli;
pub mod config;
pub mod observability;
pub mod ops;
pub mod shutdown;
pub mod skills;
pub mod systemd;
