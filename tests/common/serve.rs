//! What the two `air-friends serve` harnesses ([`super::serve_discord`] and
//! [`super::serve_misskey`]) share: the scripted fake ACP agent (`examples/fake_acp_agent.rs`)
//! as `agent.command` with its script and log files, the repository's `skills/` and `prompts/`,
//! the agent steps that run a real skill, and the ops listener's `/readyz`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};

use super::poll::poll_async;
use super::{AGENT_LOG, fake_agent};

/// `<repo>/<rel>`.
pub fn repo_path(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

/// The absolute path of the real script of skill `name`, as an agent runs it.
pub fn skill_script(name: &str) -> String {
    repo_path(&format!("skills/{name}/scripts/{name}"))
        .display()
        .to_string()
}

/// A `permission` step running skill `name` with `args` (the way an agent runs a skill: through
/// the permission gate, which auto-approves the skill scripts).
pub fn skill_step(name: &str, args: &str) -> Value {
    json!({"permission": format!("{} {args}", skill_script(name))})
}

/// The step that sends `$TMPDIR/$SESSION_ID/reply.md` with the real send-reply script.
pub fn send_reply_step() -> Value {
    skill_step("send-reply", "--message-file $TMPDIR/$SESSION_ID/reply.md")
}

/// The fake agent's script (read by every agent process when it starts, so a test may rewrite
/// it at any time) and the JSON-lines log every agent process appends to (absent until an agent
/// has started), so a test can tell whether, how often and how an agent ran.
pub struct AgentFiles {
    pub script: PathBuf,
    pub log: PathBuf,
}

impl AgentFiles {
    /// The files `agent.json` and [`AGENT_LOG`] in `dir` (nothing is written yet).
    pub fn new(dir: &Path) -> AgentFiles {
        AgentFiles {
            script: dir.join("agent.json"),
            log: dir.join(AGENT_LOG),
        }
    }

    /// Writes `script` with the log path added.
    pub fn write(&self, mut script: Value) {
        script["log"] = json!(self.log.display().to_string());
        std::fs::write(&self.script, script.to_string()).expect("write the agent script");
    }

    /// The `agent:` and `prompts:` config sections that run the fake agent with this script,
    /// the repository's skills (no sandbox) and prompts; `agent_extra` adds keys to `agent:`
    /// (each line indented by two spaces).
    pub fn yaml(&self, agent_extra: &str) -> String {
        self.yaml_with_sandbox(agent_extra, "    mode: none\n")
    }

    /// [`yaml`](Self::yaml) with `sandbox` as the lines of `agent.sandbox` (each indented by
    /// four spaces).
    pub fn yaml_with_sandbox(&self, agent_extra: &str, sandbox: &str) -> String {
        format!(
            "agent:\n  command: {agent}\n  args: []\n  skillsDir: {skills}\n  sandbox:\n{sandbox}  env:\n    FAKE_ACP_SCRIPT: {script}\n{agent_extra}\
             prompts:\n  dir: {prompts}\n",
            agent = fake_agent().display(),
            skills = repo_path("skills").display(),
            script = self.script.display(),
            prompts = repo_path("prompts").display(),
        )
    }

    /// Every line the agent processes logged, parsed (none when no agent ever started).
    pub fn log_lines(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }
}

/// `GET /readyz` on the ops listener at `ops_addr`: status code and body.
pub async fn readyz(ops_addr: &str) -> (u16, Value) {
    let response = reqwest::get(format!("http://{ops_addr}/readyz"))
        .await
        .expect("GET /readyz");
    let status = response.status().as_u16();
    (status, response.json().await.expect("/readyz is JSON"))
}

/// Whether the check `name` of a `/readyz` body passes (`None` when there is no such check).
pub fn readyz_check(body: &Value, name: &str) -> Option<bool> {
    body["checks"]
        .as_array()?
        .iter()
        .find(|c| c["name"] == name)
        .and_then(|c| c["ok"].as_bool())
}

/// Waits (up to `timeout`) until `/readyz` reports the daemon ready (200, check `name` passing)
/// or, with `ready` false, not ready because of it (503, check `name` failing).
pub async fn wait_readyz(ops_addr: &str, name: &str, ready: bool, timeout: Duration) {
    let mut last = None;
    let reached = poll_async(timeout, async || {
        let (status, body) = readyz(ops_addr).await;
        let reached = readyz_check(&body, name) == Some(ready) && (status == 200) == ready;
        last = Some((status, body));
        reached.then_some(())
    })
    .await;
    assert!(
        reached.is_some(),
        "/readyz did not report {name} ok={ready} within {timeout:?}; last: {last:?}"
    );
}
