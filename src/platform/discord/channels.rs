//! What the adapter knows about Discord channels, and where a message was written.
//!
//! `places:` rules match a message's [`Location`]: the channel or forum a thread belongs to and
//! the category a channel (or a thread's channel) sits in; the prompt and the answer policy read
//! the thread itself ([`ThreadInfo`]: its name, its channel's name, whether it is a forum post,
//! whether the bot opened it). Discord's messages carry none of this, so the adapter learns a
//! channel's [`ChannelFacts`] (guild, kind, parent, name, a thread's owner) from, in order:
//! 1. serenity's cache, once the gateway runner has started: GUILD_CREATE carries every channel
//!    with its `parent_id` and the active threads, THREAD_CREATE / CHANNEL_UPDATE keep it current;
//! 2. this module's memory of earlier look-ups;
//! 3. `GET /channels/{id}`, at most once per channel while the memory holds it: concurrent
//!    look-ups of one channel wait for the first, and after a failed one (404, network, timeout)
//!    the channel is not asked about again for [`RETRY_AFTER_FAILURE`]. A thread the bot opens
//!    is remembered at once ([`Channels::remember_facts`]), so its first message asks nothing.
//!
//! The memory is bounded ([`CAPACITY`] channels, the oldest forgotten first) so a flood of
//! channels cannot grow it without limit. Resolving a location never fails and never takes longer
//! than [`LOCATION_TIMEOUT`]: what cannot be learned in time is left empty (a rule naming it then
//! does not match) and the message is delivered anyway. DMs have no location.
//!
//! The live gateway handler and the catch-up's read-back both resolve through
//! [`Channels::location`], so a missed message and a live one match the same rules. Names are
//! kept on one line ([`one_line`]: control characters become spaces) and cut to
//! [`MAX_NAME_CHARS`], since they reach the prompt.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use reqwest::Method;
use serenity::cache::Cache;
use serenity::model::channel::{ChannelType, GuildChannel};
use serenity::model::id::{ChannelId as SerenityChannelId, GuildId};
use tokio::sync::Mutex as AsyncMutex;

use super::convert::{RestChannel, snowflake};
use super::http::{Body, Rest, Route};
use crate::platform::{Location, PlatformError, ThreadInfo};
use crate::sync::Recover;

/// How many channels the memory holds at most; the oldest are forgotten first.
pub(crate) const CAPACITY: usize = 10_000;

/// After a failed look-up a channel is not asked about again for this long.
pub(crate) const RETRY_AFTER_FAILURE: Duration = Duration::from_secs(300);

/// The longest a message waits for its location (both look-ups of a thread together).
pub(crate) const LOCATION_TIMEOUT: Duration = Duration::from_secs(4);

/// Discord channel and thread names are at most 100 characters; longer ones are cut.
pub(crate) const MAX_NAME_CHARS: usize = 100;

/// Whether a channel is a thread (a forum post is one too) or a forum.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ChannelKind {
    /// An announcement, public or private thread (types 10, 11, 12): its parent is a channel or
    /// forum.
    Thread,
    /// A forum or media channel (types 15, 16): its threads are posts, whose first message is in
    /// the post itself; its parent, if any, is a category.
    Forum,
    /// Anything else (text, voice, category, DM, …): its parent, if any, is a category.
    Channel,
}

impl ChannelKind {
    /// The kind of Discord channel type `code`.
    pub(crate) fn from_code(code: u64) -> Self {
        match code {
            10..=12 => ChannelKind::Thread,
            15 | 16 => ChannelKind::Forum,
            _ => ChannelKind::Channel,
        }
    }

    /// serenity 0.12 names no media channel (16): it is `Unknown(16)`, so the code decides.
    fn from_serenity(kind: ChannelType) -> Self {
        Self::from_code(u64::from(u8::from(kind)))
    }
}

/// What the adapter knows about one channel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ChannelFacts {
    /// Its guild; `None` for a DM channel.
    pub guild: Option<u64>,
    /// Thread or not.
    pub kind: ChannelKind,
    /// A thread's channel or forum; a channel's category; `None` when it has none.
    pub parent: Option<u64>,
    /// Its name (DMs have none), on one line and at most [`MAX_NAME_CHARS`] long.
    pub name: Option<String>,
    /// A thread's owner: the user who opened it (`owner_id`); `None` for other channels.
    pub owner: Option<u64>,
}

