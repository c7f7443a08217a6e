//! The Skill API's shared state and its settings.
//!
//! [`SkillApiState`] bundles the skill registry, the session registry, the de-duplication cache,
//! the rate limiter, the metrics and the tracker of running skill executions. It is cheap to
//! clone (one `Arc`). The integrator builds it once from [`SkillApiSettings`] (mapped from
//! `config.yaml`), hands [`SkillApiState::sessions`] to the agent runner, spawns
//! [`SkillApiState::run_maintenance`] on the application's `TaskTracker` and passes the state to
//! [`serve`](super::serve). Routes of other components served next to the skills (the model
//! gateway) are added once with [`SkillApiState::with_extra_routes`]; every router built from
//! the state — the TCP listener's and each session socket's
//! ([`SkillApiState::open_session_socket`]) — then carries them.

use crate::sync::Recover;
use std::fmt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use axum::Router;
use tokio::runtime::Handle;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::dedup::{DEFAULT_MAX_ENTRIES, DedupCache};
use super::handler::SkillRegistry;
use super::metrics::SkillApiMetrics;
use super::ratelimit::RateLimiter;
use super::socket::{SessionSocket, SocketError};
use crate::config::SkillApiConfig;
use crate::observability::LiveSecrets;
use crate::session::{SessionId, SessionRegistry};

/// Tunables of the Skill API server (the transport: host/port/allowNonLoopback are the
/// integrator's business, it binds the listener).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SkillApiSettings {
    /// Idle TTL of a session (`skillApi.sessionTimeoutMs`, default 30 min).
    pub session_timeout: Duration,
    /// How long a finished call's outcome is shared with identical calls (default 1 s).
    pub dedup_window: Duration,
    /// Largest accepted request body in bytes (default 1 MiB).
    pub body_limit: usize,
    /// Cap on de-duplication entries; beyond it calls bypass the cache (default 10 000).
    pub dedup_max_entries: usize,
    /// How often [`SkillApiState::run_maintenance`] reaps sessions and prunes caches (30 s).
    pub maintenance_interval: Duration,
    /// Longest a handler may run before the call fails with 500 `INTERNAL` (default 2 min), so
    /// a hung platform call cannot hang the agent's skill script forever.
    pub handler_timeout: Duration,
    /// A connection that has not delivered a complete request head this long after it opened
    /// or after its previous response is closed (`skillApi.headerReadTimeoutMs`, default 10 s).
    /// Idle keep-alive and half-open connections therefore hold a slot for at most this long.
    pub header_read_timeout: Duration,
    /// A request whose body has not fully arrived this long after its head is refused with
    /// `INVALID_JSON` and its connection closed (default 10 s).
    pub body_read_timeout: Duration,
    /// Connections served at once (`skillApi.maxConnections`, default 512). Beyond it new
    /// connections wait in the listen backlog until a slot frees, which takes at most
    /// `header_read_timeout` when the slots are held by idle or slow clients.
    pub max_connections: usize,
    /// Folder holding one private folder per session with its socket
    /// (`{socket_dir}/{session_id}/api.sock`; `skillApi.socketDir`, by default
    /// `{workspace.repoPath}/run`). It must be ours and not group- or world-accessible; it is
    /// created (mode 0700) when missing.
    pub socket_dir: PathBuf,
    /// Connections served at once on one session socket (default 32). Per session, so one
    /// hijacked agent opening connections only starves itself; a real agent needs a few (skill
    /// calls and a streamed model request or two).
    pub socket_max_connections: usize,
    /// When a session socket closes, how long its in-flight requests may take to finish before
    /// their connections are dropped (default 2 s). Skill executions are detached from their
    /// connection and still run to completion.
    pub socket_close_grace: Duration,
}

impl Default for SkillApiSettings {
    /// The configuration's defaults for what `skillApi` sets (written once, in
    /// [`SkillApiConfig`]), and the daemon's own for the rest.
    fn default() -> Self {
        let config = SkillApiConfig::default();
        Self {
            session_timeout: config.session_timeout(),
            dedup_window: Duration::from_secs(1),
            body_limit: 1024 * 1024,
            dedup_max_entries: DEFAULT_MAX_ENTRIES,
            maintenance_interval: Duration::from_secs(30),
            handler_timeout: Duration::from_secs(120),
            header_read_timeout: config.header_read_timeout(),
            body_read_timeout: Duration::from_secs(10),
            max_connections: config.max_connections as usize,
            socket_dir: PathBuf::from("./data/run"),
            socket_max_connections: 32,
            socket_close_grace: Duration::from_secs(2),
        }
    }
}

