//! The agent runner against the scripted fake ACP agent (`examples/fake_acp_agent.rs`), which
//! really runs the commands it is told to: permission gate, retry prompt, timeouts,
//! termination, crashes, malformed and oversized output, fs confinement and process clean-up.
//!
//! Clean-up is checked on the whole process group: after a session nothing whose process group
//! is the agent's still runs, including a `sleep 300` the agent left in the background. (A
//! killed grandchild is reparented to PID 1; where PID 1 does not reap, as in some containers,
//! it stays a zombie: dead, holding nothing but its process-table entry, so zombies count as
//! gone. The agent itself is our child and must be reaped, not left a zombie.)
//!
//! The doom-loop test at the end runs the whole `air-friends chat` pipeline: the fake agent
//! calls the real `send-reply` skill four times and the Skill API has the runner kill it.

mod common;

use common::poll::blocking_until;
use common::{AGENT_LOG, chat_command, fake_agent, run_with_input};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use air_friends::agent::rpc::MAX_LINE_BYTES;
use air_friends::agent::{
    AgentRun, AgentRunner, ApprovalRules, Outcome, PermissionGate, RunnerSettings,
};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

struct Fixture {
    dir: tempfile::TempDir,
    workspace: PathBuf,
    log: PathBuf,
    marker: PathBuf,
}

impl Fixture {
    fn new() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let workspace = dir.path().join("workspaces/discord/42");
        std::fs::create_dir_all(workspace.join("tmp")).unwrap();
        // A skill script like the real ones: it records that it ran.
        let scripts = dir.path().join("skills/send-reply/scripts");
        std::fs::create_dir_all(&scripts).unwrap();
        let marker = dir.path().join("replied");
        let script = scripts.join("send-reply");
        std::fs::write(
            &script,
            format!("#!/bin/sh\necho \"$@\" >> {}\n", marker.display()),
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        let log = dir.path().join(AGENT_LOG);
        Fixture {
            dir,
            workspace,
            log,
            marker,
        }
    }

    /// The canonical skills folder: the gate approves entrypoints by their real path.
    fn skills_dir(&self) -> PathBuf {
        std::fs::canonicalize(self.dir.path().join("skills")).unwrap()
    }

    fn script_path(&self) -> String {
        self.skills_dir()
            .join("send-reply/scripts/send-reply")
            .display()
            .to_string()
    }

    fn settings(&self) -> RunnerSettings {
        RunnerSettings {
            command: fake_agent().display().to_string(),
            args: vec![],
            model: None,
            connect_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(10),
            max_turn: Duration::from_secs(20),
            kill_grace: Duration::from_millis(500),
        }
    }

    fn runner(&self, settings: RunnerSettings) -> AgentRunner {
        AgentRunner::new(
            settings,
            PermissionGate::new(
                ApprovalRules {
                    skills_dir: self.skills_dir(),
                    entrypoints: vec!["send-reply/scripts/send-reply".into()],
                    command_prefixes: vec![],
                    skills_mounted_in_workspace: false,
                },
                false,
            ),
        )
    }

    fn run(&self, script: Value) -> AgentRun {
        let mut script = script;
        script["log"] = json!(self.log.display().to_string());
        let script_file = self.dir.path().join("script.json");
        std::fs::write(&script_file, script.to_string()).unwrap();
        let env = BTreeMap::from([
            ("PATH".to_owned(), "/usr/bin:/bin".to_owned()),
            (
                "FAKE_ACP_SCRIPT".to_owned(),
                script_file.display().to_string(),
            ),
            ("SESSION_ID".to_owned(), "sess-test".to_owned()),
        ]);
        let marker = self.marker.clone();
        AgentRun {
            session_id: "sess-test".into(),
            workspace: self.workspace.clone(),
            dm: true,
            api_socket_dir: None,
            env,
            prompt: "hello agent".into(),
            retry_prompt: Some("You must answer with send-reply or react-message.".into()),
            terminate: CancellationToken::new(),
            shutdown: CancellationToken::new(),
            probe: Arc::new(move || marker.exists()),
        }
    }

