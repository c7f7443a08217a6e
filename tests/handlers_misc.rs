//! The handler registry (specs from manifests, configuration switches), react-message,
//! fetch-context and the reminder skills, through the real Skill API router.

mod handlers_support;

use std::path::Path;
use std::sync::Arc;

use air_friends::config::{MemoryConfig, RemindersConfig, SkillsConfig};
use air_friends::handlers::{BUILTIN_SKILLS, BuildError, Clock, HandlerDeps, build_registry};
use air_friends::platform::fake::{Call, FakePlatform, Op};
use air_friends::platform::{
    CustomEmoji, Origin, PlatformAdapter, PlatformRegistry, ReactionEmoji,
};
use air_friends::store::{Store, WorkspaceKey};
use chrono::{DateTime, Duration, SecondsFormat, Utc};
use handlers_support::{Options, app, app_with, copy_tree, modified_skills, shipped_skills};
use serde_json::json;

async fn deps(dir: &Path) -> HandlerDeps {
    HandlerDeps {
        store: Store::open(&dir.join("db.sqlite")).await.expect("store"),
        platforms: PlatformRegistry::new()
            .with(Arc::new(FakePlatform::discord()) as Arc<dyn PlatformAdapter>),
        skills_config: SkillsConfig::default(),
        reminders_config: RemindersConfig::default(),
        memory_config: MemoryConfig::default(),
        clock: Clock::system(),
        semantic: None,
        speaker: None,
    }
}

#[tokio::test]
async fn specs_come_from_the_manifests() {
    let dir = tempfile::tempdir().expect("tempdir");
    let loaded = shipped_skills();
    let registry = build_registry(deps(dir.path()).await, &loaded).expect("registry");
    assert_eq!(registry.names(), BUILTIN_SKILLS.to_vec());
    for name in BUILTIN_SKILLS {
        let spec = registry.get(name).expect("registered").spec().clone();
        assert_eq!(
            Some(&spec.input_schema),
            loaded.input_schema(name),
            "{name}"
        );
        let limit = loaded.rate_limit(name).expect("every built-in has a limit");
        let got = spec.rate_limit.expect("rate limit");
        assert_eq!(
            (got.window_ms, got.max_requests, got.burst),
            (limit.window_ms, limit.max_requests, limit.burst),
            "{name}"
        );
        let uploads = name == "send-file" || name == "send-voice";
        assert_eq!(spec.cacheable, !uploads, "{name}");
        assert_eq!(
            spec.enabled, !uploads,
            "send-file is off by default, send-voice without a speech service"
        );
    }
}

#[tokio::test]
async fn a_missing_builtin_manifest_is_an_error_and_operator_skills_are_not_served() {
    let dir = tempfile::tempdir().expect("tempdir");
    let without = modified_skills(|skills| {
        std::fs::remove_dir_all(skills.join("react-message")).expect("rm");
    });
    let err = build_registry(deps(dir.path()).await, &without).expect_err("missing");
    assert!(matches!(&err, BuildError::MissingManifest(name) if name == "react-message"));
    assert!(
        err.to_string()
            .contains("skills/react-message/manifest.json")
    );

    let with_extra = modified_skills(|skills| {
        let fixture = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/skills/thirdparty/agent-browser");
        copy_tree(&fixture, &skills.join("agent-browser"));
    });
    assert!(with_extra.get("agent-browser").is_some());
    let registry = build_registry(deps(dir.path()).await, &with_extra).expect("registry");
    assert!(registry.get("agent-browser").is_none());
    assert_eq!(registry.len(), 15);
}

