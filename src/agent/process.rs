//! The agent child process: spawned in its own process group with a clean environment, its
//! stdio wired to the JSON-RPC connection and its stderr drained to the log, and stopped in
//! bounded time (close stdin → SIGTERM → SIGKILL to the whole group) so neither zombies nor
//! orphaned grandchildren (shell tools the agent started) survive a session.
//!
//! Agents may start tools in process groups of their own (OpenCode runs each bash command in a
//! new group), out of reach of the group kill. So before the agent is told to stop, the runner
//! takes a [`snapshot`](AgentProcess::snapshot_descendants) of its process tree from `/proc`;
//! after the agent is gone, every snapshotted process still alive (same pid *and* start time, so
//! a reused pid is never hit) is killed, together with the group it leads.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::BufReader;
use tokio::process::{Child, Command};
use tokio::sync::mpsc;
use tokio_util::task::TaskTracker;

use super::rpc::{self, Incoming, RpcClient};
use super::sandbox::cgroup::AgentCgroup;

/// Longest agent stderr line logged (longer lines are cut).
const MAX_STDERR_LINE: usize = 16 * 1024;

/// Agent stderr lines that follow each other this closely are one log record.
const STDERR_BURST: Duration = Duration::from_millis(30);

/// Most lines in one agent stderr record.
const MAX_STDERR_RECORD_LINES: usize = 64;

/// Why the agent could not be started.
#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    /// The executable could not be run.
    #[error("cannot start agent command {command:?}: {source}")]
    Spawn {
        /// The configured command.
        command: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The workspace folder is missing.
    #[error("workspace {0} does not exist")]
    NoWorkspace(PathBuf),
}

/// What to run.
#[derive(Debug, Clone)]
pub struct Launch<'a> {
    /// Executable (bubblewrap when the agent is sandboxed).
    pub program: &'a Path,
    /// Arguments after the program.
    pub args: &'a [OsString],
    /// Working directory (the user workspace).
    pub cwd: &'a Path,
    /// The complete environment (nothing else is inherited).
    pub env: &'a BTreeMap<String, String>,
    /// Label for log lines (our session id).
    pub label: &'a str,
}

/// A running agent with its JSON-RPC connection.
pub struct AgentProcess {
    child: Child,
    pid: Option<u32>,
    tasks: TaskTracker,
    label: String,
    /// Descendants seen by the last snapshot: (pid, start time in clock ticks).
    descendants: Vec<(i32, u64)>,
    /// The cgroup everything the agent runs is in, when agents get one.
    cgroup: Option<AgentCgroup>,
}

impl std::fmt::Debug for AgentProcess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentProcess")
            .field("pid", &self.pid)
            .field("label", &self.label)
            .finish()
    }
}

impl AgentProcess {
    /// Spawns the agent and connects JSON-RPC to its stdio.
    pub fn spawn(
        launch: &Launch<'_>,
    ) -> Result<(AgentProcess, RpcClient, mpsc::Receiver<Incoming>), SpawnError> {
        Self::spawn_in(launch, None)
    }

