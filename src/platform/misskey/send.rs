//! Writing operations of [`MisskeyAdapter`]: notes (replies that keep their parent's visibility,
//! and posts of their own in a Misskey channel or on the bot's timeline), chat messages, edits (Misskey cannot edit: a new note / message is created, then the old one
//! deleted), deletions, reactions and file delivery through the drive.

use serde_json::{Map, Value, json};

use super::MisskeyAdapter;
use super::ids::{Channel, Post, validate_id};
use super::model::{self, CreatedNote, DriveFile, Note, Visibility};
use crate::platform::{
    ChannelId, FileDelivery, FileFailure, OutgoingFile, PlatformAdapter, PlatformError,
    ReactionEmoji, SentMessage, TextLimits,
};

/// Most drive files one note may carry.
const MAX_NOTE_FILES: usize = 16;

impl MisskeyAdapter {
    /// Sends `text` as a reply in a note thread or as a chat message.
    pub(super) async fn send_text(
        &self,
        channel: &Channel,
        text: &str,
        reply_to: Option<&str>,
    ) -> Result<SentMessage, PlatformError> {
        check_text(text, self.text_limit(&ChannelId::new(channel.to_string())))?;
        match channel {
            Channel::Note(thread) => {
                let parent = validate_id(reply_to.unwrap_or(thread), "note")?;
                self.create_note(Some(text), parent, &[]).await
            }
            Channel::Chat(user) => self.create_chat(user, Some(text), None).await,
            Channel::Post(post) => {
                let target = NoteTarget::of(post, reply_to)?;
                self.create_note_at(Some(text), target, &[]).await
            }
        }
    }

    /// Re-creates the bot's message `message_id` with `text` (threaded to `reply_to`, else to the
    /// original's parent), then deletes the original. The original's files are kept. Creating
    /// first means a failed edit leaves the original in place rather than losing the message.
    pub(super) async fn edit(
        &self,
        channel: &Channel,
        message_id: &str,
        text: &str,
        reply_to: Option<&str>,
    ) -> Result<SentMessage, PlatformError> {
        check_text(text, self.text_limit(&ChannelId::new(channel.to_string())))?;
        validate_id(message_id, "message")?;
        let (sent, endpoint, key) = match channel {
            Channel::Note(thread) => {
                let original = self.own_note(message_id).await?;
                let anchor = reply_to
                    .or(original.reply_id.as_deref())
                    .unwrap_or(thread.as_str());
                let file_ids: Vec<String> = original.files.iter().map(|f| f.id.clone()).collect();
                let sent = self
                    .create_note(Some(text), validate_id(anchor, "note")?, &file_ids)
                    .await?;
                (sent, "notes/delete", "noteId")
            }
            Channel::Chat(user) => {
                let original = self.own_chat_message(message_id).await?;
                let file_id = original.file.as_ref().map(|f| f.id.as_str());
                let sent = self.create_chat(user, Some(text), file_id).await?;
                (sent, "chat/messages/delete", "messageId")
            }
            Channel::Post(post) => {
                let original = self.own_note(message_id).await?;
                let file_ids: Vec<String> = original.files.iter().map(|f| f.id.clone()).collect();
                let anchor = reply_to.or(original.reply_id.as_deref());
                let sent = self
                    .create_note_at(Some(text), NoteTarget::of(post, anchor)?, &file_ids)
                    .await?;
                (sent, "notes/delete", "noteId")
            }
        };
        // The new message exists: it is the edit's result even if the original stays behind.
        if let Err(error) = self
            .api
            .call_unit(endpoint, json!({ key: message_id }))
            .await
        {
            tracing::warn!(
                platform = "misskey",
                message_id,
                new_message_id = %sent.message_id,
                error = %error,
                "edit re-created the message but could not delete the original"
            );
        }
        Ok(sent)
    }

