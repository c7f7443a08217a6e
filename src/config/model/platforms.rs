//! Who the bot talks to and how much: the chat platforms (`platforms`), who is answered
//! (`accessControl`) and the per-user message rate limit (`rateLimit`).

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::config::{EnvKind, Secret};

/// One environment variable that sets a configuration key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EnvOverride {
    /// The variable.
    pub var: &'static str,
    /// The key it sets (`platforms.discord.token`).
    pub key: &'static str,
    /// How its text becomes a value.
    pub kind: EnvKind,
    /// Whether it carries a secret: then it never reaches an agent's environment
    /// (`agent::env`), and its value is masked in every log line and in `check-config`.
    pub secret: bool,
}

/// When a platform's messages are answered: its `allowDm`, `respondToMention` and
/// `commandPrefix`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TriggerRules {
    /// Answer direct messages.
    pub allow_dm: bool,
    /// Answer messages that mention the bot.
    pub respond_to_mention: bool,
    /// Answer messages starting with this prefix (empty = off).
    pub command_prefix: String,
}

impl TriggerRules {
    /// Answers nothing: for a platform the daemon has no rules for (fail closed).
    pub fn none() -> Self {
        Self {
            allow_dm: false,
            respond_to_mention: false,
            command_prefix: String::new(),
        }
    }
}

/// Where a platform's attachment files may be fetched from (enforced by `attachments::origin`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileSources {
    /// Its own server, trusted wherever it points (scheme, host and port of this URL exactly).
    pub trusted: String,
    /// Public hosts it serves files from: `https` on port 443, public addresses only.
    pub public_hosts: &'static [&'static str],
}

/// Discord's attachment CDN, its media proxy, and the proxy that serves the pictures of
/// embeds made from external links (`proxy_url` of an embed image).
pub const DISCORD_CDN_HOSTS: &[&str] = &[
    "cdn.discordapp.com",
    "media.discordapp.net",
    "images-ext-1.discordapp.net",
    "images-ext-2.discordapp.net",
];

/// Discord's REST host when `platforms.discord.apiBaseUrl` is unset.
pub const DISCORD_API: &str = "https://discord.com/api";

/// Discord's file sources: its API host (`apiBaseUrl`, Discord's own when unset) and the CDN.
pub fn discord_file_sources(api_base_url: Option<&str>) -> FileSources {
    FileSources {
        trusted: api_base_url.unwrap_or(DISCORD_API).to_owned(),
        public_hosts: DISCORD_CDN_HOSTS,
    }
}

/// Misskey's file sources: the instance (`host[:port]`, `https` when `secure`); object storage
/// or a media proxy elsewhere come from `attachments.allowHosts`.
pub fn misskey_file_sources(host: &str, secure: bool) -> FileSources {
    let scheme = if secure { "https" } else { "http" };
    FileSources {
        trusted: format!("{scheme}://{host}/"),
        public_hosts: &[],
    }
}

/// What the daemon must know about one chat platform outside its own folder, in one place:
/// its configuration key, its secrets, the environment variables that set its keys and its
/// trigger rules, and where its files come from. The configuration loader, the log redactor's
/// secret set (`Config::secret_values`), the agent's environment filter, the answer policy
/// (`conversation::policy`) and the attachment fetcher's origins iterate [`PLATFORMS`]; a platform section without an entry fails
/// `every_platform_section_has_its_facts` (below), and a secret that reaches the agent or a log
/// fails `agent::env` `no_platforms_secret_reaches_the_agent` or
/// `every_platforms_secrets_are_masked` (below).
#[derive(Debug)]
pub struct PlatformFacts {
    /// The key under `platforms` (also the platform's name in logs and metric labels).
    pub key: &'static str,
    /// The environment variables that set its keys.
    pub env: &'static [EnvOverride],
    /// Its secret fields in a configuration.
    pub secrets: fn(&PlatformsConfig) -> Vec<&Secret>,
    /// When its messages are answered, from its configuration section.
    pub triggers: fn(&PlatformsConfig) -> TriggerRules,
    /// Whether the configuration connects it.
    pub enabled: fn(&PlatformsConfig) -> bool,
    /// Switches it on or off (the chat console switches every platform off).
    pub set_enabled: fn(&mut PlatformsConfig, bool),
    /// Where its attachment files may be fetched from.
    pub files: fn(&PlatformsConfig) -> FileSources,
}

