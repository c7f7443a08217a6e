//! The model gateway's route through its router (`oneshot`), against fake upstreams on
//! loopback: the key swap, the caller checks, streaming without buffering, metering into the
//! metrics and the store, upstream failures mapped for the operator, budgets; the allow-list
//! (`gateway/allow_list.rs`) and usage that cannot be skipped (`gateway/usage.rs`).

#[path = "gateway/allow_list.rs"]
mod allow_list;
mod common;
#[path = "gateway/usage.rs"]
mod usage;

use air_friends::platform::Origin;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use air_friends::config::{AgentConfig, AuthHeader, BudgetConfig, ProviderConfig};
use air_friends::gateway::{BudgetLimit, Gateway, GatewayMetrics, GatewaySettings};
use air_friends::observability::{Format, Metrics};
use air_friends::platform::PlatformKind;
use air_friends::session::{RegisteredSession, SessionContext, SessionRegistry};
use air_friends::skill_api::auth::SocketSession;
use air_friends::store::{LlmUsage, Store, WorkspaceKey};
use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, Request, StatusCode, header};
use axum::response::Response;
use chrono::Utc;
use common::fake_llm::{FakeLlm, Step};
use common::fake_provider::{FakeProvider, script};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tower::ServiceExt;

const REAL_KEY: &str = "sk-real-provider-key-0123456789";
const CHAT_BODY: &str = r#"{"model":"fake-model","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}"#;

/// A gateway over a temporary store, with one registered session of `discord/u1`.
struct Harness {
    gateway: Gateway,
    metrics: Metrics,
    store: Store,
    sessions: SessionRegistry,
    session: RegisteredSession,
    _dir: tempfile::TempDir,
}

fn provider(base_url: &str, auth: AuthHeader, pass: &[&str]) -> ProviderConfig {
    ProviderConfig {
        base_url: base_url.into(),
        api_key_env: "TEST_PROVIDER_KEY".into(),
        auth_header: auth,
        pass_headers: pass.iter().map(|h| (*h).to_owned()).collect(),
        anonymous_key: None,
    }
}

fn context(user: &str) -> SessionContext {
    SessionContext {
        place: Default::default(),
        origin: Origin {
            platform: PlatformKind::Discord,
            channel_id: "c1".into(),
            guild_id: None,
            user_id: user.into(),
            username: "User".into(),
            is_dm: true,
        },
        purpose: Default::default(),
        trigger_message_id: None,
        workspace: "/tmp/ws".into(),
    }
}

async fn harness_with(
    providers: BTreeMap<String, ProviderConfig>,
    budget: BudgetConfig,
    settings: GatewaySettings,
) -> Harness {
    let agent = AgentConfig {
        model: Some("fake/fake-model".into()),
        providers,
        budget,
        ..AgentConfig::default()
    };
    harness_for(agent, settings).await
}

async fn harness_for(agent: AgentConfig, settings: GatewaySettings) -> Harness {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("db.sqlite")).await.unwrap();
    let metrics = Metrics::new();
    let mut gateway_metrics = None;
    metrics.register(|r| gateway_metrics = Some(GatewayMetrics::new(r)));
    let sessions = SessionRegistry::new(Duration::from_secs(600));
    let session = sessions.register(context("u1")).unwrap();
    let env = |name: &str| (name == "TEST_PROVIDER_KEY").then(|| REAL_KEY.to_owned());
    let gateway = Gateway::new(
        &agent,
        &env,
        sessions.clone(),
        store.clone(),
        gateway_metrics.unwrap(),
        settings,
    )
    .unwrap();
    Harness {
        gateway,
        metrics,
        store,
        sessions,
        session,
        _dir: dir,
    }
}

/// The one provider `fake` at `base_url`, with a bearer key.
fn fake_only(base_url: &str) -> BTreeMap<String, ProviderConfig> {
    BTreeMap::from([(
        "fake".to_owned(),
        provider(base_url, AuthHeader::Bearer, &[]),
    )])
}

async fn harness(base_url: &str) -> Harness {
    harness_with(
        fake_only(base_url),
        BudgetConfig::default(),
        GatewaySettings::default(),
    )
    .await
}

