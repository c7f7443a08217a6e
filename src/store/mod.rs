//! Persistence for memories, reminders, model usage, the inbox and the catch-up cursors: one async API ([`Store`]) over SQLite.
//!
//! * `db`: connection setup (WAL, `busy_timeout`, foreign keys, `synchronous = NORMAL`: durable
//!   against process crashes, may lose the last commits on power loss; see `db`), embedded
//!   migrations with the schema version in `PRAGMA user_version` (a newer schema refuses to open),
//!   the batching writer thread and the pooled blocking readers.
//! * `memories`: append-only memory rows, patch records folded into the current view.
//! * `memory_api`: the [`Store`] methods over `memories`, `search` and `vectors` (save,
//!   patch, search, stats, export, the prompt's memories, the embedding queue).
//! * `search`: FTS5 trigram search plus a CJK unigram/bigram index for 1–2 character keywords,
//!   with all user text quoted so it can never become FTS5 or SQL syntax.
//! * `reminders`: reminder life cycle (pending → delivered | cancelled | failed).
//! * `reminder_api`: the [`Store`] methods over `reminders` (and the scheduler's change signal).
//! * `maintenance`: what the memory maintenance job reads (due workspaces, a run's candidates)
//!   and its run records.
//! * `llm_usage`: tokens the model gateway metered, per workspace and UTC day (budgets);
//!   `llm_usage_place` the same per place (a place's own limit).
//! * `inbox`: the platform messages handed to the router and where each stands (queued,
//!   answered, failed, skipped), so none is answered twice or lost across restarts.
//! * `continuity`: per conversation, the folder and session id its next agent resumes from.
//! * [`erasure`]: a user's rows erased from every table that holds them, what is kept about a
//!   user counted, and the record of privacy actions (`privacy_log`).
//! * [`activity`]: per user and day the tokens and messages, and messages per hour (the
//!   console's *Users* and *Conversations*).
//! * [`controls`]: the operator's decisions about a user (blocked, their own token budget),
//!   kept in memory for the router and the budget.
//! * `cursors`: per platform feed, the newest message seen and when the bot was last addressed
//!   there, so a start or a fresh connection can fetch what arrived meanwhile.
//! * [`import`]: `import jsonl <dir>` of an AIr-Friends data tree.
//! * [`backup`]: `backup <file>`, a consistent copy of the database beside the running daemon.
//! * [`owner`]: the daemon's lock on its database, so a second daemon or a `restore` is
//!   refused while it runs.
//! * [`restore`]: `restore <backup>`, checked, with the old database kept aside.
//!
//! `Store` is cheap to clone (an `Arc`), `Send + Sync`, and never runs SQLite on a tokio worker.
//! Times are stored with millisecond precision (UTC).

pub mod activity;
pub mod analytics;
pub mod backup;
mod continuity;
pub mod controls;
mod cursors;
mod db;
pub mod erasure;
pub mod import;
mod inbox;
mod llm_usage;
mod maintenance;
mod memories;
mod memory_api;
pub mod owner;
mod reminder_api;
mod reminders;
pub mod restore;
mod schedules;
mod search;
mod types;
pub mod vectors;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use chrono::{DateTime, NaiveDate, TimeZone, Utc};
use rand::RngExt;
use tokio::sync::watch;

use analytics::{SkillCallRow, SkillCallSummary, WorkspaceOverview};

pub use continuity::ContinuityRecord;
pub use cursors::CatchUpCursor;
pub use db::SCHEMA_VERSION;
pub use inbox::{InboxRecord, InboxRow, InboxState, QueuedMessage, Unanswered};
pub use llm_usage::{DayUsage, LlmUsage, VoiceUsage};
pub use maintenance::{MaintenanceRun, MaintenanceSummary};
pub use schedules::{
    INTERRUPTED, RUNNING, RunEnd, RunTrigger, ScheduleRun, ScheduleState, ScheduleSummary,
};
pub use types::{
    ExportFilter, Importance, MAX_CONTENT_CHARS, MAX_REMINDER_CHARS, Memory, MemoryPatch,
    MemoryStats, NewMemory, NewReminder, PatchRecord, PromptMemories, Recurrence, Reminder,
    ReminderState, Scope, ScoredMemory, Visibility, VisibilityStats, WorkspaceKey,
};

