//! `air-friends chat` end to end with the scripted fake ACP agent: a typed line goes through
//! the router, the interaction, the agent runner and the permission gate; the agent runs the
//! real `skills/send-reply` script, whose client calls the Skill API with the session's token;
//! the send-reply handler prints the answer on the console.

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::json;

fn fake_agent() -> PathBuf {
    let path = Path::new(common::bin())
        .parent()
        .unwrap()
        .join("examples/fake_acp_agent");
    assert!(
        path.exists(),
        "build the examples first (`cargo test` does)"
    );
    path
}

fn skills_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("skills")
}

/// Runs `air-friends chat` with `script` as the agent's behaviour; returns (stdout, stderr,
/// success).
fn chat(script: serde_json::Value, input: &str) -> (String, String, bool) {
    let dir = tempfile::tempdir().unwrap();
    let script_path = dir.path().join("agent.json");
    std::fs::write(&script_path, script.to_string()).unwrap();
    let config = format!(
        "workspace:\n  repoPath: {data}\nagent:\n  command: {agent}\n  args: []\n  skillsDir: {skills}\n  idleTimeoutMs: 20000\n  env:\n    FAKE_ACP_SCRIPT: {script}\nprompts:\n  dir: {prompts}\n",
        data = dir.path().join("data").display(),
        agent = fake_agent().display(),
        skills = skills_dir().display(),
        script = script_path.display(),
        prompts = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("prompts")
            .display(),
    );
    let config_path = dir.path().join("config.yaml");
    std::fs::write(&config_path, config).unwrap();
    let mut child = Command::new(common::bin())
        .args(["chat", "--config"])
        .arg(&config_path)
        .env_remove("RUST_LOG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        out.status.success(),
    )
}

#[test]
fn a_typed_message_is_answered_through_the_real_skill() {
    let send_reply = skills_dir().join("send-reply/scripts/send-reply");
    let script = json!({"turns": [{"steps": [
        {"run": "printf 'Hello from the agent, it costs $5 and `nothing` else' > \"$TMPDIR/$SESSION_ID/reply.md\""},
        {"permission": format!("{} --message-file $TMPDIR/$SESSION_ID/reply.md", send_reply.display())}
    ]}]});
    let (stdout, stderr, ok) = chat(script, "hello there\n");
    assert!(ok, "chat failed:\n{stderr}");
    assert!(
        stdout.contains("air-friends> Hello from the agent, it costs $5 and `nothing` else"),
        "stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(
        !stdout.contains("ran into a problem"),
        "error reply on top of a real answer:\n{stdout}"
    );
}

#[test]
fn an_agent_that_never_answers_yields_the_error_reply_once() {
    let script = json!({"turns": [{"steps": []}]});
    let (stdout, stderr, ok) = chat(script, "hello?\n");
    assert!(ok, "{stderr}");
    assert_eq!(
        stdout
            .matches("I ran into a problem answering that")
            .count(),
        1,
        "stdout:\n{stdout}\nstderr:\n{stderr}"
    );
}
