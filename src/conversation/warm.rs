//! Warm agents: after a turn, a conversation's agent process and its ACP session are kept for
//! the next message of the same conversation, so that message is prompted at once (no spawn,
//! no `initialize`, no `session/new`) with only what is new, and the agent remembers the
//! conversation (`agent.warm`, `tests/warm_agents.rs`).
//!
//! The pool holds idle agents only: [`WarmPool::take`] hands one out for exclusive use (a
//! conversation's messages are answered one at a time; a message arriving while its agent is
//! busy starts cold), [`WarmPool::put`] returns it after a turn. An agent is retired — its
//! process stopped, its Skill API session, socket, egress proxy and staging folder released —
//! when it is idle for `idleMs`, when the pool is full (least recently used first), after
//! `maxTurns` turns or `maxContextTokens` of prompts, when the prompts or skills changed
//! since it started (its [`fingerprint`](WarmAgent::fingerprint)), when it died, and at
//! shutdown ([`WarmPool::run`]). Retiring runs on the pool's own tracked tasks, never on the
//! caller's turn.
//!
//! An agent may also enter the pool unprompted, started ahead of its conversation's next
//! message (`conversation::ahead`): it takes a place only when one is free
//! ([`WarmPool::begin_ahead`]), a message arriving meanwhile waits for it
//! ([`WarmPool::take_waiting`]), and it is the first to go when room is needed.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::continuity::Resumable;
use super::workspace::{SessionDirs, Workspaces};
use crate::agent::LiveAgent;
use crate::config::WarmConfig;
use crate::egress::EgressSession;
use crate::observability::Metrics;
use crate::platform::{ChannelId, IncomingMessage, PlatformKind, Typing, UserId};
use crate::session::{RegisteredSession, SessionRegistry};
use crate::skill_api::socket::SessionSocket;
use crate::sync::lock;

/// Memory one OpenCode process takes, for the default `maxProcesses`.
const AGENT_RSS_BYTES: u64 = 600 * 1024 * 1024;

/// The default `maxProcesses` never exceeds this (nor goes below 1).
const MAX_DEFAULT_PROCESSES: u64 = 32;

/// Every reason an agent is retired (`air_friends_warm_retired_total{reason}`).
pub const RETIRE_REASONS: [&str; 11] = [
    "idle",
    "evicted",
    "max_turns",
    "context",
    "changed",
    "died",
    "failed",
    "terminated",
    "shutdown",
    "erased",
    "operator",
];

/// Every reason a message found no warm agent (`air_friends_warm_misses_total{reason}`).
pub const MISS_REASONS: [&str; 4] = ["none", "idle", "changed", "died"];

/// `agent.warm`, resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WarmSettings {
    /// Idle time before an agent is retired.
    pub idle: Duration,
    /// Idle agents kept at once.
    pub max_processes: usize,
    /// Turns before an agent is retired.
    pub max_turns: u32,
    /// Estimated prompt tokens before an agent is retired.
    pub max_context_tokens: usize,
    /// Whether agents may be started ahead of a message ([`WarmPool::begin_ahead`]).
    pub start_ahead: bool,
}

impl WarmSettings {
    /// The settings, or `None` when warm agents are off.
    pub fn from_config(config: &WarmConfig) -> Option<Self> {
        config.enabled.then(|| Self {
            idle: Duration::from_millis(config.idle_ms),
            max_processes: config
                .max_processes
                .map_or_else(default_max_processes, |n| n as usize),
            max_turns: config.max_turns,
            max_context_tokens: config.max_context_tokens as usize,
            start_ahead: config.start_ahead,
        })
    }
}

/// Half the machine's memory at [`AGENT_RSS_BYTES`] each, within 1..=[`MAX_DEFAULT_PROCESSES`]
/// (4 when `/proc/meminfo` cannot be read).
fn default_max_processes() -> usize {
    let total = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|text| mem_total_bytes(&text));
    total.map_or(4, |bytes| {
        (bytes / 2 / AGENT_RSS_BYTES).clamp(1, MAX_DEFAULT_PROCESSES) as usize
    })
}

