//! Conversation metrics: messages received by decision, turns by outcome (`turns_total`: one
//! per message an agent worked on, warm or cold), their duration, those running now, and the
//! inbox's messages by state and reason (`inbox_messages_total`), and the catch-ups (runs,
//! messages read back by decision, feeds that could not be read).
//!
//! `sessions_total` is the old name of `turns_total` — it counted turns since agents are kept
//! warm — and is exported beside it, with the same values, for one release (see README,
//! Operations), so dashboards can move.
//!
//! The platforms are known at start-up and the decisions and outcomes are fixed sets
//! ([`DECISIONS`], [`SESSION_OUTCOMES`]), so every `(platform, decision)` and
//! `(platform, outcome)` counter exists at 0 from registration on.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;

use crate::observability::Metrics;
use crate::platform::PlatformKind;

/// Every `decision` label of `messages_received_total` (`router::Dispatch::label`).
pub const DECISIONS: [&str; 7] = [
    "ignored",
    "duplicate",
    "rate_limited",
    "blocked",
    "queued",
    "busy",
    "draining",
];

/// Every `decision` label of `catch_up_messages_total`: a live message's, and `skipped` for
/// one held back (too old, over the limit per channel).
pub const CATCH_UP_DECISIONS: [&str; 8] = [
    "ignored",
    "duplicate",
    "rate_limited",
    "blocked",
    "queued",
    "busy",
    "draining",
    "skipped",
];

/// Every `trigger` label of `catch_up_runs_total`: the platform's first session of this run,
/// or a later one that could not resume.
pub const CATCH_UP_TRIGGERS: [&str; 2] = ["start", "reconnect"];

