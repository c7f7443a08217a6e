//! The conversation pipeline stage: the agent launcher (runner, egress proxy, warm agents),
//! the interactions it serves, the router in front of them and the event loop that feeds the
//! router from the platforms.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::sandbox::AgentHost;
use super::skill_api::SkillApi;
use super::skills::SkillPackages;
use super::{Ctx, agent, workspaces_root};
use crate::agent::ActivityObserver;
use crate::attachments::{AttachmentMetrics, Attachments};
use crate::config::{Config, ProcessEnv};
use crate::conversation::catch_up::{CatchUp, CatchUpParts, CatchUpSettings, FEED_PAUSE};
use crate::conversation::continuity::{Continuity, ContinuitySettings};
use crate::conversation::inbox::{Inbox, InboxSettings};
use crate::conversation::interaction::{Interactions, PromptSettings};
use crate::conversation::launch::Launcher;
use crate::conversation::notices::Notices;
use crate::conversation::prompts::{Personas, PromptLibrary};
use crate::conversation::warm::{WarmMetrics, WarmPool, WarmSettings};
use crate::conversation::workspace::Workspaces;
use crate::conversation::{
    ConversationMetrics, Policy, Router, RouterParts, RouterSettings, UserRateLimiter,
};
use crate::egress::EgressProxy;
use crate::handlers::UserCommandRunner;
use crate::places::LivePlaces;
use crate::platform::{PlatformEvent, PlatformRegistry};
use crate::privacy::Eraser;
use crate::privacy::commands::{Periods, PrivacyCommands};
use crate::privacy::metrics::PrivacyMetrics;
use crate::schedules::Scheduler;
use crate::shutdown::Shutdown;
use crate::skills::LoadedSkills;
use crate::voice::Transcriber;

/// A conversation's worker with nothing to do for this long exits.
const IDLE_WORKER: Duration = Duration::from_secs(300);

/// What the later stages need of the pipeline.
pub(super) struct Pipeline {
    /// Starts agents (memory maintenance runs its own through it).
    pub(super) launcher: Arc<Launcher>,
    /// Erases a user's data (the control socket's `forget-user`).
    pub(super) eraser: Eraser,
    /// The prompt templates.
    pub(super) prompts: Arc<PromptLibrary>,
    /// Every place's system prompt (re-rendered after a reload).
    pub(super) personas: Arc<Personas>,
    /// The daemon's own texts to users (re-read after a reload).
    pub(super) notices: Arc<Notices>,
    /// Cancelled when the event loop has ended.
    pub(super) events_done: CancellationToken,
    /// Runs the operator schedules (started with the jobs; a reload replaces them).
    pub(super) scheduler: Scheduler,
    /// The router (the console reads the rate limit through it).
    pub(super) router: Router,
    /// The warm agents, when `agent.warm` keeps any (the console lists and retires them).
    pub(super) warm: Option<WarmPool>,
}

