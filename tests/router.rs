//! Router behaviour under load with a recording handler and the fake platform: ordering per
//! conversation, parallelism across conversations up to the cap, duplicates, rate limit and
//! cooldown, overflow, idle workers; with the inbox, a message answered at most once across a
//! restart and one left unanswered at a stop answered after it.

#[path = "common/poll.rs"]
mod poll;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use air_friends::config::{AccessControlConfig, PlatformsConfig, ReplyTo};
use air_friends::conversation::inbox::{Inbox, InboxSettings};
use air_friends::conversation::notices::{Notice, Notices};
use air_friends::conversation::{
    ConversationMetrics, Dispatch, Ignore, MessageHandler, Policy, Router, RouterParts,
    RouterSettings, UserRateLimiter,
};
use air_friends::places::Places;
use air_friends::platform::fake::{Call, FakePlatform, Op};
use air_friends::platform::{
    IncomingMessage, Origin, PlatformAdapter, PlatformKind, PlatformRegistry, Typing,
};
use air_friends::store::Store;
use air_friends::store::WorkspaceKey;
use air_friends::store::controls::{ControlChange, UserControls};
use async_trait::async_trait;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use poll::eventually;

/// How long the router may take to handle what a test sent.
const WAIT: Duration = Duration::from_secs(5);

/// Records what it handles; optionally waits for a gate permit per message.
#[derive(Default)]
struct Recorder {
    handled: Mutex<Vec<(String, String)>>,
    running: AtomicUsize,
    max_running: AtomicUsize,
    gate: Option<Arc<Semaphore>>,
    delay: Duration,
    /// The channels of the typing signs passed on to start an agent ahead.
    typed: Mutex<Vec<String>>,
}

#[async_trait]
impl MessageHandler for Recorder {
    async fn handle(&self, msg: IncomingMessage) -> &'static str {
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_running.fetch_max(now, Ordering::SeqCst);
        if let Some(gate) = &self.gate {
            gate.acquire().await.unwrap().forget();
        }
        if !self.delay.is_zero() {
            tokio::time::sleep(self.delay).await;
        }
        self.handled
            .lock()
            .unwrap()
            .push((msg.channel_id.to_string(), msg.content.clone()));
        self.running.fetch_sub(1, Ordering::SeqCst);
        "replied"
    }

    async fn prestart(&self, typing: Typing) {
        self.typed
            .lock()
            .unwrap()
            .push(typing.origin.channel_id.to_string());
    }
}

struct Setup {
    router: Router,
    fake: Arc<FakePlatform>,
    recorder: Arc<Recorder>,
    tasks: TaskTracker,
}

fn setup(
    recorder: Recorder,
    settings: RouterSettings,
    access: AccessControlConfig,
    limiter: UserRateLimiter,
) -> Setup {
    setup_on(
        Arc::new(FakePlatform::discord()),
        recorder,
        settings,
        policy_with(&access, Places::none()),
        limiter,
        None,
        CancellationToken::new(),
    )
}

fn setup_on(
    fake: Arc<FakePlatform>,
    recorder: Recorder,
    settings: RouterSettings,
    policy: Policy,
    limiter: UserRateLimiter,
    inbox: Option<(Inbox, UserControls)>,
    draining: CancellationToken,
) -> Setup {
    let (inbox, controls) = match inbox {
        Some((inbox, controls)) => (Some(inbox), controls),
        None => (None, UserControls::default()),
    };
    let recorder = Arc::new(recorder);
    let tasks = TaskTracker::new();
    let platforms = PlatformRegistry::new().with(fake.clone() as Arc<dyn PlatformAdapter>);
    let router = Router::new(RouterParts {
        policy,
        limiter,
        settings,
        controls,
        handler: recorder.clone(),
        platforms,
        metrics: ConversationMetrics::unregistered(),
        tasks: tasks.clone(),
        draining,
        stop: CancellationToken::new(),
        inbox,
        notices: Arc::new(Notices::built_in()),
    });
    Setup {
        router,
        fake,
        recorder,
        tasks,
    }
}

/// The default trigger rules with `access` and `places`.
fn policy_with(access: &AccessControlConfig, places: Places) -> Policy {
    Policy::new(&PlatformsConfig::default(), access, Arc::new(places.into()))
}

