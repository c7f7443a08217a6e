//! `air-friends schedules list` and `air-friends schedules run NAME` (docs/SCHEDULES.md).
//!
//! `list` reads the configuration as the daemon does and prints each schedule with its place
//! (and the `places:` rule that applies there), its prompt file, its last run from the
//! database when there is one (read beside a running daemon, as `stats` reads it), and its next
//! three runs, in its time zone and in UTC. `run` asks the running daemon, through its control socket
//! (`app::control`), to run a schedule now, and prints how the run ended; it exits 1 when the
//! run did not post (nothing posted is not a failure: `silent`, `skipped_quiet` exit 0).

use std::fmt::Write as _;
use std::path::Path;
use std::process::ExitCode;

use anyhow::Context;
use chrono::{DateTime, Utc};

use super::control::request_schedule_run;
use crate::config::Config;
use crate::places::Places;
use crate::schedules::Schedule;
use crate::store::owner::holder;
use crate::store::{ScheduleRun, Store};
use std::collections::HashMap;

/// How many next runs `list` prints.
const NEXT_RUNS: usize = 3;

/// Prints the schedules of the configuration at `config_path`.
pub(super) fn list_main(config_path: &Path) -> ExitCode {
    let (config, places) = match super::places::places_of(config_path) {
        Ok(loaded) => loaded,
        Err(code) => return code,
    };
    let now = Utc::now();
    let last = match last_runs(&config.database_path(), now) {
        Ok(last) => last,
        Err(e) => {
            eprintln!("air-friends: the last runs are not shown: {e:#}");
            None
        }
    };
    print!("{}", render(&config, &places, last.as_ref(), now));
    ExitCode::SUCCESS
}

/// How far back `list` looks for a schedule's last run.
const LAST_RUN_WITHIN_DAYS: i64 = 90;

/// Each schedule's latest run within [`LAST_RUN_WITHIN_DAYS`] from the database at `db`;
/// `None` when there is no database yet.
fn last_runs(
    db: &Path,
    now: DateTime<Utc>,
) -> anyhow::Result<Option<HashMap<String, ScheduleRun>>> {
    if !db.exists() {
        return Ok(None);
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let store = Store::open(db).await?;
        let summary = store
            .schedule_summary(now - chrono::Duration::days(LAST_RUN_WITHIN_DAYS))
            .await;
        store.close().await?;
        Ok(Some(
            summary?
                .into_iter()
                .map(|s| (s.last.name.clone(), s.last))
                .collect(),
        ))
    })
}

/// The listing at `now`, with each schedule's `last` run when the database was read.
fn render(
    config: &Config,
    places: &Places,
    last: Option<&HashMap<String, ScheduleRun>>,
    now: DateTime<Utc>,
) -> String {
    if config.schedules.is_empty() {
        return "no schedules (schedules: in the configuration)\n".to_owned();
    }
    let mut out = String::new();
    for s in &config.schedules {
        let schedule = match Schedule::new(s, &config.prompts.dir) {
            Ok(schedule) => schedule,
            Err(e) => {
                let _ = writeln!(out, "{}  cannot run: {e}\n", s.name);
                continue;
            }
        };
        let state = if s.enabled {
            "enabled"
        } else {
            "disabled (runs only with `schedules run`)"
        };
        let place = places.resolve(&schedule.spot);
        let _ = writeln!(out, "{}  {}  {state}", s.name, schedule.timetable);
        let _ = writeln!(
            out,
            "  place:  {} (place rule: {})",
            schedule.spot, place.name
        );
        let _ = writeln!(out, "  prompt: {}", schedule.prompt_path.display());
        let mut options = Vec::new();
        if s.quiet_if_no_activity {
            options.push("quiet if no activity".to_owned());
        }
        options.push(format!("catch up within {} min", s.catch_up_minutes));
        let _ = writeln!(out, "  runs:   {}", options.join(", "));
        if let Some(last) = last {
            let line = last.get(&s.name).map_or_else(
                || "none yet".to_owned(),
                |run| {
                    let why = run
                        .detail
                        .as_deref()
                        .map_or_else(String::new, |d| format!(" ({d})"));
                    format!(
                        "{} UTC, {}: {}{why}",
                        run.started_at.format("%Y-%m-%d %H:%M"),
                        run.trigger,
                        run.outcome
                    )
                },
            );
            let _ = writeln!(out, "  last:   {line}");
        }
        for (i, at) in schedule
            .timetable
            .upcoming(now, NEXT_RUNS)
            .into_iter()
            .enumerate()
        {
            let label = if i == 0 { "  next:  " } else { "         " };
            let _ = writeln!(
                out,
                "{label} {} ({} UTC)",
                schedule.timetable.local(at),
                at.format("%Y-%m-%d %H:%M:%S")
            );
        }
        out.push('\n');
    }
    out
}