#[tokio::test]
async fn disabled_skills_answer_503() {
    let mut options = Options::default();
    options.skills.disabled = vec!["fetch-context".into()];
    options.skills.send_file.enabled = false;
    options.reminders.enabled = false;
    let app = app_with(options).await;
    let s = app.dm_session("u1");
    for (skill, params) in [
        ("fetch-context", json!({"type": "recent_messages"})),
        ("send-file", json!({"filePaths": ["a.txt"]})),
        (
            "set-reminder",
            json!({"scheduledAt": "2099-01-01T00:00:00Z", "message": "x"}),
        ),
        ("list-reminders", json!({})),
        ("cancel-reminder", json!({"reminderId": "rem_1"})),
    ] {
        let r = app.call(&s, skill, params).await;
        assert_eq!(r.error(503), "SKILL_DISABLED", "{skill}");
    }
    app.call(&s, "memory-stats", json!({})).await.data();
    let (tx, _rx) = tokio::sync::oneshot::channel();
    let reply = app
        .user_commands()
        .execute(&air_friends::platform::CommandInvocation {
            origin: Origin {
                platform: air_friends::platform::PlatformKind::Discord,
                channel_id: "dm:u1".into(),
                guild_id: None,
                user_id: "u1".into(),
                username: "u1".into(),
                is_dm: true,
            },
            skill: "list-reminders".into(),
            parameters: serde_json::Map::new(),
            message_id: None,
            reply: tx,
        })
        .await;
    assert!(reply.is_error);
    assert!(reply.text.contains("disabled"), "{}", reply.text);
}

#[tokio::test]
async fn manifest_rate_limits_are_enforced_per_user() {
    let options = Options {
        loaded: shipped_skills(),
        ..Options::default()
    };
    let app = app_with(options).await;
    let s = app.dm_session("u1");
    // memory-export: 3 calls per 10 minutes.
    for format in ["markdown", "json"] {
        app.call(&s, "memory-export", json!({ "format": format }))
            .await
            .data();
    }
    app.call(&s, "memory-export", json!({"importance": "high"}))
        .await
        .data();
    let r = app
        .call(&s, "memory-export", json!({"importance": "normal"}))
        .await;
    assert_eq!(r.error(429), "RATE_LIMITED");
    assert_eq!(app.discord.call_count(Op::SendDmFiles), 3);
}

#[tokio::test]
async fn a_second_reaction_replaces_the_first() {
    let app = app().await;
    let s = app.guild_session("u1");
    let trigger = s.trigger();
    let data = app
        .call(&s, "react-message", json!({"emoji": "👍"}))
        .await
        .data()
        .clone();
    assert_eq!(data, json!({"emoji": "👍", "messageId": trigger}));
    assert!(s.registered.handle.responded());
    app.call(&s, "react-message", json!({"emoji": "❤️"}))
        .await
        .data();
    assert_eq!(
        app.discord.reactions("guild-chan", &trigger),
        vec![ReactionEmoji::Unicode("❤️".into())]
    );
    let ops: Vec<Op> = app.discord.calls().iter().map(Call::op).collect();
    assert_eq!(
        ops,
        [Op::AddReaction, Op::RemoveReaction, Op::AddReaction],
        "old removed, then new added"
    );
}

#[tokio::test]
async fn reactions_need_a_trigger_and_a_real_emoji() {
    let app = app().await;
    let s = app.triggerless_session("u1", false);
    let r = app.call(&s, "react-message", json!({"emoji": "👍"})).await;
    assert_eq!(r.error(403), "FORBIDDEN_CONTEXT");

    let s = app.guild_session("u1");
    let r = app
        .call(&s, "react-message", json!({"emoji": "thumbsup"}))
        .await;
    assert_eq!(r.error(400), "INVALID_PARAMS");
    assert_eq!(r.body["details"][0]["path"], "/emoji");
    let r = app
        .call(&s, "react-message", json!({"emoji": ":nope:"}))
        .await;
    assert_eq!(r.error(400), "INVALID_PARAMS", "unknown custom emoji");
    assert!(!s.registered.handle.responded());

    app.discord.set_channel_emojis(
        "guild-chan",
        vec![CustomEmoji {
            name: "blob".into(),
            id: Some("42".into()),
            animated: false,
        }],
    );
    let data = app
        .call(&s, "react-message", json!({"emoji": ":blob:"}))
        .await
        .data()
        .clone();
    assert_eq!(data["emoji"], ":blob:");
    assert_eq!(app.discord.reactions("guild-chan", &s.trigger()).len(), 1);
}