    /// [`spawn`](Self::spawn) inside `cgroup`, joined before the program executes; the group
    /// is removed (with anything left in it) when the agent is shut down.
    pub fn spawn_in(
        launch: &Launch<'_>,
        cgroup: Option<AgentCgroup>,
    ) -> Result<(AgentProcess, RpcClient, mpsc::Receiver<Incoming>), SpawnError> {
        if !launch.cwd.is_dir() {
            return Err(SpawnError::NoWorkspace(launch.cwd.to_path_buf()));
        }
        let mut cmd = Command::new(launch.program);
        cmd.args(launch.args)
            .current_dir(launch.cwd)
            .env_clear()
            .envs(launch.env)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .process_group(0);
        if let Some(group) = &cgroup {
            super::sys::join_cgroups_at_exec(&mut cmd, group.procs_fds());
        }
        let mut child = cmd.spawn().map_err(|source| SpawnError::Spawn {
            command: launch.program.display().to_string(),
            source,
        })?;
        let pid = child.id();
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            // Unreachable with piped stdio; fail loudly rather than hang.
            return Err(SpawnError::Spawn {
                command: launch.program.display().to_string(),
                source: std::io::Error::other("child stdio not captured"),
            });
        };
        let tasks = TaskTracker::new();
        let label = launch.label.to_owned();
        tasks.spawn(drain_stderr(BufReader::new(stderr), label.clone()));
        let (client, incoming) = rpc::connect(BufReader::new(stdout), stdin, &tasks, label.clone());
        tracing::info!(session_id = %label, pid, program = %launch.program.display(), "agent started");
        Ok((
            AgentProcess {
                child,
                pid,
                tasks,
                label,
                descendants: Vec::new(),
                cgroup,
            },
            client,
            incoming,
        ))
    }

    /// The OS process id (while running).
    pub fn pid(&self) -> Option<u32> {
        self.pid
    }

    /// Whether the process has exited (its status is collected then; never blocks).
    pub fn has_exited(&mut self) -> bool {
        !matches!(self.child.try_wait(), Ok(None))
    }

    /// Records the agent's current descendants (any process group), so [`shutdown`](Self::shutdown)
    /// can remove those that outlive it. Call while the agent still runs, just before stopping it.
    pub fn snapshot_descendants(&mut self) {
        if let Some(pid) = self.pid.and_then(|p| i32::try_from(p).ok()) {
            self.descendants = descendants_of(pid);
        }
    }

    /// Stops the agent: the caller has dropped every `RpcClient` (closing stdin); wait up to
    /// `grace` for a voluntary exit, then SIGTERM the process group, wait `grace` again, then
    /// SIGKILL it. Leftover members of the group are always SIGKILLed at the end. Returns the
    /// exit status when one was collected.
    pub async fn shutdown(mut self, grace: Duration) -> Option<ExitStatus> {
        let mut status = wait_for(&mut self.child, grace).await;
        if status.is_none() {
            tracing::debug!(session_id = %self.label, "agent ignored stdin EOF; sending SIGTERM");
            self.signal_group(Signal::SIGTERM);
            status = wait_for(&mut self.child, grace).await;
        }
        if status.is_none() {
            tracing::warn!(session_id = %self.label, "agent ignored SIGTERM; sending SIGKILL");
            self.signal_group(Signal::SIGKILL);
            status = self.child.wait().await.ok();
        }
        // Grandchildren (e.g. a backgrounded shell command) share the group: remove them too.
        self.signal_group(Signal::SIGKILL);
        // Descendants in groups of their own (tools the agent started with setsid/setpgid).
        for (pid, started) in std::mem::take(&mut self.descendants) {
            if let Some((pgrp, now_started)) = stat_group_and_start(pid)
                && now_started == started
            {
                tracing::debug!(session_id = %self.label, pid, "killing a process the agent left behind");
                if pgrp == pid {
                    let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
                }
                let _ = nix::sys::signal::kill(Pid::from_raw(pid), Signal::SIGKILL);
            }
        }
        self.remove_cgroup().await;
        self.tasks.close();
        if tokio::time::timeout(grace, self.tasks.wait())
            .await
            .is_err()
        {
            tracing::warn!(session_id = %self.label, "agent stdio tasks still running after exit");
        }
        tracing::info!(
            session_id = %self.label,
            exit = ?status.and_then(|s| s.code()),
            "agent stopped"
        );
        status
    }

    /// How many of the agent's processes its cgroup's memory limit has killed (0 without one).
    /// Blocking (reads cgroupfs); cheap enough to call where an agent is found dead.
    pub fn memory_kills(&self) -> u64 {
        self.cgroup.as_ref().map_or(0, AgentCgroup::memory_kills)
    }

    /// Kills what is left in the agent's cgroup and removes it (on the blocking pool),
    /// reporting kills by its memory limit.
    async fn remove_cgroup(&mut self) {
        let Some(group) = self.cgroup.take() else {
            return;
        };
        let label = self.label.clone();
        let removed = tokio::task::spawn_blocking(move || {
            let kills = group.memory_kills();
            if kills > 0 {
                tracing::warn!(session_id = %label, kills, cause = "memory_limit", "the agent's sandbox reached its memory limit (agent.sandbox.limits.maxMemoryMb)");
            }
            group.remove()
        })
        .await;
        match removed {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::warn!(session_id = %self.label, error = %e, "the agent's cgroup was not removed")
            }
            Err(e) => {
                tracing::warn!(session_id = %self.label, error = %e, "removing the agent's cgroup failed")
            }
        }
    }

    fn signal_group(&self, signal: Signal) {
        let Some(pid) = self.pid.and_then(|p| i32::try_from(p).ok()) else {
            return;
        };
        match killpg(Pid::from_raw(pid), signal) {
            Ok(()) | Err(nix::errno::Errno::ESRCH) => {}
            Err(e) => {
                tracing::warn!(session_id = %self.label, error = %e, "signalling the agent failed")
            }
        }
    }
}