    /// Deletes the bot's message `message_id`.
    pub(super) async fn delete(
        &self,
        channel: &Channel,
        message_id: &str,
    ) -> Result<(), PlatformError> {
        validate_id(message_id, "message")?;
        match channel {
            Channel::Note(_) | Channel::Post(_) => {
                self.own_note(message_id).await?;
                self.api
                    .call_unit("notes/delete", json!({ "noteId": message_id }))
                    .await
            }
            Channel::Chat(_) => {
                self.own_chat_message(message_id).await?;
                self.api
                    .call_unit("chat/messages/delete", json!({ "messageId": message_id }))
                    .await
            }
        }
    }

    /// Reacts to a note or chat message; reacting twice with the same emoji is not an error.
    pub(super) async fn react(
        &self,
        channel: &Channel,
        message_id: &str,
        emoji: &ReactionEmoji,
    ) -> Result<(), PlatformError> {
        validate_id(message_id, "message")?;
        let reaction = emoji.to_string();
        let result = match channel {
            Channel::Note(_) | Channel::Post(_) => {
                self.api
                    .call_unit(
                        "notes/reactions/create",
                        json!({ "noteId": message_id, "reaction": reaction }),
                    )
                    .await
            }
            Channel::Chat(_) => {
                self.api
                    .call_unit(
                        "chat/messages/react",
                        json!({ "messageId": message_id, "reaction": reaction }),
                    )
                    .await
            }
        };
        ignore_code(result, "ALREADY_REACTED")
    }

    /// Removes the bot's reaction; removing one that is not there is not an error.
    pub(super) async fn unreact(
        &self,
        channel: &Channel,
        message_id: &str,
        emoji: &ReactionEmoji,
    ) -> Result<(), PlatformError> {
        validate_id(message_id, "message")?;
        let result = match channel {
            // A user has at most one reaction per note; Misskey removes whichever it is.
            Channel::Note(_) | Channel::Post(_) => {
                self.api
                    .call_unit("notes/reactions/delete", json!({ "noteId": message_id }))
                    .await
            }
            Channel::Chat(_) => {
                self.api
                    .call_unit(
                        "chat/messages/unreact",
                        json!({ "messageId": message_id, "reaction": emoji.to_string() }),
                    )
                    .await
            }
        };
        ignore_code(result, "NOT_REACTED")
    }

    /// Uploads `files` to the drive and delivers them: one note with every file, or one chat
    /// message per file with the caption on the first.
    pub(super) async fn files(
        &self,
        channel: &Channel,
        files: Vec<OutgoingFile>,
        caption: Option<&str>,
        reply_to: Option<&str>,
    ) -> Result<FileDelivery, PlatformError> {
        if files.is_empty() {
            return Err(PlatformError::InvalidInput("no files to send".into()));
        }
        let caption = caption.filter(|c| !c.trim().is_empty());
        if let Some(caption) = caption {
            check_text(
                caption,
                self.text_limit(&ChannelId::new(channel.to_string())),
            )?;
        }
        match channel {
            Channel::Note(thread) => {
                let parent = validate_id(reply_to.unwrap_or(thread), "note")?;
                self.note_with_files(files, caption, NoteTarget::Reply(parent))
                    .await
            }
            Channel::Chat(user) => self.chat_files(user, files, caption).await,
            Channel::Post(post) => {
                let target = NoteTarget::of(post, reply_to)?;
                self.note_with_files(files, caption, target).await
            }
        }
    }

    async fn note_with_files(
        &self,
        files: Vec<OutgoingFile>,
        caption: Option<&str>,
        target: NoteTarget<'_>,
    ) -> Result<FileDelivery, PlatformError> {
        if files.len() > MAX_NOTE_FILES {
            return Err(PlatformError::InvalidInput(format!(
                "a Misskey note carries at most {MAX_NOTE_FILES} files, got {}",
                files.len()
            )));
        }
        let mut uploaded = Vec::with_capacity(files.len());
        for file in files {
            match self.upload(file).await {
                Ok(drive) => uploaded.push(drive.id),
                Err(error) => {
                    self.delete_drive_files(&uploaded).await;
                    return Err(error);
                }
            }
        }
        match self.create_note_at(caption, target, &uploaded).await {
            Ok(sent) => Ok(FileDelivery {
                messages: vec![sent],
                failed: Vec::new(),
            }),
            Err(error) => {
                self.delete_drive_files(&uploaded).await;
                Err(error)
            }
        }
    }

