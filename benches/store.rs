//! Store benchmark: save throughput (concurrent callers, batched by the writer), search latency
//! (Latin and CJK, p50/p99) and stats latency, at 100 000 memories in one workspace and
//! 1 000 000 memories across 1 000 workspaces.
//!
//! Run: `cargo bench --bench store`. `STORE_BENCH_SCALE=0.1` shrinks both datasets (default 1).
//! The databases live under Cargo's target tmp dir (a real disk, so fsyncs count) and are
//! rebuilt on every run. Results are recorded in `docs/PERFORMANCE.md` ("Store"), earlier runs
//! in `docs/performance/store.md`.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use air_friends::store::{Importance, NewMemory, Scope, Store, Visibility, WorkspaceKey};
use criterion::{Criterion, criterion_group, criterion_main};
use tokio::runtime::Runtime;

/// Function words first (most frequent), then content words: picked with a Zipf-like skew.
const LATIN: &[&str] = &[
    "the",
    "a",
    "to",
    "and",
    "of",
    "in",
    "on",
    "with",
    "for",
    "is",
    "was",
    "likes",
    "every",
    "user",
    "loves",
    "wants",
    "never",
    "always",
    "works",
    "lives",
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
    "favourite",
    "hates",
    "visited",
    "moved",
    "studies",
    "plays",
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
];
const CJK: &[&str] = &[
    "的",
    "我",
    "是",
    "了",
    "喜欢",
    "每天",
    "咖啡",
    "喝茶",
    "周末",
    "爬山",
    "猫",
    "狗",
    "讨厌",
    "工作",
    "学校",
    "东京",
    "生日",
    "妹妹",
    "音乐",
    "电影",
    "猫カフェ",
    "週末",
    "山に登る",
    "ラーメン",
    "寿司",
    "映画",
    "好き",
    "嫌い",
    "仕事",
    "大学",
    "友達",
    "誕生日",
    "毎朝",
    "散歩",
    "日本語",
    "勉強",
    "旅行",
    "温泉",
    "花粉症",
    "将棋",
];

/// Deterministic xorshift generator (stable content across runs).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    /// Log-uniform pick: P(index k) ~ 1/(k+1), roughly Zipf.
    fn pick<'a>(&mut self, words: &[&'a str]) -> &'a str {
        let u = (self.next() % 1_000_000) as f64 / 1_000_000.0;
        let k = ((words.len() as f64 + 1.0).powf(u) - 1.0) as usize;
        words[k.min(words.len() - 1)]
    }
}

fn sentence(rng: &mut Rng, i: u64) -> String {
    if i % 10 < 7 {
        let n = 6 + (rng.next() % 10) as usize;
        let mut s: Vec<&str> = (0..n).map(|_| rng.pick(LATIN)).collect();
        s.push("note");
        format!("{} {i}", s.join(" "))
    } else {
        let n = 4 + (rng.next() % 6) as usize;
        let s: String = (0..n).map(|_| rng.pick(CJK)).collect::<Vec<_>>().join("");
        format!("{s}。{i}")
    }
}

fn scale() -> f64 {
    std::env::var("STORE_BENCH_SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1.0)
}

fn db_path(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("store-bench");
    std::fs::create_dir_all(&dir).unwrap();
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(dir.join(format!("{name}{suffix}")));
    }
    dir.join(name)
}

