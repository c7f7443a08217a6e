//! Warm agents through the whole `air-friends chat` pipeline with the scripted fake ACP agent
//! (in the real sandbox): the second message of a conversation is prompted on the same agent
//! process and ACP session with only what is new, the per-turn reply quota starts afresh, a
//! warm agent that died or hangs is replaced by a fresh one without the user noticing, and
//! `agent.warm.enabled: false` starts a fresh agent for every message.
//!
//! The pool's own rules (eviction at the cap, idle expiry, shutdown, one agent per
//! conversation) are tested on real agent processes in `warm_pool.rs`.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use common::AGENT_LOG;
use common::poll::blocking_poll;
use serde_json::{Value, json};

fn skills_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("skills")
}

/// A turn that writes `text` to the session's payload folder and sends it with the real
/// send-reply skill, after `extra` steps.
fn replying(text: &str, extra: Vec<Value>) -> Value {
    let send_reply = skills_dir().join("send-reply/scripts/send-reply");
    let mut steps = extra;
    steps.push(json!({"run": format!("printf '%s' '{text}' > \"$TMPDIR/$SESSION_ID/reply.md\"")}));
    steps.push(json!({"permission": format!("{} --message-file $TMPDIR/$SESSION_ID/reply.md", send_reply.display())}));
    json!({"steps": steps})
}

/// A running `air-friends chat`, typed into line by line.
struct Chat {
    dir: tempfile::TempDir,
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
    stderr: std::thread::JoinHandle<String>,
}

impl Chat {
    fn start(turns: Vec<Value>, warm: &str) -> Chat {
        Chat::start_with(turns, warm, "", |_| {})
    }

    /// With `sandbox_extra` added to `agent.sandbox` (indented lines) and `prepare` run on the
    /// data folder before the start.
    fn start_with(
        turns: Vec<Value>,
        warm: &str,
        sandbox_extra: &str,
        prepare: impl FnOnce(&Path),
    ) -> Chat {
        let dir = tempfile::tempdir().unwrap();
        let agent_dir = dir.path().join("agent");
        std::fs::create_dir_all(&agent_dir).unwrap();
        let script_path = agent_dir.join("agent.json");
        std::fs::write(
            &script_path,
            json!({"log": AGENT_LOG, "turns": turns}).to_string(),
        )
        .unwrap();
        let config = format!(
            "workspace:\n  repoPath: {data}\nagent:\n  command: {agent}\n  args: []\n  skillsDir: {skills}\n  idleTimeoutMs: 20000\n  connectTimeoutMs: 3000\n  env:\n    FAKE_ACP_SCRIPT: {script}\n  sandbox:\n    readOnlyPaths: [{agent_dir}]\n{sandbox_extra}  warm: {warm}\nprompts:\n  dir: {prompts}\n",
            data = dir.path().join("data").display(),
            agent = common::fake_agent().display(),
            skills = skills_dir().display(),
            script = script_path.display(),
            agent_dir = agent_dir.display(),
            prompts = Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("prompts")
                .display(),
        );
        let config_path = dir.path().join("config.yaml");
        std::fs::write(&config_path, config).unwrap();
        prepare(&dir.path().join("data"));
        let home = dir.path().join("home");
        std::fs::create_dir_all(&home).unwrap();
        let mut child = Command::new(common::bin())
            .args(["chat", "--config"])
            .arg(&config_path)
            .env_remove("RUST_LOG")
            .env("HOME", &home)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut stderr_pipe = child.stderr.take().unwrap();
        let stderr = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = std::io::Read::read_to_string(&mut stderr_pipe, &mut text);
            text
        });
        Chat {
            dir,
            child,
            stdin,
            lines,
            stderr,
        }
    }

    /// Types `line` and returns the next line the console prints.
    fn say(&mut self, line: &str) -> String {
        let stdin = self.stdin.as_mut().unwrap();
        writeln!(stdin, "{line}").unwrap();
        stdin.flush().unwrap();
        self.lines
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or_else(|_| panic!("no answer to {line:?}"))
    }

    /// Ends the input, waits for the exit; returns stderr.
    fn finish(mut self) -> (String, Chat) {
        drop(self.stdin.take());
        let status = wait(&mut self.child, Duration::from_secs(30));
        let stderr = std::mem::replace(&mut self.stderr, std::thread::spawn(String::new))
            .join()
            .unwrap();
        assert!(status.success(), "chat failed: {status:?}\n{stderr}");
        (stderr, self)
    }

    /// SIGKILLs this chat's fake agents and their sandboxes (found by the script path in their
    /// environment); returns how many processes.
    fn kill_agents(&self) -> usize {
        let script = self.dir.path().join("agent/agent.json");
        let needle = format!("FAKE_ACP_SCRIPT={}", script.display());
        let mut killed = 0;
        for entry in std::fs::read_dir("/proc").unwrap().flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
                continue;
            };
            let environ = std::fs::read(entry.path().join("environ")).unwrap_or_default();
            let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
            let is_agent = String::from_utf8_lossy(&cmdline).contains("fake_acp_agent");
            if is_agent
                && String::from_utf8_lossy(&environ)
                    .split('\0')
                    .any(|v| v == needle)
            {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
                killed += 1;
            }
        }
        // Reaped by its sandbox's init and gone from the table before the next message.
        blocking_poll(Duration::from_secs(10), || {
            std::fs::read_dir("/proc")
                .unwrap()
                .flatten()
                .all(|e| {
                    !String::from_utf8_lossy(
                        &std::fs::read(e.path().join("environ")).unwrap_or_default(),
                    )
                    .split('\0')
                    .any(|v| v == needle)
                })
                .then_some(())
        });
        killed
    }

    /// Every message the fake agents received, in order, all processes together.
    fn received(&self) -> Vec<Value> {
        let users = std::fs::read_dir(self.dir.path().join("data/workspaces/console")).unwrap();
        users
            .flatten()
            .filter_map(|user| std::fs::read_to_string(user.path().join(AGENT_LOG)).ok())
            .collect::<String>()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .collect()
    }

    fn count(&self, method: &str) -> usize {
        self.received()
            .iter()
            .filter(|v| v.to_string().contains(&format!("\"method\":\"{method}\"")))
            .count()
    }

    /// The text of every `session/prompt` received.
    fn prompts(&self) -> Vec<String> {
        self.received()
            .iter()
            .filter_map(|v| {
                let text = v.to_string();
                text.contains("\"method\":\"session/prompt\"")
                    .then(|| find_prompt_text(v).unwrap_or_default())
            })
            .collect()
    }
}

