//! The Misskey platform adapter: [`MisskeyAdapter`] implements
//! [`PlatformAdapter`] over Misskey's REST API and delivers what the streaming websocket
//! receives as [`PlatformEvent`](crate::platform::PlatformEvent)s.
//!
//! * `api.rs` — the REST client (token as `i` in the body, typed errors, 429 back-off).
//! * `model.rs` — serde types for notes, users, chat messages, drive files, frames.
//! * `ids.rs` — channel ids `note:{noteId}` / `chat:{userId}` and id validation.
//! * `convert.rs` — notes / chat messages → [`IncomingMessage`](crate::platform::IncomingMessage)
//!   and history entries; bot-mention stripping.
//! * `send.rs` — sending, editing (delete + re-create), deleting, reactions, files.
//! * `read.rs` — single messages, thread / chat history, search, users, emojis.
//! * `scope.rs` — what one conversation may read: its thread's notes, its chat's messages.
//! * `missed.rs` — reading back what the stream missed (mentions and replies through the
//!   notifications, chats one by one) for the catch-up.
//! * `stream.rs` — the websocket: channels `main` and `chatUser`, reconnects, de-duplication.
//! * `commands.rs` — `/skill --flag value` text commands for user-command skills.
//! * `backoff.rs` — exponential back-off with jitter.
//!
//! Use: build with [`MisskeyAdapter::new`], share it as `Arc<MisskeyAdapter>` (also as
//! `Arc<dyn PlatformAdapter>` in the registry), and run [`MisskeyAdapter::run`] until shutdown.
//! Calls made before `run` has fetched the bot's identity work, but cannot tell the bot's own
//! messages apart (`bot_user_id` is `None` until then).

mod api;
mod chains;
mod commands;
mod convert;
mod ids;
mod missed;
mod model;
mod read;
mod scope;
mod send;
mod stream;

pub use crate::backoff::Backoff;
pub use api::RetryPolicy;
pub use commands::{ParsedCommand, parse_command, usage};
pub use convert::BotIdentity;
pub use ids::Channel;

use crate::sync::Recover;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::Duration;

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

use self::api::Api;
use self::model::User;
use crate::config::{MisskeyConfig, Secret};
use crate::platform::{
    ChannelId, ChatMessage, ConnectionState, CustomEmoji, EventSink, FileDelivery, MessageId,
    Missed, OutgoingFile, PlatformAdapter, PlatformError, PlatformKind, ReactionEmoji, SentMessage,
    TextLimits, UserCommandSpec, UserId, UserInfo,
};
use crate::text::LengthUnit;

/// Misskey notes: `MAX_NOTE_TEXT_LENGTH` = 3000 characters.
pub const NOTE_TEXT_LIMITS: TextLimits = TextLimits::new(3000, LengthUnit::Chars);
/// Misskey chat messages: 2000 characters.
pub const CHAT_TEXT_LIMITS: TextLimits = TextLimits::new(2000, LengthUnit::Chars);

/// Most users kept in the name cache (chat messages carry only user ids).
const USER_CACHE_CAPACITY: usize = 1024;

/// Tunables of the adapter; [`Default`] is right for production, tests shorten the delays.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MisskeyOptions {
    /// Retries of rate-limited REST calls.
    pub retry: RetryPolicy,
    /// Reconnect schedule of the streaming connection (default 1 s doubling up to 60 s).
    pub reconnect: Backoff,
    /// Timeout of one REST request and of the websocket handshake (uploads get four times it).
    pub request_timeout: Duration,
    /// Interval of websocket pings; a connection silent for two intervals is re-established.
    pub ping_interval: Duration,
    /// How long a text command may take before the user is told it timed out.
    pub command_timeout: Duration,
    /// Most chat partners with a live `chatUser` subscription (the least recent is dropped).
    pub max_chat_peers: usize,
}

impl Default for MisskeyOptions {
    fn default() -> Self {
        Self {
            retry: RetryPolicy::default(),
            reconnect: Backoff::new(Duration::from_secs(1), Duration::from_secs(60)),
            request_timeout: Duration::from_secs(30),
            ping_interval: Duration::from_secs(30),
            command_timeout: Duration::from_secs(60),
            max_chat_peers: 64,
        }
    }
}

