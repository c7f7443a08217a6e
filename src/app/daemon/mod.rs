//! Building and starting the daemon's components (shared by `serve` and `chat`): store, skill
//! packages, platform adapters, skill handlers and the Skill API, the agent runner, the
//! conversation router and the reminder scheduler. Every task runs under the [`Shutdown`]
//! tracker; every component gets its dependencies passed in.

use crate::attachments::{AttachmentMetrics, Attachments};
use crate::embeddings::Semantic;
use crate::skill_api::call_log::{CallLog, FLUSH_EVERY};
use crate::sync::Recover;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::bind;
use crate::agent::sandbox::sandbox_api_url;
use crate::agent::{
    ActivityObserver, AgentRunner, ApprovalRules, PermissionGate, RunnerSettings, Sandbox,
    SandboxSetup,
};
use crate::config::{Config, ProcessEnv};
use crate::conversation::interaction::{Interactions, PromptSettings};
use crate::conversation::launch::{AgentEnvTemplate, Launcher};
use crate::conversation::prompts::PromptLibrary;
use crate::conversation::warm::{WarmMetrics, WarmPool, WarmSettings};
use crate::conversation::workspace::Workspaces;
use crate::conversation::{
    ConversationMetrics, Policy, Router, RouterParts, RouterSettings, UserRateLimiter,
};
use crate::egress::EgressProxy;
use crate::gateway::{Gateway, GatewayMetrics, GatewaySettings, ProviderObserver};
use crate::handlers::{self, HandlerDeps, UserCommandRunner};
use crate::maintenance::{Maintenance, MaintenanceMetrics};
use crate::observability::{LiveSecrets, Metrics};
use crate::ops::{Readiness, checks};
use crate::platform::discord::DiscordAdapter;
use crate::platform::metered::PlatformMetrics;
use crate::platform::misskey::MisskeyAdapter;
use crate::platform::{
    ConnectionState, EventSink, PlatformAdapter, PlatformEvent, PlatformKind, PlatformRegistry,
    UserCommandSpec,
};
use crate::reminders::{ReminderMetrics, ReminderScheduler};
use crate::shutdown::Shutdown;
use crate::skill_api::{self, SkillApiMetrics, SkillApiSettings, SkillApiState};
use crate::skills::{LoadedSkills, load_skills};
use crate::store::Store;

/// Events waiting for the router.
const EVENT_QUEUE: usize = 1024;

/// How long `/readyz` trusts its last sandbox probe.
const SANDBOX_RECHECK: Duration = Duration::from_secs(60);

/// What a started daemon hands back to its caller.
#[derive(Debug)]
pub struct Started {
    /// The database (closed by the caller after the drain).
    pub store: Store,
    /// Where extra adapters (the console) deliver events.
    pub sink: EventSink,
    /// Cancelled when the event loop has ended (its channel closed and emptied, or draining).
    pub events_done: CancellationToken,
}

/// Who is told what the running agents are doing and why a model provider failed: the chat
/// console subscribes both (to show a status line and the actionable line); `serve` none (the
/// daemon logs, its platforms' users get the generic error reply).
#[derive(Clone, Default)]
pub struct Observers {
    /// Every session's activity (see `agent::activity`).
    pub activity: Option<Arc<dyn ActivityObserver>>,
    /// Every classified provider failure (see `gateway::observer`).
    pub provider: Option<Arc<dyn ProviderObserver>>,
}