/// Errors of the store. Callers branch on `NotFound`, `InvalidReference`, `LimitReached` and
/// `Invalid` (user-facing); the rest are internal failures.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// No such memory/reminder for this caller (also: not visible in this scope, not the owner,
    /// or a reminder that is no longer pending).
    #[error("not found")]
    NotFound,
    /// A patch referenced memory ids that do not exist in the workspace (or are not visible).
    #[error("unknown memory ids: {}", ids.join(", "))]
    InvalidReference {
        /// The ids that were not found.
        ids: Vec<String>,
    },
    /// The user already has the maximum number of pending reminders.
    #[error("limit of {limit} pending reminders reached")]
    LimitReached {
        /// The limit in force.
        limit: u32,
    },
    /// The database was written by a newer air-friends; refusing to touch it.
    #[error(
        "the database has schema version {found} but this air-friends only knows up to {known}; \
         upgrade air-friends (or restore a backup) instead of downgrading"
    )]
    NewerSchema {
        /// Version recorded in the file.
        found: i64,
        /// Newest version this build knows.
        known: i64,
    },
    /// Input rejected by validation; the message says what is wrong.
    #[error("invalid input: {0}")]
    Invalid(String),
    /// SQLite failed.
    #[error("database error: {0}")]
    Sqlite(#[source] Arc<rusqlite::Error>),
    /// File system failure while opening.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The cause.
        #[source]
        source: Arc<std::io::Error>,
    },
    /// The store has been closed.
    #[error("the store is closed")]
    Closed,
    /// An invariant failed (corrupt row, panicked task); details for the log.
    #[error("internal store error: {0}")]
    Internal(String),
}

impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> Self {
        StoreError::Sqlite(Arc::new(e))
    }
}

/// Milliseconds since the Unix epoch.
pub(crate) fn to_ms(t: DateTime<Utc>) -> i64 {
    t.timestamp_millis()
}

/// Inverse of [`to_ms`].
pub(crate) fn from_ms(ms: i64) -> Result<DateTime<Utc>, StoreError> {
    Utc.timestamp_millis_opt(ms)
        .single()
        .ok_or_else(|| StoreError::Internal(format!("timestamp out of range: {ms}")))
}

/// A fresh id: `prefix` + `_` + the time in milliseconds (9 base-36 digits, so ids sort by
/// creation and append to the id index) + 14 random characters of `[0-9a-z]` (~72 bits).
pub(crate) fn new_id(prefix: &str) -> String {
    const ALPHABET: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut rng = rand::rng();
    let mut id = String::with_capacity(prefix.len() + 24);
    id.push_str(prefix);
    id.push('_');
    let mut t = u64::try_from(Utc::now().timestamp_millis()).unwrap_or(0);
    let mut digits = [b'0'; 9];
    for d in digits.iter_mut().rev() {
        *d = ALPHABET[(t % 36) as usize];
        t /= 36;
    }
    id.extend(digits.iter().map(|&b| char::from(b)));
    for _ in 0..14 {
        id.push(char::from(ALPHABET[rng.random_range(0..ALPHABET.len())]));
    }
    id
}

/// Handle to the database. Clone freely; all clones share one writer thread and reader pool.
#[derive(Clone)]
pub struct Store {
    db: Arc<db::Db>,
    /// Bumped whenever the set of pending reminders changes (create, cancel, import), so the
    /// reminder scheduler can re-arm its timer instead of polling.
    reminders_changed: Arc<watch::Sender<u64>>,
    /// The operator's decisions about users, in memory (`controls`).
    controls: controls::UserControls,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").finish_non_exhaustive()
    }
}

impl Store {
    /// Opens the database at `path`, creating the file and its parent directory if needed,
    /// switching to WAL and applying migrations. Fails with [`StoreError::NewerSchema`] when
    /// the file comes from a newer air-friends.
    pub async fn open(path: &Path) -> Result<Store, StoreError> {
        let path = path.to_owned();
        let hooks = db::WriterHooks {
            prepare: search::prepare_writer,
            after_batch: search::index_batch,
            idle: search::idle_step,
            settle: search::index_all,
        };
        let db = tokio::task::spawn_blocking(move || db::Db::open_blocking(&path, hooks))
            .await
            .map_err(|e| StoreError::Internal(format!("open task failed: {e}")))??;
        let store = Store {
            db: Arc::new(db),
            reminders_changed: Arc::new(watch::channel(0).0),
            controls: controls::UserControls::default(),
        };
        store.load_controls().await?;
        Ok(store)
    }

