//! The audit trail: exactly one `skill_call` event per call with the documented fields, and no
//! caller token or message content in any log line.

mod skill_api_support;

use std::io;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use skill_api_support::app;

#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<u8>>>);

impl io::Write for Capture {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Capture {
    fn text(&self) -> String {
        String::from_utf8_lossy(
            &self
                .0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
        .into_owned()
    }
}

/// Captures this thread's JSON log lines at every level until the guard is dropped.
fn capture_logs() -> (Capture, tracing::subscriber::DefaultGuard) {
    let capture = Capture::default();
    let writer = capture.clone();
    let subscriber = tracing_subscriber::fmt()
        .json()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(move || writer.clone())
        .finish();
    (capture, tracing::subscriber::set_default(subscriber))
}

#[tokio::test]
async fn one_skill_call_event_per_call_and_no_secrets_in_logs() {
    let (capture, _guard) = capture_logs();

    let app = app();
    let s = app.session("alice");
    let token = s.caller_token.expose_secret().to_owned();
    let content = "PRIVATE-MESSAGE-CONTENT-42";

    let calls = [
        app.call_ok("echo", &s, json!({"text": content}))
            .await
            .status,
        app.call_ok("echo", &s, json!({"text": content}))
            .await
            .status, // dedup hit
        app.call("echo", &s, Some("wrong-token"), json!({"text": content}))
            .await
            .status,
        app.call("echo", &s, None, json!({"text": content}))
            .await
            .status,
        app.call_ok("fail", &s, json!({"kind": "internal"}))
            .await
            .status,
        app.call_ok("nope", &s, json!({})).await.status,
    ];

    let text = capture.text();
    assert!(!text.contains(&token), "caller token leaked into logs");
    assert!(!text.contains(content), "message content leaked into logs");
    assert!(
        !text.contains("wrong-token"),
        "presented token leaked into logs"
    );

    let events: Vec<Value> = text
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|v| v["fields"]["message"] == "skill_call")
        .collect();
    assert_eq!(events.len(), calls.len(), "{text}");
    for (event, status) in events.iter().zip(calls) {
        let fields = &event["fields"];
        assert_eq!(event["level"], "INFO");
        assert_eq!(fields["status"], status.as_u16());
        assert_eq!(fields["session_id"], s.session_id.as_str());
        // An unauthenticated caller is nobody: user/platform are only set once authenticated.
        let (platform, user) = if matches!(status.as_u16(), 401 | 403) {
            ("-", "-")
        } else {
            ("discord", "alice")
        };
        assert_eq!(fields["platform"], platform);
        assert_eq!(fields["user"], user);
        for key in ["skill", "outcome", "code", "duration_ms"] {
            assert!(!fields[key].is_null(), "{key} missing in {event}");
        }
        let expected = if status.is_success() { "ok" } else { "error" };
        assert_eq!(fields["outcome"], expected);
    }
    let codes: Vec<&str> = events
        .iter()
        .filter_map(|e| e["fields"]["code"].as_str())
        .collect();
    assert_eq!(
        codes,
        [
            "OK",
            "OK",
            "AUTH_FAILED",
            "AUTH_MISSING",
            "INTERNAL",
            "UNKNOWN_SKILL"
        ]
    );
    assert_eq!(events[1]["fields"]["dedup"], "hit");
    // The internal cause is logged (once), separately from the audit event.
    assert!(
        text.contains("secret.db"),
        "the 500 cause must reach the log"
    );
}

/// The skill name in the path is the caller's (a hostile agent's) until it is resolved: the
/// audit line and the error echo at most 64 characters of it, cut on a character boundary, and
/// metrics count it under `unknown`, never under the name itself.
#[tokio::test]
async fn a_hostile_skill_name_is_echoed_cut_to_64_characters_and_counted_as_unknown() {
    let (capture, _guard) = capture_logs();

    let app = app();
    let s = app.session("alice");
    // 200 × "é" once percent-decoded: 400 bytes, two per character.
    let r = app.call_ok(&"%C3%A9".repeat(200), &s, json!({})).await;
    assert_eq!(r.status.as_u16(), 404);
    assert_eq!(r.code(), "UNKNOWN_SKILL");
    let message = r.body["error"].as_str().expect("error message");
    let cut = "é".repeat(64);
    assert!(message.contains(&format!("\"{cut}\"")), "{message}");

    let text = capture.text();
    let event = text
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .find(|v| v["fields"]["message"] == "skill_call")
        .expect("skill_call event");
    assert_eq!(event["fields"]["skill"], cut.as_str());
    assert_eq!(event["fields"]["code"], "UNKNOWN_SKILL");

    let metrics = app.metrics_text();
    assert!(
        metrics.contains(r#"skill_calls_total{skill="unknown",status="404"} 1"#),
        "{metrics}"
    );
    assert!(!metrics.contains('é'), "{metrics}");
}
