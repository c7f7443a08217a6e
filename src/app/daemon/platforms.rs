//! The platforms stage: the registry of adapters (each behind the metering decorator), the
//! event channel their receive loops feed, and a `/readyz` connection check per platform (or
//! one `platforms` check that fails when none is enabled).

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::sync::mpsc;

use super::Ctx;
use crate::config::PLATFORMS;
use crate::ops::Readiness;
use crate::platform::CONNECTORS;
use crate::platform::duties::PlaceDuties;
use crate::platform::metered::PlatformMetrics;
use crate::platform::{
    ConnectionState, EventSink, PlatformAdapter, PlatformEvent, PlatformKind, PlatformRegistry,
    UserCommandSpec,
};

/// Events waiting for the router.
const EVENT_QUEUE: usize = 1024;

/// The platform registry (`extra` adapters, then the configured platforms, each behind the
/// metering decorator) and the event channel their receive loops feed; each configured
/// platform's loop runs as a tracked task.
pub(super) fn start(
    ctx: Ctx<'_>,
    extra: Vec<Arc<dyn PlatformAdapter>>,
    commands: &[UserCommandSpec],
    duties: Arc<dyn PlaceDuties>,
) -> anyhow::Result<(PlatformRegistry, EventSink, mpsc::Receiver<PlatformEvent>)> {
    let (config, shutdown) = (ctx.config, ctx.shutdown);
    let http = http_client()?;
    let (sink, events) = mpsc::channel::<PlatformEvent>(EVENT_QUEUE);
    // Every adapter is reached through the metering decorator: failures are counted whoever
    // made the call.
    let metered = PlatformMetrics::new(ctx.metrics);
    let mut platforms = PlatformRegistry::new();
    for adapter in extra {
        platforms.insert(metered.wrap(adapter));
    }
    for connector in CONNECTORS {
        let enabled = PLATFORMS
            .iter()
            .find(|facts| facts.key == connector.kind.as_str())
            .is_some_and(|facts| (facts.enabled)(&config.platforms));
        if !enabled {
            continue;
        }
        let (adapter, receive) = (connector.build)(
            &config.platforms,
            http.clone(),
            commands.to_vec(),
            duties.clone(),
        )?;
        platforms.insert(metered.wrap(adapter));
        let state = connection_check(ctx.readiness, &metered, connector.kind);
        let (sink, draining) = (sink.clone(), shutdown.draining());
        shutdown.spawn(connector.kind.as_str(), receive(sink, state, draining));
    }
    // The configuration's warning said so at start; `/readyz` keeps saying it.
    if platforms.is_empty() {
        ctx.readiness
            .register("platforms", || async { Err("none enabled".to_owned()) });
    }
    Ok((platforms, sink, events))
}

/// The HTTP client the platform adapters share.
fn http_client() -> anyhow::Result<reqwest::Client> {
    reqwest::Client::builder()
        .user_agent(concat!("air-friends/", env!("CARGO_PKG_VERSION")))
        .connect_timeout(Duration::from_secs(10))
        .timeout(Duration::from_secs(120))
        .build()
        .context("cannot build the HTTP client")
}

/// Registers a readiness check for a platform and returns its connection flag, which
/// `platform_connected` reports too.
fn connection_check(
    readiness: &Readiness,
    metered: &PlatformMetrics,
    platform: PlatformKind,
) -> ConnectionState {
    let state = ConnectionState::new();
    metered.watch_connection(platform, state.clone());
    let name = platform.as_str();
    let s = state.clone();
    readiness.register(name, move || {
        let verdict = if s.is_connected() {
            Ok(())
        } else {
            Err(s
                .problem()
                .unwrap_or_else(|| format!("{name} is not connected")))
        };
        async move { verdict }
    });
    state
}
