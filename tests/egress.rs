//! The egress proxy (`agent.sandbox.egressAllowHosts`) driven over its Unix socket exactly as
//! the sandbox's relay reaches it: one CONNECT per connection, judged against the allow-list
//! and the addresses its host resolves to. Everything stays on loopback: names the tests allow
//! resolve to `localhost` (the system resolver, which reads `/etc/hosts`) or, through the
//! explicit test constructor, to an echo server on `127.0.0.1:0`.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use air_friends::egress::{EgressProxy, EgressSession, EgressTimeouts, PROXY_SOCKET_NAME, Resolve};
use async_trait::async_trait;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, UnixStream};

/// A resolver that answers from a fixed map and records every name it was asked for.
#[derive(Default)]
struct Recorded {
    names: HashMap<String, SocketAddr>,
    asked: Mutex<Vec<String>>,
}

#[async_trait]
impl Resolve for Recorded {
    async fn resolve(&self, host: &str, _port: u16) -> std::io::Result<Vec<SocketAddr>> {
        self.asked.lock().unwrap().push(host.to_owned());
        self.names
            .get(host)
            .map(|addr| vec![*addr])
            .ok_or_else(|| std::io::Error::other("no such name"))
    }
}

/// A TCP server on loopback that echoes every connection back, and counts connections.
async fn echo_server() -> (SocketAddr, Arc<Mutex<usize>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(Mutex::new(0));
    let count = accepted.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            *count.lock().unwrap() += 1;
            tokio::spawn(async move {
                let (mut read, mut write) = stream.split();
                let _ = tokio::io::copy(&mut read, &mut write).await;
            });
        }
    });
    (addr, accepted)
}

/// A private (0700) session folder and the proxy serving it.
fn serve(proxy: &EgressProxy) -> (tempfile::TempDir, EgressSession) {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let session = proxy.serve_session(dir.path()).unwrap();
    assert_eq!(session.socket_path(), dir.path().join(PROXY_SOCKET_NAME));
    (dir, session)
}

fn hosts(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}

/// Sends `request` on a new connection and reads until the proxy closes it (bounded).
async fn exchange(socket: &Path, request: &[u8]) -> String {
    let mut stream = UnixStream::connect(socket).await.unwrap();
    stream.write_all(request).await.unwrap();
    let mut reply = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut reply))
        .await
        .expect("the proxy answers and closes")
        .unwrap();
    String::from_utf8_lossy(&reply).into_owned()
}

/// Reads the proxy's response head (through the blank line).
async fn read_response_head(stream: &mut UnixStream) -> String {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        let n = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut byte))
            .await
            .expect("a response head")
            .unwrap();
        assert_eq!(n, 1, "closed before the end of the head: {head:?}");
        head.push(byte[0]);
    }
    String::from_utf8(head).unwrap()
}

#[tokio::test]
async fn a_host_not_on_the_list_is_refused_before_any_resolution() {
    let (echo, accepted) = echo_server().await;
    let resolver = Arc::new(Recorded {
        names: HashMap::from([("evil.example".to_owned(), echo)]),
        ..Recorded::default()
    });
    let proxy =
        EgressProxy::unscreened_for_tests(&hosts(&["api.example.com"]), resolver.clone()).unwrap();
    let (_dir, session) = serve(&proxy);
    for target in [
        "evil.example:443",
        "api.example.com:8443",
        "[::1]:443",
        "127.0.0.1:443",
    ] {
        let reply = exchange(
            session.socket_path(),
            format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").as_bytes(),
        )
        .await;
        assert!(reply.starts_with("HTTP/1.1 403 "), "{target}: {reply:?}");
    }
    assert!(
        resolver.asked.lock().unwrap().is_empty(),
        "unlisted names were resolved"
    );
    assert_eq!(*accepted.lock().unwrap(), 0, "a refused target was reached");
}

#[tokio::test]
async fn an_allowed_name_that_resolves_to_loopback_is_refused() {
    let (_echo, accepted) = echo_server().await;
    let proxy = EgressProxy::new(&hosts(&["localhost", "localhost:8443"])).unwrap();
    let (_dir, session) = serve(&proxy);
    for target in ["localhost:443", "LOCALHOST:8443"] {
        let reply = exchange(
            session.socket_path(),
            format!("CONNECT {target} HTTP/1.1\r\n\r\n").as_bytes(),
        )
        .await;
        assert!(reply.starts_with("HTTP/1.1 403 "), "{target}: {reply:?}");
    }
    assert_eq!(*accepted.lock().unwrap(), 0);
}

#[tokio::test]
async fn an_allowed_name_is_tunnelled_and_bytes_flow_both_ways() {
    let (echo, accepted) = echo_server().await;
    let resolver = Arc::new(Recorded {
        names: HashMap::from([("api.example.com".to_owned(), echo)]),
        ..Recorded::default()
    });
    let proxy =
        EgressProxy::unscreened_for_tests(&hosts(&["api.example.com"]), resolver.clone()).unwrap();
    let (_dir, session) = serve(&proxy);

    let mut stream = UnixStream::connect(session.socket_path()).await.unwrap();
    stream
        .write_all(b"CONNECT api.example.com:443 HTTP/1.1\r\nHost: api.example.com:443\r\n\r\n")
        .await
        .unwrap();
    let head = read_response_head(&mut stream).await;
    assert_eq!(head, "HTTP/1.1 200 Connection Established\r\n\r\n");
    let payload: Vec<u8> = (0..64 * 1024).map(|i| (i % 251) as u8).collect();
    stream.write_all(&payload).await.unwrap();
    let mut back = vec![0u8; payload.len()];
    tokio::time::timeout(Duration::from_secs(10), stream.read_exact(&mut back))
        .await
        .expect("the echo comes back")
        .unwrap();
    assert_eq!(back, payload);
    stream.shutdown().await.unwrap();
    let mut rest = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut rest))
        .await
        .expect("a half-close reaches the host and its close comes back")
        .unwrap();
    assert!(rest.is_empty());
    assert_eq!(*resolver.asked.lock().unwrap(), ["api.example.com"]);
    assert_eq!(*accepted.lock().unwrap(), 1);
}

