//! What the inbox and the catch-up cost each message, against a memory save measured in the
//! same run (the baseline: one write through the same batching writer).
//!
//! Per message the daemon writes: the inbox record when the router admits it, the early
//! `answered` mark at its first reply, and the settle at the turn's end; a catch-up cursor is
//! saved every 30 s (one upsert per moved feed). Each is timed from 1 caller (every write its
//! own commit) and from 64 concurrent callers (batched), with the process's CPU per call
//! (`getrusage`: the writer thread included).
//!
//! Run: `cargo bench --bench inbox` (`INBOX_BENCH_N`: messages per measurement, default 4000).
//! Results are recorded in `docs/PERFORMANCE.md` ("Inbox and catch-up").

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use air_friends::store::Importance;
use air_friends::store::{
    CatchUpCursor, InboxRecord, InboxState, NewMemory, Store, Visibility, WorkspaceKey,
};
use chrono::Utc;
use nix::sys::resource::{UsageWho, getrusage};
use tokio::runtime::Runtime;

/// One measurement: calls per second and CPU per call.
struct Measured {
    rate: f64,
    cpu_per_call: Duration,
}

/// The process's CPU time so far (user + system, every thread).
fn cpu() -> Duration {
    let usage = getrusage(UsageWho::RUSAGE_SELF).expect("getrusage");
    let tv = |t: nix::sys::time::TimeVal| {
        Duration::from_secs(t.tv_sec() as u64) + Duration::from_micros(t.tv_usec() as u64)
    };
    tv(usage.user_time()) + tv(usage.system_time())
}

/// Runs `op(i)` for `i` in `0..n` from `callers` concurrent tasks.
async fn measure<F, Fut>(n: u64, callers: u64, op: F) -> Measured
where
    F: Fn(u64) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let op = Arc::new(op);
    let (start, cpu_start) = (Instant::now(), cpu());
    let mut tasks = Vec::new();
    for c in 0..callers {
        let op = op.clone();
        tasks.push(tokio::spawn(async move {
            let mut i = c;
            while i < n {
                op(i).await;
                i += callers;
            }
        }));
    }
    for task in tasks {
        task.await.expect("task");
    }
    let (elapsed, used) = (start.elapsed(), cpu() - cpu_start);
    Measured {
        rate: n as f64 / elapsed.as_secs_f64(),
        cpu_per_call: used / n as u32,
    }
}

fn db_path(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("inbox-bench");
    std::fs::create_dir_all(&dir).expect("bench dir");
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(dir.join(format!("{name}{suffix}")));
    }
    dir.join(name)
}

fn record(i: u64, prefix: &str) -> InboxRecord {
    InboxRecord {
        platform: "discord".into(),
        message_id: format!("{prefix}{i}"),
        channel_id: format!("c{}", i % 50),
        user_id: format!("u{}", i % 200),
        received_at: Utc::now(),
        payload: format!(
            r#"{{"platform":"discord","channelId":"c{}","messageId":"{prefix}{i}","content":"hello there, how are you today? this is message {i}"}}"#,
            i % 50
        ),
    }
}

fn report(label: &str, m: &Measured, baseline: &Measured) {
    println!(
        "RESULT {label:<44} {:>8.0} /s  cpu/call {:>7.1} µs  ({:.2}× the memory save's CPU)",
        m.rate,
        m.cpu_per_call.as_secs_f64() * 1e6,
        m.cpu_per_call.as_secs_f64() / baseline.cpu_per_call.as_secs_f64()
    );
}

fn main() {
    let n: u64 = std::env::var("INBOX_BENCH_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4000);
    let rt = Runtime::new().expect("runtime");
    let store = rt
        .block_on(Store::open(&db_path("inbox.db")))
        .expect("store");
    for callers in [1u64, 64] {
        let s = store.clone();
        let save = rt.block_on(measure(n, callers, move |i| {
            let s = s.clone();
            async move {
                let ws = WorkspaceKey::new("discord", &format!("u{}", i % 200)).unwrap();
                s.save_memory(NewMemory {
                    workspace: ws,
                    content: format!("likes green tea and long walks, note {i}"),
                    visibility: Visibility::Public,
                    importance: Importance::Normal,
                })
                .await
                .unwrap();
            }
        }));
        let prefix = format!("m{callers}-");
        let s = store.clone();
        let p = prefix.clone();
        let recorded = rt.block_on(measure(n, callers, move |i| {
            let (s, p) = (s.clone(), p.clone());
            async move {
                assert!(s.inbox_record(record(i, &p)).await.unwrap());
            }
        }));
        let s = store.clone();
        let p = prefix.clone();
        let marked = rt.block_on(measure(n, callers, move |i| {
            let (s, p) = (s.clone(), p.clone());
            async move {
                s.inbox_mark_answered("discord", &format!("{p}{i}"))
                    .await
                    .unwrap();
            }
        }));
        let s = store.clone();
        let p = prefix.clone();
        let settled = rt.block_on(measure(n, callers, move |i| {
            let (s, p) = (s.clone(), p.clone());
            async move {
                s.inbox_settle("discord", &format!("{p}{i}"), InboxState::Answered, None)
                    .await
                    .unwrap();
            }
        }));
        let s = store.clone();
        let cursors = rt.block_on(measure(n, callers, move |i| {
            let s = s.clone();
            async move {
                let now = Utc::now();
                s.catch_up_save(vec![CatchUpCursor {
                    platform: "discord".into(),
                    feed: format!("c{}", i % 50),
                    last_id: format!("{i}"),
                    last_at: now,
                    addressed_at: now,
                }])
                .await
                .unwrap();
            }
        }));
        println!("RESULT callers={callers} n={n}");
        report("memory save (baseline)", &save, &save);
        report("inbox record (admitted)", &recorded, &save);
        report("inbox mark answered (first reply)", &marked, &save);
        report("inbox settle (turn end)", &settled, &save);
        report("catch-up cursor save (one feed)", &cursors, &save);
    }
    rt.block_on(store.close()).expect("close");
}
