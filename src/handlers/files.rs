//! send-file: files from the workspace, threaded to the trigger.
//!
//! Needs a trigger message (403 otherwise). One successful call per session; further calls are
//! 429 and the 4th call in total also terminates the agent. The [`preflight`](super::preflight)
//! checks every path and limit before any byte is read (all or nothing). A delivery does not use
//! up the reply quota but counts as a response, and it becomes the reply anchor
//! (`lastFileMessageId`), so a following send-reply threads under the file. Misskey chats deliver
//! one message per file; a partial delivery is reported with the delivered ids. What a turn's
//! send-file did is kept in the handler's own per-turn slot, [`FileSlot`].

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Value, json};

use super::common::{Deps, invalid, outgoing_text, params, platform_error};
use super::preflight::{self, FileLimits, PreflightError};
use super::reply::ReplySlot;
use crate::platform::MessageId;
use crate::session::{SessionContext, TurnSlot};
use crate::skill_api::{CallContext, SkillError, SkillHandler};
use crate::text::split_message;

/// `send-file`: successful calls allowed per turn.
pub const MAX_FILE_SENDS_PER_SESSION: u32 = 1;
/// `send-file`: the call (counting every call) that also stops the agent.
pub const MAX_FILE_ATTEMPTS_BEFORE_TERMINATE: u32 = 4;

/// What this turn's send-file calls did (a slot of the session's turn).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FileSlot {
    /// Successful `send-file` calls (the handler's quota; a call in flight holds one).
    pub successes: u32,
    /// Last message delivered by `send-file`: the reply anchor from then on.
    pub last_message_id: Option<MessageId>,
}

impl FileSlot {
    /// Where a new reply threads to: `lastFileMessageId ?? triggerMessageId` (`files` is
    /// `None` while the turn has not used send-file).
    pub fn reply_anchor<'a>(
        files: Option<&'a FileSlot>,
        context: &'a SessionContext,
    ) -> Option<&'a MessageId> {
        files
            .and_then(|files| files.last_message_id.as_ref())
            .or(context.trigger_message_id.as_ref())
    }
}

impl TurnSlot for FileSlot {
    /// A delivered file counts as an answer.
    fn answered(&self) -> bool {
        self.successes > 0
    }
}

/// The `send-file` skill: workspace files to the conversation, threaded to the trigger.
pub(crate) struct SendFile(pub Deps);

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct FileParams {
    file_paths: Vec<String>,
    #[serde(default)]
    caption: Option<String>,
}

#[async_trait]
impl SkillHandler for SendFile {
    fn name(&self) -> &str {
        "send-file"
    }

    fn stops_agent_at(&self) -> Option<u32> {
        Some(MAX_FILE_ATTEMPTS_BEFORE_TERMINATE)
    }

    async fn call(&self, ctx: &CallContext, raw: Value) -> Result<Value, SkillError> {
        let session = ctx.session();
        let has_trigger = session.trigger_message_id.is_some();
        // Counted by the Skill API before its rate limit; the 4th attempt also asks for
        // termination there.
        let attempt = ctx.count_attempt(MAX_FILE_ATTEMPTS_BEFORE_TERMINATE);
        let free = ctx.with_slot(|files: &mut FileSlot| {
            let free = files.successes < MAX_FILE_SENDS_PER_SESSION;
            if free && has_trigger {
                // Reserve the slot so two concurrent calls cannot both deliver.
                files.successes += 1;
            }
            free
        });
        if !free {
            return Err(SkillError::QuotaExceeded {
                message: "You already sent files in this conversation turn; send-file works \
                          once per turn. Put everything into one call next time. Answer with \
                          send-reply now if you have not yet."
                    .into(),
                terminate: attempt.terminates(),
            });
        }
        if !has_trigger {
            return Err(SkillError::ForbiddenContext(
                "send-file needs a user message to answer, and this session has none; answer \
                 with send-reply instead"
                    .into(),
            ));
        }
        let result = self.send(ctx, raw).await;
        if result.is_err() {
            ctx.with_slot(|files: &mut FileSlot| {
                files.successes = files.successes.saturating_sub(1);
            });
        }
        result
    }
}

