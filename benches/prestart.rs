//! A DM's first message with its agent started ahead (the user's typing sign came first)
//! against a cold start, through the whole daemon: `air-friends serve` on the fake Discord of
//! the tests (`tests/common/fake_discord.rs`, loopback gateway and REST), the real OpenCode
//! (`opencode acp`) in the real sandbox, and the fake LLM (`tests/common/fake_llm.rs`), which
//! answers by writing a reply file and running the real send-reply skill.
//!
//! Each round starts a daemon on a fresh data folder (a conversation nobody has talked in)
//! and sends one DM: on the `typing` side a TYPING_START comes `LEAD` (2.5 s) before it, on the
//! `cold` side nothing does. Then, on both sides, a second DM of the same conversation (a warm
//! turn, the baseline the first should match). Per message: message → `prompt sent` (the
//! MESSAGE_CREATE pushed into the gateway → the daemon's log record with its wall-clock
//! timestamp) and message → the answer posted. Sides alternate which goes first.
//!
//! With `PRESTART_BENCH_ONLY=memory`: the idle agent's memory and CPU time with the daemon's
//! settings against other agent variables (`PRESTART_BENCH_VARIANT`), cold rounds alternated.
//!
//! Run: `cargo bench --bench prestart`. Knobs: `PRESTART_BENCH_ROUNDS` (default 3 per side),
//! `PRESTART_BENCH_LEAD_MS`, `PRESTART_BENCH_ONLY`, `PRESTART_BENCH_VARIANT`, `OPENCODE_BIN`. Results are recorded in `docs/PERFORMANCE.md` ("Agents started ahead").

#[path = "../tests/common/mod.rs"]
mod common;
#[path = "support/procs.rs"]
mod procs;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

use common::Daemon;
use common::fake_discord::{DM_CHANNEL_ID, FakeDiscord, GUILD_ID, USER_ID, message_create, user};
use common::fake_llm::{FakeLlm, reply_steps};
use common::serve_discord::TOKEN;
use procs::Usage;
use serde_json::json;

/// How long before the message the typing sign comes (Discord users type for seconds), unless
/// `PRESTART_BENCH_LEAD_MS` says otherwise.
const LEAD: Duration = Duration::from_millis(2_500);

