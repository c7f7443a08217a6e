//! The [`PlatformAdapter`] implementation of [`FakePlatform`]: each method records its call,
//! waits the scripted latency, applies a scripted failure, then acts on the in-memory state
//! through the helpers here (delivery, lookup, contract checks).

use std::collections::VecDeque;

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::super::{
    ChannelId, ChatMessage, CustomEmoji, FileDelivery, FileFailure, MessageId, OutgoingFile,
    PlatformAdapter, PlatformError, PlatformKind, ReactionEmoji, SentMessage, TextLimits, UserId,
    UserInfo,
};
use super::{Call, FakePlatform, FileMode, FileRecord, SentRecord, State};
use crate::text::LengthUnit;

impl FakePlatform {
    // ----- shared call plumbing -----

    /// Records `call`, waits the configured latency, then returns the scripted failure for its
    /// operation, if any.
    async fn begin(&self, call: Call) -> Result<(), PlatformError> {
        let op = call.op();
        let latency = {
            let mut state = self.state();
            state.calls.push(call);
            state.latency
        };
        if let Some(latency) = latency {
            tokio::time::sleep(latency).await;
        }
        match self
            .state()
            .failures
            .get_mut(&op)
            .and_then(VecDeque::pop_front)
        {
            Some(Some(error)) => Err(error),
            Some(None) | None => Ok(()),
        }
    }

    fn limit_for(&self, state: &State, channel_id: &str) -> TextLimits {
        if let Some(limits) = state.channel_limits.get(channel_id) {
            return *limits;
        }
        if let Some(limits) = state.text_limit {
            return limits;
        }
        match self.kind {
            PlatformKind::Discord => crate::platform::discord::TEXT_LIMITS,
            PlatformKind::Misskey if channel_id.starts_with("chat:") => {
                crate::platform::misskey::CHAT_TEXT_LIMITS
            }
            PlatformKind::Misskey => crate::platform::misskey::NOTE_TEXT_LIMITS,
            PlatformKind::Console => TextLimits::new(4000, LengthUnit::Chars),
        }
    }

    /// The text limit of `channel_id` (what [`PlatformAdapter::text_limit`] answers).
    fn limit_of(&self, channel_id: &str) -> TextLimits {
        let state = self.state();
        self.limit_for(&state, channel_id)
    }

    fn one_per_file(&self, state: &State, channel_id: &str) -> bool {
        match state.file_mode {
            FileMode::OneMessage => false,
            FileMode::OnePerFile => true,
            FileMode::OnePerFileInChat => channel_id.starts_with("chat:"),
        }
    }

    /// Sends one text message into `channel_id` (shared by `send_message` and `send_dm`).
    fn deliver_text(
        &self,
        channel_id: &str,
        text: &str,
        reply_to: Option<&str>,
        limits: TextLimits,
        dm: bool,
    ) -> Result<SentMessage, PlatformError> {
        check_text(text, limits)?;
        let mut state = self.state();
        if let Some(parent) = reply_to {
            state.find(channel_id, parent)?;
        }
        let sent = state.post_bot_message(channel_id, text);
        state.sent.push(SentRecord {
            channel_id: channel_id.into(),
            message_id: sent.message_id.to_string(),
            text: text.into(),
            reply_to: reply_to.map(str::to_owned),
            dm,
        });
        Ok(sent)
    }

