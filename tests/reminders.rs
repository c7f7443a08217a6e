//! The reminder scheduler against a real (temp-file) store and the fake platform: on-time
//! delivery by DM, wake-up on new reminders, retries with back-off, final failure, late
//! delivery after downtime, cancellation; recurring reminders on a clock the test moves a day
//! at a time (delivered until their count, cancelled as a series, no burst after downtime, a
//! failed occurrence skipped).

#[path = "common/poll.rs"]
mod poll;

use std::sync::Arc;
use std::time::Duration;

use air_friends::config::RemindersConfig;
use air_friends::platform::fake::{FakePlatform, Op};
use air_friends::platform::{PlatformAdapter, PlatformError, PlatformRegistry};
use air_friends::reminders::{ReminderMetrics, ReminderScheduler};
use air_friends::store::{NewReminder, Recurrence, ReminderState, Store, WorkspaceKey};
use air_friends::timetable::Every;
use chrono::Utc;
use poll::eventually_async;
use tokio_util::sync::CancellationToken;

struct Setup {
    _dir: tempfile::TempDir,
    store: Store,
    fake: Arc<FakePlatform>,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
}

async fn setup(config: RemindersConfig, before_start: impl AsyncFnOnce(&Store)) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("db.sqlite")).await.unwrap();
    before_start(&store).await;
    let fake = Arc::new(FakePlatform::discord());
    fake.add_user("42", "alice", "Alice");
    let platforms = PlatformRegistry::new().with(fake.clone() as Arc<dyn PlatformAdapter>);
    let scheduler =
        ReminderScheduler::new(store.clone(), platforms, config, ReminderMetrics::default());
    let stop = CancellationToken::new();
    let task = tokio::spawn(scheduler.run(stop.clone()));
    Setup {
        _dir: dir,
        store,
        fake,
        stop,
        task,
    }
}

fn ws() -> WorkspaceKey {
    WorkspaceKey::new("discord", "42").unwrap()
}

async fn remind(store: &Store, in_ms: i64, text: &str) -> String {
    store
        .create_reminder(
            NewReminder {
                workspace: ws(),
                message: text.into(),
                scheduled_at: Utc::now() + chrono::Duration::milliseconds(in_ms),
            },
            20,
        )
        .await
        .unwrap()
        .id
}

/// Waits until reminder `id` is in `state`; returns it then.
async fn wait_state(
    store: &Store,
    id: &str,
    state: ReminderState,
    within: Duration,
) -> air_friends::store::Reminder {
    let what = format!("reminder {id} becoming {state:?}");
    eventually_async(within, &what, async || {
        let r = store.get_reminder(id).await.unwrap().unwrap();
        (r.state == state).then_some(r)
    })
    .await
}

#[tokio::test]
async fn delivers_on_time_by_dm_and_wakes_for_new_reminders() {
    let s = setup(RemindersConfig::default(), async |_| {}).await;
    // Created after the scheduler went to sleep with nothing to do: it must wake up.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let id = remind(&s.store, 700, "drink water").await;
    let r = wait_state(
        &s.store,
        &id,
        ReminderState::Delivered,
        Duration::from_secs(5),
    )
    .await;
    let lag = r.delivered_at.unwrap() - r.scheduled_at;
    assert!(lag >= chrono::Duration::zero(), "delivered early: {lag}");
    assert!(lag < chrono::Duration::milliseconds(1000), "lag {lag}");
    assert!(!r.late);
    let dms = s.fake.dm_texts("42");
    assert_eq!(dms.len(), 1);
    assert!(dms[0].contains("drink water"));
    s.stop.cancel();
    s.task.await.unwrap().unwrap();
}

#[tokio::test]
async fn failures_retry_with_backoff_then_succeed() {
    let config = RemindersConfig {
        retry_backoff_ms: 200,
        ..Default::default()
    };
    let s = setup(config, async |_| {}).await;
    s.fake.fail_next(
        Op::SendDm,
        PlatformError::Transport("connection reset".into()),
    );
    let id = remind(&s.store, 100, "call mom").await;
    let r = wait_state(
        &s.store,
        &id,
        ReminderState::Delivered,
        Duration::from_secs(5),
    )
    .await;
    assert_eq!(r.attempts, 2);
    assert_eq!(s.fake.dm_texts("42").len(), 1);
}

#[tokio::test]
async fn gives_up_after_the_last_attempt() {
    let config = RemindersConfig {
        retry_backoff_ms: 50,
        max_delivery_attempts: 3,
        ..Default::default()
    };
    let s = setup(config, async |_| {}).await;
    for _ in 0..3 {
        s.fake
            .fail_next(Op::SendDm, PlatformError::Transport("down".into()));
    }
    let id = remind(&s.store, 50, "never arrives").await;
    let r = wait_state(&s.store, &id, ReminderState::Failed, Duration::from_secs(5)).await;
    assert_eq!(r.attempts, 3);
    assert_eq!(
        r.last_error.as_deref().map(|e| e.contains("down")),
        Some(true)
    );
}

