//! Serde types for the parts of Misskey's JSON the adapter reads: notes, users, chat messages,
//! drive files, custom emojis and streaming frames.
//!
//! Misskey sends camelCase keys and adds fields between releases, so every struct here is lenient:
//! unknown fields are ignored and everything the adapter can live without is `Option` or
//! `#[serde(default)]`. Only ids and timestamps are required.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Who may see a note (`visibility`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Visibility {
    /// Everyone, on every timeline.
    #[default]
    Public,
    /// Everyone, but not on the public timelines.
    Home,
    /// The author's followers.
    Followers,
    /// Only the users listed in `visibleUserIds` (Misskey's "direct" note).
    Specified,
}

impl Visibility {
    /// The wire name (`public`, `home`, `followers`, `specified`).
    pub fn as_str(self) -> &'static str {
        match self {
            Visibility::Public => "public",
            Visibility::Home => "home",
            Visibility::Followers => "followers",
            Visibility::Specified => "specified",
        }
    }
}

/// A user as embedded in notes and chat messages (`UserLite`); `users/show` and `i` send a
/// superset.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct User {
    /// User id.
    pub id: String,
    /// Account name, without `@` and host.
    pub username: String,
    /// Display name, when set.
    #[serde(default)]
    pub name: Option<String>,
    /// Instance of a remote user; `None` for local users.
    #[serde(default)]
    pub host: Option<String>,
    /// Marked as a bot account.
    #[serde(default)]
    pub is_bot: bool,
}

impl User {
    /// `username` for local users, `username@host` for remote ones.
    pub fn acct(&self) -> String {
        match &self.host {
            Some(host) if !host.is_empty() => format!("{}@{host}", self.username),
            _ => self.username.clone(),
        }
    }

    /// The display name, falling back to the account name when unset or blank.
    pub fn display_name(&self) -> String {
        match &self.name {
            Some(name) if !name.trim().is_empty() => name.clone(),
            _ => self.acct(),
        }
    }
}

/// A drive file (upload result, or a file attached to a note / chat message).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DriveFile {
    /// File id (what `fileIds` / `fileId` take).
    pub id: String,
    /// Original name.
    #[serde(default)]
    pub name: String,
    /// MIME type.
    #[serde(default, rename = "type")]
    pub mime: Option<String>,
    /// Size in bytes.
    #[serde(default)]
    pub size: u64,
    /// Download URL.
    #[serde(default)]
    pub url: Option<String>,
}

/// A note (`Note` as packed by Misskey).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Note {
    /// Note id.
    pub id: String,
    /// Creation time.
    pub created_at: DateTime<Utc>,
    /// Author id.
    pub user_id: String,
    /// The author's profile (username, host, display name).
    pub user: User,
    /// Body text (`None` for a pure renote or a files-only note).
    #[serde(default)]
    pub text: Option<String>,
    /// Content warning, shown before the text.
    #[serde(default)]
    pub cw: Option<String>,
    /// Who may see it.
    #[serde(default)]
    pub visibility: Visibility,
    /// For `specified` notes: who may see it besides the author.
    #[serde(default)]
    pub visible_user_ids: Vec<String>,
    /// Federation disabled.
    #[serde(default)]
    pub local_only: bool,
    /// The note this one replies to.
    #[serde(default)]
    pub reply_id: Option<String>,
    /// The parent note, when Misskey packs it (streaming `mention` / `reply` events do).
    #[serde(default)]
    pub reply: Option<Box<Note>>,
    /// The renoted note, for renotes and quotes.
    #[serde(default)]
    pub renote_id: Option<String>,
    /// Ids of the users the text mentions.
    #[serde(default)]
    pub mentions: Vec<String>,
    /// Attached drive files.
    #[serde(default)]
    pub files: Vec<DriveFile>,
    /// The channel the note was posted in, if any.
    #[serde(default)]
    pub channel_id: Option<String>,
}

impl Note {
    /// The readable content: the text, or the content warning when there is no text.
    pub fn content(&self) -> String {
        self.text
            .clone()
            .or_else(|| self.cw.clone())
            .unwrap_or_default()
    }
}

/// A notification (`i/notifications`); the catch-up reads `mention` and `reply` ones.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Notification {
    /// `mention`, `reply`, `follow`, ...
    #[serde(rename = "type")]
    pub kind: String,
    /// The note it is about (mentions and replies carry one).
    #[serde(default)]
    pub note: Option<Note>,
}