/// Every chat platform the daemon speaks.
pub const PLATFORMS: &[PlatformFacts] = &[
    PlatformFacts {
        key: "discord",
        env: &[EnvOverride {
            var: "DISCORD_TOKEN",
            key: "platforms.discord.token",
            kind: EnvKind::Text,
            secret: true,
        }],
        secrets: |p| vec![&p.discord.token],
        triggers: |p| TriggerRules {
            allow_dm: p.discord.allow_dm,
            respond_to_mention: p.discord.respond_to_mention,
            command_prefix: p.discord.command_prefix.clone(),
        },
        enabled: |p| p.discord.enabled,
        set_enabled: |p, on| p.discord.enabled = on,
        files: |p| discord_file_sources(p.discord.api_base_url.as_deref()),
    },
    PlatformFacts {
        key: "misskey",
        env: &[
            EnvOverride {
                var: "MISSKEY_HOST",
                key: "platforms.misskey.host",
                kind: EnvKind::Text,
                secret: false,
            },
            EnvOverride {
                var: "MISSKEY_TOKEN",
                key: "platforms.misskey.token",
                kind: EnvKind::Text,
                secret: true,
            },
        ],
        secrets: |p| vec![&p.misskey.token],
        triggers: |p| TriggerRules {
            allow_dm: p.misskey.allow_dm,
            respond_to_mention: p.misskey.respond_to_mention,
            command_prefix: p.misskey.command_prefix.clone(),
        },
        enabled: |p| p.misskey.enabled,
        set_enabled: |p, on| p.misskey.enabled = on,
        files: |p| misskey_file_sources(&p.misskey.host, p.misskey.secure),
    },
];

/// The environment variables that carry a platform's secret (never passed to an agent).
pub fn platform_secret_vars() -> impl Iterator<Item = &'static str> {
    PLATFORMS
        .iter()
        .flat_map(|p| p.env.iter())
        .filter(|e| e.secret)
        .map(|e| e.var)
}

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

#[cfg(test)]
mod facts_tests {
    use super::*;
    use crate::config::{Config, known_secret_values, load_str};

    /// A platform section added to the configuration without its facts fails here.
    #[test]
    fn every_platform_section_has_its_facts() {
        let tree = serde_yaml::to_value(Config::default()).unwrap();
        let mut sections: Vec<String> = tree["platforms"]
            .as_mapping()
            .unwrap()
            .keys()
            .filter_map(|k| k.as_str().map(str::to_owned))
            .collect();
        sections.sort();
        let mut known: Vec<String> = PLATFORMS.iter().map(|p| p.key.to_owned()).collect();
        known.sort();
        assert_eq!(sections, known);
        for platform in PLATFORMS {
            for e in platform.env {
                assert!(
                    e.key.starts_with(&format!("platforms.{}.", platform.key)),
                    "{} sets {}, outside its platform",
                    e.var,
                    e.key
                );
            }
        }
    }

    /// Each platform's switch turns exactly it on and off, as its `enabled` fact reads it (the
    /// chat console switches every platform off through it).
    #[test]
    fn each_platforms_switch_turns_exactly_it_on_and_off() {
        for platform in PLATFORMS {
            let mut p = PlatformsConfig::default();
            for other in PLATFORMS {
                (other.set_enabled)(&mut p, false);
            }
            (platform.set_enabled)(&mut p, true);
            for other in PLATFORMS {
                assert_eq!(
                    (other.enabled)(&p),
                    other.key == platform.key,
                    "{}",
                    other.key
                );
            }
            (platform.set_enabled)(&mut p, false);
            assert!(!(platform.enabled)(&p), "{}", platform.key);
        }
    }

    /// Every platform's secrets, set through the file or their variables, are in the set the
    /// log redactor and `check-config` mask.
    #[test]
    fn every_platforms_secrets_are_masked() {
        for platform in PLATFORMS {
            for e in platform.env.iter().filter(|e| e.secret) {
                let value = format!("value-of-{}", e.var);
                let var = e.var;
                let env = |name: &str| (name == var).then(|| value.clone());
                let config = load_str("", &env).unwrap();
                assert!(
                    known_secret_values(&config, &env).contains(&value),
                    "{var} is not masked"
                );
            }
            let config = Config::default();
            assert_eq!((platform.secrets)(&config.platforms).len(), {
                platform.env.iter().filter(|e| e.secret).count()
            });
        }
    }

    /// Whitelist entries name the platforms of [`PLATFORMS`] (and the console), no other.
    #[test]
    fn whitelist_entries_accept_exactly_the_known_platforms() {
        let no_env = |_: &str| None;
        for key in PLATFORMS.iter().map(|p| p.key).chain(["console"]) {
            let text = format!("accessControl:\n  whitelist: [\"{key}/account/1\"]\n");
            assert!(load_str(&text, &no_env).is_ok(), "{key}");
        }
        let text = "accessControl:\n  whitelist: [\"slack/account/1\"]\n";
        let issues = load_str(text, &no_env).unwrap_err().issues();
        assert_eq!(
            issues,
            [
                "accessControl.whitelist.0: \"slack/account/1\": platform must be discord, misskey or console"
            ]
        );
    }
}
