//! Save stalls: callers in a closed loop (each saves again as soon as its last save is
//! acknowledged) for a fixed time against one store on disk, every save's latency recorded.
//! Reports p50/p99/p99.9/max, how many saves took longer than 5 ms, and for each of those when
//! it happened and how many saves had been acknowledged by then, so a stall that comes every so
//! many saves (an index merge, a checkpoint) shows as a period. Also the store writer's and
//! checkpointer's CPU per save (their threads' `/proc` times): the writer is the serial part of
//! every save, so one second over its CPU per save is the most saves per second the store can
//! take (one workspace and 64 callers give it its largest batches).
//!
//! Run: `cargo bench --bench save_stalls`. `SAVE_STALLS_SECONDS` (60), `SAVE_STALLS_CALLERS`
//! (16), `SAVE_STALLS_WORKSPACES` (16). Figures in `docs/PERFORMANCE.md` ("Save stalls").

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use air_friends::store::{Importance, NewMemory, Store, Visibility, WorkspaceKey};

#[path = "support/threads.rs"]
mod threads;
use threads::thread_cpu;

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

fn db_path() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("save-stalls");
    std::fs::create_dir_all(&dir).unwrap();
    for suffix in ["", "-wal", "-shm", ".lock"] {
        let _ = std::fs::remove_file(dir.join(format!("stalls.db{suffix}")));
    }
    dir.join("stalls.db")
}

/// A memory of twelve words: three function words (in most memories, as in real text: their
/// index entries are the longest to merge) and nine from a 5 000-word vocabulary picked with a
/// Zipf-like skew, then a unique number.
fn sentence(caller: u64, i: u64) -> String {
    const COMMON: &[&str] = &["the", "user", "likes", "and", "a", "with", "in", "to"];
    let mut x = (caller + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (i + 1);
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut words: Vec<String> = (0..3)
        .map(|_| COMMON[(next() % COMMON.len() as u64) as usize].to_owned())
        .collect();
    for _ in 0..9 {
        // Log-uniform rank in 1..=5000: P(k) ~ 1/k.
        let u = (next() % 1_000_000) as f64 / 1_000_000.0;
        let rank = 5001f64.powf(u) as u64;
        words.push(format!("w{rank}"));
    }
    format!("{} note {caller}-{i}", words.join(" "))
}

/// One save slower than the threshold: when (ms into the run), how long, and how many saves
/// had been acknowledged when it began.
struct Slow {
    at_ms: u64,
    took: Duration,
    acknowledged: u64,
}

fn main() {
    let seconds = env_or("SAVE_STALLS_SECONDS", 60);
    let callers = env_or("SAVE_STALLS_CALLERS", 16);
    let workspaces = env_or("SAVE_STALLS_WORKSPACES", 16);
    let threshold = Duration::from_millis(5);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async move {
        let store = Store::open(&db_path()).await.unwrap();
        let acknowledged = Arc::new(AtomicU64::new(0));
        let cpu_before = [thread_cpu("store-writer"), thread_cpu("store-ckpt")];
        let start = Instant::now();
        let end = start + Duration::from_secs(seconds);
        let mut tasks = Vec::new();
        for c in 0..callers {
            let store = store.clone();
            let acknowledged = acknowledged.clone();
            tasks.push(tokio::spawn(async move {
                let ws = WorkspaceKey::new("discord", &format!("u{}", c % workspaces)).unwrap();
                let (mut samples, mut slow) = (Vec::new(), Vec::new());
                let mut i = 0;
                while Instant::now() < end {
                    let before = acknowledged.load(Ordering::Relaxed);
                    let t = Instant::now();
                    store
                        .save_memory(NewMemory {
                            workspace: ws.clone(),
                            content: sentence(c, i),
                            visibility: Visibility::Public,
                            importance: Importance::Normal,
                        })
                        .await
                        .unwrap();
                    let took = t.elapsed();
                    acknowledged.fetch_add(1, Ordering::Relaxed);
                    if took > threshold {
                        slow.push(Slow {
                            at_ms: (t - start).as_millis() as u64,
                            took,
                            acknowledged: before,
                        });
                    }
                    samples.push(took);
                    i += 1;
                }
                (samples, slow)
            }));
        }
        let (mut samples, mut slow) = (Vec::new(), Vec::new());
        for t in tasks {
            let (s, w) = t.await.unwrap();
            samples.extend(s);
            slow.extend(w);
        }
        let elapsed = start.elapsed().as_secs_f64();
        // The store's threads' CPU per acknowledged save (the writer is the serial part).
        let per_save = |now: Duration, before: Duration| {
            (now - before).as_secs_f64() * 1e6 / samples.len() as f64
        };
        let writer_us = per_save(thread_cpu("store-writer"), cpu_before[0]);
        let ckpt_us = per_save(thread_cpu("store-ckpt"), cpu_before[1]);
        store.close().await.unwrap();
        samples.sort();
        let at = |q: f64| samples[((samples.len() as f64 - 1.0) * q).round() as usize];
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        println!(
            "RESULT saves c={callers} ws={workspaces} {seconds} s: n={} {:.0}/s p50={:.3} ms p99={:.3} ms p99.9={:.3} ms max={:.3} ms, {} over {} ms; writer {writer_us:.1} us/save, checkpointer {ckpt_us:.1} us/save",
            samples.len(),
            samples.len() as f64 / elapsed,
            ms(at(0.5)),
            ms(at(0.99)),
            ms(at(0.999)),
            ms(samples[samples.len() - 1]),
            slow.len(),
            threshold.as_millis()
        );
        // One line per stall (saves of one stall overlap: grouped by start within 10 ms).
        slow.sort_by_key(|s| s.at_ms);
        let mut groups: Vec<(u64, Duration, u64, usize)> = Vec::new();
        for s in &slow {
            match groups.last_mut() {
                Some(g) if s.at_ms <= g.0 + 10 => {
                    g.1 = g.1.max(s.took);
                    g.3 += 1;
                }
                _ => groups.push((s.at_ms, s.took, s.acknowledged, 1)),
            }
        }
        for (at_ms, took, acknowledged, saves) in groups {
            println!(
                "STALL at {at_ms:>6} ms after {acknowledged:>8} saves: {:.1} ms ({saves} saves)",
                ms(took)
            );
        }
    });
}
