//! The request body on its way up, bounded by `max_request_body` (413 past it, declared or
//! streamed).
//!
//! A chat-completions body (`POST chat/completions`, [`Endpoint::ChatCompletions`]) is read
//! whole and parsed: it must be a JSON object (else 400 — the gateway does not forward a body
//! it cannot read, since it could not ask for usage in it), and when it asks for a stream
//! (`"stream": true`) it gets `stream_options.include_usage: true`, the only way an
//! OpenAI-compatible stream reports its usage, whatever the agent sent there. The parsed body is
//! what goes upstream, re-serialised, so the upstream reads exactly what the gateway checked
//! (no duplicate key read one way here and another way there). Parsing a large body runs on the
//! blocking pool. Every other body streams up unchanged, chunk by chunk.
//!
//! [`SentBytes`] counts what went up, for the estimate of an answer without usage
//! ([`super::estimate`]).
//!
//! [`Endpoint::ChatCompletions`]: super::endpoints::Endpoint::ChatCompletions

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, header};
use futures_util::StreamExt;
use serde_json::{Map, Value};

use super::GatewayError;

/// Bodies up to this size are parsed on the async worker; larger ones on the blocking pool.
const INLINE_PARSE_BYTES: usize = 16 * 1024;

/// What goes upstream as the body.
pub(crate) enum Outgoing {
    /// The client's body, streamed unchanged.
    Streamed(Body),
    /// A body the gateway read whole (and rewrote).
    Whole(Bytes),
}

/// Bytes of the request body sent upstream so far (shared with the stream that sends them).
#[derive(Debug, Clone, Default)]
pub(crate) struct SentBytes(Arc<AtomicU64>);

impl SentBytes {
    /// The count so far.
    pub(crate) fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }

    /// Counts `n` more bytes.
    pub(crate) fn add(&self, n: usize) {
        let n = u64::try_from(n).unwrap_or(u64::MAX);
        self.0.fetch_add(n, Ordering::Relaxed);
    }
}

/// `BodyTooLarge` when the client declares a body longer than `limit`.
pub(crate) fn check_declared_length(headers: &HeaderMap, limit: usize) -> Result<(), GatewayError> {
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|len| len > limit as u64) {
        return Err(GatewayError::BodyTooLarge);
    }
    Ok(())
}

/// A chat-completions body, read whole (at most `limit` bytes), checked and rewritten (see the
/// module's header).
pub(crate) async fn chat_completions(body: Body, limit: usize) -> Result<Bytes, GatewayError> {
    let bytes = read_whole(body, limit).await?;
    if bytes.len() <= INLINE_PARSE_BYTES {
        return ask_for_usage(&bytes);
    }
    tokio::task::spawn_blocking(move || ask_for_usage(&bytes))
        .await
        .map_err(|error| GatewayError::Internal {
            detail: format!("the request body's rewrite did not finish: {error}"),
        })?
}

/// The body with `stream_options.include_usage: true` when it streams, re-serialised.
fn ask_for_usage(bytes: &[u8]) -> Result<Bytes, GatewayError> {
    let mut body: Map<String, Value> =
        serde_json::from_slice(bytes).map_err(|_| GatewayError::BadRequestBody)?;
    if body.get("stream") == Some(&Value::Bool(true)) {
        let options = body
            .entry("stream_options")
            .or_insert_with(|| Value::Object(Map::new()));
        if !options.is_object() {
            *options = Value::Object(Map::new());
        }
        if let Value::Object(options) = options {
            options.insert("include_usage".to_owned(), Value::Bool(true));
        }
    }
    serde_json::to_vec(&body)
        .map(Bytes::from)
        .map_err(|error| GatewayError::Internal {
            detail: format!("the request body could not be serialised: {error}"),
        })
}

/// The whole body, refused past `limit` bytes (413) or when it breaks off (400).
async fn read_whole(body: Body, limit: usize) -> Result<Bytes, GatewayError> {
    let mut out = Vec::new();
    let mut stream = body.into_data_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|_| GatewayError::BadRequestBody)?;
        if out.len().saturating_add(chunk.len()) > limit {
            return Err(GatewayError::BodyTooLarge);
        }
        out.extend_from_slice(&chunk);
    }
    Ok(Bytes::from(out))
}

/// The client's body as a stream that counts what it passes into `sent`, and fails (flagging
/// `too_large`) past `limit` bytes.
pub(crate) fn limited(
    body: Body,
    limit: usize,
    too_large: Arc<AtomicBool>,
    sent: SentBytes,
) -> impl futures_util::Stream<Item = Result<Bytes, Box<dyn std::error::Error + Send + Sync>>>
+ Send
+ 'static {
    let mut seen = 0usize;
    body.into_data_stream().map(move |chunk| {
        let chunk = chunk?;
        seen = seen.saturating_add(chunk.len());
        if seen > limit {
            too_large.store(true, Ordering::Relaxed);
            return Err("the request body exceeds the gateway's limit".into());
        }
        sent.add(chunk.len());
        Ok(chunk)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rewritten(body: &str) -> Value {
        let bytes = ask_for_usage(body.as_bytes()).expect("a JSON object");
        serde_json::from_slice(&bytes).expect("JSON")
    }

    #[test]
    fn streaming_requests_get_include_usage_whatever_they_sent() {
        for body in [
            r#"{"stream":true}"#,
            r#"{"stream":true,"stream_options":null}"#,
            r#"{"stream":true,"stream_options":"x"}"#,
            r#"{"stream":true,"stream_options":{"include_usage":false}}"#,
            r#"{"stream_options":{"include_usage":true},"stream":false,"stream":true}"#,
        ] {
            assert_eq!(
                rewritten(body)["stream_options"]["include_usage"],
                true,
                "{body}"
            );
        }
        let kept = rewritten(
            r#"{"stream":true,"stream_options":{"include_usage":false,"other":1},"messages":[{"content":"é"}]}"#,
        );
        assert_eq!(kept["stream_options"]["other"], 1);
        assert_eq!(kept["messages"][0]["content"], "é");
    }

    #[test]
    fn other_requests_get_no_stream_options() {
        for body in [r#"{"stream":false}"#, r#"{"stream":"true"}"#, "{}"] {
            assert!(rewritten(body).get("stream_options").is_none(), "{body}");
        }
    }

    #[test]
    fn bodies_that_are_not_a_json_object_are_refused() {
        for body in ["", "null", "[]", "\"s\"", "{", "{} {}", "{\"a\":1e999}"] {
            assert!(
                matches!(
                    ask_for_usage(body.as_bytes()),
                    Err(GatewayError::BadRequestBody)
                ),
                "{body:?}"
            );
        }
    }
}