    /// Indexes the memories waiting for the full-text indexes, then checkpoints the WAL into the
    /// main database file (e.g. before a backup).
    pub async fn flush(&self) -> Result<(), StoreError> {
        self.db.checkpoint().await
    }

    /// Graceful shutdown: indexes the memories waiting for the full-text indexes, commits queued
    /// writes, checkpoints, and stops the writer thread. Writes through any clone fail with
    /// [`StoreError::Closed`] afterwards.
    pub async fn close(self) -> Result<(), StoreError> {
        self.db.close().await
    }

    // ---- analytics (`air-friends stats`) ---------------------------------------------------

    /// Adds hourly skill-call counts (the Skill API's call log).
    pub async fn add_skill_calls(&self, rows: Vec<SkillCallRow>) -> Result<(), StoreError> {
        self.db
            .write(move |c| analytics::add_skill_calls(c, &rows))
            .await
    }

    /// Every skill's calls in the hours since `since` (the hour holding `since` included).
    pub async fn skill_calls_since(
        &self,
        since: DateTime<Utc>,
    ) -> Result<BTreeMap<String, SkillCallSummary>, StoreError> {
        self.db
            .read(move |c| analytics::skill_calls_since(c, since))
            .await
    }

    /// Memories and reminders by state, per workspace.
    pub async fn workspace_overview(
        &self,
    ) -> Result<BTreeMap<String, WorkspaceOverview>, StoreError> {
        self.db.read(analytics::workspaces).await
    }

    /// The gateway's tokens per UTC day since `since`, all workspaces, oldest first.
    pub async fn tokens_per_day(
        &self,
        since: NaiveDate,
    ) -> Result<Vec<(NaiveDate, LlmUsage)>, StoreError> {
        self.db
            .read(move |c| analytics::tokens_per_day(c, since))
            .await
    }

    /// Voice (transcribed, spoken) per UTC day since `since`, all workspaces, oldest first;
    /// days without any left out.
    pub async fn voice_per_day(
        &self,
        since: NaiveDate,
    ) -> Result<Vec<(NaiveDate, VoiceUsage)>, StoreError> {
        self.db
            .read(move |c| analytics::voice_per_day(c, since))
            .await
    }

    // ---- memory maintenance ---------------------------------------------------------------

    /// Workspaces due for memory maintenance: more than `min_enabled` enabled memories and no
    /// run started at or after `not_since`; most memories first, at most `limit`.
    pub async fn maintenance_due(
        &self,
        min_enabled: u64,
        not_since: DateTime<Utc>,
        limit: u32,
    ) -> Result<Vec<WorkspaceKey>, StoreError> {
        self.db
            .read(move |c| maintenance::due_workspaces(c, min_enabled, not_since, limit))
            .await
    }

    /// A maintenance run's candidates: enabled memories of `ws` with `visibility` created
    /// before `created_before`, oldest first, at most `limit`, and how many there are.
    pub async fn maintenance_candidates(
        &self,
        ws: &WorkspaceKey,
        visibility: Visibility,
        created_before: DateTime<Utc>,
        limit: u32,
    ) -> Result<(Vec<Memory>, u64), StoreError> {
        let ws = ws.clone();
        self.db
            .read(move |c| maintenance::candidates(c, &ws, visibility, created_before, limit))
            .await
    }

    /// Records a finished maintenance run.
    pub async fn record_maintenance_run(&self, run: MaintenanceRun) -> Result<(), StoreError> {
        self.db.write(move |c| maintenance::record(c, &run)).await
    }

    /// Per workspace and visibility, the maintenance runs started at or after `since`.
    pub async fn maintenance_summary(
        &self,
        since: DateTime<Utc>,
    ) -> Result<Vec<MaintenanceSummary>, StoreError> {
        self.db.read(move |c| maintenance::summary(c, since)).await
    }

    /// The maintenance runs of `ws`, oldest first.
    pub async fn maintenance_runs(
        &self,
        ws: &WorkspaceKey,
    ) -> Result<Vec<MaintenanceRun>, StoreError> {
        let ws = ws.clone();
        self.db.read(move |c| maintenance::runs(c, &ws)).await
    }