impl std::fmt::Debug for Observers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Observers")
            .field("activity", &self.activity.is_some())
            .field("provider", &self.provider.is_some())
            .finish()
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
    let store = open_store(config).await?;
    let (skills_dir, skills, commands) = skill_packages(config)?;

    let (platforms, sink, events) =
        start_platforms(config, shutdown, metrics, readiness, extra, &commands)?;

    let semantic = start_embeddings(config, &store, shutdown).await?;

    // Skill handlers and the Skill API.
    let workspaces_root = config
        .workspace
        .repo_path
        .join(&config.workspace.workspaces_dir);
    let registry = handlers::build_registry(
        HandlerDeps {
            store: store.clone(),
            platforms: platforms.clone(),
            skills_config: config.skills.clone(),
            reminders_config: config.reminders.clone(),
            memory_config: config.memory.clone(),
            clock: handlers::Clock::system(),
            semantic,
        },
        &skills,
    )
    .context("cannot register the skill handlers")?;
    let api_metrics = skill_api_metrics(metrics, &skills, &store, shutdown)?;
    // The agent sandbox decides how agents reach the daemon (see below).
    let air_friends_bin = std::env::current_exe().context("cannot find this executable")?;
    let sandbox = agent_sandbox(config, &skills_dir, &air_friends_bin, &workspaces_root).await?;
    sandbox_check(readiness, &sandbox);
    let socket_dir = config.skill_api_socket_dir();
    let api = SkillApiState::with_live_tokens(
        SkillApiSettings {
            session_timeout: Duration::from_millis(config.skill_api.session_timeout_ms),
            header_read_timeout: Duration::from_millis(config.skill_api.header_read_timeout_ms),
            max_connections: config.skill_api.max_connections as usize,
            socket_dir: socket_dir.clone(),
            ..SkillApiSettings::default()
        },
        registry,
        api_metrics,
        live_tokens,
    );
    // The model gateway: the providers' APIs on the Skill API's listener and every session
    // socket, with the keys read from this process's environment now.
    let mut gateway_metrics = None;
    metrics.register(|r| {
        gateway_metrics = Some(
            GatewayMetrics::new(r)
                .with_providers(config.agent.providers.keys().map(String::as_str)),
        )
    });
    let gateway = Gateway::new(
        &config.agent,
        &ProcessEnv,
        api.sessions().clone(),
        store.clone(),
        gateway_metrics.context("model gateway metrics were not registered")?,
        GatewaySettings::default(),
    )
    .context("cannot build the model gateway (agent.providers)")?;
    if let Some(observer) = observers.provider {
        gateway.observe_failures(observer);
    }
    let api = api.with_extra_routes(gateway.router());
    let skill_api_url =
        serve_skill_api(config, shutdown, &api, &gateway, sandbox.is_enabled()).await?;
    let user_commands = Arc::new(UserCommandRunner::new(
        api.clone(),
        &skills,
        Workspaces::new(&workspaces_root),
    ));

    // The agent runner (inside its sandbox) and the conversation pipeline.
    let sandboxed = sandbox.is_enabled();
    let conversation_metrics = ConversationMetrics::new(metrics, &platforms.kinds());
    let runner = agent_runner(config, &skills, &skills_dir, sandbox, observers.activity);
    let prompts = Arc::new(PromptLibrary::new(&config.prompts.dir));
    shutdown.spawn(
        "sighup",
        reload_on_sighup(prompts.clone(), shutdown.draining()),
    );
    // agent.sandbox.egressAllowHosts: a CONNECT proxy on each sandboxed session's folder.
    let egress = match &config.agent.sandbox.egress_allow_hosts {
        hosts if sandboxed && !hosts.is_empty() => {
            Some(EgressProxy::new(hosts).context("agent.sandbox.egressAllowHosts is not usable")?)
        }
        _ => None,
    };
    // agent.warm: idle agents kept between a conversation's turns; stopped at shutdown once
    // every running turn is over.
    let warm = WarmSettings::from_config(&config.agent.warm)
        .map(|settings| WarmPool::new(settings, WarmMetrics::new(metrics)));
    if let Some(pool) = &warm {
        let pool = pool.clone();
        shutdown.spawn_service("warm_agents", move |stop| pool.run(stop));
    }
    // attachments: the daemon downloads what users attach, from the platforms' own servers.
    let attachments = Attachments::from_config(config, AttachmentMetrics::new(metrics))?;
    let launcher = Arc::new(Launcher {
        sessions: api.sessions().clone(),
        channels: sandboxed.then(|| api.clone()),
        egress,
        runner,
        workspaces: Workspaces::new(&workspaces_root),
        env: agent_env_template(
            config,
            &skills,
            &skills_dir,
            air_friends_bin,
            &skill_api_url,
        ),
        stop: shutdown.stop(),
    });
    let interactions = Interactions {
        attachments,
        platforms: platforms.clone(),
        launcher: launcher.clone(),
        budget: gateway.budget().clone(),
        store: store.clone(),
        prompts: prompts.clone(),
        prompt: prompt_settings(config),
        retry_prompt: retry_prompt(&skills),
        metrics: conversation_metrics.clone(),
        warm: warm.clone(),
    };
    let router = Router::new(RouterParts {
        policy: Policy::new(&config.platforms, &config.access_control),
        limiter: UserRateLimiter::new(
            config.rate_limit.max_messages,
            Duration::from_millis(config.rate_limit.window_ms),
            Duration::from_millis(config.rate_limit.cooldown_ms),
        ),
        settings: RouterSettings {
            max_concurrent: config.agent.max_concurrent_sessions as usize,
            queue_capacity: config.agent.max_queued_per_conversation as usize,
            idle_worker: Duration::from_secs(300),
            rate_limit_enabled: config.rate_limit.enabled,
        },
        handler: Arc::new(interactions),
        platforms: platforms.clone(),
        metrics: conversation_metrics,
        tasks: shutdown.tracker(),
        draining: shutdown.draining(),
        stop: shutdown.stop(),
    });
    let events_done = CancellationToken::new();
    let done = events_done.clone();
    let loop_shutdown = shutdown.clone();
    shutdown.spawn("router", async move {
        let result = route_events(router, user_commands, events, loop_shutdown).await;
        done.cancel();
        result
    });

    start_reminders(config, &store, &platforms, metrics, shutdown);
    start_maintenance(
        config, launcher, &store, prompts, &gateway, metrics, shutdown,
    );

    Ok(Started {
        store,
        sink,
        events_done,
    })
}

