//! Skill API load benchmark: authenticated `memory-save`, `memory-search` and `memory-stats` over
//! loopback HTTP against the real handlers, at 16 and 64 concurrent callers, with a workspace
//! pre-filled with 10 000 memories.
//!
//! Run: `cargo bench --bench skill_api` (a plain program, `harness = false`; it prints one
//! `RESULT` line per case and a Markdown table). `SKILL_BENCH_REQUESTS` sets the measured requests
//! per case (default 2 000; 100 more per case are a warm-up). Results are recorded in
//! `docs/PERFORMANCE.md` ("Skill API"), earlier runs in `docs/performance/skill-api.md`.
//!
//! Set-up, as in the daemon: `serve` on `127.0.0.1:0`, the registry `build_registry` builds from
//! the repository's `skills/` (manifest rate limits removed: the bench drives one user far beyond
//! them), a `Store` file under Cargo's target tmp dir (a real disk, so save fsyncs count) and a
//! `FakePlatform`, metrics with every skill's series and the hourly call log. The store and the set-up run on the bench's server runtime; connections and
//! calls on the Skill API's own one-thread runtime (`ServingRuntime`, as in the daemon;
//! `SKILL_BENCH_RUNTIME=shared` serves them on the server runtime's two workers instead, as
//! before that runtime existed). The load generator (tokio tasks sharing one keep-alive
//! `reqwest` client) runs on a third runtime, so all compete for the same cores, as the agent's
//! skill scripts would.
//!
//! The 1-second de-duplication cache must never answer: every `memory-save` carries distinct
//! content, every `memory-search` a distinct query, and every `memory-stats` (which has no
//! parameters) comes from a session of its own. Cases run stats → search → save, so search and
//! stats see exactly the pre-filled memories; the save cases then grow the workspace.
//!
//! The first case, `http-floor`, sends the cheap path's request to a bare server built the same
//! way (hyper's HTTP/1, an axum router, one route that reads the body and answers fixed JSON):
//! the HTTP stack and kernel loopback alone, the floor under every call (see [`FLOOR`]).
//!
//! `SKILL_BENCH_MEMORIES` sets the pre-filled memories (default 10 000). `SKILL_BENCH_CORPUS`
//! picks what they say and what is searched: `words` (default: sentences of a small vocabulary,
//! queries of two of its words), `topics` (memory `i` is `likes topic{i%50} and item{i%97},
//! remembered fact {i}`; queries all 4 850 pairs `topic{a} item{b}`: as substrings most words
//! match 1–2 % of the memories, `topic1`..`topic4` 22 % and `item1`..`item9` 11 %),
//! `topics-common` (the same memories; only the 36 pairs of two common words, each asked from a
//! session of its own when repeated) or `topics-rare` (the same memories; each query one fact
//! number, matching one or a few). `SKILL_BENCH_OPTIMIZE` (any value) merges both full-text indexes into one segment
//! each after the prefill (FTS5 `optimize`; `levels`: merge until one segment per level is left;
//! `none`: only count the segments), to measure what merged segments are worth.
//! `SKILL_BENCH_SETTLE` waits that many seconds after the prefill (the store's idle merge).
//! `SKILL_BENCH_CONCURRENCY` replaces the callers per case (default `16,64`; `1,2` shows the
//! latency of a call that does not queue behind others on this 2-core machine).
//! At the end it prints the process's peak RSS (server, store and load generator together).
//! `SKILL_BENCH_LOG` (any value) installs the daemon's log subscriber: every call then writes
//! its JSON `skill_call` line, through the secret redactor, to standard error (send it to
//! `/dev/null`), as the daemon writes it to journald.
//!
//! `SKILL_BENCH_CLIENT=unix` sends the same three cases as raw HTTP/1.1 over Unix sockets, the
//! transport of sandboxed agents: each caller has a session of its own and one keep-alive
//! connection to that session's socket (the floor gets a Unix socket of its own), from tokio
//! tasks on the client runtime (`SKILL_BENCH_REQUESTS` per case).
//!
//! `SKILL_BENCH_CLIENT=wrk` sends the load with the `wrk` program (`apt-get install wrk`: C and
//! epoll, several times cheaper per call than the reqwest generator, so more of the two cores
//! is left to the server) instead, for `http-floor`, `fetch-context` and `memory-save`, each for
//! `SKILL_BENCH_WRK_SECONDS` (default 5) after a one-second warm-up. The bench writes wrk a Lua
//! script and a file of distinct requests (every key unique within the de-duplication window at
//! any rate wrk reaches); `wrk`'s CPU is read with `getrusage(RUSAGE_CHILDREN)` (**client**), and
//! a non-2xx answer or a socket error fails the run.

use air_friends::platform::Origin;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use air_friends::config::{LoggingConfig, MemoryConfig, RemindersConfig, SkillsConfig};
use air_friends::handlers::{Clock, HandlerDeps, build_registry};
use air_friends::observability::{LogTarget, Redactor, init_logging};
use air_friends::platform::fake::FakePlatform;
use air_friends::platform::{PlatformAdapter, PlatformKind, PlatformRegistry};
use air_friends::session::{RegisteredSession, SessionContext};
use air_friends::skill_api::call_log::CallLog;
use air_friends::skill_api::{
    ServingRuntime, SkillApiMetrics, SkillApiSettings, SkillApiState, serve,
};
use air_friends::skills::{LoadedSkills, load_skills};
use air_friends::store::{Importance, NewMemory, Scope, Store, Visibility, WorkspaceKey};
use prometheus_client::registry::Registry;
use serde_json::{Value, json};
use tokio::net::TcpListener;

#[path = "support/threads.rs"]
mod threads;
use threads::thread_cpu;

/// Memories in the benchmarked workspace before the first case.
/// Memories pre-filled when `SKILL_BENCH_MEMORIES` is not set.
const PREFILL: usize = 10_000;

/// What the pre-filled memories say and what is searched (`SKILL_BENCH_CORPUS`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Corpus {
    Words,
    Topics,
    TopicsCommon,
    TopicsRare,
}

