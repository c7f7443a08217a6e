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

use std::collections::HashSet;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UnixListener, UnixStream};
use tokio::task::{JoinHandle, JoinSet};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

/// File name of the proxy's socket inside a session's folder (next to `api.sock`).
pub const PROXY_SOCKET_NAME: &str = "proxy.sock";

/// The port an allow-list entry without `:port` stands for.
pub const DEFAULT_PORT: u16 = 443;

/// Longest request head read (request line and headers, blank line included).
pub const MAX_HEAD_BYTES: usize = 8 * 1024;

/// Tunnels open at once per session; further connections wait for one to end.
pub const MAX_TUNNELS: usize = 32;

/// How long an accept loop pauses after a failed `accept`, so a persistent failure does not spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// How long, and how much, a refused client's remaining input is read before the close (see
/// `linger`).
const LINGER_TIME: Duration = Duration::from_secs(2);
const LINGER_BYTES: usize = 64 * 1024;

/// Longest DNS name (RFC 1035, without the trailing dot).
const MAX_NAME_BYTES: usize = 253;

/// Longest DNS label.
const MAX_LABEL_BYTES: usize = 63;

/// Why an allow-list entry is refused (`agent.sandbox.egressAllowHosts.N` names it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AllowEntryError {
    /// The port part is not 1–65535.
    #[error("{0:?}: the port must be a number from 1 to 65535")]
    BadPort(String),
    /// An IP address instead of a name: the proxy serves names only.
    #[error("{0:?} is, or reads as, an IP address; list host names only")]
    IpLiteral(String),
    /// A `*` anywhere: only exact names are served.
    #[error("{0:?}: wildcards are not supported; list every host exactly")]
    Wildcard(String),
    /// Not a lowercase DNS name.
    #[error(
        "{0:?} is not a lowercase host name (labels of a-z, 0-9 and inner `-`, separated by `.`)"
    )]
    NotAHostName(String),
}

/// One allow-list entry: an exact host name and port.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AllowedHost {
    /// Lowercase DNS name, no trailing dot.
    pub host: String,
    /// The port ([`DEFAULT_PORT`] when the entry names none).
    pub port: u16,
}

/// Parses one `agent.sandbox.egressAllowHosts` entry: `host` or `host:port`, the host a
/// lowercase DNS name (no wildcard, no IP literal, no numeric last label, which resolvers would
/// read as an address).
pub fn parse_allow_entry(entry: &str) -> Result<AllowedHost, AllowEntryError> {
    if entry.contains('*') {
        return Err(AllowEntryError::Wildcard(entry.to_owned()));
    }
    if entry.parse::<IpAddr>().is_ok() || entry.starts_with('[') {
        return Err(AllowEntryError::IpLiteral(entry.to_owned()));
    }
    let (host, port) = match entry.rsplit_once(':') {
        None => (entry, DEFAULT_PORT),
        Some((host, port)) => {
            let port = port
                .parse::<u16>()
                .ok()
                .filter(|p| *p != 0 && !port.starts_with('+'))
                .ok_or_else(|| AllowEntryError::BadPort(entry.to_owned()))?;
            (host, port)
        }
    };
    if host.parse::<IpAddr>().is_ok() {
        return Err(AllowEntryError::IpLiteral(entry.to_owned()));
    }
    if !is_host_name(host) {
        return Err(AllowEntryError::NotAHostName(entry.to_owned()));
    }
    if host
        .rsplit('.')
        .next()
        .is_some_and(|last| last.bytes().all(|b| b.is_ascii_digit()))
    {
        return Err(AllowEntryError::IpLiteral(entry.to_owned()));
    }
    Ok(AllowedHost {
        host: host.to_owned(),
        port,
    })
}

/// A lowercase DNS name: labels of `a-z0-9-`, 1–63 bytes, no hyphen at either end.
fn is_host_name(host: &str) -> bool {
    !host.is_empty()
        && host.len() <= MAX_NAME_BYTES
        && host.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= MAX_LABEL_BYTES
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        })
}

