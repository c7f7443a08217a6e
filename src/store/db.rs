//! Connections, pragmas, embedded migrations, and the bridge between async callers and the
//! synchronous rusqlite API.
//!
//! * **Writes** go to one dedicated OS thread that owns the only writable connection. It drains the
//!   queue of pending jobs, runs them in one `BEGIN IMMEDIATE` transaction (each job inside its own
//!   savepoint, so one failing job does not undo its neighbours), commits, and only then answers
//!   each caller. Concurrent callers are therefore batched into one commit. What a batch leaves
//!   behind (indexing the rows it queued, a merge step) runs after its callers are answered, in
//!   a transaction of its own (`WriterHooks::after_batch`), so no caller waits for it.
//! * **Durability** (`synchronous = NORMAL` in WAL mode, a deliberate choice): an acknowledged write
//!   is in the WAL file when its caller is answered, so it survives the process being killed or
//!   crashing at any point (`tests/store_crash.rs` SIGKILLs a writer mid-burst). The WAL is fsynced
//!   at checkpoints rather than at every commit, so a power loss or kernel crash can drop the last
//!   commits before the latest checkpoint (the database itself stays consistent). For memories and
//!   reminders of a chat companion that is the usual trade: `FULL` costs one fsync per batch and
//!   capped saves at a few thousand per second on the benchmark disk
//!   (`docs/performance/store.md`, "Against the targets").
//! * **Checkpoints** run on a thread of their own (`store-ckpt`, a passive checkpoint each time
//!   the WAL has grown by `CHECKPOINT_FRAMES`), so the writer never stalls to copy the WAL
//!   into the database; past `RESTART_FRAMES` the writer copies the last few frames itself, so
//!   the WAL starts again and stays about 16 MB under steady saves. Backups and shutdown
//!   checkpoint on the writer.
//! * **Idle work**: once the writer has had nothing to do for `IDLE_AFTER` after a batch, it
//!   runs the store's idle step (merging the full-text indexes' segments, a bounded amount of
//!   work per step) until the step reports nothing left or a job arrives. So merges that make
//!   searches cheaper happen off the save path; under saves that never pause, the batches merge
//!   in small steps instead (`search::index`, `docs/PERFORMANCE.md` "Save stalls").
//! * **Bookkeeping waits** (`write_detached`, e.g. which memories a search returned): held until
//!   the next batch commits anyway, or `DEFER_AT_MOST`, so that searching does not commit (and
//!   empty every reader's page cache) once per call.
//! * **Reads** run on `spawn_blocking` with a connection from a small pool (WAL lets them run
//!   beside the writer), each inside a read transaction for a consistent snapshot.
//!
//! Nothing here runs SQLite on a tokio worker thread.

use crate::sync::Recover;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::mpsc as std_mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rusqlite::functions::FunctionFlags;
use rusqlite::wal::CheckpointMode;
use rusqlite::{Connection, OpenFlags};
use tokio::sync::{Semaphore, oneshot};

use super::StoreError;

/// Schema version this build knows; recorded in `PRAGMA user_version`.
pub const SCHEMA_VERSION: i64 = 16;

/// How long a connection waits for a lock before failing with `SQLITE_BUSY`.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);
/// Most jobs committed in one transaction.
const MAX_BATCH: usize = 1024;
/// Read connections (and concurrent blocking reads).
const READERS: usize = 4;
/// WAL frames after which the checkpointer copies the WAL into the database (SQLite's default
/// automatic checkpoint threshold).
const CHECKPOINT_FRAMES: i32 = 1000;
/// WAL frames (about 16 MB) past which the WAL is made to start again from its beginning (see
/// `start_checkpointer`).
const RESTART_FRAMES: i32 = 4 * CHECKPOINT_FRAMES;
/// Most frames the writer copies itself to let the WAL start again.
const RESTART_LAG: i32 = 256;
/// Quiet time after a batch before the writer starts its idle work.
const IDLE_AFTER: Duration = Duration::from_secs(1);
/// Pause between two idle steps (a job arriving meanwhile runs first).
const IDLE_STEP_GAP: Duration = Duration::from_millis(5);
/// Longest a deferred job ([`Db::write_detached`]) waits for a batch to ride along with before
/// the writer commits it on its own.
const DEFER_AT_MOST: Duration = Duration::from_secs(1);

/// Migration `n` (1-based) brings the schema from version `n-1` to `n`.
const MIGRATIONS: &[&str] = &[
    include_str!("schema_v1.sql"),
    include_str!("schema_v2.sql"),
    include_str!("schema_v3.sql"),
    include_str!("schema_v4.sql"),
    include_str!("schema_v5.sql"),
    include_str!("schema_v6.sql"),
    include_str!("schema_v7.sql"),
    include_str!("schema_v8.sql"),
    include_str!("schema_v9.sql"),
    include_str!("schema_v10.sql"),
    include_str!("schema_v11.sql"),
    include_str!("schema_v12.sql"),
    include_str!("schema_v13.sql"),
    include_str!("schema_v14.sql"),
    include_str!("schema_v15.sql"),
    include_str!("schema_v16.sql"),
];

