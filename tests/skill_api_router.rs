//! Router-level tests of the Skill API (`oneshot`): every row of the status table and
//! the pipeline order (auth before de-duplication, caching rules, rate limits,
//! termination after the response).

mod skill_api_support;

use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Method, StatusCode, header};
use serde_json::json;
use skill_api_support::{TestApp, app};

// ---------------------------------------------------------------------------------------------
// 200

#[tokio::test]
async fn success_has_the_success_shape_and_schema_defaults() {
    let app = app();
    let s = app.session("alice");
    let r = app.call_ok("echo", &s, json!({"text": "hi"})).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(
        r.body,
        json!({"success": true, "data": {"params": {"text": "hi", "limit": 10}, "user": "alice"}})
    );
}

// ---------------------------------------------------------------------------------------------
// 400

#[tokio::test]
async fn malformed_bodies_are_invalid_json() {
    let app = app();
    let s = app.session("alice");
    let token = s.caller_token.expose_secret();
    let cases: Vec<(Option<&str>, String)> = vec![
        (Some("application/json"), "{not json".into()),
        (
            Some("application/json"),
            json!({"parameters": {}}).to_string(),
        ),
        (
            Some("application/json"),
            json!({"sessionId": s.session_id.as_str(), "parameters": [1, 2]}).to_string(),
        ),
        (
            Some("application/json"),
            json!({"sessionId": s.session_id.as_str(), "parameters": {}, "extra": 1}).to_string(),
        ),
        (
            Some("text/plain"),
            json!({"sessionId": s.session_id.as_str(), "parameters": {"text": "x"}}).to_string(),
        ),
        (
            None,
            json!({"sessionId": s.session_id.as_str(), "parameters": {"text": "x"}}).to_string(),
        ),
    ];
    for (content_type, body) in cases {
        let r = app
            .send(
                Method::POST,
                "/api/skill/echo",
                Some(token),
                content_type,
                Body::from(body.clone()),
            )
            .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{body}");
        assert_eq!(r.code(), "INVALID_JSON", "{body}");
    }
}

#[tokio::test]
async fn invalid_params_carry_details_with_paths() {
    let app = app();
    let s = app.session("alice");
    let r = app
        .call_ok("echo", &s, json!({"limit": 500, "bogus": true}))
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(r.code(), "INVALID_PARAMS");
    let details = r.body["details"].as_array().expect("details");
    let paths: Vec<&str> = details.iter().filter_map(|d| d["path"].as_str()).collect();
    for expected in ["/text", "/limit", "/bogus"] {
        assert!(
            paths.contains(&expected),
            "{expected} missing in {details:?}"
        );
    }
    assert!(
        details
            .iter()
            .all(|d| d["problem"].as_str().is_some_and(|p| !p.is_empty()))
    );
}

// ---------------------------------------------------------------------------------------------
// 401 / 403

#[tokio::test]
async fn unknown_session_is_401_even_without_a_token() {
    let app = app();
    let s = app.session("alice");
    app.state.sessions().unregister(&s.session_id);
    for token in [None, Some("whatever"), Some(s.caller_token.expose_secret())] {
        let r = app.call("echo", &s, token, json!({"text": "x"})).await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED);
        assert_eq!(r.code(), "SESSION_NOT_FOUND");
    }
}

#[tokio::test(start_paused = true)]
async fn idle_expired_session_is_401_and_calls_keep_sessions_alive() {
    let app = app(); // session_timeout = 10 s
    let active = app.session("alice");
    let idle = app.session("bob");
    tokio::time::advance(Duration::from_secs(6)).await;
    assert_eq!(
        app.call_ok("echo", &active, json!({"text": "a"}))
            .await
            .status,
        StatusCode::OK
    );
    // A call with the wrong token does not keep a session alive.
    let r = app
        .call("echo", &idle, Some("wrong"), json!({"text": "b"}))
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    tokio::time::advance(Duration::from_secs(6)).await;
    assert_eq!(
        app.call_ok("echo", &active, json!({"text": "c"}))
            .await
            .status,
        StatusCode::OK
    );
    let r = app.call_ok("echo", &idle, json!({"text": "d"})).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    assert_eq!(r.code(), "SESSION_NOT_FOUND");
}