/// True when `ip` is an ordinary public unicast address the proxy may connect to. Refused:
/// unspecified and "this network" (0/8), loopback, private (10/8, 172.16/12, 192.168/16),
/// CGNAT (100.64/10), link-local (169.254/16 with the cloud metadata address, fe80::/10),
/// IETF protocol assignments (192.0.0/24, 2001::/23), documentation (192.0.2/24, 198.51.100/24,
/// 203.0.113/24, 2001:db8::/32, 3fff::/20), benchmarking (198.18/15), reserved and broadcast
/// (240/4), multicast, unique-local (fc00::/7), site-local, discard-only (100::/64), and every
/// IPv6 address outside global unicast 2000::/3. IPv6 forms that carry an IPv4 address
/// (IPv4-mapped `::ffff:a.b.c.d`, NAT64 `64:ff9b::a.b.c.d`, 6to4 `2002:aabb:ccdd::`) are judged
/// by that address; IPv4-compatible `::a.b.c.d` is refused.
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => is_public_v6(v6),
    }
}

fn is_public_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    let refused = a == 0
        || a == 10
        || a == 127
        || (a == 100 && (64..128).contains(&b))
        || (a == 169 && b == 254)
        || (a == 172 && (16..32).contains(&b))
        || (a == 192 && b == 0 && c == 0)
        || (a == 192 && b == 0 && c == 2)
        || (a == 192 && b == 168)
        || (a == 198 && (b == 18 || b == 19))
        || (a == 198 && b == 51 && c == 100)
        || (a == 203 && b == 0 && c == 113)
        || a >= 224;
    !refused
}

fn is_public_v6(ip: Ipv6Addr) -> bool {
    let s = ip.segments();
    let embedded_v4 = || Ipv4Addr::from(((u32::from(s[6])) << 16) | u32::from(s[7]));
    if let Some(v4) = ip.to_ipv4_mapped() {
        return is_public_v4(v4);
    }
    // NAT64 well-known prefix 64:ff9b::/96.
    if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        return is_public_v4(embedded_v4());
    }
    // 6to4 2002::/16 carries the IPv4 address in the next 32 bits.
    if s[0] == 0x2002 {
        return is_public_v4(Ipv4Addr::from((u32::from(s[1]) << 16) | u32::from(s[2])));
    }
    let global_unicast = s[0] & 0xe000 == 0x2000;
    let protocol_assignments = s[0] == 0x2001 && s[1] < 0x0200;
    let documentation = (s[0] == 0x2001 && s[1] == 0x0db8) || (s[0] == 0x3fff && s[1] < 0x1000);
    global_unicast && !protocol_assignments && !documentation
}

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
struct Inner {
    /// The exact `(host, port)` pairs served.
    allow: HashSet<AllowedHost>,
    /// Where names are resolved.
    resolver: Arc<dyn Resolve>,
    /// Whether every resolved address must be [`is_public`]: always in the daemon; off only
    /// through [`EgressProxy::unscreened_for_tests`].
    screen_addresses: bool,
    timeouts: EgressTimeouts,
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
            accept_loop(self.inner.clone(), listener, stop.clone())
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

async fn accept_loop(inner: Arc<Inner>, listener: UnixListener, stop: CancellationToken) {
    let mut tunnels = JoinSet::new();
    loop {
        tokio::select! {
            _ = stop.cancelled() => break,
            accepted = listener.accept(), if tunnels.len() < MAX_TUNNELS => match accepted {
                Ok((stream, _)) => {
                    tunnels.spawn(serve_connection(inner.clone(), stream).in_current_span());
                }
                Err(error) => {
                    tracing::warn!(error = %error, "egress proxy: accept failed");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                }
            },
            Some(_) = tunnels.join_next(), if !tunnels.is_empty() => {}
        }
    }
    tunnels.shutdown().await;
}

/// Why a request is not tunnelled; each maps to one response and one log outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refusal {
    /// The head is not `METHOD target HTTP/1.1` or the CONNECT target is not `host:port`.
    Malformed,
    /// No end of head within [`MAX_HEAD_BYTES`].
    HeadTooLarge,
    /// No end of head within the timeout (the connection is dropped without a reply).
    HeadTimeout,
    /// Not CONNECT.
    MethodNotAllowed,
    /// `host:port` is not on the allow-list.
    NotAllowed,
    /// The host resolved to at least one address that is not public.
    NonPublicAddress,
    /// Resolution failed or gave nothing.
    ResolveFailed,
    /// Resolution did not finish in time.
    ResolveTimeout,
    /// The connection to the host failed.
    ConnectFailed,
    /// The connection to the host did not succeed in time.
    ConnectTimeout,
}

