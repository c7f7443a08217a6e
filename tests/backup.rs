//! `air-friends backup FILE` through the real binary, beside a live writer: the copy opens,
//! passes `PRAGMA integrity_check` and holds every row acknowledged before the command started;
//! an existing FILE is kept unless `--force`. `air-friends restore FILE` puts a backup back, keeps
//! the previous database aside, refuses while a daemon runs on the database (and a second daemon
//! is refused at start), and refuses what is not a usable backup without changing anything.

mod common;

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use air_friends::store::{Importance, NewMemory, SCHEMA_VERSION, Store, Visibility, WorkspaceKey};
use common::{TestConfig, bin};
use rusqlite::{Connection, OpenFlags};

fn new_memory(i: usize) -> NewMemory {
    NewMemory {
        workspace: WorkspaceKey::new("discord", "backup").unwrap(),
        content: format!("note {i}: 猫と咖啡"),
        visibility: Visibility::Public,
        importance: Importance::Normal,
    }
}

fn database(cfg: &TestConfig) -> PathBuf {
    cfg.dir.path().join("data").join("air-friends.db")
}

/// Runs `air-friends backup ARGS --config CFG` with a minimal environment.
fn backup(config: &Path, args: &[&Path]) -> Output {
    Command::new(bin())
        .arg("backup")
        .args(args)
        .arg("--config")
        .arg(config)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .output()
        .expect("run air-friends backup")
}

