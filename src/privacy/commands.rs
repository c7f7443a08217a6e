//! The daemon's own user commands about a person's data. Slash commands on Discord (answered
//! ephemerally) and text commands on Misskey (answered by chat), like the skills' user
//! commands, but handled here: no skill runs them, so no agent can.
//!
//! * `/privacy`: what is kept about you, counted, with how long each kind stays.
//! * `/forget QUERY`: the memories matching QUERY (search words, memory ids, or `all`) are
//!   listed with a one-time code ([`super::confirm`]); `/forget-confirm CODE` then disables
//!   them. `/forget everything` (in a DM only) erases all of the person's data, through the
//!   same [`Eraser`] as `forget-user`, once confirmed the same way.
//!
//! Private memories are counted, listed and forgotten only when the command is used in a DM,
//! as everywhere else. Each use is recorded in `privacy_log` (who, as its keyed hash; what;
//! when; counts, no content).

use std::fmt::Write as _;

use serde_json::json;

use super::confirm::{Confirmations, VALID_FOR};
use super::{EraseError, Eraser};
use crate::config::Config;
use crate::conversation::workspace::Workspaces;
use crate::platform::{CommandInvocation, CommandReply, Origin, ReplyButton, UserCommandSpec};
use crate::store::erasure::{Kept, RequestedBy};
use crate::store::{ExportFilter, Memory, MemoryPatch, Scope, Store, WorkspaceKey};

/// The `/privacy` command's name.
pub const PRIVACY: &str = "privacy";
/// `/forget QUERY`.
pub const FORGET: &str = "forget";
/// `/forget-confirm CODE`.
pub const FORGET_CONFIRM: &str = "forget-confirm";
/// Most memories one `/forget` selects by search words or ids (`all` selects all).
const MAX_FORGET: u32 = 50;
/// Most of them listed in its answer.
const MAX_LISTED: usize = 20;

/// What a confirmation code stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Forget {
    /// Disable these memories (found in `scope`).
    Memories { ids: Vec<String>, scope: Scope },
    /// Erase everything kept about the person.
    Everything,
}

/// How long each kind of data stays, in days or hours (0: until erased), from the
/// configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Periods {
    /// `retention.disabledMemoryDays`.
    pub disabled_memory_days: u64,
    /// `retention.usageDays`.
    pub usage_days: u64,
    /// `retention.sessionFileHours`.
    pub session_file_hours: u64,
    /// `catchUp.retentionDays`.
    pub inbox_days: u64,
    /// `agent.continuity.keepDays` (0 when continuity is off: nothing is kept).
    pub conversation_days: u64,
}

impl Periods {
    /// The periods `config` sets.
    pub fn of(config: &Config) -> Self {
        Self {
            disabled_memory_days: config.retention.disabled_memory_days,
            usage_days: config.retention.usage_days,
            session_file_hours: config.retention.session_file_hours,
            inbox_days: config.catch_up.retention_days,
            conversation_days: if config.agent.continuity.enabled {
                u64::from(config.agent.continuity.keep_days)
            } else {
                0
            },
        }
    }
}

/// Runs the privacy commands.
#[derive(Debug, Clone)]
pub struct PrivacyCommands {
    store: Store,
    workspaces: Workspaces,
    periods: Periods,
    eraser: Option<Eraser>,
    confirmations: Confirmations<Forget>,
}

impl PrivacyCommands {
    /// The commands over `store` and `workspaces`, telling `periods`; `/forget everything`
    /// needs [`with_eraser`](Self::with_eraser).
    pub fn new(store: Store, workspaces: Workspaces, periods: Periods) -> Self {
        Self {
            store,
            workspaces,
            periods,
            eraser: None,
            confirmations: Confirmations::default(),
        }
    }

    /// `/forget everything` erases through `eraser` (the daemon's, which stops the person's
    /// agents first).
    pub fn with_eraser(mut self, eraser: Eraser) -> Self {
        self.eraser = Some(eraser);
        self
    }

    /// The commands offered to users (registered beside the skills' user commands).
    pub fn specs() -> Vec<UserCommandSpec> {
        let spec = |name: &str, description: &str, input_schema| UserCommandSpec {
            name: name.into(),
            description: description.into(),
            input_schema,
            hidden_in_guilds: Default::default(),
        };
        vec![
            spec(
                PRIVACY,
                "What I keep about you, how long, and how to have it erased",
                json!({"type": "object", "properties": {}, "additionalProperties": false}),
            ),
            spec(
                FORGET,
                "Make me forget memories (search words, memory ids, all) or everything (in a DM)",
                json!({
                    "type": "object",
                    "properties": {"query": {
                        "type": "string", "minLength": 1, "maxLength": 500,
                        "description": "Words to search, memory ids, `all`, or `everything`"
                    }},
                    "required": ["query"],
                    "additionalProperties": false
                }),
            ),
            spec(
                FORGET_CONFIRM,
                "Confirm a /forget with the code it gave you",
                json!({
                    "type": "object",
                    "properties": {"code": {
                        "type": "string", "minLength": 1, "maxLength": 32,
                        "description": "The code /forget gave you"
                    }},
                    "required": ["code"],
                    "additionalProperties": false
                }),
            ),
        ]
    }

