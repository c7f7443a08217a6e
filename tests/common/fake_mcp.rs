//! A fake MCP server on loopback speaking Streamable HTTP: `POST /mcp` takes JSON-RPC and
//! answers `initialize` (with an `Mcp-Session-Id`), `tools/list` (two tools: `search` and
//! `delete_everything`), `tools/call` (`search` echoes its query; any other tool "deletes
//! everything") and anything else with method-not-found — as one JSON body, or, when the
//! fake is told to ([`FakeMcp::stream`]), as an event stream with a progress notification
//! before the answer. `GET /mcp` is the server's own event stream, resumed: it replays a
//! `tools/list` answer (both tools), as a stream resumed with `Last-Event-ID` may. `POST
//! /redirect` answers 307 to a URL the test gives. Every request is
//! recorded with its headers and body.
#![allow(dead_code)]

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};

struct Inner {
    stream: bool,
    redirect_to: String,
    requests: Vec<(HeaderMap, Value)>,
}

/// The running fake.
#[derive(Clone)]
pub struct FakeMcp {
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    inner: Arc<Mutex<Inner>>,
}

impl FakeMcp {
    /// Starts the fake.
    pub async fn start() -> FakeMcp {
        let inner = Arc::new(Mutex::new(Inner {
            stream: false,
            redirect_to: String::new(),
            requests: Vec::new(),
        }));
        let app = Router::new()
            .route("/mcp", post(mcp).get(replay))
            .route("/redirect", post(redirect))
            .with_state(inner.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        FakeMcp {
            base: format!("http://{addr}"),
            inner,
        }
    }

    /// Answers as an event stream (`true`) or one JSON body.
    pub fn stream(&self, on: bool) {
        self.inner.lock().unwrap().stream = on;
    }

    /// Where `POST /redirect` sends the client.
    pub fn redirect_to(&self, url: &str) {
        self.inner.lock().unwrap().redirect_to = url.to_owned();
    }

    /// Every request so far: headers and JSON body.
    pub fn requests(&self) -> Vec<(HeaderMap, Value)> {
        self.inner.lock().unwrap().requests.clone()
    }
}

/// The fake's answer to one JSON-RPC message (`None` for a notification).
pub fn answer(message: &Value) -> Option<Value> {
    let id = message.get("id")?.clone();
    let result = match message["method"].as_str()? {
        "initialize" => json!({"protocolVersion": "2025-06-18", "capabilities": {"tools": {}},
                               "serverInfo": {"name": "fake-mcp", "version": "1.0.0"}}),
        "tools/list" => json!({"tools": [
            {"name": "search", "description": "Search the wiki",
             "inputSchema": {"type": "object", "properties": {"q": {"type": "string"}}}},
            {"name": "delete_everything", "description": "Deletes the wiki",
             "inputSchema": {"type": "object"}}
        ]}),
        "tools/call" => {
            let q = message["params"]["arguments"]["q"]
                .as_str()
                .unwrap_or_default();
            match message["params"]["name"].as_str() {
                Some("search") => {
                    json!({"content": [{"type": "text", "text": format!("found: {q}")}]})
                }
                _ => json!({"content": [{"type": "text", "text": "everything deleted"}]}),
            }
        }
        _ => {
            return Some(json!({"jsonrpc": "2.0", "id": id,
                               "error": {"code": -32601, "message": "method not found"}}));
        }
    };
    Some(json!({"jsonrpc": "2.0", "id": id, "result": result}))
}

async fn mcp(State(inner): State<Arc<Mutex<Inner>>>, headers: HeaderMap, body: Bytes) -> Response {
    let parsed: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let stream = {
        let mut inner = inner.lock().unwrap();
        inner.requests.push((headers, parsed.clone()));
        inner.stream
    };
    let answers: Vec<Value> = match &parsed {
        Value::Array(items) => items.iter().filter_map(answer).collect(),
        other => answer(other).into_iter().collect(),
    };
    if answers.is_empty() {
        return StatusCode::ACCEPTED.into_response();
    }
    if stream {
        let mut events = String::from(
            "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progress\":1}}\n\n",
        );
        for a in &answers {
            events.push_str(&format!("id: 1\nevent: message\ndata: {a}\n\n"));
        }
        return (
            [
                (header::CONTENT_TYPE, "text/event-stream"),
                (
                    header::HeaderName::from_static("mcp-session-id"),
                    "fake-session-1",
                ),
            ],
            events,
        )
            .into_response();
    }
    let body = match &parsed {
        Value::Array(_) => Value::Array(answers),
        _ => answers.into_iter().next().unwrap_or(Value::Null),
    };
    (
        [(
            header::HeaderName::from_static("mcp-session-id"),
            "fake-session-1",
        )],
        axum::Json(body),
    )
        .into_response()
}

async fn replay(State(inner): State<Arc<Mutex<Inner>>>, headers: HeaderMap) -> Response {
    inner.lock().unwrap().requests.push((headers, Value::Null));
    let list = answer(&json!({"jsonrpc": "2.0", "id": 41, "method": "tools/list"}));
    (
        [(header::CONTENT_TYPE, "text/event-stream")],
        format!(
            "id: 7\nevent: message\ndata: {}\n\n",
            list.unwrap_or_default()
        ),
    )
        .into_response()
}

async fn redirect(
    State(inner): State<Arc<Mutex<Inner>>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let to = {
        let mut inner = inner.lock().unwrap();
        inner.requests.push((
            headers,
            serde_json::from_slice(&body).unwrap_or(Value::Null),
        ));
        inner.redirect_to.clone()
    };
    (StatusCode::TEMPORARY_REDIRECT, [(header::LOCATION, to)]).into_response()
}
