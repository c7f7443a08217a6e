//! Reloading without a restart: SIGHUP (`air-friends reload` and systemd's `ExecReload` send
//! it) re-reads the configuration file, checks it exactly as `serve` does at start, and puts
//! in force what can change live — the `places:` rules and `prompts.language`, the prompt
//! templates and personas, which are re-rendered for the next turn, and the daemon's own texts
//! to users (`prompts.dir/texts/`), which are read again, and the operator schedules
//! (`schedules:`; an unchanged one keeps its next run). A warm agent whose place, persona or
//! model changed is retired at its conversation's next message (its start fingerprint no
//! longer matches); the others are kept. Everything else that changed (listeners, storage,
//! platforms, the agent's settings, …) is reported as needing a restart and left as it was,
//! never half-applied; a file that fails the check changes nothing. Each reload is one log
//! record and a count in `config_reloads_total{outcome}`.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::config::{Config, ProcessEnv};
use crate::conversation::notices::Notices;
use crate::conversation::prompts::Personas;
use crate::observability::Metrics;
use crate::places::{LivePlaces, Places};
use crate::schedules::{Schedule, Scheduler};

/// What a reload can change in a running daemon.
#[derive(Debug, Clone)]
pub struct Reloadable {
    /// The `places:` rules in force.
    pub(super) places: Arc<LivePlaces>,
    /// Every place's system prompt.
    pub(super) personas: Arc<Personas>,
    /// The daemon's own texts to users.
    pub(super) notices: Arc<Notices>,
    /// The skills the running configuration enables (a reload's rules narrow these).
    pub(super) enabled: Vec<String>,
    /// The operator schedules' scheduler (`None`: the schedules are not reloaded, as in the
    /// unit tests of this module).
    pub(super) scheduler: Option<Scheduler>,
}

/// What one reload did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The file failed the check: nothing changed.
    Refused(String),
    /// The file passed: what is live now, and what waits for a restart.
    Applied {
        /// The sections put in force (`places`), empty when none changed.
        changed: Vec<&'static str>,
        /// The keys that changed but need a restart (`agent.model`, `platforms.discord`, …).
        needs_restart: Vec<String>,
    },
}

impl Outcome {
    fn label(&self) -> &'static str {
        match self {
            Outcome::Refused(_) => "refused",
            Outcome::Applied { .. } => "applied",
        }
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: &'static str,
}

/// Reloads on SIGHUP until the daemon drains. With `path` the configuration file is
/// re-read and checked (`serve`); without (the chat console, whose configuration is adjusted
/// at start) only the prompt templates are re-rendered.
pub async fn on_sighup(
    path: Option<PathBuf>,
    mut running: Config,
    live: Reloadable,
    metrics: Metrics,
    draining: CancellationToken,
) -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let reloads: Family<OutcomeLabels, Counter> = Family::default();
    for outcome in ["applied", "refused"] {
        drop(reloads.get_or_create(&OutcomeLabels { outcome }));
    }
    metrics.register(|r| {
        r.register(
            "config_reloads",
            "Configuration reloads (SIGHUP), by outcome: applied or refused",
            reloads.clone(),
        )
    });
    let mut hup = signal(SignalKind::hangup()).context("cannot install the SIGHUP handler")?;
    loop {
        tokio::select! {
            _ = draining.cancelled() => return Ok(()),
            got = hup.recv() => {
                if got.is_none() {
                    return Ok(());
                }
            }
        }
        live.personas.invalidate();
        let Some(path) = path.clone() else {
            live.reread_texts(&running.prompts.language).await;
            tracing::info!("SIGHUP: prompt templates and texts will be reloaded");
            continue;
        };
        let checked = tokio::task::spawn_blocking(move || {
            super::super::check::check_file(&path, &ProcessEnv)
        })
        .await
        .context("the configuration check panicked")?;
        let outcome = match checked {
            Ok(checked) => {
                let mut new = checked.config;
                super::super::keyless_default(&mut new);
                live.reread_texts(&new.prompts.language).await;
                live.apply(&mut running, new)
            }
            Err(rejected) => Outcome::Refused(rejected.error.issues().join("; ")),
        };
        reloads
            .get_or_create(&OutcomeLabels {
                outcome: outcome.label(),
            })
            .inc();
        match &outcome {
            Outcome::Refused(why) => tracing::error!(
                error = %why,
                "configuration not reloaded: the file fails the check; nothing changed"
            ),
            Outcome::Applied {
                changed,
                needs_restart,
            } => tracing::info!(
                changed = ?changed,
                needs_restart = ?needs_restart,
                "configuration reloaded"
            ),
        }
    }
}

impl Reloadable {
    /// Re-reads the daemon's texts to users, `language` being the global one (on the blocking
    /// pool).
    async fn reread_texts(&self, language: &str) {
        let notices = self.notices.clone();
        let language = language.to_owned();
        if let Err(e) = tokio::task::spawn_blocking(move || notices.reload(&language)).await {
            tracing::error!(error = %e, "re-reading the daemon's texts panicked; the old ones stay");
        }
    }

