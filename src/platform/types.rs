//! Platform-neutral data types that cross the platform seam: what an adapter reports
//! ([`IncomingMessage`], [`ChatMessage`], [`UserInfo`], [`CustomEmoji`]) and what callers hand it
//! ([`OutgoingFile`], [`ReactionEmoji`]) or get back ([`SentMessage`], [`FileDelivery`]).
//!
//! Ids ([`ChannelId`], [`MessageId`], [`UserId`]) are each platform's own text: Discord
//! snowflakes (`"1234…"`), Misskey channel ids `note:{noteId}` (a note thread) and
//! `chat:{userId}` (a chat / DM), Misskey note, chat-message and user ids as Misskey prints them. Only the adapter interprets them; everyone
//! else compares and stores them.
//!
//! The serde forms use camelCase field names, matching the Skill API's JSON (`messageId`,
//! `isBot`, …), so handlers can serialise [`ChatMessage`] and [`UserInfo`] directly.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::{ChannelId, MessageId, PlatformError, UserId};

/// Which chat platform a message or adapter belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PlatformKind {
    /// Discord, through serenity.
    Discord,
    /// Misskey, through its REST API and streaming websocket.
    Misskey,
    /// The local terminal conversation of `air-friends chat`.
    Console,
}

impl PlatformKind {
    /// Every kind, in a stable order.
    pub const ALL: [PlatformKind; 3] = [
        PlatformKind::Discord,
        PlatformKind::Misskey,
        PlatformKind::Console,
    ];

    /// The lowercase name used in workspace paths, conversation keys and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            PlatformKind::Discord => "discord",
            PlatformKind::Misskey => "misskey",
            PlatformKind::Console => "console",
        }
    }
}

impl fmt::Display for PlatformKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A platform name that is not `discord`, `misskey` or `console`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown platform {0:?} (expected discord, misskey or console)")]
pub struct UnknownPlatform(pub String);

impl FromStr for PlatformKind {
    type Err = UnknownPlatform;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        PlatformKind::ALL
            .into_iter()
            .find(|kind| kind.as_str() == s)
            .ok_or_else(|| UnknownPlatform(s.to_owned()))
    }
}

/// A file attached to an incoming message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Attachment {
    /// The platform's attachment / drive-file id.
    pub id: String,
    /// Where the file can be downloaded.
    pub url: String,
    /// MIME type, when the platform reports one.
    pub mime: Option<String>,
    /// Original file name.
    pub filename: String,
    /// Size in bytes.
    pub size: u64,
}

/// Who said something, and where: the part of a message or user command that decides whose
/// data a session may touch and where its answers go. A user command carries it
/// ([`CommandInvocation::origin`](super::CommandInvocation::origin)), [`IncomingMessage::origin`]
/// takes it from a message, and the session keeps it (`session::SessionContext::origin`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    /// Platform it came from.
    pub platform: PlatformKind,
    /// Channel to answer in (Discord channel or DM channel id; Misskey `note:{id}` / `chat:{id}`).
    pub channel_id: ChannelId,
    /// Discord guild (server) id; `None` in DMs and on Misskey.
    pub guild_id: Option<String>,
    /// The user's id.
    pub user_id: UserId,
    /// The user's account name.
    pub username: String,
    /// A direct message (private memories, reminders and private data only there).
    pub is_dm: bool,
}

/// A message an adapter received and hands to the conversation router.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IncomingMessage {
    /// Platform it arrived on.
    pub platform: PlatformKind,
    /// Channel to answer in (Discord channel or DM channel id; Misskey `note:{id}` / `chat:{id}`).
    pub channel_id: ChannelId,
    /// Discord guild (server) id; `None` in DMs and on Misskey.
    pub guild_id: Option<String>,
    /// Author's id.
    pub user_id: UserId,
    /// Author's account name (Discord username, Misskey `username` or `username@host`).
    pub username: String,
    /// Author's display name (guild nickname or global name; falls back to the username).
    pub display_name: String,
    /// The message's id (what replies and reactions point at).
    pub message_id: MessageId,
    /// Direct message (Discord DM channel, Misskey chat or a `specified` note to the bot only).
    pub is_dm: bool,
    /// Text with the bot's own mention removed and surrounding whitespace trimmed.
    pub content: String,
    /// Attached files, in the platform's order.
    pub attachments: Vec<Attachment>,
    /// When the message was created.
    pub timestamp: DateTime<Utc>,
    /// The message this one replies to, if any.
    pub reply_to_message_id: Option<MessageId>,
    /// Whether the message it replies to was written by the bot.
    pub replied_to_bot: bool,
    /// Whether the author is a bot (the router ignores bots).
    pub is_bot: bool,
    /// Whether the bot was mentioned (the mention itself is stripped from `content`).
    pub mentions_bot: bool,
    /// Where in the platform it was written, beyond its channel (what `places:` rules match).
    #[serde(default)]
    pub location: Location,
}