/// `(ppid, pgrp, starttime)` from `/proc/<pid>/stat` (fields counted after the last `)`, since
/// the command name may contain spaces and parentheses).
fn stat_fields(pid: i32) -> Option<(i32, i32, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let fields: Vec<&str> = stat[stat.rfind(')')? + 1..].split_whitespace().collect();
    // After the name: state(0) ppid(1) pgrp(2) … starttime(19).
    Some((
        fields.get(1)?.parse().ok()?,
        fields.get(2)?.parse().ok()?,
        fields.get(19)?.parse().ok()?,
    ))
}

fn stat_group_and_start(pid: i32) -> Option<(i32, u64)> {
    stat_fields(pid).map(|(_, pgrp, start)| (pgrp, start))
}

/// Ends (SIGKILL) every process an agent started that still runs, and any orphaned to a
/// wrapper: all descendants of the spawned program `root` but the chain `depth` levels down to
/// the agent (3 in the sandbox: bubblewrap, its init, `sandbox-init`; 0 without). Called when
/// a turn ends, so nothing of one turn acts in the next. Blocking (reads `/proc`): call off
/// the async workers. Returns how many were ended.
pub fn end_leftovers_of(root: u32, depth: usize, label: &str) -> usize {
    let Ok(root) = i32::try_from(root) else {
        return 0;
    };
    let mut ended = 0;
    for (pid, started) in leftovers_in(&process_table(), root, depth) {
        // Same pid *and* start time: a reused pid is never hit.
        if stat_group_and_start(pid).is_some_and(|(_, now)| now == started)
            && nix::sys::signal::kill(Pid::from_raw(pid), Signal::SIGKILL).is_ok()
        {
            ended += 1;
        }
    }
    if ended > 0 {
        tracing::info!(session_id = %label, ended, "ended processes the agent left running after its turn");
    }
    ended
}

/// Every process on the machine: (pid, parent pid, start time).
fn process_table() -> Vec<(i32, i32, u64)> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|pid| stat_fields(pid).map(|(ppid, _, start)| (pid, ppid, start)))
        .collect()
}

/// Every process descended from `root`, with its start time.
fn descendants_of(root: i32) -> Vec<(i32, u64)> {
    descendants_in(&process_table(), root)
}

fn descendants_in(procs: &[(i32, i32, u64)], root: i32) -> Vec<(i32, u64)> {
    let mut found = Vec::new();
    let mut frontier = vec![root];
    while let Some(parent) = frontier.pop() {
        for &(pid, ppid, start) in procs {
            if ppid == parent && !found.iter().any(|(p, _)| *p == pid) {
                found.push((pid, start));
                frontier.push(pid);
            }
        }
    }
    found
}

/// The descendants of `root` that are not on the chain from `root` down `depth` levels, each
/// level its parent's oldest child (the sandbox's wrappers, then the agent itself): what the
/// agent started, and what was orphaned to a wrapper.
fn leftovers_in(procs: &[(i32, i32, u64)], root: i32, depth: usize) -> Vec<(i32, u64)> {
    let mut chain = vec![root];
    for _ in 0..depth {
        let parent = *chain.last().unwrap_or(&root);
        let oldest = procs
            .iter()
            .filter(|(_, ppid, _)| *ppid == parent)
            .min_by_key(|(pid, _, start)| (*start, *pid));
        match oldest {
            Some(&(pid, _, _)) => chain.push(pid),
            None => break,
        }
    }
    // The agent's own descendants are among them, whatever their depth.
    descendants_in(procs, root)
        .into_iter()
        .filter(|(pid, _)| !chain.contains(pid))
        .collect()
}

async fn wait_for(child: &mut Child, grace: Duration) -> Option<ExitStatus> {
    match tokio::time::timeout(grace, child.wait()).await {
        Ok(Ok(status)) => Some(status),
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "waiting for the agent failed");
            None
        }
        Err(_) => None,
    }
}