    /// Puts `new`'s live sections in force and records them in `running`; says what else
    /// changed.
    pub fn apply(&self, running: &mut Config, new: Config) -> Outcome {
        let mut needs_restart = needs_restart(running, &new);
        let mut changed = Vec::new();
        if running.schedules != new.schedules
            && let Some(scheduler) = &self.scheduler
        {
            // The file passed the check, so every schedule is one that can run.
            let built: Result<Vec<Schedule>, _> = new
                .schedules
                .iter()
                .map(|s| Schedule::new(s, &new.prompts.dir))
                .collect();
            match built {
                Ok(schedules) => {
                    scheduler.replace(schedules);
                    running.schedules = new.schedules.clone();
                    needs_restart.retain(|k| k != "schedules");
                    changed.push("schedules");
                }
                Err(e) => {
                    tracing::error!(error = %e, "the new schedules cannot run; the old ones stay")
                }
            }
        }
        let language_changed = running.prompts.language != new.prompts.language;
        if running.places != new.places || language_changed {
            self.places
                .replace(Places::new(&new, self.enabled.iter().cloned()));
        }
        if running.places != new.places {
            running.places = new.places;
            changed.push("places");
        }
        if language_changed {
            running.prompts.language = new.prompts.language;
            changed.push("prompts.language");
        }
        Outcome::Applied {
            changed,
            needs_restart,
        }
    }
}

/// The keys (two levels deep: `agent.model`, `platforms.discord`) whose values differ between
/// `running` and `new`, besides what a reload applies. A changed secret (masked in the
/// comparison) is named by its platform.
pub fn needs_restart(running: &Config, new: &Config) -> Vec<String> {
    let (Ok(old), Ok(now)) = (serde_json::to_value(running), serde_json::to_value(new)) else {
        return vec!["(the configuration could not be compared)".to_owned()];
    };
    let mut keys = Vec::new();
    differing(&old, &now, "", 2, &mut keys);
    keys.retain(|k| k != "places" && !k.starts_with("places.") && k != "prompts.language");
    if running.secret_values() != new.secret_values()
        && !keys.iter().any(|k| k.starts_with("platforms"))
    {
        keys.push("platforms (a token)".to_owned());
    }
    keys.sort();
    keys.dedup();
    keys
}

/// Collects into `out` the paths, at most `depth` keys deep, where `a` and `b` differ.
fn differing(a: &Value, b: &Value, at: &str, depth: usize, out: &mut Vec<String>) {
    if a == b {
        return;
    }
    match (a, b) {
        (Value::Object(x), Value::Object(y)) if depth > 0 => {
            let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            for key in keys {
                let path = if at.is_empty() {
                    key.clone()
                } else {
                    format!("{at}.{key}")
                };
                differing(
                    x.get(key).unwrap_or(&Value::Null),
                    y.get(key).unwrap_or(&Value::Null),
                    &path,
                    depth - 1,
                    out,
                );
            }
        }
        _ => out.push(at.to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conversation::prompts::PromptLibrary;
    use crate::places::Spot;

    fn config(yaml: &str) -> Config {
        serde_yaml::from_str(yaml).unwrap()
    }

    fn reloadable() -> Reloadable {
        let shared = Arc::new(PromptLibrary::new(std::path::Path::new("/nonexistent")));
        Reloadable {
            places: Arc::new(Places::none().into()),
            personas: Arc::new(Personas::new(shared, [])),
            notices: Arc::new(Notices::built_in()),
            enabled: vec!["send-reply".into(), "react-message".into()],
            scheduler: None,
        }
    }

    #[test]
    fn the_global_language_changes_live_for_places_without_their_own() {
        let live = reloadable();
        let mut running = config("places:\n  - {name: lounge, match: {dm: true}, language: de}\n");
        live.places.replace(Places::new(&running, []));
        let new = config(
            "prompts:\n  language: ja\nplaces:\n  - {name: lounge, match: {dm: true}, language: de}\n",
        );
        let outcome = live.apply(&mut running, new);
        assert_eq!(
            outcome,
            Outcome::Applied {
                changed: vec!["prompts.language"],
                needs_restart: vec![],
            }
        );
        let at = |spot: &str| {
            live.places
                .current()
                .resolve(&spot.parse().unwrap())
                .language
                .clone()
        };
        assert_eq!(&*at("discord/guild/1/channel/2"), "ja");
        assert_eq!(&*at("discord/dm"), "de");
        assert_eq!(running.prompts.language, "ja");
    }

    #[test]
    fn places_change_live_and_the_rest_is_reported() {
        let live = reloadable();
        let mut running = config("agent:\n  model: openrouter/a\n");
        let new = config(
            "agent:\n  model: openrouter/b\nhealth:\n  port: 9999\nplaces:\n  - {name: lounge, match: {dm: true}, skills: [send-reply]}\n",
        );
        let outcome = live.apply(&mut running, new);
        assert_eq!(
            outcome,
            Outcome::Applied {
                changed: vec!["places"],
                needs_restart: vec!["agent.model".to_owned(), "health.port".to_owned()],
            }
        );
        let dm: Spot = "discord/dm".parse().unwrap();
        let place = live.places.current().resolve(&dm);
        assert_eq!(&*place.name, "lounge");
        assert!(!place.allows_skill("react-message"));
        assert_eq!(
            running.places.len(),
            1,
            "the running copy has the new rules"
        );
        assert_eq!(
            running.agent.model.as_deref(),
            Some("openrouter/a"),
            "what needs a restart is not applied"
        );
        // The same file again: nothing changes.
        let again = config(
            "agent:\n  model: openrouter/b\nhealth:\n  port: 9999\nplaces:\n  - {name: lounge, match: {dm: true}, skills: [send-reply]}\n",
        );
        let Outcome::Applied { changed, .. } = live.apply(&mut running, again) else {
            panic!("applied");
        };
        assert!(changed.is_empty());
    }

    #[test]
    fn a_changed_token_is_named_without_its_value() {
        let running = config("platforms:\n  discord:\n    token: old-secret\n");
        let new = config("platforms:\n  discord:\n    token: new-secret\n");
        let keys = needs_restart(&running, &new);
        assert_eq!(keys.len(), 1, "{keys:?}");
        assert!(keys[0].starts_with("platforms"), "{keys:?}");
        assert!(!keys.iter().any(|k| k.contains("secret")));
    }
}