impl Harness {
    fn token(&self) -> &str {
        self.session.caller_token.expose_secret()
    }

    fn chat(&self, path: &str) -> axum::http::request::Builder {
        Request::builder()
            .method("POST")
            .uri(format!("/llm/{}/fake/{path}", self.session.session_id))
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::CONTENT_LENGTH, CHAT_BODY.len())
    }

    fn authorized_chat(&self, path: &str) -> Request<Body> {
        self.chat(path)
            .header(header::AUTHORIZATION, format!("Bearer {}", self.token()))
            .body(Body::from(CHAT_BODY))
            .unwrap()
    }

    /// `POST chat/completions` streaming, authorized, asking the fake provider for `script`
    /// (its `model`), without `stream_options`.
    fn chat_as(&self, script: &str) -> Request<Body> {
        self.json_to("fake", "chat/completions", &chat_body(script))
    }

    /// `POST` of `body` (JSON) to `provider`'s `rest`, authorized.
    fn json_to(&self, provider: &str, rest: &str, body: &Value) -> Request<Body> {
        let body = body.to_string();
        self.request_to(provider, "POST", rest)
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::CONTENT_LENGTH, body.len())
            .body(Body::from(body))
            .unwrap()
    }

    /// A request to `provider`'s `rest` with the session's token, to complete with a body.
    fn request_to(&self, provider: &str, method: &str, rest: &str) -> axum::http::request::Builder {
        Request::builder()
            .method(method)
            .uri(format!(
                "/llm/{}/{provider}/{rest}",
                self.session.session_id
            ))
            .header(header::AUTHORIZATION, format!("Bearer {}", self.token()))
    }

    async fn send(&self, request: Request<Body>) -> Response {
        self.gateway.router().oneshot(request).await.unwrap()
    }

    fn metrics_text(&self) -> String {
        self.metrics.encode(Format::OpenMetrics).unwrap()
    }

    /// Fails unless every line is in the metrics.
    fn assert_metrics(&self, lines: &[&str]) {
        let text = self.metrics_text();
        for line in lines {
            assert!(text.contains(line), "{line} missing in\n{text}");
        }
    }

    async fn usage_today(&self, user: Option<&str>) -> LlmUsage {
        self.gateway.drain().await;
        let ws = user.map(|u| WorkspaceKey::new("discord", u).unwrap());
        self.store
            .llm_usage_on(Utc::now().date_naive(), ws.as_ref())
            .await
            .unwrap()
    }
}

/// A streamed chat request's body asking the fake provider for `script`.
fn chat_body(script: &str) -> Value {
    json!({"model": script, "stream": true, "messages": [{"role": "user", "content": "hi"}]})
}

async fn body_text(response: Response) -> String {
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    String::from_utf8(bytes.to_vec()).unwrap()
}

/// The first chunk of `body`, within 10 s (the `gated` script sends it while it holds the
/// second).
async fn first_chunk(body: &mut Body) -> Bytes {
    tokio::time::timeout(Duration::from_secs(10), body.frame())
        .await
        .expect("the first chunk arrived while the upstream still holds the second")
        .unwrap()
        .unwrap()
        .into_data()
        .unwrap()
}

async fn error_code(response: Response) -> String {
    let body: Value = serde_json::from_str(&body_text(response).await).unwrap();
    body["error"]["code"].as_str().unwrap().to_owned()
}

async fn fake_llm() -> FakeLlm {
    FakeLlm::start(vec![Step::Text("hello".into())]).await
}