/// `MemTotal` of `/proc/meminfo`, in bytes.
fn mem_total_bytes(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// A conversation: one user in one channel of one platform, private (a DM) or public (also
/// what the workspace and the Skill API session's context follow from).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ConversationKey {
    platform: PlatformKind,
    channel_id: ChannelId,
    user_id: UserId,
    dm: bool,
}

impl ConversationKey {
    /// The conversation of `user_id` in `channel_id` on `platform`, a DM when `dm`.
    pub fn new(platform: PlatformKind, channel_id: &str, user_id: &str, dm: bool) -> Self {
        Self {
            platform,
            channel_id: channel_id.into(),
            user_id: user_id.into(),
            dm,
        }
    }

    /// The conversation `msg` belongs to (a Misskey reply chain is one, whichever note of it
    /// `msg` is: [`IncomingMessage::conversation`]).
    pub fn of(msg: &IncomingMessage) -> Self {
        Self::new(
            msg.platform,
            msg.conversation(),
            msg.user_id.as_str(),
            msg.is_dm,
        )
    }

    /// The conversation a typing user's message would belong to.
    pub fn of_typing(typing: &Typing) -> Self {
        let origin = &typing.origin;
        Self::new(
            origin.platform,
            typing.conversation(),
            origin.user_id.as_str(),
            origin.is_dm,
        )
    }

    /// The platform.
    pub fn platform(&self) -> PlatformKind {
        self.platform
    }

    /// The conversation's channel (or wider conversation id, such as a Misskey reply chain's).
    pub fn channel(&self) -> &str {
        self.channel_id.as_str()
    }

    /// The user.
    pub fn user(&self) -> &str {
        self.user_id.as_str()
    }

    /// Whether it is a direct message.
    pub fn is_dm(&self) -> bool {
        self.dm
    }
}

/// What a session holds besides its agent process, released together when it ends.
pub struct SessionResources {
    /// The Skill API session (id, token, state).
    pub registered: RegisteredSession,
    /// The workspace and staging folder.
    pub dirs: SessionDirs,
    /// The session's own Skill API socket (sandboxed agents).
    pub socket: Option<SessionSocket>,
    /// The session's egress proxy.
    pub egress: Option<EgressSession>,
    /// Where the session is registered.
    pub sessions: SessionRegistry,
    /// Where its staging folder lives.
    pub workspaces: Workspaces,
}

impl SessionResources {
    /// Closes the egress proxy and the socket, removes the staging folder, and unregisters the
    /// session (its token stops working).
    pub async fn release(self) {
        if let Some(egress) = self.egress {
            egress.close().await;
        }
        if let Some(socket) = self.socket {
            socket.close().await;
        }
        self.workspaces.cleanup(&self.dirs).await;
        self.sessions.unregister(&self.registered.session_id);
    }
}

/// What an agent started ahead of its conversation's next message (a typing user, a
/// retired agent's successor) still needs: its first prompt is the whole one, or — when it
/// resumed the conversation's recorded session — only what is new since.
#[derive(Debug, Default)]
pub struct Unprompted {
    /// The recorded session it resumed, with what that session's prompts showed; `None`: a
    /// new session.
    pub resumed: Option<Resumable>,
}

/// An agent between turns, with what it has seen.
pub struct WarmAgent {
    /// The process and its ACP session.
    pub live: LiveAgent,
    /// Its Skill API session and folders.
    pub resources: SessionResources,
    /// The prompts and skills it was started with (see `Interactions::fingerprint`).
    pub fingerprint: u64,
    /// Estimated tokens of every prompt it was sent.
    pub context_tokens: usize,
    /// Ids of the messages and memories its prompts showed (a later prompt shows only others).
    pub shown: HashSet<String>,
    /// Started ahead and never prompted (`None` once its first turn began).
    pub first: Option<Unprompted>,
    last_used: Instant,
}

