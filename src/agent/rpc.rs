//! JSON-RPC 2.0 over newline-delimited stdio, the ACP transport.
//!
//! A writer task owns the agent's stdin (one JSON message per line); a reader task parses each
//! stdout line into a generic `serde_json::Value` first (so unknown update kinds, stop reasons
//! and extra fields never fail a parse), routes responses to the waiting request by id, and
//! forwards notifications and agent→client requests on a channel. The agent's own request ids
//! live in a separate id space from ours: they are only ever echoed back. Lines longer than
//! [`MAX_LINE_BYTES`] are discarded with a warning so a runaway agent cannot exhaust memory;
//! malformed lines are logged and skipped.

use crate::sync::lock;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};
use tokio_util::task::TaskTracker;

/// Longest line accepted from the agent.
pub const MAX_LINE_BYTES: usize = 8 * 1024 * 1024;

/// JSON-RPC "method not found".
pub const METHOD_NOT_FOUND: i64 = -32601;
/// JSON-RPC "invalid params".
pub const INVALID_PARAMS: i64 = -32602;
/// JSON-RPC "internal error".
pub const INTERNAL_ERROR: i64 = -32603;

/// Why a request did not produce a result.
#[derive(Debug, Clone, thiserror::Error, PartialEq)]
pub enum RpcError {
    /// The agent answered with a JSON-RPC error.
    #[error("agent returned error {code}: {message}")]
    Remote {
        /// JSON-RPC error code.
        code: i64,
        /// The agent's message.
        message: String,
        /// Extra data, if any.
        data: Option<Value>,
    },
    /// No answer within the timeout.
    #[error("{method} timed out after {timeout:?}")]
    Timeout {
        /// The method that timed out.
        method: String,
        /// The timeout.
        timeout: Duration,
    },
    /// The connection closed (the agent exited or closed stdout).
    #[error("connection to the agent closed")]
    Closed,
}

/// A message the agent sent that is not a response to us.
#[derive(Debug, Clone, PartialEq)]
pub enum Incoming {
    /// A notification (no id), e.g. `session/update`.
    Notification {
        /// Method name.
        method: String,
        /// Parameters (`Value::Null` when absent).
        params: Value,
    },
    /// A request we must answer, e.g. `session/request_permission`.
    Request {
        /// The agent's id, echoed back verbatim.
        id: Value,
        /// Method name.
        method: String,
        /// Parameters (`Value::Null` when absent).
        params: Value,
    },
}

type Pending = Arc<Mutex<HashMap<u64, oneshot::Sender<Result<Value, RpcError>>>>>;

/// The client side of a JSON-RPC connection.
#[derive(Clone)]
pub struct RpcClient {
    out: mpsc::Sender<String>,
    pending: Pending,
    next_id: Arc<AtomicU64>,
}

impl std::fmt::Debug for RpcClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RpcClient").finish_non_exhaustive()
    }
}

/// Starts the reader and writer tasks on `tracker`. Returns the client handle and the stream of
/// incoming notifications/requests, which ends when the agent closes its stdout.
pub fn connect<R, W>(
    reader: R,
    writer: W,
    tracker: &TaskTracker,
    label: String,
) -> (RpcClient, mpsc::Receiver<Incoming>)
where
    R: AsyncBufRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (out_tx, out_rx) = mpsc::channel::<String>(64);
    let (in_tx, in_rx) = mpsc::channel::<Incoming>(256);
    let pending: Pending = Arc::new(Mutex::new(HashMap::new()));
    tracker.spawn(write_loop(writer, out_rx, label.clone()));
    tracker.spawn(read_loop(reader, in_tx, pending.clone(), label));
    (
        RpcClient {
            out: out_tx,
            pending,
            next_id: Arc::new(AtomicU64::new(0)),
        },
        in_rx,
    )
}