impl Corpus {
    fn from_env() -> Self {
        match std::env::var("SKILL_BENCH_CORPUS").as_deref() {
            Ok("topics") => Self::Topics,
            Ok("topics-common") => Self::TopicsCommon,
            Ok("topics-rare") => Self::TopicsRare,
            Ok("words") | Err(_) => Self::Words,
            Ok(other) => panic!(
                "SKILL_BENCH_CORPUS={other}: use words, topics, topics-common or topics-rare"
            ),
        }
    }

    fn memory(self, rng: &mut Rng, i: usize) -> String {
        match self {
            Self::Words => sentence(rng, i),
            Self::Topics | Self::TopicsCommon | Self::TopicsRare => {
                format!(
                    "likes topic{} and item{}, remembered fact {i}",
                    i % 50,
                    i % 97
                )
            }
        }
    }

    /// Queries in a fixed shuffled order: at least `needed` distinct ones, except for
    /// `topics-common`, which has 36 (requests then repeat them from sessions of their own).
    fn queries(self, memories: usize, needed: usize) -> Vec<String> {
        let mut list: Vec<String> = match self {
            Self::Words => return queries(),
            Self::Topics => (0..50)
                .flat_map(|a| (0..97).map(move |b| format!("topic{a} item{b}")))
                .collect(),
            // Only the pairs whose both words are common: `topic1`..`topic4` match 22 % of the
            // memories as substrings (`topic3`, `topic30`..`topic39`), `item1`..`item9` 11 %.
            Self::TopicsCommon => (1..=4)
                .flat_map(|a| (1..=9).map(move |b| format!("topic{a} item{b}")))
                .collect(),
            Self::TopicsRare => {
                let mut rng = Rng(0xC0FF_EE00_D15E_A5E5);
                let span = memories.max(1) as u64;
                (0..needed.max(5_000))
                    .map(|_| format!("{}", rng.next() % span))
                    .collect()
            }
        };
        let mut rng = Rng(0x5DEE_CE66_D1CE_4E5B);
        for i in (1..list.len()).rev() {
            let j = (rng.next() % (i as u64 + 1)) as usize;
            list.swap(i, j);
        }
        list
    }
}
/// Concurrent callers per case, unless `SKILL_BENCH_CONCURRENCY` lists others (e.g. `1,2`).
const CONCURRENCY: [usize; 2] = [16, 64];

/// The concurrencies to run (`SKILL_BENCH_CONCURRENCY`, comma-separated, or [`CONCURRENCY`]).
fn concurrencies() -> Vec<usize> {
    match std::env::var("SKILL_BENCH_CONCURRENCY") {
        Ok(list) => list
            .split(',')
            .map(|c| match c.trim().parse::<usize>() {
                Ok(n) if n > 0 => n,
                _ => panic!("SKILL_BENCH_CONCURRENCY={list}: use positive integers, e.g. 1,16"),
            })
            .collect(),
        Err(_) => CONCURRENCY.to_vec(),
    }
}
/// Skills in the order they are measured (saves last: they grow the workspace).
/// `fetch-context` (`user_info`, answered from the fake platform) is the cheap path: the HTTP
/// stack and the pipeline with next to no handler work. `SKILL_BENCH_SKILLS` (comma-separated)
/// picks a subset.
const SKILLS: [&str; 5] = [
    FLOOR,
    "fetch-context",
    "memory-stats",
    "memory-search",
    "memory-save",
];
/// The floor under the cheap path: the same request (POST, bearer token, JSON body) to a server
/// built like the Skill API's (hyper's HTTP/1 connection with the same timer and header-read
/// timeout, an axum router, `TCP_NODELAY`) whose one route reads the body and answers a fixed
/// JSON object, with no authentication, pipeline or handler. What fetch-context costs above it
/// is everything of ours.
const FLOOR: &str = "http-floor";
/// The server runtime's threads (workers and blocking pool) carry this name, so their CPU time
/// can be told from the load generator's (`/proc/self/task/*/stat`). The Skill API's own
/// runtime's threads are named [`SERVING_THREADS`]; both count as the server.
const SERVER_THREADS: &str = "bench-server";
/// The threads of the Skill API's own runtime (`skill_api::runtime`).
const SERVING_THREADS: &str = air_friends::skill_api::runtime::THREAD_NAME;
/// The load generator's runtime threads: their CPU is the client's share of each call.
const CLIENT_THREADS: &str = "bench-client";
/// The store's writer thread (`store/db.rs`).
const WRITER_THREAD: &str = "store-writer";
/// The store's background checkpoint thread (`store/db.rs`).
const CHECKPOINT_THREAD: &str = "store-ckpt";
/// Unmeasured requests at the start of each case (connections, caches).
const WARMUP: usize = 100;
/// The benchmarked user (a DM, so searches and stats include private memories).
const USER: &str = "bench";

/// Content words of the synthetic memories; queries are pairs of them.
const WORDS: &[&str] = &[
    "coffee",
    "tea",
    "hiking",
    "mountain",
    "birthday",
    "sister",
    "brother",
    "cat",
    "dog",
    "guitar",
    "piano",
    "running",
    "tokyo",
    "paris",
    "berlin",
    "ramen",
    "sushi",
    "pizza",
    "book",
    "novel",
    "movie",
    "anime",
    "game",
    "nurse",
    "engineer",
    "teacher",
    "garden",
    "tomato",
    "summer",
    "winter",
    "holiday",
    "train",
    "bicycle",
    "swimming",
    "yoga",
    "painting",
    "camera",
    "photo",
    "music",
    "concert",
    "festival",
    "library",
    "exam",
    "university",
    "project",
    "deadline",
    "meeting",
    "weekend",
    "morning",
    "evening",
    "allergy",
    "peanut",
    "marathon",
    "chess",
    "violin",
    "kayak",
    "opera",
    "origami",
    "pottery",
    "sourdough",
    "dentist",
    "bakery",
    "museum",
    "podcast",
    "karaoke",
    "climbing",
    "tennis",
    "skiing",
    "jazz",
    "poetry",
    "surfing",
    "lantern",
];
/// Function words that make the sentences look like sentences.
const GLUE: &[&str] = &[
    "the", "a", "to", "and", "of", "in", "on", "with", "likes", "loves", "every", "user",
];
/// CJK phrases for the 30 % of memories that are Chinese/Japanese.
const CJK: &[&str] = &[
    "喜欢",
    "每天",
    "咖啡",
    "周末",
    "爬山",
    "猫カフェ",
    "週末",
    "ラーメン",
    "誕生日",
    "温泉",
    "旅行",
    "花粉症",
    "将棋",
    "友達",
];

