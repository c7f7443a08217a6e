//! The Skill API on per-session Unix sockets, spoken to as the sandboxed agent does: raw
//! HTTP/1.1 over a real `UnixStream`. The socket decides who is calling: a call naming its own
//! session works, one naming another live session is refused (403) even with that session's
//! token, before the session is looked up, and leaves that session and the de-duplication cache
//! untouched; the caller token is still checked; the connection limits of the TCP listener
//! hold on the socket; closing a socket lets in-flight calls finish and removes it. The TCP
//! listener keeps working as before, and the extra routes (the model gateway's) answer on both.

mod skill_api_support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use air_friends::session::RegisteredSession;
use air_friends::skill_api::{
    SessionSocket, SkillApiMetrics, SkillApiSettings, SkillApiState, SkillRegistry, SkillSpec,
    SocketSession, socket_session_matches,
};
use axum::Router;
use axum::extract::{Path as UrlPath, Request};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use prometheus_client::registry::Registry;
use serde_json::{Value, json};
use skill_api_support::{
    Counter, Echo, HEADER_TIMEOUT, NEVER, TcpServer, TestApp, context, echo_schema, settings,
};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::UnixStream;

/// How long the `stall` skill runs: far beyond every close grace under test.
const STALL: Duration = Duration::from_secs(10);

/// A test app whose `send-reply` is a counter with a doom-loop limit (so a call that
/// reaches the pipeline shows in the session's state), with sockets under a temporary folder.
struct SocketApp {
    app: TestApp,
    reply_calls: Arc<AtomicUsize>,
    stall_calls: Arc<AtomicUsize>,
    _temp: tempfile::TempDir,
}

fn socket_app(change: impl FnOnce(&mut SkillApiSettings)) -> SocketApp {
    let temp = tempfile::tempdir().expect("tempdir");
    let mut s = settings();
    s.header_read_timeout = HEADER_TIMEOUT;
    s.socket_dir = temp.path().join("run");
    change(&mut s);
    let reply_calls = Arc::new(AtomicUsize::new(0));
    let slow_calls = Arc::new(AtomicUsize::new(0));
    let open = json!({"type": "object"});
    let mut skills = SkillRegistry::new();
    skills
        .register(Arc::new(Echo), SkillSpec::new(echo_schema()))
        .expect("echo");
    skills
        .register(
            Arc::new(Counter {
                name: "send-reply",
                calls: reply_calls.clone(),
                delay: Duration::ZERO,
                read_only: false,
                stops_agent_at: Some(4),
            }),
            SkillSpec::new(open.clone()),
        )
        .expect("send-reply");
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
    let stall_calls = Arc::new(AtomicUsize::new(0));
    skills
        .register(
            Arc::new(Counter {
                name: "stall",
                calls: stall_calls.clone(),
                delay: STALL,
                read_only: false,
                stops_agent_at: None,
            }),
            SkillSpec::new(open),
        )
        .expect("stall");
    let mut metrics = Registry::default();
    let state = SkillApiState::new(s, skills, SkillApiMetrics::new(&mut metrics))
        .with_extra_routes(gateway_routes());
    SocketApp {
        app: TestApp {
            router: air_friends::skill_api::router(state.clone()),
            state,
            metrics,
            counter_calls: reply_calls.clone(),
            slow_calls,
            slow_read_calls: Arc::new(AtomicUsize::new(0)),
            nocache_calls: Arc::new(AtomicUsize::new(0)),
        },
        reply_calls,
        stall_calls,
        _temp: temp,
    }
}

/// Stand-in for the model gateway's routes: says which session's socket the request came on,
/// and refuses a session other than that one the way the gateway must.
fn gateway_routes() -> Router {
    async fn whoami(UrlPath(session): UrlPath<String>, request: Request) -> Response {
        if let Err(error) = socket_session_matches(request.extensions(), &session) {
            return error.into_response();
        }
        let socket = request
            .extensions()
            .get::<SocketSession>()
            .map(|s| s.0.clone());
        axum::Json(json!({"socketSession": socket, "for": session})).into_response()
    }
    Router::new().route("/gateway/{session}/whoami", get(whoami))
}

impl SocketApp {
    fn session(&self, user: &str) -> RegisteredSession {
        self.app
            .state
            .sessions()
            .register(context(user, true))
            .expect("register")
    }

    async fn socket(&self, session: &RegisteredSession) -> SessionSocket {
        self.app
            .state
            .open_session_socket(&session.session_id)
            .await
            .expect("open the session socket")
    }
}

#[derive(Debug)]
struct Reply {
    status: u16,
    body: Value,
}

impl Reply {
    fn code(&self) -> &str {
        assert_eq!(self.body["success"], false, "{:?}", self.body);
        self.body["code"].as_str().expect("code")
    }

