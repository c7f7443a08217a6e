//! Conversions from Misskey's notes and chat messages to the platform-neutral types: what the
//! router receives ([`IncomingMessage`]) and what history calls return ([`ChatMessage`]), plus
//! the bot-mention stripping (`@bot`, `@bot@host`) both rely on.

use super::ids::Channel;
use super::model::{self, DriveFile, Note, User, Visibility};
use crate::platform::{Attachment, ChatMessage, IncomingMessage, MessageId, PlatformKind};

/// Who the bot is, for recognising its own messages and its mentions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BotIdentity {
    /// The bot's user id (from `i`).
    pub user_id: String,
    /// The bot's account name, without `@`.
    pub username: String,
    /// The instance host (`host[:port]`), for `@bot@host` mentions.
    pub host: String,
}

/// Why an event was not turned into a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Skip {
    /// The bot's own note or chat message.
    OwnMessage,
    /// Written by another bot account.
    OtherBot,
    /// A renote without text or files: nothing to answer.
    PureRenote,
    /// A chat room message (only 1:1 chats are handled).
    RoomMessage,
}

impl Skip {
    /// A short name for logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Skip::OwnMessage => "own_message",
            Skip::OtherBot => "other_bot",
            Skip::PureRenote => "pure_renote",
            Skip::RoomMessage => "room_message",
        }
    }
}

/// Turns a note delivered by the `main` channel (`mention` or `reply`) into an
/// [`IncomingMessage`] on channel `note:{note.id}`. `reply_event` is true for a `reply` event,
/// which Misskey sends only for replies to the bot's notes.
pub fn note_to_incoming(
    note: &Note,
    bot: &BotIdentity,
    reply_event: bool,
) -> Result<IncomingMessage, Skip> {
    if note.user_id == bot.user_id {
        return Err(Skip::OwnMessage);
    }
    if note.user.is_bot {
        return Err(Skip::OtherBot);
    }
    if note.renote_id.is_some() && note.text.is_none() && note.files.is_empty() {
        return Err(Skip::PureRenote);
    }
    let (content, mentioned_in_text) = strip_mention(&note.content(), bot);
    let replied_to_bot = reply_event
        || note
            .reply
            .as_ref()
            .is_some_and(|parent| parent.user_id == bot.user_id);
    Ok(IncomingMessage {
        platform: PlatformKind::Misskey,
        channel_id: Channel::note(&note.id).into(),
        guild_id: None,
        user_id: note.user_id.as_str().into(),
        username: note.user.acct(),
        display_name: note.user.display_name(),
        message_id: note.id.as_str().into(),
        is_dm: is_direct_note(note, bot),
        content,
        attachments: note.files.iter().map(attachment).collect(),
        timestamp: note.created_at,
        reply_to_message_id: note.reply_id.as_deref().map(MessageId::from),
        replied_to_bot,
        is_bot: note.user.is_bot,
        mentions_bot: mentioned_in_text || note.mentions.contains(&bot.user_id),
        location: crate::platform::Location {
            community_channel_id: note.channel_id.clone(),
            ..Default::default()
        },
    })
}

/// Turns a 1:1 chat message into an [`IncomingMessage`] on channel `chat:{sender}`. `sender` is
/// the sender's user record when known (lite messages carry only the id).
pub fn chat_to_incoming(
    message: &model::ChatMessage,
    sender: Option<&User>,
    bot: &BotIdentity,
) -> Result<IncomingMessage, Skip> {
    if message.from_user_id == bot.user_id {
        return Err(Skip::OwnMessage);
    }
    if message.to_room_id.is_some() {
        return Err(Skip::RoomMessage);
    }
    let sender = sender.or(message.from_user.as_ref());
    if sender.is_some_and(|user| user.is_bot) {
        return Err(Skip::OtherBot);
    }
    let (content, mentioned) = strip_mention(message.text.as_deref().unwrap_or_default(), bot);
    let username = sender.map_or_else(|| message.from_user_id.clone(), User::acct);
    let display_name = sender.map_or_else(|| username.clone(), User::display_name);
    Ok(IncomingMessage {
        platform: PlatformKind::Misskey,
        channel_id: Channel::chat(&message.from_user_id).into(),
        guild_id: None,
        user_id: message.from_user_id.as_str().into(),
        username,
        display_name,
        message_id: message.id.as_str().into(),
        is_dm: true,
        content,
        attachments: message.file.iter().map(attachment).collect(),
        timestamp: message.created_at,
        reply_to_message_id: None,
        replied_to_bot: false,
        is_bot: false,
        mentions_bot: mentioned,
        location: Default::default(),
    })
}