/// Deterministic xorshift generator (the same data on every run).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn pick<'a>(&mut self, words: &[&'a str]) -> &'a str {
        words[(self.next() % words.len() as u64) as usize]
    }
}

/// The `i`-th synthetic memory: 70 % English (content words mixed with function words), 30 %
/// CJK; the index keeps every text distinct.
fn sentence(rng: &mut Rng, i: usize) -> String {
    if i % 10 < 7 {
        let n = 6 + (rng.next() % 8) as usize;
        let words: Vec<&str> = (0..n)
            .map(|k| {
                if k % 2 == 0 {
                    rng.pick(GLUE)
                } else {
                    rng.pick(WORDS)
                }
            })
            .collect();
        format!("{} (memory {i})", words.join(" "))
    } else {
        let n = 3 + (rng.next() % 5) as usize;
        let phrases: String = (0..n).map(|_| rng.pick(CJK)).collect();
        format!("{phrases}。{i}")
    }
}

/// Every unordered pair of content words, shuffled: distinct search queries.
fn queries() -> Vec<String> {
    let mut pairs = Vec::new();
    for (a, first) in WORDS.iter().enumerate() {
        for second in &WORDS[a + 1..] {
            pairs.push(format!("{first} {second}"));
        }
    }
    let mut rng = Rng(0x5DEE_CE66_D1CE_4E5B);
    for i in (1..pairs.len()).rev() {
        let j = (rng.next() % (i as u64 + 1)) as usize;
        pairs.swap(i, j);
    }
    pairs
}

/// The repository's skills with `rate_limit` removed from every manifest.
fn unlimited_skills(scratch: &Path) -> LoadedSkills {
    let dir = scratch.join("skills");
    copy_tree(&Path::new(env!("CARGO_MANIFEST_DIR")).join("skills"), &dir);
    for entry in std::fs::read_dir(&dir).expect("read skills") {
        let manifest = entry.expect("entry").path().join("manifest.json");
        let text = std::fs::read_to_string(&manifest).expect("manifest");
        let mut value: Value = serde_json::from_str(&text).expect("manifest json");
        value
            .as_object_mut()
            .expect("manifest object")
            .remove("rate_limit");
        std::fs::write(&manifest, value.to_string()).expect("write manifest");
    }
    load_skills(&dir).expect("load skills")
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("read_dir") {
        let entry = entry.expect("entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("file type").is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy");
        }
    }
}

/// A registered DM session of the benchmarked user.
fn dm_session(state: &SkillApiState, workspace: &Path) -> RegisteredSession {
    state
        .sessions()
        .register(SessionContext {
            place: Default::default(),
            origin: Origin {
                platform: PlatformKind::Discord,
                channel_id: format!("dm:{USER}").into(),
                guild_id: None,
                user_id: USER.into(),
                username: USER.into(),
                is_dm: true,
            },
            purpose: Default::default(),
            trigger_message_id: None,
            workspace: workspace.to_owned(),
        })
        .expect("register session")
}

/// Saves `count` memories into the benchmarked workspace through the `Store` API (64 concurrent
/// callers, so the writer batches them). Every 5th is private, every 20th high importance.
async fn prefill(store: &Store, corpus: Corpus, count: usize) {
    let callers = 64;
    let mut tasks = tokio::task::JoinSet::new();
    for c in 0..callers {
        let store = store.clone();
        tasks.spawn(async move {
            let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (c as u64 + 1));
            let workspace = WorkspaceKey::new("discord", USER).expect("workspace");
            for i in (c..count).step_by(callers) {
                store
                    .save_memory(NewMemory {
                        workspace: workspace.clone(),
                        content: corpus.memory(&mut rng, i),
                        visibility: if i % 5 == 0 {
                            Visibility::Private
                        } else {
                            Visibility::Public
                        },
                        importance: if i % 20 == 0 {
                            Importance::High
                        } else {
                            Importance::Normal
                        },
                    })
                    .await
                    .expect("prefill save");
            }
        });
    }
    tasks.join_all().await;
}

/// One request of a case: which session calls, with which parameters.
struct Request {
    session_id: String,
    token: String,
    parameters: Value,
}

/// Builds the `total` requests of one case so that no two share a de-duplication key.
fn requests(
    state: &SkillApiState,
    workspace: &Path,
    skill: &str,
    case: usize,
    total: usize,
    concurrency: usize,
    queries: &[String],
) -> Vec<Request> {
    let callers: Vec<RegisteredSession> = (0..concurrency)
        .map(|_| dm_session(state, workspace))
        .collect();
    // Too few distinct queries (`topics-common`): a query comes back from another session.
    let repeats = skill == "memory-search" && total > queries.len();
    (0..total)
        .map(|i| {
            let own;
            let session = if repeats || matches!(skill, "memory-stats" | "fetch-context" | FLOOR) {
                // Nothing (left) to vary: a session per request keeps the key unique.
                own = dm_session(state, workspace);
                &own
            } else {
                &callers[i % concurrency]
            };
            let parameters = match skill {
                "memory-save" => json!({
                    "content": format!("load test memory {i} of case {case}: likes kayak and jazz"),
                    "importance": if i % 20 == 0 { "high" } else { "normal" },
                }),
                "memory-search" => json!({"query": queries[i % queries.len()], "limit": 10}),
                "fetch-context" | FLOOR => json!({"type": "user_info"}),
                _ => json!({}),
            };
            Request {
                session_id: session.session_id.as_str().to_owned(),
                token: session.caller_token.expose_secret().to_owned(),
                parameters,
            }
        })
        .collect()
}

/// Sends `requests` from `concurrency` tasks (each takes the next request when its previous one
/// answered); returns the wall time and every request's latency. Panics on any non-200.
async fn drive(
    client: &reqwest::Client,
    url: &str,
    requests: Vec<Request>,
    concurrency: usize,
) -> (Duration, Vec<Duration>) {
    let requests = Arc::new(requests);
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..concurrency {
        let (client, url) = (client.clone(), url.to_owned());
        let (requests, next) = (requests.clone(), next.clone());
        tasks.spawn(async move {
            let mut latencies = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(request) = requests.get(i) else {
                    break;
                };
                let sent = Instant::now();
                let response = client
                    .post(&url)
                    .bearer_auth(&request.token)
                    .json(&json!({
                        "sessionId": request.session_id,
                        "parameters": request.parameters,
                    }))
                    .send()
                    .await
                    .expect("request");
                let status = response.status();
                let body = response.bytes().await.expect("body");
                latencies.push(sent.elapsed());
                assert_eq!(status, 200, "{url}: {}", String::from_utf8_lossy(&body));
            }
            latencies
        });
    }
    let latencies = tasks.join_all().await.into_iter().flatten().collect();
    (started.elapsed(), latencies)
}

