//! [`FakePlatform`]: an in-memory [`PlatformAdapter`](super::PlatformAdapter) for handler,
//! pipeline and scheduler tests.
//!
//! It behaves like a small, strict chat platform:
//! * channels hold a history (seeded by the test, grown by what the bot sends); sent, edited and
//!   deleted messages show up in it, so get-message / fetch-context see the bot's own replies;
//! * the adapter contract is enforced: empty text, text over the limit, replying to or reacting to
//!   a message that does not exist, editing someone else's message, DMing an unknown user, an
//!   unknown custom emoji — all fail the way a real platform would;
//! * every call is recorded with all its arguments ([`Call`]), including calls that failed;
//! * failures are scriptable per operation ([`FakePlatform::fail_next`],
//!   [`FakePlatform::fail_after`], [`FakePlatform::rate_limit_next`]) and per file name
//!   ([`FakePlatform::fail_file`]);
//! * [`FakePlatform::discord`] and [`FakePlatform::misskey`] preset the platform's quirks: limits,
//!   edit-in-place vs. delete-and-re-create, one message per file in Misskey chats.
//!
//! All methods take `&self`, so a test keeps an `Arc<FakePlatform>`, hands a clone to the code
//! under test as `Arc<dyn PlatformAdapter>`, and scripts or inspects it at any time. Message ids
//! are generated as `sent-N` (bot messages) and `in-N` (messages pushed as users); timestamps come
//! from a fake clock that starts at 2025-01-01T00:00:00Z and advances one second per message.

mod adapter;
mod calls;

pub use calls::{Call, FileMode, FileRecord, Op, SentRecord};

use crate::sync::Recover;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};

use super::{
    ChatMessage, CustomEmoji, IncomingMessage, MessageId, PlatformError, PlatformKind,
    ReactionEmoji, TextLimits, UserInfo,
};
use crate::text::LengthUnit;

/// The fake's mutable state, behind one lock that is never held across an `.await`.
struct State {
    bot_user_id: String,
    bot_username: String,
    next_id: u64,
    clock: DateTime<Utc>,
    text_limit: Option<TextLimits>,
    channel_limits: HashMap<String, TextLimits>,
    dm_limit: TextLimits,
    edit_recreates: bool,
    file_mode: FileMode,
    latency: Option<Duration>,
    channels: BTreeMap<String, Vec<ChatMessage>>,
    users: BTreeMap<String, UserInfo>,
    emojis: Vec<CustomEmoji>,
    channel_emojis: HashMap<String, Vec<CustomEmoji>>,
    /// Per thread channel, the message it began with.
    thread_starters: HashMap<String, ChatMessage>,
    reactions: BTreeMap<(String, String), Vec<ReactionEmoji>>,
    /// Per operation, what the next calls do: `None` succeeds, `Some(e)` fails with `e`.
    failures: HashMap<Op, VecDeque<Option<PlatformError>>>,
    failing_files: HashMap<String, PlatformError>,
    calls: Vec<Call>,
    sent: Vec<SentRecord>,
    files: Vec<FileRecord>,
}

/// An in-memory, scriptable, recording [`PlatformAdapter`](super::PlatformAdapter) (see the
/// module documentation).
pub struct FakePlatform {
    kind: PlatformKind,
    state: Mutex<State>,
}

impl std::fmt::Debug for FakePlatform {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakePlatform")
            .field("kind", &self.kind)
            .finish_non_exhaustive()
    }
}

