//! `ANY /mcp/{session_id}/{server}`: the broker's checks (see the module above), the request
//! forwarded with the server's own headers, and the answer passed back through the rules —
//! JSON read whole within the cap, an event stream event by event — with every tool call's
//! end audited.

use std::collections::BTreeSet;
use std::sync::Arc;

use axum::Json;
use axum::body::{Body, Bytes};
use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use serde_json::json;
use tokio::time::Instant;

use super::events::{Events, data_of, with_data};
use super::filter::{Answered, Exchange, Verdict, inspect};
use super::{Broker, Server};
use crate::config::McpKind;
use crate::session::{SessionHandle, authenticate};
use crate::skill_api::auth::{auth_status, presented};
use crate::store::WorkspaceKey;

/// Client headers passed to the server (besides the body's type); nothing else of the
/// agent's — its caller token above all — goes up.
const PASSED_UP: [&str; 4] = [
    "accept",
    "mcp-session-id",
    "mcp-protocol-version",
    "last-event-id",
];
/// Server headers passed back besides the body's type.
const PASSED_DOWN: [&str; 2] = ["mcp-session-id", "mcp-protocol-version"];

/// Who a request is for, for the audit.
#[derive(Clone)]
pub(super) struct Audit {
    broker: Broker,
    server: String,
    session_id: String,
    started: Instant,
}

impl Audit {
    /// Records the end of each answered tool call.
    pub(super) fn calls(&self, answered: &[Answered]) {
        for a in answered {
            self.broker
                .inner
                .metrics
                .call(&self.server, &a.tool, a.outcome);
            tracing::info!(
                session_id = %self.session_id,
                server = %self.server,
                tool = %a.tool,
                outcome = a.outcome,
                duration_ms = self.started.elapsed().as_millis() as u64,
                "mcp tool call"
            );
        }
    }

    /// Records tool calls (or other methods) the broker refused.
    fn refused(&self, refused: &[String]) {
        for what in refused {
            self.broker
                .inner
                .metrics
                .call(&self.server, "not_allowed", "refused");
            // The name is the agent's choice: logged as a field, never a label.
            tracing::warn!(
                session_id = %self.session_id,
                server = %self.server,
                refused = %what.chars().take(128).collect::<String>(),
                "mcp request refused: not an allowed tool of this server"
            );
        }
    }
}

/// The broker's own refusal: `{success: false, code, error}`.
pub(super) fn refuse(status: StatusCode, code: &str, message: &str) -> Response {
    (
        status,
        Json(json!({"success": false, "code": code, "error": message})),
    )
        .into_response()
}

/// The route.
pub(super) async fn broker(
    State(broker): State<Broker>,
    Path((session_id, server_name)): Path<(String, String)>,
    request: Request,
) -> Response {
    let Some(server) = broker.inner.servers.get(&server_name) else {
        return refuse(
            StatusCode::NOT_FOUND,
            "UNKNOWN_SERVER",
            "no such MCP server",
        );
    };
    let (parts, body) = request.into_parts();
    let session = match authenticate(
        &broker.inner.sessions,
        &session_id,
        &presented(&parts.headers, &parts.extensions),
    ) {
        Ok(session) => session,
        Err(failure) => {
            broker.inner.metrics.request(&server.name, "unauthorized");
            return refuse(auth_status(failure), failure.code(), &failure.to_string());
        }
    };
    let place = session.context().place.name.clone();
    if !server.config.serves_place(&place) {
        broker.inner.metrics.request(&server.name, "forbidden");
        return refuse(
            StatusCode::FORBIDDEN,
            "FORBIDDEN_CONTEXT",
            "this MCP server is not available in this place",
        );
    }
    // A server the broker keeps a connection to has no stream of its own for the agent.
    if server.config.kind != McpKind::Http && parts.method != Method::POST {
        return StatusCode::METHOD_NOT_ALLOWED.into_response();
    }
    let limit = server.config.max_request_kb as usize * 1024;
    let Ok(body) = axum::body::to_bytes(body, limit).await else {
        broker.inner.metrics.request(&server.name, "too_large");
        return refuse(
            StatusCode::PAYLOAD_TOO_LARGE,
            "BODY_TOO_LARGE",
            "the request is too large",
        );
    };
    let audit = Audit {
        broker: broker.clone(),
        server: server.name.clone(),
        session_id,
        started: Instant::now(),
    };
    let exchange = match parts.method {
        Method::POST => match inspect(&body, &server.allowed) {
            Ok(Verdict::Forward(exchange)) => {
                if let Some(answer) = over_day(&broker, &session, &exchange).await {
                    audit.refused(&["the day's tool calls".to_owned()]);
                    broker.inner.metrics.request(&server.name, "daily_limit");
                    return (StatusCode::OK, Json(answer)).into_response();
                }
                exchange
            }
            Ok(Verdict::Refuse { answer, refused }) => {
                audit.refused(&refused);
                broker.inner.metrics.request(&server.name, "refused");
                return match answer {
                    Some(answer) => (StatusCode::OK, Json(answer)).into_response(),
                    None => StatusCode::ACCEPTED.into_response(),
                };
            }
            Err(e) => {
                broker.inner.metrics.request(&server.name, "bad_request");
                return refuse(StatusCode::BAD_REQUEST, "BAD_REQUEST_BODY", &e.to_string());
            }
        },
        Method::GET | Method::DELETE => Exchange::default(),
        _ => return StatusCode::METHOD_NOT_ALLOWED.into_response(),
    };
    match server.config.kind {
        McpKind::Http => forward(server, parts.method, &parts.headers, body, exchange, audit).await,
        McpKind::Sse | McpKind::Stdio => {
            super::relay::relay(&broker, server, &session, &body, exchange, &audit).await
        }
    }
}