/// Serves the Skill API (and the gateway on it): on per-session sockets only when agents are
/// sandboxed, else on the configured TCP listener; returns the URL agents are given. The
/// services stop after the running sessions (their agents still call them), and store what
/// the gateway metered last.
async fn serve_skill_api(
    config: &Config,
    shutdown: &Shutdown,
    api: &SkillApiState,
    gateway: &Gateway,
    sandboxed: bool,
) -> anyhow::Result<String> {
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

/// The agent runner: the configured command and timeouts, the permission gate, the sandbox,
/// and the activity observer when there is one.
fn agent_runner(
    config: &Config,
    skills: &LoadedSkills,
    skills_dir: &Path,
    sandbox: Sandbox,
    activity: Option<Arc<dyn ActivityObserver>>,
) -> AgentRunner {
    let runner = AgentRunner::new(
        RunnerSettings {
            command: agent_command(config),
            args: config.agent.args.clone(),
            model: config.agent.model.clone(),
            connect_timeout: Duration::from_millis(config.agent.connect_timeout_ms),
            idle_timeout: Duration::from_millis(config.agent.idle_timeout_ms),
            max_turn: Duration::from_millis(config.agent.max_turn_ms),
            kill_grace: Duration::from_millis(config.agent.kill_grace_ms),
        },
        PermissionGate::new(
            approval_rules(skills, config, skills_dir, &sandbox),
            config.agent.yolo,
        ),
    )
    .with_sandbox(sandbox);
    let runner = match activity {
        Some(observer) => runner.with_activity_observer(observer),
        None => runner,
    };
    if config.agent.yolo {
        tracing::warn!("agent.yolo is on: every permission the agent asks for is approved");
    }
    runner
}

/// The reminder scheduler, when `reminders.enabled`.
/// What every agent's environment is built from: the agent configuration, the skills and
/// their credential variables, this executable, the Skill API URL, the secrets never to pass
/// on, and the providers the model gateway serves.
fn agent_env_template(
    config: &Config,
    skills: &LoadedSkills,
    skills_dir: &Path,
    air_friends_bin: PathBuf,
    api_url: &str,
) -> AgentEnvTemplate {
    AgentEnvTemplate {
        agent: config.agent.clone(),
        skills_dir: skills_dir.to_path_buf(),
        air_friends_bin,
        api_url: api_url.to_owned(),
        skill_credentials: skills
            .enabled_credential_env_vars(|name| !config.skills.disabled.iter().any(|d| d == name))
            .into_iter()
            .map(str::to_owned)
            .collect(),
        secret_values: config.secret_values(),
        gateway_providers: config
            .agent
            .providers
            .iter()
            .map(|(id, p)| (id.clone(), p.api_key_env.clone()))
            .collect(),
    }
}

/// `memory.maintenance`: the consolidation scheduler, when enabled.
fn start_maintenance(
    config: &Config,
    launcher: Arc<Launcher>,
    store: &Store,
    prompts: Arc<PromptLibrary>,
    gateway: &Gateway,
    metrics: &Metrics,
    shutdown: &Shutdown,
) {
    if config.memory.maintenance.enabled {
        let job = Maintenance::new(
            launcher,
            store.clone(),
            prompts,
            gateway.budget().clone(),
            config.memory.maintenance.clone(),
            MaintenanceMetrics::new(metrics),
        );
        shutdown.spawn("memory_maintenance", job.run(shutdown.draining()));
    }
}

fn start_reminders(
    config: &Config,
    store: &Store,
    platforms: &PlatformRegistry,
    metrics: &Metrics,
    shutdown: &Shutdown,
) {
    if config.reminders.enabled {
        let scheduler = ReminderScheduler::new(
            store.clone(),
            platforms.clone(),
            config.reminders.clone(),
            ReminderMetrics::new(metrics),
        );
        shutdown.spawn("reminders", scheduler.run(shutdown.draining()));
    }
}

/// Prompt sizes from `agent.tokenLimit`, `memory.*` and `context.*`.
fn prompt_settings(config: &Config) -> PromptSettings {
    PromptSettings {
        token_limit: config.agent.token_limit as usize,
        recent_limit: config.memory.recent_message_limit as usize,
        related_limit: config.memory.related_message_limit as usize,
        important_memories_budget: config.context.important_memories_budget as usize,
    }
}

/// The database, its folder created first.
async fn open_store(config: &Config) -> anyhow::Result<Store> {
    let db_path = config.database_path();
    if let Some(parent) = db_path.parent().filter(|p| !p.as_os_str().is_empty()) {
        tokio::fs::create_dir_all(parent)
            .await
            .with_context(|| format!("cannot create the data folder {}", parent.display()))?;
    }
    Store::open(&db_path)
        .await
        .with_context(|| format!("cannot open the database {}", db_path.display()))
}

/// The skill packages (validated), their canonical folder, and the user commands they offer
/// (disabled skills left out).
fn skill_packages(
    config: &Config,
) -> anyhow::Result<(PathBuf, LoadedSkills, Vec<UserCommandSpec>)> {
    // Canonical: the prompt, the sandbox mounts and the permission gate all name the skill
    // scripts by this one real path.
    let skills_dir = std::fs::canonicalize(&config.agent.skills_dir)
        .unwrap_or_else(|_| absolute(&config.agent.skills_dir));
    let skills = load_skills(&skills_dir).map_err(|e| {
        anyhow::anyhow!(
            "skill packages in {} failed validation: {e}",
            skills_dir.display()
        )
    })?;
    for warning in skills.warnings() {
        tracing::warn!(warning = %warning, "skill package warning");
    }
    let commands: Vec<UserCommandSpec> = skills
        .user_commands()
        .filter(|s| !config.skills.disabled.contains(&s.name))
        .map(|s| UserCommandSpec {
            name: s.name.clone(),
            description: s.description().to_owned(),
            input_schema: s.input_schema().clone(),
        })
        .collect();
    Ok((skills_dir, skills, commands))
}

/// The platform registry (`extra` adapters, then the configured platforms, each behind the
/// metering decorator) and the event channel their receive loops feed; each configured
/// platform's loop runs as a tracked task.
fn start_platforms(
    config: &Config,
    shutdown: &Shutdown,
    metrics: &Metrics,
    readiness: &Readiness,
    extra: Vec<Arc<dyn PlatformAdapter>>,
    commands: &[UserCommandSpec],
) -> anyhow::Result<(PlatformRegistry, EventSink, mpsc::Receiver<PlatformEvent>)> {
    let http = reqwest::Client::builder()
        .user_agent(concat!("air-friends/", env!("CARGO_PKG_VERSION")))
        .connect_timeout(Duration::from_secs(10))
        .timeout(Duration::from_secs(120))
        .build()
        .context("cannot build the HTTP client")?;
    let (sink, events) = mpsc::channel::<PlatformEvent>(EVENT_QUEUE);
    // Every adapter is reached through the metering decorator: failures are counted whoever
    // made the call.
    let metered = PlatformMetrics::new(metrics);
    let mut platforms = PlatformRegistry::new();
    for adapter in extra {
        platforms.insert(metered.wrap(adapter));
    }
    if config.platforms.discord.enabled {
        let (adapter, runner) =
            DiscordAdapter::new(&config.platforms.discord, http.clone(), commands.to_vec())
                .context("Discord set-up")?;
        platforms.insert(metered.wrap(adapter));
        let state = connection_check(readiness, &metered, PlatformKind::Discord);
        let (sink, draining) = (sink.clone(), shutdown.draining());
        shutdown.spawn("discord", runner.run(sink, state, draining));
    }
    if config.platforms.misskey.enabled {
        let adapter = Arc::new(
            MisskeyAdapter::new(&config.platforms.misskey, http.clone(), commands.to_vec())
                .context("Misskey set-up")?,
        );
        platforms.insert(metered.wrap(adapter.clone()));
        let state = connection_check(readiness, &metered, PlatformKind::Misskey);
        let (sink, draining) = (sink.clone(), shutdown.draining());
        shutdown.spawn("misskey", adapter.run(sink, state, draining));
    }
    Ok((platforms, sink, events))
}

/// `memory.embeddings`: the service (its background job started, the store's queue turned on),
/// or `None` with the queue off.
async fn start_embeddings(
    config: &Config,
    store: &Store,
    shutdown: &Shutdown,
) -> anyhow::Result<Option<Semantic>> {
    let semantic = Semantic::from_config(config, store.clone(), &ProcessEnv)?;
    store
        .set_embedding_queue(semantic.is_some())
        .await
        .context("cannot set up the embedding queue")?;
    if let Some(job) = semantic.clone() {
        let draining = shutdown.draining();
        shutdown.spawn("embeddings", async move {
            job.run(draining).await;
            Ok(())
        });
    }
    Ok(semantic)
}

/// The Skill API's metrics, registered, with every call also counted per hour for
/// `air-friends stats` (the call log, written once a minute by a tracked service).
fn skill_api_metrics(
    metrics: &Metrics,
    skills: &LoadedSkills,
    store: &Store,
    shutdown: &Shutdown,
) -> anyhow::Result<SkillApiMetrics> {
    let mut api_metrics = None;
    metrics.register(|r| api_metrics = Some(SkillApiMetrics::new(r).with_skills(skills.names())));
    let call_log = CallLog::new();
    let api_metrics = api_metrics
        .context("skill API metrics were not registered")?
        .with_call_log(call_log.clone());
    let log_store = store.clone();
    shutdown.spawn_service("skill_call_log", move |stop| async move {
        call_log.run(log_store, FLUSH_EVERY, stop).await;
        Ok(())
    });
    Ok(api_metrics)
}

/// Reads platform events until draining: messages go to the router, user commands run
/// directly (each in its own tracked task).
async fn route_events(
    router: Router,
    commands: Arc<UserCommandRunner>,
    mut events: mpsc::Receiver<PlatformEvent>,
    shutdown: Shutdown,
) -> anyhow::Result<()> {
    let draining = shutdown.draining();
    loop {
        let event = tokio::select! {
            _ = draining.cancelled() => break,
            e = events.recv() => e,
        };
        match event {
            None => break,
            Some(PlatformEvent::Message(msg)) => {
                router.dispatch(msg).await;
            }
            Some(PlatformEvent::Command(invocation)) => {
                let commands = commands.clone();
                shutdown.spawn("user_command", async move {
                    commands.run(invocation).await;
                    Ok(())
                });
            }
        }
    }
    Ok(())
}

/// SIGHUP makes the next session re-render the prompt templates (they are also re-rendered
/// whenever a file in the folder changes).
async fn reload_on_sighup(
    prompts: Arc<PromptLibrary>,
    draining: CancellationToken,
) -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut hup = signal(SignalKind::hangup()).context("cannot install the SIGHUP handler")?;
    loop {
        tokio::select! {
            _ = draining.cancelled() => return Ok(()),
            got = hup.recv() => {
                if got.is_none() {
                    return Ok(());
                }
                prompts.invalidate();
                tracing::info!("SIGHUP: prompt templates will be reloaded");
            }
        }
    }
}

