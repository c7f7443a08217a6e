//! The conversation of a front end that is its own platform — `air-friends chat`'s terminal,
//! the operator console's *Chat* page — kept in memory: every message with an id of its own
//! (`m1`, `m2`, ...), so the skills that read, edit or search a conversation work there as on
//! Discord. One home for what both front ends answer to `get_message`, `recent_messages`,
//! `search_messages`, `edit_message` and `delete_message`.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use chrono::Utc;

use super::{ChatMessage, MessageId, PlatformError, SentMessage};
use crate::sync::Recover;

/// Messages kept at most (the oldest go first): a long-running daemon's page must not grow
/// without bound.
const KEPT: usize = 2_000;

/// A conversation in memory.
#[derive(Debug, Default)]
pub struct Transcript {
    messages: Mutex<Vec<ChatMessage>>,
    next_id: AtomicU64,
}

impl Transcript {
    /// An empty conversation.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a message by `user_id` (`username`), the bot's when `is_bot`; answers it with its
    /// new id.
    pub fn record(
        &self,
        user_id: &str,
        username: &str,
        content: &str,
        is_bot: bool,
    ) -> ChatMessage {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed) + 1;
        let m = ChatMessage {
            message_id: format!("m{id}").into(),
            user_id: user_id.into(),
            username: username.to_owned(),
            content: content.to_owned(),
            timestamp: Utc::now(),
            is_bot,
            attachments: Vec::new(),
        };
        let mut messages = self.messages.locked();
        messages.push(m.clone());
        if messages.len() > KEPT {
            let over = messages.len() - KEPT;
            messages.drain(..over);
        }
        m
    }

    /// Replaces the text of the bot's message `message_id` (another's is not found).
    pub fn edit_bot(
        &self,
        message_id: &MessageId,
        text: &str,
    ) -> Result<SentMessage, PlatformError> {
        let mut messages = self.messages.locked();
        let m = messages
            .iter_mut()
            .find(|m| m.message_id == *message_id && m.is_bot)
            .ok_or_else(|| PlatformError::NotFound(format!("message {message_id}")))?;
        m.content = text.to_owned();
        Ok(SentMessage {
            message_id: m.message_id.clone(),
            timestamp: Utc::now(),
        })
    }

    /// Removes the message `message_id`.
    pub fn delete(&self, message_id: &MessageId) -> Result<(), PlatformError> {
        let mut messages = self.messages.locked();
        let before = messages.len();
        messages.retain(|m| m.message_id != *message_id);
        if messages.len() == before {
            return Err(PlatformError::NotFound(format!("message {message_id}")));
        }
        Ok(())
    }

    /// The message `message_id`.
    pub fn get(&self, message_id: &MessageId) -> Result<ChatMessage, PlatformError> {
        self.messages
            .locked()
            .iter()
            .find(|m| m.message_id == *message_id)
            .cloned()
            .ok_or_else(|| PlatformError::NotFound(format!("message {message_id}")))
    }

    /// The latest `limit` messages, oldest first.
    pub fn recent(&self, limit: usize) -> Vec<ChatMessage> {
        let messages = self.messages.locked();
        let start = messages.len().saturating_sub(limit);
        messages[start..].to_vec()
    }

    /// The latest `limit` messages holding any word of `query` (case-insensitive), oldest
    /// first.
    pub fn search(&self, query: &str, limit: usize) -> Vec<ChatMessage> {
        let words: Vec<String> = query.split_whitespace().map(str::to_lowercase).collect();
        let messages = self.messages.locked();
        let mut hits: Vec<ChatMessage> = messages
            .iter()
            .rev()
            .filter(|m| {
                let c = m.content.to_lowercase();
                words.iter().any(|w| c.contains(w.as_str()))
            })
            .take(limit)
            .cloned()
            .collect();
        hits.reverse();
        hits
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_numbered_edited_found_and_deleted() {
        let t = Transcript::new();
        let hello = t.record("me", "me", "Hello there", false);
        let answer = t.record("bot", "bot", "Hi!", true);
        assert_eq!(hello.message_id.as_str(), "m1");
        assert_eq!(answer.message_id.as_str(), "m2");
        assert!(t.edit_bot(&hello.message_id, "x").is_err(), "not the bot's");
        t.edit_bot(&answer.message_id, "Hi again!").unwrap();
        assert_eq!(t.get(&answer.message_id).unwrap().content, "Hi again!");
        assert_eq!(t.search("HELLO", 5).len(), 1);
        assert_eq!(t.recent(1)[0].content, "Hi again!");
        t.delete(&hello.message_id).unwrap();
        assert!(t.get(&hello.message_id).is_err());
        assert!(t.delete(&hello.message_id).is_err());
    }

    #[test]
    fn only_the_latest_messages_are_kept() {
        let t = Transcript::new();
        for i in 0..KEPT + 5 {
            t.record("me", "me", &i.to_string(), false);
        }
        let all = t.recent(usize::MAX);
        assert_eq!(all.len(), KEPT);
        assert_eq!(all[0].content, "5");
    }
}