fn lead() -> Duration {
    std::env::var("PRESTART_BENCH_LEAD_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .map_or(LEAD, Duration::from_millis)
}

/// Between the two messages: send-reply's own rate limit per user.
const PACE: Duration = Duration::from_millis(6_500);

/// One message's figures.
#[derive(Debug, Clone, Copy)]
struct Sample {
    start: Duration,
    reply: Duration,
}

/// The wall-clock time of a JSON log record.
fn record_time(v: &serde_json::Value) -> Option<SystemTime> {
    let t = chrono::DateTime::parse_from_rfc3339(v["timestamp"].as_str()?).ok()?;
    let micros = u64::try_from(t.timestamp_micros()).ok()?;
    Some(SystemTime::UNIX_EPOCH + Duration::from_micros(micros))
}

/// What one round measured: both messages, and the idle warm agent's memory and CPU time by
/// command after the second.
struct Round {
    samples: [Sample; 2],
    /// Typing sign → the agent started ahead is in the pool (the typing side).
    ahead: Option<Duration>,
    usage: BTreeMap<String, Usage>,
}

/// One daemon: the first DM (after a typing sign when `typing`) and a second one; the agent
/// gets `agent_env` besides the tests' offline settings.
async fn round(bin: &Path, typing: bool, agent_env: &[(&str, &str)]) -> Round {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let workspace = data.join(format!("workspaces/discord/{USER_ID}"));
    let llm = FakeLlm::start(reply_steps(&workspace, &root.join("skills"), "Noted.")).await;
    let fake = FakeDiscord::start().await;
    let mut config = common::opencode::zen_chat_config(&data, bin, &llm.base_url);
    config["platforms"] = json!({"discord": {
        "enabled": true, "token": TOKEN, "apiBaseUrl": fake.api_base_url(),
        "gatewayUrl": fake.gateway_url(), "guildIds": [GUILD_ID]}});
    for (key, value) in agent_env {
        config["agent"]["env"][*key] = json!(value);
    }
    config["logging"] = json!({"level": "info"});
    config["health"] = json!({"port": 0});
    config["skillApi"] = json!({"port": 0});
    let path = dir.path().join("config.yaml");
    std::fs::write(&path, serde_yaml::to_string(&config).unwrap()).unwrap();
    let home_str = home.display().to_string();
    let mut daemon = Daemon::start(
        &path,
        &[
            ("HOME", home_str.as_str()),
            ("RUST_LOG", "info,air_friends::agent::run=debug"),
        ],
    );
    daemon.wait_for_log(Duration::from_secs(60), |v| {
        v["message"] == "air-friends ready"
    });
    let typed = SystemTime::now();
    if typing {
        fake.dispatch(
            "TYPING_START",
            json!({"channel_id": DM_CHANNEL_ID, "user_id": USER_ID, "timestamp": 1_700_000_000u64}),
        );
        tokio::time::sleep(lead()).await;
    }
    let mut samples = Vec::new();
    let mut last = None::<Instant>;
    for (i, text) in ["hello there", "and a follow-up"].into_iter().enumerate() {
        if let Some(at) = last {
            tokio::time::sleep(PACE.saturating_sub(at.elapsed())).await;
        }
        last = Some(Instant::now());
        let sent = SystemTime::now();
        let id = fake.next_id();
        fake.push_message(message_create(
            &id,
            DM_CHANNEL_ID,
            None,
            user(USER_ID, "alice", false),
            text,
        ));
        let prompt =
            daemon.wait_for_log(Duration::from_secs(120), |v| v["message"] == "prompt sent");
        let deadline = Instant::now() + Duration::from_secs(120);
        while fake
            .messages(DM_CHANNEL_ID)
            .iter()
            .filter(|m| m.author_id == common::fake_discord::BOT_ID)
            .count()
            <= i
        {
            assert!(Instant::now() < deadline, "no answer to message {i}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let answered = SystemTime::now();
        samples.push(Sample {
            start: record_time(&prompt)
                .and_then(|t| t.duration_since(sent).ok())
                .unwrap_or_default(),
            reply: answered.duration_since(sent).unwrap_or_default(),
        });
    }
    let ahead = typing.then(|| {
        let logged = daemon.logged();
        let started = logged
            .iter()
            .find(|v| v["message"] == "agent started ahead of the message")
            .expect("the typing sign started an agent");
        record_time(started)
            .and_then(|t| t.duration_since(typed).ok())
            .unwrap_or_default()
    });
    // The agent is idle and warm now (the answer is out; its turn has ended).
    tokio::time::sleep(Duration::from_millis(500)).await;
    let usage = procs::usage_by_command(daemon.child.id());
    daemon.terminate();
    daemon.wait_exit(Duration::from_secs(30));
    Round {
        samples: [samples[0], samples[1]],
        ahead,
        usage,
    }
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let bin = common::opencode::opencode();
    let rounds: usize = std::env::var("PRESTART_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    if std::env::var("PRESTART_BENCH_ONLY").as_deref() == Ok("memory") {
        memory_rounds(&rt, &bin, rounds);
        return;
    }
    // [side][message]: side 0 typing ahead, 1 cold.
    let mut by_side: [[Vec<Sample>; 2]; 2] = Default::default();
    let mut usage = Vec::new();
    let mut ahead = Vec::new();
    for r in 0..rounds {
        for side in [r % 2, 1 - r % 2] {
            let result = rt.block_on(round(&bin, side == 0, &[]));
            for (i, s) in result.samples.into_iter().enumerate() {
                by_side[side][i].push(s);
            }
            usage.push(result.usage);
            ahead.extend(result.ahead);
        }
    }
    println!(
        "a DM's first message, agent started ahead (typing {:.1} s before) vs cold; real OpenCode in the sandbox + fake LLM, {rounds} rounds per side, medians:",
        lead().as_secs_f64()
    );
    println!(
        "typing sign -> agent started ahead and waiting: {:.0} ms",
        median(ahead).as_secs_f64() * 1e3
    );
    println!("side | message | start (message -> prompt sent) | reply (message -> answer posted)");
    for (side, name) in [(0, "typing ahead"), (1, "cold")] {
        for (i, which) in ["first", "second (warm)"].into_iter().enumerate() {
            let samples = &by_side[side][i];
            println!(
                "{name} | {which} | {:.1} ms | {:.0} ms",
                median(samples.iter().map(|s| s.start).collect()).as_secs_f64() * 1e3,
                median(samples.iter().map(|s| s.reply).collect()).as_secs_f64() * 1e3,
            );
        }
    }
    println!(
        "an idle warm agent after two turns, per round: command: processes, VmRSS, RssAnon, CPU"
    );
    for (r, u) in usage.iter().enumerate() {
        println!("round {r}: {}", describe(u));
    }
}

/// One round's usage by command, on one line.
fn describe(usage: &BTreeMap<String, Usage>) -> String {
    let total: u64 = usage.values().map(|u| u.rss_kb).sum();
    let parts: Vec<String> = usage
        .iter()
        .map(|(name, u)| {
            format!(
                "{name}: {}, {} MiB, {} MiB, {} ms",
                u.processes,
                u.rss_kb / 1024,
                u.anon_kb / 1024,
                u.cpu_ms
            )
        })
        .collect();
    format!("total {} MiB | {}", total / 1024, parts.join(" | "))
}

/// The agent's memory with the daemon's settings against other agent variables
/// (`PRESTART_BENCH_VARIANT`, `KEY=VALUE` pairs separated by spaces; default
/// `BUN_JSC_forceRAMSize=0`: Bun's own heap sizing instead of the daemon's 1 GiB): cold rounds
/// alternated, the idle agent's memory and CPU time after two turns, and both replies.
fn memory_rounds(rt: &tokio::runtime::Runtime, bin: &Path, rounds: usize) {
    let variant =
        std::env::var("PRESTART_BENCH_VARIANT").unwrap_or_else(|_| "BUN_JSC_forceRAMSize=0".into());
    let pairs: Vec<(&str, &str)> = variant
        .split_whitespace()
        .filter_map(|p| p.split_once('='))
        .collect();
    let sides: [(&str, &[(&str, &str)]); 2] = [("the daemon's settings", &[]), (&variant, &pairs)];
    let mut by_side: [Vec<Round>; 2] = [Vec::new(), Vec::new()];
    for r in 0..rounds {
        for side in [r % 2, 1 - r % 2] {
            by_side[side].push(rt.block_on(round(bin, false, sides[side].1)));
        }
    }
    println!(
        "an idle warm agent after two turns, real OpenCode in the sandbox + fake LLM, {rounds} rounds per side, medians:"
    );
    println!(
        "settings | OpenCode VmRSS | RssAnon | OpenCode CPU (start + 2 turns) | first reply | second reply"
    );
    for (side, (name, _)) in sides.iter().enumerate() {
        let results = &by_side[side];
        let of = |f: fn(&Usage) -> u64| {
            let mut v: Vec<u64> = results
                .iter()
                .map(|r| r.usage.get("opencode.exe").map_or(0, f))
                .collect();
            v.sort_unstable();
            v[v.len() / 2]
        };
        println!(
            "{name} | {} MiB | {} MiB | {} ms | {:.0} ms | {:.0} ms",
            of(|u| u.rss_kb) / 1024,
            of(|u| u.anon_kb) / 1024,
            of(|u| u.cpu_ms),
            median(results.iter().map(|r| r.samples[0].reply).collect()).as_secs_f64() * 1e3,
            median(results.iter().map(|r| r.samples[1].reply).collect()).as_secs_f64() * 1e3,
        );
    }
}
