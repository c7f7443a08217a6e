//! The [`Store`] methods of memories: save (and save superseding), read, patch, search, stats,
//! export, the prompt's important memories, and the embedding queue and vectors of
//! meaning-based recall. The SQL is in `memories`, `search` and `vectors`.

use super::types::{
    ExportFilter, Memory, MemoryPatch, MemoryStats, NewMemory, PatchRecord, PromptMemories, Scope,
    ScoredMemory, WorkspaceKey,
};
use super::{Store, StoreError, memories, new_id, search, vectors};

impl Store {
    /// Appends a memory (new `mem_…` id, `createdAt = updatedAt = now`). Content is validated
    /// (1..=4000 characters, not blank) and never changes afterwards.
    pub async fn save_memory(&self, new: NewMemory) -> Result<Memory, StoreError> {
        let row = memories::MemoryInsert::new(new, Vec::new(), new_id("mem"))?;
        self.db.write(move |c| memories::insert(c, &row)).await
    }

    /// Appends a memory that replaces `supersedes` (memories of the same workspace visible in
    /// `scope`): the new memory records the lineage and each replaced memory is disabled, all
    /// in one transaction. Returns the memory and the ids disabled now (those that were still
    /// enabled). `InvalidReference` names ids that do not exist or are not visible.
    pub async fn save_superseding(
        &self,
        new: NewMemory,
        supersedes: Vec<String>,
        scope: Scope,
    ) -> Result<(Memory, Vec<String>), StoreError> {
        let mut supersedes = supersedes;
        let mut seen = std::collections::HashSet::new();
        supersedes.retain(|id| seen.insert(id.clone()));
        let row = memories::MemoryInsert::new(new, supersedes, new_id("mem"))?;
        self.db
            .write(move |c| memories::insert_superseding(c, &row, scope, || new_id("pat")))
            .await
    }

    /// A memory of `ws` by id; `None` when missing or not visible in `scope` (private memories
    /// only with [`Scope::IncludePrivate`]).
    pub async fn get_memory(
        &self,
        ws: &WorkspaceKey,
        id: &str,
        scope: Scope,
    ) -> Result<Option<Memory>, StoreError> {
        let (ws, id) = (ws.clone(), id.to_owned());
        self.db
            .read(move |c| memories::get(c, &ws, &id, scope))
            .await
    }

    /// Records a metadata patch and folds it into the memory's current view.
    ///
    /// Errors: `Invalid` for an empty patch or self-reference, `NotFound` when the memory is not
    /// visible in `scope`, `InvalidReference` when `relatedTo`/`supersedes` name ids that do not
    /// exist in the same workspace (or are not visible in `scope`). Deciding whether a context may
    /// set `visibility` is the caller's business.
    pub async fn patch_memory(
        &self,
        ws: &WorkspaceKey,
        id: &str,
        patch: MemoryPatch,
        scope: Scope,
    ) -> Result<PatchRecord, StoreError> {
        let (ws, id) = (ws.clone(), id.to_owned());
        let patch_id = new_id("pat");
        let now = memories::now_ms();
        self.db
            .write(move |c| memories::patch(c, &ws, &id, patch, scope, patch_id, now))
            .await
    }

    /// The patch history of a memory visible in `scope`, in fold order.
    pub async fn memory_patches(
        &self,
        ws: &WorkspaceKey,
        id: &str,
        scope: Scope,
    ) -> Result<Vec<PatchRecord>, StoreError> {
        let (ws, id) = (ws.clone(), id.to_owned());
        self.db
            .read(move |c| memories::patches_of(c, &ws, &id, scope))
            .await
    }

    /// Every patch of the memories of `ws` visible in `scope`, each memory's in fold order.
    pub async fn workspace_patches(
        &self,
        ws: &WorkspaceKey,
        scope: Scope,
    ) -> Result<Vec<PatchRecord>, StoreError> {
        let ws = ws.clone();
        self.db
            .read(move |c| memories::workspace_patches(c, &ws, scope))
            .await
    }

    /// Full-text search of enabled memories of `ws` visible in `scope`: whitespace-separated
    /// keywords OR'd, case-insensitive, CJK substrings found; best `limit` (1..=1000) hits,
    /// ranked by relevance, then high importance, then newest. Any text is a valid query. Each
    /// keyword ranks at most its newest ~1 000 matches (exact below that; see `search`).
    pub async fn search_memories(
        &self,
        ws: &WorkspaceKey,
        query: &str,
        scope: Scope,
        limit: u32,
    ) -> Result<Vec<ScoredMemory>, StoreError> {
        let (w, q) = (ws.clone(), query.to_owned());
        let first = self
            .db
            .read(move |c| {
                if search::waiting_in(c, &w)? {
                    return Ok(None);
                }
                search::search(c, &w, &q, scope, limit).map(Some)
            })
            .await?;
        if let Some(hits) = first {
            return Ok(hits);
        }
        // Memories of this workspace wait for the indexes (`search::index_batch`): index them,
        // then search. Saves acknowledged before this call were queued or indexed when it
        // looked, so they are all found now; later ones may or may not be.
        self.db.write(search::index_all).await?;
        let (ws, query) = (ws.clone(), query.to_owned());
        self.db
            .read(move |c| search::search(c, &ws, &query, scope, limit))
            .await
    }