    /// Delivers files into `channel_id` (shared by `send_files` and `send_dm_files`).
    fn deliver_files(
        &self,
        channel_id: &str,
        files: &[OutgoingFile],
        caption: Option<&str>,
        reply_to: Option<&str>,
        limits: TextLimits,
    ) -> Result<FileDelivery, PlatformError> {
        if files.is_empty() {
            return Err(PlatformError::InvalidInput("no files to send".into()));
        }
        if let Some(caption) = caption {
            check_text(caption, limits)?;
        }
        let mut state = self.state();
        if let Some(parent) = reply_to {
            state.find(channel_id, parent)?;
        }
        let mut delivery = FileDelivery::default();
        let mut delivered_names = Vec::new();
        if self.one_per_file(&state, channel_id) {
            for file in files {
                if let Some(error) = state.failing_files.get(&file.filename).cloned() {
                    delivery.failed.push(FileFailure {
                        filename: file.filename.clone(),
                        error,
                    });
                    continue;
                }
                let text = if delivery.messages.is_empty() {
                    caption.unwrap_or_default()
                } else {
                    ""
                };
                delivery
                    .messages
                    .push(state.post_bot_message(channel_id, text));
                delivered_names.push(file.filename.clone());
            }
            if delivery.messages.is_empty() {
                return Err(delivery
                    .failed
                    .first()
                    .map(|failure| failure.error.clone())
                    .unwrap_or_else(|| PlatformError::InvalidInput("no files to send".into())));
            }
        } else {
            if let Some(error) = files
                .iter()
                .find_map(|file| state.failing_files.get(&file.filename).cloned())
            {
                return Err(error);
            }
            delivery
                .messages
                .push(state.post_bot_message(channel_id, caption.unwrap_or_default()));
            delivered_names = files.iter().map(|file| file.filename.clone()).collect();
        }
        state.files.push(FileRecord {
            channel_id: channel_id.into(),
            filenames: delivered_names,
            caption: caption.map(str::to_owned),
            reply_to: reply_to.map(str::to_owned),
            message_ids: delivery
                .message_ids()
                .into_iter()
                .map(MessageId::into_string)
                .collect(),
        });
        Ok(delivery)
    }

    fn check_dm_user(&self, user_id: &str) -> Result<(), PlatformError> {
        if self.state().users.contains_key(user_id) {
            Ok(())
        } else {
            Err(PlatformError::NotFound(format!("user {user_id}")))
        }
    }
}

/// Rejects empty text and text over the limit, as the real platforms do.
fn check_text(text: &str, limits: TextLimits) -> Result<(), PlatformError> {
    if text.trim().is_empty() {
        return Err(PlatformError::InvalidInput("the message is empty".into()));
    }
    if !limits.fits(text) {
        return Err(PlatformError::InvalidInput(format!(
            "the message is {} units long, over the limit of {}",
            limits.len(text),
            limits.max
        )));
    }
    Ok(())
}

impl State {
    /// The clock's time; the clock then advances one second.
    fn tick(&mut self) -> DateTime<Utc> {
        let now = self.clock;
        self.clock += chrono::Duration::seconds(1);
        now
    }

    /// A fresh id with `prefix` and the clock's time.
    pub(super) fn next_message(&mut self, prefix: &str) -> (String, DateTime<Utc>) {
        let id = format!("{prefix}-{}", self.next_id);
        self.next_id += 1;
        (id, self.tick())
    }

    /// Appends a message by the bot to `channel_id`.
    fn post_bot_message(&mut self, channel_id: &str, text: &str) -> SentMessage {
        let (message_id, timestamp) = self.next_message("sent");
        let message = ChatMessage {
            message_id: message_id.as_str().into(),
            user_id: self.bot_user_id.as_str().into(),
            username: self.bot_username.clone(),
            content: text.into(),
            timestamp,
            is_bot: true,
            attachments: Vec::new(),
        };
        self.channels
            .entry(channel_id.into())
            .or_default()
            .push(message);
        SentMessage {
            message_id: message_id.into(),
            timestamp,
        }
    }

    /// Index of `message_id` in `channel_id`'s history.
    fn find(&self, channel_id: &str, message_id: &str) -> Result<usize, PlatformError> {
        self.channels
            .get(channel_id)
            .and_then(|history| history.iter().position(|m| m.message_id == message_id))
            .ok_or_else(|| {
                PlatformError::NotFound(format!("message {message_id} in channel {channel_id}"))
            })
    }

