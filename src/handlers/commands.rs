//! User commands: a human runs a skill with `user_command: true` directly (Discord
//! slash command, Misskey `/memory-stats` text). The same handler runs, without an agent, in a
//! temporary session built from the invoking user; the JSON result is rendered as short text.
//!
//! The temporary session is never registered with the Skill API's session registry, so it has no
//! usable caller token. Parameters are validated against the skill's schema (defaults filled),
//! the manifest's per-user rate limit applies as for the agent, disabled skills answer that they
//! are disabled, and private data is shown only when the command was used in a DM.

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::Value;

use super::render;
use crate::conversation::workspace::Workspaces;
use crate::platform::{CommandInvocation, CommandReply};
use crate::skill_api::{CallContext, SessionContext, SessionRegistry, SkillApiState, SkillError};
use crate::skills::LoadedSkills;

/// Runs user commands against the Skill API's registered handlers.
#[derive(Debug, Clone)]
pub struct UserCommandRunner {
    state: SkillApiState,
    commands: BTreeSet<String>,
    workspaces: Workspaces,
}

impl UserCommandRunner {
    /// A runner for the skills of `loaded` that set `user_command: true` and have a handler in
    /// `state`'s registry.
    pub fn new(state: SkillApiState, loaded: &LoadedSkills, workspaces: Workspaces) -> Self {
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
            purpose: Default::default(),
            platform: invocation.platform,
            channel_id: invocation.channel_id.clone(),
            user_id: invocation.user_id.clone(),
            username: invocation.username.clone(),
            is_dm: invocation.is_dm,
            guild_id: invocation.guild_id.clone(),
            trigger_message_id: invocation.message_id.clone(),
            // Only used by send-file, which is no user command; an id that cannot name a folder
            // is refused like everywhere else.
            workspace: self
                .workspaces
                .path_for(invocation.platform, &invocation.user_id)
                .map_err(SkillError::internal)?,
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