    fn log_lines(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    fn received(&self, method: &str) -> Vec<Value> {
        self.log_lines()
            .into_iter()
            .filter(|l| l["received"]["method"] == method)
            .map(|l| l["received"].clone())
            .collect()
    }

    fn events(&self, event: &str) -> Vec<Value> {
        self.log_lines()
            .into_iter()
            .filter(|l| l["event"] == event)
            .collect()
    }

    /// Pids of the background grandchildren started with [`background_sleep`].
    fn grandchildren(&self) -> Vec<i32> {
        self.events("run")
            .iter()
            .filter(|e| {
                e["command"]
                    .as_str()
                    .is_some_and(|c| c.contains("sleep 300"))
            })
            .map(|e| {
                e["result"]["stdout"]
                    .as_str()
                    .unwrap()
                    .trim()
                    .parse()
                    .unwrap()
            })
            .collect()
    }

    /// After a session: the agent was reaped, and nothing in its process group still runs —
    /// in particular not the grandchildren it left behind (`expect_grandchildren` of them).
    fn assert_no_agent_processes_left(&self, expect_grandchildren: usize) {
        let started = &self.events("started")[0];
        let pid = started["pid"].as_i64().unwrap() as i32;
        let pgid = started["pgid"].as_i64().unwrap() as i32;
        assert_eq!(pid, pgid, "the agent leads its own process group");
        assert!(process_gone(pid), "agent {pid} was not reaped");
        let grandchildren = self.grandchildren();
        assert_eq!(
            grandchildren.len(),
            expect_grandchildren,
            "background grandchildren started"
        );
        for &gc in &grandchildren {
            // Still readable (as a zombie) where PID 1 does not reap: it was in the group.
            if let Some((_, group)) = proc_state(gc) {
                assert_eq!(group, pgid, "grandchild {gc} was in the agent's group");
            }
        }
        // SIGKILL has been sent when the runner returns; its delivery is asynchronous.
        let mut left = Vec::new();
        let gone = blocking_until(Duration::from_secs(10), || {
            left = running_in_group(pgid);
            left.is_empty()
        });
        assert!(
            gone,
            "processes of the agent's group {pgid} still running: {left:?}"
        );
        for gc in grandchildren {
            assert!(!running(gc), "grandchild {gc} still running");
        }
    }
}

fn process_gone(pid: i32) -> bool {
    // Reaped processes have no /proc entry; our child must never linger as a zombie.
    !Path::new(&format!("/proc/{pid}")).exists()
}

/// `(state, pgrp)` of a process from `/proc/<pid>/stat`, or None once it is gone. The command
/// name is parenthesised and may contain spaces, so fields are counted after the last `)`.
fn proc_state(pid: i32) -> Option<(char, i32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let mut rest = stat[stat.rfind(')')? + 1..].split_whitespace();
    let state = rest.next()?.chars().next()?;
    let pgrp = rest.nth(1)?.parse().ok()?;
    Some((state, pgrp))
}

/// A process that is still running: exists and is neither a zombie (`Z`) nor dead (`X`).
fn running(pid: i32) -> bool {
    proc_state(pid).is_some_and(|(state, _)| !matches!(state, 'Z' | 'X'))
}

/// Every running process whose process group is `pgid`, as `pid (comm)`.
fn running_in_group(pgid: i32) -> Vec<String> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return vec![];
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| proc_state(pid).is_some_and(|(s, g)| g == pgid && !matches!(s, 'Z' | 'X')))
        .map(|pid| {
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            format!("{pid} ({})", comm.trim())
        })
        .collect()
}

/// A step that leaves a grandchild running in the agent's process group (stdio detached so the
/// fake agent's `sh -c` returns at once), printing its pid.
fn background_sleep() -> Value {
    json!({"run": "sleep 300 >/dev/null 2>&1 & echo $!"})
}

#[tokio::test]
async fn approved_skill_invocation_answers_the_user() {
    let f = Fixture::new();
    let cmd = format!(
        "{} --message-file $TMPDIR/$SESSION_ID/r.md",
        f.script_path()
    );
    let run = f.run(json!({"turns": [{"steps": [
        {"update": {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "thinking"}}},
        background_sleep(),
        {"permission": cmd}
    ], "stopReason": "end_turn"}]}));
    let outcome = f.runner(f.settings()).run(run).await;
    assert_eq!(outcome, Outcome::Responded { retried: false });
    let init = &f.received("initialize")[0];
    assert_eq!(init["params"]["protocolVersion"], 1);
    assert_eq!(init["params"]["clientCapabilities"]["terminal"], false);
    let new = &f.received("session/new")[0];
    assert_eq!(new["params"]["mcpServers"], json!([]));
    assert!(
        new["params"]["cwd"]
            .as_str()
            .unwrap()
            .ends_with("workspaces/discord/42")
    );
    let prompt = &f.received("session/prompt")[0];
    assert_eq!(prompt["params"]["prompt"][0]["text"], "hello agent");
    let perm = &f.events("permission")[0];
    assert_eq!(perm["allowed"], true);
    assert_eq!(perm["result"]["exit"], 0);
    f.assert_no_agent_processes_left(1);
}