/// Runs schedule `name` through the daemon serving the configuration at `config_path`.
pub(super) fn run_main(config_path: &Path, name: &str) -> ExitCode {
    let name = name.to_owned();
    super::run_with_config(
        config_path,
        crate::observability::LogTarget::Stderr,
        super::quiet,
        |config, _live_tokens| async move {
            let database = config.database_path();
            let pid = holder(&database)?.with_context(|| {
                format!(
                    "the daemon is not running on {}: a schedule runs inside it (start `air-friends serve`)",
                    database.display()
                )
            })?;
            let report = request_schedule_run(&database, &name)
                .await
                .with_context(|| format!("the daemon (pid {pid}) did not run {name:?}"))?;
            let mut line = format!("{}: {}", report.name, report.outcome);
            if let Some(detail) = &report.detail {
                let _ = write!(line, " ({detail})");
            }
            let _ = write!(line, ", {} model tokens", report.tokens);
            println!("{line}");
            anyhow::ensure!(
                matches!(
                    report.outcome.as_str(),
                    "posted" | "silent" | "skipped_quiet"
                ),
                "the run did not post"
            );
            Ok(())
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_schedule_shows_its_place_prompt_and_next_runs() {
        let config: Config = serde_yaml::from_str(
            "places:\n  - name: lounge\n    match: {channel: '2'}\n\
             schedules:\n\
             \x20 - name: morning\n    cron: '0 8 * * *'\n    timeZone: Europe/Berlin\n    place: discord/guild/1/channel/2\n    prompt: morning.md\n    quietIfNoActivity: true\n\
             \x20 - name: broken\n    cron: '0 8 * * *'\n    place: discord/dm\n    prompt: x.md\n",
        )
        .unwrap();
        let places = Places::new(&config, ["send-reply".to_owned()]);
        let now = DateTime::parse_from_rfc3339("2026-03-27T12:00:00Z")
            .unwrap()
            .to_utc();
        let text = render(&config, &places, None, now);
        assert!(!text.contains("last:"), "no database read: {text}");
        let run = ScheduleRun {
            id: 1,
            name: "morning".into(),
            due_at: now,
            started_at: now,
            finished_at: Some(now),
            trigger: "timetable".into(),
            outcome: "skipped_quiet".into(),
            detail: Some("nobody wrote there".into()),
            tokens: 0,
        };
        let with_last = render(
            &config,
            &places,
            Some(&HashMap::from([("morning".to_owned(), run)])),
            now,
        );
        assert!(
            with_last.contains(
                "last:   2026-03-27 12:00 UTC, timetable: skipped_quiet (nobody wrote there)"
            ),
            "{with_last}"
        );
        assert!(
            text.contains("morning  0 8 * * * (Europe/Berlin)  enabled"),
            "{text}"
        );
        assert!(
            text.contains("place:  discord/guild/1/channel/2 (place rule: lounge)"),
            "{text}"
        );
        assert!(text.contains("schedules/morning.md"), "{text}");
        assert!(
            text.contains("quiet if no activity, catch up within 30 min"),
            "{text}"
        );
        // Across the spring change: 07:00 UTC, then 06:00 UTC.
        assert!(
            text.contains("next:   2026-03-28 08:00:00 CET (2026-03-28 07:00:00 UTC)"),
            "{text}"
        );
        assert!(
            text.contains("2026-03-29 08:00:00 CEST (2026-03-29 06:00:00 UTC)"),
            "{text}"
        );
        assert!(
            text.contains("broken  cannot run: a schedule posts in a public place, not a DM"),
            "{text}"
        );
    }
}