    /// Counts per visibility (`total, enabled, disabled, highImportance, normalImportance`);
    /// the private block is `None` unless `scope` includes private memories.
    pub async fn memory_stats(
        &self,
        ws: &WorkspaceKey,
        scope: Scope,
    ) -> Result<MemoryStats, StoreError> {
        let ws = ws.clone();
        self.db.read(move |c| memories::stats(c, &ws, scope)).await
    }

    /// Memories for an export (oldest first), filtered by scope, importance and enabled.
    pub async fn export_memories(
        &self,
        ws: &WorkspaceKey,
        filter: ExportFilter,
    ) -> Result<Vec<Memory>, StoreError> {
        let ws = ws.clone();
        self.db
            .read(move |c| memories::export(c, &ws, filter))
            .await
    }

    /// The prompt's candidates among the enabled high-importance memories visible in
    /// `scope`: best first (newest of saved-or-last-used, then most used), at most `limit`,
    /// with the number there are in all. The caller fits them to its token budget.
    pub async fn prompt_memories(
        &self,
        ws: &WorkspaceKey,
        scope: Scope,
        limit: u32,
    ) -> Result<PromptMemories, StoreError> {
        let ws = ws.clone();
        let (memories, total) = self
            .db
            .read(move |c| memories::prompt_candidates(c, &ws, scope, limit))
            .await?;
        Ok(PromptMemories { memories, total })
    }

    /// Records that memories `ids` of `ws` were used now (shown in a prompt, returned by a
    /// search), for [`prompt_memories`](Self::prompt_memories)' order. Queued for the writer
    /// without waiting: the caller's answer never waits on this bookkeeping.
    pub fn note_memories_used(&self, ws: &WorkspaceKey, ids: Vec<String>) {
        if ids.is_empty() {
            return;
        }
        let (ws, now) = (ws.clone(), memories::now_ms());
        self.db.write_detached("memory use", move |c| {
            memories::mark_used(c, &ws, &ids, now)
        });
    }

    // ---- vectors (`memory.embeddings`) -----------------------------------------------------

    /// Turns the embedding queue on (new memories are queued for a vector, and every stored
    /// memory without one is queued now) or off (nothing is queued). The daemon sets it at
    /// start from `memory.embeddings`.
    pub async fn set_embedding_queue(&self, on: bool) -> Result<(), StoreError> {
        self.db.write(move |c| vectors::set_queueing(c, on)).await
    }

    /// Queues again every memory whose vector another model made, dropping those vectors.
    pub async fn requeue_other_model_vectors(&self, model: &str) -> Result<usize, StoreError> {
        let model = model.to_owned();
        self.db
            .write(move |c| vectors::requeue_other_models(c, &model))
            .await
    }

    /// Up to `limit` memories waiting for a vector.
    pub async fn embedding_queue(
        &self,
        limit: u32,
    ) -> Result<Vec<vectors::PendingEmbedding>, StoreError> {
        self.db.read(move |c| vectors::queued(c, limit)).await
    }

    /// How many memories wait for a vector.
    pub async fn embedding_backlog(&self) -> Result<u64, StoreError> {
        self.db.read(vectors::queue_len).await
    }

    /// Stores vectors (row, normalised vector) made by `model`, taking them off the queue.
    pub async fn put_vectors(
        &self,
        model: &str,
        rows: Vec<(i64, Vec<f32>)>,
    ) -> Result<(), StoreError> {
        let model = model.to_owned();
        self.db.write(move |c| vectors::put(c, &model, &rows)).await
    }

    /// Every vector of `ws` made by `model`, by row.
    pub async fn workspace_vectors(
        &self,
        ws: &WorkspaceKey,
        model: &str,
    ) -> Result<Vec<(i64, Vec<f32>)>, StoreError> {
        let (ws, model) = (ws.clone(), model.to_owned());
        self.db
            .read(move |c| vectors::of_workspace(c, &ws, &model))
            .await
    }

    /// The enabled memories of `ws` visible in `scope` among rows `seqs`, in that order.
    pub async fn memories_by_seq(
        &self,
        ws: &WorkspaceKey,
        seqs: Vec<i64>,
        scope: Scope,
    ) -> Result<Vec<(i64, Memory)>, StoreError> {
        let ws = ws.clone();
        self.db
            .read(move |c| vectors::memories_by_seq(c, &ws, &seqs, scope))
            .await
    }
}