/// A missing token is 401 (the caller is not known), a wrong one 403 — the model gateway's
/// statuses (`tests/gateway.rs` `a_missing_key_is_401_a_wrong_key_403_and_an_unknown_session_401`).
#[tokio::test]
async fn a_missing_token_is_401_and_a_wrong_one_403() {
    let app = app();
    let s = app.session("alice");
    let other = app.session("mallory");
    let r = app.call("echo", &s, None, json!({"text": "x"})).await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::UNAUTHORIZED, "AUTH_MISSING")
    );
    let r = app
        .send(
            Method::POST,
            "/api/skill/echo",
            None,
            Some("application/json"),
            Body::from(json!({"sessionId": s.session_id.as_str()}).to_string()),
        )
        .await;
    assert_eq!(r.code(), "AUTH_MISSING");
    for wrong in ["wrong", other.caller_token.expose_secret()] {
        let r = app
            .call("echo", &s, Some(wrong), json!({"text": "x"}))
            .await;
        assert_eq!((r.status, r.code()), (StatusCode::FORBIDDEN, "AUTH_FAILED"));
    }
    let mut almost = s.caller_token.expose_secret().to_owned();
    almost.pop();
    let r = app
        .call("echo", &s, Some(&almost), json!({"text": "x"}))
        .await;
    assert_eq!(r.code(), "AUTH_FAILED");
}

#[tokio::test]
async fn between_the_turns_of_a_kept_agent_calls_are_409_no_turn_open_and_change_nothing() {
    let app = app();
    let s = app.session("alice");
    assert_eq!(
        app.call_ok("echo", &s, json!({"text": "in turn"}))
            .await
            .status,
        StatusCode::OK
    );
    assert!(!s.handle.end_turn(), "no termination was requested");
    let r = app
        .call_ok("echo", &s, json!({"text": "after the turn"}))
        .await;
    assert_eq!((r.status, r.code()), (StatusCode::CONFLICT, "NO_TURN_OPEN"));
    assert!(
        r.body["error"]
            .as_str()
            .unwrap()
            .contains("nothing was delivered"),
        "{}",
        r.body
    );
    // A wrong token is still 403 first: a closed session tells a stranger nothing.
    let r = app
        .call("echo", &s, Some("wrong"), json!({"text": "x"}))
        .await;
    assert_eq!(r.code(), "AUTH_FAILED");
    s.handle.begin_turn(Some("msg-2".into()));
    assert_eq!(
        app.call_ok("echo", &s, json!({"text": "next turn"}))
            .await
            .status,
        StatusCode::OK
    );
}

#[tokio::test]
async fn forbidden_context_is_403() {
    let app = app();
    let s = app.session("alice");
    let r = app.call_ok("fail", &s, json!({"kind": "forbidden"})).await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::FORBIDDEN, "FORBIDDEN_CONTEXT")
    );
    assert!(
        r.body["error"]
            .as_str()
            .is_some_and(|e| e.contains("direct messages"))
    );
}

#[tokio::test]
async fn a_skill_the_place_does_not_grant_is_403_and_a_granted_one_answers() {
    let app = app();
    let mut ctx = skill_api_support::context("alice", false);
    ctx.place = air_friends::session::PlaceGrant {
        name: "support".into(),
        skills: Some(std::sync::Arc::new(["fail".to_owned()].into())),
        ..Default::default()
    };
    let s = app.state.sessions().register(ctx).expect("register");
    let r = app.call_ok("echo", &s, json!({"text": "hi"})).await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::FORBIDDEN, "FORBIDDEN_CONTEXT"),
        "{}",
        r.body
    );
    assert!(
        r.body["error"]
            .as_str()
            .is_some_and(|e| e.contains("place")),
        "{}",
        r.body
    );
    // The granted skill still answers in the same session.
    let r = app.call_ok("fail", &s, json!({"kind": "forbidden"})).await;
    assert_eq!(r.code(), "FORBIDDEN_CONTEXT");
    assert!(
        r.body["error"]
            .as_str()
            .is_some_and(|e| e.contains("direct messages")),
        "{}",
        r.body
    );
}

// ---------------------------------------------------------------------------------------------
// 404 / 405 / 413

#[tokio::test]
async fn unknown_skill_is_404_and_lists_the_available_ones() {
    let app = app();
    let s = app.session("alice");
    let r = app.call_ok("no-such-skill", &s, json!({})).await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::NOT_FOUND, "UNKNOWN_SKILL")
    );
    let available = r.body["availableSkills"].as_array().expect("list");
    assert!(available.contains(&json!("echo")));
    assert!(
        app.metrics_text()
            .contains(r#"skill_calls_total{skill="unknown",status="404"} 1"#)
    );
}