/// The agent runner (inside its sandbox) and the conversation pipeline, with the event loop
/// reading `events` started.
pub(super) fn start(
    ctx: Ctx<'_>,
    platforms: &PlatformRegistry,
    events: mpsc::Receiver<PlatformEvent>,
    skills: &SkillPackages,
    served: &SkillApi,
    host: AgentHost,
    activity: Option<Arc<dyn ActivityObserver>>,
) -> anyhow::Result<Pipeline> {
    let config = ctx.config;
    let sandboxed = host.sandbox.is_enabled();
    let places = skills.places.clone();
    let current = places.current();
    let place_names: Vec<&str> = current.names().collect();
    let conversation_metrics =
        ConversationMetrics::new(ctx.metrics, &platforms.kinds(), &place_names);
    let runner = agent::runner(config, skills, host.sandbox, activity);
    let prompts = Arc::new(PromptLibrary::new(&config.prompts.dir));
    let personas = Arc::new(Personas::new(
        prompts.clone(),
        config
            .places
            .iter()
            .filter_map(|rule| rule.persona.as_deref()),
    ));
    let notices = Arc::new(Notices::load(&config.prompts.dir, &config.prompts.language));
    let egress = egress_proxy(config, sandboxed)?;
    let warm = warm_pool(ctx);
    // attachments: the daemon downloads what users attach, from the platforms' own servers.
    // Voice messages among them are transcribed by the daemon (attachments.transcription).
    let transcriber = Transcriber::from_config(
        config,
        &ProcessEnv,
        Some(ctx.store.clone()),
        ctx.voice.clone(),
    )?;
    let attachments = Attachments::from_config(config, AttachmentMetrics::new(ctx.metrics))?
        .map(|a| a.with_transcriber(transcriber));
    let launcher = Arc::new(Launcher {
        sessions: served.api.sessions().clone(),
        channels: sandboxed.then(|| served.api.clone()),
        egress,
        runner,
        workspaces: Workspaces::new(&workspaces_root(config)).with_size_cap(
            config
                .agent
                .sandbox
                .limits
                .max_workspace_mb
                .saturating_mul(1024 * 1024),
        ),
        env: agent::env_template(config, skills, host.air_friends_bin, &served.url),
        stop: ctx.shutdown.stop(),
    });
    let inbox = inbox(ctx, &conversation_metrics);
    // `forget-user` through the control socket: stops the user's agents, then erases.
    let eraser = Eraser::new(
        ctx.store.clone(),
        launcher.workspaces.clone(),
        &config.workspace.repo_path,
    )
    .with_agents(launcher.sessions.clone(), warm.clone())
    .with_metrics(PrivacyMetrics::new(ctx.metrics));
    let interactions = Interactions {
        attachments,
        platforms: platforms.clone(),
        launcher: launcher.clone(),
        budget: served.gateway.budget().clone(),
        store: ctx.store.clone(),
        personas: personas.clone(),
        places: places.clone(),
        prompt: prompt_settings(config),
        retry_prompt: retry_prompt(&skills.loaded),
        metrics: conversation_metrics.clone(),
        warm: warm.clone(),
        notices: notices.clone(),
        inbox: Some(inbox.clone()),
        continuity: continuity(ctx),
    };
    let scheduled = interactions.clone();
    let router = router(
        ctx,
        platforms,
        interactions,
        places,
        notices.clone(),
        conversation_metrics.clone(),
        inbox.clone(),
    );
    // Scheduled runs share the router's cap on agent sessions running at once.
    let scheduler = super::jobs::schedules(ctx, &scheduled, router.permits())?;
    let catch_up = catch_up(ctx, platforms, &router, conversation_metrics);
    // The messages left unanswered at the last stop, answered before (and beside) new ones.
    let resuming = router.clone();
    ctx.shutdown.spawn("inbox_resume", async move {
        resuming.resume(inbox.resumable().await).await;
        Ok(())
    });
    let privacy = Arc::new(
        PrivacyCommands::new(
            ctx.store.clone(),
            launcher.workspaces.clone(),
            Periods::of(config),
        )
        .with_eraser(eraser.clone()),
    );
    let commands = Commands {
        skills: served.user_commands.clone(),
        privacy,
    };
    let events_done = spawn_event_loop(ctx.shutdown, catch_up, router.clone(), commands, events);
    Ok(Pipeline {
        launcher,
        eraser,
        prompts,
        personas,
        notices,
        events_done,
        scheduler,
        router,
        warm,
    })
}

/// `agent.sandbox.egressAllowHosts`: a CONNECT proxy on each sandboxed session's folder.
fn egress_proxy(config: &Config, sandboxed: bool) -> anyhow::Result<Option<EgressProxy>> {
    Ok(match &config.agent.sandbox.egress_allow_hosts {
        hosts if sandboxed && !hosts.is_empty() => {
            Some(EgressProxy::new(hosts).context("agent.sandbox.egressAllowHosts is not usable")?)
        }
        _ => None,
    })
}

/// `agent.warm`: idle agents kept between a conversation's turns; stopped at shutdown once
/// every running turn is over.
fn warm_pool(ctx: Ctx<'_>) -> Option<WarmPool> {
    let warm = WarmSettings::from_config(&ctx.config.agent.warm)
        .map(|settings| WarmPool::new(settings, WarmMetrics::new(ctx.metrics)));
    if let Some(pool) = &warm {
        let pool = pool.clone();
        ctx.shutdown
            .spawn_service("warm_agents", move |stop| pool.run(stop));
    }
    warm
}

/// The router: who is answered (`platforms`, `accessControl`), the rate limit, the session
/// caps, and the interactions each admitted message is handed to.
fn router(
    ctx: Ctx<'_>,
    platforms: &PlatformRegistry,
    interactions: Interactions,
    places: Arc<LivePlaces>,
    notices: Arc<Notices>,
    metrics: ConversationMetrics,
    inbox: Inbox,
) -> Router {
    let config = ctx.config;
    Router::new(RouterParts {
        policy: Policy::new(&config.platforms, &config.access_control, places),
        limiter: rate_limiter(config),
        controls: ctx.store.controls().clone(),
        settings: router_settings(config),
        handler: Arc::new(interactions),
        platforms: platforms.clone(),
        metrics,
        tasks: ctx.shutdown.tracker(),
        draining: ctx.shutdown.draining(),
        stop: ctx.shutdown.stop(),
        inbox: Some(inbox),
        notices,
    })
}

