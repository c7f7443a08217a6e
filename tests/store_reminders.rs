//! Store tests for reminders: creation under the per-user limit (also under concurrency),
//! ownership on cancel, the due queue, delivery, retries, failure and lateness.

use std::sync::Arc;

use air_friends::store::{NewReminder, ReminderState, Store, StoreError, WorkspaceKey};
use chrono::{Duration, Utc};

async fn open() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("r.db")).await.unwrap();
    (dir, store)
}

fn ws(user: &str) -> WorkspaceKey {
    WorkspaceKey::new("discord", user).unwrap()
}

fn new(w: &WorkspaceKey, msg: &str, in_secs: i64) -> NewReminder {
    NewReminder {
        workspace: w.clone(),
        message: msg.into(),
        scheduled_at: Utc::now() + Duration::seconds(in_secs),
    }
}

#[tokio::test]
async fn create_list_and_serialize() {
    let (_d, store) = open().await;
    let w = ws("42");
    let later = store
        .create_reminder(new(&w, "later", 7200), 20)
        .await
        .unwrap();
    let sooner = store
        .create_reminder(new(&w, "sooner", 3600), 20)
        .await
        .unwrap();
    assert!(sooner.id.starts_with("rem_"));
    assert_eq!(sooner.state, ReminderState::Pending);
    assert_eq!(
        (sooner.platform.as_str(), sooner.user_id.as_str()),
        ("discord", "42")
    );
    assert_eq!(sooner.attempts, 0);
    assert_eq!(sooner.next_attempt_at, sooner.scheduled_at);
    let pending = store.pending_reminders(&w).await.unwrap();
    assert_eq!(
        pending.iter().map(|r| r.id.clone()).collect::<Vec<_>>(),
        vec![sooner.id.clone(), later.id.clone()]
    );
    assert!(
        store
            .pending_reminders(&ws("other"))
            .await
            .unwrap()
            .is_empty()
    );
    let json = serde_json::to_value(&sooner).unwrap();
    assert_eq!(json["state"], "pending");
    assert_eq!(json["workspace"], "discord/42");
    assert!(json["scheduledAt"].is_string() && json["createdAt"].is_string());
    let blank = store.create_reminder(new(&w, "  ", 60), 20).await;
    assert!(matches!(blank, Err(StoreError::Invalid(_))));
}

#[tokio::test]
async fn the_pending_limit_is_per_user_and_frees_up_on_cancel() {
    let (_d, store) = open().await;
    let w = ws("1");
    let first = store.create_reminder(new(&w, "a", 60), 2).await.unwrap();
    store.create_reminder(new(&w, "b", 60), 2).await.unwrap();
    let err = store
        .create_reminder(new(&w, "c", 60), 2)
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::LimitReached { limit: 2 }));
    // Another user is unaffected.
    store
        .create_reminder(new(&ws("2"), "x", 60), 2)
        .await
        .unwrap();
    store.cancel_reminder(&w, &first.id).await.unwrap();
    store.create_reminder(new(&w, "c", 60), 2).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_creates_never_exceed_the_limit() {
    let (_d, store) = open().await;
    let w = ws("1");
    let barrier = Arc::new(tokio::sync::Barrier::new(20));
    let mut tasks = Vec::new();
    for i in 0..20 {
        let (store, w, barrier) = (store.clone(), w.clone(), barrier.clone());
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            store
                .create_reminder(new(&w, &format!("r{i}"), 600), 5)
                .await
        }));
    }
    let mut ok = 0;
    let mut limited = 0;
    for t in tasks {
        match t.await.unwrap() {
            Ok(_) => ok += 1,
            Err(StoreError::LimitReached { limit: 5 }) => limited += 1,
            Err(e) => panic!("unexpected {e:?}"),
        }
    }
    assert_eq!((ok, limited), (5, 15));
    assert_eq!(store.pending_reminders(&w).await.unwrap().len(), 5);
}

#[tokio::test]
async fn only_the_owner_can_cancel_and_only_once() {
    let (_d, store) = open().await;
    let owner = ws("1");
    let r = store
        .create_reminder(new(&owner, "mine", 600), 20)
        .await
        .unwrap();
    assert!(matches!(
        store.cancel_reminder(&ws("2"), &r.id).await,
        Err(StoreError::NotFound)
    ));
    assert!(matches!(
        store.cancel_reminder(&owner, "rem_missing").await,
        Err(StoreError::NotFound)
    ));
    let cancelled = store.cancel_reminder(&owner, &r.id).await.unwrap();
    assert_eq!(cancelled.state, ReminderState::Cancelled);
    assert!(matches!(
        store.cancel_reminder(&owner, &r.id).await,
        Err(StoreError::NotFound)
    ));
    assert!(store.pending_reminders(&owner).await.unwrap().is_empty());
    assert_eq!(store.next_due_at().await.unwrap(), None);
    // Still stored (nothing is deleted).
    assert_eq!(
        store.get_reminder(&r.id).await.unwrap().unwrap().state,
        ReminderState::Cancelled
    );
}

