//! The agent runner against the scripted fake ACP agent (`examples/fake_acp_agent.rs`), which
//! really runs the commands it is told to: permission gate, retry prompt, timeouts,
//! termination, crashes, malformed output, fs confinement and process clean-up.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use air_friends::agent::{
    AgentRunner, ApprovalRules, Outcome, PermissionGate, RunnerSettings, SessionRun,
};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

fn fake_agent() -> PathBuf {
    let bin = Path::new(env!("CARGO_BIN_EXE_air-friends"));
    let path = bin.parent().unwrap().join("examples/fake_acp_agent");
    assert!(
        path.exists(),
        "{} is missing: run `cargo test` (which builds examples) or `cargo build --examples`",
        path.display()
    );
    path
}

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
        let log = dir.path().join("agent-log.jsonl");
        Fixture {
            dir,
            workspace,
            log,
            marker,
        }
    }

    fn script_path(&self) -> String {
        self.dir
            .path()
            .join("skills/send-reply/scripts/send-reply")
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
                    script_paths: vec!["skills/send-reply/scripts/send-reply".into()],
                    command_prefixes: vec![],
                },
                false,
            ),
        )
    }

    fn run(&self, script: Value) -> SessionRun {
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
        SessionRun {
            session_id: "sess-test".into(),
            workspace: self.workspace.clone(),
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

    fn agent_pid(&self) -> i32 {
        self.events("started")[0]["pid"].as_i64().unwrap() as i32
    }
}

fn process_gone(pid: i32) -> bool {
    // Reaped processes have no /proc entry; our child must never linger as a zombie.
    !Path::new(&format!("/proc/{pid}")).exists()
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
    assert!(process_gone(f.agent_pid()));
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
    let run = f.run(json!({"turns": [{"steps": [{"hang": true}]}]}));
    let outcome = f.runner(settings).run(run).await;
    assert_eq!(outcome, Outcome::TimedOut { phase: "idle" });
    assert_eq!(f.received("session/cancel").len(), 1);
    assert!(process_gone(f.agent_pid()));
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
}

#[tokio::test]
async fn connect_timeout_when_initialize_hangs() {
    let f = Fixture::new();
    let mut settings = f.settings();
    settings.connect_timeout = Duration::from_millis(300);
    let run = f.run(json!({"initialize": {"hang": true}, "turns": []}));
    let outcome = f.runner(settings).run(run).await;
    assert_eq!(outcome, Outcome::TimedOut { phase: "connect" });
    assert!(process_gone(f.agent_pid()));
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
    let run = f.run(json!({"turns": [{"steps": [{"crash": 3}]}]}));
    match f.runner(f.settings()).run(run).await {
        Outcome::Failed { reason } => assert!(reason.contains("closed"), "{reason}"),
        other => panic!("unexpected {other:?}"),
    }
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
        {"raw": "this is not json"},
        {"raw": "{\"jsonrpc\":\"2.0\"}"},
        {"raw": "[1,2]"},
        {"update": {"sessionUpdate": "brand_new_kind", "whatever": {"x": 1}}},
        {"permission": cmd}
    ], "stopReason": "some_future_reason"}]}));
    let outcome = f.runner(f.settings()).run(run).await;
    assert_eq!(outcome, Outcome::Responded { retried: false });
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

#[tokio::test]
async fn stubborn_agent_is_killed_within_the_grace_periods() {
    let f = Fixture::new();
    let mut settings = f.settings();
    settings.idle_timeout = Duration::from_millis(200);
    settings.kill_grace = Duration::from_millis(200);
    let run = f.run(json!({"ignoreStdinEof": true, "ignoreTerm": true,
        "turns": [{"steps": [{"silentMs": 60000}]}]}));
    let started = std::time::Instant::now();
    let outcome = f.runner(settings).run(run).await;
    assert_eq!(outcome, Outcome::TimedOut { phase: "idle" });
    assert!(
        started.elapsed() < Duration::from_secs(6),
        "{:?}",
        started.elapsed()
    );
    assert!(process_gone(f.agent_pid()));
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