impl ChannelFacts {
    /// The facts of a `GET /channels/{id}` answer; a malformed guild, parent or owner id is an
    /// error.
    pub(crate) fn from_rest(channel: &RestChannel) -> Result<Self, PlatformError> {
        let id = |value: &Option<String>, what: &str| {
            value.as_deref().map(|v| snowflake(v, what)).transpose()
        };
        Ok(Self {
            guild: id(&channel.guild_id, "guild id")?,
            kind: ChannelKind::from_code(channel.kind),
            parent: id(&channel.parent_id, "parent channel id")?,
            name: channel.name.as_deref().map(short_name),
            owner: id(&channel.owner_id, "thread owner id")?,
        })
    }

    fn from_cached(channel: &GuildChannel) -> Self {
        Self {
            guild: Some(channel.guild_id.get()),
            kind: ChannelKind::from_serenity(channel.kind),
            parent: channel.parent_id.map(SerenityChannelId::get),
            name: Some(short_name(&channel.name)),
            owner: channel.owner_id.map(|owner| owner.get()),
        }
    }
}

fn short_name(name: &str) -> String {
    one_line(name, MAX_NAME_CHARS)
}

/// `text` as a one-line name: every control character (newline, tab, …) becomes a space, runs
/// of whitespace become one space, the ends are trimmed, and at most `max` characters are kept.
pub(crate) fn one_line(text: &str, max: usize) -> String {
    let spaced: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let joined = spaced.split_whitespace().collect::<Vec<_>>().join(" ");
    let cut: String = joined.chars().take(max).collect();
    cut.trim_end().to_owned()
}

/// The location of a message in a channel with `facts`; `parent` are the facts of a thread's
/// parent (unused for other channels); `bot` is the bot's user id (0 before READY), which tells
/// a thread the bot opened.
pub(crate) fn location_of(
    facts: &ChannelFacts,
    parent: Option<&ChannelFacts>,
    bot: u64,
) -> Location {
    let text = |id: Option<u64>| id.map(|id| id.to_string());
    match facts.kind {
        ChannelKind::Thread => Location {
            thread_parent_id: text(facts.parent),
            category_id: text(parent.and_then(|p| p.parent)),
            thread: Some(Box::new(ThreadInfo {
                name: facts.name.clone().unwrap_or_default(),
                parent_name: parent.and_then(|p| p.name.clone()),
                in_forum: parent.is_some_and(|p| p.kind == ChannelKind::Forum),
                started_by_bot: bot != 0 && facts.owner == Some(bot),
            })),
            ..Location::default()
        },
        ChannelKind::Forum | ChannelKind::Channel => Location {
            category_id: text(facts.parent),
            ..Location::default()
        },
    }
}

/// Why a channel's facts could not be learned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum LookupError {
    /// Its last look-up failed less than [`RETRY_AFTER_FAILURE`] ago; not asked again yet.
    #[error("its last look-up failed less than {} s ago", RETRY_AFTER_FAILURE.as_secs())]
    RecentlyFailed,
    /// No answer before the message's [`LOCATION_TIMEOUT`] ran out.
    #[error("no answer within {} s", LOCATION_TIMEOUT.as_secs())]
    TimedOut,
    /// Discord (or the network) said no.
    #[error(transparent)]
    Platform(#[from] PlatformError),
}

/// Whether a look-up asks Discord again about a channel whose last look-up failed recently.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AfterFailure {
    /// Ask again (a caller that needs the answer, e.g. the channel's guild).
    Retry,
    /// Do not ask before [`RETRY_AFTER_FAILURE`] has passed (a message's location).
    Wait,
}

/// What the memory holds about one channel.
#[derive(Debug, Clone, Default)]
enum Known {
    /// Nothing yet (only a failure).
    #[default]
    Nothing,
    /// Only its guild, seen on a gateway message or a DM channel the adapter opened.
    Guild(Option<u64>),
    /// Everything a look-up said.
    Facts(ChannelFacts),
}

#[derive(Debug, Clone, Default)]
struct Entry {
    known: Known,
    /// When its last look-up failed.
    failed_at: Option<Instant>,
}

