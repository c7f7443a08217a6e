//! `air-friends chat`: the whole pipeline (store, skills, Skill API, model gateway, agent
//! runner, router) with the console as the only platform: each line typed is a DM from the
//! local user, every answer is printed. The quickest way to try a persona and an agent set-up.
//!
//! The console is honest about what happens (`tests/chat_console.rs`, through a
//! pseudo-terminal): a status line while the agent works, one actionable line when the model
//! provider fails (`tests/opencode_e2e.rs`), and ends as asked:
//! * stdin EOF (Ctrl-D): every message typed so far is answered, then the daemon drains and
//!   exits 0;
//! * the first Ctrl-C or SIGTERM: the running turn is cancelled at once (the runner sends
//!   `session/cancel` and stops the agent) and the process exits within [`EXIT_WITHIN`];
//! * a second one: exits at once (status 130).

mod console;

use std::io::IsTerminal;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use tokio::signal::unix::{Signal, SignalKind, signal};

use console::{ConsoleAdapter, Diagnostics, stdin_lines};

use super::daemon::Observers;
use crate::config::{self, Config, PLATFORMS, ReplyTo};
use crate::observability::{LiveSecrets, LogTarget, Metrics};
use crate::ops::Readiness;
use crate::platform::PlatformAdapter;
use crate::shutdown::Shutdown;
use crate::store::Store;

/// After the first Ctrl-C, the longest the cancelled turn and the drain may take before the
/// process exits anyway (sandboxed agents die with it: bubblewrap's `--die-with-parent`).
const EXIT_WITHIN: Duration = Duration::from_millis(900);

/// The exit status after a second Ctrl-C (128 + SIGINT, as shells report an interrupt).
const INTERRUPTED: i32 = 130;

/// Checks the configuration as `check-config` and `serve` do (the same errors stop the
/// conversation before anything starts), adapts it for a local conversation, and runs it. The
/// warning that no platform is enabled is dropped: the console is this command's platform.
pub fn chat_main(path: &Path) -> ExitCode {
    match super::load_config(path, super::ConfigCheck::Strict) {
        Ok((config, mut warnings)) => {
            warnings.retain(|w| w.path != NO_PLATFORM_WARNING_PATH);
            super::run_loaded(config, &warnings, LogTarget::Stderr, for_console, chat)
        }
        Err(code) => code,
    }
}

/// The key the "no platform is enabled" warning of the strict check names.
const NO_PLATFORM_WARNING_PATH: &str = "platforms";

/// The console is a private conversation with the machine's own user: no platforms, no access
/// control or rate limit, an ephemeral Skill API port, quiet logs on stderr.
fn for_console(config: &mut Config) {
    for facts in PLATFORMS {
        (facts.set_enabled)(&mut config.platforms, false);
    }
    config.access_control.reply_to = ReplyTo::All;
    config.rate_limit.enabled = false;
    config.skill_api.port = 0;
    // A console session is a conversation in the foreground: memory maintenance (a background
    // agent run) belongs to `serve`.
    config.memory.maintenance.enabled = false;
    if config.logging.level == "info" {
        config.logging.level = "warn".into();
    }
    config.logging.format = config::LogFormat::Pretty;
}

/// SIGINT (Ctrl-C) and SIGTERM, installed before anything starts so none is lost.
struct Interrupts {
    int: Signal,
    term: Signal,
}

impl Interrupts {
    fn install() -> std::io::Result<Self> {
        Ok(Self {
            int: signal(SignalKind::interrupt())?,
            term: signal(SignalKind::terminate())?,
        })
    }

    /// The next SIGINT or SIGTERM.
    async fn next(&mut self) -> &'static str {
        tokio::select! {
            _ = self.int.recv() => "SIGINT",
            _ = self.term.recv() => "SIGTERM",
        }
    }
}

