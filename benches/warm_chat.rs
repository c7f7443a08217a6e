//! Warm agents against cold starts, through the whole pipeline: `air-friends chat` with the
//! real OpenCode (`opencode acp`) and the fake LLM of the tests (`tests/common/fake_llm.rs`,
//! loopback, answering each message by writing a reply file and running the real send-reply
//! skill). Each round types five messages into one conversation, each after the previous
//! answer arrived and at most one every 6.5 s (send-reply's rate limit per user), with `agent.warm.enabled` on and off, rounds interleaved in one run.
//!
//! Per message (1–5): the start latency (the line typed → the daemon's `prompt sent` record,
//! read from its log with its wall-clock timestamp), the whole reply time (typed → answer
//! printed), and the prompt bytes sent. After a warm round, the resident memory (`VmRSS`) of the
//! idle warm agent's processes (bubblewrap, the relay, OpenCode) and of the daemon.
//!
//! With `WARM_BENCH_ONLY=resume`: the first message after a restart, the conversation's
//! session resumed (`agent.continuity`) against a new one.
//!
//! Run: `cargo bench --bench warm_chat`. Knobs: `WARM_BENCH_ROUNDS` (default 3 per side),
//! `OPENCODE_BIN`, `WARM_BENCH_ONLY`. Results are recorded in `docs/PERFORMANCE.md` ("Warm agents"), earlier runs
//! in `docs/performance/agents.md`.

#[path = "../tests/common/fake_llm.rs"]
mod fake_llm;
#[path = "../tests/common/opencode.rs"]
mod opencode;
#[path = "support/procs.rs"]
mod procs;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, SystemTime};

use fake_llm::FakeLlm;
use procs::{descendants, rss_kb};
use serde_json::json;

const MESSAGES: usize = 5;

/// Time between two typed messages (see `round`).
const PACE: Duration = Duration::from_millis(6_500);

/// One message's figures.
#[derive(Debug, Clone, Copy)]
struct Sample {
    start: Duration,
    reply: Duration,
    prompt_bytes: usize,
}

/// The wall-clock time of a pretty log line (`2026-12-01T10:56:40.694407Z  DEBUG ...`).
fn log_time(line: &str) -> Option<SystemTime> {
    let stamp = line.split_whitespace().next()?;
    let t = chrono::DateTime::parse_from_rfc3339(stamp).ok()?;
    let micros = u64::try_from(t.timestamp_micros()).ok()?;
    Some(SystemTime::UNIX_EPOCH + Duration::from_micros(micros))
}

/// One round: five messages in one conversation. Returns the samples and, for a warm round,
/// (agent processes' RSS, daemon RSS) in KiB with the agent idle after the last answer.
async fn round(bin: &Path, warm: bool) -> (Vec<Sample>, Option<(u64, u64)>) {
    let dir = tempfile::tempdir().unwrap();
    chat(
        bin,
        dir.path(),
        &Run {
            warm,
            continuity: false,
            messages: MESSAGES,
        },
    )
    .await
}

/// What one `air-friends chat` run does.
struct Run {
    warm: bool,
    continuity: bool,
    messages: usize,
}