/// The Misskey configuration cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MisskeySetupError {
    /// `host` is empty or not a bare `host[:port]`.
    #[error("platforms.misskey.host must be host[:port] without scheme or path, got {0:?}")]
    InvalidHost(String),
    /// No token configured.
    #[error("platforms.misskey.token is empty")]
    MissingToken,
    /// The TLS client configuration for `wss://` could not be built.
    #[error("cannot set up TLS for the misskey stream: {0}")]
    Tls(String),
}

/// The Misskey [`PlatformAdapter`] (see the module documentation).
pub struct MisskeyAdapter {
    api: Api,
    http: reqwest::Client,
    host: String,
    secure: bool,
    token: Secret,
    /// TLS for `wss://` (ring provider chosen explicitly, Mozilla roots); `None` for `ws://`.
    tls: Option<Arc<rustls::ClientConfig>>,
    commands: Vec<UserCommandSpec>,
    options: MisskeyOptions,
    /// Filled by [`run`](Self::run) (or [`identify`](Self::identify)) from `i`.
    identity: RwLock<Option<BotIdentity>>,
    /// Users seen in events or looked up, by id (for names of chat senders).
    users: Mutex<HashMap<String, User>>,
    /// Subscribed chat peers and recently delivered ids; survives reconnects.
    memory: Mutex<stream::StreamMemory>,
    /// The root note of each known note's reply chain (`chains.rs`).
    roots: chains::Roots,
}

impl std::fmt::Debug for MisskeyAdapter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MisskeyAdapter")
            .field("host", &self.host)
            .field("secure", &self.secure)
            .field("token", &self.token)
            .finish_non_exhaustive()
    }
}

/// Misskey's [`Connector`](crate::platform::connect::Connector) build: the adapter, whose own
/// streaming loop is the receive loop.
pub(crate) fn connect(
    config: &crate::config::PlatformsConfig,
    http: reqwest::Client,
    commands: Vec<UserCommandSpec>,
    // Misskey has no permissions per channel to check.
    _duties: Arc<dyn crate::platform::duties::PlaceDuties>,
) -> anyhow::Result<crate::platform::connect::Connected> {
    use anyhow::Context as _;
    let adapter =
        Arc::new(MisskeyAdapter::new(&config.misskey, http, commands).context("Misskey set-up")?);
    let runner = Arc::clone(&adapter);
    Ok((
        adapter,
        Box::new(move |sink, state, draining| Box::pin(runner.run(sink, state, draining))),
    ))
}