impl RpcClient {
    /// Sends a request and waits for its result (or error) up to `timeout`.
    pub async fn request(
        &self,
        method: &str,
        params: Value,
        timeout: Duration,
    ) -> Result<Value, RpcError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        lock(&self.pending).insert(id, tx);
        let line = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        if self.out.send(line.to_string()).await.is_err() {
            lock(&self.pending).remove(&id);
            return Err(RpcError::Closed);
        }
        match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(RpcError::Closed),
            Err(_) => {
                lock(&self.pending).remove(&id);
                Err(RpcError::Timeout {
                    method: method.to_owned(),
                    timeout,
                })
            }
        }
    }

    /// Sends a notification (no answer expected).
    pub async fn notify(&self, method: &str, params: Value) -> Result<(), RpcError> {
        let line = json!({"jsonrpc": "2.0", "method": method, "params": params});
        self.out
            .send(line.to_string())
            .await
            .map_err(|_| RpcError::Closed)
    }

    /// Answers an agent→client request with a result.
    pub async fn respond(&self, id: Value, result: Value) -> Result<(), RpcError> {
        let line = json!({"jsonrpc": "2.0", "id": id, "result": result});
        self.out
            .send(line.to_string())
            .await
            .map_err(|_| RpcError::Closed)
    }

    /// Answers an agent→client request with an error.
    pub async fn respond_error(&self, id: Value, code: i64, message: &str) -> Result<(), RpcError> {
        let line = json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}});
        self.out
            .send(line.to_string())
            .await
            .map_err(|_| RpcError::Closed)
    }

    /// Closes our side: the writer task ends and drops the agent's stdin (EOF) once every
    /// clone of this client is gone. Outstanding requests fail with `Closed` when the reader
    /// ends.
    pub fn close(self) {
        drop(self);
    }
}

async fn write_loop<W: AsyncWrite + Unpin>(
    mut writer: W,
    mut rx: mpsc::Receiver<String>,
    label: String,
) {
    while let Some(mut line) = rx.recv().await {
        line.push('\n');
        if let Err(e) = writer.write_all(line.as_bytes()).await {
            tracing::debug!(agent = %label, error = %e, "agent stdin closed");
            break;
        }
        if let Err(e) = writer.flush().await {
            tracing::debug!(agent = %label, error = %e, "agent stdin closed");
            break;
        }
    }
    // Dropping the writer closes the agent's stdin.
}

async fn read_loop<R: AsyncBufRead + Unpin>(
    mut reader: R,
    incoming: mpsc::Sender<Incoming>,
    pending: Pending,
    label: String,
) {
    let mut buf = Vec::new();
    loop {
        match read_bounded_line(&mut reader, &mut buf, MAX_LINE_BYTES).await {
            Ok(LineRead::Eof) => break,
            Ok(LineRead::TooLong(len)) => {
                tracing::warn!(agent = %label, bytes = len, "agent line over the size cap; skipped");
            }
            Ok(LineRead::Line) => {
                if let Some(msg) = classify(&buf, &label) {
                    dispatch(msg, &incoming, &pending).await;
                }
            }
            Err(e) => {
                tracing::debug!(agent = %label, error = %e, "agent stdout read failed");
                break;
            }
        }
    }
    // Fail every request still waiting: the agent is gone.
    for (_, tx) in lock(&pending).drain() {
        let _ = tx.send(Err(RpcError::Closed));
    }
}

enum Message {
    Response(u64, Result<Value, RpcError>),
    Incoming(Incoming),
}

fn classify(line: &[u8], label: &str) -> Option<Message> {
    let text = String::from_utf8_lossy(line);
    let text = text.trim();
    if text.is_empty() {
        return None;
    }
    let value: Value = match serde_json::from_str(text) {
        Ok(v) => v,
        Err(e) => {
            tracing::warn!(agent = %label, error = %e, bytes = text.len(), "malformed line from agent; skipped");
            return None;
        }
    };
    let Some(obj) = value.as_object() else {
        tracing::warn!(agent = %label, "non-object JSON from agent; skipped");
        return None;
    };
    let method = obj.get("method").and_then(Value::as_str);
    let id = obj.get("id").filter(|id| !id.is_null());
    match (method, id) {
        (Some(method), Some(id)) => Some(Message::Incoming(Incoming::Request {
            id: id.clone(),
            method: method.to_owned(),
            params: obj.get("params").cloned().unwrap_or(Value::Null),
        })),
        (Some(method), None) => Some(Message::Incoming(Incoming::Notification {
            method: method.to_owned(),
            params: obj.get("params").cloned().unwrap_or(Value::Null),
        })),
        (None, Some(id)) => {
            let Some(id) = id.as_u64() else {
                tracing::warn!(agent = %label, id = %id, "response with an id we never used; skipped");
                return None;
            };
            let result = if let Some(err) = obj.get("error") {
                Err(RpcError::Remote {
                    code: err
                        .get("code")
                        .and_then(Value::as_i64)
                        .unwrap_or(INTERNAL_ERROR),
                    message: err
                        .get("message")
                        .and_then(Value::as_str)
                        .unwrap_or("(no message)")
                        .to_owned(),
                    data: err.get("data").cloned(),
                })
            } else {
                Ok(obj.get("result").cloned().unwrap_or(Value::Null))
            };
            Some(Message::Response(id, result))
        }
        (None, None) => {
            tracing::warn!(agent = %label, "JSON-RPC message with neither method nor id; skipped");
            None
        }
    }
}

