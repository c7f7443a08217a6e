//! Erasing one user's rows from every table that holds them (schema v11), counting what is
//! kept about a user, and the record of what was asked and done (`privacy_log`).
//!
//! [`TABLES`] is the one list of where a user's data lives: every table of the schema is in it,
//! with how its rows name their user (a workspace column, a platform and user id, a memory's
//! row id) or why it holds nothing of a user. [`erase`] deletes by that list, and the erasure
//! test enumerates the live schema against it, so a table added later without a way to erase it
//! fails the test instead of keeping data after `forget-user`.
//!
//! Both full-text indexes are merged into one segment each after the erased entries are deleted
//! (FTS5 `optimize`): a deletion alone only adds delete markers, leaving the entries in older
//! segments until a merge, and FTS5's `secure-delete` (which removes them in place) cost 9 s
//! per 1 000 memories erased at 100 000 memories, against 0.5 s for the merge, whatever the
//! user's count. The writer deletes with SQLite's `secure_delete` on, so deleted rows are
//! overwritten, and [`crate::store::Store::erase_user`] then rebuilds the file (`VACUUM`) and
//! truncates the WAL, so no free page keeps them either.

use std::collections::BTreeMap;

use ring::hmac;
use rusqlite::{Connection, OptionalExtension, params};
use serde::{Deserialize, Serialize};

use super::memories::{now_ms, workspace_range};
use super::types::WorkspaceKey;
use super::{Store, StoreError};

