//! memory-save, memory-search, memory-patch and memory-stats.
//!
//! Memories belong to the session user's workspace (`platform/userId`). Private memories exist
//! only in direct messages: saving one elsewhere is 403, and outside DMs they are never returned,
//! counted or patchable (the store's [`Scope`](crate::store::Scope) does the filtering). In a
//! maintenance session the rules of `upkeep` apply on top.

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Value, json};

use super::common::{Deps, invalid, params, scope, store_error, workspace_key};
use super::upkeep;
use crate::embeddings::SearchMode;
use crate::skill_api::{CallContext, SkillError, SkillHandler};
use crate::store::{Importance, MAX_CONTENT_CHARS, MemoryPatch as Patch, NewMemory, Visibility};

/// memory-save: appends a memory.
pub(crate) struct MemorySave(pub Deps);

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SaveParams {
    content: String,
    visibility: Visibility,
    importance: Importance,
    #[serde(default)]
    supersedes: Vec<String>,
}

#[async_trait]
impl SkillHandler for MemorySave {
    fn name(&self) -> &str {
        "memory-save"
    }

    async fn call(&self, ctx: &CallContext, raw: Value) -> Result<Value, SkillError> {
        let p: SaveParams = params(raw)?;
        let session = ctx.session();
        let maintenance = session.purpose.maintenance();
        // A maintenance run saves at its own visibility, whatever the agent asked.
        let visibility = maintenance.map_or(p.visibility, |m| m.visibility);
        if visibility == Visibility::Private && !session.origin.is_dm {
            return Err(SkillError::ForbiddenContext(
                "private memories can only be saved in a direct message with the user; save it \
                 with --visibility public if it is fine for others to know, or not at all"
                    .into(),
            ));
        }
        let max = usize::try_from(self.0.memory_config.max_content_chars)
            .unwrap_or(MAX_CONTENT_CHARS)
            .min(MAX_CONTENT_CHARS);
        let content = p.content.trim();
        let chars = content.chars().count();
        if content.is_empty() {
            return Err(invalid("/content", "the memory text is blank"));
        }
        if chars > max {
            return Err(invalid(
                "/content",
                format!(
                    "the memory is {chars} characters long, the limit is {max}; save one short, \
                     self-contained statement (split long notes into several memories)"
                ),
            ));
        }
        if let Some(policy) = maintenance {
            upkeep::check_targets(&self.0, ctx, policy, &p.supersedes).await?;
            if policy.dry_run {
                let would = json!({
                    "save": {"content": content, "visibility": visibility, "importance": p.importance},
                    "disable": p.supersedes,
                });
                return Ok(upkeep::dry_run(ctx, 1, &p.supersedes, would));
            }
        }
        let new = NewMemory {
            workspace: workspace_key(session)?,
            content: content.to_owned(),
            visibility,
            importance: p.importance,
        };
        let (memory, disabled) = if p.supersedes.is_empty() {
            let memory = self.0.store.save_memory(new).await;
            (memory.map_err(|e| store_error(e, "memory"))?, Vec::new())
        } else {
            self.0
                .store
                .save_superseding(new, p.supersedes, scope(session))
                .await
                .map_err(|e| store_error(e, "memory"))?
        };
        tracing::debug!(session_id = %ctx.session_id(), memory_id = %memory.id, chars, disabled = disabled.len(), "memory saved");
        ctx.with_state(|s| s.count_memory_changes(1, disabled.len()));
        if let Some(semantic) = &self.0.semantic {
            semantic.wake();
        }
        let mut answer = json!({
            "id": memory.id,
            "content": memory.content,
            "visibility": memory.visibility,
            "importance": memory.importance,
            "createdAt": memory.created_at,
        });
        if !memory.supersedes.is_empty() {
            answer["supersedes"] = json!(memory.supersedes);
            answer["disabled"] = json!(disabled);
        }
        Ok(answer)
    }
}

/// memory-search: ranked full-text search of the visible, enabled memories.
pub(crate) struct MemorySearch(pub Deps);

#[derive(Deserialize)]
struct SearchParams {
    query: String,
    limit: u32,
}

#[async_trait]
impl SkillHandler for MemorySearch {
    fn name(&self) -> &str {
        "memory-search"
    }

    fn read_only(&self) -> bool {
        true
    }

