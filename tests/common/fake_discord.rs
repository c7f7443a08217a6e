//! A fake Discord (REST under `/api/v10` + gateway websocket at `/gateway`) on 127.0.0.1:0 that
//! speaks enough of the real wire protocol for serenity 0.12 and the air-friends adapter.
//!
//! REST: `GET /gateway[/bot]`, `GET /users/@me`, `GET /users/{id}`, `POST /users/@me/channels`,
//! `GET /channels/{id}` ([`CHANNEL_ID`] in [`CATEGORY_ID`], the category, the DM channel and
//! whatever [`FakeDiscord::add_channel`] added; other ids 404), `POST /channels/{id}/messages`
//! (JSON or multipart with files; a voice message, flag `IS_VOICE_MESSAGE`, only as one file
//! without content, else 400; 400 code 50083 into an archived thread:
//! [`FakeDiscord::archive_thread`]), `PATCH /channels/{id}` (`{"archived": false}` unarchives;
//! [`FakeDiscord::refuse_unarchive`] makes it fail), `GET /channels/{id}/messages?limit=&before=`
//! (newest first), `GET|PATCH|DELETE /channels/{id}/messages/{id}`, `PUT|DELETE
//! …/reactions/{emoji}/@me` (404 for a message the channel does not hold; the bot's reactions
//! are kept: [`FakeDiscord::reactions`]), `POST /channels/{id}/messages/{id}/threads` (a public
//! thread with the message's id, owned by the bot, announced with THREAD_CREATE; 400 code
//! 160004 when the message already has one), `POST /channels/{id}/typing`, `GET /guilds/{id}/members/{id}`, `GET /guilds/{id}/emojis`, `PUT
//! /applications/{app}[/guilds/{id}]/commands`, `POST /interactions/{id}/{token}/callback` (204),
//! `PATCH /webhooks/{app}/{token}/messages/@original`, `POST /webhooks/{app}/{token}`. Every
//! request is recorded ([`Recorded`]); 429s can be scripted per path ([`FakeDiscord::rate_limit`]).
//! Attachment downloads: `GET /files/{name}` serves what [`FakeDiscord::serve_file`] put there
//! (bytes, a redirect, a slow body) and records the request ([`FakeDiscord::file_hits`]).
//!
//! Messages are kept per channel, as Discord does: the message a thread was opened from stays in
//! the parent channel (its id is the thread's), a forum post's first message is in the post
//! ([`FakeDiscord::add_forum_post`]).
//!
//! Gateway: HELLO → IDENTIFY → READY (every field serenity requires) → GUILD_CREATE (the bot
//! member with a role granting every permission, one category with one text channel in it, one
//! custom emoji; channels added with [`FakeDiscord::add_channel`] are not in it); RESUME →
//! RESUMED (`d: {}`); heartbeats are ACKed; IDENTIFY is closed with 4004 for another token
//! ([`FakeDiscord::expect_token`]) and 4014 while intents are refused
//! ([`FakeDiscord::refuse_intents`]). Tests push dispatches ([`FakeDiscord::dispatch`],
//! [`FakeDiscord::push_message`], [`FakeDiscord::push_interaction`],
//! [`FakeDiscord::announce_thread`]) and can drop the connection
//! ([`FakeDiscord::drop_connection`]) to exercise reconnects.
#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use super::poll::eventually;

use axum::Router;
use axum::body::Bytes;
use axum::extract::ws::{Message as WsMessage, WebSocket, WebSocketUpgrade};
use axum::extract::{OriginalUri, State};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_util::sync::{CancellationToken, DropGuard};

/// The bot's user id.
pub const BOT_ID: &str = "1000";
/// The application id.
pub const APP_ID: &str = "2000";
/// The one guild.
pub const GUILD_ID: &str = "3000";
/// A text channel of the guild, in [`CATEGORY_ID`].
pub const CHANNEL_ID: &str = "4000";
/// The guild's category that [`CHANNEL_ID`] sits in.
pub const CATEGORY_ID: &str = "3900";
/// The DM channel with [`USER_ID`].
pub const DM_CHANNEL_ID: &str = "4001";
/// A public thread of [`CHANNEL_ID`] (served once a test adds it: [`FakeDiscord::add_thread`]).
pub const THREAD_ID: &str = "4100";
/// A forum in [`CATEGORY_ID`] ([`FakeDiscord::add_forum_post`]).
pub const FORUM_ID: &str = "4200";
/// A post (a public thread) of [`FORUM_ID`] ([`FakeDiscord::add_forum_post`]); its first
/// message has the same id.
pub const FORUM_POST_ID: &str = "4201";
/// A human member.
pub const USER_ID: &str = "5000";
/// Another bot.
pub const OTHER_BOT_ID: &str = "5001";
/// The guild's custom emoji `:blobcat:`.
pub const EMOJI_ID: &str = "6000";
/// Every permission (as Discord's decimal string).
const ALL_PERMISSIONS: &str = "2251799813685247";
const TIMESTAMP: &str = "2025-01-01T00:00:00.000000+00:00";

/// One REST request as the fake saw it.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// `GET`, `POST`, …
    pub method: String,
    /// Path below `/api/v10`, with the query string.
    pub path: String,
    /// The JSON body (for multipart: the `payload_json` part).
    pub json: Option<Value>,
    /// Multipart part names, in order (`payload_json`, `files[0]`, …).
    pub parts: Vec<String>,
    /// Multipart file names, in order.
    pub filenames: Vec<String>,
    /// Multipart file contents, in order.
    pub files: Vec<Vec<u8>>,
    /// The `Authorization` header.
    pub authorization: Option<String>,
}

/// A stored channel message.
#[derive(Debug, Clone)]
pub struct StoredMessage {
    pub id: u64,
    pub channel_id: String,
    pub author_id: String,
    pub username: String,
    pub bot: bool,
    pub content: String,
    pub attachments: Vec<String>,
    /// The attachment objects a test pushed with the message (served back as they are).
    pub attachment_json: Vec<Value>,
    /// When it was written (RFC 3339).
    pub timestamp: String,
}

/// Discord's channel types the fake serves (the `type` field).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChannelKind {
    /// A guild text channel (0).
    Text = 0,
    /// A category (4).
    Category = 4,
    /// An announcement thread (10).
    NewsThread = 10,
    /// A public thread, also a forum post (11).
    PublicThread = 11,
    /// A private thread (12).
    PrivateThread = 12,
    /// A forum (15).
    Forum = 15,
}

