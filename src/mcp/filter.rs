//! What passes between the agent and an MCP server, message by message (JSON-RPC 2.0, single
//! or batched): the rule of the broker, in one place.
//!
//! * **Up** ([`inspect`]): `initialize`, `ping`, `tools/list`, `tools/call` of a tool on the
//!   server's allow-list, the client's notifications and its answers to the server's own
//!   requests pass. Everything else — a tool not on the list, `resources/*`, `prompts/*`,
//!   `completion/*`, `logging/*`, any other method — is answered by the broker with a JSON-RPC
//!   error and never reaches the server (a batch holding one is refused whole).
//! * **Down** ([`Exchange::filter`]): any answer carrying a tool list keeps only the allowed
//!   tools — whatever request or stream it comes on (a resumed event stream can replay a
//!   `tools/list` answer the broker never saw asked); the answer to a `tools/call` ends that
//!   call's audit ([`Answered`]). The rest passes as the server sent it: a tool's result is data
//!   for the agent, which the daemon never executes.

use std::collections::BTreeSet;

use serde_json::{Value, json};

/// JSON-RPC: the method does not exist (here: is not offered through the broker).
const METHOD_NOT_FOUND: i64 = -32601;
/// JSON-RPC: invalid params (here: a tool that is not allowed).
const INVALID_PARAMS: i64 = -32602;

/// Why a request body is not JSON-RPC.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the request is not a JSON-RPC message or batch")]
pub struct NotJsonRpc;

/// A `tools/call` the agent made, waiting for its answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    /// Its JSON-RPC id.
    pub id: Value,
    /// The tool.
    pub tool: String,
}

/// What one HTTP exchange carries up, to read its answer by.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Exchange {
    /// The `tools/call`s: their answers end their audit.
    pub calls: Vec<Call>,
}

/// How a `tools/call` ended, from its answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answered {
    /// The tool.
    pub tool: String,
    /// `ok`, `tool_error` (the tool said it failed) or `error` (a JSON-RPC error).
    pub outcome: &'static str,
}

/// The broker's verdict on a request body.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Forward it; its answer is read with this exchange.
    Forward(Exchange),
    /// Answer with `answer` (JSON-RPC errors; `None` when the refused messages were all
    /// notifications, which get no answer) and forward nothing. `refused`: what was refused,
    /// for the audit (the tool's name for a `tools/call`, else the method).
    Refuse {
        /// The JSON-RPC answer.
        answer: Option<Value>,
        /// The methods or tools refused.
        refused: Vec<String>,
    },
}

/// The verdict on `body` for a server whose allowed tools are `allowed`.
pub fn inspect(body: &[u8], allowed: &BTreeSet<String>) -> Result<Verdict, NotJsonRpc> {
    let parsed: Value = serde_json::from_slice(body).map_err(|_| NotJsonRpc)?;
    let (messages, batch) = match parsed {
        Value::Array(items) if !items.is_empty() => (items, true),
        Value::Object(_) => (vec![parsed], false),
        _ => return Err(NotJsonRpc),
    };
    let mut exchange = Exchange::default();
    let mut refused = Vec::new();
    for m in &messages {
        if !m.is_object() || m.get("jsonrpc") != Some(&json!("2.0")) {
            return Err(NotJsonRpc);
        }
        let Some(method) = m.get("method") else {
            // The client's answer to a request of the server's (roots, sampling).
            continue;
        };
        let method = method.as_str().ok_or(NotJsonRpc)?;
        let id = m.get("id").cloned();
        match method {
            "initialize" | "ping" | "tools/list" => {}
            "tools/call" => {
                let tool = m["params"]["name"].as_str().unwrap_or_default();
                if !allowed.contains(tool) {
                    refused.push(tool.to_owned());
                } else if let Some(id) = id {
                    exchange.calls.push(Call {
                        id,
                        tool: tool.to_owned(),
                    });
                }
            }
            m if m.starts_with("notifications/") => {}
            other => refused.push(other.to_owned()),
        }
    }
    if refused.is_empty() {
        return Ok(Verdict::Forward(exchange));
    }
    let errors: Vec<Value> = messages
        .iter()
        .filter_map(|m| {
            let id = m.get("id")?.clone();
            m.get("method")?;
            Some(refusal(id, m, allowed, batch))
        })
        .collect();
    let answer = match (batch, errors.len()) {
        (_, 0) => None,
        (false, _) => errors.into_iter().next(),
        (true, _) => Some(Value::Array(errors)),
    };
    Ok(Verdict::Refuse { answer, refused })
}