impl FakePlatform {
    /// A fake of `kind` with that platform's defaults (see [`discord`](Self::discord) and
    /// [`misskey`](Self::misskey); the console has 4000-character messages and edits in place).
    /// The bot is user `bot` named `air-friends`.
    pub fn new(kind: PlatformKind) -> Self {
        let misskey = kind == PlatformKind::Misskey;
        let state = State {
            bot_user_id: "bot".into(),
            bot_username: "air-friends".into(),
            next_id: 1,
            clock: Utc
                .with_ymd_and_hms(2025, 1, 1, 0, 0, 0)
                .single()
                .unwrap_or_default(),
            text_limit: None,
            channel_limits: HashMap::new(),
            dm_limit: match kind {
                PlatformKind::Discord => crate::platform::discord::TEXT_LIMITS,
                PlatformKind::Misskey => crate::platform::misskey::CHAT_TEXT_LIMITS,
                PlatformKind::Console => TextLimits::new(4000, LengthUnit::Chars),
            },
            edit_recreates: misskey,
            file_mode: if misskey {
                FileMode::OnePerFileInChat
            } else {
                FileMode::OneMessage
            },
            latency: None,
            channels: BTreeMap::new(),
            users: BTreeMap::new(),
            emojis: Vec::new(),
            channel_emojis: HashMap::new(),
            thread_starters: HashMap::new(),
            reactions: BTreeMap::new(),
            failures: HashMap::new(),
            failing_files: HashMap::new(),
            calls: Vec::new(),
            sent: Vec::new(),
            files: Vec::new(),
        };
        Self {
            kind,
            state: Mutex::new(state),
        }
    }

    /// A Discord-like fake: 2000 UTF-16 units, edits in place, one message per file batch, DM
    /// channels named `dm:{userId}`.
    pub fn discord() -> Self {
        Self::new(PlatformKind::Discord)
    }

    /// A Misskey-like fake: `note:` channels 3000 characters, `chat:` channels and DMs 2000
    /// characters, edit = delete and re-create (new id), one message per file in chats, DM
    /// channels named `chat:{userId}`.
    pub fn misskey() -> Self {
        Self::new(PlatformKind::Misskey)
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A test that panicked while holding the lock must not hide its state from others.
        self.state.locked()
    }

    // ----- scripting -----

    /// Sets the bot's own user id and name.
    pub fn set_bot_user(&self, user_id: &str, username: &str) -> &Self {
        let mut state = self.state();
        state.bot_user_id = user_id.into();
        state.bot_username = username.into();
        drop(state);
        self
    }

    /// Overrides the text limit of every channel.
    pub fn set_text_limit(&self, limits: TextLimits) -> &Self {
        self.state().text_limit = Some(limits);
        self
    }

    /// Overrides the text limit of one channel.
    pub fn set_channel_text_limit(&self, channel_id: &str, limits: TextLimits) -> &Self {
        self.state()
            .channel_limits
            .insert(channel_id.into(), limits);
        self
    }

    /// Overrides the text limit of direct messages.
    pub fn set_dm_text_limit(&self, limits: TextLimits) -> &Self {
        self.state().dm_limit = limits;
        self
    }

    /// Whether an edit deletes and re-creates the message with a new id (Misskey) or edits in
    /// place (Discord).
    pub fn set_edit_recreates(&self, recreates: bool) -> &Self {
        self.state().edit_recreates = recreates;
        self
    }

    /// How files are delivered.
    pub fn set_file_mode(&self, mode: FileMode) -> &Self {
        self.state().file_mode = mode;
        self
    }

    /// Makes every call wait `latency` (tokio time, so `tokio::time::pause` applies) before it
    /// acts; useful to keep a session in flight.
    pub fn set_latency(&self, latency: Duration) -> &Self {
        self.state().latency = Some(latency);
        self
    }

    /// Moves the fake clock (the timestamp of the next created message).
    pub fn set_now(&self, now: DateTime<Utc>) -> &Self {
        self.state().clock = now;
        self
    }

    /// Registers a user (needed by `user_info` and DMs).
    pub fn add_user(&self, user_id: &str, username: &str, display_name: &str) -> &Self {
        self.state().users.insert(
            user_id.into(),
            UserInfo {
                user_id: user_id.into(),
                username: username.into(),
                display_name: display_name.into(),
            },
        );
        self
    }

    /// Appends a message to a channel's history as is.
    pub fn seed_message(&self, channel_id: &str, message: ChatMessage) -> &Self {
        self.state()
            .channels
            .entry(channel_id.into())
            .or_default()
            .push(message);
        self
    }