    fn error(&self) -> &str {
        self.body["error"].as_str().expect("error text")
    }
}

/// Sends one request (`Connection: close`) and reads the whole response.
async fn exchange<S>(
    mut stream: S,
    method: &str,
    uri: &str,
    token: Option<&str>,
    body: Option<&Value>,
) -> Reply
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut head = format!("{method} {uri} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n");
    if let Some(token) = token {
        head.push_str(&format!("Authorization: Bearer {token}\r\n"));
    }
    let payload = body.map(Value::to_string).unwrap_or_default();
    if body.is_some() {
        head.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            payload.len()
        ));
    }
    head.push_str("\r\n");
    stream
        .write_all(format!("{head}{payload}").as_bytes())
        .await
        .expect("write");
    let mut raw = Vec::new();
    tokio::time::timeout(NEVER, stream.read_to_end(&mut raw))
        .await
        .expect("the server answered")
        .expect("read");
    let text = String::from_utf8(raw).expect("utf-8 response");
    let (head, body) = text.split_once("\r\n\r\n").expect("a complete response");
    assert!(
        !head
            .to_ascii_lowercase()
            .contains("transfer-encoding: chunked"),
        "unexpected chunked response: {head}"
    );
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("status line");
    let body = serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {body:?}"));
    Reply { status, body }
}

async fn connect(socket: &SessionSocket) -> UnixStream {
    UnixStream::connect(socket.socket_path())
        .await
        .expect("connect to the session socket")
}

/// A skill call naming `named` with `token`, sent on `socket`.
async fn call_on(
    socket: &SessionSocket,
    skill: &str,
    named: &str,
    token: Option<&str>,
    params: Value,
) -> Reply {
    exchange(
        connect(socket).await,
        "POST",
        &format!("/api/skill/{skill}"),
        token,
        Some(&json!({"sessionId": named, "parameters": params})),
    )
    .await
}

async fn own_call(
    socket: &SessionSocket,
    s: &RegisteredSession,
    skill: &str,
    params: Value,
) -> Reply {
    call_on(
        socket,
        skill,
        s.session_id.as_str(),
        Some(s.caller_token.expose_secret()),
        params,
    )
    .await
}

#[tokio::test]
async fn a_call_on_a_sessions_own_socket_with_its_token_succeeds() {
    let t = socket_app(|_| {});
    let a = t.session("alice");
    let socket = t.socket(&a).await;
    assert!(
        socket.dir().ends_with(a.session_id.as_str()),
        "one folder per session: {}",
        socket.dir().display()
    );
    let reply = own_call(&socket, &a, "echo", json!({"text": "hello"})).await;
    assert_eq!(reply.status, 200, "{:?}", reply.body);
    assert_eq!(reply.body["data"]["params"]["text"], "hello");
    assert_eq!(reply.body["data"]["user"], "alice");
    socket.close().await;
}

#[tokio::test]
async fn a_call_naming_another_live_session_is_refused_and_leaves_it_untouched() {
    let t = socket_app(|_| {});
    let a = t.session("alice");
    let b = t.session("bob");
    let socket_a = t.socket(&a).await;
    let socket_b = t.socket(&b).await;
    let b_handle = t
        .app
        .state
        .sessions()
        .lookup(b.session_id.as_str())
        .expect("b");

    // A's agent knows B's id and even B's token: its channel still is A's.
    let stolen = Some(b.caller_token.expose_secret());
    let refused = call_on(
        &socket_a,
        "send-reply",
        b.session_id.as_str(),
        stolen,
        json!({}),
    )
    .await;
    assert_eq!(refused.status, 403, "{:?}", refused.body);
    assert_eq!(refused.code(), "AUTH_FAILED");
    assert!(
        refused.error().contains("another session's channel"),
        "{}",
        refused.error()
    );
    assert_eq!(t.reply_calls.load(Ordering::SeqCst), 0, "nothing ran");
    assert_eq!(
        b_handle.state().attempts("send-reply"),
        0,
        "B's state untouched"
    );
    assert_eq!(b_handle.state(), Default::default());

    // Nothing was cached for B: B's own identical call runs (count 1), and A's repeat of it
    // within the de-duplication window is refused rather than served B's cached result.
    let own = own_call(&socket_b, &b, "send-reply", json!({})).await;
    assert_eq!(own.status, 200, "{:?}", own.body);
    assert_eq!(
        own.body["data"]["count"], 1,
        "B's call ran, not a cached answer"
    );
    assert_eq!(b_handle.state().attempts("send-reply"), 1);
    let again = call_on(
        &socket_a,
        "send-reply",
        b.session_id.as_str(),
        stolen,
        json!({}),
    )
    .await;
    assert_eq!(again.status, 403, "{:?}", again.body);
    assert!(
        again.body.get("data").is_none(),
        "B's data leaked: {:?}",
        again.body
    );
    assert_eq!(
        b_handle.state().attempts("send-reply"),
        1,
        "the refused call did not count"
    );
    assert_eq!(t.reply_calls.load(Ordering::SeqCst), 1);

    socket_a.close().await;
    socket_b.close().await;
}

