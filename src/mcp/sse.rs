//! An MCP server over the older HTTP+SSE transport (`kind: sse`): the client opens an event
//! stream at the server's URL; its first `endpoint` event names where messages are posted;
//! the answers come as `message` events on the stream. The broker keeps that stream for the
//! session ([`Link`]) and gives the agent the same Streamable HTTP endpoint as for any server.
//!
//! The endpoint must be on the configured URL's own origin (scheme, host and port): a server
//! that names another host is not followed there. Stream and posts carry the configured
//! headers; each event is held to the answer's cap. A message the server refuses (an HTTP error)
//! is answered to the agent at once as a JSON-RPC error instead of waiting for a timeout.

use axum::http::{HeaderValue, header};
use futures_util::StreamExt;
use serde_json::{Value, json};
use tokio::io::{AsyncWriteExt, BufReader, DuplexStream};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::Server;
use super::events::{Events, data_of, name_of};
use super::link::{Link, OpenError};
use crate::agent::rpc::{self, INTERNAL_ERROR, LineRead, MAX_LINE_BYTES};

/// Buffer of the in-memory pipes between the JSON-RPC client and the HTTP side.
const PIPE: usize = 64 * 1024;

type Chunks = futures_util::stream::BoxStream<'static, reqwest::Result<axum::body::Bytes>>;

/// Opens the server's event stream and waits (within its `timeoutMs`) for its endpoint.
pub(super) async fn open(server: &Server, session_id: &str) -> Result<Link, OpenError> {
    if server.literal_not_public() {
        return Err(OpenError::NotPublic);
    }
    let timeout = std::time::Duration::from_millis(server.config.timeout_ms);
    let mut headers = server.headers.clone();
    headers.insert(
        header::ACCEPT,
        HeaderValue::from_static("text/event-stream"),
    );
    let sent = server
        .stream_client
        .get(server.url.clone())
        .headers(headers)
        .send();
    let response = match tokio::time::timeout(timeout, sent).await {
        Err(_) => return Err(OpenError::Timeout),
        Ok(Err(e)) if e.is_timeout() => return Err(OpenError::Timeout),
        Ok(Err(e)) => return Err(OpenError::Unreachable(super::route::without_url(&e))),
        Ok(Ok(response)) => response,
    };
    let status = response.status();
    if status.is_redirection() {
        return Err(OpenError::Redirect);
    }
    if !status.is_success() {
        return Err(OpenError::NotMcp(format!("HTTP {}", status.as_u16())));
    }
    let is_stream = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.to_ascii_lowercase().starts_with("text/event-stream"));
    if !is_stream {
        return Err(OpenError::NotMcp(
            "its answer is not an event stream".into(),
        ));
    }
    let cap = server.config.max_response_kb as usize * 1024;
    let mut chunks: Chunks = response.bytes_stream().boxed();
    let mut events = Events::new(cap);
    let (endpoint, early) = tokio::time::timeout(timeout, endpoint_of(&mut chunks, &mut events))
        .await
        .map_err(|_| OpenError::Timeout)??;
    let endpoint = server
        .url
        .join(endpoint.trim())
        .map_err(|_| OpenError::NotMcp("its endpoint is not a URL".into()))?;
    if endpoint.origin() != server.url.origin() {
        tracing::warn!(server = %server.config.name, "mcp server named an endpoint on another host: not used");
        return Err(OpenError::EndpointElsewhere);
    }
    let label = format!("mcp:{}:{session_id}", server.config.name);
    let tasks = TaskTracker::new();
    let (to_client, from_server) = mpsc::channel::<String>(64);
    let (down_in, down_out) = tokio::io::duplex(PIPE);
    let (up_in, up_out) = tokio::io::duplex(PIPE);
    let ended = CancellationToken::new();
    tasks.spawn(feed_client(from_server, down_in, ended.clone()));
    tasks.spawn(read_stream(
        chunks,
        events,
        early,
        to_client.clone(),
        ended.clone(),
        label.clone(),
    ));
    tasks.spawn(post_messages(
        BufReader::new(up_out),
        Poster {
            client: server.client.clone(),
            endpoint,
            headers: server.headers.clone(),
            label: label.clone(),
        },
        to_client,
    ));
    let (client, incoming) = rpc::connect(BufReader::new(down_out), up_in, &tasks, label.clone());
    tracing::info!(session_id, server = %server.config.name, "mcp event stream opened");
    Ok(Link::new(
        client,
        incoming,
        tasks,
        Box::new(ended.drop_guard()),
        label,
    ))
}