    /// Index of the bot's own message `message_id`; someone else's message is `Forbidden`.
    fn find_own(&self, channel_id: &str, message_id: &str) -> Result<usize, PlatformError> {
        let index = self.find(channel_id, message_id)?;
        let own = self
            .channels
            .get(channel_id)
            .and_then(|history| history.get(index))
            .is_some_and(|m| m.user_id.as_str() == self.bot_user_id);
        if own {
            Ok(index)
        } else {
            Err(PlatformError::Forbidden(format!(
                "message {message_id} was not written by the bot"
            )))
        }
    }

    fn emojis_for(&self, channel_id: &str) -> &[CustomEmoji] {
        self.channel_emojis
            .get(channel_id)
            .map_or(&self.emojis, |emojis| emojis)
    }
}

#[async_trait]
impl PlatformAdapter for FakePlatform {
    fn kind(&self) -> PlatformKind {
        self.kind
    }

    fn bot_user_id(&self) -> Option<UserId> {
        Some(UserId::new(self.state().bot_user_id.clone()))
    }

    fn text_limit(&self, channel_id: &ChannelId) -> TextLimits {
        self.limit_of(channel_id.as_str())
    }

    fn dm_text_limit(&self) -> TextLimits {
        self.state().dm_limit
    }

    async fn send_message(
        &self,
        channel_id: &ChannelId,
        text: &str,
        reply_to: Option<&MessageId>,
    ) -> Result<SentMessage, PlatformError> {
        let channel_id = channel_id.as_str();
        let reply_to = reply_to.map(MessageId::as_str);
        self.begin(Call::SendMessage {
            channel_id: channel_id.into(),
            text: text.into(),
            reply_to: reply_to.map(str::to_owned),
        })
        .await?;
        let limits = self.limit_of(channel_id);
        self.deliver_text(channel_id, text, reply_to, limits, false)
    }

    async fn edit_message(
        &self,
        channel_id: &ChannelId,
        message_id: &MessageId,
        text: &str,
        reply_to: Option<&MessageId>,
    ) -> Result<SentMessage, PlatformError> {
        let channel_id = channel_id.as_str();
        let message_id = message_id.as_str();
        let reply_to = reply_to.map(MessageId::as_str);
        self.begin(Call::EditMessage {
            channel_id: channel_id.into(),
            message_id: message_id.into(),
            text: text.into(),
            reply_to: reply_to.map(str::to_owned),
        })
        .await?;
        check_text(text, self.limit_of(channel_id))?;
        let mut state = self.state();
        let index = state.find_own(channel_id, message_id)?;
        if state.edit_recreates {
            if let Some(parent) = reply_to {
                state.find(channel_id, parent)?;
            }
            if let Some(history) = state.channels.get_mut(channel_id) {
                history.remove(index);
            }
            return Ok(state.post_bot_message(channel_id, text));
        }
        let now = state.tick();
        let message = state
            .channels
            .get_mut(channel_id)
            .and_then(|history| history.get_mut(index))
            .ok_or_else(|| PlatformError::NotFound(format!("message {message_id}")))?;
        message.content = text.into();
        Ok(SentMessage {
            message_id: message_id.into(),
            timestamp: now,
        })
    }

    async fn delete_message(
        &self,
        channel_id: &ChannelId,
        message_id: &MessageId,
    ) -> Result<(), PlatformError> {
        let channel_id = channel_id.as_str();
        let message_id = message_id.as_str();
        self.begin(Call::DeleteMessage {
            channel_id: channel_id.into(),
            message_id: message_id.into(),
        })
        .await?;
        let mut state = self.state();
        let index = state.find_own(channel_id, message_id)?;
        if let Some(history) = state.channels.get_mut(channel_id) {
            history.remove(index);
        }
        Ok(())
    }

