//! `air-friends sandbox-init`: the first program in an agent's sandbox when the sandbox has no
//! network, relaying loopback TCP to the session's Unix socket.
//!
//! A sandboxed agent runs in a network namespace of its own (`--unshare-net`, see
//! [`super::sandbox`]): it sees only its own loopback, so neither the daemon's ops port, nor
//! other loopback services, nor any other address are reachable. The one way out is the
//! session's Unix socket, which the daemon serves (Skill API, model gateway) and the sandbox
//! binds at `/run/air-friends/api.sock`. OpenCode and the skill scripts still speak plain
//! `http://127.0.0.1:<port>`, so bubblewrap starts this command instead of the agent:
//!
//! ```text
//! air-friends sandbox-init [--as UID:GID] [--limit NAME=VALUE]... --relay 127.0.0.1:3001=/run/air-friends/api.sock [--relay ...] -- PROGRAM ARGS...
//! air-friends sandbox-init [--as UID:GID] [--limit NAME=VALUE]... [--relay ...] --check MARKER
//! ```
//!
//! Before anything else it locks itself down ([`super::lockdown`]): with `--as` (a root
//! daemon) it becomes that host user for good in a user namespace of its own, and it sets every
//! `--limit`; what it starts inherits both. With `--check MARKER` it runs no program: it
//! prints what the sandbox looks like from inside as one JSON line on stdout
//! ([`super::lockdown::CheckReport`]) and creates `MARKER`, for the daemon's start-up probe.
//!
//! It binds every listener first (loopback addresses only, so a mistaken flag can never open
//! the relay beyond the sandbox's own loopback), then runs PROGRAM with its own stdin, stdout,
//! stderr and environment, copies every accepted connection byte for byte to its socket
//! (`copy_bidirectional`: nothing is held beyond the copy buffers, so streamed responses pass
//! chunk by chunk), forwards SIGTERM, SIGINT and SIGHUP to PROGRAM and exits with its status
//! (its exit code, or 128 + the signal that killed it).
//!
//! stdout is the agent's JSON-RPC channel: this command never writes to it. Its own errors are
//! one line on stderr (which the daemon logs) and exit code 1. The relay holds no secret and
//! adds no privilege: the agent could connect to the bound socket itself; the relay only turns
//! TCP into that one connection. `tests/sandbox.rs` proves it with the real bubblewrap.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{ExitCode, ExitStatus};
use std::sync::Arc;
use std::time::Duration;

use nix::sys::signal::Signal;
use nix::unistd::Pid;
use tokio::net::{TcpListener, TcpStream, UnixStream};
use tokio::process::Child;
use tokio::signal::unix::{SignalKind, signal};
use tokio::task::JoinSet;

use super::lockdown::{self, HostUser, Limit, LockdownError};

/// How long an accept loop pauses after a failed `accept` (e.g. out of file descriptors), so a
/// persistent failure does not spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// Prefix of every line this command writes to stderr.
const PREFIX: &str = "air-friends sandbox-init";

/// The usage line, in parse errors.
const USAGE: &str = "usage: air-friends sandbox-init [--as UID:GID] [--limit NAME=VALUE]... \
                     [--relay ADDR=SOCKET]... (-- PROGRAM [ARGS]... | --check MARKER)";

/// One relay: a TCP listener inside the sandbox and the Unix socket it forwards to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Relay {
    /// Where to listen (a loopback address with a fixed port).
    pub listen: SocketAddr,
    /// The Unix socket each connection is forwarded to (absolute).
    pub socket: PathBuf,
}

/// A parsed `sandbox-init` command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InitCommand {
    /// The host user to become (`--as`, a root daemon's agents).
    pub user: Option<HostUser>,
    /// The resource limits to set (`--limit`).
    pub limits: Vec<Limit>,
    /// The relays, in command-line order.
    pub relays: Vec<Relay>,
    /// The program to run, or `--check`.
    pub run: Run,
}

/// What `sandbox-init` runs once locked down.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Run {
    /// A program and its arguments (the agent).
    Program {
        /// The program.
        program: OsString,
        /// Its arguments.
        args: Vec<OsString>,
    },
    /// The self-check ([`super::lockdown::self_check`]), creating this marker file.
    Check(PathBuf),
}