    /// Appends a message written by `user_id` (registered as a user with that name if unknown)
    /// to a channel's history, with a generated id (`in-N`) and the fake clock's time; returns the
    /// id.
    pub fn push_user_message(&self, channel_id: &str, user_id: &str, content: &str) -> MessageId {
        let mut state = self.state();
        let username = state
            .users
            .entry(user_id.into())
            .or_insert_with(|| UserInfo {
                user_id: user_id.into(),
                username: user_id.into(),
                display_name: user_id.into(),
            })
            .username
            .clone();
        let (message_id, timestamp) = state.next_message("in");
        let message_id = MessageId::new(message_id);
        state
            .channels
            .entry(channel_id.into())
            .or_default()
            .push(ChatMessage {
                message_id: message_id.clone(),
                user_id: user_id.into(),
                username,
                content: content.into(),
                timestamp,
                is_bot: false,
                attachments: Vec::new(),
            });
        message_id
    }

    /// A user's message arriving in `channel_id`: pushed into the history (so replies and
    /// reactions to it work) and returned as the [`IncomingMessage`] an adapter would deliver.
    /// It counts as a DM when `channel_id` is [`dm_channel_id`](Self::dm_channel_id) of the
    /// user; otherwise it mentions the bot and (on Discord) belongs to guild `guild`. Adjust the
    /// returned fields as the test needs.
    pub fn push_incoming(&self, channel_id: &str, user_id: &str, content: &str) -> IncomingMessage {
        let message_id = self.push_user_message(channel_id, user_id, content);
        let is_dm = channel_id == self.dm_channel_id(user_id);
        let state = self.state();
        let user = state.users.get(user_id).cloned();
        let timestamp = state
            .channels
            .get(channel_id)
            .and_then(|history| history.last())
            .map_or(state.clock, |m| m.timestamp);
        drop(state);
        let (username, display_name) = user
            .map(|u| (u.username, u.display_name))
            .unwrap_or_else(|| (user_id.to_owned(), user_id.to_owned()));
        IncomingMessage {
            platform: self.kind,
            channel_id: channel_id.into(),
            guild_id: (!is_dm && self.kind == PlatformKind::Discord).then(|| "guild".to_owned()),
            user_id: user_id.into(),
            username,
            display_name,
            message_id,
            is_dm,
            content: content.into(),
            attachments: Vec::new(),
            timestamp,
            reply_to_message_id: None,
            replied_to_bot: false,
            is_bot: false,
            mentions_bot: !is_dm,
            location: Default::default(),
        }
    }

    /// A DM from `user_id` (see [`push_incoming`](Self::push_incoming)).
    pub fn push_incoming_dm(&self, user_id: &str, content: &str) -> IncomingMessage {
        self.push_incoming(&self.dm_channel_id(user_id), user_id, content)
    }

    /// Custom emojis of every channel without its own list.
    pub fn set_custom_emojis(&self, emojis: Vec<CustomEmoji>) -> &Self {
        self.state().emojis = emojis;
        self
    }

    /// Custom emojis of one channel.
    pub fn set_channel_emojis(&self, channel_id: &str, emojis: Vec<CustomEmoji>) -> &Self {
        self.state()
            .channel_emojis
            .insert(channel_id.into(), emojis);
        self
    }

    /// The message the thread `channel_id` began with (what `thread_starter` answers).
    pub fn set_thread_starter(&self, channel_id: &str, message: ChatMessage) -> &Self {
        self.state()
            .thread_starters
            .insert(channel_id.into(), message);
        self
    }

    /// Makes the next call of `op` fail with `error` (queued: call it twice to fail two calls).
    pub fn fail_next(&self, op: Op, error: PlatformError) -> &Self {
        self.fail_after(op, 0, error)
    }

    /// Lets the next `successes` calls of `op` through, then makes one fail with `error` (e.g.
    /// the second part of a split reply). Queued after earlier scripted outcomes of `op`.
    pub fn fail_after(&self, op: Op, successes: usize, error: PlatformError) -> &Self {
        let mut state = self.state();
        let queue = state.failures.entry(op).or_default();
        queue.extend(std::iter::repeat_n(None, successes));
        queue.push_back(Some(error));
        drop(state);
        self
    }

    /// Makes the next call of `op` fail with a rate limit asking to wait `retry_after`.
    pub fn rate_limit_next(&self, op: Op, retry_after: Duration) -> &Self {
        self.fail_next(op, PlatformError::RateLimited { retry_after })
    }

