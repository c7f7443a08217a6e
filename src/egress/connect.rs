//! One session's CONNECT proxy at work: the accept loop, and for each connection the bounded
//! read of its request head, the allow-list and address checks, then the tunnel or the
//! refusal's response.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UnixListener, UnixStream};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::{AllowedHost, Inner, MAX_HEAD_BYTES, MAX_TUNNELS, is_public};

/// How long an accept loop pauses after a failed `accept`, so a persistent failure does not spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// How long, and how much, a refused client's remaining input is read before the close (see
/// `linger`).
const LINGER_TIME: Duration = Duration::from_secs(2);
const LINGER_BYTES: usize = 64 * 1024;

/// Serves the session's connections until `stop`, at most [`MAX_TUNNELS`] at once, then
/// aborts the tunnels still open.
pub(super) async fn accept_loop(
    inner: Arc<Inner>,
    listener: UnixListener,
    stop: CancellationToken,
) {
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