/// Why `sandbox-init` could not do its job (each is one line on stderr and exit code 1).
#[derive(Debug, thiserror::Error)]
pub enum InitError {
    /// Something other than `--relay` before `--`.
    #[error("unexpected argument {0:?} ({USAGE})")]
    UnexpectedArgument(String),
    /// `--relay` without a value.
    #[error("--relay needs a value ADDR=SOCKET ({USAGE})")]
    MissingRelayValue,
    /// A `--relay` value that is not `ADDR=SOCKET`.
    #[error("--relay {spec:?}: {reason} (expected e.g. 127.0.0.1:3001=/run/air-friends/api.sock)")]
    BadRelay {
        /// The value given.
        spec: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A listen address off loopback: the relay never listens beyond the sandbox's loopback.
    #[error(
        "--relay {spec:?}: {addr} is not a loopback address; the relay listens on loopback only"
    )]
    NotLoopback {
        /// The value given.
        spec: String,
        /// The refused address.
        addr: SocketAddr,
    },
    /// No `-- PROGRAM`.
    #[error("no program to run after `--` ({USAGE})")]
    NoProgram,
    /// A `--as` or `--limit` value that does not parse.
    #[error("{flag} {value:?} is not valid ({USAGE})")]
    BadValue {
        /// The flag.
        flag: &'static str,
        /// The value given.
        value: String,
    },
    /// Locking down failed: the agent is not started half-confined.
    #[error("{0}")]
    Lockdown(#[from] LockdownError),
    /// A listener could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The OS error.
        source: std::io::Error,
    },
    /// The program could not be started.
    #[error("cannot start {program:?}: {source}")]
    Spawn {
        /// The program.
        program: OsString,
        /// The OS error.
        source: std::io::Error,
    },
    /// The async runtime, a signal handler or waiting for the program failed.
    #[error("{what}: {source}")]
    Os {
        /// What was being done.
        what: &'static str,
        /// The OS error.
        source: std::io::Error,
    },
}

/// Parses the arguments after `sandbox-init`: at most one `--as UID:GID`, any number of
/// `--limit NAME=VALUE` and `--relay ADDR=SOCKET` (each also as `--flag=value`), then either
/// `--check MARKER` or `--`, the program and its arguments (passed untouched).
pub fn parse_args(args: &[OsString]) -> Result<InitCommand, InitError> {
    let mut command = InitCommand {
        user: None,
        limits: Vec::new(),
        relays: Vec::new(),
        run: Run::Check(PathBuf::new()),
    };
    let mut rest = args.iter();
    loop {
        let Some(arg) = rest.next() else {
            return Err(InitError::NoProgram);
        };
        let text = arg.to_string_lossy();
        if text == "--" {
            break;
        }
        let (flag, inline) = match text.split_once('=') {
            Some((flag, value)) if flag.starts_with("--") => (flag, Some(value.to_owned())),
            _ => (text.as_ref(), None),
        };
        let mut value = |missing: InitError| match &inline {
            Some(v) => Ok(v.clone()),
            None => rest
                .next()
                .map(|v| v.to_string_lossy().into_owned())
                .ok_or(missing),
        };
        let bad = |flag: &'static str, value: String| InitError::BadValue { flag, value };
        match flag {
            "--relay" => command
                .relays
                .push(parse_relay(&value(InitError::MissingRelayValue)?)?),
            "--as" if command.user.is_none() => {
                let v = value(bad("--as", String::new()))?;
                command.user = Some(HostUser::parse(&v).ok_or_else(|| bad("--as", v))?);
            }
            "--limit" => {
                let v = value(bad("--limit", String::new()))?;
                command
                    .limits
                    .push(Limit::parse(&v).ok_or_else(|| bad("--limit", v))?);
            }
            "--check" => {
                let marker = PathBuf::from(value(bad("--check", String::new()))?);
                if !marker.is_absolute() || rest.next().is_some() {
                    return Err(bad("--check", marker.display().to_string()));
                }
                command.run = Run::Check(marker);
                return Ok(command);
            }
            _ => return Err(InitError::UnexpectedArgument(text.into_owned())),
        }
    }
    let program = rest.next().ok_or(InitError::NoProgram)?.clone();
    if program.is_empty() {
        return Err(InitError::NoProgram);
    }
    command.run = Run::Program {
        program,
        args: rest.cloned().collect(),
    };
    Ok(command)
}