#[tokio::test]
async fn reminders_due_during_downtime_go_out_at_once_marked_late() {
    let mut id = String::new();
    let s = setup(RemindersConfig::default(), async |store| {
        id = remind(store, -10 * 60 * 1000, "missed while down").await;
    })
    .await;
    let r = wait_state(
        &s.store,
        &id,
        ReminderState::Delivered,
        Duration::from_secs(5),
    )
    .await;
    assert!(r.late);
}

#[tokio::test]
async fn cancelled_reminders_are_not_delivered() {
    let s = setup(RemindersConfig::default(), async |_| {}).await;
    let id = remind(&s.store, 400, "cancel me").await;
    s.store.cancel_reminder(&ws(), &id).await.unwrap();
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(s.fake.dm_texts("42").is_empty());
    assert_eq!(
        s.store.get_reminder(&id).await.unwrap().unwrap().state,
        ReminderState::Cancelled
    );
}

/// Reminders pending across a restart are delivered (the overdue one marked late),
/// and nothing is delivered twice by the next run.
#[tokio::test]
async fn pending_reminders_survive_a_restart_and_are_not_delivered_twice() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db.sqlite");
    let (overdue, soon, later) = {
        let store = Store::open(&db).await.unwrap();
        let ids = (
            remind(&store, -5 * 60 * 1000, "overdue while down").await,
            remind(&store, 800, "soon after start").await,
            remind(&store, 3_600_000, "next hour").await,
        );
        store.close().await.unwrap();
        ids
    };

    let run = async |db: &std::path::Path| {
        let store = Store::open(db).await.unwrap();
        let fake = Arc::new(FakePlatform::discord());
        fake.add_user("42", "alice", "Alice");
        let platforms = PlatformRegistry::new().with(fake.clone() as Arc<dyn PlatformAdapter>);
        let scheduler = ReminderScheduler::new(
            store.clone(),
            platforms,
            RemindersConfig::default(),
            ReminderMetrics::default(),
        );
        let stop = CancellationToken::new();
        let task = tokio::spawn(scheduler.run(stop.clone()));
        (store, fake, stop, task)
    };

    // First run after the "downtime".
    let (store, fake, stop, task) = run(&db).await;
    let r = wait_state(
        &store,
        &overdue,
        ReminderState::Delivered,
        Duration::from_secs(5),
    )
    .await;
    assert!(r.late, "an overdue reminder is marked late");
    let r = wait_state(
        &store,
        &soon,
        ReminderState::Delivered,
        Duration::from_secs(5),
    )
    .await;
    assert!(!r.late);
    assert_eq!(fake.dm_texts("42").len(), 2);
    stop.cancel();
    task.await.unwrap().unwrap();
    store.close().await.unwrap();

    // Second run: nothing is sent again; the future one stays pending.
    let (store, fake, stop, task) = run(&db).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        fake.dm_texts("42").is_empty(),
        "delivered twice: {:?}",
        fake.dm_texts("42")
    );
    let r = store.get_reminder(&later).await.unwrap().unwrap();
    assert_eq!(r.state, ReminderState::Pending);
    stop.cancel();
    task.await.unwrap().unwrap();
}

/// A scheduler whose clock the test moves (a day at a time); `poke` wakes it as a new
/// reminder would.
struct Clocked {
    s: Setup,
    clock: Arc<std::sync::Mutex<chrono::DateTime<Utc>>>,
}

impl Clocked {
    async fn start(config: RemindersConfig) -> Clocked {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("db.sqlite")).await.unwrap();
        let fake = Arc::new(FakePlatform::discord());
        fake.add_user("42", "alice", "Alice");
        let platforms = PlatformRegistry::new().with(fake.clone() as Arc<dyn PlatformAdapter>);
        // Whole seconds: the store keeps milliseconds.
        let clock = Arc::new(std::sync::Mutex::new(chrono::SubsecRound::trunc_subsecs(
            Utc::now(),
            0,
        )));
        let read = clock.clone();
        let scheduler =
            ReminderScheduler::new(store.clone(), platforms, config, ReminderMetrics::default())
                .with_clock(Arc::new(move || *read.lock().unwrap()));
        let stop = CancellationToken::new();
        let task = tokio::spawn(scheduler.run(stop.clone()));
        Clocked {
            s: Setup {
                _dir: dir,
                store,
                fake,
                stop,
                task,
            },
            clock,
        }
    }

    fn now(&self) -> chrono::DateTime<Utc> {
        *self.clock.lock().unwrap()
    }

    /// Moves the clock to `at` and wakes the scheduler (a reminder of someone else, far ahead).
    async fn at(&self, at: chrono::DateTime<Utc>) {
        *self.clock.lock().unwrap() = at;
        self.s
            .store
            .create_reminder(
                NewReminder {
                    workspace: WorkspaceKey::new("discord", "7").unwrap(),
                    message: "poke".into(),
                    scheduled_at: at + chrono::Duration::days(300),
                },
                1000,
            )
            .await
            .unwrap();
    }

    async fn daily(&self, first: chrono::DateTime<Utc>, count: Option<u32>) -> String {
        self.s
            .store
            .create_reminder_repeating(
                NewReminder {
                    workspace: ws(),
                    message: "take the pills".into(),
                    scheduled_at: first,
                },
                Some(Recurrence {
                    every: Every::Day,
                    time_zone: "Europe/Berlin".into(),
                    first_at: first,
                    until: None,
                    count,
                }),
                20,
            )
            .await
            .unwrap()
            .id
    }

    async fn wait_occurrences(&self, id: &str, n: u32) -> air_friends::store::Reminder {
        let store = &self.s.store;
        eventually_async(
            Duration::from_secs(5),
            &format!("{n} deliveries"),
            async || {
                let r = store.get_reminder(id).await.unwrap().unwrap();
                (r.occurrences == n).then_some(r)
            },
        )
        .await
    }
}