    /// Makes every delivery of a file named `filename` fail with `error` until
    /// [`clear_failures`](Self::clear_failures): the whole batch in one-message mode, only that
    /// file in one-per-file mode (a partial delivery).
    pub fn fail_file(&self, filename: &str, error: PlatformError) -> &Self {
        self.state().failing_files.insert(filename.into(), error);
        self
    }

    /// Drops every scripted failure.
    pub fn clear_failures(&self) -> &Self {
        let mut state = self.state();
        state.failures.clear();
        state.failing_files.clear();
        drop(state);
        self
    }

    // ----- inspection -----

    /// The channel id DMs to `user_id` go to: `chat:{userId}` on Misskey, `dm:{userId}`
    /// elsewhere.
    pub fn dm_channel_id(&self, user_id: &str) -> String {
        match self.kind {
            PlatformKind::Misskey => format!("chat:{user_id}"),
            _ => format!("dm:{user_id}"),
        }
    }

    /// Every call so far, in order.
    pub fn calls(&self) -> Vec<Call> {
        self.state().calls.clone()
    }

    /// Every call so far, clearing the record.
    pub fn take_calls(&self) -> Vec<Call> {
        std::mem::take(&mut self.state().calls)
    }

    /// The calls of one operation, in order.
    pub fn calls_of(&self, op: Op) -> Vec<Call> {
        self.state()
            .calls
            .iter()
            .filter(|call| call.op() == op)
            .cloned()
            .collect()
    }

    /// How many times `op` was called (successfully or not).
    pub fn call_count(&self, op: Op) -> usize {
        self.state()
            .calls
            .iter()
            .filter(|call| call.op() == op)
            .count()
    }

    /// Messages successfully sent by `send_message` and `send_dm`, in order.
    pub fn sent(&self) -> Vec<SentRecord> {
        self.state().sent.clone()
    }

    /// Texts successfully sent by `send_message` (not DMs), in order.
    pub fn sent_texts(&self) -> Vec<String> {
        self.state()
            .sent
            .iter()
            .filter(|record| !record.dm)
            .map(|record| record.text.clone())
            .collect()
    }

    /// Texts successfully sent to `user_id` by `send_dm`, in order.
    pub fn dm_texts(&self, user_id: &str) -> Vec<String> {
        let channel = self.dm_channel_id(user_id);
        self.state()
            .sent
            .iter()
            .filter(|record| record.dm && record.channel_id == channel)
            .map(|record| record.text.clone())
            .collect()
    }

    /// Successful file deliveries, in order.
    pub fn file_deliveries(&self) -> Vec<FileRecord> {
        self.state().files.clone()
    }

    /// A channel's current history, oldest first (after edits and deletions).
    pub fn history(&self, channel_id: &str) -> Vec<ChatMessage> {
        self.state()
            .channels
            .get(channel_id)
            .cloned()
            .unwrap_or_default()
    }

