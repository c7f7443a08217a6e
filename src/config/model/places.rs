//! The `places` section: an ordered list of rules that shape the bot per server, channel,
//! thread and DM (`docs/PLACES.md`). Each rule has a `match` and the settings it overrides; the
//! first rule whose `match` fits a message wins, and what it leaves unset comes from the global
//! settings. Matching and the effective settings are `crate::places`; the rules' checks are in
//! `validate/places.rs`.

use std::path::PathBuf;

use serde::{Deserialize, Deserializer, Serialize};

/// The name of the settings no `places:` rule changed (a rule may not take it).
pub const DEFAULT_PLACE: &str = "default";

/// One `places:` rule.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct PlaceRule {
    /// The rule's name: how logs, metrics (a bounded label) and `places explain` name it.
    pub name: String,
    /// Where the rule applies.
    #[serde(rename = "match")]
    pub matches: PlaceMatch,
    /// The persona: a prompts folder with its own `system.md`, or one `.md` file that replaces
    /// `system.md`. Its `{{fragment}}` includes are looked up beside it, then in `prompts.dir`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub persona: Option<PathBuf>,
    /// The model (`provider/model`), instead of `agent.model`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Which messages are answered, instead of the platform's trigger rules.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reply: Option<ReplyPolicy>,
    /// The skills the agent may use here: a subset of the enabled ones (every enabled skill
    /// when unset).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skills: Option<Vec<String>>,
    /// Model tokens a user may use per UTC day in this place (besides `agent.budget`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tokens_per_user_per_day: Option<u64>,
    /// Whether files users attach here are fetched for the agent (never on when
    /// `attachments.enabled` is off).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attachments: Option<bool>,
    /// Whether agents are kept warm between turns here (never on when `agent.warm.enabled` is
    /// off).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub warm: Option<bool>,
    /// What the agent may do with memories here.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryAccess>,
    /// Whether the agent may answer with its voice here (send-voice; never on without
    /// `speech`). `false` leaves send-voice out of the place's skills.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub voice_replies: Option<bool>,
    /// How Discord threads are answered here (`follow` when unset).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub threads: Option<ThreadsPolicy>,
    /// The language of the daemon's own texts to users here, instead of `prompts.language`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub language: Option<String>,
    /// The IANA time zone of the people here (recurring reminders keep its wall clock),
    /// instead of `reminders.timeZone`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time_zone: Option<String>,
}

/// Where a rule applies: every key given must fit (an empty `match` fits every message). A key
/// with a list fits any of its values.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct PlaceMatch {
    /// The platform: `discord`, `misskey` or `console`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub platform: Option<String>,
    /// Direct messages only (`true`) or public places only (`false`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dm: Option<bool>,
    /// Discord servers (guild ids).
    #[serde(
        deserialize_with = "one_or_many",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub guild: Vec<String>,
    /// Discord channels (a thread in one of them counts too), or Misskey channels (a note's
    /// `channelId`).
    #[serde(
        deserialize_with = "one_or_many",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub channel: Vec<String>,
    /// Discord threads and forum posts whose channel or forum is one of these.
    #[serde(
        deserialize_with = "one_or_many",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub parent: Vec<String>,
    /// Discord categories.
    #[serde(
        deserialize_with = "one_or_many",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub category: Vec<String>,
}

/// Which messages the bot answers in a place.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ReplyPolicy {
    /// Messages that mention the bot, reply to it, or start with the command prefix; every DM.
    Mention,
    /// Every message (the per-user rate limit still applies).
    Always,
    /// Only messages that start with the platform's command prefix, in DMs too.
    Prefix,
    /// Nothing.
    Never,
}

impl ReplyPolicy {
    /// The configuration's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            ReplyPolicy::Mention => "mention",
            ReplyPolicy::Always => "always",
            ReplyPolicy::Prefix => "prefix",
            ReplyPolicy::Never => "never",
        }
    }
}

/// What the agent may do with the user's memories in a place.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum MemoryAccess {
    /// Read and write (the visibility rules still apply: private memories only in DMs).
    #[default]
    On,
    /// Read only: memories are in the prompt and searchable; nothing is saved or changed.
    ReadOnly,
    /// None: no memories in the prompt, no memory skill.
    Off,
}

impl MemoryAccess {
    /// The configuration's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            MemoryAccess::On => "on",
            MemoryAccess::ReadOnly => "readOnly",
            MemoryAccess::Off => "off",
        }
    }
}

/// A list of ids written as one scalar or a list; numbers are taken as their digits (a
/// Discord snowflake written without quotes).
fn one_or_many<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Id {
        Text(String),
        Number(u64),
    }
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        One(Id),
        Many(Vec<Id>),
    }
    let text = |id: Id| match id {
        Id::Text(s) => s,
        Id::Number(n) => n.to_string(),
    };
    Ok(match OneOrMany::deserialize(d)? {
        OneOrMany::One(id) => vec![text(id)],
        OneOrMany::Many(ids) => ids.into_iter().map(text).collect(),
    })
}

/// How a place answers in Discord threads and forum posts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ThreadsPolicy {
    /// Messages in threads are not answered (the channel itself still is).
    Off,
    /// A thread is a conversation of its own, answered by the place's reply policy.
    #[default]
    Follow,
    /// A message the bot answers in the channel opens a thread from it, and the answer and
    /// every later message in that thread (no mention needed) continue there.
    PerConversation,
}

impl ThreadsPolicy {
    /// The configuration's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            ThreadsPolicy::Off => "off",
            ThreadsPolicy::Follow => "follow",
            ThreadsPolicy::PerConversation => "perConversation",
        }
    }
}
