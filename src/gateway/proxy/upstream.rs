//! The upstream side of a forwarded request: the request with the allowed headers and the
//! real key, its body ([`crate::gateway::request_body`]) bounded as it goes up; the answer
//! relayed down, an error status with its body read (bounded) and the key scrubbed, a success
//! streamed through the meter.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::body::{Body, Bytes};
use axum::http::{
    HeaderMap, HeaderName, HeaderValue, Method, Response as HttpResponse, StatusCode, header,
};
use axum::response::Response;
use reqwest::Url;
use tokio::time::Instant;

use super::{GatewayError, failed};
use crate::gateway::meter::{Metered, Recording};
use crate::gateway::metrics::Outcome;
use crate::gateway::observer::{self, ProblemKind};
use crate::gateway::providers::{KeyHeader, Provider};
use crate::gateway::request_body::{Outgoing, SentBytes, limited};
use crate::gateway::usage::{BodyKind, UsageParser};
use crate::gateway::{Gateway, Inner};
use crate::session::SessionHandle;

/// Sends the request to `url`: `method`, the allowed client `headers` with the real key, and
/// `body` — a body read whole with its own length, or the client's streamed (when it declared
/// one) and refused past `max_request_body`. `sent` counts the body's bytes as they go.
pub(super) async fn send(
    inner: &Inner,
    method: Method,
    headers: &HeaderMap,
    body: Outgoing,
    provider: &Provider,
    url: Url,
    sent: &SentBytes,
) -> Result<reqwest::Response, GatewayError> {
    let mut upstream = upstream_headers(headers, provider);
    let too_large = Arc::new(AtomicBool::new(false));
    let mut builder = inner.client.request(method, url);
    match body {
        Outgoing::Whole(bytes) => {
            // The client's length was the body it sent, not this one.
            upstream.remove(header::CONTENT_LENGTH);
            sent.add(bytes.len());
            builder = builder.body(bytes);
        }
        Outgoing::Streamed(body) => {
            let declared = headers
                .get(header::CONTENT_LENGTH)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse::<u64>().ok());
            let has_body = declared.is_some_and(|len| len > 0)
                || headers.contains_key(header::TRANSFER_ENCODING);
            if has_body {
                let limit = inner.settings.max_request_body;
                let stream = limited(body, limit, Arc::clone(&too_large), sent.clone());
                builder = builder.body(reqwest::Body::wrap_stream(stream));
            }
        }
    }
    builder.headers(upstream).send().await.map_err(|error| {
        if too_large.load(Ordering::Relaxed) {
            GatewayError::BodyTooLarge
        } else {
            classify(&error)
        }
    })
}

/// An upstream error status, relayed: the request counted, a classified failure noted
/// ([`failed`]: the provider's health, the turn, the observer), any other 4xx one warn line
/// (the agent's own request was refused), and the body scrubbed of the key.
pub(super) async fn relay_error(
    gateway: &Gateway,
    upstream: reqwest::Response,
    provider: &Provider,
    session: &SessionHandle,
    started: Instant,
) -> Response {
    let inner = &gateway.inner;
    let status = upstream.status();
    let response_headers = downstream_headers(upstream.headers());
    let outcome = match status.as_u16() {
        401 | 403 => Outcome::KeyRejected,
        429 => Outcome::RateLimited,
        _ => Outcome::UpstreamError,
    };
    let body = error_body(upstream, provider, inner.settings.max_error_body).await;
    inner
        .metrics
        .record_request(&provider.id, outcome, started.elapsed());
    let kind = match status.as_u16() {
        401 | 403 => Some(ProblemKind::KeyRejected),
        429 => Some(ProblemKind::RateLimited),
        code if observer::is_model_not_found(code, &body) => Some(ProblemKind::ModelNotFound),
        500..=599 => Some(ProblemKind::ServerError),
        _ => None,
    };
    match kind {
        // Logged once per class change by the provider's health.
        Some(kind) => {
            tracing::debug!(provider = %provider.id, session_id = %session.id(), status = status.as_u16(), class = kind.as_str(), "model provider answered with an error");
            failed(
                gateway,
                Some(session),
                &provider.id,
                kind,
                (Some(status.as_u16()), status.as_u16()),
            );
        }
        // The agent's request was refused (too long, malformed): its own doing, not the
        // provider's health.
        None => tracing::warn!(
            provider = %provider.id,
            session_id = %session.id(),
            status = status.as_u16(),
            cause = "request rejected",
            "model provider answered with an error"
        ),
    }
    build_response(status, response_headers, Body::from(body))
}

/// A successful answer, streamed down through the meter that reads its usage.
pub(super) fn metered(upstream: reqwest::Response, recording: Recording) -> Response {
    let status = upstream.status();
    let response_headers = downstream_headers(upstream.headers());
    let kind = BodyKind::of(
        response_headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok()),
    );
    let stream = Metered::new(
        Box::pin(upstream.bytes_stream()),
        UsageParser::new(kind),
        recording,
    );
    build_response(status, response_headers, Body::from_stream(stream))
}

