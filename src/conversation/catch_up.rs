//! The catch-up: answering what was sent while the daemon was away (stopped, restarting, or cut
//! off from a platform longer than the platform keeps a session to resume).
//!
//! * **Cursors.** Per platform *feed* (a Discord channel or DM, a Misskey chat, Misskey's
//!   mentions and replies: [`PlatformAdapter::catch_up_feed`]) the daemon keeps the newest
//!   message it saw and when the bot was last addressed there. Every message the platforms
//!   deliver moves its feed's cursor ([`CatchUp::observe`]); a feed is tracked from the first
//!   message addressed to the bot. (Live messages reach the router through
//!   [`CatchUp::dispatch`], which notes them.) Cursors live in memory and are saved every
//!   [`SAVE_EVERY`], at once for a newly tracked feed, and when the daemon stops (a crash loses
//!   at most that much progress, and reading a few messages twice is harmless: the inbox
//!   answers each at most once).
//! * **When.** On a platform's new session ([`PlatformEvent::Connected`]: the first of the run,
//!   `start`, or a later one that could not resume, `reconnect`). A resume replays what was
//!   missed and sends no such event.
//! * **What.** Each feed addressed within `catchUp.channelsActiveWithinHours`, most recently
//!   addressed first, is read back after its cursor ([`PlatformAdapter::missed_messages`], at
//!   most [`READ_AT_MOST`] messages, the newest when more arrived), one feed at a time with
//!   [`FEED_PAUSE`] between two, so a catch-up never bursts requests at a platform.
//! * **Answered like live messages.** Every message goes through the router
//!   ([`Router::dispatch_missed`]): the same trigger rules, access control, duplicate guard,
//!   inbox record and rate limit; budgets apply in the turn as always. Oldest first; at most
//!   `catchUp.maxPerChannel` are answered per channel and the rest recorded as skipped
//!   (`catch_up_limit`); one older than `catchUp.maxAgeMinutes` is recorded as skipped
//!   (`too_old`) and not answered.
//! * **Told.** One info record per catch-up that found something (how many read, answered,
//!   skipped), a warning per feed that could not be read, and the metrics
//!   `catch_up_runs_total{platform,trigger}`, `catch_up_messages_total{platform,decision}` and
//!   `catch_up_read_failures_total{platform,kind}`.
//!
//! What it cannot see: a channel where the bot was never addressed (Discord has no mention
//! inbox for bots), and more than [`READ_AT_MOST`] messages of one feed (the oldest are left
//! out, with an info record).
//!
//! [`PlatformEvent::Connected`]: crate::platform::PlatformEvent::Connected

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::metrics::ConversationMetrics;
use super::router::{Dispatch, Router};
use crate::platform::{
    ChannelId, IncomingMessage, MessageId, PlatformAdapter, PlatformError, PlatformKind,
    PlatformRegistry,
};
use crate::store::{CatchUpCursor, Store};
use crate::sync::Recover;

/// Most messages read back from one feed in one catch-up (one Discord or Misskey page).
pub const READ_AT_MOST: usize = 100;
/// Pause between reading two feeds.
pub const FEED_PAUSE: Duration = Duration::from_millis(250);
/// How often moved cursors are saved.
pub const SAVE_EVERY: Duration = Duration::from_secs(30);
/// How often cursors of feeds not addressed within the retention are deleted.
const PRUNE_EVERY: Duration = Duration::from_secs(3600);

/// How the catch-up works (`catchUp`).
#[derive(Debug, Clone, Copy)]
pub struct CatchUpSettings {
    /// Older messages are recorded as skipped (`too_old`), not answered.
    pub max_age: Duration,
    /// Feeds addressed within this long are read back; zero turns the catch-up off.
    pub active_within: Duration,
    /// Most messages answered per channel in one catch-up.
    pub max_per_channel: usize,
    /// Cursors of feeds not addressed within this long are deleted.
    pub retention: Duration,
    /// Pause between reading two feeds ([`FEED_PAUSE`]; tests shorten it).
    pub feed_pause: Duration,
}

/// One feed's cursor in memory.
#[derive(Debug, Clone)]
struct Feed {
    last_id: MessageId,
    last_at: DateTime<Utc>,
    addressed_at: DateTime<Utc>,
    dirty: bool,
}

type FeedKey = (PlatformKind, String);

