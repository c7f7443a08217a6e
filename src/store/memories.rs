//! Memory rows: insert (append-only), patch records and their fold into the current view, and the
//! read queries behind get, stats, export and the prompt's important memories.
//!
//! Everything here is synchronous and takes a `&Connection`; `Store` runs it on the writer thread
//! (writes) or a pooled reader (reads).

use rusqlite::{Connection, OptionalExtension, Row, params};

use super::search::queue_for_index;
use super::types::{
    ExportFilter, Importance, Memory, MemoryPatch, MemoryStats, PatchRecord, Scope, Visibility,
    VisibilityStats, WorkspaceKey,
};
use super::{StoreError, from_ms, to_ms};

/// Columns read by [`memory_from_row`], for a `memories` table aliased `m`.
pub(crate) const MEMORY_COLUMNS: &str = "m.id, m.workspace, m.content, m.visibility, m.importance, \
     m.enabled, m.related_to, m.supersedes, m.created_at, m.updated_at";

/// Builds a [`Memory`] from a row selected with [`MEMORY_COLUMNS`].
pub(crate) fn memory_from_row(row: &Row<'_>) -> Result<Memory, StoreError> {
    let workspace: String = row.get(1)?;
    let visibility: String = row.get(3)?;
    let importance: String = row.get(4)?;
    let related_to: String = row.get(6)?;
    let supersedes: String = row.get(7)?;
    Ok(Memory {
        id: row.get(0)?,
        workspace: workspace.parse()?,
        content: row.get(2)?,
        visibility: visibility.parse()?,
        importance: importance.parse()?,
        enabled: row.get(5)?,
        related_to: parse_ids(&related_to)?,
        supersedes: parse_ids(&supersedes)?,
        created_at: from_ms(row.get(8)?)?,
        updated_at: from_ms(row.get(9)?)?,
    })
}

fn parse_ids(json: &str) -> Result<Vec<String>, StoreError> {
    serde_json::from_str(json)
        .map_err(|e| StoreError::Internal(format!("corrupt id list {json:?}: {e}")))
}

fn ids_json(ids: &[String]) -> String {
    serde_json::to_string(ids).unwrap_or_else(|_| "[]".to_owned())
}

/// A memory row to insert (a new save, or an imported line keeping its id and times).
#[derive(Debug, Clone)]
pub(crate) struct MemoryInsert {
    pub id: String,
    pub workspace: WorkspaceKey,
    pub content: String,
    pub visibility: Visibility,
    pub importance: Importance,
    pub enabled: bool,
    pub related_to: Vec<String>,
    pub supersedes: Vec<String>,
    pub created_at_ms: i64,
}

impl MemoryInsert {
    /// A new save: `new` (its content validated), enabled, created now, replacing
    /// `supersedes`.
    pub(crate) fn new(
        new: super::types::NewMemory,
        supersedes: Vec<String>,
        id: String,
    ) -> Result<Self, StoreError> {
        validate_content(&new.content)?;
        Ok(Self {
            id,
            workspace: new.workspace,
            content: new.content,
            visibility: new.visibility,
            importance: new.importance,
            enabled: true,
            related_to: Vec::new(),
            supersedes,
            created_at_ms: now_ms(),
        })
    }
}

/// Validates memory content: 1..=4000 characters, not only whitespace.
pub(crate) fn validate_content(content: &str) -> Result<(), StoreError> {
    let chars = content.chars().count();
    if content.trim().is_empty() || chars > super::types::MAX_CONTENT_CHARS {
        return Err(StoreError::Invalid(format!(
            "memory content must be 1..={} characters and not blank (got {chars})",
            super::types::MAX_CONTENT_CHARS
        )));
    }
    Ok(())
}

