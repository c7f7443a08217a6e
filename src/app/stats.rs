//! `air-friends stats`: what the daemon has been doing, from the database. Per skill: calls,
//! errors by code and latency p50/p99 over the last day and the last week (counted by the Skill
//! API's call log, written once a minute); per workspace: memories by state and reminders by
//! state; the model gateway's tokens per day over the last week; voice (messages transcribed,
//! replies spoken, minutes of each) per day over the last week; memory maintenance runs per
//! workspace over the last week; operator schedules' runs over the last week (posted, skipped,
//! failed, the last one and why); the last day's unanswered messages by state and reason (the
//! inbox). Runs beside a live daemon
//! (SQLite readers do not block it); one line on stderr on failure, exit 1, as every command
//! run through `app::run_with_config`.

use std::fmt::Write as _;
use std::path::Path;
use std::process::ExitCode;

use anyhow::Context;
use chrono::{Duration as Days, Utc};

use crate::observability::LogTarget;
use std::collections::BTreeMap;

use chrono::NaiveDate;

use crate::store::analytics::{SkillCallSummary, WorkspaceOverview};
use crate::store::{
    LlmUsage, MaintenanceSummary, ScheduleSummary, Store, StoreError, Unanswered, VoiceUsage,
};

/// Prints the statistics of the database named by the configuration at `config_path`.
pub(super) fn stats_main(config_path: &Path) -> ExitCode {
    let shown = config_path.display().to_string();
    super::run_with_config(
        config_path,
        LogTarget::Stderr,
        super::quiet,
        move |config, _live_tokens| async move {
            let path = config.database_path();
            if !path.exists() {
                anyhow::bail!(
                    "no database at {} (storage.path, else workspace.repoPath/air-friends.db, in {})",
                    path.display(),
                    shown
                );
            }
            let text = report(&path)
                .await
                .with_context(|| format!("cannot read {}", path.display()))?;
            print!("{text}");
            Ok(())
        },
    )
}

/// The whole report as text.
pub async fn report(path: &Path) -> Result<String, StoreError> {
    let store = Store::open(path).await?;
    let now = Utc::now();
    let day = store.skill_calls_since(now - Days::hours(24)).await?;
    let week = store.skill_calls_since(now - Days::days(7)).await?;
    let workspaces = store.workspace_overview().await?;
    let tokens = store
        .tokens_per_day((now - Days::days(6)).date_naive())
        .await?;
    let voice = store
        .voice_per_day((now - Days::days(6)).date_naive())
        .await?;
    let maintenance = store.maintenance_summary(now - Days::days(7)).await?;
    let unanswered = store.inbox_unanswered_since(now - Days::hours(24)).await?;
    let schedules = store.schedule_summary(now - Days::days(7)).await?;
    store.close().await?;

    let mut out = String::new();
    skills_section(&mut out, &day, &week);
    workspaces_section(&mut out, &workspaces);
    tokens_section(&mut out, &tokens);
    voice_section(&mut out, &voice);
    maintenance_section(&mut out, &maintenance);
    schedules_section(&mut out, &schedules);
    unanswered_section(&mut out, &unanswered);
    Ok(out)
}

/// Messages of the last day that were not answered, by state and why (the inbox).
fn unanswered_section(out: &mut String, unanswered: &[Unanswered]) {
    let _ = writeln!(out, "\nUnanswered messages (last 24 hours)");
    if unanswered.is_empty() {
        let _ = writeln!(out, "  none");
        return;
    }
    let _ = writeln!(out, "  {:<9} {:<20} {:>7}", "state", "reason", "count");
    for u in unanswered {
        let reason = u.reason.as_deref().unwrap_or("-");
        let _ = writeln!(out, "  {:<9} {:<20} {:>7}", u.state, reason, u.count);
    }
}

/// Per skill: calls, errors and latency over the last day and the last week.
fn skills_section(
    out: &mut String,
    day: &BTreeMap<String, SkillCallSummary>,
    week: &BTreeMap<String, SkillCallSummary>,
) {
    let _ = writeln!(out, "Skill calls (last 24 hours | last 7 days)");
    if week.is_empty() {
        let _ = writeln!(out, "  none recorded yet");
    } else {
        let _ = writeln!(
            out,
            "  {:<20} {:>7} {:>7} {:>8} {:>8} | {:>7} {:>7} {:>8} {:>8}  errors (7 days)",
            "skill", "calls", "errors", "p50", "p99", "calls", "errors", "p50", "p99"
        );
        let empty = SkillCallSummary::default();
        for (skill, w) in week {
            let d = day.get(skill).unwrap_or(&empty);
            let codes: Vec<String> = w.errors.iter().map(|(c, n)| format!("{c} {n}")).collect();
            let _ = writeln!(
                out,
                "  {:<20} {:>7} {:>7} {:>8} {:>8} | {:>7} {:>7} {:>8} {:>8}  {}",
                skill,
                d.calls,
                d.error_count(),
                latency(d, 0.5),
                latency(d, 0.99),
                w.calls,
                w.error_count(),
                latency(w, 0.5),
                latency(w, 0.99),
                if codes.is_empty() {
                    "-".to_owned()
                } else {
                    codes.join(", ")
                }
            );
        }
        let _ = writeln!(
            out,
            "  (latencies are the upper bound of their bucket: 1, 2, 5, 10, 25, 50, 100, 250, 500 ms, 1, 2.5, 10 s)"
        );
    }
}

