//! The conversation router: decides whether to answer, drops duplicates (in memory, then by the
//! inbox's record, which also survives restarts: `inbox`), applies the per-user rate limit, and
//! refuses the users the operator blocked (told once per block, recorded as skipped), and
//! queues each message on its conversation's FIFO; each admitted message settles in the inbox
//! when its turn ends. A message that passes the rules while the daemon drains stays queued in
//! the inbox and is answered at the next start ([`Router::resume`]).
//!
//! One worker task per conversation (`platform:channelId`) answers that conversation's
//! messages in order; conversations run in parallel up to a global cap on concurrent agent
//! sessions (a semaphore). Queues are bounded: a message that does not fit gets a short "busy"
//! reply, never silent loss. Idle workers exit and are re-created on demand.

use crate::sync::Recover;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use tokio::sync::{Semaphore, mpsc};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::inbox::Inbox;
use super::metrics::ConversationMetrics;
use super::notices::{Notice, Notices};
use super::policy::{Ignore, Policy};
use super::ratelimit::{RateDecision, RateState, UserRateLimiter};
use super::threads::move_into_thread;
use crate::platform::{IncomingMessage, PlatformRegistry, Typing, UserId};
use crate::store::controls::UserControls;
use chrono::{DateTime, Utc};

/// How long a message key is remembered by the duplicate guard.
const DEDUP_TTL: Duration = Duration::from_secs(3600);
/// Entries kept by the duplicate guard before old ones are pruned.
const DEDUP_CAP: usize = 100_000;

/// Answers one message (the interaction pipeline, or a test double).
#[async_trait]
pub trait MessageHandler: Send + Sync + 'static {
    /// Handles `msg` to completion. `msg.content` is the text to answer (prefix removed).
    /// Returns the turn's outcome (`turns_total`'s label), which settles the message in the
    /// inbox.
    async fn handle(&self, msg: IncomingMessage) -> &'static str;

    /// A message that will be answered is probably seconds away (`typing`): the handler may
    /// start its agent ahead. Handlers that keep no agents between messages ignore it.
    async fn prestart(&self, typing: Typing) {
        let _ = typing;
    }
}

/// Router settings.
#[derive(Debug, Clone)]
pub struct RouterSettings {
    /// Global cap on messages being answered at once.
    pub max_concurrent: usize,
    /// Waiting messages per conversation.
    pub queue_capacity: usize,
    /// A worker with nothing to do for this long exits.
    pub idle_worker: Duration,
    /// Enforce the per-user rate limit.
    pub rate_limit_enabled: bool,
}

/// What happened to a dispatched message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dispatch {
    /// Not answered, by policy.
    Ignored(Ignore),
    /// Already seen.
    Duplicate,
    /// Over the user's rate limit.
    RateLimited,
    /// The operator blocked the user (`store::controls`).
    Blocked,
    /// Queued on its conversation.
    Queued,
    /// The conversation's queue is full; a busy reply was sent.
    Busy,
    /// The daemon is shutting down (the message stays queued in the inbox, when there is one,
    /// and is answered at the next start).
    Draining,
    /// Read back by a catch-up, passed the rules and recorded, and not answered for the reason
    /// the catch-up gave (`too_old`, `catch_up_limit`).
    Held(&'static str),
}

impl Dispatch {
    /// Metric label.
    pub fn label(&self) -> &'static str {
        match self {
            Dispatch::Ignored(_) => "ignored",
            Dispatch::Duplicate => "duplicate",
            Dispatch::RateLimited => "rate_limited",
            Dispatch::Blocked => "blocked",
            Dispatch::Queued => "queued",
            Dispatch::Busy => "busy",
            Dispatch::Draining => "draining",
            Dispatch::Held(_) => "skipped",
        }
    }
}

struct Queue {
    tx: mpsc::Sender<IncomingMessage>,
    generation: u64,
}

struct Inner {
    inbox: Option<Inbox>,
    notices: Arc<Notices>,
    policy: Policy,
    limiter: UserRateLimiter,
    controls: UserControls,
    /// The users told they are blocked, with the block they were told of.
    told_blocked: Mutex<HashMap<String, DateTime<Utc>>>,
    settings: RouterSettings,
    seen: Mutex<HashMap<String, Instant>>,
    queues: Mutex<HashMap<String, Queue>>,
    permits: Arc<Semaphore>,
    handler: Arc<dyn MessageHandler>,
    platforms: PlatformRegistry,
    metrics: ConversationMetrics,
    tasks: TaskTracker,
    draining: CancellationToken,
    stop: CancellationToken,
    generation: AtomicU64,
}

/// The router (cheap to clone).
#[derive(Clone)]
pub struct Router {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Router {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Router").finish_non_exhaustive()
    }
}

