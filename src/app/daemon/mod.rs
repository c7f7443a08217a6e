//! Building and starting the daemon's components (shared by `serve` and `chat`): store, skill
//! packages, platform adapters, skill handlers and the Skill API, the agent runner, the
//! conversation router and the reminder scheduler. Every task runs under the [`Shutdown`]
//! tracker; every component gets its dependencies passed in. [`start`] lists the stages, in
//! order; each stage is a function in the files below.

mod agent;
mod jobs;
mod pipeline;
mod platforms;
mod reload;
mod sandbox;
mod skill_api;
mod skills;
mod store;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::admin::Console;
use crate::agent::ActivityObserver;
use crate::config::Config;
use crate::gateway::ProviderObserver;
use crate::observability::{LiveSecrets, Metrics};
use crate::ops::Readiness;
use crate::platform::{EventSink, PlatformAdapter};
use crate::shutdown::Shutdown;
use crate::store::Store;
use crate::store::owner::OwnerLock;
use crate::voice::VoiceMetrics;
pub use reload::{Reloadable, on_sighup};

/// What a started daemon hands back to its caller.
#[derive(Debug)]
pub struct Started {
    /// The database (closed by the caller after the drain).
    pub store: Store,
    /// The daemon's lock on the database: dropped after the store is closed.
    pub owner: OwnerLock,
    /// Where extra adapters (the console) deliver events.
    pub sink: EventSink,
    /// Cancelled when the event loop has ended (its channel closed and emptied, or draining).
    pub events_done: CancellationToken,
    /// What a reload can change (see [`on_sighup`]).
    pub reload: Reloadable,
}

/// Who is told what the running agents are doing and why a model provider failed: the chat
/// console subscribes both (to show a status line and the actionable line); `serve` the
/// operator console's board when `admin.enabled` (the daemon logs a failing provider once per
/// cause, and every user is told in words by their turn, `gateway::health`).
#[derive(Clone, Default)]
pub struct Observers {
    /// Every session's activity (see `agent::activity`).
    pub activity: Option<Arc<dyn ActivityObserver>>,
    /// Every classified provider failure (see `gateway::observer`).
    pub provider: Option<Arc<dyn ProviderObserver>>,
    /// The operator console (`admin`): given the daemon's sessions and database once they
    /// exist, and minting its login links over the control socket.
    pub console: Option<Console>,
}

impl std::fmt::Debug for Observers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Observers")
            .field("activity", &self.activity.is_some())
            .field("provider", &self.provider.is_some())
            .field("console", &self.console.is_some())
            .finish()
    }
}

/// What every stage reads: the configuration, the database and the daemon-wide services.
#[derive(Clone, Copy)]
struct Ctx<'a> {
    config: &'a Config,
    store: &'a Store,
    shutdown: &'a Shutdown,
    metrics: &'a Metrics,
    /// The voice metric families, registered once for both speech services (the
    /// transcription of the pipeline, the speech of send-voice).
    voice: &'a VoiceMetrics,
    readiness: &'a Readiness,
}

impl<'a> Ctx<'a> {
    fn new(
        config: &'a Config,
        store: &'a Store,
        shutdown: &'a Shutdown,
        metrics: &'a Metrics,
        voice: &'a VoiceMetrics,
        readiness: &'a Readiness,
    ) -> Self {
        Self {
            config,
            store,
            shutdown,
            metrics,
            voice,
            readiness,
        }
    }
}

/// Builds and starts everything. `extra` adapters (the console) are registered beside the
/// configured platforms; their receive loops are the caller's. The Skill API publishes every
/// live caller token into `live_tokens` (the log redactor's set).
pub async fn start(
    config: &Config,
    shutdown: &Shutdown,
    metrics: &Metrics,
    readiness: &Readiness,
    extra: Vec<Arc<dyn PlatformAdapter>>,
    live_tokens: LiveSecrets,
    observers: Observers,
) -> anyhow::Result<Started> {
    let skills = skills::SkillPackages::load(config)?;
    let voice = VoiceMetrics::new(metrics);
    // The sandbox probe (one sandboxed run, the longest step of a start) runs while the store
    // opens and the platforms and handlers are set up; nothing is served before it passed.
    let setup = async {
        let (store, owner) = store::open(config).await?;
        let ctx = Ctx::new(config, &store, shutdown, metrics, &voice, readiness);
        let (platforms, sink, events) =
            platforms::start(ctx, extra, &skills.commands, skills.places.clone())?;
        let semantic = store::start_embeddings(ctx).await?;
        let handlers = skill_api::skill_handlers(ctx, &platforms, &skills, semantic)?;
        anyhow::Ok((store, owner, platforms, sink, events, handlers))
    };
    // Both run to the end, so a failed probe leaves the store and platforms as a sequential
    // start did (opened, then shut down in order), and a failed setup is reported first.
    let (host, setup) = tokio::join!(sandbox::start(config, readiness, &skills), setup);
    let (store, owner, platforms, sink, events, handlers) = setup?;
    let host = host?;
    let ctx = Ctx::new(config, &store, shutdown, metrics, &voice, readiness);
    // The agent sandbox decides how agents reach the daemon (see `skill_api::start`).
    let served = skill_api::start(
        ctx,
        handlers,
        &skills,
        live_tokens,
        observers.provider,
        &host.sandbox,
    )
    .await?;
    let pipeline = pipeline::start(
        ctx,
        &platforms,
        events,
        &skills,
        &served,
        host,
        observers.activity.clone(),
    )?;
    let database = config.database_path();
    if let Some(console) = &observers.console {
        console.attach(served.api.sessions().clone(), store.clone());
        console.steer(crate::admin::Steering {
            router: pipeline.router.clone(),
            warm: pipeline.warm.clone(),
            user_budget: config.agent.budget.tokens_per_user_per_day,
            prices: config.admin.cost.clone(),
        });
    }
    let control = crate::app::control::Control {
        eraser: pipeline.eraser,
        scheduler: pipeline.scheduler.clone(),
        console: observers.console,
    };
    let draining = shutdown.draining();
    shutdown.spawn("control_socket", async move {
        crate::app::control::serve(&database, control, draining).await
    });
    jobs::start_reminders(ctx, &platforms);
    jobs::start_retention(ctx);
    jobs::start_maintenance(ctx, pipeline.launcher, pipeline.prompts, &served.gateway);
    jobs::start_schedules(ctx, pipeline.scheduler.clone());
    Ok(Started {
        store,
        owner,
        sink,
        events_done: pipeline.events_done,
        reload: Reloadable {
            places: skills.places.clone(),
            personas: pipeline.personas,
            notices: pipeline.notices,
            enabled: skills.enabled.clone(),
            scheduler: Some(pipeline.scheduler),
        },
    })
}

/// The folder holding every user's workspace: `{workspace.repoPath}/{workspace.workspacesDir}`.
pub(super) fn workspaces_root(config: &Config) -> PathBuf {
    config
        .workspace
        .repo_path
        .join(&config.workspace.workspaces_dir)
}

fn absolute(p: &Path) -> PathBuf {
    std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf())
}