impl Refusal {
    /// The response, or `None` to drop the connection silently.
    fn response(self) -> Option<&'static str> {
        let status = match self {
            Refusal::Malformed | Refusal::HeadTooLarge => "400 Bad Request",
            Refusal::HeadTimeout => return None,
            Refusal::MethodNotAllowed => "405 Method Not Allowed",
            Refusal::NotAllowed | Refusal::NonPublicAddress => "403 Forbidden",
            Refusal::ResolveFailed | Refusal::ConnectFailed => "502 Bad Gateway",
            Refusal::ResolveTimeout | Refusal::ConnectTimeout => "504 Gateway Timeout",
        };
        Some(status)
    }

    /// The `outcome` field of the log line.
    fn outcome(self) -> &'static str {
        match self {
            Refusal::Malformed => "malformed",
            Refusal::HeadTooLarge => "head_too_large",
            Refusal::HeadTimeout => "head_timeout",
            Refusal::MethodNotAllowed => "method_not_allowed",
            Refusal::NotAllowed => "not_allowed",
            Refusal::NonPublicAddress => "non_public_address",
            Refusal::ResolveFailed => "resolve_failed",
            Refusal::ResolveTimeout => "resolve_timeout",
            Refusal::ConnectFailed => "connect_failed",
            Refusal::ConnectTimeout => "connect_timeout",
        }
    }
}

/// What a valid CONNECT asks for (the host lowercased).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Target {
    host: String,
    port: u16,
}

/// Parses a complete request head (up to, not including, the blank line): the request line
/// must be `CONNECT host:port HTTP/1.1`. Header lines are not interpreted (no proxy
/// authentication, no `Host` check: the target is the request line's).
fn parse_head(head: &[u8]) -> Result<Target, Refusal> {
    let line_end = head
        .windows(2)
        .position(|w| w == b"\r\n")
        .unwrap_or(head.len());
    let line = std::str::from_utf8(&head[..line_end]).map_err(|_| Refusal::Malformed)?;
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(Refusal::Malformed);
    };
    let token = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphabetic());
    if !token(method) || target.is_empty() || version != "HTTP/1.1" {
        return Err(Refusal::Malformed);
    }
    if method != "CONNECT" {
        return Err(Refusal::MethodNotAllowed);
    }
    let (host, port) = target.rsplit_once(':').ok_or(Refusal::Malformed)?;
    let port: u16 = port
        .parse()
        .ok()
        .filter(|p| *p != 0 && port.bytes().all(|b| b.is_ascii_digit()))
        .ok_or(Refusal::Malformed)?;
    // Names and bracketed IPv6 literals only (the latter are never on the list): nothing else
    // reaches the allow-list check or the log line.
    let host_byte =
        |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'[' | b']' | b':');
    if host.is_empty() || !host.bytes().all(host_byte) {
        return Err(Refusal::Malformed);
    }
    Ok(Target {
        host: host.to_ascii_lowercase(),
        port,
    })
}