#[tokio::test]
async fn unknown_skill_is_not_revealed_before_authentication() {
    let app = app();
    let s = app.session("alice");
    let r = app
        .call("no-such-skill", &s, Some("wrong"), json!({}))
        .await;
    assert_eq!(r.code(), "AUTH_FAILED");
}

#[tokio::test]
async fn not_found_is_404() {
    let app = app();
    let s = app.session("alice");
    let r = app.call_ok("fail", &s, json!({"kind": "not_found"})).await;
    assert_eq!((r.status, r.code()), (StatusCode::NOT_FOUND, "NOT_FOUND"));
}

#[tokio::test]
async fn other_methods_are_405_json() {
    let app = app();
    for method in [Method::GET, Method::PUT, Method::DELETE] {
        let r = app
            .send(method.clone(), "/api/skill/echo", None, None, Body::empty())
            .await;
        assert_eq!(r.status, StatusCode::METHOD_NOT_ALLOWED, "{method}");
        assert_eq!(r.code(), "METHOD_NOT_ALLOWED");
    }
}

#[tokio::test]
async fn other_paths_are_404_json() {
    let app = app();
    let r = app
        .send(Method::POST, "/api/other", None, None, Body::empty())
        .await;
    assert_eq!((r.status, r.code()), (StatusCode::NOT_FOUND, "NOT_FOUND"));
}

#[tokio::test]
async fn bodies_over_1_mib_are_413_json() {
    let app = app();
    let s = app.session("alice");
    let big = json!({
        "sessionId": s.session_id.as_str(),
        "parameters": {"text": "x".repeat(1024 * 1024)}
    })
    .to_string();
    // Without Content-Length (streamed body): the limit is enforced while reading.
    let r = app
        .send(
            Method::POST,
            "/api/skill/echo",
            Some(s.caller_token.expose_secret()),
            Some("application/json"),
            Body::from(big.clone()),
        )
        .await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::PAYLOAD_TOO_LARGE, "BODY_TOO_LARGE")
    );
    // With a declared Content-Length: rejected before reading.
    let request = axum::http::Request::builder()
        .method(Method::POST)
        .uri("/api/skill/echo")
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::CONTENT_LENGTH, big.len())
        .body(Body::from(big))
        .expect("request");
    let r = skill_api_support::SkillResponse::read(
        tower::ServiceExt::oneshot(app.router.clone(), request)
            .await
            .expect("router"),
    )
    .await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::PAYLOAD_TOO_LARGE, "BODY_TOO_LARGE")
    );
    // Just under the limit is fine (and then fails schema validation on length, not size).
    let r = app
        .call_ok("echo", &s, json!({"text": "x".repeat(1000 * 1000)}))
        .await;
    assert_eq!(r.code(), "INVALID_PARAMS");
}

// ---------------------------------------------------------------------------------------------
// 429

#[tokio::test]
async fn quota_exceeded_is_429() {
    let app = app();
    let s = app.session("alice");
    let r = app.call_ok("fail", &s, json!({"kind": "quota"})).await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::TOO_MANY_REQUESTS, "QUOTA_EXCEEDED")
    );
    assert!(
        r.body["error"]
            .as_str()
            .is_some_and(|e| e.contains("edit-reply"))
    );
    assert!(r.headers.get(header::RETRY_AFTER).is_none());
    assert!(!s.termination.is_requested());
}

#[tokio::test]
async fn rate_limit_is_429_with_retry_after_per_skill_and_user() {
    let app = app();
    let s1 = app.session("alice");
    let s2 = app.session("alice"); // same user, another session: shares the limit
    let bob = app.session("bob");
    assert_eq!(
        app.call_ok("limited", &s1, json!({"n": 1})).await.status,
        StatusCode::OK
    );
    assert_eq!(
        app.call_ok("limited", &s2, json!({"n": 2})).await.status,
        StatusCode::OK
    );
    let r = app.call_ok("limited", &s1, json!({"n": 3})).await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::TOO_MANY_REQUESTS, "RATE_LIMITED")
    );
    let retry_after: u64 = r.headers[header::RETRY_AFTER]
        .to_str()
        .expect("ascii")
        .parse()
        .expect("seconds");
    assert!((1..=60).contains(&retry_after), "{retry_after}");
    let ms = r.body["retryAfterMs"].as_u64().expect("retryAfterMs");
    assert!(ms > 0 && ms <= 60_000 && retry_after == ms.div_ceil(1000));
    assert_eq!(
        app.call_ok("limited", &bob, json!({"n": 4})).await.status,
        StatusCode::OK
    );
    // Other skills are not affected.
    assert_eq!(
        app.call_ok("counter", &s1, json!({})).await.status,
        StatusCode::OK
    );
}

