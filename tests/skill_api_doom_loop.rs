//! Doom-loop termination regardless of rate limits, through the real Skill API router and the
//! real handlers (`oneshot`): every `send-reply` / `edit-reply` / `send-file` attempt counts
//! toward its termination threshold — attempts refused with `RATE_LIMITED`, `INVALID_PARAMS` or
//! `QUOTA_EXCEEDED` included — so the 4th send-reply (3rd edit-reply, 4th send-file) attempt ends
//! the agent however quickly the calls come. The terminating call is answered first, with
//! `sessionTerminated: true`, and the runner is told once the body has been read.

mod handlers_support;

use std::path::Path;

use handlers_support::{App, Options, Session, SkillResponse, app, app_with, modified_skills};
use serde_json::{Value, json};

/// The shipped skills, except that `skill` admits one call per minute per user: every later
/// call of it is `RATE_LIMITED` however it is paced.
async fn app_with_one_call_per_minute(skill: &str) -> App {
    let loaded = modified_skills(|dir| {
        let manifest = dir.join(skill).join("manifest.json");
        let text = std::fs::read_to_string(&manifest).expect("manifest");
        let mut json: Value = serde_json::from_str(&text).expect("json");
        json["rate_limit"] = json!({"window_ms": 60_000, "max_requests": 1, "burst": 1});
        std::fs::write(&manifest, json.to_string()).expect("write");
    });
    app_with(Options {
        loaded,
        ..Options::default()
    })
    .await
}

/// The shipped skills with their manifest rate limits (send-reply: a burst of 3).
async fn app_as_shipped() -> App {
    app_with(Options {
        loaded: handlers_support::shipped_skills(),
        ..Options::default()
    })
    .await
}

fn assert_terminating(r: &SkillResponse, code: &str, s: &Session) {
    assert_eq!(r.error(429), code, "{:#}", r.body);
    assert_eq!(r.body["sessionTerminated"], true, "{:#}", r.body);
    assert!(r.message().contains("being ended now"), "{}", r.message());
    assert!(s.terminated(), "the agent is ended after this response");
}

#[tokio::test]
async fn the_fourth_quick_send_reply_ends_the_agent_although_the_burst_limit_refuses_it() {
    let app = app_as_shipped().await;
    let s = app.guild_session("u1");
    app.call(&s, "send-reply", json!({"message": "answer 1"}))
        .await
        .data();
    for n in 2..=3 {
        let r = app
            .call(
                &s,
                "send-reply",
                json!({ "message": format!("answer {n}") }),
            )
            .await;
        assert_eq!(r.error(429), "QUOTA_EXCEEDED");
        assert!(r.body.get("sessionTerminated").is_none(), "{:#}", r.body);
        assert!(!s.terminated(), "attempt {n} must not end the agent");
    }
    // The manifest's burst of 3 refuses the 4th call before the handler runs.
    let r = app
        .call(&s, "send-reply", json!({"message": "answer 4"}))
        .await;
    assert_terminating(&r, "RATE_LIMITED", &s);
    assert!(r.body["retryAfterMs"].as_u64().is_some(), "{:#}", r.body);
    assert_eq!(
        s.registered.termination.reason().as_deref(),
        Some("send-reply: per-session quota exhausted")
    );
    assert_eq!(app.discord.sent_texts(), vec!["answer 1"]);
}

#[tokio::test]
async fn send_reply_attempts_refused_by_the_schema_count_toward_the_fourth() {
    let app = app().await;
    let s = app.guild_session("u1");
    for n in 1..=3 {
        // Distinct bodies: an identical retry within the de-duplication window is the same call.
        let r = app.call(&s, "send-reply", json!({ "text": n })).await;
        assert_eq!(r.error(400), "INVALID_PARAMS");
        assert!(!s.terminated());
    }
    // The 4th attempt is valid: it is delivered, and then the agent is ended.
    let r = app
        .call(&s, "send-reply", json!({"message": "finally"}))
        .await;
    r.data();
    assert!(
        s.terminated(),
        "the 4th attempt ends the agent after its reply"
    );
    assert_eq!(app.discord.sent_texts(), vec!["finally"]);
}

#[tokio::test]
async fn the_third_edit_reply_ends_the_agent_when_the_rate_limit_refuses_the_edits() {
    let app = app_with_one_call_per_minute("edit-reply").await;
    let s = app.guild_session("u1");
    let id = app
        .call(&s, "send-reply", json!({"message": "v1"}))
        .await
        .data()["messageId"]
        .as_str()
        .expect("id")
        .to_owned();
    let edit = |text: &str| json!({"messageId": id, "message": text});
    app.call(&s, "edit-reply", edit("v2")).await.data();
    let second = app.call(&s, "edit-reply", edit("v3")).await;
    assert_eq!(second.error(429), "RATE_LIMITED");
    assert!(!s.terminated(), "the 2nd edit-reply must not end the agent");
    let third = app.call(&s, "edit-reply", edit("v4")).await;
    assert_terminating(&third, "RATE_LIMITED", &s);
    assert_eq!(
        s.registered.termination.reason().as_deref(),
        Some("edit-reply: per-session quota exhausted")
    );
    let history = app.discord.history("guild-chan");
    assert_eq!(history.last().map(|m| m.content.as_str()), Some("v2"));
}

#[tokio::test]
async fn the_fourth_send_file_ends_the_agent_when_the_rate_limit_refuses_the_retries() {
    let app = app_with_one_call_per_minute("send-file").await;
    let s = app.guild_session("u1");
    write(&s.context.workspace.join("a.txt"));
    app.call(&s, "send-file", json!({"filePaths": ["a.txt"]}))
        .await
        .data();
    for n in 2..=3 {
        let r = app
            .call(&s, "send-file", json!({"filePaths": ["a.txt"]}))
            .await;
        assert_eq!(r.error(429), "RATE_LIMITED");
        assert!(!s.terminated(), "attempt {n} must not end the agent");
    }
    let r = app
        .call(&s, "send-file", json!({"filePaths": ["a.txt"]}))
        .await;
    assert_terminating(&r, "RATE_LIMITED", &s);
    assert_eq!(app.discord.file_deliveries().len(), 1);
}

fn write(path: &Path) {
    std::fs::write(path, b"hello").expect("write");
}