/// A unit of work for the writer thread: runs inside the batch transaction and returns the
/// completion to call once the batch has committed (or failed to). Given `Err` when the batch
/// transaction could not even begin; the job then only reports that error.
type Job = Box<dyn FnOnce(Result<&Connection, &StoreError>) -> Completion + Send>;
/// Answers one caller with its result, or with the commit error when `Some`.
type Completion = Box<dyn FnOnce(Option<&StoreError>) + Send>;

enum Msg {
    Job(Job),
    /// Bookkeeping that may wait: held until the next batch, or [`DEFER_AT_MOST`].
    Deferred(Job),
    /// Checkpoint the WAL into the main file, then answer.
    Checkpoint(oneshot::Sender<Result<(), StoreError>>),
    /// Rebuild the database file (`VACUUM`), then checkpoint, then answer.
    Vacuum(oneshot::Sender<Result<(), StoreError>>),
    /// Finish queued work, checkpoint, close the connection and stop the thread.
    Close(oneshot::Sender<Result<(), StoreError>>),
}

/// What the store adds to the writer's connection: `prepare` runs once after the migrations
/// (e.g. its settings); `after_batch` after every batch, once the batch has committed and its
/// callers are answered, in a transaction of its own (e.g. indexing queued rows once there are
/// enough): the work a batch leaves behind costs no caller of that batch any wait, and the
/// jobs that arrive meanwhile make the next batch larger. A failing `after_batch` is logged
/// and undone; the next batch's step tries again. `idle` is one bounded step of idle work, run
/// when no job is waiting; it answers whether more remains. `settle` finishes what
/// `after_batch` leaves for later (e.g. indexing every queued row): the last job of the batch
/// before each checkpoint and before close, so nothing is left over when the file is at rest (a
/// failing `settle` is logged and undone alone).
#[derive(Clone, Copy)]
pub(crate) struct WriterHooks {
    pub prepare: fn(&Connection) -> Result<(), StoreError>,
    pub after_batch: fn(&Connection) -> Result<(), StoreError>,
    pub idle: fn(&Connection) -> Result<bool, StoreError>,
    pub settle: fn(&Connection) -> Result<(), StoreError>,
}

/// The open database: writer thread handle and reader pool. Shared behind an `Arc` by `Store`.
pub(crate) struct Db {
    writer: Mutex<Option<std_mpsc::Sender<Msg>>>,
    readers: Mutex<Vec<Connection>>,
    read_slots: Arc<Semaphore>,
    path: PathBuf,
}

