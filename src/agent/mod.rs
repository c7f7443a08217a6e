//! The agent runner: one ACP agent process per interaction.
//!
//! * [`activity`] — what a running agent is doing, for a caller that shows progress.
//! * [`rpc`] — newline-delimited JSON-RPC 2.0 over the child's stdio.
//! * [`process`] — spawning in a process group with a clean environment; bounded stop.
//! * [`env`](mod@env) — the agent's environment, built from scratch, secrets excluded.
//! * [`gate`] — the permission gate (auto-approved skill invocations only).
//! * [`fs`] — `fs/*` requests confined to the workspace.
//! * [`sandbox`] — the bubblewrap sandbox every agent runs in.
//! * [`seccomp`] — the system-call filter `sandbox-init` loads before the agent starts.
//! * [`relay`] — `air-friends sandbox-init`: inside a sandbox without network, relays loopback
//!   TCP to the session's Unix socket while running the agent.
//! * [`lockdown`] — what `sandbox-init` does to itself before the agent starts (never host
//!   root, no capability, resource limits) and the probe's self-check.
//! * [`shell`] — the whitelist shell lexer the gate reads commands with.
//! * [`sys`] — the few system calls no safe wrapper covers (the only unsafe code).
//! * [`run`] — one agent run for a message: spawn, connect, the prompt turn with its timeouts
//!   and retry prompt, the outcome (not a Skill API session: that is `crate::session`).

pub mod activity;
pub mod env;
pub mod fs;
pub mod gate;
pub mod lockdown;
pub mod process;
pub mod relay;
pub mod rpc;
pub mod run;
pub mod sandbox;
pub mod seccomp;
pub mod shell;
pub mod sys;

pub use activity::{Activity, ActivityObserver};
pub use gate::{ApprovalRules, PermissionGate};
pub use run::{
    AgentRun, AgentRunner, AgentSpec, LiveAgent, McpEndpoint, Outcome, PromptImage, ResponseProbe,
    RunnerSettings, TurnSpec,
};
pub use sandbox::{Sandbox, SandboxError, SandboxSetup};