    async fn chat_files(
        &self,
        user: &str,
        files: Vec<OutgoingFile>,
        caption: Option<&str>,
    ) -> Result<FileDelivery, PlatformError> {
        let mut delivery = FileDelivery::default();
        let mut blocked: Option<PlatformError> = None;
        for file in files {
            let filename = file.filename.clone();
            if let Some(error) = &blocked {
                delivery.failed.push(FileFailure {
                    filename,
                    error: error.clone(),
                });
                continue;
            }
            let drive = match self.upload(file).await {
                Ok(drive) => drive,
                Err(error) => {
                    delivery.failed.push(FileFailure { filename, error });
                    continue;
                }
            };
            let text = if delivery.messages.is_empty() {
                caption
            } else {
                None
            };
            match self.create_chat(user, text, Some(&drive.id)).await {
                Ok(sent) => delivery.messages.push(sent),
                Err(error) => {
                    tracing::warn!(
                        platform = "misskey",
                        file = %filename,
                        error = %error,
                        "chat file message failed; removing its upload"
                    );
                    self.delete_drive_files(std::slice::from_ref(&drive.id))
                        .await;
                    // The recipient refuses us: the remaining files would fail the same way.
                    if matches!(error, PlatformError::Forbidden(_)) {
                        blocked = Some(error.clone());
                    }
                    delivery.failed.push(FileFailure { filename, error });
                }
            }
        }
        if delivery.messages.is_empty() {
            return Err(delivery
                .failed
                .into_iter()
                .next()
                .map(|failure| failure.error)
                .unwrap_or_else(|| PlatformError::InvalidInput("no files to send".into())));
        }
        Ok(delivery)
    }

    async fn upload(&self, file: OutgoingFile) -> Result<DriveFile, PlatformError> {
        let (filename, mime) = (file.filename.clone(), file.mime.clone());
        let comment = file.description.clone();
        let bytes = file.into_bytes().await?;
        self.api
            .upload(&filename, bytes, mime.as_deref(), comment.as_deref())
            .await
    }

    /// Deletes drive files that no message references (best effort: failures are logged).
    async fn delete_drive_files(&self, file_ids: &[String]) {
        for file_id in file_ids {
            if let Err(error) = self
                .api
                .call_unit("drive/files/delete", json!({ "fileId": file_id }))
                .await
            {
                tracing::warn!(platform = "misskey", file_id = %file_id, error = %error,
                    "could not delete an unreferenced drive file");
            }
        }
    }

    /// Creates a note at `target`: a reply, or a post of its own.
    async fn create_note_at(
        &self,
        text: Option<&str>,
        target: NoteTarget<'_>,
        file_ids: &[String],
    ) -> Result<SentMessage, PlatformError> {
        match target {
            NoteTarget::Reply(parent) => self.create_note(text, parent, file_ids).await,
            NoteTarget::Post(post) => self.create_post(text, post, file_ids).await,
        }
    }

    /// Creates a note that answers no note: in a Misskey channel, or on the bot's timeline
    /// with the post's visibility.
    async fn create_post(
        &self,
        text: Option<&str>,
        post: &Post,
        file_ids: &[String],
    ) -> Result<SentMessage, PlatformError> {
        let mut params = Map::new();
        match post {
            Post::Community(channel) => {
                params.insert("channelId".into(), Value::String(channel.clone()));
            }
            Post::Timeline(visibility) => {
                params.insert(
                    "visibility".into(),
                    Value::String(visibility.as_str().to_owned()),
                );
            }
        }
        if let Some(text) = text {
            params.insert("text".into(), Value::String(text.to_owned()));
        }
        if !file_ids.is_empty() {
            params.insert("fileIds".into(), json!(file_ids));
        }
        let created: CreatedNote = self.api.call("notes/create", Value::Object(params)).await?;
        Ok(SentMessage {
            message_id: created.created_note.id.into(),
            timestamp: created.created_note.created_at,
        })
    }

