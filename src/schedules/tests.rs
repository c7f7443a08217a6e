//! The scheduler with a stand-in for the agent turn: runs of one schedule never overlap, a
//! missed run is caught up once or skipped by its age, a run by hand answers how it ended, and
//! every run and skip is recorded.

use std::sync::atomic::{AtomicUsize, Ordering};

use super::*;
use crate::config::ScheduleConfig;
use crate::observability::Metrics;

/// Counts runs and how many went on at once; each takes `hold`.
struct FakeRuns {
    hold: Duration,
    started: AtomicUsize,
    now: AtomicUsize,
    most: AtomicUsize,
    tasks: Mutex<Vec<ScheduledTask>>,
}

impl FakeRuns {
    fn new(hold: Duration) -> Arc<Self> {
        Arc::new(Self {
            hold,
            started: AtomicUsize::new(0),
            now: AtomicUsize::new(0),
            most: AtomicUsize::new(0),
            tasks: Mutex::new(Vec::new()),
        })
    }
}

#[async_trait]
impl ScheduledRuns for FakeRuns {
    async fn run_scheduled(&self, task: &ScheduledTask, _stop: &CancellationToken) -> ScheduledEnd {
        self.started.fetch_add(1, Ordering::SeqCst);
        let at_once = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(at_once, Ordering::SeqCst);
        self.tasks.locked().push(task.clone());
        tokio::time::sleep(self.hold).await;
        self.now.fetch_sub(1, Ordering::SeqCst);
        ScheduledEnd {
            outcome: "posted",
            detail: None,
            tokens: 7,
        }
    }
}

/// Waits (up to 10 s) until `done()`.
async fn eventually(done: impl Fn() -> bool) {
    for _ in 0..1000 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("not done within 10 s");
}

struct Setup {
    _dir: tempfile::TempDir,
    store: Store,
    draining: CancellationToken,
}

async fn setup() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("schedules")).unwrap();
    std::fs::write(dir.path().join("schedules/task.md"), "Say good morning.").unwrap();
    let store = Store::open(&dir.path().join("air.db")).await.unwrap();
    Setup {
        _dir: dir,
        store,
        draining: CancellationToken::new(),
    }
}

fn schedule(setup: &Setup, name: &str, cron: &str, catch_up_minutes: u64) -> Schedule {
    let config = ScheduleConfig {
        name: name.into(),
        cron: cron.into(),
        place: "discord/guild/1/channel/2".into(),
        prompt: "task.md".into(),
        catch_up_minutes,
        ..ScheduleConfig::default()
    };
    Schedule::new(&config, setup._dir.path()).unwrap()
}

fn scheduler(setup: &Setup, schedules: Vec<Schedule>, runs: Arc<FakeRuns>) -> Scheduler {
    scheduler_with(
        setup,
        schedules,
        runs,
        Arc::new(tokio::sync::Semaphore::new(4)),
    )
}

fn scheduler_with(
    setup: &Setup,
    schedules: Vec<Schedule>,
    runs: Arc<FakeRuns>,
    permits: Arc<tokio::sync::Semaphore>,
) -> Scheduler {
    let names: Vec<String> = schedules.iter().map(|s| s.name().to_owned()).collect();
    Scheduler::new(SchedulerParts {
        metrics: ScheduleMetrics::new(&Metrics::new(), names.iter().map(String::as_str)),
        schedules,
        store: setup.store.clone(),
        runs,
        draining: setup.draining.clone(),
        stop: CancellationToken::new(),
        permits,
    })
}

async fn outcomes(store: &Store) -> Vec<(String, String, String)> {
    let mut runs = store
        .schedule_runs_since(DateTime::<Utc>::MIN_UTC, 1000)
        .await
        .unwrap();
    runs.reverse();
    runs.into_iter()
        .map(|r| (r.name, r.trigger, r.outcome))
        .collect()
}

#[tokio::test]
async fn runs_of_one_schedule_never_overlap() {
    let s = setup().await;
    // Due every second, each run takes 2.5 s.
    let runs = FakeRuns::new(Duration::from_millis(2500));
    let every_second = schedule(&s, "tick", "* * * * * *", 30);
    let job = tokio::spawn(scheduler(&s, vec![every_second], runs.clone()).run());
    tokio::time::sleep(Duration::from_millis(4200)).await;
    s.draining.cancel();
    job.await.unwrap().unwrap();
    assert_eq!(
        runs.most.load(Ordering::SeqCst),
        1,
        "two runs went on at once"
    );
    let recorded = outcomes(&s.store).await;
    let posted = recorded.iter().filter(|r| r.2 == "posted").count();
    let overlaps = recorded.iter().filter(|r| r.2 == SKIPPED_OVERLAP).count();
    assert!(posted >= 1 && overlaps >= 2, "{recorded:?}");
    assert_eq!(posted, runs.started.load(Ordering::SeqCst));
    let task = runs.tasks.locked()[0].clone();
    assert_eq!(
        (task.task.as_str(), task.channel.as_str()),
        ("Say good morning.", "2")
    );
    s.store.close().await.unwrap();
}

