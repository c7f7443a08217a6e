//! send-reply, edit-reply and get-message.
//!
//! * send-reply: one successful reply per session, threaded to the reply anchor
//!   (`lastFileMessageId ?? triggerMessageId`; a new message without a trigger). Further calls are
//!   429 `QUOTA_EXCEEDED` pointing to edit-reply; the 4th call in total also terminates the agent
//!   (attempts are counted by the call pipeline before its rate limit, see
//!   `SkillHandler::stops_agent_at`).
//!   Long text is split into several messages (all ids returned), never truncated.
//! * edit-reply: only messages this session sent; the 3rd call terminates instead of editing.
//!   Misskey re-creates the message threaded to the anchor the reply was created with.
//! * get-message: one message of the conversation; default the last reply, then the last file.
//!
//! What a turn's replies did is kept in the handlers' own per-turn slot, [`ReplySlot`].

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Value, json};

use std::collections::HashSet;

use super::common::{Deps, outgoing_text, params, platform_error, platform_lookup_error};
use super::files::FileSlot;
use crate::platform::{ChannelId, MessageId, PlatformAdapter, SendTextError, send_text};
use crate::session::TurnSlot;
use crate::skill_api::{CallContext, SkillError, SkillHandler};
use crate::text::split_message;

/// `send-reply`: successful calls allowed per turn.
pub const MAX_REPLIES_PER_SESSION: u32 = 1;
/// `send-reply`: the call (counting every call) that also stops the agent.
pub const MAX_REPLY_ATTEMPTS_BEFORE_TERMINATE: u32 = 4;
/// `edit-reply`: the call that stops the agent instead of editing (so two real edits are
/// possible).
pub const MAX_EDIT_CALLS_BEFORE_TERMINATE: u32 = 3;

/// What this turn's send-reply and edit-reply calls did (a slot of the session's turn).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReplySlot {
    /// Successful `send-reply` calls (the handler's quota; a call in flight holds one).
    pub successes: u32,
    /// Last message sent by `send-reply`/`edit-reply`.
    pub last_sent_message_id: Option<MessageId>,
    /// The anchor the reply was threaded to when created; keeps `edit-reply` on that parent.
    pub anchor_message_id: Option<MessageId>,
    /// Every message id this turn's replies sent; `edit-reply` may only edit these.
    pub sent_message_ids: HashSet<MessageId>,
}

impl ReplySlot {
    /// Records a message this session sent (so `edit-reply` may edit it later).
    pub fn record_sent_message(&mut self, message_id: impl Into<MessageId>) {
        self.sent_message_ids.insert(message_id.into());
    }

    /// Whether this session sent the message.
    pub fn sent_message(&self, message_id: &MessageId) -> bool {
        self.sent_message_ids.contains(message_id)
    }
}

impl TurnSlot for ReplySlot {
    /// A reply counts as an answer.
    fn answered(&self) -> bool {
        self.successes > 0
    }
}

/// The `send-reply` skill: the one reply of a turn, threaded to the reply anchor.
pub(crate) struct SendReply(pub Deps);

#[derive(Deserialize)]
struct MessageParams {
    message: String,
}

/// What the quota check decided for one send-reply or send-voice call.
pub(super) enum Reservation {
    /// The reply slot is reserved for this call (undone if nothing gets delivered).
    Reserved { anchor: Option<MessageId> },
    /// The reply was already sent.
    Used { previous: Option<MessageId> },
}

#[async_trait]
impl SkillHandler for SendReply {
    fn name(&self) -> &str {
        "send-reply"
    }

    fn stops_agent_at(&self) -> Option<u32> {
        Some(MAX_REPLY_ATTEMPTS_BEFORE_TERMINATE)
    }

    async fn call(&self, ctx: &CallContext, raw: Value) -> Result<Value, SkillError> {
        // Already counted by the Skill API before its rate limit; the 4th attempt also asks
        // for termination there.
        let attempt = ctx.count_attempt(MAX_REPLY_ATTEMPTS_BEFORE_TERMINATE);
        let anchor = match reserve_reply(ctx) {
            Reservation::Used { previous } => {
                let how = match previous {
                    Some(id) => format!(
                        "To change what you said, call edit-reply --message-id {id} \
                         --message-file <file> with the complete new text."
                    ),
                    None => "To change what you said, use edit-reply on your reply's message id."
                        .to_owned(),
                };
                return Err(SkillError::QuotaExceeded {
                    message: format!(
                        "You already sent your reply in this conversation turn; send-reply works \
                         once per turn. {how} If the user already has your answer, stop calling \
                         skills."
                    ),
                    terminate: attempt.terminates(),
                });
            }
            Reservation::Reserved { anchor } => anchor,
        };
        released_on_error(ctx, self.send(ctx, raw, anchor.as_ref()).await)
    }
}

