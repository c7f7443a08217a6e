//! send-voice: the turn's reply, spoken. The daemon has the text spoken by the speech service
//! (`voice::Speaker`, `speech:` in the configuration) and sends the Ogg Opus audio as a Discord
//! voice message (the `IS_VOICE_MESSAGE` flag with its duration and waveform; Discord allows no
//! text on one, so the text goes in the file's description, its alt text) or a Misskey audio
//! file on a note or chat message whose text is the reply's text (and the file's comment).
//!
//! It is the turn's one reply: it takes send-reply's place in [`ReplySlot`] (one successful
//! reply per turn, voice or text; the 4th attempt stops the agent, as send-reply's), threaded
//! to the same anchor. A voice message cannot be edited, so it is not among the messages
//! edit-reply may change. When the speech service fails, nothing is sent and the reply stays
//! free: the agent is told to send the text with send-reply.

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Value, json};

use super::common::{Deps, outgoing_text, params, platform_error, workspace_key};
use super::reply::{
    MAX_REPLY_ATTEMPTS_BEFORE_TERMINATE, ReplySlot, Reservation, released_on_error, reserve_reply,
};
use crate::platform::{MessageId, OutgoingFile, VoiceClip};
use crate::skill_api::{CallContext, SkillError, SkillHandler};
use crate::voice::{NotSpoken, Spoken};

/// The file name of a voice reply (Discord shows voice messages by their flag, not the name).
pub const VOICE_FILE_NAME: &str = "voice-message.ogg";

/// The `send-voice` skill.
pub(crate) struct SendVoice(pub Deps);

#[derive(Deserialize)]
struct VoiceParams {
    text: String,
}

#[async_trait]
impl SkillHandler for SendVoice {
    fn name(&self) -> &str {
        "send-voice"
    }

    fn stops_agent_at(&self) -> Option<u32> {
        Some(MAX_REPLY_ATTEMPTS_BEFORE_TERMINATE)
    }

    async fn call(&self, ctx: &CallContext, raw: Value) -> Result<Value, SkillError> {
        let attempt = ctx.count_attempt(MAX_REPLY_ATTEMPTS_BEFORE_TERMINATE);
        let Reservation::Reserved { anchor } = reserve_reply(ctx) else {
            return Err(SkillError::QuotaExceeded {
                message: "You already sent your reply in this conversation turn (send-reply and \
                          send-voice together answer once per turn). If the user already has \
                          your answer, stop calling skills."
                    .into(),
                terminate: attempt.terminates(),
            });
        };
        released_on_error(ctx, self.send(ctx, raw, anchor.as_ref()).await)
    }
}

impl SendVoice {
    /// Speaks and sends the reply; `Err` when nothing was delivered.
    async fn send(
        &self,
        ctx: &CallContext,
        raw: Value,
        anchor: Option<&MessageId>,
    ) -> Result<Value, SkillError> {
        let session = ctx.session();
        let p: VoiceParams = params(raw)?;
        let text = outgoing_text(&p.text, "/text")?;
        let Some(speaker) = &self.0.speaker else {
            return Err(SkillError::SkillDisabled("send-voice".into()));
        };
        let adapter = self.0.adapter(session)?;
        let who = workspace_key(session)?;
        let spoken = speaker.speak(&who, &text).await.map_err(not_spoken)?;
        ctx.still_in_turn()?;
        let channel = &session.origin.channel_id;
        // The text rides along as the caption when it fits (Misskey's note text; Discord
        // takes no text on a voice message, so there it is only the file's alt text).
        let caption = Some(text.as_str()).filter(|t| adapter.text_limit(channel).fits(t));
        let file = voice_file(spoken.clone(), &text);
        let delivery = adapter
            .send_files(channel, vec![file], caption, anchor)
            .await
            .map_err(|e| with_text_advice(platform_error(e)))?;
        let first = delivery
            .messages
            .first()
            .ok_or_else(|| SkillError::internal(anyhow::anyhow!("a delivery without messages")))?;
        ctx.with_slot(|replies: &mut ReplySlot| {
            replies.last_sent_message_id = Some(first.message_id.clone());
            replies.anchor_message_id = anchor.cloned();
        });
        tracing::info!(
            session_id = %ctx.session_id(),
            chars = text.chars().count(),
            audio_s = spoken.duration.as_secs_f64(),
            threaded = anchor.is_some(),
            "voice reply sent"
        );
        Ok(json!({
            "messageId": first.message_id,
            "timestamp": first.timestamp,
            "durationSecs": spoken.duration.as_secs_f64(),
        }))
    }
}

/// The Ogg Opus file of `spoken`, a voice message with `text` as its alt text.
fn voice_file(spoken: Spoken, text: &str) -> OutgoingFile {
    OutgoingFile::from_bytes(VOICE_FILE_NAME, spoken.bytes)
        .with_mime("audio/ogg")
        .with_description(text)
        .as_voice(VoiceClip {
            duration: spoken.duration,
            waveform: spoken.waveform,
        })
}

/// A platform's refusal of the voice message (Discord: no permission to send voice messages
/// in this channel) as the agent sees it, with the way out: the same answer as text.
fn with_text_advice(error: SkillError) -> SkillError {
    match error {
        SkillError::PlatformError { message, retryable } => SkillError::PlatformError {
            message: format!(
                "{message}; the voice message was not sent: send your answer as text with send-reply"
            ),
            retryable,
        },
        other => other,
    }
}

/// A speech failure as the agent sees it: the user's allowance used up is a quota (send the
/// text instead); a text too long is a parameter problem; the service failing is 502 with
/// the advice to send the text.
fn not_spoken(why: NotSpoken) -> SkillError {
    match why {
        NotSpoken::DailyLimit { .. } => SkillError::QuotaExceeded {
            message: why.to_string(),
            terminate: false,
        },
        NotSpoken::TooLong { .. } => super::common::invalid("/text", why.to_string()),
        other => SkillError::PlatformError {
            message: other.to_string(),
            retryable: false,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_voice_reply_is_one_ogg_file_marked_as_a_voice_message_with_its_text_as_alt_text() {
        let file = voice_file(
            Spoken {
                bytes: vec![1, 2, 3],
                duration: Duration::from_millis(2_500),
                waveform: vec![0, 128, 255],
            },
            "see you at eight",
        );
        assert_eq!(file.filename, "voice-message.ogg");
        assert_eq!(file.mime.as_deref(), Some("audio/ogg"));
        assert_eq!(file.description.as_deref(), Some("see you at eight"));
        let clip = file.voice.expect("a voice message");
        assert_eq!(clip.duration, Duration::from_millis(2_500));
        assert_eq!(clip.waveform, [0, 128, 255]);
    }

    #[test]
    fn speech_failures_tell_the_agent_to_send_text() {
        let quota = not_spoken(NotSpoken::DailyLimit { minutes: 5 });
        assert!(matches!(
            &quota,
            SkillError::QuotaExceeded { terminate: false, message } if message.contains("send-reply")
        ));
        let down = not_spoken(NotSpoken::Unreachable);
        assert!(matches!(
            &down,
            SkillError::PlatformError { retryable: false, message } if message.contains("send-reply")
        ));
        assert!(matches!(
            not_spoken(NotSpoken::TooLong {
                chars: 2_000,
                limit: 1_000
            }),
            SkillError::InvalidParams { .. }
        ));
    }
}