async fn chat(config: Config, live_tokens: LiveSecrets) -> anyhow::Result<()> {
    let mut interrupts = Interrupts::install()?;
    let shutdown = Shutdown::new();
    let metrics = Metrics::new();
    let readiness = Readiness::new();
    let username = std::env::var("USER").unwrap_or_else(|_| "you".into());
    let console = console_adapter(&config, &username);
    let started = super::daemon::start(
        &config,
        &shutdown,
        &metrics,
        &readiness,
        vec![console.clone() as Arc<dyn PlatformAdapter>],
        live_tokens,
        Observers {
            activity: Some(console.clone()),
            provider: Some(console.clone()),
            console: None,
        },
    )
    .await?;
    eprintln!(
        "air-friends chat: talking to `{}` ({}) as {username}. Type a message and press Enter; Ctrl-D ends.",
        config.agent.command,
        config.agent.model.as_deref().map_or_else(
            || "the agent's default model".to_owned(),
            |m| format!("model {m}")
        ),
    );
    // SIGHUP re-renders the prompt templates (the console's configuration is adjusted at start,
    // so the file is not re-read).
    shutdown.spawn(
        "sighup",
        super::daemon::on_sighup(
            None,
            config.clone(),
            started.reload.clone(),
            metrics.clone(),
            shutdown.draining(),
        ),
    );
    shutdown.spawn(
        "console_status",
        console.clone().run_status(shutdown.draining()),
    );

    let input_done = console.run(stdin_lines()?, started.sink, shutdown.draining());
    let interrupted = tokio::select! {
        r = input_done => {
            r?;
            // End of input: let every message typed so far be answered (unless interrupted).
            tokio::select! {
                _ = started.events_done.cancelled() => None,
                signal = interrupts.next() => Some(signal),
            }
        }
        signal = interrupts.next() => Some(signal),
    };
    let grace = config.shutdown_grace();
    let Some(signal) = interrupted else {
        shutdown.drain(grace).await;
        started.store.close().await?;
        started.owner.release();
        return Ok(());
    };
    cancel_and_exit(&shutdown, started.store, grace, &mut interrupts, signal).await
}

/// The console platform: prints answers on stdout, its diagnostics (and, on a terminal, the
/// status line) on stderr.
fn console_adapter(config: &Config, username: &str) -> Arc<ConsoleAdapter> {
    let skills_dir = std::fs::canonicalize(&config.agent.skills_dir)
        .unwrap_or_else(|_| config.agent.skills_dir.clone());
    Arc::new(
        ConsoleAdapter::new(
            Box::new(std::io::stdout()),
            config.workspace.repo_path.join("console-downloads"),
            username,
        )
        .with_diagnostics(Diagnostics {
            err: Box::new(std::io::stderr()),
            status_line: std::io::stderr().is_terminal(),
            skills_dir,
            model: config.agent.model.clone(),
        }),
    )
}

/// After the first interrupt: cancels the running turn, drains and closes the store within
/// [`EXIT_WITHIN`]; a second interrupt meanwhile exits at once.
async fn cancel_and_exit(
    shutdown: &Shutdown,
    store: Store,
    grace: Duration,
    interrupts: &mut Interrupts,
    signal: &'static str,
) -> anyhow::Result<()> {
    tracing::info!(signal, "interrupted: cancelling the running turn");
    // Cancel running work now rather than letting it finish (`drain` would wait for it).
    shutdown.stop().cancel();
    let finish = async {
        shutdown.drain(grace).await;
        store.close().await
    };
    tokio::select! {
        closed = tokio::time::timeout(EXIT_WITHIN, finish) => match closed {
            Ok(closed) => closed?,
            Err(_) => tracing::warn!("the cancelled turn did not end in time; exiting anyway"),
        },
        signal = interrupts.next() => {
            tracing::warn!(signal, "interrupted again: exiting at once");
            std::process::exit(INTERRUPTED);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The console connects no platform, whichever the configuration enables.
    #[test]
    fn the_console_switches_every_platform_off() {
        let mut config = Config::default();
        for facts in PLATFORMS {
            (facts.set_enabled)(&mut config.platforms, true);
        }
        for_console(&mut config);
        for facts in PLATFORMS {
            assert!(
                !(facts.enabled)(&config.platforms),
                "{} stays on",
                facts.key
            );
        }
    }
}