/// A message as the cursors see it.
#[derive(Debug, Clone, Copy)]
struct Seen<'a> {
    platform: PlatformKind,
    channel_id: &'a ChannelId,
    message_id: &'a MessageId,
    at: DateTime<Utc>,
}

/// What one catch-up did, for its log record.
#[derive(Debug, Default)]
struct Tally {
    feeds: usize,
    read: usize,
    answered: usize,
    too_old: usize,
    over_limit: usize,
    failed_feeds: usize,
}

struct Inner {
    store: Store,
    platforms: PlatformRegistry,
    router: Router,
    settings: CatchUpSettings,
    metrics: ConversationMetrics,
    feeds: Mutex<HashMap<FeedKey, Feed>>,
    /// Platforms that had a session in this run (the next one is a reconnect).
    connected_before: Mutex<HashSet<PlatformKind>>,
    /// Platforms with a catch-up running, and whether another was asked for meanwhile.
    running: Mutex<HashMap<PlatformKind, bool>>,
    tasks: TaskTracker,
    draining: CancellationToken,
    /// A feed started being tracked: saved at once rather than at the next [`SAVE_EVERY`].
    new_feed: Notify,
}

/// The catch-up (cheap to clone).
#[derive(Clone)]
pub struct CatchUp {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for CatchUp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CatchUp")
            .field("settings", &self.inner.settings)
            .finish_non_exhaustive()
    }
}

/// What the catch-up is built from.
pub struct CatchUpParts {
    /// Where cursors are kept.
    pub store: Store,
    /// The adapters to read back from.
    pub platforms: PlatformRegistry,
    /// Where read-back messages go.
    pub router: Router,
    /// `catchUp`.
    pub settings: CatchUpSettings,
    /// Where runs and messages are counted.
    pub metrics: ConversationMetrics,
    /// Catch-ups run here; shutdown waits for them.
    pub tasks: TaskTracker,
    /// Stops a catch-up between two feeds.
    pub draining: CancellationToken,
}

impl CatchUp {
    /// The catch-up, with no cursor loaded yet ([`load`](Self::load)).
    pub fn new(parts: CatchUpParts) -> Self {
        Self {
            inner: Arc::new(Inner {
                store: parts.store,
                platforms: parts.platforms,
                router: parts.router,
                settings: parts.settings,
                metrics: parts.metrics,
                feeds: Mutex::new(HashMap::new()),
                connected_before: Mutex::new(HashSet::new()),
                running: Mutex::new(HashMap::new()),
                tasks: parts.tasks,
                draining: parts.draining,
                new_feed: Notify::new(),
            }),
        }
    }

    fn enabled(&self) -> bool {
        !self.inner.settings.active_within.is_zero()
    }

    /// Loads the saved cursors of the feeds addressed within the window (before the first
    /// event is read). A store failure is logged: the catch-up then covers only feeds
    /// addressed from now on.
    pub async fn load(&self) {
        if !self.enabled() {
            return;
        }
        let since = ago(self.inner.settings.active_within);
        let saved = match self.inner.store.catch_up_active(since).await {
            Ok(saved) => saved,
            Err(e) => {
                tracing::error!(error = %e, "cannot read the catch-up cursors; only channels addressed from now on will be caught up");
                return;
            }
        };
        let mut feeds = self.inner.feeds.locked();
        for cursor in saved {
            let Ok(platform) = cursor.platform.parse::<PlatformKind>() else {
                continue;
            };
            feeds.insert(
                (platform, cursor.feed),
                Feed {
                    last_id: MessageId::new(cursor.last_id),
                    last_at: cursor.last_at,
                    addressed_at: cursor.addressed_at,
                    dirty: false,
                },
            );
        }
    }

    /// Routes a message a platform delivered ([`Router::dispatch`]) and notes it (see
    /// [`observe`](Self::observe)).
    pub async fn dispatch(&self, msg: IncomingMessage) -> Dispatch {
        self.route(msg, None, true).await
    }

    /// Routes a live message, or one read back (with its `hold`), then notes it.
    async fn route(
        &self,
        msg: IncomingMessage,
        hold: Option<&'static str>,
        live: bool,
    ) -> Dispatch {
        let (platform, channel_id, message_id, at) = (
            msg.platform,
            msg.channel_id.clone(),
            msg.message_id.clone(),
            msg.timestamp,
        );
        let decision = if live {
            self.inner.router.dispatch(msg).await
        } else {
            self.inner.router.dispatch_missed(msg, hold).await
        };
        self.observe(
            Seen {
                platform,
                channel_id: &channel_id,
                message_id: &message_id,
                at,
            },
            decision,
        );
        decision
    }