/// Appends a memory. Fails with a constraint error when the id exists.
pub(crate) fn insert(conn: &Connection, m: &MemoryInsert) -> Result<Memory, StoreError> {
    let related = ids_json(&m.related_to);
    let supersedes = ids_json(&m.supersedes);
    let ws_text = m.workspace.to_string();
    // The workspace's next memory number, creating the workspace at its first memory.
    let (ws_id, n): (i64, i64) = conn
        .prepare_cached(
            "INSERT INTO workspaces (key, next_doc) VALUES (?1, 1)
             ON CONFLICT (key) DO UPDATE SET next_doc = next_doc + 1
             RETURNING id, next_doc",
        )?
        .query_row([&ws_text], |r| Ok((r.get(0)?, r.get(1)?)))?;
    if n > u32::MAX as i64 || ws_id > i32::MAX as i64 {
        return Err(StoreError::Invalid(
            "too many memories or workspaces for one database".into(),
        ));
    }
    let seq = (ws_id << 32) | n;
    conn.prepare_cached(
        "INSERT INTO memories (seq, id, workspace, content, created_at, initial_visibility,
             initial_importance, initial_enabled, initial_related_to, initial_supersedes,
             visibility, importance, enabled, related_to, supersedes, updated_at)
         VALUES (?10, ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?5, ?6, ?7, ?8, ?9, ?4)",
    )?
    .execute(params![
        m.id,
        ws_text,
        m.content,
        m.created_at_ms,
        m.visibility.as_str(),
        m.importance.as_str(),
        m.enabled,
        related,
        supersedes,
        seq,
    ])?;
    // Both full-text indexes are written for many memories at once (`search::index_batch`).
    queue_for_index(conn, seq, &m.content)?;
    let at = from_ms(m.created_at_ms)?;
    Ok(Memory {
        id: m.id.clone(),
        workspace: m.workspace.clone(),
        content: m.content.clone(),
        visibility: m.visibility,
        importance: m.importance,
        enabled: m.enabled,
        related_to: m.related_to.clone(),
        supersedes: m.supersedes.clone(),
        created_at: at,
        updated_at: at,
    })
}

/// Appends a memory that replaces `row.supersedes` (ids of `row.workspace` visible in
/// `scope`): the new memory records the lineage, and each replaced memory is disabled by a
/// patch in the same transaction (a failure leaves neither). Returns the memory and the ids
/// that were enabled until now (and are disabled now).
pub(crate) fn insert_superseding(
    conn: &Connection,
    row: &MemoryInsert,
    scope: Scope,
    patch_ids: impl Fn() -> String,
) -> Result<(Memory, Vec<String>), StoreError> {
    if row.supersedes.len() > super::types::MAX_REFERENCES {
        return Err(StoreError::Invalid(format!(
            "at most {} superseded ids",
            super::types::MAX_REFERENCES
        )));
    }
    let ws_text = row.workspace.to_string();
    let mut targets = Vec::with_capacity(row.supersedes.len());
    let mut missing = Vec::new();
    for id in &row.supersedes {
        match find_visible(conn, &ws_text, id, scope)? {
            Some(seq) => targets.push((id.clone(), seq)),
            None => missing.push(id.clone()),
        }
    }
    if !missing.is_empty() {
        return Err(StoreError::InvalidReference { ids: missing });
    }
    let memory = insert(conn, row)?;
    let disable = MemoryPatch {
        enabled: Some(false),
        ..MemoryPatch::default()
    };
    let mut disabled = Vec::new();
    for (id, seq) in targets {
        let enabled: bool = conn
            .prepare_cached("SELECT enabled FROM memories WHERE seq = ?1")?
            .query_row([seq], |r| r.get(0))?;
        if !enabled {
            continue;
        }
        insert_patch(conn, seq, &patch_ids(), &disable, row.created_at_ms, "api")?;
        refold(conn, seq)?;
        disabled.push(id);
    }
    Ok((memory, disabled))
}