/// The bounded channel → [`Entry`] map. Entries are never removed but by eviction, so `order`
/// always lists exactly the keys of `entries`, oldest first.
#[derive(Debug)]
struct Memory {
    entries: HashMap<u64, Entry>,
    order: VecDeque<u64>,
    capacity: usize,
}

impl Memory {
    fn new(capacity: usize) -> Self {
        Self {
            entries: HashMap::new(),
            order: VecDeque::new(),
            capacity: capacity.max(1),
        }
    }

    fn get(&self, channel: u64) -> Option<&Entry> {
        self.entries.get(&channel)
    }

    /// The entry of `channel`, made (forgetting the oldest channels first if full) when missing.
    fn entry(&mut self, channel: u64) -> &mut Entry {
        if !self.entries.contains_key(&channel) {
            while self.entries.len() >= self.capacity {
                let Some(oldest) = self.order.pop_front() else {
                    break;
                };
                self.entries.remove(&oldest);
            }
            self.order.push_back(channel);
        }
        self.entries.entry(channel).or_default()
    }
}

type Gates = Mutex<HashMap<u64, Arc<AsyncMutex<()>>>>;

/// One caller's share of a channel's look-up gate (callers of one channel take turns, so only
/// the first asks Discord); the gate leaves the map with its last user, also when a caller is
/// cancelled by its timeout.
struct Turn<'a> {
    gates: &'a Gates,
    channel: u64,
    gate: Arc<AsyncMutex<()>>,
}

impl<'a> Turn<'a> {
    fn join(gates: &'a Gates, channel: u64) -> Self {
        let gate = Arc::clone(gates.locked().entry(channel).or_default());
        Self {
            gates,
            channel,
            gate,
        }
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        let mut gates = self.gates.locked();
        // The map's reference and ours: nobody else waits on this gate.
        let last = gates
            .get(&self.channel)
            .is_some_and(|g| Arc::ptr_eq(g, &self.gate) && Arc::strong_count(g) == 2);
        if last {
            gates.remove(&self.channel);
        }
    }
}

/// The adapter's channel knowledge (see the module documentation), shared by the adapter and
/// the gateway handler.
#[derive(Debug)]
pub(crate) struct Channels {
    memory: Mutex<Memory>,
    gates: Gates,
    cache: OnceLock<Arc<Cache>>,
}

impl Default for Channels {
    fn default() -> Self {
        Self::with_capacity(CAPACITY)
    }
}

impl Channels {
    /// A memory of at most `capacity` channels.
    pub(crate) fn with_capacity(capacity: usize) -> Self {
        Self {
            memory: Mutex::new(Memory::new(capacity)),
            gates: Mutex::new(HashMap::new()),
            cache: OnceLock::new(),
        }
    }

    /// serenity's cache, consulted before the memory from now on (set once, by the runner).
    pub(crate) fn set_cache(&self, cache: Arc<Cache>) {
        let _ = self.cache.set(cache);
    }

    /// Remembers that `channel` is in `guild` (`None`: a DM channel), when nothing more is known.
    pub(crate) fn remember_guild(&self, channel: u64, guild: Option<u64>) {
        let mut memory = self.memory.locked();
        let entry = memory.entry(channel);
        if !matches!(entry.known, Known::Facts(_)) {
            entry.known = Known::Guild(guild);
        }
    }

    /// The guild of `channel` if known: `Some(None)` for a DM channel.
    pub(crate) fn known_guild(&self, channel: u64) -> Option<Option<u64>> {
        match &self.memory.locked().get(channel)?.known {
            Known::Nothing => None,
            Known::Guild(guild) => Some(*guild),
            Known::Facts(facts) => Some(facts.guild),
        }
    }

    /// The guild of `channel` (`None` for a DM channel): remembered, or asked of Discord (also
    /// when the last look-up failed: the caller needs the answer).
    pub(crate) async fn guild(
        &self,
        rest: &Rest,
        channel: u64,
    ) -> Result<Option<u64>, PlatformError> {
        if let Some(known) = self.known_guild(channel) {
            return Ok(known);
        }
        Ok(self.needed(rest, channel).await?.guild)
    }

    /// Remembers what the adapter itself made `channel` (a thread it opened), replacing what was
    /// known and any failure.
    pub(crate) fn remember_facts(&self, channel: u64, facts: ChannelFacts) {
        let mut memory = self.memory.locked();
        let entry = memory.entry(channel);
        entry.known = Known::Facts(facts);
        entry.failed_at = None;
    }

