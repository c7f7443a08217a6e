//! Whether the model provider answers, for the daemon and for each turn.
//!
//! The gateway sees every model request of every agent, so it is where a failing provider is
//! noticed first — long before OpenCode gives up retrying (79 s with a closed port). Two things
//! follow from each classified failure ([`ProblemKind`]):
//!
//! * **The daemon's view** ([`ModelHealth`]): the provider is failing with one class until a
//!   request succeeds again. The operator gets one log record when the class changes (not one
//!   per request), `model_failures_total{class}` counts every failed request, and `/readyz`'s
//!   `model` check ([`ModelHealth::check`]) reports the class while it lasts. A refusal over a
//!   daily budget ends the turn (below) but says nothing about the provider.
//! * **The turn's view** ([`ModelTurn`], a slot on the session): when a turn's model request
//!   fails and none of its requests has succeeded by the turn's deadline — [`grace`](ModelHealth::new)
//!   after the turn began (its session's registration, so an agent's cold start counts), and at
//!   least a quarter of the grace after the first failure — the gateway asks for the turn's
//!   termination, so the user is answered in seconds, in words chosen for the class (the
//!   conversation layer reads [`ModelTurn::failure`]), instead of waiting for the agent's own
//!   retries and getting the generic error.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use crate::gateway::metrics::GatewayMetrics;
use crate::gateway::observer::ProblemKind;
use crate::session::{SessionHandle, TurnSlot};
use crate::sync::lock;

/// The model requests of the current turn, as the gateway saw them (a per-turn slot of the
/// session: it starts afresh with every turn).
#[derive(Debug, Default)]
pub struct ModelTurn {
    /// The latest failure's class.
    failure: Option<ProblemKind>,
    /// A request of this turn was answered.
    succeeded: bool,
    /// The grace timer for this turn has been started.
    armed: bool,
}

impl TurnSlot for ModelTurn {}

impl ModelTurn {
    /// Why the turn's model requests failed, when every one of them did (`None` once one
    /// succeeded, or when none failed).
    pub fn failure(&self) -> Option<ProblemKind> {
        if self.succeeded { None } else { self.failure }
    }
}

/// One classified failure of a model request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelFailure {
    /// The class.
    pub kind: ProblemKind,
    /// The provider's id (a configured id, or `unknown`).
    pub provider: String,
    /// The HTTP status the agent got (the upstream's when it answered, else the gateway's
    /// 502, 503 or 504).
    pub status: Option<u16>,
}

/// The provider as the daemon last saw it: failing since when, with what.
#[derive(Debug)]
struct Failing {
    failure: ModelFailure,
    since: Instant,
}

struct Inner {
    failing: Mutex<Option<Failing>>,
    grace: Duration,
    metrics: GatewayMetrics,
}

/// The daemon's view of the model provider and the per-turn grace rule. Cheap to clone.
#[derive(Clone)]
pub struct ModelHealth {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for ModelHealth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelHealth")
            .field("grace", &self.inner.grace)
            .finish_non_exhaustive()
    }
}

impl ModelHealth {
    /// A provider not known to fail. A turn whose model requests all failed is ended `grace`
    /// after it began, and at least `grace / 4` after its first failure
    /// (`agent.modelFailureGraceMs`).
    pub fn new(grace: Duration, metrics: GatewayMetrics) -> Self {
        Self {
            inner: Arc::new(Inner {
                failing: Mutex::new(None),
                grace,
                metrics,
            }),
        }
    }

    /// How long a turn whose model requests all failed may go on.
    pub fn grace(&self) -> Duration {
        self.inner.grace
    }

    /// A model request of `session` (when it named a live one) failed for `failure.kind`:
    /// counted, logged when the class changes, and the turn's grace timer started.
    pub fn failed(&self, session: Option<&SessionHandle>, failure: ModelFailure) {
        self.inner.metrics.record_model_failure(failure.kind);
        if let Some(session) = session {
            self.arm(session, failure.kind);
        }
        if failure.kind.is_about_the_provider() {
            self.note_failing(failure);
        }
    }

    /// A model request of `session` was answered: its turn is no longer failing, nor is the
    /// provider (logged once when it was).
    pub fn succeeded(&self, session: &SessionHandle) {
        session.with_slot::<ModelTurn, _>(|turn| turn.succeeded = true);
        let recovered = lock(&self.inner.failing).take();
        if let Some(was) = recovered {
            tracing::info!(
                class = was.failure.kind.as_str(),
                provider = %was.failure.provider,
                failing_for_ms = u64::try_from(was.since.elapsed().as_millis()).unwrap_or(u64::MAX),
                "the model provider answers again"
            );
        }
    }

    /// `/readyz`'s `model` check: an error naming the class while the provider is failing.
    pub fn check(&self) -> Result<(), String> {
        match &*lock(&self.inner.failing) {
            None => Ok(()),
            Some(failing) => Err(format!(
                "{} (provider {}{}) for {} s; the agents' model requests fail until it answers again",
                failing.failure.kind.describe(),
                failing.failure.provider,
                failing
                    .failure
                    .status
                    .map_or_else(String::new, |s| format!(", HTTP {s}")),
                failing.since.elapsed().as_secs()
            )),
        }
    }