    // ---- model usage ----------------------------------------------------------------------

    /// Adds one metered model response (`input` + `output` tokens, one request) to the usage
    /// of `ws` on the UTC `day`.
    pub async fn add_llm_usage(
        &self,
        ws: &WorkspaceKey,
        day: NaiveDate,
        input: u64,
        output: u64,
    ) -> Result<(), StoreError> {
        let ws = ws.clone();
        self.db
            .write(move |c| llm_usage::add(c, &ws, day, input, output))
            .await
    }

    /// Every day of model and voice usage of `ws`, oldest first (an export of the user's data).
    pub async fn usage_days(&self, ws: &WorkspaceKey) -> Result<Vec<DayUsage>, StoreError> {
        let ws = ws.clone();
        self.db.read(move |c| llm_usage::days_of(c, &ws)).await
    }

    /// Adds one metered model response of a session in `place` (a `places:` rule's name, or
    /// `default`) to the usage of `ws` on the UTC `day`, overall and in that place, in one
    /// write.
    pub async fn add_llm_usage_in(
        &self,
        ws: &WorkspaceKey,
        place: &str,
        day: NaiveDate,
        input: u64,
        output: u64,
    ) -> Result<(), StoreError> {
        let (ws, place) = (ws.clone(), place.to_owned());
        self.db
            .write(move |c| {
                llm_usage::add(c, &ws, day, input, output)?;
                llm_usage::add_in_place(c, &ws, &place, day, input, output)
            })
            .await
    }

    /// Adds `voice` (audio transcribed or speech synthesised) to the usage of `ws` on the UTC
    /// `day`.
    pub async fn add_voice_usage(
        &self,
        ws: &WorkspaceKey,
        day: NaiveDate,
        voice: VoiceUsage,
    ) -> Result<(), StoreError> {
        let ws = ws.clone();
        self.db
            .write(move |c| llm_usage::add_voice(c, &ws, day, voice))
            .await
    }

    /// Adds `calls` MCP tool calls to the usage of `ws` on the UTC `day`.
    pub async fn add_mcp_calls(
        &self,
        ws: &WorkspaceKey,
        day: NaiveDate,
        calls: u64,
    ) -> Result<(), StoreError> {
        let ws = ws.clone();
        self.db
            .write(move |c| llm_usage::add_mcp_calls(c, &ws, day, calls))
            .await
    }

    /// MCP tool calls on the UTC `day` of `ws`.
    pub async fn mcp_calls_on(&self, day: NaiveDate, ws: &WorkspaceKey) -> Result<u64, StoreError> {
        let ws = ws.clone();
        self.db
            .read(move |c| llm_usage::mcp_calls_on(c, day, &ws))
            .await
    }

    /// Voice usage on the UTC `day` of `ws`, or of all workspaces together with `None`.
    pub async fn voice_usage_on(
        &self,
        day: NaiveDate,
        ws: Option<&WorkspaceKey>,
    ) -> Result<VoiceUsage, StoreError> {
        let ws = ws.cloned();
        self.db
            .read(move |c| llm_usage::voice_on(c, day, ws.as_ref()))
            .await
    }

    /// Usage on the UTC `day` of `ws` in `place`; zero when nothing was recorded.
    pub async fn llm_usage_in_place_on(
        &self,
        day: NaiveDate,
        ws: &WorkspaceKey,
        place: &str,
    ) -> Result<LlmUsage, StoreError> {
        let (ws, place) = (ws.clone(), place.to_owned());
        self.db
            .read(move |c| llm_usage::in_place_on(c, day, &ws, &place))
            .await
    }

    /// Usage on the UTC `day` of `ws`, or of all workspaces together with `None`; zero when
    /// nothing was recorded.
    pub async fn llm_usage_on(
        &self,
        day: NaiveDate,
        ws: Option<&WorkspaceKey>,
    ) -> Result<LlmUsage, StoreError> {
        let ws = ws.cloned();
        self.db
            .read(move |c| llm_usage::on(c, day, ws.as_ref()))
            .await
    }

    pub(crate) fn db(&self) -> &db::Db {
        &self.db
    }
}
