//! Reminder rows: creation under a per-user pending limit, cancellation by the owner, the due
//! queue used by the scheduler, and delivery bookkeeping (attempts, retries, lateness).
//!
//! Synchronous; `Store` runs writes on the single writer thread, which is what makes "count the
//! pending reminders, then insert" atomic.

use rusqlite::{Connection, OptionalExtension, Row, params};

use super::types::{Recurrence, Reminder, ReminderState, WorkspaceKey};
use super::{StoreError, from_ms, to_ms};

const REMINDER_COLUMNS: &str = "id, workspace, platform, user_id, message, scheduled_at, created_at, \
     state, attempts, next_attempt_at, delivered_at, late, last_error, recur_every, recur_zone, \
     recur_first, recur_until, recur_count, occurrences";

fn reminder_from_row(row: &Row<'_>) -> Result<Reminder, StoreError> {
    let workspace: String = row.get(1)?;
    let state: String = row.get(7)?;
    let delivered: Option<i64> = row.get(10)?;
    let attempts: i64 = row.get(8)?;
    Ok(Reminder {
        id: row.get(0)?,
        workspace: workspace.parse()?,
        platform: row.get(2)?,
        user_id: row.get(3)?,
        message: row.get(4)?,
        scheduled_at: from_ms(row.get(5)?)?,
        created_at: from_ms(row.get(6)?)?,
        state: state.parse()?,
        attempts: u32::try_from(attempts).unwrap_or(u32::MAX),
        next_attempt_at: from_ms(row.get(9)?)?,
        delivered_at: delivered.map(from_ms).transpose()?,
        late: row.get(11)?,
        last_error: row.get(12)?,
        recurrence: recurrence_of(row)?,
        occurrences: u32::try_from(row.get::<_, i64>(18)?).unwrap_or(0),
    })
}

/// The recurrence columns of a row (13–17); `None` for a one-time reminder.
fn recurrence_of(row: &Row<'_>) -> Result<Option<Recurrence>, StoreError> {
    let Some(every) = row.get::<_, Option<String>>(13)? else {
        return Ok(None);
    };
    let first: Option<i64> = row.get(15)?;
    let count: Option<i64> = row.get(17)?;
    Ok(Some(Recurrence {
        every: every.parse().map_err(StoreError::Internal)?,
        time_zone: row
            .get::<_, Option<String>>(14)?
            .unwrap_or_else(|| "UTC".to_owned()),
        first_at: from_ms(first.unwrap_or_default())?,
        until: row.get::<_, Option<i64>>(16)?.map(from_ms).transpose()?,
        count: count.and_then(|c| u32::try_from(c).ok()),
    }))
}

fn query_list(
    conn: &Connection,
    sql: &str,
    params: impl rusqlite::Params,
) -> Result<Vec<Reminder>, StoreError> {
    let mut stmt = conn.prepare_cached(sql)?;
    let mut rows = stmt.query(params)?;
    let mut out = Vec::new();
    while let Some(row) = rows.next()? {
        out.push(reminder_from_row(row)?);
    }
    Ok(out)
}

/// Loads a reminder by id.
pub(crate) fn get(conn: &Connection, id: &str) -> Result<Option<Reminder>, StoreError> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {REMINDER_COLUMNS} FROM reminders WHERE id = ?1"
    ))?;
    let mut rows = stmt.query([id])?;
    match rows.next()? {
        Some(row) => Ok(Some(reminder_from_row(row)?)),
        None => Ok(None),
    }
}

fn must_get(conn: &Connection, id: &str) -> Result<Reminder, StoreError> {
    get(conn, id)?.ok_or(StoreError::NotFound)
}

/// A full reminder row to insert (new, or imported with its history).
#[derive(Debug, Clone)]
pub(crate) struct ReminderInsert {
    pub id: String,
    pub workspace: WorkspaceKey,
    pub message: String,
    pub scheduled_at_ms: i64,
    pub created_at_ms: i64,
    pub state: ReminderState,
    pub attempts: u32,
    pub delivered_at_ms: Option<i64>,
    pub late: bool,
    pub updated_at_ms: i64,
    /// How it repeats (a new reminder's only; imported ones are one-time).
    pub recurrence: Option<Recurrence>,
}

