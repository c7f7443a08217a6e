//! `air-friends serve`: runs the daemon. Loads the configuration, installs logging, has every
//! component built ([`super::daemon::start`], the composition root `chat` shares), serves the
//! ops listener, runs until a signal, and shuts down in bounded time.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::admin::Console;
use crate::admin::auth::Auth;
use crate::config::{self, Config};
use crate::observability::Metrics;
use crate::observability::{LiveSecrets, LogTarget};
use crate::ops::{self, OpsState, Readiness, Verdict, checks};
use crate::setup::agent_lookup::{self, AgentLookup};
use crate::shutdown::{self, Shutdown};
use crate::systemd;

/// `air-friends serve`: check the configuration exactly as `check-config` does (its errors stop
/// the daemon, its warnings are logged), install logging, run the daemon.
pub fn serve_main(path: &Path) -> ExitCode {
    match super::load_config(path, super::ConfigCheck::Strict) {
        Ok((config, warnings)) => {
            let path = path.to_path_buf();
            super::run_loaded(
                config,
                &warnings,
                LogTarget::Stdout,
                |_| {},
                move |config, tokens| serve(config, path, tokens),
            )
        }
        Err(code) => code,
    }
}

/// Runs the daemon until SIGTERM/SIGINT, then shuts down gracefully; SIGHUP reloads `path`
/// (what can change live, see `daemon::on_sighup`). `live_tokens` is the log redactor's set
/// the Skill API publishes its live caller tokens into.
pub async fn serve(config: Config, path: PathBuf, live_tokens: LiveSecrets) -> anyhow::Result<()> {
    let metrics = Metrics::new();
    let readiness = Readiness::new();
    let shutdown = Shutdown::new();
    register_builtin_checks(&readiness, &config);

    // Signals are installed before anything is announced, so an early SIGTERM is not lost.
    let signal = tokio::spawn(shutdown::wait_for_signal());

    // The operator console (`admin.enabled`): its board is told what every agent does.
    let console = config.admin.enabled.then(|| {
        Console::new(
            Auth::new(
                Duration::from_secs(config.admin.link_minutes * 60),
                Duration::from_secs(config.admin.session_hours * 3600),
            ),
            readiness.clone(),
        )
    });
    if let Some(console) = &console {
        match crate::config::masked_yaml(&config, &crate::config::ProcessEnv) {
            Ok(yaml) => console.set_config(yaml),
            Err(e) => tracing::warn!(error = %e, "the console cannot show the configuration"),
        }
    }
    let observers = super::daemon::Observers {
        activity: console
            .as_ref()
            .map(|c| c.board() as Arc<dyn crate::agent::ActivityObserver>),
        console: console.clone(),
        ..super::daemon::Observers::default()
    };
    // The console's *Chat* page is a platform of its own (`console`), the operator its user.
    let extra: Vec<Arc<dyn crate::platform::PlatformAdapter>> = console
        .iter()
        .map(|c| c.chat() as Arc<dyn crate::platform::PlatformAdapter>)
        .collect();
    let started = super::daemon::start(
        &config,
        &shutdown,
        &metrics,
        &readiness,
        extra,
        live_tokens,
        observers,
    )
    .await?;
    if let Some(console) = &console {
        console.chat().connect(started.sink.clone());
    }

    shutdown.spawn(
        "sighup",
        super::daemon::on_sighup(
            Some(path),
            config.clone(),
            started.reload.clone(),
            metrics.clone(),
            shutdown.draining(),
        ),
    );
    let ops = OpsListener::start(&config, readiness.clone(), metrics, console, &shutdown).await?;

    // Started: systemd is told now (a platform that cannot connect must not fail the start);
    // "ready" is logged when `/readyz` would say so.
    systemd::notify_ready();
    tokio::spawn(announce_ready(readiness, shutdown.draining()));

    let which = signal
        .await
        .context("signal handler task failed")?
        .context("cannot install signal handlers")?;
    tracing::info!(
        signal = which,
        grace_ms = config.shutdown_grace_ms,
        "shutting down"
    );
    systemd::notify_stopping();

    let clean = shutdown.drain(config.shutdown_grace()).await;
    if let Err(e) = started.store.close().await {
        tracing::error!(error = %e, "closing the database failed");
    }
    started.owner.release();
    ops.stop().await;
    tracing::info!(clean, "stopped");
    Ok(())
}

/// How often the checks are run until the daemon is ready.
const READY_POLL: std::time::Duration = std::time::Duration::from_millis(250);
/// How long the daemon may take to become ready (a platform connecting) before a warning says
/// what it is waiting for.
const READY_PATIENCE: std::time::Duration = std::time::Duration::from_secs(10);