#[tokio::test]
async fn the_upstream_receives_the_real_key_and_never_the_session_token() {
    let llm = fake_llm().await;
    let h = harness(&llm.base_url).await;
    let request = h
        .chat("chat/completions")
        .header(header::AUTHORIZATION, format!("Bearer {}", h.token()))
        .header("x-api-key", h.token())
        .header(header::COOKIE, "session=abc")
        .header("x-forwarded-for", "10.0.0.1")
        .header(header::ACCEPT_ENCODING, "gzip")
        .body(Body::from(CHAT_BODY))
        .unwrap();
    let response = h.send(request).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        response.headers()[header::CONTENT_TYPE],
        "text/event-stream"
    );
    let body = body_text(response).await;
    assert!(body.contains("\"content\":\"Chat\""), "{body}");
    assert!(body.ends_with("data: [DONE]\n\n"), "{body}");

    let seen = llm.request_headers();
    assert_eq!(seen.len(), 1);
    let headers = &seen[0];
    assert_eq!(headers[header::AUTHORIZATION], format!("Bearer {REAL_KEY}"));
    assert_eq!(headers[header::CONTENT_LENGTH], CHAT_BODY.len().to_string());
    for (name, value) in headers {
        let value = value.to_str().unwrap_or("");
        assert!(
            !value.contains(h.token()),
            "{name} carried the session token"
        );
        assert!(
            ![
                header::COOKIE.as_str(),
                "x-api-key",
                "x-forwarded-for",
                "accept-encoding"
            ]
            .contains(&name.as_str()),
            "{name} was forwarded"
        );
    }
}

#[tokio::test]
async fn usage_is_counted_exactly_in_the_metrics_and_the_store() {
    let llm = fake_llm().await;
    let h = harness(&llm.base_url).await;
    for _ in 0..2 {
        let response = h.send(h.authorized_chat("chat/completions")).await;
        assert_eq!(response.status(), StatusCode::OK);
        body_text(response).await;
    }
    assert_eq!(
        h.usage_today(Some("u1")).await,
        LlmUsage {
            input_tokens: 20,
            output_tokens: 10,
            requests: 2
        },
        "the fake LLM reports 10 prompt and 5 completion tokens per request"
    );
    assert_eq!(
        h.usage_today(Some("someone-else")).await,
        LlmUsage::default()
    );
    let text = h.metrics_text();
    for line in [
        r#"air_friends_llm_tokens_total{model="fake-model",kind="input"} 20"#,
        r#"air_friends_llm_tokens_total{model="fake-model",kind="output"} 10"#,
        r#"air_friends_llm_requests_total{provider="fake",outcome="ok"} 2"#,
        r#"air_friends_llm_request_duration_seconds_count{provider="fake"} 2"#,
    ] {
        assert!(text.contains(line), "{line} missing in\n{text}");
    }
}

