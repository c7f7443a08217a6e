//! send-reply, edit-reply and get-message through the real Skill API router: threading, splitting,
//! content processing, the per-session quotas and doom-loop terminations, and how
//! platform failures reach the agent.

mod handlers_support;

use air_friends::platform::PlatformError;
use air_friends::platform::fake::{Call, Op};
use handlers_support::app;
use serde_json::json;

#[tokio::test]
async fn reply_is_threaded_to_the_trigger_and_reports_its_id() {
    let app = app().await;
    let s = app.guild_session("u1");
    let r = app
        .call(&s, "send-reply", json!({"message": "Hello there!"}))
        .await;
    let data = r.data();
    let sent = app.discord.sent();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].text, "Hello there!");
    assert_eq!(sent[0].reply_to.as_deref(), Some(s.trigger().as_str()));
    assert_eq!(data["messageId"], sent[0].message_id);
    assert_eq!(data["messageIds"], json!([sent[0].message_id]));
    assert!(data["timestamp"].is_string());
    assert!(s.registered.handle.responded());
}

#[tokio::test]
async fn a_long_reply_is_split_into_several_messages_in_order() {
    let app = app().await;
    let s = app.guild_session("u1");
    let sentences: Vec<String> = (0..155)
        .map(|i| format!("Sentence number {i:03} is here."))
        .collect();
    let mut text = sentences.join(" ");
    while text.len() < 4500 {
        text.push('!');
    }
    assert_eq!(text.chars().count(), 4500);
    let r = app.call(&s, "send-reply", json!({ "message": text })).await;
    let data = r.data();
    let sent = app.discord.sent();
    assert_eq!(
        sent.len(),
        3,
        "4500+ characters need three Discord messages"
    );
    let ids: Vec<&str> = sent.iter().map(|m| m.message_id.as_str()).collect();
    assert_eq!(data["messageIds"], json!(ids));
    assert_eq!(data["messageId"], ids[0]);
    assert!(sent.iter().all(|m| m.text.encode_utf16().count() <= 2000));
    // Nothing lost, order kept: the parts put together give the text back.
    let squash = |t: &str| t.split_whitespace().collect::<String>();
    let joined: String = sent.iter().map(|m| squash(&m.text)).collect();
    assert_eq!(joined, squash(&text));
    // Only the first part is threaded to the trigger.
    assert_eq!(sent[0].reply_to.as_deref(), Some(s.trigger().as_str()));
    assert!(sent[1..].iter().all(|m| m.reply_to.is_none()));
}

#[tokio::test]
async fn xml_tags_are_stripped_and_literal_newlines_unescaped() {
    let app = app().await;
    let s = app.guild_session("u1");
    app.call(
        &s,
        "send-reply",
        json!({"message": "<reply>Line one\\nLine <b>two</b></reply>"}),
    )
    .await
    .data();
    assert_eq!(app.discord.sent_texts(), vec!["Line one\nLine two"]);
}

#[tokio::test]
async fn text_that_is_empty_after_processing_is_rejected_without_using_the_quota() {
    let app = app().await;
    let s = app.guild_session("u1");
    let r = app
        .call(
            &s,
            "send-reply",
            json!({"message": "<reply>  \\n </reply>"}),
        )
        .await;
    assert_eq!(r.error(400), "INVALID_PARAMS");
    assert_eq!(r.body["details"][0]["path"], "/message");
    assert!(app.discord.calls().is_empty());
    app.call(&s, "send-reply", json!({"message": "real answer"}))
        .await
        .data();
    assert_eq!(app.discord.sent_texts(), vec!["real answer"]);
}