/// JSON-RPC: a server-defined error (here: the user's calls of the day are used up).
const DAILY_LIMIT: i64 = -32001;

/// The answer refusing the tool calls of `exchange` when they would pass the user's calls of
/// the day (`mcp.callsPerUserPerDay`); `None` when they may go, and then they are counted. A
/// usage that cannot be read or written is logged and the calls go.
async fn over_day(
    broker: &Broker,
    session: &SessionHandle,
    exchange: &Exchange,
) -> Option<serde_json::Value> {
    let Some(store) = &broker.inner.store else {
        return None;
    };
    if exchange.calls.is_empty() {
        return None;
    }
    let context = session.context();
    let who = WorkspaceKey::new(
        context.origin.platform.as_str(),
        context.origin.user_id.as_str(),
    )
    .ok()?;
    let day = chrono::Utc::now().date_naive();
    let calls = exchange.calls.len() as u64;
    if let Some(limit) = broker.inner.calls_per_day {
        match store.mcp_calls_on(day, &who).await {
            Ok(used) if used + calls > u64::from(limit) => {
                let errors: Vec<serde_json::Value> = exchange
                    .calls
                    .iter()
                    .map(|c| json!({"jsonrpc": "2.0", "id": c.id, "error": {"code": DAILY_LIMIT,
                        "message": format!("the {limit} tool calls this person's conversations may make today are used up")}}))
                    .collect();
                return Some(match errors.len() {
                    1 => errors.into_iter().next().unwrap_or_default(),
                    _ => serde_json::Value::Array(errors),
                });
            }
            Ok(_) => {}
            Err(error) => {
                tracing::error!(workspace = %who, error = %error, "mcp calls not checked: the usage could not be read")
            }
        }
    }
    if let Err(error) = store.add_mcp_calls(&who, day, calls).await {
        tracing::error!(workspace = %who, error = %error, "mcp calls not counted: the usage could not be written");
    }
    None
}

/// Sends the request to the server and passes its answer back through the rules.
async fn forward(
    server: &Server,
    method: Method,
    client_headers: &HeaderMap,
    body: Bytes,
    exchange: Exchange,
    audit: Audit,
) -> Response {
    let metrics = &audit.broker.inner.metrics;
    if server.literal_not_public() {
        metrics.request(&server.name, "not_public");
        return refuse(
            StatusCode::BAD_GATEWAY,
            "SERVER_NOT_PUBLIC",
            "the MCP server's address is not public (the operator may mark it local)",
        );
    }
    let mut headers = HeaderMap::new();
    if let Some(value) = client_headers.get(header::CONTENT_TYPE) {
        headers.insert(header::CONTENT_TYPE, value.clone());
    }
    for name in PASSED_UP {
        if let Some(value) = client_headers.get(name) {
            headers.insert(name, value.clone());
        }
    }
    for (name, value) in &server.headers {
        headers.insert(name, value.clone());
    }
    let sent = server
        .client
        .request(method, server.url.clone())
        .headers(headers)
        .body(body)
        .send()
        .await;
    let upstream = match sent {
        Ok(upstream) => upstream,
        Err(e) => {
            let (outcome, status, message) = if e.is_timeout() {
                (
                    "timeout",
                    StatusCode::GATEWAY_TIMEOUT,
                    "the MCP server did not answer in time",
                )
            } else {
                (
                    "unreachable",
                    StatusCode::BAD_GATEWAY,
                    "the MCP server could not be reached (or its address is not public)",
                )
            };
            metrics.request(&server.name, outcome);
            tracing::warn!(server = %server.name, outcome, error = %without_url(&e), "mcp server not reached");
            return refuse(status, "SERVER_UNREACHABLE", message);
        }
    };
    let status = upstream.status();
    if status.is_redirection() {
        metrics.request(&server.name, "redirect");
        tracing::warn!(server = %server.name, status = status.as_u16(), "mcp server answered a redirect: not followed");
        return refuse(
            StatusCode::BAD_GATEWAY,
            "REDIRECT_REFUSED",
            "the MCP server answered a redirect, which the broker does not follow",
        );
    }
    metrics.request(
        &server.name,
        if status.is_success() { "ok" } else { "error" },
    );
    let mut down = HeaderMap::new();
    for name in PASSED_DOWN {
        if let Some(value) = upstream.headers().get(name) {
            down.insert(name, value.clone());
        }
    }
    let content_type = upstream.headers().get(header::CONTENT_TYPE).cloned();
    if let Some(value) = &content_type {
        down.insert(header::CONTENT_TYPE, value.clone());
    }
    let kind = content_type
        .as_ref()
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_ascii_lowercase();
    let cap = server.config.max_response_kb as usize * 1024;
    let allowed = Arc::new(server.allowed.clone());
    let body = if kind.starts_with("text/event-stream") {
        event_stream(upstream, exchange, allowed, cap, audit)
    } else {
        match json_answer(upstream, &exchange, &allowed, cap, &audit).await {
            Ok(body) => body,
            Err(response) => return response,
        }
    };
    let mut response = Response::new(body);
    *response.status_mut() = status;
    *response.headers_mut() = down;
    response
}

