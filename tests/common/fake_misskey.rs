//! A fake Misskey instance for integration tests: the REST endpoints the adapter uses and the
//! streaming websocket, on 127.0.0.1 (plain http/ws, so `secure: false`).
//!
//! * State in memory: users, notes, chat messages, drive files, reactions, custom emojis. JSON
//!   shapes follow Misskey's packed entities (camelCase `Note`, `UserLite`, `ChatMessageLite`,
//!   `DriveFile`); `notes/create` enforces the 2024.3 rule that a reply to a `specified` note is
//!   `specified`, text limits (note 3000, chat 2000) and ownership on deletion.
//! * Drive files made by tests ([`FakeMisskey::upload_file`]) are downloadable at their `url`
//!   (`GET /files/{id}`, recorded in [`FakeMisskey::file_hits`]), as an instance serves them.
//! * `i/notifications` serves the bot's `mention` and `reply` notifications, derived from the
//!   notes (newest first, `sinceId` / `untilId` / `includeTypes`), and
//!   `chat/messages/user-timeline` pages with `sinceId`: what a catch-up reads back.
//! * Every REST call is recorded (endpoint + JSON body without `i`, multipart fields as JSON) —
//!   including calls that failed — for assertions.
//! * `i` is checked on every call (`CREDENTIAL_REQUIRED` / `AUTHENTICATION_FAILED`) and on the
//!   websocket (`/streaming?i=`).
//! * Failures are scriptable per endpoint: [`FakeMisskey::script`] queues outcomes,
//!   [`FakeMisskey::rate_limit`] queues 429 `RATE_LIMIT_EXCEEDED` answers.
//! * Streaming: `connect` / `disconnect` frames are tracked per connection; tests push `main`
//!   events (`mention`, `reply`, `newChatMessage`), `chatUser` `message` events, raw frames, and
//!   drop every connection to exercise reconnects. Chat messages the bot creates are echoed to
//!   its own `chatUser` channel, as Misskey does.
#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use air_friends::config::{MisskeyConfig, Secret};
use air_friends::platform::UserCommandSpec;
use air_friends::platform::misskey::{Backoff, MisskeyAdapter, MisskeyOptions, RetryPolicy};
use axum::Router;
use axum::body::Bytes;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use chrono::{DateTime, TimeZone, Utc};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::poll::poll;

/// The token the fake accepts.
pub const TOKEN: &str = "fake-misskey-token-7c1dSECRET";
/// The bot's user id.
pub const BOT_ID: &str = "bot1";
/// The bot's account name.
pub const BOT_USERNAME: &str = "airfriends";

/// A scripted error answer.
#[derive(Debug, Clone)]
pub struct FakeError {
    pub status: u16,
    pub code: String,
    pub message: String,
}

impl FakeError {
    pub fn new(status: u16, code: &str, message: &str) -> Self {
        Self {
            status,
            code: code.into(),
            message: message.into(),
        }
    }

    pub fn rate_limited() -> Self {
        Self::new(
            429,
            "RATE_LIMIT_EXCEEDED",
            "Rate limit exceeded. Please try again later.",
        )
    }

    fn response(&self) -> Response {
        let body = json!({"error": {
            "message": self.message, "code": self.code,
            "id": "00000000-0000-4000-8000-000000000000", "kind": "client"
        }});
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::BAD_REQUEST);
        (status, axum::Json(body)).into_response()
    }
}

/// One recorded REST call.
#[derive(Debug, Clone)]
pub struct Call {
    pub endpoint: String,
    pub body: Value,
}

/// One channel subscription of a streaming connection.
#[derive(Debug, Clone)]
pub struct Subscription {
    pub connection: u64,
    pub channel: String,
    pub id: String,
    pub params: Value,
}

enum WsCommand {
    Text(String),
    Drop,
}

struct Connection {
    id: u64,
    tx: mpsc::UnboundedSender<WsCommand>,
    subscriptions: Vec<Subscription>,
}

struct Inner {
    next_id: u64,
    clock: DateTime<Utc>,
    base_url: String,
    users: BTreeMap<String, Value>,
    notes: BTreeMap<String, Value>,
    chats: BTreeMap<String, Value>,
    files: BTreeMap<String, Value>,
    /// (note id, user id) → reaction.
    note_reactions: BTreeMap<(String, String), String>,
    /// (message id, user id, reaction).
    chat_reactions: Vec<(String, String, String)>,
    emojis: Vec<String>,
    calls: Vec<Call>,
    script: HashMap<String, VecDeque<Option<FakeError>>>,
    connections: Vec<Connection>,
    next_connection: u64,
    connects_total: u64,
    streaming_attempts: u64,
    refuse_streaming: bool,
    client_frames: Vec<Value>,
    /// Drive file id → (content type, bytes), served at `GET /files/{id}`.
    file_bytes: BTreeMap<String, (String, Vec<u8>)>,
    /// Ids of every `GET /files/{id}`, in order.
    file_hits: Vec<String>,
}

type Shared = Arc<Mutex<Inner>>;

/// A running fake Misskey server; stopped when dropped.
pub struct FakeMisskey {
    pub addr: SocketAddr,
    shared: Shared,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for FakeMisskey {
    fn drop(&mut self) {
        self.server.abort();
        for connection in &self.inner().connections {
            let _ = connection.tx.send(WsCommand::Drop);
        }
    }
}

fn lock(shared: &Shared) -> MutexGuard<'_, Inner> {
    shared.lock().unwrap_or_else(|p| p.into_inner())
}