impl MisskeyAdapter {
    /// An adapter for the instance in `config`, sending with `http` (shared with the rest of the
    /// daemon), offering `commands` as text commands.
    pub fn new(
        config: &MisskeyConfig,
        http: reqwest::Client,
        commands: Vec<UserCommandSpec>,
    ) -> Result<Self, MisskeySetupError> {
        let host = config.host.trim();
        let valid_host = !host.is_empty()
            && host
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':' | '[' | ']'));
        if !valid_host {
            return Err(MisskeySetupError::InvalidHost(config.host.clone()));
        }
        if config.token.is_empty() {
            return Err(MisskeySetupError::MissingToken);
        }
        let tls = if config.secure {
            Some(tls_config().map_err(|err| MisskeySetupError::Tls(err.to_string()))?)
        } else {
            None
        };
        let options = MisskeyOptions::default();
        Ok(Self {
            api: Self::build_api(&http, host, config.secure, &config.token, &options),
            http,
            host: host.to_ascii_lowercase(),
            secure: config.secure,
            token: config.token.clone(),
            tls,
            commands,
            options: options.clone(),
            identity: RwLock::new(None),
            users: Mutex::new(HashMap::new()),
            memory: Mutex::new(stream::StreamMemory::new(options.max_chat_peers)),
            roots: chains::Roots::default(),
        })
    }

    /// Replaces the tunables (tests shorten back-offs and timeouts).
    pub fn with_options(mut self, options: MisskeyOptions) -> Self {
        self.api = Self::build_api(&self.http, &self.host, self.secure, &self.token, &options);
        self.memory = Mutex::new(stream::StreamMemory::new(options.max_chat_peers));
        self.options = options;
        self
    }

    fn build_api(
        http: &reqwest::Client,
        host: &str,
        secure: bool,
        token: &Secret,
        options: &MisskeyOptions,
    ) -> Api {
        Api::new(
            http.clone(),
            host,
            secure,
            token.clone(),
            options.retry,
            options.request_timeout,
        )
    }

    /// Fetches the bot's own account (`i`) and remembers it; [`run`](Self::run) does this first.
    pub async fn identify(&self) -> Result<BotIdentity, PlatformError> {
        let me: User = self.api.call("i", serde_json::json!({})).await?;
        let identity = BotIdentity {
            user_id: me.id.clone(),
            username: me.username.clone(),
            host: self.host.clone(),
        };
        *self
            .identity
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(identity.clone());
        self.remember_user(me);
        Ok(identity)
    }

    /// The bot's identity, once known.
    pub fn identity(&self) -> Option<BotIdentity> {
        self.identity
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// Connects the streaming API and delivers events into `sink` until `shutdown` is cancelled:
    /// fetches `i` first (retrying transient failures; a rejected token is an error), then keeps
    /// the websocket up, reconnecting with back-off. `state` is true exactly while the stream is
    /// connected. Text-command answers still running are stopped on shutdown.
    pub async fn run(
        self: Arc<Self>,
        sink: EventSink,
        state: ConnectionState,
        shutdown: CancellationToken,
    ) -> anyhow::Result<()> {
        state.set(false);
        let identity = match self.identify_until_ready(&shutdown).await {
            Ok(Some(identity)) => identity,
            Ok(None) => return Ok(()),
            // Retrying cannot help: one actionable record, and `/readyz` says why.
            Err(problem) => {
                let problem = problem.to_string();
                tracing::error!(platform = "misskey", problem = %problem, "Misskey refused the connection; not retrying");
                state.fail(problem);
                return Ok(());
            }
        };
        tracing::info!(
            platform = "misskey",
            host = %self.host,
            bot_user_id = %identity.user_id,
            bot_username = %identity.username,
            "misskey identity fetched"
        );
        stream::run(self, identity, sink, state, shutdown).await
    }

    async fn identify_until_ready(
        &self,
        shutdown: &CancellationToken,
    ) -> anyhow::Result<Option<BotIdentity>> {
        let mut attempt = 0;
        loop {
            let error = tokio::select! {
                _ = shutdown.cancelled() => return Ok(None),
                result = self.identify() => match result {
                    Ok(identity) => return Ok(Some(identity)),
                    Err(error) => error,
                },
            };
            if matches!(
                error,
                PlatformError::Forbidden(_) | PlatformError::NotFound(_)
            ) {
                anyhow::bail!(
                    "Misskey rejected the token ({error}): create an access token with the \
                     permissions in docs/PLATFORMS.md, set MISSKEY_TOKEN and restart"
                );
            }
            let delay = self.options.reconnect.delay(attempt);
            attempt += 1;
            tracing::warn!(
                platform = "misskey",
                error = %error,
                delay_ms = delay.as_millis() as u64,
                "cannot fetch the misskey bot account yet, retrying"
            );
            tokio::select! {
                _ = shutdown.cancelled() => return Ok(None),
                _ = tokio::time::sleep(delay) => {}
            }
        }
    }

    /// `ws(s)://{host}/streaming?i={token}`; never log it.
    fn streaming_url(&self) -> String {
        let scheme = if self.secure { "wss" } else { "ws" };
        format!(
            "{scheme}://{}/streaming?i={}",
            self.host,
            percent_encode(self.token.expose())
        )
    }

    fn bot_id(&self) -> Option<String> {
        self.identity().map(|identity| identity.user_id)
    }

    fn users(&self) -> MutexGuard<'_, HashMap<String, User>> {
        self.users.locked()
    }

    fn memory(&self) -> MutexGuard<'_, stream::StreamMemory> {
        self.memory.locked()
    }

    fn remember_user(&self, user: User) {
        let mut users = self.users();
        if users.len() >= USER_CACHE_CAPACITY && !users.contains_key(&user.id) {
            users.clear();
        }
        users.insert(user.id.clone(), user);
    }

    /// The user `user_id`, from the cache or `users/show`; `None` when it cannot be fetched.
    async fn lookup_user(&self, user_id: &str) -> Option<User> {
        if let Some(user) = self.users().get(user_id).cloned() {
            return Some(user);
        }
        match self.fetch_user(user_id).await {
            Ok(user) => Some(user),
            Err(error) => {
                tracing::debug!(platform = "misskey", user_id, error = %error, "user lookup failed");
                None
            }
        }
    }

    async fn fetch_user(&self, user_id: &str) -> Result<User, PlatformError> {
        ids::validate_id(user_id, "user")?;
        let user: User = self
            .api
            .call("users/show", serde_json::json!({ "userId": user_id }))
            .await?;
        self.remember_user(user.clone());
        Ok(user)
    }
}

