//! Agent start-up benchmark: how long the runner takes from "start session" to "prompt sent"
//! (spawn + `initialize` + `session/new` + model selection), and how much resident memory each
//! concurrent agent session costs.
//!
//! * The scripted fake ACP agent (`examples/fake_acp_agent.rs`) answers at once, so its numbers
//!   are the daemon's own overhead (process spawn, JSON-RPC, pipes): many sequential runs, p50/p99.
//! * The real OpenCode (`opencode acp`) driven by the fake LLM of the tests
//!   (`tests/common/fake_llm.rs`, loopback): a few runs. OpenCode is found as the daemon finds
//!   it (`tests/common/opencode.rs`: `OPENCODE_BIN`, else `PATH`, else the folder
//!   `air-friends setup` installs it into); without it the benchmark stops before it starts.
//! * Memory: N sessions held open at once mid-turn (the fake agent hangs in its turn; OpenCode
//!   runs an approved skill script that sleeps), then the resident set (`VmRSS` in
//!   `/proc/<pid>/status`) of every agent process and of its whole process group is read.
//!
//! * Sandbox cost: the fake agent and OpenCode started with `agent.sandbox.mode: bwrap` against
//!   `none`, interleaved in the same run, p50/p99 and the difference; a third side runs the
//!   sandbox as the daemon does with a Skill API socket: no network (`--unshare-net`) and the
//!   agent under `air-friends sandbox-init`'s relay (for OpenCode the relay's socket forwards to
//!   the fake LLM, so its model calls cross the relay like the model gateway's will).
//!
//! "Prompt sent" is the runner's `prompt sent` debug event (`src/agent/run/`), captured by
//! a tracing layer in this program; "start session" is the call to `AgentRunner::run`.
//!
//! Run (the fake agent must be built in the same profile as the bench):
//! `cargo build --release --example fake_acp_agent && cargo bench --bench agent_startup`.
//! * Cgroup cost: the same sandbox with `agent.sandbox.cgroup` off and on (memory, processes,
//!   one core of CPU), interleaved: start-up, whole sessions and their CPU.
//!
//! Knobs: `AGENT_BENCH_RUNS` (fake agent runs, default 200), `AGENT_BENCH_OPENCODE_RUNS`
//! (default 5), `AGENT_BENCH_ONLY=sandbox` (only the sandbox's cost), `=cgroup` (only the
//! cgroup's), `FAKE_ACP_AGENT` (path of
//! the fake agent), `OPENCODE_BIN`; `RUST_LOG` also
//! prints the runner's log on stderr. Results are recorded
//! in `docs/PERFORMANCE.md` ("Agent start-up and the sandbox"), earlier runs in
//! `docs/performance/agents.md`.

#[path = "../tests/common/fake_llm.rs"]
mod fake_llm;
#[path = "../tests/common/opencode.rs"]
mod opencode;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use air_friends::agent::{
    AgentRun, AgentRunner, ApprovalRules, Outcome, PermissionGate, RunnerSettings, Sandbox,
    SandboxSetup,
};
use air_friends::config::SandboxConfig;
use fake_llm::{FakeLlm, Step};
use serde_json::json;
use tokio_util::sync::CancellationToken;
use tracing::field::{Field, Visit};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::util::SubscriberInitExt;

// ---------------------------------------------------------------------------------------------
// "Prompt sent" capture

/// First "prompt sent" instant per session id.
fn prompt_sent() -> &'static Mutex<HashMap<String, Instant>> {
    static MAP: OnceLock<Mutex<HashMap<String, Instant>>> = OnceLock::new();
    MAP.get_or_init(Default::default)
}

fn sent_at(session: &str) -> Option<Instant> {
    prompt_sent().lock().unwrap().get(session).copied()
}

#[derive(Default)]
struct Fields {
    message: String,
    session_id: String,
}

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        match field.name() {
            "message" => self.message = format!("{value:?}"),
            "session_id" => self.session_id = format!("{value:?}"),
            _ => {}
        }
    }
}