/// The error answering request `m` of a refused body.
fn refusal(id: Value, m: &Value, allowed: &BTreeSet<String>, batch: bool) -> Value {
    let method = m["method"].as_str().unwrap_or_default();
    let (code, message) = match method {
        "tools/call" => {
            let tool = m["params"]["name"].as_str().unwrap_or_default();
            if allowed.contains(tool) {
                (
                    INVALID_PARAMS,
                    "not run: another request of the same batch was refused".to_owned(),
                )
            } else {
                (
                    INVALID_PARAMS,
                    format!("the tool {tool:?} is not available through this server"),
                )
            }
        }
        "initialize" | "ping" | "tools/list" if batch => (
            INVALID_PARAMS,
            "not run: another request of the same batch was refused".to_owned(),
        ),
        other => (
            METHOD_NOT_FOUND,
            format!("{other:?} is not offered through this server; only its tools are"),
        ),
    };
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}

impl Exchange {
    /// Filters one message of the answer in place: a result carrying a tool list keeps the
    /// `allowed` tools. Returns whether it changed, and the call it answers, if any.
    pub fn filter(
        &self,
        message: &mut Value,
        allowed: &BTreeSet<String>,
    ) -> (bool, Option<Answered>) {
        let Some(id) = message
            .get("id")
            .filter(|_| message.get("method").is_none())
        else {
            return (false, None);
        };
        if let Some(call) = self.calls.iter().find(|c| &c.id == id) {
            let outcome = if message.get("error").is_some() {
                "error"
            } else if message["result"]["isError"] == json!(true) {
                "tool_error"
            } else {
                "ok"
            };
            let answered = Answered {
                tool: call.tool.clone(),
                outcome,
            };
            return (false, Some(answered));
        }
        let Some(tools) = message
            .get_mut("result")
            .and_then(|r| r.get_mut("tools"))
            .and_then(Value::as_array_mut)
        else {
            return (false, None);
        };
        let before = tools.len();
        tools.retain(|t| t["name"].as_str().is_some_and(|n| allowed.contains(n)));
        (tools.len() != before, None)
    }