    /// The facts of `channel` for a caller that needs them (a thread's starter message, where a
    /// reaction goes): serenity's cache (looked up in `guild`, else the channel's remembered
    /// guild), the memory, or Discord, asked also when the last look-up failed.
    pub(crate) async fn facts(
        &self,
        rest: &Rest,
        channel: u64,
        guild: Option<u64>,
    ) -> Result<ChannelFacts, PlatformError> {
        if let Some(guild) = guild.or_else(|| self.known_guild(channel).flatten())
            && let Some(facts) = self.cached(guild, channel)
        {
            return Ok(facts);
        }
        self.needed(rest, channel).await
    }

    /// [`lookup`](Self::lookup) for a caller that needs the answer: asks again after a recent
    /// failure, and fails with a [`PlatformError`].
    async fn needed(&self, rest: &Rest, channel: u64) -> Result<ChannelFacts, PlatformError> {
        match self.lookup(rest, channel, AfterFailure::Retry).await {
            Ok(facts) => Ok(facts),
            Err(LookupError::Platform(error)) => Err(error),
            Err(other) => Err(PlatformError::Transport(format!("get_channel: {other}"))),
        }
    }

    /// Where a message in `channel` of `guild` was written (see the module documentation);
    /// empty for a DM (`guild` `None`) and for what could not be learned within
    /// [`LOCATION_TIMEOUT`]. `bot` is the bot's user id (0 before READY).
    pub(crate) async fn location(
        &self,
        rest: &Rest,
        channel: u64,
        guild: Option<u64>,
        bot: u64,
    ) -> Location {
        let Some(guild) = guild else {
            return Location::default();
        };
        let deadline = tokio::time::Instant::now() + LOCATION_TIMEOUT;
        let Some(facts) = self.facts_by(rest, guild, channel, deadline).await else {
            return Location::default();
        };
        let parent = match (facts.kind, facts.parent) {
            (ChannelKind::Thread, Some(parent)) => {
                self.facts_by(rest, guild, parent, deadline).await
            }
            _ => None,
        };
        location_of(&facts, parent.as_ref(), bot)
    }

    /// The facts of `channel` (in `guild`) by `deadline`; `None`, logged, when they cannot be
    /// learned.
    async fn facts_by(
        &self,
        rest: &Rest,
        guild: u64,
        channel: u64,
        deadline: tokio::time::Instant,
    ) -> Option<ChannelFacts> {
        if let Some(facts) = self.cached(guild, channel) {
            return Some(facts);
        }
        let lookup = self.lookup(rest, channel, AfterFailure::Wait);
        let outcome = match tokio::time::timeout_at(deadline, lookup).await {
            Ok(outcome) => outcome,
            Err(_) => {
                self.remember_failure(channel, Instant::now());
                Err(LookupError::TimedOut)
            }
        };
        match outcome {
            Ok(facts) => Some(facts),
            Err(error @ LookupError::RecentlyFailed) => {
                tracing::debug!(platform = "discord", channel = %channel, reason = %error, "channel location left empty");
                None
            }
            Err(error) => {
                tracing::warn!(platform = "discord", channel = %channel, error = %error, "channel look-up failed; location left empty");
                None
            }
        }
    }

    /// The facts serenity's cache holds about `channel` of `guild` (a channel or a thread).
    fn cached(&self, guild: u64, channel: u64) -> Option<ChannelFacts> {
        let cache = self.cache.get()?;
        let guild = cache.guild(GuildId::new(guild))?;
        let id = SerenityChannelId::new(channel);
        guild
            .channels
            .get(&id)
            .or_else(|| guild.threads.iter().find(|t| t.id == id))
            .map(ChannelFacts::from_cached)
    }