impl Db {
    /// Opens (creating if needed) the database, applies migrations and starts the writer thread.
    /// Blocking: call from `spawn_blocking`.
    pub(crate) fn open_blocking(path: &Path, hooks: WriterHooks) -> Result<Db, StoreError> {
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(|e| StoreError::Io {
                context: format!("creating {}", parent.display()),
                source: Arc::new(e),
            })?;
        }
        create_private(path)?;
        let mut conn = Connection::open(path)?;
        configure(&conn)?;
        let mode: String = conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(StoreError::Invalid(format!(
                "could not switch {} to WAL mode (got {mode})",
                path.display()
            )));
        }
        migrate(&mut conn)?;
        (hooks.prepare)(&conn)?;
        let copied = Arc::new(AtomicI32::new(0));
        let checkpoints = start_checkpointer(path, copied.clone())?;
        // The writer does not copy the WAL into the database: past CHECKPOINT_FRAMES it wakes
        // the checkpointer thread, so the copying is not on the save path. Past RESTART_FRAMES
        // it copies the last few frames itself (see `start_checkpointer`).
        conn.execute_batch("PRAGMA wal_autocheckpoint = 0")?;
        let mut signalled_at = 0;
        conn.wal_hook(Some(move |wal: &mut rusqlite::hooks::Wal, frames: i32| {
            // Once per CHECKPOINT_FRAMES new frames (the WAL restarts from 0 after a checkpoint
            // that caught up), not after every commit past the threshold.
            if frames < signalled_at {
                signalled_at = 0;
            }
            if frames >= RESTART_FRAMES {
                let lag = frames - copied.load(Ordering::Relaxed);
                if (0..=RESTART_LAG).contains(&lag) {
                    // Busy (a checkpoint is running) is fine: the next commit tries again.
                    let _ = wal.checkpoint_v2(CheckpointMode::PASSIVE);
                    return Ok(());
                }
                // Until then the checkpointer runs round after round.
                let _ = checkpoints.try_send(());
            }
            if frames - signalled_at >= CHECKPOINT_FRAMES {
                signalled_at = frames;
                let _ = checkpoints.try_send(());
            }
            Ok(())
        }))?;

        let mut readers = Vec::with_capacity(READERS);
        for _ in 0..READERS {
            readers.push(open_reader(path)?);
        }
        let (tx, rx) = std_mpsc::channel();
        std::thread::Builder::new()
            .name("store-writer".into())
            .spawn(move || writer_loop(conn, rx, hooks))
            .map_err(|e| StoreError::Io {
                context: "spawning the store writer thread".into(),
                source: Arc::new(e),
            })?;
        Ok(Db {
            writer: Mutex::new(Some(tx)),
            readers: Mutex::new(readers),
            read_slots: Arc::new(Semaphore::new(READERS)),
            path: path.to_owned(),
        })
    }

    fn send(&self, msg: Msg) -> Result<(), StoreError> {
        let guard = self.writer.locked();
        match guard.as_ref() {
            Some(tx) => tx.send(msg).map_err(|_| StoreError::Closed),
            None => Err(StoreError::Closed),
        }
    }

    /// Runs `f` on the writer thread inside the current batch transaction (in its own
    /// savepoint) and returns its result once the batch has committed.
    pub(crate) async fn write<R, F>(&self, f: F) -> Result<R, StoreError>
    where
        R: Send + 'static,
        F: FnOnce(&Connection) -> Result<R, StoreError> + Send + 'static,
    {
        let (tx, rx) = oneshot::channel::<Result<R, StoreError>>();
        let job: Job = Box::new(move |conn| {
            let result = match conn {
                Ok(conn) => in_savepoint(conn, f),
                Err(e) => Err(e.clone()),
            };
            Box::new(move |commit_error| {
                let result = match commit_error {
                    Some(e) => Err(e.clone()),
                    None => result,
                };
                // The caller may have gone away (cancelled future); nothing to do then.
                let _ = tx.send(result);
            })
        });
        self.send(Msg::Job(job))?;
        rx.await.map_err(|_| StoreError::Closed)?
    }

    /// Queues `f` for the writer without waiting for it: for bookkeeping whose caller must
    /// not wait on a commit (a failure is logged at debug, with `what`).
    ///
    /// The job is deferred: it runs in the next write batch (in the order the jobs were queued),
    /// or in a batch of its own once it has waited [`DEFER_AT_MOST`], and always before a
    /// checkpoint or close. Every commit makes each reader drop its page cache (WAL readers
    /// cannot tell which pages changed), so one commit per search for its "used" marks made
    /// searches at 100 000 memories re-read their pages every time
    /// (`docs/performance/skill-api.md`, "Common words at 100 000").
    /// A crash loses at most the last second of such bookkeeping.
    pub(crate) fn write_detached<F>(&self, what: &'static str, f: F)
    where
        F: FnOnce(&Connection) -> Result<(), StoreError> + Send + 'static,
    {
        let job: Job = Box::new(move |conn| {
            let result = match conn {
                Ok(conn) => in_savepoint(conn, f),
                Err(e) => Err(e.clone()),
            };
            Box::new(move |commit_error| {
                if let Some(e) = commit_error.or(result.as_ref().err()) {
                    tracing::debug!(what, error = %e, "detached store write failed");
                }
            })
        });
        if let Err(e) = self.send(Msg::Deferred(job)) {
            tracing::debug!(what, error = %e, "detached store write not queued");
        }
    }

    /// Runs `f` on a pooled read connection inside a read transaction, off the async workers.
    pub(crate) async fn read<R, F>(self: &Arc<Self>, f: F) -> Result<R, StoreError>
    where
        R: Send + 'static,
        F: FnOnce(&Connection) -> Result<R, StoreError> + Send + 'static,
    {
        let permit = self
            .read_slots
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| StoreError::Closed)?;
        let db = Arc::clone(self);
        tokio::task::spawn_blocking(move || {
            let _permit = permit;
            let conn = db.take_reader()?;
            let result = (|| {
                let tx = conn.unchecked_transaction()?;
                let r = f(&tx);
                drop(tx); // read-only: rolling back is ending the snapshot
                r
            })();
            db.put_reader(conn);
            result
        })
        .await
        .map_err(|e| StoreError::Internal(format!("read task failed: {e}")))?
    }

    fn take_reader(&self) -> Result<Connection, StoreError> {
        let pooled = self.readers.locked().pop();
        match pooled {
            Some(c) => Ok(c),
            // A reader is lost only if a read panicked; replace it.
            None => open_reader(&self.path),
        }
    }

    fn put_reader(&self, conn: Connection) {
        self.readers.locked().push(conn);
    }

    /// Checkpoints the WAL into the main database file.
    pub(crate) async fn checkpoint(&self) -> Result<(), StoreError> {
        let (tx, rx) = oneshot::channel();
        self.send(Msg::Checkpoint(tx))?;
        rx.await.map_err(|_| StoreError::Closed)?
    }

    /// Rebuilds the database file without its free pages (`VACUUM`: nothing deleted stays in
    /// them) and truncates the WAL. Holds the writer for as long as it takes (about a second per
    /// 100 MB here): for erasures, which are rare.
    pub(crate) async fn vacuum(&self) -> Result<(), StoreError> {
        let (tx, rx) = oneshot::channel();
        self.send(Msg::Vacuum(tx))?;
        rx.await.map_err(|_| StoreError::Closed)?
    }

    /// Finishes queued writes, checkpoints, and stops the writer. Later writes fail with
    /// [`StoreError::Closed`]; reads keep working until the last `Store` clone is dropped.
    pub(crate) async fn close(&self) -> Result<(), StoreError> {
        let (tx, rx) = oneshot::channel();
        self.send(Msg::Close(tx))?;
        self.writer.locked().take();
        rx.await.map_err(|_| StoreError::Closed)?
    }
}

