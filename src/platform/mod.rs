//! The platform seam: the narrow [`PlatformAdapter`] trait through which the Skill API handlers,
//! the conversation pipeline and the reminder scheduler act on Discord, Misskey or the console,
//! without ever seeing serenity or Misskey types.
//!
//! * [`PlatformAdapter`]: send / edit / delete / read messages, react, send files, DM a user, list
//!   custom emojis, show typing. One implementation per platform (`discord`, `misskey`; the
//!   console is `air-friends chat`'s own, in `app::chat::console`, and the operator console's
//!   *Chat* page's, `admin::chat`, both keeping their conversation in a [`transcript`]) plus
//!   `fake::FakePlatform` for tests (feature `test-util`, enabled by the crate's own
//!   dev-dependency: never in the installed binary).
//! * The ids that cross the seam (`ids.rs`): [`ChannelId`], [`MessageId`], [`UserId`], each the
//!   platform's own id text in a type of its kind.
//! * Platform-neutral data types (`types.rs`): [`IncomingMessage`] (what adapters hand to the
//!   router), [`ChatMessage`], [`UserInfo`], [`CustomEmoji`], [`ReactionEmoji`],
//!   [`OutgoingFile`], [`SentMessage`], [`FileDelivery`]; length limits are
//!   [`TextLimits`] from [`crate::text`].
//! * [`PlatformError`] (`error.rs`): rate limit / not found / forbidden / … with
//!   [`PlatformError::is_retryable`].
//! * [`PlatformEvent`] (`events.rs`): what adapters deliver (messages, user commands) through an
//!   [`EventSink`], and the [`ConnectionState`] that readiness reads.
//! * [`PlatformRegistry`]: the adapters of the running daemon, by [`PlatformKind`].
//! * [`CONNECTORS`] ([`connect`]): how each platform is built from the configuration and
//!   connected; [`duties`]: what the `places:` rules ask of the bot per channel, for an
//!   adapter's own checks.
//! * [`send_text`] / [`send_dm_text`]: split a long text with
//!   [`split_message`](crate::text::split_message) and send every part, reporting what was
//!   delivered even when a later part fails.
//!
//! Contract shared by every adapter (the fake enforces it too, so handler tests catch misuse):
//! `send_message`, `edit_message`, `send_dm` and captions take text that is non-empty and fits
//! [`PlatformAdapter::text_limit`] — callers run the content pipeline and split first (or use
//! [`send_text`]); adapters never truncate, they fail with [`PlatformError::InvalidInput`].
//! Adapters handle their own transport-level retries (e.g. Discord 429 back-off when serenity's
//! ratelimiter is off) and surface what remains as [`PlatformError`].

pub mod connect;
pub mod discord;
pub mod duties;
pub mod error;
pub mod events;
#[cfg(any(test, feature = "test-util"))]
pub mod fake;
pub mod ids;
pub mod metered;
pub mod misskey;
pub mod transcript;
pub mod types;

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;

pub use crate::text::{LengthUnit, TextLimits};
pub use error::PlatformError;
pub use events::{
    CommandInvocation, CommandReply, ConnectionState, EventSink, PlatformEvent, ReplyButton,
    Typing, UserCommandSpec,
};
pub use ids::{ChannelId, MessageId, UserId};
pub use types::{
    Attachment, ChatMessage, CustomEmoji, FileDelivery, FileFailure, FileSource, IncomingMessage,
    InvalidEmoji, Location, Missed, Origin, OutgoingFile, PlatformKind, ReactionEmoji, SentMessage,
    ThreadInfo, UnknownPlatform, UserInfo, VoiceClip,
};

/// Every platform the daemon connects to (a new platform adds its entry here, with its
/// module above).
pub const CONNECTORS: &[connect::Connector] = &[
    connect::Connector {
        kind: PlatformKind::Discord,
        build: discord::connect,
    },
    connect::Connector {
        kind: PlatformKind::Misskey,
        build: misskey::connect,
    },
];