/// Inserts a reminder row. Returns false when the id already exists (nothing changes).
pub(crate) fn insert(conn: &Connection, r: &ReminderInsert) -> Result<bool, StoreError> {
    let n = conn
        .prepare_cached(
            "INSERT INTO reminders (id, workspace, platform, user_id, message, scheduled_at,
                 created_at, state, attempts, next_attempt_at, delivered_at, late, updated_at,
                 recur_every, recur_zone, recur_first, recur_until, recur_count)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?6, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17)
             ON CONFLICT (id) DO NOTHING",
        )?
        .execute(params![
            r.id,
            r.workspace.to_string(),
            r.workspace.platform(),
            r.workspace.user_id(),
            r.message,
            r.scheduled_at_ms,
            r.created_at_ms,
            r.state.as_str(),
            r.attempts,
            r.delivered_at_ms,
            r.late,
            r.updated_at_ms,
            r.recurrence.as_ref().map(|x| x.every.as_str()),
            r.recurrence.as_ref().map(|x| x.time_zone.as_str()),
            r.recurrence.as_ref().map(|x| to_ms(x.first_at)),
            r.recurrence.as_ref().and_then(|x| x.until.map(to_ms)),
            r.recurrence.as_ref().and_then(|x| x.count),
        ])?;
    Ok(n == 1)
}

/// Inserts a new pending reminder unless the owner already has `max_pending` pending ones.
pub(crate) fn create(
    conn: &Connection,
    r: &ReminderInsert,
    max_pending: u32,
) -> Result<Reminder, StoreError> {
    let pending: i64 = conn
        .prepare_cached(
            "SELECT COUNT(*) FROM reminders WHERE workspace = ?1 AND state = 'pending'",
        )?
        .query_row([r.workspace.to_string()], |row| row.get(0))?;
    if pending >= i64::from(max_pending) {
        return Err(StoreError::LimitReached { limit: max_pending });
    }
    if !insert(conn, r)? {
        return Err(StoreError::Internal(format!(
            "reminder id collision: {}",
            r.id
        )));
    }
    must_get(conn, &r.id)
}

/// Cancels a pending reminder of `ws`. `NotFound` when it does not exist, belongs to someone
/// else, or is no longer pending.
pub(crate) fn cancel(
    conn: &Connection,
    ws: &WorkspaceKey,
    id: &str,
    now_ms: i64,
) -> Result<Reminder, StoreError> {
    let n = conn
        .prepare_cached(
            "UPDATE reminders SET state = 'cancelled', updated_at = ?3
             WHERE id = ?1 AND workspace = ?2 AND state = 'pending'",
        )?
        .execute(params![id, ws.to_string(), now_ms])?;
    if n == 0 {
        return Err(StoreError::NotFound);
    }
    must_get(conn, id)
}

/// Pending reminders of `ws`, soonest first.
pub(crate) fn pending(conn: &Connection, ws: &WorkspaceKey) -> Result<Vec<Reminder>, StoreError> {
    query_list(
        conn,
        &format!(
            "SELECT {REMINDER_COLUMNS} FROM reminders
             WHERE workspace = ?1 AND state = 'pending' ORDER BY scheduled_at, seq"
        ),
        [ws.to_string()],
    )
}

/// Every reminder of `ws`, in any state, oldest first (an export of the user's data).
pub(crate) fn all_of(conn: &Connection, ws: &WorkspaceKey) -> Result<Vec<Reminder>, StoreError> {
    query_list(
        conn,
        &format!("SELECT {REMINDER_COLUMNS} FROM reminders WHERE workspace = ?1 ORDER BY seq"),
        [ws.to_string()],
    )
}

/// Earliest `nextAttemptAt` of any pending reminder.
pub(crate) fn next_due(conn: &Connection) -> Result<Option<i64>, StoreError> {
    Ok(conn
        .prepare_cached("SELECT MIN(next_attempt_at) FROM reminders WHERE state = 'pending'")?
        .query_row([], |r| r.get::<_, Option<i64>>(0))
        .optional()?
        .flatten())
}