fn configure(conn: &Connection) -> Result<(), StoreError> {
    conn.busy_timeout(BUSY_TIMEOUT)?;
    conn.execute_batch(
        "PRAGMA foreign_keys = ON;
         PRAGMA synchronous = NORMAL;
         PRAGMA temp_store = MEMORY;
         PRAGMA cache_size = -16000;",
    )?;
    Ok(())
}

/// A configured connection to `path` of the writer's kind (read-write, no SQLite mutex: each
/// connection is used by one thread at a time).
/// Creates a database file that does not exist yet readable by its owner only (0600; SQLite
/// gives its `-wal` and `-shm` files the database file's mode): it holds private memories and
/// conversations, whatever the process's umask. An existing file keeps its mode (an operator's
/// group access, the package's).
fn create_private(path: &Path) -> Result<(), StoreError> {
    use std::os::unix::fs::OpenOptionsExt;
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
    {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(StoreError::Io {
            context: format!("creating {}", path.display()),
            source: Arc::new(e),
        }),
    }
}

fn open_connection(path: &Path) -> Result<Connection, StoreError> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_URI
            | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    configure(&conn)?;
    Ok(conn)
}

fn open_reader(path: &Path) -> Result<Connection, StoreError> {
    let conn = open_connection(path)?;
    conn.execute_batch("PRAGMA query_only = ON;")?;
    Ok(conn)
}

/// Applies every migration newer than the recorded version, refusing a newer-than-known schema.
fn migrate(conn: &mut Connection) -> Result<(), StoreError> {
    let found: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    if found > SCHEMA_VERSION {
        return Err(StoreError::NewerSchema {
            found,
            known: SCHEMA_VERSION,
        });
    }
    // Schema v11 rebuilds the short-keyword index from the memories with the store's own
    // tokenizer.
    conn.create_scalar_function(
        "short_grams",
        1,
        FunctionFlags::SQLITE_UTF8 | FunctionFlags::SQLITE_DETERMINISTIC,
        |ctx| Ok(super::search::short_grams(&ctx.get::<String>(0)?)),
    )?;
    for (index, sql) in MIGRATIONS.iter().enumerate() {
        let version = index as i64 + 1;
        if version <= found {
            continue;
        }
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        // Re-check under the write lock: another process may have migrated meanwhile.
        let now: i64 = tx.query_row("PRAGMA user_version", [], |r| r.get(0))?;
        if now >= version {
            continue;
        }
        tx.execute_batch(sql)?;
        tx.execute_batch(&format!("PRAGMA user_version = {version}"))?;
        tx.commit()?;
        tracing::info!(version, "applied store migration");
    }
    Ok(())
}

fn in_savepoint<R>(
    conn: &Connection,
    f: impl FnOnce(&Connection) -> Result<R, StoreError>,
) -> Result<R, StoreError> {
    conn.prepare_cached("SAVEPOINT job")?.execute([])?;
    let result = match catch_unwind(AssertUnwindSafe(|| f(conn))) {
        Ok(r) => r,
        Err(_) => Err(StoreError::Internal("a store write panicked".into())),
    };
    if result.is_err() {
        conn.prepare_cached("ROLLBACK TO job")?.execute([])?;
    }
    conn.prepare_cached("RELEASE job")?.execute([])?;
    result
}

