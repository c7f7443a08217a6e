//! Runs the real `air-friends serve` against the fake Misskey ([`super::fake_misskey`]) with the
//! scripted fake ACP agent (`examples/fake_acp_agent.rs`) as `agent.command`, the repository's
//! `skills/` and `prompts/`, and port-0 listeners. The agent's script is a file the test may
//! rewrite at any time (each agent process reads it when it starts); every agent process logs to
//! one JSON-lines file, so a test can tell whether (and how often) an agent ran.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};

pub use super::fake_agent;
use super::fake_misskey::{FakeMisskey, TOKEN};
use super::{Daemon, TestConfig};

/// How long any condition may take before a test fails (generous: the machine may be busy).
pub const WAIT: Duration = Duration::from_secs(30);

/// `<repo>/<rel>`.
pub fn repo_path(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

/// The absolute path of a skill's script, as an agent runs it.
pub fn skill_script(name: &str) -> String {
    repo_path(&format!("skills/{name}/scripts/{name}"))
        .display()
        .to_string()
}

/// Agent steps that write `text` to `$TMPDIR/$SESSION_ID/reply.md` and send it with the
/// send-reply skill through the permission gate (as a real agent does).
pub fn reply_steps(text: &str) -> Vec<Value> {
    assert!(
        !text.contains('\''),
        "keep single quotes out of scripted replies"
    );
    vec![
        json!({"run": format!("printf '%s' '{text}' > \"$TMPDIR/$SESSION_ID/reply.md\"")}),
        json!({"permission": format!(
            "{} --message-file $TMPDIR/$SESSION_ID/reply.md",
            skill_script("send-reply")
        )}),
    ]
}

/// A script whose every turn runs `steps`.
pub fn script(steps: Vec<Value>) -> Value {
    json!({"turns": [{"steps": steps}]})
}

/// How to start a daemon.
#[derive(Debug, Clone, Default)]
pub struct ServeOptions {
    /// Extra keys of the `agent` section, each line indented by two spaces.
    pub agent_extra: String,
    /// Extra top-level sections (not `workspace`, `health`, `skillApi`, `platforms`, `agent`,
    /// `prompts`).
    pub extra: String,
    /// The fake refuses websocket handshakes from the start.
    pub refuse_streaming: bool,
}

/// A fake Misskey, a running daemon pointed at it, and the agent's script and log.
pub struct MisskeyServe {
    pub fake: FakeMisskey,
    pub daemon: Daemon,
    pub cfg: TestConfig,
    /// The ops listener's address.
    pub ops: String,
    pub script_path: PathBuf,
    pub agent_log: PathBuf,
    http: reqwest::Client,
}

impl MisskeyServe {
    /// Starts the fake and the daemon and waits for the ops listener (not for readiness).
    pub async fn launch(agent_script: Value, options: ServeOptions) -> MisskeyServe {
        let fake = FakeMisskey::start().await;
        fake.refuse_streaming(options.refuse_streaming);
        let cfg = TestConfig::new("");
        let script_path = cfg.dir.path().join("agent-script.json");
        let agent_log = cfg.dir.path().join("agent-log.jsonl");
        let extra = format!(
            "platforms:\n  misskey:\n    enabled: true\n    host: {host}\n    secure: false\n    token: {TOKEN}\n\
             agent:\n  command: {agent}\n  args: []\n  skillsDir: {skills}\n  sandbox:\n    mode: none\n  env:\n    FAKE_ACP_SCRIPT: {script}\n{agent_extra}\
             prompts:\n  dir: {prompts}\n{extra}",
            host = fake.host(),
            agent = fake_agent().display(),
            skills = repo_path("skills").display(),
            script = script_path.display(),
            agent_extra = options.agent_extra,
            prompts = repo_path("prompts").display(),
            extra = options.extra,
        );
        let base = std::fs::read_to_string(&cfg.path).expect("config");
        std::fs::write(&cfg.path, format!("{base}{extra}")).expect("write config");
        write_script(&script_path, &agent_log, agent_script);
        let mut serve_daemon = Daemon::start(&cfg.path, &[]);
        let ops = serve_daemon.listener_addr("ops");
        MisskeyServe {
            fake,
            daemon: serve_daemon,
            cfg,
            ops,
            script_path,
            agent_log,
            http: reqwest::Client::new(),
        }
    }

    /// [`launch`](Self::launch), then waits until `/readyz` is ready and the `main` channel
    /// is subscribed.
    pub async fn start(agent_script: Value, options: ServeOptions) -> MisskeyServe {
        let serve = Self::launch(agent_script, options).await;
        serve.wait_ready().await;
        serve.fake.wait_for_subscription("main", None, 1).await;
        serve
    }

    /// Replaces the agent's script (read by every agent process when it starts); the log path
    /// is added.
    pub fn write_script(&self, agent_script: Value) {
        write_script(&self.script_path, &self.agent_log, agent_script);
    }

    /// `/readyz`: status code and body.
    pub async fn readyz(&self) -> (u16, Value) {
        let response = self
            .http
            .get(format!("http://{}/readyz", self.ops))
            .send()
            .await
            .expect("GET /readyz");
        let status = response.status().as_u16();
        (status, response.json().await.expect("readyz JSON"))
    }

    /// The `misskey` check of a `/readyz` body.
    pub fn misskey_check(body: &Value) -> Option<bool> {
        body["checks"]
            .as_array()?
            .iter()
            .find(|c| c["name"] == "misskey")
            .and_then(|c| c["ok"].as_bool())
    }

    /// Waits until `/readyz` answers 200 with the `misskey` check passing.
    pub async fn wait_ready(&self) {
        let mut last = None;
        let deadline = tokio::time::Instant::now() + WAIT;
        while tokio::time::Instant::now() < deadline {
            let (status, body) = self.readyz().await;
            if status == 200 && Self::misskey_check(&body) == Some(true) {
                return;
            }
            last = Some((status, body));
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("the daemon did not become ready; last /readyz: {last:?}");
    }

    /// Every event the agent processes logged (none when no agent ever started).
    pub fn agent_events(&self) -> Vec<Value> {
        match std::fs::read_to_string(&self.agent_log) {
            Ok(text) => text
                .lines()
                .filter_map(|l| serde_json::from_str(l).ok())
                .collect(),
            Err(_) => Vec::new(),
        }
    }

    /// How many agent processes started.
    pub fn agents_started(&self) -> usize {
        self.agent_events()
            .iter()
            .filter(|e| e["event"] == "started")
            .count()
    }

    /// Polls `check` every 10 ms until it yields, panicking after [`WAIT`].
    pub async fn wait_for<T>(&self, what: &str, mut check: impl FnMut() -> Option<T>) -> T {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            if let Some(value) = check() {
                return value;
            }
            if tokio::time::Instant::now() > deadline {
                panic!(
                    "timed out waiting for {what}; misskey calls: {:?}; agent events: {:?}",
                    self.fake.endpoints(),
                    self.agent_events()
                );
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Waits until `endpoint` was called at least `count` times; returns those bodies.
    pub async fn wait_for_calls(&self, endpoint: &str, count: usize) -> Vec<Value> {
        self.wait_for(&format!("{count} calls to {endpoint}"), || {
            let calls = self.fake.calls_to(endpoint);
            (calls.len() >= count).then_some(calls)
        })
        .await
    }

    /// The first daemon log line (already read or still to come, up to [`WAIT`]) with this
    /// `message` whose fields match `fields`.
    pub fn wait_for_log(&mut self, message: &str, fields: &[(&str, Value)]) -> Value {
        self.daemon_log_where(|v| {
            v["message"] == message && fields.iter().all(|(k, want)| log_field(v, k) == want)
        })
    }

    /// The first daemon log line (already read or still to come, up to [`WAIT`]) matching
    /// `pred`.
    pub fn daemon_log_where(&mut self, pred: impl Fn(&Value) -> bool) -> Value {
        let seen = self
            .daemon
            .seen
            .iter()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find(|v| pred(v));
        match seen {
            Some(v) => v,
            None => self.daemon.wait_for_log(WAIT, pred),
        }
    }
}

/// A field of a JSON log line, at the top level or under `fields` / `span`.
pub fn log_field<'a>(line: &'a Value, key: &str) -> &'a Value {
    for candidate in [&line[key], &line["fields"][key], &line["span"][key]] {
        if !candidate.is_null() {
            return candidate;
        }
    }
    &Value::Null
}

fn write_script(path: &Path, log: &Path, mut agent_script: Value) {
    agent_script["log"] = json!(log.display().to_string());
    std::fs::write(path, agent_script.to_string()).expect("write script");
}