/// Logs the agent's stderr. Lines that follow each other within [`STDERR_BURST`] (a stack
/// trace, a multi-line error report) become one record — the cause in one place — of at most
/// [`MAX_STDERR_RECORD_LINES`] lines; a record mentioning an error, panic or fatal condition is
/// a warning, anything else debug.
async fn drain_stderr<R: tokio::io::AsyncBufRead + Unpin>(mut reader: R, label: String) {
    let (tx, rx) = mpsc::channel::<String>(MAX_STDERR_RECORD_LINES);
    let record_label = label.clone();
    let read = async move {
        let mut buf = Vec::new();
        loop {
            match rpc::read_bounded_line(&mut reader, &mut buf, MAX_STDERR_LINE).await {
                Ok(rpc::LineRead::Eof) | Err(_) => break,
                Ok(rpc::LineRead::TooLong(n)) => {
                    tracing::debug!(session_id = %label, bytes = n, "agent stderr line too long; skipped");
                }
                Ok(rpc::LineRead::Line) => {
                    let line = String::from_utf8_lossy(&buf).trim_end().to_owned();
                    if !line.is_empty() && tx.send(line).await.is_err() {
                        break;
                    }
                }
            }
        }
        // `tx` drops here: the grouping below flushes its last record and ends.
    };
    let log = group_lines(rx, STDERR_BURST, MAX_STDERR_RECORD_LINES, |record| {
        let lines = record.len();
        let text = record.join("\n");
        let lower = text.to_ascii_lowercase();
        if lower.contains("error") || lower.contains("panic") || lower.contains("fatal") {
            tracing::warn!(session_id = %record_label, lines, line = %text, "agent stderr");
        } else {
            tracing::debug!(session_id = %record_label, lines, line = %text, "agent stderr");
        }
    });
    tokio::join!(read, log);
}