/// One `ADDR=SOCKET` value.
fn parse_relay(spec: &str) -> Result<Relay, InitError> {
    let bad = |reason| InitError::BadRelay {
        spec: spec.to_owned(),
        reason,
    };
    let (addr, socket) = spec.split_once('=').ok_or_else(|| bad("no `=`"))?;
    let listen: SocketAddr = addr
        .parse()
        .map_err(|_| bad("the address is not IP:PORT"))?;
    if !listen.ip().is_loopback() {
        return Err(InitError::NotLoopback {
            spec: spec.to_owned(),
            addr: listen,
        });
    }
    if listen.port() == 0 {
        return Err(bad("the port must be fixed (not 0): the agent is told it"));
    }
    let socket = PathBuf::from(socket);
    if !socket.is_absolute() {
        return Err(bad("the socket path must be absolute"));
    }
    Ok(Relay { listen, socket })
}

/// [`main`] on this process's own arguments after `air-friends sandbox-init`, untouched by
/// clap (which would drop a leading `--` and so take the program for a flag).
pub fn main_from_argv() -> ExitCode {
    // No global option exists, so the subcommand is always the first argument.
    let argv: Vec<OsString> = std::env::args_os().collect();
    match argv.get(1) {
        Some(sub) if sub == "sandbox-init" => main(&argv[2..]),
        _ => {
            eprintln!("{PREFIX}: not started as `air-friends sandbox-init ...`");
            ExitCode::FAILURE
        }
    }
}