enum Outbound {
    Dispatch(&'static str, Value),
    Close,
}

#[derive(Default)]
struct Inner {
    requests: Vec<Recorded>,
    rate_limits: Vec<(String, usize, f64)>,
    messages: BTreeMap<String, Vec<StoredMessage>>,
    next_id: u64,
    seq: u64,
    connection: Option<mpsc::UnboundedSender<Outbound>>,
    pending: VecDeque<(&'static str, Value)>,
    identifies: usize,
    resumes: usize,
    identify_payloads: Vec<Value>,
    refusing: bool,
    /// Downloads served under `/files/` (see [`FakeDiscord::serve_file`]).
    files: HashMap<String, Served>,
    /// Paths of every `/files/` request, in order.
    file_hits: Vec<String>,
    /// Discord's limit on messages sent to one channel: at most this many per window
    /// ([`FakeDiscord::limit_sends`]).
    send_limit: Option<(usize, Duration)>,
    /// When messages were sent, per channel (for `send_limit`).
    sends: HashMap<String, VecDeque<std::time::Instant>>,
    /// 429s served because a channel's send limit was reached.
    send_limit_hits: usize,
    /// IDENTIFY with another token is closed with 4004 ([`FakeDiscord::expect_token`]).
    expected_token: Option<String>,
    /// IDENTIFY is closed with 4014, as without the Message Content intent switched on.
    refusing_intents: bool,
    /// Guild channels added by tests ([`FakeDiscord::add_channel`]) or opened from a message:
    /// id → channel object.
    channels: HashMap<String, Value>,
    /// Archived threads: a message sent into one answers 400 code 50083.
    archived: HashSet<String>,
    /// What `PATCH /channels/{id}` answers instead of unarchiving: (status, code, message).
    unarchive_refusal: Option<(u16, u32, String)>,
    /// The bot's reactions: (channel, message, emoji path segment).
    reactions: Vec<(String, String, String)>,
    /// Channels GUILD_CREATE lists besides its own ([`FakeDiscord::add_guild_channel`]).
    guild_channels: Vec<Value>,
    /// The server-wide permissions of `@everyone` and the bot's role in GUILD_CREATE (every
    /// permission, Administrator included, unless set: [`FakeDiscord::set_role_permissions`]).
    role_permissions: Option<u64>,
}

/// What a `/files/{name}` request gets.
#[derive(Clone)]
pub enum Served {
    /// 200 with this content type and body.
    Bytes(&'static str, Vec<u8>),
    /// 302 to this location.
    Redirect(String),
    /// 200 after this long (a slow download).
    Slow(Duration, Vec<u8>),
}

#[derive(Clone)]
struct Shared {
    inner: Arc<Mutex<Inner>>,
    addr: SocketAddr,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A running fake Discord; stops when dropped.
pub struct FakeDiscord {
    shared: Shared,
    _stop: DropGuard,
}

impl FakeDiscord {
    /// Binds 127.0.0.1:0 and serves until dropped.
    pub async fn start() -> FakeDiscord {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let shared = Shared {
            inner: Arc::new(Mutex::new(Inner {
                next_id: 10_000_000,
                ..Inner::default()
            })),
            addr,
        };
        let app = Router::new()
            .route("/gateway", get(gateway))
            .fallback(rest)
            .with_state(shared.clone());
        let stop = CancellationToken::new();
        let token = stop.clone();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(token.cancelled_owned())
                .await;
        });
        FakeDiscord {
            shared,
            _stop: stop.drop_guard(),
        }
    }

    /// What `platforms.discord.apiBaseUrl` should be.
    pub fn api_base_url(&self) -> String {
        format!("http://{}", self.shared.addr)
    }

    /// Serves `what` at `/files/{name}` (outside `/api/v10`, as attachments are served from
    /// the CDN); returns its URL.
    pub fn serve_file(&self, name: &str, what: Served) -> String {
        self.shared.lock().files.insert(name.to_owned(), what);
        format!("http://{}/files/{name}", self.shared.addr)
    }

    /// The `/files/` names requested so far, in order.
    pub fn file_hits(&self) -> Vec<String> {
        self.shared.lock().file_hits.clone()
    }

    /// What `platforms.discord.gatewayUrl` should be (also what `GET /gateway` announces).
    pub fn gateway_url(&self) -> String {
        format!("ws://{}/gateway", self.shared.addr)
    }

    /// Every REST request so far.
    pub fn requests(&self) -> Vec<Recorded> {
        self.shared.lock().requests.clone()
    }

    /// REST requests with `method` whose path starts with `prefix`.
    pub fn requests_to(&self, method: &str, prefix: &str) -> Vec<Recorded> {
        self.requests()
            .into_iter()
            .filter(|r| r.method == method && r.path.starts_with(prefix))
            .collect()
    }

    /// Waits (up to 20 s) until `count` requests match, then returns them.
    pub async fn wait_for_requests(
        &self,
        method: &str,
        prefix: &str,
        count: usize,
    ) -> Vec<Recorded> {
        let shared = self.shared.clone();
        let (method, prefix) = (method.to_owned(), prefix.to_owned());
        let what = format!("{count} request(s) {method} {prefix}");
        eventually(Duration::from_secs(20), &what, || {
            shared
                .lock()
                .requests
                .iter()
                .filter(|r| r.method == method && r.path.starts_with(&prefix))
                .count()
                >= count
        })
        .await;
        self.requests_to(&method, &prefix)
    }

    /// The next `times` requests whose path contains `path_part` answer 429 with `retry_after`
    /// seconds (body and `Retry-After` header).
    pub fn rate_limit(&self, path_part: &str, times: usize, retry_after: f64) {
        self.shared
            .lock()
            .rate_limits
            .push((path_part.to_owned(), times, retry_after));
    }

    /// Messages of `channel`, oldest first.
    pub fn messages(&self, channel: &str) -> Vec<StoredMessage> {
        self.shared
            .lock()
            .messages
            .get(channel)
            .cloned()
            .unwrap_or_default()
    }

    /// Adds a message from someone to `channel`'s history, written now, and returns its id.
    pub fn seed_message(
        &self,
        channel: &str,
        author_id: &str,
        username: &str,
        bot: bool,
        content: &str,
    ) -> String {
        self.seed_message_at(
            channel,
            author_id,
            username,
            bot,
            content,
            chrono::Utc::now(),
        )
    }