impl WarmAgent {
    /// An agent that has just finished its first turn.
    pub fn new(
        live: LiveAgent,
        resources: SessionResources,
        fingerprint: u64,
        context_tokens: usize,
        shown: HashSet<String>,
    ) -> Self {
        Self {
            live,
            resources,
            fingerprint,
            context_tokens,
            shown,
            first: None,
            last_used: Instant::now(),
        }
    }

    /// An agent started ahead of its conversation's next message, not prompted yet.
    pub fn ahead(
        live: LiveAgent,
        resources: SessionResources,
        fingerprint: u64,
        resumed: Option<Resumable>,
    ) -> Self {
        Self {
            first: Some(Unprompted { resumed }),
            ..Self::new(live, resources, fingerprint, 0, HashSet::new())
        }
    }

    /// Stops the process and releases the session.
    pub async fn retire(self) {
        self.live.stop().await;
        self.resources.release().await;
    }
}

/// An idle agent as the console lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdleAgent {
    /// Its conversation.
    pub key: ConversationKey,
    /// Its ACP session's id.
    pub session_id: String,
    /// How long since its last turn ended (or it was started).
    pub idle_for: Duration,
    /// Turns it has answered.
    pub turns: u32,
    /// Started ahead of a message and never prompted.
    pub ahead: bool,
}

/// What [`WarmPool::take`] found.
pub enum Take {
    /// The conversation's warm agent, now the caller's.
    Hit(Box<WarmAgent>),
    /// None usable, and why (one of [`MISS_REASONS`]).
    Miss(&'static str),
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StartLabels {
    start: String,
}

/// Warm-agent metrics.
#[derive(Clone, Debug)]
pub struct WarmMetrics {
    hits: Counter,
    misses: Family<ReasonLabels, Counter>,
    retired: Family<ReasonLabels, Counter>,
    processes: Gauge,
    start_latency: Family<StartLabels, Histogram>,
    prestart: Family<OutcomeLabels, Counter>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: String,
}

/// Every outcome of an agent started ahead (`air_friends_prestart_total{outcome}`): its
/// message came (`used`), it was stopped unprompted (`expired`), it could not start
/// (`failed`).
pub const PRESTART_OUTCOMES: [&str; 3] = ["used", "expired", "failed"];

impl WarmMetrics {
    /// Registers the families in `metrics`, every label set at 0.
    pub fn new(metrics: &Metrics) -> Self {
        let m = Self::unregistered();
        for reason in MISS_REASONS {
            drop(m.misses.get_or_create(&ReasonLabels {
                reason: reason.into(),
            }));
        }
        for reason in RETIRE_REASONS {
            drop(m.retired.get_or_create(&ReasonLabels {
                reason: reason.into(),
            }));
        }
        for outcome in PRESTART_OUTCOMES {
            drop(m.prestart.get_or_create(&OutcomeLabels {
                outcome: outcome.into(),
            }));
        }
        for start in ["cold", "warm", "prestarted"] {
            drop(m.start_latency.get_or_create(&StartLabels {
                start: start.into(),
            }));
        }
        metrics.register(|r| {
            r.register(
                "warm_hits",
                "Messages prompted on their conversation's warm agent",
                m.hits.clone(),
            );
            r.register(
                "warm_misses",
                "Messages that started a fresh agent, by why no warm one was used",
                m.misses.clone(),
            );
            r.register(
                "warm_retired",
                "Warm agents stopped, by reason",
                m.retired.clone(),
            );
            r.register(
                "warm_processes",
                "Idle warm agents kept now",
                m.processes.clone(),
            );
            r.register(
                "turn_start_seconds",
                "From the message to the prompt sent to the agent, by cold, warm or prestarted start",
                m.start_latency.clone(),
            );
            r.register(
                "prestart",
                "Agents started ahead of a message (a typing user, a retired agent's successor), by what became of them",
                m.prestart.clone(),
            );
        });
        m
    }

    /// Metrics that are not exported (tests).
    pub fn unregistered() -> Self {
        Self {
            hits: Counter::default(),
            misses: Family::default(),
            retired: Family::default(),
            processes: Gauge::default(),
            prestart: Family::default(),
            start_latency: Family::new_with_constructor(|| {
                Histogram::new([
                    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
                ])
            }),
        }
    }

    /// Records how long a turn took to start (`cold` or `warm`).
    pub fn turn_started(&self, start: &str, took: Duration) {
        self.start_latency
            .get_or_create(&StartLabels {
                start: start.into(),
            })
            .observe(took.as_secs_f64());
    }

    /// Counts what became of an agent started ahead (one of [`PRESTART_OUTCOMES`]).
    pub fn prestarted(&self, outcome: &str) {
        self.prestart
            .get_or_create(&OutcomeLabels {
                outcome: outcome.into(),
            })
            .inc();
    }

    fn miss(&self, reason: &str) {
        self.misses
            .get_or_create(&ReasonLabels {
                reason: reason.into(),
            })
            .inc();
    }

    fn retired(&self, reason: &str) {
        self.retired
            .get_or_create(&ReasonLabels {
                reason: reason.into(),
            })
            .inc();
    }
}

/// How long a message waits for its conversation's agent being started ahead.
pub const AHEAD_WAIT: Duration = Duration::from_secs(60);

/// A conversation's place in the pool, reserved while its agent is started ahead
/// ([`WarmPool::begin_ahead`]); dropping it frees the place and lets waiting messages on.
pub struct Ahead {
    pool: WarmPool,
    key: ConversationKey,
    _done: watch::Sender<()>,
}

impl Ahead {
    /// The conversation.
    pub fn key(&self) -> &ConversationKey {
        &self.key
    }
}

impl Drop for Ahead {
    fn drop(&mut self) {
        lock(&self.pool.shared.starting).remove(&self.key);
    }
}

/// Why an agent is started ahead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AheadOf {
    /// Its user is typing.
    Typing,
    /// The conversation's agent was just retired for its age (its turn still ends).
    Successor,
}

impl AheadOf {
    /// The log's `why`.
    pub fn as_str(self) -> &'static str {
        match self {
            AheadOf::Typing => "typing",
            AheadOf::Successor => "successor",
        }
    }
}