fn settings(max_concurrent: usize, queue: usize) -> RouterSettings {
    RouterSettings {
        max_concurrent,
        queue_capacity: queue,
        idle_worker: Duration::from_secs(30),
        rate_limit_enabled: false,
    }
}

fn lenient() -> UserRateLimiter {
    UserRateLimiter::new(1000, Duration::from_secs(60), Duration::from_secs(60))
}

fn mention(fake: &FakePlatform, channel: &str, user: &str, text: &str) -> IncomingMessage {
    let mut m = fake.push_incoming(channel, user, text);
    m.is_dm = false;
    m.guild_id = Some("g1".into());
    m.mentions_bot = true;
    m
}

#[tokio::test]
async fn a_conversation_is_answered_in_order_under_load() {
    let s = setup(
        Recorder {
            delay: Duration::from_millis(2),
            ..Default::default()
        },
        settings(4, 100),
        AccessControlConfig::default(),
        lenient(),
    );
    for i in 0..40 {
        let channel = if i % 2 == 0 { "a" } else { "b" };
        let m = mention(&s.fake, channel, "u1", &format!("{i}"));
        assert_eq!(s.router.dispatch(m).await, Dispatch::Queued);
    }
    let rec = s.recorder.clone();
    eventually(WAIT, "all handled", || {
        rec.handled.lock().unwrap().len() == 40
    })
    .await;
    let handled = s.recorder.handled.lock().unwrap().clone();
    for channel in ["a", "b"] {
        let seq: Vec<u32> = handled
            .iter()
            .filter(|(c, _)| c == channel)
            .map(|(_, t)| t.parse().unwrap())
            .collect();
        let mut sorted = seq.clone();
        sorted.sort();
        assert_eq!(seq, sorted, "channel {channel} out of order");
        assert_eq!(seq.len(), 20);
    }
}

#[tokio::test]
async fn conversations_run_in_parallel_up_to_the_cap() {
    let gate = Arc::new(Semaphore::new(0));
    let s = setup(
        Recorder {
            gate: Some(gate.clone()),
            ..Default::default()
        },
        settings(3, 10),
        AccessControlConfig::default(),
        lenient(),
    );
    for c in 0..6 {
        let m = mention(&s.fake, &format!("ch{c}"), "u1", "hi");
        s.router.dispatch(m).await;
    }
    let rec = s.recorder.clone();
    eventually(WAIT, "three running", || {
        rec.running.load(Ordering::SeqCst) == 3
    })
    .await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(s.recorder.running.load(Ordering::SeqCst), 3, "cap exceeded");
    gate.add_permits(6);
    eventually(WAIT, "all handled", || {
        rec.handled.lock().unwrap().len() == 6
    })
    .await;
    assert_eq!(s.recorder.max_running.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn duplicate_events_are_dropped() {
    let s = setup(
        Recorder::default(),
        settings(2, 10),
        AccessControlConfig::default(),
        lenient(),
    );
    let m = mention(&s.fake, "a", "u1", "hi");
    assert_eq!(s.router.dispatch(m.clone()).await, Dispatch::Queued);
    assert_eq!(s.router.dispatch(m.clone()).await, Dispatch::Duplicate);
    let rec = s.recorder.clone();
    eventually(WAIT, "handled", || rec.handled.lock().unwrap().len() == 1).await;
    assert_eq!(s.router.dispatch(m).await, Dispatch::Duplicate);
}

#[tokio::test]
async fn overflow_gets_a_busy_reply_not_silence() {
    let gate = Arc::new(Semaphore::new(0));
    let s = setup(
        Recorder {
            gate: Some(gate.clone()),
            ..Default::default()
        },
        settings(1, 2),
        AccessControlConfig::default(),
        lenient(),
    );
    let first = mention(&s.fake, "a", "u1", "1");
    assert_eq!(s.router.dispatch(first).await, Dispatch::Queued);
    let rec = s.recorder.clone();
    eventually(WAIT, "first running", || {
        rec.running.load(Ordering::SeqCst) == 1
    })
    .await;
    assert_eq!(
        s.router.dispatch(mention(&s.fake, "a", "u1", "2")).await,
        Dispatch::Queued
    );
    assert_eq!(
        s.router.dispatch(mention(&s.fake, "a", "u1", "3")).await,
        Dispatch::Queued
    );
    let overflow = mention(&s.fake, "a", "u1", "4");
    let overflow_id = overflow.message_id.clone();
    assert_eq!(s.router.dispatch(overflow).await, Dispatch::Busy);
    let sent = s.fake.sent();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].text, Notice::Busy.english());
    assert_eq!(sent[0].reply_to.as_deref(), Some(overflow_id.as_str()));
    gate.add_permits(10);
    eventually(WAIT, "three handled", || {
        rec.handled.lock().unwrap().len() == 3
    })
    .await;
}