/// What the daemon can do on one chat platform.
///
/// Ids are the platform's own text in a type of their kind (see [`ids`]); a malformed id is
/// [`PlatformError::InvalidId`], an id that does not exist [`PlatformError::NotFound`].
/// Implementations are shared (`Arc<dyn PlatformAdapter>`) across sessions and must be safe to
/// call concurrently.
#[async_trait]
pub trait PlatformAdapter: Send + Sync {
    /// Which platform this adapter talks to.
    fn kind(&self) -> PlatformKind;

    /// The bot's own user id, once known (after the gateway's READY / Misskey's `i`); used to
    /// ignore the bot's own messages and to check that a message is the bot's.
    fn bot_user_id(&self) -> Option<UserId>;

    /// The longest text one message in `channel_id` may carry (Discord 2000 UTF-16 units; Misskey
    /// `note:` 3000 characters, `chat:` 2000 characters).
    fn text_limit(&self, channel_id: &ChannelId) -> TextLimits;

    /// The longest text one direct message may carry (Discord 2000 UTF-16 units; Misskey chat
    /// 2000 characters).
    fn dm_text_limit(&self) -> TextLimits;

    /// Sends one message to `channel_id`, threaded to `reply_to` when given (Discord: a reply
    /// reference without pinging the author; Misskey: `replyId`, keeping a `specified` parent's
    /// visibility). With `reply_to: None` Misskey replies to the note the `note:` channel is
    /// named after, and Discord posts a plain message.
    ///
    /// `text` must be non-empty and fit [`text_limit`](Self::text_limit).
    async fn send_message(
        &self,
        channel_id: &ChannelId,
        text: &str,
        reply_to: Option<&MessageId>,
    ) -> Result<SentMessage, PlatformError>;

    /// Replaces the text of the bot's message `message_id`. Discord edits in place and returns the
    /// same id; Misskey cannot edit, so it deletes the note / chat message and re-creates it,
    /// threaded to `reply_to` (the anchor the original was sent with,
    /// `lastReplyAnchorMessageId`), and returns the **new** id. Discord ignores `reply_to`.
    ///
    /// Editing another user's message is [`PlatformError::Forbidden`].
    async fn edit_message(
        &self,
        channel_id: &ChannelId,
        message_id: &MessageId,
        text: &str,
        reply_to: Option<&MessageId>,
    ) -> Result<SentMessage, PlatformError>;

    /// Deletes the bot's message `message_id`.
    async fn delete_message(
        &self,
        channel_id: &ChannelId,
        message_id: &MessageId,
    ) -> Result<(), PlatformError>;

    /// One message of `channel_id` (get-message).
    async fn get_message(
        &self,
        channel_id: &ChannelId,
        message_id: &MessageId,
    ) -> Result<ChatMessage, PlatformError>;

    /// The latest `limit` messages of `channel_id`, **oldest first** (for a Misskey `note:`
    /// channel: the thread — ancestors and replies). Adapters clamp `limit` to what the platform
    /// serves in one request (100).
    async fn recent_messages(
        &self,
        channel_id: &ChannelId,
        limit: usize,
    ) -> Result<Vec<ChatMessage>, PlatformError>;

    /// Messages of `channel_id` matching `query` (keywords, case-insensitive, any of them), at
    /// most `limit`, **oldest first**. Discord searches recent history (bots have no search API);
    /// Misskey uses its note / chat search.
    async fn search_messages(
        &self,
        channel_id: &ChannelId,
        query: &str,
        limit: usize,
    ) -> Result<Vec<ChatMessage>, PlatformError>;

    /// A user's names, as seen from `channel_id` (Discord shows the guild nickname as display
    /// name).
    async fn user_info(
        &self,
        channel_id: &ChannelId,
        user_id: &UserId,
    ) -> Result<UserInfo, PlatformError>;

    /// Adds the bot's reaction `emoji` to `message_id`. A custom emoji without an id is resolved
    /// by name (Discord: among the channel's guild emojis, else [`PlatformError::NotFound`]).
    async fn add_reaction(
        &self,
        channel_id: &ChannelId,
        message_id: &MessageId,
        emoji: &ReactionEmoji,
    ) -> Result<(), PlatformError>;

