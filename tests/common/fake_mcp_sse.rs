//! A fake MCP server on loopback speaking the older HTTP+SSE transport: `GET /sse` opens an
//! event stream whose first event, `endpoint`, names `/messages?session=N` (or what the test
//! sets: [`FakeMcpSse::endpoint`]); each message posted there is answered `202` and its answer
//! (the same as [`super::fake_mcp::answer`]) comes on that stream as a `message` event, after a
//! `ping` event that is not a message. `GET /moved` answers 307 to `/sse`. Every request is
//! recorded with its headers and body (`null` for a `GET`).
#![allow(dead_code)]

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::Value;
use tokio::sync::mpsc;

#[derive(Default)]
struct Inner {
    endpoint: Option<String>,
    streams: HashMap<String, mpsc::UnboundedSender<String>>,
    requests: Vec<(HeaderMap, Value)>,
    opened: usize,
}

type Shared = Arc<Mutex<Inner>>;

/// The running fake.
#[derive(Clone)]
pub struct FakeMcpSse {
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    inner: Shared,
}

impl FakeMcpSse {
    /// Starts the fake.
    pub async fn start() -> FakeMcpSse {
        let inner = Shared::default();
        let app = Router::new()
            .route("/sse", get(open))
            .route("/messages", post(message))
            .route("/moved", get(moved))
            .with_state(inner.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        FakeMcpSse {
            base: format!("http://{addr}"),
            inner,
        }
    }

    /// The endpoint the next streams name instead of their own `/messages?session=N`.
    pub fn endpoint(&self, endpoint: &str) {
        self.inner.lock().unwrap().endpoint = Some(endpoint.to_owned());
    }

    /// Ends every open stream.
    pub fn close_streams(&self) {
        self.inner.lock().unwrap().streams.clear();
    }

    /// How many streams were opened.
    pub fn opened(&self) -> usize {
        self.inner.lock().unwrap().opened
    }

    /// Every request so far: headers and JSON body (`null` for a `GET`).
    pub fn requests(&self) -> Vec<(HeaderMap, Value)> {
        self.inner.lock().unwrap().requests.clone()
    }

    /// The methods (or, for `tools/call`, `tools/call:<tool>`) posted so far.
    pub fn posted(&self) -> Vec<String> {
        self.requests()
            .into_iter()
            .filter(|(_, body)| !body.is_null())
            .map(|(_, m)| match m["method"].as_str() {
                Some("tools/call") => {
                    format!("tools/call:{}", m["params"]["name"].as_str().unwrap_or(""))
                }
                Some(method) => method.to_owned(),
                None => "(answer)".to_owned(),
            })
            .collect()
    }
}

async fn open(State(inner): State<Shared>, headers: HeaderMap) -> Response {
    let (tx, rx) = mpsc::unbounded_channel();
    let endpoint = {
        let mut inner = inner.lock().unwrap();
        inner.requests.push((headers, Value::Null));
        inner.opened += 1;
        let session = inner.opened.to_string();
        inner.streams.insert(session.clone(), tx);
        inner
            .endpoint
            .clone()
            .unwrap_or_else(|| format!("/messages?session={session}"))
    };
    let first = format!("event: endpoint\ndata: {endpoint}\n\n");
    let rest = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|event| (event, rx))
    });
    let events = futures_util::StreamExt::map(
        futures_util::StreamExt::chain(futures_util::stream::iter([first]), rest),
        Ok::<_, Infallible>,
    );
    (
        [(header::CONTENT_TYPE, "text/event-stream")],
        Body::from_stream(events),
    )
        .into_response()
}

async fn message(
    State(inner): State<Shared>,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let parsed: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let mut inner = inner.lock().unwrap();
    inner.requests.push((headers, parsed.clone()));
    let session = query.get("session").cloned().unwrap_or_default();
    let Some(stream) = inner.streams.get(&session) else {
        return StatusCode::NOT_FOUND.into_response();
    };
    if let Some(answer) = super::fake_mcp::answer(&parsed) {
        let _ = stream.send("event: ping\ndata: {}\n\n".to_owned());
        let _ = stream.send(format!("event: message\ndata: {answer}\n\n"));
    }
    StatusCode::ACCEPTED.into_response()
}

async fn moved() -> Response {
    (StatusCode::TEMPORARY_REDIRECT, [(header::LOCATION, "/sse")]).into_response()
}
