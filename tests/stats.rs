//! `air-friends stats` through the real binary: skill calls with errors by code and latency
//! percentiles over a day and a week, memories and reminders by state per workspace, and the
//! gateway's tokens per day — from a database the test fills, and from what a real daemon
//! recorded while it answered a message (its call log is written at shutdown).

mod common;

use std::path::Path;
use std::process::{Command, Output};

use air_friends::store::analytics::{BUCKETS, SkillCallRow, bucket_of};
use air_friends::store::{
    Importance, MaintenanceRun, MemoryPatch, NewMemory, NewReminder, RunEnd, RunTrigger, Scope,
    Store, Visibility, VoiceUsage, WorkspaceKey,
};
use chrono::{Duration, Utc};
use common::TestConfig;
use common::fake_discord::CHANNEL_ID;
use common::serve_discord::{DiscordServe, DiscordSetup, WAIT, one_turn, reply_steps, text_path};

fn stats(config: &Path) -> Output {
    Command::new(common::bin())
        .arg("stats")
        .arg("--config")
        .arg(config)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .output()
        .expect("run air-friends stats")
}

fn row(hours_ago: i64, skill: &str, code: &str, latencies_ms: &[u64]) -> SkillCallRow {
    let mut buckets = [0; BUCKETS];
    for ms in latencies_ms {
        buckets[bucket_of(*ms)] += 1;
    }
    SkillCallRow {
        hour: Utc::now() - Duration::hours(hours_ago),
        skill: skill.into(),
        code: code.into(),
        calls: latencies_ms.len() as u64,
        buckets,
    }
}

fn line<'a>(out: &'a str, starts: &str) -> &'a str {
    out.lines()
        .find(|l| l.trim_start().starts_with(starts))
        .unwrap_or_else(|| panic!("no line for {starts:?} in:\n{out}"))
}