fn percentile(sorted: &[Duration], q: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * q).round() as usize]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// The 1-minute load average, when the OS tells.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "n/a".into())
}

/// The process's peak resident set (`VmHWM` of `/proc/self/status`): an upper bound of what the
/// daemon's side needed, since the load generator shares the process.
fn peak_rss() -> String {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:").map(|v| v.trim().to_owned()))
        })
        .unwrap_or_else(|| "n/a".into())
}

/// CPU of the server threads, the store writer, its checkpointer and the load generator,
/// sampled around a case.
#[derive(Clone, Copy)]
struct Cpu {
    server: Duration,
    writer: Duration,
    checkpoint: Duration,
    client: Duration,
}

impl Cpu {
    fn now() -> Self {
        Self {
            server: thread_cpu(SERVER_THREADS) + thread_cpu(SERVING_THREADS),
            writer: thread_cpu(WRITER_THREAD),
            checkpoint: thread_cpu(CHECKPOINT_THREAD),
            client: thread_cpu(CLIENT_THREADS),
        }
    }

    fn since(self, start: Cpu) -> Cpu {
        Cpu {
            server: self.server.saturating_sub(start.server),
            writer: self.writer.saturating_sub(start.writer),
            checkpoint: self.checkpoint.saturating_sub(start.checkpoint),
            client: self.client.saturating_sub(start.client),
        }
    }
}

/// One row of the result table.
struct Row {
    /// The skill, or `store <method>` for the reference rows without HTTP.
    what: String,
    concurrency: usize,
    requests: usize,
    rate: f64,
    p50: Duration,
    p99: Duration,
    max: Duration,
    load: String,
    /// Server-thread, writer, checkpoint-thread and load-generator CPU per request, µs
    /// (`None` for the store-only rows).
    cpu_us: Option<(f64, f64, f64, f64)>,
}

impl Row {
    fn new(
        what: String,
        concurrency: usize,
        wall: Duration,
        mut latencies: Vec<Duration>,
        cpu: Option<Cpu>,
    ) -> Self {
        latencies.sort();
        let (p50, p99) = (percentile(&latencies, 0.5), percentile(&latencies, 0.99));
        let max = latencies[latencies.len() - 1];
        Self::summary(
            what,
            concurrency,
            latencies.len(),
            wall,
            [p50, p99, max],
            cpu,
        )
    }

    /// A row from counts and percentiles already known (`[p50, p99, max]`; wrk's report).
    fn summary(
        what: String,
        concurrency: usize,
        requests: usize,
        wall: Duration,
        [p50, p99, max]: [Duration; 3],
        cpu: Option<Cpu>,
    ) -> Self {
        let per_call = |d: Duration| d.as_secs_f64() * 1e6 / requests as f64;
        let cpu_us = cpu.map(|c| {
            (
                per_call(c.server),
                per_call(c.writer),
                per_call(c.checkpoint),
                per_call(c.client),
            )
        });
        let row = Self {
            what,
            concurrency,
            requests,
            rate: requests as f64 / wall.as_secs_f64(),
            p50,
            p99,
            max,
            load: load_average(),
            cpu_us,
        };
        println!(
            "RESULT {:<28} c={:<3} n={:<5} {:>8.0} req/s  p50={:>7.2} ms  p99={:>7.2} ms  \
             max={:>7.2} ms  cpu/call {}  load={}",
            row.what,
            row.concurrency,
            row.requests,
            row.rate,
            ms(row.p50),
            ms(row.p99),
            ms(row.max),
            row.cpu_text(),
            row.load
        );
        row
    }

    fn cpu_text(&self) -> String {
        match self.cpu_us {
            Some((server, writer, checkpoint, client)) => format!(
                "server {server:.1} µs, writer {writer:.1} µs, checkpoint {checkpoint:.1} µs, \
                 client {client:.1} µs"
            ),
            None => "-".to_owned(),
        }
    }
}

/// The reference without HTTP: the same searches (or stats) straight on the `Store` from
/// `concurrency` tasks, to tell the store's share of a call from the Skill API's.
async fn drive_store(
    store: &Store,
    skill: &str,
    queries: Arc<Vec<String>>,
    range: std::ops::Range<usize>,
    concurrency: usize,
) -> (Duration, Vec<Duration>) {
    let workspace = WorkspaceKey::new("discord", USER).expect("workspace");
    let next = Arc::new(AtomicUsize::new(range.start));
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..concurrency {
        let (store, workspace, skill) = (store.clone(), workspace.clone(), skill.to_owned());
        let (queries, next, end) = (queries.clone(), next.clone(), range.end);
        tasks.spawn(async move {
            let mut latencies = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= end {
                    break;
                }
                let sent = Instant::now();
                if skill == "memory-search" {
                    store
                        .search_memories(
                            &workspace,
                            &queries[i % queries.len()],
                            Scope::IncludePrivate,
                            10,
                        )
                        .await
                        .expect("search");
                } else {
                    store
                        .memory_stats(&workspace, Scope::IncludePrivate)
                        .await
                        .expect("stats");
                }
                latencies.push(sent.elapsed());
            }
            latencies
        });
    }
    let latencies = tasks.join_all().await.into_iter().flatten().collect();
    (started.elapsed(), latencies)
}

/// The load generator (`SKILL_BENCH_CLIENT`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Generator {
    /// Tokio tasks sharing one keep-alive `reqwest` client, in this process ([`drive`]).
    Reqwest,
    /// The `wrk` program ([`drive_wrk`]).
    Wrk,
    /// Raw HTTP/1.1 over the sessions' own Unix sockets, as sandboxed agents reach the daemon
    /// ([`drive_unix`]).
    Unix,
}

