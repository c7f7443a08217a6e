//! The agent sandbox, tested with the real bubblewrap: the scripted fake ACP agent
//! (`examples/fake_acp_agent.rs`) runs inside it exactly as the daemon starts agents, and its
//! `run` steps do what a hijacked agent would (read another session's environment, peek into
//! `private/`, replace a skill script, leave processes behind). Results are read from the
//! agent's log, which lives in the workspace (the only place it may write).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use air_friends::agent::{
    AgentRunner, ApprovalRules, Outcome, PermissionGate, RunnerSettings, Sandbox, SandboxSetup,
    SessionRun,
};
use air_friends::config::SandboxConfig;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

fn fake_agent() -> PathBuf {
    let bin = Path::new(env!("CARGO_BIN_EXE_air-friends"));
    let path = bin.parent().unwrap().join("examples/fake_acp_agent");
    assert!(
        path.exists(),
        "{} is missing: run `cargo test`",
        path.display()
    );
    path
}

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
        let dir = tempfile::tempdir().unwrap();
        let config = SandboxConfig::default();
        let path_var = std::env::var("PATH").ok();
        let agent = fake_agent();
        let sandbox = Sandbox::from_config(&SandboxSetup {
            config: &config,
            agent_program: Some(&agent),
            air_friends_bin: Path::new(env!("CARGO_BIN_EXE_air-friends")),
            skills_dir: &repo_skills(),
            agent_config_dir: None,
            protected: &[dir.path().join("air-friends.db")],
            path_var: path_var.as_deref(),
        })
        .expect("bubblewrap is installed (.ci/run installs it)");
        sandbox.probe().await.expect("the sandbox starts");
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

    fn workspace(&self, user: &str) -> PathBuf {
        let ws = self.dir.path().join("workspaces/discord").join(user);
        std::fs::create_dir_all(ws.join("tmp")).unwrap();
        ws
    }

    /// A session in `user`'s workspace running `steps` once; its script and log live in the
    /// workspace.
    fn session(
        &self,
        user: &str,
        dm: bool,
        steps: Value,
        extra_env: &[(&str, &str)],
    ) -> SessionRun {
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
        SessionRun {
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
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !std::fs::read_to_string(ws_a.join("sess-1-false.log.jsonl"))
        .unwrap_or_default()
        .contains("session/prompt")
    {
        assert!(
            std::time::Instant::now() < deadline,
            "session A never started its turn"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
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
    let deadline = std::time::Instant::now() + Duration::from_secs(3);
    while !running("sleep 413.1").is_empty() && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
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