/// A public, normal memory of `ws` saying `content`, with a fresh id (the store's unit tests).
#[cfg(test)]
pub(crate) fn test_row(ws: &WorkspaceKey, content: &str) -> MemoryInsert {
    MemoryInsert::new(
        super::types::NewMemory {
            workspace: ws.clone(),
            content: content.into(),
            visibility: Visibility::Public,
            importance: Importance::Normal,
        },
        Vec::new(),
        super::new_id("mem"),
    )
    .unwrap()
}

/// The rowid range `(lo, hi)` of a workspace's memories, or `None` when it has none.
pub(crate) fn workspace_range(
    conn: &Connection,
    ws: &WorkspaceKey,
) -> Result<Option<(i64, i64)>, StoreError> {
    let id: Option<i64> = conn
        .prepare_cached("SELECT id FROM workspaces WHERE key = ?1")?
        .query_row([ws.to_string()], |r| r.get(0))
        .optional()?;
    Ok(id.map(|id| (id << 32, (id << 32) | 0xFFFF_FFFF)))
}

/// The workspace a memory id belongs to, if it exists at all (any workspace, any visibility).
pub(crate) fn workspace_of(conn: &Connection, id: &str) -> Result<Option<String>, StoreError> {
    Ok(conn
        .prepare_cached("SELECT workspace FROM memories WHERE id = ?1")?
        .query_row([id], |r| r.get(0))
        .optional()?)
}

/// Row id and current visibility of a memory in `ws`, if it exists and `scope` may see it.
fn find_visible(
    conn: &Connection,
    ws: &str,
    id: &str,
    scope: Scope,
) -> Result<Option<i64>, StoreError> {
    let row: Option<(i64, String)> = conn
        .prepare_cached("SELECT seq, visibility FROM memories WHERE id = ?1 AND workspace = ?2")?
        .query_row(params![id, ws], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    match row {
        Some((seq, vis)) if scope.allows(vis.parse()?) => Ok(Some(seq)),
        _ => Ok(None),
    }
}

/// A memory of `ws` visible in `scope`.
pub(crate) fn get(
    conn: &Connection,
    ws: &WorkspaceKey,
    id: &str,
    scope: Scope,
) -> Result<Option<Memory>, StoreError> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {MEMORY_COLUMNS} FROM memories m WHERE m.id = ?1 AND m.workspace = ?2 \
         AND (m.visibility = 'public' OR ?3)"
    ))?;
    let mut rows = stmt.query(params![id, ws.to_string(), scope.includes_private()])?;
    match rows.next()? {
        Some(row) => Ok(Some(memory_from_row(row)?)),
        None => Ok(None),
    }
}

fn check_patch_shape(id: &str, patch: &MemoryPatch) -> Result<(), StoreError> {
    if patch.is_empty() {
        return Err(StoreError::Invalid(
            "a memory patch needs at least one change".into(),
        ));
    }
    for list in [&patch.related_to, &patch.supersedes].into_iter().flatten() {
        if list.len() > super::types::MAX_REFERENCES {
            return Err(StoreError::Invalid(format!(
                "at most {} referenced ids per list",
                super::types::MAX_REFERENCES
            )));
        }
        if list.iter().any(|r| r == id) {
            return Err(StoreError::Invalid(format!(
                "memory {id} cannot reference itself"
            )));
        }
    }
    Ok(())
}

/// Removes duplicates from the id lists of a patch, keeping the first occurrence.
fn dedup_lists(patch: &mut MemoryPatch) {
    for list in [&mut patch.related_to, &mut patch.supersedes]
        .into_iter()
        .flatten()
    {
        let mut seen = std::collections::HashSet::new();
        list.retain(|id| seen.insert(id.clone()));
    }
}