    async fn get_message(
        &self,
        channel_id: &ChannelId,
        message_id: &MessageId,
    ) -> Result<ChatMessage, PlatformError> {
        let channel_id = channel_id.as_str();
        let message_id = message_id.as_str();
        self.begin(Call::GetMessage {
            channel_id: channel_id.into(),
            message_id: message_id.into(),
        })
        .await?;
        let state = self.state();
        let index = state.find(channel_id, message_id)?;
        state
            .channels
            .get(channel_id)
            .and_then(|history| history.get(index))
            .cloned()
            .ok_or_else(|| PlatformError::NotFound(format!("message {message_id}")))
    }

    async fn recent_messages(
        &self,
        channel_id: &ChannelId,
        limit: usize,
    ) -> Result<Vec<ChatMessage>, PlatformError> {
        let channel_id = channel_id.as_str();
        self.begin(Call::RecentMessages {
            channel_id: channel_id.into(),
            limit,
        })
        .await?;
        let state = self.state();
        let history = state
            .channels
            .get(channel_id)
            .map(Vec::as_slice)
            .unwrap_or_default();
        let limit = limit.min(100);
        Ok(history[history.len().saturating_sub(limit)..].to_vec())
    }

    /// Matches messages containing any whitespace-separated keyword of `query`,
    /// case-insensitively; returns the latest `limit` matches, oldest first.
    async fn search_messages(
        &self,
        channel_id: &ChannelId,
        query: &str,
        limit: usize,
    ) -> Result<Vec<ChatMessage>, PlatformError> {
        let channel_id = channel_id.as_str();
        self.begin(Call::SearchMessages {
            channel_id: channel_id.into(),
            query: query.into(),
            limit,
        })
        .await?;
        let keywords: Vec<String> = query.split_whitespace().map(str::to_lowercase).collect();
        if keywords.is_empty() {
            return Err(PlatformError::InvalidInput(
                "the search query is empty".into(),
            ));
        }
        let state = self.state();
        let matches: Vec<ChatMessage> = state
            .channels
            .get(channel_id)
            .into_iter()
            .flatten()
            .filter(|message| {
                let content = message.content.to_lowercase();
                keywords.iter().any(|keyword| content.contains(keyword))
            })
            .cloned()
            .collect();
        let limit = limit.min(100);
        Ok(matches[matches.len().saturating_sub(limit)..].to_vec())
    }

    async fn user_info(
        &self,
        channel_id: &ChannelId,
        user_id: &UserId,
    ) -> Result<UserInfo, PlatformError> {
        let channel_id = channel_id.as_str();
        let user_id = user_id.as_str();
        self.begin(Call::UserInfo {
            channel_id: channel_id.into(),
            user_id: user_id.into(),
        })
        .await?;
        self.state()
            .users
            .get(user_id)
            .cloned()
            .ok_or_else(|| PlatformError::NotFound(format!("user {user_id}")))
    }

    async fn add_reaction(
        &self,
        channel_id: &ChannelId,
        message_id: &MessageId,
        emoji: &ReactionEmoji,
    ) -> Result<(), PlatformError> {
        let channel_id = channel_id.as_str();
        let message_id = message_id.as_str();
        self.begin(Call::AddReaction {
            channel_id: channel_id.into(),
            message_id: message_id.into(),
            emoji: emoji.clone(),
        })
        .await?;
        let mut state = self.state();
        state.find(channel_id, message_id)?;
        if let ReactionEmoji::Custom { name, .. } = emoji
            && !state.emojis_for(channel_id).iter().any(|e| &e.name == name)
        {
            return Err(PlatformError::NotFound(format!("custom emoji :{name}:")));
        }
        let reactions = state
            .reactions
            .entry((channel_id.into(), message_id.into()))
            .or_default();
        if !reactions.contains(emoji) {
            reactions.push(emoji.clone());
        }
        Ok(())
    }