/// `notes/create`'s answer.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CreatedNote {
    /// The new note.
    pub created_note: Note,
}

/// A chat message (`ChatMessage`, `ChatMessageLite`, `ChatMessageLiteFor1on1`: the lite forms
/// carry ids only, no embedded users).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChatMessage {
    /// Message id.
    pub id: String,
    /// Creation time.
    pub created_at: DateTime<Utc>,
    /// Sender id.
    pub from_user_id: String,
    /// Sender, when packed in detail (`newChatMessage`, `chat/messages/show`).
    #[serde(default)]
    pub from_user: Option<User>,
    /// Recipient of a 1:1 message.
    #[serde(default)]
    pub to_user_id: Option<String>,
    /// Room of a room message (the adapter only handles 1:1 chats).
    #[serde(default)]
    pub to_room_id: Option<String>,
    /// Text, when any.
    #[serde(default)]
    pub text: Option<String>,
    /// The attached file, when any.
    #[serde(default)]
    pub file: Option<DriveFile>,
}

/// One entry of the `emojis` endpoint.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Emoji {
    /// Shortcode name without colons.
    pub name: String,
}

/// The `emojis` endpoint's answer.
#[derive(Debug, Clone, Deserialize)]
pub struct EmojiList {
    /// The instance's custom emojis.
    #[serde(default)]
    pub emojis: Vec<Emoji>,
}

/// A Misskey API error body: `{"error": {code, id, message, …}}`.
#[derive(Debug, Clone, Deserialize)]
pub struct ErrorBody {
    /// The error itself.
    pub error: ApiErrorInfo,
}

/// The `error` object of an API error.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct ApiErrorInfo {
    /// Stable code, e.g. `NO_SUCH_NOTE`.
    #[serde(default)]
    pub code: Option<String>,
    /// Human-readable text.
    #[serde(default)]
    pub message: Option<String>,
}

/// A streaming frame from the server: `{"type": "channel", "body": {"id", "type", "body"}}`
/// (other frame types, such as `noteUpdated`, are read as [`Frame`] and ignored).
#[derive(Debug, Clone, Deserialize)]
pub struct Frame {
    /// Frame type (`channel` for channel events).
    #[serde(rename = "type")]
    pub kind: String,
    /// Frame body.
    #[serde(default)]
    pub body: Value,
}

/// The body of a `channel` frame.
#[derive(Debug, Clone, Deserialize)]
pub struct ChannelEvent {
    /// The connection id the client chose when it connected the channel.
    pub id: String,
    /// Event type (`mention`, `reply`, `newChatMessage`, `message`, …).
    #[serde(rename = "type")]
    pub kind: String,
    /// Event payload.
    #[serde(default)]
    pub body: Value,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_packed_note_parses_with_unknown_fields() {
        let note: Note = serde_json::from_value(serde_json::json!({
            "id": "9zabc", "createdAt": "2025-05-01T10:00:00.000Z", "userId": "u1",
            "user": {"id": "u1", "username": "alice", "name": null, "host": "remote.example",
                     "avatarUrl": "https://x/a.png", "isBot": false, "emojis": {}},
            "text": "hi", "cw": null, "visibility": "specified", "visibleUserIds": ["bot"],
            "localOnly": false, "reactions": {}, "renoteCount": 0, "repliesCount": 0,
            "fileIds": ["f1"], "files": [{"id": "f1", "name": "a.png", "type": "image/png",
                     "size": 12, "url": "https://x/f1", "md5": "x", "isSensitive": false}],
            "replyId": null, "renoteId": null, "mentions": ["bot"]
        }))
        .expect("parses");
        assert_eq!(note.visibility, Visibility::Specified);
        assert_eq!(note.user.acct(), "alice@remote.example");
        assert_eq!(note.user.display_name(), "alice@remote.example");
        assert_eq!(note.files[0].mime.as_deref(), Some("image/png"));
        assert_eq!(note.content(), "hi");
    }

    #[test]
    fn a_lite_chat_message_parses_without_users() {
        let message: ChatMessage = serde_json::from_value(serde_json::json!({
            "id": "m1", "createdAt": "2025-05-01T10:00:00Z", "fromUserId": "u1",
            "toUserId": "bot", "text": null, "fileId": null, "reactions": []
        }))
        .expect("parses");
        assert!(message.from_user.is_none());
        assert!(message.text.is_none());
    }
}
