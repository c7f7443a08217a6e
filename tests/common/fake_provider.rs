//! A fake model provider API for the gateway's tests: it serves every method and path under
//! `/v1/` and records each request it receives (method, path, query, headers, body), so a test
//! can assert what reached the upstream — or that nothing did.
//!
//! What it answers:
//! * `POST /v1/chat/completions`: a script chosen by the request's `model` ([`script`] names
//!   them): `honest` streams a short answer and reports usage only when the request asked for
//!   it (`stream_options.include_usage`), as OpenAI does; `no-usage` streams
//!   [`NO_USAGE_ANSWER_BYTES`] bytes of text and never reports usage; `gated` holds its second
//!   chunk until [`FakeProvider::gate`] is notified; `silent` answers nothing for 30 s; a status
//!   code (`401`, `429`) answers that status with the key echoed in an OpenAI-style error body.
//! * `POST /v1/messages`: an Anthropic stream reporting 21 input and 9 output tokens.
//! * anything else: `200 {"data": []}`.
#![allow(dead_code)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use serde_json::{Value, json};
use tokio::sync::{Notify, mpsc};

/// The model names of the chat scripts.
pub mod script {
    /// Reports usage when asked for it.
    pub const HONEST: &str = "honest";
    /// Never reports usage.
    pub const NO_USAGE: &str = "no-usage";
    /// The second chunk waits for [`super::FakeProvider::gate`].
    pub const GATED: &str = "gated";
    /// No answer for 30 s.
    pub const SILENT: &str = "silent";
}

/// Bytes of ASCII answer text the `no-usage` script streams (in 8 chunks of 500): about
/// 1 000 tokens.
pub const NO_USAGE_ANSWER_BYTES: usize = 4_000;

/// One request the fake provider received.
#[derive(Debug, Clone)]
pub struct Received {
    /// Its method.
    pub method: Method,
    /// Its path, e.g. `/v1/chat/completions`.
    pub path: String,
    /// Its query, if any.
    pub query: Option<String>,
    /// Its headers.
    pub headers: HeaderMap,
    /// Its body.
    pub body: Bytes,
}

impl Received {
    /// The body as JSON (panics when it is not).
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).expect("the upstream received a JSON body")
    }
}

#[derive(Clone)]
struct Shared {
    received: Arc<Mutex<Vec<Received>>>,
    gate: Arc<Notify>,
    /// Echoed in error bodies, as a provider that repeats the key it was given.
    key: String,
}

/// A running fake provider.
pub struct FakeProvider {
    /// `http://127.0.0.1:PORT/v1`
    pub base_url: String,
    shared: Shared,
}

impl FakeProvider {
    /// Starts the server on 127.0.0.1:0; `key` is what its error bodies echo.
    pub async fn start(key: &str) -> FakeProvider {
        let shared = Shared {
            received: Arc::default(),
            gate: Arc::default(),
            key: key.to_owned(),
        };
        let app = Router::new()
            .route("/v1/{*path}", any(answer))
            .with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        FakeProvider {
            base_url: format!("http://{addr}/v1"),
            shared,
        }
    }

    /// Every request received, in arrival order.
    pub fn received(&self) -> Vec<Received> {
        self.shared.received.lock().unwrap().clone()
    }

    /// Releases the `gated` script's second chunk.
    pub fn gate(&self) -> &Notify {
        &self.shared.gate
    }
}

fn sse(body: impl Into<Body>) -> Response {
    ([(header::CONTENT_TYPE, "text/event-stream")], body.into()).into_response()
}

fn chunk(model: &str, content: &str) -> String {
    let chunk = json!({"id": "c1", "object": "chat.completion.chunk", "model": model,
        "choices": [{"index": 0, "delta": {"content": content}, "finish_reason": null}]});
    format!("data: {chunk}\n\n")
}

fn usage_chunk(model: &str, prompt: u64, completion: u64) -> String {
    let chunk = json!({"id": "c1", "object": "chat.completion.chunk", "model": model,
        "choices": [], "usage": {"prompt_tokens": prompt, "completion_tokens": completion}});
    format!("data: {chunk}\n\n")
}

async fn answer(
    State(shared): State<Shared>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let received = Received {
        method: method.clone(),
        path: uri.path().to_owned(),
        query: uri.query().map(str::to_owned),
        headers,
        body,
    };
    shared.received.lock().unwrap().push(received.clone());
    match (method, uri.path()) {
        (Method::POST, "/v1/chat/completions") => chat(&shared, &received).await,
        (Method::POST, "/v1/messages") => sse(concat!(
            "event: message_start\n",
            "data: {\"type\":\"message_start\",\"message\":{\"model\":\"claude-fake\",\"usage\":{\"input_tokens\":21,\"output_tokens\":1}}}\n\n",
            "event: content_block_delta\n",
            "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hello\"}}\n\n",
            "event: message_delta\n",
            "data: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":9}}\n\n",
        )),
        _ => axum::Json(json!({"data": []})).into_response(),
    }
}

async fn chat(shared: &Shared, request: &Received) -> Response {
    let body: Value = serde_json::from_slice(&request.body).unwrap_or(Value::Null);
    let model = body["model"].as_str().unwrap_or_default().to_owned();
    match model.as_str() {
        script::HONEST => {
            let mut out = chunk(&model, "Hello there");
            if body["stream_options"]["include_usage"] == true {
                out.push_str(&usage_chunk(&model, 12, 3));
            }
            out.push_str("data: [DONE]\n\n");
            sse(out)
        }
        script::NO_USAGE => {
            let piece = "x".repeat(NO_USAGE_ANSWER_BYTES / 8);
            let mut out = String::new();
            for _ in 0..8 {
                out.push_str(&chunk(&model, &piece));
            }
            out.push_str("data: [DONE]\n\n");
            sse(out)
        }
        script::GATED => {
            let (tx, rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(4);
            let gate = shared.gate.clone();
            let model = model.clone();
            tokio::spawn(async move {
                tx.send(Ok(Bytes::from(chunk(&model, "one"))))
                    .await
                    .unwrap();
                gate.notified().await;
                let second = format!("{}data: [DONE]\n\n", usage_chunk(&model, 3, 4));
                // The client may have gone away meanwhile.
                let _ = tx.send(Ok(Bytes::from(second))).await;
            });
            let stream = futures_util::stream::unfold(rx, |mut rx| async move {
                rx.recv().await.map(|item| (item, rx))
            });
            sse(Body::from_stream(stream))
        }
        script::SILENT => {
            tokio::time::sleep(Duration::from_secs(30)).await;
            StatusCode::OK.into_response()
        }
        code => {
            let status = StatusCode::from_bytes(code.as_bytes()).unwrap_or(StatusCode::OK);
            let error = format!("Incorrect API key provided: {}", shared.key);
            let body = json!({"error": {"message": error}});
            (status, [("retry-after", "7")], axum::Json(body)).into_response()
        }
    }
}