#[tokio::test]
async fn a_missing_key_is_401_a_wrong_key_403_and_an_unknown_session_401() {
    let llm = fake_llm().await;
    let h = harness(&llm.base_url).await;
    let missing = h
        .chat("chat/completions")
        .body(Body::from(CHAT_BODY))
        .unwrap();
    let response = h.send(missing).await;
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(error_code(response).await, "AUTH_MISSING");

    for (name, value) in [
        (
            header::AUTHORIZATION.as_str(),
            "Bearer not-the-token".to_owned(),
        ),
        ("x-api-key", "not-the-token".to_owned()),
        (header::AUTHORIZATION.as_str(), REAL_KEY.to_owned()),
    ] {
        let wrong = h
            .chat("chat/completions")
            .header(name, value)
            .body(Body::from(CHAT_BODY))
            .unwrap();
        let response = h.send(wrong).await;
        assert_eq!(response.status(), StatusCode::FORBIDDEN, "{name}");
        assert_eq!(error_code(response).await, "AUTH_FAILED");
    }
    // Right bearer token, wrong x-api-key: every presented key must match.
    let mixed = h
        .chat("chat/completions")
        .header(header::AUTHORIZATION, format!("Bearer {}", h.token()))
        .header("x-api-key", "other")
        .body(Body::from(CHAT_BODY))
        .unwrap();
    assert_eq!(h.send(mixed).await.status(), StatusCode::FORBIDDEN);

    let unknown = Request::builder()
        .method("POST")
        .uri("/llm/0000000000000000/fake/chat/completions")
        .header(header::AUTHORIZATION, format!("Bearer {}", h.token()))
        .body(Body::from(CHAT_BODY))
        .unwrap();
    let response = h.send(unknown).await;
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(error_code(response).await, "SESSION_NOT_FOUND");

    h.sessions.unregister(&h.session.session_id);
    let ended = h.send(h.authorized_chat("chat/completions")).await;
    assert_eq!(
        ended.status(),
        StatusCode::UNAUTHORIZED,
        "an ended session's token is dead"
    );

    assert!(
        llm.request_headers().is_empty(),
        "nothing reached the upstream"
    );
    assert!(
        h.metrics_text()
            .contains(r#"air_friends_llm_requests_total{provider="fake",outcome="refused"} 7"#),
        "{}",
        h.metrics_text()
    );
}

#[tokio::test]
async fn between_turns_a_kept_agents_requests_are_409_and_never_reach_the_upstream() {
    let llm = fake_llm().await;
    let h = harness(&llm.base_url).await;
    let first = h.send(h.authorized_chat("chat/completions")).await;
    assert_eq!(first.status(), StatusCode::OK);
    body_text(first).await;
    h.session.handle.end_turn();
    let response = h.send(h.authorized_chat("chat/completions")).await;
    assert_eq!(response.status(), StatusCode::CONFLICT);
    assert_eq!(error_code(response).await, "NO_TURN_OPEN");
    assert_eq!(
        llm.request_headers().len(),
        1,
        "the closed turn's request went upstream"
    );
    h.session.handle.begin_turn(None);
    let next = h.send(h.authorized_chat("chat/completions")).await;
    assert_eq!(next.status(), StatusCode::OK);
    body_text(next).await;
}

#[tokio::test]
async fn a_request_on_another_sessions_socket_is_refused() {
    let llm = fake_llm().await;
    let h = harness(&llm.base_url).await;
    let other = h.sessions.register(context("u2")).unwrap();

    let mut request = h.authorized_chat("chat/completions");
    request
        .extensions_mut()
        .insert(SocketSession(other.session_id.to_string()));
    let response = h.send(request).await;
    assert_eq!(response.status(), StatusCode::FORBIDDEN);
    assert_eq!(error_code(response).await, "AUTH_FAILED");
    assert!(llm.request_headers().is_empty());

    let mut own = h.authorized_chat("chat/completions");
    own.extensions_mut()
        .insert(SocketSession(h.session.session_id.to_string()));
    let response = h.send(own).await;
    assert_eq!(response.status(), StatusCode::OK, "its own socket is fine");
    body_text(response).await;
}

#[tokio::test]
async fn the_first_chunk_reaches_the_client_before_the_upstream_sends_the_second() {
    let upstream = FakeProvider::start(REAL_KEY).await;
    let h = harness(&upstream.base_url).await;
    let response = h.send(h.chat_as(script::GATED)).await;
    assert_eq!(response.status(), StatusCode::OK);
    let mut body = response.into_body();
    let first = first_chunk(&mut body).await;
    assert!(String::from_utf8_lossy(&first).contains("\"one\""));
    upstream.gate().notify_one();
    let rest = body.collect().await.unwrap().to_bytes();
    assert!(String::from_utf8_lossy(&rest).ends_with("data: [DONE]\n\n"));
    assert_eq!(
        h.usage_today(Some("u1")).await,
        LlmUsage {
            input_tokens: 3,
            output_tokens: 4,
            requests: 1
        }
    );
}

#[tokio::test]
async fn x_api_key_clients_get_the_providers_header_and_its_passed_headers() {
    let upstream = FakeProvider::start(REAL_KEY).await;
    let providers = BTreeMap::from([(
        "fake".to_owned(),
        provider(
            &upstream.base_url,
            AuthHeader::XApiKey,
            &["anthropic-version"],
        ),
    )]);
    let h = harness_with(
        providers,
        BudgetConfig::default(),
        GatewaySettings::default(),
    )
    .await;
    let request = h
        .chat("messages")
        .header("x-api-key", h.token())
        .header("anthropic-version", "2023-06-01")
        .header("anthropic-beta", "not-passed")
        .body(Body::from(CHAT_BODY))
        .unwrap();
    let response = h.send(request).await;
    assert_eq!(response.status(), StatusCode::OK);
    body_text(response).await;
    let seen: Vec<HeaderMap> = upstream.received().into_iter().map(|r| r.headers).collect();
    assert_eq!(seen[0]["x-api-key"], REAL_KEY);
    assert_eq!(seen[0]["anthropic-version"], "2023-06-01");
    assert!(seen[0].get("anthropic-beta").is_none());
    assert!(seen[0].get(header::AUTHORIZATION).is_none());
    assert_eq!(
        h.usage_today(Some("u1")).await,
        LlmUsage {
            input_tokens: 21,
            output_tokens: 9,
            requests: 1
        },
        "Anthropic's message_start and message_delta usage"
    );
    assert!(
        h.metrics_text()
            .contains(r#"air_friends_llm_tokens_total{model="claude-fake",kind="output"} 9"#)
    );
}

/// Captured JSON log lines of the current thread (the tests run on a current-thread runtime,
/// so the handler logs on it).
#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Logs {
    /// Every log line of this test binary, from the first call on. A process-wide subscriber,
    /// not a thread-scoped one: a callsite first hit by another test thread while a scoped
    /// subscriber is being installed can end up cached as "never enabled", losing events at
    /// random under parallel tests.
    fn global() -> Logs {
        static LOGS: std::sync::OnceLock<Logs> = std::sync::OnceLock::new();
        LOGS.get_or_init(|| {
            let logs = Logs::default();
            let writer = logs.clone();
            let subscriber = tracing_subscriber::fmt()
                .json()
                .with_max_level(tracing::Level::DEBUG)
                .with_writer(move || writer.clone())
                .finish();
            tracing::subscriber::set_global_default(subscriber)
                .expect("no other global subscriber in this test binary");
            logs
        })
        .clone()
    }

    fn lines(&self) -> Vec<Value> {
        String::from_utf8(self.0.lock().unwrap().clone())
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

#[tokio::test]
async fn upstream_401_429_and_unreachable_are_mapped_for_the_operator() {
    let logs = Logs::global();
    let upstream = FakeProvider::start(REAL_KEY).await;
    let base = upstream.base_url.clone();
    let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let closed_url = format!("http://{}/v1", closed.local_addr().unwrap());
    drop(closed);
    let providers = BTreeMap::from([
        ("fake".to_owned(), provider(&base, AuthHeader::Bearer, &[])),
        (
            "gone".to_owned(),
            provider(&closed_url, AuthHeader::Bearer, &[]),
        ),
    ]);
    let agent = AgentConfig {
        model: Some("fake/fake-model".into()),
        extra_providers: vec!["gone".into()],
        providers,
        ..AgentConfig::default()
    };
    let h = harness_for(agent, GatewaySettings::default()).await;

    let rejected = h.send(h.chat_as("401")).await;
    assert_eq!(
        rejected.status(),
        StatusCode::UNAUTHORIZED,
        "the upstream's status"
    );
    let body = body_text(rejected).await;
    assert!(body.contains("Incorrect API key provided: ***"), "{body}");
    assert!(
        !body.contains(REAL_KEY),
        "the key echoed upstream is scrubbed"
    );

    let limited = h.send(h.chat_as("429")).await;
    assert_eq!(limited.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        limited.headers()["retry-after"],
        "7",
        "retry hints reach the client"
    );
    body_text(limited).await;

    let unreachable = Request::builder()
        .method("POST")
        .uri(format!(
            "/llm/{}/gone/chat/completions",
            h.session.session_id
        ))
        .header(header::AUTHORIZATION, format!("Bearer {}", h.token()))
        .header(header::CONTENT_LENGTH, CHAT_BODY.len())
        .body(Body::from(CHAT_BODY))
        .unwrap();
    let response = h.send(unreachable).await;
    assert_eq!(response.status(), StatusCode::BAD_GATEWAY);
    assert_eq!(error_code(response).await, "UPSTREAM_UNREACHABLE");

    let text = h.metrics_text();
    for line in [
        r#"air_friends_llm_requests_total{provider="fake",outcome="key_rejected"} 1"#,
        r#"air_friends_llm_requests_total{provider="fake",outcome="rate_limited"} 1"#,
        r#"air_friends_llm_requests_total{provider="gone",outcome="unreachable"} 1"#,
    ] {
        assert!(text.contains(line), "{line} missing in\n{text}");
    }

    let lines = logs.lines();
    let warned = |provider: &str, status: u64, cause: &str| {
        lines.iter().any(|l| {
            l["level"] == "WARN"
                && l["fields"]["provider"] == provider
                && l["fields"]["status"] == status
                && l["fields"]["cause"] == cause
        })
    };
    assert!(warned("fake", 401, "key rejected"), "{lines:#?}");
    assert!(warned("fake", 429, "rate limited"), "{lines:#?}");
    assert!(warned("gone", 502, "unreachable"), "{lines:#?}");
    let all = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
    assert!(!all.contains(REAL_KEY), "the key was logged");
    assert!(!all.contains(h.token()), "the session token was logged");
    assert!(!all.contains("Incorrect API key"), "a body was logged");
}

#[tokio::test]
async fn a_silent_upstream_times_out_with_504() {
    let upstream = FakeProvider::start(REAL_KEY).await;
    let providers = fake_only(&upstream.base_url);
    let settings = GatewaySettings {
        read_timeout: Duration::from_millis(200),
        ..GatewaySettings::default()
    };
    let h = harness_with(providers, BudgetConfig::default(), settings).await;
    let response = h.send(h.chat_as(script::SILENT)).await;
    assert_eq!(response.status(), StatusCode::GATEWAY_TIMEOUT);
    assert_eq!(error_code(response).await, "UPSTREAM_TIMEOUT");
    assert!(
        h.metrics_text()
            .contains(r#"air_friends_llm_requests_total{provider="fake",outcome="timed_out"} 1"#)
    );
}

#[tokio::test]
async fn unknown_providers_escaping_paths_and_unset_keys_are_refused() {
    let llm = fake_llm().await;
    let mut nokey = provider(&llm.base_url, AuthHeader::Bearer, &[]);
    nokey.api_key_env = "UNSET_PROVIDER_KEY".into();
    let providers = BTreeMap::from([
        (
            "fake".to_owned(),
            provider(&llm.base_url, AuthHeader::Bearer, &[]),
        ),
        ("nokey".to_owned(), nokey),
    ]);
    let agent = AgentConfig {
        model: Some("fake/fake-model".into()),
        extra_providers: vec!["nokey".into()],
        providers,
        ..AgentConfig::default()
    };
    let h = harness_for(agent, GatewaySettings::default()).await;
    let to = |provider: &str, rest: &str| {
        Request::builder()
            .method("POST")
            .uri(format!("/llm/{}/{provider}/{rest}", h.session.session_id))
            .header(header::AUTHORIZATION, format!("Bearer {}", h.token()))
            .body(Body::from(CHAT_BODY))
            .unwrap()
    };
    let cases = [
        (
            to("elsewhere", "chat/completions"),
            StatusCode::NOT_FOUND,
            "UNKNOWN_PROVIDER",
        ),
        (
            to("fake", "%2e%2e/%2e%2e/admin"),
            StatusCode::BAD_REQUEST,
            "BAD_PATH",
        ),
        (
            to("fake", "chat%2F..%2Fx"),
            StatusCode::BAD_REQUEST,
            "BAD_PATH",
        ),
        (
            to("nokey", "chat/completions"),
            StatusCode::SERVICE_UNAVAILABLE,
            "PROVIDER_KEY_NOT_SET",
        ),
    ];
    for (request, status, code) in cases {
        let response = h.send(request).await;
        assert_eq!(response.status(), status, "{code}");
        assert_eq!(error_code(response).await, code);
    }
    assert!(llm.request_headers().is_empty());
    assert!(
        h.metrics_text()
            .contains(r#"air_friends_llm_requests_total{provider="nokey",outcome="no_key"} 1"#)
    );
}

/// The attack: the operator chose another provider's model; a hijacked agent sends what it
/// read through the route of a provider with anonymous access (OpenCode Zen's `public`), to a
/// service nobody chose. Only when `agent.model` is that provider's does the anonymous key go
/// out; otherwise the route is not served (404), and named in `agent.extraProviders` it
/// answers like any provider without its key (503): nothing leaves.
#[tokio::test]
async fn anonymous_access_serves_only_the_chosen_models_provider() {
    let llm = fake_llm().await;
    let mut anonymous = provider(&llm.base_url, AuthHeader::Bearer, &[]);
    anonymous.api_key_env = "UNSET_PROVIDER_KEY".into();
    anonymous.anonymous_key = Some("public".into());
    let request = |h: &Harness| {
        Request::builder()
            .method("POST")
            .uri(format!(
                "/llm/{}/anon/chat/completions",
                h.session.session_id
            ))
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::CONTENT_LENGTH, CHAT_BODY.len())
            .header(header::AUTHORIZATION, format!("Bearer {}", h.token()))
            .body(Body::from(CHAT_BODY))
            .unwrap()
    };
    let agent = |model: &str, extra: &[&str]| AgentConfig {
        model: Some(model.into()),
        extra_providers: extra.iter().map(|p| (*p).to_owned()).collect(),
        providers: BTreeMap::from([("anon".to_owned(), anonymous.clone())]),
        ..AgentConfig::default()
    };

    // Not the model's provider: not served at all.
    let h = harness_for(agent("openrouter/x", &[]), GatewaySettings::default()).await;
    let response = h.send(request(&h)).await;
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    assert_eq!(error_code(response).await, "PROVIDER_NOT_SERVED");
    // Served because the operator named it, it still gets no anonymous key.
    let h = harness_for(agent("openrouter/x", &["anon"]), GatewaySettings::default()).await;
    let response = h.send(request(&h)).await;
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(error_code(response).await, "PROVIDER_KEY_NOT_SET");
    assert!(llm.request_headers().is_empty(), "a request left");

    let h = harness_for(agent("anon/free-model", &[]), GatewaySettings::default()).await;
    let response = h.send(request(&h)).await;
    assert_eq!(
        response.status(),
        StatusCode::OK,
        "{}",
        body_text(response).await
    );
    let sent = llm.request_headers();
    assert_eq!(sent.len(), 1);
    assert_eq!(
        sent[0].get("authorization").and_then(|v| v.to_str().ok()),
        Some("Bearer public")
    );
}

#[tokio::test]
async fn a_request_body_over_the_limit_is_refused_with_413() {
    let llm = fake_llm().await;
    let providers = fake_only(&llm.base_url);
    let settings = GatewaySettings {
        max_request_body: 16,
        ..GatewaySettings::default()
    };
    let h = harness_with(providers, BudgetConfig::default(), settings).await;
    let declared = h.send(h.authorized_chat("chat/completions")).await;
    assert_eq!(declared.status(), StatusCode::PAYLOAD_TOO_LARGE);
    // Chunked, no declared length: cut off while streaming.
    let chunks = futures_util::stream::iter(
        [CHAT_BODY.as_bytes(), CHAT_BODY.as_bytes()]
            .map(|c| Ok::<_, std::io::Error>(Bytes::copy_from_slice(c))),
    );
    let chunked = Request::builder()
        .method("POST")
        .uri(format!(
            "/llm/{}/fake/chat/completions",
            h.session.session_id
        ))
        .header(header::AUTHORIZATION, format!("Bearer {}", h.token()))
        .header(header::TRANSFER_ENCODING, "chunked")
        .body(Body::from_stream(chunks))
        .unwrap();
    let response = h.send(chunked).await;
    assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(error_code(response).await, "BODY_TOO_LARGE");
}

#[tokio::test]
async fn a_budget_of_zero_refuses_before_the_upstream_is_called() {
    let llm = fake_llm().await;
    let providers = fake_only(&llm.base_url);
    let budget = BudgetConfig {
        tokens_per_user_per_day: Some(0),
        tokens_per_day: None,
    };
    let h = harness_with(providers, budget, GatewaySettings::default()).await;
    let ws = WorkspaceKey::new("discord", "u1").unwrap();
    let refused = h.gateway.budget().check(&h.store, &ws).await.unwrap_err();
    assert_eq!(refused.limit_kind, BudgetLimit::PerUser);
    assert_eq!((refused.used, refused.limit), (0, 0));

    let response = h.send(h.authorized_chat("chat/completions")).await;
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(error_code(response).await, "BUDGET_EXCEEDED");
    assert!(
        llm.request_headers().is_empty(),
        "the upstream was never called"
    );
    let text = h.metrics_text();
    assert!(
        text.contains(r#"air_friends_llm_budget_refusals_total{limit="user"} 2"#),
        "{text}"
    );
    assert!(
        text.contains(r#"air_friends_llm_requests_total{provider="fake",outcome="over_budget"} 1"#)
    );
}

#[tokio::test]
async fn budgets_refuse_once_the_metered_usage_reaches_them() {
    let llm = fake_llm().await;
    let providers = fake_only(&llm.base_url);
    let budget = BudgetConfig {
        tokens_per_user_per_day: Some(15),
        tokens_per_day: Some(40),
    };
    let h = harness_with(providers, budget, GatewaySettings::default()).await;
    let first = h.send(h.authorized_chat("chat/completions")).await;
    assert_eq!(first.status(), StatusCode::OK);
    body_text(first).await;
    h.gateway.drain().await;
    let second = h.send(h.authorized_chat("chat/completions")).await;
    assert_eq!(
        second.status(),
        StatusCode::TOO_MANY_REQUESTS,
        "u1 used its 15 tokens"
    );

    let u1 = WorkspaceKey::new("discord", "u1").unwrap();
    let u2 = WorkspaceKey::new("discord", "u2").unwrap();
    let budget = h.gateway.budget();
    assert_eq!(
        budget.check(&h.store, &u1).await.unwrap_err().limit_kind,
        BudgetLimit::PerUser
    );
    assert!(
        budget.check(&h.store, &u2).await.is_ok(),
        "other users are not affected"
    );
    let today = Utc::now().date_naive();
    h.store.add_llm_usage(&u2, today, 20, 5).await.unwrap();
    let u3 = WorkspaceKey::new("misskey", "u3").unwrap();
    let total = budget.check(&h.store, &u3).await.unwrap_err();
    assert_eq!(
        (total.limit_kind, total.used, total.limit),
        (BudgetLimit::Total, 40, 40),
        "everyone's tokens count against tokensPerDay"
    );
}

/// A budget the operator set for a user in the console replaces `tokensPerUserPerDay` for
/// them: a larger one lets them on, a smaller one stops them, and back to the configured one
/// when cleared.
#[tokio::test]
async fn the_operators_budget_for_a_user_replaces_the_configured_one() {
    use air_friends::store::controls::ControlChange;
    let llm = fake_llm().await;
    let budget = BudgetConfig {
        tokens_per_user_per_day: Some(15),
        tokens_per_day: None,
    };
    let h = harness_with(fake_only(&llm.base_url), budget, GatewaySettings::default()).await;
    let u1 = WorkspaceKey::new("discord", "u1").unwrap();
    let today = Utc::now().date_naive();
    h.store.add_llm_usage(&u1, today, 20, 5).await.unwrap();
    let budget = h.gateway.budget();
    assert_eq!(
        budget.check(&h.store, &u1).await.unwrap_err().limit_kind,
        BudgetLimit::PerUser
    );
    let set = |n: Option<u64>| ControlChange {
        tokens_per_day: Some(n),
        ..ControlChange::default()
    };
    h.store
        .set_user_control(&u1, set(Some(1_000)), "op")
        .await
        .unwrap();
    assert!(budget.check(&h.store, &u1).await.is_ok(), "a larger budget");
    let allowed = h.send(h.authorized_chat("chat/completions")).await;
    assert_eq!(allowed.status(), StatusCode::OK, "the gateway lets u1 on");
    body_text(allowed).await;
    h.gateway.drain().await;
    h.store
        .set_user_control(&u1, set(Some(10)), "op")
        .await
        .unwrap();
    let refused = budget.check(&h.store, &u1).await.unwrap_err();
    assert_eq!(
        (refused.limit_kind, refused.limit),
        (BudgetLimit::Operator, 10)
    );
    let stopped = h.send(h.authorized_chat("chat/completions")).await;
    assert_eq!(stopped.status(), StatusCode::TOO_MANY_REQUESTS);
    h.store
        .set_user_control(&u1, set(None), "op")
        .await
        .unwrap();
    assert_eq!(
        budget.check(&h.store, &u1).await.unwrap_err().limit_kind,
        BudgetLimit::PerUser,
        "cleared: the configured one again"
    );
}