fn find_prompt_text(v: &Value) -> Option<String> {
    match v {
        Value::Object(map) => {
            if let Some(prompt) = map.get("prompt").and_then(Value::as_array) {
                return prompt
                    .iter()
                    .find_map(|b| b.get("text").and_then(Value::as_str))
                    .map(str::to_owned);
            }
            map.values().find_map(find_prompt_text)
        }
        Value::Array(items) => items.iter().find_map(find_prompt_text),
        _ => None,
    }
}

fn wait(child: &mut Child, timeout: Duration) -> std::process::ExitStatus {
    blocking_poll(timeout, || child.try_wait().unwrap()).unwrap_or_else(|| {
        let _ = child.kill();
        panic!("chat did not exit within {timeout:?}");
    })
}

#[test]
fn the_second_message_is_prompted_on_the_same_agent_with_only_what_is_new() {
    let mut chat = Chat::start(
        vec![
            replying("first answer", vec![]),
            replying("second answer", vec![]),
        ],
        "{}",
    );
    assert_eq!(chat.say("hello"), "air-friends> first answer");
    // The reply quota (one send-reply per turn) starts afresh in the second turn.
    assert_eq!(chat.say("and again"), "air-friends> second answer");
    let (stderr, chat) = chat.finish();
    assert!(!stderr.contains("ran into a problem"), "{stderr}");
    assert_eq!(chat.count("initialize"), 1, "one process");
    assert_eq!(chat.count("session/new"), 1, "one ACP session");
    let prompts = chat.prompts();
    assert_eq!(prompts.len(), 2, "{prompts:?}");
    assert!(prompts[0].contains("## Session") && prompts[0].contains("hello"));
    assert!(
        prompts[1].contains("and again") && !prompts[1].contains("## Session"),
        "the warm prompt repeats the first one:\n{}",
        prompts[1]
    );
    assert!(
        prompts[1].len() * 2 < prompts[0].len(),
        "warm prompt {} bytes, cold {}",
        prompts[1].len(),
        prompts[0].len()
    );
}

