//! Where the real-OpenCode tests (tests/opencode_e2e.rs) and the agent start-up benchmark
//! (benches/agent_startup.rs) find OpenCode: `OPENCODE_BIN` when set, else exactly as the
//! daemon finds `agent.command: opencode` ([`AgentLookup`]: on `PATH`, then in the folder
//! `air-friends setup` installs it into). Missing is a failure that names the command that
//! installs it, in CI and out of it: a test that cannot run must not count as passed.

use std::path::PathBuf;

use air_friends::config::ProcessEnv;
use air_friends::ops::checks::AgentLookup;
use air_friends::setup::{OPENCODE_COMMAND, OPENCODE_VERSION, opencode_executable};

/// The OpenCode executable, or why there is none and how to install it.
pub fn find() -> Result<PathBuf, String> {
    if let Some(bin) = std::env::var_os("OPENCODE_BIN") {
        let bin = PathBuf::from(bin);
        return if bin.is_file() {
            Ok(bin)
        } else {
            Err(format!("OPENCODE_BIN={} is not a file", bin.display()))
        };
    }
    AgentLookup::from_env(&ProcessEnv)
        .resolve(OPENCODE_COMMAND)
        .ok_or_else(|| {
            let folder = opencode_executable(&ProcessEnv)
                .map_or_else(|| "no HOME".to_owned(), |p| p.display().to_string());
            format!(
                "OpenCode is not installed: `{OPENCODE_COMMAND}` is not on PATH nor at {folder}. \
                 Install OpenCode {OPENCODE_VERSION} there with `cargo run --locked -- setup` \
                 (or `air-friends setup`), or set OPENCODE_BIN"
            )
        })
}

/// [`find`], panicking with its message when OpenCode is missing.
pub fn opencode() -> PathBuf {
    find().unwrap_or_else(|why| panic!("{why}"))
}
