//! `serve` on a real loopback listener: answers over HTTP, fires a termination after the client
//! has its response, and stops when the shutdown future completes.

mod skill_api_support;

use std::time::Duration;

use air_friends::skill_api::serve;
use serde_json::{Value, json};
use skill_api_support::app;
use tokio::net::TcpListener;
use tokio::sync::oneshot;

#[tokio::test]
async fn serve_answers_over_http_and_stops_on_shutdown() {
    let app = app();
    let s = app.session("alice");
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    let server = tokio::spawn(serve(listener, app.state.clone(), async move {
        let _ = stop_rx.await;
    }));

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

    stop_tx.send(()).expect("server alive");
    tokio::time::timeout(Duration::from_secs(5), server)
        .await
        .expect("serve returns after shutdown")
        .expect("task")
        .expect("serve ok");
    assert!(
        tokio::net::TcpStream::connect(addr).await.is_err(),
        "listener closed after shutdown"
    );
}
