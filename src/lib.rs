//! air-friends: a daemon that turns an ACP coding agent into a chat companion on Discord and
//! Misskey.
//!
//! Map of the crate:
//! * [`admin`] — the operator console in the browser: one-time login links, sessions with CSRF
//!   tokens, the *Now*, *Conversations*, *Memories*, *Skills* and *Config* pages, served on
//!   the ops listener.
//! * [`agent`] — the ACP agent runner: process, JSON-RPC, permission gate, session flow.
//! * [`attachments`] — files users attach: fetched by the daemon from the platform's own
//!   servers only, sniffed, pictures downscaled for the model, saved read-only for the agent.
//! * [`audio`] — audio files read from their bytes without decoding: the format, the length
//!   from the container, an Ogg Opus file's waveform (voice messages in and out).
//! * [`backoff`] — the exponential back-off schedule every retry uses.
//! * [`cli`] — command-line definitions (clap).
//! * [`command_path`] — where a command is found (a path, or the first match on `PATH`), the
//!   one lookup for setup, the sandbox and the agent command.
//! * [`app`] — composition root: builds every component, runs, shuts down; the commands, with
//!   `air-friends chat`'s console.
//! * [`conversation`] — routing (triggers, access, dedup, rate limit, per-channel FIFO), prompts.
//! * [`config`] — `config.yaml` types, defaults, loading, validation.
//! * [`confine`] — the one containment rule for agent-named paths (workspace, hidden `private/`,
//!   safe non-blocking opens of single-link regular files).
//! * [`embeddings`] — optional meaning-based recall: memory vectors from an embedding
//!   endpoint, filled in the background, fused with full-text search.
//! * [`egress`] — the optional egress allow-list: a CONNECT proxy per sandboxed session that
//!   reaches only listed hosts at public addresses.
//! * [`gateway`] — the model gateway: the provider's API proxied with the real key, metered,
//!   budgeted.
//! * [`handlers`] — the built-in skill handlers, their registry, user commands for humans.
//! * [`maintenance`] — memory consolidation: agent runs in quiet hours that merge old memories
//!   into summaries (memory skills only, nothing sent to anyone).
//! * [`mcp`] — the MCP broker: the agent reaches the configured MCP servers only through the
//!   daemon, which adds their credentials and lets only the allowed tools through.
//! * [`names`] — the name rules used in several layers (skill names, Discord ids, flag
//!   spelling), each in one place.
//! * [`observability`] — JSON/pretty logging with secret redaction, the metrics registry.
//! * [`ops`] — `/healthz`, `/readyz`, `/metrics` listener and readiness checks.
//! * [`places`] — `places:` rules: which settings (persona, model, reply policy, skills,
//!   budget, attachments, warm agents, memory) apply where a message was written.
//! * [`platform`] — the `PlatformAdapter` seam, neutral message types, `FakePlatform`.
//! * [`privacy`] — users own their data: erasing everything kept about a user
//!   (`forget-user`), never reachable by a skill.
//! * [`reminders`] — the reminder scheduler: timer-driven DM delivery with retries.
//! * [`schedules`] — operator schedules: the bot posts on its own, on a timetable, in a place
//!   (an agent turn like a message's), every run durable and recorded.
//! * [`session`] — who may call the Skill API for which conversation: session ids, caller
//!   tokens, the registry with idle expiry, per-turn state, termination signals.
//! * [`setup`] — `air-friends setup`: installs the pinned OpenCode, ripgrep, bubblewrap and the
//!   default configuration.
//! * [`shipped`] — the default skills, prompts and agent configuration embedded in the binary,
//!   and the folder they are read from (the package's, or written to the user's data folder).
//! * [`shutdown`] — cancellation tokens, task tracking, signal handling.
//! * [`skill_api`] — the authenticated HTTP API the agent's skill scripts call.
//! * [`skills`] — skill packages: manifests, validator, the `air-friends skill` client.
//! * [`store`] — SQLite persistence for memories and reminders (FTS5 search, JSONL import).
//! * [`sync`] — the one policy for poisoned locks (carry on with the data).
//! * [`systemd`] — `Type=notify` readiness, watchdog and stopping notifications.
//! * [`text`] — outgoing text processing, splitting to platform limits, token estimates.
//! * [`timetable`] — cron expressions in a time zone (next runs, daylight saving time) and
//!   the catch-up rule for a run that fell due while nobody was there.
//! * [`voice`] — the speech services: voice messages transcribed by an OpenAI-compatible
//!   service the daemon calls (the agent has no network), metered per user and day.
//!
//! Layers (a module uses only modules of lower layers; `tests/layering.rs` reads this table and
//! holds it, with no exceptions):
//!
//! | layer | modules |
//! |---|---|
//! | 0 | `audio`, `backoff`, `names`, `sync`, `text`, `timetable`, `confine`, `egress`, `cli`, `command_path`, `shipped`, `shutdown`, `systemd` |
//! | 1 | `config`, `store` |
//! | 2 | `observability`, `embeddings`, `skills` |
//! | 3 | `ops`, `platform`, `voice` |
//! | 4 | `setup`, `attachments`, `agent`, `session`, `reminders` |
//! | 5 | `skill_api`, `places` |
//! | 6 | `gateway`, `mcp` |
//! | 7 | `conversation` |
//! | 8 | `admin`, `handlers`, `maintenance`, `privacy`, `schedules` |
//! | 9 | `app` (the composition root and the commands) |
// No unsafe code, but in `agent::sys`: the few system calls no safe wrapper covers (capability
// sets, keyctl).
#![deny(unsafe_code)]

pub mod admin;
pub mod agent;
pub mod app;
pub mod attachments;
pub mod audio;
pub mod backoff;
pub mod cli;
pub mod command_path;
pub mod config;
pub mod confine;
pub mod conversation;
pub mod egress;
pub mod embeddings;
pub mod gateway;
pub mod handlers;
pub mod maintenance;
pub mod mcp;
pub mod names;
pub mod observability;
pub mod ops;
pub mod places;
pub mod platform;
pub mod privacy;
pub mod reminders;
pub mod schedules;
pub mod session;
pub mod setup;
pub mod shipped;
pub mod shutdown;
pub mod skill_api;
pub mod skills;
pub mod store;
pub mod sync;
pub mod systemd;
pub mod text;
pub mod timetable;
pub mod voice;
