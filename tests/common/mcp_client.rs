//! Requests to the MCP broker's router as an agent makes them (with its session's caller
//! token), and JSON-RPC bodies, for the broker's tests.
#![allow(dead_code)]

use air_friends::mcp::Broker;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tower::ServiceExt;

/// `method` `/mcp/{session_id}/{server}` with `body` and `token` (none when empty): the status,
/// the body as JSON (`null` when it is not) and as text (an event stream's).
pub async fn send(
    broker: &Broker,
    (session_id, server): (&str, &str),
    token: &str,
    method: &str,
    body: Value,
) -> (StatusCode, Value, String) {
    let mut request = Request::builder()
        .method(method)
        .uri(format!("/mcp/{session_id}/{server}"));
    if !token.is_empty() {
        request = request.header("authorization", format!("Bearer {token}"));
    }
    let request = request
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(Body::from(body.to_string()))
        .unwrap();
    let response = broker.router().oneshot(request).await.unwrap();
    let status = response.status();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        String::from_utf8_lossy(&bytes).into_owned(),
    )
}

/// A JSON-RPC request.
pub fn rpc(id: u64, method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

/// A `tools/call` of `tool` with `arguments`.
pub fn call(id: u64, tool: &str, arguments: Value) -> Value {
    rpc(
        id,
        "tools/call",
        json!({"name": tool, "arguments": arguments}),
    )
}

/// The tool names of a `tools/list` answer.
pub fn tool_names(listed: &Value) -> Vec<String> {
    listed["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("no tool list in {listed}"))
        .iter()
        .filter_map(|t| t["name"].as_str().map(str::to_owned))
        .collect()
}