impl FakeMisskey {
    /// Binds 127.0.0.1:0 and serves. The bot (`bot1` / `airfriends`) and users `alice` (`u1`)
    /// and `bob` (`u2`) exist; the instance has the custom emojis `blobcat` and `party`.
    pub async fn start() -> FakeMisskey {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind fake misskey");
        let addr = listener.local_addr().expect("local addr");
        let inner = Inner {
            next_id: 1,
            clock: Utc
                .with_ymd_and_hms(2025, 6, 1, 0, 0, 0)
                .single()
                .expect("clock"),
            base_url: format!("http://{addr}"),
            users: BTreeMap::new(),
            notes: BTreeMap::new(),
            chats: BTreeMap::new(),
            files: BTreeMap::new(),
            note_reactions: BTreeMap::new(),
            chat_reactions: Vec::new(),
            emojis: vec!["blobcat".into(), "party".into()],
            calls: Vec::new(),
            script: HashMap::new(),
            connections: Vec::new(),
            next_connection: 1,
            connects_total: 0,
            streaming_attempts: 0,
            refuse_streaming: false,
            client_frames: Vec::new(),
            file_bytes: BTreeMap::new(),
            file_hits: Vec::new(),
        };
        let shared: Shared = Arc::new(Mutex::new(inner));
        let app = Router::new()
            .route("/api/{*endpoint}", post(api))
            .route("/streaming", get(streaming))
            .route("/files/{id}", get(download))
            .with_state(shared.clone());
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        let fake = FakeMisskey {
            addr,
            shared,
            server,
        };
        fake.add_user(BOT_ID, BOT_USERNAME, Some("AIr Friends"), true);
        fake.add_user("u1", "alice", Some("Alice"), false);
        fake.add_user("u2", "bob", None, false);
        fake
    }

