//! The serenity gateway client: set-up ([`DiscordRunner::run`]) and the event handler that turns
//! gateway dispatches into [`PlatformEvent`]s and [`ConnectionState`] changes.
//!
//! * READY: the bot's user and application ids become known, the connection is up, and the slash
//!   commands are registered (bulk overwrite, per guild and/or globally; retried on the next READY
//!   if it failed).
//! * RESUMED and shard stage changes keep [`ConnectionState`] true only while the shard is
//!   connected (the stage is read back from serenity's shard manager, which is updated before the
//!   event is dispatched, so out-of-order event tasks cannot leave a stale value); a watcher polls
//!   the shard manager every second for the outages serenity reports no stage change for.
//! * MESSAGE_CREATE → [`PlatformEvent::Message`] (own, bot and other-guild messages skipped),
//!   with its [`Location`](crate::platform::Location) (the thread too) resolved by [`Channels`]
//!   first.
//! * TYPING_START (DMs and server channels) → [`PlatformEvent::Typing`], located like a
//!   message (own, bot and other-guild typing skipped; whether it is worth an agent is the
//!   router's to judge).
//! * GUILD_CREATE: the bot's permissions in each channel are checked against what its place
//!   asks ([`permissions`](super::permissions)); what is missing is one warning per server.
//! * INTERACTION_CREATE for one of our commands → [`PlatformEvent::Command`], answered
//!   ephemerally by [`commands::handle`].
//!
//! Reconnects and resumes are serenity's. serenity dispatches every event in its own task; the
//! handler only awaits the event sink, always together with the shutdown token.

use crate::sync::Recover;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use anyhow::Context as _;
use reqwest::Method;
use serenity::all::{
    ClientBuilder, ConnectionStage, Context, EventHandler, GatewayError, GatewayIntents, Guild,
    HttpBuilder, Interaction, Message, Ready, ResumedEvent, ShardId, ShardStageUpdateEvent,
    TypingStartEvent, UserId,
};
use serenity::async_trait;
use serenity::gateway::ShardManager;
use tokio_util::sync::CancellationToken;

use super::channels::Channels;
use super::commands::{self, CommandSet, InteractionContext};
use super::convert::{self, Skip};
use super::http::{Body, Rest, Route};
use super::permissions::Reports;
use crate::config::Secret;
use crate::platform::duties::PlaceDuties;
use crate::platform::{ConnectionState, EventSink, PlatformEvent, PlatformKind};

/// State shared by the adapter and the gateway handler.
#[derive(Default)]
pub(crate) struct Shared {
    bot_user_id: AtomicU64,
    application_id: AtomicU64,
    /// What is known about channels: guild, kind, parent, name, a thread's owner (bounded).
    pub(crate) channels: Channels,
    /// User → DM channel.
    dm_channels: Mutex<HashMap<u64, u64>>,
    shard_manager: OnceLock<Arc<ShardManager>>,
}

impl Shared {
    pub(crate) fn set_identity(&self, bot_user_id: u64, application_id: u64) {
        self.bot_user_id.store(bot_user_id, Ordering::Release);
        self.application_id.store(application_id, Ordering::Release);
    }

    /// The bot's user id, 0 before READY.
    pub(crate) fn bot_user_id_raw(&self) -> u64 {
        self.bot_user_id.load(Ordering::Acquire)
    }

    pub(crate) fn known_dm_channel(&self, user: u64) -> Option<u64> {
        self.dm_channels.locked().get(&user).copied()
    }

    pub(crate) fn remember_dm_channel(&self, user: u64, channel: u64) {
        self.dm_channels.locked().insert(user, channel);
        self.channels.remember_guild(channel, None);
    }

    pub(crate) fn set_shard_manager(&self, manager: Arc<ShardManager>) {
        let _ = self.shard_manager.set(manager);
    }

    pub(crate) fn shard_manager(&self) -> Option<&Arc<ShardManager>> {
        self.shard_manager.get()
    }
}

