//! The connections the broker keeps to servers whose transport is not one HTTP exchange per
//! request: a `stdio` server's process ([`super::stdio`]) and an older HTTP+SSE server's event
//! stream ([`super::sse`]). Each is one JSON-RPC connection per session and server, opened on
//! the session's first request, reopened after it broke, and closed when the session ends or
//! has not used it for [`IDLE`] ([`Links::reap`], every [`REAP_EVERY`]).
//!
//! The agent's requests go over it as requests of the broker's own (with the broker's ids, so
//! an agent's id can never be taken for another request's), and their answers come back under
//! the agent's ids ([`super::relay`]). What the server asks of the client (sampling, roots) is
//! answered "not offered" by the broker; its notifications are dropped.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::task::TaskTracker;

use crate::agent::rpc::{Incoming, METHOD_NOT_FOUND, RpcClient, RpcError};
use crate::sync::lock;

/// A connection unused this long is closed (the next request opens a new one).
pub const IDLE: Duration = Duration::from_secs(600);

/// How often ended sessions' and idle connections are closed.
pub const REAP_EVERY: Duration = Duration::from_secs(30);

/// Why a connection to a server could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// The server's address is not public and it is not `local`.
    #[error("the MCP server's address is not public (the operator may mark it local)")]
    NotPublic,
    /// The server could not be reached.
    #[error("the MCP server could not be reached: {0}")]
    Unreachable(String),
    /// The server did not answer in time.
    #[error("the MCP server did not answer in time")]
    Timeout,
    /// The server answered a redirect.
    #[error("the MCP server answered a redirect, which the broker does not follow")]
    Redirect,
    /// The server answered something else than an event stream naming its endpoint.
    #[error("the MCP server did not open an MCP event stream: {0}")]
    NotMcp(String),
    /// The endpoint the server named is on another host.
    #[error("the MCP server named an endpoint on another host, which the broker does not use")]
    EndpointElsewhere,
    /// The stdio server's program could not be started.
    #[error("the MCP server's program could not be started: {0}")]
    NotStarted(String),
    /// Stdio servers cannot be started here (the broker was built without a sandbox for them).
    #[error("stdio MCP servers are not available here")]
    NoStdio,
}

impl OpenError {
    /// The metrics outcome.
    pub fn outcome(&self) -> &'static str {
        match self {
            OpenError::NotPublic => "not_public",
            OpenError::Unreachable(_) | OpenError::NotMcp(_) | OpenError::EndpointElsewhere => {
                "unreachable"
            }
            OpenError::Timeout => "timeout",
            OpenError::Redirect => "redirect",
            OpenError::NotStarted(_) | OpenError::NoStdio => "not_started",
        }
    }
}

/// One open connection: the client side of its JSON-RPC, and what keeps it alive (the
/// process, the stream's tasks), dropped with it.
pub struct Link {
    client: RpcClient,
    closed: Arc<AtomicBool>,
    last_used: Mutex<Instant>,
    tasks: TaskTracker,
    /// Dropped last: kills the process (stdio).
    _guard: Box<dyn Send + Sync>,
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Link")
            .field("closed", &self.is_closed())
            .finish_non_exhaustive()
    }
}

impl Link {
    /// A connection over `client`, whose incoming messages are `incoming` (the server's
    /// requests are answered "not offered", its notifications dropped; the connection is
    /// closed when they end). `tasks` and `guard` live as long as the link.
    pub(super) fn new(
        client: RpcClient,
        incoming: mpsc::Receiver<Incoming>,
        tasks: TaskTracker,
        guard: Box<dyn Send + Sync>,
        label: String,
    ) -> Link {
        let closed = Arc::new(AtomicBool::new(false));
        tasks.spawn(serve_incoming(
            client.clone(),
            incoming,
            closed.clone(),
            label,
        ));
        Link {
            client,
            closed,
            last_used: Mutex::new(Instant::now()),
            tasks,
            _guard: guard,
        }
    }

    /// The JSON-RPC client.
    pub fn client(&self) -> &RpcClient {
        *lock(&self.last_used) = Instant::now();
        &self.client
    }