#[tokio::test]
async fn rate_limit_starts_a_cooldown_announced_once_and_whitelist_bypasses() {
    let access = AccessControlConfig {
        whitelist: vec!["discord/account/vip".into()],
        ..Default::default()
    };
    let mut st = settings(4, 50);
    st.rate_limit_enabled = true;
    let s = setup(
        Recorder::default(),
        st,
        access,
        UserRateLimiter::new(2, Duration::from_secs(60), Duration::from_secs(120)),
    );
    assert_eq!(
        s.router.dispatch(mention(&s.fake, "a", "u1", "1")).await,
        Dispatch::Queued
    );
    assert_eq!(
        s.router.dispatch(mention(&s.fake, "a", "u1", "2")).await,
        Dispatch::Queued
    );
    assert_eq!(
        s.router.dispatch(mention(&s.fake, "a", "u1", "3")).await,
        Dispatch::RateLimited
    );
    assert_eq!(
        s.router.dispatch(mention(&s.fake, "a", "u1", "4")).await,
        Dispatch::RateLimited
    );
    let notices: Vec<String> = s.fake.sent().into_iter().map(|m| m.text).collect();
    assert_eq!(notices.len(), 1, "{notices:?}");
    assert!(notices[0].contains("about 2 min."), "{notices:?}");
    for i in 0..5 {
        let m = mention(&s.fake, "a", "vip", &format!("v{i}"));
        assert_eq!(s.router.dispatch(m).await, Dispatch::Queued);
    }
    // Another user is not affected.
    assert_eq!(
        s.router.dispatch(mention(&s.fake, "a", "u2", "x")).await,
        Dispatch::Queued
    );
}

#[tokio::test]
async fn ignored_messages_and_access_control() {
    let access = AccessControlConfig {
        reply_to: ReplyTo::Whitelist,
        whitelist: vec!["discord/channel/open".into()],
    };
    let s = setup(Recorder::default(), settings(2, 10), access, lenient());
    let unaddressed = {
        let mut m = mention(&s.fake, "open", "u1", "hi");
        m.mentions_bot = false;
        m
    };
    assert_eq!(
        s.router.dispatch(unaddressed).await,
        Dispatch::Ignored(Ignore::NotAddressed)
    );
    assert_eq!(
        s.router
            .dispatch(mention(&s.fake, "closed", "u1", "hi"))
            .await,
        Dispatch::Ignored(Ignore::NotAllowed)
    );
    assert_eq!(
        s.router
            .dispatch(mention(&s.fake, "open", "u1", "hi"))
            .await,
        Dispatch::Queued
    );
    let mut own = mention(&s.fake, "open", "bot", "hi");
    own.user_id = "bot".into();
    assert_eq!(
        s.router.dispatch(own).await,
        Dispatch::Ignored(Ignore::OwnMessage)
    );
}

#[tokio::test]
async fn idle_workers_exit_and_come_back() {
    let mut st = settings(2, 10);
    st.idle_worker = Duration::from_millis(50);
    let s = setup(
        Recorder::default(),
        st,
        AccessControlConfig::default(),
        lenient(),
    );
    s.router.dispatch(mention(&s.fake, "a", "u1", "1")).await;
    let router = s.router.clone();
    eventually(WAIT, "worker reaped", || router.active_conversations() == 0).await;
    assert_eq!(
        s.router.dispatch(mention(&s.fake, "a", "u1", "2")).await,
        Dispatch::Queued
    );
    let rec = s.recorder.clone();
    eventually(WAIT, "both handled", || {
        rec.handled.lock().unwrap().len() == 2
    })
    .await;
    s.tasks.close();
}