/// A JSON (or other) answer, read whole within `cap` and filtered.
async fn json_answer(
    mut upstream: reqwest::Response,
    exchange: &Exchange,
    allowed: &BTreeSet<String>,
    cap: usize,
    audit: &Audit,
) -> Result<Body, Response> {
    let mut body = Vec::new();
    loop {
        match upstream.chunk().await {
            Ok(Some(chunk)) if body.len() + chunk.len() <= cap => body.extend_from_slice(&chunk),
            Ok(Some(_)) => {
                audit
                    .broker
                    .inner
                    .metrics
                    .request(&audit.server, "too_large_answer");
                return Err(refuse(
                    StatusCode::BAD_GATEWAY,
                    "ANSWER_TOO_LARGE",
                    "the MCP server's answer is larger than the broker passes",
                ));
            }
            Ok(None) => break,
            Err(_) => {
                return Err(refuse(
                    StatusCode::BAD_GATEWAY,
                    "SERVER_UNREACHABLE",
                    "the MCP server's answer broke off",
                ));
            }
        }
    }
    let (changed, answered) = exchange.filter_body(&body, allowed);
    audit.calls(&answered);
    Ok(Body::from(changed.unwrap_or(body)))
}

/// An event stream, passed on event by event through the rules, cut past `cap` bytes.
fn event_stream(
    upstream: reqwest::Response,
    exchange: Exchange,
    allowed: Arc<BTreeSet<String>>,
    cap: usize,
    audit: Audit,
) -> Body {
    let state = (
        upstream.bytes_stream().boxed(),
        Events::new(cap),
        0usize,
        false,
    );
    let stream =
        futures_util::stream::unfold(state, move |(mut up, mut events, mut sent, done)| {
            let (exchange, allowed, audit) = (exchange.clone(), allowed.clone(), audit.clone());
            async move {
                if done {
                    return None;
                }
                let out: Result<Bytes, std::io::Error> = match up.next().await {
                    None => {
                        let rest = events.finish();
                        return (!rest.is_empty())
                            .then(|| (Ok(Bytes::from(rest)), (up, Events::new(0), sent, true)));
                    }
                    Some(Err(e)) => Err(std::io::Error::other(without_url(&e))),
                    Some(Ok(chunk)) => match events.push(&chunk) {
                        Err(e) => Err(std::io::Error::other(e.to_string())),
                        Ok(complete) => {
                            let mut bytes = Vec::new();
                            for event in complete {
                                bytes.extend(pass_event(&event, &exchange, &allowed, &audit));
                            }
                            sent += bytes.len();
                            if sent > cap {
                                Err(std::io::Error::other(
                                    "the MCP server's stream passed the cap",
                                ))
                            } else {
                                Ok(Bytes::from(bytes))
                            }
                        }
                    },
                };
                let done = out.is_err();
                if let Err(e) = &out {
                    tracing::warn!(server = %audit.server, error = %e, "mcp stream cut");
                }
                Some((out, (up, events, sent, done)))
            }
        });
    Body::from_stream(stream)
}

/// One event of the stream as it goes to the agent.
fn pass_event(
    event: &[u8],
    exchange: &Exchange,
    allowed: &BTreeSet<String>,
    audit: &Audit,
) -> Vec<u8> {
    let Some(mut message) = data_of(event).and_then(|d| serde_json::from_str(&d).ok()) else {
        return event.to_vec();
    };
    let (changed, answered) = exchange.filter(&mut message, allowed);
    audit.calls(answered.as_slice());
    if changed {
        with_data(event, &message.to_string())
    } else {
        event.to_vec()
    }
}

/// A client error's text without the URL (it may carry a credential in its query).
pub(super) fn without_url(e: &reqwest::Error) -> String {
    let text = e.to_string();
    match e.url() {
        Some(url) => text.replace(url.as_str(), "<url>"),
        None => text,
    }
}