struct Inner {
    settings: SkillApiSettings,
    skills: SkillRegistry,
    sessions: SessionRegistry,
    dedup: DedupCache,
    rate_limiter: RateLimiter,
    metrics: SkillApiMetrics,
    tasks: TaskTracker,
    /// Routes merged into every router built from this state (see
    /// [`SkillApiState::with_extra_routes`]).
    extra_routes: Mutex<Option<Router>>,
    /// Where listeners and their connections run (see [`SkillApiState::serve_on`]).
    runtime: OnceLock<Handle>,
}

/// Shared state of the Skill API (axum state). Cloning shares it.
#[derive(Clone)]
pub struct SkillApiState {
    inner: Arc<Inner>,
}

impl fmt::Debug for SkillApiState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SkillApiState")
            .field("settings", &self.inner.settings)
            .field("skills", &self.inner.skills.names())
            .field("sessions", &self.inner.sessions)
            .finish_non_exhaustive()
    }
}

impl SkillApiState {
    /// Builds the state; the session registry is created from `settings.session_timeout`.
    pub fn new(
        settings: SkillApiSettings,
        skills: SkillRegistry,
        metrics: SkillApiMetrics,
    ) -> Self {
        Self::with_live_tokens(settings, skills, metrics, LiveSecrets::new())
    }

    /// Like [`new`](Self::new), with the session registry publishing every live caller token
    /// into `live_tokens` — the log redactor's set ([`Redactor::live_secrets`]), so no log
    /// line carries a token that still works.
    ///
    /// [`Redactor::live_secrets`]: crate::observability::Redactor::live_secrets
    pub fn with_live_tokens(
        settings: SkillApiSettings,
        skills: SkillRegistry,
        metrics: SkillApiMetrics,
        live_tokens: LiveSecrets,
    ) -> Self {
        let sessions = SessionRegistry::with_live_tokens(settings.session_timeout, live_tokens);
        let dedup = DedupCache::new(settings.dedup_window, settings.dedup_max_entries);
        Self {
            inner: Arc::new(Inner {
                settings,
                skills,
                sessions,
                dedup,
                rate_limiter: RateLimiter::new(),
                metrics,
                tasks: TaskTracker::new(),
                extra_routes: Mutex::new(None),
                runtime: OnceLock::new(),
            }),
        }
    }

    /// Adds routes served next to the skills on the TCP listener and on every session socket
    /// (the model gateway's): `routes` must have its state applied, no fallback of its own and
    /// no path overlapping `/api/skill/{name}` ([`router`](super::router) panics otherwise, as
    /// [`Router::merge`] does). Call it at composition, before building routers, serving or
    /// opening sockets: routers built earlier do not see the routes. Calling it again adds
    /// more. Clones of the state share the routes.
    #[must_use]
    pub fn with_extra_routes(self, routes: Router) -> Self {
        {
            let mut extra = self.inner.extra_routes.locked();
            *extra = Some(match extra.take() {
                Some(existing) => existing.merge(routes),
                None => routes,
            });
        }
        self
    }

    /// Serves the TCP listener ([`serve`](super::serve)) and every session socket opened from
    /// now on ([`open_session_socket`](Self::open_session_socket)) on `runtime`: their accept
    /// loops, connections and calls run there, whatever runtime calls `serve` or opens the
    /// socket. The daemon gives it its [`ServingRuntime`](super::ServingRuntime); without it
    /// they run on the caller's runtime. Call it at composition; the first runtime given stays.
    #[must_use]
    pub fn serve_on(self, runtime: Handle) -> Self {
        if self.inner.runtime.set(runtime).is_err() {
            tracing::warn!("the Skill API already has a serving runtime; keeping the first");
        }
        self
    }

    /// The runtime given to [`serve_on`](Self::serve_on), if any.
    pub(crate) fn runtime(&self) -> Option<&Handle> {
        self.inner.runtime.get()
    }

