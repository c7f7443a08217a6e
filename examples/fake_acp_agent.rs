//! A scripted ACP agent for tests: speaks ACP v1 over stdio like `opencode acp` and really
//! runs shell commands, so the runner, the permission gate and the skill scripts are exercised
//! end to end without an LLM.
//!
//! The script is a JSON file named by `FAKE_ACP_SCRIPT` (or the first argument):
//!
//! ```json
//! {
//!   "log": "/tmp/x/agent-log.jsonl",          // optional: every received message + events
//!   "initialize": {"delayMs": 0, "protocolVersion": 1, "hang": false, "error": null,
//!                  "run": null,                 // "run": a shell command run first (as below)
//!                  "promptCapabilities": {"image": true},  // advertised as is (default {})
//!                  "mcpCapabilities": {"http": true}},    // advertised as is (default {})
//!   "sessionNew": {"configOptions": [], "hang": false},
//!   "resume": "resume",                      // advertise `sessionCapabilities.resume`
//!                                            // ("load": `loadSession`); sessions are kept as
//!                                            // lines of $XDG_DATA_HOME/opencode/opencode.db
//!   "resumeError": null,                     // a message: resume/load answer this error
//!   "ignoreStdinEof": false,                 // keep running after stdin closes (kill tests)
//!   "ignoreTerm": false,                     // ignore SIGTERM
//!   "turns": [                               // one per session/prompt; the last repeats
//!     {"steps": [ STEP, ... ], "stopReason": "end_turn"}
//!   ]
//! }
//! ```
//!
//! Steps: `{"update": {...}}` sends a `session/update`; `{"permission": "<command>"}` asks
//! permission for a bash command and runs it (with `sh -c`, in the cwd, with this process's
//! environment) only if allowed; `{"run": "<command>"}` runs without asking; `{"sleepMs": N}`;
//! `{"hang": true}` waits until `session/cancel`; `{"silentMs": N}` sleeps without reacting to
//! cancel; `{"crash": CODE}` exits; `{"raw": "text"}` writes a raw stdout line;
//! `{"fsRead": "path"}` / `{"fsWrite": {"path": .., "content": ..}}` call the client's fs
//! methods; `{"request": {"method": .., "params": ..}}` sends any request; `{"promptError":
//! "msg"}` answers the prompt with a JSON-RPC error; `{"bigLine": N}` writes one stdout line of
//! N bytes (in 64 KiB pieces, never held whole) that is not JSON-RPC. Results of
//! permission/run/fs/request steps are written to the log as `{"event": ..}` lines.
//!
//! With the argument `mcp-stdio` it is instead a fake MCP server on stdio (see [`mcp_stdio`]).
//!
//! Every log line carries `atUs`, the wall-clock time in microseconds since the Unix epoch when
//! it was written (so a test or benchmark can see e.g. when `session/prompt` arrived).

use std::collections::HashMap;
use std::io::Write;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::{mpsc, oneshot};

struct Agent {
    script: Value,
    log: Option<std::fs::File>,
    responses: HashMap<u64, oneshot::Sender<Value>>,
    next_id: u64,
    session: String,
    cwd: String,
    turn: usize,
}

/// Where sessions are kept across processes, one id a line: where OpenCode keeps its session
/// database (`$XDG_DATA_HOME/opencode/opencode.db`), the one file of its data folder the
/// daemon keeps between starts.
fn sessions_file() -> Option<std::path::PathBuf> {
    let data = std::env::var_os("XDG_DATA_HOME")?;
    Some(std::path::Path::new(&data).join("opencode/opencode.db"))
}

enum In {
    Msg(Value),
    Eof,
}

fn out(v: &Value) {
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "{v}");
    let _ = stdout.flush();
}

/// Writes one line of `n` bytes (plus the newline) that looks like the start of a JSON-RPC
/// message but is far too long, without ever holding it in memory.
fn write_big_line(n: usize) {
    const PIECE: usize = 64 * 1024;
    let head = br#"{"jsonrpc":"2.0","method":"session/update","params":{"junk":""#;
    let piece = vec![b'x'; PIECE];
    let mut stdout = std::io::stdout().lock();
    let mut left = n.saturating_sub(head.len());
    let _ = stdout.write_all(&head[..head.len().min(n)]);
    while left > 0 {
        let take = left.min(PIECE);
        if stdout.write_all(&piece[..take]).is_err() {
            return;
        }
        left -= take;
    }
    let _ = stdout.write_all(b"\n");
    let _ = stdout.flush();
}