    async fn call(&self, ctx: &CallContext, raw: Value) -> Result<Value, SkillError> {
        let p: SearchParams = params(raw)?;
        let session = ctx.session();
        let ws = workspace_key(session)?;
        let hits = self
            .0
            .store
            .search_memories(&ws, &p.query, scope(session), p.limit)
            .await
            .map_err(|e| store_error(e, "memory"))?;
        let (hits, mode) = match &self.0.semantic {
            Some(semantic) => {
                semantic
                    .search(&ws, &p.query, scope(session), p.limit as usize, hits)
                    .await
            }
            None => (hits, SearchMode::FullText(None)),
        };
        // Found memories count as used: an important one comes back into the prompts.
        self.0
            .store
            .note_memories_used(&ws, hits.iter().map(|h| h.memory.id.clone()).collect());
        let memories: Vec<Value> = hits
            .iter()
            .map(|hit| {
                json!({
                    "id": hit.memory.id,
                    "content": hit.memory.content,
                    "visibility": hit.memory.visibility,
                    "importance": hit.memory.importance,
                    "createdAt": hit.memory.created_at,
                    "score": hit.score,
                })
            })
            .collect();
        let mut answer =
            json!({"count": memories.len(), "memories": memories, "mode": mode.as_str()});
        if let SearchMode::FullText(Some(reason)) = &mode {
            answer["modeReason"] = json!(format!(
                "meaning-based search is unavailable ({reason}); these are full-text matches"
            ));
        }
        Ok(answer)
    }
}

/// memory-patch: metadata changes (content is immutable; disabling replaces deleting).
pub(crate) struct MemoryPatch(pub Deps);

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PatchParams {
    memory_id: String,
    #[serde(default)]
    enabled: Option<bool>,
    #[serde(default)]
    visibility: Option<Visibility>,
    #[serde(default)]
    importance: Option<Importance>,
    #[serde(default)]
    related_to: Option<Vec<String>>,
    #[serde(default)]
    supersedes: Option<Vec<String>>,
}

#[async_trait]
impl SkillHandler for MemoryPatch {
    fn name(&self) -> &str {
        "memory-patch"
    }

    async fn call(&self, ctx: &CallContext, raw: Value) -> Result<Value, SkillError> {
        let p: PatchParams = params(raw)?;
        let patch = Patch {
            enabled: p.enabled,
            visibility: p.visibility,
            importance: p.importance,
            related_to: p.related_to,
            supersedes: p.supersedes,
        };
        if patch.is_empty() {
            return Err(invalid(
                "",
                "nothing to change: pass at least one of --enabled/--no-enabled, --visibility, \
                 --importance, --related-to or --supersedes (the content itself can never change)",
            ));
        }
        let session = ctx.session();
        if let Some(policy) = session.purpose.maintenance() {
            if patch.visibility.is_some() {
                return Err(SkillError::ForbiddenContext(
                    "memory maintenance never changes who can see a memory".into(),
                ));
            }
            upkeep::check_targets(&self.0, ctx, policy, std::slice::from_ref(&p.memory_id)).await?;
            if policy.dry_run {
                let disabled = match patch.enabled {
                    Some(false) => vec![p.memory_id.clone()],
                    _ => Vec::new(),
                };
                let would = json!({"patch": p.memory_id, "changes": patch});
                return Ok(upkeep::dry_run(ctx, 0, &disabled, would));
            }
        }
        let disables = patch.enabled == Some(false);
        let record = self
            .0
            .store
            .patch_memory(
                &workspace_key(session)?,
                &p.memory_id,
                patch,
                scope(session),
            )
            .await
            .map_err(|e| {
                store_error(
                    e,
                    &format!(
                        "memory {} was not found for this user (private memories can only be \
                         changed in a direct message)",
                        p.memory_id
                    ),
                )
            })?;
        if disables {
            ctx.with_state(|s| s.count_memory_changes(0, 1));
        }
        Ok(json!({
            "patchId": record.patch_id,
            "memoryId": record.memory_id,
            "changes": record.changes,
        }))
    }
}

/// memory-stats: counts per visibility; the private block only in DMs.
pub(crate) struct MemoryStats(pub Deps);

#[async_trait]
impl SkillHandler for MemoryStats {
    fn name(&self) -> &str {
        "memory-stats"
    }

    fn read_only(&self) -> bool {
        true
    }

    async fn call(&self, ctx: &CallContext, _raw: Value) -> Result<Value, SkillError> {
        let session = ctx.session();
        let stats = self
            .0
            .store
            .memory_stats(&workspace_key(session)?, scope(session))
            .await
            .map_err(|e| store_error(e, "memory statistics"))?;
        serde_json::to_value(stats).map_err(SkillError::internal)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patch_params_accept_the_manifest_names() {
        let p: PatchParams = params(json!({
            "memoryId": "mem_1", "enabled": false, "relatedTo": ["mem_2"], "supersedes": []
        }))
        .expect("params");
        assert_eq!(p.memory_id, "mem_1");
        assert_eq!(p.enabled, Some(false));
        assert_eq!(p.related_to.as_deref(), Some(&["mem_2".to_owned()][..]));
        assert!(p.visibility.is_none() && p.importance.is_none());
    }
}
