//! The agent sandbox, tested with the real bubblewrap: the scripted fake ACP agent
//! (`examples/fake_acp_agent.rs`) runs inside it exactly as the daemon starts agents, and its
//! `run` steps do what a hijacked agent would (read another session's environment, peek into
//! `private/`, replace a skill script, leave processes behind, open network connections).
//! Results are read from the agent's log, which lives in the workspace (the only place it may
//! write).
//!
//! Every session gets a socket folder, so it runs as the daemon runs agents: without network,
//! under `air-friends sandbox-init` relaying `127.0.0.1:3001` to `{folder}/api.sock` (the ACP
//! conversation of every test passes through it). Where a test needs the Skill API, a small
//! HTTP server on that socket ([`SocketServer`]) stands in for the daemon. Network probes touch
//! loopback only: a non-loopback connect is attempted only once the sandbox has been seen to
//! have no interface but `lo`, so it fails at once and sends nothing.

mod common;

use common::fake_agent;
use common::poll::{eventually, poll};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use air_friends::agent::sandbox::{Mounts, SANDBOX_API_PORT, SANDBOX_PROXY_PORT, sandbox_api_url};
use air_friends::agent::{
    AgentRun, AgentRunner, ApprovalRules, Outcome, PermissionGate, RunnerSettings, Sandbox,
    SandboxSetup,
};
use air_friends::config::SandboxConfig;
use air_friends::egress::{EgressProxy, Resolve};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio_util::sync::CancellationToken;

fn repo_skills() -> PathBuf {
    std::fs::canonicalize(Path::new(env!("CARGO_MANIFEST_DIR")).join("skills")).unwrap()
}

/// A data folder with workspaces, and a runner whose agents run in the default sandbox.
struct World {
    dir: tempfile::TempDir,
    runner: AgentRunner,
}

impl World {
    async fn new() -> World {
        World::with_config(&SandboxConfig::default()).await
    }

    /// The same with `agent.sandbox` set to `config`.
    async fn with_config(config: &SandboxConfig) -> World {
        let dir = tempfile::tempdir().unwrap();
        let agent = fake_agent();
        let sandbox = World::sandbox_for(&agent, dir.path(), config).await;
        let runner = AgentRunner::new(
            RunnerSettings {
                command: agent.display().to_string(),
                args: vec![],
                model: None,
                connect_timeout: Duration::from_secs(10),
                idle_timeout: Duration::from_secs(10),
                max_turn: Duration::from_secs(20),
                kill_grace: Duration::from_millis(500),
            },
            PermissionGate::new(
                ApprovalRules {
                    skills_dir: repo_skills(),
                    entrypoints: vec!["send-reply/scripts/send-reply".into()],
                    command_prefixes: vec![],
                    skills_mounted_in_workspace: true,
                },
                false,
            ),
        )
        .with_sandbox(sandbox);
        World { dir, runner }
    }

    /// The sandbox `config` describes for `agent`, as the daemon builds it, probed (the probe
    /// itself runs `sandbox-init` without network).
    async fn sandbox_for(agent: &Path, data: &Path, config: &SandboxConfig) -> Sandbox {
        let path_var = std::env::var("PATH").ok();
        let sandbox = Sandbox::from_config(&SandboxSetup {
            config,
            agent_program: Some(agent),
            air_friends_bin: Path::new(env!("CARGO_BIN_EXE_air-friends")),
            skills_dir: &repo_skills(),
            agent_config_dir: None,
            protected: &[data.join("air-friends.db")],
            path_var: path_var.as_deref(),
        })
        .expect("bubblewrap is installed (.ci/run installs it)");
        sandbox.probe().await.expect("the sandbox starts");
        sandbox
    }

    /// The socket folder of session `id` (created empty).
    fn socket_dir(&self, id: &str) -> PathBuf {
        let dir = self.dir.path().join("sockets").join(id);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn workspace(&self, user: &str) -> PathBuf {
        let ws = self.dir.path().join("workspaces/discord").join(user);
        std::fs::create_dir_all(ws.join("tmp")).unwrap();
        ws
    }

    /// A session in `user`'s workspace running `steps` once; its script and log live in the
    /// workspace.
    fn session(&self, user: &str, dm: bool, steps: Value, extra_env: &[(&str, &str)]) -> AgentRun {
        let ws = self.workspace(user);
        let id = format!("sess-{user}-{dm}");
        let log = ws.join(format!("{id}.log.jsonl"));
        let _ = std::fs::remove_file(&log);
        let script = ws.join(format!("{id}.json"));
        std::fs::write(
            &script,
            json!({"log": log, "turns": [{"steps": steps}]}).to_string(),
        )
        .unwrap();
        let mut env = BTreeMap::from([
            ("PATH".to_owned(), "/usr/bin:/bin".to_owned()),
            ("FAKE_ACP_SCRIPT".to_owned(), script.display().to_string()),
            ("SESSION_ID".to_owned(), id.clone()),
        ]);
        for (k, v) in extra_env {
            env.insert((*k).to_owned(), (*v).to_owned());
        }
        AgentRun {
            api_socket_dir: Some(self.socket_dir(&id)),
            session_id: id,
            workspace: ws,
            dm,
            env,
            prompt: "hello".into(),
            retry_prompt: None,
            terminate: CancellationToken::new(),
            shutdown: CancellationToken::new(),
            probe: Arc::new(|| false),
        }
    }
}

/// The `run`/`permission` results in a session's log, in order.
fn results(run_ws: &Path, session_id: &str) -> Vec<Value> {
    std::fs::read_to_string(run_ws.join(format!("{session_id}.log.jsonl")))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["event"] == "run" || v["event"] == "permission")
        .map(|v| v["result"].clone())
        .collect()
}

fn stdout_of(result: &Value) -> String {
    result["stdout"].as_str().unwrap_or_default().to_owned()
}

