//! Reading operations of [`MisskeyAdapter`]: one note or chat message of the conversation, the
//! history of a note thread (`notes/conversation` ancestors + the note + `notes/children`), of
//! a chat (`chat/messages/user-timeline`), of a Misskey channel a post goes to
//! (`channels/timeline`) or of the bot's own timeline (`users/notes`: its own notes only),
//! keyword search, and the instance's custom emojis.
//! Everything is returned oldest first, and only what the conversation may read (`scope.rs`).

use std::collections::HashSet;

use serde_json::json;

use super::MisskeyAdapter;
use super::convert::{chat_to_history, note_to_history};
use super::ids::{Channel, Post, validate_id};
use super::model::{self, EmojiList, Note, User, Visibility};
use super::scope::{ThreadScope, as_not_found, in_chat, not_found};
use crate::platform::{ChatMessage, CustomEmoji, PlatformError};

/// Whether `note` belongs to the place `post` names: a public, home or followers note of that
/// Misskey channel, or one of the bot's own notes for its timeline (never a `specified` note:
/// that is someone's conversation).
fn in_post(note: &Note, post: &Post, bot: Option<&str>) -> bool {
    if note.visibility == Visibility::Specified {
        return false;
    }
    match post {
        Post::Community(id) => note.channel_id.as_deref() == Some(id.as_str()),
        Post::Timeline(_) => bot == Some(note.user_id.as_str()),
    }
}

/// Most items Misskey serves per request.
const MAX_PAGE: usize = 100;
/// Most keywords searched separately in a chat (Misskey's chat search matches one substring).
const MAX_CHAT_KEYWORDS: usize = 5;

impl MisskeyAdapter {
    /// One note or chat message of the conversation (`scope.rs`): a note of the channel's
    /// thread that the session's readers may read, or a chat message between the bot and the
    /// chat's partner. Anything else is [`not_found`], like a missing id.
    pub(super) async fn get(
        &self,
        channel: &Channel,
        message_id: &str,
    ) -> Result<ChatMessage, PlatformError> {
        validate_id(message_id, "message")?;
        let bot = self.bot_id();
        match channel {
            Channel::Note(trigger_id) => {
                let note = self
                    .thread_note(trigger_id, message_id)
                    .await
                    .map_err(as_not_found)?;
                Ok(note_to_history(&note, bot.as_deref()))
            }
            Channel::Chat(peer) => {
                let message: model::ChatMessage = self
                    .api
                    .call("chat/messages/show", json!({ "messageId": message_id }))
                    .await
                    .map_err(as_not_found)?;
                if !in_chat(&message, bot.as_deref(), peer) {
                    return Err(not_found());
                }
                let sender = self.sender_of(&message).await;
                Ok(chat_to_history(&message, sender.as_ref(), bot.as_deref()))
            }
            Channel::Post(post) => {
                let note = self.show_note(message_id).await.map_err(as_not_found)?;
                if !in_post(&note, post, bot.as_deref()) {
                    return Err(not_found());
                }
                Ok(note_to_history(&note, bot.as_deref()))
            }
        }
    }

    /// Note `note_id` when it belongs to the thread of `trigger_id` and its readers may read it.
    async fn thread_note(&self, trigger_id: &str, note_id: &str) -> Result<Note, PlatformError> {
        let note: Note = self.show_note(note_id).await?;
        let trigger = if note.id == trigger_id {
            note.clone()
        } else {
            self.show_note(trigger_id).await?
        };
        let scope = ThreadScope::of(&trigger);
        if !scope.admits(&note) {
            return Err(not_found());
        }
        if scope.is_trigger_or_child(&note) || trigger.reply_id.as_deref() == Some(note_id) {
            return Ok(note);
        }
        if trigger.reply_id.is_some() {
            let ancestors: Vec<Note> = self
                .api
                .call(
                    "notes/conversation",
                    json!({ "noteId": trigger_id, "limit": MAX_PAGE }),
                )
                .await?;
            if ancestors.iter().any(|ancestor| ancestor.id == note.id) {
                return Ok(note);
            }
        }
        Err(not_found())
    }

    async fn show_note(&self, note_id: &str) -> Result<Note, PlatformError> {
        self.api
            .call("notes/show", json!({ "noteId": note_id }))
            .await
    }

