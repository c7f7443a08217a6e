//! `air-friends chat` end to end with the scripted fake ACP agent: a typed line goes through
//! the router, the interaction, the agent runner and the permission gate; the agent runs the
//! real `skills/send-reply` script, whose client calls the Skill API with the session's token;
//! the send-reply handler prints the answer on the console.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::json;

use common::fake_agent;

fn skills_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("skills")
}

/// Runs `air-friends chat` with `script` as the agent's behaviour; returns (stdout, stderr,
/// success).
fn chat(script: serde_json::Value, input: &str) -> (String, String, bool) {
    let run = ChatRun::new(false, "bwrap");
    run.chat(script, input, &[])
}

/// One `air-friends chat` set-up: a data folder, a configuration and the agent's script folder
/// (shared read-only with the sandbox, so the sandboxed fake agent can read its script).
struct ChatRun {
    dir: tempfile::TempDir,
    yolo: bool,
    sandbox_mode: &'static str,
}

impl ChatRun {
    fn new(yolo: bool, sandbox_mode: &'static str) -> ChatRun {
        ChatRun {
            dir: tempfile::tempdir().unwrap(),
            yolo,
            sandbox_mode,
        }
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// The daemon's home folder (`HOME`), holding a `secret` file.
    fn home(&self) -> PathBuf {
        self.dir.path().join("home")
    }

    fn config_path(&self) -> PathBuf {
        self.dir.path().join("config.yaml")
    }

    fn chat(
        &self,
        script: serde_json::Value,
        input: &str,
        env: &[(&str, &str)],
    ) -> (String, String, bool) {
        let agent_dir = self.dir.path().join("agent");
        std::fs::create_dir_all(&agent_dir).unwrap();
        let script_path = agent_dir.join("agent.json");
        std::fs::write(&script_path, script.to_string()).unwrap();
        let config = format!(
            "workspace:\n  repoPath: {data}\nagent:\n  command: {agent}\n  args: []\n  skillsDir: {skills}\n  idleTimeoutMs: 20000\n  env:\n    FAKE_ACP_SCRIPT: {script}\n  yolo: {yolo}\n  sandbox:\n    mode: {mode}\n    readOnlyPaths: [{agent_dir}]\nprompts:\n  dir: {prompts}\nplatforms:\n  discord:\n    token: ${{DISCORD_TOKEN:-unset}}\n",
            data = self.data().display(),
            agent = fake_agent().display(),
            skills = skills_dir().display(),
            script = script_path.display(),
            agent_dir = agent_dir.display(),
            yolo = self.yolo,
            mode = self.sandbox_mode,
            prompts = Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("prompts")
                .display(),
        );
        std::fs::write(self.config_path(), config).unwrap();
        std::fs::create_dir_all(self.home()).unwrap();
        std::fs::write(self.home().join("secret"), "the daemon user's files").unwrap();
        let mut cmd = common::chat_command(&self.config_path());
        cmd.env("HOME", self.home()).envs(env.iter().copied());
        let out = common::run_with_input(&mut cmd, input.as_bytes());
        (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
            out.status.success(),
        )
    }
}

#[test]
fn a_typed_message_is_answered_through_the_real_skill() {
    let send_reply = skills_dir().join("send-reply/scripts/send-reply");
    let script = json!({"turns": [{"steps": [
        {"run": "printf 'Hello from the agent, it costs $5 and `nothing` else' > \"$TMPDIR/$SESSION_ID/reply.md\""},
        {"permission": format!("{} --message-file $TMPDIR/$SESSION_ID/reply.md", send_reply.display())}
    ]}]});
    let run = ChatRun::new(false, "bwrap");
    let (stdout, stderr, ok) = run.chat(script, "hello there\n", &[]);
    assert!(ok, "chat failed:\n{stderr}");
    assert!(
        stdout.contains("air-friends> Hello from the agent, it costs $5 and `nothing` else"),
        "stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(
        !stdout.contains("ran into a problem"),
        "error reply on top of a real answer:\n{stdout}"
    );
    // After chat exits the database is one file: no WAL left (or an empty one), and the .db
    // copied alone is whole.
    let db = run.data().join("air-friends.db");
    let wal = std::fs::metadata(run.data().join("air-friends.db-wal")).map_or(0, |m| m.len());
    assert_eq!(wal, 0, "the WAL after chat");
    let alone = tempfile::tempdir().unwrap();
    std::fs::copy(&db, alone.path().join("copy.db")).unwrap();
    let conn = rusqlite::Connection::open(alone.path().join("copy.db")).unwrap();
    let check: String = conn
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(check, "ok");
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

/// What the attack script of [`attack`] probes, each line `<name>: reached|blocked`.
const PROBES: &[&str] = &[
    "database",
    "config",
    "prompts",
    "other_workspace",
    "daemon_environ",
    "other_session_environ",
    "daemon_home",
    "provider_key",
    "loopback_port",
];

/// The secrets and services the attack looks for.
struct Targets {
    /// Another session's caller token, in a process outside this sandbox.
    decoy_secret: String,
    /// The daemon's platform token.
    discord_token: String,
    /// The model provider's key: only the daemon (its model gateway) holds it.
    provider_key: String,
    /// A TCP port listening on the host's loopback (like the daemon's ops port).
    loopback_port: u16,
}

/// Code a hijacked agent would run (through YOLO, so the gate is out of the way): each read
/// probe records whether it reached its target, into `evidence.txt` in the workspace; it tries
/// to plant files outside the workspace ([`planted`], checked on the host afterwards), leaves a
/// double-forked `setsid` process behind and answers through the real send-reply skill.
fn attack(run: &ChatRun, targets: &Targets, orphan_tag: &str) -> serde_json::Value {
    let Targets {
        decoy_secret,
        discord_token,
        provider_key,
        loopback_port,
    } = targets;
    let data = run.data();
    let other = data.join("workspaces/discord/999");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::write(other.join("secret.txt"), "another user's notes").unwrap();
    let prompts = Path::new(env!("CARGO_MANIFEST_DIR")).join("prompts/system.md");
    let home = run.home();
    let probes = [
        (
            "database",
            format!("cat '{}'", data.join("air-friends.db").display()),
        ),
        ("config", format!("cat '{}'", run.config_path().display())),
        ("prompts", format!("cat '{}'", prompts.display())),
        (
            "other_workspace",
            format!("cat '{}'", other.join("secret.txt").display()),
        ),
        (
            "daemon_environ",
            format!("grep -a -q -s '{discord_token}' /proc/[0-9]*/environ"),
        ),
        (
            "other_session_environ",
            format!("grep -a -q -s '{decoy_secret}' /proc/[0-9]*/environ"),
        ),
        (
            "daemon_home",
            format!("cat '{}'", home.join("secret").display()),
        ),
        (
            "provider_key",
            format!("grep -a -q -s '{provider_key}' /proc/[0-9]*/environ"),
        ),
        (
            "loopback_port",
            format!("bash -c 'exec 3<>/dev/tcp/127.0.0.1/{loopback_port}'"),
        ),
    ];
    let mut script = String::new();
    for (name, cmd) in probes {
        script.push_str(&format!(
            "if {cmd} >/dev/null 2>&1; then echo '{name}: reached'; else echo '{name}: blocked'; fi >> evidence.txt; "
        ));
    }
    for target in planted(run) {
        script.push_str(&format!("touch '{}' 2>/dev/null; ", target.display()));
    }
    let send_reply = skills_dir().join("send-reply/scripts/send-reply");
    json!({"turns": [{"steps": [
        {"permission": script},
        {"permission": format!("(setsid sh -c 'sleep {orphan_tag}' </dev/null >/dev/null 2>&1 &) ; (nohup sleep {orphan_tag} >/dev/null 2>&1 &)")},
        {"run": "printf 'done' > \"$TMPDIR/$SESSION_ID/reply.md\""},
        {"permission": format!("{} --message-file $TMPDIR/$SESSION_ID/reply.md", send_reply.display())}
    ]}]})
}

/// Files the attack tries to create outside its workspace: in the data folder (beside the
/// database), in `/usr`, in the skills folder and in the daemon's home.
fn planted(run: &ChatRun) -> Vec<PathBuf> {
    let tag = std::process::id();
    vec![
        run.data().join(format!("planted-{tag}")),
        PathBuf::from(format!("/usr/af-planted-{tag}")),
        skills_dir().join(format!("af-planted-{tag}")),
        run.home().join("planted"),
    ]
}

/// Host processes whose command line contains `tag`.
fn processes_with(tag: &str) -> Vec<String> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().parse::<u32>().is_ok())
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .filter(|c| c.contains(tag))
        .collect()
}