// ---------------------------------------------------------------------------------------------
// 502 / 503 / 500

#[tokio::test]
async fn platform_errors_are_502_with_retryable() {
    let app = app();
    let s = app.session("alice");
    let r = app.call_ok("fail", &s, json!({"kind": "platform"})).await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::BAD_GATEWAY, "PLATFORM_ERROR")
    );
    assert_eq!(r.body["retryable"], true);
    let r = app
        .call_ok("fail", &s, json!({"kind": "platform_fatal"}))
        .await;
    assert_eq!(r.body["retryable"], false);
}

#[tokio::test]
async fn disabled_skill_is_503() {
    let app = app();
    let s = app.session("alice");
    let r = app.call_ok("disabled", &s, json!({})).await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::SERVICE_UNAVAILABLE, "SKILL_DISABLED")
    );
}

#[tokio::test]
async fn internal_errors_are_500_and_hide_the_cause() {
    let app = app();
    let s = app.session("alice");
    let r = app.call_ok("fail", &s, json!({"kind": "internal"})).await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::INTERNAL_SERVER_ERROR, "INTERNAL")
    );
    let text = r.body.to_string();
    assert!(
        !text.contains("database") && !text.contains("secret.db"),
        "{text}"
    );
}

#[tokio::test]
async fn a_panicking_handler_is_a_500_not_a_dropped_connection() {
    let app = app();
    let s = app.session("alice");
    let r = app.call_ok("fail", &s, json!({"kind": "panic"})).await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::INTERNAL_SERVER_ERROR, "INTERNAL")
    );
    assert!(!r.body.to_string().contains("handler bug"));
    // The server keeps working.
    assert_eq!(
        app.call_ok("echo", &s, json!({"text": "x"})).await.status,
        StatusCode::OK
    );
}

#[tokio::test(start_paused = true)]
async fn a_hung_handler_times_out_with_a_500() {
    let app = skill_api_support::app_with(air_friends::skill_api::SkillApiSettings {
        handler_timeout: Duration::from_millis(100),
        ..skill_api_support::settings()
    });
    let s = app.session("alice");
    let r = app.call_ok("slow", &s, json!({})).await; // the handler needs 300 ms
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::INTERNAL_SERVER_ERROR, "INTERNAL")
    );
}

// ---------------------------------------------------------------------------------------------
// De-duplication and pipeline order

fn count(app: &TestApp) -> usize {
    app.counter_calls.load(Ordering::SeqCst)
}

#[tokio::test]
async fn leaked_session_id_with_wrong_token_cannot_poison_the_cache() {
    let app = app();
    let s = app.session("alice");
    // The attacker goes first: 403, and nothing is cached or run.
    let r = app
        .call(
            "counter",
            &s,
            Some("stolen-id-but-no-token"),
            json!({"a": 1}),
        )
        .await;
    assert_eq!(r.code(), "AUTH_FAILED");
    assert_eq!(count(&app), 0);
    // The legitimate caller runs the handler and gets a real answer.
    let legit = app.call_ok("counter", &s, json!({"a": 1})).await;
    assert_eq!(legit.status, StatusCode::OK);
    assert_eq!(count(&app), 1);
}

#[tokio::test]
async fn wrong_token_cannot_read_a_cached_result() {
    let app = app();
    let s = app.session("alice");
    let legit = app.call_ok("counter", &s, json!({"a": 1})).await;
    assert_eq!(legit.status, StatusCode::OK);
    for (token, status) in [
        (None, StatusCode::UNAUTHORIZED),
        (Some("wrong"), StatusCode::FORBIDDEN),
    ] {
        let r = app.call("counter", &s, token, json!({"a": 1})).await;
        assert_eq!(r.status, status);
        assert!(
            r.body.get("data").is_none(),
            "cached data leaked: {:?}",
            r.body
        );
    }
    assert_eq!(count(&app), 1);
    // 403s were not cached either: the owner still gets the cached success.
    let again = app.call_ok("counter", &s, json!({"a": 1})).await;
    assert_eq!(again.body, legit.body);
}