fn writer_loop(conn: Connection, rx: std_mpsc::Receiver<Msg>, hooks: WriterHooks) {
    let after = hooks.after_batch;
    let mut pending: Vec<Job> = Vec::new();
    let mut deferred = Deferred::default();
    // Idle work may be left (set by every batch, cleared when a step finds nothing), and whether
    // the last thing done was an idle step (then the next one follows shortly).
    let (mut idle_work, mut stepping) = (false, false);
    loop {
        let idle_wait = idle_work.then_some(if stepping { IDLE_STEP_GAP } else { IDLE_AFTER });
        let wait = match (idle_wait, deferred.due_in()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let first = match wait {
            Some(wait) => match rx.recv_timeout(wait) {
                Ok(msg) => msg,
                Err(std_mpsc::RecvTimeoutError::Timeout) => {
                    if deferred.due_in() == Some(Duration::ZERO) {
                        deferred.take_into(&mut pending);
                        run_batch(&conn, &mut pending, after);
                        (idle_work, stepping) = (true, false);
                    } else {
                        idle_work = idle_step(&conn, hooks.idle);
                        stepping = idle_work;
                    }
                    continue;
                }
                Err(std_mpsc::RecvTimeoutError::Disconnected) => break,
            },
            None => match rx.recv() {
                Ok(msg) => msg,
                Err(_) => break,
            },
        };
        let mut next = Some(first);
        while let Some(msg) = next.take() {
            match msg {
                Msg::Deferred(job) => deferred.hold(job),
                Msg::Job(job) => {
                    deferred.take_into(&mut pending);
                    pending.push(job);
                }
                Msg::Checkpoint(ack) => {
                    deferred.take_into(&mut pending);
                    pending.push(settle_job(hooks.settle));
                    run_batch(&conn, &mut pending, after);
                    let _ = ack.send(checkpoint(&conn));
                }
                Msg::Vacuum(ack) => {
                    deferred.take_into(&mut pending);
                    pending.push(settle_job(hooks.settle));
                    run_batch(&conn, &mut pending, after);
                    let result = conn
                        .execute_batch("VACUUM")
                        .map_err(StoreError::from)
                        .and_then(|()| checkpoint(&conn));
                    let _ = ack.send(result);
                }
                Msg::Close(ack) => {
                    deferred.take_into(&mut pending);
                    pending.push(settle_job(hooks.settle));
                    run_batch(&conn, &mut pending, after);
                    let result = checkpoint(&conn);
                    drop(conn);
                    let _ = ack.send(result);
                    return;
                }
            }
            if pending.len() < MAX_BATCH && deferred.jobs.len() < MAX_BATCH {
                next = rx.try_recv().ok();
            }
        }
        if deferred.jobs.len() >= MAX_BATCH {
            deferred.take_into(&mut pending);
        }
        if !pending.is_empty() {
            run_batch(&conn, &mut pending, after);
            (idle_work, stepping) = (true, false);
        }
    }
    // Every sender is gone (the store was dropped without `close`): commit what is held.
    deferred.take_into(&mut pending);
    run_batch(&conn, &mut pending, after);
}

/// The job that runs [`WriterHooks::settle`] in a savepoint of its own; its failure is logged.
fn settle_job(settle: fn(&Connection) -> Result<(), StoreError>) -> Job {
    Box::new(move |conn| {
        let result = match conn {
            Ok(conn) => in_savepoint(conn, settle),
            Err(e) => Err(e.clone()),
        };
        Box::new(move |commit_error| {
            if let Some(error) = result.err().as_ref().or(commit_error) {
                tracing::warn!(%error, "store: could not settle before a checkpoint or close");
            }
        })
    })
}

/// Deferred jobs the writer holds, and when the oldest arrived.
#[derive(Default)]
struct Deferred {
    jobs: Vec<Job>,
    since: Option<Instant>,
}

impl Deferred {
    fn hold(&mut self, job: Job) {
        self.since.get_or_insert_with(Instant::now);
        self.jobs.push(job);
    }

    /// How long until the oldest held job must be committed (zero when overdue); `None` when
    /// nothing is held.
    fn due_in(&self) -> Option<Duration> {
        self.since
            .map(|since| DEFER_AT_MOST.saturating_sub(since.elapsed()))
    }

    /// Moves every held job to the end of `pending`. The writer does so before each job that is
    /// waited for, so everything held arrived after what `pending` holds: queue order is kept.
    fn take_into(&mut self, pending: &mut Vec<Job>) {
        self.since = None;
        pending.append(&mut self.jobs);
    }
}

/// One step of idle work; `false` when nothing is left or the step failed (logged: the next
/// batch tries again).
fn idle_step(conn: &Connection, step: fn(&Connection) -> Result<bool, StoreError>) -> bool {
    guarded(conn, "idle index work", || step(conn)).unwrap_or(false)
}

/// Runs one of the writer's own steps outside any batch (idle work, the step after a batch):
/// a step that fails or panics half-way is rolled back, so it never leaves its transaction open
/// for the next batch, and logged as `what`. `None` when it failed.
fn guarded<T>(
    conn: &Connection,
    what: &'static str,
    step: impl FnOnce() -> Result<T, StoreError>,
) -> Option<T> {
    let outcome = catch_unwind(AssertUnwindSafe(step));
    if !matches!(outcome, Ok(Ok(_))) && !conn.is_autocommit() {
        let _ = conn.execute_batch("ROLLBACK");
    }
    match outcome {
        Ok(Ok(value)) => Some(value),
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "store: {what} failed");
            None
        }
        Err(_) => {
            tracing::error!("store: {what} panicked");
            None
        }
    }
}

