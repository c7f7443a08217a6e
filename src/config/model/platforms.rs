//! Who the bot talks to and how much: the chat platforms (`platforms`), who is answered
//! (`accessControl`) and the per-user message rate limit (`rateLimit`).

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::config::Secret;

/// Chat platforms.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct PlatformsConfig {
    /// Discord (serenity gateway + REST).
    pub discord: DiscordConfig,
    /// Misskey (REST + streaming websocket).
    pub misskey: MisskeyConfig,
}

/// Discord connection and trigger rules.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct DiscordConfig {
    /// Connect to Discord.
    pub enabled: bool,
    /// Bot token (env `DISCORD_TOKEN`).
    pub token: Secret,
    /// Base URL for Discord's REST API (a proxy, or a fake Discord in tests); unset = Discord.
    pub api_base_url: Option<String>,
    /// Gateway websocket URL override (tests); unset = the URL Discord announces.
    pub gateway_url: Option<String>,
    /// Only answer in these guilds (empty = all); slash commands are registered per guild here.
    pub guild_ids: Vec<String>,
    /// Answer direct messages.
    pub allow_dm: bool,
    /// Answer messages that mention the bot.
    pub respond_to_mention: bool,
    /// Answer messages starting with this prefix (empty = off).
    pub command_prefix: String,
}

impl Default for DiscordConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            token: Secret::default(),
            api_base_url: None,
            gateway_url: None,
            guild_ids: Vec::new(),
            allow_dm: true,
            respond_to_mention: true,
            command_prefix: String::new(),
        }
    }
}

/// Misskey connection and trigger rules.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct MisskeyConfig {
    /// Connect to Misskey.
    pub enabled: bool,
    /// Instance `host[:port]`, no scheme (env `MISSKEY_HOST`).
    pub host: String,
    /// Access token (env `MISSKEY_TOKEN`).
    pub token: Secret,
    /// https/wss when true; http/ws for a local instance or a fake in tests.
    pub secure: bool,
    /// Answer chat (direct) messages.
    pub allow_dm: bool,
    /// Answer notes that mention the bot.
    pub respond_to_mention: bool,
    /// Answer notes starting with this prefix (empty = off).
    pub command_prefix: String,
}

impl Default for MisskeyConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            host: String::new(),
            token: Secret::default(),
            secure: true,
            allow_dm: true,
            respond_to_mention: true,
            command_prefix: String::new(),
        }
    }
}

/// Who may talk to the bot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReplyTo {
    /// Everyone, in DMs and in public.
    #[default]
    All,
    /// Everyone in public channels/notes; DMs only from whitelisted accounts.
    Public,
    /// Only whitelisted accounts and channels.
    Whitelist,
}

/// Access control.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct AccessControlConfig {
    /// `all` | `public` | `whitelist`.
    pub reply_to: ReplyTo,
    /// Entries `platform/account/ID` or `platform/channel/ID`.
    pub whitelist: Vec<String>,
}

/// Per-user sliding-window rate limit on incoming messages.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct RateLimitConfig {
    /// Enforce the limit (whitelisted accounts always bypass it).
    pub enabled: bool,
    /// Messages allowed per window.
    pub max_messages: u32,
    /// Window length.
    pub window_ms: u64,
    /// Silence after the limit is hit.
    pub cooldown_ms: u64,
}

impl Default for RateLimitConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            max_messages: 10,
            window_ms: 60_000,
            cooldown_ms: 300_000,
        }
    }
}

impl RateLimitConfig {
    /// `windowMs`: the sliding window's length.
    pub fn window(&self) -> Duration {
        Duration::from_millis(self.window_ms)
    }

    /// `cooldownMs`: the silence after the limit is hit.
    pub fn cooldown(&self) -> Duration {
        Duration::from_millis(self.cooldown_ms)
    }
}