#[tokio::test]
async fn auth_failures_are_never_cached() {
    let app = app();
    let s = app.session("alice");
    for _ in 0..2 {
        let r = app.call("counter", &s, None, json!({"a": 1})).await;
        assert_eq!(r.code(), "AUTH_MISSING");
    }
    assert_eq!(
        app.call_ok("counter", &s, json!({"a": 1})).await.status,
        StatusCode::OK
    );
    let other = app.session("bob");
    app.state.sessions().unregister(&other.session_id);
    assert_eq!(
        app.call_ok("counter", &other, json!({"a": 1})).await.code(),
        "SESSION_NOT_FOUND"
    );
    assert_eq!(count(&app), 1);
}

#[tokio::test(start_paused = true)]
async fn identical_calls_within_the_window_run_once() {
    let app = app();
    let s = app.session("alice");
    let first = app.call_ok("counter", &s, json!({"b": 2, "a": 1})).await;
    // Same parameters in another key order: same canonical JSON.
    tokio::time::advance(Duration::from_millis(900)).await;
    let second = app.call_ok("counter", &s, json!({"a": 1, "b": 2})).await;
    assert_eq!(first.status, StatusCode::OK);
    assert_eq!(first.body, second.body);
    assert_eq!(count(&app), 1);
    // Different parameters or another session run again.
    app.call_ok("counter", &s, json!({"a": 2})).await;
    let other = app.session("alice");
    app.call_ok("counter", &other, json!({"a": 1, "b": 2}))
        .await;
    assert_eq!(count(&app), 3);
}

#[tokio::test(start_paused = true)]
async fn a_call_after_the_window_runs_again() {
    let app = app();
    let s = app.session("alice");
    let first = app.call_ok("counter", &s, json!({"a": 1})).await;
    tokio::time::advance(Duration::from_millis(1100)).await;
    let second = app.call_ok("counter", &s, json!({"a": 1})).await;
    assert_eq!(count(&app), 2);
    assert_ne!(first.body, second.body);
}

#[tokio::test(start_paused = true)]
async fn error_outcomes_are_shared_within_the_window_too() {
    let app = app();
    let s = app.session("alice");
    let a = app.call_ok("fail", &s, json!({"kind": "platform"})).await;
    let b = app.call_ok("fail", &s, json!({"kind": "platform"})).await;
    assert_eq!(a.body, b.body);
    assert_eq!(a.status, StatusCode::BAD_GATEWAY);
}

#[tokio::test(start_paused = true)]
async fn concurrent_identical_calls_join_the_in_flight_one() {
    let app = app();
    let s = app.session("alice");
    let (a, b, c) = tokio::join!(
        app.call_ok("slow", &s, json!({"x": 1})),
        app.call_ok("slow", &s, json!({"x": 1})),
        app.call_ok("slow", &s, json!({"x": 1})),
    );
    assert_eq!(app.slow_calls.load(Ordering::SeqCst), 1);
    assert_eq!(a.status, StatusCode::OK);
    assert_eq!(a.body, b.body);
    assert_eq!(a.body, c.body);
}

#[tokio::test]
async fn non_cacheable_skills_run_every_time() {
    let app = app();
    let s = app.session("alice");
    let a = app.call_ok("nocache", &s, json!({"x": 1})).await;
    let b = app.call_ok("nocache", &s, json!({"x": 1})).await;
    assert_eq!(app.nocache_calls.load(Ordering::SeqCst), 2);
    assert_ne!(a.body, b.body);
}

/// Starts a call of `skill` with `{"x": 9}` and abandons it (the client goes away) after 50 ms,
/// while the 300 ms handler is still running.
async fn abandon(app: &TestApp, s: &air_friends::session::RegisteredSession, skill: &str) {
    let token = s.caller_token.expose_secret().to_owned();
    let body = json!({"sessionId": s.session_id.as_str(), "parameters": {"x": 9}}).to_string();
    let abandoned = tokio::time::timeout(
        Duration::from_millis(50),
        app.send_raw(
            Method::POST,
            &format!("/api/skill/{skill}"),
            Some(&token),
            Some("application/json"),
            Body::from(body),
        ),
    )
    .await;
    assert!(abandoned.is_err(), "the call should still be running");
}

