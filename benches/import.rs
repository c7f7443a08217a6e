//! `import jsonl` at scale: one workspace of 100 000 memories, and (with `IMPORT_BENCH_BIG=1`)
//! 1 000 000 memories across 1 000 workspaces, each read (`dry_run`) and imported into a fresh
//! store, then the store closed; wall time and the process's CPU.
//!
//! Run: `cargo bench --bench import`. Results: `docs/PERFORMANCE.md` ("Import").

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use air_friends::store::Store;
use air_friends::store::import::{dry_run, import_tree};
use nix::sys::resource::{UsageWho, getrusage};
use tokio::runtime::Runtime;

fn cpu() -> Duration {
    let usage = getrusage(UsageWho::RUSAGE_SELF).expect("getrusage");
    let tv = |t: nix::sys::time::TimeVal| {
        Duration::from_secs(t.tv_sec() as u64) + Duration::from_micros(t.tv_usec() as u64)
    };
    tv(usage.user_time()) + tv(usage.system_time())
}

/// Writes `workspaces` workspaces of `per` memories each under `dir`.
fn tree(dir: &Path, workspaces: usize, per: usize) {
    for w in 0..workspaces {
        let ws = dir.join(format!("workspaces/discord/{}", 100_000 + w));
        std::fs::create_dir_all(&ws).unwrap();
        let mut text = String::with_capacity(per * 180);
        for i in 0..per {
            text.push_str(&format!(
                r#"{{"id":"mem_{w:04}_{i:07}","ts":"2025-01-01T10:00:00.000Z","type":"memory","enabled":true,"visibility":"public","importance":"normal","content":"generated note {i}: likes green tea and long walks in the hills"}}"#
            ));
            text.push('\n');
        }
        std::fs::write(ws.join("memory.public.jsonl"), text).unwrap();
    }
}

fn fresh(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("import-bench")
        .join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn run(rt: &Runtime, label: &str, workspaces: usize, per: usize) {
    let dir = fresh(label);
    tree(&dir.join("export"), workspaces, per);
    let (t, c) = (Instant::now(), cpu());
    let read = rt.block_on(dry_run(&dir.join("export"))).unwrap();
    let (read_wall, read_cpu) = (t.elapsed(), cpu() - c);
    assert_eq!(read.memories.imported, workspaces * per);
    let (t, c) = (Instant::now(), cpu());
    let report = rt.block_on(async {
        let store = Store::open(&dir.join("air-friends.db")).await.unwrap();
        let report = import_tree(&store, &dir.join("export")).await.unwrap();
        store.close().await.unwrap();
        report
    });
    let (wall, used) = (t.elapsed(), cpu() - c);
    assert_eq!(report.memories.imported, workspaces * per);
    println!(
        "RESULT {label}: read {:.2} s ({:.2} s CPU), import and close {:.2} s ({:.2} s CPU), {:.0} memories/s",
        read_wall.as_secs_f64(),
        read_cpu.as_secs_f64(),
        wall.as_secs_f64(),
        used.as_secs_f64(),
        (workspaces * per) as f64 / wall.as_secs_f64()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

fn main() {
    let rt = Runtime::new().unwrap();
    run(&rt, "100k in 1 workspace", 1, 100_000);
    if std::env::var("IMPORT_BENCH_BIG").is_ok_and(|v| v == "1") {
        run(&rt, "1M across 1000 workspaces", 1000, 1000);
    }
}