/// How a table's rows name the user they belong to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Holds {
    /// A column holding the workspace key (`platform/userId`).
    Workspace(&'static str),
    /// Columns holding the platform's name and the user's id on it.
    User {
        /// The platform column.
        platform: &'static str,
        /// The user id column.
        user: &'static str,
    },
    /// A column holding a memory's row id (the user's through the memory's workspace).
    MemoryRow(&'static str),
    /// A full-text index over the memories, keyed by the memory's row id.
    MemoryIndex,
    /// The workspace registry: its `key` column is the workspace key.
    Registry,
    /// No row names a user; why.
    Nothing(&'static str),
    /// Rows name a user (platform and user id columns) but record the operator's decision about
    /// them, kept through an erasure on purpose; why.
    Operator(&'static str),
}

/// Every table of the schema and how it holds a user's data (see the module docs). FTS5's own
/// shadow tables (`memories_fts_data`, ...) go with their index.
pub const TABLES: &[(&str, Holds)] = &[
    ("workspaces", Holds::Registry),
    ("memories", Holds::Workspace("workspace")),
    ("memory_patches", Holds::MemoryRow("memory_seq")),
    ("memories_fts", Holds::MemoryIndex),
    ("memories_grams", Holds::MemoryIndex),
    ("index_queue", Holds::MemoryRow("seq")),
    ("memory_use", Holds::MemoryRow("memory_seq")),
    ("memory_vectors", Holds::MemoryRow("memory_seq")),
    ("embedding_queue", Holds::MemoryRow("memory_seq")),
    ("memory_counts", Holds::Workspace("workspace")),
    ("reminders", Holds::Workspace("workspace")),
    ("llm_usage", Holds::Workspace("workspace")),
    ("llm_usage_place", Holds::Workspace("workspace")),
    ("maintenance_runs", Holds::Workspace("workspace")),
    (
        "inbox",
        Holds::User {
            platform: "platform",
            user: "user_id",
        },
    ),
    (
        "continuity",
        Holds::User {
            platform: "platform",
            user: "user_id",
        },
    ),
    (
        "skill_calls",
        Holds::Nothing("calls counted per hour, skill and outcome, for everyone together"),
    ),
    (
        "catch_up_cursors",
        Holds::Nothing("the newest message id seen per channel feed, and when; no user"),
    ),
    ("erasing", Holds::Workspace("workspace")),
    (
        "privacy_log",
        Holds::Nothing("names its subject only by a keyed hash (`privacy_key`), never an id"),
    ),
    ("privacy_key", Holds::Nothing("the key of the log's hashes")),
    (
        "schedules",
        Holds::Nothing("each operator schedule's next run; no user"),
    ),
    (
        "schedule_runs",
        Holds::Nothing("the runs of operator schedules and the bot's own posts; no user"),
    ),
    (
        "user_controls",
        Holds::Operator(
            "the operator's block and budget of a user: erasing their data must not lift a block",
        ),
    ),
];

/// What an erasure removed, by kind.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Erased {
    /// Memories (with their full-text index entries).
    pub memories: u64,
    /// Changes recorded on those memories.
    pub memory_patches: u64,
    /// Their embedding vectors.
    pub vectors: u64,
    /// Reminders, in any state.
    pub reminders: u64,
    /// Days of model usage records (overall and per place).
    pub usage_rows: u64,
    /// Memory maintenance run records.
    pub maintenance_runs: u64,
    /// Messages recorded in the inbox (with their text).
    pub inbox_messages: u64,
    /// Conversations' kept agent state (their folders are returned by [`erase`]).
    pub conversations: u64,
}

/// What is kept about one user (for `/privacy`), counted.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Kept {
    /// Enabled public memories.
    pub public_memories: u64,
    /// Enabled private memories.
    pub private_memories: u64,
    /// Disabled memories (kept until erased or purged by retention).
    pub disabled_memories: u64,
    /// Reminders still pending.
    pub pending_reminders: u64,
    /// Reminders delivered, cancelled or failed.
    pub past_reminders: u64,
    /// Days with model usage records.
    pub usage_days: u64,
    /// Messages recorded in the inbox.
    pub inbox_messages: u64,
    /// Conversations with kept agent state.
    pub conversations: u64,
}

/// A finished erasure.
#[derive(Debug, Clone)]
pub struct Erasure {
    /// What was removed.
    pub erased: Erased,
    /// The conversations' agent-state folders (names under the state root) to delete.
    pub folders: Vec<String>,
    /// The `privacy_log` record written with it.
    pub record: PrivacyRecord,
    /// Whether the database file was rebuilt afterwards (`VACUUM`); when it failed (logged), the
    /// rows are gone and their bytes overwritten, but the file keeps its free pages.
    pub vacuumed: bool,
}

impl Store {
    /// Erases every row of `ws`'s user, records it in `privacy_log` (in the same transaction),
    /// then rebuilds the database file and truncates its WAL.
    pub async fn erase_user(
        &self,
        ws: &WorkspaceKey,
        requested_by: RequestedBy,
    ) -> Result<Erasure, StoreError> {
        let ws = ws.clone();
        let (erased, folders, record) = self
            .db
            .write(move |c| {
                let (erased, folders) = erase(c, &ws)?;
                let record = log(c, "erase", requested_by, Some(&ws), &erased)?;
                Ok((erased, folders, record))
            })
            .await?;
        let vacuumed = match self.db.vacuum().await {
            Ok(()) => true,
            Err(error) => {
                tracing::warn!(%error, "store: could not vacuum after an erasure");
                false
            }
        };
        Ok(Erasure {
            erased,
            folders,
            record,
            vacuumed,
        })
    }

    /// Deletes the memories disabled before `before` (the retention job), `batch` at a time in
    /// write jobs of their own so other writes go on between them; answers how many went.
    pub async fn purge_disabled_memories(
        &self,
        before: chrono::DateTime<chrono::Utc>,
        batch: u32,
    ) -> Result<u64, StoreError> {
        let before_ms = super::to_ms(before);
        let batch = batch.max(1);
        let mut total = 0;
        loop {
            let n = self
                .db
                .write(move |c| purge_disabled(c, before_ms, batch))
                .await?;
            total += n;
            if n < u64::from(batch) {
                return Ok(total);
            }
        }
    }

    /// Deletes the model usage records of days before `before` (overall and per place);
    /// answers how many rows went.
    pub async fn prune_usage(&self, before: chrono::NaiveDate) -> Result<u64, StoreError> {
        let day = before.format("%Y-%m-%d").to_string();
        self.db
            .write(move |c| {
                Ok(
                    count(c.execute("DELETE FROM llm_usage WHERE day < ?1", [&day])?)
                        + count(c.execute("DELETE FROM llm_usage_place WHERE day < ?1", [&day])?),
                )
            })
            .await
    }

    /// What is kept about `ws`'s user, counted.
    pub async fn privacy_kept(&self, ws: &WorkspaceKey) -> Result<Kept, StoreError> {
        let ws = ws.clone();
        self.db.read(move |c| kept(c, &ws)).await
    }

    /// The `privacy_log` records about `ws`'s user, oldest first.
    pub async fn privacy_records(
        &self,
        ws: &WorkspaceKey,
    ) -> Result<Vec<PrivacyRecord>, StoreError> {
        let ws = ws.clone();
        self.db.read(move |c| records_about(c, &ws)).await
    }

    /// Records a privacy action that erased nothing by itself (`/forget` disabling memories,
    /// the retention job's counts).
    pub async fn privacy_log(
        &self,
        action: &'static str,
        requested_by: RequestedBy,
        ws: Option<&WorkspaceKey>,
        detail: serde_json::Value,
    ) -> Result<PrivacyRecord, StoreError> {
        let ws = ws.cloned();
        self.db
            .write(move |c| log(c, action, requested_by, ws.as_ref(), &detail))
            .await
    }
}

/// Erases every row of `ws` (and of its user in the tables keyed by platform and user id) in
/// the caller's transaction; answers the counts and the continuity folders to delete. The
/// connection must be the writer's (its `secure_delete` is set here for the erasure).
pub(crate) fn erase(
    conn: &Connection,
    ws: &WorkspaceKey,
) -> Result<(Erased, Vec<String>), StoreError> {
    securely(conn, |conn| erase_rows(conn, ws))
}

/// Runs `f` with SQLite's `secure_delete` on: what it deletes is overwritten with zeros.
fn securely<R>(
    conn: &Connection,
    f: impl FnOnce(&Connection) -> Result<R, StoreError>,
) -> Result<R, StoreError> {
    conn.query_row("PRAGMA secure_delete = ON", [], |_| Ok(()))?;
    let result = f(conn);
    conn.query_row("PRAGMA secure_delete = OFF", [], |_| Ok(()))?;
    result
}

fn erase_rows(conn: &Connection, ws: &WorkspaceKey) -> Result<(Erased, Vec<String>), StoreError> {
    let key = ws.to_string();
    let (platform, user) = (ws.platform(), ws.user_id());
    let mut erased = Erased::default();
    conn.execute(
        "INSERT OR IGNORE INTO erasing (workspace) VALUES (?1)",
        [&key],
    )?;
    if let Some((lo, hi)) = workspace_range(conn, ws)? {
        let gone = delete_memories(
            conn,
            "SELECT seq FROM memories WHERE seq BETWEEN ?1 AND ?2",
            [lo, hi],
        )?;
        (erased.memories, erased.memory_patches, erased.vectors) =
            (gone.memories, gone.patches, gone.vectors);
    }
    conn.execute("DELETE FROM memory_counts WHERE workspace = ?1", [&key])?;
    erased.reminders = count(conn.execute("DELETE FROM reminders WHERE workspace = ?1", [&key])?);
    erased.usage_rows = count(conn.execute("DELETE FROM llm_usage WHERE workspace = ?1", [&key])?)
        + count(conn.execute("DELETE FROM llm_usage_place WHERE workspace = ?1", [&key])?);
    erased.maintenance_runs =
        count(conn.execute("DELETE FROM maintenance_runs WHERE workspace = ?1", [&key])?);
    erased.inbox_messages = count(conn.execute(
        "DELETE FROM inbox WHERE platform = ?1 AND user_id = ?2",
        [platform, user],
    )?);
    let folders = {
        let mut stmt =
            conn.prepare("SELECT folder FROM continuity WHERE platform = ?1 AND user_id = ?2")?;
        let rows = stmt.query_map([platform, user], |r| r.get::<_, String>(0))?;
        rows.collect::<Result<Vec<_>, _>>()?
    };
    erased.conversations = count(conn.execute(
        "DELETE FROM continuity WHERE platform = ?1 AND user_id = ?2",
        [platform, user],
    )?);
    // The id is free again: every row in its range is gone, so a new workspace that gets it
    // starts from an empty range.
    conn.execute("DELETE FROM workspaces WHERE key = ?1", [&key])?;
    conn.execute("DELETE FROM erasing", [])?;
    Ok((erased, folders))
}

/// What [`delete_memories`] removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Gone {
    memories: u64,
    patches: u64,
    vectors: u64,
}