#[tokio::test]
async fn a_second_reply_is_refused_and_the_fourth_attempt_terminates_the_agent() {
    let app = app().await;
    let s = app.guild_session("u1");
    let first = app
        .call(&s, "send-reply", json!({"message": "answer"}))
        .await;
    let id = first.data()["messageId"].as_str().expect("id").to_owned();
    for attempt in 2..=3 {
        let r = app
            .call(
                &s,
                "send-reply",
                json!({ "message": format!("again {attempt}") }),
            )
            .await;
        assert_eq!(r.error(429), "QUOTA_EXCEEDED");
        assert!(r.message().contains("edit-reply"), "{}", r.message());
        assert!(r.message().contains(&id), "names the reply to edit");
        assert!(!s.terminated(), "attempt {attempt} must not terminate");
    }
    let r = app
        .call(&s, "send-reply", json!({"message": "again 4"}))
        .await;
    assert_eq!(r.error(429), "QUOTA_EXCEEDED");
    assert_eq!(r.body["sessionTerminated"], true);
    assert!(
        s.terminated(),
        "the 4th attempt terminates after responding"
    );
    assert_eq!(app.discord.sent_texts(), vec!["answer"]);
    assert_eq!(
        s.registered.termination.reason().as_deref(),
        Some("send-reply: per-session quota exhausted")
    );
}

#[tokio::test]
async fn without_a_trigger_the_reply_is_a_new_message() {
    let app = app().await;
    let s = app.triggerless_session("u1", false);
    app.call(&s, "send-reply", json!({"message": "news"}))
        .await
        .data();
    let sent = app.discord.sent();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].reply_to, None);
}

#[tokio::test]
async fn edits_are_limited_to_two_and_the_third_call_terminates() {
    let app = app().await;
    let s = app.guild_session("u1");
    let id = app
        .call(&s, "send-reply", json!({"message": "v1"}))
        .await
        .data()["messageId"]
        .as_str()
        .expect("id")
        .to_owned();
    for version in ["v2", "v3"] {
        let data = app
            .call(
                &s,
                "edit-reply",
                json!({"messageId": id, "message": version}),
            )
            .await
            .data()
            .clone();
        assert_eq!(data["messageId"], id, "Discord edits in place");
        assert_eq!(data["previousMessageId"], id);
        assert!(!s.terminated());
    }
    let r = app
        .call(&s, "edit-reply", json!({"messageId": id, "message": "v4"}))
        .await;
    assert_eq!(r.error(429), "QUOTA_EXCEEDED");
    assert!(
        s.terminated(),
        "the 3rd edit-reply call terminates after responding"
    );
    assert_eq!(app.discord.call_count(Op::EditMessage), 2);
    let history = app.discord.history("guild-chan");
    assert_eq!(history.last().map(|m| m.content.as_str()), Some("v3"));
}

#[tokio::test]
async fn only_messages_of_this_session_can_be_edited() {
    let app = app().await;
    let s = app.guild_session("u1");
    let other = app.guild_session("u2");
    let theirs = app
        .call(&other, "send-reply", json!({"message": "for u2"}))
        .await
        .data()["messageId"]
        .clone();
    for target in [json!(s.trigger()), theirs] {
        let r = app
            .call(
                &s,
                "edit-reply",
                json!({"messageId": target, "message": "hijack"}),
            )
            .await;
        assert_eq!(r.error(404), "NOT_FOUND");
    }
    assert_eq!(app.discord.call_count(Op::EditMessage), 0);
}

#[tokio::test]
async fn misskey_edit_recreates_the_note_under_the_original_anchor() {
    let app = app().await;
    let incoming = app.misskey.push_incoming("note:n1", "u1", "@bot hi");
    let s = app.session_for(&incoming);
    let old = app
        .call(&s, "send-reply", json!({"message": "first"}))
        .await
        .data()["messageId"]
        .as_str()
        .expect("id")
        .to_owned();
    let data = app
        .call(
            &s,
            "edit-reply",
            json!({"messageId": old, "message": "second"}),
        )
        .await
        .data()
        .clone();
    let new = data["messageId"].as_str().expect("id").to_owned();
    assert_ne!(new, old, "Misskey re-creates the note");
    assert_eq!(data["previousMessageId"], old);
    let edits = app.misskey.calls_of(Op::EditMessage);
    assert_eq!(
        edits,
        vec![Call::EditMessage {
            channel_id: "note:n1".into(),
            message_id: old.clone(),
            text: "second".into(),
            reply_to: Some(incoming.message_id.to_string()),
        }]
    );
    // The new id is this session's now: it can be read by default and edited again.
    let got = app.call(&s, "get-message", json!({})).await;
    assert_eq!(got.data()["messageId"], new);
    assert_eq!(got.data()["content"], "second");
    app.call(
        &s,
        "edit-reply",
        json!({"messageId": new, "message": "third"}),
    )
    .await
    .data();
}

