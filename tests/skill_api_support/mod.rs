//! Shared fixtures for the Skill API tests: test handlers, an app builder and a request helper.
#![allow(dead_code)]

use air_friends::platform::Origin;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use air_friends::session::{RegisteredSession, SessionContext};
use air_friends::skill_api::{
    CallContext, RateLimit, SkillApiMetrics, SkillApiSettings, SkillApiState, SkillError,
    SkillHandler, SkillRegistry, SkillSpec, router, serve,
};
use async_trait::async_trait;
use axum::Router;
use axum::body::Body;
use axum::http::{Method, Request, header};
use prometheus_client::registry::Registry;
use serde_json::{Value, json};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tower::ServiceExt;

pub mod response;
pub use response::SkillResponse;

/// Echoes its (validated, defaulted) parameters and the caller's user id.
pub struct Echo;

#[async_trait]
impl SkillHandler for Echo {
    fn name(&self) -> &str {
        "echo"
    }
    async fn call(&self, ctx: &CallContext, params: Value) -> Result<Value, SkillError> {
        Ok(json!({"params": params, "user": ctx.session().origin.user_id}))
    }
}

pub fn echo_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "text": {"type": "string", "description": "text", "maxLength": 100},
            "limit": {"type": "integer", "description": "limit", "minimum": 1, "maximum": 50, "default": 10}
        },
        "required": ["text"],
        "additionalProperties": false
    })
}

/// Counts invocations, optionally after a delay (for in-flight joining).
pub struct Counter {
    pub name: &'static str,
    pub calls: Arc<AtomicUsize>,
    pub delay: Duration,
    /// Declared read-only (runs on the request's own task).
    pub read_only: bool,
    /// The doom-loop limit it declares (`SkillHandler::stops_agent_at`).
    pub stops_agent_at: Option<u32>,
}

#[async_trait]
impl SkillHandler for Counter {
    fn name(&self) -> &str {
        self.name
    }
    fn read_only(&self) -> bool {
        self.read_only
    }
    fn stops_agent_at(&self) -> Option<u32> {
        self.stops_agent_at
    }
    async fn call(&self, _ctx: &CallContext, params: Value) -> Result<Value, SkillError> {
        let n = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        if !self.delay.is_zero() {
            tokio::time::sleep(self.delay).await;
        }
        Ok(json!({"count": n, "params": params}))
    }
}

/// Returns the error named by the `kind` parameter.
pub struct Fail;

pub const FAIL_KINDS: &[&str] = &[
    "forbidden",
    "not_found",
    "quota",
    "quota_terminate",
    "platform",
    "platform_fatal",
    "internal",
    "panic",
    "terminate_ok",
];

#[async_trait]
impl SkillHandler for Fail {
    fn name(&self) -> &str {
        "fail"
    }
    async fn call(&self, ctx: &CallContext, params: Value) -> Result<Value, SkillError> {
        match params["kind"].as_str().unwrap_or_default() {
            "forbidden" => Err(SkillError::ForbiddenContext(
                "this skill works only in direct messages".into(),
            )),
            "not_found" => Err(SkillError::NotFound("memory mem_1 was not found".into())),
            "quota" => Err(SkillError::QuotaExceeded {
                message: "send-reply was already used; use edit-reply".into(),
                terminate: false,
            }),
            "quota_terminate" => Err(SkillError::QuotaExceeded {
                message: "send-reply was already used; use edit-reply".into(),
                terminate: true,
            }),
            "platform" => Err(SkillError::PlatformError {
                message: "Discord answered 503".into(),
                retryable: true,
            }),
            "platform_fatal" => Err(SkillError::PlatformError {
                message: "unknown channel".into(),
                retryable: false,
            }),
            "internal" => Err(SkillError::internal(anyhow::anyhow!(
                "database is locked at /var/lib/secret.db"
            ))),
            "panic" => panic!("handler bug"),
            "terminate_ok" => {
                ctx.terminate_after_response("edit-reply called 3 times");
                Ok(json!({"edited": true}))
            }
            other => Err(SkillError::internal(anyhow::anyhow!(
                "unknown kind {other}"
            ))),
        }
    }
}

pub struct TestApp {
    pub state: SkillApiState,
    pub router: Router,
    pub metrics: Registry,
    pub counter_calls: Arc<AtomicUsize>,
    pub slow_calls: Arc<AtomicUsize>,
    pub slow_read_calls: Arc<AtomicUsize>,
    pub nocache_calls: Arc<AtomicUsize>,
}

/// The header-read timeout the connection tests set (short, so they can wait it out).
pub const HEADER_TIMEOUT: Duration = Duration::from_millis(400);
/// Far beyond every timeout under test: reaching it means the server never reacted.
pub const NEVER: Duration = Duration::from_secs(20);

pub fn settings() -> SkillApiSettings {
    SkillApiSettings {
        session_timeout: Duration::from_secs(10),
        ..SkillApiSettings::default()
    }
}

pub fn app() -> TestApp {
    app_with(settings())
}

