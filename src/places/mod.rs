//! Places: one bot shaped per server, channel, thread and DM (`places:` in the configuration,
//! `docs/PLACES.md`). The rules are read once into [`Places`]; for each message the first rule
//! whose `match` fits where it was written ([`Spot`]) gives a [`Place`]: the effective reply
//! policy, persona, model, skills, budget, attachments, warm agents, memory access, how
//! Discord threads are answered and the language of the daemon's own texts, each the rule's when it sets one, else the global setting's.
//! [`Places::explain`] says, for a place, what each setting is and where it comes from
//! (`air-friends places explain`).
//!
//! The rules' syntax and their coverage are checked by `Config::validate`
//! (`config/validate/places.rs`, with [`matching`]); the places read here are the ones that
//! passed.

mod live;
pub mod matching;
mod spot;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;

use crate::config::{Config, MemoryAccess, PlaceRule, ReplyPolicy, ThreadsPolicy};
use crate::platform::IncomingMessage;
use crate::session::{DEFAULT_PLACE, PlaceGrant};
pub use live::LivePlaces;
pub use spot::{Spot, SpotError};

/// The skills that change memories (left out where memory is read-only).
pub const MEMORY_WRITE_SKILLS: [&str; 2] = ["memory-save", "memory-patch"];
/// Every memory skill (left out where memory is off).
pub const MEMORY_SKILLS: [&str; 5] = [
    "memory-save",
    "memory-patch",
    "memory-search",
    "memory-stats",
    "memory-export",
];

/// The effective settings of one place.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Place {
    /// The rule's name, or `default` when no rule fits: the label of logs and metrics.
    pub name: Arc<str>,
    /// The rule's position in `places`, when one fits.
    pub rule: Option<usize>,
    /// Which messages are answered; `None`: the platform's trigger rules.
    pub reply: Option<ReplyPolicy>,
    /// The persona (a prompts folder, or a file that replaces `system.md`); `None`: `prompts.dir`.
    pub persona: Option<PathBuf>,
    /// The model; `None`: `agent.model` (or the agent's own default).
    pub model: Option<String>,
    /// The skills the agent may use; `None`: every enabled skill.
    pub skills: Option<Arc<BTreeSet<String>>>,
    /// The place's own daily token limit per user.
    pub tokens_per_user_per_day: Option<u64>,
    /// Whether attachments are fetched.
    pub attachments: bool,
    /// Whether agents are kept warm between turns.
    pub warm: bool,
    /// What the agent may do with memories.
    pub memory: MemoryAccess,
    /// How Discord threads are answered.
    pub threads: ThreadsPolicy,
    /// The language of the daemon's own texts to users (`conversation::notices`).
    pub language: Arc<str>,
    /// The IANA time zone of the people here (recurring reminders).
    pub time_zone: Arc<str>,
}

/// The skill that answers with the bot's voice (`places[].voiceReplies`).
const VOICE_SKILL: &str = "send-voice";

impl Place {
    /// What a session answering here is allowed (enforced by the Skill API and the gateway).
    pub fn grant(&self) -> PlaceGrant {
        PlaceGrant {
            name: self.name.clone(),
            skills: self.skills.clone(),
            tokens_per_user_per_day: self.tokens_per_user_per_day,
            time_zone: self.time_zone.clone(),
        }
    }

    /// Whether the agent may use `skill` here.
    pub fn allows_skill(&self, skill: &str) -> bool {
        self.skills.as_ref().is_none_or(|s| s.contains(skill))
    }
}

/// The configuration's rules, read once.
#[derive(Debug, Clone)]
pub struct Places {
    rules: Vec<PlaceRule>,
    places: Vec<Arc<Place>>,
    default: Arc<Place>,
    /// The global settings a rule falls back to (for [`Places::explain`]).
    globals: Globals,
}

/// The global settings, and where they come from.
#[derive(Debug, Clone)]
struct Globals {
    model: Option<String>,
    attachments: bool,
    warm: bool,
    tokens_per_user_per_day: Option<u64>,
    enabled_skills: Vec<String>,
    language: Arc<str>,
    time_zone: Arc<str>,
}