/// A note as one entry of a conversation history.
pub fn note_to_history(note: &Note, bot_user_id: Option<&str>) -> ChatMessage {
    ChatMessage {
        message_id: note.id.as_str().into(),
        user_id: note.user_id.as_str().into(),
        username: note.user.acct(),
        content: note.content(),
        timestamp: note.created_at,
        is_bot: note.user.is_bot || Some(note.user_id.as_str()) == bot_user_id,
        attachments: note.files.iter().map(attachment).collect(),
    }
}

/// A chat message as one entry of a conversation history; `sender` supplies the name when the
/// message carries only ids.
pub fn chat_to_history(
    message: &model::ChatMessage,
    sender: Option<&User>,
    bot_user_id: Option<&str>,
) -> ChatMessage {
    let sender = message.from_user.as_ref().or(sender);
    ChatMessage {
        message_id: message.id.as_str().into(),
        user_id: message.from_user_id.as_str().into(),
        username: sender.map_or_else(|| message.from_user_id.clone(), User::acct),
        content: message.text.clone().unwrap_or_default(),
        timestamp: message.created_at,
        is_bot: sender.is_some_and(|user| user.is_bot)
            || Some(message.from_user_id.as_str()) == bot_user_id,
        attachments: message.file.iter().map(attachment).collect(),
    }
}

/// A `specified` note whose only recipient (besides its author) is the bot: a direct message.
pub fn is_direct_note(note: &Note, bot: &BotIdentity) -> bool {
    if note.visibility != Visibility::Specified {
        return false;
    }
    let mut others = note
        .visible_user_ids
        .iter()
        .filter(|id| **id != note.user_id)
        .peekable();
    others.peek().is_some() && others.all(|id| *id == bot.user_id)
}

fn attachment(file: &DriveFile) -> Attachment {
    Attachment {
        id: file.id.clone(),
        url: file.url.clone().unwrap_or_default(),
        mime: file.mime.clone(),
        filename: file.name.clone(),
        size: file.size,
    }
}

fn is_username_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

fn is_host_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':')
}

/// Removes every mention of the bot (`@name` or `@name@host`, case-insensitive) from `text`,
/// with the spaces that followed it, and trims the result. Returns the text and whether a
/// mention was found. `@name@otherhost` is someone else and stays.
pub fn strip_mention(text: &str, bot: &BotIdentity) -> (String, bool) {
    if bot.username.is_empty() {
        return (text.trim().to_owned(), false);
    }
    let mut out = String::with_capacity(text.len());
    let mut found = false;
    let mut rest = text;
    let mut previous: Option<char> = None;
    while let Some(at) = rest.find('@') {
        let (before, from_at) = rest.split_at(at);
        out.push_str(before);
        if let Some(c) = before.chars().next_back() {
            previous = Some(c);
        }
        match mention_len(from_at, bot) {
            Some(len) if !previous.is_some_and(|c| is_username_char(c) || c == '@') => {
                found = true;
                let after = &from_at[len..];
                let trimmed = after.trim_start_matches([' ', '\t', '\u{3000}']);
                rest = trimmed;
                // Keep one separating space between words the mention stood between.
                if !out.is_empty()
                    && !out.ends_with(char::is_whitespace)
                    && !trimmed.is_empty()
                    && trimmed.len() != after.len()
                {
                    out.push(' ');
                }
                previous = out.chars().next_back();
            }
            _ => {
                out.push('@');
                previous = Some('@');
                rest = &from_at[1..];
            }
        }
    }
    out.push_str(rest);
    (out.trim().to_owned(), found)
}