/// What `air-friends stats` printed, having succeeded.
fn stats_text(config: &Path) -> String {
    let out = stats(config);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn words(l: &str) -> Vec<&str> {
    l.split_whitespace().collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_reports_skills_workspaces_and_tokens() {
    let cfg = TestConfig::new("");
    let db = cfg.dir.path().join("data").join("air-friends.db");
    let store = Store::open(&db).await.unwrap();
    // send-reply: 98 fast calls and 2 slow ones today, 2 rate-limited today, 50 three days ago.
    let mut fast = vec![3; 98];
    fast.extend([400, 400]);
    store
        .add_skill_calls(vec![
            row(0, "send-reply", "OK", &fast),
            row(0, "send-reply", "RATE_LIMITED", &[1, 1]),
            row(72, "send-reply", "OK", &vec![30; 50]),
            row(72, "memory-search", "INVALID_PARAMS", &[2]),
            row(24 * 9, "memory-save", "OK", &[5]),
        ])
        .await
        .unwrap();
    // The same hour again adds up.
    store
        .add_skill_calls(vec![row(0, "send-reply", "OK", &[3])])
        .await
        .unwrap();
    let alice = WorkspaceKey::new("discord", "111").unwrap();
    let mut ids = Vec::new();
    for (content, visibility, importance) in [
        ("likes tea", Visibility::Public, Importance::High),
        ("a secret", Visibility::Private, Importance::Normal),
        ("old news", Visibility::Public, Importance::Normal),
    ] {
        let m = store
            .save_memory(NewMemory {
                workspace: alice.clone(),
                content: content.into(),
                visibility,
                importance,
            })
            .await
            .unwrap();
        ids.push(m.id);
    }
    store
        .patch_memory(
            &alice,
            &ids[2],
            MemoryPatch {
                enabled: Some(false),
                ..Default::default()
            },
            Scope::IncludePrivate,
        )
        .await
        .unwrap();
    let reminder = store
        .create_reminder(
            NewReminder {
                workspace: alice.clone(),
                message: "stretch".into(),
                scheduled_at: Utc::now() + Duration::hours(1),
            },
            10,
        )
        .await
        .unwrap();
    store
        .create_reminder(
            NewReminder {
                workspace: alice.clone(),
                message: "water".into(),
                scheduled_at: Utc::now() + Duration::hours(2),
            },
            10,
        )
        .await
        .unwrap();
    store.cancel_reminder(&alice, &reminder.id).await.unwrap();
    store
        .add_llm_usage(&alice, Utc::now().date_naive(), 1200, 80)
        .await
        .unwrap();
    store
        .add_llm_usage(&alice, Utc::now().date_naive(), 300, 20)
        .await
        .unwrap();
    // Voice: two voice messages transcribed today (1.5 minutes) and one reply spoken.
    let voice = VoiceUsage {
        audio_in_ms: 60_000,
        transcriptions: 1,
        ..VoiceUsage::default()
    };
    store
        .add_voice_usage(&alice, Utc::now().date_naive(), voice)
        .await
        .unwrap();
    let voice = VoiceUsage {
        audio_in_ms: 30_000,
        transcriptions: 1,
        audio_out_ms: 12_000,
        speeches: 1,
    };
    store
        .add_voice_usage(&alice, Utc::now().date_naive(), voice)
        .await
        .unwrap();
    // Memory maintenance of another user: two public runs this week (the newest a dry run),
    // one private, and one public run too old to count.
    let bob = WorkspaceKey::new("misskey", "222").unwrap();
    for (days_ago, visibility, outcome, dry_run, saved, disabled, tokens) in [
        (9, Visibility::Public, "failed", false, 5, 5, 5),
        (3, Visibility::Public, "completed", false, 2, 5, 900),
        (1, Visibility::Public, "skipped", true, 0, 0, 0),
        (1, Visibility::Private, "completed", false, 1, 2, 300),
    ] {
        let at = Utc::now() - Duration::days(days_ago);
        store
            .record_maintenance_run(MaintenanceRun {
                workspace: bob.clone(),
                visibility,
                started_at: at,
                finished_at: at,
                outcome: outcome.into(),
                dry_run,
                read: 10,
                saved,
                disabled,
                tokens,
            })
            .await
            .unwrap();
    }
    // Schedules: two posts and a skipped missed run of `morning`, a failed run of `digest`.
    for (name, outcome, tokens) in [
        ("morning", "posted", 400),
        ("morning", "posted", 500),
        ("digest", "model_failed", 0),
    ] {
        let id = store
            .schedule_run_started(name, Utc::now(), RunTrigger::Timetable)
            .await
            .unwrap();
        store
            .schedule_run_finished(
                id,
                RunEnd {
                    outcome: outcome.into(),
                    detail: (outcome != "posted")
                        .then(|| "every model request of the run failed".into()),
                    tokens,
                },
            )
            .await
            .unwrap();
    }
    store
        .schedule_run_skipped(
            "morning",
            Utc::now(),
            RunTrigger::CatchUp,
            "skipped_missed",
            "2 runs missed while the daemon was down".into(),
        )
        .await
        .unwrap();
    store.close().await.unwrap();

    let text = stats_text(&cfg.path);
    let schedules = text
        .split("Schedules (last 7 days)")
        .nth(1)
        .expect("the schedules section");
    assert_eq!(
        words(line(schedules, "morning"))[..6],
        ["morning", "3", "2", "1", "0", "900"],
        "{text}"
    );
    assert!(
        line(schedules, "morning")
            .ends_with("catch_up skipped_missed (2 runs missed while the daemon was down)"),
        "{text}"
    );
    assert_eq!(
        words(line(schedules, "digest"))[..6],
        ["digest", "1", "0", "0", "1", "0"],
        "{text}"
    );
    assert!(
        line(schedules, "digest").ends_with("model_failed (every model request of the run failed)"),
        "{text}"
    );
    // skill, day: calls errors p50 p99 | week: calls errors p50 p99, errors by code.
    assert_eq!(
        words(line(&text, "send-reply")),
        [
            "send-reply",
            "103",
            "2",
            "≤5ms",
            "≤500ms",
            "|",
            "153",
            "2",
            "≤5ms",
            "≤500ms",
            "RATE_LIMITED",
            "2"
        ],
        "{text}"
    );
    assert_eq!(
        words(line(&text, "memory-search")),
        [
            "memory-search",
            "0",
            "0",
            "-",
            "-",
            "|",
            "1",
            "1",
            "≤2ms",
            "≤2ms",
            "INVALID_PARAMS",
            "1"
        ],
        "{text}"
    );
    assert!(!text.contains("memory-save"), "older than a week: {text}");
    assert_eq!(
        words(line(&text, "discord/111")),
        [
            "discord/111",
            "2",
            "1",
            "1",
            "1",
            "cancelled",
            "1,",
            "pending",
            "1"
        ],
        "{text}"
    );
    let maintenance = text
        .split("Memory maintenance (last 7 days)")
        .nth(1)
        .expect("the maintenance section");
    let rows: Vec<Vec<&str>> = maintenance
        .lines()
        .filter(|l| l.trim_start().starts_with("misskey/222"))
        .map(|l| words(l)[..6].to_vec())
        .collect();
    assert_eq!(
        rows,
        [
            ["misskey/222", "public", "2", "2", "5", "900"],
            ["misskey/222", "private", "1", "1", "2", "300"],
        ],
        "{text}"
    );
    assert!(maintenance.contains("skipped (1 dry)"), "{text}");
    let today = Utc::now().date_naive().format("%Y-%m-%d").to_string();
    assert_eq!(
        words(line(&text, &today)),
        [today.as_str(), "1500", "100", "2"],
        "{text}"
    );
    let voice = text
        .split("Voice per day (all users)")
        .nth(1)
        .expect("the voice section");
    assert_eq!(
        words(line(voice, &today)),
        [today.as_str(), "2", "1.5", "1", "0.2"],
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_records_its_skill_calls_for_stats() {
    let mut bot = DiscordServe::start(|files| DiscordSetup {
        script: one_turn(reply_steps(&text_path(files, "reply.md"))),
        texts: vec![("reply.md", "Hello!".to_owned())],
        ..DiscordSetup::default()
    })
    .await;
    bot.mention("hi");
    bot.wait_bot_messages(CHANNEL_ID, 1).await;
    bot.wait_interactions_finished(1);
    // A clean stop writes the call log's last counts.
    bot.daemon.terminate();
    let status = tokio::task::block_in_place(|| bot.daemon.wait_exit(WAIT));
    assert!(status.success(), "{status:?}");
    let out = stats(&bot.config.path);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let w = words(line(&text, "send-reply"));
    assert_eq!((w[1], w[2], w[6], w[7]), ("1", "0", "1", "0"), "{text}");
}

#[test]
fn stats_without_a_database_says_where_it_looked() {
    let cfg = TestConfig::new("");
    let out = stats(&cfg.path);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no database at"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_shows_the_last_days_unanswered_messages_by_state_and_reason() {
    use air_friends::store::{InboxRecord, InboxState};
    let cfg = TestConfig::new("");
    let db = cfg.dir.path().join("data").join("air-friends.db");
    let store = Store::open(&db).await.unwrap();
    let now = Utc::now();
    for (id, hours_ago, state, reason) in [
        ("1", 1, InboxState::Answered, None),
        ("2", 2, InboxState::Skipped, Some("rate_limited")),
        ("3", 3, InboxState::Skipped, Some("rate_limited")),
        ("4", 4, InboxState::Failed, Some("model_failed")),
        ("5", 30, InboxState::Skipped, Some("too_old")),
    ] {
        store
            .inbox_record(InboxRecord {
                platform: "discord".into(),
                message_id: id.into(),
                channel_id: "c".into(),
                user_id: "u".into(),
                received_at: now - Duration::hours(hours_ago),
                payload: "{}".into(),
            })
            .await
            .unwrap();
        store
            .inbox_settle("discord", id, state, reason)
            .await
            .unwrap();
    }
    store.close().await.unwrap();
    let text = stats_text(&cfg.path);
    let section = text
        .split("Unanswered messages (last 24 hours)")
        .nth(1)
        .unwrap_or_else(|| panic!("no unanswered section:\n{text}"));
    let rows: Vec<Vec<&str>> = section.lines().skip(2).map(words).collect();
    assert_eq!(
        rows,
        [
            vec!["failed", "model_failed", "1"],
            vec!["skipped", "rate_limited", "2"]
        ],
        "{text}"
    );
}
