//! Where the real-OpenCode tests (tests/opencode_e2e.rs) and the benchmarks
//! (benches/agent_startup.rs, benches/warm_chat.rs) find OpenCode, and how they keep it offline: `OPENCODE_BIN` when set, else exactly as the
//! daemon finds `agent.command: opencode` ([`AgentLookup`]: on `PATH`, then in the folder
//! `air-friends setup` installs it into). Missing is a failure that names the command that
//! installs it, in CI and out of it: a test that cannot run must not count as passed.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

use air_friends::config::ProcessEnv;
use air_friends::setup::agent_lookup::AgentLookup;
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

/// `agent.env` that keeps OpenCode off the network: no catalogue fetch, updates, sharing, LSP
/// or plugin downloads.
pub fn offline_env() -> serde_json::Value {
    serde_json::json!({
        "OPENCODE_DISABLE_MODELS_FETCH": "1",
        "OPENCODE_DISABLE_AUTOUPDATE": "1",
        "OPENCODE_DISABLE_SHARE": "1",
        "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
        "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1",
        "npm_config_registry": "http://127.0.0.1:9/"
    })
}

/// An `air-friends chat` configuration with data under `data`, OpenCode at `bin` and the
/// project's own skills, prompts and agent configuration, no model and no provider key: the
/// keyless default model, with OpenCode Zen's base URL at `zen_base_url` (the fake LLM).
pub fn zen_chat_config(data: &Path, bin: &Path, zen_base_url: &str) -> serde_json::Value {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    serde_json::json!({
        "workspace": {"repoPath": data},
        "prompts": {"dir": root.join("prompts")},
        "agent": {
            "command": bin,
            "args": ["acp"],
            "skillsDir": root.join("skills"),
            "configDir": root.join("agent-config"),
            "connectTimeoutMs": 60000,
            "providers": {"opencode": {"baseUrl": zen_base_url}},
            "env": offline_env(),
        }
    })
}
