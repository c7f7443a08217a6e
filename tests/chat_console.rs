//! `air-friends chat` as a user at a terminal sees it, through a pseudo-terminal: the daemon
//! runs as the leader of a session whose controlling terminal is the pty (`setsid --ctty`),
//! so Ctrl-C and Ctrl-D are typed as the characters a terminal sends, and the line discipline
//! turns them into SIGINT and end of input. The agent is the scripted fake
//! (`examples/fake_acp_agent.rs`) in the default bubblewrap sandbox.

mod common;

use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::AGENT_LOG;
use common::poll::blocking_poll;
use serde_json::{Value, json};

/// What the status line is erased with.
const ERASE: &str = "\r\x1b[2K";
/// The terminal's interrupt and end-of-file characters.
const CTRL_C: &[u8] = b"\x03";
const CTRL_D: &[u8] = b"\x04";
fn skills_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("skills")
}

/// Script steps that answer `text` through the real send-reply skill.
fn reply_steps(text: &str) -> Vec<Value> {
    let send_reply = skills_dir().join("send-reply/scripts/send-reply");
    vec![
        json!({"run": format!("printf '{text}' > \"$TMPDIR/$SESSION_ID/reply.md\"")}),
        json!({"permission": format!("{} --message-file $TMPDIR/$SESSION_ID/reply.md", send_reply.display())}),
    ]
}

/// `air-friends chat` on a pseudo-terminal, everything it writes collected.
struct Console {
    _dir: tempfile::TempDir,
    child: Child,
    keyboard: File,
    screen: Arc<Mutex<Vec<u8>>>,
    data: PathBuf,
}