impl Agent {
    fn log(&mut self, mut v: Value) {
        if let Some(f) = &mut self.log {
            let at_us = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_micros() as u64);
            v["atUs"] = json!(at_us);
            // One write per line: agents sharing a log (O_APPEND) never interleave.
            let _ = f.write_all(format!("{v}\n").as_bytes());
        }
    }

    fn respond(&self, id: &Value, result: Value) {
        out(&json!({"jsonrpc": "2.0", "id": id, "result": result}));
    }

    fn respond_error(&self, id: &Value, code: i64, message: &str) {
        out(&json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}}));
    }

    fn update(&self, update: Value) {
        out(&json!({"jsonrpc": "2.0", "method": "session/update",
            "params": {"sessionId": self.session, "update": update}}));
    }

    /// Sends a request to the client and waits for its answer, handling other input meanwhile.
    async fn ask(
        &mut self,
        rx: &mut mpsc::Receiver<In>,
        method: &str,
        params: Value,
    ) -> Option<Value> {
        let id = self.next_id;
        self.next_id += 1;
        let (tx, mut answer) = oneshot::channel();
        self.responses.insert(id, tx);
        out(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        loop {
            tokio::select! {
                a = &mut answer => return a.ok(),
                m = rx.recv() => match m {
                    Some(In::Msg(v)) => { self.route(v); }
                    _ => return None,
                }
            }
        }
    }

    /// Routes responses to waiters; returns the message when it is not a response.
    fn route(&mut self, v: Value) -> Option<Value> {
        if v.get("method").is_none() {
            if let Some(id) = v.get("id").and_then(Value::as_u64)
                && let Some(tx) = self.responses.remove(&id)
            {
                let _ = tx.send(v);
            }
            return None;
        }
        self.log(json!({"received": v}));
        Some(v)
    }

    async fn run_shell(&mut self, command: &str) -> Value {
        let result = tokio::process::Command::new("sh")
            .arg("-c")
            .arg(command)
            .current_dir(&self.cwd)
            .output()
            .await;
        match result {
            Ok(o) => json!({
                "exit": o.status.code(),
                "stdout": String::from_utf8_lossy(&o.stdout),
                "stderr": String::from_utf8_lossy(&o.stderr),
            }),
            Err(e) => json!({"error": e.to_string()}),
        }
    }

    /// Runs a prompt turn. Returns the stop reason, or Err(message) for a prompt error.
    async fn turn(&mut self, rx: &mut mpsc::Receiver<In>) -> Result<String, String> {
        let turns = self.script["turns"].as_array().cloned().unwrap_or_default();
        let turn = turns
            .get(self.turn.min(turns.len().saturating_sub(1)))
            .cloned()
            .unwrap_or(json!({"steps": [], "stopReason": "end_turn"}));
        self.turn += 1;
        let mut call = 0;
        for step in turn["steps"].as_array().cloned().unwrap_or_default() {
            call += 1;
            let call_id = format!("call_{}_{call}", self.turn);
            if let Some(u) = step.get("update") {
                self.update(u.clone());
            } else if let Some(cmd) = step.get("permission").and_then(Value::as_str) {
                self.update(
                    json!({"sessionUpdate": "tool_call", "toolCallId": call_id, "title": "bash",
                    "kind": "execute", "status": "pending", "rawInput": {"command": cmd}}),
                );
                let params = json!({"sessionId": self.session,
                    "toolCall": {"toolCallId": call_id, "title": cmd, "kind": "execute", "status": "pending",
                                 "rawInput": {"command": cmd}},
                    "options": [
                        {"optionId": "always", "kind": "allow_always", "name": "Always allow"},
                        {"optionId": "reject", "kind": "reject_once", "name": "Reject"},
                        {"optionId": "once", "kind": "allow_once", "name": "Allow once"}]});
                let answer = self.ask(rx, "session/request_permission", params).await;
                let outcome = answer
                    .as_ref()
                    .map(|a| a["result"]["outcome"].clone())
                    .unwrap_or(Value::Null);
                let allowed = outcome["outcome"] == "selected" && outcome["optionId"] == "once";
                if allowed {
                    let result = self.run_shell(cmd).await;
                    self.log(json!({"event": "permission", "command": cmd, "allowed": true, "result": result}));
                    self.update(
                        json!({"sessionUpdate": "tool_call_update", "toolCallId": call_id,
                        "status": "completed", "rawOutput": result}),
                    );
                } else {
                    self.log(json!({"event": "permission", "command": cmd, "allowed": false, "outcome": outcome}));
                    self.update(json!({"sessionUpdate": "tool_call_update", "toolCallId": call_id, "status": "failed"}));
                    if outcome["outcome"] == "cancelled" {
                        return Ok("cancelled".into());
                    }
                }
            } else if let Some(cmd) = step.get("run").and_then(Value::as_str) {
                let result = self.run_shell(cmd).await;
                self.log(json!({"event": "run", "command": cmd, "result": result}));
            } else if let Some(ms) = step.get("sleepMs").and_then(Value::as_u64) {
                if self
                    .wait_or_cancel(rx, Some(Duration::from_millis(ms)))
                    .await
                {
                    return Ok("cancelled".into());
                }
            } else if step.get("hang").is_some() {
                if self.wait_or_cancel(rx, None).await {
                    return Ok("cancelled".into());
                }
                return Ok("cancelled".into());
            } else if let Some(ms) = step.get("silentMs").and_then(Value::as_u64) {
                tokio::time::sleep(Duration::from_millis(ms)).await;
            } else if let Some(code) = step.get("crash").and_then(Value::as_i64) {
                self.log(json!({"event": "crash"}));
                std::process::exit(code as i32);
            } else if let Some(raw) = step.get("raw").and_then(Value::as_str) {
                let mut stdout = std::io::stdout().lock();
                let _ = writeln!(stdout, "{raw}");
                let _ = stdout.flush();
            } else if let Some(n) = step.get("bigLine").and_then(Value::as_u64) {
                write_big_line(n as usize);
                self.log(json!({"event": "bigLine", "bytes": n}));
            } else if let Some(path) = step.get("fsRead").and_then(Value::as_str) {
                let params = json!({"sessionId": self.session, "path": path});
                let answer = self.ask(rx, "fs/read_text_file", params).await;
                self.log(json!({"event": "fsRead", "path": path, "answer": answer}));
            } else if let Some(w) = step.get("fsWrite") {
                let params =
                    json!({"sessionId": self.session, "path": w["path"], "content": w["content"]});
                let answer = self.ask(rx, "fs/write_text_file", params).await;
                self.log(json!({"event": "fsWrite", "path": w["path"], "answer": answer}));
            } else if let Some(r) = step.get("request") {
                let method = r["method"].as_str().unwrap_or("x/unknown").to_owned();
                let answer = self.ask(rx, &method, r["params"].clone()).await;
                self.log(json!({"event": "request", "method": method, "answer": answer}));
            } else if let Some(msg) = step.get("promptError").and_then(Value::as_str) {
                return Err(msg.to_owned());
            }
        }
        Ok(turn["stopReason"].as_str().unwrap_or("end_turn").to_owned())
    }

    /// Waits `dur` (forever when None) while handling input; true if `session/cancel` arrived.
    async fn wait_or_cancel(&mut self, rx: &mut mpsc::Receiver<In>, dur: Option<Duration>) -> bool {
        let sleep = tokio::time::sleep(dur.unwrap_or(Duration::from_secs(86_400)));
        tokio::pin!(sleep);
        loop {
            tokio::select! {
                _ = &mut sleep => return false,
                m = rx.recv() => match m {
                    Some(In::Msg(v)) => {
                        if let Some(v) = self.route(v)
                            && v["method"] == "session/cancel"
                        {
                            return true;
                        }
                    }
                    _ => {
                        if self.script["ignoreStdinEof"].as_bool() == Some(true) {
                            std::future::pending::<()>().await;
                        }
                        std::process::exit(0);
                    }
                }
            }
        }
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    if std::env::args().nth(1).as_deref() == Some("mcp-stdio") {
        return mcp_stdio::serve();
    }
    let path = std::env::var("FAKE_ACP_SCRIPT")
        .ok()
        .or_else(|| std::env::args().nth(1))
        .expect("FAKE_ACP_SCRIPT or a script path argument");
    let script: Value = serde_json::from_str(&std::fs::read_to_string(&path).expect("read script"))
        .expect("script is JSON");
    if script["ignoreTerm"].as_bool() == Some(true) {
        // Replace the default SIGTERM action with a handler that does nothing.
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("signal handler");
        tokio::spawn(async move { while term.recv().await.is_some() {} });
    }
    let log = script["log"].as_str().map(|p| {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(p)
            .expect("open log")
    });
    let mut agent = Agent {
        script,
        log,
        responses: HashMap::new(),
        next_id: 0,
        session: String::new(),
        cwd: std::env::current_dir()
            .map(|p| p.display().to_string())
            .unwrap_or_default(),
        turn: 0,
    };
    // Field 5 of /proc/self/stat (after the parenthesised command name) is the process group.
    let pgid = std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|s| {
            let rest = &s[s.rfind(')')? + 1..];
            rest.split_whitespace().nth(2)?.parse::<i64>().ok()
        });
    agent.log(
        json!({"event": "started", "pid": std::process::id(), "pgid": pgid,
        "env": std::env::vars().collect::<HashMap<_, _>>()}),
    );

    let (tx, mut rx) = mpsc::channel::<In>(64);
    tokio::spawn(async move {
        let mut lines = BufReader::new(tokio::io::stdin()).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            if let Ok(v) = serde_json::from_str::<Value>(&line)
                && tx.send(In::Msg(v)).await.is_err()
            {
                return;
            }
        }
        let _ = tx.send(In::Eof).await;
    });

    loop {
        let msg = match rx.recv().await {
            Some(In::Msg(v)) => v,
            _ => {
                agent.log(json!({"event": "stdin_eof"}));
                if agent.script["ignoreStdinEof"].as_bool() == Some(true) {
                    std::future::pending::<()>().await;
                }
                return;
            }
        };
        let Some(msg) = agent.route(msg) else {
            continue;
        };
        let id = msg["id"].clone();
        match msg["method"].as_str().unwrap_or("") {
            "initialize" => {
                let init = agent.script["initialize"].clone();
                if let Some(cmd) = init["run"].as_str() {
                    let result = agent.run_shell(cmd).await;
                    agent.log(json!({"event": "run", "command": cmd, "result": result}));
                }
                if let Some(ms) = init["delayMs"].as_u64() {
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                }
                if init["hang"].as_bool() == Some(true) {
                    continue;
                }
                if let Some(e) = init["error"].as_str() {
                    agent.respond_error(&id, -32603, e);
                    continue;
                }
                let version = init["protocolVersion"].as_u64().unwrap_or(1);
                agent.respond(
                    &id,
                    json!({"protocolVersion": version,
                    "agentCapabilities": {
                        "loadSession": agent.script["resume"] == "load",
                        "sessionCapabilities": if agent.script["resume"] == "resume" { json!({"resume": {}}) } else { json!({}) },
                        "promptCapabilities": init.get("promptCapabilities").cloned().unwrap_or(json!({})),
                        "mcpCapabilities": init.get("mcpCapabilities").cloned().unwrap_or(json!({}))}, "authMethods": [],
                    "agentInfo": {"name": "fake-acp-agent", "version": "0.0.0"}}),
                );
            }
            "session/new" => {
                let new = agent.script["sessionNew"].clone();
                if new["hang"].as_bool() == Some(true) {
                    continue;
                }
                if let Some(cwd) = msg["params"]["cwd"].as_str() {
                    agent.cwd = cwd.to_owned();
                }
                agent.session = format!("ses_fake_{}", std::process::id());
                if let Some(file) = sessions_file().filter(|_| agent.script["resume"].is_string()) {
                    use std::io::Write as _;
                    let _ =
                        std::fs::create_dir_all(file.parent().unwrap_or(&file)).and_then(|()| {
                            std::fs::OpenOptions::new()
                                .create(true)
                                .append(true)
                                .open(&file)
                                .and_then(|mut f| writeln!(f, "{}", agent.session))
                        });
                }
                let mut result = json!({"sessionId": agent.session});
                if let Some(opts) = new.get("configOptions") {
                    result["configOptions"] = opts.clone();
                }
                agent.respond(&id, result);
            }
            "session/resume" | "session/load" => {
                let wanted = msg["params"]["sessionId"].as_str().unwrap_or_default();
                let kept = !wanted.is_empty()
                    && sessions_file()
                        .and_then(|file| std::fs::read_to_string(file).ok())
                        .is_some_and(|ids| ids.lines().any(|id| id == wanted));
                if let Some(e) = agent.script["resumeError"].as_str() {
                    agent.respond_error(&id, -32603, e);
                } else if !kept {
                    agent.respond_error(&id, -32002, &format!("Resource not found: {wanted}"));
                } else {
                    if let Some(cwd) = msg["params"]["cwd"].as_str() {
                        agent.cwd = cwd.to_owned();
                    }
                    agent.session = wanted.to_owned();
                    agent.log(json!({"event": "resumed", "sessionId": wanted}));
                    agent.respond(
                        &id,
                        if msg["method"] == "session/load" {
                            Value::Null
                        } else {
                            json!({})
                        },
                    );
                }
            }
            "session/set_config_option" => agent.respond(&id, json!({})),
            "session/prompt" => {
                agent.update(
                    json!({"sessionUpdate": "available_commands_update", "availableCommands": []}),
                );
                match agent.turn(&mut rx).await {
                    Ok(stop) => agent.respond(
                        &id,
                        json!({"stopReason": stop, "usage": {"totalTokens": 1}, "_meta": {}}),
                    ),
                    Err(msg) => agent.respond_error(&id, -32603, &msg),
                }
            }
            "session/cancel" => {}
            _ if id.is_null() => {}
            other => agent.respond_error(&id, -32601, &format!("Method not found: {other}")),
        }
    }
}

