//! The Skill API stage: the built-in skill handlers, the Skill API that serves them to the
//! agents, and the model gateway on the same listener and sockets. The services stop after the
//! running sessions, whose agents still call them.

use std::sync::Arc;

use anyhow::Context;

use super::skills::SkillPackages;
use super::{Ctx, workspaces_root};
use crate::agent::Sandbox;
use crate::agent::sandbox::sandbox_api_url;
use crate::app::bind;
use crate::attachments::SystemLookup;
use crate::config::{Config, ProcessEnv};
use crate::conversation::workspace::Workspaces;
use crate::embeddings::Semantic;
use crate::gateway::{Gateway, GatewayMetrics, GatewaySettings, ProviderObserver};
use crate::handlers::{self, HandlerDeps, UserCommandRunner};
use crate::mcp::{Broker, McpMetrics, StdioHost};
use crate::observability::LiveSecrets;
use crate::platform::PlatformRegistry;
use crate::skill_api::call_log::{CallLog, FLUSH_EVERY};
use crate::skill_api::{
    self, ServingRuntime, SkillApiMetrics, SkillApiSettings, SkillApiState, SkillRegistry,
};
use crate::skills::LoadedSkills;
use crate::voice::Speaker;

/// The registered skill handlers and the Skill API's metrics, ready for [`start`].
pub(super) struct Handlers {
    registry: SkillRegistry,
    metrics: SkillApiMetrics,
}

/// The Skill API as served: its state (sessions, channels), the gateway on it, the URL agents
/// are given, and the runner of the users' own commands.
pub(super) struct SkillApi {
    pub(super) api: SkillApiState,
    pub(super) gateway: Gateway,
    pub(super) url: String,
    pub(super) user_commands: Arc<UserCommandRunner>,
}

/// The built-in skill handlers for the loaded packages, and the Skill API's metrics.
pub(super) fn skill_handlers(
    ctx: Ctx<'_>,
    platforms: &PlatformRegistry,
    skills: &SkillPackages,
    semantic: Option<Semantic>,
) -> anyhow::Result<Handlers> {
    let config = ctx.config;
    // send-voice speaks through the speech service (`speech`), when there is one.
    let speaker = Speaker::from_config(
        config,
        &ProcessEnv,
        Some(ctx.store.clone()),
        ctx.voice.clone(),
    )?;
    let registry = handlers::build_registry(
        HandlerDeps {
            store: ctx.store.clone(),
            platforms: platforms.clone(),
            skills_config: config.skills.clone(),
            reminders_config: config.reminders.clone(),
            memory_config: config.memory.clone(),
            clock: handlers::Clock::system(),
            semantic,
            speaker,
        },
        &skills.loaded,
    )
    .context("cannot register the skill handlers")?;
    let metrics = skill_api_metrics(ctx, &skills.loaded)?;
    Ok(Handlers { registry, metrics })
}

/// Builds the Skill API and the model gateway on it, and serves both: on per-session sockets
/// only when agents are `sandboxed`, else on the configured TCP listener.
pub(super) async fn start(
    ctx: Ctx<'_>,
    handlers: Handlers,
    skills: &SkillPackages,
    live_tokens: LiveSecrets,
    provider: Option<Arc<dyn ProviderObserver>>,
    sandbox: &Sandbox,
) -> anyhow::Result<SkillApi> {
    let sandboxed = sandbox.is_enabled();
    // Connections and calls run on a thread of their own (`skill_api::runtime` says why).
    let serving = ServingRuntime::start().context("cannot start the Skill API's thread")?;
    let api = SkillApiState::with_live_tokens(
        skill_api_settings(ctx.config),
        handlers.registry,
        handlers.metrics,
        live_tokens,
    )
    .serve_on(serving.handle());
    let gateway = model_gateway(ctx, &api, provider)?;
    // MCP servers (`mcp.servers`) through the broker, on the same sockets as the gateway.
    let broker = Broker::counted(
        &ctx.config.mcp,
        api.sessions().clone(),
        McpMetrics::new(ctx.metrics),
        Arc::new(SystemLookup),
        Some(ctx.store.clone()),
    )
    .context("cannot build the MCP broker")?
    // Stdio servers start in the agents' sandbox, bound to the session's socket folder.
    .with_stdio(StdioHost::new(
        sandbox.clone(),
        sandboxed.then(|| ctx.config.skill_api_socket_dir()),
    ));
    let api = api
        .with_extra_routes(gateway.router())
        .with_extra_routes(broker.router());
    let url = serve(ctx, &api, &gateway, sandboxed, serving).await?;
    let user_commands = Arc::new(
        UserCommandRunner::new(
            api.clone(),
            &skills.loaded,
            Workspaces::new(&workspaces_root(ctx.config)),
        )
        .with_places(skills.places.clone()),
    );
    Ok(SkillApi {
        api,
        gateway,
        url,
        user_commands,
    })
}

