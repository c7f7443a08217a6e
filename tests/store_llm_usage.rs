//! The store's per-user model usage (`llm_usage`, schema version 2): additions per workspace and
//! UTC day, the all-users total, the same per place (`llm_usage_place`, schema version 9), and
//! the migration of a version-1 database.

use air_friends::store::{LlmUsage, SCHEMA_VERSION, Scope, Store, VoiceUsage, WorkspaceKey};
use chrono::NaiveDate;

fn ws(user: &str) -> WorkspaceKey {
    WorkspaceKey::new("discord", user).unwrap()
}

fn day(d: u32) -> NaiveDate {
    NaiveDate::from_ymd_opt(2026, 3, d).unwrap()
}

async fn open() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("db.sqlite")).await.unwrap();
    (dir, store)
}

/// Usage in a place counts toward the user's total and toward that place only.
#[tokio::test]
async fn usage_in_a_place_adds_up_there_and_overall() {
    let (_dir, store) = open().await;
    store
        .add_llm_usage_in(&ws("a"), "support", day(1), 10, 5)
        .await
        .unwrap();
    store
        .add_llm_usage_in(&ws("a"), "support", day(1), 1, 1)
        .await
        .unwrap();
    store
        .add_llm_usage_in(&ws("a"), "default", day(1), 100, 0)
        .await
        .unwrap();
    store
        .add_llm_usage_in(&ws("b"), "support", day(1), 7, 0)
        .await
        .unwrap();
    let support = store
        .llm_usage_in_place_on(day(1), &ws("a"), "support")
        .await
        .unwrap();
    assert_eq!((support.total_tokens(), support.requests), (17, 2));
    let default = store
        .llm_usage_in_place_on(day(1), &ws("a"), "default")
        .await
        .unwrap();
    assert_eq!(default.total_tokens(), 100);
    let overall = store.llm_usage_on(day(1), Some(&ws("a"))).await.unwrap();
    assert_eq!((overall.total_tokens(), overall.requests), (117, 3));
    assert_eq!(
        store
            .llm_usage_in_place_on(day(2), &ws("a"), "support")
            .await
            .unwrap(),
        LlmUsage::default()
    );
}

#[tokio::test]
async fn usage_adds_up_per_workspace_and_day() {
    let (_dir, store) = open().await;
    store.add_llm_usage(&ws("a"), day(1), 10, 5).await.unwrap();
    store.add_llm_usage(&ws("a"), day(1), 7, 3).await.unwrap();
    store.add_llm_usage(&ws("a"), day(2), 100, 1).await.unwrap();
    store.add_llm_usage(&ws("b"), day(1), 1, 1).await.unwrap();
    assert_eq!(
        store.llm_usage_on(day(1), Some(&ws("a"))).await.unwrap(),
        LlmUsage {
            input_tokens: 17,
            output_tokens: 8,
            requests: 2
        }
    );
    assert_eq!(
        store
            .llm_usage_on(day(2), Some(&ws("a")))
            .await
            .unwrap()
            .total_tokens(),
        101,
        "days are counted apart"
    );
    assert_eq!(
        store.llm_usage_on(day(1), None).await.unwrap(),
        LlmUsage {
            input_tokens: 18,
            output_tokens: 9,
            requests: 3
        },
        "None sums every workspace of the day"
    );
}

#[tokio::test]
async fn a_day_without_usage_reads_as_zero() {
    let (_dir, store) = open().await;
    assert_eq!(
        store.llm_usage_on(day(9), Some(&ws("a"))).await.unwrap(),
        LlmUsage::default()
    );
    assert_eq!(
        store.llm_usage_on(day(9), None).await.unwrap(),
        LlmUsage::default()
    );
}