    /// Filters a JSON answer (one message or a batch): the new body when it changed, and the
    /// calls it answers.
    pub fn filter_body(
        &self,
        body: &[u8],
        allowed: &BTreeSet<String>,
    ) -> (Option<Vec<u8>>, Vec<Answered>) {
        let Ok(mut parsed) = serde_json::from_slice::<Value>(body) else {
            return (None, Vec::new());
        };
        let mut changed = false;
        let mut answered = Vec::new();
        let messages: Vec<&mut Value> = match &mut parsed {
            Value::Array(items) => items.iter_mut().collect(),
            other => vec![other],
        };
        for m in messages {
            let (c, a) = self.filter(m, allowed);
            changed |= c;
            answered.extend(a);
        }
        let body = changed.then(|| serde_json::to_vec(&parsed).unwrap_or_default());
        (body, answered)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allowed() -> BTreeSet<String> {
        ["search".to_owned()].into()
    }

    fn req(id: u64, method: &str, params: Value) -> Value {
        json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
    }

    fn verdict(body: &Value) -> Verdict {
        inspect(&serde_json::to_vec(body).unwrap(), &allowed()).unwrap()
    }

    #[test]
    fn the_handshake_listing_and_allowed_calls_pass() {
        for body in [
            req(1, "initialize", json!({"protocolVersion": "2025-06-18"})),
            json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
            req(2, "ping", json!({})),
            json!({"jsonrpc": "2.0", "id": 9, "result": {"roots": []}}),
        ] {
            assert!(matches!(verdict(&body), Verdict::Forward(_)), "{body}");
        }
        let Verdict::Forward(x) = verdict(&json!([
            req(3, "tools/list", json!({})),
            req(
                4,
                "tools/call",
                json!({"name": "search", "arguments": {"q": "x"}})
            )
        ])) else {
            panic!()
        };
        assert_eq!(
            x.calls,
            [Call {
                id: json!(4),
                tool: "search".into()
            }]
        );
    }

    #[test]
    fn other_tools_and_methods_are_answered_by_the_broker() {
        let Verdict::Refuse { answer, refused } = verdict(&req(
            5,
            "tools/call",
            json!({"name": "delete_everything", "arguments": {}}),
        )) else {
            panic!()
        };
        assert_eq!(refused, ["delete_everything"]);
        let answer = answer.unwrap();
        assert_eq!(answer["id"], 5);
        assert_eq!(answer["error"]["code"], INVALID_PARAMS);
        for method in [
            "resources/read",
            "prompts/get",
            "completion/complete",
            "x/y",
        ] {
            let Verdict::Refuse { answer, refused } = verdict(&req(6, method, json!({}))) else {
                panic!("{method}")
            };
            assert_eq!(refused, [method]);
            assert_eq!(answer.unwrap()["error"]["code"], METHOD_NOT_FOUND);
        }
        // One refused request refuses its whole batch; a notification gets no answer.
        let Verdict::Refuse { answer, .. } = verdict(&json!([
            req(7, "tools/call", json!({"name": "search"})),
            req(8, "resources/list", json!({})),
            json!({"jsonrpc": "2.0", "method": "notifications/progress"}),
        ])) else {
            panic!()
        };
        let answer = answer.unwrap();
        assert_eq!(answer.as_array().unwrap().len(), 2);
        assert!(
            answer
                .as_array()
                .unwrap()
                .iter()
                .all(|a| a.get("error").is_some())
        );
    }

    #[test]
    fn bodies_that_are_not_json_rpc_are_refused() {
        for body in [
            &b"not json"[..],
            b"[]",
            b"42",
            br#"{"id": 1, "method": "ping"}"#,
            br#"[1]"#,
        ] {
            assert_eq!(inspect(body, &allowed()), Err(NotJsonRpc), "{body:?}");
        }
    }

    #[test]
    fn a_tool_list_keeps_the_allowed_tools_and_a_call_answer_ends_its_audit() {
        let Verdict::Forward(x) = verdict(&json!([
            req(1, "tools/list", json!({})),
            req(2, "tools/call", json!({"name": "search"}))
        ])) else {
            panic!()
        };
        let answer = json!([
            {"jsonrpc": "2.0", "id": 1, "result": {"tools": [
                {"name": "search", "inputSchema": {}}, {"name": "delete_everything"}]}},
            {"jsonrpc": "2.0", "id": 2, "result": {"content": [], "isError": true}}
        ]);
        let (body, answered) = x.filter_body(&serde_json::to_vec(&answer).unwrap(), &allowed());
        let body: Value = serde_json::from_slice(&body.expect("changed")).unwrap();
        assert_eq!(
            body[0]["result"]["tools"],
            json!([{"name": "search", "inputSchema": {}}])
        );
        assert_eq!(
            answered,
            [Answered {
                tool: "search".into(),
                outcome: "tool_error"
            }]
        );
        // A tool list answering a request the broker never saw (a replayed stream) is filtered
        // too; a server request reusing an id is left alone.
        let mut replayed = json!({"jsonrpc": "2.0", "id": 77, "result": {"tools": [
            {"name": "delete_everything"}, {"name": "search"}]}});
        assert_eq!(x.filter(&mut replayed, &allowed()), (true, None));
        assert_eq!(replayed["result"]["tools"], json!([{"name": "search"}]));
        let mut other = json!({"jsonrpc": "2.0", "id": 1, "method": "sampling/createMessage"});
        assert_eq!(x.filter(&mut other, &allowed()), (false, None));
    }
}