    /// The latest `limit` (1–100) messages of the thread or chat, oldest first.
    pub(super) async fn recent(
        &self,
        channel: &Channel,
        limit: usize,
    ) -> Result<Vec<ChatMessage>, PlatformError> {
        let limit = limit.clamp(1, MAX_PAGE);
        let bot = self.bot_id();
        let mut messages = match channel {
            Channel::Note(note_id) => {
                let params = json!({ "noteId": note_id, "limit": limit });
                let ancestors: Vec<Note> =
                    self.api.call("notes/conversation", params.clone()).await?;
                let note: Note = self.show_note(note_id).await?;
                let children: Vec<Note> = self.api.call("notes/children", params).await?;
                let scope = ThreadScope::of(&note);
                ancestors
                    .iter()
                    .chain(std::iter::once(&note))
                    .chain(&children)
                    .filter(|note| scope.admits(note))
                    .map(|note| note_to_history(note, bot.as_deref()))
                    .collect()
            }
            Channel::Chat(user_id) => {
                let timeline: Vec<model::ChatMessage> = self
                    .api
                    .call(
                        "chat/messages/user-timeline",
                        json!({ "userId": user_id, "limit": limit }),
                    )
                    .await?;
                self.chat_history(&timeline, user_id).await
            }
            Channel::Post(post) => {
                let notes: Vec<Note> = match post {
                    Post::Community(id) => {
                        self.api
                            .call(
                                "channels/timeline",
                                json!({ "channelId": id, "limit": limit }),
                            )
                            .await?
                    }
                    Post::Timeline(_) => {
                        let Some(bot) = bot.as_deref() else {
                            return Err(PlatformError::Transport(
                                "the bot's identity is not known yet".to_owned(),
                            ));
                        };
                        self.api
                            .call("users/notes", json!({ "userId": bot, "limit": limit }))
                            .await?
                    }
                };
                notes
                    .iter()
                    .filter(|note| in_post(note, post, bot.as_deref()))
                    .map(|note| note_to_history(note, bot.as_deref()))
                    .collect()
            }
        };
        oldest_first(&mut messages);
        keep_latest(&mut messages, limit);
        Ok(messages)
    }

    /// Messages of the thread or chat containing any keyword of `query` (case-insensitive),
    /// the latest `limit` of them, oldest first. A note thread is searched in its history (the
    /// instance-wide `notes/search` cannot be limited to a thread); a chat through
    /// `chat/messages/search`, one request per keyword.
    pub(super) async fn search(
        &self,
        channel: &Channel,
        query: &str,
        limit: usize,
    ) -> Result<Vec<ChatMessage>, PlatformError> {
        let keywords = keywords(query);
        if keywords.is_empty() {
            return Err(PlatformError::InvalidInput(
                "the search query is empty".into(),
            ));
        }
        let limit = limit.clamp(1, MAX_PAGE);
        let mut found = match channel {
            Channel::Note(_) | Channel::Post(_) => {
                let mut history = self.recent(channel, MAX_PAGE).await?;
                history.retain(|message| {
                    let content = message.content.to_lowercase();
                    keywords.iter().any(|keyword| content.contains(keyword))
                });
                history
            }
            Channel::Chat(user_id) => {
                let mut hits: Vec<model::ChatMessage> = Vec::new();
                for keyword in keywords.iter().take(MAX_CHAT_KEYWORDS) {
                    let page: Vec<model::ChatMessage> = self
                        .api
                        .call(
                            "chat/messages/search",
                            json!({ "query": keyword, "userId": user_id, "limit": limit }),
                        )
                        .await?;
                    hits.extend(page);
                }
                self.chat_history(&hits, user_id).await
            }
        };
        oldest_first(&mut found);
        keep_latest(&mut found, limit);
        Ok(found)
    }

    /// The instance's custom emojis.
    pub(super) async fn emojis(&self) -> Result<Vec<CustomEmoji>, PlatformError> {
        let list: EmojiList = self.api.call("emojis", json!({})).await?;
        Ok(list
            .emojis
            .into_iter()
            .map(|emoji| CustomEmoji {
                name: emoji.name,
                id: None,
                animated: false,
            })
            .collect())
    }