/// The byte length of a bot mention at the start of `text` (which starts with `@`), if it is one.
fn mention_len(text: &str, bot: &BotIdentity) -> Option<usize> {
    let name_len = text[1..]
        .find(|c: char| !is_username_char(c))
        .unwrap_or(text.len() - 1);
    let name = &text[1..1 + name_len];
    if !name.eq_ignore_ascii_case(&bot.username) {
        return None;
    }
    let end = 1 + name_len;
    let after = &text[end..];
    if let Some(host_part) = after.strip_prefix('@') {
        let host_len = host_part
            .find(|c: char| !is_host_char(c))
            .unwrap_or(host_part.len());
        // A trailing dot ends a sentence, not the host.
        let host = host_part[..host_len].trim_end_matches('.');
        if !host.is_empty() && host.eq_ignore_ascii_case(&bot.host) {
            return Some(end + 1 + host.len());
        }
        return None;
    }
    Some(end)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn bot() -> BotIdentity {
        BotIdentity {
            user_id: "bot1".into(),
            username: "airfriends".into(),
            host: "misskey.example".into(),
        }
    }

    fn strip(text: &str) -> (String, bool) {
        strip_mention(text, &bot())
    }

    #[test]
    fn mentions_of_the_bot_are_stripped() {
        assert_eq!(strip("@airfriends hello"), ("hello".into(), true));
        assert_eq!(strip("@AirFriends   hello"), ("hello".into(), true));
        assert_eq!(
            strip("@airfriends@misskey.example what now?"),
            ("what now?".into(), true)
        );
        assert_eq!(
            strip("hey @airfriends how are you"),
            ("hey how are you".into(), true)
        );
        assert_eq!(strip("thanks @airfriends"), ("thanks".into(), true));
        assert_eq!(
            strip("hi @airfriends@misskey.example."),
            ("hi .".into(), true)
        );
        assert_eq!(strip("@airfriends"), (String::new(), true));
    }

    #[test]
    fn other_mentions_stay() {
        assert_eq!(strip("@airfriends2 hi"), ("@airfriends2 hi".into(), false));
        assert_eq!(
            strip("@airfriends@other.example hi"),
            ("@airfriends@other.example hi".into(), false)
        );
        assert_eq!(
            strip("mail me@airfriends ok"),
            ("mail me@airfriends ok".into(), false)
        );
        assert_eq!(strip("@alice @airfriends hi"), ("@alice hi".into(), true));
        assert_eq!(
            strip("日本語 @airfriends テスト"),
            ("日本語 テスト".into(), true)
        );
        assert_eq!(strip("@ @@ @"), ("@ @@ @".into(), false));
    }

    fn note(value: serde_json::Value) -> Note {
        serde_json::from_value(value).expect("note")
    }

    fn user(id: &str, username: &str, is_bot: bool) -> serde_json::Value {
        json!({"id": id, "username": username, "name": "Alice A.", "host": null, "isBot": is_bot})
    }

    #[test]
    fn a_mention_note_becomes_an_incoming_message() {
        let n = note(json!({
            "id": "n2", "createdAt": "2025-05-01T10:00:00Z", "userId": "u1",
            "user": user("u1", "alice", false), "text": "@airfriends what's up?",
            "visibility": "home", "replyId": "n1",
            "reply": {"id": "n1", "createdAt": "2025-05-01T09:00:00Z", "userId": "bot1",
                      "user": user("bot1", "airfriends", true), "text": "hi"},
            "mentions": ["bot1"],
            "files": [{"id": "f1", "name": "cat.png", "type": "image/png", "size": 10,
                       "url": "http://x/f1"}]
        }));
        let incoming = note_to_incoming(&n, &bot(), false).expect("converted");
        assert_eq!(incoming.channel_id, "note:n2");
        assert_eq!(incoming.content, "what's up?");
        assert!(incoming.mentions_bot);
        assert!(incoming.replied_to_bot);
        assert!(!incoming.is_dm);
        assert_eq!(
            incoming.reply_to_message_id.as_ref().map(MessageId::as_str),
            Some("n1")
        );
        assert_eq!(incoming.display_name, "Alice A.");
        assert_eq!(incoming.attachments[0].filename, "cat.png");
        assert_eq!(incoming.attachments[0].mime.as_deref(), Some("image/png"));
    }

    #[test]
    fn own_bot_and_renote_notes_are_skipped() {
        let own = note(
            json!({"id": "n", "createdAt": "2025-05-01T10:00:00Z", "userId": "bot1",
            "user": user("bot1", "airfriends", true), "text": "@airfriends x"}),
        );
        assert_eq!(note_to_incoming(&own, &bot(), false), Err(Skip::OwnMessage));
        let other = note(
            json!({"id": "n", "createdAt": "2025-05-01T10:00:00Z", "userId": "b2",
            "user": user("b2", "otherbot", true), "text": "@airfriends x"}),
        );
        assert_eq!(note_to_incoming(&other, &bot(), false), Err(Skip::OtherBot));
        let renote = note(
            json!({"id": "n", "createdAt": "2025-05-01T10:00:00Z", "userId": "u1",
            "user": user("u1", "alice", false), "renoteId": "n0"}),
        );
        assert_eq!(
            note_to_incoming(&renote, &bot(), false),
            Err(Skip::PureRenote)
        );
    }

    #[test]
    fn specified_notes_to_the_bot_alone_are_direct() {
        let make = |ids: serde_json::Value| {
            note(
                json!({"id": "n", "createdAt": "2025-05-01T10:00:00Z", "userId": "u1",
                "user": user("u1", "alice", false), "text": "psst",
                "visibility": "specified", "visibleUserIds": ids}),
            )
        };
        assert!(is_direct_note(&make(json!(["bot1"])), &bot()));
        assert!(is_direct_note(&make(json!(["bot1", "u1"])), &bot()));
        assert!(!is_direct_note(&make(json!(["bot1", "u2"])), &bot()));
        assert!(!is_direct_note(&make(json!([])), &bot()));
        let incoming = note_to_incoming(&make(json!(["bot1"])), &bot(), false).expect("ok");
        assert!(incoming.is_dm);
        assert!(!incoming.mentions_bot);
    }

    #[test]
    fn chat_messages_convert_with_or_without_a_sender() {
        let lite: model::ChatMessage = serde_json::from_value(json!({
            "id": "m1", "createdAt": "2025-05-01T10:00:00Z", "fromUserId": "u1",
            "toUserId": "bot1", "text": "hello there"
        }))
        .expect("lite");
        let incoming = chat_to_incoming(&lite, None, &bot()).expect("ok");
        assert_eq!(incoming.channel_id, "chat:u1");
        assert_eq!(incoming.username, "u1");
        assert!(incoming.is_dm);
        let alice: User = serde_json::from_value(user("u1", "alice", false)).expect("user");
        let incoming = chat_to_incoming(&lite, Some(&alice), &bot()).expect("ok");
        assert_eq!(incoming.username, "alice");
        let robot: User = serde_json::from_value(user("u1", "robot", true)).expect("user");
        assert_eq!(
            chat_to_incoming(&lite, Some(&robot), &bot()),
            Err(Skip::OtherBot)
        );
        let history = chat_to_history(&lite, Some(&alice), Some("bot1"));
        assert_eq!(history.username, "alice");
        assert!(!history.is_bot);
    }
}