/// Records a patch from the API: the memory must be visible in `scope`, referenced ids must exist
/// in the same workspace and be visible in `scope` too. Folds the patch into the current view.
pub(crate) fn patch(
    conn: &Connection,
    ws: &WorkspaceKey,
    id: &str,
    mut changes: MemoryPatch,
    scope: Scope,
    patch_id: String,
    now_ms: i64,
) -> Result<PatchRecord, StoreError> {
    check_patch_shape(id, &changes)?;
    dedup_lists(&mut changes);
    let ws_text = ws.to_string();
    let seq = find_visible(conn, &ws_text, id, scope)?.ok_or(StoreError::NotFound)?;
    let mut missing = Vec::new();
    for list in [&changes.related_to, &changes.supersedes]
        .into_iter()
        .flatten()
    {
        for target in list {
            if find_visible(conn, &ws_text, target, scope)?.is_none() && !missing.contains(target) {
                missing.push(target.clone());
            }
        }
    }
    if !missing.is_empty() {
        return Err(StoreError::InvalidReference { ids: missing });
    }
    insert_patch(conn, seq, &patch_id, &changes, now_ms, "api")?;
    refold(conn, seq)?;
    Ok(PatchRecord {
        patch_id,
        memory_id: id.to_owned(),
        changes,
        created_at: from_ms(now_ms)?,
    })
}

/// Appends a patch record. Returns false (and changes nothing) when the patch id exists.
pub(crate) fn insert_patch(
    conn: &Connection,
    memory_seq: i64,
    patch_id: &str,
    changes: &MemoryPatch,
    created_at_ms: i64,
    origin: &str,
) -> Result<bool, StoreError> {
    let json = serde_json::to_string(changes)
        .map_err(|e| StoreError::Internal(format!("serialising a patch: {e}")))?;
    let n = conn
        .prepare_cached(
            "INSERT INTO memory_patches (id, memory_seq, changes, created_at, origin)
             VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (id) DO NOTHING",
        )?
        .execute(params![patch_id, memory_seq, json, created_at_ms, origin])?;
    Ok(n == 1)
}

/// Row id of memory `id` in workspace `ws` regardless of visibility (for imports).
pub(crate) fn seq_in_workspace(
    conn: &Connection,
    ws: &str,
    id: &str,
) -> Result<Option<i64>, StoreError> {
    find_visible(conn, ws, id, Scope::IncludePrivate)
}

/// Recomputes the current view of a memory: initial metadata, then every patch in
/// `(created_at, seq)` order, each field last-writer-wins.
pub(crate) fn refold(conn: &Connection, seq: i64) -> Result<(), StoreError> {
    type Initial = (String, String, bool, String, String, i64);
    let (vis, imp, enabled, related, supersedes, created): Initial = conn
        .prepare_cached(
            "SELECT initial_visibility, initial_importance, initial_enabled, initial_related_to,
                    initial_supersedes, created_at FROM memories WHERE seq = ?1",
        )?
        .query_row([seq], |r| {
            Ok((
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                r.get(3)?,
                r.get(4)?,
                r.get(5)?,
            ))
        })?;
    let mut vis: Visibility = vis.parse()?;
    let mut imp: Importance = imp.parse()?;
    let mut enabled = enabled;
    let mut related = parse_ids(&related)?;
    let mut supersedes = parse_ids(&supersedes)?;
    let mut updated = created;
    let mut stmt = conn.prepare_cached(
        "SELECT changes, created_at FROM memory_patches WHERE memory_seq = ?1
         ORDER BY created_at, seq",
    )?;
    let mut rows = stmt.query([seq])?;
    while let Some(row) = rows.next()? {
        let json: String = row.get(0)?;
        let at: i64 = row.get(1)?;
        let p: MemoryPatch = serde_json::from_str(&json)
            .map_err(|e| StoreError::Internal(format!("corrupt patch {json:?}: {e}")))?;
        if let Some(v) = p.visibility {
            vis = v;
        }
        if let Some(i) = p.importance {
            imp = i;
        }
        if let Some(e) = p.enabled {
            enabled = e;
        }
        if let Some(r) = p.related_to {
            related = r;
        }
        if let Some(s) = p.supersedes {
            supersedes = s;
        }
        updated = updated.max(at);
    }
    conn.prepare_cached(
        "UPDATE memories SET visibility = ?2, importance = ?3, enabled = ?4, related_to = ?5,
             supersedes = ?6, updated_at = ?7 WHERE seq = ?1",
    )?
    .execute(params![
        seq,
        vis.as_str(),
        imp.as_str(),
        enabled,
        ids_json(&related),
        ids_json(&supersedes),
        updated
    ])?;
    Ok(())
}

