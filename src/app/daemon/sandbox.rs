//! The sandbox stage: the agent sandbox the configuration asks for, checked by running a
//! sandboxed command before anything is served (fail-closed), and reported on `/readyz`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;

use super::skills::SkillPackages;
use super::{absolute, workspaces_root};
use crate::agent::{Sandbox, SandboxSetup};
use crate::config::{Config, ProcessEnv};
use crate::ops::Readiness;
use crate::setup::agent_lookup::AgentLookup;
use crate::sync::Recover;

/// How long `/readyz` trusts its last sandbox probe.
const SANDBOX_RECHECK: Duration = Duration::from_secs(60);

/// Where the agents run: the sandbox, and this executable (mounted in it as the agents' skill
/// client).
pub(super) struct AgentHost {
    pub(super) sandbox: Sandbox,
    pub(super) air_friends_bin: PathBuf,
}

/// This executable and the agent sandbox, probed, with its `/readyz` check registered. Needs
/// neither the store nor the platforms, so it runs beside their start.
pub(super) async fn start(
    config: &Config,
    readiness: &Readiness,
    skills: &SkillPackages,
) -> anyhow::Result<AgentHost> {
    let air_friends_bin = std::env::current_exe().context("cannot find this executable")?;
    let workspaces_root = workspaces_root(config);
    let sandbox = agent_sandbox(config, &skills.dir, &air_friends_bin, &workspaces_root).await?;
    sandbox_check(readiness, &sandbox);
    Ok(AgentHost {
        sandbox,
        air_friends_bin,
    })
}

/// The agent sandbox the configuration asks for, checked by running a sandboxed command:
/// fail-closed, so a sandbox that cannot start stops the daemon with the reason and the fix.
async fn agent_sandbox(
    config: &Config,
    skills_dir: &Path,
    air_friends_bin: &Path,
    workspaces_root: &Path,
) -> anyhow::Result<Sandbox> {
    let path_var = std::env::var("PATH").ok();
    let agent_program = AgentLookup::from_env(&ProcessEnv).resolve(&config.agent.command);
    let db = config.database_path();
    let protected: Vec<PathBuf> = ["", "-wal", "-shm", "-journal"]
        .iter()
        .map(|suffix| PathBuf::from(format!("{}{suffix}", db.display())))
        .chain([workspaces_root.to_path_buf(), config.prompts.dir.clone()])
        .collect();
    let config_dir = absolute(&config.agent.config_dir);
    let sandbox = Sandbox::from_config(&SandboxSetup {
        config: &config.agent.sandbox,
        agent_program: agent_program.as_deref(),
        air_friends_bin,
        skills_dir,
        agent_config_dir: config_dir.is_dir().then_some(config_dir.as_path()),
        protected: &protected,
        path_var: path_var.as_deref(),
    })?;
    sandbox.probe().await?;
    if sandbox.is_enabled() {
        tracing::info!(mode = sandbox.mode().as_str(), confinement = %sandbox.summary(), "agent sandbox ready");
    } else {
        tracing::warn!(
            "agent.sandbox.mode is none: agents run unconfined and can read everything this \
             daemon's user can (database, configuration, other workspaces)"
        );
    }
    Ok(sandbox)
}

/// `/readyz` reports the sandbox: what confines the agents (`info`), and whether a sandboxed
/// command still starts (re-checked at most every [`SANDBOX_RECHECK`], so the endpoint stays
/// cheap).
fn sandbox_check(readiness: &Readiness, sandbox: &Sandbox) {
    let sandbox = sandbox.clone();
    let last: LastProbe = Arc::default();
    readiness.register_described("sandbox", Some(sandbox.summary()), move || {
        let (sandbox, last) = (sandbox.clone(), last.clone());
        async move {
            let cached = lock(&last)
                .clone()
                .filter(|(at, _)| at.elapsed() < SANDBOX_RECHECK);
            let result = match cached {
                Some((_, r)) => r,
                None => {
                    let r = sandbox.probe().await.map_err(|e| e.to_string());
                    *lock(&last) = Some((tokio::time::Instant::now(), r.clone()));
                    r
                }
            };
            result.map_err(|e| format!("sandbox mode {}: {e}", sandbox.mode().as_str()))
        }
    });
}

/// When the sandbox was last probed, and what came out.
type LastProbe = Arc<std::sync::Mutex<Option<(tokio::time::Instant, Result<(), String>)>>>;

fn lock(
    last: &LastProbe,
) -> std::sync::MutexGuard<'_, Option<(tokio::time::Instant, Result<(), String>)>> {
    last.locked()
}
