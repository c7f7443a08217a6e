//! `air-friends backup FILE`: a consistent copy of the database, taken while the daemon runs.
//!
//! SQLite's online backup API copies every page in one step from a connection of its own, so
//! the copy is one read snapshot: everything committed before the step began, nothing half
//! written. In WAL mode (`db`) that reader does not block the daemon's writer, nor the writer
//! the reader (tests/backup.rs `backup_while_another_connection_writes_holds_every_row_committed_before_it`).
//!
//! The copy is written to a temporary file next to FILE, switched to the rollback journal (one
//! self-contained file, no `-wal`/`-shm` beside it; `serve` turns WAL back on when it opens a
//! restored copy), checked with `PRAGMA integrity_check`, synced, and only then renamed to
//! FILE: a failed or interrupted backup leaves no partial FILE. An existing FILE is kept
//! unless the caller asks to replace it, and FILE may never be the database itself.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rusqlite::backup::{Backup, StepResult};
use rusqlite::{Connection, OpenFlags};

/// How long a locked source may hold the copy up before it fails (`db`'s `busy_timeout`).
const BUSY_WAIT: Duration = Duration::from_secs(5);

/// Why a backup was not made. Nothing is left at the destination in any case.
#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    /// There is no database file at the configured path.
    #[error("there is no database at {0}")]
    NoDatabase(PathBuf),
    /// The destination exists and replacing it was not asked for.
    #[error("{0} already exists")]
    Exists(PathBuf),
    /// The destination is the database file (or one of its `-wal`/`-shm` files).
    #[error("{0} is the database itself; write the backup to another file")]
    SameFile(PathBuf),
    /// A file system operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The cause.
        source: std::io::Error,
    },
    /// SQLite failed.
    #[error("{context}: {source}")]
    Sqlite {
        /// What was being done.
        context: String,
        /// The cause.
        source: rusqlite::Error,
    },
    /// The database stayed locked (by a recovery or a WAL reset) for this long.
    #[error("the database stayed locked for {} s; try again", .0.as_secs())]
    Locked(Duration),
    /// The copy did not pass `PRAGMA integrity_check`.
    #[error("the copy failed its integrity check: {0}")]
    Corrupt(String),
}

/// A backup that was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackupReport {
    /// Where the copy is.
    pub path: PathBuf,
    /// Its size in bytes.
    pub bytes: u64,
    /// Its schema version (`PRAGMA user_version`; see [`super::SCHEMA_VERSION`]).
    pub schema_version: i64,
}

/// Copies the database at `source` to `dest` (see the module docs); `replace` allows an
/// existing `dest` to be overwritten. Blocking.
pub fn backup_database(
    source: &Path,
    dest: &Path,
    replace: bool,
) -> Result<BackupReport, BackupError> {
    if !source.is_file() {
        return Err(BackupError::NoDatabase(source.to_path_buf()));
    }
    let (dir, dest) = resolve_destination(source, dest)?;
    if !replace && dest.exists() {
        return Err(BackupError::Exists(dest));
    }
    let file_name = dest
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let temp = tempfile::Builder::new()
        .prefix(&format!(".{file_name}."))
        .suffix(".partial")
        .tempfile_in(&dir)
        .map_err(|e| io(format!("creating a temporary file in {}", dir.display()), e))?;

    let schema_version = copy_into(source, temp.path())?;
    temp.as_file()
        .sync_all()
        .map_err(|e| io(format!("syncing {}", temp.path().display()), e))?;
    let persisted = if replace {
        temp.persist(&dest)
    } else {
        temp.persist_noclobber(&dest)
    };
    persisted.map_err(|e| {
        if e.error.kind() == std::io::ErrorKind::AlreadyExists {
            BackupError::Exists(dest.clone())
        } else {
            io(format!("renaming the copy to {}", dest.display()), e.error)
        }
    })?;
    // The rename is durable only once the directory entry is.
    if let Ok(d) = std::fs::File::open(&dir) {
        let _ = d.sync_all();
    }
    let bytes = std::fs::metadata(&dest)
        .map_err(|e| io(format!("reading {}", dest.display()), e))?
        .len();
    Ok(BackupReport {
        path: dest,
        bytes,
        schema_version,
    })
}

/// The destination's folder and its full path, refusing the database's own files.
fn resolve_destination(source: &Path, dest: &Path) -> Result<(PathBuf, PathBuf), BackupError> {
    let Some(name) = dest.file_name() else {
        return Err(io(
            format!("{} names no file", dest.display()),
            std::io::ErrorKind::InvalidInput.into(),
        ));
    };
    let parent = dest
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let dir = parent
        .canonicalize()
        .map_err(|e| io(format!("finding the folder {}", parent.display()), e))?;
    let full = dir.join(name);
    let db = source
        .canonicalize()
        .map_err(|e| io(format!("finding {}", source.display()), e))?;
    let mut own_files = vec![db.clone()];
    for suffix in ["-wal", "-shm", "-journal"] {
        let mut sibling = db.clone().into_os_string();
        sibling.push(suffix);
        own_files.push(PathBuf::from(sibling));
    }
    let target = full.canonicalize().unwrap_or_else(|_| full.clone());
    if own_files.contains(&target) {
        return Err(BackupError::SameFile(full));
    }
    Ok((dir, full))
}