    /// The routes added with [`with_extra_routes`](Self::with_extra_routes), if any.
    pub(crate) fn extra_routes(&self) -> Option<Router> {
        self.inner.extra_routes.locked().clone()
    }

    /// Opens the per-session socket of `session_id` under
    /// [`socket_dir`](SkillApiSettings::socket_dir), serving this state's
    /// [`router`](super::router) with these settings; its accept loop runs on the tracker of
    /// skill executions (on the [`serve_on`](Self::serve_on) runtime when there is one), so
    /// [`drain`](Self::drain) (and [`serve`](super::serve)'s return) waits for sockets still
    /// open. Bind [`SessionSocket::dir`] into the session's sandbox,
    /// and [`close`](SessionSocket::close) the socket when the session ends.
    pub async fn open_session_socket(
        &self,
        session_id: &SessionId,
    ) -> Result<SessionSocket, SocketError> {
        let settings = self.settings();
        SessionSocket::bind(
            &settings.socket_dir,
            session_id,
            super::router(self.clone()),
            settings,
            self.tasks(),
            self.runtime(),
        )
        .await
    }

    /// The settings.
    pub fn settings(&self) -> &SkillApiSettings {
        &self.inner.settings
    }

    /// The skill registry.
    pub fn skills(&self) -> &SkillRegistry {
        &self.inner.skills
    }

    /// The session registry (clone it for the agent runner).
    pub fn sessions(&self) -> &SessionRegistry {
        &self.inner.sessions
    }

    pub(crate) fn dedup(&self) -> &DedupCache {
        &self.inner.dedup
    }

    pub(crate) fn rate_limiter(&self) -> &RateLimiter {
        &self.inner.rate_limiter
    }

    pub(crate) fn metrics(&self) -> &SkillApiMetrics {
        &self.inner.metrics
    }

    /// Tracker of running skill executions. Executions run detached from their HTTP request so
    /// a client that disconnects mid-call cannot leave a half-done platform action behind.
    pub(crate) fn tasks(&self) -> &TaskTracker {
        &self.inner.tasks
    }

    /// Waits until every skill execution started so far has finished. [`serve`](super::serve)
    /// calls this after the listener stopped.
    pub async fn drain(&self) {
        self.inner.tasks.close();
        self.inner.tasks.wait().await;
        self.inner.tasks.reopen();
    }

    /// Reaps idle sessions and prunes the de-duplication cache and rate limiter every
    /// `maintenance_interval` until `cancel` fires. Spawn it on the application's tracker.
    pub async fn run_maintenance(self, cancel: CancellationToken) {
        let period = self
            .inner
            .settings
            .maintenance_interval
            .max(Duration::from_millis(10));
        let mut ticker = tokio::time::interval(period);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = cancel.cancelled() => break,
                _ = ticker.tick() => {
                    self.inner.sessions.reap_expired();
                    self.inner.dedup.prune();
                    self.inner.rate_limiter.prune();
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::platform::Origin;
    use crate::session::SessionContext;
    use prometheus_client::registry::Registry;

    #[tokio::test(start_paused = true)]
    async fn maintenance_reaps_idle_sessions_and_stops_on_cancel() {
        let settings = SkillApiSettings {
            session_timeout: Duration::from_secs(5),
            maintenance_interval: Duration::from_secs(1),
            ..SkillApiSettings::default()
        };
        let state = SkillApiState::new(
            settings,
            SkillRegistry::new(),
            SkillApiMetrics::new(&mut Registry::default()),
        );
        state
            .sessions()
            .register(SessionContext {
                place: Default::default(),
                origin: Origin {
                    platform: crate::platform::PlatformKind::Console,
                    channel_id: "c".into(),
                    guild_id: None,
                    user_id: "u".into(),
                    username: "n".into(),
                    is_dm: true,
                },
                purpose: Default::default(),
                trigger_message_id: None,
                workspace: "/tmp/ws".into(),
            })
            .expect("register");
        let cancel = CancellationToken::new();
        let tracker = TaskTracker::new();
        tracker.spawn(state.clone().run_maintenance(cancel.clone()));
        tokio::time::sleep(Duration::from_secs(7)).await;
        assert!(state.sessions().is_empty(), "idle session reaped");
        cancel.cancel();
        tracker.close();
        tracker.wait().await;
    }
}