impl Places {
    /// The rules of `config`. `skills` are the names of the skills the configuration enables
    /// (a rule's `skills` and `memory` narrow them; unknown names in a rule are left out).
    pub fn new(config: &Config, skills: impl IntoIterator<Item = String>) -> Self {
        let globals = Globals {
            model: config.agent.model.clone(),
            attachments: config.attachments.enabled,
            warm: config.agent.warm.enabled,
            tokens_per_user_per_day: config.agent.budget.tokens_per_user_per_day,
            enabled_skills: skills.into_iter().collect(),
            language: Arc::from(config.prompts.language.as_str()),
            time_zone: Arc::from(config.reminders.time_zone.as_str()),
        };
        let places = config
            .places
            .iter()
            .enumerate()
            .map(|(i, rule)| Arc::new(globals.apply(Some((i, rule)))))
            .collect();
        Self {
            rules: config.places.clone(),
            places,
            default: Arc::new(globals.apply(None)),
            globals,
        }
    }

    /// No rules: every place has the global settings (`config` defaults; for tests and tools
    /// that need no places).
    pub fn none() -> Self {
        Self::new(&Config::default(), [])
    }

    /// The names of the rules, then `default`: every value of the `place` label.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.rules
            .iter()
            .map(|r| r.name.as_str())
            .chain([DEFAULT_PLACE])
    }

    /// The skills the configuration enables (what a place without its own list may use).
    pub fn enabled_skills(&self) -> impl Iterator<Item = &String> {
        self.globals.enabled_skills.iter()
    }

    /// Whether there are no rules (every message gets the global settings).
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// The place of a message written at `spot`: the first rule that fits, else the defaults.
    pub fn resolve(&self, spot: &Spot) -> Arc<Place> {
        self.rules
            .iter()
            .position(|rule| matching::fits(&rule.matches, spot))
            .map_or_else(|| self.default.clone(), |i| self.places[i].clone())
    }

    /// Whether some place a public message in Discord guild `guild` can get allows `skill`
    /// (where none does, its slash command is not registered in that guild). The rules are
    /// read in order until one fits every message of the guild; the defaults count unless one
    /// does.
    pub fn allows_in_guild(&self, guild: &str, skill: &str) -> bool {
        for (rule, place) in self.rules.iter().zip(&self.places) {
            let m = &rule.matches;
            let reachable = m.platform.as_deref().is_none_or(|p| p == "discord")
                && m.dm != Some(true)
                && (m.guild.is_empty() || m.guild.iter().any(|g| g == guild));
            if !reachable {
                continue;
            }
            if place.allows_skill(skill) {
                return true;
            }
            let whole_guild = m.channel.is_empty() && m.parent.is_empty() && m.category.is_empty();
            if whole_guild {
                return false;
            }
        }
        self.default.allows_skill(skill)
    }

    /// The place of `msg`.
    pub fn of(&self, msg: &IncomingMessage) -> Arc<Place> {
        if self.is_empty() {
            return self.default.clone();
        }
        self.resolve(&Spot::of(msg))
    }

    /// Every setting of the place at `spot`: (key, effective value, where it comes from).
    pub fn explain(&self, spot: &Spot) -> Vec<Explained> {
        let place = self.resolve(spot);
        let rule = place.rule.map(|i| (i, &self.rules[i]));
        let from = |set: bool, global: &str| match rule {
            Some((i, r)) if set => format!("places.{i} ({})", r.name),
            _ => global.to_owned(),
        };
        let set = |f: fn(&PlaceRule) -> bool| rule.is_some_and(|(_, r)| f(r));
        let g = &self.globals;
        let skills = match &place.skills {
            None => "every enabled skill".to_owned(),
            Some(s) if s.is_empty() => "none".to_owned(),
            Some(s) => s.iter().cloned().collect::<Vec<_>>().join(", "),
        };
        let memory_narrows = place.memory != MemoryAccess::On;
        vec![
            Explained::new(
                "rule",
                rule.map_or_else(|| DEFAULT_PLACE.to_owned(), |(_, r)| r.name.clone()),
                rule.map_or_else(
                    || "no rule of places fits".to_owned(),
                    |(i, _)| format!("places.{i}"),
                ),
            ),
            Explained::new(
                "reply",
                place
                    .reply
                    .map_or("the platform's trigger rules", ReplyPolicy::as_str),
                from(
                    set(|r| r.reply.is_some()),
                    "platforms.<platform>: respondToMention, commandPrefix, allowDm",
                ),
            ),
            Explained::new(
                "persona",
                place
                    .persona
                    .as_ref()
                    .map_or_else(|| "system.md".to_owned(), |p| p.display().to_string()),
                from(set(|r| r.persona.is_some()), "prompts.dir"),
            ),
            Explained::new(
                "model",
                place.model.as_deref().unwrap_or("the agent's own default"),
                from(set(|r| r.model.is_some()), "agent.model"),
            ),
            Explained::new(
                "skills",
                skills,
                from(
                    set(|r| r.skills.is_some()) || memory_narrows,
                    "skills.disabled",
                ),
            ),
            Explained::new(
                "memory",
                place.memory.as_str(),
                from(set(|r| r.memory.is_some()), "default"),
            ),
            Explained::new(
                "tokensPerUserPerDay",
                place
                    .tokens_per_user_per_day
                    .map_or_else(|| "no limit of its own".to_owned(), |n| n.to_string()),
                from(
                    set(|r| r.tokens_per_user_per_day.is_some()),
                    &format!(
                        "agent.budget.tokensPerUserPerDay applies everywhere: {}",
                        g.tokens_per_user_per_day
                            .map_or_else(|| "no limit".to_owned(), |n| n.to_string())
                    ),
                ),
            ),
            Explained::new(
                "attachments",
                on_off(place.attachments),
                from(set(|r| r.attachments.is_some()), "attachments.enabled"),
            ),
            Explained::new(
                "warm",
                on_off(place.warm),
                from(set(|r| r.warm.is_some()), "agent.warm.enabled"),
            ),
            Explained::new(
                "voiceReplies",
                on_off(
                    place.allows_skill(VOICE_SKILL)
                        && self.globals.enabled_skills.iter().any(|s| s == VOICE_SKILL),
                ),
                from(set(|r| r.voice_replies.is_some()), "speech"),
            ),
            Explained::new(
                "threads",
                place.threads.as_str(),
                from(set(|r| r.threads.is_some()), "default"),
            ),
            Explained::new(
                "language",
                &*place.language,
                from(set(|r| r.language.is_some()), "prompts.language"),
            ),
            Explained::new(
                "timeZone",
                &*place.time_zone,
                from(set(|r| r.time_zone.is_some()), "reminders.timeZone"),
            ),
        ]
    }
}