/// All patches of a memory, in fold order.
pub(crate) fn patches_of(
    conn: &Connection,
    ws: &WorkspaceKey,
    id: &str,
    scope: Scope,
) -> Result<Vec<PatchRecord>, StoreError> {
    let Some(seq) = find_visible(conn, &ws.to_string(), id, scope)? else {
        return Err(StoreError::NotFound);
    };
    let mut stmt = conn.prepare_cached(
        "SELECT ?2, id, changes, created_at FROM memory_patches WHERE memory_seq = ?1
         ORDER BY created_at, seq",
    )?;
    patch_records(stmt.query(params![seq, id])?)
}

/// Every patch of the memories of `ws` visible in `scope`, each memory's in fold order (an
/// export's changes in one read).
pub(crate) fn workspace_patches(
    conn: &Connection,
    ws: &WorkspaceKey,
    scope: Scope,
) -> Result<Vec<PatchRecord>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT m.id, p.id, p.changes, p.created_at
         FROM memory_patches p JOIN memories m ON m.seq = p.memory_seq
         WHERE m.workspace = ?1 AND (?2 OR m.visibility = 'public')
         ORDER BY p.memory_seq, p.created_at, p.seq",
    )?;
    patch_records(stmt.query(params![ws.to_string(), scope.includes_private()])?)
}

/// Patch records from rows of (memory id, patch id, changes JSON, time).
fn patch_records(mut rows: rusqlite::Rows<'_>) -> Result<Vec<PatchRecord>, StoreError> {
    let mut out = Vec::new();
    while let Some(row) = rows.next()? {
        let json: String = row.get(2)?;
        out.push(PatchRecord {
            memory_id: row.get(0)?,
            patch_id: row.get(1)?,
            changes: serde_json::from_str(&json)
                .map_err(|e| StoreError::Internal(format!("corrupt patch {json:?}: {e}")))?,
            created_at: from_ms(row.get(3)?)?,
        });
    }
    Ok(out)
}

/// Counts per visibility; the private block only with [`Scope::IncludePrivate`].
pub(crate) fn stats(
    conn: &Connection,
    ws: &WorkspaceKey,
    scope: Scope,
) -> Result<MemoryStats, StoreError> {
    let mut public = VisibilityStats::default();
    let mut private = VisibilityStats::default();
    // `memory_counts` is kept in step by triggers (`schema_v3.sql`): at most eight rows.
    let mut stmt = conn.prepare_cached(
        "SELECT visibility, enabled, importance, n FROM memory_counts WHERE workspace = ?1",
    )?;
    let mut rows = stmt.query([ws.to_string()])?;
    while let Some(row) = rows.next()? {
        let vis: String = row.get(0)?;
        let enabled: bool = row.get(1)?;
        let imp: String = row.get(2)?;
        let n: i64 = row.get(3)?;
        let n = u64::try_from(n).unwrap_or(0);
        let block = match vis.parse()? {
            Visibility::Public => &mut public,
            Visibility::Private => &mut private,
        };
        block.total += n;
        if enabled {
            block.enabled += n;
        } else {
            block.disabled += n;
        }
        match imp.parse()? {
            Importance::High => block.high_importance += n,
            Importance::Normal => block.normal_importance += n,
        }
    }
    Ok(MemoryStats::new(
        public,
        scope.includes_private().then_some(private),
    ))
}