/// `air-friends sandbox-init ARGS`: parses, locks down (while still one thread), runs on a
/// current-thread runtime, and returns the program's exit status (1 with one line on stderr
/// for this command's own errors).
pub fn main(args: &[OsString]) -> ExitCode {
    let result = parse_args(args).and_then(|command| {
        lock_down(&command)?;
        if let Run::Check(marker) = &command.run {
            return check(marker);
        }
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|source| InitError::Os {
                what: "cannot start the async runtime",
                source,
            })?
            .block_on(run(command))
    });
    match result {
        Ok(status) => ExitCode::from(exit_code(status)),
        Err(e) => {
            eprintln!("{PREFIX}: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Becomes the agent user when asked (in a user namespace of its own), sets the limits, takes a
/// new session keyring and loads the seccomp filter.
fn lock_down(command: &InitCommand) -> Result<(), InitError> {
    if let Some(user) = command.user {
        lockdown::drop_to(user)?;
        lockdown::own_user_namespace()?;
    }
    lockdown::apply_limits(&command.limits)?;
    lockdown::seal()?;
    Ok(())
}

/// `--check`: the report on stdout as one JSON line; exit status 0 when it could be made.
fn check(marker: &Path) -> Result<ExitStatus, InitError> {
    let report = lockdown::self_check(marker).map_err(|source| InitError::Os {
        what: "cannot run the self-check",
        source,
    })?;
    let line = serde_json::to_string(&report).map_err(|e| InitError::Os {
        what: "cannot write the self-check report",
        source: e.into(),
    })?;
    println!("{line}");
    Ok(ExitStatus::from_raw(0))
}

/// Binds every relay, runs the program, relays until it exits, and returns its status.
pub async fn run(command: InitCommand) -> Result<ExitStatus, InitError> {
    let Run::Program { program, args } = &command.run else {
        return Err(InitError::NoProgram);
    };
    let mut listeners = Vec::with_capacity(command.relays.len());
    for relay in &command.relays {
        let listener = TcpListener::bind(relay.listen)
            .await
            .map_err(|source| InitError::Bind {
                addr: relay.listen,
                source,
            })?;
        listeners.push((listener, Arc::<Path>::from(relay.socket.as_path())));
    }
    // Handlers before the child exists, so no signal sent meanwhile takes the default action.
    let handler = |kind: SignalKind| {
        signal(kind).map_err(|source| InitError::Os {
            what: "cannot install a signal handler",
            source,
        })
    };
    let mut term = handler(SignalKind::terminate())?;
    let mut int = handler(SignalKind::interrupt())?;
    let mut hup = handler(SignalKind::hangup())?;
    let mut child = tokio::process::Command::new(program)
        .args(args)
        .spawn()
        .map_err(|source| InitError::Spawn {
            program: program.clone(),
            source,
        })?;
    // Dropped (and so aborted) when the program has exited: the sandbox ends with it.
    let mut relays = JoinSet::new();
    for (listener, socket) in listeners {
        relays.spawn(accept_loop(listener, socket));
    }
    loop {
        tokio::select! {
            status = child.wait() => {
                return status.map_err(|source| InitError::Os { what: "cannot wait for the program", source });
            }
            _ = term.recv() => forward(&child, Signal::SIGTERM),
            _ = int.recv() => forward(&child, Signal::SIGINT),
            _ = hup.recv() => forward(&child, Signal::SIGHUP),
        }
    }
}

/// Sends `sig` to the program while it has not been reaped (so its pid cannot be reused yet).
fn forward(child: &Child, sig: Signal) {
    let Some(pid) = child.id().and_then(|p| i32::try_from(p).ok()) else {
        return;
    };
    if let Err(e) = nix::sys::signal::kill(Pid::from_raw(pid), sig)
        && e != nix::errno::Errno::ESRCH
    {
        eprintln!("{PREFIX}: error: cannot forward {sig} to the program: {e}");
    }
}

/// Accepts connections on `listener` and relays each to `socket`, until aborted.
async fn accept_loop(listener: TcpListener, socket: Arc<Path>) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((tcp, _peer)) => {
                    connections.spawn(relay_connection(tcp, socket.clone()));
                }
                Err(e) => {
                    eprintln!("{PREFIX}: error: accepting a connection failed: {e}");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

/// Copies one TCP connection to a new connection on `socket` and back, half-closes included.
/// When the socket cannot be reached the TCP connection is closed and the failure logged once.
async fn relay_connection(mut tcp: TcpStream, socket: Arc<Path>) {
    // Streamed responses (SSE) are small writes: do not hold them back for coalescing.
    let _ = tcp.set_nodelay(true);
    let mut unix = match UnixStream::connect(&socket).await {
        Ok(unix) => unix,
        Err(e) => {
            eprintln!(
                "{PREFIX}: error: cannot reach {}: {e}; connection closed",
                socket.display()
            );
            return;
        }
    };
    // A reset by either side just ends the connection; the client sees it close.
    let _ = tokio::io::copy_bidirectional(&mut tcp, &mut unix).await;
}

/// The exit code that reports `status`: its own code, or 128 + the signal that killed it.
fn exit_code(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code & 0xff).unwrap_or(1),
        (None, Some(sig)) => u8::try_from((128 + sig) & 0xff).unwrap_or(1),
        (None, None) => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<OsString> {
        list.iter().map(OsString::from).collect()
    }

    #[test]
    fn relays_program_and_its_arguments_are_parsed_in_both_flag_spellings() {
        let cmd = parse_args(&args(&[
            "--relay",
            "127.0.0.1:3001=/run/air-friends/api.sock",
            "--relay=[::1]:3002=/run/other.sock",
            "--",
            "/opt/agent",
            "acp",
            "--relay",
            "--",
        ]))
        .unwrap();
        assert_eq!(
            cmd.relays,
            vec![
                Relay {
                    listen: "127.0.0.1:3001".parse().unwrap(),
                    socket: "/run/air-friends/api.sock".into(),
                },
                Relay {
                    listen: "[::1]:3002".parse().unwrap(),
                    socket: "/run/other.sock".into(),
                },
            ]
        );
        assert_eq!(
            cmd.run,
            Run::Program {
                program: "/opt/agent".into(),
                args: args(&["acp", "--relay", "--"]),
            },
            "everything after the program is its own"
        );
        let bare = parse_args(&args(&["--", "/usr/bin/true"])).unwrap();
        assert!(bare.relays.is_empty() && bare.user.is_none() && bare.limits.is_empty());
        assert_eq!(
            bare.run,
            Run::Program {
                program: "/usr/bin/true".into(),
                args: Vec::new(),
            }
        );
    }

    #[test]
    fn the_host_user_limits_and_the_check_are_parsed() {
        let cmd = parse_args(&args(&[
            "--as",
            "998:997",
            "--limit=nproc=256",
            "--limit",
            "fsize=1024",
            "--relay",
            "127.0.0.1:3001=/s",
            "--check",
            "/ws/marker",
        ]))
        .unwrap();
        assert_eq!(cmd.user, Some(HostUser { uid: 998, gid: 997 }));
        assert_eq!(cmd.limits, [Limit::Processes(256), Limit::FileBytes(1024)]);
        assert_eq!(cmd.run, Run::Check("/ws/marker".into()));
        let cases: &[(&[&str], &str)] = &[
            (&["--as", "0:0", "--", "p"], "--as \"0:0\" is not valid"),
            (&["--as", "1:1", "--as", "2:2", "--", "p"], "unexpected"),
            (&["--limit", "cpu=1", "--", "p"], "--limit \"cpu=1\""),
            (&["--check", "marker"], "--check"),
            (&["--check", "/m", "--", "p"], "--check"),
            (&["--as"], "--as"),
        ];
        for (line, want) in cases {
            let err = parse_args(&args(line)).unwrap_err();
            assert!(err.to_string().contains(want), "{line:?}: {err}");
        }
    }

    #[test]
    fn non_loopback_listen_addresses_are_refused() {
        for addr in ["0.0.0.0:3001", "10.0.0.5:3001", "[::]:3001", "192.0.2.1:80"] {
            let spec = format!("{addr}=/run/air-friends/api.sock");
            let err = parse_args(&args(&["--relay", &spec, "--", "/usr/bin/true"])).unwrap_err();
            assert!(
                matches!(err, InitError::NotLoopback { .. }),
                "{addr}: {err}"
            );
            assert!(err.to_string().contains("loopback only"), "{err}");
        }
        // All of 127.0.0.0/8 is loopback.
        assert!(parse_args(&args(&["--relay", "127.0.0.2:80=/s", "--", "p"])).is_ok());
    }

    #[test]
    fn malformed_command_lines_are_refused_with_the_reason() {
        let cases: &[(&[&str], &str)] = &[
            (&["--relay", "127.0.0.1:3001=/s"], "no program"),
            (&["--relay", "127.0.0.1:3001=/s", "--"], "no program"),
            (&["--", ""], "no program"),
            (&[], "no program"),
            (&["--relay"], "needs a value"),
            (&["--relay", "127.0.0.1:3001", "--", "p"], "no `=`"),
            (&["--relay", "localhost:3001=/s", "--", "p"], "not IP:PORT"),
            (&["--relay", "127.0.0.1=/s", "--", "p"], "not IP:PORT"),
            (&["--relay", "127.0.0.1:0=/s", "--", "p"], "must be fixed"),
            (
                &["--relay", "127.0.0.1:3001=api.sock", "--", "p"],
                "absolute",
            ),
            (&["--relay", "127.0.0.1:3001=", "--", "p"], "absolute"),
            (&["--verbose", "--", "p"], "unexpected argument"),
            (&["/usr/bin/true"], "unexpected argument"),
        ];
        for (line, want) in cases {
            let err = parse_args(&args(line)).unwrap_err();
            let text = err.to_string();
            assert!(text.contains(want), "{line:?}: {text}");
            assert!(!text.contains('\n'), "one line: {text}");
        }
    }

    #[test]
    fn exit_codes_report_the_programs_code_or_128_plus_its_signal() {
        assert_eq!(exit_code(ExitStatus::from_raw(0)), 0);
        assert_eq!(exit_code(ExitStatus::from_raw(7 << 8)), 7);
        assert_eq!(exit_code(ExitStatus::from_raw(255 << 8)), 255);
        // A raw wait status below 128 is "killed by that signal".
        assert_eq!(exit_code(ExitStatus::from_raw(Signal::SIGTERM as i32)), 143);
        assert_eq!(exit_code(ExitStatus::from_raw(Signal::SIGKILL as i32)), 137);
    }

    #[tokio::test]
    async fn a_relay_copies_bytes_both_ways_and_a_dead_socket_closes_the_connection() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let dir = tempfile::tempdir().unwrap();
        let path: Arc<Path> = Arc::from(dir.path().join("api.sock").as_path());
        let unix = tokio::net::UnixListener::bind(&path).unwrap();
        let tcp = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = tcp.local_addr().unwrap();
        let relay = tokio::spawn(accept_loop(tcp, path.clone()));

        let server = tokio::spawn(async move {
            let (mut s, _) = unix.accept().await.unwrap();
            let mut got = Vec::new();
            s.read_to_end(&mut got).await.unwrap();
            s.write_all(b"pong:").await.unwrap();
            s.write_all(&got).await.unwrap();
            // Dropping `unix` here makes the next connect fail.
        });
        let mut c = TcpStream::connect(addr).await.unwrap();
        c.write_all(b"ping\0\xff").await.unwrap();
        c.shutdown().await.unwrap();
        let mut back = Vec::new();
        c.read_to_end(&mut back).await.unwrap();
        assert_eq!(back, b"pong:ping\0\xff");
        server.await.unwrap();

        std::fs::remove_file(&path).unwrap();
        let mut c = TcpStream::connect(addr).await.unwrap();
        let mut back = Vec::new();
        let n = tokio::time::timeout(Duration::from_secs(5), c.read_to_end(&mut back))
            .await
            .expect("the relay closes a connection it cannot forward")
            .unwrap_or(0);
        assert_eq!(n, 0);
        relay.abort();
    }
}
