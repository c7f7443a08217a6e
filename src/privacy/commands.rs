//! The daemon's own user commands about a person's data: `/privacy` (what is kept about you,
//! counted, with how long each kind stays). A slash command on Discord (answered ephemerally)
//! and a text command on Misskey (answered by DM), like the skills' user commands, but handled
//! here: no skill runs them, so no agent can.
//!
//! Private memories are counted only when the command is used in a DM, as everywhere else.
//! Each use is recorded in `privacy_log` (who, as its keyed hash; what; when; no content).

use std::fmt::Write as _;

use serde_json::json;

use crate::config::Config;
use crate::conversation::workspace::Workspaces;
use crate::platform::{CommandInvocation, CommandReply, UserCommandSpec};
use crate::store::erasure::{Kept, RequestedBy};
use crate::store::{Store, WorkspaceKey};

/// The `/privacy` command's name.
pub const PRIVACY: &str = "privacy";

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
}

impl PrivacyCommands {
    /// The commands over `store` and `workspaces`, telling `periods`.
    pub fn new(store: Store, workspaces: Workspaces, periods: Periods) -> Self {
        Self {
            store,
            workspaces,
            periods,
        }
    }

    /// The commands offered to users (registered beside the skills' user commands).
    pub fn specs() -> Vec<UserCommandSpec> {
        vec![UserCommandSpec {
            name: PRIVACY.into(),
            description: "What I keep about you, how long, and how to have it erased".into(),
            input_schema: json!({"type": "object", "properties": {}, "additionalProperties": false}),
            hidden_in_guilds: Default::default(),
        }]
    }

    /// Whether `name` is one of these commands.
    pub fn handles(name: &str) -> bool {
        name == PRIVACY
    }

    /// Runs the command and delivers its answer; returns whether the adapter was still waiting.
    pub async fn run(&self, invocation: CommandInvocation) -> bool {
        let reply = self.execute(&invocation).await;
        invocation.reply.send(reply).is_ok()
    }

    /// Runs the command and returns its answer.
    pub async fn execute(&self, invocation: &CommandInvocation) -> CommandReply {
        let origin = &invocation.origin;
        let outcome = self.privacy(invocation).await;
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
            Ok(text) => CommandReply {
                text,
                is_error: false,
            },
            Err(error) => {
                tracing::warn!(%error, "privacy command failed");
                CommandReply {
                    text: "I couldn't look that up just now, please try again in a moment.".into(),
                    is_error: true,
                }
            }
        }
    }

    async fn privacy(&self, invocation: &CommandInvocation) -> anyhow::Result<String> {
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
        Ok(render(&kept, files, bytes, &self.periods, origin.is_dm))
    }
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
