//! User commands: a human runs a skill with `user_command: true` directly (Discord
//! slash command, Misskey `/memory-stats` text). The same handler runs, without an agent, in a
//! temporary session built from the invoking user; the JSON result is rendered as short text.
//!
//! The temporary session is in no session registry ([`SessionHandle::unregistered`]), so no
//! caller can reach it. The call goes through the same pipeline as the agent's
//! ([`invoke()`]): the manifest's per-user rate limit, parameters validated against the skill's
//! schema (defaults filled), the handler time-out. Disabled skills answer that they are
//! disabled, a skill the place's rule leaves out (`places:`) is refused there, and private
//! data is shown only when the command was used in a DM.

use std::collections::BTreeSet;
use std::sync::Arc;

use serde_json::Value;

use super::render;
use crate::conversation::workspace::Workspaces;
use crate::places::{LivePlaces, Places, Spot};
use crate::platform::{CommandInvocation, CommandReply};
use crate::session::{SessionContext, SessionHandle, SessionPurpose};
use crate::skill_api::{CallContext, SkillApiState, SkillError, invoke};
use crate::skills::LoadedSkills;

/// Runs user commands against the Skill API's registered handlers.
#[derive(Debug, Clone)]
pub struct UserCommandRunner {
    state: SkillApiState,
    commands: BTreeSet<String>,
    workspaces: Workspaces,
    places: Arc<LivePlaces>,
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
            places: Arc::new(Places::none().into()),
        }
    }

    /// Commands judged by the `places:` rules: a skill a place does not allow is refused
    /// there, as it is to the agent.
    pub fn with_places(mut self, places: Arc<LivePlaces>) -> Self {
        self.places = places;
        self
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
            platform = %invocation.origin.platform,
            user = %invocation.origin.user_id,
            is_dm = invocation.origin.is_dm,
            code = outcome.as_ref().map_or_else(SkillError::code, |_| "OK"),
            "user_command"
        );
        match outcome {
            Ok(data) => CommandReply::text(render::success(skill, &data, invocation.origin.is_dm)),
            Err(error) => CommandReply::error(render::failure(skill, &error)),
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
        let context = SessionContext {
            origin: invocation.origin.clone(),
            purpose: SessionPurpose::Conversation,
            place: self
                .places
                .current()
                .resolve(&Spot::of_origin(&invocation.origin))
                .grant(),
            trigger_message_id: invocation.message_id.clone(),
            // Only used by send-file, which is no user command; an id that cannot name a folder
            // is refused like everywhere else.
            workspace: self
                .workspaces
                .path_for(
                    invocation.origin.platform,
                    invocation.origin.user_id.as_str(),
                )
                .map_err(SkillError::internal)?,
        };
        // A session in no registry: nothing can reach it through the Skill API.
        let ctx = CallContext::new(name, SessionHandle::unregistered("user-command", context));
        invoke(
            &self.state,
            &registered,
            &ctx,
            invocation.parameters.clone(),
        )
        .await
    }
}