impl Globals {
    /// The settings of rule `rule` over these (the defaults for `None`).
    fn apply(&self, rule: Option<(usize, &PlaceRule)>) -> Place {
        let Some((i, r)) = rule else {
            return Place {
                name: Arc::from(DEFAULT_PLACE),
                rule: None,
                reply: None,
                persona: None,
                model: self.model.clone(),
                skills: None,
                tokens_per_user_per_day: None,
                attachments: self.attachments,
                warm: self.warm,
                memory: MemoryAccess::On,
                threads: ThreadsPolicy::default(),
                language: self.language.clone(),
                time_zone: self.time_zone.clone(),
            };
        };
        let memory = r.memory.unwrap_or_default();
        let mut left_out: Vec<&str> = match memory {
            MemoryAccess::On => Vec::new(),
            MemoryAccess::ReadOnly => MEMORY_WRITE_SKILLS.to_vec(),
            MemoryAccess::Off => MEMORY_SKILLS.to_vec(),
        };
        if r.voice_replies == Some(false) {
            left_out.push(VOICE_SKILL);
        }
        let skills = (r.skills.is_some() || !left_out.is_empty()).then(|| {
            let chosen = r.skills.as_ref().unwrap_or(&self.enabled_skills);
            Arc::new(
                chosen
                    .iter()
                    .filter(|s| self.enabled_skills.contains(s) && !left_out.contains(&s.as_str()))
                    .cloned()
                    .collect::<BTreeSet<String>>(),
            )
        });
        Place {
            name: Arc::from(r.name.as_str()),
            rule: Some(i),
            reply: r.reply,
            persona: r.persona.clone(),
            model: r.model.clone().or_else(|| self.model.clone()),
            skills,
            tokens_per_user_per_day: r.tokens_per_user_per_day,
            attachments: self.attachments && r.attachments.unwrap_or(true),
            warm: self.warm && r.warm.unwrap_or(true),
            memory,
            threads: r.threads.unwrap_or_default(),
            language: r
                .language
                .as_deref()
                .map_or_else(|| self.language.clone(), Arc::from),
            time_zone: r
                .time_zone
                .as_deref()
                .map_or_else(|| self.time_zone.clone(), Arc::from),
        }
    }
}

fn on_off(on: bool) -> &'static str {
    if on { "on" } else { "off" }
}

/// One line of [`Places::explain`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Explained {
    /// The setting's key in a rule.
    pub key: &'static str,
    /// Its effective value.
    pub value: String,
    /// The rule or global key that gave it.
    pub source: String,
}

impl Explained {
    fn new(key: &'static str, value: impl Into<String>, source: impl Into<String>) -> Self {
        Self {
            key,
            value: value.into(),
            source: source.into(),
        }
    }
}

#[cfg(test)]
mod tests;