/// `fake_acp_agent mcp-stdio`: a fake MCP server speaking JSON-RPC on stdin/stdout, one message
/// per line. Tools: `search` (echoes `q`), `delete_everything`, `env` (its environment as
/// `NAME=value` lines, and `PID=` its process id), `probe` (connects to `addr`: "connected" or the error), `read` (a
/// file's first bytes, or the error), `seen` (the tools called so far and how many times it
/// was initialized), `ask` (asks the client `roots/list` and returns the answer), `garbage`
/// (writes a line that is not JSON first) and `crash` (exits 3).
mod mcp_stdio {
    use std::io::{BufRead, Write};

    use serde_json::{Value, json};

    const TOOLS: [&str; 9] = [
        "search",
        "delete_everything",
        "env",
        "probe",
        "read",
        "seen",
        "ask",
        "garbage",
        "crash",
    ];

    pub fn serve() {
        let stdin = std::io::stdin();
        let mut lines = stdin.lock().lines();
        let mut out = std::io::stdout();
        let mut seen: Vec<String> = Vec::new();
        let mut initialized = 0;
        while let Some(Ok(line)) = lines.next() {
            let Ok(message) = serde_json::from_str::<Value>(&line) else {
                continue;
            };
            let (Some(id), Some(method)) = (message.get("id"), message["method"].as_str()) else {
                continue;
            };
            let result = match method {
                "initialize" => {
                    initialized += 1;
                    json!({"protocolVersion": "2025-06-18", "capabilities": {"tools": {}},
                           "serverInfo": {"name": "fake-mcp-stdio", "version": "1.0.0"}})
                }
                "tools/list" => json!({"tools": TOOLS.iter().map(|t| json!({"name": t,
                    "description": format!("the {t} tool"),
                    "inputSchema": {"type": "object"}})).collect::<Vec<_>>()}),
                "tools/call" => {
                    let tool = message["params"]["name"].as_str().unwrap_or_default();
                    let args = &message["params"]["arguments"];
                    seen.push(tool.to_owned());
                    let text = match tool {
                        "search" => format!("found: {}", args["q"].as_str().unwrap_or_default()),
                        "delete_everything" => "deleted everything".to_owned(),
                        "env" => std::env::vars()
                            .map(|(k, v)| format!("{k}={v}"))
                            .chain([format!("PID={}", std::process::id())])
                            .collect::<Vec<_>>()
                            .join("\n"),
                        "probe" => match std::net::TcpStream::connect_timeout(
                            &args["addr"].as_str().unwrap_or_default().parse().unwrap(),
                            std::time::Duration::from_secs(2),
                        ) {
                            Ok(_) => "connected".to_owned(),
                            Err(e) => format!("not connected: {e}"),
                        },
                        "read" => match std::fs::read(args["path"].as_str().unwrap_or_default()) {
                            Ok(bytes) => {
                                String::from_utf8_lossy(&bytes[..bytes.len().min(64)]).into_owned()
                            }
                            Err(e) => format!("not read: {e}"),
                        },
                        "seen" => json!({"calls": seen, "initialized": initialized}).to_string(),
                        "ask" => {
                            let ask = json!({"jsonrpc": "2.0", "id": "s1", "method": "roots/list"});
                            writeln!(out, "{ask}").unwrap();
                            out.flush().unwrap();
                            let mut answer = Value::Null;
                            while let Some(Ok(line)) = lines.next() {
                                if let Ok(m) = serde_json::from_str::<Value>(&line)
                                    && m["id"] == "s1"
                                {
                                    answer = m;
                                    break;
                                }
                            }
                            answer.to_string()
                        }
                        "garbage" => {
                            writeln!(out, "this is not JSON").unwrap();
                            "after garbage".to_owned()
                        }
                        "crash" => std::process::exit(3),
                        other => format!("no tool {other}"),
                    };
                    json!({"content": [{"type": "text", "text": text}], "isError": false})
                }
                _ => {
                    let error = json!({"jsonrpc": "2.0", "id": id,
                        "error": {"code": -32601, "message": "method not found"}});
                    writeln!(out, "{error}").unwrap();
                    out.flush().unwrap();
                    continue;
                }
            };
            writeln!(
                out,
                "{}",
                json!({"jsonrpc": "2.0", "id": id, "result": result})
            )
            .unwrap();
            out.flush().unwrap();
        }
    }
}