    fn inner(&self) -> MutexGuard<'_, Inner> {
        lock(&self.shared)
    }

    /// `127.0.0.1:PORT`.
    pub fn host(&self) -> String {
        self.addr.to_string()
    }

    /// An enabled Misskey config pointing at this fake.
    pub fn config(&self) -> MisskeyConfig {
        MisskeyConfig {
            enabled: true,
            host: self.host(),
            token: Secret::new(TOKEN),
            secure: false,
            ..MisskeyConfig::default()
        }
    }

    /// An adapter for this fake with short back-offs and timeouts, its identity already fetched.
    pub async fn adapter(&self, commands: Vec<UserCommandSpec>) -> Arc<MisskeyAdapter> {
        let adapter = MisskeyAdapter::new(&self.config(), reqwest::Client::new(), commands)
            .expect("adapter")
            .with_options(fast_options());
        adapter.identify().await.expect("identify");
        Arc::new(adapter)
    }

    // ----- state -----

    /// Adds (or replaces) a local user.
    pub fn add_user(&self, id: &str, username: &str, name: Option<&str>, is_bot: bool) -> Value {
        let mut inner = self.inner();
        let user = json!({
            "id": id, "name": name, "username": username, "host": null,
            "avatarUrl": format!("{}/avatar/{id}", inner.base_url), "avatarBlurhash": null,
            "avatarDecorations": [], "isBot": is_bot, "isCat": false, "emojis": {},
            "onlineStatus": "unknown", "badgeRoles": []
        });
        inner.users.insert(id.into(), user.clone());
        user
    }

    /// Stores a note by `user_id` (not pushed to the stream) and returns it packed.
    pub fn create_note(&self, user_id: &str, text: &str, opts: NoteOpts) -> Value {
        let mut inner = self.inner();
        let params = json!({
            "text": text, "visibility": opts.visibility,
            "visibleUserIds": opts.visible_user_ids, "replyId": opts.reply_id,
            "fileIds": opts.file_ids, "channelId": opts.channel_id,
        });
        let id = insert_note(&mut inner, user_id, &params);
        pack_note(&inner, &id, true)
    }

    /// The packed note `id`, if it exists.
    pub fn note(&self, id: &str) -> Option<Value> {
        let inner = self.inner();
        inner
            .notes
            .contains_key(id)
            .then(|| pack_note(&inner, id, false))
    }

    /// Every stored note, packed, oldest first.
    pub fn notes(&self) -> Vec<Value> {
        let inner = self.inner();
        inner
            .notes
            .keys()
            .map(|id| pack_note(&inner, id, false))
            .collect()
    }

    /// Stores a chat message from `from` to `to` (not pushed) and returns it (lite form).
    pub fn create_chat(&self, from: &str, to: &str, text: &str) -> Value {
        let mut inner = self.inner();
        insert_chat(&mut inner, from, to, Some(text), None)
    }

    /// Every stored chat message (lite form), oldest first.
    pub fn chat_messages(&self) -> Vec<Value> {
        self.inner().chats.values().cloned().collect()
    }

    /// Stores a drive file of `user_id` holding `bytes` (served at its `url`); returns it.
    pub fn upload_file(&self, user_id: &str, name: &str, mime: &str, bytes: Vec<u8>) -> Value {
        let mut inner = self.inner();
        let size = bytes.len() as u64;
        let file = insert_drive_file(&mut inner, user_id, name, mime, None, size);
        let id = file["id"].as_str().unwrap_or_default().to_owned();
        inner.file_bytes.insert(id, (mime.to_owned(), bytes));
        file
    }

    /// Stores a drive file whose `url` is `url` (nothing served); returns it.
    pub fn link_file(&self, user_id: &str, name: &str, mime: &str, url: &str, size: u64) -> Value {
        insert_drive_file(&mut self.inner(), user_id, name, mime, Some(url), size)
    }

    /// The ids of the `GET /files/{id}` requests so far.
    pub fn file_hits(&self) -> Vec<String> {
        self.inner().file_hits.clone()
    }

    /// Stores a chat message with a file from `from` to the bot and pushes it as `main`'s
    /// `newChatMessage`.
    pub fn chat_file_to_bot(&self, from: &str, text: &str, file_id: &str) -> Value {
        let message = insert_chat(&mut self.inner(), from, BOT_ID, Some(text), Some(file_id));
        let id = message["id"].as_str().unwrap_or_default().to_owned();
        let detailed = pack_chat_detailed(&self.inner(), &id);
        self.push_main("newChatMessage", detailed);
        message
    }

    /// The bytes of drive file `id` (uploaded by the bot or by the test).
    pub fn file_content(&self, id: &str) -> Option<Vec<u8>> {
        self.inner()
            .file_bytes
            .get(id)
            .map(|(_, bytes)| bytes.clone())
    }

    /// Every drive file, oldest first.
    pub fn drive_files(&self) -> Vec<Value> {
        self.inner().files.values().cloned().collect()
    }

    /// The bot's reaction to note `note_id`.
    pub fn note_reaction(&self, note_id: &str) -> Option<String> {
        self.inner()
            .note_reactions
            .get(&(note_id.to_owned(), BOT_ID.to_owned()))
            .cloned()
    }

    /// The bot's reactions to chat message `message_id`.
    pub fn chat_reactions(&self, message_id: &str) -> Vec<String> {
        self.inner()
            .chat_reactions
            .iter()
            .filter(|(m, u, _)| m == message_id && u == BOT_ID)
            .map(|(_, _, r)| r.clone())
            .collect()
    }

    // ----- REST scripting and records -----

    /// Queues outcomes for the next calls of `endpoint` (`None` = answer normally).
    pub fn script(&self, endpoint: &str, outcomes: Vec<Option<FakeError>>) {
        self.inner()
            .script
            .entry(endpoint.into())
            .or_default()
            .extend(outcomes);
    }

    /// The next `times` calls of `endpoint` answer 429 `RATE_LIMIT_EXCEEDED`.
    pub fn rate_limit(&self, endpoint: &str, times: usize) {
        self.script(endpoint, vec![Some(FakeError::rate_limited()); times]);
    }

    /// Every call so far.
    pub fn calls(&self) -> Vec<Call> {
        self.inner().calls.clone()
    }

    /// The bodies of the calls to `endpoint`.
    pub fn calls_to(&self, endpoint: &str) -> Vec<Value> {
        self.inner()
            .calls
            .iter()
            .filter(|c| c.endpoint == endpoint)
            .map(|c| c.body.clone())
            .collect()
    }

    /// The endpoints called, in order.
    pub fn endpoints(&self) -> Vec<String> {
        self.inner()
            .calls
            .iter()
            .map(|c| c.endpoint.clone())
            .collect()
    }

    /// Waits until `endpoint` was called at least `count` times; returns those bodies.
    pub async fn wait_for_calls(&self, endpoint: &str, count: usize) -> Vec<Value> {
        self.wait_until(&format!("{count} calls to {endpoint}"), || {
            let calls = self.calls_to(endpoint);
            (calls.len() >= count).then_some(calls)
        })
        .await
    }

    // ----- streaming -----

    /// Current subscriptions of every open connection.
    pub fn subscriptions(&self) -> Vec<Subscription> {
        self.inner()
            .connections
            .iter()
            .flat_map(|c| c.subscriptions.clone())
            .collect()
    }

    /// Every frame clients sent, parsed.
    pub fn client_frames(&self) -> Vec<Value> {
        self.inner().client_frames.clone()
    }

    /// While `refuse` is true, websocket handshakes fail with 503 (the instance is "down").
    pub fn refuse_streaming(&self, refuse: bool) {
        self.inner().refuse_streaming = refuse;
    }

    /// How many websocket handshakes were attempted (accepted or refused) so far.
    pub fn streaming_attempts(&self) -> u64 {
        self.inner().streaming_attempts
    }

    /// How many websocket connections were accepted so far.
    pub fn connects_total(&self) -> u64 {
        self.inner().connects_total
    }

    /// Waits until a connection has subscribed `channel` (with `otherId` = `other_id` for
    /// `chatUser`) and at least `connects` connections were accepted in total.
    pub async fn wait_for_subscription(
        &self,
        channel: &str,
        other_id: Option<&str>,
        connects: u64,
    ) {
        self.wait_until(&format!("subscription to {channel} {other_id:?}"), || {
            let subscribed = self.subscriptions().iter().any(|s| {
                s.channel == channel && other_id.is_none_or(|other| s.params["otherId"] == other)
            });
            (subscribed && self.connects_total() >= connects).then_some(())
        })
        .await
    }

    /// Sends a `main` channel event to every subscriber.
    pub fn push_main(&self, event: &str, body: Value) {
        let inner = self.inner();
        push(&inner, |s| s.channel == "main", event, &body);
    }

    /// Sends a `chatUser` event to subscribers whose `otherId` is `other_id`.
    pub fn push_chat_user(&self, other_id: &str, event: &str, body: Value) {
        let inner = self.inner();
        push(
            &inner,
            |s| s.channel == "chatUser" && s.params["otherId"] == other_id,
            event,
            &body,
        );
    }

    /// Sends a raw text frame to every connection.
    pub fn push_raw(&self, text: &str) {
        for connection in &self.inner().connections {
            let _ = connection.tx.send(WsCommand::Text(text.into()));
        }
    }

    /// Drops every open websocket connection abruptly.
    pub fn drop_connections(&self) {
        let mut inner = self.inner();
        for connection in inner.connections.drain(..) {
            let _ = connection.tx.send(WsCommand::Drop);
        }
    }

    /// Stores a note by `user_id` mentioning the bot and pushes it as a `mention` event.
    pub fn mention(&self, user_id: &str, text: &str, opts: NoteOpts) -> Value {
        let note = self.create_note(user_id, text, opts);
        self.push_main("mention", note.clone());
        note
    }

    /// Stores a chat message from `from` to the bot and pushes it: on `chatUser` (lite) when
    /// `chat_user`, and as `main`'s `newChatMessage` (detailed) when `main`.
    pub fn chat_to_bot(&self, from: &str, text: &str, main: bool, chat_user: bool) -> Value {
        let message = self.create_chat(from, BOT_ID, text);
        let id = message["id"].as_str().unwrap_or_default().to_owned();
        if chat_user {
            self.push_chat_user(from, "message", message.clone());
        }
        if main {
            let detailed = pack_chat_detailed(&self.inner(), &id);
            self.push_main("newChatMessage", detailed);
        }
        message
    }

    /// Polls `check` until it yields, panicking (with the calls so far) after 10 s.
    pub async fn wait_until<T>(&self, what: &str, check: impl FnMut() -> Option<T>) -> T {
        match poll(Duration::from_secs(10), check).await {
            Some(value) => value,
            None => panic!(
                "timed out waiting for {what}; calls: {:?}",
                self.endpoints()
            ),
        }
    }
}