    /// The facts of `channel`: remembered, or asked of Discord once (concurrent callers wait for
    /// the first), the answer or failure remembered.
    async fn lookup(
        &self,
        rest: &Rest,
        channel: u64,
        after_failure: AfterFailure,
    ) -> Result<ChannelFacts, LookupError> {
        let remembered = || -> Option<Result<ChannelFacts, LookupError>> {
            let memory = self.memory.locked();
            let entry = memory.get(channel)?;
            if let Known::Facts(facts) = &entry.known {
                return Some(Ok(facts.clone()));
            }
            let recent = entry
                .failed_at
                .is_some_and(|at| at.elapsed() < RETRY_AFTER_FAILURE);
            (after_failure == AfterFailure::Wait && recent)
                .then_some(Err(LookupError::RecentlyFailed))
        };
        if let Some(answer) = remembered() {
            return answer;
        }
        let turn = Turn::join(&self.gates, channel);
        let _held = turn.gate.lock().await;
        // Whoever held the gate before may have learned (or failed to learn) it meanwhile.
        if let Some(answer) = remembered() {
            return answer;
        }
        let route = Route::new("get_channel", Method::GET, format!("/channels/{channel}"));
        let fetched = match rest.json::<RestChannel>(route, Body::Empty).await {
            Ok(found) => ChannelFacts::from_rest(&found),
            Err(error) => Err(error),
        };
        match fetched {
            Ok(facts) => {
                self.memory.locked().entry(channel).known = Known::Facts(facts.clone());
                tracing::debug!(platform = "discord", channel = %channel, kind = ?facts.kind, parent = ?facts.parent, "channel looked up");
                Ok(facts)
            }
            Err(error) => {
                self.remember_failure(channel, Instant::now());
                Err(error.into())
            }
        }
    }

    fn remember_failure(&self, channel: u64, at: Instant) {
        self.memory.locked().entry(channel).failed_at = Some(at);
    }