/// The headers sent upstream: the allowed client headers plus the real key.
fn upstream_headers(client: &HeaderMap, provider: &Provider) -> HeaderMap {
    let mut out = HeaderMap::new();
    let always = [header::CONTENT_TYPE, header::ACCEPT, header::CONTENT_LENGTH];
    for name in always.iter().chain(&provider.pass_headers) {
        for value in client.get_all(name) {
            out.append(name.clone(), value.clone());
        }
    }
    if let Some(key) = &provider.key {
        let (name, value) = match &provider.key_header {
            KeyHeader::Bearer => (header::AUTHORIZATION, format!("Bearer {}", key.expose())),
            KeyHeader::Named(name) => (name.clone(), key.expose().to_owned()),
        };
        // Keys are validated text; one that is not a header value is sent as no key at all
        // (the upstream then answers 401 and the operator sees `key rejected`).
        if let Ok(mut value) = HeaderValue::from_str(&value) {
            value.set_sensitive(true);
            out.insert(name, value);
        }
    }
    out
}

/// Response headers relayed to the client: all but hop-by-hop ones (and any the upstream's
/// `Connection` names), `content-length` (the body is re-framed) and `set-cookie`.
fn downstream_headers(upstream: &HeaderMap) -> HeaderMap {
    const DROPPED: [&str; 11] = [
        "connection",
        "keep-alive",
        "proxy-connection",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "content-length",
        "set-cookie",
    ];
    let named_by_connection: Vec<HeaderName> = upstream
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .collect();
    let mut out = HeaderMap::new();
    for (name, value) in upstream {
        if DROPPED.contains(&name.as_str()) || named_by_connection.contains(name) {
            continue;
        }
        out.append(name.clone(), value.clone());
    }
    out
}

fn build_response(status: StatusCode, headers: HeaderMap, body: Body) -> Response {
    let mut response = HttpResponse::new(body);
    *response.status_mut() = status;
    *response.headers_mut() = headers;
    response
}

/// Maps a failed upstream request to the gateway's error, keeping its cause chain (no URL:
/// it may carry the client's query) for the log.
fn classify(error: &reqwest::Error) -> GatewayError {
    let mut detail = String::new();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        if !detail.is_empty() {
            detail.push_str(": ");
        }
        detail.push_str(&cause.to_string());
        source = cause.source();
    }
    if detail.is_empty() {
        detail = "request failed".into();
    }
    if error.is_timeout() {
        GatewayError::TimedOut { detail }
    } else if error.is_connect() {
        GatewayError::Unreachable { detail }
    } else {
        GatewayError::UpstreamFailed { detail }
    }
}

/// An upstream error body, read up to `max` bytes, with the provider's key replaced by `***`.
async fn error_body(mut upstream: reqwest::Response, provider: &Provider, max: usize) -> Bytes {
    let mut body = Vec::new();
    while body.len() < max {
        match upstream.chunk().await {
            Ok(Some(chunk)) => {
                let room = max - body.len();
                body.extend_from_slice(&chunk[..chunk.len().min(room)]);
            }
            Ok(None) | Err(_) => break,
        }
    }
    if let Some(key) = provider.key.as_ref().map(|k| k.expose().as_bytes())
        && !key.is_empty()
    {
        body = replace_all(&body, key, b"***");
    }
    Bytes::from(body)
}

fn replace_all(haystack: &[u8], needle: &[u8], with: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(haystack.len());
    let mut i = 0;
    while i < haystack.len() {
        if haystack[i..].starts_with(needle) {
            out.extend_from_slice(with);
            i += needle.len();
        } else {
            out.push(haystack[i]);
            i += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_by_hop_and_connection_named_headers_are_not_relayed() {
        let mut h = HeaderMap::new();
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/event-stream"),
        );
        h.insert(
            header::CONNECTION,
            HeaderValue::from_static("keep-alive, x-private"),
        );
        h.insert("x-private", HeaderValue::from_static("1"));
        h.insert(
            header::TRANSFER_ENCODING,
            HeaderValue::from_static("chunked"),
        );
        h.insert(header::SET_COOKIE, HeaderValue::from_static("a=b"));
        h.insert("retry-after", HeaderValue::from_static("7"));
        let out = downstream_headers(&h);
        let names: Vec<&str> = out.keys().map(HeaderName::as_str).collect();
        assert_eq!(names.len(), 2, "{names:?}");
        assert_eq!(out["content-type"], "text/event-stream");
        assert_eq!(out["retry-after"], "7");
    }

    #[test]
    fn the_key_is_scrubbed_wherever_it_appears() {
        assert_eq!(
            replace_all(b"bad key sk-1 (sk-1)", b"sk-1", b"***"),
            b"bad key *** (***)"
        );
    }
}
