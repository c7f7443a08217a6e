//! A `stdio` MCP server: a program speaking JSON-RPC on its stdin and stdout, which the daemon
//! starts for a session on its first request — in a sandbox of its own built by the agents'
//! [`Sandbox`] for the session's workspace and socket folder, so with the agent's rules (no
//! network but the egress allow-list's, the workspace as the only writable folder, the
//! sandbox's user and limits) — and keeps as a [`Link`] until the session ends.
//!
//! Its environment is its own: `PATH`, `LANG`, the sandbox's home and proxy variables, and the
//! server's `env` (where an operator maps a secret for this server only). Nothing of the
//! agent's (its caller token, provider keys) is in it, and its own PID namespace keeps its
//! environment out of the agent's sight.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::BufReader;
use tokio::process::{Child, Command};
use tokio_util::task::TaskTracker;

use super::link::{Link, OpenError};
use crate::agent::rpc::{self, LineRead};
use crate::agent::sandbox::{Mounts, Sandbox};
use crate::config::McpServerConfig;
use crate::session::SessionContext;

/// Stderr lines of one server process that are logged (the rest is read and dropped).
const STDERR_LINES_LOGGED: usize = 200;
/// Longest stderr line logged whole.
const STDERR_LINE: usize = 2048;

/// What the daemon starts stdio servers with: the agents' sandbox and where the sessions'
/// socket folders are (when agents reach the daemon over sockets).
#[derive(Debug, Clone)]
pub struct StdioHost {
    /// The agents' sandbox (none: the servers run unconfined, as the agents do).
    pub sandbox: Sandbox,
    /// The folder holding each session's socket folder (`{root}/{session}`), bound as the
    /// agent's is; `None` when agents reach the daemon over TCP (no sandbox).
    pub socket_root: Option<PathBuf>,
    /// `PATH` for finding the program and inside the sandbox.
    pub path: String,
}

impl StdioHost {
    /// The host of a daemon whose agents run in `sandbox`, with sockets under `socket_root`,
    /// and this process's `PATH`.
    pub fn new(sandbox: Sandbox, socket_root: Option<PathBuf>) -> Self {
        StdioHost {
            sandbox,
            socket_root,
            path: std::env::var("PATH")
                .unwrap_or_else(|_| "/usr/local/bin:/usr/bin:/bin".to_owned()),
        }
    }

    /// Starts `server` for the session `session_id` of `context`.
    pub(super) fn open(
        &self,
        server: &McpServerConfig,
        session_id: &str,
        context: &SessionContext,
    ) -> Result<Link, OpenError> {
        let (program, args) = server
            .command
            .split_first()
            .ok_or_else(|| OpenError::NotStarted("no command".into()))?;
        let program = crate::command_path::resolve_command(program, Some(&self.path))
            .ok_or_else(|| OpenError::NotStarted(format!("{program:?} is not on PATH")))?;
        let workspace = context.workspace.canonicalize().map_err(|e| {
            OpenError::NotStarted(format!("the session's workspace is not there: {e}"))
        })?;
        let socket_dir = self
            .socket_root
            .as_ref()
            .map(|root| root.join(session_id))
            .filter(|dir| dir.is_dir());
        if self.socket_root.is_some() && socket_dir.is_none() {
            return Err(OpenError::NotStarted("the session has ended".into()));
        }
        let env = self.env(server, socket_dir.as_deref());
        let wrapped = self.sandbox.wrap_program(
            &program,
            args,
            &Mounts {
                workspace: &workspace,
                dm: context.origin.is_dm,
                api_socket_dir: socket_dir.as_deref(),
                staging: None,
                state: None,
            },
        );
        if !self.sandbox.is_enabled() {
            tracing::warn!(session_id, server = %server.name, "agent.sandbox.mode is none: this MCP server runs unconfined");
        }
        let mut child = Command::new(&wrapped.program)
            .args(&wrapped.args)
            .current_dir(&workspace)
            .env_clear()
            .envs(&env)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .process_group(0)
            .spawn()
            .map_err(|e| OpenError::NotStarted(e.to_string()))?;
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(OpenError::NotStarted("its stdio was not captured".into()));
        };
        let label = format!("mcp:{}:{session_id}", server.name);
        tracing::info!(session_id, server = %server.name, pid = child.id(), "mcp server started");
        let tasks = TaskTracker::new();
        tasks.spawn(log_stderr(
            BufReader::new(stderr),
            server.name.clone(),
            session_id.to_owned(),
        ));
        let (client, incoming) = rpc::connect(BufReader::new(stdout), stdin, &tasks, label.clone());
        Ok(Link::new(
            client,
            incoming,
            tasks,
            Box::new(Process(child)),
            label,
        ))
    }

    /// The server's whole environment.
    fn env(&self, server: &McpServerConfig, socket_dir: Option<&Path>) -> BTreeMap<String, String> {
        let mut env = BTreeMap::from([
            ("PATH".to_owned(), self.path.clone()),
            ("LANG".to_owned(), "C.UTF-8".to_owned()),
        ]);
        self.sandbox.adjust_env(&mut env, None);
        self.sandbox.adjust_network_env(&mut env, socket_dir);
        for (name, value) in &server.env {
            env.insert(name.clone(), value.clone());
        }
        env
    }
}

/// The server's process: killed with its process group when the link is dropped.
struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        if let Some(pid) = self.0.id().and_then(|p| i32::try_from(p).ok()) {
            let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
        }
        let _ = self.0.start_kill();
    }
}

/// Logs the first [`STDERR_LINES_LOGGED`] lines of the server's stderr, drains the rest.
async fn log_stderr<R: tokio::io::AsyncBufRead + Unpin>(
    mut reader: R,
    server: String,
    session_id: String,
) {
    let mut buf = Vec::new();
    let mut logged = 0;
    loop {
        match rpc::read_bounded_line(&mut reader, &mut buf, STDERR_LINE).await {
            Ok(LineRead::Eof) | Err(_) => break,
            Ok(LineRead::TooLong(_)) => {}
            Ok(LineRead::Line) if logged < STDERR_LINES_LOGGED => {
                logged += 1;
                let line = String::from_utf8_lossy(&buf);
                tracing::info!(session_id = %session_id, server = %server, line = %line.trim_end(), "mcp server stderr");
            }
            Ok(LineRead::Line) => {}
        }
    }
}
