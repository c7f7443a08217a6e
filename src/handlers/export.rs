//! memory-export: what is kept about the user as a Markdown or JSON file, always delivered **by
//! direct message** to the invoking user, even when asked in a public channel: their memories
//! with every change recorded on each, their reminders (any state) and their model, voice and MCP usage per
//! day (`docs/PRIVACY.md`). Private memories and the reminders are included only when the export
//! was asked for from a DM.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::{Value, json};

use super::common::{Deps, params, platform_error, scope, store_error, workspace_key};
use crate::platform::OutgoingFile;
use crate::skill_api::{CallContext, SkillError, SkillHandler};
use crate::store::erasure::RequestedBy;
use crate::store::{
    DayUsage, ExportFilter, Importance, Memory, PatchRecord, Reminder, StoreError, WorkspaceKey,
};

/// What the export holds besides the memories.
#[derive(Debug, Default)]
struct Extra {
    /// Each exported memory's changes, oldest first, in the memories' order.
    patches: Vec<Vec<PatchRecord>>,
    /// Every reminder (only in a DM's export).
    reminders: Option<Vec<Reminder>>,
    /// Tokens, voice and MCP tool calls per day.
    usage: Vec<DayUsage>,
}

/// The `memory-export` skill: the user's memories as a file, always sent by DM (private ones only
/// when asked from a DM).
pub(crate) struct MemoryExport(pub Deps);

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Format {
    Markdown,
    Json,
}

impl Format {
    fn as_str(self) -> &'static str {
        match self {
            Format::Markdown => "markdown",
            Format::Json => "json",
        }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ExportParams {
    format: Format,
    importance: String,
    enabled_only: bool,
}

#[async_trait]
impl SkillHandler for MemoryExport {
    fn name(&self) -> &str {
        "memory-export"
    }