fn memory_ids(db: &Path) -> HashSet<String> {
    let conn = Connection::open_with_flags(db, OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    let mut stmt = conn.prepare("SELECT id FROM memories").unwrap();
    stmt.query_map([], |r| r.get::<_, String>(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backup_while_another_connection_writes_holds_every_row_committed_before_it() {
    let cfg = TestConfig::new("");
    let store = Store::open(&database(&cfg)).await.unwrap();
    let acked: Arc<Mutex<Vec<String>>> = Arc::default();
    for i in 0..200 {
        let m = store.save_memory(new_memory(i)).await.unwrap();
        acked.lock().unwrap().push(m.id);
    }

    // The writer keeps committing while the backup runs; each acknowledged id is recorded.
    let (count_tx, mut count_rx) = tokio::sync::watch::channel(0usize);
    let stop = tokio_util::sync::CancellationToken::new();
    let writer = tokio::spawn({
        let (store, acked, stop) = (store.clone(), Arc::clone(&acked), stop.clone());
        async move {
            for i in 200.. {
                if stop.is_cancelled() {
                    break;
                }
                let m = store.save_memory(new_memory(i)).await.unwrap();
                let mut ids = acked.lock().unwrap();
                ids.push(m.id);
                count_tx.send_replace(ids.len());
            }
        }
    });
    count_rx.wait_for(|n| *n >= 250).await.unwrap();

    let before: Vec<String> = acked.lock().unwrap().clone();
    let dest = cfg.dir.path().join("backups").join("copy.db");
    std::fs::create_dir(dest.parent().unwrap()).unwrap();
    let out = tokio::task::spawn_blocking({
        let (config, dest) = (cfg.path.clone(), dest.clone());
        move || backup(&config, &[&dest])
    })
    .await
    .unwrap();
    // The daemon's writer is not held up by the finished backup.
    let after_backup = *count_rx.borrow();
    tokio::time::timeout(
        Duration::from_secs(10),
        count_rx.wait_for(|n| *n >= after_backup + 20),
    )
    .await
    .expect("writes continue after the backup")
    .unwrap();
    stop.cancel();
    writer.await.unwrap();

    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let size = std::fs::metadata(&dest).unwrap().len();
    assert!(
        stdout.contains(&format!("{size} bytes"))
            && stdout.contains(&format!("schema version {SCHEMA_VERSION}")),
        "{stdout}"
    );
    let beside: Vec<_> = std::fs::read_dir(dest.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(beside, ["copy.db"], "no temporary, -wal or -shm file left");

    let copy = Connection::open_with_flags(&dest, OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    let check: String = copy
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(check, "ok");
    let version: i64 = copy
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(version, SCHEMA_VERSION);
    let in_copy = memory_ids(&dest);
    let missing: Vec<_> = before.iter().filter(|id| !in_copy.contains(*id)).collect();
    assert!(
        missing.is_empty(),
        "{} of {} rows committed before the backup are missing",
        missing.len(),
        before.len()
    );
    store.close().await.unwrap();
}

#[tokio::test]
async fn backup_refuses_an_existing_file_without_force() {
    let cfg = TestConfig::new("");
    let store = Store::open(&database(&cfg)).await.unwrap();
    let saved = store.save_memory(new_memory(1)).await.unwrap();
    let dest = cfg.dir.path().join("copy.db");
    std::fs::write(&dest, "an older backup").unwrap();

    let out = backup(&cfg.path, &[&dest]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("already exists") && stderr.contains("--force"),
        "{stderr}"
    );
    assert_eq!(std::fs::read_to_string(&dest).unwrap(), "an older backup");

    let out = backup(&cfg.path, &[&dest, Path::new("--force")]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(memory_ids(&dest).contains(&saved.id));
    store.close().await.unwrap();
}

#[test]
fn backup_without_a_database_fails_and_creates_none() {
    let cfg = TestConfig::new("");
    let dest = cfg.dir.path().join("copy.db");
    let out = backup(&cfg.path, &[&dest]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("there is no database at"), "{stderr}");
    assert!(!dest.exists() && !database(&cfg).exists());
}

/// Runs `air-friends restore FILE --config CFG` with a minimal environment.
fn restore(config: &Path, file: &Path) -> Output {
    Command::new(bin())
        .arg("restore")
        .arg(file)
        .arg("--config")
        .arg(config)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .output()
        .expect("run air-friends restore")
}

/// The files in the database's folder whose names start with `prefix`.
fn named(cfg: &TestConfig, prefix: &str) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(cfg.dir.path().join("data"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with(prefix))
        })
        .collect();
    found.sort();
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restore_puts_the_backup_back_and_keeps_the_old_database_aside() {
    let cfg = TestConfig::new("");
    let db = database(&cfg);
    let store = Store::open(&db).await.unwrap();
    let kept = store.save_memory(new_memory(1)).await.unwrap().id;
    let file = cfg.dir.path().join("nightly.db");
    let out = backup(&cfg.path, &[&file]);
    assert!(out.status.success(), "{out:?}");
    let later = store.save_memory(new_memory(2)).await.unwrap().id;
    store.close().await.unwrap();

    let out = restore(&cfg.path, &file);
    assert!(out.status.success(), "{out:?}");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains(&format!("schema version {SCHEMA_VERSION}"))
            && said.contains("the previous database is kept at"),
        "{said}"
    );
    assert_eq!(memory_ids(&db), HashSet::from([kept.clone()]));
    let aside = named(&cfg, "air-friends.db.before-restore-");
    let main_aside: Vec<&PathBuf> = aside
        .iter()
        .filter(|p| {
            !p.to_string_lossy().ends_with("-wal") && !p.to_string_lossy().ends_with("-shm")
        })
        .collect();
    assert_eq!(main_aside.len(), 1, "{aside:?}");
    assert_eq!(
        memory_ids(main_aside[0]),
        HashSet::from([kept.clone(), later])
    );
    // The restored database opens and works as usual.
    let store = Store::open(&db).await.unwrap();
    store.save_memory(new_memory(3)).await.unwrap();
    store.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restore_refuses_while_the_daemon_runs_and_a_second_daemon_is_refused() {
    let cfg = TestConfig::new("agent:\n  command: sh\n");
    let db = database(&cfg);
    let mut daemon = common::Daemon::start(&cfg.path, &[]);
    daemon.listener_addr("ops");
    let file = cfg.dir.path().join("nightly.db");
    let out = backup(&cfg.path, &[&file]);
    assert!(out.status.success(), "{out:?}");

    let out = restore(&cfg.path, &file);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("(pid {})", daemon.child.id()))
            && err.contains("runs on the database")
            && err.contains("stop it first"),
        "{err}"
    );
    assert!(named(&cfg, "air-friends.db.before-restore-").is_empty());

    // A second daemon on the same database stops at start and says why.
    let second = Command::new(bin())
        .args(["serve", "--config"])
        .arg(&cfg.path)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .output()
        .unwrap();
    assert!(!second.status.success());
    let said = String::from_utf8_lossy(&second.stdout) + String::from_utf8_lossy(&second.stderr);
    assert!(said.contains("runs on the database"), "{said}");

    daemon.terminate();
    assert!(daemon.wait_exit(Duration::from_secs(30)).success());
    let out = restore(&cfg.path, &file);
    assert!(out.status.success(), "once stopped: {out:?}");
    assert!(db.is_file());
}

#[test]
fn restore_refuses_what_is_not_a_usable_backup_and_changes_nothing() {
    let cfg = TestConfig::new("");
    let db = database(&cfg);
    let conn = Connection::open(&db).unwrap();
    conn.execute_batch("CREATE TABLE memories (id TEXT); INSERT INTO memories VALUES ('mine');")
        .unwrap();
    drop(conn);
    let garbage = cfg.dir.path().join("garbage.db");
    std::fs::write(&garbage, b"this is not a database at all, just words").unwrap();
    let newer = cfg.dir.path().join("newer.db");
    Connection::open(&newer)
        .unwrap()
        .execute_batch(&format!(
            "CREATE TABLE memories (id TEXT); PRAGMA user_version = {};",
            SCHEMA_VERSION + 1
        ))
        .unwrap();
    let other = cfg.dir.path().join("other.db");
    Connection::open(&other)
        .unwrap()
        .execute_batch("CREATE TABLE t (v TEXT);")
        .unwrap();
    for (file, says) in [
        (&garbage, "cannot be used"),
        (&newer, "newer than this air-friends knows"),
        (&other, "not an air-friends database"),
        (&cfg.dir.path().join("missing.db"), "there is no backup"),
        (&db, "is the database itself"),
    ] {
        let out = restore(&cfg.path, file);
        assert!(!out.status.success(), "{file:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{file:?}: {err}");
    }
    assert_eq!(memory_ids(&db), HashSet::from(["mine".to_owned()]));
    assert!(named(&cfg, "air-friends.db.before-restore-").is_empty());
    assert!(
        named(&cfg, ".air-friends.db.").is_empty(),
        "no temporary file left"
    );
}
