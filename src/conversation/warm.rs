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

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::workspace::{SessionDirs, Workspaces};
use crate::agent::LiveAgent;
use crate::config::WarmConfig;
use crate::egress::EgressSession;
use crate::observability::Metrics;
use crate::platform::{ChannelId, IncomingMessage, PlatformKind, UserId};
use crate::session::{RegisteredSession, SessionRegistry};
use crate::skill_api::socket::SessionSocket;
use crate::sync::lock;

/// Memory one OpenCode process takes, for the default `maxProcesses`.
const AGENT_RSS_BYTES: u64 = 600 * 1024 * 1024;

/// The default `maxProcesses` never exceeds this (nor goes below 1).
const MAX_DEFAULT_PROCESSES: u64 = 32;

/// Every reason an agent is retired (`air_friends_warm_retired_total{reason}`).
pub const RETIRE_REASONS: [&str; 9] = [
    "idle",
    "evicted",
    "max_turns",
    "context",
    "changed",
    "died",
    "failed",
    "terminated",
    "shutdown",
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

/// A conversation: one user in one channel of one platform (also what the DM flag, the
/// workspace and the Skill API session's context follow from).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ConversationKey {
    platform: PlatformKind,
    channel_id: ChannelId,
    user_id: UserId,
}

impl ConversationKey {
    /// The conversation of `user_id` in `channel_id` on `platform`.
    pub fn new(platform: PlatformKind, channel_id: &str, user_id: &str) -> Self {
        Self {
            platform,
            channel_id: channel_id.into(),
            user_id: user_id.into(),
        }
    }

    /// The conversation `msg` belongs to (a Misskey reply chain is one, whichever note of it
    /// `msg` is: [`IncomingMessage::conversation`]).
    pub fn of(msg: &IncomingMessage) -> Self {
        Self {
            platform: msg.platform,
            channel_id: msg.conversation().into(),
            user_id: msg.user_id.clone(),
        }
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
            last_used: Instant::now(),
        }
    }

    /// Stops the process and releases the session.
    pub async fn retire(self) {
        self.live.stop().await;
        self.resources.release().await;
    }
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
}

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
        for start in ["cold", "warm"] {
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
                "From the message to the prompt sent to the agent, by cold or warm start",
                m.start_latency.clone(),
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

struct PoolShared {
    settings: WarmSettings,
    idle: Mutex<HashMap<ConversationKey, WarmAgent>>,
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
                Take::Hit(Box::new(agent))
            }
        }
    }

    /// Keeps `agent` for the conversation's next message — unless it has had `maxTurns` turns
    /// or `maxContextTokens` of prompts, or the pool is shutting down. The least recently used
    /// agents are retired when the pool would hold more than `maxProcesses`.
    pub fn put(&self, key: ConversationKey, mut agent: WarmAgent) {
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
            return;
        }
        agent.last_used = Instant::now();
        let mut evicted = Vec::new();
        {
            let mut idle = lock(&self.shared.idle);
            if let Some(previous) = idle.insert(key.clone(), agent) {
                // Two agents of one conversation (one started while the other was busy).
                evicted.push(previous);
            }
            while idle.len() > s.max_processes {
                let Some(oldest) = idle
                    .iter()
                    .filter(|(k, _)| **k != key)
                    .min_by_key(|(_, a)| a.last_used)
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
    }

    /// Retires `agent` on the pool's tracked tasks.
    pub fn retire(&self, agent: WarmAgent, reason: &'static str) {
        self.shared.metrics.retired(reason);
        tracing::info!(session_id = %agent.live.session_id(), reason, turns = agent.live.turns(), "warm agent retired");
        self.shared.retiring.spawn(agent.retire());
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
