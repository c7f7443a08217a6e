//! A fake OpenAI-compatible speech service on loopback: `POST /v1/audio/transcriptions` takes
//! the multipart form the OpenAI API takes (`file`, `model`, `response_format`, `language`) and
//! answers `{"text": ...}` with the transcript it is told to give ([`FakeSpeech::answer`]), or
//! an error status, or nothing for a while; `POST /v1/audio/speech` takes `{"model", "input",
//! "voice", "response_format"}` and answers Ogg Opus audio lasting about a second per 15
//! characters of input ([`FakeSpeech::speak_with`] changes that). Every request is recorded
//! (the transcription's form parsed), so a test can check what reached the service — or that
//! nothing did.
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

/// What the fake answers a speech request with.
#[derive(Debug, Clone)]
pub enum Speech {
    /// Ogg Opus audio of about a second per 15 characters of input.
    Opus,
    /// These bytes, as `audio/ogg`.
    Bytes(Vec<u8>),
    /// This status with an OpenAI-style error body.
    Status(u16),
}

struct Inner {
    answer: Answer,
    speech: Speech,
    uploads: Vec<Upload>,
    speech_requests: Vec<(HeaderMap, serde_json::Value)>,
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
            speech: Speech::Opus,
            uploads: Vec::new(),
            speech_requests: Vec::new(),
        }));
        let app = Router::new()
            .route("/v1/audio/transcriptions", post(transcribe))
            .route("/v1/audio/speech", post(speak))
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

    /// Answers speech requests with `speech` from now on.
    pub fn speak_with(&self, speech: Speech) {
        self.inner.lock().unwrap().speech = speech;
    }

    /// Every speech request so far: its headers and JSON body.
    pub fn speech_requests(&self) -> Vec<(HeaderMap, serde_json::Value)> {
        self.inner.lock().unwrap().speech_requests.clone()
    }
}

/// Seconds of speech the fake makes of `input`.
pub fn spoken_seconds(input: &str) -> f64 {
    (input.chars().count() as f64 / 15.0).ceil().max(1.0)
}

async fn speak(
    State(inner): State<Arc<Mutex<Inner>>>,
    headers: HeaderMap,
    axum::Json(body): axum::Json<serde_json::Value>,
) -> Response {
    let speech = {
        let mut inner = inner.lock().unwrap();
        inner.speech_requests.push((headers, body.clone()));
        inner.speech.clone()
    };
    let input = body["input"].as_str().unwrap_or_default();
    match speech {
        Speech::Opus => (
            [("content-type", "audio/ogg")],
            super::audio::ogg_opus(spoken_seconds(input)),
        )
            .into_response(),
        Speech::Bytes(bytes) => ([("content-type", "audio/ogg")], bytes).into_response(),
        Speech::Status(code) => (
            StatusCode::from_u16(code).unwrap(),
            axum::Json(json!({"error": {"message": "fake failure", "type": "server_error"}})),
        )
            .into_response(),
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
    let content_type = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let form = super::multipart::parts(content_type, &body)
        .into_iter()
        .map(|p| {
            let part = FormPart {
                file_name: p.filename,
                content_type: p.content_type,
                bytes: p.bytes,
            };
            (p.name, part)
        })
        .collect();
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