/// One `air-friends chat` run in `dir` (its data folder kept there across runs), typing
/// `run.messages` messages; the samples and, for a warm run, the idle agent's memory.
async fn chat(bin: &Path, dir: &Path, run: &Run) -> (Vec<Sample>, Option<(u64, u64)>) {
    let warm = run.warm;
    let data = dir.join("data");
    let home = dir.join("home");
    std::fs::create_dir_all(&home).unwrap();
    let workspace = data.join("workspaces/console/local");
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let skills = root.join("skills");
    let llm = FakeLlm::start(fake_llm::reply_steps(&workspace, &skills, "Noted.")).await;
    let mut config = opencode::zen_chat_config(&data, bin, &llm.base_url);
    config["agent"]["warm"] = json!({"enabled": warm});
    config["agent"]["continuity"] = json!({"enabled": run.continuity});
    let config_path = dir.join("config.yaml");
    std::fs::write(&config_path, serde_yaml::to_string(&config).unwrap()).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_air-friends"))
        .args(["chat", "--config"])
        .arg(&config_path)
        .env("HOME", &home)
        .env("USER", "local")
        .env("RUST_LOG", "warn,air_friends::agent::run=debug")
        .env_remove("OPENROUTER_API_KEY")
        .env_remove("OPENCODE_API_KEY")
        .env_remove("AGENT_MODEL")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (out_tx, out_rx) = mpsc::channel();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = out_tx.send(line);
        }
    });
    let (err_tx, err_rx) = mpsc::channel::<String>();
    let stderr = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = err_tx.send(line);
        }
    });
    let mut stdin = child.stdin.take().unwrap();
    let mut samples = Vec::new();
    let mut last_typed: Option<std::time::Instant> = None;
    for i in 0..run.messages {
        // send-reply's own rate limit (10 a minute per user, bursts of 3) would refuse a
        // faster pace: a message at most every PACE.
        if let Some(at) = last_typed {
            std::thread::sleep(PACE.saturating_sub(at.elapsed()));
        }
        last_typed = Some(std::time::Instant::now());
        let typed = SystemTime::now();
        writeln!(stdin, "message number {i}").unwrap();
        stdin.flush().unwrap();
        let answer = out_rx
            .recv_timeout(Duration::from_secs(120))
            .expect("an answer");
        let answered = SystemTime::now();
        if !answer.contains("Noted.") {
            let log: Vec<String> = err_rx.try_iter().collect();
            panic!("{answer}\n{}", log.join("\n"));
        }
        let mut prompt = None;
        while let Ok(line) = err_rx.recv_timeout(Duration::from_millis(200)) {
            if line.contains("prompt sent") && prompt.is_none() {
                let bytes = line
                    .split("bytes=")
                    .nth(1)
                    .and_then(|b| b.split_whitespace().next())
                    .and_then(|b| b.parse().ok())
                    .unwrap_or(0);
                prompt = log_time(&line).map(|t| (t, bytes));
            }
        }
        let (sent, prompt_bytes) = prompt.expect("a prompt sent record");
        samples.push(Sample {
            start: sent.duration_since(typed).unwrap_or_default(),
            reply: answered.duration_since(typed).unwrap_or_default(),
            prompt_bytes,
        });
    }
    let memory = warm.then(|| {
        let agents: u64 = descendants(child.id()).into_iter().map(rss_kb).sum();
        (agents, rss_kb(child.id()))
    });
    drop(stdin);
    let _ = child.wait();
    (samples, memory)
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let bin: PathBuf = opencode::opencode();
    let rounds: usize = std::env::var("WARM_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    if std::env::var("WARM_BENCH_ONLY").as_deref() == Ok("resume") {
        resume_rounds(&rt, &bin, rounds);
        return;
    }
    let mut by_side: [Vec<Vec<Sample>>; 2] = [Vec::new(), Vec::new()];
    let mut memory = Vec::new();
    for r in 0..rounds {
        for (side, warm) in [(0, true), (1, false)] {
            // Alternate which side goes first, so drift on the shared machine hits both.
            let warm = if r % 2 == 0 { warm } else { !warm };
            let side = if r % 2 == 0 { side } else { 1 - side };
            let (samples, mem) = rt.block_on(round(&bin, warm));
            by_side[side].push(samples);
            memory.extend(mem);
        }
    }
    println!(
        "warm agents vs cold starts, real OpenCode + fake LLM, {rounds} rounds per side, medians:"
    );
    println!(
        "message | start warm | start cold | reply warm | reply cold | prompt bytes warm | cold"
    );
    for i in 0..MESSAGES {
        let col = |side: usize, f: fn(&Sample) -> Duration| {
            median(by_side[side].iter().map(|round| f(&round[i])).collect())
        };
        let bytes = |side: usize| {
            by_side[side]
                .iter()
                .map(|round| round[i].prompt_bytes)
                .max()
                .unwrap_or(0)
        };
        println!(
            "{} | {:.1} ms | {:.1} ms | {:.0} ms | {:.0} ms | {} | {}",
            i + 1,
            col(0, |s| s.start).as_secs_f64() * 1e3,
            col(1, |s| s.start).as_secs_f64() * 1e3,
            col(0, |s| s.reply).as_secs_f64() * 1e3,
            col(1, |s| s.reply).as_secs_f64() * 1e3,
            bytes(0),
            bytes(1),
        );
    }
    for (agents, daemon) in memory {
        println!(
            "idle warm agent: {:.0} MiB (all its processes), daemon {:.0} MiB",
            agents as f64 / 1024.0,
            daemon as f64 / 1024.0
        );
    }
}

/// Continuity after a restart against a cold start: per round and side, one `chat` run with one
/// message, then a second run on the same data folder with one more; with continuity the second
/// run's agent resumes the session, without it starts a new one. Alternated like the rounds.
fn resume_rounds(rt: &tokio::runtime::Runtime, bin: &Path, rounds: usize) {
    let mut by_side: [Vec<Sample>; 2] = [Vec::new(), Vec::new()];
    for r in 0..rounds {
        for side in [r % 2, 1 - r % 2] {
            let continuity = side == 0;
            let dir = tempfile::tempdir().unwrap();
            let run = Run {
                warm: true,
                continuity,
                messages: 1,
            };
            rt.block_on(chat(bin, dir.path(), &run));
            let (after_restart, _) = rt.block_on(chat(bin, dir.path(), &run));
            by_side[side].extend(after_restart);
        }
    }
    println!(
        "the first message after a restart, real OpenCode + fake LLM, {rounds} per side, medians:"
    );
    println!("side | start (typed -> prompt sent) | reply | prompt bytes");
    for (side, name) in [
        (0, "resumed (continuity on)"),
        (1, "new session (continuity off)"),
    ] {
        let samples = &by_side[side];
        println!(
            "{name} | {:.0} ms | {:.0} ms | {}",
            median(samples.iter().map(|s| s.start).collect()).as_secs_f64() * 1e3,
            median(samples.iter().map(|s| s.reply).collect()).as_secs_f64() * 1e3,
            samples.iter().map(|s| s.prompt_bytes).max().unwrap_or(0),
        );
    }
}