    /// Adds a message written at `at` to `channel`'s history (as one sent while the bot was
    /// away: no gateway event) and returns its id.
    pub fn seed_message_at(
        &self,
        channel: &str,
        author_id: &str,
        username: &str,
        bot: bool,
        content: &str,
        at: chrono::DateTime<chrono::Utc>,
    ) -> String {
        let id = {
            let mut inner = self.shared.lock();
            inner.next_id += 1;
            inner.next_id
        };
        self.store(channel, id, author_id, username, bot, content, at);
        id.to_string()
    }

    /// Adds a message with the given `id` from a human to `channel`'s history, written now (the
    /// message a thread was opened from, whose id is the thread's).
    pub fn seed_message_with_id(
        &self,
        channel: &str,
        id: &str,
        author_id: &str,
        username: &str,
        content: &str,
    ) {
        let id = id.parse().expect("a numeric message id");
        self.store(
            channel,
            id,
            author_id,
            username,
            false,
            content,
            chrono::Utc::now(),
        );
    }

    #[allow(clippy::too_many_arguments)]
    fn store(
        &self,
        channel: &str,
        id: u64,
        author_id: &str,
        username: &str,
        bot: bool,
        content: &str,
        at: chrono::DateTime<chrono::Utc>,
    ) {
        self.shared
            .lock()
            .messages
            .entry(channel.to_owned())
            .or_default()
            .push(StoredMessage {
                id,
                channel_id: channel.to_owned(),
                author_id: author_id.to_owned(),
                username: username.to_owned(),
                bot,
                content: content.to_owned(),
                attachments: Vec::new(),
                attachment_json: Vec::new(),
                timestamp: at.to_rfc3339(),
            });
    }

    /// How many IDENTIFYs / RESUMEs the gateway has received.
    pub fn gateway_counts(&self) -> (usize, usize) {
        let inner = self.shared.lock();
        (inner.identifies, inner.resumes)
    }

    /// The IDENTIFY payloads received.
    pub fn identify_payloads(&self) -> Vec<Value> {
        self.shared.lock().identify_payloads.clone()
    }

    /// Waits (up to `timeout`) for `condition` on the IDENTIFY / RESUME counts.
    pub async fn wait_gateway(&self, timeout: Duration, condition: impl Fn(usize, usize) -> bool) {
        let shared = self.shared.clone();
        eventually(timeout, "the gateway IDENTIFY / RESUME counts", move || {
            let inner = shared.lock();
            condition(inner.identifies, inner.resumes)
        })
        .await;
    }

    /// Sends a dispatch `t` with data `d` on the gateway (queued until a session is ready).
    pub fn dispatch(&self, t: &'static str, d: Value) {
        dispatch_locked(&mut self.shared.lock(), t, d);
    }