    /// Whether `name` is one of these commands.
    pub fn handles(name: &str) -> bool {
        [PRIVACY, FORGET, FORGET_CONFIRM].contains(&name)
    }

    /// Runs the command and delivers its answer; returns whether the adapter was still waiting.
    pub async fn run(&self, invocation: CommandInvocation) -> bool {
        let reply = self.execute(&invocation).await;
        invocation.reply.send(reply).is_ok()
    }

    /// Runs the command and returns its answer.
    pub async fn execute(&self, invocation: &CommandInvocation) -> CommandReply {
        let origin = &invocation.origin;
        let text = |name: &str| {
            invocation
                .parameters
                .get(name)
                .and_then(serde_json::Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        let outcome = match invocation.skill.as_str() {
            FORGET => self.forget(origin, &text("query")).await,
            FORGET_CONFIRM => self.confirm(origin, &text("code")).await,
            _ => self.privacy(invocation).await,
        };
        tracing::info!(
            name: "user_command",
            skill = invocation.skill.as_str(),
            platform = %origin.platform,
            user = %origin.user_id,
            is_dm = origin.is_dm,
            code = if outcome.is_ok() { "OK" } else { "INTERNAL" },
            "user_command"
        );
        match outcome {
            Ok(reply) => reply,
            Err(error) => {
                tracing::warn!(%error, "privacy command failed");
                CommandReply::error("I couldn't do that just now, please try again in a moment.")
            }
        }
    }

    async fn privacy(&self, invocation: &CommandInvocation) -> anyhow::Result<CommandReply> {
        let origin = &invocation.origin;
        let ws = WorkspaceKey::new(origin.platform.as_str(), origin.user_id.as_str())?;
        let kept = self.store.privacy_kept(&ws).await?;
        let folder = self
            .workspaces
            .path_for(origin.platform, origin.user_id.as_str())?;
        let (files, bytes) =
            tokio::task::spawn_blocking(move || super::erase::count_files(&folder)).await?;
        self.store
            .privacy_log("view", RequestedBy::User, Some(&ws), json!({}))
            .await?;
        Ok(CommandReply::text(render(
            &kept,
            files,
            bytes,
            &self.periods,
            origin.is_dm,
        )))
    }

    /// `/forget QUERY`: what would be forgotten, and the code that confirms it.
    async fn forget(&self, origin: &Origin, query: &str) -> anyhow::Result<CommandReply> {
        let ws = WorkspaceKey::new(origin.platform.as_str(), origin.user_id.as_str())?;
        let query = query.trim();
        if query.eq_ignore_ascii_case("everything") {
            if !origin.is_dm {
                return Ok(CommandReply::text(
                    "Erasing everything can only be asked in a direct message with me (it includes your private memories).",
                ));
            }
            if self.eraser.is_none() {
                return Ok(CommandReply::text(NO_ERASER));
            }
            let code = self.confirmations.issue(
                origin.platform,
                origin.user_id.as_str(),
                Forget::Everything,
            );
            let text = format!(
                "This erases everything I keep about you: all your memories (public and private), reminders, usage records, the messages I recorded, our conversations' state and your files. It cannot be undone.\nTo go ahead, use /forget-confirm {code} within {} minutes.",
                VALID_FOR.as_secs() / 60
            );
            return Ok(
                CommandReply::text(text).with_button(confirm_button("Erase everything", code))
            );
        }
        let scope = Scope::for_dm(origin.is_dm);
        let memories = self.select(&ws, query, scope).await?;
        let private_note = if origin.is_dm {
            ""
        } else {
            " (private memories count only in a DM with me)"
        };
        if memories.is_empty() {
            return Ok(CommandReply::text(format!(
                "I found no memory of yours matching that{private_note}. Use words from it, its id (mem_...), or `all`."
            )));
        }
        let mut out = format!(
            "I would forget these {} memor{}{private_note}:\n",
            memories.len(),
            if memories.len() == 1 { "y" } else { "ies" }
        );
        for m in memories.iter().take(MAX_LISTED) {
            let _ = writeln!(out, "- {}: {}", m.id, excerpt(&m.content));
        }
        if memories.len() > MAX_LISTED {
            let _ = writeln!(out, "- and {} more", memories.len() - MAX_LISTED);
        }
        let ids: Vec<String> = memories.into_iter().map(|m| m.id).collect();
        let count = ids.len();
        let code = self.confirmations.issue(
            origin.platform,
            origin.user_id.as_str(),
            Forget::Memories { ids, scope },
        );
        let _ = write!(
            out,
            "To confirm, use /forget-confirm {code} within {} minutes. Forgotten memories are no longer used or shown to anyone; {}",
            VALID_FOR.as_secs() / 60,
            if self.periods.disabled_memory_days == 0 {
                "they are deleted when the operator erases your data.".to_owned()
            } else {
                format!(
                    "they are deleted {} days later.",
                    self.periods.disabled_memory_days
                )
            }
        );
        let label = if count == 1 {
            "Forget it".to_owned()
        } else {
            format!("Forget these {count}")
        };
        Ok(CommandReply::text(out).with_button(confirm_button(&label, code)))
    }

    /// The enabled memories of `ws` in `scope` that `query` names: `all` (every one), memory
    /// ids, or search words (at most [`MAX_FORGET`] of these).
    async fn select(
        &self,
        ws: &WorkspaceKey,
        query: &str,
        scope: Scope,
    ) -> anyhow::Result<Vec<Memory>> {
        if query.eq_ignore_ascii_case("all") {
            return Ok(self
                .store
                .export_memories(
                    ws,
                    ExportFilter {
                        scope,
                        importance: None,
                        enabled_only: true,
                    },
                )
                .await?);
        }
        let words: Vec<&str> = query
            .split(|c: char| c.is_whitespace() || c == ',')
            .filter(|w| !w.is_empty())
            .collect();
        if !words.is_empty() && words.iter().all(|w| w.starts_with("mem_")) {
            let mut found = Vec::new();
            for id in words.into_iter().take(MAX_FORGET as usize) {
                // Another person's id, or a private one outside a DM, is simply not found.
                if let Some(m) = self.store.get_memory(ws, id, scope).await?
                    && m.enabled
                    && !found.iter().any(|f: &Memory| f.id == m.id)
                {
                    found.push(m);
                }
            }
            return Ok(found);
        }
        Ok(self
            .store
            .search_memories(ws, query, scope, MAX_FORGET)
            .await?
            .into_iter()
            .map(|scored| scored.memory)
            .collect())
    }

    /// `/forget-confirm CODE`: does what the person's code stands for.
    async fn confirm(&self, origin: &Origin, code: &str) -> anyhow::Result<CommandReply> {
        let ws = WorkspaceKey::new(origin.platform.as_str(), origin.user_id.as_str())?;
        let Some(action) = self
            .confirmations
            .take(origin.platform, origin.user_id.as_str(), code)
        else {
            return Ok(CommandReply::text(
                "That code is not valid: it is wrong, already used, or older than 10 minutes. Use /forget again.",
            ));
        };
        match action {
            Forget::Memories { ids, scope } => {
                let mut disabled = 0u64;
                for id in &ids {
                    let patch = MemoryPatch {
                        enabled: Some(false),
                        ..MemoryPatch::default()
                    };
                    if self.store.patch_memory(&ws, id, patch, scope).await.is_ok() {
                        disabled += 1;
                    }
                }
                self.store
                    .privacy_log(
                        "forget",
                        RequestedBy::User,
                        Some(&ws),
                        json!({"disabled": disabled}),
                    )
                    .await?;
                Ok(CommandReply::text(format!(
                    "Done: I forgot {disabled} memor{}. I won't use or show {} again.",
                    if disabled == 1 { "y" } else { "ies" },
                    if disabled == 1 { "it" } else { "them" }
                )))
            }
            Forget::Everything => {
                let Some(eraser) = &self.eraser else {
                    return Ok(CommandReply::text(NO_ERASER));
                };
                match eraser
                    .forget_user(
                        origin.platform,
                        origin.user_id.as_str(),
                        false,
                        RequestedBy::User,
                    )
                    .await
                {
                    Ok(report) => Ok(CommandReply::text(format!(
                        "Done: everything I kept about you is erased ({} memories, {} reminders, {} files). If the operator keeps backups, they still hold it until they are replaced.",
                        report.erased.memories, report.erased.reminders, report.files
                    ))),
                    Err(EraseError::TurnRunning { .. }) => Ok(CommandReply::text(
                        "I'm still answering one of your messages. Once I've replied, use /forget everything again.",
                    )),
                    Err(EraseError::AlreadyErasing) => {
                        Ok(CommandReply::text("Your data is being erased right now."))
                    }
                    Err(error) => Err(error.into()),
                }
            }
        }
    }
}

/// What `/forget everything` says where no eraser is wired.
const NO_ERASER: &str = "Erasing everything is not available here; ask the operator of this bot.";

/// The button that runs `/forget-confirm` with `code` (Discord; Misskey users type it).
fn confirm_button(label: &str, code: String) -> ReplyButton {
    ReplyButton {
        label: label.to_owned(),
        command: FORGET_CONFIRM.into(),
        parameter: "code".into(),
        value: code,
    }
}

/// The first line of `content`, at most 80 characters.
fn excerpt(content: &str) -> String {
    let line = content.lines().next().unwrap_or_default();
    let mut out: String = line.chars().take(80).collect();
    if out.chars().count() < content.chars().count() {
        out.push('…');
    }
    out
}

/// `/privacy`'s text.
fn render(kept: &Kept, files: u64, bytes: u64, periods: &Periods, is_dm: bool) -> String {
    let until = |n: u64, unit: &str, what: &str| {
        if n == 0 {
            "Kept until erased.".to_owned()
        } else {
            format!("{what} {n} {unit}.")
        }
    };
    let mut out = String::from("Here is what I keep about you:\n");
    let memories = if is_dm {
        format!(
            "{} public, {} private, {} disabled",
            kept.public_memories, kept.private_memories, kept.disabled_memories
        )
    } else {
        format!(
            "{} public, {} disabled (private ones are counted only in a DM with me)",
            kept.public_memories, kept.disabled_memories
        )
    };
    let disabled = if periods.disabled_memory_days == 0 {
        "kept until erased".to_owned()
    } else {
        format!(
            "deleted {} days after they were disabled",
            periods.disabled_memory_days
        )
    };
    let _ = writeln!(
        out,
        "- Memories: {memories}. Kept until you or the operator erase them; disabled ones are {disabled}."
    );
    let _ = writeln!(
        out,
        "- Reminders: {} pending, {} past. Kept until erased.",
        kept.pending_reminders, kept.past_reminders
    );
    let _ = writeln!(
        out,
        "- Model usage: token counts for {} day(s). {}",
        kept.usage_days,
        until(periods.usage_days, "days", "Kept")
    );
    let _ = writeln!(
        out,
        "- Messages you sent me, with their text: {}. {}",
        kept.inbox_messages,
        until(periods.inbox_days, "days", "Kept")
    );
    let _ = writeln!(
        out,
        "- Conversations I can pick up again after a restart: {}. {}",
        kept.conversations,
        until(
            periods.conversation_days,
            "days after the last message",
            "Kept"
        )
    );
    let session = if periods.session_file_hours == 0 {
        String::new()
    } else {
        format!(
            " Files of past turns (attachments) are deleted after {} hours.",
            periods.session_file_hours
        )
    };
    let _ = writeln!(
        out,
        "- Files in your workspace: {files} ({}). Kept until erased.{session}",
        size(bytes)
    );
    out.push_str(
        "/memory-export sends you a copy of your memories. To have everything erased, ask the operator of this bot.",
    );
    out
}

/// `bytes` in words (B, KB, MB).
fn size(bytes: u64) -> String {
    match bytes {
        b if b < 1_000 => format!("{b} B"),
        b if b < 1_000_000 => format!("{:.1} KB", b as f64 / 1e3),
        b => format!("{:.1} MB", b as f64 / 1e6),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn periods() -> Periods {
        Periods {
            disabled_memory_days: 90,
            usage_days: 0,
            session_file_hours: 24,
            inbox_days: 7,
            conversation_days: 14,
        }
    }

    #[test]
    fn private_counts_only_in_a_dm_and_every_kind_says_how_long() {
        let kept = Kept {
            public_memories: 12,
            private_memories: 3,
            disabled_memories: 2,
            pending_reminders: 1,
            past_reminders: 4,
            usage_days: 9,
            inbox_messages: 5,
            conversations: 2,
        };
        let dm = render(&kept, 3, 12_345, &periods(), true);
        assert!(dm.contains("12 public, 3 private, 2 disabled"), "{dm}");
        assert!(dm.contains("deleted 90 days after they were disabled"));
        assert!(dm.contains("token counts for 9 day(s). Kept until erased."));
        assert!(dm.contains("with their text: 5. Kept 7 days."));
        assert!(dm.contains("after a restart: 2. Kept 14 days after the last message."));
        assert!(dm.contains("workspace: 3 (12.3 KB)"));
        assert!(dm.contains("deleted after 24 hours"));
        let public = render(&kept, 3, 12_345, &periods(), false);
        assert!(!public.contains("3 private"), "{public}");
        assert!(public.contains("counted only in a DM"));
    }
}