/// Adapter options for tests: 429 back-off from 20 ms, reconnects from 100 ms (capped at 400 ms).
pub fn fast_options() -> MisskeyOptions {
    MisskeyOptions {
        retry: RetryPolicy {
            max_retries: 3,
            backoff: Backoff::new(Duration::from_millis(20), Duration::from_millis(200)),
        },
        reconnect: Backoff::new(Duration::from_millis(100), Duration::from_millis(400)),
        request_timeout: Duration::from_secs(10),
        ping_interval: Duration::from_secs(5),
        command_timeout: Duration::from_secs(5),
        max_chat_peers: 8,
    }
}

/// Options of a note created by a test.
#[derive(Debug, Clone)]
pub struct NoteOpts {
    pub visibility: &'static str,
    pub visible_user_ids: Vec<String>,
    pub reply_id: Option<String>,
    /// The Misskey channel the note is posted in (`channelId`).
    pub channel_id: Option<String>,
    pub file_ids: Vec<String>,
}

impl Default for NoteOpts {
    fn default() -> Self {
        Self {
            visibility: "public",
            visible_user_ids: Vec::new(),
            reply_id: None,
            file_ids: Vec::new(),
            channel_id: None,
        }
    }
}

impl NoteOpts {
    pub fn visibility(visibility: &'static str) -> Self {
        Self {
            visibility,
            ..Self::default()
        }
    }

    pub fn reply_to(mut self, note_id: &str) -> Self {
        self.reply_id = Some(note_id.into());
        self
    }

    pub fn in_channel(mut self, channel_id: &str) -> Self {
        self.channel_id = Some(channel_id.into());
        self
    }

    pub fn visible_to(mut self, ids: &[&str]) -> Self {
        self.visible_user_ids = ids.iter().map(|s| s.to_string()).collect();
        self
    }
}

fn push(inner: &Inner, matches: impl Fn(&Subscription) -> bool, event: &str, body: &Value) {
    for connection in &inner.connections {
        for subscription in connection.subscriptions.iter().filter(|s| matches(s)) {
            let frame = json!({"type": "channel", "body": {
                "id": subscription.id, "type": event, "body": body
            }});
            let _ = connection.tx.send(WsCommand::Text(frame.to_string()));
        }
    }
}