/// The program the runner starts: `agent.command` as [`checks::AgentLookup`] resolves it (so
/// the default `opencode` also runs from the folder `air-friends setup` installs it to), else
/// as configured (the spawn then reports it missing).
fn agent_command(config: &Config) -> String {
    checks::AgentLookup::from_env(&ProcessEnv)
        .resolve(&config.agent.command)
        .and_then(|p| p.to_str().map(str::to_owned))
        .unwrap_or_else(|| config.agent.command.clone())
}

/// The agent sandbox the configuration asks for, checked by running a sandboxed command:
/// fail-closed, so a sandbox that cannot start stops the daemon with the reason and the fix.
async fn agent_sandbox(
    config: &Config,
    skills_dir: &Path,
    air_friends_bin: &Path,
    workspaces_root: &Path,
) -> anyhow::Result<Sandbox> {
    let path_var = std::env::var("PATH").ok();
    let agent_program = checks::AgentLookup::from_env(&ProcessEnv).resolve(&config.agent.command);
    let db = config.database_path();
    let protected: Vec<PathBuf> = ["", "-wal", "-shm", "-journal"]
        .iter()
        .map(|suffix| PathBuf::from(format!("{}{suffix}", db.display())))
        .chain([workspaces_root.to_path_buf(), config.prompts.dir.clone()])
        .collect();
    let config_dir = absolute(&config.agent.config_dir);
    let sandbox = Sandbox::from_config(&SandboxSetup {
        config: &config.agent.sandbox,
        agent_program: agent_program.as_deref(),
        air_friends_bin,
        skills_dir,
        agent_config_dir: config_dir.is_dir().then_some(config_dir.as_path()),
        protected: &protected,
        path_var: path_var.as_deref(),
    })?;
    sandbox.probe().await?;
    if sandbox.is_enabled() {
        tracing::info!(mode = sandbox.mode().as_str(), "agent sandbox ready");
    } else {
        tracing::warn!(
            "agent.sandbox.mode is none: agents run unconfined and can read everything this \
             daemon's user can (database, configuration, other workspaces)"
        );
    }
    Ok(sandbox)
}

