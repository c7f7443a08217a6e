//! The Skill API listener under slow, idle and half-open clients (`serve` on a real loopback
//! listener): a client that never completes its request head is disconnected after the
//! header-read timeout; a body that never arrives is refused; with every connection slot held by
//! idle clients a legitimate call still gets through, because the timeout frees the slots.

mod skill_api_support;

use std::time::{Duration, Instant};

use air_friends::skill_api::{SkillApiSettings, serve};
use serde_json::{Value, json};
use skill_api_support::{HEADER_TIMEOUT, NEVER, TestApp, app_with, settings};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

struct Server {
    addr: std::net::SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Server {
    async fn start(app: &TestApp) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(serve(listener, app.state.clone(), async move {
            let _ = stopped.await;
        }));
        Server {
            addr,
            stop: Some(stop),
            task,
        }
    }

    async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        tokio::time::timeout(NEVER, self.task)
            .await
            .expect("serve stops")
            .expect("task")
            .expect("serve ok");
    }
}

fn with(change: impl FnOnce(&mut SkillApiSettings)) -> TestApp {
    let mut s = settings();
    s.header_read_timeout = HEADER_TIMEOUT;
    change(&mut s);
    app_with(s)
}

/// Reads until the server closes the connection (EOF or reset); `None` if it never does.
async fn read_until_closed(stream: &mut TcpStream) -> Option<Vec<u8>> {
    let mut seen = Vec::new();
    match tokio::time::timeout(NEVER, stream.read_to_end(&mut seen)).await {
        Ok(_) => Some(seen),
        Err(_) => None,
    }
}

#[tokio::test]
async fn a_client_that_sends_half_a_request_head_is_disconnected_after_the_header_timeout() {
    let app = with(|_| {});
    let server = Server::start(&app).await;
    let mut client = TcpStream::connect(server.addr).await.expect("connect");
    let sent = Instant::now();
    client
        .write_all(b"POST /api/skill/echo HTTP/1.1\r\nHost: localhost\r\nContent-Type: appl")
        .await
        .expect("write");
    let closed = read_until_closed(&mut client).await;
    assert!(
        closed.is_some(),
        "the half-open client was never disconnected"
    );
    assert!(
        sent.elapsed() >= HEADER_TIMEOUT,
        "closed by the header-read timeout, not before it ({:?})",
        sent.elapsed()
    );
    server.stop().await;
}

#[tokio::test]
async fn idle_connections_holding_every_slot_cannot_block_a_legitimate_call() {
    let app = with(|s| s.max_connections = 2);
    let s = app.session("alice");
    let server = Server::start(&app).await;
    // Two clients take both slots and never send a byte.
    let idle_since = Instant::now();
    let mut idle = Vec::new();
    for _ in 0..2 {
        idle.push(TcpStream::connect(server.addr).await.expect("connect"));
    }
    let client = reqwest::Client::builder()
        .timeout(NEVER)
        .build()
        .expect("client");
    let answer = client
        .post(format!("http://{}/api/skill/echo", server.addr))
        .bearer_auth(s.caller_token.expose_secret())
        .json(&json!({"sessionId": s.session_id.as_str(), "parameters": {"text": "hi"}}))
        .send()
        .await
        .expect("the legitimate call is answered");
    assert_eq!(answer.status(), 200);
    let body: Value = answer.json().await.expect("json");
    assert_eq!(body["data"]["params"]["text"], "hi");
    assert!(
        idle_since.elapsed() >= HEADER_TIMEOUT,
        "the call waited for a slot: the cap of 2 was full ({:?})",
        idle_since.elapsed()
    );
    for stream in &mut idle {
        assert!(
            read_until_closed(stream).await.is_some(),
            "an idle connection kept its slot"
        );
    }
    server.stop().await;
}

#[tokio::test]
async fn a_body_that_never_arrives_is_refused_and_the_connection_closed() {
    let app = with(|s| s.body_read_timeout = Duration::from_millis(300));
    let server = Server::start(&app).await;
    let mut client = TcpStream::connect(server.addr).await.expect("connect");
    client
        .write_all(
            b"POST /api/skill/echo HTTP/1.1\r\nHost: localhost\r\n\
              Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"sessionId\":",
        )
        .await
        .expect("write");
    let answer = read_until_closed(&mut client)
        .await
        .expect("the server answered and closed the connection");
    let text = String::from_utf8_lossy(&answer);
    assert!(text.starts_with("HTTP/1.1 400"), "{text}");
    assert!(text.contains("\"code\":\"INVALID_JSON\""), "{text}");
    assert!(text.contains("did not arrive"), "{text}");
    server.stop().await;
}