impl Generator {
    fn from_env() -> Self {
        match std::env::var("SKILL_BENCH_CLIENT").as_deref() {
            Ok("wrk") => Self::Wrk,
            Ok("unix") => Self::Unix,
            Ok("reqwest") | Err(_) => Self::Reqwest,
            Ok(other) => panic!("SKILL_BENCH_CLIENT={other}: use reqwest, wrk or unix"),
        }
    }
}

/// The cases `wrk` and the Unix-socket generator drive: the cheap calls (the slow ones stay
/// with the closed loop of reqwest callers).
const CHEAP_CASES: [&str; 3] = [FLOOR, "fetch-context", "memory-save"];
/// Distinct requests in one wrk case. wrk cycles through them; at the ~100 000 calls/s it could
/// reach here that is over two seconds before a key comes back, twice the de-duplication window.
const WRK_REQUESTS: usize = 250_000;

/// The Lua script `wrk` runs: reads the request file named by its argument (one request a line:
/// path, bearer token and JSON body separated by tabs) into ready-made HTTP/1.1 requests, then
/// sends them in order, round and round. No `response` callback: wrk counts non-2xx answers
/// itself, and a callback would cost Lua work per response.
const WRK_SCRIPT: &str = r#"
local requests = {}
local next_request = 0
init = function(args)
  for line in io.lines(args[1]) do
    local path, token, body = line:match("^([^\t]*)\t([^\t]*)\t(.*)$")
    requests[#requests + 1] = "POST " .. path .. " HTTP/1.1\r\nHost: 127.0.0.1\r\n"
      .. "Authorization: Bearer " .. token .. "\r\nContent-Type: application/json\r\n"
      .. "Content-Length: " .. #body .. "\r\n\r\n" .. body
  end
  if #requests == 0 then error("no requests in " .. args[1]) end
end
request = function()
  next_request = next_request % #requests + 1
  return requests[next_request]
end
"#;

/// Writes `count` distinct requests of `skill` for wrk into `file` (see [`WRK_SCRIPT`]), from
/// `callers` sessions (as many live sessions as callers, as in a daemon: each is a live secret
/// of the log redactor). fetch-context (and the floor, which gets the same bodies) varies its
/// `query` (ignored by `user_info`, but part of the de-duplication key); memory-save its
/// content.
fn write_wrk_requests(
    file: &Path,
    state: &SkillApiState,
    workspace: &Path,
    skill: &str,
    case: usize,
    count: usize,
    callers: usize,
) {
    use std::io::Write as _;
    let sessions: Vec<RegisteredSession> =
        (0..callers).map(|_| dm_session(state, workspace)).collect();
    let mut out = std::io::BufWriter::new(std::fs::File::create(file).expect("wrk requests"));
    for i in 0..count {
        let session = &sessions[i % callers];
        let parameters = if skill == "memory-save" {
            json!({
                "content": format!("load test memory {i} of case {case}: likes kayak and jazz"),
                "importance": if i % 20 == 0 { "high" } else { "normal" },
            })
        } else {
            json!({"type": "user_info", "query": format!("q{i}")})
        };
        let body = json!({"sessionId": session.session_id.as_str(), "parameters": parameters});
        writeln!(
            out,
            "/api/skill/{skill}\t{}\t{body}",
            session.caller_token.expose_secret()
        )
        .expect("write wrk request");
    }
    out.flush().expect("flush wrk requests");
}

/// What one wrk run reported.
struct WrkRun {
    requests: usize,
    wall: Duration,
    p50: Duration,
    p99: Duration,
    max: Duration,
    /// wrk's own CPU (user + system), from `getrusage(RUSAGE_CHILDREN)` around the run.
    cpu: Duration,
}

/// CPU (user + system) of this process's waited-for children so far.
fn children_cpu() -> Duration {
    use nix::sys::resource::{UsageWho, getrusage};
    let usage = getrusage(UsageWho::RUSAGE_CHILDREN).expect("getrusage");
    let time =
        |t: nix::sys::time::TimeVal| Duration::new(t.tv_sec() as u64, t.tv_usec() as u32 * 1_000);
    time(usage.user_time()) + time(usage.system_time())
}

/// A wrk duration (`205.00us`, `1.23ms`, `2.00s`, `1.00m`).
fn wrk_duration(text: &str) -> Duration {
    let split = text
        .find(|c: char| c.is_ascii_alphabetic())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let value: f64 = number
        .parse()
        .unwrap_or_else(|_| panic!("wrk duration {text:?}"));
    let seconds = match unit {
        "us" => value / 1e6,
        "ms" => value / 1e3,
        "s" => value,
        "m" => value * 60.0,
        _ => panic!("wrk duration {text:?}"),
    };
    Duration::from_secs_f64(seconds)
}

/// Runs `wrk` with `concurrency` connections (one thread) for `seconds` against `url` with the
/// requests in `requests`; panics when wrk fails, saw a non-2xx answer or a socket error.
fn drive_wrk(
    script: &Path,
    requests: &Path,
    url: &str,
    concurrency: usize,
    seconds: u64,
) -> WrkRun {
    let before = children_cpu();
    let output = std::process::Command::new("wrk")
        .args(["-t1", &format!("-c{concurrency}"), &format!("-d{seconds}s")])
        .args(["--latency", "-s"])
        .arg(script)
        .arg(url)
        .arg("--")
        .arg(requests)
        .output()
        .expect("run wrk (apt-get install wrk)");
    let cpu = children_cpu().saturating_sub(before);
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "wrk failed: {text}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        !text.contains("Non-2xx") && !text.contains("Socket errors"),
        "wrk saw failures against {url}:\n{text}"
    );
    let mut run = WrkRun {
        requests: 0,
        wall: Duration::ZERO,
        p50: Duration::ZERO,
        p99: Duration::ZERO,
        max: Duration::ZERO,
        cpu,
    };
    for line in text.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        match fields.as_slice() {
            ["Latency", _avg, _stdev, max, ..] => run.max = wrk_duration(max),
            ["50%", p50] => run.p50 = wrk_duration(p50),
            ["99%", p99] => run.p99 = wrk_duration(p99),
            [count, "requests", "in", wall, ..] => {
                run.requests = count.parse().expect("wrk request count");
                run.wall = wrk_duration(wall.trim_end_matches(','));
            }
            _ => {}
        }
    }
    assert!(run.requests > 0, "wrk reported no requests:\n{text}");
    run
}