/// Reads the request head: returns it (without the blank line) and whatever the client sent
/// after it, which belongs to the tunnel.
async fn read_head(
    stream: &mut UnixStream,
    timeout: Duration,
) -> Result<(Vec<u8>, Vec<u8>), Refusal> {
    let read = async {
        let mut buf = Vec::with_capacity(1024);
        let mut chunk = [0u8; 1024];
        loop {
            let n = stream
                .read(&mut chunk)
                .await
                .map_err(|_| Refusal::Malformed)?;
            if n == 0 {
                return Err(Refusal::Malformed);
            }
            let searched_from = buf.len().saturating_sub(3);
            buf.extend_from_slice(&chunk[..n]);
            if let Some(at) = buf[searched_from..]
                .windows(4)
                .position(|w| w == b"\r\n\r\n")
            {
                let end = searched_from + at;
                if end + 4 > MAX_HEAD_BYTES {
                    return Err(Refusal::HeadTooLarge);
                }
                let rest = buf.split_off(end + 4);
                buf.truncate(end);
                return Ok((buf, rest));
            }
            if buf.len() >= MAX_HEAD_BYTES {
                return Err(Refusal::HeadTooLarge);
            }
        }
    };
    tokio::time::timeout(timeout, read)
        .await
        .map_err(|_| Refusal::HeadTimeout)?
}