/// Deletes the memories whose rows `select` (one column, `seq`) names, with everything keyed by
/// them: both full-text index entries (then both indexes are merged, see the module docs), the
/// index and embedding queues, use marks, vectors and patches. The memories' workspaces are
/// marked `erasing` (the append-only triggers let their rows go only then); the caller empties
/// `erasing` before its transaction ends and keeps `memory_counts` right.
fn delete_memories<P: rusqlite::Params>(
    conn: &Connection,
    select: &str,
    params: P,
) -> Result<Gone, StoreError> {
    conn.execute_batch(
        "CREATE TEMP TABLE IF NOT EXISTS doomed (seq INTEGER PRIMARY KEY); DELETE FROM temp.doomed;",
    )?;
    conn.execute(&format!("INSERT INTO temp.doomed (seq) {select}"), params)?;
    conn.execute(
        "INSERT OR IGNORE INTO erasing (workspace)
         SELECT DISTINCT workspace FROM memories WHERE seq IN (SELECT seq FROM temp.doomed)",
        [],
    )?;
    // The trigram index is external-content: a deletion repeats the indexed text, which is the
    // memory's (content never changes). Rows still queued were never indexed.
    conn.execute(
        "INSERT INTO memories_fts (memories_fts, rowid, content)
         SELECT 'delete', m.seq, m.content FROM memories m JOIN temp.doomed d ON d.seq = m.seq
         WHERE m.seq NOT IN (SELECT seq FROM index_queue)",
        [],
    )?;
    let doomed = "IN (SELECT seq FROM temp.doomed)";
    conn.execute(
        &format!("DELETE FROM memories_grams WHERE rowid {doomed}"),
        [],
    )?;
    for (table, column) in [
        ("index_queue", "seq"),
        ("memory_use", "memory_seq"),
        ("embedding_queue", "memory_seq"),
    ] {
        conn.execute(&format!("DELETE FROM {table} WHERE {column} {doomed}"), [])?;
    }
    let mut gone = Gone {
        vectors: count(conn.execute(
            &format!("DELETE FROM memory_vectors WHERE memory_seq {doomed}"),
            [],
        )?),
        patches: count(conn.execute(
            &format!("DELETE FROM memory_patches WHERE memory_seq {doomed}"),
            [],
        )?),
        ..Gone::default()
    };
    gone.memories = count(conn.execute(&format!("DELETE FROM memories WHERE seq {doomed}"), [])?);
    if gone.memories > 0 {
        // Rewrites each index without the deleted entries (see the module docs).
        for index in ["memories_fts", "memories_grams"] {
            conn.execute_batch(&format!("INSERT INTO {index}({index}) VALUES ('optimize')"))?;
        }
    }
    conn.execute("DELETE FROM temp.doomed", [])?;
    Ok(gone)
}