/// Copies `source` into the empty file `temp` and checks the copy; its schema version.
pub(super) fn copy_into(source: &Path, temp: &Path) -> Result<i64, BackupError> {
    let sql = |context: &str| {
        let context = context.to_owned();
        move |source| BackupError::Sqlite { context, source }
    };
    // Read-write without create: a read-only open of a WAL database needs its -shm to exist
    // already; query_only keeps this connection from ever writing.
    let src = Connection::open_with_flags(
        source,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(sql(&format!("opening {}", source.display())))?;
    src.busy_timeout(BUSY_WAIT)
        .and_then(|()| src.execute_batch("PRAGMA query_only = ON;"))
        .map_err(sql("configuring the source connection"))?;
    let mut dst = Connection::open(temp).map_err(sql(&format!("opening {}", temp.display())))?;
    {
        let backup = Backup::new(&src, &mut dst).map_err(sql("starting the backup"))?;
        let started = Instant::now();
        loop {
            // -1: every page in one step, so the copy is one snapshot. Copying in chunks would
            // restart whenever the daemon commits between two of them.
            match backup.step(-1).map_err(sql("copying the database"))? {
                StepResult::Done => break,
                StepResult::More => {}
                StepResult::Busy | StepResult::Locked if started.elapsed() < BUSY_WAIT => {
                    std::thread::sleep(Duration::from_millis(50));
                }
                _ => return Err(BackupError::Locked(BUSY_WAIT)),
            }
        }
    }
    drop(src);
    let _: String = dst
        .query_row("PRAGMA journal_mode = DELETE", [], |r| r.get(0))
        .map_err(sql("switching the copy to a single file"))?;
    let check: Vec<String> = dst
        .prepare("PRAGMA integrity_check")
        .and_then(|mut s| {
            s.query_map([], |r| r.get::<_, String>(0))?
                .collect::<Result<_, _>>()
        })
        .map_err(sql("checking the copy"))?;
    if check != ["ok"] {
        return Err(BackupError::Corrupt(check.join("; ")));
    }
    let version: i64 = dst
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .map_err(sql("reading the copy's schema version"))?;
    dst.close().map_err(|(_, e)| sql("closing the copy")(e))?;
    Ok(version)
}

fn io(context: String, source: std::io::Error) -> BackupError {
    BackupError::Io { context, source }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn database(dir: &Path) -> PathBuf {
        let path = dir.join("air-friends.db");
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch(
            "PRAGMA journal_mode = WAL; PRAGMA user_version = 7;
             CREATE TABLE t (v TEXT); INSERT INTO t VALUES ('kept');",
        )
        .unwrap();
        path
    }

    #[test]
    fn the_copy_is_one_file_with_the_rows_and_the_schema_version() {
        let tmp = tempfile::tempdir().unwrap();
        let db = database(tmp.path());
        let dest = tmp.path().join("out").join("copy.db");
        std::fs::create_dir(tmp.path().join("out")).unwrap();
        let report = backup_database(&db, &dest, false).unwrap();
        assert_eq!(report.schema_version, 7);
        assert_eq!(report.bytes, std::fs::metadata(&dest).unwrap().len());
        let names: Vec<_> = std::fs::read_dir(tmp.path().join("out"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(
            names,
            ["copy.db"],
            "no -wal, -shm or partial file beside it"
        );
        let copy = Connection::open_with_flags(&dest, OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
        let v: String = copy.query_row("SELECT v FROM t", [], |r| r.get(0)).unwrap();
        assert_eq!(v, "kept");
    }

    #[test]
    fn the_database_itself_and_its_wal_are_refused_even_with_replace() {
        let tmp = tempfile::tempdir().unwrap();
        let db = database(tmp.path());
        let wal = tmp.path().join("air-friends.db-wal");
        for dest in [db.clone(), wal, tmp.path().join(".").join("air-friends.db")] {
            let err = backup_database(&db, &dest, true).unwrap_err();
            assert!(matches!(err, BackupError::SameFile(_)), "{dest:?}: {err}");
        }
    }

    #[test]
    fn a_missing_database_is_not_created() {
        let tmp = tempfile::tempdir().unwrap();
        let db = tmp.path().join("none.db");
        let err = backup_database(&db, &tmp.path().join("copy.db"), false).unwrap_err();
        assert!(matches!(err, BackupError::NoDatabase(_)), "{err}");
        assert!(!db.exists() && !tmp.path().join("copy.db").exists());
    }
}
