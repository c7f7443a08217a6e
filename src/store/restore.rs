//! `air-friends restore BACKUP`: puts a copy made by `air-friends backup` in place of the
//! database, in one step that can be undone.
//!
//! 1. The database is locked as the daemon locks it ([`super::owner`]): a running daemon on it
//!    (or a second restore) refuses the restore, naming its pid.
//! 2. The backup is copied next to the database with SQLite's backup API (as `backup` copies),
//!    then checked: `PRAGMA integrity_check`, a schema version this build knows (a newer one
//!    is refused; an older one is migrated by the next start), and the tables of an air-friends
//!    database. Nothing is moved before every check passed.
//! 3. The database and its `-wal`/`-shm` files are renamed aside, together, to
//!    `{database}.before-restore-{time}` (kept, never deleted), and the copy takes its name,
//!    its owner and its mode (a restore run as root leaves files the service user can write).

use std::path::{Path, PathBuf};

use chrono::Utc;
use rusqlite::Connection;

use super::SCHEMA_VERSION;
use super::backup::{BackupError, copy_into};
use super::owner::{OwnerError, OwnerLock};

/// Why a restore did not happen. The database is untouched in every case.
#[derive(Debug, thiserror::Error)]
pub enum RestoreError {
    /// There is no file at the backup's path.
    #[error("there is no backup at {0}")]
    NoBackup(PathBuf),
    /// The backup is the database itself.
    #[error("{0} is the database itself")]
    SameFile(PathBuf),
    /// A daemon (or another restore) holds the database.
    #[error("{0}; stop it first")]
    InUse(#[from] OwnerError),
    /// The backup could not be copied or failed its integrity check.
    #[error("the backup cannot be used: {0}")]
    Unusable(#[from] BackupError),
    /// The backup is from a newer air-friends.
    #[error(
        "the backup has schema version {found}, newer than this air-friends knows ({known}); restore it with the version that made it"
    )]
    NewerSchema {
        /// The backup's version.
        found: i64,
        /// This build's.
        known: i64,
    },
    /// The backup is an SQLite database, but not an air-friends one.
    #[error("{0} is not an air-friends database (no memories table)")]
    NotOurs(PathBuf),
    /// A file system operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The cause.
        source: std::io::Error,
    },
}

/// A restore that happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestoreReport {
    /// The backup's schema version.
    pub schema_version: i64,
    /// The restored database's size in bytes.
    pub bytes: u64,
    /// Where the previous database now is (`None`: there was none).
    pub aside: Option<PathBuf>,
}

/// Restores `backup` as the database at `database` (see the module docs). Blocking.
pub fn restore_database(backup: &Path, database: &Path) -> Result<RestoreReport, RestoreError> {
    if !backup.is_file() {
        return Err(RestoreError::NoBackup(backup.to_path_buf()));
    }
    let io = |context: String| move |source| RestoreError::Io { context, source };
    let dir = database
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(io(format!("creating {}", dir.display())))?;
    if database.exists() && backup.canonicalize().ok() == database.canonicalize().ok() {
        return Err(RestoreError::SameFile(backup.to_path_buf()));
    }
    let _owner = OwnerLock::acquire(database)?;
    let name = database
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let temp = tempfile::Builder::new()
        .prefix(&format!(".{name}."))
        .suffix(".restoring")
        .tempfile_in(dir)
        .map_err(io(format!(
            "creating a temporary file in {}",
            dir.display()
        )))?;
    let schema_version = copy_into(backup, temp.path())?;
    if schema_version > SCHEMA_VERSION {
        return Err(RestoreError::NewerSchema {
            found: schema_version,
            known: SCHEMA_VERSION,
        });
    }
    if !has_memories(temp.path()) {
        return Err(RestoreError::NotOurs(backup.to_path_buf()));
    }
    temp.as_file()
        .sync_all()
        .map_err(io(format!("syncing {}", temp.path().display())))?;
    let previous = std::fs::metadata(database).ok();
    let aside = move_aside(database)?;
    temp.persist(database).map_err(|e| RestoreError::Io {
        context: format!("renaming the copy to {}", database.display()),
        source: e.error,
    })?;
    if let Some(previous) = &previous {
        take_over_ownership(previous, database);
    }
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
    let bytes = std::fs::metadata(database)
        .map_err(io(format!("reading {}", database.display())))?
        .len();
    Ok(RestoreReport {
        schema_version,
        bytes,
        aside,
    })
}

/// Gives the restored database (and the lock file) the previous database's owner and mode, so
/// a restore run as root leaves files the service user can still write. Best effort: a user
/// restoring their own files needs no change, and cannot make one.
fn take_over_ownership(previous: &std::fs::Metadata, database: &Path) {
    use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
    for path in [database.to_path_buf(), super::owner::lock_path(database)] {
        let _ = std::os::unix::fs::chown(&path, Some(previous.uid()), Some(previous.gid()));
    }
    let _ = std::fs::set_permissions(
        database,
        std::fs::Permissions::from_mode(previous.mode() & 0o7777),
    );
}

/// Whether the database at `path` has air-friends' `memories` table.
fn has_memories(path: &Path) -> bool {
    Connection::open(path)
        .and_then(|c| {
            c.query_row(
                "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'memories'",
                [],
                |r| r.get::<_, i64>(0),
            )
        })
        .is_ok_and(|n| n == 1)
}

/// Renames `database` and its `-wal`/`-shm` files to `{database}.before-restore-{time}`;
/// returns the new name of the database (`None` when there was none).
fn move_aside(database: &Path) -> Result<Option<PathBuf>, RestoreError> {
    if !database.exists() {
        return Ok(None);
    }
    let stamp = Utc::now().format("%Y%m%dT%H%M%S%.3fZ");
    let with = |path: &Path, suffix: &str| {
        let mut name = path.as_os_str().to_owned();
        name.push(suffix);
        PathBuf::from(name)
    };
    let aside = with(database, &format!(".before-restore-{stamp}"));
    // The -wal and -shm files first: the database without its WAL would miss commits.
    for suffix in ["-wal", "-shm"] {
        let from = with(database, suffix);
        if from.exists() {
            let to = with(&aside, suffix);
            std::fs::rename(&from, &to).map_err(|source| RestoreError::Io {
                context: format!("moving {} aside", from.display()),
                source,
            })?;
        }
    }
    std::fs::rename(database, &aside).map_err(|source| RestoreError::Io {
        context: format!("moving {} aside", database.display()),
        source,
    })?;
    Ok(Some(aside))
}