#[test]
fn a_process_left_running_after_a_turn_delivers_nothing_and_the_next_reply_arrives() {
    let send_reply = skills_dir().join("send-reply/scripts/send-reply");
    // In the background, after its turn: send-reply every 0.2 s for 4 s, outcomes logged.
    let leftover = format!(
        "printf leak > \"$TMPDIR/$SESSION_ID/leak.md\"; (for i in $(seq 20); do sleep 0.2; {} \
         --message-file \"$TMPDIR/$SESSION_ID/leak.md\" >> leftover.log 2>&1; done) \
         </dev/null >/dev/null 2>&1 &",
        send_reply.display()
    );
    let mut chat = Chat::start(
        vec![
            replying("first answer", vec![json!({"run": leftover})]),
            replying("second answer", vec![json!({"run": "sleep 1"})]),
        ],
        "{}",
    );
    assert_eq!(chat.say("hello"), "air-friends> first answer");
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(chat.say("and again"), "air-friends> second answer");
    let (stderr, chat) = chat.finish();
    assert!(!stderr.contains("ran into a problem"), "{stderr}");
    // Replies are printed on stdout: whatever came after the second answer, until the exit.
    let later: Vec<String> = chat.lines.try_iter().collect();
    assert!(
        !later.iter().any(|l| l.contains("leak")),
        "the leftover's reply reached the user: {later:?}"
    );
    assert_eq!(chat.count("initialize"), 1, "the agent was kept");
    let workspace = chat.dir.path().join("data/workspaces/console/local");
    let log = std::fs::read_to_string(workspace.join("leftover.log")).unwrap_or_default();
    assert!(
        !log.contains("\"success\":true"),
        "a call made after its turn was delivered: {log}"
    );
}

#[test]
fn a_full_workspace_is_answered_in_words_and_starts_no_agent() {
    let mut chat = Chat::start_with(
        vec![replying("an answer", vec![])],
        "{}",
        "    limits:\n      maxWorkspaceMb: 1\n",
        |data| {
            let ws = data.join("workspaces/console/local");
            std::fs::create_dir_all(&ws).unwrap();
            std::fs::write(ws.join("hoard.bin"), vec![7u8; 2 << 20]).unwrap();
        },
    );
    let answer = chat.say("hello");
    assert!(
        answer.starts_with("air-friends> ") && answer.contains("is full"),
        "{answer}"
    );
    let (stderr, chat) = chat.finish();
    assert_eq!(chat.count("initialize"), 0, "an agent was started");
    assert!(stderr.contains("workspace full"), "{stderr}");
}

#[test]
fn a_warm_agent_that_died_is_replaced_by_a_fresh_one_for_the_same_message() {
    // The agent dies while it waits in the pool (a process it left behind cannot do it: those
    // are ended with the turn), so it is killed from outside.
    let mut chat = Chat::start(vec![replying("answer", vec![])], "{}");
    assert_eq!(chat.say("hello"), "air-friends> answer");
    assert!(
        chat.kill_agents() > 0,
        "a warm agent (and its sandbox) to kill"
    );
    assert_eq!(chat.say("are you there?"), "air-friends> answer");
    let (stderr, chat) = chat.finish();
    assert!(!stderr.contains("ran into a problem"), "{stderr}");
    assert_eq!(chat.count("initialize"), 2, "a fresh agent for the second");
    let prompts = chat.prompts();
    assert!(
        prompts[1].contains("## Session"),
        "the fresh agent got the whole prompt"
    );
}

#[test]
fn a_warm_agent_that_hangs_at_the_prompt_is_replaced_by_a_fresh_one() {
    // The warm agent says nothing after its second prompt; a fresh agent answers instead once
    // the connect timeout (3 s here) has passed, and the user sees no error.
    let silent = json!({"steps": [{"silentMs": 20000}]});
    let mut chat = Chat::start(vec![replying("answer", vec![]), silent], "{}");
    assert_eq!(chat.say("hello"), "air-friends> answer");
    assert_eq!(chat.say("still there?"), "air-friends> answer");
    let (stderr, chat) = chat.finish();
    assert!(!stderr.contains("ran into a problem"), "{stderr}");
    assert_eq!(chat.count("initialize"), 2, "a fresh agent for the second");
    let methods: Vec<String> = chat
        .received()
        .iter()
        .map(|v| format!("{} {}", v["atUs"], v["received"]["method"]))
        .collect();
    assert_eq!(
        chat.count("session/prompt"),
        3,
        "the hung prompt, then the fresh one: {methods:#?}\n{stderr}"
    );
}

#[test]
fn with_warm_agents_off_every_message_starts_a_fresh_agent() {
    let mut chat = Chat::start(vec![replying("answer", vec![])], "{enabled: false}");
    assert_eq!(chat.say("one"), "air-friends> answer");
    assert_eq!(chat.say("two"), "air-friends> answer");
    let (_, chat) = chat.finish();
    assert_eq!(chat.count("initialize"), 2);
    assert_eq!(chat.count("session/new"), 2);
}
