//! react-message: one reaction per session, on the trigger message only (the
//! user's message the session answers, never a bot's). A second call replaces the first: the old
//! reaction is removed, then the new one added (Misskey allows one reaction per note and user).
//! If adding the new one fails, the old one is put back so the user keeps seeing a response.
//! The current reaction is kept in the handler's own per-turn slot, [`ReactionSlot`].

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Value, json};

use super::common::{Deps, invalid, params, platform_error};
use super::files::FileSlot;
use super::reply::ReplySlot;
use crate::platform::{MessageId, ReactionEmoji};
use crate::session::TurnSlot;
use crate::skill_api::{CallContext, SkillError, SkillHandler};

/// The reaction this session currently has on the trigger message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reaction {
    /// Unicode emoji or custom emoji reference as sent to the platform.
    pub emoji: String,
    /// The message the reaction is on.
    pub message_id: MessageId,
}

/// This turn's reaction (a slot of the session's turn).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReactionSlot {
    /// The current reaction; a second `react-message` replaces it.
    pub reaction: Option<Reaction>,
}

impl TurnSlot for ReactionSlot {
    /// A reaction counts as an answer.
    fn answered(&self) -> bool {
        self.reaction.is_some()
    }
}

/// The `react-message` skill: one reaction on the trigger message, replaced by a second.
pub(crate) struct ReactMessage(pub Deps);

#[derive(Deserialize)]
struct ReactParams {
    emoji: String,
}

#[async_trait]
impl SkillHandler for ReactMessage {
    fn name(&self) -> &str {
        "react-message"
    }

    async fn call(&self, ctx: &CallContext, raw: Value) -> Result<Value, SkillError> {
        let p: ReactParams = params(raw)?;
        let session = ctx.session();
        let Some(trigger) = session.trigger_message_id.clone() else {
            return Err(SkillError::ForbiddenContext(
                "there is no user message to react to in this session; answer with send-reply \
                 instead"
                    .into(),
            ));
        };
        let emoji: ReactionEmoji = p
            .emoji
            .parse()
            .map_err(|e: crate::platform::InvalidEmoji| invalid("/emoji", e.to_string()))?;
        let bots_own = ctx.with_slots(|slots| {
            slots
                .get::<ReplySlot>()
                .is_some_and(|replies| replies.sent_message(&trigger))
                || slots
                    .get::<FileSlot>()
                    .is_some_and(|files| files.last_message_id.as_ref() == Some(&trigger))
        });
        if bots_own {
            return Err(SkillError::ForbiddenContext(
                "the bot does not react to its own messages".into(),
            ));
        }
        let previous = ctx.with_slot(|slot: &mut ReactionSlot| slot.reaction.clone());
        let previous_emoji = previous
            .as_ref()
            .and_then(|r| r.emoji.parse::<ReactionEmoji>().ok());
        if previous_emoji.as_ref() == Some(&emoji) {
            return Ok(json!({"emoji": emoji.to_string(), "messageId": trigger}));
        }
        let adapter = self.0.adapter(session)?;
        let channel = &session.origin.channel_id;
        ctx.still_in_turn()?;
        if let (Some(old), Some(old_emoji)) = (&previous, &previous_emoji) {
            adapter
                .remove_reaction(channel, &old.message_id, old_emoji)
                .await
                .map_err(platform_error)?;
            ctx.with_slot(|slot: &mut ReactionSlot| slot.reaction = None);
        }
        if let Err(error) = adapter.add_reaction(channel, &trigger, &emoji).await {
            if let (Some(old), Some(old_emoji)) = (previous, previous_emoji) {
                match adapter
                    .add_reaction(channel, &old.message_id, &old_emoji)
                    .await
                {
                    Ok(()) => ctx.with_slot(|slot: &mut ReactionSlot| slot.reaction = Some(old)),
                    Err(e) => tracing::warn!(kind = e.kind(), "could not restore reaction"),
                }
            }
            return Err(match error {
                crate::platform::PlatformError::NotFound(what)
                    if matches!(emoji, ReactionEmoji::Custom { .. }) =>
                {
                    invalid(
                        "/emoji",
                        format!(
                            "{what} is not available here; use a Unicode emoji or one of the custom \
                         emojis listed in your prompt"
                        ),
                    )
                }
                other => platform_error(other),
            });
        }
        ctx.with_slot(|slot: &mut ReactionSlot| {
            slot.reaction = Some(Reaction {
                emoji: p.emoji.trim().to_owned(),
                message_id: trigger.clone(),
            });
        });
        tracing::info!(
            session_id = %ctx.session_id(),
            replaced = previous_emoji.is_some(),
            custom = matches!(emoji, ReactionEmoji::Custom { .. }),
            "reaction set"
        );
        Ok(json!({"emoji": emoji.to_string(), "messageId": trigger}))
    }
}
