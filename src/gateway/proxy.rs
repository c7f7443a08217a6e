//! `ANY /llm/{session_id}/{provider}/{*rest}`: the gateway route.
//!
//! Checks, in this order (the first failure answers; see [`GatewayError`] for the statuses):
//! 1. on a session socket, the socket's session must be `{session_id}` (403) — before the
//!    lookup, so a hijacked agent learns nothing about other sessions, not even whether one
//!    exists;
//! 2. `{session_id}` is a live session (401);
//! 3. the key the client presented — `Authorization: Bearer X` and/or `x-api-key: X` — is
//!    that session's caller token, compared in constant time (401 when absent, 403 when wrong);
//! 4. `{provider}` is configured (404), its key is set in the daemon's environment (503), and
//!    `{rest}` stays under its `baseUrl` (400: no dot segments or encoded slashes);
//! 5. the user's and the global daily token budgets are not used up (429).
//!
//! Then the request is forwarded to `{baseUrl}/{rest}?{query}` with the real key in the
//! provider's header. Of the client's headers only `content-type`, `accept`, `content-length`
//! and the provider's `passHeaders` go upstream — never its `authorization`/`x-api-key` (the
//! caller token), cookies or `accept-encoding` (so the response stays readable for metering).
//! The request body streams up and the response streams down chunk by chunk, never buffered;
//! status, `content-type` and the other end-to-end response headers are preserved.
//!
//! Upstream failures are mapped for the operator in one warn line (provider, status, cause:
//! `key rejected` for 401/403, `rate limited` for 429, `unreachable`, `timed out`) and in
//! `llm_requests_total{outcome}`, and those the user can act on (key unset or rejected, rate
//! limited, model unknown, unreachable, timed out) are reported to the gateway's observer
//! ([`super::observer`]); the client gets the upstream's status (502 when unreachable,
//! 504 on a timeout). An upstream error body is read (bounded) and the key scrubbed from it
//! before it is relayed, in case a provider echoes the key back.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Json;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{
    HeaderMap, HeaderName, HeaderValue, Response as HttpResponse, StatusCode, header,
};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use serde_json::json;
use tokio::time::Instant;

use super::Gateway;
use super::budget::BudgetExceeded;
use super::meter::{Metered, Recording};
use super::metrics::{Outcome, UNKNOWN_PROVIDER_LABEL};
use super::observer::{self, ProblemKind, ProviderFailure};
use super::providers::{KeyHeader, Provider};
use super::usage::{BodyKind, UsageParser};
use crate::skill_api::auth::socket_session_matches;
use crate::store::WorkspaceKey;

/// Why the gateway itself answered instead of the upstream. Each variant maps to exactly one
/// status and code ([`status`](Self::status), [`code`](Self::code)); the body never carries
/// more than the variant's fixed message.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    /// The path is not `/llm/<session>/<provider>/<path>`.
    #[error("the path must be /llm/<session>/<provider>/<path>")]
    BadRoute,
    /// The request arrived on another session's socket.
    #[error("this channel belongs to another session")]
    WrongSessionChannel,
    /// No live session has this id.
    #[error("no such session")]
    SessionNotFound,
    /// Neither `Authorization: Bearer` nor `x-api-key` was presented.
    #[error("no API key presented")]
    KeyMissing,
    /// A presented key is not the session's caller token.
    #[error("the API key is not valid for this session")]
    KeyMismatch,
    /// `{provider}` is not configured.
    #[error("no such provider")]
    UnknownProvider,
    /// The path after the provider could climb out of its base URL.
    #[error("the path is not allowed")]
    BadPath,
    /// The provider's key variable is unset in the daemon's environment.
    #[error("the daemon has no key for this provider")]
    ProviderKeyNotSet {
        /// The variable to set (logged, not sent).
        env: String,
    },
    /// A daily budget is used up.
    #[error("the daily token budget is used up")]
    OverBudget(BudgetExceeded),
    /// The request body exceeds `max_request_body`.
    #[error("the request body is too large")]
    BodyTooLarge,
    /// The upstream could not be connected to.
    #[error("the model provider is unreachable")]
    Unreachable {
        /// The connection error (logged, not sent).
        detail: String,
    },
    /// The upstream did not answer in time.
    #[error("the model provider did not answer in time")]
    TimedOut {
        /// The error (logged, not sent).
        detail: String,
    },
    /// The upstream request failed otherwise.
    #[error("the request to the model provider failed")]
    UpstreamFailed {
        /// The error (logged, not sent).
        detail: String,
    },
}