/// The catch-up (`catchUp`), its cursors saved every 30 s and once more after the last turn.
fn catch_up(
    ctx: Ctx<'_>,
    platforms: &PlatformRegistry,
    router: &Router,
    metrics: ConversationMetrics,
) -> CatchUp {
    let config = &ctx.config.catch_up;
    let catch_up = CatchUp::new(CatchUpParts {
        store: ctx.store.clone(),
        platforms: platforms.clone(),
        router: router.clone(),
        settings: CatchUpSettings {
            max_age: config.max_age(),
            active_within: config.active_within(),
            max_per_channel: config.max_per_channel as usize,
            retention: config.retention(),
            feed_pause: FEED_PAUSE,
        },
        metrics,
        tasks: ctx.shutdown.tracker(),
        draining: ctx.shutdown.draining(),
    });
    let saving = catch_up.clone();
    ctx.shutdown
        .spawn_service("catch_up_cursors", move |stop| async move {
            saving.run_saving(stop).await;
            Ok(())
        });
    catch_up
}

/// How often the inbox deletes the records past `catchUp.retentionDays`.
const INBOX_PRUNE_EVERY: Duration = Duration::from_secs(3600);

/// The inbox (`catchUp`): pruned at start and hourly.
fn inbox(ctx: Ctx<'_>, metrics: &ConversationMetrics) -> Inbox {
    let settings = InboxSettings {
        max_age: ctx.config.catch_up.max_age(),
        retention: ctx.config.catch_up.retention(),
    };
    let inbox = Inbox::new(ctx.store.clone(), settings, metrics.clone());
    let pruning = inbox.clone();
    ctx.shutdown
        .spawn_service("inbox_pruning", move |stop| async move {
            pruning.run_pruning(INBOX_PRUNE_EVERY, stop).await;
            Ok(())
        });
    inbox
}

/// Each conversation's agent session kept on disk (`agent.continuity`), its expiry running
/// hourly; `None` when off.
fn continuity(ctx: Ctx<'_>) -> Option<Continuity> {
    let settings = ContinuitySettings::of(ctx.config)?;
    let continuity = Continuity::new(ctx.store.clone(), settings);
    let expiring = continuity.clone();
    ctx.shutdown
        .spawn_service("continuity_expiry", move |stop| async move {
            expiring.run_expiry(INBOX_PRUNE_EVERY, stop).await;
            Ok(())
        });
    Some(continuity)
}

/// `rateLimit`: messages per window per user, and the silence after the limit is hit.
fn rate_limiter(config: &Config) -> UserRateLimiter {
    UserRateLimiter::new(
        config.rate_limit.max_messages,
        config.rate_limit.window(),
        config.rate_limit.cooldown(),
    )
}

/// The session caps from `agent`, and whether `rateLimit` is enforced.
fn router_settings(config: &Config) -> RouterSettings {
    RouterSettings {
        max_concurrent: config.agent.max_concurrent_sessions as usize,
        queue_capacity: config.agent.max_queued_per_conversation as usize,
        idle_worker: IDLE_WORKER,
        rate_limit_enabled: config.rate_limit.enabled,
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

/// The user commands: the skills' (run through the Skill API's handlers) and the daemon's own
/// about a person's data (`privacy::commands`, which no skill reaches).
#[derive(Clone)]
struct Commands {
    skills: Arc<UserCommandRunner>,
    privacy: Arc<PrivacyCommands>,
}

/// Starts [`route_events`] as the tracked "router" task; the token returned is cancelled
/// when it ends.
fn spawn_event_loop(
    shutdown: &Shutdown,
    catch_up: CatchUp,
    router: Router,
    commands: Commands,
    events: mpsc::Receiver<PlatformEvent>,
) -> CancellationToken {
    let events_done = CancellationToken::new();
    let done = events_done.clone();
    let loop_shutdown = shutdown.clone();
    shutdown.spawn("router", async move {
        let result = route_events(catch_up, router, commands, events, loop_shutdown).await;
        done.cancel();
        result
    });
    events_done
}

/// Reads platform events until draining: messages go to the router through the catch-up
/// (which moves its cursors), user commands run directly (each in its own tracked task), a platform's new
/// session starts a catch-up, a typing user may get their agent started ahead. The catch-up's cursors are loaded before the first event.
async fn route_events(
    catch_up: CatchUp,
    router: Router,
    commands: Commands,
    mut events: mpsc::Receiver<PlatformEvent>,
    shutdown: Shutdown,
) -> anyhow::Result<()> {
    let draining = shutdown.draining();
    catch_up.load().await;
    loop {
        let event = tokio::select! {
            _ = draining.cancelled() => break,
            e = events.recv() => e,
        };
        match event {
            None => break,
            Some(PlatformEvent::Message(msg)) => {
                catch_up.dispatch(msg).await;
            }
            Some(PlatformEvent::Connected(platform)) => catch_up.connected(platform),
            Some(PlatformEvent::Typing(typing)) => router.typing(typing),
            Some(PlatformEvent::Command(invocation)) => {
                let commands = commands.clone();
                shutdown.spawn("user_command", async move {
                    if PrivacyCommands::handles(&invocation.skill) {
                        commands.privacy.run(invocation).await;
                    } else {
                        commands.skills.run(invocation).await;
                    }
                    Ok(())
                });
            }
        }
    }
    Ok(())
}