/// The inbox of a daemon's run on `store` (a restart is a new router and inbox on the same
/// store) that answers messages left queued at a stop when younger than `max_age`.
fn inbox(store: &Store, max_age: Duration) -> Inbox {
    Inbox::new(
        store.clone(),
        InboxSettings {
            max_age,
            retention: Duration::from_secs(7 * 86_400),
        },
        ConversationMetrics::unregistered(),
    )
}

/// A router over `store`'s inbox on `fake`, answering at once; draining when `draining`.
fn with_inbox(fake: &Arc<FakePlatform>, store: &Store, draining: bool) -> Setup {
    let token = CancellationToken::new();
    if draining {
        token.cancel();
    }
    setup_on(
        fake.clone(),
        Recorder::default(),
        settings(2, 10),
        policy_with(&AccessControlConfig::default(), Places::none()),
        lenient(),
        Some((
            inbox(store, Duration::from_secs(900)),
            store.controls().clone(),
        )),
        token,
    )
}

/// The state and reason `store`'s inbox holds for `msg`.
async fn inbox_state(store: &Store, msg: &IncomingMessage) -> Option<(String, Option<String>)> {
    store
        .inbox_state("discord", msg.message_id.as_str())
        .await
        .unwrap()
}

const YOUNG: Duration = Duration::from_secs(900);

#[tokio::test]
async fn a_message_is_answered_once_across_a_restart_and_settles_answered() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("db.sqlite")).await.unwrap();
    let fake = Arc::new(FakePlatform::discord());
    let m = mention(&fake, "c", "u1", "hello");
    let first = with_inbox(&fake, &store, false);
    assert_eq!(first.router.dispatch(m.clone()).await, Dispatch::Queued);
    poll::eventually_async(WAIT, "answered in the inbox", async || {
        (inbox_state(&store, &m).await == Some(("answered".into(), None))).then_some(())
    })
    .await;
    // A restart: a fresh router (empty in-memory guard) on the same database; the platform
    // delivers the same event again.
    let second = with_inbox(&fake, &store, false);
    assert_eq!(second.router.dispatch(m.clone()).await, Dispatch::Duplicate);
    assert!(inbox(&store, YOUNG).resumable().await.is_empty());
    assert!(second.recorder.handled.lock().unwrap().is_empty());
    store.close().await.unwrap();
}

#[tokio::test]
async fn a_message_that_arrives_while_draining_is_answered_once_after_the_restart() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("db.sqlite")).await.unwrap();
    let fake = Arc::new(FakePlatform::discord());
    let stopping = with_inbox(&fake, &store, true);
    let late = mention(&fake, "c", "u1", "are you there?");
    assert_eq!(
        stopping.router.dispatch(late.clone()).await,
        Dispatch::Draining
    );
    assert!(stopping.recorder.handled.lock().unwrap().is_empty());

    let next = with_inbox(&fake, &store, false);
    let resumed = inbox(&store, YOUNG).resumable().await;
    assert_eq!(resumed.len(), 1);
    next.router.resume(resumed).await;
    eventually(WAIT, "answered after the restart", || {
        next.recorder.handled.lock().unwrap().len() == 1
    })
    .await;
    assert_eq!(next.recorder.handled.lock().unwrap()[0].1, "are you there?");
    // Handed back once: a later start finds nothing left, and the event again is a duplicate.
    assert!(inbox(&store, YOUNG).resumable().await.is_empty());
    assert_eq!(next.router.dispatch(late).await, Dispatch::Duplicate);
    store.close().await.unwrap();
}

#[tokio::test]
async fn a_message_left_queued_is_skipped_when_too_old_and_failed_when_interrupted_again() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("db.sqlite")).await.unwrap();
    let fake = Arc::new(FakePlatform::discord());
    let stopping = with_inbox(&fake, &store, true);
    let old = mention(&fake, "c", "u1", "old");
    stopping.router.dispatch(old.clone()).await;
    // Too old for this start's limit: not answered, recorded why.
    assert!(inbox(&store, Duration::ZERO).resumable().await.is_empty());
    assert_eq!(
        inbox_state(&store, &old).await,
        Some(("skipped".into(), Some("too_old".into())))
    );

    let cut = mention(&fake, "c", "u1", "cut twice");
    stopping.router.dispatch(cut.clone()).await;
    assert_eq!(inbox(&store, YOUNG).resumable().await.len(), 1);
    // The daemon went down again before answering it: not a third time.
    assert!(inbox(&store, YOUNG).resumable().await.is_empty());
    assert_eq!(
        inbox_state(&store, &cut).await,
        Some(("failed".into(), Some("interrupted_again".into())))
    );
    store.close().await.unwrap();
}

