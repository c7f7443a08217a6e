//! Conversation metrics: messages received by decision, sessions by outcome, session duration,
//! active sessions.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;

use crate::observability::Metrics;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct MessageLabels {
    platform: String,
    decision: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    platform: String,
    outcome: String,
}

/// Handles to the conversation metric families.
#[derive(Clone, Debug)]
pub struct ConversationMetrics {
    messages: Family<MessageLabels, Counter>,
    sessions: Family<OutcomeLabels, Counter>,
    duration: Histogram,
    active: Gauge,
}

impl ConversationMetrics {
    /// Registers the families in `metrics`.
    pub fn new(metrics: &Metrics) -> Self {
        let m = Self::unregistered();
        metrics.register(|r| {
            r.register(
                "messages_received",
                "Messages received from the platforms, by routing decision",
                m.messages.clone(),
            );
            r.register(
                "sessions",
                "Agent sessions finished, by outcome",
                m.sessions.clone(),
            );
            r.register(
                "session_duration_seconds",
                "Duration of agent sessions",
                m.duration.clone(),
            );
            r.register(
                "active_sessions",
                "Agent sessions running now",
                m.active.clone(),
            );
        });
        m
    }

    /// Metrics that are not exported (tests).
    pub fn unregistered() -> Self {
        Self {
            messages: Family::default(),
            sessions: Family::default(),
            duration: Histogram::new([
                0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0, 160.0, 320.0, 900.0,
            ]),
            active: Gauge::default(),
        }
    }

    /// Counts a received message.
    pub fn messages_received(&self, platform: &str, decision: &str) {
        self.messages
            .get_or_create(&MessageLabels {
                platform: platform.to_owned(),
                decision: decision.to_owned(),
            })
            .inc();
    }

    /// Marks a session as started; the guard records its end.
    pub fn session_started(&self, platform: &str) -> SessionTimer {
        self.active.inc();
        SessionTimer {
            metrics: self.clone(),
            platform: platform.to_owned(),
            started: std::time::Instant::now(),
            outcome: None,
        }
    }
}

/// Records duration, outcome and the active gauge when dropped.
#[derive(Debug)]
pub struct SessionTimer {
    metrics: ConversationMetrics,
    platform: String,
    started: std::time::Instant,
    outcome: Option<&'static str>,
}

impl SessionTimer {
    /// Sets the outcome label.
    pub fn outcome(&mut self, outcome: &'static str) {
        self.outcome = Some(outcome);
    }
}

impl Drop for SessionTimer {
    fn drop(&mut self) {
        self.metrics.active.dec();
        self.metrics
            .duration
            .observe(self.started.elapsed().as_secs_f64());
        self.metrics
            .sessions
            .get_or_create(&OutcomeLabels {
                platform: self.platform.clone(),
                outcome: self.outcome.unwrap_or("aborted").to_owned(),
            })
            .inc();
    }
}
