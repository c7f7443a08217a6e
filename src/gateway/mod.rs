//! The model gateway: the daemon proxies the model provider's HTTP API for the agent, so the
//! provider key never enters the sandbox and every token the agent spends is counted.
//!
//! OpenCode is configured (by the agent environment, `agent::env`) with a `baseURL` of
//! `…/llm/<session id>/<provider>` on the Skill API listener or the session's socket and the
//! session's caller token as its API key. [`Gateway::router`] serves
//! `ANY /llm/{session_id}/{provider}/{*rest}`, forwarding the chat endpoints ([`endpoints`]) of
//! the providers the operator chose (`AgentConfig::served_providers`) to `{baseUrl}/{rest}` of
//! the provider's `agent.providers` entry with the real key (see [`proxy`] for the checks, in
//! order, and what is forwarded). It is no open proxy to the provider's API: anything else is
//! 404 before a key is attached.
//!
//! * [`providers`] — the provider table resolved once at start (URLs, keys read into `Secret`s,
//!   which are served).
//! * [`endpoints`] — the allow-list of methods and paths.
//! * [`proxy`] — the route: authentication, the allow-list, forwarding, upstream failures
//!   mapped for the operator, [`GatewayError`] and its single mapping to HTTP.
//! * `request_body` — the body on its way up: a chat-completions body is given
//!   `stream_options.include_usage`, so its stream reports usage.
//! * `meter` — the response tap: usage read as the bytes pass, then charged in metrics and in
//!   the store's per-user table when the response ends.
//! * [`usage`] — the incremental SSE/JSON usage parser.
//! * [`estimate`] — what an answer that reports no usage is charged.
//! * [`budget`] — daily token budgets ([`Budget::check`]), before a session and per request.
//! * [`observer`] — classified provider failures for a caller that tells its user the fix
//!   (the chat console).
//! * [`health`] — the provider's health as the daemon sees it (one log record per class
//!   change, `/readyz`'s `model` check) and the turn whose model requests all failed, ended
//!   after a grace so its user is told in words.
//! * [`metrics`] — `llm_tokens_total`, `llm_requests_total`, `llm_request_duration_seconds`,
//!   `llm_budget_refusals_total`, `model_failures_total`, `model_turns_ended_total`.
//!
//! Nothing here logs a key, a caller token or any request or response body.

pub mod budget;
pub mod endpoints;
pub mod estimate;
pub mod health;
mod meter;
pub mod metrics;
pub mod observer;
pub mod providers;
pub mod proxy;
mod request_body;
pub mod usage;

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::Router;
use axum::routing::any;
use tokio_util::task::TaskTracker;

pub use budget::{Budget, BudgetExceeded, BudgetLimit};
pub use endpoints::Endpoint;
pub use health::{ModelFailure, ModelHealth, ModelTurn};
pub use metrics::{GatewayMetrics, Outcome};
pub use observer::{ProblemKind, ProviderFailure, ProviderObserver};
pub use providers::ProviderError;
pub use proxy::GatewayError;
pub use usage::{BodyKind, Reading, Usage, UsageParser};

use crate::config::{AgentConfig, EnvSource};
use crate::session::SessionRegistry;
use crate::store::Store;
use providers::Providers;

/// The route the gateway serves (on the Skill API's TCP listener and every session socket).
pub const ROUTE: &str = "/llm/{session_id}/{provider}/{*rest}";

/// Tunables of the upstream connection and the request body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatewaySettings {
    /// Connecting to an upstream fails after this long (→ 504 `timed out`; default 10 s).
    pub connect_timeout: Duration,
    /// The upstream may be silent this long between bytes, headers included, before the
    /// request fails (default 5 min: a model may think long before its first token).
    pub read_timeout: Duration,
    /// Largest request body forwarded (default 32 MiB; prompts can carry images).
    pub max_request_body: usize,
    /// Most bytes of an upstream error body relayed to the client (default 64 KiB). Error bodies
    /// are read whole so the key can be scrubbed from them before the agent sees them.
    pub max_error_body: usize,
    /// A turn whose model requests all failed is ended this long after it began
    /// (`agent.modelFailureGraceMs`, default 10 s; see [`health`]).
    pub model_failure_grace: Duration,
}