#[tokio::test]
async fn injection_around_a_skill_name_is_rejected_and_not_run() {
    let f = Fixture::new();
    let pwned = f.dir.path().join("pwned");
    let cmd = format!(
        "{} --message-file x; touch {}",
        f.script_path(),
        pwned.display()
    );
    let run = f.run(json!({"turns": [{"steps": [{"permission": cmd}], "stopReason": "end_turn"}]}));
    let outcome = f.runner(f.settings()).run(run).await;
    assert_eq!(outcome, Outcome::NoResponse { retried: true });
    assert!(!pwned.exists(), "the injected command ran");
    let perms = f.events("permission");
    assert_eq!(perms[0]["allowed"], false);
    assert_eq!(perms[0]["outcome"]["optionId"], "reject");
    f.assert_no_agent_processes_left(0);
}

#[tokio::test]
async fn retry_prompt_is_sent_once_when_the_agent_did_not_answer() {
    let f = Fixture::new();
    let cmd = format!("{} --message-file a", f.script_path());
    let run = f.run(json!({"turns": [
        {"steps": [], "stopReason": "end_turn"},
        {"steps": [{"permission": cmd}], "stopReason": "end_turn"}
    ]}));
    let outcome = f.runner(f.settings()).run(run).await;
    assert_eq!(outcome, Outcome::Responded { retried: true });
    let prompts = f.received("session/prompt");
    assert_eq!(prompts.len(), 2);
    assert!(
        prompts[1]["params"]["prompt"][0]["text"]
            .as_str()
            .unwrap()
            .contains("send-reply")
    );
}

#[tokio::test]
async fn no_second_retry() {
    let f = Fixture::new();
    let run = f.run(json!({"turns": [{"steps": [], "stopReason": "end_turn"}]}));
    let outcome = f.runner(f.settings()).run(run).await;
    assert_eq!(outcome, Outcome::NoResponse { retried: true });
    assert_eq!(f.received("session/prompt").len(), 2);
}

#[tokio::test]
async fn idle_timeout_cancels_then_stops_the_agent() {
    let f = Fixture::new();
    let mut settings = f.settings();
    settings.idle_timeout = Duration::from_millis(300);
    let run = f.run(json!({"turns": [{"steps": [background_sleep(), {"hang": true}]}]}));
    let outcome = f.runner(settings).run(run).await;
    assert_eq!(outcome, Outcome::TimedOut { phase: "idle" });
    assert_eq!(f.received("session/cancel").len(), 1);
    f.assert_no_agent_processes_left(1);
}

#[tokio::test]
async fn max_turn_bounds_a_chatty_agent() {
    let f = Fixture::new();
    let mut settings = f.settings();
    settings.idle_timeout = Duration::from_millis(400);
    settings.max_turn = Duration::from_millis(800);
    let mut steps = Vec::new();
    for _ in 0..40 {
        steps.push(json!({"update": {"sessionUpdate": "plan", "entries": []}}));
        steps.push(json!({"sleepMs": 100}));
    }
    let run = f.run(json!({"turns": [{"steps": steps}]}));
    let outcome = f.runner(settings).run(run).await;
    assert_eq!(outcome, Outcome::TimedOut { phase: "max_turn" });
    f.assert_no_agent_processes_left(0);
}

#[tokio::test]
async fn connect_timeout_when_initialize_hangs() {
    let f = Fixture::new();
    let mut settings = f.settings();
    settings.connect_timeout = Duration::from_millis(300);
    let run =
        f.run(json!({"initialize": {"hang": true, "run": background_sleep()["run"]}, "turns": []}));
    let outcome = f.runner(settings).run(run).await;
    assert_eq!(outcome, Outcome::TimedOut { phase: "connect" });
    f.assert_no_agent_processes_left(1);
}

