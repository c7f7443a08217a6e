//! The Skill API's own runtime: [`ServingRuntime`], one worker thread named `skill-api` that
//! accepts and serves the TCP listener's and every session socket's connections, and runs the
//! calls made on them.
//!
//! Why a runtime of its own: on the daemon's multi-threaded runtime every request's readiness
//! event could land on one worker while another sat parked, so calls kept waking the other
//! core (a futex wake and a context switch each time). With one worker the same connections
//! cost less CPU per call under wrk: the bare HTTP floor 12.6–13.8 → 8.1–9.7 µs of server CPU,
//! `memory-save` 28.5–30.9 → 23.7–25.5 µs (`docs/performance/skill-api.md`, "Under wrk, and one
//! thread for the Skill API"; with in-process load generators the gain is smaller, never a loss).
//! One thread serves tens of thousands of calls a second, far more than a host's agents make,
//! and nothing a handler does holds it: store reads run on this runtime's blocking pool, store
//! writes on the store's writer thread, platform requests are I/O.
//!
//! Everything else (platforms, agents, the model gateway's upstream requests started by
//! other tasks) stays on the daemon's main runtime; futures of one runtime can await tasks and
//! channels of the other. Dropping a [`ServingRuntime`] shuts the runtime down without waiting
//! (allowed inside async code): drop it once the Skill API has drained.

use std::io;

use tokio::runtime::{Handle, Runtime};

/// Name of the runtime's threads (its worker and its blocking pool), as `top` and
/// `/proc/<pid>/task/*/comm` show it.
pub const THREAD_NAME: &str = "skill-api";

/// Owns the Skill API's runtime; [`handle`](Self::handle) spawns onto it.
#[derive(Debug)]
pub struct ServingRuntime {
    handle: Handle,
    /// Taken only by `drop`.
    runtime: Option<Runtime>,
}

impl ServingRuntime {
    /// Starts the runtime: one worker, timers and I/O enabled.
    ///
    /// # Errors
    ///
    /// When the operating system refuses the thread or the I/O driver.
    pub fn start() -> io::Result<Self> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name(THREAD_NAME)
            .enable_all()
            .build()?;
        Ok(Self {
            handle: runtime.handle().clone(),
            runtime: Some(runtime),
        })
    }

    /// A handle to the runtime (give it to [`SkillApiState::serve_on`]).
    ///
    /// [`SkillApiState::serve_on`]: super::SkillApiState::serve_on
    pub fn handle(&self) -> Handle {
        self.handle.clone()
    }
}

impl Drop for ServingRuntime {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}
