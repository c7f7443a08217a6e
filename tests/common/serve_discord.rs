//! The real `air-friends serve` binary connected to the fake Discord ([`super::fake_discord`])
//! and driving the scripted fake ACP agent (see [`super::serve`]), whose steps run the real
//! `skills/<name>/scripts/<name>`.
//!
//! [`DiscordServe::start`] writes the agent script and a config (Discord enabled against the
//! fake, the Skill API and ops listeners on port 0, the repo's `skills/` and `prompts/`), starts
//! the daemon and waits until it is ready: both `listening` log lines and `/readyz` reporting the
//! `discord` check as passing. Every wait polls a condition with a generous timeout; nothing
//! sleeps for a fixed time.
#![allow(dead_code)]

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use serde_json::{Value, json};

use super::fake_discord::{
    BOT_ID, CHANNEL_ID, DM_CHANNEL_ID, FakeDiscord, GUILD_ID, Recorded, StoredMessage, USER_ID,
    message_create, user,
};
use super::poll::eventually;
use super::serve::{AgentFiles, readyz, readyz_check, send_reply_step, wait_readyz};
use super::{Daemon, TestConfig};

/// The bot token in the test configs (must never reach a log line).
pub const TOKEN: &str = "SERVE-DISCORD-TOKEN-q7Vb2";
/// Generous upper bound for anything the daemon does (agents start processes; the machine is
/// shared with other builds).
pub const WAIT: Duration = Duration::from_secs(60);

/// Steps that answer with send-reply: copy `text_file` (written by the test) to the session's
/// staging folder, then run the real send-reply script with it.
pub fn reply_steps(text_file: &Path) -> Vec<Value> {
    vec![
        json!({"run": format!("cp '{}' \"$TMPDIR/$SESSION_ID/reply.md\"", text_file.display())}),
        send_reply_step(),
    ]
}

/// An agent script with one turn of `steps` (the turn repeats for the retry prompt).
pub fn one_turn(steps: Vec<Value>) -> Value {
    json!({"turns": [{"steps": steps, "stopReason": "end_turn"}]})
}

/// A setup whose agent answers every turn with "Noted." through send-reply, its script
/// extended with the keys of `script_extra` (e.g. `{"resume": "resume"}`).
pub fn noted_setup(files: &Path, script_extra: Value) -> DiscordSetup {
    let mut script = one_turn(reply_steps(&text_path(files, "answer.md")));
    if let (Value::Object(script), Value::Object(extra)) = (&mut script, script_extra) {
        script.extend(extra);
    }
    DiscordSetup {
        script,
        texts: vec![("answer.md", "Noted.".to_owned())],
        ..DiscordSetup::default()
    }
}