/// A rustls client configuration with the ring provider and the Mozilla root store. The
/// provider is passed explicitly so the websocket does not depend on a process-wide default
/// (which rustls cannot pick when several providers are compiled in).
fn tls_config() -> Result<Arc<rustls::ClientConfig>, rustls::Error> {
    let roots = rustls::RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_root_certificates(roots)
    .with_no_client_auth();
    Ok(Arc::new(config))
}

/// Percent-encodes everything but RFC 3986 unreserved characters.
fn percent_encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for byte in value.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[async_trait]
impl PlatformAdapter for MisskeyAdapter {
    fn kind(&self) -> PlatformKind {
        PlatformKind::Misskey
    }

    fn bot_user_id(&self) -> Option<UserId> {
        self.bot_id().map(UserId::from)
    }

    fn text_limit(&self, channel_id: &ChannelId) -> TextLimits {
        match Channel::parse(channel_id.as_str()) {
            Ok(Channel::Note(_) | Channel::Post(_)) => NOTE_TEXT_LIMITS,
            _ => CHAT_TEXT_LIMITS,
        }
    }

    fn dm_text_limit(&self) -> TextLimits {
        CHAT_TEXT_LIMITS
    }

    async fn send_message(
        &self,
        channel_id: &ChannelId,
        text: &str,
        reply_to: Option<&MessageId>,
    ) -> Result<SentMessage, PlatformError> {
        self.send_text(
            &Channel::parse(channel_id.as_str())?,
            text,
            reply_to.map(MessageId::as_str),
        )
        .await
    }

    async fn edit_message(
        &self,
        channel_id: &ChannelId,
        message_id: &MessageId,
        text: &str,
        reply_to: Option<&MessageId>,
    ) -> Result<SentMessage, PlatformError> {
        self.edit(
            &Channel::parse(channel_id.as_str())?,
            message_id.as_str(),
            text,
            reply_to.map(MessageId::as_str),
        )
        .await
    }

    async fn delete_message(
        &self,
        channel_id: &ChannelId,
        message_id: &MessageId,
    ) -> Result<(), PlatformError> {
        self.delete(&Channel::parse(channel_id.as_str())?, message_id.as_str())
            .await
    }

    async fn get_message(
        &self,
        channel_id: &ChannelId,
        message_id: &MessageId,
    ) -> Result<ChatMessage, PlatformError> {
        self.get(&Channel::parse(channel_id.as_str())?, message_id.as_str())
            .await
    }

    async fn recent_messages(
        &self,
        channel_id: &ChannelId,
        limit: usize,
    ) -> Result<Vec<ChatMessage>, PlatformError> {
        self.recent(&Channel::parse(channel_id.as_str())?, limit)
            .await
    }

    fn catch_up_feed(&self, channel_id: &ChannelId) -> ChannelId {
        Self::feed_of(channel_id)
    }

    async fn missed_messages(
        &self,
        feed: &ChannelId,
        after: &MessageId,
        max: usize,
    ) -> Result<Missed, PlatformError> {
        self.missed(feed, after, max).await
    }

    async fn search_messages(
        &self,
        channel_id: &ChannelId,
        query: &str,
        limit: usize,
    ) -> Result<Vec<ChatMessage>, PlatformError> {
        self.search(&Channel::parse(channel_id.as_str())?, query, limit)
            .await
    }

    async fn user_info(
        &self,
        channel_id: &ChannelId,
        user_id: &UserId,
    ) -> Result<UserInfo, PlatformError> {
        Channel::parse(channel_id.as_str())?;
        let user = self.fetch_user(user_id.as_str()).await?;
        Ok(UserInfo {
            user_id: user.id.clone().into(),
            username: user.acct(),
            display_name: user.display_name(),
        })
    }

    async fn add_reaction(
        &self,
        channel_id: &ChannelId,
        message_id: &MessageId,
        emoji: &ReactionEmoji,
    ) -> Result<(), PlatformError> {
        self.react(
            &Channel::parse(channel_id.as_str())?,
            message_id.as_str(),
            emoji,
        )
        .await
    }