/// Judges one connection, then either tunnels it or answers the refusal and closes it.
async fn serve_connection(inner: Arc<Inner>, mut client: UnixStream) {
    let mut target = None;
    let result = async {
        let (head, early) = read_head(&mut client, inner.timeouts.head).await?;
        let wanted = parse_head(&head)?;
        let asked = target.insert(wanted);
        let upstream = open_upstream(&inner, asked).await?;
        Ok::<_, Refusal>((upstream, early))
    }
    .await;
    let (host, port) = target
        .as_ref()
        .map_or(("", 0), |t| (t.host.as_str(), t.port));
    match result {
        Err(refusal) => {
            tracing::warn!(host, port, outcome = refusal.outcome(), "egress refused");
            if let Some(status) = refusal.response() {
                let reply =
                    format!("HTTP/1.1 {status}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
                let _ = client.write_all(reply.as_bytes()).await;
                let _ = client.shutdown().await;
                linger(&mut client).await;
            }
        }
        Ok((mut upstream, early)) => {
            tracing::info!(host, port, outcome = "tunnel", "egress allowed");
            let opened = async {
                client
                    .write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n")
                    .await?;
                upstream.write_all(&early).await?;
                tokio::io::copy_bidirectional(&mut client, &mut upstream).await
            };
            match opened.await {
                Ok((up, down)) => {
                    tracing::debug!(
                        host,
                        port,
                        bytes_up = up,
                        bytes_down = down,
                        "egress tunnel closed"
                    );
                }
                Err(error) => {
                    tracing::debug!(host, port, error = %error, "egress tunnel ended with an error");
                }
            }
        }
    }
}

/// Reads and discards what the client still sends after a refusal, briefly and boundedly:
/// closing a socket with unread input resets the connection, and the client would then lose the
/// response it has not read yet.
async fn linger(client: &mut UnixStream) {
    let drain = async {
        let mut sink = [0u8; 4096];
        let mut total = 0;
        while total < LINGER_BYTES {
            match client.read(&mut sink).await {
                Ok(0) | Err(_) => break,
                Ok(n) => total += n,
            }
        }
    };
    let _ = tokio::time::timeout(LINGER_TIME, drain).await;
}

/// Checks `target` against the allow-list, resolves it, screens every address and connects to
/// the first.
async fn open_upstream(inner: &Inner, target: &Target) -> Result<TcpStream, Refusal> {
    let allowed = AllowedHost {
        host: target.host.clone(),
        port: target.port,
    };
    if !inner.allow.contains(&allowed) {
        return Err(Refusal::NotAllowed);
    }
    let addrs = tokio::time::timeout(
        inner.timeouts.resolve,
        inner.resolver.resolve(&target.host, target.port),
    )
    .await
    .map_err(|_| Refusal::ResolveTimeout)?
    .map_err(|_| Refusal::ResolveFailed)?;
    if inner.screen_addresses && addrs.iter().any(|a| !is_public(a.ip())) {
        return Err(Refusal::NonPublicAddress);
    }
    let first = *addrs.first().ok_or(Refusal::ResolveFailed)?;
    let upstream = tokio::time::timeout(inner.timeouts.connect, TcpStream::connect(first))
        .await
        .map_err(|_| Refusal::ConnectTimeout)?
        .map_err(|_| Refusal::ConnectFailed)?;
    let _ = upstream.set_nodelay(true);
    Ok(upstream)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn every_non_public_ipv4_range_is_refused() {
        for refused in [
            "0.0.0.0",
            "0.1.2.3",
            "127.0.0.1",
            "127.255.255.254",
            "10.0.0.1",
            "10.255.255.255",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.169.254",
            "169.254.0.1",
            "100.64.0.1",
            "100.127.255.255",
            "192.0.0.8",
            "192.0.2.10",
            "198.51.100.7",
            "203.0.113.9",
            "198.18.0.1",
            "198.19.255.255",
            "224.0.0.1",
            "239.255.255.250",
            "240.0.0.1",
            "255.255.255.255",
        ] {
            assert!(!is_public(ip(refused)), "{refused} was judged public");
        }
    }

    #[test]
    fn public_ipv4_addresses_next_to_the_refused_ranges_pass() {
        for public in [
            "1.1.1.1",
            "8.8.8.8",
            "9.255.255.255",
            "11.0.0.0",
            "100.63.255.255",
            "100.128.0.0",
            "126.255.255.255",
            "128.0.0.1",
            "169.253.255.255",
            "172.15.255.255",
            "172.32.0.0",
            "192.0.1.1",
            "192.167.255.255",
            "192.169.0.0",
            "198.17.255.255",
            "198.20.0.0",
            "223.255.255.255",
        ] {
            assert!(is_public(ip(public)), "{public} was refused");
        }
    }

    #[test]
    fn every_non_public_ipv6_range_is_refused() {
        for refused in [
            "::",
            "::1",
            "fe80::1",
            "febf::1",
            "fc00::1",
            "fd12:3456::1",
            "fec0::1",
            "ff02::1",
            "ff0e::1",
            "2001:db8::1",
            "2001::1",
            "2001:2::1",
            "2001:1ff:ffff::1",
            "3fff::1",
            "3fff:fff::1",
            "100::1",
            "::7f00:1",
            "64:ff9b:1::1",
            "4000::1",
        ] {
            assert!(!is_public(ip(refused)), "{refused} was judged public");
        }
    }

    #[test]
    fn ipv6_forms_carrying_a_refused_ipv4_address_are_refused_and_public_ones_pass() {
        for refused in [
            "::ffff:127.0.0.1",
            "::ffff:10.1.2.3",
            "::ffff:169.254.169.254",
            "::ffff:192.168.0.1",
            "::ffff:100.64.0.1",
            "::ffff:0.0.0.0",
            "64:ff9b::7f00:1",
            "64:ff9b::a9fe:a9fe",
            "2002:7f00:1::1",
            "2002:a9fe:a9fe::1",
            "2002:c0a8:101::1",
        ] {
            assert!(!is_public(ip(refused)), "{refused} was judged public");
        }
        for public in [
            "::ffff:8.8.8.8",
            "64:ff9b::808:808",
            "2002:808:808::1",
            "2606:4700:4700::1111",
            "2a00:1450:4001::1",
            "2001:200::1",
            "3fff:1000::1",
        ] {
            assert!(is_public(ip(public)), "{public} was refused");
        }
    }

    #[test]
    fn allow_entries_are_exact_lowercase_names_with_an_optional_port() {
        let entry = |s: &str| parse_allow_entry(s);
        assert_eq!(
            entry("api.github.com").unwrap(),
            AllowedHost {
                host: "api.github.com".into(),
                port: 443
            }
        );
        assert_eq!(entry("registry.npmjs.org:8443").unwrap().port, 8443);
        assert_eq!(entry("localhost").unwrap().host, "localhost");
        for (bad, want) in [
            ("*.github.com", "wildcards"),
            ("1.2.3.4", "IP address"),
            ("1.2.3.4:443", "IP address"),
            ("::1", "IP address"),
            ("[::1]:443", "IP address"),
            ("2130706433", "IP address"),
            ("host.123", "IP address"),
            ("API.github.com", "lowercase host name"),
            ("-bad.com", "lowercase host name"),
            ("a..b", "lowercase host name"),
            ("example.com.", "lowercase host name"),
            ("http://example.com", "port"),
            ("", "lowercase host name"),
            ("ex ample.com", "lowercase host name"),
            ("example.com:0", "port"),
            ("example.com:65536", "port"),
            ("example.com:+443", "port"),
            ("example.com:", "port"),
        ] {
            let err = entry(bad).expect_err(bad).to_string();
            assert!(err.contains(want), "{bad:?}: {err}");
        }
    }

    #[test]
    fn the_head_parser_accepts_only_connect_host_port_http_1_1() {
        let parse = |s: &str| parse_head(s.as_bytes());
        assert_eq!(
            parse("CONNECT API.GitHub.com:443 HTTP/1.1\r\nHost: api.github.com:443").unwrap(),
            Target {
                host: "api.github.com".into(),
                port: 443
            }
        );
        assert_eq!(parse("CONNECT a.b:8443 HTTP/1.1").unwrap().port, 8443);
        for (head, want) in [
            ("GET http://a.b/ HTTP/1.1", Refusal::MethodNotAllowed),
            ("POST / HTTP/1.1\r\nHost: a.b", Refusal::MethodNotAllowed),
            ("connect a.b:443 HTTP/1.1", Refusal::MethodNotAllowed),
            ("CONNECT a.b:443 HTTP/1.0", Refusal::Malformed),
            ("CONNECT a.b:443 HTTP/2", Refusal::Malformed),
            ("CONNECT a.b HTTP/1.1", Refusal::Malformed),
            ("CONNECT a.b: HTTP/1.1", Refusal::Malformed),
            ("CONNECT a.b:0 HTTP/1.1", Refusal::Malformed),
            ("CONNECT a.b:+443 HTTP/1.1", Refusal::Malformed),
            ("CONNECT a.b:99999 HTTP/1.1", Refusal::Malformed),
            ("CONNECT :443 HTTP/1.1", Refusal::Malformed),
            ("CONNECT  a.b:443 HTTP/1.1", Refusal::Malformed),
            ("CONNECT a.b:443 HTTP/1.1 extra", Refusal::Malformed),
            ("CONNECT a.b:443", Refusal::Malformed),
            ("", Refusal::Malformed),
            ("\u{e9}T a.b:443 HTTP/1.1", Refusal::Malformed),
            ("CONNECT \u{e9}.b:443 HTTP/1.1", Refusal::Malformed),
            ("CONNECT a\x1bb:443 HTTP/1.1", Refusal::Malformed),
            ("CONNECT a/b:443 HTTP/1.1", Refusal::Malformed),
        ] {
            assert_eq!(parse(head), Err(want), "{head:?}");
        }
        assert_eq!(
            parse_head(b"CONNECT a\xff:443 HTTP/1.1"),
            Err(Refusal::Malformed)
        );
    }

    #[test]
    fn refusals_map_to_the_documented_statuses() {
        let status = |r: Refusal| r.response().map(|s| &s[..3]);
        assert_eq!(status(Refusal::Malformed), Some("400"));
        assert_eq!(status(Refusal::HeadTooLarge), Some("400"));
        assert_eq!(status(Refusal::MethodNotAllowed), Some("405"));
        assert_eq!(status(Refusal::NotAllowed), Some("403"));
        assert_eq!(status(Refusal::NonPublicAddress), Some("403"));
        assert_eq!(status(Refusal::ResolveFailed), Some("502"));
        assert_eq!(status(Refusal::ConnectFailed), Some("502"));
        assert_eq!(status(Refusal::ResolveTimeout), Some("504"));
        assert_eq!(status(Refusal::ConnectTimeout), Some("504"));
        assert_eq!(status(Refusal::HeadTimeout), None);
    }
}