/// `/readyz` reports the sandbox: its mode, and whether a sandboxed command still starts
/// (re-checked at most every [`SANDBOX_RECHECK`], so the endpoint stays cheap).
fn sandbox_check(readiness: &Readiness, sandbox: &Sandbox) {
    let sandbox = sandbox.clone();
    let last: LastProbe = Arc::default();
    readiness.register("sandbox", move || {
        let (sandbox, last) = (sandbox.clone(), last.clone());
        async move {
            let cached = lock(&last)
                .clone()
                .filter(|(at, _)| at.elapsed() < SANDBOX_RECHECK);
            let result = match cached {
                Some((_, r)) => r,
                None => {
                    let r = sandbox.probe().await.map_err(|e| e.to_string());
                    *lock(&last) = Some((tokio::time::Instant::now(), r.clone()));
                    r
                }
            };
            result.map_err(|e| format!("sandbox mode {}: {e}", sandbox.mode().as_str()))
        }
    });
}

/// When the sandbox was last probed, and what came out.
type LastProbe = Arc<std::sync::Mutex<Option<(tokio::time::Instant, Result<(), String>)>>>;

fn lock(
    last: &LastProbe,
) -> std::sync::MutexGuard<'_, Option<(tokio::time::Instant, Result<(), String>)>> {
    last.locked()
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
        let connected = s.is_connected();
        async move {
            if connected {
                Ok(())
            } else {
                Err(format!("{name} is not connected"))
            }
        }
    });
    state
}

