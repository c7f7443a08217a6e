//! The Discord platform adapter: serenity 0.12 for the gateway (events, reconnects, resumes) and
//! Discord's REST API through the daemon's shared reqwest client for everything the adapter does.
//!
//! * [`DiscordAdapter::new`] validates the configuration and returns the adapter (an
//!   `Arc<dyn PlatformAdapter>` for the registry) and a [`DiscordRunner`], whose
//!   [`run`](DiscordRunner::run) connects to the gateway and feeds an
//!   [`EventSink`](crate::platform::EventSink) until shutdown.
//! * `client.rs`: serenity client set-up and the event handler (messages, READY / RESUMED / stage
//!   changes → [`ConnectionState`](crate::platform::ConnectionState), interactions).
//! * `commands.rs`: slash commands generated from user-command skills, ephemeral answers.
//! * `http.rs`: REST calls with Discord 429 handling (serenity cannot see `retry_after` when
//!   pointed at `apiBaseUrl`) and error mapping.
//! * `invite.rs`: the invite URL with the scopes and permissions the enabled skills use.
//! * `convert.rs`: snowflakes, serenity / REST shapes ↔ neutral types, emoji path segments.
//! * `channels.rs`: what is known about channels (guild, thread, forum or channel, parent, name,
//!   a thread's owner; bounded memory of `GET /channels/{id}`, serenity's cache first) and a
//!   message's [`Location`](crate::platform::Location) (thread parent, category, the thread
//!   itself) for `places:` rules and the prompt.
//! * `threads.rs`: a thread's starter message, opening a thread from a message, the starter of
//!   a thread opened from a message addressed in its parent channel, archived threads
//!   unarchived to send into them.
//!
//! Behaviour: replies reference the anchor without pinging anyone but mentioned users
//! (`allowed_mentions {parse: [users], replied_user: false}`, `fail_if_not_exists: false`, so a
//! reply to a deleted message still arrives); edits are in place; `:name:` custom emojis are
//! resolved against the channel's guild; history is fetched newest-first and returned oldest-first
//! (a catch-up's read-back too, back to its cursor); search scans the last [`SEARCH_WINDOW`]
//! messages. In a thread opened from a message, the starter (whose id is the thread's) is read
//! and reacted to in the parent channel and never referenced by a reply; a send into an
//! archived thread unarchives it once (`threads.rs`). Texts are never truncated: empty or too
//! long is [`PlatformError::InvalidInput`].

mod channels;
mod client;
mod commands;
mod convert;
mod http;
pub mod invite;
mod permissions;
mod threads;

pub use client::DiscordRunner;
pub use commands::CommandSpecError;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use reqwest::Method;
use serde_json::{Value, json};

use self::client::Shared;
use self::commands::CommandSet;
use self::convert::{
    RestChannel, RestEmoji, RestMember, RestMessage, RestUser, check_text, check_url,
    message_payload, reaction_segment, snowflake,
};
use self::http::{Body, Rest, Route};
use crate::config::DiscordConfig;
use crate::platform::{
    ChannelId, ChatMessage, CustomEmoji, FileDelivery, IncomingMessage, MessageId, Missed,
    OutgoingFile, PlatformAdapter, PlatformError, PlatformKind, ReactionEmoji, SentMessage,
    TextLimits, UserCommandSpec, UserId, UserInfo,
};
use crate::text::LengthUnit;

/// Discord messages: 2000 UTF-16 units (serenity counts code points; UTF-16 is the safe,
/// stricter count).
pub const TEXT_LIMITS: TextLimits = TextLimits::new(2000, LengthUnit::Utf16);

/// How many recent messages [`PlatformAdapter::search_messages`] scans.
pub const SEARCH_WINDOW: usize = 300;

/// Discord serves at most this many messages per history request.
const PAGE: usize = 100;

/// Default wait for a slash command's reply.
const DEFAULT_REPLY_TIMEOUT: Duration = Duration::from_secs(300);