#[tokio::test]
async fn a_young_missed_run_runs_once_and_an_old_one_is_recorded_as_skipped() {
    let s = setup().await;
    let young = schedule(&s, "young", "*/10 * * * * *", 30);
    // Due at the start of 2026: eleven months late by now.
    let old = schedule(&s, "old", "0 0 1 1 *", 30);
    let now = Utc::now();
    for (sch, next) in [
        (&young, now - chrono::Duration::seconds(25)),
        (
            &old,
            DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z")
                .unwrap()
                .to_utc(),
        ),
    ] {
        s.store
            .schedule_set_next(sch.name(), &sch.timetable_key(), Some(next))
            .await
            .unwrap();
    }
    let runs = FakeRuns::new(Duration::ZERO);
    let job = tokio::spawn(scheduler(&s, vec![young, old], runs.clone()).run());
    eventually(|| runs.started.load(Ordering::SeqCst) >= 1).await;
    s.draining.cancel();
    job.await.unwrap().unwrap();
    let recorded = outcomes(&s.store).await;
    let of = |name: &str| -> Vec<(String, String)> {
        recorded
            .iter()
            .filter(|r| r.0 == name)
            .map(|r| (r.1.clone(), r.2.clone()))
            .collect()
    };
    // The young schedule missed two or three runs: the latest ran, the earlier ones are one
    // skipped record.
    let young_runs = of("young");
    assert_eq!(
        young_runs.first(),
        Some(&("catch_up".to_owned(), SKIPPED_MISSED.to_owned())),
        "{young_runs:?}"
    );
    assert!(young_runs.contains(&("catch_up".to_owned(), "posted".to_owned())));
    assert_eq!(
        of("old"),
        [("catch_up".to_owned(), SKIPPED_MISSED.to_owned())]
    );
    // Each next run is ahead of now again.
    for state in s.store.schedule_states().await.unwrap() {
        assert!(state.next_run_at.unwrap() > now, "{state:?}");
    }
    s.store.close().await.unwrap();
}

#[tokio::test]
async fn a_run_by_hand_answers_how_it_ended_and_refuses_while_one_runs() {
    let s = setup().await;
    let runs = FakeRuns::new(Duration::from_millis(600));
    let nightly = schedule(&s, "nightly", "0 3 * * *", 30);
    let scheduler = scheduler(&s, vec![nightly], runs.clone());
    assert!(matches!(
        scheduler.run_now("nope").await,
        Err(TriggerError::Unknown(_))
    ));
    let first = tokio::spawn({
        let scheduler = scheduler.clone();
        async move { scheduler.run_now("nightly").await }
    });
    eventually(|| runs.started.load(Ordering::SeqCst) == 1).await;
    assert!(matches!(
        scheduler.run_now("nightly").await,
        Err(TriggerError::Running(_))
    ));
    let end = first.await.unwrap().unwrap();
    assert_eq!((end.outcome, end.tokens), ("posted", 7));
    assert_eq!(
        outcomes(&s.store).await,
        [("nightly".into(), "manual".into(), "posted".into())]
    );
    s.draining.cancel();
    assert!(matches!(
        scheduler.run_now("nightly").await,
        Err(TriggerError::Draining)
    ));
    s.store.close().await.unwrap();
}

/// A run holds one of the sessions running at once, as a conversation's turn does: with every
/// permit taken it waits, and starts when one is free.
#[tokio::test]
async fn a_run_waits_for_a_free_session_permit() {
    let s = setup().await;
    let runs = FakeRuns::new(Duration::ZERO);
    let permits = Arc::new(tokio::sync::Semaphore::new(1));
    let busy = permits.clone().acquire_owned().await.unwrap();
    let nightly = schedule(&s, "nightly", "0 3 * * *", 30);
    let scheduler = scheduler_with(&s, vec![nightly], runs.clone(), permits.clone());
    let run = tokio::spawn(async move { scheduler.run_now("nightly").await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        runs.started.load(Ordering::SeqCst),
        0,
        "ran without a permit"
    );
    drop(busy);
    let end = run.await.unwrap().unwrap();
    assert_eq!(end.outcome, "posted");
    assert_eq!(permits.available_permits(), 1, "the permit is given back");
    s.store.close().await.unwrap();
}

/// A reload's schedules replace the running ones: a new schedule runs on its timetable, a
/// removed one is no longer known, an unchanged one keeps its next run.
#[tokio::test]
async fn replaced_schedules_take_effect_without_a_restart() {
    let s = setup().await;
    let runs = FakeRuns::new(Duration::ZERO);
    let kept = schedule(&s, "kept", "0 3 * * *", 30);
    let gone = schedule(&s, "gone", "0 4 * * *", 30);
    let scheduler = scheduler(&s, vec![kept, gone], runs.clone());
    let job = tokio::spawn(scheduler.clone().run());
    let next_of = |name: &'static str| {
        let store = s.store.clone();
        async move {
            store
                .schedule_states()
                .await
                .unwrap()
                .into_iter()
                .find(|st| st.name == name)
                .and_then(|st| st.next_run_at)
        }
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let kept_next = next_of("kept").await.expect("kept has a next run");
    scheduler.replace(vec![
        schedule(&s, "kept", "0 3 * * *", 30),
        schedule(&s, "tick", "* * * * * *", 30),
    ]);
    eventually(|| runs.started.load(Ordering::SeqCst) >= 1).await;
    let task = runs.tasks.locked()[0].clone();
    assert_eq!(task.name, "tick");
    assert_eq!(
        next_of("kept").await,
        Some(kept_next),
        "an unchanged schedule keeps its run"
    );
    assert!(matches!(
        scheduler.run_now("gone").await,
        Err(TriggerError::Unknown(_))
    ));
    s.draining.cancel();
    job.await.unwrap().unwrap();
    s.store.close().await.unwrap();
}