    /// Creates a note replying to `parent_id`, with the parent's visibility (see
    /// [`reply_visibility`]).
    async fn create_note(
        &self,
        text: Option<&str>,
        parent_id: &str,
        file_ids: &[String],
    ) -> Result<SentMessage, PlatformError> {
        let parent: Note = self
            .api
            .call("notes/show", json!({ "noteId": parent_id }))
            .await?;
        let mut params = reply_visibility(&parent, self.bot_id().as_deref());
        params.insert("replyId".into(), Value::String(parent_id.to_owned()));
        if let Some(text) = text {
            params.insert("text".into(), Value::String(text.to_owned()));
        }
        if !file_ids.is_empty() {
            params.insert("fileIds".into(), json!(file_ids));
        }
        let created: CreatedNote = self.api.call("notes/create", Value::Object(params)).await?;
        self.remember_reply(&created.created_note.id, parent_id);
        Ok(SentMessage {
            message_id: created.created_note.id.into(),
            timestamp: created.created_note.created_at,
        })
    }

    async fn create_chat(
        &self,
        user: &str,
        text: Option<&str>,
        file_id: Option<&str>,
    ) -> Result<SentMessage, PlatformError> {
        let mut params = Map::new();
        params.insert("toUserId".into(), Value::String(user.to_owned()));
        if let Some(text) = text {
            params.insert("text".into(), Value::String(text.to_owned()));
        }
        if let Some(file_id) = file_id {
            params.insert("fileId".into(), Value::String(file_id.to_owned()));
        }
        let message: model::ChatMessage = self
            .api
            .call("chat/messages/create-to-user", Value::Object(params))
            .await?;
        Ok(SentMessage {
            message_id: message.id.into(),
            timestamp: message.created_at,
        })
    }

    /// The note `note_id`, which must be the bot's.
    async fn own_note(&self, note_id: &str) -> Result<Note, PlatformError> {
        let note: Note = self
            .api
            .call("notes/show", json!({ "noteId": note_id }))
            .await?;
        if Some(note.user_id.as_str()) != self.bot_id().as_deref() {
            return Err(PlatformError::Forbidden(format!(
                "note {note_id} was not written by the bot"
            )));
        }
        Ok(note)
    }

    /// The chat message `message_id`, which must be the bot's.
    async fn own_chat_message(
        &self,
        message_id: &str,
    ) -> Result<model::ChatMessage, PlatformError> {
        let message: model::ChatMessage = self
            .api
            .call("chat/messages/show", json!({ "messageId": message_id }))
            .await?;
        if Some(message.from_user_id.as_str()) != self.bot_id().as_deref() {
            return Err(PlatformError::Forbidden(format!(
                "chat message {message_id} was not written by the bot"
            )));
        }
        Ok(message)
    }
}