/// Gateway intents the adapter needs. MESSAGE_CONTENT is privileged; the typing intents let a
/// DM's (or an answer-everything place's) agent start before the message arrives.
pub(crate) fn intents() -> GatewayIntents {
    GatewayIntents::GUILDS
        | GatewayIntents::GUILD_MESSAGES
        | GatewayIntents::DIRECT_MESSAGES
        | GatewayIntents::MESSAGE_CONTENT
        | GatewayIntents::DIRECT_MESSAGE_TYPING
        | GatewayIntents::GUILD_MESSAGE_TYPING
}

/// Runs the Discord gateway connection of a [`DiscordAdapter`](super::DiscordAdapter); obtained
/// from [`DiscordAdapter::new`](super::DiscordAdapter::new).
pub struct DiscordRunner {
    pub(crate) token: Secret,
    pub(crate) api_base_url: Option<String>,
    pub(crate) gateway_url: Option<String>,
    pub(crate) http: reqwest::Client,
    pub(crate) rest: Rest,
    pub(crate) shared: Arc<Shared>,
    pub(crate) commands: Arc<CommandSet>,
    pub(crate) guild_ids: Vec<u64>,
    pub(crate) allow_dm: bool,
    pub(crate) reply_timeout: Duration,
    pub(crate) duties: Arc<dyn PlaceDuties>,
}

impl std::fmt::Debug for DiscordRunner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DiscordRunner")
            .field("api_base_url", &self.api_base_url)
            .field("gateway_url", &self.gateway_url)
            .field("guild_ids", &self.guild_ids)
            .finish_non_exhaustive()
    }
}

impl DiscordRunner {
    /// How long a slash command waits for its [`CommandReply`](crate::platform::CommandReply)
    /// before answering that it took too long (default 5 minutes; Discord keeps the interaction
    /// token for 15).
    pub fn with_command_reply_timeout(mut self, timeout: Duration) -> Self {
        self.reply_timeout = timeout;
        self
    }

    /// What the `places:` rules ask of the bot per channel, checked against its permissions at
    /// each GUILD_CREATE (default: every enabled skill everywhere).
    pub fn with_place_duties(mut self, duties: Arc<dyn PlaceDuties>) -> Self {
        self.duties = duties;
        self
    }

    /// Connects to the gateway and delivers events into `sink` until `shutdown` is cancelled
    /// (then the shards are shut down and `Ok(())` is returned) or serenity gives up (an error).
    /// `state` is true while the shard is connected.
    pub async fn run(
        self,
        sink: EventSink,
        state: ConnectionState,
        shutdown: CancellationToken,
    ) -> anyhow::Result<()> {
        let mut builder = HttpBuilder::new(self.token.expose()).client(self.http.clone());
        if let Some(base) = &self.api_base_url {
            // serenity applies the proxy only with its ratelimiter off (serenity#1739).
            builder = builder
                .proxy(base.trim_end_matches('/'))
                .ratelimiter_disabled(true);
        }
        let handler = Handler {
            shared: Arc::clone(&self.shared),
            interactions: InteractionContext {
                rest: self.rest.clone(),
                commands: Arc::clone(&self.commands),
                sink: sink.clone(),
                shutdown: shutdown.clone(),
                guild_ids: self.guild_ids.clone(),
                reply_timeout: self.reply_timeout,
            },
            state: state.clone(),
            allow_dm: self.allow_dm,
            registered: AtomicBool::new(false),
            duties: Arc::clone(&self.duties),
            permissions: Reports::default(),
        };
        let connect =
            ClientBuilder::new_with_http(builder.build(), intents()).event_handler(handler);
        let mut client = tokio::select! {
            client = std::future::IntoFuture::into_future(connect) => client,
            () = shutdown.cancelled() => return Ok(()),
        }
        .context("while building the Discord client")?;
        if let Some(url) = &self.gateway_url {
            *client.ws_url.lock().await = url.clone();
        }
        let manager = Arc::clone(&client.shard_manager);
        self.shared.set_shard_manager(Arc::clone(&manager));
        self.shared.channels.set_cache(Arc::clone(&client.cache));
        tracing::info!(platform = "discord", "connecting to the Discord gateway");
        let outcome = tokio::select! {
            result = client.start() => match result {
                Ok(()) => Ok(()),
                Err(err) => match refusal(&err) {
                    // Retrying cannot help: one actionable record, and `/readyz` says why.
                    Some(problem) => {
                        tracing::error!(platform = "discord", problem, "Discord refused the connection; not retrying");
                        state.fail(problem);
                        return Ok(());
                    }
                    None => Err(anyhow::anyhow!("the Discord client stopped: {err}")),
                },
            },
            () = watch_connection(&manager, &state) => Ok(()),
            () = shutdown.cancelled() => {
                manager.shutdown_all().await;
                Ok(())
            }
        };
        state.set(false);
        tracing::info!(platform = "discord", "Discord gateway connection closed");
        outcome
    }
}