/// Where a message was written beyond its channel and guild: the facts `places:` rules match
/// that only the adapter can know. Empty when the platform has no such thing or the adapter
/// could not learn it (a rule naming it then does not match).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Location {
    /// Discord: for a message in a thread or forum post, the channel or forum it belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thread_parent_id: Option<String>,
    /// Discord: the category the channel (or the thread's channel) sits in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub category_id: Option<String>,
    /// Misskey: the channel a note was posted in (the note's `channelId`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub community_channel_id: Option<String>,
    /// Discord: the thread or forum post the message was written in (its channel is the
    /// thread); `None` outside threads or when the adapter could not learn it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thread: Option<Box<ThreadInfo>>,
    /// The conversation the message belongs to when that is not its channel alone — Misskey:
    /// a reply chain, `note:{root}` (`misskey/chains.rs`) — so the chain is queued and kept
    /// warm as one while each answer still goes to the message's own channel.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation: Option<String>,
}

/// A thread (or forum post) as the prompt names it and the answer policy judges it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ThreadInfo {
    /// The thread's name (a forum post's title); empty when unknown.
    #[serde(default)]
    pub name: String,
    /// The name of the channel or forum it belongs to, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_name: Option<String>,
    /// A post in a forum (or media) channel rather than a thread of a text channel.
    #[serde(default)]
    pub in_forum: bool,
    /// The bot opened it (Discord: the thread's `owner_id` is the bot), e.g. for a
    /// thread-per-conversation place.
    #[serde(default)]
    pub started_by_bot: bool,
}

impl IncomingMessage {
    /// Who wrote it and where.
    pub fn origin(&self) -> Origin {
        Origin {
            platform: self.platform,
            channel_id: self.channel_id.clone(),
            guild_id: self.guild_id.clone(),
            user_id: self.user_id.clone(),
            username: self.username.clone(),
            is_dm: self.is_dm,
        }
    }

    /// The conversation this message belongs to, `platform:channelId` (or the adapter's
    /// [`Location::conversation`] in place of the channel): the key of the per-conversation
    /// FIFO.
    pub fn conversation_key(&self) -> String {
        format!("{}:{}", self.platform, self.conversation())
    }

    /// What identifies the message's conversation on its platform: its channel, unless the
    /// adapter named a conversation wider than it ([`Location::conversation`]).
    pub fn conversation(&self) -> &str {
        self.location
            .conversation
            .as_deref()
            .unwrap_or(self.channel_id.as_str())
    }

    /// The duplicate-guard key, `platform:messageId`.
    pub fn dedup_key(&self) -> String {
        format!("{}:{}", self.platform, self.message_id)
    }
}

/// What a catch-up read back from one feed ([`PlatformAdapter::missed_messages`](super::PlatformAdapter::missed_messages)).
#[derive(Debug, Clone, Default)]
pub struct Missed {
    /// The messages after the cursor, oldest first.
    pub messages: Vec<IncomingMessage>,
    /// More arrived than were read: the oldest of them are left out.
    pub more: bool,
}

/// One message of a channel's history, as fetch-context and the prompt builder see it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChatMessage {
    /// The message's id.
    pub message_id: MessageId,
    /// Author's id.
    pub user_id: UserId,
    /// Author's account name.
    pub username: String,
    /// Text (for the bot's own Misskey notes and Discord messages, as sent).
    pub content: String,
    /// When the message was created.
    pub timestamp: DateTime<Utc>,
    /// Whether the author is a bot (including this bot).
    pub is_bot: bool,
    /// Attached files, in the platform's order (what the prompt's history lists and the
    /// daemon fetches for the agent; not part of fetch-context answers).
    #[serde(default, skip_serializing)]
    pub attachments: Vec<Attachment>,
}

/// A platform user, as fetch-context `user_info` reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UserInfo {
    /// The user's id.
    pub user_id: UserId,
    /// Account name.
    pub username: String,
    /// Display name (falls back to the username).
    pub display_name: String,
}