impl GatewayError {
    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        match self {
            GatewayError::BadRoute | GatewayError::BadPath => StatusCode::BAD_REQUEST,
            GatewayError::SessionNotFound | GatewayError::KeyMissing => StatusCode::UNAUTHORIZED,
            GatewayError::WrongSessionChannel | GatewayError::KeyMismatch => StatusCode::FORBIDDEN,
            GatewayError::UnknownProvider => StatusCode::NOT_FOUND,
            GatewayError::ProviderKeyNotSet { .. } => StatusCode::SERVICE_UNAVAILABLE,
            GatewayError::OverBudget(_) => StatusCode::TOO_MANY_REQUESTS,
            GatewayError::BodyTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            GatewayError::Unreachable { .. } | GatewayError::UpstreamFailed { .. } => {
                StatusCode::BAD_GATEWAY
            }
            GatewayError::TimedOut { .. } => StatusCode::GATEWAY_TIMEOUT,
        }
    }

    /// The machine-readable code in the body (`error.code`).
    pub fn code(&self) -> &'static str {
        match self {
            GatewayError::BadRoute => "BAD_ROUTE",
            GatewayError::WrongSessionChannel | GatewayError::KeyMismatch => "AUTH_FAILED",
            GatewayError::SessionNotFound => "SESSION_NOT_FOUND",
            GatewayError::KeyMissing => "AUTH_MISSING",
            GatewayError::UnknownProvider => "UNKNOWN_PROVIDER",
            GatewayError::BadPath => "BAD_PATH",
            GatewayError::ProviderKeyNotSet { .. } => "PROVIDER_KEY_NOT_SET",
            GatewayError::OverBudget(_) => "BUDGET_EXCEEDED",
            GatewayError::BodyTooLarge => "BODY_TOO_LARGE",
            GatewayError::Unreachable { .. } => "UPSTREAM_UNREACHABLE",
            GatewayError::TimedOut { .. } => "UPSTREAM_TIMEOUT",
            GatewayError::UpstreamFailed { .. } => "UPSTREAM_FAILED",
        }
    }

    fn outcome(&self) -> Outcome {
        match self {
            GatewayError::OverBudget(_) => Outcome::OverBudget,
            GatewayError::ProviderKeyNotSet { .. } => Outcome::NoKey,
            GatewayError::Unreachable { .. } => Outcome::Unreachable,
            GatewayError::TimedOut { .. } => Outcome::TimedOut,
            GatewayError::UpstreamFailed { .. } => Outcome::UpstreamError,
            GatewayError::BadRoute
            | GatewayError::WrongSessionChannel
            | GatewayError::SessionNotFound
            | GatewayError::KeyMissing
            | GatewayError::KeyMismatch
            | GatewayError::UnknownProvider
            | GatewayError::BadPath
            | GatewayError::BodyTooLarge => Outcome::Refused,
        }
    }
}

impl IntoResponse for GatewayError {
    /// An OpenAI-style error body, so the agent's SDK shows the message.
    fn into_response(self) -> Response {
        let body = json!({"error": {
            "message": self.to_string(),
            "type": "gateway_error",
            "code": self.code(),
        }});
        (self.status(), Json(body)).into_response()
    }
}

/// A refused request with what its log line names.
struct Refusal {
    error: GatewayError,
    session_id: Option<String>,
    provider: Option<String>,
}