/// Deletes up to `limit` memories disabled before `before_ms` (retention), with everything
/// keyed by them, and takes them out of `memory_counts`; answers how many went.
pub(crate) fn purge_disabled(
    conn: &Connection,
    before_ms: i64,
    limit: u32,
) -> Result<u64, StoreError> {
    securely(conn, |conn| {
        // The counts first, while the rows are there to be counted.
        conn.execute(
            "UPDATE memory_counts SET n = n - d.k
             FROM (SELECT workspace, visibility, importance, count(*) AS k FROM (
                       SELECT workspace, visibility, importance FROM memories
                       WHERE enabled = 0 AND updated_at < ?1 ORDER BY seq LIMIT ?2)
                   GROUP BY workspace, visibility, importance) AS d
             WHERE memory_counts.workspace = d.workspace AND memory_counts.enabled = 0
               AND memory_counts.visibility = d.visibility
               AND memory_counts.importance = d.importance",
            params![before_ms, limit],
        )?;
        let gone = delete_memories(
            conn,
            "SELECT seq FROM memories WHERE enabled = 0 AND updated_at < ?1 ORDER BY seq LIMIT ?2",
            params![before_ms, limit],
        )?;
        conn.execute("DELETE FROM memory_counts WHERE n = 0", [])?;
        conn.execute("DELETE FROM erasing", [])?;
        Ok(gone.memories)
    })
}

