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

#[tokio::test]
async fn one_skill_call_event_per_call_and_no_secrets_in_logs() {
    let capture = Capture::default();
    let writer = capture.clone();
    let subscriber = tracing_subscriber::fmt()
        .json()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(move || writer.clone())
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

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
        let (platform, user) = if status.as_u16() == 403 {
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