/// What the operator must do when Discord refuses the connection for good: serenity stops on
/// these close codes (4004, 4013, 4014) instead of retrying. `None` for anything else.
fn refusal(error: &serenity::Error) -> Option<&'static str> {
    match error {
        serenity::Error::Gateway(GatewayError::InvalidAuthentication) => Some(
            "Discord rejected the bot token: reset it (Developer Portal, your application, Bot, \
             Reset Token), set DISCORD_TOKEN and restart (docs/PLATFORMS.md)",
        ),
        serenity::Error::Gateway(
            GatewayError::DisallowedGatewayIntents | GatewayError::InvalidGatewayIntents,
        ) => Some(
            "Discord refused the gateway intents: switch on the Message Content intent \
             (Developer Portal, your application, Bot, Privileged Gateway Intents) and restart \
             (docs/PLATFORMS.md)",
        ),
        _ => None,
    }
}

/// How often the shard manager is polled for the connection state.
const WATCH_INTERVAL: Duration = Duration::from_secs(1);

/// Keeps `state` in line with the shard manager's view: connected only while shard 0 has a
/// runner in the `Connected` stage. Stage-change events alone miss outages: serenity resumes or
/// restarts a shard without reporting an intermediate stage, but a failed resume updates the
/// runner's stage and a restart removes the runner until a new session is up. Never returns.
async fn watch_connection(manager: &ShardManager, state: &ConnectionState) {
    let mut ticks = tokio::time::interval(WATCH_INTERVAL);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let connected = manager
            .runners
            .lock()
            .await
            .get(&ShardId(0))
            .is_some_and(|info| info.stage == ConnectionStage::Connected);
        if connected != state.is_connected() {
            tracing::info!(
                platform = "discord",
                connected,
                "Discord connection state changed"
            );
            state.set(connected);
        }
    }
}

/// serenity's event handler (see the module documentation).
struct Handler {
    shared: Arc<Shared>,
    interactions: InteractionContext,
    state: ConnectionState,
    allow_dm: bool,
    registered: AtomicBool,
    duties: Arc<dyn PlaceDuties>,
    permissions: Reports,
}

impl Handler {
    /// Registers the slash commands (bulk overwrite): per configured guild, and globally for the
    /// contexts [`commands::global_contexts`] chooses.
    async fn register_commands(&self, app: u64) -> Result<(), crate::platform::PlatformError> {
        let rest = &self.interactions.rest;
        let set = &self.interactions.commands;
        let guilds = &self.interactions.guild_ids;
        for guild in guilds {
            let route = Route::new(
                "register_guild_commands",
                Method::PUT,
                format!("/applications/{app}/guilds/{guild}/commands"),
            );
            rest.call(route, Body::Json(set.guild_body(*guild))).await?;
        }
        let global = match commands::global_contexts(!guilds.is_empty(), self.allow_dm) {
            Some(contexts) => set.registration_body(Some(&contexts)),
            None => serde_json::Value::Array(Vec::new()),
        };
        let route = Route::new(
            "register_global_commands",
            Method::PUT,
            format!("/applications/{app}/commands"),
        );
        rest.call(route, Body::Json(global)).await
    }

    async fn deliver(&self, event: PlatformEvent) {
        tokio::select! {
            sent = self.interactions.sink.send(event) => {
                if sent.is_err() {
                    tracing::debug!(platform = "discord", "event sink closed; event dropped");
                }
            }
            () = self.interactions.shutdown.cancelled() => {}
        }
    }
}