/// A custom emoji usable in the channel (Discord guild emoji, Misskey instance emoji).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CustomEmoji {
    /// Emoji name without colons.
    pub name: String,
    /// Discord's emoji id; `None` on Misskey, where emojis are known by name only.
    pub id: Option<String>,
    /// Animated (Discord).
    pub animated: bool,
}

impl CustomEmoji {
    /// The `:name:` form the agent is taught and react-message accepts.
    pub fn shortcode(&self) -> String {
        format!(":{}:", self.name)
    }

    /// The emoji as a reaction.
    pub fn to_reaction(&self) -> ReactionEmoji {
        ReactionEmoji::Custom {
            name: self.name.clone(),
            id: self.id.clone(),
            animated: self.animated,
        }
    }
}

/// An emoji to react with: a Unicode emoji, or a custom one by name (and id when known).
///
/// Parse the agent's `--emoji` value with [`str::parse`]: `👍`, `:blobcat:`, Discord's
/// `<:name:123>` / `<a:name:123>` and `name:123` are accepted. A custom emoji without an id is
/// resolved by the adapter (Discord looks the name up among the guild's emojis and fails with
/// [`PlatformError::NotFound`] when there is none; Misskey reacts with `:name:` directly).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "type")]
pub enum ReactionEmoji {
    /// A Unicode emoji (possibly a multi-codepoint sequence).
    Unicode(String),
    /// A custom emoji.
    Custom {
        /// Name without colons.
        name: String,
        /// Discord id, when known.
        id: Option<String>,
        /// Animated (Discord).
        animated: bool,
    },
}

/// Longest Unicode emoji sequence accepted, in characters (RGI ZWJ sequences stay under 10).
const MAX_UNICODE_EMOJI_CHARS: usize = 16;

/// A string that is neither a Unicode emoji nor a custom emoji reference.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not an emoji: use a Unicode emoji such as 👍 or a custom emoji as :name:")]
pub struct InvalidEmoji(pub String);

impl From<InvalidEmoji> for PlatformError {
    fn from(err: InvalidEmoji) -> Self {
        PlatformError::InvalidInput(err.to_string())
    }
}

fn is_emoji_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 128
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '+' | '.' | '@'))
}

impl FromStr for ReactionEmoji {
    type Err = InvalidEmoji;

    fn from_str(input: &str) -> Result<Self, Self::Err> {
        let s = input.trim();
        let invalid = || InvalidEmoji(input.to_owned());
        let custom = |name: &str, id: Option<&str>, animated: bool| ReactionEmoji::Custom {
            name: name.to_owned(),
            id: id.map(str::to_owned),
            animated,
        };
        // <:name:id> or <a:name:id>
        if let Some(inner) = s.strip_prefix('<').and_then(|r| r.strip_suffix('>')) {
            let (animated, inner) = match inner.strip_prefix("a:") {
                Some(rest) => (true, rest),
                None => (false, inner.strip_prefix(':').ok_or_else(invalid)?),
            };
            let (name, id) = inner.split_once(':').ok_or_else(invalid)?;
            if is_emoji_name(name) && !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()) {
                return Ok(custom(name, Some(id), animated));
            }
            return Err(invalid());
        }
        // :name:
        if let Some(name) = s.strip_prefix(':').and_then(|r| r.strip_suffix(':')) {
            return if is_emoji_name(name) {
                Ok(custom(name, None, false))
            } else {
                Err(invalid())
            };
        }
        // name:id
        if let Some((name, id)) = s.split_once(':') {
            if is_emoji_name(name) && !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()) {
                return Ok(custom(name, Some(id), false));
            }
            return Err(invalid());
        }
        let chars = s.chars().count();
        let plausible = chars > 0
            && chars <= MAX_UNICODE_EMOJI_CHARS
            && !s.is_ascii()
            && !s.chars().any(|c| c.is_whitespace() || c.is_alphabetic());
        if plausible {
            Ok(ReactionEmoji::Unicode(s.to_owned()))
        } else {
            Err(invalid())
        }
    }
}

impl fmt::Display for ReactionEmoji {
    /// The Unicode emoji itself, or `:name:` for a custom emoji.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReactionEmoji::Unicode(emoji) => f.write_str(emoji),
            ReactionEmoji::Custom { name, .. } => write!(f, ":{name}:"),
        }
    }
}

/// Where the bytes of an [`OutgoingFile`] come from.
#[derive(Clone, PartialEq, Eq)]
pub enum FileSource {
    /// Bytes already in memory (e.g. a generated memory export).
    Bytes(Vec<u8>),
    /// A file on disk, already validated by the caller (send-file checks containment and sizes
    /// before any byte is read); the adapter reads it when sending.
    Path(PathBuf),
}