#[tokio::test]
async fn a_wrong_token_on_the_sessions_own_socket_is_403_a_missing_one_401() {
    let t = socket_app(|_| {});
    let a = t.session("alice");
    let b = t.session("bob");
    let socket = t.socket(&a).await;
    let a_id = a.session_id.as_str();
    let wrong = call_on(
        &socket,
        "echo",
        a_id,
        Some("not-the-token"),
        json!({"text": "x"}),
    )
    .await;
    assert_eq!(wrong.status, 403);
    assert_eq!(wrong.code(), "AUTH_FAILED");
    assert!(wrong.error().contains("caller token"), "{}", wrong.error());
    let other = Some(b.caller_token.expose_secret());
    let crossed = call_on(&socket, "echo", a_id, other, json!({"text": "x"})).await;
    assert_eq!(crossed.status, 403, "B's token does not open A's session");
    let missing = call_on(&socket, "echo", a_id, None, json!({"text": "x"})).await;
    assert_eq!(
        missing.status, 401,
        "the gateway's status for a missing key"
    );
    assert_eq!(missing.code(), "AUTH_MISSING");
    socket.close().await;
}

#[tokio::test]
async fn an_unknown_session_named_on_a_socket_is_403_before_any_lookup() {
    let t = socket_app(|_| {});
    let a = t.session("alice");
    let socket = t.socket(&a).await;
    let unknown = call_on(
        &socket,
        "echo",
        "0123456789abcdef0123456789abcdef",
        None,
        json!({}),
    )
    .await;
    assert_eq!(unknown.status, 403, "not 401: existence is not revealed");
    assert_eq!(unknown.code(), "AUTH_FAILED");
    // A's own session, once ended, is the ordinary 401.
    t.app.state.sessions().unregister(&a.session_id);
    let ended = own_call(&socket, &a, "echo", json!({"text": "x"})).await;
    assert_eq!(ended.status, 401);
    assert_eq!(ended.code(), "SESSION_NOT_FOUND");
    socket.close().await;
}

#[tokio::test]
async fn the_header_read_timeout_closes_a_half_sent_request_on_a_socket() {
    let t = socket_app(|_| {});
    let a = t.session("alice");
    let socket = t.socket(&a).await;
    let mut client = connect(&socket).await;
    let sent = Instant::now();
    client
        .write_all(b"POST /api/skill/echo HTTP/1.1\r\nHost: localhost\r\nContent-Type: appl")
        .await
        .expect("write");
    let mut seen = Vec::new();
    tokio::time::timeout(NEVER, client.read_to_end(&mut seen))
        .await
        .expect("the half-sent request was never disconnected")
        .ok();
    assert!(
        sent.elapsed() >= HEADER_TIMEOUT,
        "closed by the header-read timeout, not before it ({:?})",
        sent.elapsed()
    );
    socket.close().await;
}

#[tokio::test]
async fn idle_connections_holding_a_sockets_slots_cannot_block_its_call() {
    let t = socket_app(|s| s.socket_max_connections = 2);
    let a = t.session("alice");
    let socket = t.socket(&a).await;
    let idle_since = Instant::now();
    let idle = [connect(&socket).await, connect(&socket).await];
    let reply = own_call(&socket, &a, "echo", json!({"text": "hi"})).await;
    assert_eq!(reply.status, 200, "{:?}", reply.body);
    assert!(
        idle_since.elapsed() >= HEADER_TIMEOUT,
        "the call waited for a slot: the cap of 2 was full ({:?})",
        idle_since.elapsed()
    );
    drop(idle);
    socket.close().await;
}

#[tokio::test]
async fn close_lets_an_in_flight_call_finish_then_removes_the_socket() {
    let t = socket_app(|_| {});
    let a = t.session("alice");
    let socket = t.socket(&a).await;
    let dir = socket.dir().to_path_buf();
    let path = socket.socket_path().to_path_buf();
    let stream = connect(&socket).await;
    let token = a.caller_token.expose_secret().to_owned();
    let body = json!({"sessionId": a.session_id.as_str(), "parameters": {}});
    let in_flight = tokio::spawn(async move {
        exchange(stream, "POST", "/api/skill/slow", Some(&token), Some(&body)).await
    });
    until_started(&t.app.slow_calls).await;
    socket.close().await;
    let reply = in_flight.await.expect("client task");
    assert_eq!(
        reply.status, 200,
        "the in-flight call finished: {:?}",
        reply.body
    );
    assert!(!dir.exists(), "folder removed");
    assert!(
        UnixStream::connect(&path).await.is_err(),
        "nothing listens any more"
    );
}