#[tokio::test]
async fn due_queue_delivery_and_lateness() {
    let (_d, store) = open().await;
    let w = ws("1");
    let mut changes = store.reminder_changes();
    let past = store
        .create_reminder(new(&w, "missed while down", -3600), 20)
        .await
        .unwrap();
    let soon = store
        .create_reminder(new(&w, "soon", 30), 20)
        .await
        .unwrap();
    store
        .create_reminder(new(&w, "tomorrow", 86_400), 20)
        .await
        .unwrap();
    assert!(changes.has_changed().unwrap(), "creates wake the scheduler");
    changes.mark_unchanged();

    assert_eq!(store.next_due_at().await.unwrap(), Some(past.scheduled_at));
    let due = store.due_reminders(Utc::now(), 10).await.unwrap();
    assert_eq!(
        due.iter().map(|r| r.id.clone()).collect::<Vec<_>>(),
        vec![past.id.clone()]
    );
    let due = store
        .due_reminders(Utc::now() + Duration::seconds(60), 10)
        .await
        .unwrap();
    assert_eq!(due.len(), 2);
    assert_eq!(
        store
            .due_reminders(Utc::now() + Duration::seconds(60), 1)
            .await
            .unwrap()
            .len(),
        1
    );

    let at = Utc::now();
    let delivered = store
        .mark_reminder_delivered(&past.id, at, true)
        .await
        .unwrap();
    assert_eq!(delivered.state, ReminderState::Delivered);
    assert!(delivered.late);
    assert_eq!(delivered.attempts, 1);
    assert_eq!(
        delivered.delivered_at.unwrap().timestamp_millis(),
        at.timestamp_millis()
    );
    assert!(matches!(
        store.mark_reminder_delivered(&past.id, at, false).await,
        Err(StoreError::NotFound)
    ));
    assert_eq!(store.next_due_at().await.unwrap(), Some(soon.scheduled_at));
    assert_eq!(store.pending_reminders(&w).await.unwrap().len(), 2);
}

#[tokio::test]
async fn failures_retry_then_fail() {
    let (_d, store) = open().await;
    let w = ws("1");
    let r = store
        .create_reminder(new(&w, "flaky", -1), 20)
        .await
        .unwrap();
    let retry_at = Utc::now() + Duration::seconds(30);
    let retried = store
        .record_reminder_failure(&r.id, "dm closed", Some(retry_at))
        .await
        .unwrap();
    assert_eq!(retried.state, ReminderState::Pending);
    assert_eq!(retried.attempts, 1);
    assert_eq!(retried.last_error.as_deref(), Some("dm closed"));
    assert_eq!(
        retried.next_attempt_at.timestamp_millis(),
        retry_at.timestamp_millis()
    );
    assert_eq!(
        retried.scheduled_at, r.scheduled_at,
        "the original time is kept"
    );
    assert!(
        store
            .due_reminders(Utc::now(), 10)
            .await
            .unwrap()
            .is_empty(),
        "not due before the retry time"
    );
    assert_eq!(
        store
            .next_due_at()
            .await
            .unwrap()
            .unwrap()
            .timestamp_millis(),
        retry_at.timestamp_millis()
    );
    let failed = store
        .record_reminder_failure(&r.id, "still closed", None)
        .await
        .unwrap();
    assert_eq!(failed.state, ReminderState::Failed);
    assert_eq!(failed.attempts, 2);
    assert_eq!(store.next_due_at().await.unwrap(), None);
    assert!(matches!(
        store.record_reminder_failure(&r.id, "x", None).await,
        Err(StoreError::NotFound)
    ));
}

#[tokio::test]
async fn pending_reminders_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.db");
    let store = Store::open(&path).await.unwrap();
    let r = store
        .create_reminder(new(&ws("1"), "survive", 5), 20)
        .await
        .unwrap();
    drop(store); // no graceful close
    let store = Store::open(&path).await.unwrap();
    assert_eq!(store.pending_reminders(&ws("1")).await.unwrap(), vec![r]);
}
