//! The egress allow-list (`agent.sandbox.egressAllowHosts`): an HTTP CONNECT proxy the daemon
//! serves on each sandboxed session's folder, so an agent without network can still reach a
//! few named HTTPS hosts and nothing else.
//!
//! A sandboxed agent has no network (see `agent::sandbox`); with a non-empty allow-list its
//! `sandbox-init` also relays `127.0.0.1:3128` to `{session folder}/proxy.sock`, which
//! [`EgressProxy::serve_session`] listens on, and the agent gets `HTTPS_PROXY` pointing there.
//! The agent is assumed hostile, so every connection is judged on its own:
//!
//! * the request head is read with a bound ([`MAX_HEAD_BYTES`]) and a timeout
//!   ([`EgressTimeouts::head`]); a head that does not end in time is dropped, an oversized or
//!   malformed one gets 400;
//! * only `CONNECT host:port HTTP/1.1` is served (other methods get 405), and only for a
//!   `host:port` on the allow-list, compared exactly after lowercasing the host (403 before
//!   any resolution otherwise, so the agent cannot use the daemon's resolver as an oracle);
//! * the host is resolved, and if **any** address is not public ([`is_public`]: loopback,
//!   private, link-local and the metadata address, CGNAT, unique-local, multicast,
//!   documentation, IPv4-mapped forms of those...) the request gets 403 — a name on the list
//!   whose DNS now points inward (rebinding) reaches nothing. The tunnel goes to exactly the
//!   address that was checked, never to a second lookup;
//! * then `HTTP/1.1 200 Connection Established` and bytes are copied both ways untouched (TLS
//!   runs end to end between the agent and the host; the daemon never sees the payload).
//!
//! Each decision is one log line with the host, port and outcome (`info` for a tunnel, `warn`
//! for a refusal). A session's tunnels end when its [`EgressSession`] is closed or dropped, and
//! at most [`MAX_TUNNELS`] are open at once per session (further connections wait), so a
//! hijacked agent opening connections starves only itself. `tests/egress.rs` drives the proxy
//! over its socket.
//!
//! * `hosts` — the allow-list entries; `address` — which addresses are public; `connect` —
//!   the accept loop and the judging and tunnelling of each connection.

mod address;
mod connect;
mod hosts;

use std::collections::HashSet;
use std::io;
use std::net::SocketAddr;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::net::UnixListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

pub use address::is_public;
pub use hosts::{AllowEntryError, AllowedHost, parse_allow_entry};

/// File name of the proxy's socket inside a session's folder (next to `api.sock`).
pub const PROXY_SOCKET_NAME: &str = "proxy.sock";

/// The port an allow-list entry without `:port` stands for.
pub const DEFAULT_PORT: u16 = 443;

/// Longest request head read (request line and headers, blank line included).
pub const MAX_HEAD_BYTES: usize = 8 * 1024;

/// Tunnels open at once per session; further connections wait for one to end.
pub const MAX_TUNNELS: usize = 32;

/// Turns a host name into addresses. The daemon uses the system resolver ([`EgressProxy::new`]);
/// tests provide their own ([`EgressProxy::unscreened_for_tests`]).
#[async_trait]
pub trait Resolve: Send + Sync + 'static {
    /// Every address `host` has, with `port`.
    async fn resolve(&self, host: &str, port: u16) -> io::Result<Vec<SocketAddr>>;
}

/// The system resolver (`getaddrinfo` through [`tokio::net::lookup_host`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemResolver;

#[async_trait]
impl Resolve for SystemResolver {
    async fn resolve(&self, host: &str, port: u16) -> io::Result<Vec<SocketAddr>> {
        Ok(tokio::net::lookup_host((host, port)).await?.collect())
    }
}

/// The proxy's timeouts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EgressTimeouts {
    /// From the connection's start to the end of its request head.
    pub head: Duration,
    /// For resolving the host.
    pub resolve: Duration,
    /// For connecting to it.
    pub connect: Duration,
}

impl Default for EgressTimeouts {
    fn default() -> Self {
        Self {
            head: Duration::from_secs(10),
            resolve: Duration::from_secs(5),
            connect: Duration::from_secs(10),
        }
    }
}

/// The CONNECT proxy for `agent.sandbox.egressAllowHosts`, shared by every session; cheap to
/// clone.
#[derive(Clone)]
pub struct EgressProxy {
    inner: Arc<Inner>,
}

#[derive(Clone)]
pub(super) struct Inner {
    /// The exact `(host, port)` pairs served.
    pub(super) allow: HashSet<AllowedHost>,
    /// Where names are resolved.
    pub(super) resolver: Arc<dyn Resolve>,
    /// Whether every resolved address must be [`is_public`]: always in the daemon; off only
    /// through [`EgressProxy::unscreened_for_tests`].
    pub(super) screen_addresses: bool,
    pub(super) timeouts: EgressTimeouts,
}