/// The auto-approve rules: the canonical skills directory, the entrypoints in it and the
/// command prefixes. An entrypoint that is a symlink, missing, or not a regular file inside
/// the skills directory is dropped with a warning (the gate would refuse it at every call).
fn approval_rules(
    skills: &LoadedSkills,
    config: &Config,
    skills_dir: &Path,
    sandbox: &Sandbox,
) -> ApprovalRules {
    let list = skills.auto_approve(&config.agent.auto_approve_skills);
    let mut rules = ApprovalRules {
        skills_dir: skills_dir.to_path_buf(),
        entrypoints: list.entrypoints,
        command_prefixes: list.command_prefixes,
        skills_mounted_in_workspace: sandbox.skills_mounted_in_workspace(),
    };
    for (entrypoint, reason) in rules.retain_genuine_entrypoints() {
        tracing::warn!(entrypoint = %entrypoint, reason = %reason,
            "skill entrypoint dropped from the auto-approve list");
    }
    rules
}

/// The retry prompt: tells the agent it must answer and quotes the two answering skills.
fn retry_prompt(skills: &LoadedSkills) -> Option<String> {
    let mut text = String::from(
        "You ended your turn without answering the user: they have received nothing. You must \
         answer now with the send-reply skill (or, if no words are needed, the react-message \
         skill). Their instructions follow.",
    );
    for name in ["send-reply", "react-message"] {
        let skill = skills.get(name)?;
        text.push_str(&format!(
            "\n\n--- {name} (skills folder: {}) ---\n{}",
            skill.dir.display(),
            skill.doc.body.trim()
        ));
    }
    Some(text)
}

fn absolute(p: &Path) -> PathBuf {
    std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf())
}