/// Reserves the turn's one reply (send-reply's or send-voice's) for this call, so two
/// concurrent calls cannot both reply; or says it was already sent.
pub(super) fn reserve_reply(ctx: &CallContext) -> Reservation {
    let session = ctx.session();
    ctx.with_slots(|slots| {
        let replies = slots.get_mut::<ReplySlot>();
        if replies.successes >= MAX_REPLIES_PER_SESSION {
            return Reservation::Used {
                previous: replies.last_sent_message_id.clone(),
            };
        }
        replies.successes += 1;
        Reservation::Reserved {
            anchor: FileSlot::reply_anchor(slots.get::<FileSlot>(), session).cloned(),
        }
    })
}

/// `result` of a reserved reply, the reservation undone when nothing was delivered.
pub(super) fn released_on_error(
    ctx: &CallContext,
    result: Result<Value, SkillError>,
) -> Result<Value, SkillError> {
    if result.is_err() {
        ctx.with_slot(|replies: &mut ReplySlot| {
            replies.successes = replies.successes.saturating_sub(1);
        });
    }
    result
}

impl SendReply {
    /// Sends the reply; `Err` only when nothing was delivered (the reservation is then undone).
    async fn send(
        &self,
        ctx: &CallContext,
        raw: Value,
        anchor: Option<&MessageId>,
    ) -> Result<Value, SkillError> {
        let session = ctx.session();
        let p: MessageParams = params(raw)?;
        let text = outgoing_text(&p.message, "/message")?;
        let adapter = self.0.adapter(session)?;
        ctx.still_in_turn()?;
        let (sent, failure) =
            match send_text(adapter.as_ref(), &session.origin.channel_id, &text, anchor).await {
                Ok(sent) => (sent, None),
                Err(SendTextError { sent, error }) if !sent.is_empty() => (sent, Some(error)),
                Err(SendTextError { error, .. }) => return Err(platform_error(error)),
            };
        let ids: Vec<MessageId> = sent.iter().map(|m| m.message_id.clone()).collect();
        let first = &sent[0];
        ctx.with_slot(|replies: &mut ReplySlot| {
            replies.last_sent_message_id = Some(first.message_id.clone());
            replies.anchor_message_id = anchor.cloned();
            for id in &ids {
                replies.record_sent_message(id.clone());
            }
        });
        tracing::info!(
            session_id = %ctx.session_id(),
            parts = ids.len(),
            chars = text.chars().count(),
            threaded = anchor.is_some(),
            "reply sent"
        );
        let mut data = json!({
            "messageId": first.message_id,
            "messageIds": ids,
            "timestamp": first.timestamp,
        });
        if let Some(error) = failure {
            let total = split_message(&text, adapter.text_limit(&session.origin.channel_id)).len();
            data["partial"] = json!(true);
            data["note"] = json!(format!(
                "Only {} of {total} parts of your reply were delivered ({error}). The reply \
                 counts as sent; to complete it, use edit-reply on the last delivered message \
                 with that part plus the missing text.",
                ids.len()
            ));
        }
        Ok(data)
    }
}

/// The `edit-reply` skill: changes a message this session sent.
pub(crate) struct EditReply(pub Deps);

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct EditParams {
    message_id: MessageId,
    message: String,
}

#[async_trait]
impl SkillHandler for EditReply {
    fn name(&self) -> &str {
        "edit-reply"
    }

    fn stops_agent_at(&self) -> Option<u32> {
        Some(MAX_EDIT_CALLS_BEFORE_TERMINATE)
    }

