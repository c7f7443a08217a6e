//! Erasing a user (`Store::erase_user`, what `air-friends forget-user` runs) in a store of many
//! memories: how long it takes, what it costs in CPU, and how long it holds up other users'
//! saves (the store has one writer), against the same saves with no erasure, measured in the
//! same run. Also the upgrade to schema v11 (the short-keyword index rebuilt from the memories).
//!
//! Run: `cargo bench --bench erasure`. `ERASURE_BENCH_MEMORIES` (100 000, over 100 users, so
//! each erased user holds 1 %), `ERASURE_BENCH_ROUNDS` (3). Figures in `docs/PERFORMANCE.md`
//! ("Erasure").

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use air_friends::store::erasure::RequestedBy;
use air_friends::store::{Importance, NewMemory, Store, Visibility, WorkspaceKey};

const USERS: usize = 100;

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

fn db_path() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("erasure");
    std::fs::create_dir_all(&dir).unwrap();
    for suffix in ["", "-wal", "-shm", ".lock"] {
        let _ = std::fs::remove_file(dir.join(format!("erasure.db{suffix}")));
    }
    dir.join("erasure.db")
}

fn user(n: usize) -> WorkspaceKey {
    WorkspaceKey::new("discord", &format!("u{n}")).unwrap()
}

/// CPU seconds (user + system) this process has used.
fn cpu() -> f64 {
    let usage = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_SELF).unwrap();
    let secs = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 + t.tv_usec() as f64 / 1e6;
    secs(usage.user_time()) + secs(usage.system_time())
}

async fn fill(store: &Store, memories: usize) {
    let per = memories / USERS;
    let mut tasks = Vec::new();
    for u in 0..USERS {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..per {
                store
                    .save_memory(NewMemory {
                        workspace: user(u),
                        content: format!(
                            "user {u} memory {i}: 我喜欢喝咖啡 and goes to the park on day {i} with a friend"
                        ),
                        visibility: if i % 3 == 0 {
                            Visibility::Private
                        } else {
                            Visibility::Public
                        },
                        importance: Importance::Normal,
                    })
                    .await
                    .unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
}

/// Saves of user 0 in a closed loop until `stop`; answers the slowest and the median latency.
async fn saving(store: Store, stop: Arc<AtomicBool>) -> (Duration, Duration) {
    let mut latencies = Vec::new();
    let mut i = 0;
    while !stop.load(Ordering::Relaxed) {
        let t = Instant::now();
        store
            .save_memory(NewMemory {
                workspace: user(0),
                content: format!("a save during the erasure {i}"),
                visibility: Visibility::Public,
                importance: Importance::Normal,
            })
            .await
            .unwrap();
        latencies.push(t.elapsed());
        i += 1;
    }
    latencies.sort();
    let max = latencies.last().copied().unwrap_or_default();
    let p50 = latencies
        .get(latencies.len() / 2)
        .copied()
        .unwrap_or_default();
    (max, p50)
}

/// Runs `work` while user 0 saves; answers (work's time, the process's CPU meanwhile, slowest
/// save, median save).
async fn with_saves<F: std::future::Future<Output = ()>>(
    store: &Store,
    work: F,
) -> (Duration, f64, Duration, Duration) {
    let stop = Arc::new(AtomicBool::new(false));
    let saver = tokio::spawn(saving(store.clone(), stop.clone()));
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (t, c) = (Instant::now(), cpu());
    work.await;
    let (took, cpu_used) = (t.elapsed(), cpu() - c);
    tokio::time::sleep(Duration::from_millis(200)).await;
    stop.store(true, Ordering::Relaxed);
    let (max, p50) = saver.await.unwrap();
    (took, cpu_used, max, p50)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let memories = env_or("ERASURE_BENCH_MEMORIES", 100_000);
    let rounds = env_or("ERASURE_BENCH_ROUNDS", 3).max(1);
    let path = db_path();
    let store = Store::open(&path).await.unwrap();
    fill(&store, memories).await;
    store.close().await.unwrap();

    // The upgrade: back to v10 (without v11's tables), then open.
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute_batch(
        "DROP TABLE erasing; DROP TABLE privacy_log; DROP TABLE privacy_key;
         PRAGMA user_version = 10;",
    )
    .unwrap();
    drop(conn);
    let t = Instant::now();
    let store = Store::open(&path).await.unwrap();
    let upgrade = t.elapsed();
    println!(
        "store of {memories} memories ({} MB): upgrade to v11 {:.0} ms",
        std::fs::metadata(&path).unwrap().len() / 1_000_000,
        upgrade.as_secs_f64() * 1e3
    );

    let (mut erase, mut erase_cpu, mut stall, mut erase_p50) = (vec![], vec![], vec![], vec![]);
    let (mut base_stall, mut base_p50) = (vec![], vec![]);
    for round in 0..rounds {
        // Alone: its time and CPU.
        let (t, c) = (Instant::now(), cpu());
        store
            .erase_user(&user(1 + round), RequestedBy::Operator)
            .await
            .unwrap();
        let took = t.elapsed();
        erase.push(took.as_secs_f64() * 1e3);
        erase_cpu.push((cpu() - c) * 1e3);
        // The baseline: user 0's saves for as long, with no erasure.
        let (_, _, max, p50) = with_saves(&store, tokio::time::sleep(took)).await;
        base_stall.push(max.as_secs_f64() * 1e3);
        base_p50.push(p50.as_secs_f64() * 1e3);
        // The same saves during the erasure of another user of the same size.
        let (_, _, max, p50) = with_saves(&store, async {
            store
                .erase_user(&user(50 + round), RequestedBy::Operator)
                .await
                .unwrap();
        })
        .await;
        stall.push(max.as_secs_f64() * 1e3);
        erase_p50.push(p50.as_secs_f64() * 1e3);
    }
    println!(
        "erase one user ({} memories), median of {}: {:.0} ms, {:.0} ms CPU",
        memories / USERS,
        erase.len(),
        median(erase),
        median(erase_cpu)
    );
    println!(
        "another user's saves meanwhile: slowest {:.0} ms (p50 {:.2} ms); without an erasure: slowest {:.1} ms (p50 {:.2} ms)",
        median(stall),
        median(erase_p50),
        median(base_stall),
        median(base_p50)
    );
    store.close().await.unwrap();
}
