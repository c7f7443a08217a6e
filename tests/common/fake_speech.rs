//! A fake OpenAI-compatible speech service on loopback: `POST /v1/audio/transcriptions` takes
//! the multipart form the OpenAI API takes (`file`, `model`, `response_format`, `language`) and
//! answers `{"text": ...}` with the transcript it is told to give ([`FakeSpeech::answer`]), or
//! an error status, or nothing for a while. Every request is recorded with its parsed form, so
//! a test can check what reached the service — or that nothing did.
#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::json;

/// What the fake answers a transcription request with.
#[derive(Debug, Clone)]
pub enum Answer {
    /// `200 {"text": ...}`.
    Text(String),
    /// This status with an OpenAI-style error body.
    Status(u16),
    /// Nothing for this long, then the transcript `"late"`.
    Stall(Duration),
}

/// One part of a multipart form.
#[derive(Debug, Clone)]
pub struct FormPart {
    /// The part's file name, when it is a file.
    pub file_name: Option<String>,
    /// Its `Content-Type`, when given.
    pub content_type: Option<String>,
    /// Its bytes.
    pub bytes: Vec<u8>,
}

/// One request the fake received.
#[derive(Debug, Clone)]
pub struct Upload {
    /// Its path.
    pub path: String,
    /// Its headers.
    pub headers: HeaderMap,
    /// The form's parts by name.
    pub form: HashMap<String, FormPart>,
}

impl Upload {
    /// A text field of the form.
    pub fn field(&self, name: &str) -> Option<String> {
        self.form
            .get(name)
            .map(|p| String::from_utf8_lossy(&p.bytes).into_owned())
    }

    /// The `Authorization` header.
    pub fn authorization(&self) -> Option<String> {
        self.headers
            .get("authorization")
            .map(|v| v.to_str().unwrap_or_default().to_owned())
    }
}

struct Inner {
    answer: Answer,
    uploads: Vec<Upload>,
}

/// The running fake.
#[derive(Clone)]
pub struct FakeSpeech {
    /// Its API root, `http://127.0.0.1:PORT/v1` (a `baseUrl`).
    pub base_url: String,
    inner: Arc<Mutex<Inner>>,
}

impl FakeSpeech {
    /// Starts the fake answering `answer`.
    pub async fn start(answer: Answer) -> FakeSpeech {
        let inner = Arc::new(Mutex::new(Inner {
            answer,
            uploads: Vec::new(),
        }));
        let app = Router::new()
            .route("/v1/audio/transcriptions", post(transcribe))
            .with_state(inner.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        FakeSpeech {
            base_url: format!("http://{addr}/v1"),
            inner,
        }
    }

    /// Answers `answer` from now on.
    pub fn answer(&self, answer: Answer) {
        self.inner.lock().unwrap().answer = answer;
    }

    /// Every request so far.
    pub fn uploads(&self) -> Vec<Upload> {
        self.inner.lock().unwrap().uploads.clone()
    }
}

/// A `baseUrl` on loopback where nothing listens: a service that is down.
pub async fn closed_base_url() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    format!("http://{addr}/v1")
}

async fn transcribe(
    State(inner): State<Arc<Mutex<Inner>>>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let form = boundary(&headers)
        .map(|b| parse_form(&body, &b))
        .unwrap_or_default();
    let answer = {
        let mut inner = inner.lock().unwrap();
        inner.uploads.push(Upload {
            path: uri.path().to_owned(),
            headers,
            form,
        });
        inner.answer.clone()
    };
    match answer {
        Answer::Text(text) => axum::Json(json!({ "text": text })).into_response(),
        Answer::Status(code) => (
            StatusCode::from_u16(code).unwrap(),
            axum::Json(json!({"error": {"message": "fake failure", "type": "server_error"}})),
        )
            .into_response(),
        Answer::Stall(wait) => {
            tokio::time::sleep(wait).await;
            axum::Json(json!({ "text": "late" })).into_response()
        }
    }
}

fn boundary(headers: &HeaderMap) -> Option<String> {
    let ct = headers.get("content-type")?.to_str().ok()?;
    let (_, b) = ct.split_once("boundary=")?;
    Some(b.trim_matches('"').to_owned())
}

/// The parts of a `multipart/form-data` body.
fn parse_form(body: &[u8], boundary: &str) -> HashMap<String, FormPart> {
    let delimiter = format!("--{boundary}");
    let mut parts = HashMap::new();
    for chunk in split(body, delimiter.as_bytes()).into_iter().skip(1) {
        if chunk.starts_with(b"--") {
            break;
        }
        let chunk = chunk.strip_prefix(b"\r\n").unwrap_or(chunk);
        let Some(end) = find(chunk, b"\r\n\r\n") else {
            continue;
        };
        let head = String::from_utf8_lossy(&chunk[..end]).into_owned();
        let mut bytes = chunk[end + 4..].to_vec();
        if bytes.ends_with(b"\r\n") {
            bytes.truncate(bytes.len() - 2);
        }
        let param = |key: &str| {
            let at = head.find(&format!("{key}=\""))? + key.len() + 2;
            let len = head[at..].find('"')?;
            Some(head[at..at + len].to_owned())
        };
        let content_type = head
            .lines()
            .find_map(|l| {
                l.strip_prefix("Content-Type: ")
                    .or(l.strip_prefix("content-type: "))
            })
            .map(str::to_owned);
        if let Some(name) = param("name") {
            parts.insert(
                name,
                FormPart {
                    file_name: param("filename"),
                    content_type,
                    bytes,
                },
            );
        }
    }
    parts
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn split<'a>(mut body: &'a [u8], delimiter: &[u8]) -> Vec<&'a [u8]> {
    let mut out = Vec::new();
    while let Some(at) = find(body, delimiter) {
        out.push(&body[..at]);
        body = &body[at + delimiter.len()..];
    }
    out.push(body);
    out
}
