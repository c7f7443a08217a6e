//! Reading back what the stream missed while the daemon was away (the catch-up's
//! [`PlatformAdapter::missed_messages`](crate::platform::PlatformAdapter::missed_messages)).
//!
//! * Mentions and replies in note threads come from one feed, [`MENTIONS_FEED`]: the
//!   notifications (`i/notifications`, types `mention` and `reply`, not marked read). Misskey
//!   has no per-thread inbox, and a thread's channel (`note:{id}`) is named after the note the
//!   bot answers, so every thread is read back through the notifications.
//! * A chat (`chat:{user}`) is read back on its own: `chat/messages/user-timeline`.
//!
//! Both ask for what came after the cursor (`sinceId`: Misskey compares the time its ids carry,
//! so a note id works as the notifications' cursor). When a full page comes back, more arrived
//! than one page holds: the newest page is read too, so the youngest messages are never the ones
//! left out, whichever order the server pages in. Messages are converted as the stream converts
//! them; text commands are not run late (they are left out, with a debug record).

use std::collections::HashMap;

use serde_json::json;

use super::MisskeyAdapter;
use super::commands::{ParsedCommand, parse_command};
use super::convert::{BotIdentity, chat_to_incoming, note_to_incoming};
use super::ids::{Channel, validate_id};
use super::model::{self, Notification};
use crate::platform::{ChannelId, IncomingMessage, MessageId, Missed, PlatformError};

/// The feed of every note thread: the bot's mentions and replies.
pub const MENTIONS_FEED: &str = "mentions";

/// Most items Misskey serves per request.
const MAX_PAGE: usize = 100;

impl MisskeyAdapter {
    /// The catch-up feed of `channel_id`: [`MENTIONS_FEED`] for a note thread, the chat itself
    /// for a chat.
    pub(super) fn feed_of(channel_id: &ChannelId) -> ChannelId {
        match Channel::parse(channel_id.as_str()) {
            Ok(Channel::Note(_)) => ChannelId::from(MENTIONS_FEED),
            _ => channel_id.clone(),
        }
    }

    /// What arrived in `feed` after `after` (see the module header).
    pub(super) async fn missed(
        &self,
        feed: &ChannelId,
        after: &MessageId,
        max: usize,
    ) -> Result<Missed, PlatformError> {
        let after = validate_id(after.as_str(), "message")?;
        let Some(identity) = self.identity() else {
            return Err(PlatformError::Transport(
                "the bot's identity is not known yet".to_owned(),
            ));
        };
        let limit = max.clamp(1, MAX_PAGE);
        let mut messages = if feed.as_str() == MENTIONS_FEED {
            self.missed_notes(after, limit, &identity).await?
        } else {
            match Channel::parse(feed.as_str())? {
                Channel::Chat(peer) => self.missed_chat(&peer, after, limit, &identity).await?,
                Channel::Note(_) => {
                    return Err(PlatformError::InvalidId(format!(
                        "a note thread is read back through the `{MENTIONS_FEED}` feed"
                    )));
                }
                Channel::Post(_) => {
                    return Err(PlatformError::InvalidId(
                        "a channel or timeline the bot posts in is no catch-up feed".to_owned(),
                    ));
                }
            }
        };
        messages.retain(|m| !self.is_text_command(m));
        messages.sort_by(|a, b| {
            (a.timestamp, a.message_id.as_str()).cmp(&(b.timestamp, b.message_id.as_str()))
        });
        let more = messages.len() > max;
        if more {
            messages.drain(..messages.len() - max);
        }
        Ok(Missed { messages, more })
    }

    /// Mentions and replies after `after`.
    async fn missed_notes(
        &self,
        after: &str,
        limit: usize,
        identity: &BotIdentity,
    ) -> Result<Vec<IncomingMessage>, PlatformError> {
        let since = json!({"limit": limit, "sinceId": after,
            "includeTypes": ["mention", "reply"], "markAsRead": false});
        let mut found: Vec<Notification> = self.api.call("i/notifications", since).await?;
        if found.len() >= limit {
            // The newest page may reach back past what the first one read: only as far back.
            let oldest = found
                .iter()
                .filter_map(|n| n.note.as_ref().map(|note| note.created_at))
                .min();
            let newest: Vec<Notification> = self
                .api
                .call(
                    "i/notifications",
                    json!({"limit": limit, "includeTypes": ["mention", "reply"],
                        "markAsRead": false}),
                )
                .await?;
            found.extend(newest.into_iter().filter(|n| {
                n.note
                    .as_ref()
                    .is_some_and(|note| oldest.is_some_and(|oldest| note.created_at >= oldest))
            }));
        }
        let mut by_note: HashMap<String, IncomingMessage> = HashMap::new();
        for notification in found {
            if notification.kind != "mention" && notification.kind != "reply" {
                continue;
            }
            let Some(note) = notification.note else {
                continue;
            };
            self.remember_user(note.user.clone());
            match note_to_incoming(&note, identity, notification.kind == "reply") {
                Ok(mut incoming) => {
                    incoming.location.conversation = Some(self.conversation_of(&note).await);
                    by_note.insert(note.id.clone(), incoming);
                }
                Err(skip) => tracing::debug!(platform = "misskey", message_id = %note.id,
                    reason = skip.as_str(), "missed note ignored"),
            }
        }
        Ok(by_note.into_values().collect())
    }

    /// Chat messages from `peer` after `after`.
    async fn missed_chat(
        &self,
        peer: &str,
        after: &str,
        limit: usize,
        identity: &BotIdentity,
    ) -> Result<Vec<IncomingMessage>, PlatformError> {
        let mut found: Vec<model::ChatMessage> = self
            .api
            .call(
                "chat/messages/user-timeline",
                json!({"userId": peer, "limit": limit, "sinceId": after}),
            )
            .await?;
        if found.len() >= limit {
            let oldest = found.iter().map(|m| m.created_at).min();
            let newest: Vec<model::ChatMessage> = self
                .api
                .call(
                    "chat/messages/user-timeline",
                    json!({"userId": peer, "limit": limit}),
                )
                .await?;
            found.extend(
                newest
                    .into_iter()
                    .filter(|m| oldest.is_some_and(|oldest| m.created_at >= oldest)),
            );
        }
        let mut by_id: HashMap<String, IncomingMessage> = HashMap::new();
        for message in found {
            if message.from_user_id != peer {
                continue;
            }
            let sender = self.sender_of(&message).await;
            match chat_to_incoming(&message, sender.as_ref(), identity) {
                Ok(incoming) => {
                    by_id.insert(message.id.clone(), incoming);
                }
                Err(skip) => tracing::debug!(platform = "misskey", message_id = %message.id,
                    reason = skip.as_str(), "missed chat message ignored"),
            }
        }
        Ok(by_id.into_values().collect())
    }

    /// Whether `message` is a text command (not run late).
    fn is_text_command(&self, message: &IncomingMessage) -> bool {
        if self.commands.is_empty() {
            return false;
        }
        let command = !matches!(
            parse_command(&message.content, &self.commands),
            ParsedCommand::NotCommand
        );
        if command {
            tracing::debug!(platform = "misskey", message_id = %message.message_id,
                "a text command sent while away is not run late");
        }
        command
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn note_threads_share_the_mentions_feed_and_chats_keep_their_own() {
        assert_eq!(
            MisskeyAdapter::feed_of(&ChannelId::from("note:9abc")).as_str(),
            MENTIONS_FEED
        );
        assert_eq!(
            MisskeyAdapter::feed_of(&ChannelId::from("chat:u1")).as_str(),
            "chat:u1"
        );
    }
}
