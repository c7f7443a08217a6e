//! The real `air-friends serve` against the fake Misskey ([`super::fake_misskey`]) with the
//! scripted fake ACP agent (see [`super::serve`]) as `agent.command`, the repository's
//! `skills/` and `prompts/`, and port-0 listeners. The agent's script is a file the test may
//! rewrite at any time (each agent process reads it when it starts); every agent process logs to
//! one JSON-lines file, so a test can tell whether (and how often) an agent ran.

use std::time::Duration;

use serde_json::{Value, json};

use super::fake_misskey::{FakeMisskey, TOKEN};
use super::poll::poll;
use super::serve::{AgentFiles, readyz, send_reply_step, wait_readyz};
use super::{Daemon, TestConfig};

/// How long any condition may take before a test fails (generous: the machine may be busy).
pub const WAIT: Duration = Duration::from_secs(30);

/// Agent steps that write `text` to `$TMPDIR/$SESSION_ID/reply.md` and send it with the
/// send-reply skill through the permission gate (as a real agent does).
pub fn reply_steps(text: &str) -> Vec<Value> {
    assert!(
        !text.contains('\''),
        "keep single quotes out of scripted replies"
    );
    vec![
        json!({"run": format!("printf '%s' '{text}' > \"$TMPDIR/$SESSION_ID/reply.md\"")}),
        send_reply_step(),
    ]
}

/// A script whose every turn runs `steps`.
pub fn script(steps: Vec<Value>) -> Value {
    json!({"turns": [{"steps": steps}]})
}

/// How to start a daemon.
#[derive(Debug, Clone, Default)]
pub struct MisskeySetup {
    /// Extra keys of the `agent` section, each line indented by two spaces.
    pub agent_extra: String,
    /// Extra top-level sections (not `workspace`, `health`, `skillApi`, `platforms`, `agent`,
    /// `prompts`).
    pub extra_yaml: String,
    /// The fake refuses websocket handshakes from the start.
    pub refuse_streaming: bool,
}

/// A fake Misskey, a running daemon pointed at it, and the agent's script and log.
pub struct MisskeyServe {
    pub fake: FakeMisskey,
    pub daemon: Daemon,
    pub config: TestConfig,
    /// The ops listener's address.
    pub ops_addr: String,
    /// The fake agent's script and log (in the config's folder).
    pub agent: AgentFiles,
}

impl MisskeyServe {
    /// Starts the fake and the daemon and waits for the ops listener (not for readiness).
    pub async fn launch(agent_script: Value, setup: MisskeySetup) -> MisskeyServe {
        let fake = FakeMisskey::start().await;
        fake.refuse_streaming(setup.refuse_streaming);
        let config = TestConfig::new("");
        let agent = AgentFiles::new(config.dir.path());
        let extra = format!(
            "platforms:\n  misskey:\n    enabled: true\n    host: {host}\n    secure: false\n    token: {TOKEN}\n\
             {agent}{extra}",
            host = fake.host(),
            agent = agent.yaml(&setup.agent_extra),
            extra = setup.extra_yaml,
        );
        let base = std::fs::read_to_string(&config.path).expect("config");
        std::fs::write(&config.path, format!("{base}{extra}")).expect("write config");
        agent.write(agent_script);
        let mut daemon = Daemon::start(&config.path, &[]);
        let ops_addr = daemon.listener_addr("ops");
        MisskeyServe {
            fake,
            daemon,
            config,
            ops_addr,
            agent,
        }
    }

    /// [`launch`](Self::launch), then waits until `/readyz` is ready and the `main` channel
    /// is subscribed.
    pub async fn start(agent_script: Value, setup: MisskeySetup) -> MisskeyServe {
        let serve = Self::launch(agent_script, setup).await;
        serve.wait_ready().await;
        serve.fake.wait_for_subscription("main", None, 1).await;
        serve
    }

    /// Stops the daemon with SIGTERM (and its drain), runs `meanwhile` while it is down, then
    /// starts it again on the same configuration, database and fake; waits until it is ready.
    pub async fn restart_with_gap(&mut self, meanwhile: impl FnOnce(&FakeMisskey)) {
        self.daemon.terminate();
        let status = tokio::task::block_in_place(|| self.daemon.wait_exit(WAIT));
        assert!(status.success(), "exit status {status:?}");
        meanwhile(&self.fake);
        self.daemon = Daemon::start(&self.config.path, &[]);
        self.ops_addr = self.daemon.listener_addr("ops");
        self.wait_ready().await;
    }

    /// Replaces the agent's script (read by every agent process when it starts); the log path
    /// is added.
    pub fn write_script(&self, agent_script: Value) {
        self.agent.write(agent_script);
    }

    /// `/readyz`: status code and body.
    pub async fn readyz(&self) -> (u16, Value) {
        readyz(&self.ops_addr).await
    }

    /// Waits until `/readyz` answers 200 with the `misskey` check passing.
    pub async fn wait_ready(&self) {
        wait_readyz(&self.ops_addr, "misskey", true, WAIT).await;
    }

    /// Every line the agent processes logged (none when no agent ever started).
    pub fn agent_log_lines(&self) -> Vec<Value> {
        self.agent.log_lines()
    }

    /// How many agent processes started.
    pub fn agents_started(&self) -> usize {
        self.agent_log_lines()
            .iter()
            .filter(|e| e["event"] == "started")
            .count()
    }

    /// Polls `check` until it yields, panicking (with the Misskey calls and agent log so far)
    /// after [`WAIT`].
    pub async fn wait_for<T>(&self, what: &str, check: impl FnMut() -> Option<T>) -> T {
        match poll(WAIT, check).await {
            Some(value) => value,
            None => panic!(
                "timed out waiting for {what}; misskey calls: {:?}; agent events: {:?}",
                self.fake.endpoints(),
                self.agent_log_lines()
            ),
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
        let seen = self.daemon.logged().into_iter().find(|v| pred(v));
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