/// A daily reminder with a count of three is delivered three times, a day apart at the same
/// local time, each DM saying how to stop it; then the series is over and nothing more comes.
#[tokio::test]
async fn a_recurring_reminder_is_delivered_until_its_count_and_then_stops() {
    let c = Clocked::start(RemindersConfig::default()).await;
    let first = c.now() + chrono::Duration::minutes(5);
    let id = c.daily(first, Some(3)).await;
    for day in 0..3 {
        let due = first + chrono::Duration::days(day);
        c.at(due + chrono::Duration::seconds(1)).await;
        let r = c
            .wait_occurrences(&id, u32::try_from(day).unwrap() + 1)
            .await;
        if day < 2 {
            assert_eq!(r.state, ReminderState::Pending, "{r:?}");
            assert_eq!(r.scheduled_at, due + chrono::Duration::days(1));
            assert!(!r.late);
        } else {
            assert_eq!(
                r.state,
                ReminderState::Delivered,
                "the count is reached: {r:?}"
            );
        }
    }
    let dms = c.s.fake.dm_texts("42");
    assert_eq!(dms.len(), 3, "{dms:?}");
    assert!(
        dms.iter()
            .all(|d| d.contains("take the pills") && d.contains(&format!("/cancel-reminder {id}"))),
        "{dms:?}"
    );
    // A day later: nothing.
    c.at(first + chrono::Duration::days(3) + chrono::Duration::seconds(1))
        .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(c.s.fake.dm_texts("42").len(), 3);
    c.s.stop.cancel();
    c.s.task.await.unwrap().unwrap();
}

/// Cancelling a series stops it; days the daemon was down are not sent in a burst: the next
/// occurrence after now follows the one caught up.
#[tokio::test]
async fn cancelling_stops_the_series_and_missed_days_are_not_a_burst() {
    let c = Clocked::start(RemindersConfig::default()).await;
    let first = c.now() + chrono::Duration::minutes(5);
    let id = c.daily(first, None).await;
    // Down for three days: one late delivery, and the next is tomorrow's.
    let back = first + chrono::Duration::days(3) + chrono::Duration::hours(2);
    c.at(back).await;
    let r = c.wait_occurrences(&id, 1).await;
    assert!(r.late);
    assert_eq!(r.scheduled_at, first + chrono::Duration::days(4));
    assert_eq!(c.s.fake.dm_texts("42").len(), 1);
    // Cancelled: the series is over.
    let cancelled = c.s.store.cancel_reminder(&ws(), &id).await.unwrap();
    assert_eq!(cancelled.state, ReminderState::Cancelled);
    c.at(first + chrono::Duration::days(5)).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(c.s.fake.dm_texts("42").len(), 1);
    c.s.stop.cancel();
    c.s.task.await.unwrap().unwrap();
}

/// An occurrence that fails its last attempt is recorded with its error and the series goes
/// on at its next occurrence.
#[tokio::test]
async fn a_failed_occurrence_moves_the_series_to_the_next_one() {
    let c = Clocked::start(RemindersConfig {
        max_delivery_attempts: 1,
        ..Default::default()
    })
    .await;
    c.s.fake
        .fail_next(Op::SendDm, PlatformError::Transport("down".into()));
    let first = c.now() + chrono::Duration::minutes(5);
    let id = c.daily(first, Some(2)).await;
    c.at(first + chrono::Duration::seconds(1)).await;
    let store = &c.s.store;
    let r = eventually_async(Duration::from_secs(5), "the failure recorded", async || {
        let r = store.get_reminder(&id).await.unwrap().unwrap();
        r.last_error.is_some().then_some(r)
    })
    .await;
    assert_eq!(
        (r.state, r.occurrences, r.scheduled_at),
        (ReminderState::Pending, 0, first + chrono::Duration::days(1))
    );
    c.at(first + chrono::Duration::days(1) + chrono::Duration::seconds(1))
        .await;
    let r = c.wait_occurrences(&id, 1).await;
    assert_eq!(
        r.state,
        ReminderState::Pending,
        "one of two delivered: {r:?}"
    );
    c.s.stop.cancel();
    c.s.task.await.unwrap().unwrap();
}