    /// History entries for chat messages with `peer`, with names for both sides.
    async fn chat_history(&self, messages: &[model::ChatMessage], peer: &str) -> Vec<ChatMessage> {
        let bot = self.bot_id();
        let peer_user = self.lookup_user(peer).await;
        let bot_user = match &bot {
            Some(bot) => self.lookup_user(bot).await,
            None => None,
        };
        messages
            .iter()
            .map(|message| {
                let sender = if message.from_user_id == peer {
                    peer_user.as_ref()
                } else {
                    bot_user.as_ref()
                };
                chat_to_history(message, sender, bot.as_deref())
            })
            .collect()
    }

    /// The sender of a chat message: embedded, cached or looked up.
    pub(super) async fn sender_of(&self, message: &model::ChatMessage) -> Option<User> {
        match &message.from_user {
            Some(user) => {
                self.remember_user(user.clone());
                Some(user.clone())
            }
            None => self.lookup_user(&message.from_user_id).await,
        }
    }
}

/// Lower-cased, de-duplicated whitespace-separated keywords.
fn keywords(query: &str) -> Vec<String> {
    let mut seen = HashSet::new();
    query
        .split_whitespace()
        .map(str::to_lowercase)
        .filter(|keyword| seen.insert(keyword.clone()))
        .collect()
}

/// Sorts by time (then id) and drops duplicate ids.
fn oldest_first(messages: &mut Vec<ChatMessage>) {
    messages.sort_by(|a, b| {
        a.timestamp
            .cmp(&b.timestamp)
            .then_with(|| a.message_id.cmp(&b.message_id))
    });
    let mut seen = HashSet::new();
    messages.retain(|message| seen.insert(message.message_id.clone()));
}

/// Keeps the last `limit` entries.
fn keep_latest(messages: &mut Vec<ChatMessage>, limit: usize) {
    if messages.len() > limit {
        messages.drain(..messages.len() - limit);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{TimeZone, Utc};

    fn message(id: &str, second: u32) -> ChatMessage {
        ChatMessage {
            message_id: id.into(),
            user_id: "u".into(),
            username: "u".into(),
            content: String::new(),
            timestamp: Utc
                .with_ymd_and_hms(2025, 1, 1, 0, 0, second)
                .single()
                .unwrap_or_default(),
            is_bot: false,
            attachments: Vec::new(),
        }
    }

    #[test]
    fn history_is_sorted_deduplicated_and_trimmed() {
        let mut messages = vec![
            message("c", 3),
            message("a", 1),
            message("b", 2),
            message("a", 1),
        ];
        oldest_first(&mut messages);
        let ids: Vec<&str> = messages.iter().map(|m| m.message_id.as_str()).collect();
        assert_eq!(ids, vec!["a", "b", "c"]);
        keep_latest(&mut messages, 2);
        let ids: Vec<&str> = messages.iter().map(|m| m.message_id.as_str()).collect();
        assert_eq!(ids, vec!["b", "c"]);
    }

    #[test]
    fn keywords_are_lowercased_and_unique() {
        assert_eq!(keywords(" Coffee beans coffee "), vec!["coffee", "beans"]);
        assert!(keywords("  ").is_empty());
    }

    fn note(user: &str, visibility: &str, channel: Option<&str>) -> Note {
        serde_json::from_value(serde_json::json!({
            "id": "n1", "createdAt": "2025-01-01T00:00:00Z", "userId": user,
            "user": {"id": user, "username": user}, "text": "t",
            "visibility": visibility, "channelId": channel,
        }))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    /// A post's place reads only its own notes: a channel's non-specified notes, or on the
    /// timeline the bot's own; never a specified note.
    #[test]
    fn a_posts_place_reads_only_its_own_notes() {
        let channel = Post::Community("c1".into());
        let timeline = Post::Timeline(super::super::ids::TimelineVisibility::Home);
        let bot = Some("bot");
        assert!(in_post(&note("alice", "public", Some("c1")), &channel, bot));
        assert!(!in_post(
            &note("alice", "public", Some("c2")),
            &channel,
            bot
        ));
        assert!(!in_post(&note("alice", "public", None), &channel, bot));
        assert!(!in_post(
            &note("alice", "specified", Some("c1")),
            &channel,
            bot
        ));
        assert!(in_post(&note("bot", "home", None), &timeline, bot));
        assert!(!in_post(&note("alice", "public", None), &timeline, bot));
        assert!(!in_post(&note("bot", "specified", None), &timeline, bot));
        assert!(!in_post(&note("bot", "public", None), &timeline, None));
    }
}