#[tokio::test]
async fn termination_request_stops_the_agent_immediately() {
    let f = Fixture::new();
    let run = f.run(json!({"turns": [{"steps": [{"hang": true}]}]}));
    let terminate = run.terminate.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        terminate.cancel();
    });
    let started = std::time::Instant::now();
    let outcome = f.runner(f.settings()).run(run).await;
    assert_eq!(outcome, Outcome::Terminated);
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(f.received("session/cancel").len(), 1);
    f.assert_no_agent_processes_left(0);
}

#[tokio::test]
async fn shutdown_cancels_the_session() {
    let f = Fixture::new();
    let run = f.run(json!({"turns": [{"steps": [{"hang": true}]}]}));
    let shutdown = run.shutdown.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        shutdown.cancel();
    });
    assert_eq!(f.runner(f.settings()).run(run).await, Outcome::Cancelled);
}

#[tokio::test]
async fn a_crashing_agent_fails_the_session() {
    let f = Fixture::new();
    // The agent dies but its background grandchild would live on in its group.
    let run = f.run(json!({"turns": [{"steps": [background_sleep(), {"crash": 3}]}]}));
    match f.runner(f.settings()).run(run).await {
        Outcome::Failed { reason } => assert!(reason.contains("closed"), "{reason}"),
        other => panic!("unexpected {other:?}"),
    }
    f.assert_no_agent_processes_left(1);
}

#[tokio::test]
async fn a_prompt_error_fails_the_session() {
    let f = Fixture::new();
    let run = f.run(
        json!({"turns": [{"steps": [{"promptError": "Internal error: fake upstream failure"}]}]}),
    );
    match f.runner(f.settings()).run(run).await {
        Outcome::Failed { reason } => assert!(reason.contains("fake upstream failure"), "{reason}"),
        other => panic!("unexpected {other:?}"),
    }
}

#[tokio::test]
async fn malformed_lines_and_unknown_kinds_are_tolerated() {
    let f = Fixture::new();
    let cmd = format!("{} --message-file a", f.script_path());
    let run = f.run(json!({"turns": [{"steps": [
        background_sleep(),
        {"raw": "this is not json"},
        {"raw": "{\"jsonrpc\":\"2.0\"}"},
        {"raw": "[1,2]"},
        {"update": {"sessionUpdate": "brand_new_kind", "whatever": {"x": 1}}},
        {"permission": cmd}
    ], "stopReason": "some_future_reason"}]}));
    let outcome = f.runner(f.settings()).run(run).await;
    assert_eq!(outcome, Outcome::Responded { retried: false });
    f.assert_no_agent_processes_left(1);
}

#[tokio::test]
async fn fs_requests_are_confined_and_unknown_requests_get_method_not_found() {
    let f = Fixture::new();
    let outside = f.dir.path().join("outside.txt");
    std::fs::write(&outside, "secret").unwrap();
    let inside = f.workspace.join("tmp/sess-test/reply.md");
    let run = f.run(json!({"turns": [{"steps": [
        {"fsWrite": {"path": inside, "content": "hello"}},
        {"fsRead": inside},
        {"fsRead": outside},
        {"fsWrite": {"path": f.workspace.join("../43/evil.txt"), "content": "x"}},
        {"request": {"method": "terminal/create", "params": {"command": "id"}}}
    ]}]}));
    f.runner(f.settings()).run(run).await;
    assert_eq!(std::fs::read_to_string(&inside).unwrap(), "hello");
    let reads = f.events("fsRead");
    assert_eq!(reads[0]["answer"]["result"]["content"], "hello");
    assert!(reads[1]["answer"]["error"].is_object());
    assert!(!reads[1].to_string().contains("secret"));
    let writes = f.events("fsWrite");
    assert!(writes[1]["answer"]["error"].is_object());
    assert!(!f.workspace.join("../43/evil.txt").exists());
    let req = &f.events("request")[0];
    assert_eq!(req["answer"]["error"]["code"], -32601);
}

fn mkfifo(path: &Path) {
    let made = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .unwrap();
    assert!(made.success(), "mkfifo {}", path.display());
}

/// The error message the agent got for its `n`th `event` (fsRead / fsWrite) step.
fn fs_error_message(f: &Fixture, event: &str, n: usize) -> String {
    let answer = &f.events(event)[n]["answer"];
    answer["error"]["message"]
        .as_str()
        .unwrap_or_else(|| panic!("{event} #{n} was not refused: {answer}"))
        .to_owned()
}