/// A conversation being answered ([`WarmPool::answering`]); dropping it ends that.
pub struct Answering {
    pool: WarmPool,
    key: ConversationKey,
}

impl Drop for Answering {
    fn drop(&mut self) {
        let mut answering = lock(&self.pool.shared.answering);
        if let Some(n) = answering.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                answering.remove(&self.key);
            }
        }
    }
}

struct PoolShared {
    settings: WarmSettings,
    idle: Mutex<HashMap<ConversationKey, WarmAgent>>,
    /// Conversations whose agent is being started ahead; the receiver ends when it is in
    /// `idle` (or could not start). Locked after `idle` when both are.
    starting: Mutex<HashMap<ConversationKey, watch::Receiver<()>>>,
    /// Conversations being answered now, with how many of their turns run ([`Answering`]):
    /// their agent comes back afterwards, so none is started ahead for them. Locked after
    /// `starting` when both are.
    answering: Mutex<HashMap<ConversationKey, usize>>,
    closed: AtomicBool,
    retiring: TaskTracker,
    metrics: WarmMetrics,
}

/// The idle warm agents, by conversation. Cloning shares the pool.
#[derive(Clone)]
pub struct WarmPool {
    shared: Arc<PoolShared>,
}

impl std::fmt::Debug for WarmPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WarmPool")
            .field("settings", &self.shared.settings)
            .field("idle", &self.len())
            .finish()
    }
}