impl From<GatewayError> for Refusal {
    fn from(error: GatewayError) -> Self {
        Self {
            error,
            session_id: None,
            provider: None,
        }
    }
}

/// The route handler: every refusal is logged and counted here, once.
pub(crate) async fn proxy(State(gateway): State<Gateway>, request: Request) -> Response {
    let started = Instant::now();
    match forward(&gateway, request, started).await {
        Ok(response) => response,
        Err(refusal) => {
            let provider = refusal
                .provider
                .as_deref()
                .unwrap_or(UNKNOWN_PROVIDER_LABEL);
            let session_id = refusal.session_id.as_deref().unwrap_or("");
            let error = &refusal.error;
            gateway
                .inner
                .metrics
                .record_request(provider, error.outcome(), started.elapsed());
            let kind = match error {
                GatewayError::ProviderKeyNotSet { .. } => Some(ProblemKind::KeyNotSet),
                GatewayError::Unreachable { .. } => Some(ProblemKind::Unreachable),
                GatewayError::TimedOut { .. } => Some(ProblemKind::TimedOut),
                _ => None,
            };
            if let Some(kind) = kind {
                report(&gateway, session_id, provider, kind, None);
            }
            match error {
                // Logged (with the limit) by the budget check itself.
                GatewayError::OverBudget(_) => {}
                GatewayError::ProviderKeyNotSet { env } => tracing::warn!(
                    provider,
                    session_id,
                    env = %env,
                    "model provider key not set: set this variable in the daemon's environment and restart"
                ),
                GatewayError::Unreachable { detail }
                | GatewayError::TimedOut { detail }
                | GatewayError::UpstreamFailed { detail } => tracing::warn!(
                    provider,
                    session_id,
                    status = error.status().as_u16(),
                    cause = match error {
                        GatewayError::Unreachable { .. } => "unreachable",
                        GatewayError::TimedOut { .. } => "timed out",
                        _ => "request failed",
                    },
                    detail = %detail,
                    "model provider request failed"
                ),
                _ => tracing::warn!(
                    provider,
                    session_id,
                    status = error.status().as_u16(),
                    code = error.code(),
                    "model gateway request refused"
                ),
            }
            refusal.error.into_response()
        }
    }
}

/// Tells the gateway's observer, if any, of a classified failure of a configured provider.
fn report(
    gateway: &Gateway,
    session_id: &str,
    provider_id: &str,
    kind: ProblemKind,
    status: Option<u16>,
) {
    let inner = &gateway.inner;
    let (Some(observer), Some(provider)) = (inner.observer.get(), inner.providers.get(provider_id))
    else {
        return;
    };
    observer.provider_failed(&ProviderFailure {
        session_id: session_id.to_owned(),
        provider: provider.id.clone(),
        key_env: provider.key_env.clone(),
        anonymous: provider.anonymous,
        base_url: provider.base_url.to_string(),
        kind,
        status,
    });
}

/// Splits a raw path into `(session id, provider, rest)`; `rest` stays percent-encoded.
fn split_route(path: &str) -> Option<(&str, &str, &str)> {
    let tail = path.strip_prefix("/llm/")?;
    let (session_id, tail) = tail.split_once('/')?;
    let (provider, rest) = tail.split_once('/')?;
    Some((session_id, provider, rest))
}

/// The keys the client presented: its bearer token and its `x-api-key`, whichever it sent.
/// `Err` when a header is present but unusable (not text, another scheme, empty).
fn presented_keys(headers: &HeaderMap) -> Result<Vec<&[u8]>, GatewayError> {
    let mut keys = Vec::new();
    for value in headers.get_all(header::AUTHORIZATION) {
        let text = value
            .to_str()
            .map_err(|_| GatewayError::KeyMismatch)?
            .trim();
        let token = text
            .split_once(' ')
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map(|(_, token)| token.trim())
            .filter(|token| !token.is_empty())
            .ok_or(GatewayError::KeyMismatch)?;
        keys.push(token.as_bytes());
    }
    for value in headers.get_all("x-api-key") {
        let key = value.as_bytes().trim_ascii();
        if key.is_empty() {
            return Err(GatewayError::KeyMismatch);
        }
        keys.push(key);
    }
    Ok(keys)
}

