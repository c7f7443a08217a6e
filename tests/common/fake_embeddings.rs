//! A fake OpenAI-compatible embedding server (`POST /v1/embeddings`) on 127.0.0.1:0 whose
//! vectors are deterministic and carry meaning a test can rely on: each dimension is a
//! concept, and a text scores on every concept one of whose words it contains (`drink`, `tea`
//! and `coffee` are all the drinks concept). The last dimension is always set a little, so no
//! text has a zero vector. It can be switched to failing (503) or hanging.
#![allow(dead_code)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};

/// Concepts (one dimension each) and the words that evoke them.
pub const CONCEPTS: &[&[&str]] = &[
    &["drink", "tea", "coffee", "boba", "juice", "latte"],
    &[
        "hike",
        "hiking",
        "hiked",
        "mountain",
        "trail",
        "yangmingshan",
    ],
    &["cat", "dog", "pet", "kitten", "puppy"],
    &["music", "concert", "guitar", "song", "piano"],
    &["work", "job", "office", "boss", "career"],
];

/// Vector length: one per concept, plus the constant dimension.
pub const DIMENSIONS: usize = 6;

/// The vector of `text`.
pub fn vector(text: &str) -> Vec<f64> {
    let lower = text.to_lowercase();
    let mut v: Vec<f64> = CONCEPTS
        .iter()
        .map(|words| {
            if words.iter().any(|w| lower.contains(w)) {
                1.0
            } else {
                0.0
            }
        })
        .collect();
    v.push(0.05);
    v
}

const UP: u8 = 0;
const FAILING: u8 = 1;
const HANGING: u8 = 2;

#[derive(Clone)]
struct Shared {
    mode: Arc<AtomicU8>,
    requests: Arc<AtomicUsize>,
}

/// A running fake embedding server; stops when dropped.
pub struct FakeEmbeddings {
    /// `http://127.0.0.1:PORT/v1`.
    pub base_url: String,
    shared: Shared,
    _task: tokio::task::JoinHandle<()>,
}

impl FakeEmbeddings {
    /// Binds 127.0.0.1:0 and serves.
    pub async fn start() -> FakeEmbeddings {
        let shared = Shared {
            mode: Arc::new(AtomicU8::new(UP)),
            requests: Arc::default(),
        };
        let app = axum::Router::new()
            .route("/v1/embeddings", post(embed))
            .with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base_url = format!("http://{}/v1", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        FakeEmbeddings {
            base_url,
            shared,
            _task: task,
        }
    }

    /// Answers 503 from now on.
    pub fn fail(&self) {
        self.shared.mode.store(FAILING, Ordering::SeqCst);
    }

    /// Never answers from now on.
    pub fn hang(&self) {
        self.shared.mode.store(HANGING, Ordering::SeqCst);
    }

    /// Answers again.
    pub fn recover(&self) {
        self.shared.mode.store(UP, Ordering::SeqCst);
    }

    /// Requests received.
    pub fn requests(&self) -> usize {
        self.shared.requests.load(Ordering::SeqCst)
    }
}

async fn embed(State(shared): State<Shared>, Json(body): Json<Value>) -> Response {
    shared.requests.fetch_add(1, Ordering::SeqCst);
    match shared.mode.load(Ordering::SeqCst) {
        FAILING => return (StatusCode::SERVICE_UNAVAILABLE, "down").into_response(),
        HANGING => {
            tokio::time::sleep(std::time::Duration::from_secs(3600)).await;
        }
        _ => {}
    }
    let inputs: Vec<String> = match &body["input"] {
        Value::String(s) => vec![s.clone()],
        Value::Array(list) => list
            .iter()
            .filter_map(|v| v.as_str().map(str::to_owned))
            .collect(),
        _ => return (StatusCode::BAD_REQUEST, "no input").into_response(),
    };
    let data: Vec<Value> = inputs
        .iter()
        .enumerate()
        .map(|(i, text)| json!({"object": "embedding", "index": i, "embedding": vector(text)}))
        .collect();
    Json(json!({"object": "list", "data": data, "model": body["model"]})).into_response()
}