#[tokio::test]
async fn concurrent_additions_are_never_lost_and_huge_counts_saturate() {
    let (_dir, store) = open().await;
    let writes: Vec<_> = (0..50)
        .map(|_| {
            let store = store.clone();
            tokio::spawn(async move { store.add_llm_usage(&ws("a"), day(3), 2, 1).await })
        })
        .collect();
    for w in writes {
        w.await.unwrap().unwrap();
    }
    let usage = store.llm_usage_on(day(3), Some(&ws("a"))).await.unwrap();
    assert_eq!(
        (usage.input_tokens, usage.output_tokens, usage.requests),
        (100, 50, 50)
    );

    store
        .add_llm_usage(&ws("big"), day(3), u64::MAX, 0)
        .await
        .unwrap();
    store
        .add_llm_usage(&ws("big"), day(3), u64::MAX, 0)
        .await
        .unwrap();
    let big = store.llm_usage_on(day(3), Some(&ws("big"))).await.unwrap();
    assert_eq!(
        big.input_tokens,
        i64::MAX as u64,
        "saturates instead of failing"
    );
}

#[tokio::test]
async fn a_version_1_database_is_migrated_and_keeps_its_memories_and_reminders() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v1.sqlite");
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch(include_str!("../src/store/schema_v1.sql"))
            .unwrap();
        conn.execute_batch(
            "INSERT INTO workspaces (id, key, next_doc) VALUES (1, 'discord/a', 1);
             INSERT INTO memories (seq, id, workspace, content, created_at, initial_visibility,
                 initial_importance, initial_enabled, visibility, importance, enabled, updated_at)
             VALUES (4294967296, 'mem_v1', 'discord/a', 'likes tea', 0, 'public', 'normal', 1,
                 'public', 'normal', 1, 0);
             INSERT INTO reminders (id, workspace, platform, user_id, message, scheduled_at,
                 created_at, state, next_attempt_at, updated_at)
             VALUES ('rem_v1', 'discord/a', 'discord', 'a', 'stretch', 4102444800000, 0,
                 'pending', 4102444800000, 0);
             PRAGMA user_version = 1;",
        )
        .unwrap();
    }
    let store = Store::open(&path).await.unwrap();
    let kept = store
        .get_memory(&ws("a"), "mem_v1", Scope::PublicOnly)
        .await
        .unwrap()
        .expect("the version-1 memory survives the migration");
    assert_eq!(kept.content, "likes tea");
    // The counts memory-stats reads were built from the existing rows.
    let stats = store
        .memory_stats(&ws("a"), Scope::PublicOnly)
        .await
        .unwrap();
    assert_eq!((stats.public.total, stats.public.enabled), (1, 1));
    store.add_llm_usage(&ws("a"), day(1), 4, 2).await.unwrap();
    // Voice is counted on the same row (v14) without adding a model request.
    let voice = VoiceUsage {
        audio_in_ms: 42_000,
        transcriptions: 1,
        ..VoiceUsage::default()
    };
    store
        .add_voice_usage(&ws("a"), day(1), voice)
        .await
        .unwrap();
    assert_eq!(
        store.voice_usage_on(day(1), Some(&ws("a"))).await.unwrap(),
        voice
    );
    assert_eq!(store.voice_usage_on(day(1), None).await.unwrap(), voice);
    // And MCP tool calls (v15).
    store.add_mcp_calls(&ws("a"), day(1), 2).await.unwrap();
    assert_eq!(store.mcp_calls_on(day(1), &ws("a")).await.unwrap(), 2);
    assert_eq!(store.mcp_calls_on(day(2), &ws("a")).await.unwrap(), 0);
    assert_eq!(
        store
            .llm_usage_on(day(1), Some(&ws("a")))
            .await
            .unwrap()
            .requests,
        1
    );
    // A reminder of version 1 is a one-time reminder after the recurring ones' columns (v13).
    let reminder = store.get_reminder("rem_v1").await.unwrap().unwrap();
    assert_eq!(
        (
            reminder.message.as_str(),
            reminder.recurrence,
            reminder.occurrences
        ),
        ("stretch", None, 0)
    );
    store.close().await.unwrap();

    let conn = rusqlite::Connection::open(&path).unwrap();
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!((version, SCHEMA_VERSION), (16, 16));
    let rows: i64 = conn
        .query_row("SELECT count(*) FROM llm_usage", [], |r| r.get(0))
        .unwrap();
    assert_eq!(rows, 1);
}