#[tokio::test]
async fn bytes_sent_right_after_the_head_reach_the_host() {
    let (echo, _) = echo_server().await;
    let resolver = Arc::new(Recorded {
        names: HashMap::from([("api.example.com".to_owned(), echo)]),
        ..Recorded::default()
    });
    let proxy = EgressProxy::unscreened_for_tests(&hosts(&["api.example.com"]), resolver).unwrap();
    let (_dir, session) = serve(&proxy);
    let mut stream = UnixStream::connect(session.socket_path()).await.unwrap();
    stream
        .write_all(b"CONNECT api.example.com:443 HTTP/1.1\r\n\r\nearly-hello")
        .await
        .unwrap();
    assert!(
        read_response_head(&mut stream)
            .await
            .starts_with("HTTP/1.1 200 ")
    );
    let mut back = [0u8; 11];
    tokio::time::timeout(Duration::from_secs(10), stream.read_exact(&mut back))
        .await
        .expect("the early bytes are echoed")
        .unwrap();
    assert_eq!(&back, b"early-hello");
}

#[tokio::test]
async fn methods_other_than_connect_get_405() {
    let proxy = EgressProxy::new(&hosts(&["api.example.com"])).unwrap();
    let (_dir, session) = serve(&proxy);
    for request in [
        "GET http://api.example.com/ HTTP/1.1\r\nHost: api.example.com\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: api.example.com\r\nContent-Length: 0\r\n\r\n",
    ] {
        let reply = exchange(session.socket_path(), request.as_bytes()).await;
        assert!(reply.starts_with("HTTP/1.1 405 "), "{request:?}: {reply:?}");
    }
}

#[tokio::test]
async fn a_head_that_never_ends_is_closed_after_the_timeout() {
    let head_timeout = Duration::from_millis(400);
    let proxy = EgressProxy::new(&hosts(&["api.example.com"]))
        .unwrap()
        .with_timeouts(EgressTimeouts {
            head: head_timeout,
            ..EgressTimeouts::default()
        });
    let (_dir, session) = serve(&proxy);
    let started = Instant::now();
    let reply = exchange(
        session.socket_path(),
        b"CONNECT api.example.com:443 HTTP/1.1\r\n",
    )
    .await;
    assert!(
        started.elapsed() >= head_timeout,
        "closed before the timeout"
    );
    assert_eq!(reply, "", "nothing is answered to an unfinished head");
}

#[tokio::test]
async fn an_oversized_or_malformed_head_gets_400() {
    let proxy = EgressProxy::new(&hosts(&["api.example.com"])).unwrap();
    let (_dir, session) = serve(&proxy);
    let mut oversized = b"CONNECT api.example.com:443 HTTP/1.1\r\n".to_vec();
    while oversized.len() <= 9 * 1024 {
        oversized.extend_from_slice(b"X-Padding: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n");
    }
    let reply = exchange(session.socket_path(), &oversized).await;
    assert!(reply.starts_with("HTTP/1.1 400 "), "{reply:?}");
    let reply = exchange(
        session.socket_path(),
        b"CONNECT api.example.com HTTP/1.1\r\n\r\n",
    )
    .await;
    assert!(reply.starts_with("HTTP/1.1 400 "), "{reply:?}");
}

#[tokio::test]
async fn closing_the_session_ends_its_tunnels_and_removes_the_socket() {
    let (echo, _) = echo_server().await;
    let resolver = Arc::new(Recorded {
        names: HashMap::from([("api.example.com".to_owned(), echo)]),
        ..Recorded::default()
    });
    let proxy = EgressProxy::unscreened_for_tests(&hosts(&["api.example.com"]), resolver).unwrap();
    let (_dir, session) = serve(&proxy);
    let socket = session.socket_path().to_path_buf();
    let mut stream = UnixStream::connect(&socket).await.unwrap();
    stream
        .write_all(b"CONNECT api.example.com:443 HTTP/1.1\r\n\r\n")
        .await
        .unwrap();
    assert!(
        read_response_head(&mut stream)
            .await
            .starts_with("HTTP/1.1 200 ")
    );
    session.close().await;
    assert!(!socket.exists(), "the socket outlived its session");
    let mut rest = Vec::new();
    let n = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut rest))
        .await
        .expect("the open tunnel is closed with the session")
        .unwrap_or(0);
    assert_eq!(n, 0);
    assert!(UnixStream::connect(&socket).await.is_err());
}

#[tokio::test]
async fn a_folder_open_to_others_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let proxy = EgressProxy::new(&hosts(&["api.example.com"])).unwrap();
    let err = proxy.serve_session(dir.path()).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::PermissionDenied);
    assert!(!dir.path().join(PROXY_SOCKET_NAME).exists());
}
