//! What the memory maintenance job reads and writes: the workspaces that are due (more enabled
//! memories than a threshold, no run within the interval), a run's candidates (enabled memories
//! of one visibility older than a cut-off, oldest first), and one record per run
//! (`maintenance_runs`).
//!
//! The due check reads the `memory_counts` rows kept by triggers (at most eight per workspace)
//! and the newest run per workspace, so it costs the same however many memories there are.

use rusqlite::{Connection, params};

use super::memories::{MEMORY_COLUMNS, memory_from_row};
use super::types::{Memory, Visibility, WorkspaceKey};
use super::{StoreError, from_ms, to_ms};
use chrono::{DateTime, Utc};

/// One finished maintenance run, as recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MaintenanceRun {
    /// The workspace maintained.
    pub workspace: WorkspaceKey,
    /// Which memories it consolidated.
    pub visibility: Visibility,
    /// When it started.
    pub started_at: DateTime<Utc>,
    /// When it ended.
    pub finished_at: DateTime<Utc>,
    /// How the run ended: `completed`, `skipped` (nothing old enough to consolidate),
    /// `over_budget`, `failed`, `timed_out` or `cancelled` (the maintenance job's `RunOutcome`).
    pub outcome: String,
    /// Whether saves and patches were only logged.
    pub dry_run: bool,
    /// Memories shown to the agent.
    pub read: u64,
    /// Summaries saved (or that would have been, in a dry run).
    pub saved: u64,
    /// Memories disabled (or that would have been).
    pub disabled: u64,
    /// Model tokens the run used (input + output, as the model gateway metered them).
    pub tokens: u64,
}

/// Workspaces with more than `min_enabled` enabled memories and no run started at or after
/// `not_since`, most memories first, at most `limit`.
pub(crate) fn due_workspaces(
    conn: &Connection,
    min_enabled: u64,
    not_since: DateTime<Utc>,
    limit: u32,
) -> Result<Vec<WorkspaceKey>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT c.workspace, sum(c.n) AS total FROM memory_counts c
         WHERE c.enabled = 1
         GROUP BY c.workspace
         HAVING total > ?1 AND NOT EXISTS (
             SELECT 1 FROM maintenance_runs r
             WHERE r.workspace = c.workspace AND r.started_at >= ?2)
         ORDER BY total DESC, c.workspace
         LIMIT ?3",
    )?;
    let rows = stmt.query_map(
        params![
            i64::try_from(min_enabled).unwrap_or(i64::MAX),
            to_ms(not_since),
            limit
        ],
        |r| r.get::<_, String>(0),
    )?;
    let mut out = Vec::new();
    for key in rows {
        match key?.parse() {
            Ok(ws) => out.push(ws),
            // A key the store itself wrote always parses; skip rather than stop the job.
            Err(e) => tracing::warn!(error = %e, "skipping a workspace key that does not parse"),
        }
    }
    Ok(out)
}

/// The enabled memories of `ws` with `visibility` created before `created_before`, oldest
/// first, at most `limit`, and how many there are in all.
pub(crate) fn candidates(
    conn: &Connection,
    ws: &WorkspaceKey,
    visibility: Visibility,
    created_before: DateTime<Utc>,
    limit: u32,
) -> Result<(Vec<Memory>, u64), StoreError> {
    let ws_text = ws.to_string();
    let cutoff = to_ms(created_before);
    let total: i64 = conn
        .prepare_cached(
            "SELECT count(*) FROM memories
             WHERE workspace = ?1 AND visibility = ?2 AND enabled = 1 AND created_at < ?3",
        )?
        .query_row(params![ws_text, visibility.as_str(), cutoff], |r| r.get(0))?;
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {MEMORY_COLUMNS} FROM memories m
         WHERE m.workspace = ?1 AND m.visibility = ?2 AND m.enabled = 1 AND m.created_at < ?3
         ORDER BY m.created_at, m.seq LIMIT ?4"
    ))?;
    let mut rows = stmt.query(params![ws_text, visibility.as_str(), cutoff, limit])?;
    let mut memories = Vec::new();
    while let Some(row) = rows.next()? {
        memories.push(memory_from_row(row)?);
    }
    Ok((memories, u64::try_from(total).unwrap_or(0)))
}

