//! After the store closes, the database is one file: every commit is in the `.db` itself, so an
//! operator who copies only that file (a common backup habit) has everything. Before, the final
//! checkpoint was skipped whenever the background checkpointer was busy, and the whole WAL was
//! left beside the database.

use std::path::Path;

use air_friends::store::{Importance, NewMemory, Store, Visibility, WorkspaceKey};
use rusqlite::{Connection, OpenFlags};

/// How many memories the `.db` file alone holds (copied away from its `-wal` and `-shm`).
fn memories_in_the_db_file_alone(db: &Path) -> i64 {
    let elsewhere = tempfile::tempdir().unwrap();
    let copy = elsewhere.path().join("copy.db");
    std::fs::copy(db, &copy).unwrap();
    let conn = Connection::open_with_flags(&copy, OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    conn.query_row("SELECT count(*) FROM memories", [], |r| r.get(0))
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_close_the_database_file_alone_holds_every_commit() {
    for round in 0..5 {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("air-friends.db");
        let store = Store::open(&db).await.unwrap();
        // 64 concurrent savers: large batches, so the background checkpointer is kept busy.
        let mut tasks = Vec::new();
        for c in 0..64u32 {
            let store = store.clone();
            tasks.push(tokio::spawn(async move {
                for i in 0..100u32 {
                    store
                        .save_memory(NewMemory {
                            workspace: WorkspaceKey::new("discord", &format!("u{}", c % 8))
                                .unwrap(),
                            content: format!("round {round} caller {c} note {i}: likes tea"),
                            visibility: Visibility::Public,
                            importance: Importance::Normal,
                        })
                        .await
                        .unwrap();
                }
            }));
        }
        for task in tasks {
            task.await.unwrap();
        }
        // Another clone keeps the readers open, as a running task does at a daemon's exit: the
        // file must be whole before the last connection goes.
        let still_open = store.clone();
        store.close().await.unwrap();
        assert_eq!(
            memories_in_the_db_file_alone(&db),
            64 * 100,
            "round {round}: commits left in the WAL"
        );
        let wal = dir.path().join("air-friends.db-wal");
        assert!(
            !wal.exists() || std::fs::metadata(&wal).unwrap().len() == 0,
            "round {round}: the WAL is not empty"
        );
        drop(still_open);
    }
}