    /// Pushes a MESSAGE_CREATE (see [`message_create`]) and stores the message in the history.
    pub fn push_message(&self, message: Value) {
        let mut inner = self.shared.lock();
        let id = message["id"]
            .as_str()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let channel = message["channel_id"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        inner
            .messages
            .entry(channel.clone())
            .or_default()
            .push(StoredMessage {
                id,
                channel_id: channel,
                author_id: message["author"]["id"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                username: message["author"]["username"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                bot: message["author"]["bot"].as_bool().unwrap_or(false),
                content: message["content"].as_str().unwrap_or_default().to_owned(),
                attachments: Vec::new(),
                attachment_json: message["attachments"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default(),
                timestamp: message["timestamp"]
                    .as_str()
                    .map_or_else(now_timestamp, str::to_owned),
            });
        drop(inner);
        self.dispatch("MESSAGE_CREATE", message);
    }

    /// Pushes an INTERACTION_CREATE (see [`interaction_create`]).
    pub fn push_interaction(&self, interaction: Value) {
        self.dispatch("INTERACTION_CREATE", interaction);
    }

    /// Closes the current gateway socket (close code 4000), as a network blip would; serenity
    /// then reconnects and RESUMEs.
    pub fn drop_connection(&self) {
        if let Some(tx) = self.shared.lock().connection.take() {
            let _ = tx.send(Outbound::Close);
        }
    }

    /// Enforces Discord's limit on messages sent to one channel: the message past `count`
    /// within `window` gets a 429 (counted in [`send_limit_hits`](Self::send_limit_hits)).
    pub fn limit_sends(&self, count: usize, window: Duration) {
        self.shared.lock().send_limit = Some((count, window));
    }

    /// How many 429s the send limit served.
    pub fn send_limit_hits(&self) -> usize {
        self.shared.lock().send_limit_hits
    }

    /// IDENTIFY must carry `token` (with or without `Bot `); another is closed with 4004
    /// (Authentication failed), as Discord does.
    pub fn expect_token(&self, token: &str) {
        self.shared.lock().expected_token = Some(token.to_owned());
    }

    /// While `refusing`, IDENTIFY is closed with 4014 (Disallowed intent(s)), as Discord does
    /// when a privileged intent is not switched on for the application.
    pub fn refuse_intents(&self, refusing: bool) {
        self.shared.lock().refusing_intents = refusing;
    }

    /// While `refusing`, gateway connections are answered with 503 (an outage).
    pub fn set_gateway_refusing(&self, refusing: bool) {
        self.shared.lock().refusing = refusing;
    }

    /// Adds a channel of the guild that `GET /channels/{id}` then serves (with `type`,
    /// `guild_id`, `parent_id` and `name`; threads also with `thread_metadata`). It is not
    /// announced on the gateway. Messages pushed into it ([`push_message`](Self::push_message))
    /// and sent to it are stored like any channel's.
    pub fn add_channel(&self, id: &str, kind: ChannelKind, parent_id: Option<&str>, name: &str) {
        self.shared
            .lock()
            .channels
            .insert(id.to_owned(), channel_json(id, kind, parent_id, name));
    }

    /// Adds [`THREAD_ID`], a public thread of [`CHANNEL_ID`].
    pub fn add_thread(&self) {
        self.add_channel(
            THREAD_ID,
            ChannelKind::PublicThread,
            Some(CHANNEL_ID),
            "a thread",
        );
    }

    /// Adds [`FORUM_ID`], a forum in [`CATEGORY_ID`], and its post [`FORUM_POST_ID`] with its
    /// first message (by [`USER_ID`], id [`FORUM_POST_ID`], in the post itself).
    pub fn add_forum_post(&self) {
        self.add_channel(FORUM_ID, ChannelKind::Forum, Some(CATEGORY_ID), "forum");
        self.add_channel(
            FORUM_POST_ID,
            ChannelKind::PublicThread,
            Some(FORUM_ID),
            "a forum post",
        );
        self.seed_message_with_id(
            FORUM_POST_ID,
            FORUM_POST_ID,
            USER_ID,
            "alice",
            "the post's question",
        );
    }

    /// Adds a channel that `GET /channels/{id}` serves exactly as `channel` (e.g. with a
    /// malformed field).
    /// Lists `channel` (a channel object) in the next GUILD_CREATE, as a channel of the guild
    /// when the bot connects — with its `permission_overwrites`, which the bot's permissions are
    /// computed from.
    pub fn add_guild_channel(&self, channel: Value) {
        self.shared.lock().guild_channels.push(channel);
    }

    /// Gives `@everyone` and the bot's role `bits` server-wide in the next GUILD_CREATE (without
    /// Administrator, channel overwrites then count).
    pub fn set_role_permissions(&self, bits: u64) {
        self.shared.lock().role_permissions = Some(bits);
    }

    pub fn add_channel_json(&self, id: &str, channel: Value) {
        self.shared.lock().channels.insert(id.to_owned(), channel);
    }

    /// Announces the channel `id` (one added or opened) with THREAD_CREATE on the gateway.
    pub fn announce_thread(&self, id: &str) {
        let mut inner = self.shared.lock();
        let mut thread = inner.channels.get(id).cloned().expect("a known thread");
        thread["newly_created"] = json!(true);
        dispatch_locked(&mut inner, "THREAD_CREATE", thread);
    }

    /// Archives the thread `id`: messages sent into it answer 400 code 50083 until a
    /// `PATCH /channels/{id}` with `{"archived": false}`.
    pub fn archive_thread(&self, id: &str) {
        let mut inner = self.shared.lock();
        inner.archived.insert(id.to_owned());
        if let Some(thread) = inner.channels.get_mut(id) {
            thread["thread_metadata"]["archived"] = json!(true);
        }
    }

    /// Whether the thread `id` is archived.
    pub fn is_archived(&self, id: &str) -> bool {
        self.shared.lock().archived.contains(id)
    }

    /// `PATCH /channels/{id}` answers `status` with Discord's JSON `code` and `message`
    /// instead of unarchiving (a missing permission: 403, 50013; a locked thread).
    pub fn refuse_unarchive(&self, status: u16, code: u32, message: &str) {
        self.shared.lock().unarchive_refusal = Some((status, code, message.to_owned()));
    }

    /// The `PATCH /channels/{id}` requests (not message edits), in order.
    pub fn channel_patches(&self, id: &str) -> Vec<Recorded> {
        let path = format!("/channels/{id}");
        self.requests_to("PATCH", &path)
            .into_iter()
            .filter(|r| r.path == path)
            .collect()
    }

    /// The `POST /channels/{id}/messages/{id}/threads` requests, in order.
    pub fn threads_opened(&self) -> Vec<Recorded> {
        self.requests_to("POST", "/channels/")
            .into_iter()
            .filter(|r| r.path.ends_with("/threads"))
            .collect()
    }

    /// The bot's reactions on message `message` of `channel` (emoji path segments).
    pub fn reactions(&self, channel: &str, message: &str) -> Vec<String> {
        self.shared
            .lock()
            .reactions
            .iter()
            .filter(|(c, m, _)| c == channel && m == message)
            .map(|(_, _, emoji)| emoji.clone())
            .collect()
    }

    /// A fresh message id (for test-built gateway messages).
    pub fn next_id(&self) -> String {
        let mut inner = self.shared.lock();
        inner.next_id += 1;
        inner.next_id.to_string()
    }
}

// ---------------------------------------------------------------------------------------------
// Payload builders (every field serenity's model requires).

/// A user object.
pub fn user(id: &str, username: &str, bot: bool) -> Value {
    json!({"id": id, "username": username, "global_name": format!("{username} (global)"),
           "discriminator": "0", "avatar": null, "bot": bot})
}

fn member(user_value: Option<Value>, nick: Option<&str>, roles: Vec<&str>) -> Value {
    let mut m = json!({"nick": nick, "roles": roles, "joined_at": TIMESTAMP, "deaf": false,
                       "mute": false, "flags": 0, "permissions": ALL_PERMISSIONS});
    if let Some(u) = user_value {
        m["user"] = u;
    }
    m
}

/// A MESSAGE_CREATE payload; `guild` `None` makes it a DM (in [`DM_CHANNEL_ID`] unless another
/// channel is given).
pub fn message_create(
    id: &str,
    channel: &str,
    guild: Option<&str>,
    author: Value,
    content: &str,
) -> Value {
    let mentions: Vec<Value> = if content.contains(&format!("<@{BOT_ID}>"))
        || content.contains(&format!("<@!{BOT_ID}>"))
    {
        vec![user(BOT_ID, "friend-bot", true)]
    } else {
        Vec::new()
    };
    let mut m = json!({
        "id": id, "channel_id": channel, "author": author, "content": content,
        "timestamp": now_timestamp(), "edited_timestamp": null, "tts": false,
        "mention_everyone": false, "mentions": mentions, "mention_roles": [],
        "attachments": [], "embeds": [], "pinned": false, "type": 0, "flags": 0,
        "components": []
    });
    if let Some(g) = guild {
        m["guild_id"] = json!(g);
        m["member"] = member(None, Some("Nick"), vec![]);
    }
    m
}

/// An INTERACTION_CREATE payload for the chat-input command `name` with `options`
/// (`[{name, type, value}]`); in the guild when `in_guild`, else in the DM channel.
pub fn interaction_create(
    id: &str,
    token: &str,
    name: &str,
    options: Value,
    in_guild: bool,
) -> Value {
    let mut i = json!({
        "id": id, "application_id": APP_ID, "type": 2, "token": token, "version": 1,
        "data": {"id": "7000", "name": name, "type": 1, "options": options},
        "locale": "en-US", "entitlements": [], "attachment_size_limit": 8_388_608,
        "app_permissions": ALL_PERMISSIONS,
    });
    if in_guild {
        i["guild_id"] = json!(GUILD_ID);
        i["channel_id"] = json!(CHANNEL_ID);
        i["guild_locale"] = json!("en-US");
        i["member"] = member(Some(user(USER_ID, "alice", false)), Some("Ali"), vec![]);
    } else {
        i["channel_id"] = json!(DM_CHANNEL_ID);
        i["user"] = user(USER_ID, "alice", false);
    }
    i
}

/// An INTERACTION_CREATE for a press of the button `custom_id` under the bot's message
/// `message_id` (a MESSAGE_COMPONENT interaction), by the human user; in the guild when
/// `in_guild`, else in the DM channel.
pub fn button_press(
    id: &str,
    token: &str,
    message_id: &str,
    custom_id: &str,
    in_guild: bool,
) -> Value {
    let mut i = interaction_create(id, token, "unused", json!([]), in_guild);
    i["type"] = json!(3);
    i["data"] = json!({"custom_id": custom_id, "component_type": 2});
    let channel = i["channel_id"].as_str().unwrap_or_default().to_owned();
    let guild = in_guild.then_some(GUILD_ID);
    let mut message = message_create(
        message_id,
        &channel,
        guild,
        user(BOT_ID, "friend-bot", true),
        "the answer with the button",
    );
    message["flags"] = json!(64);
    i["message"] = message;
    i
}

/// The READY payload.
pub fn ready(gateway_url: &str) -> Value {
    json!({
        "v": 10, "user": user(BOT_ID, "friend-bot", true), "private_channels": [],
        "guilds": [{"id": GUILD_ID, "unavailable": true}],
        "session_id": "fake-session", "resume_gateway_url": gateway_url,
        "shard": [0, 1], "application": {"id": APP_ID, "flags": 0}
    })
}

/// A guild channel object of `kind` (as `GET /channels/{id}` serves it).
pub fn channel_json(id: &str, kind: ChannelKind, parent_id: Option<&str>, name: &str) -> Value {
    let mut channel = json!({
        "id": id, "type": kind as u8, "guild_id": GUILD_ID, "name": name, "position": 0,
        "permission_overwrites": [], "nsfw": false, "parent_id": parent_id,
    });
    match kind {
        ChannelKind::NewsThread | ChannelKind::PublicThread | ChannelKind::PrivateThread => {
            channel["owner_id"] = json!(USER_ID);
            channel["last_message_id"] = Value::Null;
            channel["rate_limit_per_user"] = json!(0);
            channel["message_count"] = json!(0);
            channel["member_count"] = json!(1);
            channel["thread_metadata"] = json!({
                "archived": false, "auto_archive_duration": 1440,
                "archive_timestamp": TIMESTAMP, "locked": false
            });
        }
        ChannelKind::Text | ChannelKind::Forum => {
            channel["topic"] = Value::Null;
            channel["last_message_id"] = Value::Null;
            channel["rate_limit_per_user"] = json!(0);
        }
        ChannelKind::Category => {}
    }
    channel
}

/// A public thread of `parent` opened by `owner_id` (as `GET /channels/{id}` serves it).
pub fn thread_json(id: &str, parent: &str, name: &str, owner_id: &str) -> Value {
    let mut thread = channel_json(id, ChannelKind::PublicThread, Some(parent), name);
    thread["owner_id"] = json!(owner_id);
    thread
}

/// Sends (or queues, until a session is ready) the dispatch `t` with data `d`.
fn dispatch_locked(inner: &mut Inner, t: &'static str, d: Value) {
    match &inner.connection {
        Some(tx) if tx.send(Outbound::Dispatch(t, d.clone())).is_ok() => {}
        _ => inner.pending.push_back((t, d)),
    }
}

/// The GUILD_CREATE payload: the bot member with an all-permissions role, the category
/// [`CATEGORY_ID`] with the text channel [`CHANNEL_ID`] in it, and the `:blobcat:` emoji.
pub fn guild_create() -> Value {
    guild_create_with(&[], None)
}

/// [`guild_create`] with `extra` channels listed too, and the roles' permissions `roles`
/// (every permission when `None`).
pub fn guild_create_with(extra: &[Value], roles: Option<u64>) -> Value {
    let permissions = roles.map_or_else(|| ALL_PERMISSIONS.to_owned(), |bits| bits.to_string());
    let role = |id: &str, name: &str| {
        json!({
            "id": id, "name": name, "color": 0,
            "colors": {"primary_color": 0, "secondary_color": null, "tertiary_color": null},
            "hoist": false, "icon": null, "unicode_emoji": null, "position": 0,
            "permissions": permissions, "managed": false, "mentionable": false, "flags": 0
        })
    };
    let mut guild = json!({
        "id": GUILD_ID, "name": "Fake Guild", "icon": null, "splash": null,
        "discovery_splash": null, "owner_id": USER_ID, "afk_channel_id": null, "afk_timeout": 300,
        "verification_level": 0, "default_message_notifications": 0,
        "explicit_content_filter": 0, "roles": [role(GUILD_ID, "@everyone"), role("3001", "bot")],
        "emojis": [{"id": EMOJI_ID, "name": "blobcat", "roles": [], "user": null,
                    "require_colons": true, "managed": false, "animated": false, "available": true}],
        "features": [], "mfa_level": 0, "application_id": null, "system_channel_id": null,
        "system_channel_flags": 0, "rules_channel_id": null, "max_presences": null,
        "max_members": 1000, "vanity_url_code": null, "description": null, "banner": null,
        "premium_tier": 0, "premium_subscription_count": 0, "preferred_locale": "en-US",
        "public_updates_channel_id": null, "max_video_channel_users": 25, "nsfw_level": 0
    });
    let more = json!({
        "stickers": [], "premium_progress_bar_enabled": false,
        "joined_at": TIMESTAMP, "large": false, "unavailable": false, "member_count": 2,
        "voice_states": [],
        "members": [member(Some(user(BOT_ID, "friend-bot", true)), None, vec!["3001"]),
                    member(Some(user(USER_ID, "alice", false)), Some("Ali"), vec![])],
        "channels": [{"id": CHANNEL_ID, "type": 0, "guild_id": GUILD_ID, "name": "general",
                      "position": 0, "permission_overwrites": [], "nsfw": false,
                      "parent_id": CATEGORY_ID, "topic": null, "last_message_id": null,
                      "rate_limit_per_user": 0},
                     channel_json(CATEGORY_ID, ChannelKind::Category, None, "Text Channels")],
        "threads": [], "presences": [], "stage_instances": [], "guild_scheduled_events": []
    });
    if let (Some(base), Value::Object(more)) = (guild.as_object_mut(), more) {
        base.extend(more);
    }
    if let Some(channels) = guild["channels"].as_array_mut() {
        channels.extend(extra.iter().cloned());
    }
    guild
}

// ---------------------------------------------------------------------------------------------
// Gateway.

async fn gateway(State(shared): State<Shared>, ws: WebSocketUpgrade) -> Response {
    if shared.lock().refusing {
        return StatusCode::SERVICE_UNAVAILABLE.into_response();
    }
    ws.on_upgrade(move |socket| session(shared, socket))
}

fn frame(shared: &Shared, t: &str, d: Value) -> WsMessage {
    let seq = {
        let mut inner = shared.lock();
        inner.seq += 1;
        inner.seq
    };
    WsMessage::Text(
        json!({"op": 0, "t": t, "s": seq, "d": d})
            .to_string()
            .into(),
    )
}

async fn session(shared: Shared, socket: WebSocket) {
    let (mut tx, mut rx) = socket.split();
    let (out_tx, mut out_rx) = mpsc::unbounded_channel::<Outbound>();
    let hello = json!({"op": 10, "d": {"heartbeat_interval": 41250}}).to_string();
    if tx.send(WsMessage::Text(hello.into())).await.is_err() {
        return;
    }
    loop {
        tokio::select! {
            incoming = rx.next() => {
                let Some(Ok(message)) = incoming else { break };
                let WsMessage::Text(text) = message else { continue };
                let Ok(payload) = serde_json::from_str::<Value>(text.as_str()) else { continue };
                let replies: Vec<WsMessage> = match payload["op"].as_u64() {
                    Some(1) => vec![WsMessage::Text(json!({"op": 11}).to_string().into())],
                    Some(2) => {
                        let refusal = {
                            let mut inner = shared.lock();
                            inner.identifies += 1;
                            inner.identify_payloads.push(payload["d"].clone());
                            let token = payload["d"]["token"].as_str().unwrap_or_default();
                            let token = token.strip_prefix("Bot ").unwrap_or(token);
                            if inner.expected_token.as_deref().is_some_and(|t| t != token) {
                                Some((4004, "Authentication failed."))
                            } else if inner.refusing_intents {
                                Some((4014, "Disallowed intent(s)."))
                            } else {
                                None
                            }
                        };
                        if let Some((code, reason)) = refusal {
                            let close = axum::extract::ws::CloseFrame { code, reason: reason.into() };
                            let _ = tx.send(WsMessage::Close(Some(close))).await;
                            return;
                        }
                        let url = format!("ws://{}/gateway", shared.addr);
                        let (extra, roles) = {
                            let inner = shared.lock();
                            (inner.guild_channels.clone(), inner.role_permissions)
                        };
                        vec![frame(&shared, "READY", ready(&url)), frame(&shared, "GUILD_CREATE", guild_create_with(&extra, roles))]
                    }
                    Some(6) => {
                        shared.lock().resumes += 1;
                        vec![frame(&shared, "RESUMED", json!({}))]
                    }
                    _ => Vec::new(),
                };
                let became_ready = matches!(payload["op"].as_u64(), Some(2 | 6));
                for reply in replies {
                    if tx.send(reply).await.is_err() {
                        return;
                    }
                }
                if became_ready {
                    let pending: Vec<(&'static str, Value)> = {
                        let mut inner = shared.lock();
                        inner.connection = Some(out_tx.clone());
                        inner.pending.drain(..).collect()
                    };
                    for (t, d) in pending {
                        if tx.send(frame(&shared, t, d)).await.is_err() {
                            return;
                        }
                    }
                }
            }
            outbound = out_rx.recv() => match outbound {
                Some(Outbound::Dispatch(t, d)) => {
                    if tx.send(frame(&shared, t, d)).await.is_err() {
                        break;
                    }
                }
                Some(Outbound::Close) | None => {
                    let close = axum::extract::ws::CloseFrame { code: 4000, reason: "fake blip".into() };
                    let _ = tx.send(WsMessage::Close(Some(close))).await;
                    break;
                }
            },
        }
    }
}

// ---------------------------------------------------------------------------------------------
// REST.

fn message_json(m: &StoredMessage) -> Value {
    let attachments: Vec<Value> = m
        .attachments
        .iter()
        .enumerate()
        .map(|(i, name)| {
            json!({"id": format!("{}{i}", m.id), "filename": name, "size": 1,
                                "url": format!("https://cdn.fake/{name}"),
                                "proxy_url": format!("https://cdn.fake/{name}")})
        })
        .collect();
    let mut value = message_create(
        &m.id.to_string(),
        &m.channel_id,
        None,
        user(&m.author_id, &m.username, m.bot),
        &m.content,
    );
    value["timestamp"] = json!(m.timestamp);
    value["attachments"] = if m.attachment_json.is_empty() {
        Value::Array(attachments)
    } else {
        Value::Array(m.attachment_json.clone())
    };
    value
}

/// Discord's 429: the body and `Retry-After` header with `retry_after` seconds.
fn too_many_requests(retry_after: f64) -> Response {
    let body = json!({"message": "You are being rate limited.", "retry_after": retry_after, "global": false});
    (
        StatusCode::TOO_MANY_REQUESTS,
        [("retry-after", format!("{}", retry_after.ceil() as u64))],
        axum::Json(body),
    )
        .into_response()
}

/// Now, as Discord writes times.
fn now_timestamp() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, false)
}

fn error(status: StatusCode, code: u32, message: &str) -> Response {
    (
        status,
        axum::Json(json!({"code": code, "message": message})),
    )
        .into_response()
}

fn ok(value: Value) -> Response {
    axum::Json(value).into_response()
}

async fn serve_download(shared: &Shared, name: &str) -> Response {
    let served = {
        let mut inner = shared.lock();
        inner.file_hits.push(name.to_owned());
        inner.files.get(name).cloned()
    };
    match served {
        None => (StatusCode::NOT_FOUND, "no such file").into_response(),
        Some(Served::Bytes(content_type, bytes)) => {
            ([("content-type", content_type)], bytes).into_response()
        }
        Some(Served::Redirect(location)) => {
            (StatusCode::FOUND, [("location", location)]).into_response()
        }
        Some(Served::Slow(wait, bytes)) => {
            tokio::time::sleep(wait).await;
            bytes.into_response()
        }
    }
}

/// `PATCH /channels/{id}`: `{"archived": false}` unarchives a thread, unless
/// [`FakeDiscord::refuse_unarchive`] said otherwise.
fn unarchive(inner: &mut Inner, id: &str, body: Option<&Value>) -> Response {
    if !inner.channels.contains_key(id) {
        return error(StatusCode::NOT_FOUND, 10003, "Unknown Channel");
    }
    if let Some((status, code, message)) = &inner.unarchive_refusal {
        let status = StatusCode::from_u16(*status).unwrap_or(StatusCode::FORBIDDEN);
        return error(status, *code, message);
    }
    if body.and_then(|b| b["archived"].as_bool()) == Some(false) {
        inner.archived.remove(id);
        if let Some(thread) = inner.channels.get_mut(id) {
            thread["thread_metadata"]["archived"] = json!(false);
        }
    }
    ok(inner.channels[id].clone())
}

/// `POST /channels/{channel}/messages/{message}/threads`: a public thread with the message's
/// id, owned by the bot, announced on the gateway as Discord does.
fn open_thread(inner: &mut Inner, channel: &str, message: &str, body: Option<&Value>) -> Response {
    let held = inner
        .messages
        .get(channel)
        .is_some_and(|list| list.iter().any(|m| m.id.to_string() == message));
    if !held {
        return error(StatusCode::NOT_FOUND, 10008, "Unknown Message");
    }
    if inner.channels.contains_key(message) {
        return error(
            StatusCode::BAD_REQUEST,
            160004,
            "A thread has already been created for this message",
        );
    }
    let name = body.and_then(|b| b["name"].as_str()).unwrap_or_default();
    let length = name.chars().count();
    if length == 0 || length > 100 {
        return error(StatusCode::BAD_REQUEST, 50035, "Invalid Form Body");
    }
    let thread = thread_json(message, channel, name, BOT_ID);
    inner.channels.insert(message.to_owned(), thread.clone());
    let mut created = thread.clone();
    created["newly_created"] = json!(true);
    dispatch_locked(inner, "THREAD_CREATE", created);
    ok(thread)
}

async fn rest(
    State(shared): State<Shared>,
    method: Method,
    OriginalUri(uri): OriginalUri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let full = uri
        .path_and_query()
        .map(|p| p.as_str())
        .unwrap_or("/")
        .to_owned();
    if let Some(name) = full.strip_prefix("/files/") {
        return serve_download(&shared, name).await;
    }
    let Some(path) = full.strip_prefix("/api/v10") else {
        return error(StatusCode::NOT_FOUND, 0, "404: Not Found");
    };
    let content_type = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let mut record = Recorded {
        method: method.to_string(),
        path: path.to_owned(),
        json: None,
        parts: Vec::new(),
        filenames: Vec::new(),
        files: Vec::new(),
        authorization: headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned),
    };
    if content_type.starts_with("multipart/form-data") {
        for part in super::multipart::parts(&content_type, &body) {
            if part.name == "payload_json" {
                record.json = serde_json::from_slice(&part.bytes).ok();
            }
            record.parts.push(part.name);
            if let Some(f) = part.filename {
                record.filenames.push(f);
                record.files.push(part.bytes);
            }
        }
    } else if !body.is_empty() {
        record.json = serde_json::from_slice(&body).ok();
    }
    let mut inner = shared.lock();
    inner.requests.push(record.clone());
    let limited = inner
        .rate_limits
        .iter_mut()
        .find(|(part, times, _)| *times > 0 && path.contains(part.as_str()))
        .map(|(_, times, retry)| {
            *times -= 1;
            *retry
        });
    if let Some(retry_after) = limited {
        return too_many_requests(retry_after);
    }
    let (route, query) = path.split_once('?').unwrap_or((path, ""));
    let segments: Vec<&str> = route.trim_matches('/').split('/').collect();
    let gateway = format!("ws://{}/gateway", shared.addr);
    match (method.as_str(), segments.as_slice()) {
        ("GET", ["gateway"]) => ok(json!({"url": gateway})),
        ("GET", ["gateway", "bot"]) => {
            ok(json!({"url": gateway, "shards": 1, "session_start_limit":
            {"total": 1000, "remaining": 999, "reset_after": 0, "max_concurrency": 1}}))
        }
        ("GET", ["users", "@me"]) => ok(user(BOT_ID, "friend-bot", true)),
        ("GET", ["users", id]) if *id == USER_ID => ok(user(USER_ID, "alice", false)),
        ("GET", ["users", _]) => error(StatusCode::NOT_FOUND, 10013, "Unknown User"),
        ("POST", ["users", "@me", "channels"]) => {
            let recipient = record
                .json
                .as_ref()
                .and_then(|j| j["recipient_id"].as_str())
                .unwrap_or_default();
            if recipient != USER_ID {
                return error(
                    StatusCode::BAD_REQUEST,
                    50007,
                    "Cannot send messages to this user",
                );
            }
            ok(
                json!({"id": DM_CHANNEL_ID, "type": 1, "last_message_id": null,
                      "recipients": [user(USER_ID, "alice", false)]}),
            )
        }
        ("GET", ["channels", id]) if *id == CHANNEL_ID => ok(
            json!({"id": CHANNEL_ID, "type": 0, "guild_id": GUILD_ID, "name": "general",
                   "parent_id": CATEGORY_ID}),
        ),
        ("GET", ["channels", id]) if *id == CATEGORY_ID => ok(channel_json(
            CATEGORY_ID,
            ChannelKind::Category,
            None,
            "Text Channels",
        )),
        ("GET", ["channels", id]) if inner.channels.contains_key(*id) => {
            ok(inner.channels[*id].clone())
        }
        ("GET", ["channels", id]) if *id == DM_CHANNEL_ID => ok(
            json!({"id": DM_CHANNEL_ID, "type": 1, "recipients": [user(USER_ID, "alice", false)]}),
        ),
        ("GET", ["channels", _]) => error(StatusCode::NOT_FOUND, 10003, "Unknown Channel"),
        ("PATCH", ["channels", id]) => {
            let id = (*id).to_owned();
            unarchive(&mut inner, &id, record.json.as_ref())
        }
        ("POST", ["channels", channel, "messages", message, "threads"]) => {
            let (channel, message) = ((*channel).to_owned(), (*message).to_owned());
            open_thread(&mut inner, &channel, &message, record.json.as_ref())
        }
        ("POST", ["channels", channel, "messages"]) if inner.archived.contains(*channel) => {
            error(StatusCode::BAD_REQUEST, 50083, "Thread is archived")
        }
        // A voice message (flag IS_VOICE_MESSAGE) is one audio attachment and nothing else.
        ("POST", ["channels", _, "messages"])
            if record.json.as_ref().is_some_and(|j| {
                j["flags"].as_u64().unwrap_or(0) & (1 << 13) != 0
                    && (j["content"].as_str().is_some_and(|c| !c.is_empty())
                        || record.files.len() != 1)
            }) =>
        {
            error(
                StatusCode::BAD_REQUEST,
                50035,
                "Invalid Form Body: a voice message is one audio file without content",
            )
        }
        ("POST", ["channels", channel, "messages"]) => {
            if let Some((count, window)) = inner.send_limit {
                let now = std::time::Instant::now();
                let sent = inner.sends.entry((*channel).to_owned()).or_default();
                while sent
                    .front()
                    .is_some_and(|t| now.duration_since(*t) >= window)
                {
                    sent.pop_front();
                }
                if sent.len() >= count {
                    let retry_after = window
                        .saturating_sub(
                            sent.front()
                                .map_or(Duration::ZERO, |t| now.duration_since(*t)),
                        )
                        .as_secs_f64();
                    inner.send_limit_hits += 1;
                    return too_many_requests(retry_after);
                }
                sent.push_back(now);
            }
            inner.next_id += 1;
            let id = inner.next_id;
            let payload = record.json.clone().unwrap_or(Value::Null);
            let message = StoredMessage {
                id,
                channel_id: (*channel).to_owned(),
                author_id: BOT_ID.to_owned(),
                username: "friend-bot".to_owned(),
                bot: true,
                content: payload["content"].as_str().unwrap_or_default().to_owned(),
                attachments: record.filenames.clone(),
                attachment_json: Vec::new(),
                timestamp: now_timestamp(),
            };
            let response = message_json(&message);
            inner
                .messages
                .entry((*channel).to_owned())
                .or_default()
                .push(message);
            ok(response)
        }
        ("GET", ["channels", channel, "messages"]) => {
            let params: HashMap<&str, &str> =
                query.split('&').filter_map(|p| p.split_once('=')).collect();
            let limit = params
                .get("limit")
                .and_then(|l| l.parse().ok())
                .unwrap_or(50usize)
                .min(100);
            let before = params
                .get("before")
                .and_then(|b| b.parse::<u64>().ok())
                .unwrap_or(u64::MAX);
            let list: Vec<Value> = inner
                .messages
                .get(*channel)
                .map(|all| {
                    all.iter()
                        .rev()
                        .filter(|m| m.id < before)
                        .take(limit)
                        .map(message_json)
                        .collect()
                })
                .unwrap_or_default();
            ok(Value::Array(list))
        }
        (verb @ ("GET" | "PATCH" | "DELETE"), ["channels", channel, "messages", id]) => {
            let id: u64 = id.parse().unwrap_or(0);
            let Some(list) = inner.messages.get_mut(*channel) else {
                return error(StatusCode::NOT_FOUND, 10003, "Unknown Channel");
            };
            let Some(index) = list.iter().position(|m| m.id == id) else {
                return error(StatusCode::NOT_FOUND, 10008, "Unknown Message");
            };
            match verb {
                "GET" => ok(message_json(&list[index])),
                "PATCH" if list[index].author_id != BOT_ID => error(
                    StatusCode::FORBIDDEN,
                    50005,
                    "Cannot edit a message authored by another user",
                ),
                "PATCH" => {
                    if let Some(content) = record.json.as_ref().and_then(|j| j["content"].as_str())
                    {
                        list[index].content = content.to_owned();
                    }
                    ok(message_json(&list[index]))
                }
                _ => {
                    list.remove(index);
                    StatusCode::NO_CONTENT.into_response()
                }
            }
        }
        (
            verb @ ("PUT" | "DELETE"),
            [
                "channels",
                channel,
                "messages",
                id,
                "reactions",
                emoji,
                "@me",
            ],
        ) => {
            let held = inner
                .messages
                .get(*channel)
                .is_some_and(|list| list.iter().any(|m| m.id.to_string() == *id));
            if !held {
                return error(StatusCode::NOT_FOUND, 10008, "Unknown Message");
            }
            let key = ((*channel).to_owned(), (*id).to_owned(), (*emoji).to_owned());
            if verb == "PUT" {
                inner.reactions.push(key);
            } else {
                inner.reactions.retain(|r| *r != key);
            }
            StatusCode::NO_CONTENT.into_response()
        }
        ("POST", ["channels", _, "typing"]) => StatusCode::NO_CONTENT.into_response(),
        ("GET", ["guilds", g, "members", id]) if *g == GUILD_ID && *id == USER_ID => ok(member(
            Some(user(USER_ID, "alice", false)),
            Some("Ali"),
            vec![],
        )),
        ("GET", ["guilds", _, "members", _]) => {
            error(StatusCode::NOT_FOUND, 10007, "Unknown Member")
        }
        ("GET", ["guilds", _, "emojis"]) => ok(json!([
            {"id": EMOJI_ID, "name": "blobcat", "roles": [], "require_colons": true,
             "managed": false, "animated": false, "available": true}
        ])),
        ("PUT", ["applications", _, "commands"] | ["applications", _, "guilds", _, "commands"]) => {
            let commands: Vec<Value> = record
                .json
                .as_ref()
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .enumerate()
                .map(|(i, mut c)| {
                    c["id"] = json!(format!("{}", 8000 + i));
                    c["application_id"] = json!(APP_ID);
                    c["version"] = json!("1");
                    c
                })
                .collect();
            ok(Value::Array(commands))
        }
        ("POST", ["interactions", _, _, "callback"]) => StatusCode::NO_CONTENT.into_response(),
        ("PATCH", ["webhooks", _, _, "messages", "@original"]) | ("POST", ["webhooks", _, _]) => {
            inner.next_id += 1;
            let message = StoredMessage {
                id: inner.next_id,
                channel_id: CHANNEL_ID.to_owned(),
                author_id: BOT_ID.to_owned(),
                username: "friend-bot".to_owned(),
                bot: true,
                content: record
                    .json
                    .as_ref()
                    .and_then(|j| j["content"].as_str())
                    .unwrap_or_default()
                    .to_owned(),
                attachments: Vec::new(),
                attachment_json: Vec::new(),
                timestamp: now_timestamp(),
            };
            ok(message_json(&message))
        }
        _ => error(StatusCode::NOT_FOUND, 0, "404: Not Found"),
    }
}