#[async_trait]
impl EventHandler for Handler {
    async fn ready(&self, _ctx: Context, ready: Ready) {
        let app = ready.application.id.get();
        self.shared.set_identity(ready.user.id.get(), app);
        self.state.set(true);
        tracing::info!(
            platform = "discord",
            bot_user_id = %ready.user.id,
            guilds = ready.guilds.len(),
            "Discord gateway ready"
        );
        // A new session (READY, not RESUMED): what was sent meanwhile was never delivered.
        self.deliver(PlatformEvent::Connected(PlatformKind::Discord))
            .await;
        if self.registered.load(Ordering::Acquire) {
            return;
        }
        match self.register_commands(app).await {
            Ok(()) => {
                self.registered.store(true, Ordering::Release);
                tracing::info!(platform = "discord", "slash commands registered");
            }
            Err(error) => {
                tracing::error!(platform = "discord", error = %error, "slash command registration failed");
            }
        }
    }

    async fn guild_create(&self, _ctx: Context, guild: Guild, _is_new: Option<bool>) {
        let guilds = &self.interactions.guild_ids;
        let bot = self.shared.bot_user_id_raw();
        if bot == 0 || (!guilds.is_empty() && !guilds.contains(&guild.id.get())) {
            return;
        }
        self.permissions
            .check(&guild, UserId::new(bot), self.duties.as_ref());
    }

    async fn resume(&self, _ctx: Context, _event: ResumedEvent) {
        self.state.set(true);
        tracing::info!(platform = "discord", "Discord gateway session resumed");
    }

    async fn shard_stage_update(&self, _ctx: Context, event: ShardStageUpdateEvent) {
        let stage = match self.shared.shard_manager() {
            Some(manager) => manager
                .runners
                .lock()
                .await
                .get(&ShardId(event.shard_id.0))
                .map_or(event.new, |info| info.stage),
            None => event.new,
        };
        let connected = stage == ConnectionStage::Connected;
        self.state.set(connected);
        tracing::info!(platform = "discord", stage = %stage, connected, "Discord shard stage changed");
    }

    async fn message(&self, _ctx: Context, message: Message) {
        let channel = message.channel_id.get();
        let guild = message.guild_id.map(|g| g.get());
        self.shared.channels.remember_guild(channel, guild);
        let bot = self.shared.bot_user_id_raw();
        match convert::incoming(&message, bot, &self.interactions.guild_ids) {
            Ok(mut incoming) => {
                let rest = &self.interactions.rest;
                tokio::select! {
                    location = self.shared.channels.location(rest, channel, guild, bot) => {
                        incoming.location = location;
                    }
                    () = self.interactions.shutdown.cancelled() => return,
                }
                self.deliver(PlatformEvent::Message(incoming)).await;
            }
            Err(Skip::OwnMessage | Skip::Bot) => {}
            Err(Skip::OtherGuild) => tracing::debug!(
                platform = "discord",
                guild_id = ?message.guild_id,
                "message from a guild outside guildIds ignored"
            ),
        }
    }

    async fn typing_start(&self, _ctx: Context, event: TypingStartEvent) {
        let channel = event.channel_id.get();
        let guild = event.guild_id.map(|g| g.get());
        self.shared.channels.remember_guild(channel, guild);
        let bot = self.shared.bot_user_id_raw();
        let Ok(mut typing) = convert::typing(&event, bot, &self.interactions.guild_ids) else {
            return;
        };
        let rest = &self.interactions.rest;
        tokio::select! {
            location = self.shared.channels.location(rest, channel, guild, bot) => {
                typing.location = location;
            }
            () = self.interactions.shutdown.cancelled() => return,
        }
        self.deliver(PlatformEvent::Typing(typing)).await;
    }

    async fn interaction_create(&self, _ctx: Context, interaction: Interaction) {
        match interaction {
            Interaction::Command(command) => commands::handle(&self.interactions, command).await,
            Interaction::Component(pressed) => {
                commands::handle_button(&self.interactions, pressed).await;
            }
            _ => {}
        }
    }
}
