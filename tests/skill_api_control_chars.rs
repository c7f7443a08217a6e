//! Control characters in skill parameters, through the real Skill API router and handlers: NUL
//! and the other C0 controls (except tab, LF, CR) and DEL are a 400 `INVALID_PARAMS` whose
//! `details` name the parameter and the problem — never a 500 (a NUL in a memory-search query
//! used to reach SQLite's FTS5 parser) and never stored or sent.

mod handlers_support;

use handlers_support::{App, SkillResponse, app};
use serde_json::{Value, json};

fn assert_control_character_refused(r: &SkillResponse, path: &str, name: &str) {
    assert_eq!(r.error(400), "INVALID_PARAMS");
    let details = r.body["details"].as_array().expect("details");
    let found = details
        .iter()
        .find(|d| d["path"] == path)
        .unwrap_or_else(|| panic!("no problem at {path}: {:#}", r.body));
    let problem = found["problem"].as_str().unwrap_or_default();
    assert!(
        problem.contains("control character") && problem.contains(name),
        "{problem}"
    );
    assert!(r.message().contains(path), "{}", r.message());
}

async fn call(app: &App, skill: &str, params: Value) -> SkillResponse {
    let s = app.dm_session("u1");
    app.call(&s, skill, params).await
}

#[tokio::test]
async fn a_nul_in_a_send_reply_message_is_invalid_params_and_nothing_is_sent() {
    let app = app().await;
    let r = call(&app, "send-reply", json!({"message": "hello\u{0}world"})).await;
    assert_control_character_refused(&r, "/message", "NUL");
    assert!(app.discord.sent_texts().is_empty());
}

#[tokio::test]
async fn a_nul_in_memory_save_content_is_invalid_params_and_nothing_is_stored() {
    let app = app().await;
    let r = call(&app, "memory-save", json!({"content": "likes\u{0}tea"})).await;
    assert_control_character_refused(&r, "/content", "NUL");
    let stats = call(&app, "memory-stats", json!({})).await;
    assert_eq!(stats.data()["summary"]["total"], 0, "{:#}", stats.body);
}

#[tokio::test]
async fn a_nul_in_a_memory_search_query_is_invalid_params_not_a_500() {
    let app = app().await;
    let r = call(&app, "memory-search", json!({"query": "tea\u{0}"})).await;
    assert_control_character_refused(&r, "/query", "NUL");
}

#[tokio::test]
async fn other_control_characters_and_del_are_refused_but_whitespace_is_text() {
    let app = app().await;
    for (text, name) in [
        ("a\u{1b}[31m", "U+001B"),
        ("a\u{7}", "U+0007"),
        ("a\u{7f}", "U+007F"),
    ] {
        let r = call(&app, "memory-save", json!({ "content": text })).await;
        assert_control_character_refused(&r, "/content", name);
    }
    let ok = call(
        &app,
        "memory-save",
        json!({"content": "line 1\n\tline 2\r\n"}),
    )
    .await;
    ok.data();
}
