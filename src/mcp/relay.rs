//! The agent's `POST` to a server the broker keeps a connection to (`stdio`, `sse`;
//! [`super::link`]), after the route's checks passed: each request goes over the session's
//! connection as a request of the broker's own and its answer comes back under the agent's id,
//! each notification is passed, and the agent's answers to requests of the server's are
//! dropped (the broker never passes those requests on). The answers go through the same rules as
//! any server's ([`Exchange::filter`]: tool lists filtered, tool calls audited) and back as one
//! JSON body (a batch for a batch); a body of notifications only is answered `202`.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::filter::Exchange;
use super::link::OpenError;
use super::route::{Audit, refuse};
use super::{Broker, Server, sse};
use crate::agent::rpc::{INTERNAL_ERROR, RpcError};
use crate::config::McpKind;
use crate::session::SessionHandle;

/// Relays `body` (JSON-RPC the route already inspected) to `server` for `session`.
pub(super) async fn relay(
    broker: &Broker,
    server: &Server,
    session: &SessionHandle,
    body: &[u8],
    exchange: Exchange,
    audit: &Audit,
) -> Response {
    let metrics = &broker.inner.metrics;
    let (messages, batch) = match serde_json::from_slice::<Value>(body) {
        Ok(Value::Array(items)) => (items, true),
        Ok(single) => (vec![single], false),
        Err(_) => return StatusCode::BAD_REQUEST.into_response(),
    };
    let timeout = std::time::Duration::from_millis(server.config.timeout_ms);
    let init = messages
        .iter()
        .find(|m| m["method"] == "initialize")
        .map(|m| m.get("params").cloned().unwrap_or(json!({})));
    let session_id = session.id().as_str().to_owned();
    let context = session.context();
    let open = async || match server.config.kind {
        McpKind::Stdio => broker.inner.stdio.get().ok_or(OpenError::NoStdio)?.open(
            &server.config,
            &session_id,
            &context,
        ),
        McpKind::Sse | McpKind::Http => sse::open(server, &session_id).await,
    };
    broker.reap_in_background();
    let link = match broker
        .inner
        .links
        .get_or_open((&session_id, &server.name), open, init, timeout)
        .await
    {
        Ok(link) => link,
        Err(e) => {
            metrics.request(&server.name, e.outcome());
            tracing::warn!(session_id = %session_id, server = %server.name, outcome = e.outcome(), error = %e, "mcp server not reached");
            let status = match e {
                OpenError::Timeout => StatusCode::GATEWAY_TIMEOUT,
                _ => StatusCode::BAD_GATEWAY,
            };
            let code = match e {
                OpenError::Redirect => "REDIRECT_REFUSED",
                OpenError::NotPublic => "SERVER_NOT_PUBLIC",
                _ => "SERVER_UNREACHABLE",
            };
            return refuse(status, code, &e.to_string());
        }
    };
    let client = link.client();
    let mut requests = Vec::new();
    for message in messages {
        let Some(method) = message["method"].as_str() else {
            continue; // an answer to a request of the server's, which was never passed on
        };
        let params = message.get("params").cloned().unwrap_or(Value::Null);
        match message.get("id") {
            Some(id) => {
                let (id, method) = (id.clone(), method.to_owned());
                requests.push(async move { (id, client.request(&method, params, timeout).await) });
            }
            None => {
                let _ = client.notify(method, params).await;
            }
        }
    }
    if requests.is_empty() {
        metrics.request(&server.name, "ok");
        return StatusCode::ACCEPTED.into_response();
    }
    let answered = futures_util::future::join_all(requests).await;
    let mut outcome = "ok";
    let mut answers = Vec::with_capacity(answered.len());
    for (id, result) in answered {
        let mut answer = match result {
            Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
            Err(RpcError::Remote {
                code,
                message,
                data,
            }) => {
                let mut error = json!({"code": code, "message": message});
                if let Some(data) = data {
                    error["data"] = data;
                }
                json!({"jsonrpc": "2.0", "id": id, "error": error})
            }
            Err(e) => {
                let (label, text) = match e {
                    RpcError::Timeout { .. } => {
                        ("timeout", "the MCP server did not answer in time")
                    }
                    _ => {
                        link.mark_closed();
                        ("unreachable", "the MCP server stopped before answering")
                    }
                };
                outcome = label;
                json!({"jsonrpc": "2.0", "id": id, "error": {"code": INTERNAL_ERROR, "message": text}})
            }
        };
        let (_, call) = exchange.filter(&mut answer, &server.allowed);
        audit.calls(call.as_slice());
        answers.push(answer);
    }
    let answer = match batch {
        true => Value::Array(answers),
        false => answers.into_iter().next().unwrap_or_default(),
    };
    if answer.to_string().len() > server.config.max_response_kb as usize * 1024 {
        metrics.request(&server.name, "too_large_answer");
        return refuse(
            StatusCode::BAD_GATEWAY,
            "ANSWER_TOO_LARGE",
            "the MCP server's answer is larger than the broker passes",
        );
    }
    metrics.request(&server.name, outcome);
    (StatusCode::OK, Json(answer)).into_response()
}