    /// Records the provider as failing with `failure`; one warn record when the class (or the
    /// provider) differs from the last one seen.
    fn note_failing(&self, failure: ModelFailure) {
        let mut failing = lock(&self.inner.failing);
        let changed = failing.as_ref().is_none_or(|was| {
            was.failure.kind != failure.kind || was.failure.provider != failure.provider
        });
        if !changed {
            return;
        }
        tracing::warn!(
            class = failure.kind.as_str(),
            cause = failure.kind.as_str().replace('_', " "),
            provider = %failure.provider,
            status = failure.status,
            fix = failure.kind.operator_hint(),
            "the model provider is failing: {}; logged again when the cause changes or it recovers",
            failure.kind.describe()
        );
        *failing = Some(Failing {
            failure,
            since: Instant::now(),
        });
    }

    /// Notes the failure on the session's turn and, at the turn's first failure, starts its
    /// timer: if no request of the same turn succeeded by the deadline, the turn is ended.
    fn arm(&self, session: &SessionHandle, kind: ProblemKind) {
        let start = session.with_slot::<ModelTurn, _>(|turn| {
            turn.failure = Some(kind);
            let start = !turn.armed && !turn.succeeded;
            turn.armed = true;
            start
        });
        if !start || !session.turn_is_open() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (session, turn, grace) = (session.clone(), session.turn(), self.inner.grace);
        let deadline = (session.turn_began() + grace).max(Instant::now() + grace / 4);
        let metrics = self.inner.metrics.clone();
        runtime.spawn(async move {
            tokio::time::sleep_until(deadline).await;
            if session.turn() != turn || !session.turn_is_open() {
                return;
            }
            let Some(kind) = session.with_slot::<ModelTurn, _>(|t| t.failure()) else {
                return;
            };
            let reason = format!(
                "every model request of the turn failed ({}); agent.modelFailureGraceMs is {} ms",
                kind.as_str(),
                grace.as_millis()
            );
            if session.request_termination(&reason) {
                metrics.record_model_turn_ended(kind);
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::SessionHandle;
    use crate::session::registry::tests::context;
    use prometheus_client::registry::Registry;

    fn health(grace_ms: u64) -> ModelHealth {
        ModelHealth::new(
            Duration::from_millis(grace_ms),
            GatewayMetrics::new(&mut Registry::default()),
        )
    }

    fn failure(kind: ProblemKind) -> ModelFailure {
        ModelFailure {
            kind,
            provider: "openai".into(),
            status: Some(401),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_turn_whose_requests_all_fail_is_ended_after_the_grace() {
        let h = health(10_000);
        let session = SessionHandle::unregistered("s", context());
        let signal = session.termination_signal();
        h.failed(Some(&session), failure(ProblemKind::Unreachable));
        tokio::time::sleep(Duration::from_millis(9_900)).await;
        assert!(!signal.is_requested(), "not before the grace");
        h.failed(Some(&session), failure(ProblemKind::Unreachable));
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(signal.is_requested(), "counted from the turn's start");
        assert!(signal.reason().unwrap().contains("unreachable"));
        assert_eq!(
            session.with_slot::<ModelTurn, _>(|t| t.failure()),
            Some(ProblemKind::Unreachable)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_first_failure_late_in_the_turn_still_gets_a_quarter_of_the_grace() {
        let h = health(10_000);
        let session = SessionHandle::unregistered("s", context());
        let signal = session.termination_signal();
        tokio::time::sleep(Duration::from_secs(30)).await;
        h.failed(Some(&session), failure(ProblemKind::RateLimited));
        tokio::time::sleep(Duration::from_millis(2_400)).await;
        assert!(!signal.is_requested(), "a retry may still succeed");
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(signal.is_requested());
    }

    #[tokio::test(start_paused = true)]
    async fn a_success_in_the_grace_lets_the_turn_go_on() {
        let h = health(1_000);
        let session = SessionHandle::unregistered("s", context());
        let signal = session.termination_signal();
        h.failed(Some(&session), failure(ProblemKind::RateLimited));
        h.succeeded(&session);
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert!(!signal.is_requested());
        assert_eq!(session.with_slot::<ModelTurn, _>(|t| t.failure()), None);
        h.check().expect("answering again");
    }

    #[tokio::test(start_paused = true)]
    async fn the_next_turn_is_not_ended_by_the_previous_turns_timer() {
        let h = health(1_000);
        let session = SessionHandle::unregistered("s", context());
        h.failed(Some(&session), failure(ProblemKind::TimedOut));
        let next = session.begin_turn(None);
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert!(!next.is_requested());
        assert_eq!(session.with_slot::<ModelTurn, _>(|t| t.failure()), None);
    }

    #[test]
    fn the_provider_fails_until_a_request_succeeds_and_the_check_names_the_class() {
        let h = health(1_000);
        h.check().expect("no failure yet");
        h.failed(None, failure(ProblemKind::KeyRejected));
        let detail = h.check().unwrap_err();
        assert!(
            detail.contains("rejected") && detail.contains("openai") && detail.contains("401"),
            "{detail}"
        );
        let session = SessionHandle::unregistered("s", context());
        h.succeeded(&session);
        h.check().expect("recovered");
    }

    #[test]
    fn a_budget_refusal_ends_the_turn_but_leaves_the_provider_healthy() {
        let h = health(1_000);
        h.failed(None, failure(ProblemKind::BudgetExhausted));
        h.check().expect("the provider is not at fault");
    }
}