/// Every `outcome` label of `turns_total`: the agent's outcomes (`agent::Outcome::label`),
/// the interaction's own (`over_budget`, `workspace_full`, `failed`, `model_failed`, `erasing`:
/// the user's data was being erased) and `aborted` for a session dropped before it recorded one.
pub const SESSION_OUTCOMES: [&str; 13] = [
    "replied",
    "retried",
    "no_response",
    "failed",
    "memory_limit",
    "timed_out",
    "terminated",
    "cancelled",
    "over_budget",
    "workspace_full",
    "model_failed",
    "erasing",
    "aborted",
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct MessageLabels {
    platform: String,
    decision: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct InboxLabels {
    state: &'static str,
    reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    platform: String,
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RunLabels {
    platform: String,
    trigger: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    platform: String,
    /// The `places:` rule's name, or `default` (bounded: one value per rule).
    place: String,
    outcome: String,
}

/// Handles to the conversation metric families.
#[derive(Clone, Debug)]
pub struct ConversationMetrics {
    messages: Family<MessageLabels, Counter>,
    sessions: Family<OutcomeLabels, Counter>,
    duration: Histogram,
    active: Gauge,
    inbox: Family<InboxLabels, Counter>,
    catch_up_runs: Family<RunLabels, Counter>,
    catch_up_messages: Family<MessageLabels, Counter>,
    catch_up_failures: Family<KindLabels, Counter>,
}

impl ConversationMetrics {
    /// Registers the families in `metrics`, with every counter of `platforms` (and the turns of
    /// each of `places`, the rules' names and `default`) at 0.
    pub fn new(metrics: &Metrics, platforms: &[PlatformKind], places: &[&str]) -> Self {
        let m = Self::unregistered();
        for platform in platforms {
            let platform = platform.as_str();
            for decision in DECISIONS {
                drop(m.messages.get_or_create(&MessageLabels {
                    platform: platform.to_owned(),
                    decision: decision.to_owned(),
                }));
            }
            for (outcome, place) in SESSION_OUTCOMES
                .iter()
                .flat_map(|o| places.iter().map(move |p| (o, p)))
            {
                drop(m.sessions.get_or_create(&OutcomeLabels {
                    platform: platform.to_owned(),
                    place: (*place).to_owned(),
                    outcome: (*outcome).to_owned(),
                }));
            }
            for trigger in CATCH_UP_TRIGGERS {
                drop(m.catch_up_runs.get_or_create(&RunLabels {
                    platform: platform.to_owned(),
                    trigger,
                }));
            }
            for decision in CATCH_UP_DECISIONS {
                drop(m.catch_up_messages.get_or_create(&MessageLabels {
                    platform: platform.to_owned(),
                    decision: decision.to_owned(),
                }));
            }
        }
        metrics.register(|r| {
            r.register(
                "messages_received",
                "Messages received from the platforms, by routing decision",
                m.messages.clone(),
            );
            r.register(
                "turns",
                "Turns finished (a message an agent worked on), by outcome",
                m.sessions.clone(),
            );
            r.register(
                "sessions",
                "Deprecated: the old name of turns_total, with the same values; removed in the \
                 next release",
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
            r.register(
                "inbox_messages",
                "Messages recorded in the inbox by the state they reached (queued, answered, failed, skipped) and why (the turn's outcome, rate_limited, busy, too_old, interrupted_again, resumed)",
                m.inbox.clone(),
            );
            r.register(
                "catch_up_runs",
                "Catch-ups run (reading back what arrived while the daemon was away), by platform and what started them (start, reconnect)",
                m.catch_up_runs.clone(),
            );
            r.register(
                "catch_up_messages",
                "Messages a catch-up read back, by platform and routing decision (skipped: too old or over catchUp.maxPerChannel)",
                m.catch_up_messages.clone(),
            );
            r.register(
                "catch_up_read_failures",
                "Feeds a catch-up could not read back, by platform and error kind",
                m.catch_up_failures.clone(),
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
            inbox: Family::default(),
            catch_up_runs: Family::default(),
            catch_up_messages: Family::default(),
            catch_up_failures: Family::default(),
        }
    }

    /// Counts a catch-up on `platform`, started by `trigger` (`start`, `reconnect`).
    pub fn catch_up_run(&self, platform: &str, trigger: &'static str) {
        self.catch_up_runs
            .get_or_create(&RunLabels {
                platform: platform.to_owned(),
                trigger,
            })
            .inc();
    }

    /// Counts a message a catch-up read back and how it was routed.
    pub fn catch_up_message(&self, platform: &str, decision: &str) {
        self.catch_up_messages
            .get_or_create(&MessageLabels {
                platform: platform.to_owned(),
                decision: decision.to_owned(),
            })
            .inc();
    }

    /// Counts a feed a catch-up could not read, by the error's kind.
    pub fn catch_up_failure(&self, platform: &str, kind: &'static str) {
        self.catch_up_failures
            .get_or_create(&KindLabels {
                platform: platform.to_owned(),
                kind,
            })
            .inc();
    }

    /// Counts a message reaching `state` in the inbox, for `reason` (empty for none).
    pub fn inbox(&self, state: &'static str, reason: &str) {
        self.inbox
            .get_or_create(&InboxLabels {
                state,
                reason: reason.to_owned(),
            })
            .inc();
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

    /// Marks a session as started in `place` (a rule's name, or `default`); the guard records
    /// its end.
    pub fn session_started(&self, platform: &str, place: &str) -> SessionTimer {
        self.active.inc();
        SessionTimer {
            metrics: self.clone(),
            platform: platform.to_owned(),
            place: place.to_owned(),
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
    place: String,
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
                place: self.place.clone(),
                outcome: self.outcome.unwrap_or("aborted").to_owned(),
            })
            .inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::Outcome;
    use crate::conversation::Dispatch;
    use crate::conversation::policy::Ignore;
    use crate::observability::Format;

    #[test]
    fn the_label_lists_hold_every_decision_and_outcome() {
        // The matches fail to compile when a variant is added: add its label to the list too.
        let dispatches = [
            Dispatch::Ignored(Ignore::Bot),
            Dispatch::Duplicate,
            Dispatch::RateLimited,
            Dispatch::Blocked,
            Dispatch::Queued,
            Dispatch::Busy,
            Dispatch::Draining,
            Dispatch::Held("too_old"),
        ];
        for d in dispatches {
            match d {
                Dispatch::Ignored(_)
                | Dispatch::Duplicate
                | Dispatch::RateLimited
                | Dispatch::Blocked
                | Dispatch::Queued
                | Dispatch::Busy
                | Dispatch::Draining => assert!(DECISIONS.contains(&d.label()), "{d:?}"),
                // Only a catch-up holds a message back.
                Dispatch::Held(_) => assert!(!DECISIONS.contains(&d.label()), "{d:?}"),
            }
            assert!(CATCH_UP_DECISIONS.contains(&d.label()), "{d:?}");
        }
        let outcomes = [
            Outcome::Responded { retried: false },
            Outcome::Responded { retried: true },
            Outcome::NoResponse { retried: true },
            Outcome::Failed { reason: "x".into() },
            Outcome::MemoryLimit,
            Outcome::TimedOut { phase: "idle" },
            Outcome::Terminated,
            Outcome::Cancelled,
        ];
        for o in outcomes {
            match o {
                Outcome::Responded { .. }
                | Outcome::NoResponse { .. }
                | Outcome::Failed { .. }
                | Outcome::MemoryLimit
                | Outcome::TimedOut { .. }
                | Outcome::Terminated
                | Outcome::Cancelled => {
                    assert!(SESSION_OUTCOMES.contains(&o.label()), "{o:?}")
                }
            }
        }
    }

    #[test]
    fn known_label_sets_are_exported_at_zero() {
        let metrics = Metrics::new();
        ConversationMetrics::new(
            &metrics,
            &[PlatformKind::Discord, PlatformKind::Misskey],
            &["support", "default"],
        );
        let text = metrics.encode(Format::PrometheusText).unwrap();
        for platform in ["discord", "misskey"] {
            for decision in DECISIONS {
                let line = format!(
                    r#"air_friends_messages_received_total{{platform="{platform}",decision="{decision}"}} 0"#
                );
                assert!(text.contains(&line), "{line} missing in\n{text}");
            }
            for (outcome, place) in SESSION_OUTCOMES
                .iter()
                .flat_map(|o| ["support", "default"].map(|p| (o, p)))
            {
                for name in ["turns", "sessions"] {
                    let line = format!(
                        r#"air_friends_{name}_total{{platform="{platform}",place="{place}",outcome="{outcome}"}} 0"#
                    );
                    assert!(text.contains(&line), "{line} missing in\n{text}");
                }
            }
        }
    }

    #[test]
    fn the_old_sessions_total_counts_exactly_what_turns_total_counts() {
        let metrics = Metrics::new();
        let m = ConversationMetrics::new(&metrics, &[PlatformKind::Discord], &["default"]);
        let mut timer = m.session_started("discord", "default");
        timer.outcome("replied");
        drop(timer);
        let text = metrics.encode(Format::PrometheusText).unwrap();
        for name in ["turns", "sessions"] {
            let line = format!(
                r#"air_friends_{name}_total{{platform="discord",place="default",outcome="replied"}} 1"#
            );
            assert!(text.contains(&line), "{line} missing in\n{text}");
        }
    }
}