/// One caller of [`drive_unix`]: where it connects and what it sends.
#[derive(Clone)]
struct UnixCaller {
    socket: std::path::PathBuf,
    session_id: String,
    token: String,
}

/// The `i`-th request of `caller` number `c` for `skill`, as raw HTTP/1.1 bytes. fetch-context
/// (and the floor) vary `query`, which `user_info` ignores but which makes the de-duplication
/// key; memory-save its content.
fn unix_request(skill: &str, case: usize, c: usize, i: usize, caller: &UnixCaller) -> Vec<u8> {
    let parameters = if skill == "memory-save" {
        json!({
            "content": format!("load test memory {i} of case {case} caller {c}: likes kayak and jazz"),
            "importance": if i.is_multiple_of(20) { "high" } else { "normal" },
        })
    } else {
        json!({"type": "user_info", "query": format!("q{case}-{c}-{i}")})
    };
    let body = json!({"sessionId": caller.session_id, "parameters": parameters}).to_string();
    format!(
        "POST /api/skill/{skill} HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        caller.token,
        body.len()
    )
    .into_bytes()
}

/// Reads one response from `stream` into `buffer` (which may already hold bytes of it) and
/// returns its status code; what follows it stays in `buffer`.
async fn read_response(stream: &mut tokio::net::UnixStream, buffer: &mut Vec<u8>) -> u16 {
    use tokio::io::AsyncReadExt;
    loop {
        if let Some(end) = memchr::memmem::find(buffer, b"\r\n\r\n") {
            let head = std::str::from_utf8(&buffer[..end]).expect("response head");
            let status: u16 = head
                .get(9..12)
                .and_then(|s| s.parse().ok())
                .unwrap_or_else(|| panic!("status line: {head}"));
            let length: usize = head
                .lines()
                .find_map(|l| {
                    let (name, value) = l.split_once(':')?;
                    name.eq_ignore_ascii_case("content-length")
                        .then(|| value.trim().parse().ok())?
                })
                .unwrap_or_else(|| panic!("no content-length: {head}"));
            while buffer.len() < end + 4 + length {
                let mut chunk = [0u8; 4096];
                let n = stream.read(&mut chunk).await.expect("read body");
                assert!(n > 0, "connection closed mid-body");
                buffer.extend_from_slice(&chunk[..n]);
            }
            buffer.drain(..end + 4 + length);
            return status;
        }
        let mut chunk = [0u8; 4096];
        let n = stream.read(&mut chunk).await.expect("read head");
        assert!(n > 0, "connection closed before a response");
        buffer.extend_from_slice(&chunk[..n]);
    }
}

/// Sends `total` requests of `skill` from one keep-alive connection per caller, each caller on
/// its own Unix socket (a session's, or the floor's), taking its next request when its previous
/// one answered; returns the wall time and every latency. Panics on any non-200.
async fn drive_unix(
    skill: &str,
    case: usize,
    callers: Vec<UnixCaller>,
    total: usize,
) -> (Duration, Vec<Duration>) {
    use tokio::io::AsyncWriteExt;
    let count = callers.len();
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for (c, caller) in callers.into_iter().enumerate() {
        let skill = skill.to_owned();
        let share = total / count + usize::from(c < total % count);
        tasks.spawn(async move {
            let mut stream = tokio::net::UnixStream::connect(&caller.socket)
                .await
                .expect("connect to the socket");
            let mut buffer = Vec::with_capacity(8192);
            let mut latencies = Vec::with_capacity(share);
            for i in 0..share {
                let request = unix_request(&skill, case, c, i, &caller);
                let sent = Instant::now();
                stream.write_all(&request).await.expect("send");
                let status = read_response(&mut stream, &mut buffer).await;
                latencies.push(sent.elapsed());
                assert_eq!(status, 200, "{skill} over {}", caller.socket.display());
            }
            latencies
        });
    }
    let latencies = tasks.join_all().await.into_iter().flatten().collect();
    (started.elapsed(), latencies)
}

/// Serves [`FLOOR`] on a Unix socket, as [`serve_floor`] does on TCP.
async fn serve_floor_unix(listener: tokio::net::UnixListener) {
    while let Ok((stream, _)) = listener.accept().await {
        tokio::spawn(serve_floor_connection(stream));
    }
}

/// Serves [`FLOOR`]'s connections until the runtime stops.
async fn serve_floor(listener: TcpListener) {
    while let Ok((stream, _)) = listener.accept().await {
        stream.set_nodelay(true).expect("nodelay");
        tokio::spawn(serve_floor_connection(stream));
    }
}

/// One connection of the floor server: hyper's HTTP/1 with the Skill API's timer and
/// header-read timeout, an axum router whose one route reads the body and answers fixed JSON.
async fn serve_floor_connection<S>(stream: S)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    use axum::routing::post;
    use hyper_util::rt::{TokioIo, TokioTimer};
    use hyper_util::service::TowerToHyperService;

    let app = axum::Router::new().route(
        &format!("/api/skill/{FLOOR}"),
        post(|body: axum::body::Bytes| async move {
            std::hint::black_box(body);
            (
                [(axum::http::header::CONTENT_TYPE, "application/json")],
                r#"{"ok":true,"result":{"user":{"id":"bench"}}}"#,
            )
        }),
    );
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(SkillApiSettings::default().header_read_timeout);
    let _ = builder
        .serve_connection(TokioIo::new(stream), TowerToHyperService::new(app))
        .await;
}

