//! Human-readable answers for user commands: a skill's JSON result (or error) as short text that
//! fits one chat message. Only what the handler returned is shown, so the visibility rules of the
//! handlers (no private block outside DMs) carry over unchanged.

use serde_json::Value;

use crate::skill_api::SkillError;
use crate::text::clip_chars;

/// Longest answer, in characters (below Discord's 2000-unit message limit).
const MAX_REPLY_CHARS: usize = 1900;
/// Longest excerpt of one memory or reminder text in a list.
const MAX_ITEM_CHARS: usize = 160;

/// The answer for a successful command.
pub fn success(skill: &str, data: &Value, is_dm: bool) -> String {
    let text = match skill {
        "memory-stats" => stats(data, is_dm),
        "memory-search" => search(data),
        "memory-export" => export(data),
        "list-reminders" => reminders(data),
        "cancel-reminder" => format!(
            "Reminder {} cancelled.",
            data["reminderId"].as_str().unwrap_or("?")
        ),
        _ => generic(data),
    };
    clip_chars(&text, MAX_REPLY_CHARS)
}

/// The answer for a failed command, for a human rather than an agent.
pub fn failure(skill: &str, error: &SkillError) -> String {
    let text = match error {
        SkillError::InvalidParams { details } => {
            let problems: Vec<String> = details
                .iter()
                .map(|d| {
                    let name = d.path.trim_start_matches('/');
                    if name.is_empty() {
                        d.problem.clone()
                    } else {
                        format!("{name}: {}", d.problem)
                    }
                })
                .collect();
            format!("/{skill}: invalid options. {}", problems.join("; "))
        }
        SkillError::ForbiddenContext(_) => {
            format!("/{skill} only works in a direct message with the bot.")
        }
        SkillError::NotFound(what) => format!("/{skill}: not found. {what}."),
        SkillError::RateLimited { retry_after } => format!(
            "/{skill} was used too often. Please wait {} second(s) and try again.",
            retry_after.as_millis().div_ceil(1000).max(1)
        ),
        SkillError::QuotaExceeded { message, .. } => format!("/{skill}: {message}"),
        SkillError::SkillDisabled(_) => format!("/{skill} is disabled on this bot."),
        SkillError::UnknownSkill { available, .. } => format!(
            "/{skill} is not a command of this bot. Available: {}.",
            available
                .iter()
                .map(|n| format!("/{n}"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        SkillError::PlatformError { .. } => {
            format!("/{skill}: the chat platform failed. Please try again later.")
        }
        _ => format!("/{skill}: something went wrong. Please try again later."),
    };
    clip_chars(&text, MAX_REPLY_CHARS)
}

fn stats(data: &Value, is_dm: bool) -> String {
    let row = |label: &str, block: &Value| {
        format!(
            "{label:<8} {:>5} {:>7} {:>8} {:>5} {:>6}",
            num(&block["total"]),
            num(&block["enabled"]),
            num(&block["disabled"]),
            num(&block["highImportance"]),
            num(&block["normalImportance"]),
        )
    };
    let mut lines = vec![
        "Your memories".to_owned(),
        "```".to_owned(),
        format!(
            "{:<8} {:>5} {:>7} {:>8} {:>5} {:>6}",
            "", "total", "enabled", "disabled", "high", "normal"
        ),
        row("public", &data["public"]),
    ];
    if data["private"].is_object() {
        lines.push(row("private", &data["private"]));
    }
    lines.push(row("all", &data["summary"]));
    lines.push("```".to_owned());
    if !is_dm {
        lines.push("Private memories are counted only in a direct message.".to_owned());
    }
    lines.join("\n")
}

fn search(data: &Value) -> String {
    let memories = data["memories"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    if memories.is_empty() {
        return "No memories matched.".to_owned();
    }
    let mut lines = vec![format!(
        "{} memor{} found:",
        memories.len(),
        if memories.len() == 1 { "y" } else { "ies" }
    )];
    for (i, memory) in memories.iter().enumerate() {
        let mut tags = Vec::new();
        if memory["importance"] == "high" {
            tags.push("high");
        }
        if memory["visibility"] == "private" {
            tags.push("private");
        }
        let tags = if tags.is_empty() {
            String::new()
        } else {
            format!(" [{}]", tags.join(", "))
        };
        lines.push(format!(
            "{}. {}{tags} ({})",
            i + 1,
            one_line(memory["content"].as_str().unwrap_or_default()),
            memory["id"].as_str().unwrap_or("?")
        ));
    }
    lines.join("\n")
}

fn export(data: &Value) -> String {
    format!(
        "Your memory export ({} memories, {}) was sent to you by direct message.",
        num(&data["count"]),
        data["format"].as_str().unwrap_or("file")
    )
}

fn reminders(data: &Value) -> String {
    let list = data["reminders"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    if list.is_empty() {
        return "You have no pending reminders.".to_owned();
    }
    let mut lines = vec![format!(
        "{} pending reminder{}:",
        list.len(),
        if list.len() == 1 { "" } else { "s" }
    )];
    for reminder in list {
        lines.push(format!(
            "• {} — {} ({})",
            reminder["scheduledAt"].as_str().map_or_else(
                || "?".to_owned(),
                |t| t.replace('T', " ").replace('Z', " UTC")
            ),
            one_line(reminder["message"].as_str().unwrap_or_default()),
            reminder["id"].as_str().unwrap_or("?")
        ));
    }
    lines.join("\n")
}

fn generic(data: &Value) -> String {
    serde_json::to_string_pretty(data)
        .map_or_else(|_| "Done.".to_owned(), |s| format!("```\n{s}\n```"))
}

fn num(value: &Value) -> u64 {
    value.as_u64().unwrap_or(0)
}

/// One line of at most [`MAX_ITEM_CHARS`] characters.
fn one_line(text: &str) -> String {
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    clip_chars(&flat, MAX_ITEM_CHARS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::time::Duration;

    fn block(total: u64) -> Value {
        json!({"total": total, "enabled": total, "disabled": 0, "highImportance": 1, "normalImportance": total - 1})
    }

    #[test]
    fn stats_show_a_table_and_the_private_row_only_when_present() {
        let public = json!({"public": block(3), "private": null, "summary": block(3)});
        let text = success("memory-stats", &public, false);
        assert!(text.contains("public"), "{text}");
        assert!(!text.contains("private  "), "{text}");
        assert!(text.contains("only in a direct message"), "{text}");
        let dm = json!({"public": block(3), "private": block(2), "summary": block(5)});
        let text = success("memory-stats", &dm, true);
        assert!(text.contains("private"), "{text}");
        assert!(
            text.lines()
                .any(|l| l.starts_with("all") && l.contains('5')),
            "{text}"
        );
    }

    #[test]
    fn lists_are_numbered_and_clipped() {
        let long = "word ".repeat(100);
        let data = json!({"count": 1, "memories": [
            {"id": "mem_1", "content": long, "importance": "high", "visibility": "public"}
        ]});
        let text = success("memory-search", &data, true);
        assert!(text.starts_with("1 memory found:"), "{text}");
        assert!(text.contains("1. word word"), "{text}");
        assert!(text.contains("[high] (mem_1)"), "{text}");
        assert!(text.lines().all(|l| l.chars().count() < 200), "{text}");
        let reminders = json!({"count": 1, "reminders": [
            {"id": "rem_1", "message": "tea", "scheduledAt": "2030-01-01T09:00:00Z"}
        ]});
        assert_eq!(
            success("list-reminders", &reminders, true),
            "1 pending reminder:\n• 2030-01-01 09:00:00 UTC — tea (rem_1)"
        );
        assert_eq!(
            success(
                "list-reminders",
                &json!({"count": 0, "reminders": []}),
                true
            ),
            "You have no pending reminders."
        );
    }

    #[test]
    fn failures_read_like_answers_to_a_person() {
        let text = failure("list-reminders", &SkillError::ForbiddenContext("x".into()));
        assert_eq!(
            text,
            "/list-reminders only works in a direct message with the bot."
        );
        let text = failure(
            "memory-export",
            &SkillError::RateLimited {
                retry_after: Duration::from_millis(2500),
            },
        );
        assert!(text.contains("wait 3 second"), "{text}");
        let text = failure("x", &SkillError::internal(anyhow::anyhow!("secret path")));
        assert!(!text.contains("secret"), "{text}");
    }
}