#[tokio::test]
async fn get_message_reads_a_message_or_the_last_reply() {
    let app = app().await;
    let fresh = app.guild_session("u0");
    let r = app.call(&fresh, "get-message", json!({})).await;
    assert_eq!(r.error(404), "NOT_FOUND", "nothing sent yet");
    // (Identical calls of one session share a result for 1 s, so use another session below.)
    let s = app.guild_session("u1");
    let data = app
        .call(&s, "get-message", json!({"messageId": s.trigger()}))
        .await
        .data()
        .clone();
    assert_eq!(data["content"], "hello bot");
    assert_eq!(data["userId"], "u1");
    assert_eq!(data["isBot"], false);
    for key in ["messageId", "username", "timestamp"] {
        assert!(data.get(key).is_some(), "{key} missing: {data}");
    }
    app.call(&s, "send-reply", json!({"message": "mine"}))
        .await
        .data();
    let data = app.call(&s, "get-message", json!({})).await.data().clone();
    assert_eq!(data["content"], "mine");
    assert_eq!(data["isBot"], true);
    let r = app
        .call(&s, "get-message", json!({"messageId": "no-such"}))
        .await;
    assert_eq!(r.error(404), "NOT_FOUND");
}

#[tokio::test]
async fn platform_failures_are_502_with_retryable_and_do_not_use_the_quota() {
    let app = app().await;
    let s = app.guild_session("u1");
    app.discord
        .fail_next(Op::SendMessage, PlatformError::Transport("reset".into()));
    let r = app
        .call(&s, "send-reply", json!({"message": "try 1"}))
        .await;
    assert_eq!(r.error(502), "PLATFORM_ERROR");
    assert_eq!(r.body["retryable"], true);
    assert!(!s.registered.handle.responded());

    app.discord.fail_next(
        Op::SendMessage,
        PlatformError::Forbidden("missing access".into()),
    );
    let r = app
        .call(&s, "send-reply", json!({"message": "try 2"}))
        .await;
    assert_eq!(r.error(502), "PLATFORM_ERROR");
    assert_eq!(r.body["retryable"], false);

    app.discord
        .rate_limit_next(Op::SendMessage, std::time::Duration::from_secs(3));
    let r = app
        .call(&s, "send-reply", json!({"message": "try 3"}))
        .await;
    assert_eq!(r.error(502), "PLATFORM_ERROR");
    assert_eq!(r.body["retryable"], true);
    assert!(r.message().contains("3 second"), "{}", r.message());

    let r = app
        .call(&s, "send-reply", json!({"message": "try 4"}))
        .await;
    r.data();
    assert_eq!(app.discord.sent_texts(), vec!["try 4"]);
    assert!(
        s.terminated(),
        "the 4th attempt in total still ends the agent"
    );
}

#[tokio::test]
async fn a_reply_cut_short_by_the_platform_counts_and_reports_the_delivered_parts() {
    let app = app().await;
    let s = app.guild_session("u1");
    app.discord
        .fail_after(Op::SendMessage, 1, PlatformError::Transport("reset".into()));
    let text = "Part. ".repeat(500);
    let r = app.call(&s, "send-reply", json!({ "message": text })).await;
    let data = r.data();
    assert_eq!(data["partial"], true);
    assert_eq!(data["messageIds"].as_array().map(Vec::len), Some(1));
    assert!(s.registered.handle.responded());
    let again = app.call(&s, "send-reply", json!({"message": "rest"})).await;
    assert_eq!(again.error(429), "QUOTA_EXCEEDED");
}