fn count(rows: usize) -> u64 {
    u64::try_from(rows).unwrap_or(u64::MAX)
}

/// What is kept about `ws`'s user, counted (a reader's snapshot).
pub(crate) fn kept(conn: &Connection, ws: &WorkspaceKey) -> Result<Kept, StoreError> {
    let key = ws.to_string();
    let mut kept = Kept::default();
    let mut stmt = conn.prepare_cached(
        "SELECT visibility, enabled, sum(n) FROM memory_counts WHERE workspace = ?1
         GROUP BY visibility, enabled",
    )?;
    let rows = stmt.query_map([&key], |r| {
        Ok((
            r.get::<_, String>(0)?,
            r.get::<_, bool>(1)?,
            r.get::<_, i64>(2)?,
        ))
    })?;
    for row in rows {
        let (visibility, enabled, n) = row?;
        let n = u64::try_from(n).unwrap_or(0);
        match (visibility.as_str(), enabled) {
            (_, false) => kept.disabled_memories += n,
            ("private", true) => kept.private_memories += n,
            _ => kept.public_memories += n,
        }
    }
    let one = |sql: &str, args: &[&dyn rusqlite::ToSql]| -> Result<u64, StoreError> {
        let n: i64 = conn.prepare_cached(sql)?.query_row(args, |r| r.get(0))?;
        Ok(u64::try_from(n).unwrap_or(0))
    };
    kept.pending_reminders = one(
        "SELECT count(*) FROM reminders WHERE workspace = ?1 AND state = 'pending'",
        &[&key],
    )?;
    kept.past_reminders = one(
        "SELECT count(*) FROM reminders WHERE workspace = ?1 AND state <> 'pending'",
        &[&key],
    )?;
    kept.usage_days = one(
        "SELECT count(*) FROM llm_usage WHERE workspace = ?1",
        &[&key],
    )?;
    kept.inbox_messages = one(
        "SELECT count(*) FROM inbox WHERE platform = ?1 AND user_id = ?2",
        &[&ws.platform(), &ws.user_id()],
    )?;
    kept.conversations = one(
        "SELECT count(*) FROM continuity WHERE platform = ?1 AND user_id = ?2",
        &[&ws.platform(), &ws.user_id()],
    )?;
    Ok(kept)
}

/// Who asked for a privacy action.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestedBy {
    /// The user themselves (`/forget`).
    User,
    /// The operator (`air-friends forget-user`).
    Operator,
    /// The daily retention job.
    Retention,
}

impl RequestedBy {
    /// The name stored in `privacy_log.requested_by`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::User => "user",
            Self::Operator => "operator",
            Self::Retention => "retention",
        }
    }
}

/// One `privacy_log` record, as read back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PrivacyRecord {
    /// When (ms since the epoch).
    pub at_ms: i64,
    /// What was done (`erase`, `forget`, `retention`).
    pub action: String,
    /// Who asked.
    pub requested_by: String,
    /// The keyed hash of the user's workspace key (empty for retention).
    pub subject: String,
    /// The counts (JSON).
    pub detail: String,
}