pub fn app_with(settings: SkillApiSettings) -> TestApp {
    let counter_calls = Arc::new(AtomicUsize::new(0));
    let slow_calls = Arc::new(AtomicUsize::new(0));
    let slow_read_calls = Arc::new(AtomicUsize::new(0));
    let nocache_calls = Arc::new(AtomicUsize::new(0));
    let open = json!({"type": "object"});
    let mut skills = SkillRegistry::new();
    skills
        .register(Arc::new(Echo), SkillSpec::new(echo_schema()))
        .expect("echo");
    skills
        .register(
            Arc::new(Counter {
                name: "counter",
                calls: counter_calls.clone(),
                delay: Duration::ZERO,
                read_only: false,
                stops_agent_at: None,
            }),
            SkillSpec::new(open.clone()),
        )
        .expect("counter");
    skills
        .register(
            Arc::new(Counter {
                name: "slow",
                calls: slow_calls.clone(),
                delay: Duration::from_millis(300),
                read_only: false,
                stops_agent_at: None,
            }),
            SkillSpec::new(open.clone()),
        )
        .expect("slow");
    skills
        .register(
            Arc::new(Counter {
                name: "slow-read",
                calls: slow_read_calls.clone(),
                delay: Duration::from_millis(300),
                read_only: true,
                stops_agent_at: None,
            }),
            SkillSpec::new(open.clone()),
        )
        .expect("slow-read");
    skills
        .register(
            Arc::new(Counter {
                name: "nocache",
                calls: nocache_calls.clone(),
                delay: Duration::ZERO,
                read_only: false,
                stops_agent_at: None,
            }),
            SkillSpec::new(open.clone()).with_cacheable(false),
        )
        .expect("nocache");
    skills
        .register(
            Arc::new(Counter {
                name: "limited",
                calls: Arc::new(AtomicUsize::new(0)),
                delay: Duration::ZERO,
                read_only: false,
                stops_agent_at: None,
            }),
            SkillSpec::new(open.clone()).with_rate_limit(RateLimit {
                window_ms: 60_000,
                max_requests: 2,
                burst: None,
            }),
        )
        .expect("limited");
    skills
        .register(
            Arc::new(Counter {
                name: "disabled",
                calls: Arc::new(AtomicUsize::new(0)),
                delay: Duration::ZERO,
                read_only: false,
                stops_agent_at: None,
            }),
            SkillSpec::new(open).with_enabled(false),
        )
        .expect("disabled");
    skills
        .register(
            Arc::new(Fail),
            SkillSpec::new(json!({
                "type": "object",
                "properties": {"kind": {"type": "string", "description": "k", "enum": FAIL_KINDS}},
                "required": ["kind"],
                "additionalProperties": false
            })),
        )
        .expect("fail");
    let mut metrics = Registry::default();
    let state = SkillApiState::new(settings, skills, SkillApiMetrics::new(&mut metrics));
    TestApp {
        router: router(state.clone()),
        state,
        metrics,
        counter_calls,
        slow_calls,
        slow_read_calls,
        nocache_calls,
    }
}

pub fn context(user: &str, is_dm: bool) -> SessionContext {
    SessionContext {
        place: Default::default(),
        origin: Origin {
            platform: air_friends::platform::PlatformKind::Discord,
            channel_id: "chan-1".into(),
            guild_id: (!is_dm).then(|| "guild-1".into()),
            user_id: user.into(),
            username: format!("{user}-name"),
            is_dm,
        },
        purpose: Default::default(),
        trigger_message_id: Some("msg-1".into()),
        workspace: PathBuf::from("/tmp/ws"),
    }
}

impl TestApp {
    pub fn session(&self, user: &str) -> RegisteredSession {
        self.state
            .sessions()
            .register(context(user, true))
            .expect("register")
    }

    /// POSTs `{sessionId, parameters}` with an optional bearer token.
    pub async fn call(
        &self,
        skill: &str,
        session: &RegisteredSession,
        token: Option<&str>,
        params: Value,
    ) -> SkillResponse {
        let body = json!({"sessionId": session.session_id.as_str(), "parameters": params});
        self.send(
            Method::POST,
            &format!("/api/skill/{skill}"),
            token,
            Some("application/json"),
            Body::from(body.to_string()),
        )
        .await
    }

    /// The legitimate call: the session's own token.
    pub async fn call_ok(
        &self,
        skill: &str,
        session: &RegisteredSession,
        params: Value,
    ) -> SkillResponse {
        self.call(
            skill,
            session,
            Some(session.caller_token.expose_secret()),
            params,
        )
        .await
    }

    pub async fn send(
        &self,
        method: Method,
        uri: &str,
        token: Option<&str>,
        content_type: Option<&str>,
        body: Body,
    ) -> SkillResponse {
        let response = self.send_raw(method, uri, token, content_type, body).await;
        SkillResponse::read(response).await
    }

    pub async fn send_raw(
        &self,
        method: Method,
        uri: &str,
        token: Option<&str>,
        content_type: Option<&str>,
        body: Body,
    ) -> axum::response::Response {
        let mut builder = Request::builder().method(method).uri(uri);
        if let Some(token) = token {
            builder = builder.header(header::AUTHORIZATION, format!("Bearer {token}"));
        }
        if let Some(ct) = content_type {
            builder = builder.header(header::CONTENT_TYPE, ct);
        }
        let request = builder.body(body).expect("request");
        self.router
            .clone()
            .oneshot(request)
            .await
            .expect("infallible router")
    }

    pub fn metrics_text(&self) -> String {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.metrics).expect("encode");
        text
    }
}

/// `serve` on a loopback TCP listener, stopped by [`TcpServer::stop`].
pub struct TcpServer {
    pub addr: std::net::SocketAddr,
    stop: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl TcpServer {
    pub async fn start(state: &SkillApiState) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(serve(listener, state.clone(), async move {
            let _ = stopped.await;
        }));
        Self { addr, stop, task }
    }

    pub async fn connect(&self) -> TcpStream {
        TcpStream::connect(self.addr).await.expect("connect")
    }

    /// Stops the server; `serve` returns once every socket of the state is closed too.
    pub async fn stop(self) {
        let _ = self.stop.send(());
        tokio::time::timeout(NEVER, self.task)
            .await
            .expect("serve stops")
            .expect("task")
            .expect("serve ok");
    }
}
