//! Memory vectors for meaning-based recall (tables `memory_vectors` and `embedding_queue`,
//! `schema_v3.sql`). Vectors are stored normalised as little-endian `f32`; the queue holds
//! every memory still without a vector of the configured model, filled by a trigger on insert,
//! so a save never waits for the embedding service and imported memories are covered too.

use rusqlite::{Connection, params};

use super::memories::{MEMORY_COLUMNS, memory_from_row, workspace_range};
use super::{Memory, Scope, StoreError, WorkspaceKey};

/// A queued memory to embed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingEmbedding {
    /// Its row (what vectors are keyed by).
    pub seq: i64,
    /// Its workspace.
    pub workspace: String,
    /// Its text.
    pub content: String,
}

/// `v` as stored.
pub fn to_blob(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// A stored vector (`None` when the blob is not whole `f32`s).
pub fn from_blob(b: &[u8]) -> Option<Vec<f32>> {
    if !b.len().is_multiple_of(4) {
        return None;
    }
    Some(
        b.chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
    )
}

/// Turns queueing on (the insert trigger, and every memory without a vector queued: imports
/// made while it was off included) or off (the trigger dropped; the queue is kept).
pub(crate) fn set_queueing(conn: &Connection, on: bool) -> Result<(), StoreError> {
    if on {
        conn.execute_batch(
            "CREATE TRIGGER IF NOT EXISTS memories_embedding_queue AFTER INSERT ON memories
             BEGIN
                 INSERT OR IGNORE INTO embedding_queue (memory_seq) VALUES (new.seq);
             END;
             INSERT OR IGNORE INTO embedding_queue (memory_seq)
                 SELECT m.seq FROM memories m
                 WHERE NOT EXISTS (SELECT 1 FROM memory_vectors v WHERE v.memory_seq = m.seq);",
        )?;
    } else {
        conn.execute_batch("DROP TRIGGER IF EXISTS memories_embedding_queue;")?;
    }
    Ok(())
}

/// Puts back in the queue the memories whose vector was made by a model other than `model`
/// (the operator changed it), dropping those vectors. Returns how many.
pub(crate) fn requeue_other_models(conn: &Connection, model: &str) -> Result<usize, StoreError> {
    conn.prepare_cached(
        "INSERT OR IGNORE INTO embedding_queue (memory_seq)
         SELECT memory_seq FROM memory_vectors WHERE model <> ?1",
    )?
    .execute([model])?;
    Ok(conn
        .prepare_cached("DELETE FROM memory_vectors WHERE model <> ?1")?
        .execute([model])?)
}

/// Up to `limit` queued memories, oldest rows first.
pub(crate) fn queued(conn: &Connection, limit: u32) -> Result<Vec<PendingEmbedding>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT q.memory_seq, m.workspace, m.content FROM embedding_queue q
         JOIN memories m ON m.seq = q.memory_seq ORDER BY q.memory_seq LIMIT ?1",
    )?;
    let mut rows = stmt.query([limit])?;
    let mut out = Vec::new();
    while let Some(r) = rows.next()? {
        out.push(PendingEmbedding {
            seq: r.get(0)?,
            workspace: r.get(1)?,
            content: r.get(2)?,
        });
    }
    Ok(out)
}

/// How many memories wait for a vector.
pub(crate) fn queue_len(conn: &Connection) -> Result<u64, StoreError> {
    let n: i64 = conn
        .prepare_cached("SELECT count(*) FROM embedding_queue")?
        .query_row([], |r| r.get(0))?;
    Ok(u64::try_from(n).unwrap_or(0))
}

/// Stores `vectors` (seq, normalised vector) made by `model` and takes them off the queue.
pub(crate) fn put(
    conn: &Connection,
    model: &str,
    vectors: &[(i64, Vec<f32>)],
) -> Result<(), StoreError> {
    let mut insert = conn.prepare_cached(
        "INSERT OR REPLACE INTO memory_vectors (memory_seq, model, vector) VALUES (?1, ?2, ?3)",
    )?;
    let mut dequeue = conn.prepare_cached("DELETE FROM embedding_queue WHERE memory_seq = ?1")?;
    for (seq, v) in vectors {
        insert.execute(params![seq, model, to_blob(v)])?;
        dequeue.execute([seq])?;
    }
    Ok(())
}

/// Every vector of `ws` made by `model` (any visibility or state: callers filter the
/// memories they return).
pub(crate) fn of_workspace(
    conn: &Connection,
    ws: &WorkspaceKey,
    model: &str,
) -> Result<Vec<(i64, Vec<f32>)>, StoreError> {
    let Some((lo, hi)) = workspace_range(conn, ws)? else {
        return Ok(Vec::new());
    };
    let mut stmt = conn.prepare_cached(
        "SELECT memory_seq, vector FROM memory_vectors
         WHERE memory_seq BETWEEN ?1 AND ?2 AND model = ?3",
    )?;
    let mut rows = stmt.query(params![lo, hi, model])?;
    let mut out = Vec::new();
    while let Some(r) = rows.next()? {
        let blob: Vec<u8> = r.get(1)?;
        if let Some(v) = from_blob(&blob) {
            out.push((r.get(0)?, v));
        }
    }
    Ok(out)
}

/// The memories of `ws` with these rows that are enabled and visible in `scope`, in the order
/// of `seqs`.
pub(crate) fn memories_by_seq(
    conn: &Connection,
    ws: &WorkspaceKey,
    seqs: &[i64],
    scope: Scope,
) -> Result<Vec<(i64, Memory)>, StoreError> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {MEMORY_COLUMNS}, m.seq FROM memories m
         WHERE m.seq = ?1 AND m.workspace = ?2 AND m.enabled = 1
           AND (m.visibility = 'public' OR ?3)"
    ))?;
    let ws_text = ws.to_string();
    let mut out = Vec::with_capacity(seqs.len());
    for seq in seqs {
        let mut rows = stmt.query(params![seq, ws_text, scope.includes_private()])?;
        if let Some(row) = rows.next()? {
            out.push((*seq, memory_from_row(row)?));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vectors_round_trip_through_their_blob() {
        let v = vec![0.5f32, -1.25, 3.0e-7, f32::MIN_POSITIVE];
        assert_eq!(from_blob(&to_blob(&v)), Some(v));
        assert_eq!(from_blob(&[1, 2, 3]), None);
    }
}