/// Groups the lines arriving on `rx` into records: a record ends when no line follows within
/// `burst`, at `max` lines, or when the channel closes; `emit` gets each record.
async fn group_lines(
    mut rx: mpsc::Receiver<String>,
    burst: Duration,
    max: usize,
    mut emit: impl FnMut(Vec<String>),
) {
    while let Some(first) = rx.recv().await {
        let mut record = vec![first];
        while record.len() < max {
            match tokio::time::timeout(burst, rx.recv()).await {
                Ok(Some(line)) => record.push(line),
                Ok(None) | Err(_) => break,
            }
        }
        emit(record);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn launch_sh<'a>(
        script: &'a [OsString],
        env: &'a BTreeMap<String, String>,
        cwd: &'a Path,
    ) -> Launch<'a> {
        Launch {
            program: Path::new("sh"),
            args: script,
            cwd,
            env,
            label: "test",
        }
    }

    fn base_env() -> BTreeMap<String, String> {
        BTreeMap::from([("PATH".to_owned(), "/usr/bin:/bin".to_owned())])
    }

    fn alive(pid: i32) -> bool {
        // Signal 0 probes existence; a zombie would still answer, so reaping matters too.
        nix::sys::signal::kill(Pid::from_raw(pid), None).is_ok()
    }

    #[tokio::test]
    async fn environment_is_exactly_what_we_pass() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("env.txt");
        let script = vec!["-c".into(), format!("env > {}", out.display()).into()];
        let mut env = base_env();
        env.insert("ONLY_THIS".into(), "1".into());
        let (proc_, client, _incoming) =
            AgentProcess::spawn(&launch_sh(&script, &env, dir.path())).unwrap();
        drop(client);
        let status = proc_.shutdown(Duration::from_secs(5)).await.unwrap();
        assert!(status.success());
        let text = std::fs::read_to_string(out).unwrap();
        let names: Vec<&str> = text.lines().filter_map(|l| l.split('=').next()).collect();
        assert!(names.contains(&"ONLY_THIS"));
        assert!(!names.contains(&"HOME"), "inherited HOME: {text}");
        assert!(!names.contains(&"CARGO"), "inherited the test env: {text}");
    }

    #[tokio::test]
    async fn stubborn_agent_and_its_children_are_killed() {
        let dir = tempfile::tempdir().unwrap();
        let pidfile = dir.path().join("bg.pid");
        // Ignores SIGTERM and stdin EOF; leaves a background grandchild.
        let script = vec![
            "-c".into(),
            format!(
                "trap '' TERM; sleep 300 & echo $! > {}; while true; do sleep 1; done",
                pidfile.display()
            )
            .into(),
        ];
        let env = base_env();
        let (proc_, client, _incoming) =
            AgentProcess::spawn(&launch_sh(&script, &env, dir.path())).unwrap();
        let leader = proc_.pid().unwrap() as i32;
        while !pidfile.exists() || std::fs::read_to_string(&pidfile).unwrap().trim().is_empty() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let grandchild: i32 = std::fs::read_to_string(&pidfile)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        drop(client);
        let started = std::time::Instant::now();
        proc_.shutdown(Duration::from_millis(200)).await;
        assert!(started.elapsed() < Duration::from_secs(3));
        assert!(!alive(leader), "leader survived");
        // The grandchild is reparented to init (or a subreaper) and reaped there; give it a moment.
        let deadline = std::time::Instant::now() + Duration::from_secs(3);
        while alive(grandchild) && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let state = std::fs::read_to_string(format!("/proc/{grandchild}/stat")).unwrap_or_default();
        assert!(
            state.is_empty() || state.split(' ').nth(2) == Some("Z"),
            "grandchild still running: {state}"
        );
    }

    #[tokio::test]
    async fn descendants_in_their_own_group_are_killed_too() {
        let dir = tempfile::tempdir().unwrap();
        let pidfile = dir.path().join("tool.pid");
        // Like OpenCode's bash tool: a command in a new session (own process group).
        let script = vec![
            "-c".into(),
            format!(
                "setsid sleep 300 >/dev/null 2>&1 & echo $! > {}; while true; do sleep 1; done",
                pidfile.display()
            )
            .into(),
        ];
        let env = base_env();
        let (mut proc_, client, _incoming) =
            AgentProcess::spawn(&launch_sh(&script, &env, dir.path())).unwrap();
        let leader = proc_.pid().unwrap() as i32;
        while std::fs::read_to_string(&pidfile)
            .map(|s| s.trim().is_empty())
            .unwrap_or(true)
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let tool: i32 = std::fs::read_to_string(&pidfile)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        // `$!` is known before the child has run `setsid`: wait until it has its own group.
        let deadline = std::time::Instant::now() + Duration::from_secs(3);
        while stat_fields(tool).is_some_and(|(_, group, _)| group == leader)
            && std::time::Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let (_, tool_group, _) = stat_fields(tool).unwrap();
        assert_ne!(tool_group, leader, "the tool runs in its own group");
        proc_.snapshot_descendants();
        drop(client);
        proc_.shutdown(Duration::from_millis(200)).await;
        let deadline = std::time::Instant::now() + Duration::from_secs(3);
        let running = |pid: i32| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|s| {
                    s[s.rfind(')')? + 1..]
                        .split_whitespace()
                        .next()
                        .map(str::to_owned)
                })
                .is_some_and(|state| state != "Z" && state != "X")
        };
        while running(tool) && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(
            !running(tool),
            "the tool in its own group survived the agent"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn stderr_lines_in_a_burst_become_one_record_and_a_pause_ends_it() {
        let (tx, rx) = mpsc::channel(16);
        let feed = tokio::spawn(async move {
            for line in [
                "Error: provider failed",
                "  at call (x.js:1)",
                "  at main (x.js:9)",
            ] {
                tx.send(line.to_owned()).await.unwrap();
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
            tx.send("later, on its own".to_owned()).await.unwrap();
            for i in 0..5 {
                tx.send(format!("flood {i}")).await.unwrap();
            }
        });
        let mut records = Vec::new();
        group_lines(rx, STDERR_BURST, 3, |r| records.push(r)).await;
        feed.await.unwrap();
        assert_eq!(
            records,
            vec![
                vec![
                    "Error: provider failed",
                    "  at call (x.js:1)",
                    "  at main (x.js:9)"
                ],
                vec!["later, on its own", "flood 0", "flood 1"],
                vec!["flood 2", "flood 3", "flood 4"],
            ]
        );
    }

    #[test]
    fn leftovers_are_everything_but_the_wrappers_and_the_agent() {
        // 10 bwrap → 11 init → 12 sandbox-init → 13 agent → 14 tool → 15 its child;
        // 16 orphaned to init; 17 a second child of sandbox-init (younger than the agent).
        let procs = [
            (10, 1, 100),
            (11, 10, 101),
            (12, 11, 102),
            (13, 12, 103),
            (14, 13, 200),
            (15, 14, 201),
            (16, 11, 202),
            (17, 12, 203),
            (99, 1, 50),
        ];
        let mut left: Vec<i32> = leftovers_in(&procs, 10, 3).iter().map(|p| p.0).collect();
        left.sort_unstable();
        assert_eq!(left, [14, 15, 16, 17]);
        let mut bare: Vec<i32> = leftovers_in(&procs, 13, 0).iter().map(|p| p.0).collect();
        bare.sort_unstable();
        assert_eq!(bare, [14, 15]);
    }

    #[tokio::test]
    async fn missing_command_is_a_spawn_error() {
        let dir = tempfile::tempdir().unwrap();
        let env = base_env();
        let err = AgentProcess::spawn(&Launch {
            program: Path::new("definitely-not-an-agent-xyz"),
            args: &[],
            cwd: dir.path(),
            env: &env,
            label: "t",
        })
        .unwrap_err();
        assert!(matches!(err, SpawnError::Spawn { .. }));
    }
}