impl WarmPool {
    /// An empty pool.
    pub fn new(settings: WarmSettings, metrics: WarmMetrics) -> Self {
        Self {
            shared: Arc::new(PoolShared {
                settings,
                idle: Mutex::new(HashMap::new()),
                starting: Mutex::new(HashMap::new()),
                answering: Mutex::new(HashMap::new()),
                closed: AtomicBool::new(false),
                retiring: TaskTracker::new(),
                metrics,
            }),
        }
    }

    /// The metrics (the caller records start latencies).
    pub fn metrics(&self) -> &WarmMetrics {
        &self.shared.metrics
    }

    /// Idle agents now.
    pub fn len(&self) -> usize {
        lock(&self.shared.idle).len()
    }

    /// Whether no agent is idle.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The conversation's warm agent for exclusive use, if it is usable: still alive, idle for
    /// less than `idleMs`, and started with the prompts and skills of `fingerprint`. An
    /// unusable one is retired.
    pub fn take(&self, key: &ConversationKey, fingerprint: u64) -> Take {
        let found = lock(&self.shared.idle).remove(key);
        self.shared.metrics.processes.set(self.len() as i64);
        let Some(mut agent) = found else {
            self.shared.metrics.miss("none");
            return Take::Miss("none");
        };
        let reason = if agent.last_used.elapsed() >= self.shared.settings.idle {
            Some("idle")
        } else if agent.fingerprint != fingerprint {
            Some("changed")
        } else if agent.live.has_exited() {
            Some("died")
        } else {
            None
        };
        match reason {
            Some(reason) => {
                tracing::info!(session_id = %agent.live.session_id(), reason, "warm agent not usable; starting a fresh one");
                self.shared.metrics.miss(reason);
                self.retire(agent, reason);
                Take::Miss(reason)
            }
            None => {
                self.shared.metrics.hits.inc();
                if agent.first.is_some() {
                    self.shared.metrics.prestarted("used");
                }
                Take::Hit(Box::new(agent))
            }
        }
    }

    /// [`take`](Self::take), after the agent being started ahead for the conversation (if
    /// one is) is ready or has failed — a message typed while its agent starts waits the
    /// rest of that start rather than starting a second one (at most [`AHEAD_WAIT`]).
    pub async fn take_waiting(&self, key: &ConversationKey, fingerprint: u64) -> Take {
        let pending = lock(&self.shared.starting).get(key).cloned();
        if let Some(mut ready) = pending
            && tokio::time::timeout(AHEAD_WAIT, ready.changed())
                .await
                .is_err()
        {
            tracing::warn!(platform = %key.platform, "the agent started ahead is still not ready; starting another");
        }
        self.take(key, fingerprint)
    }

    /// Marks `key`'s conversation as being answered until the returned guard is dropped (a
    /// turn, cold or warm): no agent is started ahead for it meanwhile, since its own comes
    /// back when the turn ends.
    pub fn answering(&self, key: &ConversationKey) -> Answering {
        *lock(&self.shared.answering).entry(key.clone()).or_default() += 1;
        Answering {
            pool: self.clone(),
            key: key.clone(),
        }
    }

    /// Reserves a place for an agent of `key` started ahead of its next message: `None` when
    /// that is off (`startAhead: false`), the conversation has one (idle, or being started) or
    /// — for a typing user — is being answered, the pool is closing, or the pool
    /// has no room left — an agent started ahead never pushes out one that has served a
    /// conversation. Until the returned [`Ahead`] is handed to
    /// [`put_ahead`](Self::put_ahead) or dropped, the conversation's messages wait for it.
    pub fn begin_ahead(&self, key: &ConversationKey, of: AheadOf) -> Option<Ahead> {
        if !self.shared.settings.start_ahead || self.shared.closed.load(Ordering::Acquire) {
            return None;
        }
        let idle = lock(&self.shared.idle);
        let mut starting = lock(&self.shared.starting);
        let answered_now = of == AheadOf::Typing && lock(&self.shared.answering).contains_key(key);
        if idle.contains_key(key)
            || starting.contains_key(key)
            || answered_now
            || idle.len() + starting.len() >= self.shared.settings.max_processes
        {
            return None;
        }
        let (done, ready) = watch::channel(());
        starting.insert(key.clone(), ready);
        Some(Ahead {
            pool: self.clone(),
            key: key.clone(),
            _done: done,
        })
    }