/// Saves `total` memories spread over `workspaces` from `callers` concurrent tasks; returns the
/// sustained rate (saves/s).
async fn fill(store: &Store, total: u64, workspaces: u64, callers: u64) -> f64 {
    let start = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..callers {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (c + 1));
            let mut i = c;
            while i < total {
                let ws = WorkspaceKey::new("discord", &format!("u{}", i % workspaces)).unwrap();
                let importance = if i % 20 == 0 {
                    Importance::High
                } else {
                    Importance::Normal
                };
                let visibility = if i % 5 == 0 {
                    Visibility::Private
                } else {
                    Visibility::Public
                };
                store
                    .save_memory(NewMemory {
                        workspace: ws,
                        content: sentence(&mut rng, i),
                        visibility,
                        importance,
                    })
                    .await
                    .unwrap();
                i += callers;
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    total as f64 / start.elapsed().as_secs_f64()
}

fn percentiles(mut samples: Vec<Duration>) -> (Duration, Duration, Duration) {
    samples.sort();
    let at = |q: f64| samples[((samples.len() as f64 - 1.0) * q).round() as usize];
    (at(0.5), at(0.99), samples[samples.len() - 1])
}

fn report(label: &str, samples: Vec<Duration>) {
    let n = samples.len();
    let (p50, p99, max) = percentiles(samples);
    println!(
        "RESULT {label:<48} n={n:<5} p50={:>8.3} ms  p99={:>8.3} ms  max={:>8.3} ms",
        p50.as_secs_f64() * 1e3,
        p99.as_secs_f64() * 1e3,
        max.as_secs_f64() * 1e3
    );
}

const LATIN_QUERIES: &[&str] = &[
    "marathon",
    "peanut allergy",
    "favourite ramen",
    "chess",
    "tokyo concert",
    "sourdough",
    "kayak violin",
    "birthday",
];
const CJK_QUERIES: &[&str] = &[
    "咖啡",
    "猫カフェ",
    "誕生日",
    "山に登る",
    "旅行",
    "花粉症",
    "温泉 将棋",
];
/// Worst cases, reported separately: a function word that is in most memories, and a query
/// mixing a short CJK keyword with a long one (scores of both indexes summed over all matches).
const STOPWORD_QUERIES: &[&str] = &["the", "likes coffee", "喜欢 爬山", "猫 猫カフェ"];

async fn latencies(store: &Store, ws: &WorkspaceKey, label: &str, rounds: usize) {
    for (kind, queries) in [
        ("latin", LATIN_QUERIES),
        ("cjk", CJK_QUERIES),
        ("worst-case", STOPWORD_QUERIES),
    ] {
        let mut samples = Vec::new();
        let mut per_query: Vec<(String, Vec<Duration>)> = Vec::new();
        for q in queries.iter() {
            let mut mine = Vec::new();
            for _ in 0..rounds {
                let t = Instant::now();
                let hits = store
                    .search_memories(ws, q, Scope::IncludePrivate, 10)
                    .await
                    .unwrap();
                mine.push(t.elapsed());
                std::hint::black_box(hits);
            }
            samples.extend(mine.iter().copied());
            per_query.push((q.to_string(), mine));
        }
        report(&format!("{label} search {kind} (all queries)"), samples);
        for (q, s) in per_query {
            report(&format!("{label}   {kind} {q:?}"), s);
        }
    }
    let mut stats = Vec::new();
    for _ in 0..rounds {
        let t = Instant::now();
        std::hint::black_box(store.memory_stats(ws, Scope::IncludePrivate).await.unwrap());
        stats.push(t.elapsed());
    }
    report(&format!("{label} stats"), stats);
    // The prompt's candidates at the default budget (2 000 tokens: 266 candidates), best first.
    let mut prompt = Vec::new();
    for _ in 0..rounds.min(50) {
        let t = Instant::now();
        std::hint::black_box(
            store
                .prompt_memories(ws, Scope::IncludePrivate, 266)
                .await
                .unwrap(),
        );
        prompt.push(t.elapsed());
    }
    report(&format!("{label} prompt_memories"), prompt);
}

fn bench(c: &mut Criterion) {
    let rt = Runtime::new().unwrap();
    let scale = scale();
    let single = (100_000.0 * scale) as u64;
    let multi = (1_000_000.0 * scale) as u64;
    println!(
        "RESULT scale={scale} single={single} multi={multi} cpus={}",
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0)
    );

    // Save throughput: one caller (every save its own commit) vs. 64 concurrent callers.
    let store = rt.block_on(Store::open(&db_path("throughput.db"))).unwrap();
    let rate1 = rt.block_on(fill(&store, 2_000, 1, 1));
    println!("RESULT save throughput, 1 caller (no batching):    {rate1:>9.0} saves/s");
    drop(store);

    // 100k memories in one workspace.
    let store = rt.block_on(Store::open(&db_path("single.db"))).unwrap();
    let rate = rt.block_on(fill(&store, single, 1, 64));
    println!(
        "RESULT save throughput, 64 callers, {single} memories in 1 workspace: {rate:>9.0} saves/s"
    );
    let ws = WorkspaceKey::new("discord", "u0").unwrap();
    rt.block_on(latencies(&store, &ws, &format!("{single}/1ws"), 200));
    let mut group = c.benchmark_group(format!("store_{single}_in_1_workspace"));
    group
        .sample_size(50)
        .measurement_time(Duration::from_secs(5));
    group.bench_function("search_latin", |b| {
        b.iter(|| {
            rt.block_on(store.search_memories(&ws, "peanut allergy", Scope::IncludePrivate, 10))
                .unwrap()
        })
    });
    group.bench_function("search_cjk", |b| {
        b.iter(|| {
            rt.block_on(store.search_memories(&ws, "猫カフェ", Scope::IncludePrivate, 10))
                .unwrap()
        })
    });
    group.bench_function("stats", |b| {
        b.iter(|| {
            rt.block_on(store.memory_stats(&ws, Scope::IncludePrivate))
                .unwrap()
        })
    });
    group.finish();
    rt.block_on(store.close()).unwrap();

    // 1M memories across 1000 workspaces.
    let store = rt.block_on(Store::open(&db_path("multi.db"))).unwrap();
    let rate = rt.block_on(fill(&store, multi, 1000, 64));
    println!(
        "RESULT save throughput, 64 callers, {multi} memories in 1000 workspaces: {rate:>9.0} saves/s"
    );
    let ws = WorkspaceKey::new("discord", "u7").unwrap();
    rt.block_on(latencies(&store, &ws, &format!("{multi}/1000ws"), 200));
    let mut group = c.benchmark_group(format!("store_{multi}_in_1000_workspaces"));
    group
        .sample_size(50)
        .measurement_time(Duration::from_secs(5));
    group.bench_function("search_latin", |b| {
        b.iter(|| {
            rt.block_on(store.search_memories(&ws, "peanut allergy", Scope::IncludePrivate, 10))
                .unwrap()
        })
    });
    group.bench_function("search_cjk", |b| {
        b.iter(|| {
            rt.block_on(store.search_memories(&ws, "猫カフェ", Scope::IncludePrivate, 10))
                .unwrap()
        })
    });
    group.bench_function("stats", |b| {
        b.iter(|| {
            rt.block_on(store.memory_stats(&ws, Scope::IncludePrivate))
                .unwrap()
        })
    });
    group.finish();
    rt.block_on(store.close()).unwrap();
}

criterion_group!(benches, bench);
criterion_main!(benches);