fn running(tag: &str) -> Vec<String> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().parse::<u32>().is_ok())
        .filter_map(|e| {
            let cmd = std::fs::read(e.path().join("cmdline")).ok()?;
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            let state = stat[stat.rfind(')')? + 1..]
                .split_whitespace()
                .next()?
                .to_owned();
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            (cmd.contains(tag) && state != "Z").then_some(cmd)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn public_sessions_never_see_private_and_dm_sessions_do() {
    let w = World::new().await;
    let ws = w.workspace("7");
    std::fs::create_dir_all(ws.join("private")).unwrap();
    std::fs::write(ws.join("private/notes.md"), "private notes").unwrap();
    let steps = json!([
        {"run": "cat private/notes.md"},
        {"run": "ls -A private | wc -l"},
        {"run": "echo planted > private/planted && echo wrote"}
    ]);
    let public = w.session("7", false, steps.clone(), &[]);
    let id = public.session_id.clone();
    assert_eq!(
        w.runner.run(public).await,
        Outcome::NoResponse { retried: false }
    );
    let r = results(&ws, &id);
    assert_eq!(r.len(), 3, "{r:?}");
    assert_ne!(r[0]["exit"], 0, "a public session read private/: {r:?}");
    assert_eq!(
        stdout_of(&r[1]).trim(),
        "0",
        "private/ is empty in public: {r:?}"
    );
    assert!(
        !stdout_of(&r[2]).contains("wrote"),
        "private/ is writable in public: {r:?}"
    );
    assert!(!ws.join("private/planted").exists());

    let dm = w.session("7", true, steps, &[]);
    let id = dm.session_id.clone();
    w.runner.run(dm).await;
    let r = results(&ws, &id);
    assert_eq!(stdout_of(&r[0]), "private notes", "{r:?}");
    assert!(stdout_of(&r[2]).contains("wrote"), "{r:?}");
    assert!(ws.join("private/planted").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_cannot_read_another_live_sessions_environment() {
    let w = World::new().await;
    let token_a = "caller-token-of-session-a-0123456789";
    // Session A waits in its turn (a live agent with its token in its environment).
    let a = w.session(
        "1",
        false,
        json!([{"hang": true}]),
        &[("SKILL_API_TOKEN", token_a)],
    );
    let stop_a = a.terminate.clone();
    let runner = w.runner.clone();
    let a_task = tokio::spawn(async move { runner.run(a).await });
    let ws_a = w.workspace("1");
    eventually(
        Duration::from_secs(10),
        "session A starting its turn",
        || {
            std::fs::read_to_string(ws_a.join("sess-1-false.log.jsonl"))
                .unwrap_or_default()
                .contains("session/prompt")
        },
    )
    .await;
    // The same attack from the host finds it (so the probe is real)…
    let from_host = std::process::Command::new("sh")
        .args([
            "-c",
            &format!("grep -a -l -s '{token_a}' /proc/[0-9]*/environ"),
        ])
        .output()
        .unwrap();
    assert!(
        !from_host.stdout.is_empty(),
        "the host sees session A's environment"
    );
    // …but session B, in the same user's workspace even, does not.
    let b = w.session(
        "1",
        true,
        json!([
            {"run": format!("grep -a -l -s '{token_a}' /proc/[0-9]*/environ; echo done")},
            {"run": "ls /proc | grep -c '^[0-9]'"}
        ]),
        &[],
    );
    let id = b.session_id.clone();
    w.runner.run(b).await;
    stop_a.cancel();
    assert_eq!(a_task.await.unwrap(), Outcome::Terminated);
    let r = results(&ws_a, &id);
    assert_eq!(
        stdout_of(&r[0]).trim(),
        "done",
        "session B found A's token: {r:?}"
    );
    let visible: u32 = stdout_of(&r[1]).trim().parse().unwrap();
    assert!(
        visible < 10,
        "session B sees {visible} processes; its own namespace has a handful"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn double_forks_and_setsid_children_die_with_the_session() {
    let w = World::new().await;
    let steps = json!([
        {"run": "(setsid sleep 413.1 </dev/null >/dev/null 2>&1 &); (nohup sleep 413.1 >/dev/null 2>&1 &); sh -c 'sleep 413.1 >/dev/null 2>&1 &' ; echo started"}
    ]);
    let run = w.session("3", false, steps, &[]);
    let id = run.session_id.clone();
    w.runner.run(run).await;
    assert_eq!(
        stdout_of(&results(&w.workspace("3"), &id)[0]).trim(),
        "started"
    );
    // Give the kill time to land; the assertion below says what is left.
    poll(Duration::from_secs(3), || {
        running("sleep 413.1").is_empty().then_some(())
    })
    .await;
    assert_eq!(
        running("sleep 413.1"),
        Vec::<String>::new(),
        "processes outlived the session"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_skills_folder_is_read_only_at_both_paths_and_cannot_be_replaced() {
    let w = World::new().await;
    let skills = repo_skills();
    let steps = json!([
        {"run": "head -c 9 skills/send-reply/scripts/send-reply"},
        {"run": "echo evil > skills/send-reply/scripts/send-reply; echo $?"},
        {"run": format!("touch '{}/planted'; echo $?", skills.display())},
        {"run": "mv skills skills-old 2>&1; rm -rf skills 2>&1; ls skills/send-reply/scripts"}
    ]);
    let run = w.session("4", false, steps, &[]);
    let id = run.session_id.clone();
    w.runner.run(run).await;
    let r = results(&w.workspace("4"), &id);
    assert_eq!(stdout_of(&r[0]), "#!/bin/sh", "{r:?}");
    assert_ne!(stdout_of(&r[1]).trim(), "0", "{r:?}");
    assert_ne!(stdout_of(&r[2]).trim(), "0", "{r:?}");
    assert!(
        stdout_of(&r[3]).contains("send-reply"),
        "the mount was replaced: {r:?}"
    );
    assert!(!skills.join("planted").exists());
    let script = std::fs::read_to_string(skills.join("send-reply/scripts/send-reply")).unwrap();
    assert!(script.starts_with("#!/bin/sh"));
}

// ---------------------------------------------------------------------------------------------
// Host root, kernel interfaces, keys and limits

/// The host uid agents run as: the agent user when this test runs as root, else our own.
fn expected_agent_uid() -> u32 {
    if nix::unistd::geteuid().is_root() {
        nix::unistd::User::from_name(air_friends::config::DEFAULT_AGENT_USER)
            .unwrap()
            .expect("the agent user exists (air-friends setup creates it; .ci/run runs setup)")
            .uid
            .as_raw()
    } else {
        nix::unistd::geteuid().as_raw()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kernel_tunables_are_read_only_and_the_agent_is_never_host_root() {
    use std::os::unix::fs::MetadataExt as _;
    let w = World::new().await;
    let steps = json!([
        {"run": "(: > /proc/sys/vm/drop_caches) 2>/dev/null; echo $?"},
        {"run": "(echo '|/bin/true' > /proc/sys/kernel/core_pattern) 2>/dev/null; echo $?"},
        {"run": "grep -E '^Cap(Prm|Eff|Bnd|Amb|Inh)' /proc/self/status | awk '{print $2}' | sort -u"},
        {"run": "touch made-by-the-agent; echo $?"},
        {"run": "grep -E '^(NoNewPrivs|Seccomp):' /proc/self/status | awk '{print $2}' | tr '\\n' ' '"},
        // The mount options of /proc/sys itself: read-only for root and non-root alike.
        {"run": "awk '$5 == \"/proc/sys\" {print $6}' /proc/self/mountinfo"}
    ]);
    let run = w.session("20", false, steps, &[]);
    let id = run.session_id.clone();
    w.runner.run(run).await;
    let r = results(&w.workspace("20"), &id);
    assert_eq!(r.len(), 6, "{r:?}");
    assert_ne!(
        stdout_of(&r[0]).trim(),
        "0",
        "vm.drop_caches opened for writing: {r:?}"
    );
    assert_ne!(
        stdout_of(&r[1]).trim(),
        "0",
        "core_pattern opened for writing: {r:?}"
    );
    assert_eq!(
        stdout_of(&r[2]).trim(),
        "0000000000000000",
        "capabilities left: {r:?}"
    );
    assert_eq!(stdout_of(&r[3]).trim(), "0", "{r:?}");
    let owner = std::fs::metadata(w.workspace("20").join("made-by-the-agent"))
        .unwrap()
        .uid();
    assert_ne!(owner, 0, "the agent is host root");
    assert_eq!(owner, expected_agent_uid());
    assert_eq!(
        stdout_of(&r[4]).trim(),
        "1 2",
        "no_new_privs and a seccomp filter: {r:?}"
    );
    assert!(
        stdout_of(&r[5]).trim().split(',').any(|o| o == "ro"),
        "/proc/sys is not mounted read-only: {r:?}"
    );
}

/// `keyctl` through perl's `syscall` (x86-64 numbers): add a key to the session (-3) and user
/// (-4) keyrings, or search both for it.
#[cfg(target_arch = "x86_64")]
const ADD_KEYS: &str = r#"perl -e 'my ($t, $d, $p) = ("user", "stolen", "s3cret"); for $k (-3, -4) { $r = syscall(248, $t, $d, $p, 6, $k); print $r < 0 ? "refused:" . ($!+0) . " " : "stored:$r " }'"#;
#[cfg(target_arch = "x86_64")]
const FIND_KEYS: &str = r#"perl -e 'my ($t, $d) = ("user", "stolen"); for $k (-3, -4) { $r = syscall(250, 10, $k, $t, $d, 0); print $r < 0 ? "refused:" . ($!+0) . " " : "found:$r " }'"#;

#[cfg(target_arch = "x86_64")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_stored_in_one_sandbox_is_not_found_in_the_next() {
    let w = World::new().await;
    let run = w.session("21", false, json!([{"run": ADD_KEYS}]), &[]);
    let id = run.session_id.clone();
    w.runner.run(run).await;
    let stored = results(&w.workspace("21"), &id);
    let run = w.session("22", true, json!([{"run": FIND_KEYS}]), &[]);
    let id = run.session_id.clone();
    w.runner.run(run).await;
    let found = results(&w.workspace("22"), &id);
    // EPERM (1) from the seccomp filter, for both keyrings and both calls.
    assert_eq!(
        stdout_of(&stored[0]).trim(),
        "refused:1 refused:1",
        "{stored:?}"
    );
    assert_eq!(
        stdout_of(&found[0]).trim(),
        "refused:1 refused:1",
        "{found:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn processes_file_sizes_the_sandbox_root_and_dev_are_bounded() {
    use air_friends::config::SandboxLimits;
    let config = SandboxConfig {
        limits: SandboxLimits {
            max_processes: 64,
            max_file_mb: 16,
            ..SandboxLimits::default()
        },
        ..SandboxConfig::default()
    };
    let w = World::with_config(&config).await;
    let fork_400 = r#"perl -e 'my $n = 0; for (1..400) { my $p = fork; last unless defined $p; if ($p == 0) { close STDOUT; close STDERR; sleep 60; exit 0 } $n++ } print $n'"#;
    let steps = json!([
        {"run": fork_400},
        {"run": "fallocate -l 2G big 2>/dev/null; echo $?"},
        {"run": "head -c 32000000 /dev/zero > written 2>/dev/null; echo $?"},
        {"run": "(: > /planted) 2>/dev/null; echo $?"},
        {"run": "(: > /dev/planted) 2>/dev/null; echo $?"},
        {"run": "(: > /dev/shm/planted) 2>/dev/null; echo $?"},
        {"run": "unshare -Ur true 2>/dev/null; echo $?"}
    ]);
    let run = w.session("23", false, steps, &[]);
    let id = run.session_id.clone();
    w.runner.run(run).await;
    let ws = w.workspace("23");
    let r = results(&ws, &id);
    assert_eq!(r.len(), 7, "{r:?}");
    let forked: u32 = stdout_of(&r[0]).trim().parse().unwrap();
    assert!(forked < 64, "{forked} processes started past a limit of 64");
    assert_ne!(
        stdout_of(&r[1]).trim(),
        "0",
        "a 2 GiB fallocate passed: {r:?}"
    );
    assert!(std::fs::metadata(ws.join("big")).map_or(0, |m| m.len()) <= 16 << 20);
    assert_ne!(
        stdout_of(&r[2]).trim(),
        "0",
        "a 32 MB write passed a 16 MiB cap: {r:?}"
    );
    assert!(std::fs::metadata(ws.join("written")).unwrap().len() <= 16 << 20);
    for (i, what) in [(3, "/"), (4, "/dev"), (5, "/dev/shm")] {
        assert_ne!(stdout_of(&r[i]).trim(), "0", "wrote into {what}: {r:?}");
    }
    assert_ne!(stdout_of(&r[6]).trim(), "0", "made a user namespace: {r:?}");
}

/// The unprivileged deployment, from a test that may run as root: `air-friends chat` run as
/// `nobody` (copies of the binary, the fake agent, the skills and the prompts in a folder it
/// can read) starts only when its start-up probe finds every wall in place inside a real
/// sandbox, then answers through it. As an unprivileged user the test runs it as itself.
#[test]
fn an_unprivileged_daemon_starts_its_agents_in_the_same_walls() {
    use std::os::unix::fs::PermissionsExt as _;
    use std::os::unix::process::CommandExt as _;
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o755)).unwrap();
    let copy = |from: &Path, name: &str| {
        let to = root.join(name);
        let status = std::process::Command::new("cp")
            .arg("-r")
            .arg(from)
            .arg(&to)
            .status()
            .unwrap();
        assert!(status.success());
        to
    };
    let bin = copy(Path::new(env!("CARGO_BIN_EXE_air-friends")), "air-friends");
    let agent = copy(&fake_agent(), "fake_acp_agent");
    let skills = copy(&repo_skills(), "skills");
    let prompts = copy(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("prompts"),
        "prompts",
    );
    let data = root.join("data");
    let home = root.join("home");
    let agent_dir = root.join("agent");
    for d in [&data, &home, &agent_dir] {
        std::fs::create_dir(d).unwrap();
    }
    let send_reply = skills.join("send-reply/scripts/send-reply");
    let script = agent_dir.join("agent.json");
    let checks = "printf '%s %s' \"$(id -u)\" \"$(grep -c '^Seccomp:.2' /proc/self/status)\" \
                  > \"$TMPDIR/$SESSION_ID/reply.md\"";
    std::fs::write(
        &script,
        json!({"log": "agent.log.jsonl", "turns": [{"steps": [
            {"run": checks},
            {"permission": format!("{} --message-file $TMPDIR/$SESSION_ID/reply.md", send_reply.display())}
        ]}]})
        .to_string(),
    )
    .unwrap();
    let config = root.join("config.yaml");
    std::fs::write(
        &config,
        format!(
            "workspace:\n  repoPath: {}\nagent:\n  command: {}\n  args: []\n  skillsDir: {}\n  \
             env:\n    FAKE_ACP_SCRIPT: {}\n  sandbox:\n    readOnlyPaths: [{}]\nprompts:\n  dir: {}\n",
            data.display(),
            agent.display(),
            skills.display(),
            script.display(),
            agent_dir.display(),
            prompts.display()
        ),
    )
    .unwrap();
    let nobody = nix::unistd::User::from_name("nobody").unwrap().unwrap();
    let as_root = nix::unistd::geteuid().is_root();
    if as_root {
        for d in [&data, &home] {
            std::os::unix::fs::chown(d, Some(nobody.uid.as_raw()), Some(nobody.gid.as_raw()))
                .unwrap();
        }
    }
    let mut cmd = std::process::Command::new(&bin);
    cmd.args(["chat", "--config"])
        .arg(&config)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("HOME", &home)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    if as_root {
        // std drops the supplementary groups when root sets a uid.
        cmd.uid(nobody.uid.as_raw()).gid(nobody.gid.as_raw());
    }
    let mut child = cmd.spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    {
        use std::io::Write as _;
        writeln!(stdin, "hello").unwrap();
    }
    let stdout = child.stdout.take().unwrap();
    let (tx, lines) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead as _;
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            let _ = tx.send(line);
        }
    });
    let mut seen = Vec::new();
    while let Ok(line) = lines.recv_timeout(Duration::from_secs(60)) {
        let answered = line.starts_with("air-friends> ");
        seen.push(line);
        if answered {
            break;
        }
    }
    drop(stdin);
    let exited = common::poll::blocking_poll(Duration::from_secs(30), || child.try_wait().unwrap());
    if exited.is_none() {
        let _ = child.kill();
    }
    let out = child.wait_with_output().unwrap();
    let stdout = seen.join("\n");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        exited.is_some_and(|s| s.success()),
        "chat as an unprivileged user failed:\n{stdout}\n{stderr}"
    );
    let uid = if as_root {
        nobody.uid.as_raw()
    } else {
        nix::unistd::geteuid().as_raw()
    };
    assert!(
        stdout.contains(&format!("air-friends> {uid} 1")),
        "the agent ran as {uid} under seccomp: {stdout}\n{stderr}"
    );
}

// ---------------------------------------------------------------------------------------------
// No network but the relay

/// What the [`SocketServer`] answers on `GET /hello`.
const HELLO: &str = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 24\r\nConnection: close\r\n\r\nhello through the relay\n";

/// Chunks `GET /stream` sends, each only after the client acknowledged the one before.
const CHUNKS: usize = 5;

/// Stands in for the daemon's per-session socket: a small HTTP/1.1 server on
/// `{dir}/api.sock`. `GET /hello` answers [`HELLO`]; `POST /echo` answers its body back;
/// `GET /stream` sends `data: chunk N` lines and waits for the client's `ack N` line on the same
/// connection before the next, so a relay that held data back would stall it. Every request
/// (head and body, as received) and every acknowledgment is recorded.
struct SocketServer {
    requests: Arc<Mutex<Vec<Vec<u8>>>>,
    acks: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl SocketServer {
    fn start(dir: &Path) -> SocketServer {
        let listener = UnixListener::bind(dir.join("api.sock")).unwrap();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let acks = Arc::new(Mutex::new(Vec::new()));
        let (r, a) = (requests.clone(), acks.clone());
        let task = tokio::spawn(async move {
            let mut connections = tokio::task::JoinSet::new();
            while let Ok((stream, _)) = listener.accept().await {
                connections.spawn(serve_connection(stream, r.clone(), a.clone()));
            }
        });
        SocketServer {
            requests,
            acks,
            task,
        }
    }

    fn requests(&self) -> Vec<Vec<u8>> {
        self.requests.lock().unwrap().clone()
    }
}

impl Drop for SocketServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve_connection(
    stream: UnixStream,
    requests: Arc<Mutex<Vec<Vec<u8>>>>,
    acks: Arc<Mutex<Vec<String>>>,
) {
    let mut stream = BufReader::new(stream);
    let mut request = Vec::new();
    loop {
        let start = request.len();
        match stream.read_until(b'\n', &mut request).await {
            Ok(0) | Err(_) => return,
            Ok(_) if &request[start..] == b"\r\n" => break,
            Ok(_) => {}
        }
    }
    let head = String::from_utf8_lossy(&request).into_owned();
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("Content-Length: "))
        .map_or(0, |v| v.trim().parse().unwrap());
    let mut body = vec![0; length];
    if stream.read_exact(&mut body).await.is_err() {
        return;
    }
    request.extend_from_slice(&body);
    requests.lock().unwrap().push(request);
    let path = head
        .split_whitespace()
        .nth(1)
        .unwrap_or_default()
        .to_owned();
    let _ = match path.as_str() {
        "/hello" => stream.write_all(HELLO.as_bytes()).await,
        "/echo" => {
            let head =
                format!("HTTP/1.1 200 OK\r\nContent-Length: {length}\r\nConnection: close\r\n\r\n");
            match stream.write_all(head.as_bytes()).await {
                Ok(()) => stream.write_all(&body).await,
                Err(e) => Err(e),
            }
        }
        "/stream" => {
            let head =
                "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n";
            if stream.write_all(head.as_bytes()).await.is_err() {
                return;
            }
            for n in 1..=CHUNKS {
                let chunk = format!("data: chunk {n}\n");
                if stream.write_all(chunk.as_bytes()).await.is_err()
                    || stream.flush().await.is_err()
                {
                    return;
                }
                let mut ack = String::new();
                // Bounded: a relay holding the chunk back gets a closed stream, not a hang.
                match tokio::time::timeout(Duration::from_secs(5), stream.read_line(&mut ack)).await
                {
                    Ok(Ok(_)) if ack == format!("ack {n}\n") => acks.lock().unwrap().push(ack),
                    _ => return,
                }
            }
            Ok(())
        }
        _ => {
            stream
                .write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
                .await
        }
    };
    let _ = stream.flush().await;
}

/// A `bash` step that opens a TCP connection to `host`/`port` from inside the sandbox (and
/// closes it); its stderr carries the reason it failed.
fn tcp_connect(host: &str, port: u16) -> Value {
    json!({"run": format!("timeout 5 bash -c 'exec 3<>/dev/tcp/{host}/{port}' 2>&1; echo \"exit=$?\"")})
}

/// The same connect to a non-loopback address, attempted only when the sandbox has no
/// interface but `lo` (then it fails at once and nothing leaves the machine).
fn tcp_connect_off_loopback(host: &str, port: u16) -> Value {
    json!({"run": format!(
        "if [ \"$(tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ')\" = lo ]; then \
         timeout 5 bash -c 'exec 3<>/dev/tcp/{host}/{port}' 2>&1; echo \"exit=$?\"; \
         else echo 'interfaces besides lo: not probing'; fi"
    )})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandboxed_agent_reaches_no_tcp_port_but_the_relay_to_its_socket() {
    let w = World::new().await;
    // Stand-ins on the host's loopback: the daemon's ops port and another local service.
    let ops = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let other = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let (ops_port, other_port) = (
        ops.local_addr().unwrap().port(),
        other.local_addr().unwrap().port(),
    );
    // From the host the ops port answers (so a refusal inside is the sandbox's doing).
    std::net::TcpStream::connect(("127.0.0.1", ops_port)).unwrap();
    ops.accept().unwrap();
    ops.set_nonblocking(true).unwrap();
    other.set_nonblocking(true).unwrap();

    std::fs::write(
        w.workspace("5").join("hello.sh"),
        format!(
            "exec 3<>/dev/tcp/127.0.0.1/{SANDBOX_API_PORT}\n\
             printf 'GET /hello HTTP/1.1\\r\\nHost: relay\\r\\nConnection: close\\r\\n\\r\\n' >&3\n\
             cat <&3\n"
        ),
    )
    .unwrap();
    let steps = json!([
        {"run": "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '"},
        tcp_connect("127.0.0.1", ops_port),
        tcp_connect("127.0.0.1", other_port),
        tcp_connect("127.0.0.2", ops_port),
        tcp_connect_off_loopback("10.255.255.1", 80),
        tcp_connect_off_loopback("169.254.169.254", 80),
        {"run": "bash hello.sh"},
    ]);
    let run = w.session("5", false, steps, &[]);
    let server = SocketServer::start(run.api_socket_dir.as_deref().unwrap());
    let id = run.session_id.clone();
    assert_eq!(
        w.runner.run(run).await,
        Outcome::NoResponse { retried: false },
        "the fake agent spoke ACP through sandbox-init"
    );
    let r = results(&w.workspace("5"), &id);
    assert_eq!(r.len(), 7, "{r:?}");
    assert_eq!(stdout_of(&r[0]).trim(), "lo", "only loopback: {r:?}");
    for (i, what) in [
        (1, "the ops port"),
        (2, "another loopback port"),
        (3, "127.0.0.2"),
    ] {
        let out = stdout_of(&r[i]);
        assert!(
            out.contains("Connection refused") && !out.contains("exit=0"),
            "{what} was reachable from the sandbox: {out}"
        );
    }
    for i in [4, 5] {
        let out = stdout_of(&r[i]);
        assert!(
            out.contains("Network is unreachable") && !out.contains("exit=0"),
            "a non-loopback address was not refused at once: {out}"
        );
    }
    for (listener, what) in [(&ops, "ops"), (&other, "other")] {
        assert_eq!(
            listener.accept().map(|_| ()).unwrap_err().kind(),
            std::io::ErrorKind::WouldBlock,
            "the {what} listener on the host got a connection from the sandbox"
        );
    }
    assert_eq!(stdout_of(&r[6]), HELLO, "{r:?}");
    assert_eq!(
        server.requests(),
        vec![b"GET /hello HTTP/1.1\r\nHost: relay\r\nConnection: close\r\n\r\n".to_vec()],
        "the request crossed the relay byte for byte"
    );
    assert_eq!(
        sandbox_api_url(),
        format!("http://127.0.0.1:{SANDBOX_API_PORT}")
    );
}

/// Resolves every name to one loopback address (the egress proxy's test constructor).
struct AllTo(std::net::SocketAddr);

#[async_trait::async_trait]
impl Resolve for AllTo {
    async fn resolve(&self, _host: &str, _port: u16) -> std::io::Result<Vec<std::net::SocketAddr>> {
        Ok(vec![self.0])
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_egress_hosts_the_agent_tunnels_to_listed_hosts_only_through_its_proxy() {
    use std::os::unix::fs::PermissionsExt;
    let config = SandboxConfig {
        egress_allow_hosts: vec!["api.example.com".into()],
        ..SandboxConfig::default()
    };
    let w = World::with_config(&config).await;
    // The "host" is an echo server on the host's loopback, reached only through the proxy.
    let echo = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let echo_addr = echo.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = echo.accept().await {
            tokio::spawn(async move {
                let (mut r, mut wr) = stream.split();
                let _ = tokio::io::copy(&mut r, &mut wr).await;
            });
        }
    });
    let connect = |target: &str, read: &str| {
        format!(
            "exec 3<>/dev/tcp/127.0.0.1/{SANDBOX_PROXY_PORT}\n\
             printf 'CONNECT {target} HTTP/1.1\\r\\n\\r\\nping' >&3\n\
             timeout 5 {read} <&3\n"
        )
    };
    let ws = w.workspace("7");
    std::fs::write(
        ws.join("listed.sh"),
        connect("api.example.com:443", "head -c 43"),
    )
    .unwrap();
    std::fs::write(
        ws.join("unlisted.sh"),
        connect("other.example.com:443", "cat"),
    )
    .unwrap();
    let steps = json!([
        {"run": "echo \"$HTTPS_PROXY $NO_PROXY\""},
        {"run": "bash listed.sh"},
        {"run": "bash unlisted.sh"},
        tcp_connect("127.0.0.1", echo_addr.port()),
    ]);
    let run = w.session("7", false, steps, &[("HTTPS_PROXY", "http://corp:8080")]);
    let dir = run.api_socket_dir.clone().unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let _api = SocketServer::start(&dir);
    let proxy =
        EgressProxy::unscreened_for_tests(&config.egress_allow_hosts, Arc::new(AllTo(echo_addr)))
            .unwrap();
    let egress = proxy.serve_session(&dir).unwrap();
    let id = run.session_id.clone();
    w.runner.run(run).await;
    egress.close().await;
    let r = results(&ws, &id);
    assert_eq!(r.len(), 4, "{r:?}");
    assert_eq!(
        stdout_of(&r[0]).trim(),
        "http://127.0.0.1:3128 127.0.0.1,localhost",
        "the daemon's proxy is replaced by the egress relay"
    );
    assert_eq!(
        stdout_of(&r[1]),
        "HTTP/1.1 200 Connection Established\r\n\r\nping",
        "{r:?}"
    );
    assert!(
        stdout_of(&r[2]).starts_with("HTTP/1.1 403 "),
        "an unlisted host was not refused: {r:?}"
    );
    let direct = stdout_of(&r[3]);
    assert!(
        direct.contains("Connection refused") && !direct.contains("exit=0"),
        "the host was reachable without the proxy: {direct}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_bodies_cross_the_relay_intact_and_a_stream_arrives_chunk_by_chunk() {
    let w = World::new().await;
    let ws = w.workspace("6");
    // 3 MiB that no buffer holds whole, pseudo-random so a shifted or dropped block shows.
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let big: Vec<u8> = (0..3 * 1024 * 1024)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect();
    std::fs::write(ws.join("big.bin"), &big).unwrap();
    let _ = std::fs::remove_file(ws.join("echoed.bin"));
    let port = SANDBOX_API_PORT;
    std::fs::write(
        ws.join("echo.sh"),
        format!(
            "exec 3<>/dev/tcp/127.0.0.1/{port}\n\
             printf 'POST /echo HTTP/1.1\\r\\nHost: relay\\r\\nContent-Length: %s\\r\\nConnection: close\\r\\n\\r\\n' \"$(stat -c %s big.bin)\" >&3\n\
             cat big.bin >&3\n\
             cat <&3 > echoed.bin\n\
             echo \"exit=$?\"\n"
        ),
    )
    .unwrap();
    std::fs::write(
        ws.join("stream.sh"),
        format!(
            "exec 3<>/dev/tcp/127.0.0.1/{port}\n\
             printf 'GET /stream HTTP/1.1\\r\\nHost: relay\\r\\n\\r\\n' >&3\n\
             while IFS= read -r line <&3; do [ \"$line\" = $'\\r' ] && break; done\n\
             for i in $(seq {CHUNKS}); do\n\
               IFS= read -r -t 10 line <&3 || {{ echo \"no chunk $i\"; break; }}\n\
               echo \"$line\"\n\
               echo \"ack $i\" >&3\n\
             done\n"
        ),
    )
    .unwrap();
    let steps = json!([{"run": "bash echo.sh"}, {"run": "bash stream.sh"}]);
    let run = w.session("6", true, steps, &[]);
    let server = SocketServer::start(run.api_socket_dir.as_deref().unwrap());
    let id = run.session_id.clone();
    w.runner.run(run).await;
    let r = results(&ws, &id);
    assert_eq!(r.len(), 2, "{r:?}");
    assert_eq!(stdout_of(&r[0]).trim(), "exit=0", "{r:?}");

    let requests = server.requests();
    let upload = requests
        .first()
        .expect("the echo request reached the socket");
    let body_start = upload.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    assert!(
        upload[body_start..] == big[..],
        "the request body arrived intact"
    );
    let echoed = std::fs::read(ws.join("echoed.bin")).unwrap();
    let head = format!(
        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        big.len()
    );
    assert!(echoed.starts_with(head.as_bytes()), "response head");
    assert_eq!(echoed.len(), head.len() + big.len(), "response length");
    assert!(
        echoed[head.len()..] == big[..],
        "the response body arrived intact"
    );

    let expected: Vec<String> = (1..=CHUNKS).map(|n| format!("data: chunk {n}")).collect();
    assert_eq!(
        stdout_of(&r[1]).lines().collect::<Vec<_>>(),
        expected,
        "each chunk reached the agent before the server sent the next: {r:?}"
    );
    assert_eq!(
        server.acks.lock().unwrap().len(),
        CHUNKS,
        "every acknowledgment crossed back while the stream was open"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandbox_init_passes_the_agents_stdio_and_exit_status_through() {
    let dir = tempfile::tempdir().unwrap();
    let sandbox = World::sandbox_for(
        Path::new("/usr/bin/bash"),
        dir.path(),
        &SandboxConfig::default(),
    )
    .await;
    let ws = dir.path().join("ws");
    let sockets = dir.path().join("sockets");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::create_dir_all(&sockets).unwrap();
    let ws = ws.canonicalize().unwrap();
    sandbox.prepare_workspace(&ws).unwrap();
    let cases = [
        (
            "read line; echo \"out:$line\"; echo err >&2; exit 7",
            7,
            "out:in\n",
        ),
        ("echo before; kill -TERM $$", 128 + 15, "before\n"),
        ("exec cat", 0, "in\n"),
    ];
    for (script, code, stdout) in cases {
        let wrapped = sandbox.wrap(
            Path::new("/usr/bin/bash"),
            &["-c".into(), script.into()],
            &Mounts {
                workspace: &ws,
                dm: false,
                api_socket_dir: Some(&sockets),
                staging: None,
                state: None,
            },
        );
        assert!(
            wrapped.args.iter().any(|a| a == "sandbox-init"),
            "{wrapped:?}"
        );
        let mut child = tokio::process::Command::new(&wrapped.program)
            .args(&wrapped.args)
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(b"in\n").await.unwrap();
        drop(stdin);
        let out = tokio::time::timeout(Duration::from_secs(10), child.wait_with_output())
            .await
            .expect("the sandboxed program ends")
            .unwrap();
        assert_eq!(out.status.code(), Some(code), "{script}: {out:?}");
        assert_eq!(String::from_utf8_lossy(&out.stdout), stdout, "{script}");
        if code == 7 {
            assert_eq!(String::from_utf8_lossy(&out.stderr), "err\n", "{script}");
        }
    }
}

/// `air-friends sandbox-init ARGS` on the host, in a folder without any configuration file.
fn sandbox_init(args: &[&str], cwd: &Path) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_air-friends"));
    cmd.arg("sandbox-init")
        .args(args)
        .current_dir(cwd)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    cmd
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandbox_init_forwards_termination_signals_to_the_agent() {
    let dir = tempfile::tempdir().unwrap();
    for (signal, name) in [
        (nix::sys::signal::Signal::SIGTERM, "TERM"),
        (nix::sys::signal::Signal::SIGINT, "INT"),
        (nix::sys::signal::Signal::SIGHUP, "HUP"),
    ] {
        let script = format!(
            "trap 'echo got {name}; exit 3' {name}; echo ready; while :; do sleep 0.05; done"
        );
        let mut child = sandbox_init(&["--", "/usr/bin/bash", "-c", &script], dir.path())
            .spawn()
            .unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).await.unwrap();
        assert_eq!(line, "ready\n");
        let pid = nix::unistd::Pid::from_raw(child.id().unwrap() as i32);
        nix::sys::signal::kill(pid, signal).unwrap();
        let mut rest = String::new();
        tokio::time::timeout(Duration::from_secs(10), stdout.read_to_string(&mut rest))
            .await
            .expect("the agent ends after the forwarded signal")
            .unwrap();
        let status = child.wait().await.unwrap();
        assert_eq!(rest, format!("got {name}\n"), "SIG{name}");
        assert_eq!(
            status.code(),
            Some(3),
            "SIG{name}: the agent's own exit code"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandbox_init_refuses_bad_relays_and_busy_ports_with_one_line_and_exit_1() {
    let dir = tempfile::tempdir().unwrap();
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let busy_relay = format!(
        "127.0.0.1:{}=/nowhere/api.sock",
        busy.local_addr().unwrap().port()
    );
    let cases: [(&[&str], &str); 3] = [
        (
            &["--relay", "0.0.0.0:3001=/run/air-friends/api.sock"],
            "loopback only",
        ),
        (&["--bogus"], "unexpected argument"),
        (&["--relay", &busy_relay], "cannot listen on 127.0.0.1:"),
    ];
    for (flags, want) in cases {
        let mut args = flags.to_vec();
        args.extend(["--", "/usr/bin/echo", "the program ran"]);
        let out = sandbox_init(&args, dir.path()).output().await.unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{flags:?}: {stderr}");
        assert!(
            out.stdout.is_empty(),
            "{flags:?}: nothing on stdout, no program run"
        );
        assert_eq!(stderr.lines().count(), 1, "{flags:?}: {stderr}");
        assert!(stderr.contains(want), "{flags:?}: {stderr}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_sees_only_its_own_staging_folder_not_another_sessions_payloads() {
    let w = World::new().await;
    let ws = w.workspace("8");
    let tmp = ws.join("tmp");
    // A live DM session of the same user staged a reply made from private memories.
    let theirs = tmp.join("sess-8-true");
    std::fs::create_dir_all(&theirs).unwrap();
    std::fs::write(theirs.join("reply.md"), "your diagnosis, privately").unwrap();
    let mine = tmp.join("sess-8-false");
    std::fs::create_dir_all(&mine).unwrap();
    std::fs::write(mine.join("own.md"), "mine").unwrap();
    let peek = theirs.join("reply.md");
    let run = w.session(
        "8",
        false,
        json!([
            {"run": format!("cat '{}'", peek.display())},
            {"run": "ls -A tmp"},
            {"run": "cat \"$TMPDIR/$SESSION_ID/own.md\""},
            {"run": "echo made > \"$TMPDIR/$SESSION_ID/new.md\" && echo ok"},
            {"fsRead": peek.display().to_string()},
            {"fsRead": mine.join("own.md").display().to_string()}
        ]),
        &[("TMPDIR", &tmp.display().to_string())],
    );
    let id = run.session_id.clone();
    w.runner.run(run).await;
    let r = results(&ws, &id);
    assert_ne!(r[0]["exit"], 0, "read another session's payload: {r:?}");
    assert_eq!(stdout_of(&r[1]).trim(), "sess-8-false", "{r:?}");
    assert_eq!(stdout_of(&r[2]), "mine", "{r:?}");
    assert_eq!(stdout_of(&r[3]).trim(), "ok", "{r:?}");
    assert_eq!(
        std::fs::read_to_string(mine.join("new.md")).unwrap(),
        "made\n",
        "the own staging folder is the host's, where the daemon reads payloads"
    );
    let fs_reads: Vec<Value> = std::fs::read_to_string(ws.join(format!("{id}.log.jsonl")))
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["event"] == "fsRead")
        .map(|v| v["answer"].clone())
        .collect();
    assert!(
        fs_reads[0].get("error").is_some(),
        "fs/read reached another session's payload: {fs_reads:?}"
    );
    assert_eq!(fs_reads[1]["result"]["content"], "mine", "{fs_reads:?}");
}

/// The memory-group folders of the hierarchies this process belongs to (v1 `memory`, or the
/// v2 group the daemon hands controllers down from), where agents' groups are made.
fn agent_cgroup_dirs() -> Vec<PathBuf> {
    let text = std::fs::read_to_string("/proc/self/cgroup").unwrap();
    let mut dirs = Vec::new();
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next(), parts.next(), parts.next());
        let path = path.unwrap_or("/").trim_start_matches('/');
        for (name, mount) in [("memory", "/sys/fs/cgroup/memory"), ("", "/sys/fs/cgroup")] {
            if controllers == Some(name) {
                let dir = Path::new(mount).join(path);
                dirs.push(dir.clone());
                if let Some(parent) = dir.parent() {
                    dirs.push(parent.to_path_buf());
                }
            }
        }
    }
    dirs
}

/// Agent groups of sessions whose id contains `tag`, left anywhere this process can see.
fn agent_groups_left(tag: &str) -> Vec<PathBuf> {
    agent_cgroup_dirs()
        .iter()
        .filter_map(|d| std::fs::read_dir(d).ok())
        .flat_map(|entries| entries.flatten())
        .map(|e| e.path())
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            name.starts_with("air-friends-agent-") && name.contains(tag)
        })
        .collect()
}

/// The default sandbox with the agent's cgroup required and its memory bounded at `mib`. Fails
/// the test where no cgroup can bound memory (run it as root, or under a systemd unit with
/// `Delegate=yes`).
fn memory_bounded_at(mib: u64) -> SandboxConfig {
    use air_friends::config::{CgroupMode, SandboxLimits};
    SandboxConfig {
        limits: SandboxLimits {
            max_memory_mb: mib,
            ..SandboxLimits::default()
        },
        cgroup: CgroupMode::Required,
        ..SandboxConfig::default()
    }
}

/// Finding 4's memory half: 512 MiB touched by a process, and 400 MB written into the
/// sandbox's own tmpfs (pages that count against no process), are both stopped at the agent's
/// cgroup limit — the kernel kills inside that sandbox only, the turn ends as `MemoryLimit`
/// when the agent itself was hit, the group is removed, and the next session runs normally.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_and_tmpfs_pages_are_bounded_by_the_agents_cgroup() {
    let config = SandboxConfig {
        tmp_size_mb: 1024,
        ..memory_bounded_at(96)
    };
    let w = World::with_config(&config).await;
    let own_rss = || {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse::<u64>().ok())
            .unwrap()
    };
    let rss_before = own_rss();

    let alloc = r#"perl -e '$x = "a" x (512 << 20); print length($x), "\n"'; echo "exit $?""#;
    let run = w.session(
        "cgmem",
        false,
        json!([{"run": alloc}, {"run": "echo alive"}]),
        &[],
    );
    let id = run.session_id.clone();
    let outcome = w.runner.run(run).await;
    let r = results(&w.workspace("cgmem"), &id);
    assert!(
        outcome == Outcome::MemoryLimit || stdout_of(&r[0]).trim().ends_with("exit 137"),
        "512 MiB passed a 96 MiB limit: {outcome:?} {r:?}"
    );

    let fill = "head -c 400000000 /dev/zero > /tmp/fill; echo \"exit $?\"";
    let run = w.session(
        "cgtmp",
        false,
        json!([{"run": fill}, {"run": "stat -c %s /tmp/fill"}]),
        &[],
    );
    let id = run.session_id.clone();
    let outcome = w.runner.run(run).await;
    let r = results(&w.workspace("cgtmp"), &id);
    match outcome {
        Outcome::MemoryLimit => {}
        other => {
            assert_eq!(r.len(), 2, "{other:?} {r:?}");
            let size: u64 = stdout_of(&r[1]).trim().parse().unwrap_or(0);
            assert!(
                size < 96 << 20,
                "{size} bytes of tmpfs held past 96 MiB: {r:?}"
            );
        }
    }

    // The daemon's side is untouched, nothing is left behind, and the next agent runs.
    assert!(
        own_rss() < rss_before + 64 * 1024,
        "the test's own RSS grew"
    );
    eventually(
        Duration::from_secs(5),
        "the agents' groups are removed",
        || agent_groups_left("cgmem").is_empty() && agent_groups_left("cgtmp").is_empty(),
    )
    .await;
    let run = w.session("cgnext", false, json!([{"run": "echo fine"}]), &[]);
    let id = run.session_id.clone();
    w.runner.run(run).await;
    let r = results(&w.workspace("cgnext"), &id);
    assert_eq!(stdout_of(&r[0]).trim(), "fine", "{r:?}");
}

/// A hostile agent cannot leave its cgroup to escape the memory limit: it sees no host cgroup
/// path (its own cgroup namespace), no cgroup file system, cannot mount one, and after every
/// try to move itself out, 512 MiB touched still stops at the limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_cannot_leave_its_cgroup() {
    let config = memory_bounded_at(96);
    let w = World::with_config(&config).await;
    let escape = "for f in /sys/fs/cgroup/cgroup.procs /sys/fs/cgroup/*/cgroup.procs \
                  /sys/fs/cgroup/*/tasks; do (echo $$ > \"$f\") 2>/dev/null && echo \"moved via $f\"; \
                  done; mkdir -p /tmp/cg; mount -t cgroup -o memory none /tmp/cg 2>/dev/null \
                  && echo mounted; mount -t cgroup2 none /tmp/cg 2>/dev/null && echo mounted2; \
                  echo tried";
    let alloc = r#"perl -e '$x = "a" x (512 << 20); print length($x), "\n"'; echo "exit $?""#;
    let steps = json!([
        {"run": "cat /proc/self/cgroup"},
        {"run": escape},
        {"run": alloc}
    ]);
    let run = w.session("cgesc", false, steps, &[]);
    let id = run.session_id.clone();
    let outcome = w.runner.run(run).await;
    let r = results(&w.workspace("cgesc"), &id);
    assert!(
        !stdout_of(&r[0]).contains("air-friends-agent")
            && !stdout_of(&r[0]).contains("process_api"),
        "the agent sees its host cgroup path: {r:?}"
    );
    assert_eq!(stdout_of(&r[1]).trim(), "tried", "an escape worked: {r:?}");
    assert!(
        outcome == Outcome::MemoryLimit || stdout_of(&r[2]).trim().ends_with("exit 137"),
        "512 MiB passed a 96 MiB limit after the escape attempts: {outcome:?} {r:?}"
    );
}