    /// Notes a message a platform delivered (or a catch-up read back), after the router
    /// decided: it moves its feed's cursor, and starts tracking the feed when the message was
    /// addressed to the bot (`decision` is not [`Dispatch::Ignored`]).
    fn observe(&self, seen: Seen<'_>, decision: Dispatch) {
        if !self.enabled() || seen.platform == PlatformKind::Console {
            return;
        }
        let Some(adapter) = self.inner.platforms.get(seen.platform) else {
            return;
        };
        let addressed = !matches!(decision, Dispatch::Ignored(_));
        let key = (
            seen.platform,
            adapter.catch_up_feed(seen.channel_id).as_str().to_owned(),
        );
        let now = Utc::now();
        let mut feeds = self.inner.feeds.locked();
        match feeds.get_mut(&key) {
            Some(feed) => {
                if seen.at >= feed.last_at {
                    feed.last_id = seen.message_id.clone();
                    feed.last_at = seen.at;
                    feed.dirty = true;
                }
                if addressed {
                    feed.addressed_at = now;
                    feed.dirty = true;
                }
            }
            None if addressed => {
                feeds.insert(
                    key,
                    Feed {
                        last_id: seen.message_id.clone(),
                        last_at: seen.at,
                        addressed_at: now,
                        dirty: true,
                    },
                );
                self.inner.new_feed.notify_one();
            }
            None => {}
        }
    }

    /// `platform` connected with a new session: starts a catch-up of its feeds (in a tracked
    /// task). One already running for it runs once more when it ends.
    pub fn connected(&self, platform: PlatformKind) {
        let trigger = if self.inner.connected_before.locked().insert(platform) {
            "start"
        } else {
            "reconnect"
        };
        if !self.enabled() || platform == PlatformKind::Console {
            return;
        }
        {
            let mut running = self.inner.running.locked();
            if let Some(again) = running.get_mut(&platform) {
                *again = true;
                return;
            }
            running.insert(platform, false);
        }
        let this = self.clone();
        self.inner.tasks.spawn(async move {
            let mut trigger = trigger;
            loop {
                this.run(platform, trigger).await;
                let mut running = this.inner.running.locked();
                if running.get(&platform).copied().unwrap_or(false) {
                    running.insert(platform, false);
                    trigger = "reconnect";
                } else {
                    running.remove(&platform);
                    return;
                }
            }
        });
    }

    /// One catch-up of `platform`.
    async fn run(&self, platform: PlatformKind, trigger: &'static str) {
        let Some(adapter) = self.inner.platforms.get(platform) else {
            return;
        };
        self.inner.metrics.catch_up_run(platform.as_str(), trigger);
        let since = ago(self.inner.settings.active_within);
        let mut feeds: Vec<(String, MessageId, DateTime<Utc>)> = self
            .inner
            .feeds
            .locked()
            .iter()
            .filter(|((kind, _), feed)| *kind == platform && feed.addressed_at >= since)
            .map(|((_, name), feed)| (name.clone(), feed.last_id.clone(), feed.addressed_at))
            .collect();
        feeds.sort_by(|a, b| b.2.cmp(&a.2).then_with(|| a.0.cmp(&b.0)));
        let mut tally = Tally::default();
        for (index, (feed, after, _)) in feeds.iter().enumerate() {
            if self.inner.draining.is_cancelled() {
                break;
            }
            if index > 0 {
                tokio::select! {
                    () = self.inner.draining.cancelled() => break,
                    () = tokio::time::sleep(self.inner.settings.feed_pause) => {}
                }
            }
            tally.feeds += 1;
            self.read_feed(adapter.as_ref(), platform, feed, after, &mut tally)
                .await;
        }
        if tally.read > 0 || tally.failed_feeds > 0 {
            tracing::info!(
                platform = %platform,
                trigger,
                feeds = tally.feeds,
                read = tally.read,
                answered = tally.answered,
                too_old = tally.too_old,
                over_limit = tally.over_limit,
                failed_feeds = tally.failed_feeds,
                "caught up on messages sent while away"
            );
        } else {
            tracing::debug!(platform = %platform, trigger, feeds = tally.feeds, "catch-up found nothing new");
        }
    }