/// Where a note goes: a reply to a note, or a post of its own.
#[derive(Clone, Copy)]
enum NoteTarget<'a> {
    /// A reply to this note.
    Reply(&'a str),
    /// A post in a channel or on the bot's timeline.
    Post(&'a Post),
}

impl<'a> NoteTarget<'a> {
    /// A post at `post`, or a reply to `reply_to` when given (a note the session itself sent,
    /// e.g. the file note a reply follows).
    fn of(post: &'a Post, reply_to: Option<&'a str>) -> Result<Self, PlatformError> {
        Ok(match reply_to {
            Some(parent) => Self::Reply(validate_id(parent, "note")?),
            None => Self::Post(post),
        })
    }
}

/// The visibility parameters of a reply to `parent`: the same visibility; a `specified` parent's
/// audience (its author and visible users, without the bot itself) stays the audience; a
/// local-only parent keeps the reply local.
pub fn reply_visibility(parent: &Note, bot_user_id: Option<&str>) -> Map<String, Value> {
    let mut params = Map::new();
    params.insert(
        "visibility".into(),
        Value::String(parent.visibility.as_str().to_owned()),
    );
    if parent.visibility == Visibility::Specified {
        let mut audience: Vec<&str> = Vec::new();
        for id in std::iter::once(&parent.user_id).chain(&parent.visible_user_ids) {
            if Some(id.as_str()) != bot_user_id && !audience.contains(&id.as_str()) {
                audience.push(id);
            }
        }
        params.insert("visibleUserIds".into(), json!(audience));
    }
    if parent.local_only {
        params.insert("localOnly".into(), Value::Bool(true));
    }
    params
}

/// Rejects empty text and text over the limit before any request (adapters never truncate).
fn check_text(text: &str, limits: TextLimits) -> Result<(), PlatformError> {
    if text.trim().is_empty() {
        return Err(PlatformError::InvalidInput("the message is empty".into()));
    }
    if !limits.fits(text) {
        return Err(PlatformError::InvalidInput(format!(
            "the message is {} characters long, over Misskey's limit of {}",
            limits.len(text),
            limits.max
        )));
    }
    Ok(())
}

/// Turns the API error `code` into success (idempotent reactions).
fn ignore_code(result: Result<(), PlatformError>, code: &str) -> Result<(), PlatformError> {
    match result {
        Err(PlatformError::Api { code: Some(c), .. }) if c == code => Ok(()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parent(visibility: &str, visible: &[&str], local_only: bool) -> Note {
        serde_json::from_value(json!({
            "id": "p", "createdAt": "2025-05-01T10:00:00Z", "userId": "alice",
            "user": {"id": "alice", "username": "alice"}, "text": "hi",
            "visibility": visibility, "visibleUserIds": visible, "localOnly": local_only
        }))
        .expect("note")
    }

    #[test]
    fn replies_keep_the_parents_visibility() {
        for visibility in ["public", "home", "followers"] {
            let params = reply_visibility(&parent(visibility, &[], false), Some("bot"));
            assert_eq!(Value::Object(params), json!({"visibility": visibility}));
        }
        let params = reply_visibility(&parent("specified", &["bot"], false), Some("bot"));
        assert_eq!(
            Value::Object(params),
            json!({"visibility": "specified", "visibleUserIds": ["alice"]})
        );
        let params = reply_visibility(
            &parent("specified", &["bot", "carol", "alice"], true),
            Some("bot"),
        );
        assert_eq!(
            Value::Object(params),
            json!({"visibility": "specified", "visibleUserIds": ["alice", "carol"], "localOnly": true})
        );
    }

    #[test]
    fn text_checks_match_the_limits() {
        assert!(check_text("ok", crate::platform::misskey::CHAT_TEXT_LIMITS).is_ok());
        assert!(matches!(
            check_text(" \n", crate::platform::misskey::CHAT_TEXT_LIMITS),
            Err(PlatformError::InvalidInput(_))
        ));
        assert!(
            check_text(
                &"あ".repeat(3000),
                crate::platform::misskey::NOTE_TEXT_LIMITS
            )
            .is_ok()
        );
        assert!(
            check_text(
                &"あ".repeat(3001),
                crate::platform::misskey::NOTE_TEXT_LIMITS
            )
            .is_err()
        );
        assert!(
            check_text(
                &"x".repeat(2001),
                crate::platform::misskey::CHAT_TEXT_LIMITS
            )
            .is_err()
        );
    }

    #[test]
    fn idempotent_reaction_codes_are_ignored() {
        let err = |code: &str| PlatformError::Api {
            status: 400,
            code: Some(code.into()),
            message: "x".into(),
        };
        assert_eq!(
            ignore_code(Err(err("ALREADY_REACTED")), "ALREADY_REACTED"),
            Ok(())
        );
        assert_eq!(
            ignore_code(Err(err("NO_SUCH_NOTE")), "ALREADY_REACTED"),
            Err(err("NO_SUCH_NOTE"))
        );
    }
}