/// `skillApi`: the session timeout, the request-head timeout, the connection cap and the
/// sockets' folder; everything else at its default.
fn skill_api_settings(config: &Config) -> SkillApiSettings {
    SkillApiSettings {
        session_timeout: config.skill_api.session_timeout(),
        header_read_timeout: config.skill_api.header_read_timeout(),
        max_connections: config.skill_api.max_connections as usize,
        socket_dir: config.skill_api_socket_dir(),
        ..SkillApiSettings::default()
    }
}

/// The Skill API's metrics, registered, with every call also counted per hour for
/// `air-friends stats` (the call log, written once a minute by a tracked service).
fn skill_api_metrics(ctx: Ctx<'_>, skills: &LoadedSkills) -> anyhow::Result<SkillApiMetrics> {
    let mut api_metrics = None;
    ctx.metrics
        .register(|r| api_metrics = Some(SkillApiMetrics::new(r).with_skills(skills.names())));
    let call_log = CallLog::new();
    let api_metrics = api_metrics
        .context("skill API metrics were not registered")?
        .with_call_log(call_log.clone());
    let log_store = ctx.store.clone();
    ctx.shutdown
        .spawn_service("skill_call_log", move |stop| async move {
            call_log.run(log_store, FLUSH_EVERY, stop).await;
            Ok(())
        });
    Ok(api_metrics)
}

/// The model gateway: the providers' APIs on the Skill API's listener and every session
/// socket, with the keys read from this process's environment now. `provider` is told every
/// classified provider failure.
fn model_gateway(
    ctx: Ctx<'_>,
    api: &SkillApiState,
    provider: Option<Arc<dyn ProviderObserver>>,
) -> anyhow::Result<Gateway> {
    let config = ctx.config;
    let mut gateway_metrics = None;
    ctx.metrics.register(|r| {
        gateway_metrics = Some(
            GatewayMetrics::new(r)
                .with_providers(config.agent.providers.keys().map(String::as_str)),
        )
    });
    let gateway = Gateway::new(
        &config.gateway_agent(),
        &ProcessEnv,
        api.sessions().clone(),
        ctx.store.clone(),
        gateway_metrics.context("model gateway metrics were not registered")?,
        GatewaySettings {
            model_failure_grace: config.agent.model_failure_grace(),
            ..GatewaySettings::default()
        },
    )
    .context("cannot build the model gateway (agent.providers)")?;
    if let Some(observer) = provider {
        gateway.observe_failures(observer);
    }
    let health = gateway.health().clone();
    ctx.readiness
        .register_degrading("model", move || std::future::ready(health.check()));
    Ok(gateway)
}

/// Serves the Skill API (and the gateway on it): on per-session sockets only when agents are
/// sandboxed, else on the configured TCP listener; returns the URL agents are given. The
/// services stop after the running sessions (their agents still call them), and store what
/// the gateway metered last; `serving`, the runtime they run on, is shut down after that.
async fn serve(
    ctx: Ctx<'_>,
    api: &SkillApiState,
    gateway: &Gateway,
    sandboxed: bool,
    serving: ServingRuntime,
) -> anyhow::Result<String> {
    let (config, shutdown) = (ctx.config, ctx.shutdown);
    let socket_dir = config.skill_api_socket_dir();
    // The Skill API (and the gateway) serve the agents of running sessions, so they stop after
    // them. Sandboxed agents reach them only through their session's own Unix socket (relayed
    // inside the sandbox); TCP serves unconfined agents (`agent.sandbox.mode: none`) only.
    let state = api.clone();
    let usage_writes = gateway.clone();
    let url = if sandboxed {
        skill_api::socket::prepare_root(&socket_dir).with_context(|| {
            format!(
                "cannot use {} for the agents' Skill API sockets (skillApi.socketDir)",
                socket_dir.display()
            )
        })?;
        tracing::info!(socket_dir = %socket_dir.display(), "Skill API served on per-session sockets only");
        shutdown.spawn_service("skill_api", move |stop| async move {
            stop.cancelled().await;
            state.drain().await;
            usage_writes.drain().await;
            drop(serving);
            Ok(())
        });
        sandbox_api_url()
    } else {
        let listener = bind(&config.skill_api.host, config.skill_api.port)
            .await
            .context("cannot bind the Skill API (skillApi.host / skillApi.port)")?;
        let api_addr = listener.local_addr()?;
        tracing::info!(addr = %api_addr, listener = "skill_api", "listening");
        shutdown.spawn_service("skill_api", move |stop| async move {
            let served = skill_api::serve(listener, state, stop.cancelled_owned())
                .await
                .context("Skill API server");
            // Every model response has ended with the connections: store what they metered.
            usage_writes.drain().await;
            drop(serving);
            served
        });
        format!("http://{api_addr}")
    };
    let state = api.clone();
    shutdown.spawn_service("skill_api_maintenance", move |stop| async move {
        state.run_maintenance(stop).await;
        Ok(())
    });
    Ok(url)
}
