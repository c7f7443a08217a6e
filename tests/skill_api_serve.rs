//! `serve` on a real loopback listener: answers over HTTP, fires a termination after the client
//! has its response, and stops when the shutdown future completes; with a serving runtime, the
//! TCP listener's and the session sockets' calls run on that runtime's thread.

mod skill_api_support;

use std::sync::Arc;
use std::time::Duration;

use air_friends::skill_api::runtime::THREAD_NAME;
use air_friends::skill_api::{
    CallContext, ServingRuntime, SkillApiMetrics, SkillApiSettings, SkillApiState, SkillError,
    SkillHandler, SkillRegistry, SkillSpec,
};
use async_trait::async_trait;
use prometheus_client::registry::Registry;
use serde_json::{Value, json};
use skill_api_support::{TcpServer, app, context};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

#[tokio::test]
async fn serve_answers_over_http_and_stops_on_shutdown() {
    let app = app();
    let s = app.session("alice");
    let server = TcpServer::start(&app.state).await;
    let addr = server.addr;

    let client = reqwest::Client::new();
    let url = |skill: &str| format!("http://{addr}/api/skill/{skill}");
    let ok = client
        .post(url("echo"))
        .bearer_auth(s.caller_token.expose_secret())
        .json(&json!({"sessionId": s.session_id.as_str(), "parameters": {"text": "hello"}}))
        .send()
        .await
        .expect("request");
    assert_eq!(ok.status(), 200);
    let body: Value = ok.json().await.expect("json");
    assert_eq!(body["data"]["params"]["text"], "hello");

    let denied = client
        .post(url("echo"))
        .bearer_auth("not-the-token")
        .json(&json!({"sessionId": s.session_id.as_str(), "parameters": {"text": "hello"}}))
        .send()
        .await
        .expect("request");
    assert_eq!(denied.status(), 403);
    let body: Value = denied.json().await.expect("json");
    assert_eq!(body["code"], "AUTH_FAILED");

    let get = client.get(url("echo")).send().await.expect("request");
    assert_eq!(get.status(), 405);

    // Doom-loop termination over the wire: the client gets its answer, then the signal fires.
    let terminated = client
        .post(url("fail"))
        .bearer_auth(s.caller_token.expose_secret())
        .json(&json!({"sessionId": s.session_id.as_str(), "parameters": {"kind": "terminate_ok"}}))
        .send()
        .await
        .expect("request");
    let body: Value = terminated.json().await.expect("json");
    assert_eq!(body["success"], true);
    let reason = tokio::time::timeout(Duration::from_secs(5), s.termination.requested())
        .await
        .expect("termination fired after the response");
    assert_eq!(reason, "edit-reply called 3 times");

    server.stop().await;
    assert!(
        tokio::net::TcpStream::connect(addr).await.is_err(),
        "listener closed after shutdown"
    );
}

/// Answers with the name of the thread its call runs on. Not read-only, so the call runs in a
/// detached task: that task must land on the serving runtime too.
struct WhereAmI;

#[async_trait]
impl SkillHandler for WhereAmI {
    fn name(&self) -> &str {
        "where-am-i"
    }
    async fn call(&self, _ctx: &CallContext, _params: Value) -> Result<Value, SkillError> {
        Ok(json!({"thread": std::thread::current().name()}))
    }
}

/// One `where-am-i` call over `stream` (`Connection: close`); the thread it reported.
async fn thread_of_call<S>(mut stream: S, session_id: &str, token: &str) -> String
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let body = json!({"sessionId": session_id, "parameters": {}}).to_string();
    let request = format!(
        "POST /api/skill/where-am-i HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {token}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.expect("send");
    let mut response = String::new();
    stream.read_to_string(&mut response).await.expect("read");
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    let (_, body) = response.split_once("\r\n\r\n").expect("a body");
    let body: Value = serde_json::from_str(body).expect("json");
    body["data"]["thread"]
        .as_str()
        .unwrap_or("(unnamed)")
        .to_owned()
}

/// The state `serve` serves: `where-am-i` only, sockets under `socket_dir`.
fn where_am_i_state(socket_dir: &std::path::Path) -> SkillApiState {
    let mut skills = SkillRegistry::new();
    skills
        .register(
            Arc::new(WhereAmI),
            SkillSpec::new(json!({"type": "object"})),
        )
        .expect("register");
    SkillApiState::new(
        SkillApiSettings {
            socket_dir: socket_dir.to_owned(),
            ..SkillApiSettings::default()
        },
        skills,
        SkillApiMetrics::new(&mut Registry::default()),
    )
}

#[tokio::test]
async fn calls_run_on_the_serving_runtime_on_tcp_and_on_session_sockets() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Without a serving runtime the calls run on the caller's runtime: this test's thread.
    let here = std::thread::current().name().map(str::to_owned);
    assert_ne!(here.as_deref(), Some(THREAD_NAME));
    let serving = ServingRuntime::start().expect("serving runtime");
    for (state, expected) in [
        (where_am_i_state(&dir.path().join("plain")), here.as_deref()),
        (
            where_am_i_state(&dir.path().join("served")).serve_on(serving.handle()),
            Some(THREAD_NAME),
        ),
    ] {
        let session = state
            .sessions()
            .register(context("alice", true))
            .expect("register");
        let (id, token) = (
            session.session_id.as_str(),
            session.caller_token.expose_secret(),
        );
        let server = TcpServer::start(&state).await;
        let tcp = server.connect().await;
        assert_eq!(
            thread_of_call(tcp, id, token).await.as_str(),
            expected.unwrap_or("(unnamed)"),
            "a call on the TCP listener"
        );

        let socket = state
            .open_session_socket(&session.session_id)
            .await
            .expect("session socket");
        let unix = UnixStream::connect(socket.socket_path())
            .await
            .expect("connect to the session socket");
        assert_eq!(
            thread_of_call(unix, id, token).await.as_str(),
            expected.unwrap_or("(unnamed)"),
            "a call on the session socket"
        );

        socket.close().await;
        server.stop().await;
    }
    // Shut down from inside async code, after the Skill API drained: no panic, no wait.
    drop(serving);
}