    async fn call(&self, ctx: &CallContext, raw: Value) -> Result<Value, SkillError> {
        let attempt = ctx.count_attempt(MAX_EDIT_CALLS_BEFORE_TERMINATE);
        if attempt.terminates() {
            return Err(SkillError::QuotaExceeded {
                message: format!(
                    "edit-reply was called {} times in this turn; only {} edits are allowed \
                     and this one was not made.",
                    attempt.number,
                    MAX_EDIT_CALLS_BEFORE_TERMINATE - 1
                ),
                terminate: true,
            });
        }
        let p: EditParams = params(raw)?;
        let session = ctx.session();
        let (own, anchor) = ctx.with_slot(|replies: &mut ReplySlot| {
            (
                replies.sent_message(&p.message_id),
                replies.anchor_message_id.clone(),
            )
        });
        if !own {
            return Err(SkillError::NotFound(format!(
                "message {} was not sent by you in this conversation turn; edit-reply can only \
                 change messages you sent with send-reply (use the messageId it returned)",
                p.message_id
            )));
        }
        let text = outgoing_text(&p.message, "/message")?;
        let adapter = self.0.adapter(session)?;
        let parts = split_message(&text, adapter.text_limit(&session.origin.channel_id));
        let Some((head, rest)) = parts.split_first() else {
            return Err(super::common::invalid("/message", "the new text is empty"));
        };
        ctx.still_in_turn()?;
        let edited = adapter
            .edit_message(
                &session.origin.channel_id,
                &p.message_id,
                head,
                anchor.as_ref(),
            )
            .await
            .map_err(|e| platform_lookup_error(e, &format!("message {}", p.message_id)))?;
        ctx.with_slot(|replies: &mut ReplySlot| {
            if edited.message_id != p.message_id {
                replies.sent_message_ids.remove(&p.message_id);
            }
            replies.record_sent_message(edited.message_id.clone());
            if replies.last_sent_message_id.as_ref() == Some(&p.message_id) {
                replies.last_sent_message_id = Some(edited.message_id.clone());
            }
        });
        let extra = send_rest(ctx, adapter.as_ref(), &session.origin.channel_id, rest).await?;
        tracing::info!(
            session_id = %ctx.session_id(),
            parts = parts.len(),
            chars = text.chars().count(),
            recreated = edited.message_id != p.message_id,
            "reply edited"
        );
        let mut ids = vec![edited.message_id.clone()];
        ids.extend(extra);
        Ok(json!({
            "messageId": edited.message_id,
            "previousMessageId": p.message_id,
            "messageIds": ids,
        }))
    }
}

/// Sends the parts of an edited text that did not fit into the edited message as follow-ups.
async fn send_rest(
    ctx: &CallContext,
    adapter: &dyn PlatformAdapter,
    channel_id: &ChannelId,
    rest: &[String],
) -> Result<Vec<MessageId>, SkillError> {
    let mut ids = Vec::with_capacity(rest.len());
    for part in rest {
        ctx.still_in_turn()?;
        let sent = adapter
            .send_message(channel_id, part, None)
            .await
            .map_err(platform_error)?;
        ctx.with_slot(|replies: &mut ReplySlot| {
            replies.record_sent_message(sent.message_id.clone())
        });
        ids.push(sent.message_id);
    }
    Ok(ids)
}

/// The `get-message` skill: one message of the conversation (by default the last reply).
pub(crate) struct GetMessage(pub Deps);

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct GetParams {
    #[serde(default)]
    message_id: Option<MessageId>,
}

#[async_trait]
impl SkillHandler for GetMessage {
    fn name(&self) -> &str {
        "get-message"
    }

    fn read_only(&self) -> bool {
        true
    }

    async fn call(&self, ctx: &CallContext, raw: Value) -> Result<Value, SkillError> {
        let p: GetParams = params(raw)?;
        let id = match p.message_id {
            Some(id) => id,
            None => ctx
                .with_slots(|slots| {
                    slots
                        .get::<ReplySlot>()
                        .and_then(|replies| replies.last_sent_message_id.clone())
                        .or_else(|| {
                            slots
                                .get::<FileSlot>()
                                .and_then(|files| files.last_message_id.clone())
                        })
                })
                .ok_or_else(|| {
                    SkillError::NotFound(
                        "you have not sent a message in this turn yet, so there is no default \
                         message; pass --message-id with the id of the message to read"
                            .into(),
                    )
                })?,
        };
        let session = ctx.session();
        let adapter = self.0.adapter(session)?;
        let message = adapter
            .get_message(&session.origin.channel_id, &id)
            .await
            .map_err(|e| platform_lookup_error(e, &format!("message {id}")))?;
        serde_json::to_value(message).map_err(SkillError::internal)
    }
}