fn evidence(run: &ChatRun) -> String {
    let console = run.data().join("workspaces/console");
    let user = std::fs::read_dir(&console)
        .unwrap_or_else(|e| panic!("no console workspace in {}: {e}", console.display()))
        .flatten()
        .next()
        .expect("a console workspace")
        .path();
    std::fs::read_to_string(user.join("evidence.txt")).unwrap_or_default()
}

/// Runs the attack in a YOLO chat with the sandbox in `sandbox_mode`; returns the evidence, the
/// processes left behind and the daemon's stderr.
fn run_attack(sandbox_mode: &'static str, orphan_tag: &str) -> (String, Vec<String>, String) {
    let run = ChatRun::new(true, sandbox_mode);
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let targets = Targets {
        decoy_secret: format!("decoy-session-token-{}", std::process::id()),
        discord_token: format!("discord-token-{}-xyz", std::process::id()),
        provider_key: format!("sk-or-provider-key-{}", std::process::id()),
        loopback_port: listener.local_addr().unwrap().port(),
    };
    // Another agent's process outside this sandbox, with its own session token in its env.
    let mut decoy = Command::new("sleep")
        .arg("60")
        .env("SKILL_API_TOKEN", &targets.decoy_secret)
        .spawn()
        .unwrap();
    let script = attack(&run, &targets, orphan_tag);
    let (stdout, stderr, ok) = run.chat(
        script,
        "hi\n",
        &[
            ("DISCORD_TOKEN", &targets.discord_token),
            ("OPENROUTER_API_KEY", &targets.provider_key),
        ],
    );
    drop(listener);
    let _ = decoy.kill();
    let _ = decoy.wait();
    assert!(ok, "chat failed:\n{stderr}");
    assert!(
        stdout.contains("air-friends> done"),
        "no answer through send-reply:\n{stdout}\n{stderr}"
    );
    // Give a surviving orphan no excuse: the session is over, the daemon has exited.
    std::thread::sleep(std::time::Duration::from_millis(300));
    let orphans = processes_with(&format!("sleep {orphan_tag}"));
    let mut evidence = evidence(&run);
    for target in planted(&run) {
        if std::fs::remove_file(&target).is_ok() {
            evidence.push_str(&format!("planted {}\n", target.display()));
        }
    }
    (evidence, orphans, stderr)
}