    #[cfg(test)]
    fn remembered_count(&self) -> usize {
        self.memory.locked().entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rest_channel(value: serde_json::Value) -> RestChannel {
        serde_json::from_value(value).expect("channel")
    }

    fn facts(kind: ChannelKind, parent: Option<u64>) -> ChannelFacts {
        ChannelFacts {
            guild: Some(1),
            kind,
            parent,
            name: None,
            owner: None,
        }
    }

    fn named(
        kind: ChannelKind,
        parent: Option<u64>,
        name: &str,
        owner: Option<u64>,
    ) -> ChannelFacts {
        ChannelFacts {
            name: Some(name.to_owned()),
            owner,
            ..facts(kind, parent)
        }
    }

    #[test]
    fn the_memory_forgets_the_oldest_channels_beyond_its_capacity() {
        let channels = Channels::with_capacity(3);
        for channel in 1..=5 {
            channels.remember_guild(channel, Some(100 + channel));
        }
        assert_eq!(channels.remembered_count(), 3);
        assert_eq!(channels.known_guild(1), None);
        assert_eq!(channels.known_guild(2), None);
        assert_eq!(channels.known_guild(3), Some(Some(103)));
        assert_eq!(channels.known_guild(5), Some(Some(105)));
        // Knowing more about a remembered channel does not make room.
        channels.remember_guild(3, Some(103));
        channels.remember_failure(4, Instant::now());
        assert_eq!(channels.remembered_count(), 3);
        assert_eq!(channels.known_guild(3), Some(Some(103)));
    }

    #[test]
    fn a_flood_of_channels_stays_within_the_cap() {
        let channels = Channels::default();
        for channel in 1..=(CAPACITY as u64 * 3) {
            if channel % 2 == 0 {
                channels.remember_failure(channel, Instant::now());
            } else {
                channels.remember_guild(channel, Some(7));
            }
        }
        assert_eq!(channels.remembered_count(), CAPACITY);
        let memory = channels.memory.locked();
        assert_eq!(
            memory.order.len(),
            CAPACITY,
            "the order lists only remembered channels"
        );
        assert!(
            memory.get(CAPACITY as u64 * 3).is_some(),
            "the newest is kept"
        );
        assert!(memory.get(1).is_none(), "the oldest is gone");
    }

    #[test]
    fn a_guild_seen_on_a_message_does_not_overwrite_looked_up_facts() {
        let channels = Channels::with_capacity(4);
        channels.memory.locked().entry(9).known = Known::Facts(facts(ChannelKind::Thread, Some(8)));
        channels.remember_guild(9, Some(1));
        assert!(matches!(
            &channels.memory.locked().get(9).expect("kept").known,
            Known::Facts(f) if f.parent == Some(8)
        ));
        assert_eq!(channels.known_guild(9), Some(Some(1)));
    }

    #[test]
    fn rest_channels_become_facts_and_bad_ids_are_errors() {
        let thread = rest_channel(serde_json::json!({
            "id": "20", "type": 11, "guild_id": "1", "parent_id": "10", "name": "a thread",
            "owner_id": "42"
        }));
        assert_eq!(
            ChannelFacts::from_rest(&thread),
            Ok(ChannelFacts {
                guild: Some(1),
                kind: ChannelKind::Thread,
                parent: Some(10),
                name: Some("a thread".into()),
                owner: Some(42),
            })
        );
        let forum = rest_channel(serde_json::json!({"id": "21", "type": 15, "guild_id": "1"}));
        let forum = ChannelFacts::from_rest(&forum).expect("forum");
        assert_eq!((forum.kind, forum.owner), (ChannelKind::Forum, None));
        let dm = rest_channel(serde_json::json!({"id": "30", "type": 1}));
        let dm = ChannelFacts::from_rest(&dm).expect("dm");
        assert_eq!(
            (dm.guild, dm.kind, dm.parent),
            (None, ChannelKind::Channel, None)
        );
        let long = rest_channel(serde_json::json!({"id": "31", "name": "x".repeat(5000)}));
        let long = ChannelFacts::from_rest(&long).expect("long name");
        assert_eq!(long.name.map(|n| n.len()), Some(MAX_NAME_CHARS));
        for bad in [
            serde_json::json!({"id": "20", "type": 11, "guild_id": "1", "parent_id": "abc"}),
            serde_json::json!({"id": "20", "type": 0, "guild_id": "-1"}),
            serde_json::json!({"id": "20", "type": 11, "guild_id": "1", "owner_id": "7x"}),
            serde_json::json!({"id": "20", "type": 11, "guild_id": "1", "owner_id": "0"}),
            serde_json::json!({"id": "20", "type": 11, "guild_id": "1", "owner_id": ""}),
        ] {
            assert!(matches!(
                ChannelFacts::from_rest(&rest_channel(bad)),
                Err(PlatformError::InvalidId(_))
            ));
        }
        for (code, kind) in [
            (0, ChannelKind::Channel),
            (4, ChannelKind::Channel),
            (10, ChannelKind::Thread),
            (11, ChannelKind::Thread),
            (12, ChannelKind::Thread),
            (13, ChannelKind::Channel),
            (15, ChannelKind::Forum),
            (16, ChannelKind::Forum),
            (u64::MAX, ChannelKind::Channel),
        ] {
            assert_eq!(ChannelKind::from_code(code), kind, "type {code}");
        }
        for (kind, expected) in [
            (ChannelType::Forum, ChannelKind::Forum),
            (ChannelType::Unknown(16), ChannelKind::Forum),
            (ChannelType::PublicThread, ChannelKind::Thread),
            (ChannelType::Text, ChannelKind::Channel),
        ] {
            assert_eq!(ChannelKind::from_serenity(kind), expected, "{kind:?}");
        }
    }

    #[test]
    fn a_malformed_owner_type_is_a_failed_look_up_not_a_panic() {
        // A number where Discord sends a string: the answer does not decode at all.
        let decoded = serde_json::from_value::<RestChannel>(serde_json::json!({
            "id": "20", "type": 11, "owner_id": 42
        }));
        assert!(decoded.is_err());
    }

    #[test]
    fn names_are_kept_on_one_line_and_cut() {
        assert_eq!(one_line("  a\nb\r\n\tc  ", 100), "a b c");
        assert_eq!(one_line("x\u{0}y\u{85}z\u{2028}w", 100), "x y z w");
        assert_eq!(one_line("abcdef", 3), "abc");
        assert_eq!(
            one_line("ab cdef", 3),
            "ab",
            "no trailing space after the cut"
        );
        assert_eq!(one_line("\n\n", 10), "");
        let thread = rest_channel(serde_json::json!({
            "id": "20", "type": 11, "name": "evil\nname\u{1b}[31m"
        }));
        assert_eq!(
            ChannelFacts::from_rest(&thread)
                .expect("thread")
                .name
                .as_deref(),
            Some("evil name [31m")
        );
    }

    #[test]
    fn locations_follow_threads_to_their_channel_and_category() {
        let text = facts(ChannelKind::Channel, Some(3));
        assert_eq!(
            location_of(&text, None, 42),
            Location {
                category_id: Some("3".into()),
                ..Location::default()
            }
        );
        let thread = facts(ChannelKind::Thread, Some(10));
        let unnamed = ThreadInfo::default();
        assert_eq!(
            location_of(&thread, Some(&text), 42),
            Location {
                thread_parent_id: Some("10".into()),
                category_id: Some("3".into()),
                thread: Some(Box::new(unnamed.clone())),
                ..Location::default()
            }
        );
        assert_eq!(
            location_of(&thread, None, 42),
            Location {
                thread_parent_id: Some("10".into()),
                thread: Some(Box::new(unnamed)),
                ..Location::default()
            },
            "a parent that could not be learned leaves the category empty"
        );
        assert_eq!(
            location_of(&facts(ChannelKind::Channel, None), None, 42),
            Location::default()
        );
        let forum = named(ChannelKind::Forum, Some(3), "help-forum", None);
        assert_eq!(
            location_of(&forum, None, 42),
            Location {
                category_id: Some("3".into()),
                ..Location::default()
            },
            "a forum is no thread"
        );
    }

    #[test]
    fn a_threads_location_names_it_its_channel_and_who_opened_it() {
        let text = named(ChannelKind::Channel, Some(3), "general", None);
        let forum = named(ChannelKind::Forum, Some(3), "help-forum", None);
        let by_user = named(ChannelKind::Thread, Some(10), "a thread", Some(7));
        assert_eq!(
            location_of(&by_user, Some(&text), 42).thread,
            Some(Box::new(ThreadInfo {
                name: "a thread".into(),
                parent_name: Some("general".into()),
                in_forum: false,
                started_by_bot: false,
            }))
        );
        let post = named(ChannelKind::Thread, Some(11), "my question", Some(42));
        assert_eq!(
            location_of(&post, Some(&forum), 42).thread,
            Some(Box::new(ThreadInfo {
                name: "my question".into(),
                parent_name: Some("help-forum".into()),
                in_forum: true,
                started_by_bot: true,
            }))
        );
        assert!(
            !location_of(&post, Some(&forum), 0)
                .thread
                .is_some_and(|t| t.started_by_bot),
            "before READY the bot's id is unknown: no thread is the bot's"
        );
        let ownerless = named(ChannelKind::Thread, Some(10), "old", None);
        assert!(
            !location_of(&ownerless, Some(&text), 42)
                .thread
                .is_some_and(|t| t.started_by_bot)
        );
    }

    #[test]
    fn remembered_facts_answer_without_a_look_up() {
        let channels = Channels::with_capacity(4);
        channels.remember_failure(9, Instant::now());
        channels.remember_facts(9, named(ChannelKind::Thread, Some(8), "mine", Some(42)));
        let memory = channels.memory.locked();
        let entry = memory.get(9).expect("kept");
        assert!(entry.failed_at.is_none(), "the failure is forgotten");
        assert!(matches!(&entry.known, Known::Facts(f) if f.owner == Some(42)));
    }

    #[tokio::test]
    async fn a_failed_look_up_is_not_repeated_and_a_dm_has_no_location() {
        // Nothing listens on port 9 of this address: the look-up fails at once.
        let rest =
            Rest::new(reqwest::Client::new(), Some("http://127.0.0.1:9"), "t").expect("rest");
        let channels = Channels::with_capacity(8);
        assert_eq!(
            channels.location(&rest, 5, None, 42).await,
            Location::default()
        );
        assert_eq!(channels.remembered_count(), 0, "a DM is not looked up");
        assert_eq!(
            channels.location(&rest, 5, Some(1), 42).await,
            Location::default()
        );
        let failed_at = channels.memory.locked().get(5).and_then(|e| e.failed_at);
        assert!(failed_at.is_some(), "the failure is remembered");
        assert_eq!(
            channels.lookup(&rest, 5, AfterFailure::Wait).await,
            Err(LookupError::RecentlyFailed)
        );
        assert!(matches!(
            channels.lookup(&rest, 5, AfterFailure::Retry).await,
            Err(LookupError::Platform(PlatformError::Transport(_)))
        ));
        assert!(channels.gates.locked().is_empty(), "no gate is left behind");
    }
}