/// A new id and its creation time: ids grow with time (as Misskey's `aidx` do), and times are
/// real (a catch-up judges a message's age by it), strictly increasing.
fn next_id(inner: &mut Inner) -> (String, String) {
    let id = format!("9x{:08}", inner.next_id);
    inner.next_id += 1;
    let now = Utc::now().max(inner.clock + chrono::Duration::milliseconds(1));
    inner.clock = now;
    (id, now.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
}

/// The bot's `mention` and `reply` notifications, derived from the notes: a note by someone
/// else replying to a bot's note is a `reply`, one mentioning the bot otherwise a `mention`.
/// Newest first; `sinceId` / `untilId` compare ids (which grow with time, as Misskey compares
/// the time its ids carry).
fn notifications(inner: &Inner, params: &Value) -> Vec<Value> {
    let since = params["sinceId"].as_str();
    let until = params["untilId"].as_str();
    let include: Option<Vec<&str>> = params["includeTypes"]
        .as_array()
        .map(|types| types.iter().filter_map(Value::as_str).collect());
    let mut out = Vec::new();
    for (id, note) in inner.notes.iter().rev() {
        if since.is_some_and(|s| id.as_str() <= s) || until.is_some_and(|u| id.as_str() >= u) {
            continue;
        }
        if note["userId"] == BOT_ID {
            continue;
        }
        let replies_to_bot = note["replyId"]
            .as_str()
            .and_then(|parent| inner.notes.get(parent))
            .is_some_and(|parent| parent["userId"] == BOT_ID);
        let mentions_bot = note["mentions"]
            .as_array()
            .is_some_and(|m| m.iter().any(|u| u == BOT_ID));
        let kind = if replies_to_bot {
            "reply"
        } else if mentions_bot {
            "mention"
        } else {
            continue;
        };
        if include.as_ref().is_some_and(|types| !types.contains(&kind)) {
            continue;
        }
        out.push(json!({
            "id": format!("n{id}"), "createdAt": note["createdAt"], "type": kind,
            "userId": note["userId"], "user": pack_user(inner, note["userId"].as_str().unwrap_or_default()),
            "note": pack_note(inner, id, true),
        }));
        if out.len() >= limit_param(params) {
            break;
        }
    }
    out
}

fn insert_note(inner: &mut Inner, user_id: &str, params: &Value) -> String {
    let (id, created_at) = next_id(inner);
    let text = params["text"].as_str().map(str::to_owned);
    let mentions: Vec<String> = text
        .as_deref()
        .map(|text| {
            inner
                .users
                .values()
                .filter(|u| {
                    let name = u["username"].as_str().unwrap_or_default();
                    mentions_name(text, name)
                })
                .filter_map(|u| u["id"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    let visibility = params["visibility"].as_str().unwrap_or("public");
    let note = json!({
        "id": id, "createdAt": created_at, "userId": user_id, "text": text, "cw": null,
        "visibility": visibility,
        "visibleUserIds": if visibility == "specified" { params["visibleUserIds"].clone() } else { json!([]) },
        "localOnly": params["localOnly"].as_bool().unwrap_or(false),
        "reactionAcceptance": null, "renoteCount": 0, "repliesCount": 0, "reactionCount": 0,
        "reactions": {}, "reactionEmojis": {}, "emojis": {},
        "fileIds": params["fileIds"].as_array().cloned().unwrap_or_default(),
        "replyId": params["replyId"].clone(), "renoteId": null, "mentions": mentions,
        "channelId": params["channelId"].clone(),
    });
    inner.notes.insert(id.clone(), note);
    id
}

fn mentions_name(text: &str, username: &str) -> bool {
    let needle = format!("@{}", username.to_lowercase());
    let lower = text.to_lowercase();
    lower.match_indices(&needle).any(|(at, _)| {
        let after = lower[at + needle.len()..].chars().next();
        !after.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
    })
}

fn pack_user(inner: &Inner, id: &str) -> Value {
    inner.users.get(id).cloned().unwrap_or(Value::Null)
}

fn pack_note(inner: &Inner, id: &str, with_reply: bool) -> Value {
    let Some(mut note) = inner.notes.get(id).cloned() else {
        return Value::Null;
    };
    let user_id = note["userId"].as_str().unwrap_or_default().to_owned();
    note["user"] = pack_user(inner, &user_id);
    let files: Vec<Value> = note["fileIds"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|f| f.as_str().and_then(|f| inner.files.get(f)).cloned())
        .collect();
    note["files"] = Value::Array(files);
    if note["visibility"] != "specified"
        && let Some(object) = note.as_object_mut()
    {
        object.remove("visibleUserIds");
    }
    if with_reply && let Some(reply_id) = note["replyId"].as_str().map(str::to_owned) {
        note["reply"] = pack_note(inner, &reply_id, false);
    }
    note
}

fn insert_drive_file(
    inner: &mut Inner,
    user_id: &str,
    name: &str,
    mime: &str,
    url: Option<&str>,
    size: u64,
) -> Value {
    let (id, created_at) = next_id(inner);
    let url = url.map_or_else(|| format!("{}/files/{id}", inner.base_url), str::to_owned);
    let drive = json!({
        "id": id, "createdAt": created_at, "name": name, "type": mime,
        "md5": format!("{size:032x}"), "size": size, "isSensitive": false, "blurhash": null,
        "properties": {}, "url": url, "thumbnailUrl": null, "comment": null,
        "folderId": null, "folder": null, "userId": user_id, "user": null
    });
    inner.files.insert(id, drive.clone());
    drive
}

async fn download(State(shared): State<Shared>, Path(id): Path<String>) -> Response {
    let mut inner = lock(&shared);
    inner.file_hits.push(id.clone());
    match inner.file_bytes.get(&id) {
        Some((mime, bytes)) => ([("content-type", mime.clone())], bytes.clone()).into_response(),
        None => (StatusCode::NOT_FOUND, "no such file").into_response(),
    }
}

fn insert_chat(
    inner: &mut Inner,
    from: &str,
    to: &str,
    text: Option<&str>,
    file_id: Option<&str>,
) -> Value {
    let (id, created_at) = next_id(inner);
    let file = file_id
        .and_then(|f| inner.files.get(f).cloned())
        .unwrap_or(Value::Null);
    let message = json!({
        "id": id, "createdAt": created_at, "fromUserId": from, "toUserId": to,
        "text": text, "fileId": file_id, "file": file, "reactions": []
    });
    inner.chats.insert(id, message.clone());
    message
}

fn pack_chat_detailed(inner: &Inner, id: &str) -> Value {
    let Some(mut message) = inner.chats.get(id).cloned() else {
        return Value::Null;
    };
    let from = message["fromUserId"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let to = message["toUserId"].as_str().unwrap_or_default().to_owned();
    message["fromUser"] = pack_user(inner, &from);
    message["toUser"] = pack_user(inner, &to);
    message["toRoomId"] = Value::Null;
    message["toRoom"] = Value::Null;
    message["isRead"] = Value::Bool(false);
    message
}

// ----- REST -----

enum Reply {
    Json(Value),
    NoContent,
}

type Outcome = Result<Reply, FakeError>;

fn bad(code: &str, message: &str) -> FakeError {
    FakeError::new(400, code, message)
}

async fn api(
    State(shared): State<Shared>,
    Path(endpoint): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let content_type = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let (mut params, file) = if content_type.starts_with("multipart/form-data") {
        parse_multipart(&content_type, &body)
    } else {
        (serde_json::from_slice(&body).unwrap_or(json!({})), None)
    };
    let token = params
        .as_object_mut()
        .and_then(|o| o.remove("i"))
        .and_then(|v| v.as_str().map(str::to_owned));
    let mut inner = lock(&shared);
    inner.calls.push(Call {
        endpoint: endpoint.clone(),
        body: params.clone(),
    });
    let outcome = match token.as_deref() {
        None => Err(FakeError::new(
            401,
            "CREDENTIAL_REQUIRED",
            "Credential required.",
        )),
        Some(t) if t != TOKEN => Err(FakeError::new(
            401,
            "AUTHENTICATION_FAILED",
            "Authentication failed. Please ensure your token is correct.",
        )),
        Some(_) => match inner
            .script
            .get_mut(&endpoint)
            .and_then(VecDeque::pop_front)
        {
            Some(Some(error)) => Err(error),
            _ => handle(&mut inner, &endpoint, &params, file),
        },
    };
    match outcome {
        Ok(Reply::Json(value)) => axum::Json(value).into_response(),
        Ok(Reply::NoContent) => StatusCode::NO_CONTENT.into_response(),
        Err(error) => error.response(),
    }
}

/// The multipart fields as a JSON object (the file part as `{name, size}`), and the file.
fn parse_multipart(content_type: &str, body: &[u8]) -> (Value, Option<(String, Vec<u8>, String)>) {
    let mut fields = serde_json::Map::new();
    let mut file = None;
    for part in super::multipart::parts(content_type, body) {
        if let Some(filename) = part.filename {
            let mime = part
                .content_type
                .unwrap_or_else(|| "application/octet-stream".to_owned());
            fields.insert(
                part.name,
                json!({"filename": filename, "size": part.bytes.len(), "type": mime}),
            );
            file = Some((filename, part.bytes, mime));
        } else {
            fields.insert(
                part.name,
                Value::String(String::from_utf8_lossy(&part.bytes).into()),
            );
        }
    }
    (Value::Object(fields), file)
}

fn str_param<'a>(params: &'a Value, key: &str) -> Result<&'a str, FakeError> {
    params[key]
        .as_str()
        .ok_or_else(|| bad("INVALID_PARAM", &format!("Invalid param: {key}")))
}

fn limit_param(params: &Value) -> usize {
    params["limit"].as_u64().unwrap_or(10).clamp(1, 100) as usize
}

fn handle(
    inner: &mut Inner,
    endpoint: &str,
    params: &Value,
    file: Option<(String, Vec<u8>, String)>,
) -> Outcome {
    match endpoint {
        "i" => Ok(Reply::Json(pack_user(inner, BOT_ID))),
        "users/show" => {
            let id = str_param(params, "userId")?;
            match inner.users.get(id) {
                Some(user) => {
                    let mut user = user.clone();
                    user["description"] = json!("a user");
                    user["followersCount"] = json!(1);
                    Ok(Reply::Json(user))
                }
                None => Err(bad("NO_SUCH_USER", "No such user.")),
            }
        }
        "notes/show" => {
            let id = str_param(params, "noteId")?;
            existing_note(inner, id)?;
            Ok(Reply::Json(pack_note(inner, id, true)))
        }
        "notes/create" => create_note_endpoint(inner, params),
        "notes/delete" => {
            let id = str_param(params, "noteId")?;
            let note = existing_note(inner, id)?;
            if note["userId"] != BOT_ID {
                return Err(bad("ACCESS_DENIED", "Access denied."));
            }
            inner.notes.remove(id);
            Ok(Reply::NoContent)
        }
        "notes/children" => {
            let id = str_param(params, "noteId")?;
            let mut children: Vec<Value> = inner
                .notes
                .values()
                .filter(|n| n["replyId"] == id)
                .filter_map(|n| n["id"].as_str())
                .map(|child| pack_note(inner, child, false))
                .collect();
            children.reverse();
            children.truncate(limit_param(params));
            Ok(Reply::Json(Value::Array(children)))
        }
        "channels/timeline" | "users/notes" => {
            // A channel's notes, or a user's own, newest first.
            let (key, field) = if endpoint == "channels/timeline" {
                ("channelId", "channelId")
            } else {
                ("userId", "userId")
            };
            let wanted = str_param(params, key)?;
            let mut notes: Vec<Value> = inner
                .notes
                .values()
                .filter(|n| n[field] == wanted)
                .filter_map(|n| n["id"].as_str())
                .map(|id| pack_note(inner, id, false))
                .collect();
            notes.reverse();
            notes.truncate(limit_param(params));
            Ok(Reply::Json(Value::Array(notes)))
        }
        "notes/conversation" => {
            let id = str_param(params, "noteId")?;
            let mut current = existing_note(inner, id)?["replyId"]
                .as_str()
                .map(str::to_owned);
            let mut chain = Vec::new();
            while let Some(parent) = current {
                if chain.len() >= limit_param(params) || !inner.notes.contains_key(&parent) {
                    break;
                }
                current = inner.notes[&parent]["replyId"].as_str().map(str::to_owned);
                chain.push(pack_note(inner, &parent, false));
            }
            Ok(Reply::Json(Value::Array(chain)))
        }
        "notes/search" => {
            let query = str_param(params, "query")?.to_lowercase();
            let mut hits: Vec<Value> = inner
                .notes
                .values()
                .filter(|n| {
                    n["text"]
                        .as_str()
                        .is_some_and(|t| t.to_lowercase().contains(&query))
                })
                .filter_map(|n| n["id"].as_str())
                .map(|id| pack_note(inner, id, false))
                .collect();
            hits.reverse();
            hits.truncate(limit_param(params));
            Ok(Reply::Json(Value::Array(hits)))
        }
        "notes/reactions/create" => {
            let id = str_param(params, "noteId")?;
            existing_note(inner, id)?;
            let reaction = str_param(params, "reaction")?.to_owned();
            let key = (id.to_owned(), BOT_ID.to_owned());
            if inner.note_reactions.get(&key) == Some(&reaction) {
                return Err(bad(
                    "ALREADY_REACTED",
                    "You are already reacting to that note.",
                ));
            }
            inner.note_reactions.insert(key, reaction);
            Ok(Reply::NoContent)
        }
        "notes/reactions/delete" => {
            let id = str_param(params, "noteId")?;
            existing_note(inner, id)?;
            match inner
                .note_reactions
                .remove(&(id.to_owned(), BOT_ID.to_owned()))
            {
                Some(_) => Ok(Reply::NoContent),
                None => Err(bad("NOT_REACTED", "You are not reacting to that note.")),
            }
        }
        "drive/files/create" => {
            let Some((filename, content, mime)) = file else {
                return Err(bad("INVALID_PARAM", "file is required"));
            };
            let (id, created_at) = next_id(inner);
            let name = params["name"]
                .as_str()
                .map(str::to_owned)
                .unwrap_or(filename);
            let drive = json!({
                "id": id, "createdAt": created_at, "name": name, "type": mime,
                "md5": format!("{:032x}", content.len()), "size": content.len(),
                "isSensitive": false, "blurhash": null, "properties": {},
                "url": format!("{}/files/{id}", inner.base_url), "thumbnailUrl": null,
                "comment": params["comment"].as_str(), "folderId": null, "folder": null,
                "userId": BOT_ID, "user": null
            });
            inner
                .file_bytes
                .insert(id.clone(), (mime.to_string(), content.to_vec()));
            inner.files.insert(id, drive.clone());
            Ok(Reply::Json(drive))
        }
        "drive/files/delete" => {
            let id = str_param(params, "fileId")?;
            match inner.files.remove(id) {
                Some(_) => Ok(Reply::NoContent),
                None => Err(bad("NO_SUCH_FILE", "No such file.")),
            }
        }
        "chat/messages/create-to-user" => {
            let to = str_param(params, "toUserId")?.to_owned();
            if to == BOT_ID {
                return Err(bad(
                    "RECIPIENT_IS_YOURSELF",
                    "You cannot send a message to yourself.",
                ));
            }
            if !inner.users.contains_key(&to) {
                return Err(bad("NO_SUCH_USER", "No such user."));
            }
            let text = params["text"].as_str();
            let file_id = params["fileId"].as_str();
            if text.is_none() && file_id.is_none() {
                return Err(bad(
                    "CONTENT_REQUIRED",
                    "Content required. You need to set text or fileId.",
                ));
            }
            if text.is_some_and(|t| t.chars().count() > 2000) {
                return Err(bad("INVALID_PARAM", "Invalid param: text is too long"));
            }
            if file_id.is_some_and(|f| !inner.files.contains_key(f)) {
                return Err(bad("NO_SUCH_FILE", "No such file."));
            }
            let message = insert_chat(inner, BOT_ID, &to, text, file_id);
            // Misskey publishes the message to both sides' chatUser streams at once.
            push(
                inner,
                |s| s.channel == "chatUser" && s.params["otherId"] == to.as_str(),
                "message",
                &message,
            );
            Ok(Reply::Json(message))
        }
        "chat/messages/delete" => {
            let id = str_param(params, "messageId")?;
            let message = inner
                .chats
                .get(id)
                .ok_or_else(|| bad("NO_SUCH_MESSAGE", "No such message."))?;
            if message["fromUserId"] != BOT_ID {
                return Err(bad("NO_SUCH_MESSAGE", "No such message."));
            }
            inner.chats.remove(id);
            Ok(Reply::NoContent)
        }
        "chat/messages/show" => {
            let id = str_param(params, "messageId")?;
            if !inner.chats.contains_key(id) {
                return Err(bad("NO_SUCH_MESSAGE", "No such message."));
            }
            Ok(Reply::Json(pack_chat_detailed(inner, id)))
        }
        "chat/messages/user-timeline" => {
            let peer = str_param(params, "userId")?;
            let mut messages: Vec<Value> = inner
                .chats
                .values()
                .filter(|m| between(m, peer))
                .cloned()
                .collect();
            if let Some(since) = params["sinceId"].as_str() {
                // Misskey's paging with only `sinceId`: the oldest page after it.
                messages.retain(|m| m["id"].as_str().is_some_and(|id| id > since));
                messages.truncate(limit_param(params));
                messages.reverse();
            } else {
                messages.reverse();
                messages.truncate(limit_param(params));
            }
            Ok(Reply::Json(Value::Array(messages)))
        }
        "i/notifications" => Ok(Reply::Json(Value::Array(notifications(inner, params)))),
        "chat/messages/search" => {
            let query = str_param(params, "query")?.to_lowercase();
            let peer = params["userId"].as_str();
            let mut messages: Vec<Value> = inner
                .chats
                .values()
                .filter(|m| peer.is_none_or(|p| between(m, p)))
                .filter(|m| {
                    m["text"]
                        .as_str()
                        .is_some_and(|t| t.to_lowercase().contains(&query))
                })
                .filter_map(|m| m["id"].as_str())
                .map(|id| pack_chat_detailed(inner, id))
                .collect();
            messages.reverse();
            messages.truncate(limit_param(params));
            Ok(Reply::Json(Value::Array(messages)))
        }
        "chat/messages/react" | "chat/messages/unreact" => {
            let id = str_param(params, "messageId")?.to_owned();
            let reaction = str_param(params, "reaction")?.to_owned();
            if !inner.chats.contains_key(&id) {
                return Err(bad("NO_SUCH_MESSAGE", "No such message."));
            }
            let entry = (id, BOT_ID.to_owned(), reaction);
            inner.chat_reactions.retain(|r| *r != entry);
            if endpoint == "chat/messages/react" {
                inner.chat_reactions.push(entry);
            }
            Ok(Reply::NoContent)
        }
        "emojis" => Ok(Reply::Json(json!({
            "emojis": inner.emojis.iter().map(|name| json!({
                "aliases": [], "name": name, "category": null,
                "url": format!("{}/emoji/{name}.webp", inner.base_url)
            })).collect::<Vec<_>>()
        }))),
        _ => Err(FakeError::new(
            404,
            "UNKNOWN_API_ENDPOINT",
            "Unknown API endpoint.",
        )),
    }
}

fn between(message: &Value, peer: &str) -> bool {
    (message["fromUserId"] == BOT_ID && message["toUserId"] == peer)
        || (message["fromUserId"] == peer && message["toUserId"] == BOT_ID)
}

fn existing_note<'a>(inner: &'a Inner, id: &str) -> Result<&'a Value, FakeError> {
    inner
        .notes
        .get(id)
        .ok_or_else(|| bad("NO_SUCH_NOTE", "No such note."))
}

fn create_note_endpoint(inner: &mut Inner, params: &Value) -> Outcome {
    let text = params["text"].as_str();
    let file_ids: Vec<&str> = params["fileIds"]
        .as_array()
        .map(|ids| ids.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if text.is_none() && file_ids.is_empty() {
        return Err(bad(
            "INVALID_PARAM",
            "Invalid param: text or fileIds required",
        ));
    }
    if text.is_some_and(|t| t.chars().count() > 3000) {
        return Err(bad("INVALID_PARAM", "Invalid param: text is too long"));
    }
    if file_ids.len() > 16 {
        return Err(bad("INVALID_PARAM", "Invalid param: too many files"));
    }
    if file_ids.iter().any(|f| !inner.files.contains_key(*f)) {
        return Err(bad("NO_SUCH_FILE", "Some files are not found."));
    }
    let visibility = params["visibility"].as_str().unwrap_or("public");
    if let Some(reply_id) = params["replyId"].as_str() {
        let Some(parent) = inner.notes.get(reply_id) else {
            return Err(bad("NO_SUCH_REPLY_TARGET", "No such reply target."));
        };
        if parent["visibility"] == "specified" && visibility != "specified" {
            return Err(bad(
                "CANNOT_REPLY_TO_SPECIFIED_VISIBILITY_NOTE_WITH_EXTENDED_VISIBILITY",
                "You cannot reply to a specified visibility note with extended visibility.",
            ));
        }
    }
    let id = insert_note(inner, BOT_ID, params);
    Ok(Reply::Json(
        json!({ "createdNote": pack_note(inner, &id, true) }),
    ))
}

// ----- streaming -----

async fn streaming(
    State(shared): State<Shared>,
    Query(query): Query<HashMap<String, String>>,
    upgrade: WebSocketUpgrade,
) -> Response {
    {
        let mut inner = lock(&shared);
        inner.streaming_attempts += 1;
        if inner.refuse_streaming {
            return FakeError::new(503, "UNAVAILABLE", "Service unavailable.").response();
        }
    }
    if query.get("i").map(String::as_str) != Some(TOKEN) {
        return FakeError::new(401, "AUTHENTICATION_FAILED", "Authentication failed.").response();
    }
    upgrade.on_upgrade(move |socket| connection(socket, shared))
}

async fn connection(mut socket: WebSocket, shared: Shared) {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let id = {
        let mut inner = lock(&shared);
        let id = inner.next_connection;
        inner.next_connection += 1;
        inner.connects_total += 1;
        inner.connections.push(Connection {
            id,
            tx,
            subscriptions: Vec::new(),
        });
        id
    };
    loop {
        tokio::select! {
            command = rx.recv() => match command {
                Some(WsCommand::Text(text)) => {
                    if socket.send(Message::text(text)).await.is_err() {
                        break;
                    }
                }
                Some(WsCommand::Drop) | None => break,
            },
            frame = socket.recv() => match frame {
                Some(Ok(Message::Text(text))) => client_frame(&shared, id, text.as_str()),
                Some(Ok(Message::Close(_))) | Some(Err(_)) | None => break,
                Some(Ok(_)) => {}
            },
        }
    }
    lock(&shared).connections.retain(|c| c.id != id);
}

fn client_frame(shared: &Shared, connection: u64, text: &str) {
    let mut inner = lock(shared);
    let Ok(frame) = serde_json::from_str::<Value>(text) else {
        return;
    };
    inner.client_frames.push(frame.clone());
    let Some(conn) = inner.connections.iter_mut().find(|c| c.id == connection) else {
        return;
    };
    let body = &frame["body"];
    match frame["type"].as_str() {
        Some("connect") => {
            let id = body["id"].as_str().unwrap_or_default().to_owned();
            conn.subscriptions.retain(|s| s.id != id);
            conn.subscriptions.push(Subscription {
                connection,
                channel: body["channel"].as_str().unwrap_or_default().to_owned(),
                id,
                params: body["params"].clone(),
            });
        }
        Some("disconnect") => {
            let id = body["id"].as_str().unwrap_or_default();
            conn.subscriptions.retain(|s| s.id != id);
        }
        _ => {}
    }
}
