//! How agents are started: the runner (command, timeouts, permission gate, sandbox) and the
//! template every agent's environment is built from.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::skills::SkillPackages;
use crate::agent::{
    ActivityObserver, AgentRunner, ApprovalRules, PermissionGate, RunnerSettings, Sandbox,
};
use crate::config::{Config, ProcessEnv};
use crate::conversation::launch::AgentEnvTemplate;
use crate::setup::agent_lookup::AgentLookup;
use crate::skills::LoadedSkills;

/// The agent runner: the configured command and timeouts, the permission gate, the sandbox,
/// and the activity observer when there is one.
pub(super) fn runner(
    config: &Config,
    skills: &SkillPackages,
    sandbox: Sandbox,
    activity: Option<Arc<dyn ActivityObserver>>,
) -> AgentRunner {
    let runner = AgentRunner::new(
        runner_settings(config),
        PermissionGate::new(
            approval_rules(&skills.loaded, config, &skills.dir, &sandbox),
            config.agent.yolo,
        ),
    )
    .with_sandbox(sandbox);
    let runner = match activity {
        Some(observer) => runner.with_activity_observer(observer),
        None => runner,
    };
    if config.agent.yolo {
        tracing::warn!("agent.yolo is on: every permission the agent asks for is approved");
    }
    runner
}

/// `agent`: the command (resolved), its arguments, the model and the timeouts.
fn runner_settings(config: &Config) -> RunnerSettings {
    RunnerSettings {
        command: agent_command(config),
        args: config.agent.args.clone(),
        model: config.agent.model.clone(),
        connect_timeout: config.agent.connect_timeout(),
        idle_timeout: config.agent.idle_timeout(),
        max_turn: config.agent.max_turn(),
        kill_grace: config.agent.kill_grace(),
    }
}

/// The program the runner starts: `agent.command` as [`AgentLookup`] resolves it (so
/// the default `opencode` also runs from the folder `air-friends setup` installs it to), else
/// as configured (the spawn then reports it missing).
fn agent_command(config: &Config) -> String {
    AgentLookup::from_env(&ProcessEnv)
        .resolve(&config.agent.command)
        .and_then(|p| p.to_str().map(str::to_owned))
        .unwrap_or_else(|| config.agent.command.clone())
}

/// The auto-approve rules: the canonical skills directory, the entrypoints in it and the
/// command prefixes. An entrypoint that is a symlink, missing, or not a regular file inside
/// the skills directory is dropped with a warning (the gate would refuse it at every call).
fn approval_rules(
    skills: &LoadedSkills,
    config: &Config,
    skills_dir: &Path,
    sandbox: &Sandbox,
) -> ApprovalRules {
    let list = skills.auto_approve(&config.agent.auto_approve_skills);
    let mut rules = ApprovalRules {
        skills_dir: skills_dir.to_path_buf(),
        entrypoints: list.entrypoints,
        command_prefixes: list.command_prefixes,
        skills_mounted_in_workspace: sandbox.skills_mounted_in_workspace(),
    };
    for (entrypoint, reason) in rules.retain_genuine_entrypoints() {
        tracing::warn!(entrypoint = %entrypoint, reason = %reason,
            "skill entrypoint dropped from the auto-approve list");
    }
    rules
}

/// What every agent's environment is built from: the agent configuration, the skills and
/// their credential variables, this executable, the Skill API URL, the secrets never to pass
/// on, and the providers the model gateway serves.
pub(super) fn env_template(
    config: &Config,
    skills: &SkillPackages,
    air_friends_bin: PathBuf,
    api_url: &str,
) -> AgentEnvTemplate {
    AgentEnvTemplate {
        agent: config.agent.clone(),
        skills_dir: skills.dir.clone(),
        air_friends_bin,
        api_url: api_url.to_owned(),
        skill_credentials: skills
            .loaded
            .enabled_credential_env_vars(|name| config.skill_enabled(name))
            .into_iter()
            .map(str::to_owned)
            .collect(),
        secret_values: config.secret_values(),
        gateway_providers: config
            .agent
            .providers
            .iter()
            .map(|(id, p)| (id.clone(), p.api_key_env.clone()))
            .collect(),
        mcp_servers: config.mcp.servers.clone(),
    }
}