/// What the router is built from.
pub struct RouterParts {
    /// Trigger rules and access control.
    pub policy: Policy,
    /// Per-user limiter.
    pub limiter: UserRateLimiter,
    /// The operator's blocks (the store's, or none).
    pub controls: UserControls,
    /// Queue sizes, concurrency and time-outs.
    pub settings: RouterSettings,
    /// The pipeline.
    pub handler: Arc<dyn MessageHandler>,
    /// Adapters (for busy replies and the bot's own id).
    pub platforms: PlatformRegistry,
    /// Where queueing, drops and busy replies are counted.
    pub metrics: ConversationMetrics,
    /// Workers run here; shutdown waits for them.
    pub tasks: TaskTracker,
    /// Stop accepting messages.
    pub draining: CancellationToken,
    /// Stop now.
    pub stop: CancellationToken,
    /// Where every admitted message is recorded and settles; `None`: in memory only.
    pub inbox: Option<Inbox>,
    /// The busy and rate-limit texts, in each place's language.
    pub notices: Arc<Notices>,
}

impl Router {
    /// Builds a router.
    pub fn new(parts: RouterParts) -> Self {
        let permits = Arc::new(Semaphore::new(parts.settings.max_concurrent.max(1)));
        Self {
            inner: Arc::new(Inner {
                inbox: parts.inbox,
                notices: parts.notices,
                policy: parts.policy,
                limiter: parts.limiter,
                controls: parts.controls,
                told_blocked: Mutex::new(HashMap::new()),
                settings: parts.settings,
                seen: Mutex::new(HashMap::new()),
                queues: Mutex::new(HashMap::new()),
                permits,
                handler: parts.handler,
                platforms: parts.platforms,
                metrics: parts.metrics,
                tasks: parts.tasks,
                draining: parts.draining,
                stop: parts.stop,
                generation: AtomicU64::new(0),
            }),
        }
    }

    /// The permits of agent sessions running at once (`agent.maxConcurrentSessions`): what
    /// else starts agent turns (a scheduled run) takes one too.
    pub fn permits(&self) -> Arc<Semaphore> {
        self.inner.permits.clone()
    }

    /// Where `user_id` on `platform` stands with the rate limit (`None` when it is off).
    pub fn rate_state(&self, platform: &str, user_id: &str) -> Option<RateState> {
        let inner = &self.inner;
        inner.settings.rate_limit_enabled.then(|| {
            inner
                .limiter
                .state(&format!("{platform}:{user_id}"), Instant::now())
        })
    }

    /// Routes one incoming message.
    pub async fn dispatch(&self, msg: IncomingMessage) -> Dispatch {
        self.route(msg, None, true).await
    }

    /// Someone is typing. When whatever they send will be answered ([`Policy::expects_message`]),
    /// the handler may start their agent ahead, on the router's tracked tasks (it skips a
    /// conversation being answered now: that one's agent comes back warm).
    pub fn typing(&self, typing: Typing) {
        let inner = &self.inner;
        if inner.draining.is_cancelled() {
            return;
        }
        let bot_id = inner
            .platforms
            .get(typing.origin.platform)
            .and_then(|p| p.bot_user_id());
        if !inner
            .policy
            .expects_message(&typing, bot_id.as_ref().map(UserId::as_str))
        {
            return;
        }
        let handler = inner.handler.clone();
        inner
            .tasks
            .spawn(async move { handler.prestart(typing).await });
    }

    /// Routes a message a catch-up read back: the same rules, duplicate guard, inbox record and
    /// rate limit as a live message. With `hold`, a message that passes the rules is recorded
    /// as skipped for that reason instead of being answered (too old, over the catch-up's
    /// limit per channel). Not counted in `messages_received_total`: the catch-up counts what
    /// it read.
    pub async fn dispatch_missed(
        &self,
        msg: IncomingMessage,
        hold: Option<&'static str>,
    ) -> Dispatch {
        self.route(msg, hold, false).await
    }

    async fn route(
        &self,
        mut msg: IncomingMessage,
        hold: Option<&'static str>,
        live: bool,
    ) -> Dispatch {
        let decision = self.decide(&mut msg, hold).await;
        if live {
            self.inner
                .metrics
                .messages_received(msg.platform.as_str(), decision.label());
        }
        tracing::debug!(
            platform = %msg.platform,
            channel = %msg.channel_id,
            message_id = %msg.message_id,
            decision = decision.label(),
            live,
            "message routed"
        );
        decision
    }