/// Per workspace: memories by state and reminders by state.
fn workspaces_section(out: &mut String, workspaces: &BTreeMap<String, WorkspaceOverview>) {
    let _ = writeln!(out, "\nWorkspaces");
    if workspaces.is_empty() {
        let _ = writeln!(out, "  none yet");
    } else {
        let _ = writeln!(
            out,
            "  {:<32} {:>8} {:>8} {:>9} {:>7}  reminders",
            "workspace", "enabled", "disabled", "important", "private"
        );
        for (ws, o) in workspaces {
            let reminders: Vec<String> = o
                .reminders
                .iter()
                .map(|(state, n)| format!("{state} {n}"))
                .collect();
            let _ = writeln!(
                out,
                "  {:<32} {:>8} {:>8} {:>9} {:>7}  {}",
                ws,
                o.enabled,
                o.disabled,
                o.important,
                o.private,
                if reminders.is_empty() {
                    "-".to_owned()
                } else {
                    reminders.join(", ")
                }
            );
        }
    }
}

/// The model gateway's tokens per day.
fn tokens_section(out: &mut String, tokens: &[(NaiveDate, LlmUsage)]) {
    let _ = writeln!(out, "\nModel tokens per day (gateway, all users)");
    if tokens.is_empty() {
        let _ = writeln!(out, "  none metered in the last 7 days");
    } else {
        let _ = writeln!(
            out,
            "  {:<10} {:>12} {:>12} {:>9}",
            "day", "input", "output", "requests"
        );
        for (day, u) in tokens {
            let _ = writeln!(
                out,
                "  {:<10} {:>12} {:>12} {:>9}",
                day.format("%Y-%m-%d"),
                u.input_tokens,
                u.output_tokens,
                u.requests
            );
        }
    }
}

/// Voice per day: messages transcribed and replies spoken, with their minutes of audio.
fn voice_section(out: &mut String, voice: &[(NaiveDate, VoiceUsage)]) {
    let _ = writeln!(out, "\nVoice per day (all users)");
    if voice.is_empty() {
        let _ = writeln!(out, "  none in the last 7 days");
        return;
    }
    let _ = writeln!(
        out,
        "  {:<10} {:>11} {:>9} {:>7} {:>9}",
        "day", "transcribed", "minutes", "spoken", "minutes"
    );
    let minutes = |ms: u64| format!("{:.1}", ms as f64 / 60_000.0);
    for (day, v) in voice {
        let _ = writeln!(
            out,
            "  {:<10} {:>11} {:>9} {:>7} {:>9}",
            day.format("%Y-%m-%d"),
            v.transcriptions,
            minutes(v.audio_in_ms),
            v.speeches,
            minutes(v.audio_out_ms)
        );
    }
}

/// Memory maintenance runs per workspace and visibility.
fn maintenance_section(out: &mut String, maintenance: &[MaintenanceSummary]) {
    let _ = writeln!(out, "\nMemory maintenance (last 7 days)");
    if maintenance.is_empty() {
        let _ = writeln!(out, "  no runs");
    } else {
        let _ = writeln!(
            out,
            "  {:<32} {:<8} {:>5} {:>7} {:>8} {:>9}  last run",
            "workspace", "memories", "runs", "saved", "disabled", "tokens"
        );
        for m in maintenance {
            let dry = if m.dry_runs > 0 {
                format!(" ({} dry)", m.dry_runs)
            } else {
                String::new()
            };
            let _ = writeln!(
                out,
                "  {:<32} {:<8} {:>5} {:>7} {:>8} {:>9}  {} {}{dry}",
                m.workspace.to_string(),
                m.visibility.as_str(),
                m.runs,
                m.saved,
                m.disabled,
                m.tokens,
                m.last_at.format("%Y-%m-%d %H:%M"),
                m.last_outcome,
            );
        }
    }
}

/// Operator schedules' runs per schedule: how many, posted, skipped, failed, tokens, and the
/// latest (newest first in `runs`) with its outcome and why.
fn schedules_section(out: &mut String, schedules: &[ScheduleSummary]) {
    let _ = writeln!(out, "\nSchedules (last 7 days)");
    if schedules.is_empty() {
        let _ = writeln!(out, "  no runs");
        return;
    }
    let _ = writeln!(
        out,
        "  {:<24} {:>5} {:>7} {:>8} {:>7} {:>9}  last run",
        "schedule", "runs", "posted", "skipped", "failed", "tokens"
    );
    for t in schedules {
        let r = &t.last;
        let why = r
            .detail
            .as_deref()
            .map_or_else(String::new, |d| format!(" ({d})"));
        let _ = writeln!(
            out,
            "  {:<24} {:>5} {:>7} {:>8} {:>7} {:>9}  {} {} {}{why}",
            r.name,
            t.runs,
            t.posted,
            t.skipped,
            t.failed,
            t.tokens,
            r.started_at.format("%Y-%m-%d %H:%M"),
            r.trigger,
            r.outcome
        );
    }
}

fn latency(s: &SkillCallSummary, q: f64) -> String {
    match s.quantile_ms(q) {
        _ if s.calls == 0 => "-".to_owned(),
        Some(ms) if ms >= 1_000 => format!("≤{}s", ms as f64 / 1_000.0),
        Some(ms) => format!("≤{ms}ms"),
        None => ">10s".to_owned(),
    }
}