/// Logs "air-friends ready" once `/readyz` would answer 200 (every gating check passes: the
/// platforms connected, the store, the sandbox); when that takes longer than
/// [`READY_PATIENCE`], one warn record naming what is not ready yet. Ends when the daemon
/// drains.
async fn announce_ready(readiness: Readiness, draining: CancellationToken) {
    let started = tokio::time::Instant::now();
    let mut told = false;
    loop {
        let reports = readiness.run().await;
        let verdict = Verdict::of(&reports);
        if verdict.serves() {
            tracing::info!(
                version = env!("CARGO_PKG_VERSION"),
                status = verdict.as_str(),
                "air-friends ready"
            );
            return;
        }
        if !told && started.elapsed() >= READY_PATIENCE {
            let waiting: Vec<String> = reports
                .iter()
                .filter(|r| !r.ok && !r.degrades)
                .map(|r| format!("{}: {}", r.name, r.detail.as_deref().unwrap_or("failing")))
                .collect();
            tracing::warn!(
                waiting_for = %waiting.join("; "),
                "air-friends started but is not ready yet (see /readyz); the ready record follows when it is"
            );
            told = true;
        }
        tokio::select! {
            () = draining.cancelled() => return,
            () = tokio::time::sleep(READY_POLL) => {}
        }
    }
}

/// The ops listener (`/healthz`, `/readyz`, `/metrics`) and the systemd watchdog. The listener
/// outlives the drain so `/readyz` can report it; it stops last.
struct OpsListener {
    stop: CancellationToken,
    task: JoinHandle<std::io::Result<()>>,
    watchdog: Option<JoinHandle<()>>,
}

impl OpsListener {
    /// Binds `health.host:health.port` and serves the ops router; starts the watchdog when
    /// systemd asks for one.
    async fn start(
        config: &Config,
        readiness: Readiness,
        metrics: Metrics,
        console: Option<Console>,
        shutdown: &Shutdown,
    ) -> anyhow::Result<Self> {
        let ops_listener = bind(&config.health.host, config.health.port)
            .await
            .context("cannot bind the ops listener (health.host / health.port)")?;
        let addr = ops_listener.local_addr()?;
        tracing::info!(addr = %addr, listener = "ops", "listening");
        // The console's pages beside the ops endpoints, reached where the listener is.
        let extra = match console {
            Some(console) => {
                console.set_base_url(format!("http://{addr}"));
                tracing::info!(url = %format!("http://{addr}/admin/"), "operator console served (log in with `air-friends admin-link`)");
                console.router()
            }
            None => axum::Router::new(),
        };
        let stop = CancellationToken::new();
        let task = tokio::spawn(ops::serve(
            ops_listener,
            OpsState {
                readiness,
                metrics,
                draining: shutdown.draining(),
            },
            extra,
            stop.clone().cancelled_owned(),
        ));
        let watchdog = systemd::watchdog_interval().map(|interval| {
            tracing::info!(
                interval_ms = interval.as_millis() as u64,
                "systemd watchdog enabled"
            );
            tokio::spawn(systemd::run_watchdog(interval, stop.clone()))
        });
        Ok(Self {
            stop,
            task,
            watchdog,
        })
    }

    /// Stops the watchdog and the listener, and waits for both.
    async fn stop(self) {
        self.stop.cancel();
        if let Some(w) = self.watchdog {
            w.await.ok();
        }
        match self.task.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!(error = %e, "ops listener ended with an error"),
            Err(e) => tracing::warn!(error = %e, "ops listener task failed"),
        }
    }
}

fn register_builtin_checks(readiness: &Readiness, config: &Config) {
    let db_path = config.database_path();
    readiness.register("database", move || {
        checks::database_writable(db_path.clone())
    });
    let command = config.agent.command.clone();
    let lookup = AgentLookup::from_env(&config::ProcessEnv);
    readiness.register("agent_command", move || {
        agent_lookup::command_resolves(command.clone(), lookup.clone())
    });
}

/// Binds a TCP listener on `host:port` (`localhost` accepted).
pub async fn bind(host: &str, port: u16) -> anyhow::Result<TcpListener> {
    let ip = config::parse_host(host).with_context(|| format!("{host:?} is not an IP address"))?;
    let addr = SocketAddr::new(ip, port);
    TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding {addr}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    /// The announcement waits, past its patience, until every gating check passes, and then
    /// ends; a failing degrading check does not hold it.
    #[tokio::test(start_paused = true)]
    async fn ready_is_announced_once_the_gating_checks_pass() {
        let readiness = Readiness::new();
        let connected = Arc::new(AtomicBool::new(false));
        let flag = connected.clone();
        readiness.register("discord", move || {
            let up = flag.load(Ordering::SeqCst);
            async move {
                if up {
                    Ok(())
                } else {
                    Err("not connected".into())
                }
            }
        });
        readiness.register_degrading("model", || async { Err("unreachable".into()) });
        let task = tokio::spawn(announce_ready(readiness, CancellationToken::new()));
        tokio::time::sleep(READY_PATIENCE * 2).await;
        assert!(!task.is_finished(), "announced while not ready");
        connected.store(true, Ordering::SeqCst);
        tokio::time::timeout(std::time::Duration::from_secs(5), task)
            .await
            .expect("announced once ready")
            .unwrap();
    }
}
