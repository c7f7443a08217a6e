//! Serving connections: the accept loop shared by the TCP listener and the per-session Unix
//! sockets, with the connection cap, the header-read timeout, and the two-step drain on
//! shutdown (finish the in-flight request, then drop what is left after the drain timeout).

use std::io;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// A listening socket the accept loop can take connections from: the TCP listener and the
/// per-session Unix sockets.
pub trait Accept: Send + 'static {
    /// One accepted connection.
    type Stream: AsyncRead + AsyncWrite + Unpin + Send + 'static;

    /// Waits for the next connection.
    fn accept_stream(&self) -> impl Future<Output = io::Result<Self::Stream>> + Send;
}

impl Accept for TcpListener {
    type Stream = TcpStream;

    async fn accept_stream(&self) -> io::Result<TcpStream> {
        let (stream, _peer) = self.accept().await?;
        // Streamed model responses end in small writes; without this, Nagle holds the last one
        // until the client's delayed ACK (~40 ms, `benches/gateway.rs`).
        if let Err(error) = stream.set_nodelay(true) {
            tracing::debug!(%error, "cannot set TCP_NODELAY on a Skill API connection");
        }
        Ok(stream)
    }
}

impl Accept for UnixListener {
    type Stream = UnixStream;

    async fn accept_stream(&self) -> io::Result<UnixStream> {
        self.accept().await.map(|(stream, _peer)| stream)
    }
}

/// How a listener's connections are served.
#[derive(Clone, Copy, Debug)]
pub struct ConnectionPolicy {
    /// See [`SkillApiSettings::header_read_timeout`](super::SkillApiSettings::header_read_timeout).
    pub header_read_timeout: Duration,
    /// Connections served at once; further ones wait in the listen backlog.
    pub max_connections: usize,
    /// After the stop, how long connections may take to finish their in-flight requests before
    /// they are dropped; `None` waits for them however long they take.
    pub drain_timeout: Option<Duration>,
}

/// The accept loop: serves `listener`'s connections with `app` under `policy` until `shutdown`
/// completes, then stops accepting (the listener is closed), lets every connection finish its
/// in-flight request (within `drain_timeout` when set, after which the rest are dropped) and
/// returns once every connection task has ended.
pub async fn run_listener<L: Accept>(
    listener: L,
    app: Router,
    policy: ConnectionPolicy,
    shutdown: impl Future<Output = ()> + Send,
) {
    let slots = Arc::new(Semaphore::new(policy.max_connections.max(1)));
    let connections = TaskTracker::new();
    let drain = Drain {
        stop: CancellationToken::new(),
        abort: CancellationToken::new(),
    };
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let slot = tokio::select! {
            () = &mut shutdown => break,
            slot = Arc::clone(&slots).acquire_owned() => match slot {
                Ok(slot) => slot,
                Err(_) => break,
            },
        };
        let stream = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept_stream() => match accepted {
                Ok(stream) => stream,
                Err(error) => {
                    accept_failed(&error).await;
                    continue;
                }
            },
        };
        connections.spawn(serve_connection(
            stream,
            app.clone(),
            policy.header_read_timeout,
            drain.clone(),
            slot,
        ));
    }
    drop(listener);
    drain.stop.cancel();
    connections.close();
    match policy.drain_timeout {
        None => connections.wait().await,
        Some(bound) => {
            if tokio::time::timeout(bound, connections.wait())
                .await
                .is_err()
            {
                tracing::debug!(
                    still_open = connections.len(),
                    "connections did not finish in time; dropping them"
                );
                drain.abort.cancel();
                connections.wait().await;
            }
        }
    }
}

/// The two stop signals of a listener's connections.
#[derive(Clone)]
struct Drain {
    /// Finish the in-flight request, then close.
    stop: CancellationToken,
    /// Close now (the drain bound has passed).
    abort: CancellationToken,
}

/// Serves one connection until the client closes it, the header-read timeout closes it or
/// `drain.stop` asks it to finish its in-flight request and close (`drain.abort` drops it
/// even mid-request). `_slot` frees its place under the connection cap when the connection
/// ends.
async fn serve_connection<S>(
    stream: S,
    app: Router,
    header_read_timeout: Duration,
    drain: Drain,
    _slot: OwnedSemaphorePermit,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(header_read_timeout);
    let connection = builder.serve_connection(TokioIo::new(stream), TowerToHyperService::new(app));
    let mut connection = std::pin::pin!(connection);
    let result = tokio::select! {
        result = connection.as_mut() => result,
        () = drain.stop.cancelled() => {
            connection.as_mut().graceful_shutdown();
            tokio::select! {
                result = connection.as_mut() => result,
                () = drain.abort.cancelled() => return,
            }
        }
    };
    if let Err(error) = result {
        // Timeouts, resets and malformed heads end one client's connection; nothing to do.
        tracing::debug!(error = %error, "skill api connection ended with an error");
    }
}

/// An `accept` error: per-connection ones (the client went away) are skipped; resource ones
/// (out of file descriptors) are logged and retried after a pause instead of spinning.
async fn accept_failed(error: &io::Error) {
    use io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    if matches!(
        error.kind(),
        ConnectionAborted | ConnectionRefused | ConnectionReset
    ) {
        return;
    }
    tracing::warn!(error = %error, "skill api cannot accept connections; retrying in 1 s");
    tokio::time::sleep(Duration::from_secs(1)).await;
}