/// The daemon, the fake Discord it talks to, and the files of the test.
pub struct DiscordServe {
    pub fake: FakeDiscord,
    pub daemon: Daemon,
    pub config: TestConfig,
    /// Scripts, texts and the agent log live here (outside the daemon's data folder).
    pub files: tempfile::TempDir,
    /// The fake agent's script and log (in [`DiscordServe::files`]).
    pub agent: AgentFiles,
    /// The ops listener (`/readyz`).
    pub ops_addr: String,
    /// Whether the agents run in the real sandbox.
    sandboxed: bool,
    /// The daemon's variables besides `PATH` ([`DiscordSetup::env`]).
    env: Vec<(&'static str, String)>,
    /// Ids of the messages the test pushed (some written as the bot itself).
    pushed: Mutex<HashSet<u64>>,
}

/// What a test changes about the standard setup.
#[derive(Default)]
pub struct DiscordSetup {
    /// The agent's behaviour (`log` is filled in).
    pub script: Value,
    /// Extra top-level YAML sections (e.g. `skills:`); must not repeat `platforms`, `agent`,
    /// `prompts`, `logging`, `workspace`, `health` or `skillApi`.
    pub extra_yaml: String,
    /// Texts to write into [`DiscordServe::files`] before the start (name, content), for `reply_steps`.
    pub texts: Vec<(&'static str, String)>,
    /// An AIr-Friends data folder imported (`air-friends import jsonl`) into the daemon's
    /// database before it starts.
    pub import: Option<PathBuf>,
    /// Extra keys of `agent:` (each line indented by two spaces), e.g. model providers.
    pub agent_extra: String,
    /// Lines of `agent.sandbox` (each indented by four spaces) that run the agent in the real
    /// bubblewrap sandbox instead of none. The script is then made readable to the agent (its
    /// folder is a read-only path) and the agent's log lives in the user's workspace, the only
    /// place it may write.
    pub sandbox: Option<String>,
    /// The fake closes IDENTIFY with 4014, as Discord does when the Message Content intent is
    /// off: the start waits until `/readyz` says Discord is not connected instead of ready.
    pub refused_intents: bool,
    /// Channels the fake's GUILD_CREATE lists besides its own (with their overwrites).
    pub guild_channels: Vec<Value>,
    /// The server-wide permissions of the fake's roles (every one, Administrator included,
    /// when unset).
    pub role_permissions: Option<u64>,
    /// The whole `agent:` and `prompts:` sections instead of the fake agent's (e.g. the real
    /// OpenCode's); `script`, `agent_extra` and `sandbox` are then not used.
    pub agent_yaml: Option<String>,
    /// Variables the daemon is started with (besides `PATH`), e.g. a provider's key.
    pub env: Vec<(&'static str, String)>,
}

/// Where [`Setup::texts`] entries are written, given the files folder.
pub fn text_path(files: &Path, name: &str) -> PathBuf {
    files.join(name)
}

impl DiscordServe {
    /// Starts a fake Discord and `air-friends serve` against it with `setup`, and waits until
    /// the daemon is ready (Discord connected). `prepare` gets the files folder before the
    /// script is written, so steps can reference files there.
    pub async fn start(prepare: impl FnOnce(&Path) -> DiscordSetup) -> DiscordServe {
        let fake = FakeDiscord::start().await;
        let files = tempfile::tempdir().unwrap();
        let setup = prepare(files.path());
        fake.refuse_intents(setup.refused_intents);
        if let Some(bits) = setup.role_permissions {
            fake.set_role_permissions(bits);
        }
        for channel in &setup.guild_channels {
            fake.add_guild_channel(channel.clone());
        }
        for (name, text) in &setup.texts {
            std::fs::write(text_path(files.path(), name), text).unwrap();
        }
        let mut agent = AgentFiles::new(files.path());
        let sandboxed = setup.sandbox.is_some();
        let sandbox = match &setup.sandbox {
            None => "    mode: none\n".to_owned(),
            Some(lines) => {
                use std::os::unix::fs::PermissionsExt as _;
                std::fs::set_permissions(files.path(), std::fs::Permissions::from_mode(0o755))
                    .unwrap();
                format!(
                    "    mode: bwrap\n    readOnlyPaths: ['{}']\n{lines}",
                    files.path().display()
                )
            }
        };
        let yaml = format!(
            "platforms:\n  discord:\n    enabled: true\n    token: {TOKEN}\n    apiBaseUrl: {api}\n    gatewayUrl: {gateway}\n    guildIds: ['{GUILD_ID}']\n\
             {agent}\
             logging:\n  level: info\n\
             {extra}",
            api = fake.api_base_url(),
            gateway = fake.gateway_url(),
            agent = setup
                .agent_yaml
                .clone()
                .unwrap_or_else(|| agent.yaml_with_sandbox(
                    &format!("  idleTimeoutMs: 30000\n{}", setup.agent_extra),
                    &sandbox
                )),
            extra = setup.extra_yaml,
        );
        let config = TestConfig::new(&yaml);
        if setup.sandbox.is_some() {
            let workspace = config
                .dir
                .path()
                .join(format!("data/workspaces/discord/{USER_ID}"));
            std::fs::create_dir_all(&workspace).unwrap();
            agent.log = workspace.join(super::AGENT_LOG);
        }
        agent.write(if setup.script.is_null() {
            one_turn(Vec::new())
        } else {
            setup.script
        });
        if let Some(dir) = &setup.import {
            let out = std::process::Command::new(super::bin())
                .args(["import", "jsonl", "--config"])
                .arg(&config.path)
                .arg(dir)
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "import failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let (daemon, ops_addr) = start_daemon(&config.path, sandboxed, &setup.env);
        let bot = DiscordServe {
            fake,
            daemon,
            config,
            files,
            agent,
            ops_addr,
            sandboxed,
            env: setup.env,
            pushed: Mutex::default(),
        };
        bot.wait_readiness(!setup.refused_intents).await;
        bot
    }

    /// `GET /metrics`: the exposition text.
    pub async fn metrics(&self) -> String {
        reqwest::get(format!("http://{}/metrics", self.ops_addr))
            .await
            .expect("GET /metrics")
            .text()
            .await
            .expect("the /metrics body")
    }

    /// Stops the daemon — with SIGKILL when `crash`, as a crash or a power cut would, else
    /// with SIGTERM and its drain — and starts it again on the same configuration, database
    /// and fake Discord; waits until it is ready.
    pub async fn restart(&mut self, crash: bool) {
        if crash {
            self.crash();
        } else {
            self.shut_down();
        }
        self.start_again().await;
    }

    /// Kills the daemon with SIGKILL, as a crash or a power cut would (start it with
    /// [`Self::start_again`]).
    pub fn crash(&mut self) {
        self.daemon.child.kill().expect("SIGKILL the daemon");
        self.daemon
            .child
            .wait()
            .expect("the killed daemon is reaped");
    }

    /// Stops the daemon with SIGTERM and its drain (start it with [`Self::start_again`]).
    pub fn shut_down(&mut self) {
        self.daemon.terminate();
        let status = tokio::task::block_in_place(|| self.daemon.wait_exit(WAIT));
        assert!(status.success(), "exit status {status:?}");
    }

    /// Starts the daemon again on the same configuration, database and fake Discord; waits
    /// until it is ready.
    pub async fn start_again(&mut self) {
        let (daemon, ops_addr) = start_daemon(&self.config.path, self.sandboxed, &self.env);
        self.daemon = daemon;
        self.ops_addr = ops_addr;
        self.wait_readiness(true).await;
    }

    /// Adds a message from the human user to `channel`'s history, written at `at`, without a
    /// gateway event: one sent while the bot was away. Returns its id.
    pub fn sent_while_away(
        &self,
        channel: &str,
        text: &str,
        at: chrono::DateTime<chrono::Utc>,
    ) -> String {
        self.fake
            .seed_message_at(channel, USER_ID, "alice", false, text, at)
    }

    /// `GET /readyz`: status code and body.
    pub async fn readyz(&self) -> (u16, Value) {
        readyz(&self.ops_addr).await
    }

    /// Whether `/readyz` says the `discord` check passes.
    pub async fn discord_ready(&self) -> (u16, bool) {
        let (status, body) = self.readyz().await;
        let ok = readyz_check(&body, "discord").expect("/readyz has a discord check");
        (status, ok)
    }

    /// Waits until `/readyz` reports the daemon ready (200, discord ok) or, with `false`, not
    /// ready because Discord is down (503, discord failing).
    pub async fn wait_readiness(&self, ready: bool) {
        wait_readyz(&self.ops_addr, "discord", ready, WAIT).await;
    }

    /// Pushes a MESSAGE_CREATE by `author` (a [`user`] object) in `channel` (in the guild
    /// unless it is the DM channel); returns its id.
    pub fn push(&self, channel: &str, author: Value, text: &str) -> String {
        let id = self.fake.next_id();
        self.pushed
            .lock()
            .unwrap()
            .insert(id.parse().expect("numeric id"));
        let guild = (channel != DM_CHANNEL_ID).then_some(GUILD_ID);
        self.fake
            .push_message(message_create(&id, channel, guild, author, text));
        id
    }

    /// Pushes a message from the human user mentioning the bot in the guild channel; returns
    /// its id.
    pub fn mention(&self, text: &str) -> String {
        self.push(
            CHANNEL_ID,
            user(USER_ID, "alice", false),
            &format!("<@{BOT_ID}> {text}"),
        )
    }

    /// Pushes a direct message from the human user; returns its id.
    pub fn dm(&self, text: &str) -> String {
        self.push(DM_CHANNEL_ID, user(USER_ID, "alice", false), text)
    }

    /// The messages the bot posted in `channel`, oldest first (not those the test pushed in
    /// the bot's name).
    pub fn bot_messages(&self, channel: &str) -> Vec<StoredMessage> {
        let pushed = self.pushed.lock().unwrap().clone();
        self.fake
            .messages(channel)
            .into_iter()
            .filter(|m| m.author_id == BOT_ID && !pushed.contains(&m.id))
            .collect()
    }

    /// Waits until the bot has posted at least `count` messages in `channel`; returns them all.
    pub async fn wait_bot_messages(&self, channel: &str, count: usize) -> Vec<StoredMessage> {
        eventually(
            WAIT,
            &format!("{count} bot message(s) in channel {channel}"),
            || self.bot_messages(channel).len() >= count,
        )
        .await;
        self.bot_messages(channel)
    }

    /// Waits until at least `count` REST requests match; returns them all.
    pub async fn wait_requests(&self, method: &str, prefix: &str, count: usize) -> Vec<Recorded> {
        eventually(
            WAIT,
            &format!("{count} request(s) {method} {prefix}"),
            || self.fake.requests_to(method, prefix).len() >= count,
        )
        .await;
        self.fake.requests_to(method, prefix)
    }

    /// `POST /channels/{channel}/messages` requests (message creations; not history reads).
    pub fn message_posts(&self, channel: &str) -> Vec<Recorded> {
        let path = format!("/channels/{channel}/messages");
        self.fake
            .requests()
            .into_iter()
            .filter(|r| r.method == "POST" && r.path == path)
            .collect()
    }

    /// Waits for a daemon log line satisfying `pred`.
    pub fn wait_log(&mut self, pred: impl Fn(&Value) -> bool) -> Value {
        tokio::task::block_in_place(|| self.daemon.wait_for_log(WAIT, pred))
    }

    /// The first log line matching `pred`, among those already read (a wait for another line,
    /// e.g. the start's `listening`, may have read past it) or, failing that, the next ones.
    pub fn logged_or_wait(&mut self, pred: impl Fn(&Value) -> bool) -> Value {
        match self.logged().into_iter().find(|v| pred(v)) {
            Some(line) => line,
            None => self.wait_log(pred),
        }
    }

    /// Waits for `interaction finished` log lines until `count` have been seen in total.
    pub fn wait_interactions_finished(&mut self, count: usize) -> Vec<Value> {
        let mut finished: Vec<Value> = self
            .logged()
            .into_iter()
            .filter(|v| v["message"] == "interaction finished")
            .collect();
        while finished.len() < count {
            finished.push(self.wait_log(|v| v["message"] == "interaction finished"));
        }
        finished
    }

    /// Every log line seen so far, parsed.
    pub fn logged(&self) -> Vec<Value> {
        self.daemon.logged()
    }

    /// The prompt texts the agents received (`session/prompt`), in order (JSON of the
    /// content blocks).
    pub fn prompts(&self) -> Vec<String> {
        self.agent_log_lines()
            .iter()
            .filter(|v| v["received"]["method"] == "session/prompt")
            .map(|v| v["received"]["params"]["prompt"].to_string())
            .collect()
    }

    /// The fake agent's log lines (empty when no agent was ever started).
    pub fn agent_log_lines(&self) -> Vec<Value> {
        self.agent.log_lines()
    }

    /// The params of every request of `method` the agents received, in order.
    pub fn received(&self, method: &str) -> Vec<Value> {
        self.agent_log_lines()
            .into_iter()
            .filter(|v| v["received"]["method"] == method)
            .map(|v| v["received"]["params"].clone())
            .collect()
    }

    /// How many agent processes were started (each sends `initialize` once).
    pub fn agents_started(&self) -> usize {
        self.agent_log_lines()
            .iter()
            .filter(|v| v["received"]["method"] == "initialize")
            .count()
    }

    /// Results of the agent's `permission` / `run` steps, for failure messages.
    pub fn agent_events(&self) -> String {
        self.agent_log_lines()
            .iter()
            .filter(|v| v.get("event").is_some())
            .map(Value::to_string)
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// SIGTERM, a clean exit, and no token in any log line.
    pub fn stop(mut self) {
        self.daemon.terminate();
        let status = tokio::task::block_in_place(|| self.daemon.wait_exit(WAIT));
        assert!(status.success(), "exit status {status:?}");
        let all = self.daemon.seen.join("\n");
        assert!(!all.contains(TOKEN), "the Discord token reached the log");
    }
}

/// Starts `air-friends serve` on `config` and waits until its listeners are up; returns it and
/// its ops address. A sandboxed daemon serves the Skill API on per-session sockets only: no
/// TCP listener.
fn start_daemon(config: &Path, sandboxed: bool, env: &[(&str, String)]) -> (Daemon, String) {
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let mut daemon = Daemon::start(config, &env);
    let (mut skill_api, mut ops) = (sandboxed, None);
    while !(skill_api && ops.is_some()) {
        let line = tokio::task::block_in_place(|| {
            daemon.wait_for_log(WAIT, |v| v["message"] == "listening")
        });
        match line["listener"].as_str() {
            Some("skill_api") => skill_api = true,
            Some("ops") => ops = line["addr"].as_str().map(str::to_owned),
            _ => {}
        }
    }
    (daemon, ops.expect("the ops listener"))
}