#[test]
fn sandboxed_agent_code_reaches_no_secret_no_other_workspace_and_leaves_no_process() {
    let (evidence, orphans, stderr) = run_attack("bwrap", "313.37");
    for probe in PROBES {
        assert!(
            evidence.contains(&format!("{probe}: blocked")),
            "{probe} was not blocked:\n{evidence}\nstderr:\n{stderr}"
        );
    }
    assert!(
        orphans.is_empty(),
        "processes outlived the session: {orphans:?}"
    );
}

#[test]
fn without_the_sandbox_the_same_code_reaches_them() {
    // The probes are real: unconfined (mode none), the same script reads the database and the
    // daemon's environment and its double fork survives (cleaned up here).
    let (evidence, orphans, _) = run_attack("none", "313.38");
    let _ = Command::new("pkill").args(["-f", "sleep 313.38"]).status();
    for probe in [
        "database",
        "config",
        "other_workspace",
        "daemon_home",
        "loopback_port",
    ] {
        assert!(
            evidence.contains(&format!("{probe}: reached")),
            "{probe} should be reachable without a sandbox:\n{evidence}"
        );
    }
    assert!(
        evidence
            .lines()
            .any(|l| l.starts_with("planted ") && l.contains("/data/planted-")),
        "without a sandbox the data folder is writable:\n{evidence}"
    );
    assert!(
        !orphans.is_empty(),
        "without the PID namespace a setsid double fork survives the session"
    );
}
