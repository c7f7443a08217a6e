//! memory-save / -search / -patch / -stats / -export through the real Skill API router, with the
//! visibility rules (private memories never returned, counted, patched or exported
//! outside DMs), and the user-command path for humans.

mod handlers_support;

use air_friends::platform::fake::{Call, Op};
use air_friends::platform::{CommandInvocation, CommandReply, FileSource, Origin, PlatformKind};
use handlers_support::{App, Options, app, app_with};
use serde_json::{Map, Value, json};

/// A public and a private memory of user `u1`, saved from a DM.
async fn seeded(app: &App) -> (String, String) {
    let dm = app.dm_session("u1");
    let public = app.save_memory(&dm, "likes green tea", "public").await;
    let private = app.save_memory(&dm, "secret: tea allergy", "private").await;
    (public, private)
}

fn ids(data: &Value) -> Vec<String> {
    data["memories"]
        .as_array()
        .map(|list| {
            list.iter()
                .filter_map(|m| m["id"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test]
async fn memory_save_returns_the_saved_memory() {
    let app = app().await;
    let s = app.guild_session("u1");
    let r = app
        .call(
            &s,
            "memory-save",
            json!({"content": "  birthday is May 3  ", "importance": "high"}),
        )
        .await;
    let data = r.data();
    let keys: Vec<&str> = data
        .as_object()
        .map(|o| o.keys().map(String::as_str).collect())
        .unwrap_or_default();
    assert_eq!(
        keys,
        ["content", "createdAt", "id", "importance", "visibility"]
    );
    assert!(data["id"].as_str().is_some_and(|id| id.starts_with("mem_")));
    assert_eq!(data["content"], "birthday is May 3");
    assert_eq!(data["visibility"], "public");
    assert_eq!(data["importance"], "high");
}

#[tokio::test]
async fn private_memories_can_only_be_saved_in_a_dm() {
    let app = app().await;
    let s = app.guild_session("u1");
    let r = app
        .call(
            &s,
            "memory-save",
            json!({"content": "my address", "visibility": "private"}),
        )
        .await;
    assert_eq!(r.error(403), "FORBIDDEN_CONTEXT");
    let dm = app.dm_session("u1");
    let stats = app.call(&dm, "memory-stats", json!({})).await;
    assert_eq!(stats.data()["summary"]["total"], 0, "nothing was saved");
}

#[tokio::test]
async fn content_over_the_configured_limit_is_rejected() {
    let mut options = Options::default();
    options.memory.max_content_chars = 10;
    let app = app_with(options).await;
    let s = app.guild_session("u1");
    let r = app
        .call(&s, "memory-save", json!({"content": "x".repeat(11)}))
        .await;
    assert_eq!(r.error(400), "INVALID_PARAMS");
    assert!(
        r.body["details"][0]["problem"]
            .as_str()
            .is_some_and(|p| p.contains("limit is 10"))
    );
}

#[tokio::test]
async fn private_memories_are_invisible_outside_dms() {
    let app = app().await;
    let (public, private) = seeded(&app).await;
    let guild = app.guild_session("u1");

    let found = app
        .call(&guild, "memory-search", json!({"query": "tea"}))
        .await;
    assert_eq!(ids(found.data()), vec![public.clone()]);
    assert_eq!(found.data()["count"], 1);

    let stats = app.call(&guild, "memory-stats", json!({})).await;
    let stats = stats.data();
    assert_eq!(stats["private"], Value::Null);
    assert_eq!(stats["public"]["total"], 1);
    assert_eq!(stats["summary"]["total"], 1);

    let r = app
        .call(
            &guild,
            "memory-patch",
            json!({"memoryId": private, "importance": "high"}),
        )
        .await;
    assert_eq!(r.error(404), "NOT_FOUND");
    let r = app
        .call(
            &guild,
            "memory-patch",
            json!({"memoryId": public, "relatedTo": [private]}),
        )
        .await;
    assert_eq!(
        r.error(404),
        "NOT_FOUND",
        "a private id cannot be referenced"
    );

    let dm = app.dm_session("u1");
    let found = app
        .call(&dm, "memory-search", json!({"query": "tea", "limit": 5}))
        .await;
    let mut both = ids(found.data());
    both.sort();
    let mut expected = vec![public, private];
    expected.sort();
    assert_eq!(both, expected);
    let stats = app.call(&dm, "memory-stats", json!({})).await;
    assert_eq!(stats.data()["private"]["total"], 1);
    assert_eq!(stats.data()["summary"]["total"], 2);
}

#[tokio::test]
async fn search_hits_have_the_spec_shape() {
    let app = app().await;
    let s = app.guild_session("u1");
    app.save_memory(&s, "favourite colour is blue", "public")
        .await;
    app.save_memory(&s, "猫が好き", "public").await;
    let data = app
        .call(&s, "memory-search", json!({"query": "BLUE 猫"}))
        .await
        .data()
        .clone();
    assert_eq!(data["count"], 2);
    for hit in data["memories"].as_array().expect("list") {
        for key in [
            "id",
            "content",
            "visibility",
            "importance",
            "createdAt",
            "score",
        ] {
            assert!(hit.get(key).is_some(), "{key} missing in {hit}");
        }
        assert!(hit.get("workspace").is_none(), "no internal fields: {hit}");
    }
    // Other users' memories are never visible.
    let other = app.guild_session("u2");
    let data = app
        .call(&other, "memory-search", json!({"query": "blue"}))
        .await
        .data()
        .clone();
    assert_eq!(data["count"], 0);
}

#[tokio::test]
async fn patches_change_metadata_only() {
    let app = app().await;
    let s = app.guild_session("u1");
    let old = app.save_memory(&s, "works at Acme", "public").await;
    let new = app.save_memory(&s, "works at Globex now", "public").await;
    let r = app
        .call(
            &s,
            "memory-patch",
            json!({"memoryId": old, "enabled": false}),
        )
        .await;
    let data = r.data();
    assert!(data["patchId"].is_string());
    assert_eq!(data["memoryId"], old);
    assert_eq!(data["changes"], json!({"enabled": false}));
    let hits = app
        .call(&s, "memory-search", json!({"query": "works"}))
        .await;
    assert_eq!(
        ids(hits.data()),
        vec![new.clone()],
        "disabled memories are not found"
    );

    let r = app.call(&s, "memory-patch", json!({"memoryId": new})).await;
    assert_eq!(
        r.error(400),
        "INVALID_PARAMS",
        "a patch must change something"
    );
    let r = app
        .call(
            &s,
            "memory-patch",
            json!({"memoryId": new, "supersedes": ["mem_unknown"]}),
        )
        .await;
    assert_eq!(r.error(404), "NOT_FOUND");
    assert!(r.message().contains("mem_unknown"), "{}", r.message());
    let r = app
        .call(
            &s,
            "memory-patch",
            json!({"memoryId": new, "supersedes": [old], "importance": "high"}),
        )
        .await;
    assert_eq!(
        r.data()["changes"],
        json!({"supersedes": [old], "importance": "high"})
    );
}

fn exported(app: &App) -> (String, Option<String>, Vec<u8>) {
    let Some(Call::SendDmFiles {
        user_id,
        files,
        caption,
    }) = app.discord.calls_of(Op::SendDmFiles).pop()
    else {
        panic!("no DM file delivery");
    };
    let FileSource::Bytes(bytes) = &files[0].source else {
        panic!("export is built in memory");
    };
    (user_id, caption, bytes.clone())
}

#[tokio::test]
async fn export_asked_in_public_goes_by_dm_without_private_memories() {
    let app = app().await;
    let (public, private) = seeded(&app).await;
    let guild = app.guild_session("u1");
    let r = app
        .call(&guild, "memory-export", json!({"format": "json"}))
        .await;
    let data = r.data().clone();
    assert_eq!(data["delivered"], true);
    assert_eq!(data["count"], 1);
    assert_eq!(data["format"], "json");
    assert!(data["messageId"].is_string());
    let (user, caption, bytes) = exported(&app);
    assert_eq!(user, "u1");
    assert!(caption.is_some_and(|c| c.contains("public only")));
    let doc: Value = serde_json::from_slice(&bytes).expect("json export");
    let ids: Vec<&str> = doc["memories"]
        .as_array()
        .expect("memories")
        .iter()
        .filter_map(|m| m["id"].as_str())
        .collect();
    assert_eq!(ids, vec![public.as_str()]);
    assert!(!String::from_utf8_lossy(&bytes).contains("allergy"));
    assert!(!String::from_utf8_lossy(&bytes).contains(&private));
    assert_eq!(
        app.discord.call_count(Op::SendFiles),
        0,
        "nothing posted publicly"
    );
    assert_eq!(
        app.discord.history("guild-chan").len(),
        1,
        "only the trigger"
    );
}

#[tokio::test]
async fn export_from_a_dm_includes_private_memories_and_applies_filters() {
    let app = app().await;
    seeded(&app).await;
    let dm = app.dm_session("u1");
    let high = app.save_memory(&dm, "allergic to peanuts", "private").await;
    app.call(
        &dm,
        "memory-patch",
        json!({"memoryId": high, "importance": "high"}),
    )
    .await
    .data();
    let data = app
        .call(&dm, "memory-export", json!({}))
        .await
        .data()
        .clone();
    assert_eq!(data["count"], 3);
    assert_eq!(data["format"], "markdown");
    let (_, _, bytes) = exported(&app);
    let text = String::from_utf8(bytes).expect("utf-8");
    assert!(text.contains("secret: tea allergy"), "{text}");
    // Everything that is theirs: each memory's changes, their reminders, their usage per day.
    assert!(text.contains("- changed "), "{text}");
    assert!(text.contains("# Reminders (0)"), "{text}");
    assert!(text.contains("# Model usage (0 days)"), "{text}");
    app.call(
        &dm,
        "set-reminder",
        json!({"message": "drink water", "scheduledAt": (chrono::Utc::now() + chrono::Duration::hours(2)).to_rfc3339()}),
    )
    .await
    .data();
    // A tool call of theirs through an MCP server today: in the export's usage.
    let who = air_friends::store::WorkspaceKey::new("discord", "u1").unwrap();
    let today = chrono::Utc::now().date_naive();
    app.store.add_mcp_calls(&who, today, 2).await.unwrap();
    app.call(&dm, "memory-export", json!({"format": "json"}))
        .await
        .data();
    let (_, _, bytes) = exported(&app);
    let doc: Value = serde_json::from_slice(&bytes).expect("json export");
    let patched = doc["memories"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["id"] == high.as_str())
        .expect("the patched memory");
    assert_eq!(
        patched["patches"][0]["changes"],
        json!({"importance": "high"})
    );
    assert_eq!(doc["reminders"][0]["message"], "drink water");
    assert_eq!(doc["usage"][0]["day"], today.to_string());
    assert_eq!(doc["usage"][0]["mcpCalls"], 2);
    let data = app
        .call(&dm, "memory-export", json!({"importance": "high"}))
        .await
        .data()
        .clone();
    assert_eq!(data["count"], 1);
}

fn invocation(
    skill: &str,
    is_dm: bool,
    parameters: Value,
) -> (
    CommandInvocation,
    tokio::sync::oneshot::Receiver<CommandReply>,
) {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let parameters: Map<String, Value> = parameters.as_object().cloned().unwrap_or_default();
    (
        CommandInvocation {
            origin: Origin {
                platform: PlatformKind::Discord,
                channel_id: if is_dm {
                    "dm:u1".into()
                } else {
                    "guild-chan".into()
                },
                guild_id: (!is_dm).then(|| "guild".into()),
                user_id: "u1".into(),
                username: "u1".into(),
                is_dm,
            },
            skill: skill.into(),
            parameters,
            message_id: None,
            reply: tx,
        },
        rx,
    )
}

#[tokio::test]
async fn user_commands_answer_humans_in_plain_text() {
    let app = app().await;
    seeded(&app).await;
    let runner = app.user_commands();
    let names: Vec<&str> = runner.command_names().collect();
    assert_eq!(
        names,
        [
            "cancel-reminder",
            "list-reminders",
            "memory-export",
            "memory-search",
            "memory-stats"
        ]
    );

    let (public_stats, _rx) = invocation("memory-stats", false, json!({}));
    let reply = runner.execute(&public_stats).await;
    assert!(!reply.is_error, "{}", reply.text);
    assert!(reply.text.contains("public"), "{}", reply.text);
    assert!(
        !reply.text.contains("private "),
        "no private row: {}",
        reply.text
    );
    assert!(
        reply.text.contains("only in a direct message"),
        "{}",
        reply.text
    );

    let (dm_stats, rx) = invocation("memory-stats", true, json!({}));
    assert!(
        runner.run(dm_stats).await,
        "delivered through the reply channel"
    );
    let reply = rx.await.expect("reply");
    assert!(reply.text.contains("private"), "{}", reply.text);

    let (search, _rx) = invocation("memory-search", false, json!({"query": "tea"}));
    let reply = runner.execute(&search).await;
    assert!(reply.text.starts_with("1 memory found:"), "{}", reply.text);
    assert!(reply.text.contains("likes green tea"), "{}", reply.text);
    assert!(!reply.text.contains("allergy"), "{}", reply.text);

    let (export, _rx) = invocation("memory-export", false, json!({}));
    let reply = runner.execute(&export).await;
    assert!(
        reply.text.contains("sent to you by direct message"),
        "{}",
        reply.text
    );
    let (_, _, bytes) = exported(&app);
    assert!(!String::from_utf8_lossy(&bytes).contains("allergy"));

    let (reminders, _rx) = invocation("list-reminders", false, json!({}));
    let reply = runner.execute(&reminders).await;
    assert!(reply.is_error);
    assert!(reply.text.contains("direct message"), "{}", reply.text);

    let (bad, _rx) = invocation("memory-search", true, json!({"limit": 500}));
    let reply = runner.execute(&bad).await;
    assert!(reply.is_error);
    assert!(reply.text.contains("invalid options"), "{}", reply.text);

    let (agent_only, _rx) = invocation("send-reply", true, json!({"message": "hi"}));
    let reply = runner.execute(&agent_only).await;
    assert!(reply.is_error);
    assert!(reply.text.contains("/memory-stats"), "{}", reply.text);
    assert!(app.discord.sent().is_empty(), "send-reply never ran");
}

/// An important memory found by memory-search counts as used: it comes first among the
/// prompt's important-memory candidates, ahead of newer ones.
#[tokio::test]
async fn a_memory_found_by_search_comes_back_into_the_prompts() {
    let app = app().await;
    let dm = app.dm_session("u1");
    let mut ids_saved = Vec::new();
    for content in [
        "favourite drink: bubble tea",
        "hiked Yangmingshan",
        "has a cat",
    ] {
        let r = app
            .call(
                &dm,
                "memory-save",
                json!({"content": content, "visibility": "public", "importance": "high"}),
            )
            .await;
        ids_saved.push(r.data()["id"].as_str().expect("id").to_owned());
        tokio::time::sleep(std::time::Duration::from_millis(3)).await;
    }
    let ws = air_friends::store::WorkspaceKey::new("discord", "u1").unwrap();
    let scope = air_friends::store::Scope::IncludePrivate;
    let before = app.store.prompt_memories(&ws, scope, 3).await.unwrap();
    assert_eq!(before.memories[0].id, ids_saved[2], "newest first");
    tokio::time::sleep(std::time::Duration::from_millis(3)).await;
    let found = app
        .call(&dm, "memory-search", json!({"query": "bubble"}))
        .await;
    assert_eq!(ids(found.data()), vec![ids_saved[0].clone()]);
    app.store.flush().await.unwrap();
    let after = app.store.prompt_memories(&ws, scope, 3).await.unwrap();
    assert_eq!(after.memories[0].id, ids_saved[0], "the found memory leads");
    assert_eq!(after.total, 3);
}

// ---- memory-save --supersedes and maintenance sessions ----------------------------------------

/// memory-save `--supersedes` records the lineage and disables the replaced memories in one
/// step; an unknown id refuses the whole save (nothing saved, nothing disabled).
#[tokio::test]
async fn a_save_superseding_older_memories_disables_them_in_the_same_step() {
    let app = app().await;
    let s = app.guild_session("u1");
    let a = app.save_memory(&s, "lives in Tokyo", "public").await;
    let b = app.save_memory(&s, "works in Shibuya", "public").await;
    let r = app
        .call(
            &s,
            "memory-save",
            json!({"content": "moved from Tokyo to Osaka, works in Umeda", "supersedes": [a, b, a]}),
        )
        .await;
    let data = r.data();
    assert_eq!(data["supersedes"], json!([a, b]));
    assert_eq!(data["disabled"], json!([a, b]));
    let found = app
        .call(
            &s,
            "memory-search",
            json!({"query": "Tokyo Osaka", "limit": 10}),
        )
        .await;
    assert_eq!(ids(found.data()), [data["id"].as_str().unwrap()]);

    // Unknown (or private, outside a DM) ids: 404, and the save did not happen.
    let dm = app.dm_session("u1");
    let secret = app.save_memory(&dm, "secret diary", "private").await;
    let r = app
        .call(
            &s,
            "memory-save",
            json!({"content": "merged diary", "supersedes": [secret, "mem_nope"]}),
        )
        .await;
    assert_eq!(r.error(404), "NOT_FOUND");
    assert!(
        r.message().contains(&secret) && r.message().contains("mem_nope"),
        "{}",
        r.message()
    );
    let stats = app.call(&dm, "memory-stats", json!({})).await;
    assert_eq!(stats.data()["public"]["total"], 3, "{:#}", stats.data());
    assert_eq!(stats.data()["private"]["enabled"], 1, "{:#}", stats.data());
}

mod maintenance {
    use super::*;
    use air_friends::session::{MaintenancePolicy, SessionPurpose};
    use air_friends::store::Visibility;
    use chrono::{DateTime, Utc};
    use handlers_support::Session;

    /// A maintenance session of `user` consolidating `visibility`, with memories created before
    /// `created_before` old enough.
    fn maintenance_session(
        app: &App,
        user: &str,
        visibility: Visibility,
        created_before: DateTime<Utc>,
        dry_run: bool,
    ) -> Session {
        let mut context = app.guild_session(user).context;
        context.purpose = SessionPurpose::Maintenance(MaintenancePolicy {
            visibility,
            dry_run,
            created_before,
        });
        context.origin.is_dm = visibility == Visibility::Private;
        context.origin.channel_id = String::new().into();
        context.trigger_message_id = None;
        app.register(context)
    }

    /// Two public and one private memory of `u1`, saved before the returned cut-off, and a
    /// public one saved after it.
    async fn memories(app: &App) -> (String, String, String, String, DateTime<Utc>) {
        let dm = app.dm_session("u1");
        let a = app.save_memory(&dm, "likes hiking", "public").await;
        let b = app
            .save_memory(&dm, "hiked Yangmingshan in May", "public")
            .await;
        let p = app.save_memory(&dm, "afraid of heights", "private").await;
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        let cutoff = Utc::now();
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        let young = app
            .save_memory(&dm, "went hiking again yesterday", "public")
            .await;
        (a, b, p, young, cutoff)
    }

    #[tokio::test]
    async fn only_the_memory_skills_answer_a_maintenance_session() {
        let app = app().await;
        let s = maintenance_session(&app, "u1", Visibility::Public, Utc::now(), false);
        for (skill, params) in [
            ("send-reply", json!({"message": "hi"})),
            ("react-message", json!({"emoji": "👍"})),
            (
                "set-reminder",
                json!({"message": "x", "time": "2099-01-01T00:00:00Z"}),
            ),
            ("fetch-context", json!({"type": "user_info"})),
            ("memory-export", json!({})),
            ("send-file", json!({"path": "a.txt"})),
        ] {
            let r = app.call(&s, skill, params).await;
            assert_eq!(r.error(403), "FORBIDDEN_CONTEXT", "{skill}");
            assert!(
                r.message().contains("maintenance"),
                "{skill}: {}",
                r.message()
            );
        }
        assert!(app.discord.calls().is_empty(), "{:?}", app.discord.calls());
        for skill in ["memory-stats", "memory-search"] {
            let params = if skill == "memory-search" {
                json!({"query": "x", "limit": 5})
            } else {
                json!({})
            };
            assert_eq!(app.call(&s, skill, params).await.status, 200, "{skill}");
        }
    }

    #[tokio::test]
    async fn a_public_run_saves_public_summaries_of_old_public_memories_only() {
        let app = app().await;
        let (a, b, p, young, cutoff) = memories(&app).await;
        let s = maintenance_session(&app, "u1", Visibility::Public, cutoff, false);

        // A private memory does not exist for a public run; a young one is left alone.
        let r = app
            .call(
                &s,
                "memory-save",
                json!({"content": "x", "supersedes": [a, p]}),
            )
            .await;
        assert_eq!(r.error(404), "NOT_FOUND");
        let r = app
            .call(
                &s,
                "memory-save",
                json!({"content": "x", "supersedes": [a, young]}),
            )
            .await;
        assert_eq!(r.error(403), "FORBIDDEN_CONTEXT");
        assert!(r.message().contains(&young), "{}", r.message());
        let r = app
            .call(
                &s,
                "memory-patch",
                json!({"memoryId": young, "enabled": false}),
            )
            .await;
        assert_eq!(r.error(403), "FORBIDDEN_CONTEXT");
        // Visibility never changes in a maintenance run.
        let r = app
            .call(
                &s,
                "memory-patch",
                json!({"memoryId": a, "visibility": "private"}),
            )
            .await;
        assert_eq!(r.error(403), "FORBIDDEN_CONTEXT");

        // Asking for a private summary still saves a public one.
        let r = app
            .call(
                &s,
                "memory-save",
                json!({"content": "loves hiking; hiked Yangmingshan in May", "visibility": "private", "supersedes": [a, b]}),
            )
            .await;
        let data = r.data();
        assert_eq!(data["visibility"], "public");
        assert_eq!(data["disabled"], json!([a, b]));
        let state = s.registered.handle.state();
        assert_eq!((state.memories_saved, state.memories_disabled), (1, 2));
        let dm = app.dm_session("u1");
        let stats = app.call(&dm, "memory-stats", json!({})).await;
        let stats = stats.data();
        assert_eq!(stats["public"]["enabled"], 2, "{stats:#}");
        assert_eq!(stats["private"]["enabled"], 1, "{stats:#}");
    }

    #[tokio::test]
    async fn a_private_run_touches_private_memories_only() {
        let app = app().await;
        let (a, _b, p, _young, _cutoff) = memories(&app).await;
        let dm = app.dm_session("u1");
        let p2 = app
            .save_memory(&dm, "afraid of deep water", "private")
            .await;
        let s = maintenance_session(&app, "u1", Visibility::Private, Utc::now(), false);
        let r = app
            .call(
                &s,
                "memory-save",
                json!({"content": "x", "supersedes": [p, a]}),
            )
            .await;
        assert_eq!(r.error(403), "FORBIDDEN_CONTEXT");
        assert!(r.message().contains("public"), "{}", r.message());
        let r = app
            .call(
                &s,
                "memory-save",
                json!({"content": "afraid of heights and of deep water", "visibility": "public", "supersedes": [p, p2]}),
            )
            .await;
        assert_eq!(r.data()["visibility"], "private");
        assert_eq!(r.data()["disabled"], json!([p, p2]));
    }

    #[tokio::test]
    async fn a_dry_run_writes_nothing_and_says_what_it_would_do() {
        let app = app().await;
        let (a, b, _p, _young, cutoff) = memories(&app).await;
        let s = maintenance_session(&app, "u1", Visibility::Public, cutoff, true);
        let dm = app.dm_session("u1");
        let before = app
            .call(&dm, "memory-stats", json!({}))
            .await
            .data()
            .clone();
        let r = app
            .call(
                &s,
                "memory-save",
                json!({"content": "hiking summary", "supersedes": [a, b]}),
            )
            .await;
        let data = r.data();
        assert_eq!(data["dryRun"], true);
        assert_eq!(data["wouldDo"]["disable"], json!([a, b]));
        assert_eq!(data["wouldDo"]["save"]["visibility"], "public");
        let r = app
            .call(&s, "memory-patch", json!({"memoryId": a, "enabled": false}))
            .await;
        assert_eq!(r.data()["dryRun"], true);
        // The rules hold in a dry run too.
        let r = app
            .call(
                &s,
                "memory-patch",
                json!({"memoryId": a, "visibility": "private"}),
            )
            .await;
        assert_eq!(r.error(403), "FORBIDDEN_CONTEXT");
        let after = app
            .call(&dm, "memory-stats", json!({}))
            .await
            .data()
            .clone();
        assert_eq!(before, after);
        let state = s.registered.handle.state();
        assert_eq!((state.memories_saved, state.memories_disabled), (1, 3));
    }
}