#[tokio::test]
async fn fs_read_of_a_fifo_is_refused_at_once_and_the_idle_timeout_still_fires() {
    let f = Fixture::new();
    let fifo = f.workspace.join("pipe");
    mkfifo(&fifo);
    let mut settings = f.settings();
    settings.idle_timeout = Duration::from_millis(500);
    let run = f.run(json!({"turns": [{"steps": [{"fsRead": fifo}, {"hang": true}]}]}));
    let runner = f.runner(settings);
    let session = tokio::spawn(async move { runner.run(run).await });
    let Ok(outcome) = tokio::time::timeout(Duration::from_secs(15), session).await else {
        // Give a reader stuck on the FIFO its EOF, so this fails instead of hanging.
        use std::os::unix::fs::OpenOptionsExt;
        let _ = std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(nix::libc::O_NONBLOCK)
            .open(&fifo);
        panic!("the session never ended: fs/read_text_file of a FIFO stalled the turn loop");
    };
    assert_eq!(outcome.unwrap(), Outcome::TimedOut { phase: "idle" });
    let message = fs_error_message(&f, "fsRead", 0);
    assert!(message.contains("FIFO"), "{message}");
    f.assert_no_agent_processes_left(0);
}

#[tokio::test]
async fn fs_requests_refuse_a_hard_link_and_never_write_through_it() {
    let f = Fixture::new();
    let outside = f.dir.path().join("outside.txt");
    std::fs::write(&outside, "secret").unwrap();
    let link = f.workspace.join("notes.txt");
    std::fs::hard_link(&outside, &link).unwrap();
    let run = f.run(json!({"turns": [{"steps": [
        {"fsRead": link},
        {"fsWrite": {"path": link, "content": "overwritten"}}
    ]}]}));
    f.runner(f.settings()).run(run).await;
    for event in ["fsRead", "fsWrite"] {
        let message = fs_error_message(&f, event, 0);
        assert!(message.contains("hard links"), "{event}: {message}");
    }
    assert!(!f.events("fsRead")[0].to_string().contains("secret"));
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "secret");
}

#[tokio::test]
async fn fs_requests_cannot_reach_private_in_a_public_session() {
    let f = Fixture::new();
    let private = f.workspace.join("private");
    std::fs::create_dir_all(&private).unwrap();
    std::fs::write(private.join("notes.md"), "from a dm").unwrap();
    std::os::unix::fs::symlink(private.join("notes.md"), f.workspace.join("tmp/notes.md")).unwrap();
    let steps = json!({"turns": [{"steps": [
        {"fsRead": private.join("notes.md")},
        {"fsRead": f.workspace.join("tmp/notes.md")},
        {"fsWrite": {"path": private.join("new.md"), "content": "x"}}
    ]}]});
    let mut run = f.run(steps.clone());
    run.dm = false;
    f.runner(f.settings()).run(run).await;
    for (event, n) in [("fsRead", 0), ("fsRead", 1), ("fsWrite", 0)] {
        let message = fs_error_message(&f, event, n);
        assert!(message.contains("cannot use"), "{event} #{n}: {message}");
    }
    assert!(
        !f.log_lines()
            .iter()
            .any(|l| l.to_string().contains("from a dm"))
    );
    assert!(!private.join("new.md").exists());
    // The same requests in a DM session are served.
    std::fs::remove_file(&f.log).unwrap();
    f.runner(f.settings()).run(f.run(steps)).await;
    assert_eq!(
        f.events("fsRead")[0]["answer"]["result"]["content"],
        "from a dm"
    );
    assert_eq!(
        std::fs::read_to_string(private.join("new.md")).unwrap(),
        "x"
    );
}

#[tokio::test]
async fn stubborn_agent_is_killed_within_the_grace_periods() {
    let f = Fixture::new();
    let mut settings = f.settings();
    settings.idle_timeout = Duration::from_millis(200);
    settings.kill_grace = Duration::from_millis(200);
    let run = f.run(json!({"ignoreStdinEof": true, "ignoreTerm": true,
        "turns": [{"steps": [background_sleep(), {"silentMs": 60000}]}]}));
    let started = std::time::Instant::now();
    let outcome = f.runner(settings).run(run).await;
    assert_eq!(outcome, Outcome::TimedOut { phase: "idle" });
    assert!(
        started.elapsed() < Duration::from_secs(6),
        "{:?}",
        started.elapsed()
    );
    f.assert_no_agent_processes_left(1);
}