async fn dispatch(msg: Message, incoming: &mpsc::Sender<Incoming>, pending: &Pending) {
    match msg {
        Message::Response(id, result) => {
            let waiter = lock(pending).remove(&id);
            match waiter {
                Some(tx) => {
                    let _ = tx.send(result);
                }
                None => tracing::debug!(id, "response to a request nobody waits for"),
            }
        }
        Message::Incoming(m) => {
            // A closed receiver means the session is over; remaining messages are moot.
            let _ = incoming.send(m).await;
        }
    }
}

pub(crate) enum LineRead {
    Line,
    TooLong(usize),
    Eof,
}

/// Reads one `\n`-terminated line into `buf` (without the newline), never holding more than
/// `cap` bytes: an overlong line is consumed and reported as `TooLong`.
pub(crate) async fn read_bounded_line<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    buf: &mut Vec<u8>,
    cap: usize,
) -> std::io::Result<LineRead> {
    buf.clear();
    let mut total = 0usize;
    let mut overflow = false;
    loop {
        let chunk = reader.fill_buf().await?;
        if chunk.is_empty() {
            return Ok(if total == 0 {
                LineRead::Eof
            } else if overflow {
                LineRead::TooLong(total)
            } else {
                LineRead::Line
            });
        }
        let (take, done) = match chunk.iter().position(|&b| b == b'\n') {
            Some(pos) => (pos + 1, true),
            None => (chunk.len(), false),
        };
        total += take;
        if !overflow {
            if buf.len() + take > cap + 1 {
                overflow = true;
                buf.clear();
            } else {
                buf.extend_from_slice(&chunk[..take]);
            }
        }
        reader.consume(take);
        if done {
            if overflow {
                return Ok(LineRead::TooLong(total));
            }
            if buf.last() == Some(&b'\n') {
                buf.pop();
            }
            return Ok(LineRead::Line);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncBufReadExt, BufReader, duplex};

    /// A client connected to an in-memory "agent" whose side we drive by hand.
    struct Harness {
        client: RpcClient,
        incoming: mpsc::Receiver<Incoming>,
        agent_in: tokio::io::Lines<BufReader<tokio::io::DuplexStream>>,
        agent_out: tokio::io::DuplexStream,
    }

    fn harness() -> Harness {
        let (client_w, agent_r) = duplex(1 << 16);
        let (agent_w, client_r) = duplex(1 << 16);
        let tracker = TaskTracker::new();
        let (client, incoming) = connect(BufReader::new(client_r), client_w, &tracker, "t".into());
        Harness {
            client,
            incoming,
            agent_in: BufReader::new(agent_r).lines(),
            agent_out: agent_w,
        }
    }

    async fn agent_send(h: &mut Harness, line: &str) {
        h.agent_out.write_all(line.as_bytes()).await.unwrap();
        h.agent_out.write_all(b"\n").await.unwrap();
    }

    #[tokio::test]
    async fn request_gets_its_response_by_id() {
        let mut h = harness();
        let client = h.client.clone();
        let call = tokio::spawn(async move {
            client
                .request(
                    "initialize",
                    json!({"protocolVersion": 1}),
                    Duration::from_secs(5),
                )
                .await
        });
        let sent: Value =
            serde_json::from_str(&h.agent_in.next_line().await.unwrap().unwrap()).unwrap();
        assert_eq!(sent["method"], "initialize");
        assert_eq!(sent["jsonrpc"], "2.0");
        let id = sent["id"].as_u64().unwrap();
        agent_send(
            &mut h,
            &format!(
                r#"{{"jsonrpc":"2.0","id":{id},"result":{{"protocolVersion":1,"extra":true}}}}"#
            ),
        )
        .await;
        let result = call.await.unwrap().unwrap();
        assert_eq!(result["protocolVersion"], 1);
    }

    #[tokio::test]
    async fn agent_request_ids_are_a_separate_space() {
        let mut h = harness();
        let client = h.client.clone();
        let call = tokio::spawn(async move {
            client
                .request("session/prompt", json!({}), Duration::from_secs(5))
                .await
        });
        let sent: Value =
            serde_json::from_str(&h.agent_in.next_line().await.unwrap().unwrap()).unwrap();
        let id = sent["id"].as_u64().unwrap();
        // The agent sends a request with the same numeric id as ours: it must not be taken as
        // the response.
        agent_send(&mut h, &format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"session/request_permission","params":{{"x":1}}}}"#)).await;
        match h.incoming.recv().await.unwrap() {
            Incoming::Request {
                id: rid, method, ..
            } => {
                assert_eq!(rid, json!(id));
                assert_eq!(method, "session/request_permission");
            }
            other => panic!("unexpected {other:?}"),
        }
        assert!(!call.is_finished());
        agent_send(
            &mut h,
            &format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{"stopReason":"end_turn"}}}}"#),
        )
        .await;
        assert_eq!(call.await.unwrap().unwrap()["stopReason"], "end_turn");
    }

    #[tokio::test]
    async fn errors_and_notifications_and_garbage() {
        let mut h = harness();
        agent_send(&mut h, "this is not json").await;
        agent_send(&mut h, "[1,2,3]").await;
        agent_send(&mut h, r#"{"jsonrpc":"2.0"}"#).await;
        agent_send(&mut h, r#"{"jsonrpc":"2.0","id":"weird","result":1}"#).await;
        agent_send(&mut h, r#"{"jsonrpc":"2.0","method":"session/update","params":{"update":{"sessionUpdate":"brand_new_kind"}}}"#).await;
        match h.incoming.recv().await.unwrap() {
            Incoming::Notification { method, params } => {
                assert_eq!(method, "session/update");
                assert_eq!(params["update"]["sessionUpdate"], "brand_new_kind");
            }
            other => panic!("unexpected {other:?}"),
        }
        let client = h.client.clone();
        let call =
            tokio::spawn(
                async move { client.request("x", json!({}), Duration::from_secs(5)).await },
            );
        let sent: Value =
            serde_json::from_str(&h.agent_in.next_line().await.unwrap().unwrap()).unwrap();
        let id = sent["id"].as_u64().unwrap();
        agent_send(&mut h, &format!(r#"{{"jsonrpc":"2.0","id":{id},"error":{{"code":-32603,"message":"Internal error: boom"}}}}"#)).await;
        match call.await.unwrap() {
            Err(RpcError::Remote { code, message, .. }) => {
                assert_eq!(code, -32603);
                assert!(message.contains("boom"));
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn request_times_out() {
        let h = harness();
        let err = h
            .client
            .request("session/new", json!({}), Duration::from_secs(3))
            .await
            .unwrap_err();
        assert!(matches!(err, RpcError::Timeout { .. }));
    }

    #[tokio::test]
    async fn pending_requests_fail_when_the_agent_goes_away() {
        let h = harness();
        let client = h.client.clone();
        let call = tokio::spawn(async move {
            client
                .request("x", json!({}), Duration::from_secs(30))
                .await
        });
        tokio::task::yield_now().await;
        drop(h.agent_out);
        assert_eq!(call.await.unwrap().unwrap_err(), RpcError::Closed);
    }

    #[tokio::test]
    async fn bounded_reader_skips_overlong_lines() {
        let data = format!("{}\nshort\n{}", "x".repeat(100), "tail-without-newline");
        let mut r = BufReader::with_capacity(7, data.as_bytes());
        let mut buf = Vec::new();
        assert!(matches!(
            read_bounded_line(&mut r, &mut buf, 50).await.unwrap(),
            LineRead::TooLong(101)
        ));
        assert!(matches!(
            read_bounded_line(&mut r, &mut buf, 50).await.unwrap(),
            LineRead::Line
        ));
        assert_eq!(buf, b"short");
        assert!(matches!(
            read_bounded_line(&mut r, &mut buf, 50).await.unwrap(),
            LineRead::Line
        ));
        assert_eq!(buf, b"tail-without-newline");
        assert!(matches!(
            read_bounded_line(&mut r, &mut buf, 50).await.unwrap(),
            LineRead::Eof
        ));
    }
}