/// The keyed hash `privacy_log` names `ws` by.
pub(crate) fn subject(conn: &Connection, ws: &WorkspaceKey) -> Result<String, StoreError> {
    let key: Vec<u8> = conn
        .prepare_cached("SELECT key FROM privacy_key WHERE id = 1")?
        .query_row([], |r| r.get(0))
        .optional()?
        .ok_or_else(|| StoreError::Internal("the privacy log has no key".into()))?;
    let tag = hmac::sign(
        &hmac::Key::new(hmac::HMAC_SHA256, &key),
        ws.to_string().as_bytes(),
    );
    Ok(tag.as_ref().iter().map(|b| format!("{b:02x}")).collect())
}

/// Records a privacy action; `detail` holds counts, never content.
pub(crate) fn log(
    conn: &Connection,
    action: &str,
    requested_by: RequestedBy,
    ws: Option<&WorkspaceKey>,
    detail: &impl Serialize,
) -> Result<PrivacyRecord, StoreError> {
    let subject = match ws {
        Some(ws) => subject(conn, ws)?,
        None => String::new(),
    };
    let detail = serde_json::to_string(detail)
        .map_err(|e| StoreError::Internal(format!("privacy log detail: {e}")))?;
    let at_ms = now_ms();
    conn.prepare_cached(
        "INSERT INTO privacy_log (at_ms, action, requested_by, subject, detail)
         VALUES (?1, ?2, ?3, ?4, ?5)",
    )?
    .execute(params![
        at_ms,
        action,
        requested_by.as_str(),
        subject,
        detail
    ])?;
    Ok(PrivacyRecord {
        at_ms,
        action: action.to_owned(),
        requested_by: requested_by.as_str().to_owned(),
        subject,
        detail,
    })
}