    /// Reads one feed back and routes what it holds.
    async fn read_feed(
        &self,
        adapter: &dyn PlatformAdapter,
        platform: PlatformKind,
        feed: &str,
        after: &MessageId,
        tally: &mut Tally,
    ) {
        let missed = match adapter
            .missed_messages(&ChannelId::from(feed), after, READ_AT_MOST)
            .await
        {
            Ok(missed) => missed,
            Err(e) => {
                tally.failed_feeds += 1;
                self.inner
                    .metrics
                    .catch_up_failure(platform.as_str(), e.kind());
                tracing::warn!(platform = %platform, feed, error = %e, kind = e.kind(), "cannot read back what was sent while away");
                if let PlatformError::RateLimited { retry_after } = e {
                    tokio::select! {
                        () = self.inner.draining.cancelled() => {}
                        () = tokio::time::sleep(retry_after) => {}
                    }
                }
                return;
            }
        };
        if missed.more {
            tracing::info!(platform = %platform, feed, read = missed.messages.len(), "more messages were sent while away than one catch-up reads; the oldest are left out");
        }
        let now = Utc::now();
        let max_age = chrono_duration(self.inner.settings.max_age);
        let mut answered: HashMap<String, usize> = HashMap::new();
        for msg in missed.messages {
            tally.read += 1;
            let conversation = msg.conversation_key();
            let hold = if now - msg.timestamp > max_age {
                Some("too_old")
            } else if answered.get(&conversation).copied().unwrap_or(0)
                >= self.inner.settings.max_per_channel
            {
                Some("catch_up_limit")
            } else {
                None
            };
            let decision = self.route(msg, hold, false).await;
            match decision {
                Dispatch::Queued => {
                    tally.answered += 1;
                    *answered.entry(conversation).or_default() += 1;
                }
                Dispatch::Held("too_old") => tally.too_old += 1,
                Dispatch::Held(_) => tally.over_limit += 1,
                _ => {}
            }
            self.inner
                .metrics
                .catch_up_message(platform.as_str(), decision.label());
        }
    }

    /// Saves the cursors that moved.
    pub async fn save(&self) {
        let dirty: Vec<CatchUpCursor> = {
            let mut feeds = self.inner.feeds.locked();
            feeds
                .iter_mut()
                .filter(|(_, feed)| feed.dirty)
                .map(|((platform, name), feed)| {
                    feed.dirty = false;
                    CatchUpCursor {
                        platform: platform.as_str().to_owned(),
                        feed: name.clone(),
                        last_id: feed.last_id.as_str().to_owned(),
                        last_at: feed.last_at,
                        addressed_at: feed.addressed_at,
                    }
                })
                .collect()
        };
        if dirty.is_empty() {
            return;
        }
        let count = dirty.len();
        if let Err(e) = self.inner.store.catch_up_save(dirty).await {
            // Marked clean already: the next message in each feed marks it again.
            tracing::error!(error = %e, feeds = count, "cannot save the catch-up cursors");
        }
    }

    /// Deletes the cursors of feeds not addressed within the retention, in memory and stored.
    async fn prune(&self) {
        let before = ago(self.inner.settings.retention);
        self.inner
            .feeds
            .locked()
            .retain(|_, feed| feed.addressed_at >= before);
        if let Err(e) = self.inner.store.catch_up_prune(before).await {
            tracing::error!(error = %e, "cannot delete old catch-up cursors");
        }
    }

    /// Saves moved cursors every [`SAVE_EVERY`], a newly tracked feed at once, and everything
    /// once more when `stop` fires; prunes old cursors every hour.
    pub async fn run_saving(self, stop: CancellationToken) {
        if !self.enabled() {
            return;
        }
        let mut save = tokio::time::interval(SAVE_EVERY);
        let mut prune = tokio::time::interval(PRUNE_EVERY);
        loop {
            tokio::select! {
                () = stop.cancelled() => break,
                _ = save.tick() => self.save().await,
                () = self.inner.new_feed.notified() => self.save().await,
                _ = prune.tick() => self.prune().await,
            }
        }
        self.save().await;
    }
}

fn chrono_duration(d: Duration) -> chrono::Duration {
    chrono::Duration::from_std(d).unwrap_or(chrono::Duration::MAX)
}

/// The time `d` ago (the earliest time there is, for a window longer than history).
fn ago(d: Duration) -> DateTime<Utc> {
    Utc::now()
        .checked_sub_signed(chrono_duration(d))
        .unwrap_or(DateTime::<Utc>::MIN_UTC)
}