#[tokio::test]
async fn model_is_selected_when_offered() {
    let f = Fixture::new();
    let mut settings = f.settings();
    settings.model = Some("fake/other-model".into());
    let options = json!([{"id": "model", "category": "model", "type": "select",
        "currentValue": "fake/fake-model",
        "options": [{"value": "fake/fake-model", "name": "A"}, {"value": "fake/other-model", "name": "B"}]}]);
    let run = f.run(json!({"sessionNew": {"configOptions": options}, "turns": [{"steps": []}]}));
    f.runner(settings).run(run).await;
    let set = f.received("session/set_config_option");
    assert_eq!(set.len(), 1);
    assert_eq!(set[0]["params"]["configId"], "model");
    assert_eq!(set[0]["params"]["value"], "fake/other-model");
}

#[tokio::test]
async fn unknown_protocol_version_fails() {
    let f = Fixture::new();
    let run = f.run(json!({"initialize": {"protocolVersion": 2}, "turns": []}));
    match f.runner(f.settings()).run(run).await {
        Outcome::Failed { reason } => assert!(reason.contains("protocol version"), "{reason}"),
        other => panic!("unexpected {other:?}"),
    }
}

#[tokio::test]
async fn the_agent_sees_exactly_the_environment_we_built() {
    let f = Fixture::new();
    let run = f.run(json!({"turns": [{"steps": []}]}));
    f.runner(f.settings()).run(run).await;
    let env = f.events("started")[0]["env"].clone();
    let names: Vec<&str> = env
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(names, ["FAKE_ACP_SCRIPT", "PATH", "SESSION_ID"]);
}

#[test]
fn the_group_scan_sees_a_live_group() {
    // Guards the clean-up assertions against passing vacuously: a live group is found.
    use std::os::unix::process::CommandExt;
    let mut child = std::process::Command::new("sh")
        .args(["-c", "sleep 300 & wait"])
        .process_group(0)
        .spawn()
        .unwrap();
    let pgid = child.id() as i32;
    assert!(
        blocking_until(Duration::from_secs(10), || running_in_group(pgid).len()
            == 2),
        "{:?}",
        running_in_group(pgid)
    );
    nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pgid), nix::sys::signal::SIGKILL).unwrap();
    child.wait().unwrap();
    assert!(blocking_until(Duration::from_secs(10), || {
        running_in_group(pgid).is_empty()
    }));
}

/// Set in the child process that [`a_20_mb_line_is_skipped_and_never_held_whole`] re-runs
/// itself in.
const BIG_LINE_CHILD: &str = "AIR_FRIENDS_TEST_BIG_LINE_CHILD";
/// The child's report: growth of its peak resident memory during the session.
const PEAK_GROWTH_MARK: &str = "PEAK_RSS_GROWTH_KB=";
const BIG_LINE_BYTES: u64 = 20_000_000;

/// A `VmRSS`/`VmHWM` figure of this process, in kB.
fn own_memory_kb(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/self/status"))
}

/// A 20 MB line on the agent's stdout (over the 8 MiB cap) is skipped, the session
/// carries on to the approved skill call after it, and the line is never held in memory whole.
/// The memory peak is measured in a fresh process running only this test, so other tests'
/// allocations cannot blur it.
#[tokio::test]
async fn a_20_mb_line_is_skipped_and_never_held_whole() {
    if std::env::var_os(BIG_LINE_CHILD).is_none() {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "a_20_mb_line_is_skipped_and_never_held_whole",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(BIG_LINE_CHILD, "1")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "child failed\nstdout:\n{stdout}\nstderr:\n{stderr}"
        );
        let growth_kb: u64 = stdout
            .lines()
            .find_map(|l| l.split_once(PEAK_GROWTH_MARK))
            .map(|(_, v)| v)
            .unwrap_or_else(|| panic!("no memory report from the child:\n{stdout}"))
            .trim()
            .parse()
            .unwrap();
        // Holding the line would add at least its 20 MB; the bounded reader keeps at most the
        // 8 MiB cap (plus its 8 KiB read buffer) before discarding. Fail halfway between.
        let limit = (MAX_LINE_BYTES as u64 + BIG_LINE_BYTES) / 2;
        assert!(
            growth_kb * 1024 < limit,
            "peak resident memory grew by {growth_kb} kB while a {BIG_LINE_BYTES}-byte line went \
             by (limit {limit} bytes: the line must not be held whole)"
        );
        return;
    }

    let f = Fixture::new();
    let cmd = format!("{} --message-file a", f.script_path());
    let run = f.run(json!({"turns": [{"steps": [
        {"bigLine": BIG_LINE_BYTES},
        {"update": {"sessionUpdate": "plan", "entries": []}},
        {"permission": cmd}
    ], "stopReason": "end_turn"}]}));
    // Start the peak at the current resident size (best effort: needs Linux ≥ 4.0).
    let _ = std::fs::write("/proc/self/clear_refs", "5");
    let before = own_memory_kb("VmRSS");
    let outcome = f.runner(f.settings()).run(run).await;
    let peak = own_memory_kb("VmHWM");
    assert_eq!(outcome, Outcome::Responded { retried: false });
    assert_eq!(f.events("bigLine")[0]["bytes"], BIG_LINE_BYTES);
    assert_eq!(f.events("permission")[0]["allowed"], true);
    assert!(f.marker.exists(), "the skill after the big line ran");
    f.assert_no_agent_processes_left(0);
    println!("{PEAK_GROWTH_MARK}{}", peak.saturating_sub(before));
}

