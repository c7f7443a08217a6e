//! memory-search with meaning-based recall at scale: 100 000 memories in one workspace, each
//! with a 384-dimension vector, searched through `embeddings::Semantic` (the query embedded by
//! a loopback fake endpoint, an exact scan of the workspace's vectors held in memory, the hits
//! loaded and fused with the full-text ranking) against the full-text search alone, in the
//! same run, interleaved. Also: the first search's load of the workspace's vectors, and save
//! latency with the background embedding job working at the same time against without it.
//!
//! Run: `cargo bench --bench memory_search` (`MEMSEARCH_BENCH_MEMORIES`, default 100 000;
//! `MEMSEARCH_BENCH_ROUNDS`, default 200). Results are in `docs/PERFORMANCE.md`
//! ("Meaning-based recall"), earlier runs in `docs/performance/semantic-recall.md`.

use std::time::{Duration, Instant};

use air_friends::embeddings::{EmbeddingClient, Semantic};
use air_friends::store::{Importance, NewMemory, Scope, Store, Visibility, WorkspaceKey};
use axum::Json;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

const DIMS: usize = 384;

/// A deterministic unit vector for `seed`.
fn vector(seed: u64) -> Vec<f32> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut v: Vec<f32> = (0..DIMS)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % 2001) as f32 / 1000.0 - 1.0
        })
        .collect();
    let n = v.iter().map(|a| a * a).sum::<f32>().sqrt();
    v.iter_mut().for_each(|a| *a /= n);
    v
}

fn hash(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

/// User + system CPU of this process (10 ms ticks).
fn cpu() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    Duration::from_millis((f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()) * 10)
}

fn pct(v: &mut [Duration], p: f64) -> Duration {
    v.sort();
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

async fn fake_endpoint() -> String {
    let app = axum::Router::new().route(
        "/v1/embeddings",
        axum::routing::post(|Json(body): Json<Value>| async move {
            let inputs: Vec<String> = body["input"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|v| v.as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default();
            let data: Vec<Value> = inputs
                .iter()
                .enumerate()
                .map(|(i, t)| json!({"index": i, "embedding": vector(hash(t))}))
                .collect();
            Json(json!({"data": data}))
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    url
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let env = |k: &str, d: usize| {
        std::env::var(k)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(d)
    };
    let memories = env("MEMSEARCH_BENCH_MEMORIES", 100_000);
    let rounds = env("MEMSEARCH_BENCH_ROUNDS", 200);
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("bench.db")).await.unwrap();
    store.set_embedding_queue(true).await.unwrap();
    let ws = WorkspaceKey::new("discord", "bench").unwrap();
    let t = Instant::now();
    for chunk in (0..memories).collect::<Vec<_>>().chunks(256) {
        let saves = chunk.iter().map(|i| {
            store.save_memory(NewMemory {
                workspace: ws.clone(),
                content: format!(
                    "likes topic{} and item{}, remembered fact {i}",
                    i % 50,
                    i % 97
                ),
                visibility: Visibility::Public,
                importance: Importance::Normal,
            })
        });
        for r in futures_util::future::join_all(saves).await {
            r.unwrap();
        }
    }
    println!(
        "saved {memories} memories in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    let t = Instant::now();
    loop {
        let pending = store.embedding_queue(2_000).await.unwrap();
        if pending.is_empty() {
            break;
        }
        let rows = pending
            .iter()
            .map(|p| (p.seq, vector(hash(&p.content))))
            .collect();
        store.put_vectors("bench-384", rows).await.unwrap();
    }
    println!(
        "stored {memories} vectors of {DIMS} in {:.1} s",
        t.elapsed().as_secs_f64()
    );

    let url = fake_endpoint().await;
    let client =
        EmbeddingClient::new(&url, None, "bench-384", DIMS, Duration::from_secs(5)).unwrap();
    let semantic = Semantic::new(client, store.clone(), 64);
    let queries = [
        "topic3 item5",
        "remembered fact 31337",
        "what does she like to drink?",
    ];

    let t = Instant::now();
    let hits = store
        .search_memories(&ws, queries[0], Scope::PublicOnly, 10)
        .await
        .unwrap();
    let (_, mode) = semantic
        .search(&ws, queries[0], Scope::PublicOnly, 10, hits)
        .await;
    assert_eq!(mode.as_str(), "hybrid");
    println!(
        "first hybrid search (loads the workspace's {memories} vectors): {:.0} ms",
        ms(t.elapsed())
    );

    let mut fts = Vec::new();
    let mut hybrid = Vec::new();
    let (mut fts_cpu, mut hybrid_cpu) = (Duration::ZERO, Duration::ZERO);
    for r in 0..rounds {
        let q = queries[r % queries.len()];
        let (c0, t0) = (cpu(), Instant::now());
        let hits = store
            .search_memories(&ws, q, Scope::PublicOnly, 10)
            .await
            .unwrap();
        fts.push(t0.elapsed());
        fts_cpu += cpu() - c0;
        let (c0, t0) = (cpu(), Instant::now());
        let hits2 = store
            .search_memories(&ws, q, Scope::PublicOnly, 10)
            .await
            .unwrap();
        let (found, mode) = semantic.search(&ws, q, Scope::PublicOnly, 10, hits2).await;
        hybrid.push(t0.elapsed());
        hybrid_cpu += cpu() - c0;
        assert_eq!(mode.as_str(), "hybrid");
        assert!(!found.is_empty() && found.len() <= 10 && hits.len() <= 10);
    }
    println!(
        "| search ({memories} memories, 1 workspace, {DIMS} dims) | p50 | p99 | CPU per call |"
    );
    println!("|---|---|---|---|");
    for (name, v, c) in [
        ("full text only", &mut fts, fts_cpu),
        (
            "hybrid (full text + vectors, fused)",
            &mut hybrid,
            hybrid_cpu,
        ),
    ] {
        let (p50, p99) = (pct(v, 0.5), pct(v, 0.99));
        println!(
            "| {name} | {:.2} ms | {:.2} ms | {:.2} ms |",
            ms(p50),
            ms(p99),
            ms(c / rounds as u32)
        );
    }

    // Saves with the background job embedding them meanwhile, against without it.
    let mut quiet = Vec::new();
    for i in 0..500 {
        let t0 = Instant::now();
        store
            .save_memory(NewMemory {
                workspace: ws.clone(),
                content: format!("quiet save {i}"),
                visibility: Visibility::Public,
                importance: Importance::Normal,
            })
            .await
            .unwrap();
        quiet.push(t0.elapsed());
    }
    // Those 500 are queued; the job embeds them (and the next ones) while saves go on.
    let stop = CancellationToken::new();
    let job = tokio::spawn(semantic.clone().run(stop.clone()));
    let mut busy = Vec::new();
    for i in 0..500 {
        semantic.wake();
        let t0 = Instant::now();
        store
            .save_memory(NewMemory {
                workspace: ws.clone(),
                content: format!("busy save {i}"),
                visibility: Visibility::Public,
                importance: Importance::Normal,
            })
            .await
            .unwrap();
        busy.push(t0.elapsed());
    }
    stop.cancel();
    job.await.unwrap();
    println!("| save, 1 caller | p50 | p99 |");
    println!("|---|---|---|");
    for (name, v) in [
        ("embedding job idle", &mut quiet),
        ("embedding job working", &mut busy),
    ] {
        println!(
            "| {name} | {:.3} ms | {:.3} ms |",
            ms(pct(v, 0.5)),
            ms(pct(v, 0.99))
        );
    }
    println!("rounds: {rounds} per search kind, interleaved");
    store.close().await.unwrap();
}