    async fn remove_reaction(
        &self,
        channel_id: &ChannelId,
        message_id: &MessageId,
        emoji: &ReactionEmoji,
    ) -> Result<(), PlatformError> {
        let channel_id = channel_id.as_str();
        let message_id = message_id.as_str();
        self.begin(Call::RemoveReaction {
            channel_id: channel_id.into(),
            message_id: message_id.into(),
            emoji: emoji.clone(),
        })
        .await?;
        let mut state = self.state();
        state.find(channel_id, message_id)?;
        if let Some(reactions) = state
            .reactions
            .get_mut(&(channel_id.to_owned(), message_id.to_owned()))
        {
            reactions.retain(|existing| existing != emoji);
        }
        Ok(())
    }

    async fn send_files(
        &self,
        channel_id: &ChannelId,
        files: Vec<OutgoingFile>,
        caption: Option<&str>,
        reply_to: Option<&MessageId>,
    ) -> Result<FileDelivery, PlatformError> {
        let channel_id = channel_id.as_str();
        let reply_to = reply_to.map(MessageId::as_str);
        self.begin(Call::SendFiles {
            channel_id: channel_id.into(),
            files: files.clone(),
            caption: caption.map(str::to_owned),
            reply_to: reply_to.map(str::to_owned),
        })
        .await?;
        let limits = self.limit_of(channel_id);
        self.deliver_files(channel_id, &files, caption, reply_to, limits)
    }

    async fn send_dm(&self, user_id: &UserId, text: &str) -> Result<SentMessage, PlatformError> {
        let user_id = user_id.as_str();
        self.begin(Call::SendDm {
            user_id: user_id.into(),
            text: text.into(),
        })
        .await?;
        self.check_dm_user(user_id)?;
        let limits = self.dm_text_limit();
        self.deliver_text(&self.dm_channel_id(user_id), text, None, limits, true)
    }

    async fn send_dm_files(
        &self,
        user_id: &UserId,
        files: Vec<OutgoingFile>,
        caption: Option<&str>,
    ) -> Result<FileDelivery, PlatformError> {
        let user_id = user_id.as_str();
        self.begin(Call::SendDmFiles {
            user_id: user_id.into(),
            files: files.clone(),
            caption: caption.map(str::to_owned),
        })
        .await?;
        self.check_dm_user(user_id)?;
        let limits = self.dm_text_limit();
        self.deliver_files(&self.dm_channel_id(user_id), &files, caption, None, limits)
    }

    async fn custom_emojis(
        &self,
        channel_id: &ChannelId,
    ) -> Result<Vec<CustomEmoji>, PlatformError> {
        let channel_id = channel_id.as_str();
        self.begin(Call::CustomEmojis {
            channel_id: channel_id.into(),
        })
        .await?;
        Ok(self.state().emojis_for(channel_id).to_vec())
    }

    async fn start_typing(&self, channel_id: &ChannelId) -> Result<(), PlatformError> {
        let channel_id = channel_id.as_str();
        self.begin(Call::StartTyping {
            channel_id: channel_id.into(),
        })
        .await
    }

    async fn thread_starter(
        &self,
        channel_id: &ChannelId,
    ) -> Result<Option<ChatMessage>, PlatformError> {
        self.begin(Call::ThreadStarter {
            channel_id: channel_id.as_str().into(),
        })
        .await?;
        Ok(self
            .state()
            .thread_starters
            .get(channel_id.as_str())
            .cloned())
    }

    /// Discord's fake opens `thread-<message id>` (the same thread again for the same
    /// message); other platforms have no threads.
    async fn open_thread(
        &self,
        channel_id: &ChannelId,
        message_id: &MessageId,
        name: &str,
    ) -> Result<Option<ChannelId>, PlatformError> {
        self.begin(Call::OpenThread {
            channel_id: channel_id.as_str().into(),
            message_id: message_id.as_str().into(),
            name: name.into(),
        })
        .await?;
        Ok((self.kind == PlatformKind::Discord).then(|| format!("thread-{message_id}").into()))
    }
}
