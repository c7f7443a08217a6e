//! User commands (SPEC §3.6): a human runs a skill with `user_command: true` directly (Discord
//! slash command, Misskey `/memory-stats` text). The same handler runs, without an agent, in a
//! temporary session built from the invoking user; the JSON result is rendered as short text.
//!
//! The temporary session is never registered with the Skill API's session registry, so it has no
//! usable caller token. Parameters are validated against the skill's schema (defaults filled),
//! the manifest's per-user rate limit applies as for the agent, disabled skills answer that they
//! are disabled, and private data is shown only when the command was used in a DM.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;

use super::render;
use crate::config::WorkspaceConfig;
use crate::platform::{CommandInvocation, CommandReply, PlatformKind};
use crate::skill_api::{CallContext, SessionContext, SessionRegistry, SkillApiState, SkillError};
use crate::skills::LoadedSkills;

/// Where user workspaces live: `{repoPath}/{workspacesDir}/{platform}/{userId}` (SPEC §2.4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkspaceLayout {
    root: PathBuf,
}

impl WorkspaceLayout {
    /// Workspaces under `root` (= `repoPath/workspacesDir`).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    /// The layout configured in `workspace`.
    pub fn from_config(config: &WorkspaceConfig) -> Self {
        Self::new(config.repo_path.join(&config.workspaces_dir))
    }

    /// The workspace of one user, with both parts sanitised (no separators, no `..`, no leading
    /// dots), so a hostile user id cannot point outside the root.
    pub fn user_dir(&self, platform: PlatformKind, user_id: &str) -> PathBuf {
        self.root
            .join(sanitize_part(platform.as_str()))
            .join(sanitize_part(user_id))
    }
}

/// One path component from untrusted text: `/`, `\`, NUL and control characters become `_`,
/// leading dots are dropped, and an empty result becomes `_`.
pub fn sanitize_part(part: &str) -> String {
    let cleaned: String = part
        .chars()
        .map(|c| {
            if c == '/' || c == '\\' || c.is_control() {
                '_'
            } else {
                c
            }
        })
        .collect();
    let trimmed = cleaned.trim_start_matches('.');
    if trimmed.is_empty() {
        "_".to_owned()
    } else {
        trimmed.to_owned()
    }
}

/// Runs user commands against the Skill API's registered handlers.
#[derive(Debug, Clone)]
pub struct UserCommandRunner {
    state: SkillApiState,
    commands: BTreeSet<String>,
    workspaces: WorkspaceLayout,
}

impl UserCommandRunner {
    /// A runner for the skills of `loaded` that set `user_command: true` and have a handler in
    /// `state`'s registry.
    pub fn new(state: SkillApiState, loaded: &LoadedSkills, workspaces: WorkspaceLayout) -> Self {
        let commands = loaded
            .user_commands()
            .map(|s| s.name.clone())
            .filter(|name| state.skills().get(name).is_some())
            .collect();
        Self {
            state,
            commands,
            workspaces,
        }
    }

    /// The command names offered to humans, sorted.
    pub fn command_names(&self) -> impl Iterator<Item = &str> {
        self.commands.iter().map(String::as_str)
    }

    /// Runs the command and delivers the answer through the invocation's reply channel. Returns
    /// whether the adapter was still waiting for it.
    pub async fn run(&self, invocation: CommandInvocation) -> bool {
        let reply = self.execute(&invocation).await;
        invocation.reply.send(reply).is_ok()
    }

    /// Runs the command and returns the answer text.
    pub async fn execute(&self, invocation: &CommandInvocation) -> CommandReply {
        let skill = invocation.skill.as_str();
        let outcome = self.call(invocation).await;
        tracing::info!(
            name: "user_command",
            skill,
            platform = %invocation.platform,
            user = %invocation.user_id,
            is_dm = invocation.is_dm,
            code = outcome.as_ref().map_or_else(SkillError::code, |_| "OK"),
            "user_command"
        );
        match outcome {
            Ok(data) => CommandReply {
                text: render::success(skill, &data, invocation.is_dm),
                is_error: false,
            },
            Err(error) => CommandReply {
                text: render::failure(skill, &error),
                is_error: true,
            },
        }
    }

    async fn call(&self, invocation: &CommandInvocation) -> Result<Value, SkillError> {
        let name = invocation.skill.as_str();
        let registered = self
            .commands
            .contains(name)
            .then(|| self.state.skills().get(name))
            .flatten()
            .ok_or_else(|| SkillError::UnknownSkill {
                name: name.to_owned(),
                available: self.commands.iter().cloned().collect(),
            })?;
        if !registered.spec().enabled {
            return Err(SkillError::SkillDisabled(name.to_owned()));
        }
        if let Some(limit) = &registered.spec().rate_limit {
            self.state
                .rate_limiter()
                .check(
                    name,
                    invocation.platform.as_str(),
                    &invocation.user_id,
                    limit,
                )
                .map_err(|retry_after| SkillError::RateLimited { retry_after })?;
        }
        let params = registered.prepare_params(invocation.parameters.clone())?;
        let context = SessionContext {
            platform: invocation.platform,
            channel_id: invocation.channel_id.clone(),
            user_id: invocation.user_id.clone(),
            username: invocation.username.clone(),
            is_dm: invocation.is_dm,
            guild_id: invocation.guild_id.clone(),
            trigger_message_id: invocation.message_id.clone(),
            workspace: self
                .workspaces
                .user_dir(invocation.platform, &invocation.user_id),
        };
        // A throw-away registry: the session is never reachable through the Skill API.
        let sessions = SessionRegistry::new(Duration::from_secs(60));
        let session = sessions.register(context).map_err(SkillError::internal)?;
        let ctx = CallContext::new(name, session.handle.clone());
        let timeout = self.state.settings().handler_timeout;
        let result = tokio::time::timeout(timeout, registered.handler().call(&ctx, params))
            .await
            .unwrap_or_else(|_| {
                Err(SkillError::internal(anyhow::anyhow!(
                    "user command did not finish within {timeout:?}"
                )))
            });
        sessions.unregister(&session.session_id);
        if let Err(SkillError::Internal(cause)) = &result {
            tracing::error!(skill = name, error = %format!("{cause:#}"), "user command failed");
        }
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workspace_parts_are_sanitised() {
        let layout = WorkspaceLayout::new("/data/workspaces");
        assert_eq!(
            layout.user_dir(PlatformKind::Discord, "123"),
            PathBuf::from("/data/workspaces/discord/123")
        );
        assert_eq!(
            layout.user_dir(PlatformKind::Misskey, "../../etc"),
            PathBuf::from("/data/workspaces/misskey/_.._etc")
        );
        assert_eq!(sanitize_part(".."), "_");
        assert_eq!(sanitize_part(".hidden"), "hidden");
        assert_eq!(sanitize_part("a\\b"), "a_b");
    }
}