/// Pending reminders whose `nextAttemptAt` is at or before `now_ms`, oldest first.
pub(crate) fn due(conn: &Connection, now_ms: i64, limit: u32) -> Result<Vec<Reminder>, StoreError> {
    query_list(
        conn,
        &format!(
            "SELECT {REMINDER_COLUMNS} FROM reminders
             WHERE state = 'pending' AND next_attempt_at <= ?1
             ORDER BY next_attempt_at, seq LIMIT ?2"
        ),
        params![now_ms, limit],
    )
}

/// Marks a pending reminder delivered (one more attempt). `NotFound` unless pending.
pub(crate) fn mark_delivered(
    conn: &Connection,
    id: &str,
    at_ms: i64,
    late: bool,
) -> Result<Reminder, StoreError> {
    let n = conn
        .prepare_cached(
            "UPDATE reminders SET state = 'delivered', attempts = attempts + 1, delivered_at = ?2,
                 late = ?3, updated_at = ?2
             WHERE id = ?1 AND state = 'pending'",
        )?
        .execute(params![id, at_ms, late])?;
    if n == 0 {
        return Err(StoreError::NotFound);
    }
    must_get(conn, id)
}

/// Records a delivery of a recurring reminder's occurrence (occurrences + 1) and moves it to
/// its next occurrence `next_ms` (pending again, its attempts and error cleared for it), or
/// marks it delivered when the series is over (`None`). `NotFound` unless pending.
pub(crate) fn mark_occurrence_delivered(
    conn: &Connection,
    id: &str,
    at_ms: i64,
    late: bool,
    next_ms: Option<i64>,
) -> Result<Reminder, StoreError> {
    let n = conn
        .prepare_cached(
            "UPDATE reminders SET occurrences = occurrences + 1,
                 attempts = CASE WHEN ?4 IS NULL THEN attempts + 1 ELSE 0 END,
                 delivered_at = ?2, late = ?3, updated_at = ?2, last_error = NULL,
                 state = CASE WHEN ?4 IS NULL THEN 'delivered' ELSE 'pending' END,
                 scheduled_at = COALESCE(?4, scheduled_at),
                 next_attempt_at = COALESCE(?4, next_attempt_at)
             WHERE id = ?1 AND state = 'pending'",
        )?
        .execute(params![id, at_ms, late, next_ms])?;
    if n == 0 {
        return Err(StoreError::NotFound);
    }
    must_get(conn, id)
}

/// Moves a pending recurring reminder whose occurrence could not be delivered to its next
/// occurrence `next_ms` (attempts cleared for it), keeping the error. `NotFound` unless
/// pending.
pub(crate) fn skip_occurrence(
    conn: &Connection,
    id: &str,
    error: &str,
    next_ms: i64,
    now_ms: i64,
) -> Result<Reminder, StoreError> {
    let error: String = error.chars().take(1000).collect();
    let n = conn
        .prepare_cached(
            "UPDATE reminders SET attempts = 0, last_error = ?2, updated_at = ?4,
                 scheduled_at = ?3, next_attempt_at = ?3
             WHERE id = ?1 AND state = 'pending'",
        )?
        .execute(params![id, error, next_ms, now_ms])?;
    if n == 0 {
        return Err(StoreError::NotFound);
    }
    must_get(conn, id)
}

/// Records a failed delivery attempt: retried at `retry_at_ms`, or `failed` when `None`.
pub(crate) fn record_failure(
    conn: &Connection,
    id: &str,
    error: &str,
    retry_at_ms: Option<i64>,
    now_ms: i64,
) -> Result<Reminder, StoreError> {
    let error: String = error.chars().take(1000).collect();
    let n = conn
        .prepare_cached(
            "UPDATE reminders SET attempts = attempts + 1, last_error = ?2, updated_at = ?4,
                 state = CASE WHEN ?3 IS NULL THEN 'failed' ELSE 'pending' END,
                 next_attempt_at = COALESCE(?3, next_attempt_at)
             WHERE id = ?1 AND state = 'pending'",
        )?
        .execute(params![id, error, retry_at_ms, now_ms])?;
    if n == 0 {
        return Err(StoreError::NotFound);
    }
    must_get(conn, id)
}