async fn forward(
    gateway: &Gateway,
    request: Request,
    started: Instant,
) -> Result<Response, Refusal> {
    let inner = &gateway.inner;
    let path = request.uri().path().to_owned();
    let (session_id, provider_id, rest) = split_route(&path).ok_or(GatewayError::BadRoute)?;
    let refuse = |error: GatewayError, provider: Option<&str>| Refusal {
        error,
        session_id: Some(session_id.to_owned()),
        provider: provider.map(str::to_owned),
    };
    // A configured provider's id is a safe label; anything else is `unknown`.
    let label = inner.providers.get(provider_id).map(|p| p.id.as_str());

    socket_session_matches(request.extensions(), session_id)
        .map_err(|_| refuse(GatewayError::WrongSessionChannel, label))?;
    let session = inner
        .sessions
        .lookup(session_id)
        .ok_or_else(|| refuse(GatewayError::SessionNotFound, label))?;
    let keys = presented_keys(request.headers()).map_err(|e| refuse(e, label))?;
    if keys.is_empty() {
        return Err(refuse(GatewayError::KeyMissing, label));
    }
    // Every presented key must match (no short-circuit on the first).
    let matched = keys
        .iter()
        .fold(true, |all, key| session.token_matches(key) & all);
    if !matched {
        return Err(refuse(GatewayError::KeyMismatch, label));
    }
    session.mark_active();

    let provider = inner
        .providers
        .get(provider_id)
        .ok_or_else(|| refuse(GatewayError::UnknownProvider, None))?;
    let label = Some(provider.id.as_str());
    if !provider.keyless && provider.key.is_none() {
        return Err(refuse(
            GatewayError::ProviderKeyNotSet {
                env: provider.key_env.clone(),
            },
            label,
        ));
    }
    let url = provider
        .upstream_url(rest, request.uri().query())
        .ok_or_else(|| refuse(GatewayError::BadPath, label))?;

    let context = session.context();
    let workspace =
        WorkspaceKey::new(context.origin.platform.as_str(), &context.origin.user_id).ok();
    if let Some(workspace) = &workspace
        && !inner.budget.is_unlimited()
    {
        inner
            .budget
            .check(&inner.store, workspace)
            .await
            .map_err(|e| refuse(GatewayError::OverBudget(e), label))?;
    }

    let method = request.method().clone();
    let (parts, body) = request.into_parts();
    let headers = upstream_headers(&parts.headers, provider);
    let limit = inner.settings.max_request_body;
    let declared = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|len| len > limit as u64) {
        return Err(refuse(GatewayError::BodyTooLarge, label));
    }
    let has_body = declared.is_some_and(|len| len > 0)
        || parts.headers.contains_key(header::TRANSFER_ENCODING);
    let too_large = Arc::new(AtomicBool::new(false));
    let mut builder = inner.client.request(method.clone(), url).headers(headers);
    if has_body {
        builder = builder.body(reqwest::Body::wrap_stream(limited(
            body,
            limit,
            Arc::clone(&too_large),
        )));
    }
    let upstream = match builder.send().await {
        Ok(upstream) => upstream,
        Err(error) => {
            let error = if too_large.load(Ordering::Relaxed) {
                GatewayError::BodyTooLarge
            } else {
                classify(&error)
            };
            return Err(refuse(error, label));
        }
    };

    let status = upstream.status();
    let response_headers = downstream_headers(upstream.headers());
    if status.as_u16() >= 400 {
        let cause = match status.as_u16() {
            401 | 403 => "key rejected",
            429 => "rate limited",
            400..=499 => "request rejected",
            _ => "server error",
        };
        let outcome = match status.as_u16() {
            401 | 403 => Outcome::KeyRejected,
            429 => Outcome::RateLimited,
            _ => Outcome::UpstreamError,
        };
        tracing::warn!(
            provider = %provider.id,
            session_id,
            status = status.as_u16(),
            cause,
            "model provider answered with an error"
        );
        let body = error_body(upstream, provider, inner.settings.max_error_body).await;
        inner
            .metrics
            .record_request(&provider.id, outcome, started.elapsed());
        let kind = match status.as_u16() {
            401 | 403 => Some(ProblemKind::KeyRejected),
            429 => Some(ProblemKind::RateLimited),
            code if observer::is_model_not_found(code, &body) => Some(ProblemKind::ModelNotFound),
            _ => None,
        };
        if let Some(kind) = kind {
            report(
                gateway,
                session_id,
                &provider.id,
                kind,
                Some(status.as_u16()),
            );
        }
        return Ok(build_response(status, response_headers, Body::from(body)));
    }

    let kind = BodyKind::of(
        response_headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok()),
    );
    let recording = Recording {
        gateway: gateway.clone(),
        provider: provider.id.clone(),
        session_id: session_id.to_owned(),
        session: session.clone(),
        workspace,
        started,
        expects_usage: method == axum::http::Method::POST,
    };
    let stream = Metered::new(
        Box::pin(upstream.bytes_stream()),
        UsageParser::new(kind),
        recording,
    );
    Ok(build_response(
        status,
        response_headers,
        Body::from_stream(stream),
    ))
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