    /// Whether the server's side ended (the process exited, the stream broke).
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Marks the link closed (a request found the server's side gone): the next request opens
    /// a new one.
    pub fn mark_closed(&self) {
        self.closed.store(true, Ordering::Release);
    }

    fn idle_for(&self) -> Duration {
        lock(&self.last_used).elapsed()
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        self.tasks.close();
    }
}

/// Initializes a new connection as the agent did the last one.
async fn reinitialize(link: &Link, params: Value, timeout: Duration) -> Result<(), OpenError> {
    let again = |e: RpcError| {
        OpenError::NotMcp(format!(
            "it did not take the session's initialize again: {e}"
        ))
    };
    link.client()
        .request("initialize", params, timeout)
        .await
        .map_err(again)?;
    link.client()
        .notify("notifications/initialized", json!({}))
        .await
        .map_err(again)
}

/// Answers the server's requests "not offered" and drops its notifications; marks the link
/// closed when the server's side ends.
async fn serve_incoming(
    client: RpcClient,
    mut incoming: mpsc::Receiver<Incoming>,
    closed: Arc<AtomicBool>,
    label: String,
) {
    while let Some(message) = incoming.recv().await {
        match message {
            Incoming::Request { id, method, .. } => {
                tracing::debug!(link = %label, method = %method.chars().take(64).collect::<String>(), "mcp server request refused");
                let _ = client
                    .respond_error(
                        id,
                        METHOD_NOT_FOUND,
                        "not offered: the client is the air-friends broker",
                    )
                    .await;
            }
            Incoming::Notification { .. } => {}
        }
    }
    closed.store(true, Ordering::Release);
    tracing::debug!(link = %label, "mcp connection closed");
}

/// A session's connection to one server, and how the agent initialized it (replayed on a
/// new connection after the last one broke: the agent does not know it has to).
#[derive(Default)]
struct SlotState {
    link: Option<Arc<Link>>,
    init: Option<Value>,
}

type Slot = Arc<tokio::sync::Mutex<SlotState>>;

/// The open connections, by session and server.
#[derive(Default)]
pub struct Links {
    slots: Mutex<HashMap<(String, String), Slot>>,
}

impl std::fmt::Debug for Links {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Links").field("open", &self.open()).finish()
    }
}

impl Links {
    /// The open connection of `session` to `server`, opened by `open` when there is none or the
    /// last one broke (two first requests at once open one). `init`: the parameters of the
    /// `initialize` the agent sends now, if it does; a new connection the agent does not
    /// initialize itself is initialized with what it sent last (within `timeout`).
    pub async fn get_or_open<F>(
        &self,
        (session, server): (&str, &str),
        open: F,
        init: Option<Value>,
        timeout: Duration,
    ) -> Result<Arc<Link>, OpenError>
    where
        F: AsyncFnOnce() -> Result<Link, OpenError>,
    {
        let slot = lock(&self.slots)
            .entry((session.to_owned(), server.to_owned()))
            .or_default()
            .clone();
        let mut held = slot.lock().await;
        let live = held.link.clone().filter(|l| !l.is_closed());
        let link = match live {
            Some(link) => link,
            None => {
                held.link = None;
                let link = Arc::new(open().await?);
                if let (None, Some(last)) = (&init, &held.init) {
                    reinitialize(&link, last.clone(), timeout).await?;
                }
                held.link = Some(link.clone());
                link
            }
        };
        if init.is_some() {
            held.init = init;
        }
        Ok(link)
    }

    /// Closes the connections of sessions `ended` says have ended (forgetting them), and those
    /// idle past `idle` or broken (a later request opens a new one). Returns how many were
    /// closed.
    pub fn reap(&self, ended: impl Fn(&str) -> bool, idle: Duration) -> usize {
        let mut closed = 0;
        lock(&self.slots).retain(|(session, _), slot| {
            let Ok(mut held) = slot.try_lock() else {
                // Being opened or used right now.
                return true;
            };
            let stale = held
                .link
                .as_ref()
                .is_some_and(|l| l.is_closed() || l.idle_for() >= idle);
            if ended(session) || stale {
                closed += usize::from(held.link.take().is_some());
            }
            !ended(session)
        });
        closed
    }

    /// How many connections are open.
    pub fn open(&self) -> usize {
        lock(&self.slots)
            .values()
            .filter(|slot| slot.try_lock().map_or(true, |held| held.link.is_some()))
            .count()
    }
}
