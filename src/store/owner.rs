//! Which process owns a database: the daemon (`serve`, `chat`) holds an exclusive lock on
//! `{database}.lock` for as long as it runs, so a second daemon on the same database (two
//! reminder schedulers, two inboxes) or a `restore` underneath a running one is refused with
//! the holder's pid, instead of corrupting what the first one works on. The tools that only
//! read, back up or import beside a running daemon (`stats`, `backup`, `import`) take no lock.
//!
//! The lock is `flock(2)` on a file of its own, never on the database: closing any descriptor
//! of the database file would drop SQLite's own POSIX locks. The kernel releases it when the
//! process ends, however it ends, so a crash leaves no stale lock (the file stays, unlocked).

use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::path::{Path, PathBuf};

use nix::fcntl::{Flock, FlockArg};

/// Why the database could not be taken.
#[derive(Debug, thiserror::Error)]
pub enum OwnerError {
    /// Another process holds the lock.
    #[error(
        "another air-friends process{} runs on the database {} (it holds {})",
        holder.map(|pid| format!(" (pid {pid})")).unwrap_or_default(),
        database.display(),
        lock.display()
    )]
    Held {
        /// The database.
        database: PathBuf,
        /// The lock file.
        lock: PathBuf,
        /// The holder's pid, as it wrote it.
        holder: Option<u32>,
    },
    /// The lock file could not be opened or locked.
    #[error("cannot lock {}: {source}", lock.display())]
    Io {
        /// The lock file.
        lock: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
}

/// The database's lock, held until dropped.
#[derive(Debug)]
pub struct OwnerLock {
    _lock: Flock<File>,
}

/// `{database}.lock`.
pub fn lock_path(database: &Path) -> PathBuf {
    let mut name = database.as_os_str().to_owned();
    name.push(".lock");
    PathBuf::from(name)
}

impl OwnerLock {
    /// Gives the database up (after closing the store); dropping the lock does the same.
    pub fn release(self) {}

    /// Takes the lock of `database` (its folder must exist), without waiting, and writes this
    /// process's pid into it.
    pub fn acquire(database: &Path) -> Result<OwnerLock, OwnerError> {
        let lock = lock_path(database);
        let io = |source| OwnerError::Io {
            lock: lock.clone(),
            source,
        };
        // A lock file left by another user (a restore run as root) can still be locked
        // read-only; the pid is then not written.
        let (file, writable) = match OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&lock)
        {
            Ok(file) => (file, true),
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                (File::open(&lock).map_err(io)?, false)
            }
            Err(e) => return Err(io(e)),
        };
        let mut held = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(held) => held,
            Err((_, nix::errno::Errno::EWOULDBLOCK)) => {
                let holder = std::fs::read_to_string(&lock)
                    .ok()
                    .and_then(|text| text.trim().parse().ok());
                return Err(OwnerError::Held {
                    database: database.to_path_buf(),
                    lock,
                    holder,
                });
            }
            Err((_, errno)) => return Err(io(std::io::Error::from(errno))),
        };
        if writable {
            held.set_len(0).map_err(io)?;
            writeln!(&mut *held, "{}", std::process::id()).map_err(io)?;
        }
        Ok(OwnerLock { _lock: held })
    }
}

/// The pid of the process that holds `database`'s lock now, `None` when none does (the lock
/// file is missing or free). The lock is tried, not read alone, so a pid left in the file by a
/// process that has ended is never taken for a running daemon. (Trying takes the lock for an
/// instant when it is free: a daemon starting in that instant is refused and may be started
/// again.)
pub fn holder(database: &Path) -> Result<Option<u32>, OwnerError> {
    let lock = lock_path(database);
    let file = match File::open(&lock) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(OwnerError::Io { lock, source }),
    };
    match Flock::lock(file, FlockArg::LockSharedNonblock) {
        Ok(_free) => Ok(None),
        Err((_, nix::errno::Errno::EWOULDBLOCK)) => Ok(std::fs::read_to_string(&lock)
            .ok()
            .and_then(|text| text.trim().parse().ok())),
        Err((_, errno)) => Err(OwnerError::Io {
            lock,
            source: std::io::Error::from(errno),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_holder_is_the_process_holding_the_lock_not_a_stale_pid() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("air.db");
        assert_eq!(holder(&db).unwrap(), None, "no lock file");
        let held = OwnerLock::acquire(&db).unwrap();
        assert_eq!(holder(&db).unwrap(), Some(std::process::id()));
        held.release();
        assert_eq!(
            holder(&db).unwrap(),
            None,
            "the pid left in the file is not a holder"
        );
    }

    #[test]
    fn one_owner_at_a_time_and_the_lock_goes_with_it() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("air-friends.db");
        let first = OwnerLock::acquire(&db).expect("first");
        match OwnerLock::acquire(&db) {
            Err(OwnerError::Held { holder, lock, .. }) => {
                assert_eq!(holder, Some(std::process::id()));
                assert_eq!(lock, dir.path().join("air-friends.db.lock"));
            }
            other => panic!("{other:?}"),
        }
        drop(first);
        OwnerLock::acquire(&db).expect("free again");
    }
}