    async fn decide(&self, msg: &mut IncomingMessage, hold: Option<&'static str>) -> Dispatch {
        let inner = &self.inner;
        // Without an inbox a message that arrives while draining is dropped at once; with one,
        // it is recorded (below) and answered after the restart.
        if inner.draining.is_cancelled() && inner.inbox.is_none() {
            return Dispatch::Draining;
        }
        let bot_id = inner
            .platforms
            .get(msg.platform)
            .and_then(|p| p.bot_user_id());
        match inner
            .policy
            .decide(msg, bot_id.as_ref().map(UserId::as_str))
        {
            Ok(content) => msg.content = content,
            Err(why) => return Dispatch::Ignored(why),
        }
        if !self.first_sighting(&msg.dedup_key()) {
            return Dispatch::Duplicate;
        }
        if let Some(inbox) = &inner.inbox
            && !inbox.record(msg).await
        {
            return Dispatch::Duplicate;
        }
        if inner.draining.is_cancelled() {
            return Dispatch::Draining;
        }
        if let Some(since) = inner
            .controls
            .blocked_since(msg.platform.as_str(), msg.user_id.as_str())
        {
            let key = format!("{}:{}", msg.platform, msg.user_id);
            let first = inner.told_blocked.locked().insert(key, since) != Some(since);
            if first && hold.is_none() {
                self.tell(msg, Notice::Blocked).await;
            }
            self.skipped(msg, "blocked").await;
            return Dispatch::Blocked;
        }
        if let Some(reason) = hold {
            self.skipped(msg, reason).await;
            return Dispatch::Held(reason);
        }
        if inner.settings.rate_limit_enabled && !inner.policy.is_whitelisted(msg) {
            let key = format!("{}:{}", msg.platform, msg.user_id);
            match inner.limiter.check(&key, Instant::now()) {
                RateDecision::Allowed => {}
                RateDecision::StartedCooldown(cooldown) => {
                    let minutes = cooldown.as_secs().div_ceil(60).max(1);
                    self.tell(msg, Notice::TooFast { minutes }).await;
                    self.skipped(msg, "rate_limited").await;
                    return Dispatch::RateLimited;
                }
                RateDecision::InCooldown => {
                    self.skipped(msg, "rate_limited").await;
                    return Dispatch::RateLimited;
                }
            }
        }
        let decision = self.enqueue(msg.clone()).await;
        if decision == Dispatch::Busy {
            self.skipped(msg, "busy").await;
        }
        decision
    }

    /// Records in the inbox (if any) that `msg` is not answered, for `reason`.
    async fn skipped(&self, msg: &IncomingMessage, reason: &str) {
        if let Some(inbox) = &self.inner.inbox {
            inbox.skipped(msg, reason).await;
        }
    }

    /// Queues messages the inbox kept from before a restart (see [`Inbox::resumable`]): they
    /// passed the rules when they arrived, so they go straight to their conversations, oldest
    /// first, each remembered by the duplicate guard.
    pub async fn resume(&self, messages: Vec<IncomingMessage>) {
        for msg in messages {
            self.first_sighting(&msg.dedup_key());
            let decision = self.enqueue(msg.clone()).await;
            self.inner
                .metrics
                .messages_received(msg.platform.as_str(), decision.label());
            if decision == Dispatch::Busy {
                self.skipped(&msg, "busy").await;
            }
        }
    }

    /// Records the key; false when it was already seen recently.
    fn first_sighting(&self, key: &str) -> bool {
        let now = Instant::now();
        let mut seen = self.inner.seen.locked();
        if seen
            .get(key)
            .is_some_and(|t| now.duration_since(*t) < DEDUP_TTL)
        {
            return false;
        }
        if seen.len() >= DEDUP_CAP {
            seen.retain(|_, t| now.duration_since(*t) < DEDUP_TTL);
            if seen.len() >= DEDUP_CAP {
                // Still full of fresh keys: drop the oldest half.
                let mut times: Vec<Instant> = seen.values().copied().collect();
                times.sort();
                let cutoff = times[times.len() / 2];
                seen.retain(|_, t| *t > cutoff);
            }
        }
        seen.insert(key.to_owned(), now);
        true
    }

    async fn enqueue(&self, msg: IncomingMessage) -> Dispatch {
        let key = msg.conversation_key();
        let mut msg = msg;
        // Two rounds: a worker may exit (idle) between our lookup and our send.
        for _ in 0..2 {
            let tx = self.sender_for(&key);
            match tx.try_send(msg) {
                Ok(()) => return Dispatch::Queued,
                Err(mpsc::error::TrySendError::Full(m)) => {
                    tracing::warn!(conversation = %key, "conversation queue full; answering busy");
                    self.tell(&m, Notice::Busy).await;
                    return Dispatch::Busy;
                }
                Err(mpsc::error::TrySendError::Closed(m)) => {
                    self.forget_closed(&key);
                    msg = m;
                }
            }
        }
        tracing::error!(conversation = %key, "could not queue message: worker kept exiting");
        Dispatch::Busy
    }

