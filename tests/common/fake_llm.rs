//! A fake OpenAI-compatible LLM server (`POST /v1/chat/completions`, streamed as SSE) that
//! follows a script, for driving the real OpenCode offline. Step N of the script is chosen by
//! the number of `role: "tool"` messages after the last user message; requests without tools
//! are OpenCode's title generator and get a short title. [`FakeLlm::start_answering`] makes
//! every request fail with one HTTP status instead (a provider rejecting the key).
#![allow(dead_code)]

use std::path::Path;
use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};

/// Builds a tool call from the request (e.g. to use the session id the prompt announces).
pub type DynamicTool = Arc<dyn Fn(&Value) -> (&'static str, Value) + Send + Sync>;

/// One scripted model answer.
#[derive(Clone)]
pub enum Step {
    /// Call a tool with these JSON arguments.
    Tool(&'static str, Value),
    /// Call a tool whose arguments depend on the request.
    Dynamic(DynamicTool),
    /// Answer with text and stop.
    Text(String),
}

/// The value after `marker` in the newest message of the request that has it (up to
/// whitespace or a backtick), e.g. the session id after `Session id: ` (a resumed session is
/// told its new one after the old).
pub fn find_in_request(req: &Value, marker: &str) -> Option<String> {
    req["messages"].as_array()?.iter().rev().find_map(|m| {
        let text = match &m["content"] {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        let at = text.find(marker)? + marker.len();
        Some(
            text[at..]
                .chars()
                .take_while(|c| !c.is_whitespace() && *c != '`' && *c != '"' && *c != '\\')
                .collect(),
        )
    })
}

#[derive(Clone)]
struct LlmState {
    steps: Arc<Vec<Step>>,
    requests: Arc<Mutex<Vec<Value>>>,
    headers: Arc<Mutex<Vec<HeaderMap>>>,
    /// Answer every request with this status and an OpenAI-style error body.
    fail_with: Option<StatusCode>,
}

/// A running fake LLM.
pub struct FakeLlm {
    /// `http://127.0.0.1:PORT/v1`
    pub base_url: String,
    requests: Arc<Mutex<Vec<Value>>>,
    headers: Arc<Mutex<Vec<HeaderMap>>>,
    _task: tokio::task::JoinHandle<()>,
}

impl FakeLlm {
    /// Starts the server on 127.0.0.1:0.
    pub async fn start(steps: Vec<Step>) -> FakeLlm {
        Self::serve(steps, None).await
    }

    /// Starts a server that answers every request with `status` (e.g. 401: the key is
    /// rejected), as OpenAI does.
    pub async fn start_answering(status: u16) -> FakeLlm {
        let status = StatusCode::from_u16(status).expect("an HTTP status");
        Self::serve(Vec::new(), Some(status)).await
    }

    async fn serve(steps: Vec<Step>, fail_with: Option<StatusCode>) -> FakeLlm {
        let requests = Arc::new(Mutex::new(Vec::new()));
        let headers = Arc::new(Mutex::new(Vec::new()));
        let state = LlmState {
            steps: Arc::new(steps),
            requests: requests.clone(),
            headers: headers.clone(),
            fail_with,
        };
        let app = axum::Router::new()
            .route("/v1/chat/completions", post(complete))
            .with_state(state);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        FakeLlm {
            base_url: format!("http://{addr}/v1"),
            requests,
            headers,
            _task: task,
        }
    }

    /// Every request received (tool-using ones only).
    pub fn requests(&self) -> Vec<Value> {
        self.requests.lock().unwrap().clone()
    }

    /// The headers of every request received (title requests included), in arrival order:
    /// which key the server was given.
    pub fn request_headers(&self) -> Vec<HeaderMap> {
        self.headers.lock().unwrap().clone()
    }
}

fn chunk(delta: Value, finish: Option<&str>) -> String {
    let v = json!({"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 0,
        "model": "fake-model", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
    format!("data: {v}\n\n")
}

async fn complete(
    State(state): State<LlmState>,
    headers: HeaderMap,
    body: axum::Json<Value>,
) -> Response {
    state.headers.lock().unwrap().push(headers);
    if let Some(status) = state.fail_with {
        let body = json!({"error": {"message": "Incorrect API key provided",
            "type": "invalid_request_error", "code": "invalid_api_key"}});
        return (status, axum::Json(body)).into_response();
    }
    let req = body.0;
    let mut out = chunk(json!({"role": "assistant", "content": ""}), None);
    let has_tools = req
        .get("tools")
        .and_then(Value::as_array)
        .is_some_and(|t| !t.is_empty());
    if !has_tools {
        out.push_str(&chunk(json!({"content": "Chat"}), None));
        out.push_str(&chunk(json!({}), Some("stop")));
    } else {
        let messages = req["messages"].as_array().cloned().unwrap_or_default();
        let last_user = messages
            .iter()
            .rposition(|m| m["role"] == "user")
            .unwrap_or(0);
        let step_no = messages[last_user..]
            .iter()
            .filter(|m| m["role"] == "tool")
            .count();
        state.requests.lock().unwrap().push(req.clone());
        let step = state
            .steps
            .get(step_no)
            .cloned()
            .unwrap_or(Step::Text("done".into()));
        let step = match step {
            Step::Dynamic(f) => {
                let (name, args) = f(&req);
                Step::Tool(name, args)
            }
            other => other,
        };
        match step {
            Step::Dynamic(_) => unreachable!("resolved above"),
            Step::Tool(name, args) => {
                out.push_str(&chunk(
                    json!({"tool_calls": [{"index": 0, "id": format!("call_{step_no}"), "type": "function",
                        "function": {"name": name, "arguments": ""}}]}),
                    None,
                ));
                out.push_str(&chunk(
                    json!({"tool_calls": [{"index": 0, "function": {"arguments": args.to_string()}}]}),
                    None,
                ));
                out.push_str(&chunk(json!({}), Some("tool_calls")));
            }
            Step::Text(text) => {
                out.push_str(&chunk(json!({"content": text}), None));
                out.push_str(&chunk(json!({}), Some("stop")));
            }
        }
    }
    let usage = json!({"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 0, "model": "fake-model",
        "choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}});
    out.push_str(&format!("data: {usage}\n\ndata: [DONE]\n\n"));
    ([(header::CONTENT_TYPE, "text/event-stream")], out).into_response()
}

/// The model's answer to a message: write `reply` into the session's staging folder under
/// `workspace` (the session id read from the prompt), run the real `send-reply` skill of
/// `skills` on it, end the turn.
pub fn reply_steps(workspace: &Path, skills: &Path, reply: &'static str) -> Vec<Step> {
    let ws = workspace.to_path_buf();
    let send_reply = skills.join("send-reply/scripts/send-reply");
    vec![
        Step::Dynamic(Arc::new(move |req| {
            let session =
                find_in_request(req, "Session id: ").expect("the prompt names the session");
            (
                "write",
                json!({"filePath": ws.join("tmp").join(&session).join("reply.md"), "content": reply}),
            )
        })),
        Step::Tool(
            "bash",
            json!({"command": format!("{} --message-file $TMPDIR/$SESSION_ID/reply.md", send_reply.display()),
                   "description": "Send the reply"}),
        ),
        Step::Text("Replied.".into()),
    ]
}