impl fmt::Debug for FileSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FileSource::Bytes(bytes) => write!(f, "Bytes({} bytes)", bytes.len()),
            FileSource::Path(path) => f.debug_tuple("Path").field(path).finish(),
        }
    }
}

/// A file to upload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutgoingFile {
    /// Name shown on the platform.
    pub filename: String,
    /// Where the content comes from.
    pub source: FileSource,
    /// MIME type, if the caller knows it (adapters may guess from the name otherwise).
    pub mime: Option<String>,
    /// Alt text shown with the file, for people who cannot see or play it (Discord: the
    /// attachment's description, at most 1024 characters; Misskey: the drive file's comment).
    pub description: Option<String>,
    /// Sent as a voice message (Discord: the `IS_VOICE_MESSAGE` flag with the clip's duration
    /// and waveform; the file must be the message's only one, Ogg Opus, with no text).
    pub voice: Option<VoiceClip>,
}

/// What makes an Ogg Opus file a Discord voice message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VoiceClip {
    /// Its length.
    pub duration: std::time::Duration,
    /// Up to 256 amplitude samples, 0-255 (`audio::opus_waveform`).
    pub waveform: Vec<u8>,
}

impl OutgoingFile {
    /// A file from bytes in memory.
    pub fn from_bytes(filename: impl Into<String>, bytes: impl Into<Vec<u8>>) -> Self {
        Self {
            filename: filename.into(),
            source: FileSource::Bytes(bytes.into()),
            mime: None,
            description: None,
            voice: None,
        }
    }

    /// A file read from `path` at send time.
    pub fn from_path(filename: impl Into<String>, path: impl Into<PathBuf>) -> Self {
        Self {
            filename: filename.into(),
            source: FileSource::Path(path.into()),
            mime: None,
            description: None,
            voice: None,
        }
    }

    /// Sets the MIME type.
    pub fn with_mime(mut self, mime: impl Into<String>) -> Self {
        self.mime = Some(mime.into());
        self
    }

    /// Sets the alt text.
    pub fn with_description(mut self, text: impl Into<String>) -> Self {
        self.description = Some(text.into());
        self
    }

    /// Makes the file a voice message.
    pub fn as_voice(mut self, clip: VoiceClip) -> Self {
        self.voice = Some(clip);
        self
    }

    /// The file's content: the bytes, or the file read from disk (off the async workers, through
    /// `tokio::fs`). A read failure is [`PlatformError::InvalidInput`] naming the file.
    pub async fn into_bytes(self) -> Result<Vec<u8>, PlatformError> {
        match self.source {
            FileSource::Bytes(bytes) => Ok(bytes),
            FileSource::Path(path) => tokio::fs::read(&path).await.map_err(|err| {
                PlatformError::InvalidInput(format!("cannot read file {}: {err}", self.filename))
            }),
        }
    }
}

/// A message the bot created (or re-created, for a Misskey edit).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SentMessage {
    /// Id of the created message.
    pub message_id: MessageId,
    /// When the platform created it.
    pub timestamp: DateTime<Utc>,
}

/// A file that could not be delivered while others were.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileFailure {
    /// The file's name.
    pub filename: String,
    /// Why it failed.
    pub error: PlatformError,
}

/// The outcome of sending files.
///
/// `send_files` / `send_dm_files` return `Err` when **nothing** was delivered. When some files
/// went out and others did not (Misskey chat sends one message per file), they return `Ok` with
/// the delivered messages and the failures, so the send-file handler can report a partial delivery
/// with the delivered ids.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FileDelivery {
    /// Messages created, in order (one on Discord and for Misskey notes, one per file for Misskey
    /// chat; the caption is on the first).
    pub messages: Vec<SentMessage>,
    /// Files that were not delivered.
    pub failed: Vec<FileFailure>,
}

impl FileDelivery {
    /// Ids of the delivered messages, in order.
    pub fn message_ids(&self) -> Vec<MessageId> {
        self.messages.iter().map(|m| m.message_id.clone()).collect()
    }

    /// The last delivered message: the reply anchor (`lastFileMessageId`).
    pub fn last_message(&self) -> Option<&SentMessage> {
        self.messages.last()
    }