/// The client's body as a stream that fails (and flags `too_large`) past `limit` bytes.
fn limited(
    body: Body,
    limit: usize,
    too_large: Arc<AtomicBool>,
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
        Ok(chunk)
    })
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
    fn routes_split_into_session_provider_and_raw_rest() {
        assert_eq!(
            split_route("/llm/abc/openai/chat/completions"),
            Some(("abc", "openai", "chat/completions"))
        );
        assert_eq!(
            split_route("/llm/abc/p/a%2Fb"),
            Some(("abc", "p", "a%2Fb")),
            "rest stays encoded"
        );
        assert_eq!(split_route("/llm/abc"), None);
        assert_eq!(split_route("/api/skill/x"), None);
    }

    #[test]
    fn both_key_headers_are_collected_and_malformed_ones_refused() {
        let mut h = HeaderMap::new();
        assert!(presented_keys(&h).unwrap().is_empty());
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Bearer tok"),
        );
        h.insert("x-api-key", HeaderValue::from_static(" other "));
        assert_eq!(
            presented_keys(&h).unwrap(),
            vec![&b"tok"[..], &b"other"[..]]
        );
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Basic dXNlcg=="),
        );
        assert!(presented_keys(&h).is_err());
        let mut h = HeaderMap::new();
        h.insert("x-api-key", HeaderValue::from_static(""));
        assert!(presented_keys(&h).is_err());
    }

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
    fn every_error_maps_to_its_status() {
        let cases = [
            (GatewayError::SessionNotFound, 401),
            (GatewayError::KeyMissing, 401),
            (GatewayError::KeyMismatch, 403),
            (GatewayError::WrongSessionChannel, 403),
            (GatewayError::UnknownProvider, 404),
            (GatewayError::BadPath, 400),
            (GatewayError::ProviderKeyNotSet { env: "K".into() }, 503),
            (GatewayError::BodyTooLarge, 413),
            (
                GatewayError::Unreachable {
                    detail: String::new(),
                },
                502,
            ),
            (
                GatewayError::TimedOut {
                    detail: String::new(),
                },
                504,
            ),
        ];
        for (error, status) in cases {
            assert_eq!(error.status().as_u16(), status, "{error:?}");
        }
    }

    #[test]
    fn the_key_is_scrubbed_wherever_it_appears() {
        assert_eq!(
            replace_all(b"bad key sk-1 (sk-1)", b"sk-1", b"***"),
            b"bad key *** (***)"
        );
    }
}