/// The records about `ws`'s user, oldest first.
pub(crate) fn records_about(
    conn: &Connection,
    ws: &WorkspaceKey,
) -> Result<Vec<PrivacyRecord>, StoreError> {
    let subject = subject(conn, ws)?;
    let mut stmt = conn.prepare_cached(
        "SELECT at_ms, action, requested_by, subject, detail FROM privacy_log
         WHERE subject = ?1 ORDER BY id",
    )?;
    let rows = stmt.query_map([subject], |r| {
        Ok(PrivacyRecord {
            at_ms: r.get(0)?,
            action: r.get(1)?,
            requested_by: r.get(2)?,
            subject: r.get(3)?,
            detail: r.get(4)?,
        })
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// The rowid range of `ws`'s memories (its workspace id shifted), if it has a workspace.
pub fn memory_range(
    conn: &Connection,
    ws: &WorkspaceKey,
) -> Result<Option<(i64, i64)>, StoreError> {
    workspace_range(conn, ws)
}

/// Rows of every table, by table, that [`TABLES`] says belong to `ws`'s user, with `range` the
/// rowid range its memories had ([`memory_range`], taken before an erasure frees it): what the
/// erasure test expects to be zero afterwards.
pub fn rows_of(
    conn: &Connection,
    ws: &WorkspaceKey,
    range: Option<(i64, i64)>,
) -> Result<BTreeMap<&'static str, u64>, StoreError> {
    let key = ws.to_string();
    let range = range.unwrap_or((-1, -2));
    let mut out = BTreeMap::new();
    for (table, holds) in TABLES {
        let n: i64 = match holds {
            Holds::Workspace(column) => conn.query_row(
                &format!("SELECT count(*) FROM {table} WHERE {column} = ?1"),
                [&key],
                |r| r.get(0),
            )?,
            Holds::User { platform, user } => conn.query_row(
                &format!("SELECT count(*) FROM {table} WHERE {platform} = ?1 AND {user} = ?2"),
                [ws.platform(), ws.user_id()],
                |r| r.get(0),
            )?,
            Holds::MemoryRow(column) => conn.query_row(
                &format!("SELECT count(*) FROM {table} WHERE {column} BETWEEN ?1 AND ?2"),
                [range.0, range.1],
                |r| r.get(0),
            )?,
            Holds::MemoryIndex => conn.query_row(
                &format!("SELECT count(*) FROM {table}_docsize WHERE id BETWEEN ?1 AND ?2"),
                [range.0, range.1],
                |r| r.get(0),
            )?,
            Holds::Registry => conn.query_row(
                "SELECT count(*) FROM workspaces WHERE key = ?1",
                [&key],
                |r| r.get(0),
            )?,
            Holds::Nothing(_) | Holds::Operator(_) => continue,
        };
        out.insert(*table, u64::try_from(n).unwrap_or(0));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::db::{Db, WriterHooks};
    use crate::store::memories::{insert, test_row as row};
    use crate::store::search::{INDEX_AT, index_batch, prepare_writer};

    /// The store's writer hooks without idle work or settling, so rows stay queued until the
    /// batch step indexes them.
    const NO_IDLE: WriterHooks = WriterHooks {
        prepare: prepare_writer,
        after_batch: index_batch,
        idle: |_| Ok(false),
        settle: |_| Ok(()),
    };

    fn count(c: &Connection, sql: &str) -> i64 {
        c.query_row(sql, [], |r| r.get(0)).unwrap()
    }

    /// A memory still waiting in the index queue was never indexed: the erasure takes it out of
    /// the queue without asking either index to delete it (which would corrupt the trigram
    /// index), and another user's queued rows are left to be indexed as usual.
    #[tokio::test]
    async fn memories_still_queued_for_the_indexes_are_erased_without_touching_them() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open_blocking(&dir.path().join("t.db"), NO_IDLE).unwrap();
        let (a, b) = (
            WorkspaceKey::new("discord", "a").unwrap(),
            WorkspaceKey::new("discord", "b").unwrap(),
        );
        for n in 0..INDEX_AT {
            let m = row(&a, &format!("kayak trip 猫 {n}"));
            db.write(move |c| insert(c, &m)).await.unwrap();
        }
        for (ws, text) in [
            (&a, "queued kayak 猫"),
            (&b, "b kayak 猫"),
            (&a, "queued again"),
        ] {
            let m = row(ws, text);
            db.write(move |c| insert(c, &m)).await.unwrap();
        }
        let queued = db
            .write(|c| Ok(count(c, "SELECT count(*) FROM index_queue")))
            .await
            .unwrap();
        assert_eq!(queued, 3, "two of a's rows and one of b's wait");
        let (erased, _) = db.write(move |c| erase(c, &a)).await.unwrap();
        assert_eq!(erased.memories, u64::try_from(INDEX_AT).unwrap() + 2);
        db.write(|c| {
            for t in ["memories_fts", "memories_grams"] {
                c.execute_batch(&format!("INSERT INTO {t}({t}) VALUES ('integrity-check')"))?;
            }
            assert_eq!(count(c, "SELECT count(*) FROM index_queue"), 1);
            assert_eq!(
                count(
                    c,
                    "SELECT count(*) FROM memories_fts WHERE memories_fts MATCH 'kayak'"
                ),
                0
            );
            assert_eq!(count(c, "SELECT count(*) FROM memories_grams"), 0);
            crate::store::search::index_all(c)?;
            for t in ["memories_fts", "memories_grams"] {
                c.execute_batch(&format!("INSERT INTO {t}({t}) VALUES ('integrity-check')"))?;
            }
            assert_eq!(
                count(
                    c,
                    "SELECT count(*) FROM memories_fts WHERE memories_fts MATCH 'kayak'"
                ),
                1
            );
            assert_eq!(
                count(
                    c,
                    "SELECT count(*) FROM memories_grams WHERE memories_grams MATCH '猫'"
                ),
                1
            );
            Ok(())
        })
        .await
        .unwrap();
        db.close().await.unwrap();
    }
}