/// Records a finished run.
pub(crate) fn record(conn: &Connection, run: &MaintenanceRun) -> Result<(), StoreError> {
    let n = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    conn.prepare_cached(
        "INSERT INTO maintenance_runs (workspace, visibility, started_at, finished_at, outcome,
             dry_run, read, saved, disabled, tokens)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
    )?
    .execute(params![
        run.workspace.to_string(),
        run.visibility.as_str(),
        to_ms(run.started_at),
        to_ms(run.finished_at),
        run.outcome,
        run.dry_run,
        n(run.read),
        n(run.saved),
        n(run.disabled),
        n(run.tokens),
    ])?;
    Ok(())
}

/// The runs of `ws`, oldest first.
pub(crate) fn runs(
    conn: &Connection,
    ws: &WorkspaceKey,
) -> Result<Vec<MaintenanceRun>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT visibility, started_at, finished_at, outcome, dry_run, read, saved, disabled,
                tokens
         FROM maintenance_runs WHERE workspace = ?1 ORDER BY started_at, id",
    )?;
    let mut rows = stmt.query([ws.to_string()])?;
    let mut out = Vec::new();
    let u = |v: i64| u64::try_from(v).unwrap_or(0);
    while let Some(row) = rows.next()? {
        let visibility: String = row.get(0)?;
        out.push(MaintenanceRun {
            workspace: ws.clone(),
            visibility: visibility.parse()?,
            started_at: from_ms(row.get(1)?)?,
            finished_at: from_ms(row.get(2)?)?,
            outcome: row.get(3)?,
            dry_run: row.get(4)?,
            read: u(row.get(5)?),
            saved: u(row.get(6)?),
            disabled: u(row.get(7)?),
            tokens: u(row.get(8)?),
        });
    }
    Ok(out)
}

/// The runs of one workspace and visibility over a period, for `air-friends stats`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MaintenanceSummary {
    /// The workspace.
    pub workspace: WorkspaceKey,
    /// Which of its memories.
    pub visibility: Visibility,
    /// Runs started in the period (dry runs included).
    pub runs: u64,
    /// Of them, dry runs.
    pub dry_runs: u64,
    /// Summaries saved (dry runs: would have been).
    pub saved: u64,
    /// Memories disabled (dry runs: would have been).
    pub disabled: u64,
    /// Model tokens used.
    pub tokens: u64,
    /// How the newest run ended.
    pub last_outcome: String,
    /// When the newest run started.
    pub last_at: DateTime<Utc>,
}

/// Per workspace and visibility, the runs started at or after `since`, by workspace.
pub(crate) fn summary(
    conn: &Connection,
    since: DateTime<Utc>,
) -> Result<Vec<MaintenanceSummary>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT workspace, visibility, count(*), sum(dry_run), sum(saved), sum(disabled),
                sum(tokens), max(started_at),
                (SELECT outcome FROM maintenance_runs l
                 WHERE l.workspace = r.workspace AND l.visibility = r.visibility
                 ORDER BY l.started_at DESC, l.id DESC LIMIT 1)
         FROM maintenance_runs r WHERE started_at >= ?1
         GROUP BY workspace, visibility ORDER BY workspace, visibility DESC",
    )?;
    let mut rows = stmt.query([to_ms(since)])?;
    let u = |v: i64| u64::try_from(v).unwrap_or(0);
    let mut out = Vec::new();
    while let Some(row) = rows.next()? {
        let workspace: String = row.get(0)?;
        let visibility: String = row.get(1)?;
        out.push(MaintenanceSummary {
            workspace: workspace.parse()?,
            visibility: visibility.parse()?,
            runs: u(row.get(2)?),
            dry_runs: u(row.get(3)?),
            saved: u(row.get(4)?),
            disabled: u(row.get(5)?),
            tokens: u(row.get(6)?),
            last_at: from_ms(row.get(7)?)?,
            last_outcome: row.get(8)?,
        });
    }
    Ok(out)
}