/// Runs `air-friends chat` with the fake agent following `script` (which must carry a `log`);
/// the typed `input` is one message. Returns (stdout, stderr, success). The agent runs without
/// the sandbox: these tests watch its host pid and read its log outside the workspace (the
/// sandbox has its own tests in `tests/sandbox.rs` and `tests/chat.rs`).
fn chat(dir: &Path, script: &Value, input: &str, agent_config: &str) -> (String, String, bool) {
    let script_path = dir.join("agent.json");
    std::fs::write(&script_path, script.to_string()).unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = format!(
        "workspace:\n  repoPath: {data}\nagent:\n  command: {agent}\n  args: []\n  skillsDir: {skills}\n  sandbox:\n    mode: none\n{agent_config}  env:\n    FAKE_ACP_SCRIPT: {script}\nprompts:\n  dir: {prompts}\n",
        data = dir.join("data").display(),
        agent = fake_agent().display(),
        skills = root.join("skills").display(),
        script = script_path.display(),
        prompts = root.join("prompts").display(),
    );
    let config_path = dir.join("config.yaml");
    std::fs::write(&config_path, config).unwrap();
    let out = run_with_input(&mut chat_command(&config_path), input.as_bytes());
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        out.status.success(),
    )
}

fn unix_us_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64
}