    /// Removes the bot's own reaction `emoji` from `message_id` (react-message replaces an earlier
    /// reaction of the same session with this).
    async fn remove_reaction(
        &self,
        channel_id: &ChannelId,
        message_id: &MessageId,
        emoji: &ReactionEmoji,
    ) -> Result<(), PlatformError>;

    /// Uploads `files` (at least one) to `channel_id` with an optional `caption`, threaded to
    /// `reply_to`. Discord: one message with every attachment; Misskey note: one note with every
    /// drive file; Misskey chat: one message per file, the caption on the first, unreferenced
    /// uploads cleaned up. `Err` when nothing was delivered; `Ok` with
    /// [`FileDelivery::failed`] filled on a partial delivery.
    ///
    /// The caller has validated paths and sizes; `caption` must fit
    /// [`text_limit`](Self::text_limit). A file marked as a voice message
    /// ([`OutgoingFile::voice`]) must be the only one; Discord sends it with the voice-message
    /// flag and no text (the caption becomes its alt text when it has none), Misskey as an
    /// audio file with the caption as the note's or message's text.
    async fn send_files(
        &self,
        channel_id: &ChannelId,
        files: Vec<OutgoingFile>,
        caption: Option<&str>,
        reply_to: Option<&MessageId>,
    ) -> Result<FileDelivery, PlatformError>;

    /// Sends a direct message to `user_id` (Discord DM channel, Misskey chat), opening the
    /// conversation if needed. `text` must fit [`dm_text_limit`](Self::dm_text_limit). Used by
    /// reminders and to answer user commands on Misskey.
    async fn send_dm(&self, user_id: &UserId, text: &str) -> Result<SentMessage, PlatformError>;

    /// Sends files to `user_id` by direct message (memory-export), same delivery rules as
    /// [`send_files`](Self::send_files) in a DM.
    async fn send_dm_files(
        &self,
        user_id: &UserId,
        files: Vec<OutgoingFile>,
        caption: Option<&str>,
    ) -> Result<FileDelivery, PlatformError>;

    /// Custom emojis usable in `channel_id` (Discord: the channel's guild emojis, none in DMs;
    /// Misskey: the instance's emojis), for the prompt's emoji list and react-message.
    async fn custom_emojis(
        &self,
        channel_id: &ChannelId,
    ) -> Result<Vec<CustomEmoji>, PlatformError>;

    /// Shows the typing indicator in `channel_id` once (Discord shows it for about 10 s; the
    /// caller repeats it every ~8 s while a session runs). Platforms without one do nothing.
    async fn start_typing(&self, channel_id: &ChannelId) -> Result<(), PlatformError> {
        let _ = channel_id;
        Ok(())
    }

    /// The message a thread began with (Discord: the message a thread was opened from, in its
    /// parent channel, or a forum post's first message), for the prompt. `Ok(None)` when
    /// `channel_id` is not a thread, the platform has none, or the message was deleted.
    async fn thread_starter(
        &self,
        channel_id: &ChannelId,
    ) -> Result<Option<ChatMessage>, PlatformError> {
        let _ = channel_id;
        Ok(None)
    }

    /// Opens a thread from the message `message_id` of `channel_id`, named `name` (at most
    /// 100 characters, cut by the adapter), and returns the thread's channel. A thread already
    /// opened from that message is returned as it is. `Ok(None)`: the platform has no threads.
    async fn open_thread(
        &self,
        channel_id: &ChannelId,
        message_id: &MessageId,
        name: &str,
    ) -> Result<Option<ChannelId>, PlatformError> {
        let _ = (channel_id, message_id, name);
        Ok(None)
    }

    /// The feed through which a catch-up reads back what was missed in `channel_id` (the
    /// catch-up keeps one cursor per feed). Discord reads each channel back, so the channel
    /// itself; Misskey reads note threads back through its mentions and replies, and each
    /// chat on its own.
    fn catch_up_feed(&self, channel_id: &ChannelId) -> ChannelId {
        channel_id.clone()
    }