impl std::fmt::Debug for EgressProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EgressProxy")
            .field("allow", &self.inner.allow)
            .field("screen_addresses", &self.inner.screen_addresses)
            .field("timeouts", &self.inner.timeouts)
            .finish_non_exhaustive()
    }
}

impl EgressProxy {
    /// The daemon's proxy: `allow` (entries as [`parse_allow_entry`] reads them), the system
    /// resolver, and every resolved address screened by [`is_public`].
    pub fn new(allow: &[String]) -> Result<Self, AllowEntryError> {
        Self::build(allow, Arc::new(SystemResolver), true)
    }

    /// **Tests only**: names resolved by `resolver` and the resolved addresses *not* screened,
    /// so a test can map an allowed name to a loopback server. The daemon never calls this.
    pub fn unscreened_for_tests(
        allow: &[String],
        resolver: Arc<dyn Resolve>,
    ) -> Result<Self, AllowEntryError> {
        Self::build(allow, resolver, false)
    }

    fn build(
        allow: &[String],
        resolver: Arc<dyn Resolve>,
        screen_addresses: bool,
    ) -> Result<Self, AllowEntryError> {
        let allow = allow
            .iter()
            .map(|entry| parse_allow_entry(entry))
            .collect::<Result<_, _>>()?;
        Ok(Self {
            inner: Arc::new(Inner {
                allow,
                resolver,
                screen_addresses,
                timeouts: EgressTimeouts::default(),
            }),
        })
    }

    /// The same proxy with other timeouts (tests use short ones).
    pub fn with_timeouts(self, timeouts: EgressTimeouts) -> Self {
        let mut inner = (*self.inner).clone();
        inner.timeouts = timeouts;
        Self {
            inner: Arc::new(inner),
        }
    }

    /// Listens on `{dir}/proxy.sock` (`dir` is the session's private folder, the one
    /// `SessionSocket::dir` returns; it must not be accessible to group or others, and a stale
    /// `proxy.sock` in it is replaced) and serves tunnels until the returned session is closed
    /// or dropped. The accept loop runs in the current tracing span (the session's).
    pub fn serve_session(&self, dir: &Path) -> io::Result<EgressSession> {
        let meta = std::fs::symlink_metadata(dir)?;
        if !meta.is_dir() || meta.mode() & 0o077 != 0 {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!(
                    "{} must be a private directory (mode 0700) for the egress proxy's socket",
                    dir.display()
                ),
            ));
        }
        let path = dir.join(PROXY_SOCKET_NAME);
        match std::fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        let listener = UnixListener::bind(&path)?;
        let stop = CancellationToken::new();
        let accept = tokio::spawn(
            connect::accept_loop(self.inner.clone(), listener, stop.clone())
                .instrument(tracing::Span::current()),
        );
        tracing::debug!(path = %path.display(), hosts = self.inner.allow.len(), "egress proxy listening");
        Ok(EgressSession {
            path,
            stop,
            accept: Some(accept),
        })
    }
}

/// One session's proxy socket; [`close`](Self::close) or drop it when the session ends.
#[derive(Debug)]
pub struct EgressSession {
    /// `{dir}/proxy.sock`, removed on close/drop.
    path: PathBuf,
    /// Stops the accept loop, which then aborts the session's tunnels.
    stop: CancellationToken,
    /// The accept loop, awaited by [`close`](Self::close).
    accept: Option<JoinHandle<()>>,
}

impl EgressSession {
    /// The socket the sandbox's relay forwards `127.0.0.1:3128` to.
    pub fn socket_path(&self) -> &Path {
        &self.path
    }

    /// Stops accepting, ends every open tunnel, waits for that and removes the socket.
    pub async fn close(mut self) {
        self.stop.cancel();
        if let Some(accept) = self.accept.take()
            && let Err(error) = accept.await
        {
            tracing::warn!(error = %error, "egress proxy task failed");
        }
        self.remove_socket();
    }

    fn remove_socket(&self) {
        if let Err(error) = std::fs::remove_file(&self.path)
            && error.kind() != io::ErrorKind::NotFound
        {
            tracing::warn!(path = %self.path.display(), error = %error, "cannot remove the egress proxy socket");
        }
    }
}

impl Drop for EgressSession {
    /// Without [`close`](Self::close): the accept loop stops (its tunnels are aborted) and the
    /// socket is removed at once.
    fn drop(&mut self) {
        self.stop.cancel();
        if self.accept.is_some() {
            self.remove_socket();
        }
    }
}