    fn sender_for(&self, key: &str) -> mpsc::Sender<IncomingMessage> {
        let inner = &self.inner;
        let mut queues = inner.queues.locked();
        if let Some(q) = queues.get(key)
            && !q.tx.is_closed()
        {
            return q.tx.clone();
        }
        let (tx, rx) = mpsc::channel(inner.settings.queue_capacity.max(1));
        let generation = inner.generation.fetch_add(1, Ordering::Relaxed);
        queues.insert(
            key.to_owned(),
            Queue {
                tx: tx.clone(),
                generation,
            },
        );
        let router = self.clone();
        let key = key.to_owned();
        inner
            .tasks
            .spawn(async move { router.worker(key, generation, rx).await });
        tx
    }

    fn forget_closed(&self, key: &str) {
        let mut queues = self.inner.queues.locked();
        if queues.get(key).is_some_and(|q| q.tx.is_closed()) {
            queues.remove(key);
        }
    }

    async fn worker(&self, key: String, generation: u64, mut rx: mpsc::Receiver<IncomingMessage>) {
        let inner = &self.inner;
        loop {
            // While draining, what is already queued is still answered (below), then the
            // worker exits instead of idling.
            let next = tokio::select! {
                biased;
                m = rx.recv() => m,
                _ = inner.draining.cancelled() => None,
                _ = tokio::time::sleep(inner.settings.idle_worker) => None,
                _ = inner.stop.cancelled() => None,
            };
            match next {
                Some(msg) => self.answer(msg).await,
                None => break,
            }
        }
        // Leave the map first, then close: anything that slipped in before is still answered.
        {
            let mut queues = inner.queues.locked();
            if queues.get(&key).is_some_and(|q| q.generation == generation) {
                queues.remove(&key);
            }
        }
        rx.close();
        while let Ok(msg) = rx.try_recv() {
            if inner.stop.is_cancelled() {
                tracing::warn!(conversation = %key, message_id = %msg.message_id, "daemon stopping; queued message not answered");
                continue;
            }
            self.answer(msg).await;
        }
        tracing::debug!(conversation = %key, "conversation worker exited");
    }

    async fn answer(&self, msg: IncomingMessage) {
        let inner = &self.inner;
        if self.moved_to_thread(&msg).await {
            return;
        }
        let permit = tokio::select! {
            p = inner.permits.clone().acquire_owned() => p,
            _ = inner.stop.cancelled() => {
                tracing::warn!(message_id = %msg.message_id, "daemon stopping; queued message not answered");
                return;
            }
        };
        let Ok(_permit) = permit else { return };
        let Some(inbox) = &inner.inbox else {
            inner.handler.handle(msg).await;
            return;
        };
        let outcome = inner.handler.handle(msg.clone()).await;
        inbox.finished(&msg, outcome).await;
    }

    /// In a thread-per-conversation place, opens the thread `msg` continues in and queues it
    /// there (true: that conversation answers it). False: answered here — not such a place,
    /// or the thread could not be opened (logged; the platform metrics count the failure).
    async fn moved_to_thread(&self, msg: &IncomingMessage) -> bool {
        let inner = &self.inner;
        if !inner.policy.opens_thread(msg) {
            return false;
        }
        let Some(platform) = inner.platforms.get(msg.platform) else {
            return false;
        };
        match move_into_thread(platform.as_ref(), msg).await {
            Ok(Some(moved)) => {
                tracing::info!(
                    platform = %msg.platform,
                    channel = %msg.channel_id,
                    thread = %moved.channel_id,
                    message_id = %msg.message_id,
                    "conversation moved into its own thread"
                );
                if self.enqueue(moved).await == Dispatch::Busy {
                    self.skipped(msg, "busy").await;
                }
                true
            }
            Ok(None) => false,
            Err(e) => {
                tracing::warn!(
                    platform = %msg.platform,
                    channel = %msg.channel_id,
                    message_id = %msg.message_id,
                    error = %e,
                    "could not open a thread for the conversation; answering in the channel"
                );
                false
            }
        }
    }

    /// `notice`, in the language of `msg`'s place, in answer to `msg`.
    async fn tell(&self, msg: &IncomingMessage, notice: Notice) {
        let Some(platform) = self.inner.platforms.get(msg.platform) else {
            return;
        };
        let language = self.inner.policy.place(msg).language.clone();
        let text = self.inner.notices.text(&language, notice);
        if let Err(e) = platform
            .send_message(&msg.channel_id, &text, Some(&msg.message_id))
            .await
        {
            tracing::warn!(platform = %msg.platform, channel = %msg.channel_id, notice = notice.key(), error = %e, "could not send a notice");
        }
    }

    /// Number of live conversation workers (for tests and metrics).
    pub fn active_conversations(&self) -> usize {
        self.inner.queues.locked().len()
    }
}