impl Default for GatewaySettings {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(10),
            read_timeout: Duration::from_secs(300),
            max_request_body: 32 * 1024 * 1024,
            max_error_body: 64 * 1024,
            model_failure_grace: Duration::from_secs(10),
        }
    }
}

/// Why the gateway could not be built.
#[derive(Debug, thiserror::Error)]
pub enum GatewayBuildError {
    /// A provider entry is unusable.
    #[error(transparent)]
    Provider(#[from] ProviderError),
    /// The HTTP client could not be built (TLS set-up).
    #[error("cannot build the model gateway's HTTP client: {0}")]
    Client(#[source] reqwest::Error),
}

pub(crate) struct Inner {
    pub(crate) providers: Providers,
    pub(crate) client: reqwest::Client,
    pub(crate) sessions: SessionRegistry,
    pub(crate) store: Store,
    pub(crate) budget: Budget,
    pub(crate) metrics: GatewayMetrics,
    pub(crate) settings: GatewaySettings,
    /// Usage writes still in flight (spawned when a response ends); see [`Gateway::drain`].
    pub(crate) tasks: TaskTracker,
    /// Told of every classified provider failure; see [`Gateway::observe_failures`].
    pub(crate) observer: OnceLock<Arc<dyn ProviderObserver>>,
    /// The provider's health and the per-turn grace rule.
    pub(crate) health: ModelHealth,
}

/// The model gateway (axum state of its route). Cheap to clone (one `Arc`).
#[derive(Clone)]
pub struct Gateway {
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for Gateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateway")
            .field("settings", &self.inner.settings)
            .finish_non_exhaustive()
    }
}

impl Gateway {
    /// Builds the gateway from `agent.providers` (serving those of
    /// `AgentConfig::served_providers`) and `agent.budget`, reading every provider key from
    /// `env` now (the daemon passes its process environment). `sessions` is the Skill API's
    /// registry: a request must name a live session and present its caller token.
    pub fn new(
        agent: &AgentConfig,
        env: &impl EnvSource,
        sessions: SessionRegistry,
        store: Store,
        metrics: GatewayMetrics,
        settings: GatewaySettings,
    ) -> Result<Self, GatewayBuildError> {
        let served = agent.served_providers();
        let providers = Providers::resolve(&agent.providers, agent.model.as_deref(), &served, env)?;
        if !providers.any_served() {
            tracing::warn!(
                "the model gateway serves no provider: name the model in agent.model, or list providers in agent.extraProviders"
            );
        }
        let client = reqwest::Client::builder()
            .connect_timeout(settings.connect_timeout)
            .read_timeout(settings.read_timeout)
            // A redirect would carry the key (in a custom header, even across hosts): never.
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("air-friends/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(GatewayBuildError::Client)?;
        Ok(Self {
            inner: Arc::new(Inner {
                providers,
                client,
                sessions,
                store,
                budget: Budget::new(&agent.budget, metrics.clone()),
                health: ModelHealth::new(settings.model_failure_grace, metrics.clone()),
                metrics,
                settings,
                tasks: TaskTracker::new(),
                observer: OnceLock::new(),
            }),
        })
    }

    /// The gateway's route with its state applied, to merge into the Skill API's router
    /// (`SkillApiState::with_extra_routes`). It has no fallback of its own.
    pub fn router(&self) -> Router {
        Router::new()
            .route(ROUTE, any(proxy::proxy))
            .with_state(self.clone())
    }

    /// Reports every classified provider failure to `observer` from now on. One observer per
    /// gateway, set by the composition root: a second call is refused (returns false).
    pub fn observe_failures(&self, observer: Arc<dyn ProviderObserver>) -> bool {
        self.inner.observer.set(observer).is_ok()
    }

    /// The provider's health, for `/readyz`'s `model` check.
    pub fn health(&self) -> &ModelHealth {
        &self.inner.health
    }

    /// The budgets, for the check before an agent starts.
    pub fn budget(&self) -> &Budget {
        &self.inner.budget
    }

    /// Waits until every usage write started so far has reached the store (call on shutdown,
    /// after the listeners stopped, before closing the store).
    pub async fn drain(&self) {
        self.inner.tasks.close();
        self.inner.tasks.wait().await;
        self.inner.tasks.reopen();
    }
}
