//! Maintenance metrics: `air_friends_maintenance_runs_total{outcome}` and
//! `air_friends_maintenance_memories_total{action}` (`read`, `saved`, `disabled`; dry runs count
//! what they would have done), every label at 0 from registration on.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

use crate::observability::Metrics;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ActionLabels {
    action: String,
}

/// How a maintenance run ended: its `outcome` label in the log record, the `maintenance_runs`
/// row and the `air_friends_maintenance_runs_total` metric.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunOutcome {
    /// The agent's turn ended, whatever it changed.
    Completed,
    /// Fewer than two memories were old enough: no agent was started.
    Skipped,
    /// The workspace's daily model budget is used up: no agent was started.
    OverBudget,
    /// The run could not start, or the agent failed.
    Failed,
    /// The agent hit its time limit.
    TimedOut,
    /// The daemon stopped the run (shutdown or termination).
    Cancelled,
}

impl RunOutcome {
    /// Every outcome, in label order.
    pub const ALL: [RunOutcome; 6] = [
        Self::Completed,
        Self::Skipped,
        Self::OverBudget,
        Self::Failed,
        Self::TimedOut,
        Self::Cancelled,
    ];

    /// The label.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Completed => "completed",
            Self::Skipped => "skipped",
            Self::OverBudget => "over_budget",
            Self::Failed => "failed",
            Self::TimedOut => "timed_out",
            Self::Cancelled => "cancelled",
        }
    }
}
const ACTIONS: [&str; 3] = ["read", "saved", "disabled"];

/// The maintenance job's counters.
#[derive(Clone, Debug, Default)]
pub struct MaintenanceMetrics {
    runs: Family<OutcomeLabels, Counter>,
    memories: Family<ActionLabels, Counter>,
}

impl MaintenanceMetrics {
    /// Registers both families.
    pub fn new(metrics: &Metrics) -> Self {
        let m = Self::default();
        for outcome in RunOutcome::ALL {
            m.run(outcome.as_str(), 0);
        }
        for action in ACTIONS {
            m.memories(action, 0);
        }
        metrics.register(|r| {
            r.register(
                "maintenance_runs",
                "Memory maintenance runs, by how they ended",
                m.runs.clone(),
            );
            r.register(
                "maintenance_memories",
                "Memories read, saved and disabled by memory maintenance (dry runs: would be)",
                m.memories.clone(),
            );
        });
        m
    }

    /// Counts `n` runs that ended with `outcome`.
    pub fn run(&self, outcome: &str, n: u64) {
        self.runs
            .get_or_create(&OutcomeLabels {
                outcome: outcome.to_owned(),
            })
            .inc_by(n);
    }

    /// Counts `n` memories for `action`.
    pub fn memories(&self, action: &str, n: u64) {
        self.memories
            .get_or_create(&ActionLabels {
                action: action.to_owned(),
            })
            .inc_by(n);
    }
}