#[tokio::test]
async fn fetch_context_returns_history_oldest_first_search_and_user_info() {
    let app = app().await;
    for i in 1..=5 {
        app.discord
            .push_user_message("guild-chan", "u2", &format!("message {i} about cats"));
    }
    let s = app.guild_session("u1");
    let data = app
        .call(
            &s,
            "fetch-context",
            json!({"type": "recent_messages", "limit": 3}),
        )
        .await
        .data()
        .clone();
    let texts: Vec<&str> = data["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .filter_map(|m| m["content"].as_str())
        .collect();
    assert_eq!(
        texts,
        ["message 4 about cats", "message 5 about cats", "hello bot"]
    );
    for key in [
        "messageId",
        "userId",
        "username",
        "content",
        "timestamp",
        "isBot",
    ] {
        assert!(data["messages"][0].get(key).is_some(), "{key}");
    }

    let r = app
        .call(&s, "fetch-context", json!({"type": "search_messages"}))
        .await;
    assert_eq!(r.error(400), "INVALID_PARAMS");
    assert_eq!(r.body["details"][0]["path"], "/query");
    let data = app
        .call(
            &s,
            "fetch-context",
            json!({"type": "search_messages", "query": "CATS", "limit": 2}),
        )
        .await
        .data()
        .clone();
    let texts: Vec<&str> = data["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .filter_map(|m| m["content"].as_str())
        .collect();
    assert_eq!(texts, ["message 4 about cats", "message 5 about cats"]);

    let data = app
        .call(&s, "fetch-context", json!({"type": "user_info"}))
        .await
        .data()
        .clone();
    assert_eq!(
        data,
        json!({"userId": "u1", "username": "u1", "displayName": "u1", "platform": "discord", "isDm": false})
    );
}

fn at(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

fn fixed_now() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2030-06-01T12:00:00Z")
        .map(|d| d.with_timezone(&Utc))
        .expect("time")
}

fn reminder_options() -> Options {
    let mut options = Options {
        clock: Clock::from_fn(fixed_now),
        ..Options::default()
    };
    options.reminders.max_reminders_per_user = 2;
    options
}

#[tokio::test]
async fn reminders_work_only_in_dms() {
    let app = app_with(reminder_options()).await;
    let s = app.guild_session("u1");
    for (skill, params) in [
        (
            "set-reminder",
            json!({"scheduledAt": at(fixed_now() + Duration::hours(1)), "message": "x"}),
        ),
        ("list-reminders", json!({})),
        ("cancel-reminder", json!({"reminderId": "rem_x"})),
    ] {
        let r = app.call(&s, skill, params).await;
        assert_eq!(r.error(403), "FORBIDDEN_CONTEXT", "{skill}");
    }
}

#[tokio::test]
async fn set_reminder_checks_the_time_window_and_allows_one_per_session() {
    let app = app_with(reminder_options()).await;
    let s = app.dm_session("u1");
    for (when, words) in [
        (fixed_now() + Duration::seconds(30), "too soon"),
        (fixed_now() - Duration::hours(1), "too soon"),
        (fixed_now() + Duration::days(367), "too far ahead"),
    ] {
        let r = app
            .call(
                &s,
                "set-reminder",
                json!({"scheduledAt": at(when), "message": "drink water"}),
            )
            .await;
        assert_eq!(r.error(400), "INVALID_PARAMS");
        assert!(
            r.body["details"][0]["problem"]
                .as_str()
                .is_some_and(|p| p.contains(words)),
            "{}",
            r.body
        );
    }
    let when = at(fixed_now() + Duration::days(366));
    let data = app
        .call(
            &s,
            "set-reminder",
            json!({"scheduledAt": when, "message": "<reminder>Drink\\nwater</reminder>"}),
        )
        .await
        .data()
        .clone();
    assert_eq!(data["scheduledAt"], when);
    let id = data["reminderId"].as_str().expect("id");
    let stored = app
        .store
        .get_reminder(id)
        .await
        .expect("get")
        .expect("stored");
    assert_eq!(stored.message, "Drink\nwater");
    assert_eq!(stored.user_id, "u1");

    let r = app
        .call(
            &s,
            "set-reminder",
            json!({"scheduledAt": at(fixed_now() + Duration::hours(2)), "message": "again"}),
        )
        .await;
    assert_eq!(r.error(429), "QUOTA_EXCEEDED", "one per session");
    assert!(!s.terminated());
}

/// A recurring reminder: its repetition and next times in the answer, the place's zone unless
/// one is named, shown once by list-reminders with how it repeats, cancelled as a series; its
/// flags without `every` and an unknown zone are refused with the flag named.
#[tokio::test]
async fn a_recurring_reminder_repeats_in_the_places_zone_and_is_cancelled_as_a_series() {
    let app = app_with(reminder_options()).await;
    let s = app.dm_session("u1");
    let first = fixed_now() + Duration::hours(1);
    let data = app
        .call(
            &s,
            "set-reminder",
            json!({"scheduledAt": at(first), "message": "water the plants", "every": "week", "count": 3}),
        )
        .await
        .data()
        .clone();
    assert_eq!(
        data["repeats"],
        json!({"every": "week", "timeZone": "UTC", "count": 3})
    );
    assert_eq!(
        data["then"],
        json!([
            at(first + Duration::weeks(1)),
            at(first + Duration::weeks(2))
        ])
    );
    let id = data["reminderId"].as_str().unwrap().to_owned();
    let list = app.call(&s, "list-reminders", json!({})).await;
    assert_eq!(list.data()["count"], 1);
    assert_eq!(
        list.data()["reminders"][0]["repeats"],
        json!({"every": "week", "timeZone": "UTC", "count": 3, "delivered": 0})
    );
    let cancelled = app
        .call(&s, "cancel-reminder", json!({"reminderId": id}))
        .await
        .data()
        .clone();
    assert_eq!(cancelled["series"], true);

    for (extra, path) in [
        (json!({"count": 2}), "/count"),
        (json!({"every": "hour"}), "/every"),
        (
            json!({"every": "day", "timeZone": "Mars/Base"}),
            "/timeZone",
        ),
    ] {
        let s = app.dm_session("u1");
        let mut params = json!({"scheduledAt": at(first), "message": "x"});
        params
            .as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        let r = app.call(&s, "set-reminder", params).await;
        assert_eq!(r.error(400), "INVALID_PARAMS", "{path}");
        assert!(r.body.to_string().contains(path), "{path}: {}", r.body);
    }
}

#[tokio::test]
async fn the_per_user_limit_and_ownership_are_enforced() {
    let app = app_with(reminder_options()).await;
    let mut ids = Vec::new();
    for hours in 1..=2 {
        let s = app.dm_session("u1");
        let data = app
            .call(
                &s,
                "set-reminder",
                json!({"scheduledAt": at(fixed_now() + Duration::hours(hours)), "message": format!("r{hours}")}),
            )
            .await
            .data()
            .clone();
        ids.push(data["reminderId"].as_str().expect("id").to_owned());
    }
    let s = app.dm_session("u1");
    let r = app
        .call(
            &s,
            "set-reminder",
            json!({"scheduledAt": at(fixed_now() + Duration::hours(3)), "message": "r3"}),
        )
        .await;
    assert_eq!(r.error(429), "QUOTA_EXCEEDED");
    assert!(r.message().contains("cancel-reminder"), "{}", r.message());

    let list = app.call(&s, "list-reminders", json!({})).await;
    let data = list.data();
    assert_eq!(data["count"], 2);
    assert_eq!(data["reminders"][0]["id"], ids[0], "soonest first");
    assert_eq!(data["reminders"][0]["message"], "r1");
    for key in ["id", "message", "scheduledAt", "createdAt"] {
        assert!(data["reminders"][0].get(key).is_some(), "{key}");
    }

    let stranger = app.dm_session("u2");
    let r = app
        .call(&stranger, "cancel-reminder", json!({"reminderId": ids[0]}))
        .await;
    assert_eq!(r.error(404), "NOT_FOUND", "not theirs");
    let theirs = app.call(&stranger, "list-reminders", json!({})).await;
    assert_eq!(theirs.data()["count"], 0);

    let data = app
        .call(&s, "cancel-reminder", json!({"reminderId": ids[0]}))
        .await
        .data()
        .clone();
    assert_eq!(
        data,
        json!({"reminderId": ids[0], "cancelled": true, "series": false})
    );
    let pending = app
        .store
        .pending_reminders(&WorkspaceKey::new("discord", "u1").expect("key"))
        .await
        .expect("pending");
    assert_eq!(pending.len(), 1);
}