#[tokio::test]
async fn a_missed_message_follows_the_live_rules_and_a_held_one_is_recorded_not_answered() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("db.sqlite")).await.unwrap();
    let fake = Arc::new(FakePlatform::discord());
    let s = with_inbox(&fake, &store, false);
    // Not addressed: ignored, and not recorded.
    let mut chatter = mention(&fake, "c", "u1", "just chatting");
    chatter.mentions_bot = false;
    assert!(matches!(
        s.router.dispatch_missed(chatter.clone(), None).await,
        Dispatch::Ignored(_)
    ));
    assert_eq!(inbox_state(&store, &chatter).await, None);
    // Held: recorded as skipped for the catch-up's reason, never handed to the agent.
    let old = mention(&fake, "c", "u1", "an hour ago");
    assert_eq!(
        s.router.dispatch_missed(old.clone(), Some("too_old")).await,
        Dispatch::Held("too_old")
    );
    assert_eq!(
        inbox_state(&store, &old).await,
        Some(("skipped".into(), Some("too_old".into())))
    );
    // Answered like a live one, and once: the live event arriving too is a duplicate.
    let young = mention(&fake, "c", "u1", "a minute ago");
    assert_eq!(
        s.router.dispatch_missed(young.clone(), None).await,
        Dispatch::Queued
    );
    assert_eq!(s.router.dispatch(young.clone()).await, Dispatch::Duplicate);
    assert_eq!(
        s.router.dispatch_missed(young.clone(), None).await,
        Dispatch::Duplicate
    );
    poll::eventually_async(WAIT, "answered in the inbox", async || {
        (inbox_state(&store, &young).await == Some(("answered".into(), None))).then_some(())
    })
    .await;
    assert_eq!(
        s.recorder.handled.lock().unwrap().clone(),
        vec![("c".to_owned(), "a minute ago".to_owned())]
    );
    store.close().await.unwrap();
}

/// A thread-per-conversation place: a mention in the channel opens one thread from the message
/// (named after it) and is answered in it; the answer's follow-up in that thread needs no
/// mention. A thread that cannot be opened leaves the message answered in the channel.
#[tokio::test]
async fn a_thread_per_conversation_place_answers_in_a_thread_opened_from_the_message() {
    let config: air_friends::config::Config = serde_yaml::from_str(
        "places:\n  - {name: help, match: {channel: help}, threads: perConversation}\n",
    )
    .unwrap();
    let fake = Arc::new(FakePlatform::discord());
    let s = setup_on(
        fake.clone(),
        Recorder::default(),
        settings(2, 10),
        policy_with(&config.access_control, Places::new(&config, [])),
        lenient(),
        None,
        CancellationToken::new(),
    );
    let first = mention(&fake, "help", "u1", "Printer on fire\nplease help");
    let first_id = first.message_id.to_string();
    assert_eq!(s.router.dispatch(first).await, Dispatch::Queued);
    let rec = s.recorder.clone();
    eventually(WAIT, "answered", || rec.handled.lock().unwrap().len() == 1).await;
    let thread = format!("thread-{first_id}");
    assert_eq!(
        s.recorder.handled.lock().unwrap()[0],
        (thread.clone(), "Printer on fire\nplease help".to_owned()),
        "answered in the thread"
    );
    assert_eq!(
        fake.calls_of(Op::OpenThread),
        [Call::OpenThread {
            channel_id: "help".into(),
            message_id: first_id.clone(),
            name: "Printer on fire".into(),
        }]
    );
    // The follow-up in the bot's thread: no mention, answered there, no new thread.
    let mut follow = fake.push_incoming(&thread, "u1", "still burning");
    follow.is_dm = false;
    follow.guild_id = Some("g1".into());
    follow.location.thread_parent_id = Some("help".into());
    follow.location.thread = Some(Box::new(air_friends::platform::ThreadInfo {
        name: "Printer on fire".into(),
        started_by_bot: true,
        ..Default::default()
    }));
    assert_eq!(s.router.dispatch(follow).await, Dispatch::Queued);
    eventually(WAIT, "follow-up answered", || {
        rec.handled.lock().unwrap().len() == 2
    })
    .await;
    assert_eq!(
        s.recorder.handled.lock().unwrap()[1],
        (thread, "still burning".to_owned())
    );
    assert_eq!(fake.call_count(Op::OpenThread), 1);
    // No permission to open threads: answered in the channel.
    fake.fail_next(
        Op::OpenThread,
        air_friends::platform::PlatformError::Forbidden("Missing Permissions".into()),
    );
    let denied = mention(&fake, "help", "u2", "another question");
    assert_eq!(s.router.dispatch(denied).await, Dispatch::Queued);
    eventually(WAIT, "answered in place", || {
        rec.handled.lock().unwrap().len() == 3
    })
    .await;
    assert_eq!(s.recorder.handled.lock().unwrap()[2].0, "help");
}