/// The configuration cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DiscordSetupError {
    /// `platforms.discord.token` is empty.
    #[error("platforms.discord.token is empty")]
    MissingToken,
    /// The token cannot be sent in an HTTP header.
    #[error("platforms.discord.token contains characters that are not allowed in an HTTP header")]
    BadToken,
    /// A `platforms.discord.guildIds` entry is not a snowflake.
    #[error("platforms.discord.guildIds: {0:?} is not a Discord guild id")]
    InvalidGuildId(String),
    /// `platforms.discord.apiBaseUrl` / `gatewayUrl` is not an http(s) / ws(s) URL.
    #[error("platforms.discord.{key}: {value:?} is not a valid {expected} URL")]
    InvalidUrl {
        /// The config key.
        key: &'static str,
        /// The configured value.
        value: String,
        /// Expected schemes.
        expected: &'static str,
    },
}

/// The Discord [`PlatformAdapter`] (see the module documentation).
pub struct DiscordAdapter {
    rest: Rest,
    shared: Arc<Shared>,
    /// `guildIds`: messages from other guilds are left out (empty: every guild).
    guild_ids: Vec<u64>,
}

impl std::fmt::Debug for DiscordAdapter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DiscordAdapter")
            .field("bot_user_id", &self.bot_user_id())
            .finish_non_exhaustive()
    }
}

/// Discord's [`Connector`](crate::platform::connect::Connector) build: the adapter and the
/// gateway runner as its receive loop.
pub(crate) fn connect(
    config: &crate::config::PlatformsConfig,
    http: reqwest::Client,
    commands: Vec<UserCommandSpec>,
    duties: Arc<dyn crate::platform::duties::PlaceDuties>,
) -> anyhow::Result<crate::platform::connect::Connected> {
    use anyhow::Context as _;
    let (adapter, runner) =
        DiscordAdapter::new(&config.discord, http, commands).context("Discord set-up")?;
    let runner = runner.with_place_duties(duties);
    Ok((
        adapter,
        Box::new(move |sink, state, draining| Box::pin(runner.run(sink, state, draining))),
    ))
}