/// Doom-loop protection through the whole pipeline: the agent calls the real `send-reply`
/// skill four times in quick succession (a fresh payload file each time). The user gets exactly one reply; calls 2
/// and 3 are refused (429 `QUOTA_EXCEEDED`); the 4th is refused by the manifest's burst limit
/// (429 `RATE_LIMITED`) and still counts: it is answered, telling the agent it is being ended,
/// and then the runner kills the agent — which would otherwise sit silent for ten minutes,
/// ignoring cancel and stdin EOF — long before the two-minute idle timeout. No error reply is
/// added on top of the answer.
#[test]
fn quick_doom_loop_of_send_reply_terminates_the_agent_despite_the_rate_limit() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join(AGENT_LOG);
    let send_reply =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("skills/send-reply/scripts/send-reply");
    let mut steps = Vec::new();
    for n in 1..=4 {
        // No pause: send-reply's manifest allows a burst of 3, so the 4th call is rate-limited.
        steps.push(json!({"run": format!("printf 'Answer number {n}' > \"$TMPDIR/$SESSION_ID/reply-{n}.md\"")}));
        steps.push(json!({"permission": format!(
            "{} --message-file $TMPDIR/$SESSION_ID/reply-{n}.md",
            send_reply.display()
        )}));
    }
    steps.push(json!({"silentMs": 600_000}));
    let script = json!({"log": log, "ignoreStdinEof": true, "turns": [{"steps": steps}]});

    let idle_timeout = Duration::from_secs(120);
    // Watch the agent from outside: when did its process disappear?
    let watch_log = log.clone();
    let watcher = std::thread::spawn(move || {
        let mut pid = None;
        blocking_until(Duration::from_secs(60), || {
            pid = std::fs::read_to_string(&watch_log)
                .unwrap_or_default()
                .lines()
                .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                .find(|l| l["event"] == "started")
                .and_then(|l| l["pid"].as_i64());
            pid.is_some()
        });
        let pid = pid.expect("the agent started") as i32;
        assert!(
            blocking_until(idle_timeout + Duration::from_secs(30), || process_gone(pid)),
            "agent {pid} still there"
        );
        unix_us_now()
    });

    let (stdout, stderr, ok) = chat(
        dir.path(),
        &script,
        "hello there\n",
        &format!(
            "  idleTimeoutMs: {}\n  maxTurnMs: 600000\n  killGraceMs: 1000\n",
            idle_timeout.as_millis()
        ),
    );
    let gone_at_us = watcher.join().unwrap();
    assert!(ok, "chat failed:\n{stderr}");
    let replies: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("air-friends> "))
        .collect();
    assert_eq!(
        replies,
        ["air-friends> Answer number 1"],
        "the user gets exactly the first reply and no error reply\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(!stdout.contains("ran into a problem"), "{stdout}");

    let lines: Vec<Value> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let calls: Vec<&Value> = lines
        .iter()
        .filter(|l| l["event"] == "permission")
        .collect();
    assert_eq!(calls.len(), 4, "all four calls were approved and run");
    assert!(calls.iter().all(|c| c["allowed"] == true));
    assert_eq!(calls[0]["result"]["exit"], 0, "{}", calls[0]);
    for refused in &calls[1..3] {
        assert_eq!(refused["result"]["exit"], 1, "{refused}");
        let err = refused["result"]["stderr"].as_str().unwrap();
        assert!(err.contains("already sent your reply"), "{err}");
        assert!(!err.contains("sessionTerminated"), "{err}");
    }
    let fourth = calls[3];
    let err = fourth["result"]["stderr"].as_str().unwrap();
    assert_eq!(fourth["result"]["exit"], 1, "{fourth}");
    assert!(err.contains("RATE_LIMITED"), "{err}");
    assert!(
        err.contains("\"sessionTerminated\":true") && err.contains("being ended now"),
        "the 4th call got its response before the agent was stopped: {err}"
    );
    let answered_at_us = fourth["atUs"].as_u64().unwrap();
    let after = Duration::from_micros(gone_at_us.saturating_sub(answered_at_us));
    assert!(
        after < Duration::from_secs(30),
        "the agent lived {after:?} after the 4th call was answered (idle timeout {idle_timeout:?})"
    );
    assert!(
        stderr.contains("Skill API asked to terminate the agent"),
        "{stderr}"
    );
    assert!(
        !lines.iter().any(|l| l["event"] == "crash"),
        "the agent did not exit on its own"
    );
    let pgid = lines.iter().find(|l| l["event"] == "started").unwrap()["pgid"]
        .as_i64()
        .unwrap() as i32;
    assert!(
        blocking_until(Duration::from_secs(10), || running_in_group(pgid)
            .is_empty()),
        "{:?}",
        running_in_group(pgid)
    );
}

/// A turn ends with every message the agent wrote before its answer served as that turn's.
/// Turn 1 floods updates and answers at once; turn 2 shows no work at all. Its hang must be
/// seen within `first_sign_within`: turn 1's last updates, still queued when its answer came,
/// must not pass for turn 2's work (which would leave a hung warm agent waiting for the idle
/// timeout instead of being replaced).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turns_leftover_updates_do_not_count_as_the_next_turns_work() {
    let f = Fixture::new();
    let updates: Vec<Value> = (0..200)
        .map(|i| {
            json!({"update": {"sessionUpdate": "agent_message_chunk",
            "content": {"type": "text", "text": format!("chunk {i}")}}})
        })
        .collect();
    let run = f.run(json!({"turns": [
        {"steps": updates},
        {"steps": [{"silentMs": 8000}]}
    ]}));
    let (spec, mut turn) = run.split();
    turn.retry_prompt = None;
    let runner = f.runner(f.settings());
    let mut agent = runner
        .start(spec, &turn.terminate, &turn.shutdown)
        .await
        .expect("starts");
    assert_eq!(
        agent.prompt(&turn).await,
        Outcome::NoResponse { retried: false }
    );
    turn.first_sign_within = Some(Duration::from_millis(300));
    let asked = std::time::Instant::now();
    let outcome = agent.prompt(&turn).await;
    let took = asked.elapsed();
    agent.stop().await;
    assert!(matches!(outcome, Outcome::Failed { .. }), "{outcome:?}");
    // 300 ms, then the cancel's grace (2 s) that a silent agent uses up; never the 8 s.
    assert!(took < Duration::from_secs(4), "{took:?}");
}