    /// Keeps an agent started ahead (see [`begin_ahead`](Self::begin_ahead)) for its
    /// conversation's next message — unless the conversation got an agent back meanwhile,
    /// the pool filled up, or it is shutting down: then it is stopped (`expired`).
    pub fn put_ahead(&self, ahead: Ahead, mut agent: WarmAgent) {
        agent.last_used = Instant::now();
        let refused = {
            let mut idle = lock(&self.shared.idle);
            if self.shared.closed.load(Ordering::Acquire) {
                Some((agent, "shutdown"))
            } else if idle.contains_key(&ahead.key)
                || idle.len() >= self.shared.settings.max_processes
            {
                Some((agent, "evicted"))
            } else {
                idle.insert(ahead.key.clone(), agent);
                None
            }
        };
        self.shared.metrics.processes.set(self.len() as i64);
        drop(ahead);
        if let Some((agent, reason)) = refused {
            self.retire(agent, reason);
        }
    }

    /// Runs `task` on the pool's tracked tasks (shutdown waits for it): an agent's start
    /// ahead of a message.
    pub fn spawn<F>(&self, task: F)
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        self.shared.retiring.spawn(task);
    }

    /// Keeps `agent` for the conversation's next message — unless it has had `maxTurns` turns
    /// or `maxContextTokens` of prompts, or the pool is shutting down: then it is retired, and
    /// the reason returned. Agents started ahead and never used, then the least recently used
    /// ones, are retired when the pool would hold more than `maxProcesses`.
    pub fn put(&self, key: ConversationKey, mut agent: WarmAgent) -> Option<&'static str> {
        let s = &self.shared.settings;
        let full = if self.shared.closed.load(Ordering::Acquire) {
            Some("shutdown")
        } else if agent.live.turns() >= s.max_turns {
            Some("max_turns")
        } else if agent.context_tokens >= s.max_context_tokens {
            Some("context")
        } else {
            None
        };
        if let Some(reason) = full {
            self.retire(agent, reason);
            return full;
        }
        agent.last_used = Instant::now();
        let mut evicted = Vec::new();
        {
            let mut idle = lock(&self.shared.idle);
            if let Some(previous) = idle.insert(key.clone(), agent) {
                // Two agents of one conversation (one started while the other was busy).
                evicted.push(previous);
            }
            // Agents started ahead and never used go first, then the least recently used.
            while idle.len() > s.max_processes {
                let Some(oldest) = idle
                    .iter()
                    .filter(|(k, _)| **k != key)
                    .min_by_key(|(_, a)| (a.first.is_none(), a.last_used))
                    .map(|(k, _)| k.clone())
                else {
                    break;
                };
                evicted.extend(idle.remove(&oldest));
            }
        }
        self.shared.metrics.processes.set(self.len() as i64);
        for agent in evicted {
            self.retire(agent, "evicted");
        }
        None
    }

    /// Retires `agent` on the pool's tracked tasks.
    pub fn retire(&self, agent: WarmAgent, reason: &'static str) {
        self.retiring(&agent, reason);
        self.shared.retiring.spawn(agent.retire());
    }

    /// Counts and logs `agent`'s retirement for `reason` (the caller stops it).
    fn retiring(&self, agent: &WarmAgent, reason: &'static str) {
        self.shared.metrics.retired(reason);
        if agent.first.is_some() {
            self.shared.metrics.prestarted("expired");
        }
        tracing::info!(session_id = %agent.live.session_id(), reason, turns = agent.live.turns(), "warm agent retired");
    }

    /// Stops every idle agent of `user` on `platform` (their data is being erased) and waits
    /// until they have stopped; answers how many there were.
    pub async fn retire_user(&self, platform: PlatformKind, user: &str) -> usize {
        let theirs: Vec<WarmAgent> = {
            let mut idle = lock(&self.shared.idle);
            let keys: Vec<ConversationKey> = idle
                .keys()
                .filter(|k| k.platform() == platform && k.user() == user)
                .cloned()
                .collect();
            keys.iter().filter_map(|k| idle.remove(k)).collect()
        };
        self.shared.metrics.processes.set(self.len() as i64);
        let stopped = theirs.len();
        for agent in theirs {
            self.retiring(&agent, "erased");
            agent.retire().await;
        }
        stopped
    }

    /// The idle agents now, the longest idle first.
    pub fn idle_agents(&self) -> Vec<IdleAgent> {
        let idle = lock(&self.shared.idle);
        let mut out: Vec<IdleAgent> = idle
            .iter()
            .map(|(key, agent)| IdleAgent {
                key: key.clone(),
                session_id: agent.live.session_id().to_owned(),
                idle_for: agent.last_used.elapsed(),
                turns: agent.live.turns(),
                ahead: agent.first.is_some(),
            })
            .collect();
        out.sort_by_key(|a| std::cmp::Reverse(a.idle_for));
        out
    }

    /// Retires the idle agent of `key`, when there is one (the operator asked, in the
    /// console); answers whether there was.
    pub fn retire_idle(&self, key: &ConversationKey) -> bool {
        let found = lock(&self.shared.idle).remove(key);
        self.shared.metrics.processes.set(self.len() as i64);
        match found {
            Some(agent) => {
                self.retire(agent, "operator");
                true
            }
            None => false,
        }
    }

    /// Retires the agents idle for `idleMs` or more.
    pub fn reap_idle(&self) {
        let idle_for = self.shared.settings.idle;
        let expired: Vec<WarmAgent> = {
            let mut idle = lock(&self.shared.idle);
            let keys: Vec<ConversationKey> = idle
                .iter()
                .filter(|(_, a)| a.last_used.elapsed() >= idle_for)
                .map(|(k, _)| k.clone())
                .collect();
            keys.iter().filter_map(|k| idle.remove(k)).collect()
        };
        self.shared.metrics.processes.set(self.len() as i64);
        for agent in expired {
            self.retire(agent, "idle");
        }
    }

    /// The pool's service: retires idle agents as they expire until `stop`, then retires
    /// every agent (later [`put`](Self::put)s retire at once) and waits for them to stop.
    pub async fn run(self, stop: CancellationToken) -> anyhow::Result<()> {
        let tick = (self.shared.settings.idle / 4)
            .clamp(Duration::from_millis(50), Duration::from_secs(30));
        loop {
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = tokio::time::sleep(tick) => self.reap_idle(),
            }
        }
        self.shared.closed.store(true, Ordering::Release);
        let all: Vec<WarmAgent> = lock(&self.shared.idle).drain().map(|(_, a)| a).collect();
        self.shared.metrics.processes.set(0);
        for agent in all {
            self.retire(agent, "shutdown");
        }
        self.shared.retiring.close();
        self.shared.retiring.wait().await;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_size_is_half_the_memory_at_the_agents_footprint() {
        let meminfo = "MemTotal:       16315092 kB\nMemFree:  1 kB\n";
        assert_eq!(mem_total_bytes(meminfo), Some(16_315_092 * 1024));
        assert_eq!(mem_total_bytes("nothing"), None);
        let settings = WarmSettings::from_config(&WarmConfig::default()).expect("on by default");
        assert!((1..=MAX_DEFAULT_PROCESSES as usize).contains(&settings.max_processes));
        let off = WarmConfig {
            enabled: false,
            ..WarmConfig::default()
        };
        assert_eq!(WarmSettings::from_config(&off), None);
        let fixed = WarmConfig {
            max_processes: Some(3),
            ..WarmConfig::default()
        };
        assert_eq!(
            WarmSettings::from_config(&fixed).map(|s| s.max_processes),
            Some(3)
        );
    }
}