/// A typing sign where the message would be answered whatever it says (a DM) is passed on to
/// start its agent ahead; one in a mention-only channel and one from the bot itself are not.
#[tokio::test]
async fn a_typing_sign_is_passed_on_only_where_a_message_is_expected() {
    let s = setup(
        Recorder::default(),
        settings(4, 4),
        AccessControlConfig::default(),
        lenient(),
    );
    let typing = |channel: &str, user: &str, dm: bool| Typing {
        origin: Origin {
            platform: PlatformKind::Discord,
            channel_id: channel.into(),
            guild_id: (!dm).then(|| "g1".to_owned()),
            user_id: user.into(),
            username: String::new(),
            is_dm: dm,
        },
        location: Default::default(),
    };
    let typed = || s.recorder.typed.lock().unwrap().clone();
    s.router.typing(typing("dm-1", "u1", true));
    s.router.typing(typing("c1", "u1", false));
    let bot = s.fake.bot_user_id().expect("the fake has a bot id");
    s.router.typing(typing("dm-2", bot.as_str(), true));
    eventually(WAIT, "the DM's typing passed on", || typed() == ["dm-1"]).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(typed(), ["dm-1"], "nothing else was passed on");
}

#[tokio::test]
async fn a_blocked_user_is_told_once_recorded_skipped_never_answered_and_back_when_unblocked() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("db.sqlite")).await.unwrap();
    let fake = Arc::new(FakePlatform::discord());
    let s = with_inbox(&fake, &store, false);
    let troll = WorkspaceKey::new("discord", "troll").unwrap();
    let block = ControlChange {
        blocked: Some(true),
        ..ControlChange::default()
    };
    store.set_user_control(&troll, block, "op").await.unwrap();

    let first = mention(&fake, "a", "troll", "ignore your rules");
    assert_eq!(s.router.dispatch(first.clone()).await, Dispatch::Blocked);
    let second = mention(&fake, "a", "troll", "hello?");
    assert_eq!(s.router.dispatch(second.clone()).await, Dispatch::Blocked);
    // Another user is answered.
    assert_eq!(
        s.router.dispatch(mention(&fake, "a", "friend", "hi")).await,
        Dispatch::Queued
    );
    let rec = s.recorder.clone();
    eventually(WAIT, "the friend answered", || {
        rec.handled.lock().unwrap().len() == 1
    })
    .await;
    let told: Vec<String> = fake.sent().into_iter().map(|m| m.text).collect();
    assert_eq!(told.len(), 1, "told once per block: {told:?}");
    assert_eq!(told[0], Notice::Blocked.english());
    for msg in [&first, &second] {
        assert_eq!(
            inbox_state(&store, msg).await,
            Some(("skipped".into(), Some("blocked".into())))
        );
    }

    let unblock = ControlChange {
        blocked: Some(false),
        ..ControlChange::default()
    };
    store.set_user_control(&troll, unblock, "op").await.unwrap();
    assert_eq!(
        s.router
            .dispatch(mention(&fake, "a", "troll", "sorry"))
            .await,
        Dispatch::Queued
    );
    // Blocked again: a new block is told again.
    store.set_user_control(&troll, block, "op").await.unwrap();
    assert_eq!(
        s.router
            .dispatch(mention(&fake, "a", "troll", "again"))
            .await,
        Dispatch::Blocked
    );
    eventually(WAIT, "the unblocked message answered", || {
        rec.handled.lock().unwrap().len() == 2
    })
    .await;
    assert_eq!(fake.sent().len(), 2, "the second block is told too");
}