impl SendFile {
    async fn send(&self, ctx: &CallContext, raw: Value) -> Result<Value, SkillError> {
        let session = ctx.session();
        let p: FileParams = params(raw)?;
        let adapter = self.0.adapter(session)?;
        let channel = &session.origin.channel_id;
        let caption_parts = match &p.caption {
            Some(raw) => split_message(
                &outgoing_text(raw, "/caption")?,
                adapter.text_limit(channel),
            ),
            None => Vec::new(),
        };
        let files = self.load(ctx, &p.file_paths).await?;
        let total_bytes: usize = files
            .iter()
            .map(|f| match &f.source {
                crate::platform::FileSource::Bytes(b) => b.len(),
                crate::platform::FileSource::Path(_) => 0,
            })
            .sum();
        let anchor = ctx
            .with_slots(|slots| FileSlot::reply_anchor(slots.get::<FileSlot>(), session).cloned());
        let requested = files.len();
        let caption = caption_parts.first().map(String::as_str);
        ctx.still_in_turn()?;
        let delivery = adapter
            .send_files(channel, files, caption, anchor.as_ref())
            .await
            .map_err(platform_error)?;
        let Some(last) = delivery.last_message().map(|m| m.message_id.clone()) else {
            return Err(SkillError::internal(anyhow::anyhow!(
                "file delivery reported success without a message"
            )));
        };
        let mut ids = delivery.message_ids();
        let reply_sent = ctx.with_slots(|slots| {
            slots.get_mut::<FileSlot>().last_message_id = Some(last.clone());
            slots
                .get::<ReplySlot>()
                .is_some_and(|replies| replies.successes > 0)
        });
        // Caption text beyond the platform limit follows as plain messages under the file.
        for part in caption_parts.iter().skip(1) {
            match adapter.send_message(channel, part, Some(&last)).await {
                Ok(sent) => ids.push(sent.message_id),
                Err(error) => {
                    tracing::warn!(kind = error.kind(), "caption continuation not delivered");
                    break;
                }
            }
        }
        tracing::info!(
            session_id = %ctx.session_id(),
            files = requested - delivery.failed.len(),
            failed = delivery.failed.len(),
            bytes = total_bytes,
            "files sent"
        );
        Ok(answer(&delivery, requested, ids, &last, reply_sent))
    }

    /// Checks every requested path and limit, then reads the files: all or nothing, on a
    /// blocking thread (it opens and reads files).
    async fn load(
        &self,
        ctx: &CallContext,
        requested: &[String],
    ) -> Result<Vec<crate::platform::OutgoingFile>, SkillError> {
        let session = ctx.session();
        let limits = FileLimits::from_config(&self.0.skills_config.send_file);
        let workspace = session.workspace.clone();
        let dm = session.origin.is_dm;
        let paths = requested.to_vec();
        let own = ctx.session_id().as_str().to_owned();
        tokio::task::spawn_blocking(move || {
            preflight::load(preflight::check(&workspace, dm, &own, &paths, &limits)?)
        })
        .await
        .map_err(SkillError::internal)?
        .map_err(|e| preflight_error(&e, requested))
    }
}

/// The answer to a delivery: the message ids, how many files arrived, and what the agent does
/// next (reply under the file, or stop when the reply was already sent; a partial delivery
/// lists the missing files).
fn answer(
    delivery: &crate::platform::FileDelivery,
    requested: usize,
    ids: Vec<MessageId>,
    last: &MessageId,
    reply_sent: bool,
) -> Value {
    let delivered = requested - delivery.failed.len();
    let next_action = if reply_sent {
        "The files were delivered after your reply. Do not call send-reply again; stop here \
         (use edit-reply only if your reply must change)."
            .to_owned()
    } else {
        format!(
            "The files were delivered. Now call send-reply once with your answer; it will be \
             threaded under the file message {last}."
        )
    };
    let mut data = json!({
        "messageId": ids[0],
        "messageIds": ids,
        "filesCount": delivered,
        "nextAction": next_action,
    });
    if delivery.is_partial() {
        let failed: Vec<Value> = delivery
            .failed
            .iter()
            .map(|f| json!({"filename": f.filename, "error": f.error.to_string()}))
            .collect();
        data["partial"] = json!(true);
        data["failedFiles"] = json!(failed);
        data["nextAction"] = json!(format!(
            "Only {delivered} of {requested} files were delivered (see failedFiles); \
             the call counts as done and cannot be repeated. Tell the user in your reply \
             which files are missing. {next_action}"
        ));
    }
    data
}

/// A preflight refusal as `INVALID_PARAMS` pointing at the offending entry of `filePaths`.
fn preflight_error(error: &PreflightError, requested: &[String]) -> SkillError {
    let path = error
        .index_in(requested)
        .map_or_else(|| "/filePaths".to_owned(), |i| format!("/filePaths/{i}"));
    invalid(
        &path,
        format!("{error}. Nothing was sent; fix this and call send-file again."),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::registry::tests::context;

    #[test]
    fn reply_anchor_prefers_the_file_message() {
        let ctx = context();
        let mut files = FileSlot::default();
        assert_eq!(
            FileSlot::reply_anchor(None, &ctx).map(MessageId::as_str),
            Some("m1")
        );
        assert_eq!(
            FileSlot::reply_anchor(Some(&files), &ctx).map(MessageId::as_str),
            Some("m1")
        );
        files.last_message_id = Some("f1".into());
        assert_eq!(
            FileSlot::reply_anchor(Some(&files), &ctx).map(MessageId::as_str),
            Some("f1")
        );
    }
}