impl DiscordAdapter {
    /// Builds the adapter and its gateway runner from `config`, sharing `http` (reqwest 0.12) with
    /// serenity. `commands` are the user-command skills to register as slash commands; specs that
    /// Discord cannot express are logged and left out.
    pub fn new(
        config: &DiscordConfig,
        http: reqwest::Client,
        commands: Vec<UserCommandSpec>,
    ) -> Result<(Arc<Self>, DiscordRunner), DiscordSetupError> {
        if config.token.is_empty() {
            return Err(DiscordSetupError::MissingToken);
        }
        let api_base_url = config
            .api_base_url
            .as_deref()
            .map(str::trim)
            .filter(|u| !u.is_empty());
        if let Some(url) = api_base_url {
            check_url(url, "apiBaseUrl", &["http://", "https://"], "http(s)")?;
        }
        let gateway_url = config
            .gateway_url
            .as_deref()
            .map(str::trim)
            .filter(|u| !u.is_empty());
        if let Some(url) = gateway_url {
            check_url(url, "gatewayUrl", &["ws://", "wss://"], "ws(s)")?;
        }
        let guild_ids = config
            .guild_ids
            .iter()
            .map(|g| {
                snowflake(g.trim(), "guild id")
                    .map_err(|_| DiscordSetupError::InvalidGuildId(g.clone()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let rest = Rest::new(http.clone(), api_base_url, config.token.expose())
            .map_err(|_| DiscordSetupError::BadToken)?;
        let (set, errors) = CommandSet::build(&commands);
        for error in &errors {
            tracing::warn!(platform = "discord", command = %error.name, reason = %error.reason, "user command not registered as a slash command");
        }
        let shared = Arc::new(Shared::default());
        let adapter = Arc::new(Self {
            rest: rest.clone(),
            shared: Arc::clone(&shared),
            guild_ids: guild_ids.clone(),
        });
        let runner = DiscordRunner {
            token: config.token.clone(),
            api_base_url: api_base_url.map(str::to_owned),
            gateway_url: gateway_url.map(str::to_owned),
            http,
            rest,
            shared,
            commands: Arc::new(set),
            guild_ids,
            allow_dm: config.allow_dm,
            reply_timeout: DEFAULT_REPLY_TIMEOUT,
            duties: Arc::new(crate::platform::duties::NoRules),
        };
        Ok((adapter, runner))
    }

    /// The guild of `channel` (`None` for a DM channel), from what the gateway told us or
    /// `GET /channels/{id}`.
    async fn guild_of(&self, channel: u64) -> Result<Option<u64>, PlatformError> {
        self.shared.channels.guild(&self.rest, channel).await
    }

    async fn guild_emojis(&self, channel: u64) -> Result<Vec<CustomEmoji>, PlatformError> {
        let Some(guild) = self.guild_of(channel).await? else {
            return Ok(Vec::new());
        };
        let route = Route::new(
            "list_guild_emojis",
            Method::GET,
            format!("/guilds/{guild}/emojis"),
        );
        let emojis: Vec<RestEmoji> = self.rest.json(route, Body::Empty).await?;
        Ok(emojis
            .into_iter()
            .filter_map(RestEmoji::into_custom)
            .collect())
    }

    /// The route of the bot's own reaction (`…/reactions/{emoji}/@me`) on a message (in the
    /// parent channel for a thread's starter: [`home_of`](Self::home_of)), with a custom emoji
    /// resolved against the channel's guild.
    async fn own_reaction_route(
        &self,
        name: &'static str,
        method: Method,
        channel_id: &ChannelId,
        message_id: &MessageId,
        emoji: &ReactionEmoji,
    ) -> Result<Route, PlatformError> {
        let channel = snowflake(channel_id.as_str(), "channel id")?;
        let message = snowflake(message_id.as_str(), "message id")?;
        let segment = reaction_segment(&self.resolve_emoji(channel, emoji).await?)?;
        let home = self.home_of(channel, message).await?;
        Ok(Route::new(
            name,
            method,
            format!("/channels/{home}/messages/{message}/reactions/{segment}/@me"),
        ))
    }

    /// `emoji` with a custom emoji's id filled in from the channel's guild.
    async fn resolve_emoji(
        &self,
        channel: u64,
        emoji: &ReactionEmoji,
    ) -> Result<ReactionEmoji, PlatformError> {
        match emoji {
            ReactionEmoji::Custom { name, id: None, .. } => self
                .guild_emojis(channel)
                .await?
                .into_iter()
                .find(|e| &e.name == name)
                .map(|e| e.to_reaction())
                .ok_or_else(|| PlatformError::NotFound(format!("custom emoji :{name}:"))),
            other => Ok(other.clone()),
        }
    }

    async fn dm_channel(&self, user: u64) -> Result<u64, PlatformError> {
        if let Some(channel) = self.shared.known_dm_channel(user) {
            return Ok(channel);
        }
        let route = Route::new("create_dm", Method::POST, "/users/@me/channels");
        let body = json!({"recipient_id": user.to_string()});
        let opened: RestChannel = self.rest.json(route, Body::Json(body)).await?;
        let channel = snowflake(&opened.id, "channel id")?;
        self.shared.remember_dm_channel(user, channel);
        Ok(channel)
    }

    async fn post_text(
        &self,
        channel: u64,
        text: &str,
        reply_to: Option<&str>,
    ) -> Result<SentMessage, PlatformError> {
        check_text(text)?;
        let payload = message_payload(channel, Some(text), reply_to)?;
        let sent = self
            .create_message(channel, "create_message", Body::Json(payload))
            .await?;
        Ok(sent.sent())
    }

    async fn post_files(
        &self,
        channel: u64,
        files: Vec<OutgoingFile>,
        caption: Option<&str>,
        reply_to: Option<&str>,
    ) -> Result<FileDelivery, PlatformError> {
        if files.is_empty() {
            return Err(PlatformError::InvalidInput("no files to send".into()));
        }
        if let Some(caption) = caption {
            check_text(caption)?;
        }
        let voice = files.iter().any(|f| f.voice.is_some());
        if voice && files.len() != 1 {
            return Err(PlatformError::InvalidInput(
                "a Discord voice message is one audio file".into(),
            ));
        }
        // A voice message carries no text: the caption becomes the file's alt text.
        let mut files = files;
        let caption = match caption {
            Some(text) if voice => {
                files[0].description.get_or_insert_with(|| text.to_owned());
                None
            }
            other => other,
        };
        let mut payload = message_payload(channel, caption, reply_to)?;
        let mut parts = Vec::with_capacity(files.len());
        let mut described = Vec::with_capacity(files.len());
        for (index, file) in files.into_iter().enumerate() {
            described.push(attachment_entry(index, &file));
            let (filename, mime) = (file.filename.clone(), file.mime.clone());
            let bytes = file.into_bytes().await?;
            parts.push((filename, mime, bytes));
        }
        payload["attachments"] = Value::Array(described);
        if voice {
            payload["flags"] = json!(IS_VOICE_MESSAGE);
        }
        let body = Body::Files {
            payload,
            files: parts,
        };
        let sent = self
            .create_message(channel, "create_message_files", body)
            .await?;
        Ok(FileDelivery {
            messages: vec![sent.sent()],
            failed: Vec::new(),
        })
    }

    /// Up to `max` messages of `channel` newer than `after`, newest first, as Discord serves
    /// them (JSON, each converted on its own), and whether older ones beyond `max` were left
    /// out. Read backwards from now (`before=`), so the youngest come first even after a long
    /// gap; `after=` would serve the oldest first.
    async fn history_after(
        &self,
        channel: u64,
        after: u64,
        max: usize,
    ) -> Result<(Vec<Value>, bool), PlatformError> {
        let mut newest_first: Vec<Value> = Vec::new();
        let mut before: Option<u64> = None;
        loop {
            let anchor = before.map(|b| format!("&before={b}")).unwrap_or_default();
            let route = Route::new(
                "list_messages",
                Method::GET,
                format!("/channels/{channel}/messages?limit={PAGE}{anchor}"),
            );
            let page: Vec<Value> = self.rest.json(route, Body::Empty).await?;
            let full = page.len() >= PAGE;
            let mut reached = false;
            for message in page {
                let Some(id) = message["id"].as_str().and_then(|i| i.parse::<u64>().ok()) else {
                    tracing::warn!(
                        platform = "discord",
                        channel,
                        "history message without an id skipped"
                    );
                    continue;
                };
                before = Some(before.map_or(id, |b| b.min(id)));
                if id <= after {
                    reached = true;
                } else {
                    newest_first.push(message);
                }
            }
            if reached || !full {
                let more = newest_first.len() > max;
                newest_first.truncate(max);
                return Ok((newest_first, more));
            }
            if newest_first.len() >= max {
                newest_first.truncate(max);
                return Ok((newest_first, true));
            }
        }
    }

    async fn history(&self, channel: u64, limit: usize) -> Result<Vec<RestMessage>, PlatformError> {
        let mut newest_first: Vec<RestMessage> = Vec::new();
        while newest_first.len() < limit {
            let want = (limit - newest_first.len()).min(PAGE);
            let before = newest_first
                .last()
                .map(|m| format!("&before={}", m.id))
                .unwrap_or_default();
            let route = Route::new(
                "list_messages",
                Method::GET,
                format!("/channels/{channel}/messages?limit={want}{before}"),
            );
            let page: Vec<RestMessage> = self.rest.json(route, Body::Empty).await?;
            let done = page.len() < want;
            newest_first.extend(page);
            if done {
                break;
            }
        }
        newest_first.truncate(limit);
        Ok(newest_first)
    }
}

#[async_trait]
impl PlatformAdapter for DiscordAdapter {
    fn kind(&self) -> PlatformKind {
        PlatformKind::Discord
    }

    fn bot_user_id(&self) -> Option<UserId> {
        match self.shared.bot_user_id_raw() {
            0 => None,
            id => Some(UserId::new(id.to_string())),
        }
    }

    fn text_limit(&self, _channel_id: &ChannelId) -> TextLimits {
        TEXT_LIMITS
    }

    fn dm_text_limit(&self) -> TextLimits {
        TEXT_LIMITS
    }

    async fn send_message(
        &self,
        channel_id: &ChannelId,
        text: &str,
        reply_to: Option<&MessageId>,
    ) -> Result<SentMessage, PlatformError> {
        let channel = snowflake(channel_id.as_str(), "channel id")?;
        check_text(text)?;
        let anchor = self.reply_anchor(channel, reply_to).await;
        self.post_text(channel, text, anchor).await
    }

    async fn edit_message(
        &self,
        channel_id: &ChannelId,
        message_id: &MessageId,
        text: &str,
        _reply_to: Option<&MessageId>,
    ) -> Result<SentMessage, PlatformError> {
        let channel = snowflake(channel_id.as_str(), "channel id")?;
        let message = snowflake(message_id.as_str(), "message id")?;
        check_text(text)?;
        let route = Route::new(
            "edit_message",
            Method::PATCH,
            format!("/channels/{channel}/messages/{message}"),
        );
        let body = json!({"content": text, "allowed_mentions": {"parse": ["users"]}});
        let edited: RestMessage = self.rest.json(route, Body::Json(body)).await?;
        Ok(edited.sent())
    }

    async fn delete_message(
        &self,
        channel_id: &ChannelId,
        message_id: &MessageId,
    ) -> Result<(), PlatformError> {
        let channel = snowflake(channel_id.as_str(), "channel id")?;
        let message = snowflake(message_id.as_str(), "message id")?;
        let route = Route::new(
            "delete_message",
            Method::DELETE,
            format!("/channels/{channel}/messages/{message}"),
        );
        self.rest.call(route, Body::Empty).await
    }

    async fn get_message(
        &self,
        channel_id: &ChannelId,
        message_id: &MessageId,
    ) -> Result<ChatMessage, PlatformError> {
        let channel = snowflake(channel_id.as_str(), "channel id")?;
        let message = snowflake(message_id.as_str(), "message id")?;
        let home = self.home_of(channel, message).await?;
        let route = Route::new(
            "get_message",
            Method::GET,
            format!("/channels/{home}/messages/{message}"),
        );
        let found: RestMessage = self.rest.json(route, Body::Empty).await?;
        Ok(found.into_chat())
    }

    async fn recent_messages(
        &self,
        channel_id: &ChannelId,
        limit: usize,
    ) -> Result<Vec<ChatMessage>, PlatformError> {
        let channel = snowflake(channel_id.as_str(), "channel id")?;
        let limit = limit.min(PAGE);
        if limit == 0 {
            return Ok(Vec::new());
        }
        let mut messages: Vec<ChatMessage> = self
            .history(channel, limit)
            .await?
            .into_iter()
            .map(RestMessage::into_chat)
            .collect();
        messages.reverse();
        Ok(messages)
    }

    async fn missed_messages(
        &self,
        feed: &ChannelId,
        after: &MessageId,
        max: usize,
    ) -> Result<Missed, PlatformError> {
        let channel = snowflake(feed.as_str(), "channel id")?;
        let after = snowflake(after.as_str(), "message id")?;
        if max == 0 {
            return Ok(Missed::default());
        }
        // REST messages carry no guild: the channel's, for the DM flag and the guild filter.
        let guild = self.guild_of(channel).await?;
        let (newest_first, more) = self.history_after(channel, after, max).await?;
        let bot = self.shared.bot_user_id_raw();
        let mut messages: Vec<IncomingMessage> = newest_first
            .into_iter()
            .rev()
            .filter_map(|value| {
                let mut message: serenity::model::channel::Message =
                    match serde_json::from_value(value) {
                        Ok(message) => message,
                        Err(e) => {
                            tracing::warn!(platform = "discord", channel, error = %e, "history message that does not parse skipped");
                            return None;
                        }
                    };
                message.guild_id = guild.map(serenity::model::id::GuildId::new);
                convert::incoming(&message, bot, &self.guild_ids).ok()
            })
            .collect();
        messages.sort_by_key(|m| m.message_id.as_str().parse::<u64>().unwrap_or(0));
        if !messages.is_empty() {
            // Where they were written, as for a live message (so they match the same rules).
            let location = self
                .shared
                .channels
                .location(&self.rest, channel, guild, bot)
                .await;
            for message in &mut messages {
                message.location = location.clone();
            }
        }
        Ok(Missed { messages, more })
    }

    async fn search_messages(
        &self,
        channel_id: &ChannelId,
        query: &str,
        limit: usize,
    ) -> Result<Vec<ChatMessage>, PlatformError> {
        let channel = snowflake(channel_id.as_str(), "channel id")?;
        let keywords: Vec<String> = query.split_whitespace().map(str::to_lowercase).collect();
        if keywords.is_empty() {
            return Err(PlatformError::InvalidInput(
                "the search query is empty".into(),
            ));
        }
        if limit == 0 {
            return Ok(Vec::new());
        }
        let mut found: Vec<ChatMessage> = self
            .history(channel, SEARCH_WINDOW)
            .await?
            .into_iter()
            .filter(|m| {
                let content = m.content.to_lowercase();
                keywords.iter().any(|k| content.contains(k.as_str()))
            })
            .take(limit)
            .map(RestMessage::into_chat)
            .collect();
        found.reverse();
        Ok(found)
    }

    async fn user_info(
        &self,
        channel_id: &ChannelId,
        user_id: &UserId,
    ) -> Result<UserInfo, PlatformError> {
        let channel = snowflake(channel_id.as_str(), "channel id")?;
        let user = snowflake(user_id.as_str(), "user id")?;
        if let Some(guild) = self.guild_of(channel).await? {
            let route = Route::new(
                "get_guild_member",
                Method::GET,
                format!("/guilds/{guild}/members/{user}"),
            );
            match self.rest.json::<RestMember>(route, Body::Empty).await {
                Ok(member) => return Ok(member.user.into_info(member.nick)),
                Err(PlatformError::NotFound(_)) => {} // not (or no longer) a member
                Err(other) => return Err(other),
            }
        }
        let route = Route::new("get_user", Method::GET, format!("/users/{user}"));
        let found: RestUser = self.rest.json(route, Body::Empty).await?;
        Ok(found.into_info(None))
    }

    async fn add_reaction(
        &self,
        channel_id: &ChannelId,
        message_id: &MessageId,
        emoji: &ReactionEmoji,
    ) -> Result<(), PlatformError> {
        let route = self
            .own_reaction_route("add_reaction", Method::PUT, channel_id, message_id, emoji)
            .await?;
        self.rest.call(route, Body::Empty).await
    }

    async fn remove_reaction(
        &self,
        channel_id: &ChannelId,
        message_id: &MessageId,
        emoji: &ReactionEmoji,
    ) -> Result<(), PlatformError> {
        let route = self
            .own_reaction_route(
                "remove_reaction",
                Method::DELETE,
                channel_id,
                message_id,
                emoji,
            )
            .await?;
        self.rest.call(route, Body::Empty).await
    }

    async fn send_files(
        &self,
        channel_id: &ChannelId,
        files: Vec<OutgoingFile>,
        caption: Option<&str>,
        reply_to: Option<&MessageId>,
    ) -> Result<FileDelivery, PlatformError> {
        let channel = snowflake(channel_id.as_str(), "channel id")?;
        let anchor = self.reply_anchor(channel, reply_to).await;
        self.post_files(channel, files, caption, anchor).await
    }

    async fn send_dm(&self, user_id: &UserId, text: &str) -> Result<SentMessage, PlatformError> {
        let user = snowflake(user_id.as_str(), "user id")?;
        check_text(text)?;
        let channel = self.dm_channel(user).await?;
        self.post_text(channel, text, None).await
    }

    async fn send_dm_files(
        &self,
        user_id: &UserId,
        files: Vec<OutgoingFile>,
        caption: Option<&str>,
    ) -> Result<FileDelivery, PlatformError> {
        let user = snowflake(user_id.as_str(), "user id")?;
        if files.is_empty() {
            return Err(PlatformError::InvalidInput("no files to send".into()));
        }
        let channel = self.dm_channel(user).await?;
        self.post_files(channel, files, caption, None).await
    }

    async fn custom_emojis(
        &self,
        channel_id: &ChannelId,
    ) -> Result<Vec<CustomEmoji>, PlatformError> {
        let channel = snowflake(channel_id.as_str(), "channel id")?;
        self.guild_emojis(channel).await
    }

    async fn start_typing(&self, channel_id: &ChannelId) -> Result<(), PlatformError> {
        let channel = snowflake(channel_id.as_str(), "channel id")?;
        let route = Route::new(
            "typing",
            Method::POST,
            format!("/channels/{channel}/typing"),
        );
        self.rest.call(route, Body::Empty).await
    }

    async fn thread_starter(
        &self,
        channel_id: &ChannelId,
    ) -> Result<Option<ChatMessage>, PlatformError> {
        self.starter_message(channel_id).await
    }

    async fn open_thread(
        &self,
        channel_id: &ChannelId,
        message_id: &MessageId,
        name: &str,
    ) -> Result<Option<ChannelId>, PlatformError> {
        self.start_thread(channel_id, message_id, name).await
    }
}

/// Discord's message flag for a voice message.
const IS_VOICE_MESSAGE: u64 = 1 << 13;
/// Longest attachment description Discord takes, in characters.
const MAX_DESCRIPTION_CHARS: usize = 1024;

/// The `attachments` entry of `file` at `index`: its name, its alt text (cut to Discord's
/// limit), and a voice message's duration and waveform.
fn attachment_entry(index: usize, file: &OutgoingFile) -> Value {
    use base64::Engine;
    let mut entry = json!({"id": index, "filename": file.filename});
    if let Some(text) = &file.description {
        entry["description"] = json!(text.chars().take(MAX_DESCRIPTION_CHARS).collect::<String>());
    }
    if let Some(clip) = &file.voice {
        entry["duration_secs"] = json!(clip.duration.as_secs_f64());
        entry["waveform"] = json!(base64::engine::general_purpose::STANDARD.encode(&clip.waveform));
    }
    entry
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Secret;

    fn config() -> DiscordConfig {
        DiscordConfig {
            enabled: true,
            token: Secret::new("tok"),
            ..DiscordConfig::default()
        }
    }

    #[test]
    fn configuration_is_checked_up_front() {
        let http = reqwest::Client::new();
        assert!(DiscordAdapter::new(&config(), http.clone(), Vec::new()).is_ok());
        let mut missing = config();
        missing.token = Secret::default();
        assert_eq!(
            DiscordAdapter::new(&missing, http.clone(), Vec::new()).err(),
            Some(DiscordSetupError::MissingToken)
        );
        let mut guilds = config();
        guilds.guild_ids = vec!["12".into(), "x1".into()];
        assert_eq!(
            DiscordAdapter::new(&guilds, http.clone(), Vec::new()).err(),
            Some(DiscordSetupError::InvalidGuildId("x1".into()))
        );
        let mut base = config();
        base.api_base_url = Some("ftp://x".into());
        assert!(matches!(
            DiscordAdapter::new(&base, http.clone(), Vec::new()).err(),
            Some(DiscordSetupError::InvalidUrl {
                key: "apiBaseUrl",
                ..
            })
        ));
        let mut gateway = config();
        gateway.gateway_url = Some("http://x".into());
        assert!(matches!(
            DiscordAdapter::new(&gateway, http, Vec::new()).err(),
            Some(DiscordSetupError::InvalidUrl {
                key: "gatewayUrl",
                ..
            })
        ));
    }

    #[test]
    fn texts_are_checked_not_truncated() {
        assert!(check_text("hi").is_ok());
        assert!(matches!(
            check_text(" \n"),
            Err(PlatformError::InvalidInput(_))
        ));
        assert!(check_text(&"a".repeat(2000)).is_ok());
        // 1001 emoji = 2002 UTF-16 units.
        assert!(matches!(
            check_text(&"😀".repeat(1001)),
            Err(PlatformError::InvalidInput(_))
        ));
    }

    #[test]
    fn reply_payloads_do_not_ping() {
        let payload = message_payload(5, Some("hi"), Some("9")).expect("payload");
        assert_eq!(payload["allowed_mentions"]["replied_user"], false);
        assert_eq!(payload["message_reference"]["message_id"], "9");
        assert!(matches!(
            message_payload(5, Some("hi"), Some("nope")),
            Err(PlatformError::InvalidId(_))
        ));
    }
}