    /// What arrived in `feed` after the message `after`, **oldest first**: at most `max`
    /// messages, the newest ones when more arrived ([`Missed::more`]). Messages are converted
    /// as live ones are (the bot's own, other bots' and other guilds' are left out); the router
    /// then applies the trigger rules. A platform that cannot miss a message (the console,
    /// whose user is gone with the process) reads back nothing.
    async fn missed_messages(
        &self,
        feed: &ChannelId,
        after: &MessageId,
        max: usize,
    ) -> Result<Missed, PlatformError> {
        let _ = (feed, after, max);
        Ok(Missed::default())
    }
}

/// The adapters of the running daemon, one per configured platform.
#[derive(Clone, Default)]
pub struct PlatformRegistry {
    adapters: BTreeMap<PlatformKind, Arc<dyn PlatformAdapter>>,
}

impl std::fmt::Debug for PlatformRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.adapters.keys()).finish()
    }
}

impl PlatformRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `adapter` under its [`kind`](PlatformAdapter::kind), replacing any previous one.
    pub fn insert(&mut self, adapter: Arc<dyn PlatformAdapter>) {
        self.adapters.insert(adapter.kind(), adapter);
    }

    /// Builder form of [`insert`](Self::insert).
    pub fn with(mut self, adapter: Arc<dyn PlatformAdapter>) -> Self {
        self.insert(adapter);
        self
    }

    /// The adapter for `kind`, if configured.
    pub fn get(&self, kind: PlatformKind) -> Option<Arc<dyn PlatformAdapter>> {
        self.adapters.get(&kind).cloned()
    }

    /// The adapter for `kind`, or [`PlatformError::Unsupported`] when that platform is not
    /// configured (e.g. a reminder stored for Misskey after Misskey was removed from the config).
    pub fn require(&self, kind: PlatformKind) -> Result<Arc<dyn PlatformAdapter>, PlatformError> {
        self.get(kind)
            .ok_or(PlatformError::Unsupported("platform not configured"))
    }

    /// The configured platforms, in a stable order.
    pub fn kinds(&self) -> Vec<PlatformKind> {
        self.adapters.keys().copied().collect()
    }

    /// Whether no platform is configured.
    pub fn is_empty(&self) -> bool {
        self.adapters.is_empty()
    }
}

/// Sending a split text stopped after some parts.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{error} ({} of the message parts were delivered first)", sent.len())]
pub struct SendTextError {
    /// Parts delivered before the failure, in order (the user did receive these).
    pub sent: Vec<SentMessage>,
    /// Why the next part failed.
    pub error: PlatformError,
}

/// Splits `text` to the channel's limit and sends the parts in order; the first part is threaded
/// to `reply_to`, the following ones are sent with `reply_to: None` (plain follow-ups on Discord,
/// replies to the thread's note on Misskey).
///
/// `text` should already have been through [`process_outgoing`](crate::text::process_outgoing).
/// Empty text is [`PlatformError::InvalidInput`] with nothing sent. On failure the error lists the
/// parts already delivered, so send-reply can still count the reply as made.
pub async fn send_text(
    adapter: &dyn PlatformAdapter,
    channel_id: &ChannelId,
    text: &str,
    reply_to: Option<&MessageId>,
) -> Result<Vec<SentMessage>, SendTextError> {
    let parts = split_or_reject(text, adapter.text_limit(channel_id))?;
    let mut sent = Vec::with_capacity(parts.len());
    for (index, part) in parts.iter().enumerate() {
        let anchor = if index == 0 { reply_to } else { None };
        match adapter.send_message(channel_id, part, anchor).await {
            Ok(message) => sent.push(message),
            Err(error) => return Err(SendTextError { sent, error }),
        }
    }
    Ok(sent)
}

/// [`send_text`] for a direct message to `user_id` (reminders), split to
/// [`dm_text_limit`](PlatformAdapter::dm_text_limit).
pub async fn send_dm_text(
    adapter: &dyn PlatformAdapter,
    user_id: &UserId,
    text: &str,
) -> Result<Vec<SentMessage>, SendTextError> {
    let parts = split_or_reject(text, adapter.dm_text_limit())?;
    let mut sent = Vec::with_capacity(parts.len());
    for part in &parts {
        match adapter.send_dm(user_id, part).await {
            Ok(message) => sent.push(message),
            Err(error) => return Err(SendTextError { sent, error }),
        }
    }
    Ok(sent)
}