/// Records the instant of the runner's `prompt sent` event.
struct PromptSentLayer;

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for PromptSentLayer {
    fn on_event(&self, event: &tracing::Event<'_>, _ctx: Context<'_, S>) {
        let now = Instant::now();
        if event.metadata().target() != "air_friends::agent::run" {
            return;
        }
        let mut fields = Fields::default();
        event.record(&mut fields);
        if fields.message == "prompt sent" {
            prompt_sent()
                .lock()
                .unwrap()
                .entry(fields.session_id)
                .or_insert(now);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Helpers

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn fake_agent() -> PathBuf {
    if let Ok(p) = std::env::var("FAKE_ACP_AGENT") {
        return PathBuf::from(p);
    }
    // target/<profile>/deps/agent_startup-<hash> → target/<profile>/examples/fake_acp_agent
    let exe = std::env::current_exe().expect("own path");
    let profile_dir = exe.parent().and_then(Path::parent).expect("target dir");
    let path = profile_dir.join("examples/fake_acp_agent");
    if !path.exists() {
        eprintln!(
            "{} is missing: run `cargo build --release --example fake_acp_agent` first \
             (or set FAKE_ACP_AGENT)",
            path.display()
        );
        std::process::exit(2);
    }
    path
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

fn summary(label: &str, mut samples: Vec<Duration>) {
    samples.sort();
    println!(
        "  {label}: n={} min={} p50={} p90={} p99={} max={}",
        samples.len(),
        ms(samples[0]),
        ms(percentile(&samples, 0.5)),
        ms(percentile(&samples, 0.9)),
        ms(percentile(&samples, 0.99)),
        ms(*samples.last().unwrap()),
    );
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// `VmRSS` of a process in kB (None once it is gone).
fn rss_kb(pid: i32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// `(ppid, pgrp)` from `/proc/<pid>/stat` (fields counted after the parenthesised name).
fn parent_and_group(pid: i32) -> Option<(i32, i32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let mut rest = stat[stat.rfind(')')? + 1..].split_whitespace();
    let _state = rest.next()?;
    Some((rest.next()?.parse().ok()?, rest.next()?.parse().ok()?))
}

fn all_pids() -> Vec<i32> {
    std::fs::read_dir("/proc")
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// One agent's memory: its own RSS, the RSS of its whole process group, and how many processes
/// the group has and how many of the agent's descendants live outside it.
struct AgentMemory {
    leader_kb: u64,
    group_kb: u64,
    group_size: usize,
    descendants_outside: usize,
}

/// Every agent (our direct children, each leading its own process group).
fn agent_memory() -> Vec<AgentMemory> {
    let me = std::process::id() as i32;
    let table: Vec<(i32, i32, i32)> = all_pids()
        .into_iter()
        .filter_map(|p| parent_and_group(p).map(|(pp, g)| (p, pp, g)))
        .collect();
    let descendants = |root: i32| {
        let mut found = vec![root];
        let mut i = 0;
        while i < found.len() {
            let parent = found[i];
            found.extend(table.iter().filter(|t| t.1 == parent).map(|t| t.0));
            i += 1;
        }
        found
    };
    table
        .iter()
        .filter(|(_, ppid, _)| *ppid == me)
        .map(|&(leader, _, _)| {
            let group: Vec<i32> = table
                .iter()
                .filter(|(_, _, g)| *g == leader)
                .map(|t| t.0)
                .collect();
            AgentMemory {
                leader_kb: rss_kb(leader).unwrap_or(0),
                group_kb: group.iter().filter_map(|&p| rss_kb(p)).sum(),
                group_size: group.len(),
                descendants_outside: descendants(leader)
                    .iter()
                    .filter(|p| !group.contains(p))
                    .count(),
            }
        })
        .collect()
}

fn mib(kb: u64) -> String {
    format!("{:.1} MiB", kb as f64 / 1024.0)
}

fn memory_report(label: &str, sessions: usize, agents: &[AgentMemory], daemon_growth_kb: i64) {
    let n = agents.len().max(1) as u64;
    let leader: u64 = agents.iter().map(|a| a.leader_kb).sum();
    let group: u64 = agents.iter().map(|a| a.group_kb).sum();
    println!(
        "  {label} x{sessions}: agents seen={} | per agent process: mean {} (min {}, max {}) | \
         per agent process group: mean {} ({} processes, {} descendants outside the group) | \
         all agents: {} | daemon RSS growth: {:.1} MiB | load {}",
        agents.len(),
        mib(leader / n),
        mib(agents.iter().map(|a| a.leader_kb).min().unwrap_or(0)),
        mib(agents.iter().map(|a| a.leader_kb).max().unwrap_or(0)),
        mib(group / n),
        agents.iter().map(|a| a.group_size).sum::<usize>(),
        agents.iter().map(|a| a.descendants_outside).sum::<usize>(),
        mib(group),
        daemon_growth_kb as f64 / 1024.0,
        loadavg(),
    );
}

/// A gate approving `entry` of the skills folder `skills` (canonicalised, as the daemon does).
fn gate(skills: &Path, entry: &str) -> PermissionGate {
    PermissionGate::new(
        ApprovalRules {
            skills_dir: std::fs::canonicalize(skills).unwrap(),
            entrypoints: vec![entry.to_owned()],
            command_prefixes: vec![],
            skills_mounted_in_workspace: false,
        },
        false,
    )
}

fn session(
    id: &str,
    workspace: &Path,
    env: BTreeMap<String, String>,
    terminate: CancellationToken,
) -> AgentRun {
    AgentRun {
        session_id: id.to_owned(),
        workspace: workspace.to_path_buf(),
        dm: true,
        api_socket_dir: None,
        env,
        prompt: "The user says hello.".into(),
        retry_prompt: None,
        terminate,
        shutdown: CancellationToken::new(),
        probe: Arc::new(|| false),
    }
}

#[must_use]
async fn wait_for(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    while !cond() {
        if Instant::now() >= deadline {
            eprintln!("timed out waiting for {what}");
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    true
}

// ---------------------------------------------------------------------------------------------
// Fake agent

fn fake_runner() -> AgentRunner {
    AgentRunner::new(
        RunnerSettings {
            command: fake_agent().display().to_string(),
            args: vec![],
            model: None,
            connect_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(300),
            max_turn: Duration::from_secs(900),
            kill_grace: Duration::from_secs(3),
        },
        gate(
            &Path::new(env!("CARGO_MANIFEST_DIR")).join("skills"),
            "send-reply/scripts/send-reply",
        ),
    )
}

fn fake_env(script: &Path, id: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("PATH".to_owned(), "/usr/bin:/bin".to_owned()),
        ("FAKE_ACP_SCRIPT".to_owned(), script.display().to_string()),
        ("SESSION_ID".to_owned(), id.to_owned()),
    ])
}

async fn bench_fake(dir: &Path, runs: usize) {
    println!("\n## Fake ACP agent ({})", fake_agent().display());
    let workspace = dir.join("ws-fake");
    std::fs::create_dir_all(workspace.join("tmp")).unwrap();
    let quick = dir.join("fake-quick.json");
    std::fs::write(&quick, json!({"turns": [{"steps": []}]}).to_string()).unwrap();
    let runner = fake_runner();

    // Warm-up (page cache, first spawn).
    for i in 0..5 {
        let id = format!("fake-warm-{i}");
        let run = session(
            &id,
            &workspace,
            fake_env(&quick, &id),
            CancellationToken::new(),
        );
        runner.run(run).await;
    }
    let load_before = loadavg();
    let mut startup = Vec::with_capacity(runs);
    let mut whole = Vec::with_capacity(runs);
    for i in 0..runs {
        let id = format!("fake-{i}");
        let run = session(
            &id,
            &workspace,
            fake_env(&quick, &id),
            CancellationToken::new(),
        );
        let t0 = Instant::now();
        let outcome = runner.run(run).await;
        let total = t0.elapsed();
        assert_eq!(outcome, Outcome::NoResponse { retried: false });
        startup.push(sent_at(&id).expect("prompt sent") - t0);
        whole.push(total);
    }
    println!("load average before/after: {load_before} / {}", loadavg());
    summary("start session → prompt sent", startup);
    summary(
        "whole session (start → prompt → end_turn → agent stopped)",
        whole,
    );

    let hang = dir.join("fake-hang.json");
    for n in [1usize, 4, 8] {
        let daemon_before = rss_kb(std::process::id() as i32).unwrap_or(0) as i64;
        let mut tokens = Vec::new();
        let mut handles = Vec::new();
        let mut ids = Vec::new();
        let log = dir.join(format!("fake-hang-{n}.jsonl"));
        std::fs::write(
            &hang,
            json!({"log": log, "turns": [{"steps": [{"hang": true}]}]}).to_string(),
        )
        .unwrap();
        for i in 0..n {
            let id = format!("fake-mem-{n}-{i}");
            let terminate = CancellationToken::new();
            let run = session(&id, &workspace, fake_env(&hang, &id), terminate.clone());
            let runner = fake_runner();
            tokens.push(terminate);
            ids.push(id);
            handles.push(tokio::spawn(async move { runner.run(run).await }));
        }
        let waited = wait_for(
            "every fake agent in its turn",
            Duration::from_secs(60),
            || {
                let received = std::fs::read_to_string(&log)
                    .unwrap_or_default()
                    .matches("\"session/prompt\"")
                    .count();
                received >= n
            },
        )
        .await;
        assert!(waited, "fake agents did not start their turns");
        tokio::time::sleep(Duration::from_millis(200)).await;
        let per_agent = agent_memory();
        let daemon_after = rss_kb(std::process::id() as i32).unwrap_or(0) as i64;
        memory_report("fake agent", n, &per_agent, daemon_after - daemon_before);
        for t in &tokens {
            t.cancel();
        }
        for h in handles {
            assert_eq!(h.await.unwrap(), Outcome::Terminated);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// OpenCode

struct OpenCodeWorld {
    home: PathBuf,
    workspace: PathBuf,
    skills: PathBuf,
    ready: PathBuf,
}

fn opencode_world(dir: &Path) -> OpenCodeWorld {
    let home = dir.join("oc-home");
    let workspace = dir.join("ws-opencode");
    // Canonical: the gate approves an entrypoint only by its real absolute path.
    let skills = std::fs::canonicalize(dir).unwrap().join("oc/skills");
    let ready = dir.join("oc-ready");
    std::fs::create_dir_all(workspace.join("tmp")).unwrap();
    std::fs::create_dir_all(&home).unwrap();
    std::fs::create_dir_all(&ready).unwrap();
    let scripts = skills.join("wait/scripts");
    std::fs::create_dir_all(&scripts).unwrap();
    std::fs::write(
        skills.join("wait/SKILL.md"),
        "---\nname: wait\ndescription: Wait for the user. Use it when told to wait.\n---\n\nRun scripts/wait.\n",
    )
    .unwrap();
    let script = scripts.join("wait");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\ntouch {}/ready.$$\nexec sleep 600\n",
            ready.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    OpenCodeWorld {
        home,
        workspace,
        skills,
        ready,
    }
}

fn opencode_env(w: &OpenCodeWorld, llm: &FakeLlm, id: &str) -> BTreeMap<String, String> {
    opencode_env_at(w, &llm.base_url, id)
}

/// [`opencode_env`] with the provider's `baseURL` at `base_url`.
fn opencode_env_at(w: &OpenCodeWorld, base_url: &str, id: &str) -> BTreeMap<String, String> {
    let agent_config = Path::new(env!("CARGO_MANIFEST_DIR")).join("agent-config/opencode.json");
    let inline = json!({
        "model": "fake/fake-model",
        "small_model": "fake/fake-model",
        "enabled_providers": ["fake"],
        "provider": {"fake": {
            "npm": "@ai-sdk/openai-compatible",
            "name": "Fake LLM",
            "options": {"baseURL": base_url, "apiKey": "sk-fake"},
            "models": {"fake-model": {"name": "Fake Model", "tool_call": true,
                "limit": {"context": 128000, "output": 4096}}}
        }},
        "skills": {"paths": [w.skills.display().to_string()]}
    });
    let h = &w.home;
    [
        ("PATH", std::env::var("PATH").unwrap_or_default()),
        ("HOME", h.display().to_string()),
        ("XDG_CONFIG_HOME", h.join(".config").display().to_string()),
        (
            "XDG_DATA_HOME",
            h.join(".local/share").display().to_string(),
        ),
        ("XDG_CACHE_HOME", h.join(".cache").display().to_string()),
        (
            "XDG_STATE_HOME",
            h.join(".local/state").display().to_string(),
        ),
        ("OPENCODE_CONFIG", agent_config.display().to_string()),
        ("OPENCODE_CONFIG_CONTENT", inline.to_string()),
        ("OPENCODE_DISABLE_MODELS_FETCH", "1".into()),
        ("OPENCODE_DISABLE_AUTOUPDATE", "1".into()),
        ("OPENCODE_DISABLE_SHARE", "1".into()),
        ("OPENCODE_DISABLE_LSP_DOWNLOAD", "1".into()),
        ("OPENCODE_DISABLE_DEFAULT_PLUGINS", "1".into()),
        ("OPENCODE_DISABLE_EXTERNAL_SKILLS", "1".into()),
        ("npm_config_registry", "http://127.0.0.1:9/".into()),
        ("TMPDIR", w.workspace.join("tmp").display().to_string()),
        ("SESSION_ID", id.to_owned()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect()
}

fn opencode_runner(bin: &Path, skills: &Path) -> AgentRunner {
    AgentRunner::new(
        RunnerSettings {
            command: bin.display().to_string(),
            args: vec!["acp".into()],
            model: Some("fake/fake-model".into()),
            connect_timeout: Duration::from_secs(60),
            idle_timeout: Duration::from_secs(120),
            max_turn: Duration::from_secs(300),
            kill_grace: Duration::from_secs(3),
        },
        gate(skills, "wait/scripts/wait"),
    )
}

async fn bench_opencode(dir: &Path, bin: &Path, runs: usize) {
    println!("\n## OpenCode ({})", bin.display());
    let w = opencode_world(dir);
    let llm = FakeLlm::start(vec![Step::Text("Hello!".into())]).await;
    let runner = opencode_runner(bin, &w.skills);
    let load_before = loadavg();
    let mut startup = Vec::new();
    let mut whole = Vec::new();
    for i in 0..runs {
        let id = format!("oc-{i}");
        let run = session(
            &id,
            &w.workspace,
            opencode_env(&w, &llm, &id),
            CancellationToken::new(),
        );
        let t0 = Instant::now();
        let outcome = runner.run(run).await;
        let total = t0.elapsed();
        let sent = sent_at(&id).map(|s| s - t0);
        println!(
            "  run {i}{}: prompt sent after {} · whole session {} · {outcome:?}",
            if i == 0 { " (fresh HOME)" } else { "" },
            sent.map_or("never".into(), ms),
            ms(total),
        );
        if let Some(s) = sent {
            startup.push(s);
            whole.push(total);
        }
    }
    println!("load average before/after: {load_before} / {}", loadavg());
    if !startup.is_empty() {
        summary("start session → prompt sent", startup);
        summary("whole session (one fake LLM answer, agent stopped)", whole);
    }

    let wait_script = w.skills.join("wait/scripts/wait");
    for n in [1usize, 2] {
        for f in std::fs::read_dir(&w.ready).unwrap().flatten() {
            let _ = std::fs::remove_file(f.path());
        }
        let llm = FakeLlm::start(vec![
            Step::Tool(
                "bash",
                json!({"command": wait_script.display().to_string(), "description": "Wait"}),
            ),
            Step::Text("Done.".into()),
        ])
        .await;
        let daemon_before = rss_kb(std::process::id() as i32).unwrap_or(0) as i64;
        let mut tokens = Vec::new();
        let mut handles = Vec::new();
        for i in 0..n {
            let id = format!("oc-mem-{n}-{i}");
            let terminate = CancellationToken::new();
            let run = session(
                &id,
                &w.workspace,
                opencode_env(&w, &llm, &id),
                terminate.clone(),
            );
            let runner = opencode_runner(bin, &w.skills);
            tokens.push(terminate);
            handles.push(tokio::spawn(async move { runner.run(run).await }));
        }
        let ready = w.ready.clone();
        let waited = wait_for(
            "every OpenCode session running its tool",
            Duration::from_secs(120),
            || {
                std::fs::read_dir(&ready).map_or(0, |d| d.count()) >= n
                    || handles.iter().any(|h| h.is_finished())
            },
        )
        .await;
        if !waited || std::fs::read_dir(&ready).map_or(0, |d| d.count()) < n {
            for t in &tokens {
                t.cancel();
            }
            for h in handles {
                println!(
                    "  OpenCode x{n}: session ended early: {:?}",
                    h.await.unwrap()
                );
            }
            continue;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        let per_agent = agent_memory();
        let daemon_after = rss_kb(std::process::id() as i32).unwrap_or(0) as i64;
        memory_report("OpenCode", n, &per_agent, daemon_after - daemon_before);
        for t in &tokens {
            t.cancel();
        }
        for h in handles {
            let outcome = h.await.unwrap();
            assert_eq!(outcome, Outcome::Terminated);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Sandbox cost: the same runner with and without bubblewrap, runs interleaved (A B A B …) so
// machine drift hits both sides alike.

/// The sandbox the daemon builds by default, for an agent at `program` with these skills.
async fn default_sandbox(program: &Path, skills: &Path) -> Sandbox {
    sandbox_with(&SandboxConfig::default(), program, skills).await
}

/// The sandbox `config` describes, for an agent at `program` with these skills, probed.
async fn sandbox_with(config: &SandboxConfig, program: &Path, skills: &Path) -> Sandbox {
    let config = config.clone();
    let agent_config = Path::new(env!("CARGO_MANIFEST_DIR")).join("agent-config");
    // The daemon's executable: the probe and the relay side run its `sandbox-init`.
    let exe = PathBuf::from(env!("CARGO_BIN_EXE_air-friends"));
    let path_var = std::env::var("PATH").ok();
    let sandbox = Sandbox::from_config(&SandboxSetup {
        config: &config,
        agent_program: Some(program),
        air_friends_bin: &exe,
        skills_dir: skills,
        agent_config_dir: Some(&agent_config),
        protected: &[],
        path_var: path_var.as_deref(),
    })
    .expect("bubblewrap is installed");
    sandbox.probe().await.expect("the sandbox starts");
    sandbox
}

/// Start-up (start session → prompt sent) of `runs` sessions on each side, interleaved;
/// `session_for(id, side)` builds side `side`'s session. Differences are against the first side.
async fn interleaved(
    label: &str,
    runs: usize,
    sides: &[(&str, &AgentRunner)],
    mut session_for: impl FnMut(&str, usize) -> AgentRun,
) {
    let mut samples: Vec<Vec<Duration>> = vec![Vec::new(); sides.len()];
    for i in 0..runs {
        for (side, (name, runner)) in sides.iter().enumerate() {
            let id = format!("{label}-{name}-{i}");
            let t0 = Instant::now();
            runner.run(session_for(&id, side)).await;
            if let Some(sent) = sent_at(&id) {
                samples[side].push(sent - t0);
            }
        }
    }
    let mut p50 = vec![Duration::ZERO; sides.len()];
    for (side, (name, _)) in sides.iter().enumerate() {
        let mut sorted = samples[side].clone();
        if sorted.is_empty() {
            println!("  {label}, sandbox {name}: no session reached its prompt");
            continue;
        }
        sorted.sort();
        p50[side] = percentile(&sorted, 0.5);
        summary(
            &format!("{label}, sandbox {name}: start session → prompt sent"),
            sorted,
        );
    }
    for side in 1..sides.len() {
        println!(
            "  {label}: {} adds {:+.1} ms at p50 over {} (ratio {:.2}){}",
            sides[side].0,
            (p50[side].as_secs_f64() - p50[0].as_secs_f64()) * 1000.0,
            sides[0].0,
            p50[side].as_secs_f64() / p50[0].as_secs_f64(),
            if side > 1 {
                format!(
                    "; {:+.1} ms over {}",
                    (p50[side].as_secs_f64() - p50[1].as_secs_f64()) * 1000.0,
                    sides[1].0
                )
            } else {
                String::new()
            }
        );
    }
}

/// A fake LLM answering "Hello!", reachable through the relay: `{sockets}/api.sock` forwards
/// to it. Returns it and its URL as a relayed agent sees it.
async fn relayed_fake_llm(sockets: &Path) -> (FakeLlm, String) {
    let llm = FakeLlm::start(vec![Step::Text("Hello!".into())]).await;
    let upstream: std::net::SocketAddr = llm
        .base_url
        .trim_start_matches("http://")
        .trim_end_matches("/v1")
        .parse()
        .expect("the fake LLM listens on IP:PORT");
    forward_socket(sockets, upstream);
    let relayed_url = format!("{}/v1", air_friends::agent::sandbox::sandbox_api_url());
    (llm, relayed_url)
}

/// Serves `{sockets}/api.sock` by forwarding every connection to `upstream` (TCP): stands in
/// for the daemon's model gateway behind the relay. Runs until the bench ends.
fn forward_socket(sockets: &Path, upstream: std::net::SocketAddr) {
    let listener = tokio::net::UnixListener::bind(sockets.join("api.sock")).expect("bind api.sock");
    tokio::spawn(async move {
        let mut connections = tokio::task::JoinSet::new();
        while let Ok((mut unix, _)) = listener.accept().await {
            connections.spawn(async move {
                if let Ok(mut tcp) = tokio::net::TcpStream::connect(upstream).await {
                    let _ = tokio::io::copy_bidirectional(&mut unix, &mut tcp).await;
                }
            });
        }
    });
}

/// `run` with a Skill API socket folder: no network in the sandbox, the agent under the relay.
fn relayed(mut run: AgentRun, sockets: &Path) -> AgentRun {
    run.api_socket_dir = Some(sockets.to_path_buf());
    run
}

/// CPU time (user + system) of this process and its waited-for children, in ms.
fn cpu_ms() -> f64 {
    let total = |who| {
        let u = nix::sys::resource::getrusage(who).expect("getrusage");
        let tv = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 * 1e3 + t.tv_usec() as f64 / 1e3;
        tv(u.user_time()) + tv(u.system_time())
    };
    total(nix::sys::resource::UsageWho::RUSAGE_SELF)
        + total(nix::sys::resource::UsageWho::RUSAGE_CHILDREN)
}

/// The agent's cgroup (memory, processes, CPU) against none: the default sandbox with
/// `agent.sandbox.cgroup` auto and off, as the daemon runs agents (relayed, no network),
/// interleaved: start → prompt sent, and whole sessions (start → agent stopped, the group
/// removed) with the CPU they cost this process and its children.
async fn bench_cgroup(dir: &Path, bin: &Path, runs: usize, oc_runs: usize) {
    println!("\n## The agent's cgroup at session start (cgroup off vs on, interleaved)");
    let sockets = dir.join("sockets-cg");
    std::fs::create_dir_all(&sockets).unwrap();
    let skills = Path::new(env!("CARGO_MANIFEST_DIR")).join("skills");
    let workspace = dir.join("ws-cgroup");
    std::fs::create_dir_all(workspace.join("tmp")).unwrap();
    let quick = workspace.join("fake-quick.json");
    std::fs::write(&quick, json!({"turns": [{"steps": []}]}).to_string()).unwrap();
    let off_config = SandboxConfig {
        cgroup: air_friends::config::CgroupMode::Off,
        ..SandboxConfig::default()
    };
    let on_config = SandboxConfig {
        cgroup: air_friends::config::CgroupMode::Required,
        ..SandboxConfig::default()
    };
    let off_sandbox = sandbox_with(&off_config, &fake_agent(), &skills).await;
    let on_sandbox = sandbox_with(&on_config, &fake_agent(), &skills).await;
    println!("  on: {}", on_sandbox.summary());
    let off = fake_runner().with_sandbox(off_sandbox);
    let on = fake_runner().with_sandbox(on_sandbox);
    let run_of = |id: &str| {
        relayed(
            session(
                id,
                &workspace,
                fake_env(&quick, id),
                CancellationToken::new(),
            ),
            &sockets,
        )
    };
    for i in 0..3 {
        off.run(run_of(&format!("cg-warm-off-{i}"))).await;
        on.run(run_of(&format!("cg-warm-on-{i}"))).await;
    }
    interleaved(
        "fake agent, relayed",
        runs,
        &[("cgroup off", &off), ("cgroup on", &on)],
        |id, _| run_of(id),
    )
    .await;
    // Whole sessions: the group's making, joining and removal all fall inside.
    let mut wall: [Vec<Duration>; 2] = [Vec::new(), Vec::new()];
    let mut cpu = [0.0f64; 2];
    for i in 0..runs {
        for (side, runner) in [&off, &on].into_iter().enumerate() {
            let id = format!("cg-whole-{side}-{i}");
            let (t0, c0) = (Instant::now(), cpu_ms());
            runner.run(run_of(&id)).await;
            wall[side].push(t0.elapsed());
            cpu[side] += cpu_ms() - c0;
        }
    }
    for (side, name) in ["cgroup off", "cgroup on"].into_iter().enumerate() {
        summary(
            &format!("fake agent, relayed, {name}: whole session"),
            wall[side].clone(),
        );
        println!(
            "  CPU per session ({name}): {:.2} ms",
            cpu[side] / runs as f64
        );
    }
    println!("  CPU ratio on/off: {:.3}", cpu[1] / cpu[0]);

    let w = opencode_world(dir);
    // Kept alive (named) until the end: the relay forwards to it.
    let (_llm, relayed_url) = relayed_fake_llm(&sockets).await;
    let off = opencode_runner(bin, &w.skills)
        .with_sandbox(sandbox_with(&off_config, bin, &w.skills).await);
    let on = opencode_runner(bin, &w.skills)
        .with_sandbox(sandbox_with(&on_config, bin, &w.skills).await);
    interleaved(
        "OpenCode, relayed (default limits)",
        oc_runs,
        &[("cgroup off", &off), ("cgroup on", &on)],
        |id, _| {
            let env = opencode_env_at(&w, &relayed_url, id);
            relayed(
                session(id, &w.workspace, env, CancellationToken::new()),
                &sockets,
            )
        },
    )
    .await;
}

async fn bench_sandbox(dir: &Path, bin: &Path, runs: usize, oc_runs: usize) {
    println!(
        "\n## Sandbox cost at session start (bwrap, and bwrap without network under the relay, \
         against none, interleaved)"
    );
    let sockets = dir.join("sockets");
    std::fs::create_dir_all(&sockets).unwrap();
    let skills = Path::new(env!("CARGO_MANIFEST_DIR")).join("skills");
    let workspace = dir.join("ws-sandbox");
    std::fs::create_dir_all(workspace.join("tmp")).unwrap();
    // Inside the workspace: the only place besides the runtime the sandboxed agent can read.
    let quick = workspace.join("fake-quick.json");
    std::fs::write(&quick, json!({"turns": [{"steps": []}]}).to_string()).unwrap();
    let none = fake_runner();
    let bwrap = fake_runner().with_sandbox(default_sandbox(&fake_agent(), &skills).await);
    for (i, runner) in [&none, &bwrap, &none, &bwrap].iter().enumerate() {
        let id = format!("sb-warm-{i}");
        runner
            .run(session(
                &id,
                &workspace,
                fake_env(&quick, &id),
                CancellationToken::new(),
            ))
            .await;
    }
    for i in 0..2 {
        let id = format!("sb-warm-relay-{i}");
        let run = session(
            &id,
            &workspace,
            fake_env(&quick, &id),
            CancellationToken::new(),
        );
        bwrap.run(relayed(run, &sockets)).await;
    }
    interleaved(
        "fake agent",
        runs,
        &[("none", &none), ("bwrap", &bwrap), ("bwrap+relay", &bwrap)],
        |id, side| {
            let run = session(
                id,
                &workspace,
                fake_env(&quick, id),
                CancellationToken::new(),
            );
            if side == 2 {
                relayed(run, &sockets)
            } else {
                run
            }
        },
    )
    .await;

    let w = opencode_world(dir);
    let (llm, relayed_url) = relayed_fake_llm(&sockets).await;
    let none = opencode_runner(bin, &w.skills);
    let bwrap = opencode_runner(bin, &w.skills).with_sandbox(default_sandbox(bin, &w.skills).await);
    let sides = [("none", &none), ("bwrap", &bwrap), ("bwrap+relay", &bwrap)];
    // The relay side: no network, the fake LLM reached through the relay and the socket.
    let relayed_session = |id: &str| {
        let env = opencode_env_at(&w, &relayed_url, id);
        relayed(
            session(id, &w.workspace, env, CancellationToken::new()),
            &sockets,
        )
    };
    // Inside the sandbox every session starts with an empty home on its private /tmp; compare
    // against both an unconfined agent reusing one warm home (what `none` does) and one given a
    // fresh home per session (the sandbox's own cost, like for like).
    interleaved(
        "OpenCode (none: one warm HOME)",
        oc_runs,
        &sides,
        |id, side| {
            if side == 2 {
                relayed_session(id)
            } else {
                session(
                    id,
                    &w.workspace,
                    opencode_env(&w, &llm, id),
                    CancellationToken::new(),
                )
            }
        },
    )
    .await;
    interleaved(
        "OpenCode (none: a fresh HOME per session)",
        oc_runs,
        &sides,
        |id, side| {
            if side == 2 {
                return relayed_session(id);
            }
            let mut env = opencode_env(&w, &llm, id);
            let home = w.home.join(format!("fresh-{id}"));
            for (var, sub) in [
                ("HOME", ""),
                ("XDG_CONFIG_HOME", ".config"),
                ("XDG_DATA_HOME", ".local/share"),
                ("XDG_CACHE_HOME", ".cache"),
                ("XDG_STATE_HOME", ".local/state"),
            ] {
                env.insert(var.into(), home.join(sub).display().to_string());
            }
            session(id, &w.workspace, env, CancellationToken::new())
        },
    )
    .await;
}

fn main() {
    // `RUST_LOG=...` also prints the runner's log on stderr (for diagnosing a failed run).
    let log = std::env::var_os("RUST_LOG").map(|_| {
        use tracing_subscriber::Layer;
        tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_filter(tracing_subscriber::EnvFilter::from_default_env())
    });
    tracing_subscriber::registry()
        .with(PromptSentLayer)
        .with(log)
        .init();
    let runs = env_usize("AGENT_BENCH_RUNS", 200);
    let oc_runs = env_usize("AGENT_BENCH_OPENCODE_RUNS", 5);
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .map(|m| m.trim_start_matches([' ', '\t', ':']).to_owned())
        })
        .unwrap_or_default();
    println!(
        "# agent_startup: {} CPUs ({cpu}), load average at start {}",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        loadavg()
    );
    // OpenCode as the daemon finds it; missing stops the benchmark before anything runs, with
    // the command that installs it.
    let bin = opencode::opencode();
    let dir = tempfile::tempdir().expect("temp dir");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        // AGENT_BENCH_ONLY=sandbox measures only the sandbox's cost, =cgroup only the cgroup's.
        let only = std::env::var("AGENT_BENCH_ONLY").unwrap_or_default();
        if only.is_empty() {
            bench_fake(dir.path(), runs).await;
            bench_opencode(dir.path(), &bin, oc_runs).await;
        }
        if only.is_empty() || only == "sandbox" {
            bench_sandbox(dir.path(), &bin, runs, oc_runs).await;
        }
        if only.is_empty() || only == "cgroup" {
            bench_cgroup(dir.path(), &bin, runs, oc_runs).await;
        }
    });
    println!("\nload average at end: {}", loadavg());
}