/// Memories for an export, oldest first.
pub(crate) fn export(
    conn: &Connection,
    ws: &WorkspaceKey,
    filter: ExportFilter,
) -> Result<Vec<Memory>, StoreError> {
    let importance = filter.importance.map(Importance::as_str);
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {MEMORY_COLUMNS} FROM memories m
         WHERE m.workspace = ?1 AND (m.visibility = 'public' OR ?2)
           AND (?3 IS NULL OR m.importance = ?3) AND (m.enabled = 1 OR NOT ?4)
         ORDER BY m.created_at, m.seq"
    ))?;
    let mut rows = stmt.query(params![
        ws.to_string(),
        filter.scope.includes_private(),
        importance,
        filter.enabled_only
    ])?;
    let mut out = Vec::new();
    while let Some(row) = rows.next()? {
        out.push(memory_from_row(row)?);
    }
    Ok(out)
}

/// The prompt's candidates among the enabled, high-importance memories visible in `scope`,
/// best first: the most recent of saved-or-last-used first (a memory brought back by search
/// or shown in a prompt counts as fresh), then the most used; at most `limit`. Also returns
/// how many there are in all. Read through `memories_by_state` (workspace, visibility,
/// enabled, importance), named because without `ANALYZE` statistics the planner prefers walking
/// the whole workspace in `memories_by_workspace` order: the cost follows the important
/// memories rather than the workspace.
pub(crate) fn prompt_candidates(
    conn: &Connection,
    ws: &WorkspaceKey,
    scope: Scope,
    limit: u32,
) -> Result<(Vec<Memory>, u64), StoreError> {
    let visibilities = if scope.includes_private() {
        "('public', 'private')"
    } else {
        "('public')"
    };
    let total: i64 = conn
        .prepare_cached(&format!(
            "SELECT count(*) FROM memories m INDEXED BY memories_by_state
             WHERE m.workspace = ?1 AND m.visibility IN {visibilities}
               AND m.enabled = 1 AND m.importance = 'high'"
        ))?
        .query_row([ws.to_string()], |r| r.get(0))?;
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {MEMORY_COLUMNS} FROM memories m INDEXED BY memories_by_state
         LEFT JOIN memory_use u ON u.memory_seq = m.seq
         WHERE m.workspace = ?1 AND m.visibility IN {visibilities}
           AND m.enabled = 1 AND m.importance = 'high'
         ORDER BY max(m.created_at, coalesce(u.last_used_at, 0)) DESC,
                  coalesce(u.uses, 0) DESC, m.seq DESC
         LIMIT ?2"
    ))?;
    let mut rows = stmt.query(params![ws.to_string(), limit])?;
    let mut out = Vec::new();
    while let Some(row) = rows.next()? {
        out.push(memory_from_row(row)?);
    }
    Ok((out, u64::try_from(total).unwrap_or(0)))
}

/// Records that the memories `ids` of `ws` were used at `now_ms` (shown in a prompt or
/// returned by a search). Unknown ids are ignored.
pub(crate) fn mark_used(
    conn: &Connection,
    ws: &WorkspaceKey,
    ids: &[String],
    now_ms: i64,
) -> Result<(), StoreError> {
    let mut stmt = conn.prepare_cached(
        "INSERT INTO memory_use (memory_seq, last_used_at, uses)
         SELECT seq, ?3, 1 FROM memories WHERE id = ?2 AND workspace = ?1
         ON CONFLICT (memory_seq) DO UPDATE
         SET last_used_at = max(last_used_at, excluded.last_used_at), uses = uses + 1",
    )?;
    let ws = ws.to_string();
    for id in ids {
        stmt.execute(params![ws, id, now_ms])?;
    }
    Ok(())
}

/// Current time in milliseconds, for callers that need `to_ms(now)`.
pub(crate) fn now_ms() -> i64 {
    to_ms(chrono::Utc::now())
}