    /// Whether some files were not delivered.
    pub fn is_partial(&self) -> bool {
        !self.failed.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn platform_kind_names_round_trip() {
        for kind in PlatformKind::ALL {
            assert_eq!(kind.as_str().parse::<PlatformKind>(), Ok(kind));
            assert_eq!(
                serde_json::to_string(&kind).ok(),
                Some(format!("\"{}\"", kind.as_str()))
            );
            assert_eq!(kind.to_string(), kind.as_str());
        }
        assert!("Discord".parse::<PlatformKind>().is_err());
    }

    #[test]
    fn reaction_emoji_parses_the_accepted_forms() {
        let parse = |s: &str| s.parse::<ReactionEmoji>();
        assert_eq!(parse("👍"), Ok(ReactionEmoji::Unicode("👍".into())));
        assert_eq!(parse(" ❤️ "), Ok(ReactionEmoji::Unicode("❤️".into())));
        assert_eq!(parse("1️⃣"), Ok(ReactionEmoji::Unicode("1️⃣".into())));
        let family = "👨\u{200d}👩\u{200d}👧\u{200d}👦";
        assert_eq!(parse(family), Ok(ReactionEmoji::Unicode(family.into())));
        assert_eq!(
            parse(":blob_cat:"),
            Ok(ReactionEmoji::Custom {
                name: "blob_cat".into(),
                id: None,
                animated: false
            })
        );
        assert_eq!(
            parse("<a:dance:123>"),
            Ok(ReactionEmoji::Custom {
                name: "dance".into(),
                id: Some("123".into()),
                animated: true
            })
        );
        assert_eq!(
            parse("<:wave:42>").map(|e| e.to_string()),
            Ok(":wave:".to_owned())
        );
        assert_eq!(
            parse("wave:42"),
            Ok(ReactionEmoji::Custom {
                name: "wave".into(),
                id: Some("42".into()),
                animated: false
            })
        );
        for bad in [
            "",
            "thumbsup",
            "::",
            ":a b:",
            "<:x:abc>",
            "hello 👍",
            "日本",
            "x:y",
            "👍👍👍👍👍👍👍👍👍👍👍👍👍👍👍👍👍",
        ] {
            assert!(parse(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn custom_emoji_forms() {
        let emoji = CustomEmoji {
            name: "blob".into(),
            id: Some("7".into()),
            animated: false,
        };
        assert_eq!(emoji.shortcode(), ":blob:");
        assert_eq!(emoji.to_reaction().to_string(), ":blob:");
    }

    #[test]
    fn chat_message_serialises_in_skill_api_shape() {
        let message = ChatMessage {
            message_id: "1".into(),
            user_id: "2".into(),
            username: "alice".into(),
            content: "hi".into(),
            timestamp: DateTime::from_timestamp(0, 0).expect("epoch"),
            is_bot: false,
            attachments: Vec::new(),
        };
        let json = serde_json::to_value(&message).expect("serialises");
        assert_eq!(json["messageId"], "1");
        assert_eq!(json["isBot"], false);
        assert_eq!(json["timestamp"], "1970-01-01T00:00:00Z");
    }

    #[test]
    fn incoming_message_keys() {
        let message = IncomingMessage {
            platform: PlatformKind::Misskey,
            channel_id: "note:abc".into(),
            guild_id: None,
            user_id: "u1".into(),
            username: "alice".into(),
            display_name: "Alice".into(),
            message_id: "m1".into(),
            is_dm: false,
            content: "hello".into(),
            attachments: Vec::new(),
            timestamp: Utc::now(),
            reply_to_message_id: None,
            replied_to_bot: false,
            is_bot: false,
            mentions_bot: true,
            location: Location::default(),
        };
        assert_eq!(message.conversation_key(), "misskey:note:abc");
        assert_eq!(message.dedup_key(), "misskey:m1");
    }

    #[test]
    fn file_source_debug_hides_bytes() {
        let file = OutgoingFile::from_bytes("a.txt", vec![0u8; 4096]).with_mime("text/plain");
        let debug = format!("{file:?}");
        assert!(debug.contains("Bytes(4096 bytes)"), "{debug}");
    }

    #[tokio::test]
    async fn outgoing_files_load_from_memory_or_disk() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("x.bin");
        std::fs::write(&path, b"disk").expect("write");
        assert_eq!(
            OutgoingFile::from_path("x.bin", &path).into_bytes().await,
            Ok(b"disk".to_vec())
        );
        assert_eq!(
            OutgoingFile::from_bytes("y", b"mem".to_vec())
                .into_bytes()
                .await,
            Ok(b"mem".to_vec())
        );
        let missing = OutgoingFile::from_path("gone", dir.path().join("gone"))
            .into_bytes()
            .await;
        assert!(matches!(missing, Err(PlatformError::InvalidInput(_))));
    }
}