fn split_or_reject(text: &str, limits: TextLimits) -> Result<Vec<String>, SendTextError> {
    let parts = crate::text::split_message(text, limits);
    if parts.is_empty() {
        return Err(SendTextError {
            sent: Vec::new(),
            error: PlatformError::InvalidInput("the message is empty".into()),
        });
    }
    Ok(parts)
}

#[cfg(test)]
mod tests {
    use super::fake::{FakePlatform, Op};
    use super::*;

    #[tokio::test]
    async fn send_text_threads_only_the_first_part() {
        let fake = FakePlatform::discord();
        fake.set_text_limit(TextLimits::new(20, LengthUnit::Utf16));
        let trigger = fake.push_user_message("c", "u1", "tell me");
        let text = "First sentence here. Second sentence here. Third one.";
        let sent = send_text(&fake, &"c".into(), text, Some(&trigger))
            .await
            .expect("sent");
        let records = fake.sent();
        assert_eq!(sent.len(), records.len());
        assert!(sent.len() >= 3);
        assert_eq!(records[0].reply_to.as_deref(), Some(trigger.as_str()));
        assert!(records[1..].iter().all(|r| r.reply_to.is_none()));
        assert_eq!(fake.sent_texts()[0], "First sentence here.");
    }

    #[tokio::test]
    async fn send_text_reports_parts_delivered_before_a_failure() {
        let fake = FakePlatform::discord();
        fake.set_text_limit(TextLimits::new(10, LengthUnit::Chars));
        fake.fail_after(Op::SendMessage, 1, PlatformError::Transport("reset".into()));
        let err = send_text(&fake, &"c".into(), "one two three four five six", None)
            .await
            .expect_err("second part fails");
        assert_eq!(err.sent.len(), 1);
        assert_eq!(err.error, PlatformError::Transport("reset".into()));
        assert!(err.error.is_retryable());
        assert_eq!(fake.sent_texts(), vec!["one two"]);
        assert_eq!(fake.call_count(Op::SendMessage), 2);
    }

    #[tokio::test]
    async fn empty_text_is_rejected_without_a_call() {
        let fake = FakePlatform::discord();
        let err = send_text(&fake, &"c".into(), "  \n", None).await;
        assert!(matches!(
            err,
            Err(SendTextError {
                ref sent,
                error: PlatformError::InvalidInput(_)
            }) if sent.is_empty()
        ));
        assert!(fake.calls().is_empty());
    }

    #[tokio::test]
    async fn send_dm_text_splits_to_the_dm_limit() {
        let fake = FakePlatform::misskey();
        fake.add_user("u1", "alice", "Alice");
        let text = "Reminder: ".to_owned() + &"drink water. ".repeat(200);
        let sent = send_dm_text(&fake, &"u1".into(), &text)
            .await
            .expect("sent");
        assert_eq!(sent.len(), 2);
        let texts = fake.dm_texts("u1");
        assert!(
            texts
                .iter()
                .all(|t| crate::platform::misskey::CHAT_TEXT_LIMITS.fits(t))
        );
    }

    #[test]
    fn registry_maps_kinds_to_adapters() {
        let discord: Arc<dyn PlatformAdapter> = Arc::new(FakePlatform::discord());
        let misskey: Arc<dyn PlatformAdapter> = Arc::new(FakePlatform::misskey());
        let registry = PlatformRegistry::new().with(misskey).with(discord);
        assert_eq!(
            registry.kinds(),
            vec![PlatformKind::Discord, PlatformKind::Misskey]
        );
        assert_eq!(
            registry.get(PlatformKind::Misskey).map(|a| a.kind()),
            Some(PlatformKind::Misskey)
        );
        assert!(matches!(
            registry.require(PlatformKind::Console),
            Err(PlatformError::Unsupported(_))
        ));
        assert!(!registry.is_empty());
        assert_eq!(format!("{registry:?}"), "{Discord, Misskey}");
    }
}