/// Reads events until the `endpoint` one: its data, and the events that came after it in the
/// same chunk.
async fn endpoint_of(
    chunks: &mut Chunks,
    events: &mut Events,
) -> Result<(String, Vec<Vec<u8>>), OpenError> {
    loop {
        let chunk = match chunks.next().await {
            None => {
                return Err(OpenError::NotMcp(
                    "its stream ended before naming an endpoint".into(),
                ));
            }
            Some(Err(e)) => return Err(OpenError::Unreachable(super::route::without_url(&e))),
            Some(Ok(chunk)) => chunk,
        };
        let mut complete = events
            .push(&chunk)
            .map_err(|e| OpenError::NotMcp(e.to_string()))?
            .into_iter();
        while let Some(event) = complete.next() {
            if name_of(&event) == "endpoint" {
                let data = data_of(&event).unwrap_or_default();
                return Ok((data, complete.collect()));
            }
        }
    }
}

/// The server's `message` events, each as one line for the JSON-RPC client; ends the link when
/// the stream ends or breaks.
async fn read_stream(
    mut chunks: Chunks,
    mut events: Events,
    early: Vec<Vec<u8>>,
    to_client: mpsc::Sender<String>,
    ended: CancellationToken,
    label: String,
) {
    let pass = async |event: Vec<u8>| {
        if name_of(&event) != "message" {
            return true;
        }
        let Some(message) = data_of(&event).and_then(|d| serde_json::from_str::<Value>(&d).ok())
        else {
            tracing::warn!(link = %label, "mcp server sent an event that is not JSON: skipped");
            return true;
        };
        to_client.send(message.to_string()).await.is_ok()
    };
    for event in early {
        if !pass(event).await {
            return ended.cancel();
        }
    }
    loop {
        let chunk = tokio::select! {
            chunk = chunks.next() => chunk,
            () = ended.cancelled() => return,
        };
        let Some(chunk) = chunk else { break };
        let complete = match chunk {
            Ok(chunk) => match events.push(&chunk) {
                Ok(complete) => complete,
                Err(e) => {
                    tracing::warn!(link = %label, error = %e, "mcp event stream cut");
                    break;
                }
            },
            Err(e) => {
                tracing::warn!(link = %label, error = %super::route::without_url(&e), "mcp event stream broke");
                break;
            }
        };
        for event in complete {
            if !pass(event).await {
                return ended.cancel();
            }
        }
    }
    ended.cancel();
}

/// Writes the lines for the JSON-RPC client until the stream ended (its end is the client's).
async fn feed_client(
    mut lines: mpsc::Receiver<String>,
    mut pipe: DuplexStream,
    ended: CancellationToken,
) {
    loop {
        let line = tokio::select! {
            biased;
            line = lines.recv() => line,
            () = ended.cancelled() => None,
        };
        let Some(mut line) = line else { break };
        line.push('\n');
        if pipe.write_all(line.as_bytes()).await.is_err() {
            break;
        }
    }
    let _ = pipe.shutdown().await;
}

/// Where and how messages are posted.
struct Poster {
    client: reqwest::Client,
    endpoint: reqwest::Url,
    headers: axum::http::HeaderMap,
    label: String,
}

/// Posts each line the JSON-RPC client writes to the endpoint; a request the server refuses
/// is answered at once with a JSON-RPC error.
async fn post_messages(
    mut lines: BufReader<DuplexStream>,
    poster: Poster,
    to_client: mpsc::Sender<String>,
) {
    let mut buf = Vec::new();
    loop {
        match rpc::read_bounded_line(&mut lines, &mut buf, MAX_LINE_BYTES).await {
            Ok(LineRead::Eof) | Err(_) => break,
            Ok(LineRead::TooLong(_)) => continue,
            Ok(LineRead::Line) => {}
        }
        let sent = poster
            .client
            .post(poster.endpoint.clone())
            .headers(poster.headers.clone())
            .header(header::CONTENT_TYPE, "application/json")
            .body(buf.clone())
            .send()
            .await;
        let failure = match sent {
            Ok(r) if r.status().is_success() => continue,
            Ok(r) => format!(
                "the MCP server refused the message (HTTP {})",
                r.status().as_u16()
            ),
            Err(e) => {
                tracing::warn!(link = %poster.label, error = %super::route::without_url(&e), "mcp message not posted");
                "the MCP server could not be reached".to_owned()
            }
        };
        tracing::warn!(link = %poster.label, failure = %failure, "mcp message not delivered");
        let id = serde_json::from_slice::<Value>(&buf)
            .ok()
            .filter(|m| m.get("method").is_some())
            .and_then(|m| m.get("id").cloned());
        if let Some(id) = id {
            let answer = json!({"jsonrpc": "2.0", "id": id,
                "error": {"code": INTERNAL_ERROR, "message": failure}});
            if to_client.send(answer.to_string()).await.is_err() {
                break;
            }
        }
    }
}