impl Console {
    /// Starts the chat with the fake agent following `script` (its `log` is set here: in its
    /// cwd, the workspace, the one place the sandbox lets it write).
    fn start(mut script: Value) -> Console {
        let dir = tempfile::tempdir().unwrap();
        let agent_dir = dir.path().join("agent");
        std::fs::create_dir_all(&agent_dir).unwrap();
        script["log"] = json!(AGENT_LOG);
        let script_path = agent_dir.join("agent.json");
        std::fs::write(&script_path, script.to_string()).unwrap();
        let agent = common::fake_agent();
        let config = json!({
            "workspace": {"repoPath": dir.path().join("data")},
            "prompts": {"dir": Path::new(env!("CARGO_MANIFEST_DIR")).join("prompts")},
            "agent": {
                "command": agent,
                "args": [],
                "skillsDir": skills_dir(),
                "env": {"FAKE_ACP_SCRIPT": script_path},
                "sandbox": {"readOnlyPaths": [agent_dir]}
            }
        });
        let config_path = dir.path().join("config.yaml");
        std::fs::write(&config_path, serde_yaml::to_string(&config).unwrap()).unwrap();
        let home = dir.path().join("home");
        std::fs::create_dir_all(&home).unwrap();

        let pty = nix::pty::openpty(None, None).unwrap();
        let slave = File::from(pty.slave);
        let child = Command::new("setsid")
            .args(["--ctty", "--wait"])
            .arg(common::bin())
            .args(["chat", "--config"])
            .arg(&config_path)
            .env_remove("RUST_LOG")
            .env("HOME", &home)
            .stdin(Stdio::from(slave.try_clone().unwrap()))
            .stdout(Stdio::from(slave.try_clone().unwrap()))
            .stderr(Stdio::from(slave))
            .spawn()
            .unwrap();
        let master = File::from(pty.master);
        let keyboard = master.try_clone().unwrap();
        let screen = Arc::new(Mutex::new(Vec::new()));
        let collected = screen.clone();
        std::thread::spawn(move || {
            let mut master = master;
            let mut buf = [0u8; 4096];
            // EIO once the last process holding the terminal has exited.
            while let Ok(n @ 1..) = master.read(&mut buf) {
                collected.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        });
        let mut console = Console {
            data: dir.path().join("data"),
            _dir: dir,
            child,
            keyboard,
            screen,
        };
        console.wait_for("Type a message", Duration::from_secs(30));
        console
    }

    fn type_keys(&mut self, keys: &[u8]) {
        self.keyboard.write_all(keys).unwrap();
        self.keyboard.flush().unwrap();
    }

    fn screen(&self) -> String {
        String::from_utf8_lossy(&self.screen.lock().unwrap()).into_owned()
    }

    /// Waits until the screen shows `text`; returns the screen then.
    fn wait_for(&mut self, text: &str, timeout: Duration) -> String {
        let shown = blocking_poll(timeout, || {
            let screen = self.screen();
            screen.contains(text).then_some(screen)
        });
        shown.unwrap_or_else(|| {
            let _ = self.child.kill();
            let screen = self.screen();
            panic!("{text:?} not shown within {timeout:?}; screen:\n{screen:?}");
        })
    }

    /// Waits for the exit (up to `timeout`); returns its status and how long it took.
    fn wait_exit(&mut self, timeout: Duration) -> (ExitStatus, Duration) {
        let started = Instant::now();
        match blocking_poll(timeout, || self.child.try_wait().unwrap()) {
            Some(status) => (status, started.elapsed()),
            None => {
                let _ = self.child.kill();
                panic!(
                    "chat did not exit within {timeout:?}; screen:\n{:?}",
                    self.screen()
                );
            }
        }
    }

    fn agent_received(&self, method: &str) -> bool {
        let users = std::fs::read_dir(self.data.join("workspaces/console")).unwrap();
        users
            .flatten()
            .filter_map(|user| std::fs::read_to_string(user.path().join(AGENT_LOG)).ok())
            .collect::<String>()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .any(|v| v.to_string().contains(&format!("\"method\":\"{method}\"")))
    }
}

impl Drop for Console {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

#[test]
fn the_status_line_shows_what_the_agent_does_and_is_gone_when_the_reply_arrives() {
    let mut steps = vec![json!({"sleepMs": 2500})];
    steps.extend(reply_steps("Hello from the agent"));
    let mut console = Console::start(json!({"turns": [{"steps": steps}]}));
    console.type_keys(b"hello\n");
    let screen = console.wait_for("air-friends> Hello from the agent", Duration::from_secs(30));
    let reply_at = screen.find("air-friends> Hello from the agent").unwrap();
    let before = &screen[..reply_at];
    assert!(
        before.contains("] thinking…"),
        "no thinking status:\n{before:?}"
    );
    assert!(
        before.contains("[1s] thinking…") || before.contains("[2s] thinking…"),
        "the elapsed time is not refreshed:\n{before:?}"
    );
    assert!(
        before.contains("] running skill send-reply…"),
        "the skill is not named:\n{before:?}"
    );
    assert!(
        before.ends_with(ERASE),
        "the status was not erased before the reply:\n{before:?}"
    );
    console.type_keys(CTRL_D);
    let (status, _) = console.wait_exit(Duration::from_secs(30));
    assert!(status.success(), "{status:?}");
    let after = &console.screen()[reply_at..];
    assert!(
        !after.contains("thinking…") && !after.contains("running skill"),
        "the status came back after the reply:\n{after:?}"
    );
}

#[test]
fn end_of_input_answers_every_typed_message_then_exits_0() {
    let mut steps = vec![json!({"sleepMs": 300})];
    steps.extend(reply_steps("an answer"));
    let mut console = Console::start(json!({"turns": [{"steps": steps}]}));
    console.type_keys(b"first\nsecond\n");
    console.type_keys(CTRL_D);
    let (status, _) = console.wait_exit(Duration::from_secs(60));
    let screen = console.screen();
    assert!(status.success(), "{status:?}\n{screen:?}");
    assert_eq!(
        screen.matches("air-friends> an answer").count(),
        2,
        "not every message was answered:\n{screen:?}"
    );
}

#[test]
fn the_first_ctrl_c_cancels_the_running_turn_and_exits_within_a_second() {
    let mut console = Console::start(json!({"turns": [{"steps": [{"hang": true}]}]}));
    console.type_keys(b"take your time\n");
    console.wait_for("] thinking…", Duration::from_secs(30));
    let pressed = Instant::now();
    console.type_keys(CTRL_C);
    let (status, _) = console.wait_exit(Duration::from_secs(10));
    let took = pressed.elapsed();
    assert!(
        took < Duration::from_secs(1),
        "exited {took:?} after Ctrl-C"
    );
    assert!(status.success(), "{status:?}");
    assert!(
        console.agent_received("session/cancel"),
        "the turn was not cancelled through ACP"
    );
    // Whatever the exiting process still printed has reached the terminal by now.
    std::thread::sleep(Duration::from_millis(200));
    let screen = console.screen();
    assert!(
        !screen.contains("ran into a problem"),
        "the turn the user cancelled got the generic error reply:\n{screen:?}"
    );
}

#[test]
fn a_second_ctrl_c_exits_at_once() {
    // An agent that ignores the cancel, stdin EOF and SIGTERM: the first Ctrl-C alone would
    // wait for it until the bounded exit.
    let mut console = Console::start(json!({
        "ignoreStdinEof": true,
        "ignoreTerm": true,
        "turns": [{"steps": [{"silentMs": 30000}]}]
    }));
    console.type_keys(b"hi\n");
    console.wait_for("] thinking…", Duration::from_secs(30));
    console.type_keys(CTRL_C);
    std::thread::sleep(Duration::from_millis(100));
    assert!(
        console.child.try_wait().unwrap().is_none(),
        "the first Ctrl-C did not wait for the stubborn agent"
    );
    let pressed = Instant::now();
    console.type_keys(CTRL_C);
    let (status, _) = console.wait_exit(Duration::from_secs(10));
    let took = pressed.elapsed();
    assert!(
        took < Duration::from_millis(500),
        "exited {took:?} after the second Ctrl-C"
    );
    assert_eq!(status.code(), Some(130), "not the immediate exit");
}