#[tokio::test(start_paused = true)]
async fn a_disconnecting_client_does_not_cancel_the_running_skill() {
    let app = app();
    let s = app.session("alice");
    abandon(&app, &s, "slow").await;
    // The agent retries: it joins the still-running execution instead of running it twice.
    let retry = app.call_ok("slow", &s, json!({"x": 9})).await;
    assert_eq!(retry.status, StatusCode::OK);
    assert_eq!(app.slow_calls.load(Ordering::SeqCst), 1);
}

/// A read-only call runs on the request's own task: a client that gives up cancels it (nothing
/// was changed), and its retry runs it afresh instead of waiting for an abandoned run.
#[tokio::test(start_paused = true)]
async fn an_abandoned_read_only_call_is_cancelled_and_its_retry_runs_anew() {
    let app = app();
    let s = app.session("alice");
    abandon(&app, &s, "slow-read").await;
    let started = tokio::time::Instant::now();
    let retry = app.call_ok("slow-read", &s, json!({"x": 9})).await;
    assert_eq!(retry.status, StatusCode::OK);
    assert_eq!(retry.body["data"]["count"], 2, "{}", retry.body);
    assert_eq!(app.slow_read_calls.load(Ordering::SeqCst), 2);
    assert!(started.elapsed() >= Duration::from_millis(300));
}

// ---------------------------------------------------------------------------------------------
// Termination (doom loop)

#[tokio::test]
async fn termination_fires_only_after_the_response_is_sent() {
    let app = app();
    let s = app.session("alice");
    let body = json!({"sessionId": s.session_id.as_str(), "parameters": {"kind": "terminate_ok"}});
    let response = app
        .send_raw(
            Method::POST,
            "/api/skill/fail",
            Some(s.caller_token.expose_secret()),
            Some("application/json"),
            Body::from(body.to_string()),
        )
        .await;
    assert_eq!(response.status(), StatusCode::OK);
    assert!(
        !s.termination.is_requested(),
        "the runner must not be told before the response went out"
    );
    let r = skill_api_support::SkillResponse::read(response).await;
    assert_eq!(r.body["data"]["edited"], true);
    assert!(s.termination.is_requested(), "fired once the body was sent");
    assert_eq!(
        s.termination.reason().as_deref(),
        Some("edit-reply called 3 times")
    );
    tokio::time::timeout(Duration::from_secs(1), s.termination.requested())
        .await
        .expect("signal resolves");
}

#[tokio::test]
async fn quota_exceeded_with_terminate_stops_the_agent_after_responding() {
    let app = app();
    let s = app.session("alice");
    let body =
        json!({"sessionId": s.session_id.as_str(), "parameters": {"kind": "quota_terminate"}});
    let response = app
        .send_raw(
            Method::POST,
            "/api/skill/fail",
            Some(s.caller_token.expose_secret()),
            Some("application/json"),
            Body::from(body.to_string()),
        )
        .await;
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(!s.termination.is_requested());
    let r = skill_api_support::SkillResponse::read(response).await;
    assert_eq!(r.code(), "QUOTA_EXCEEDED");
    assert_eq!(r.body["sessionTerminated"], true);
    assert!(s.termination.is_requested());
    // Other sessions are untouched.
    let other = app.session("bob");
    assert!(!other.termination.is_requested());
}

// ---------------------------------------------------------------------------------------------
// Metrics

#[tokio::test]
async fn calls_are_counted_by_skill_and_status() {
    let app = app();
    let s = app.session("alice");
    app.call_ok("echo", &s, json!({"text": "a"})).await;
    app.call_ok("echo", &s, json!({})).await;
    app.call("echo", &s, Some("bad"), json!({"text": "b"}))
        .await;
    let text = app.metrics_text();
    for line in [
        r#"skill_calls_total{skill="echo",status="200"} 1"#,
        r#"skill_calls_total{skill="echo",status="403"} 1"#,
        r#"skill_api_request_duration_seconds_count{skill="echo"} 3"#,
    ] {
        assert!(text.contains(line), "{line} missing in\n{text}");
    }
    assert!(
        text.contains(r#"skill_calls_total{skill="echo",status="400"} 1"#),
        "{text}"
    );
}
