//! A failing model provider, told to the user in seconds and in words (issue 31): the real
//! daemon on the fake Discord runs the scripted fake agent, whose turn sends two model requests
//! through the daemon's gateway to a fake provider (answering 401, 429 or 500) or to a port
//! where nothing listens, then waits as OpenCode does while it retries. The daemon ends the turn
//! `agent.modelFailureGraceMs` after the first failure and tells the user why in the words of
//! `prompts/texts/en.md`; the operator gets one log record per cause (not per request),
//! `model_failures_total` and `/readyz` degraded until a request succeeds again.

mod common;

use std::time::{Duration, Instant};

use air_friends::conversation::notices::{Notice, Notices};
use air_friends::gateway::ProblemKind;
use common::fake_discord::CHANNEL_ID;
use common::fake_provider::FakeProvider;
use common::serve_discord::{DiscordServe, DiscordSetup, one_turn};
use serde_json::{Value, json};

/// The grace the test configures (the default is 10 s).
const GRACE_MS: u64 = 1_500;

/// Two chat requests to `/llm/<session>/<provider>/chat/completions` with the model named in
/// the file `target` ("<provider> <model>"), each printing the status the agent got.
fn two_requests(target: &std::path::Path) -> String {
    let request = r#"curl -s -o /dev/null -w '%{http_code} ' -H "Authorization: Bearer $SKILL_API_TOKEN" -H 'content-type: application/json' -d "{\"model\":\"$2\",\"stream\":true,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}" "$SKILL_API_URL/llm/$SESSION_ID/$1/chat/completions""#;
    format!("set -- $(cat '{}'); {request}; {request}", target.display())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_model_is_told_to_the_user_in_words_within_seconds() {
    let provider = FakeProvider::start("sk-upstream").await;
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead = format!("http://{}/v1", closed.local_addr().unwrap());
    drop(closed);
    let files = tempfile::tempdir().unwrap();
    let target = files.path().join("target");
    std::fs::write(&target, "fake 401").unwrap();
    let steps = vec![
        json!({"run": two_requests(&target)}),
        // OpenCode would keep retrying for over a minute.
        json!({"sleepMs": 8_000}),
    ];
    let agent_extra = format!(
        "  model: fake/honest\n  extraProviders: [gone]\n  modelFailureGraceMs: {GRACE_MS}\n  warm:\n    enabled: false\n  providers:\n    fake:\n      baseUrl: {}\n      apiKeyEnv: ''\n    gone:\n      baseUrl: {dead}\n      apiKeyEnv: ''\n",
        provider.base_url
    );
    let mut bot = DiscordServe::start(|_| DiscordSetup {
        script: one_turn(steps),
        agent_extra,
        ..DiscordSetup::default()
    })
    .await;
    let texts = Notices::load(
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("prompts"),
        "en",
    );

    let cases = [
        ("fake 401", ProblemKind::KeyRejected),
        ("fake 429", ProblemKind::RateLimited),
        ("fake 500", ProblemKind::ServerError),
        ("gone honest", ProblemKind::Unreachable),
    ];
    for (n, (what, kind)) in cases.iter().enumerate() {
        std::fs::write(&target, what).unwrap();
        let sent = Instant::now();
        bot.mention(&format!("question {n}"));
        let replies = bot.wait_bot_messages(CHANNEL_ID, n + 1).await;
        let took = sent.elapsed();
        let expected = texts.text("en", Notice::Model(*kind));
        assert_eq!(replies[n].content, expected, "{what}");
        assert_ne!(replies[n].content, Notice::Error.english());
        assert!(
            took < Duration::from_millis(GRACE_MS + 5_000),
            "{what}: told after {took:?}"
        );
        let (status, body) = bot.readyz().await;
        assert_eq!(status, 200, "degraded still serves: {body}");
        assert_eq!(body["status"], "degraded", "{body}");
        let model = check(&body, "model");
        assert_eq!(model["ok"], false);
        assert!(
            model["detail"].as_str().unwrap().contains(kind.describe()),
            "{what}: {body}"
        );
    }
    let finished = bot.wait_interactions_finished(cases.len());
    assert!(
        finished.iter().all(|l| l["outcome"] == "model_failed"),
        "{finished:#?}"
    );

    // A good request: the provider answers again.
    std::fs::write(&target, "fake honest").unwrap();
    bot.mention("one more");
    let ops = bot.ops_addr.clone();
    common::poll::eventually_async(
        Duration::from_secs(20),
        "/readyz ready again after a good model request",
        async || (common::serve::readyz(&ops).await.1["status"] == "ready").then_some(()),
    )
    .await;

    let metrics = bot.metrics().await;
    for (_, kind) in &cases {
        // Two requests per turn, each counted; one turn ended per cause.
        let line = format!(
            "air_friends_model_failures_total{{class=\"{}\"}} 2",
            kind.as_str()
        );
        assert!(metrics.contains(&line), "{line} missing in\n{metrics}");
        let line = format!(
            "air_friends_model_turns_ended_total{{class=\"{}\"}} 1",
            kind.as_str()
        );
        assert!(metrics.contains(&line), "{line} missing in\n{metrics}");
    }
    assert!(
        metrics.contains(r#"air_friends_turns_total{platform="discord",place="default",outcome="model_failed"} 4"#),
        "{metrics}"
    );

    let logged = bot.logged();
    let failing: Vec<&Value> = logged
        .iter()
        .filter(|l| {
            l["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("the model provider is failing"))
        })
        .collect();
    let classes: Vec<&str> = failing
        .iter()
        .map(|l| l["class"].as_str().unwrap())
        .collect();
    assert_eq!(
        classes,
        [
            "key_rejected",
            "rate_limited",
            "server_error",
            "unreachable"
        ],
        "one record per cause, not per request"
    );
    assert!(failing.iter().all(|l| l["level"] == "WARN"));
    // The recovery, once.
    let recovered = bot.logged_or_wait(|l| l["message"] == "the model provider answers again");
    assert_eq!(recovered["class"], "unreachable", "{recovered}");
    bot.stop();
}

/// The check `name` of a `/readyz` body.
fn check<'a>(body: &'a Value, name: &str) -> &'a Value {
    body["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no check {name} in {body}"))
}