    async fn call(&self, ctx: &CallContext, raw: Value) -> Result<Value, SkillError> {
        let p: ExportParams = params(raw)?;
        let session = ctx.session();
        let importance = match p.importance.as_str() {
            "high" => Some(Importance::High),
            "normal" => Some(Importance::Normal),
            _ => None,
        };
        let filter = ExportFilter {
            scope: scope(session),
            importance,
            enabled_only: p.enabled_only,
        };
        let memories = self
            .0
            .store
            .export_memories(&workspace_key(session)?, filter)
            .await
            .map_err(|e| store_error(e, "memories"))?;
        let ws = workspace_key(session)?;
        let extra = self
            .extra(&ws, &memories, filter)
            .await
            .map_err(|e| store_error(e, "memories"))?;
        let now = self.0.clock.now();
        let (filename, bytes) = render(p.format, &memories, &extra, filter, now)?;
        let caption = format!(
            "Your memory export: {} memor{} ({}{}).",
            memories.len(),
            if memories.len() == 1 { "y" } else { "ies" },
            p.format.as_str(),
            if filter.scope.includes_private() {
                ", public and private"
            } else {
                ", public only: ask in a direct message to include private memories"
            }
        );
        let adapter = self.0.adapter(session)?;
        let file = OutgoingFile::from_bytes(filename, bytes).with_mime(match p.format {
            Format::Markdown => "text/markdown",
            Format::Json => "application/json",
        });
        let delivery = adapter
            .send_dm_files(&session.origin.user_id, vec![file], Some(&caption))
            .await
            .map_err(platform_error)?;
        let message_id = delivery
            .messages
            .first()
            .map(|m| m.message_id.clone())
            .ok_or_else(|| SkillError::internal(anyhow::anyhow!("DM delivery without message")))?;
        // Recorded as any privacy action: who (as the log's keyed hash), what, when.
        let recorded = self
            .0
            .store
            .privacy_log(
                "export",
                RequestedBy::User,
                Some(&ws),
                json!({"memories": memories.len(), "format": p.format.as_str()}),
            )
            .await;
        if let Err(error) = recorded {
            tracing::warn!(%error, "could not record the export in privacy_log");
        }
        tracing::info!(
            session_id = %ctx.session_id(),
            count = memories.len(),
            format = p.format.as_str(),
            include_private = filter.scope.includes_private(),
            "memory export delivered by DM"
        );
        Ok(json!({
            "delivered": true,
            "messageId": message_id,
            "count": memories.len(),
            "format": p.format.as_str(),
        }))
    }
}

impl MemoryExport {
    /// The exported memories' changes, the reminders (in a DM's export) and the usage days.
    async fn extra(
        &self,
        ws: &WorkspaceKey,
        memories: &[Memory],
        filter: ExportFilter,
    ) -> Result<Extra, StoreError> {
        let store = &self.0.store;
        let mut by_memory: std::collections::HashMap<String, Vec<PatchRecord>> =
            std::collections::HashMap::new();
        for patch in store.workspace_patches(ws, filter.scope).await? {
            by_memory
                .entry(patch.memory_id.clone())
                .or_default()
                .push(patch);
        }
        let patches = memories
            .iter()
            .map(|m| by_memory.remove(&m.id).unwrap_or_default())
            .collect();
        let reminders = if filter.scope.includes_private() {
            Some(store.all_reminders(ws).await?)
        } else {
            None
        };
        Ok(Extra {
            patches,
            reminders,
            usage: store.usage_days(ws).await?,
        })
    }
}

/// The export file: name and content.
fn render(
    format: Format,
    memories: &[Memory],
    extra: &Extra,
    filter: ExportFilter,
    now: DateTime<Utc>,
) -> Result<(String, Vec<u8>), SkillError> {
    let stamp = now.format("%Y%m%dT%H%M%SZ");
    let include_private = filter.scope.includes_private();
    match format {
        Format::Json => {
            let mut listed = Vec::with_capacity(memories.len());
            for (i, memory) in memories.iter().enumerate() {
                let mut m = serde_json::to_value(memory).map_err(SkillError::internal)?;
                m["patches"] = json!(extra.patches.get(i).cloned().unwrap_or_default());
                listed.push(m);
            }
            let usage: Vec<Value> = extra
                .usage
                .iter()
                .map(|d| {
                    let (u, v) = (&d.tokens, &d.voice);
                    json!({"day": d.day.to_string(), "inputTokens": u.input_tokens,
                           "outputTokens": u.output_tokens, "requests": u.requests,
                           "transcriptions": v.transcriptions, "audioInMs": v.audio_in_ms,
                           "speeches": v.speeches, "audioOutMs": v.audio_out_ms,
                           "mcpCalls": d.mcp_calls})
                })
                .collect();
            let mut doc = json!({
                "exportedAt": now,
                "includesPrivate": include_private,
                "importance": filter.importance.map_or("all", Importance::as_str),
                "enabledOnly": filter.enabled_only,
                "count": memories.len(),
                "memories": listed,
                "usage": usage,
            });
            if let Some(reminders) = &extra.reminders {
                doc["reminders"] = json!(reminders);
            }
            let bytes = serde_json::to_vec_pretty(&doc).map_err(SkillError::internal)?;
            Ok((format!("memories-{stamp}.json"), bytes))
        }
        Format::Markdown => Ok((
            format!("memories-{stamp}.md"),
            markdown(memories, extra, include_private, now).into_bytes(),
        )),
    }
}

fn markdown(
    memories: &[Memory],
    extra: &Extra,
    include_private: bool,
    now: DateTime<Utc>,
) -> String {
    let mut out = format!(
        "# Memory export\n\nExported {} · {} memor{} · {}\n",
        now.format("%Y-%m-%d %H:%M UTC"),
        memories.len(),
        if memories.len() == 1 { "y" } else { "ies" },
        if include_private {
            "public and private"
        } else {
            "public only"
        }
    );
    if memories.is_empty() {
        out.push_str("\nNo memories match this export.\n");
    }
    for memory in memories {
        out.push_str(&format!(
            "\n## {}\n\n- saved: {}\n- visibility: {}\n- importance: {}\n- enabled: {}\n",
            memory.id,
            memory.created_at.format("%Y-%m-%d %H:%M UTC"),
            memory.visibility,
            memory.importance,
            if memory.enabled { "yes" } else { "no" },
        ));
        if !memory.related_to.is_empty() {
            out.push_str(&format!("- related to: {}\n", memory.related_to.join(", ")));
        }
        if !memory.supersedes.is_empty() {
            out.push_str(&format!("- supersedes: {}\n", memory.supersedes.join(", ")));
        }
        for patch in memory_patches(extra, memories, &memory.id) {
            out.push_str(&format!(
                "- changed {}: {}\n",
                patch.created_at.format("%Y-%m-%d %H:%M UTC"),
                serde_json::to_string(&patch.changes).unwrap_or_default()
            ));
        }
        out.push('\n');
        for line in memory.content.lines() {
            out.push_str("> ");
            out.push_str(line);
            out.push('\n');
        }
    }
    match &extra.reminders {
        Some(reminders) => {
            out.push_str(&format!("\n# Reminders ({})\n\n", reminders.len()));
            for r in reminders {
                out.push_str(&format!(
                    "- {} · {} · {}\n",
                    r.scheduled_at.format("%Y-%m-%d %H:%M UTC"),
                    r.state.as_str(),
                    r.message.replace('\n', " ")
                ));
            }
        }
        None => out.push_str(
            "\n# Reminders\n\nIncluded only in an export asked for in a direct message.\n",
        ),
    }
    out.push_str(&format!("\n# Model usage ({} days)\n\n", extra.usage.len()));
    for d in &extra.usage {
        let (u, v) = (&d.tokens, &d.voice);
        out.push_str(&format!(
            "- {}: {} input tokens, {} output tokens, {} requests",
            d.day, u.input_tokens, u.output_tokens, u.requests
        ));
        if v.transcriptions > 0 || v.speeches > 0 {
            out.push_str(&format!(
                "; voice: {} transcribed ({:.1} min), {} spoken ({:.1} min)",
                v.transcriptions,
                v.audio_in_ms as f64 / 60_000.0,
                v.speeches,
                v.audio_out_ms as f64 / 60_000.0
            ));
        }
        if d.mcp_calls > 0 {
            out.push_str(&format!("; {} tool calls (MCP)", d.mcp_calls));
        }
        out.push('\n');
    }
    out
}

/// The recorded changes of memory `id` (in `memories`' order in `extra`).
fn memory_patches<'a>(extra: &'a Extra, memories: &[Memory], id: &str) -> &'a [PatchRecord] {
    memories
        .iter()
        .position(|m| m.id == id)
        .and_then(|i| extra.patches.get(i))
        .map_or(&[], Vec::as_slice)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Scope;
    use crate::store::{LlmUsage, Visibility, VoiceUsage, WorkspaceKey};

    fn memory(id: &str, content: &str) -> Memory {
        let at = DateTime::from_timestamp(1_700_000_000, 0).unwrap_or_default();
        Memory {
            id: id.into(),
            workspace: WorkspaceKey::new("discord", "u1").expect("key"),
            content: content.into(),
            visibility: Visibility::Public,
            importance: Importance::High,
            enabled: true,
            related_to: vec!["mem_0".into()],
            supersedes: Vec::new(),
            created_at: at,
            updated_at: at,
        }
    }

    #[test]
    fn markdown_quotes_every_line_and_lists_metadata() {
        let text = markdown(
            &[memory("mem_1", "likes tea\nand cats")],
            &Extra::default(),
            false,
            Utc::now(),
        );
        assert!(text.contains("## mem_1"), "{text}");
        assert!(text.contains("> likes tea\n> and cats\n"), "{text}");
        assert!(text.contains("- related to: mem_0"), "{text}");
        assert!(text.contains("public only"), "{text}");
        assert!(text.contains("Included only in an export asked for in a direct message"));
        assert!(markdown(&[], &Extra::default(), true, Utc::now()).contains("No memories"));
    }

    #[test]
    fn json_export_is_parseable_and_named_by_time() {
        let filter = ExportFilter {
            scope: Scope::PublicOnly,
            importance: Some(Importance::High),
            enabled_only: true,
        };
        let now = DateTime::from_timestamp(0, 0).unwrap_or_default();
        let extra = Extra {
            usage: vec![DayUsage {
                day: now.date_naive(),
                tokens: LlmUsage {
                    input_tokens: 10,
                    output_tokens: 2,
                    requests: 1,
                },
                voice: VoiceUsage {
                    audio_in_ms: 42_000,
                    transcriptions: 1,
                    ..VoiceUsage::default()
                },
                mcp_calls: 3,
            }],
            ..Extra::default()
        };
        let (name, bytes) =
            render(Format::Json, &[memory("mem_1", "x")], &extra, filter, now).expect("render");
        assert_eq!(name, "memories-19700101T000000Z.json");
        let doc: Value = serde_json::from_slice(&bytes).expect("json");
        assert_eq!(doc["count"], 1);
        assert_eq!(doc["importance"], "high");
        assert_eq!(doc["memories"][0]["id"], "mem_1");
        assert_eq!(doc["memories"][0]["patches"], json!([]));
        assert_eq!(doc["usage"][0]["inputTokens"], 10);
        assert_eq!(doc["usage"][0]["audioInMs"], 42_000);
        assert_eq!(doc["usage"][0]["transcriptions"], 1);
        assert_eq!(doc["usage"][0]["mcpCalls"], 3);
        assert!(
            doc.get("reminders").is_none(),
            "reminders only in a DM's export"
        );
    }
}
