//! Crash safety: a child process (this test binary re-executed in the "writer" role) saves
//! memories from many concurrent tasks and prints each acknowledged id; the parent SIGKILLs it
//! mid-burst, then opens the database and checks that every acknowledged save is there and that
//! SQLite's and FTS5's integrity checks pass.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use air_friends::store::{Importance, NewMemory, Scope, Store, Visibility, WorkspaceKey};

const ROLE_ENV: &str = "AIR_FRIENDS_STORE_CRASH_DB";

fn ws() -> WorkspaceKey {
    WorkspaceKey::new("discord", "crash").unwrap()
}

/// Child role: does nothing unless started by the parent test with the env var set.
#[test]
fn crash_child_writer() {
    let Ok(path) = std::env::var(ROLE_ENV) else {
        return;
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let store = Store::open(std::path::Path::new(&path)).await.unwrap();
        println!("READY");
        let mut tasks = Vec::new();
        for t in 0..16 {
            let store = store.clone();
            tasks.push(tokio::spawn(async move {
                for i in 0.. {
                    let m = store
                        .save_memory(NewMemory {
                            workspace: ws(),
                            content: format!("task {t} note {i} 猫と咖啡"),
                            visibility: Visibility::Public,
                            importance: Importance::Normal,
                        })
                        .await
                        .unwrap();
                    println!("ACK {}", m.id);
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
    });
}

#[tokio::test]
async fn every_acknowledged_save_survives_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("crash.db");
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "crash_child_writer",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(ROLE_ENV, &path)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (acked, killed_after) = tokio::task::spawn_blocking(move || {
        let mut acked = Vec::new();
        let mut killed_after = None;
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Some(id) = line.strip_prefix("ACK ") {
                acked.push(id.to_owned());
                if acked.len() == 2000 && killed_after.is_none() {
                    child.kill().unwrap(); // SIGKILL, mid-burst
                    killed_after = Some(acked.len());
                }
            }
        }
        child.wait().unwrap();
        (acked, killed_after)
    })
    .await
    .unwrap();
    assert_eq!(
        killed_after,
        Some(2000),
        "the child never reached the burst"
    );
    assert!(acked.len() >= 2000);

    let store = Store::open(&path).await.unwrap();
    let mut missing = Vec::new();
    for id in &acked {
        if store
            .get_memory(&ws(), id, Scope::PublicOnly)
            .await
            .unwrap()
            .is_none()
        {
            missing.push(id.clone());
        }
    }
    assert!(
        missing.is_empty(),
        "{} acknowledged saves lost, e.g. {:?}",
        missing.len(),
        &missing[..missing.len().min(5)]
    );
    let total = store
        .memory_stats(&ws(), Scope::PublicOnly)
        .await
        .unwrap()
        .public
        .total;
    assert!(total as usize >= acked.len());
    let hits = store
        .search_memories(&ws(), "咖啡", Scope::PublicOnly, 50)
        .await
        .unwrap();
    assert_eq!(hits.len(), 50);
    store.close().await.unwrap();

    let conn = rusqlite::Connection::open(&path).unwrap();
    let check: String = conn
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(check, "ok");
    conn.execute(
        "INSERT INTO memories_fts(memories_fts) VALUES ('integrity-check')",
        [],
    )
    .unwrap();
    conn.execute(
        "INSERT INTO memories_grams(memories_grams) VALUES ('integrity-check')",
        [],
    )
    .unwrap();
}