/// Waits until `calls` moved: the call is running in its handler.
async fn until_started(calls: &AtomicUsize) {
    let started = Instant::now();
    while calls.load(Ordering::SeqCst) == 0 {
        assert!(started.elapsed() < NEVER, "the call never started");
        tokio::task::yield_now().await;
    }
}

#[tokio::test]
async fn close_drops_a_call_still_unfinished_after_the_grace() {
    let grace = Duration::from_millis(300);
    let t = socket_app(|s| s.socket_close_grace = grace);
    let a = t.session("alice");
    let socket = t.socket(&a).await;
    let stream = connect(&socket).await;
    let token = a.caller_token.expose_secret().to_owned();
    let body = json!({"sessionId": a.session_id.as_str(), "parameters": {}});
    let mut stream = stream;
    let payload = body.to_string();
    stream
        .write_all(
            format!(
                "POST /api/skill/stall HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {token}\r\n\
                 Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{payload}",
                payload.len()
            )
            .as_bytes(),
        )
        .await
        .expect("write");
    until_started(&t.stall_calls).await;
    let closing = Instant::now();
    tokio::time::timeout(NEVER, socket.close())
        .await
        .expect("close returns");
    let took = closing.elapsed();
    assert!(took >= grace, "the call got its grace ({took:?})");
    assert!(
        took < STALL,
        "close did not wait for the stalled call ({took:?})"
    );
    let mut seen = Vec::new();
    tokio::time::timeout(NEVER, stream.read_to_end(&mut seen))
        .await
        .expect("the dropped connection was closed")
        .ok();
    assert!(
        seen.is_empty(),
        "no response was sent: {:?}",
        String::from_utf8_lossy(&seen)
    );
}

#[tokio::test]
async fn the_tcp_listener_serves_every_session_as_before() {
    let t = socket_app(|_| {});
    let a = t.session("alice");
    let b = t.session("bob");
    let server = TcpServer::start(&t.app.state).await;
    let tcp_call = |s: &RegisteredSession, token: &str| {
        let body = json!({"sessionId": s.session_id.as_str(), "parameters": {"text": "tcp"}});
        let token = token.to_owned();
        let server = &server;
        async move {
            let stream = server.connect().await;
            exchange(stream, "POST", "/api/skill/echo", Some(&token), Some(&body)).await
        }
    };
    for s in [&a, &b] {
        let reply = tcp_call(s, s.caller_token.expose_secret()).await;
        assert_eq!(reply.status, 200, "{:?}", reply.body);
        assert_eq!(reply.body["data"]["params"]["text"], "tcp");
    }
    let wrong = tcp_call(&a, b.caller_token.expose_secret()).await;
    assert_eq!(wrong.status, 403);
    assert_eq!(wrong.code(), "AUTH_FAILED");
    server.stop().await;
}

#[tokio::test]
async fn extra_routes_answer_on_the_tcp_listener_and_on_every_session_socket() {
    let t = socket_app(|_| {});
    let a = t.session("alice");
    let b = t.session("bob");
    let socket_a = t.socket(&a).await;
    let socket_b = t.socket(&b).await;
    let (a_id, b_id) = (a.session_id.as_str(), b.session_id.as_str());

    for (socket, id) in [(&socket_a, a_id), (&socket_b, b_id)] {
        let uri = format!("/gateway/{id}/whoami");
        let reply = exchange(connect(socket).await, "GET", &uri, None, None).await;
        assert_eq!(reply.status, 200, "{:?}", reply.body);
        assert_eq!(
            reply.body["socketSession"], id,
            "the socket's session is known"
        );
    }
    let crossed = format!("/gateway/{b_id}/whoami");
    let refused = exchange(connect(&socket_a).await, "GET", &crossed, None, None).await;
    assert_eq!(
        refused.status, 403,
        "the gateway helper refuses another session"
    );
    assert_eq!(refused.code(), "AUTH_FAILED");
    let unknown = exchange(connect(&socket_a).await, "GET", "/nothing/here", None, None).await;
    assert_eq!(unknown.status, 404, "the JSON fallback still answers");
    assert_eq!(unknown.code(), "NOT_FOUND");

    let server = TcpServer::start(&t.app.state).await;
    let reply = exchange(server.connect().await, "GET", &crossed, None, None).await;
    assert_eq!(reply.status, 200, "{:?}", reply.body);
    assert_eq!(
        reply.body["socketSession"],
        Value::Null,
        "TCP has no socket session"
    );
    assert_eq!(reply.body["for"], b_id);

    socket_a.close().await;
    socket_b.close().await;
    server.stop().await;
}