/// The checkpointer: a thread with its own connection that runs a passive checkpoint (never
/// waiting for the writer or the readers) each time the writer says the WAL has grown past
/// `CHECKPOINT_FRAMES`, and records in `copied` how many frames of the WAL are in the database
/// now. It ends when the writer's connection, holding the only sender, is closed. Explicit
/// checkpoints (backups, shutdown) still run on the writer, as `TRUNCATE`.
///
/// Copying is not enough to keep the WAL short: SQLite starts the WAL again from its beginning
/// only when a write transaction begins while every frame is copied, and under steady saves the
/// writer has always committed more by then. So the WAL grew by every frame ever written (256 MB
/// in seconds under the bench's saves), each new block of it zeroed by the file system on the
/// save path. Past `RESTART_FRAMES` the checkpointer runs round after round, and once it is
/// within `RESTART_LAG` frames of the end the writer copies those itself, right after its
/// commit: its next batch then writes the WAL from the start again, over blocks the file
/// already has.
fn start_checkpointer(
    path: &Path,
    copied: Arc<AtomicI32>,
) -> Result<std_mpsc::SyncSender<()>, StoreError> {
    let conn = open_connection(path)?;
    let (tx, rx) = std_mpsc::sync_channel::<()>(1);
    std::thread::Builder::new()
        .name("store-ckpt".into())
        .spawn(move || {
            while rx.recv().is_ok() {
                // (busy, frames in the WAL, frames copied)
                match conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| r.get::<_, i32>(2)) {
                    Ok(done) => copied.store(done, Ordering::Relaxed),
                    Err(e) => tracing::warn!(error = %e, "store: background checkpoint failed"),
                }
            }
        })
        .map_err(|e| StoreError::Io {
            context: "spawning the store checkpoint thread".into(),
            source: Arc::new(e),
        })?;
    Ok(tx)
}

