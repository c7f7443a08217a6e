//! No live session token in any log line, at debug level: the log writer's `Redactor` knows the
//! caller token of every live Skill API session (the session registry publishes it into the
//! redactor's live set), plus `--token <x>` / `--token=<x>` and `Bearer …`.
//!
//! First in-process, with the daemon's own writer and lines shaped like the agent's stderr and
//! the permission gate's decision; then through `air-friends chat`, where the scripted fake agent
//! writes its `SKILL_API_TOKEN` to its own stderr, which the runner logs at debug.

mod common;

use air_friends::platform::Origin;
use common::fake_agent;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use air_friends::observability::{RedactingMakeWriter, Redactor};
use air_friends::platform::PlatformKind;
use air_friends::session::SessionContext;
use air_friends::skill_api::{SkillApiMetrics, SkillApiSettings, SkillApiState, SkillRegistry};
use prometheus_client::registry::Registry;
use serde_json::json;

#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .extend_from_slice(data);
        Ok(data.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap_or_else(|e| e.into_inner())).into_owned()
    }
}

fn context() -> SessionContext {
    SessionContext {
        place: Default::default(),
        origin: Origin {
            platform: PlatformKind::Console,
            channel_id: "console".into(),
            guild_id: None,
            user_id: "u1".into(),
            username: "alice".into(),
            is_dm: true,
        },
        purpose: Default::default(),
        trigger_message_id: Some("m1".into()),
        workspace: PathBuf::from("/tmp/ws"),
    }
}

#[test]
fn debug_lines_carrying_a_live_session_token_come_out_masked() {
    let redactor = Redactor::new(["static-platform-secret".to_owned()]);
    let api = SkillApiState::with_live_tokens(
        SkillApiSettings::default(),
        SkillRegistry::new(),
        SkillApiMetrics::new(&mut Registry::default()),
        redactor.live_secrets(),
    );
    let session = api.sessions().register(context()).expect("register");
    let token = session.caller_token.expose_secret().to_owned();
    let other = api.sessions().register(context()).expect("register");
    let other_token = other.caller_token.expose_secret().to_owned();

    let out = Captured::default();
    let sink = out.clone();
    let subscriber = tracing_subscriber::fmt()
        .json()
        .with_max_level(tracing::Level::DEBUG)
        .with_writer(RedactingMakeWriter::new(redactor, move || sink.clone()))
        .finish();
    tracing::subscriber::with_default(subscriber, || {
        let id = session.session_id.as_str();
        // What `drain_stderr` logs for an agent that echoes its environment.
        tracing::debug!(session_id = id, line = %format!("env: SKILL_API_TOKEN={token}"), "agent stderr");
        tracing::debug!(session_id = id, line = %format!("curl -H 'Authorization: Bearer {token}'"), "agent stderr");
        // What the gate logs: the command as the agent sent it (Debug-formatted).
        tracing::info!(
            session_id = id,
            command = ?format!("air-friends skill send-reply --token {other_token} --x"),
            allow = false,
            "permission decision"
        );
        tracing::debug!(
            line = "client --token=abc123def and --token plain-value",
            "agent stderr"
        );
    });
    let text = out.text();
    assert_eq!(text.lines().count(), 4, "{text}");
    for secret in [
        token.as_str(),
        other_token.as_str(),
        "abc123def",
        "plain-value",
    ] {
        assert!(!text.contains(secret), "{secret} logged:\n{text}");
    }
    assert!(text.contains("SKILL_API_TOKEN=***"), "{text}");
    assert!(text.contains("Bearer ***"), "{text}");
    assert!(text.contains("--token *** --x"), "{text}");
    assert!(text.contains("--token=*** and --token ***"), "{text}");
}

fn find_file(dir: &Path, name: &str) -> Option<PathBuf> {
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let path = entry.path();
        if path.file_name().is_some_and(|n| n == name) {
            return Some(path);
        }
        if path.is_dir()
            && let Some(found) = find_file(&path, name)
        {
            return Some(found);
        }
    }
    None
}

#[test]
fn the_agent_printing_its_token_to_stderr_never_puts_it_in_the_daemon_log() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let send_reply = root.join("skills/send-reply/scripts/send-reply");
    // The agent keeps its token in its workspace (so the test learns it) and writes it to its
    // own stderr (the runner's `agent stderr` lines) in three spellings.
    let leak = "printf '%s' \"$SKILL_API_TOKEN\" > token.txt; \
                printf 'dump SKILL_API_TOKEN=%s then --token %s and Bearer %s\\n' \
                \"$SKILL_API_TOKEN\" \"$SKILL_API_TOKEN\" \"$SKILL_API_TOKEN\" > /proc/$PPID/fd/2";
    let script = json!({"turns": [{"steps": [
        {"run": leak},
        {"run": "printf 'done' > \"$TMPDIR/$SESSION_ID/reply.md\""},
        {"permission": format!("{} --message-file $TMPDIR/$SESSION_ID/reply.md", send_reply.display())}
    ]}]});
    let agent_dir = dir.path().join("agent");
    std::fs::create_dir_all(&agent_dir).expect("mkdir");
    let script_path = agent_dir.join("agent.json");
    std::fs::write(&script_path, script.to_string()).expect("script");
    let config = format!(
        "workspace:\n  repoPath: {data}\nagent:\n  command: {agent}\n  args: []\n  skillsDir: {skills}\n  \
         idleTimeoutMs: 20000\n  env:\n    FAKE_ACP_SCRIPT: {script}\n  sandbox:\n    mode: none\n\
         prompts:\n  dir: {prompts}\nlogging:\n  level: debug\n",
        data = dir.path().join("data").display(),
        agent = fake_agent().display(),
        skills = root.join("skills").display(),
        script = script_path.display(),
        prompts = root.join("prompts").display(),
    );
    let config_path = dir.path().join("config.yaml");
    std::fs::write(&config_path, config).expect("config");
    let out = common::run_with_input(
        &mut common::chat_command(&config_path),
        b"show me your token\n",
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "chat failed:\n{log}");
    assert!(stdout.contains("air-friends> done"), "{stdout}\n{log}");

    let token_file = find_file(&dir.path().join("data"), "token.txt")
        .unwrap_or_else(|| panic!("the agent wrote no token file\n{log}"));
    let token = std::fs::read_to_string(token_file).expect("token");
    assert_eq!(token.len(), 64, "a caller token: {token:?}");
    let dumped: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("agent stderr") && l.contains("dump"))
        .collect();
    assert_eq!(
        dumped.len(),
        1,
        "the stderr line was logged at debug:\n{log}"
    );
    assert!(
        dumped[0].contains("SKILL_API_TOKEN=*** then --token *** and Bearer ***"),
        "{}",
        dumped[0]
    );
    assert!(
        !log.contains(&token),
        "the live token reached the log:\n{log}"
    );
}
