//! `air-friends chat`: the whole pipeline (store, skills, Skill API, agent runner, router) with
//! the console as the only platform: each line typed is a DM from the local user, every answer
//! is printed. The quickest way to try a persona and an agent set-up.

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::BufReader;

use crate::config::{self, Config, ReplyTo};
use crate::observability::{LiveSecrets, LogTarget, Metrics};
use crate::ops::Readiness;
use crate::platform::PlatformAdapter;
use crate::platform::console::ConsoleAdapter;
use crate::shutdown::{self, Shutdown};

/// Loads the configuration, adapts it for a local conversation, and runs it.
pub fn chat_main(path: &Path) -> ExitCode {
    super::run_with_config(path, LogTarget::Stderr, for_console, chat)
}

/// The console is a private conversation with the machine's own user: no platforms, no access
/// control or rate limit, an ephemeral Skill API port, quiet logs on stderr.
fn for_console(config: &mut Config) {
    config.platforms.discord.enabled = false;
    config.platforms.misskey.enabled = false;
    config.access_control.reply_to = ReplyTo::All;
    config.rate_limit.enabled = false;
    config.skill_api.port = 0;
    if config.logging.level == "info" {
        config.logging.level = "warn".into();
    }
    config.logging.format = config::LogFormat::Pretty;
}

async fn chat(config: Config, live_tokens: LiveSecrets) -> anyhow::Result<()> {
    let shutdown = Shutdown::new();
    let metrics = Metrics::new();
    let readiness = Readiness::new();
    let username = std::env::var("USER").unwrap_or_else(|_| "you".into());
    let console = Arc::new(ConsoleAdapter::new(
        Box::new(std::io::stdout()),
        config.workspace.repo_path.join("console-downloads"),
        &username,
    ));
    let started = super::daemon::start(
        &config,
        &shutdown,
        &metrics,
        &readiness,
        vec![console.clone() as Arc<dyn PlatformAdapter>],
        live_tokens,
    )
    .await?;
    eprintln!(
        "air-friends chat: talking to `{}` as {username}. Type a message and press Enter; Ctrl-D ends.",
        config.agent.command
    );

    let signal = tokio::spawn(shutdown::wait_for_signal());
    let stdin = BufReader::new(tokio::io::stdin());
    let input_done = console.run(stdin, started.sink, shutdown.draining());
    tokio::select! {
        r = input_done => {
            r?;
            // End of input: let every message typed so far be answered.
            started.events_done.cancelled().await;
        }
        _ = signal => {}
    }
    shutdown
        .drain(Duration::from_millis(config.shutdown_grace_ms))
        .await;
    started.store.close().await?;
    Ok(())
}