/// Copies the whole WAL into the database and truncates it, so the database file alone holds
/// every commit (a backup habit copies only the `.db`). SQLite reports a checkpoint it could
/// not finish as a row with `busy = 1` rather than an error, for example while the background
/// checkpointer runs a passive one; that row used to be ignored, leaving the whole WAL beside
/// the database after `close`. It is tried again until it finishes, for up to `BUSY_TIMEOUT`.
fn checkpoint(conn: &Connection) -> Result<(), StoreError> {
    let started = Instant::now();
    loop {
        // (busy, frames in the WAL, frames copied): TRUNCATE leaves (0, 0, 0).
        let (busy, log, copied): (i32, i32, i32) =
            conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?))
            })?;
        if busy == 0 && log == copied {
            return Ok(());
        }
        if started.elapsed() >= BUSY_TIMEOUT {
            return Err(StoreError::Internal(format!(
                "the WAL checkpoint stayed busy for {} s ({copied} of {log} frames copied)",
                BUSY_TIMEOUT.as_secs()
            )));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The step after each batch ([`WriterHooks::after_batch`]).
type AfterBatch = fn(&Connection) -> Result<(), StoreError>;

/// Runs `jobs` in one transaction, answers each caller once it has committed, then runs
/// `after` in a transaction of its own.
fn run_batch(conn: &Connection, jobs: &mut Vec<Job>, after: AfterBatch) {
    if jobs.is_empty() {
        return;
    }
    let size = jobs.len();
    let begin = conn
        .prepare_cached("BEGIN IMMEDIATE")
        .and_then(|mut s| s.execute([]));
    if let Err(e) = begin {
        let err = StoreError::from(e);
        tracing::error!(error = %err, "store: could not begin a write transaction");
        for job in jobs.drain(..) {
            job(Err(&err))(None);
        }
        return;
    }
    let completions: Vec<Completion> = jobs.drain(..).map(|job| job(Ok(conn))).collect();
    let commit = conn
        .prepare_cached("COMMIT")
        .and_then(|mut s| s.execute([]))
        .map_err(StoreError::from);
    match commit {
        Ok(_) => {
            tracing::trace!(size, "store: committed write batch");
            for done in completions {
                done(None);
            }
        }
        Err(err) => {
            tracing::error!(error = %err, size, "store: write batch failed to commit");
            let _ = conn.execute_batch("ROLLBACK");
            for done in completions {
                done(Some(&err));
            }
            return;
        }
    }
    after_batch(conn, after);
}

/// The step after a committed batch, in a transaction of its own: committed when it succeeds,
/// rolled back and logged when it fails or panics (the next batch's step tries again).
fn after_batch(conn: &Connection, after: AfterBatch) {
    guarded(conn, "the step after a write batch", || {
        conn.prepare_cached("BEGIN IMMEDIATE")?.execute([])?;
        after(conn)?;
        conn.prepare_cached("COMMIT")?.execute([])?;
        Ok(())
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nothing(_: &Connection) -> Result<(), StoreError> {
        Ok(())
    }

    fn no_idle_work(_: &Connection) -> Result<bool, StoreError> {
        Ok(false)
    }

    const HOOKS: WriterHooks = WriterHooks {
        prepare: nothing,
        after_batch: nothing,
        idle: no_idle_work,
        settle: nothing,
    };

    /// A database with one table `t (n)`, and its path.
    #[tokio::test]
    async fn a_new_database_and_its_wal_are_readable_by_their_owner_only() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("new.db");
        let store = crate::store::Store::open(&path).await.unwrap();
        for file in ["new.db", "new.db-wal", "new.db-shm"] {
            let mode = std::fs::metadata(dir.path().join(file))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600, "{file}: {mode:o}");
        }
        store.close().await.unwrap();
        // An existing file keeps its mode.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
        let store = crate::store::Store::open(&path).await.unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o640);
        store.close().await.unwrap();
    }

    async fn open_with_table(dir: &tempfile::TempDir) -> (Db, PathBuf) {
        let path = dir.path().join("t.db");
        let db = Db::open_blocking(&path, HOOKS).unwrap();
        db.write(|c| Ok(c.execute_batch("CREATE TABLE t (n INTEGER)")?))
            .await
            .unwrap();
        (db, path)
    }

    /// Queues the detached insert of `n` into `t`.
    fn insert_detached(db: &Db, n: i64) {
        db.write_detached("test", move |c| {
            c.execute("INSERT INTO t (n) VALUES (?1)", [n])?;
            Ok(())
        });
    }

    fn rows(reader: &Connection) -> i64 {
        reader
            .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
            .unwrap()
    }

    /// Detached (bookkeeping) writes wait: they are not committed on their own before
    /// `DEFER_AT_MOST`, then all at once; a write that is waited for takes them along at once,
    /// ahead of itself.
    #[tokio::test]
    async fn detached_writes_wait_for_the_next_batch_or_a_second() {
        let dir = tempfile::tempdir().unwrap();
        let (db, path) = open_with_table(&dir).await;
        let reader = open_reader(&path).unwrap();

        let sent = Instant::now();
        for n in 0..50 {
            insert_detached(&db, n);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        let early = rows(&reader);
        assert!(
            early == 0 || sent.elapsed() >= DEFER_AT_MOST,
            "{early} deferred rows committed after {:?}",
            sent.elapsed()
        );
        let deadline = Instant::now() + Duration::from_secs(10);
        let seen = loop {
            let n = rows(&reader);
            if n != 0 || Instant::now() > deadline {
                break n;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        assert_eq!(seen, 50, "held jobs commit together, on their own");
        assert!(sent.elapsed() >= DEFER_AT_MOST);

        insert_detached(&db, 50);
        let max: i64 = db
            .write(|c| Ok(c.query_row("SELECT max(n) FROM t", [], |r| r.get(0))?))
            .await
            .unwrap();
        assert_eq!(
            max, 50,
            "the held job ran first, in the awaited write's batch"
        );
        assert_eq!(rows(&reader), 51);
    }

    /// A detached job queued between two awaited writes runs between them: held jobs join the
    /// batch at the place they were queued, not ahead of jobs queued before them.
    #[tokio::test]
    async fn held_jobs_keep_their_place_in_the_queue() {
        use futures_util::FutureExt;

        let dir = tempfile::tempdir().unwrap();
        let (db, path) = open_with_table(&dir).await;
        // Keep the writer busy so that the next three arrive while it works, and are drained
        // into one batch together.
        let (started_tx, started_rx) = std_mpsc::channel();
        let busy = db.write(move |_| {
            let _ = started_tx.send(());
            std::thread::sleep(Duration::from_millis(200));
            Ok(())
        });
        assert!(busy.now_or_never().is_none(), "queued, still running");
        started_rx.recv_timeout(Duration::from_secs(10)).unwrap();
        // Each write is queued when first polled; its future is then dropped (the job runs).
        let queue_awaited = |n: i64| {
            let queued = db.write(move |c| {
                c.execute("INSERT INTO t (n) VALUES (?1)", [n])?;
                Ok(())
            });
            assert!(queued.now_or_never().is_none());
        };
        queue_awaited(1);
        insert_detached(&db, 2);
        queue_awaited(3);
        // A checkpoint runs after every job queued before it.
        db.checkpoint().await.unwrap();
        let order: String = open_reader(&path)
            .unwrap()
            .query_row(
                "SELECT group_concat(n) FROM (SELECT n FROM t ORDER BY rowid)",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(order, "1,2,3");
    }

    /// An idle step that panics inside the transaction it opened leaves none open: the next
    /// batch begins and commits as usual.
    #[tokio::test]
    async fn a_panicking_idle_step_leaves_no_transaction_open() {
        let dir = tempfile::tempdir().unwrap();
        let hooks = WriterHooks {
            idle: |c| {
                c.execute_batch("BEGIN IMMEDIATE")?;
                panic!("injected idle failure")
            },
            ..HOOKS
        };
        let path = dir.path().join("t.db");
        let db = Db::open_blocking(&path, hooks).unwrap();
        db.write(|c| Ok(c.execute_batch("CREATE TABLE t (n INTEGER)")?))
            .await
            .unwrap();
        // The idle step runs `IDLE_AFTER` after the last batch.
        tokio::time::sleep(IDLE_AFTER + Duration::from_millis(300)).await;
        db.write(|c| Ok(c.execute("INSERT INTO t (n) VALUES (1)", [])?))
            .await
            .unwrap();
        assert_eq!(rows(&open_reader(&path).unwrap()), 1);
        db.close().await.unwrap();
    }

    /// The step after a batch runs in a transaction of its own once the batch has committed:
    /// when it fails or panics after writing, only its own writes are undone; the batch stays
    /// committed, its caller is answered with its result, and the writer goes on.
    #[tokio::test]
    async fn a_failing_step_after_a_batch_undoes_only_itself() {
        fn write_then(c: &Connection) -> Result<(), StoreError> {
            let has_t: bool = c.query_row(
                "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE name = 't')",
                [],
                |r| r.get(0),
            )?;
            if has_t {
                c.execute("INSERT INTO t (n) VALUES (-1)", [])?;
            }
            Ok(())
        }
        let failing = WriterHooks {
            after_batch: |c| {
                write_then(c)?;
                Err(StoreError::Invalid("injected after-batch failure".into()))
            },
            ..HOOKS
        };
        let panicking = WriterHooks {
            after_batch: |c| {
                write_then(c)?;
                panic!("injected after-batch panic")
            },
            ..HOOKS
        };
        for (name, hooks) in [("failing", failing), ("panicking", panicking)] {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("t.db");
            let db = Db::open_blocking(&path, hooks).unwrap();
            db.write(|c| Ok(c.execute_batch("CREATE TABLE t (n INTEGER)")?))
                .await
                .unwrap();
            for n in 1..=3 {
                let answer = db
                    .write(move |c| Ok(c.execute("INSERT INTO t (n) VALUES (?1)", [n])?))
                    .await;
                assert_eq!(answer.unwrap(), 1, "{name}: the caller gets its result");
            }
            let reader = open_reader(&path).unwrap();
            assert_eq!(rows(&reader), 3, "{name}: every batch committed");
            let after: i64 = reader
                .query_row("SELECT count(*) FROM t WHERE n < 0", [], |r| r.get(0))
                .unwrap();
            assert_eq!(after, 0, "{name}: the failed steps' writes are undone");
            db.close().await.unwrap();
        }
    }

    /// A batch's callers have their answers before the step after it runs: the step here waits
    /// (up to 5 s) for the caller to say it was answered, which it could never do if the step
    /// ran before the answers were sent.
    #[tokio::test]
    async fn the_step_after_a_batch_runs_once_its_callers_are_answered() {
        use std::sync::atomic::{AtomicBool, AtomicU8};
        static ANSWERED: AtomicBool = AtomicBool::new(false);
        // 0: no step yet; 1: the first step saw the caller answered; 2: it did not.
        static FIRST_STEP_SAW: AtomicU8 = AtomicU8::new(0);
        let hooks = WriterHooks {
            after_batch: |c| {
                let inserted: bool =
                    c.query_row("SELECT EXISTS (SELECT 1 FROM t WHERE n = 7)", [], |r| {
                        r.get(0)
                    })?;
                if inserted {
                    let waited = Instant::now();
                    while !ANSWERED.load(Ordering::SeqCst) && waited.elapsed() < BUSY_TIMEOUT {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    // The first step after the insert decides (later batches' steps see it too).
                    let seen = if ANSWERED.load(Ordering::SeqCst) {
                        1
                    } else {
                        2
                    };
                    let _ = FIRST_STEP_SAW.compare_exchange(
                        0,
                        seen,
                        Ordering::SeqCst,
                        Ordering::SeqCst,
                    );
                }
                Ok(())
            },
            ..HOOKS
        };
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open_blocking(&dir.path().join("t.db"), hooks).unwrap();
        db.write(|c| Ok(c.execute_batch("CREATE TABLE t (n INTEGER)")?))
            .await
            .unwrap();
        db.write(|c| Ok(c.execute("INSERT INTO t (n) VALUES (7)", [])?))
            .await
            .unwrap();
        ANSWERED.store(true, Ordering::SeqCst);
        // Close queues behind the step, so the step has run when it returns.
        db.close().await.unwrap();
        assert_eq!(FIRST_STEP_SAW.load(Ordering::SeqCst), 1);
    }

    /// Closing commits what is held.
    #[tokio::test]
    async fn close_commits_held_detached_writes() {
        let dir = tempfile::tempdir().unwrap();
        let (db, path) = open_with_table(&dir).await;
        insert_detached(&db, 1);
        db.close().await.unwrap();
        assert_eq!(rows(&open_reader(&path).unwrap()), 1);
    }
}