    /// The bot's current reactions on a message.
    pub fn reactions(&self, channel_id: &str, message_id: &str) -> Vec<ReactionEmoji> {
        self.state()
            .reactions
            .get(&(channel_id.to_owned(), message_id.to_owned()))
            .cloned()
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::platform::{OutgoingFile, PlatformAdapter};

    fn emoji(name: &str) -> CustomEmoji {
        CustomEmoji {
            name: name.into(),
            id: Some("99".into()),
            animated: false,
        }
    }

    #[tokio::test]
    async fn records_calls_and_grows_history() {
        let fake = FakePlatform::discord();
        let trigger = fake.push_user_message("c1", "u1", "hello bot");
        let sent = fake
            .send_message(&"c1".into(), "hi!", Some(&trigger))
            .await
            .expect("sent");
        assert_eq!(sent.message_id, "sent-2");
        assert_eq!(
            fake.calls(),
            vec![Call::SendMessage {
                channel_id: "c1".into(),
                text: "hi!".into(),
                reply_to: Some(trigger.to_string()),
            }]
        );
        assert_eq!(fake.sent_texts(), vec!["hi!"]);
        let history = fake
            .recent_messages(&"c1".into(), 10)
            .await
            .expect("history");
        assert_eq!(history.len(), 2);
        assert_eq!(history[0].message_id, trigger);
        assert!(history[1].is_bot);
        assert!(history[0].timestamp < history[1].timestamp);
        assert_eq!(fake.call_count(Op::RecentMessages), 1);
    }

    #[tokio::test]
    async fn enforces_the_adapter_contract() {
        let fake = FakePlatform::discord();
        fake.set_text_limit(TextLimits::new(5, LengthUnit::Utf16));
        assert!(matches!(
            fake.send_message(&"c".into(), "  ", None).await,
            Err(PlatformError::InvalidInput(_))
        ));
        assert!(matches!(
            fake.send_message(&"c".into(), "123456", None).await,
            Err(PlatformError::InvalidInput(_))
        ));
        assert!(matches!(
            fake.send_message(&"c".into(), "ok", Some(&"nope".into()))
                .await,
            Err(PlatformError::NotFound(_))
        ));
        let theirs = fake.push_user_message("c", "u1", "mine");
        assert!(matches!(
            fake.edit_message(&"c".into(), &theirs, "x", None).await,
            Err(PlatformError::Forbidden(_))
        ));
        assert!(matches!(
            fake.send_dm(&"stranger".into(), "hi").await,
            Err(PlatformError::NotFound(_))
        ));
        assert!(matches!(
            fake.add_reaction(&"c".into(), &theirs, &":missing:".parse().expect("emoji"))
                .await,
            Err(PlatformError::NotFound(_))
        ));
        // Failed attempts are recorded too; nothing was delivered.
        assert_eq!(fake.call_count(Op::SendMessage), 3);
        assert!(fake.sent().is_empty());
    }

    #[tokio::test]
    async fn scripted_failures_apply_once_per_queue_entry() {
        let fake = FakePlatform::discord();
        fake.rate_limit_next(Op::SendMessage, Duration::from_secs(2))
            .fail_next(Op::SendMessage, PlatformError::Transport("reset".into()));
        let first = fake.send_message(&"c".into(), "a", None).await;
        assert_eq!(
            first,
            Err(PlatformError::RateLimited {
                retry_after: Duration::from_secs(2)
            })
        );
        assert!(matches!(
            fake.send_message(&"c".into(), "a", None).await,
            Err(PlatformError::Transport(_))
        ));
        assert!(fake.send_message(&"c".into(), "a", None).await.is_ok());
        // Other operations are unaffected.
        fake.fail_next(Op::GetMessage, PlatformError::NotFound("x".into()));
        assert!(fake.start_typing(&"c".into()).await.is_ok());
    }

    #[tokio::test]
    async fn discord_edits_in_place_and_misskey_recreates() {
        let discord = FakePlatform::discord();
        let sent = discord
            .send_message(&"c".into(), "v1", None)
            .await
            .expect("sent");
        let edited = discord
            .edit_message(&"c".into(), &sent.message_id, "v2", None)
            .await
            .expect("edited");
        assert_eq!(edited.message_id, sent.message_id);
        let message = discord
            .get_message(&"c".into(), &sent.message_id)
            .await
            .expect("message");
        assert_eq!(message.content, "v2");

        let misskey = FakePlatform::misskey();
        let parent = misskey.push_user_message("note:n1", "u1", "@bot hi");
        let sent = misskey
            .send_message(&"note:n1".into(), "v1", Some(&parent))
            .await
            .expect("sent");
        let edited = misskey
            .edit_message(&"note:n1".into(), &sent.message_id, "v2", Some(&parent))
            .await
            .expect("edited");
        assert_ne!(edited.message_id, sent.message_id);
        assert!(matches!(
            misskey
                .get_message(&"note:n1".into(), &sent.message_id)
                .await,
            Err(PlatformError::NotFound(_))
        ));
        let history = misskey.history("note:n1");
        assert_eq!(history.len(), 2);
        assert_eq!(history[1].content, "v2");
    }

    #[tokio::test]
    async fn misskey_limits_depend_on_the_channel() {
        let misskey = FakePlatform::misskey();
        assert_eq!(
            misskey.text_limit(&"note:x".into()),
            crate::platform::misskey::NOTE_TEXT_LIMITS
        );
        assert_eq!(
            misskey.text_limit(&"chat:u".into()),
            crate::platform::misskey::CHAT_TEXT_LIMITS
        );
        assert_eq!(
            misskey.dm_text_limit(),
            crate::platform::misskey::CHAT_TEXT_LIMITS
        );
        misskey.set_channel_text_limit("note:x", TextLimits::new(10, LengthUnit::Chars));
        assert_eq!(misskey.text_limit(&"note:x".into()).max, 10);
        assert_eq!(
            FakePlatform::discord().text_limit(&"1".into()),
            crate::platform::discord::TEXT_LIMITS
        );
    }

    #[tokio::test]
    async fn files_in_one_message_fail_as_a_whole() {
        let fake = FakePlatform::discord();
        let files = vec![
            OutgoingFile::from_bytes("a.png", vec![1]),
            OutgoingFile::from_bytes("b.png", vec![2]),
        ];
        let delivery = fake
            .send_files(&"c".into(), files.clone(), Some("look"), None)
            .await
            .expect("delivered");
        assert_eq!(delivery.messages.len(), 1);
        assert!(!delivery.is_partial());
        assert_eq!(fake.file_deliveries()[0].filenames, vec!["a.png", "b.png"]);
        assert_eq!(fake.history("c")[0].content, "look");

        fake.fail_file(
            "b.png",
            PlatformError::Api {
                status: 413,
                code: None,
                message: "too large".into(),
            },
        );
        assert!(matches!(
            fake.send_files(&"c".into(), files, None, None).await,
            Err(PlatformError::Api { status: 413, .. })
        ));
        assert_eq!(fake.file_deliveries().len(), 1);
        assert!(matches!(
            fake.send_files(&"c".into(), Vec::new(), None, None).await,
            Err(PlatformError::InvalidInput(_))
        ));
    }

    #[tokio::test]
    async fn misskey_chat_files_deliver_partially() {
        let fake = FakePlatform::misskey();
        fake.add_user("u1", "alice", "Alice");
        fake.fail_file("b.txt", PlatformError::Transport("reset".into()));
        let files = vec![
            OutgoingFile::from_bytes("a.txt", b"a".to_vec()),
            OutgoingFile::from_bytes("b.txt", b"b".to_vec()),
            OutgoingFile::from_bytes("c.txt", b"c".to_vec()),
        ];
        let delivery = fake
            .send_dm_files(&"u1".into(), files, Some("your export"))
            .await
            .expect("partial delivery is Ok");
        assert_eq!(delivery.messages.len(), 2);
        assert!(delivery.is_partial());
        assert_eq!(delivery.failed[0].filename, "b.txt");
        let history = fake.history("chat:u1");
        assert_eq!(history[0].content, "your export");
        assert_eq!(history[1].content, "");
        assert_eq!(
            delivery.last_message().map(|m| m.message_id.clone()),
            Some(history[1].message_id.clone())
        );

        fake.fail_file("a.txt", PlatformError::Transport("reset".into()));
        let only_failures = vec![
            OutgoingFile::from_bytes("a.txt", b"a".to_vec()),
            OutgoingFile::from_bytes("b.txt", b"b".to_vec()),
        ];
        assert!(matches!(
            fake.send_dm_files(&"u1".into(), only_failures, None).await,
            Err(PlatformError::Transport(_))
        ));
    }

    #[tokio::test]
    async fn reactions_resolve_custom_emojis_and_toggle() {
        let fake = FakePlatform::discord();
        fake.set_custom_emojis(vec![emoji("blob")]);
        let trigger = fake.push_user_message("c", "u1", "hey");
        let blob: ReactionEmoji = ":blob:".parse().expect("emoji");
        let thumbs: ReactionEmoji = "👍".parse().expect("emoji");
        fake.add_reaction(&"c".into(), &trigger, &thumbs)
            .await
            .expect("added");
        fake.add_reaction(&"c".into(), &trigger, &blob)
            .await
            .expect("added");
        fake.add_reaction(&"c".into(), &trigger, &blob)
            .await
            .expect("idempotent");
        assert_eq!(
            fake.reactions("c", trigger.as_str()),
            vec![thumbs.clone(), blob.clone()]
        );
        fake.remove_reaction(&"c".into(), &trigger, &thumbs)
            .await
            .expect("removed");
        assert_eq!(fake.reactions("c", trigger.as_str()), vec![blob]);

        fake.set_channel_emojis("other", vec![emoji("wave")]);
        let emojis = fake.custom_emojis(&"other".into()).await.expect("emojis");
        assert_eq!(emojis[0].name, "wave");
        assert_eq!(
            fake.custom_emojis(&"c".into()).await.expect("emojis")[0].name,
            "blob"
        );
    }

    #[tokio::test]
    async fn search_matches_any_keyword_case_insensitively() {
        let fake = FakePlatform::discord();
        fake.push_user_message("c", "u1", "I like Rust");
        fake.push_user_message("c", "u1", "Cats are nice");
        fake.push_user_message("c", "u1", "nothing here");
        fake.push_user_message("c", "u1", "ラーメンが好き");
        let found = fake
            .search_messages(&"c".into(), "rust cats", 10)
            .await
            .expect("found");
        let contents: Vec<&str> = found.iter().map(|m| m.content.as_str()).collect();
        assert_eq!(contents, vec!["I like Rust", "Cats are nice"]);
        let found = fake
            .search_messages(&"c".into(), "ラーメン", 10)
            .await
            .expect("found");
        assert_eq!(found.len(), 1);
        let latest = fake
            .search_messages(&"c".into(), "e", 1)
            .await
            .expect("found");
        assert_eq!(latest[0].content, "nothing here");
        assert!(fake.search_messages(&"c".into(), " ", 10).await.is_err());
    }

    #[tokio::test]
    async fn incoming_messages_are_seeded_and_described() {
        let fake = FakePlatform::discord();
        fake.add_user("u1", "alice", "Alice A.");
        let guild = fake.push_incoming("c1", "u1", "hi");
        assert!(!guild.is_dm);
        assert!(guild.mentions_bot);
        assert_eq!(guild.guild_id.as_deref(), Some("guild"));
        assert_eq!(guild.display_name, "Alice A.");
        assert_eq!(fake.history("c1")[0].message_id, guild.message_id);

        let dm = fake.push_incoming_dm("u1", "psst");
        assert!(dm.is_dm);
        assert_eq!(dm.channel_id, "dm:u1");
        assert_eq!(dm.guild_id, None);
        fake.send_dm(&"u1".into(), "reminder!").await.expect("dm");
        assert_eq!(fake.dm_texts("u1"), vec!["reminder!"]);
        assert!(fake.sent_texts().is_empty());
        assert_eq!(
            fake.user_info(&"c1".into(), &"u1".into())
                .await
                .map(|u| u.username),
            Ok("alice".to_owned())
        );

        let misskey = FakePlatform::misskey();
        assert!(misskey.push_incoming_dm("u2", "hi").is_dm);
        assert_eq!(misskey.dm_channel_id("u2"), "chat:u2");
    }

    #[tokio::test]
    async fn latency_delays_calls() {
        let fake = FakePlatform::discord();
        fake.set_latency(Duration::from_millis(30));
        let start = tokio::time::Instant::now();
        fake.start_typing(&"c".into()).await.expect("typing");
        assert!(start.elapsed() >= Duration::from_millis(30));
    }

    #[tokio::test]
    async fn delete_removes_own_messages_only() {
        let fake = FakePlatform::discord();
        let mine = fake
            .send_message(&"c".into(), "oops", None)
            .await
            .expect("sent");
        let theirs = fake.push_user_message("c", "u1", "keep");
        assert!(matches!(
            fake.delete_message(&"c".into(), &theirs).await,
            Err(PlatformError::Forbidden(_))
        ));
        fake.delete_message(&"c".into(), &mine.message_id)
            .await
            .expect("deleted");
        assert_eq!(fake.history("c").len(), 1);
        assert_eq!(fake.take_calls().len(), 3);
        assert!(fake.calls().is_empty());
    }
}