fn main() {
    let total: usize = std::env::var("SKILL_BENCH_REQUESTS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2_000);
    let server_rt = tokio::runtime::Builder::new_multi_thread()
        .thread_name(SERVER_THREADS)
        .enable_all()
        .build()
        .expect("server runtime");
    let skills: Vec<&str> = match std::env::var("SKILL_BENCH_SKILLS") {
        Ok(list) => SKILLS
            .iter()
            .copied()
            .filter(|s| list.split(',').any(|l| l.trim() == *s))
            .collect(),
        Err(_) => SKILLS.to_vec(),
    };
    let memories: usize = std::env::var("SKILL_BENCH_MEMORIES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(PREFILL);
    let corpus = Corpus::from_env();
    let generator = Generator::from_env();
    let wrk_seconds: u64 = std::env::var("SKILL_BENCH_WRK_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    let client_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name(CLIENT_THREADS)
        .enable_all()
        .build()
        .expect("client runtime");

    let scratch = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("scratch dir");
    let workspace = scratch.path().join("workspaces").join("discord").join(USER);
    std::fs::create_dir_all(&workspace).expect("workspace dir");
    let loaded = unlimited_skills(scratch.path());

    // As in the daemon: every session's caller token is a live secret of the log redactor,
    // besides the configured secrets (here two made-up platform tokens). SKILL_BENCH_LOG (any
    // value) also installs the daemon's log subscriber (JSON lines at `info` through that
    // redactor) writing to standard error, so each call pays for its `skill_call` line; run
    // with `2>/dev/null` (or a file) to keep the lines out of the results.
    let redactor = Redactor::new([
        "bench-discord-token-0123456789".to_owned(),
        "bench-misskey-token-0123456789".to_owned(),
    ]);
    let _logging = std::env::var("SKILL_BENCH_LOG").is_ok().then(|| {
        init_logging(
            &LoggingConfig::default(),
            None,
            redactor.clone(),
            LogTarget::Stderr,
        )
        .expect("log subscriber")
    });
    let (state, store) = server_rt.block_on(async {
        let store = Store::open(&scratch.path().join("bench.db"))
            .await
            .expect("store");
        let started = Instant::now();
        prefill(&store, corpus, memories).await;
        if let Some(secs) = std::env::var("SKILL_BENCH_SETTLE")
            .ok()
            .and_then(|s| s.parse().ok())
        {
            // Time for the store's idle work (merging the full-text segments) before measuring.
            tokio::time::sleep(std::time::Duration::from_secs(secs)).await;
        }
        if std::env::var("SKILL_BENCH_OPTIMIZE").is_ok() {
            let t = Instant::now();
            let db = rusqlite::Connection::open(scratch.path().join("bench.db")).expect("db");
            db.busy_timeout(std::time::Duration::from_secs(30))
                .expect("busy");
            let mode = std::env::var("SKILL_BENCH_OPTIMIZE").unwrap_or_default();
            let levels = mode == "levels";
            for table in ["memories_fts", "memories_grams"] {
                if levels {
                    let usermerge =
                        format!("INSERT INTO {table}({table}, rank) VALUES('usermerge', 2)");
                    db.execute(&usermerge, []).expect("usermerge");
                    let merge = format!("INSERT INTO {table}({table}, rank) VALUES('merge', 256)");
                    loop {
                        let before = db.total_changes();
                        db.execute(&merge, []).expect("merge");
                        if db.total_changes() - before < 2 {
                            break;
                        }
                    }
                } else if mode != "none" {
                    let optimize = format!("INSERT INTO {table}({table}) VALUES('optimize')");
                    db.execute(&optimize, []).expect("optimize");
                }
                let count = format!("SELECT count(DISTINCT segid) FROM {table}_idx");
                let segments: i64 = db.query_row(&count, [], |r| r.get(0)).expect("segments");
                println!("{table}: {segments} segments");
            }
            println!("optimize: {:.1} s", t.elapsed().as_secs_f64());
        }
        println!(
            "prefill: {memories} {corpus:?} memories in {:.1} s through Store::save_memory",
            started.elapsed().as_secs_f64()
        );
        let fake = FakePlatform::discord();
        fake.add_user(USER, USER, USER);
        let discord: Arc<dyn PlatformAdapter> = Arc::new(fake);
        let deps = HandlerDeps {
            store: store.clone(),
            platforms: PlatformRegistry::new().with(discord),
            skills_config: SkillsConfig::default(),
            reminders_config: RemindersConfig::default(),
            memory_config: MemoryConfig::default(),
            clock: Clock::system(),
            semantic: None,
            speaker: None,
        };
        let registry = build_registry(deps, &loaded).expect("registry");
        let state = SkillApiState::with_live_tokens(
            SkillApiSettings {
                socket_dir: scratch.path().join("run"),
                ..SkillApiSettings::default()
            },
            registry,
            // As in the daemon: every skill's series resolved at start, and the hourly counts
            // `air-friends stats` reports.
            SkillApiMetrics::new(&mut Registry::default())
                .with_skills(loaded.names())
                .with_call_log(CallLog::new()),
            redactor.live_secrets(),
        );
        (state, store)
    });
    // As the daemon does: connections and calls on the Skill API's own one-thread runtime
    // (`skill_api::runtime`), unless SKILL_BENCH_RUNTIME=shared serves them on the bench's
    // two-worker runtime, as before that runtime existed. The floor is served the same way.
    let serving = ServingRuntime::start().expect("serving runtime");
    let shared = std::env::var("SKILL_BENCH_RUNTIME").is_ok_and(|v| v == "shared");
    let floor_rt = if shared {
        server_rt.handle().clone()
    } else {
        serving.handle()
    };
    let state = if shared {
        state
    } else {
        state.serve_on(serving.handle())
    };
    println!(
        "server runtime: {}",
        if shared {
            "shared (the bench's two workers)"
        } else {
            "the Skill API's own (one thread)"
        }
    );

    let listener = server_rt
        .block_on(TcpListener::bind("127.0.0.1:0"))
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = server_rt.spawn(serve(listener, state.clone(), async move {
        let _ = stop_rx.await;
    }));

    let floor = floor_rt
        .block_on(TcpListener::bind("127.0.0.1:0"))
        .expect("bind the floor");
    let floor_addr = floor.local_addr().expect("floor addr");
    floor_rt.spawn(serve_floor(floor));
    let floor_socket = scratch.path().join("floor.sock");
    let floor_unix = {
        let _serving = floor_rt.enter();
        tokio::net::UnixListener::bind(&floor_socket).expect("bind the floor's socket")
    };
    floor_rt.spawn(serve_floor_unix(floor_unix));

    let client = reqwest::Client::new();
    let queries = Arc::new(corpus.queries(memories, total + WARMUP));
    let started = Instant::now();
    println!(
        "skill api bench: {total} requests per case (+{WARMUP} warm-up), load average {}",
        load_average()
    );
    let mut rows = Vec::new();
    let levels = concurrencies();
    for (case, (skill, concurrency)) in skills
        .iter()
        .flat_map(|s| levels.iter().map(move |c| (*s, *c)))
        .enumerate()
    {
        let url = if skill == FLOOR {
            format!("http://{floor_addr}/api/skill/{skill}")
        } else {
            format!("http://{addr}/api/skill/{skill}")
        };
        if generator == Generator::Unix {
            if !CHEAP_CASES.contains(&skill) {
                println!(
                    "{skill}: not a unix case (SKILL_BENCH_CLIENT=unix drives {CHEAP_CASES:?})"
                );
                continue;
            }
            // One session, its socket and one connection per caller, as a sandboxed agent has.
            let sessions: Vec<RegisteredSession> = (0..concurrency)
                .map(|_| dm_session(&state, &workspace))
                .collect();
            let mut sockets = Vec::new();
            let mut callers = Vec::new();
            for session in &sessions {
                let socket = if skill == FLOOR {
                    None
                } else {
                    Some(
                        server_rt
                            .block_on(state.open_session_socket(&session.session_id))
                            .expect("session socket"),
                    )
                };
                callers.push(UnixCaller {
                    socket: socket
                        .as_ref()
                        .map_or_else(|| floor_socket.clone(), |s| s.socket_path().to_owned()),
                    session_id: session.session_id.as_str().to_owned(),
                    token: session.caller_token.expose_secret().to_owned(),
                });
                sockets.extend(socket);
            }
            // The warm-up's requests are its own (another case number in every key).
            client_rt.block_on(drive_unix(skill, case + 1_000, callers.clone(), WARMUP));
            let before = Cpu::now();
            let (wall, latencies) = client_rt.block_on(drive_unix(skill, case, callers, total));
            std::thread::sleep(Duration::from_millis(50));
            let cpu = Cpu::now().since(before);
            rows.push(Row::new(
                format!("{skill} (unix)"),
                concurrency,
                wall,
                latencies,
                Some(cpu),
            ));
            for socket in sockets {
                server_rt.block_on(socket.close());
            }
            continue;
        }
        if generator == Generator::Wrk {
            if !CHEAP_CASES.contains(&skill) {
                println!("{skill}: not a wrk case (SKILL_BENCH_CLIENT=wrk drives {CHEAP_CASES:?})");
                continue;
            }
            let base = url.split("/api/").next().expect("url").to_owned();
            let script = scratch.path().join("wrk.lua");
            std::fs::write(&script, WRK_SCRIPT).expect("wrk script");
            // The warm-up sends its own requests (other sessions, other contents), so none of
            // the measured ones can be answered from its de-duplication entries.
            let warmup = scratch.path().join(format!("wrk-warmup-{case}.txt"));
            write_wrk_requests(
                &warmup,
                &state,
                &workspace,
                skill,
                case + 1_000,
                20_000,
                concurrency,
            );
            let measured = scratch.path().join(format!("wrk-{case}.txt"));
            write_wrk_requests(
                &measured,
                &state,
                &workspace,
                skill,
                case,
                WRK_REQUESTS,
                concurrency,
            );
            drive_wrk(&script, &warmup, &base, concurrency, 1);
            let before = Cpu::now();
            let run = drive_wrk(&script, &measured, &base, concurrency, wrk_seconds);
            std::thread::sleep(Duration::from_millis(50));
            let mut cpu = Cpu::now().since(before);
            cpu.client = run.cpu;
            rows.push(Row::summary(
                format!("{skill} (wrk)"),
                concurrency,
                run.requests,
                run.wall,
                [run.p50, run.p99, run.max],
                Some(cpu),
            ));
            continue;
        }
        let mut batch = requests(
            &state,
            &workspace,
            skill,
            case,
            WARMUP + total,
            concurrency,
            &queries,
        );
        let measured = batch.split_off(WARMUP);
        client_rt.block_on(drive(&client, &url, batch, concurrency));
        let before = Cpu::now();
        let (wall, latencies) = client_rt.block_on(drive(&client, &url, measured, concurrency));
        // The writer may still be committing the last batch's use records: let it settle.
        std::thread::sleep(Duration::from_millis(50));
        let cpu = Cpu::now().since(before);
        rows.push(Row::new(
            skill.to_owned(),
            concurrency,
            wall,
            latencies,
            Some(cpu),
        ));
        if matches!(skill, "memory-search" | "memory-stats") {
            // Same work without HTTP, the pipeline or the handler.
            let (wall, latencies) = server_rt.block_on(drive_store(
                &store,
                skill,
                queries.clone(),
                WARMUP..WARMUP + total,
                concurrency,
            ));
            let method = if skill == "memory-search" {
                "search_memories"
            } else {
                "memory_stats"
            };
            rows.push(Row::new(
                format!("(store only: {method})"),
                concurrency,
                wall,
                latencies,
                None,
            ));
        }
    }

    let stats = server_rt
        .block_on(store.memory_stats(
            &WorkspaceKey::new("discord", USER).expect("workspace"),
            Scope::IncludePrivate,
        ))
        .expect("stats");
    println!(
        "workspace after the run: {} memories; measured part took {:.1} s",
        stats.summary.total,
        started.elapsed().as_secs_f64()
    );
    println!();
    println!(
        "| call | concurrency | requests | req/s | p50 ms | p99 ms | max ms | server CPU µs/call | writer CPU µs/call | checkpoint CPU µs/call | client CPU µs/call | load (1 min) |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    for r in &rows {
        let (server, writer, checkpoint, client) = match r.cpu_us {
            Some((s, w, c, l)) => (
                format!("{s:.1}"),
                format!("{w:.1}"),
                format!("{c:.1}"),
                format!("{l:.1}"),
            ),
            None => ("-".into(), "-".into(), "-".into(), "-".into()),
        };
        println!(
            "| {} | {} | {} | {:.0} | {:.2} | {:.2} | {:.2} | {server} | {writer} | {checkpoint} | {client} | {} |",
            r.what,
            r.concurrency,
            r.requests,
            r.rate,
            ms(r.p50),
            ms(r.p99),
            ms(r.max),
            r.load
        );
    }

    println!();
    println!(
        "peak RSS of this process (server, store, load generator): {}",
        peak_rss()
    );
    let _ = stop_tx.send(());
    server_rt
        .block_on(server)
        .expect("server task")
        .expect("serve");
}