    async fn remove_reaction(
        &self,
        channel_id: &ChannelId,
        message_id: &MessageId,
        emoji: &ReactionEmoji,
    ) -> Result<(), PlatformError> {
        self.unreact(
            &Channel::parse(channel_id.as_str())?,
            message_id.as_str(),
            emoji,
        )
        .await
    }

    async fn send_files(
        &self,
        channel_id: &ChannelId,
        files: Vec<OutgoingFile>,
        caption: Option<&str>,
        reply_to: Option<&MessageId>,
    ) -> Result<FileDelivery, PlatformError> {
        self.files(
            &Channel::parse(channel_id.as_str())?,
            files,
            caption,
            reply_to.map(MessageId::as_str),
        )
        .await
    }

    async fn send_dm(&self, user_id: &UserId, text: &str) -> Result<SentMessage, PlatformError> {
        ids::validate_id(user_id.as_str(), "user")?;
        self.send_text(&Channel::Chat(user_id.as_str().to_owned()), text, None)
            .await
    }

    async fn send_dm_files(
        &self,
        user_id: &UserId,
        files: Vec<OutgoingFile>,
        caption: Option<&str>,
    ) -> Result<FileDelivery, PlatformError> {
        ids::validate_id(user_id.as_str(), "user")?;
        self.files(
            &Channel::Chat(user_id.as_str().to_owned()),
            files,
            caption,
            None,
        )
        .await
    }

    async fn custom_emojis(
        &self,
        channel_id: &ChannelId,
    ) -> Result<Vec<CustomEmoji>, PlatformError> {
        Channel::parse(channel_id.as_str())?;
        self.emojis().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(host: &str, token: &str) -> MisskeyConfig {
        MisskeyConfig {
            enabled: true,
            host: host.into(),
            token: Secret::new(token),
            secure: false,
            ..MisskeyConfig::default()
        }
    }

    #[test]
    fn construction_validates_host_and_token() {
        let http = reqwest::Client::new();
        assert!(MisskeyAdapter::new(&config("misskey.example", "t"), http.clone(), vec![]).is_ok());
        assert!(MisskeyAdapter::new(&config("127.0.0.1:3000", "t"), http.clone(), vec![]).is_ok());
        for bad in ["", "https://misskey.example", "misskey.example/api", "a b"] {
            assert_eq!(
                MisskeyAdapter::new(&config(bad, "t"), http.clone(), vec![]).err(),
                Some(MisskeySetupError::InvalidHost(bad.into()))
            );
        }
        assert_eq!(
            MisskeyAdapter::new(&config("misskey.example", " "), http, vec![]).err(),
            Some(MisskeySetupError::MissingToken)
        );
    }

    #[test]
    fn the_streaming_url_carries_the_encoded_token_but_debug_does_not() {
        let adapter = MisskeyAdapter::new(
            &config("Misskey.Example:3000", "ab+c/d"),
            reqwest::Client::new(),
            vec![],
        )
        .expect("adapter");
        assert_eq!(
            adapter.streaming_url(),
            "ws://misskey.example:3000/streaming?i=ab%2Bc%2Fd"
        );
        assert!(!format!("{adapter:?}").contains("ab+c/d"));
    }

    #[test]
    fn secure_instances_get_a_tls_configuration() {
        let mut secure = config("misskey.example", "t");
        secure.secure = true;
        let adapter =
            MisskeyAdapter::new(&secure, reqwest::Client::new(), vec![]).expect("adapter");
        assert!(adapter.tls.is_some());
        assert!(
            adapter
                .streaming_url()
                .starts_with("wss://misskey.example/streaming?i=")
        );
        let plain = MisskeyAdapter::new(&config("h", "t"), reqwest::Client::new(), vec![])
            .expect("adapter");
        assert!(plain.tls.is_none());
    }

    #[test]
    fn limits_follow_the_channel_kind() {
        let adapter = MisskeyAdapter::new(&config("h", "t"), reqwest::Client::new(), vec![])
            .expect("adapter");
        assert_eq!(adapter.text_limit(&"note:abc".into()), NOTE_TEXT_LIMITS);
        assert_eq!(adapter.text_limit(&"chat:abc".into()), CHAT_TEXT_LIMITS);
        assert_eq!(adapter.dm_text_limit(), CHAT_TEXT_LIMITS);
        assert_eq!(adapter.bot_user_id(), None);
    }
}
