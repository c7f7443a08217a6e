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

/// How a run can end (see `run::Outcome`).
pub const OUTCOMES: [&str; 6] = [
    "completed",
    "skipped",
    "over_budget",
    "failed",
    "timed_out",
    "cancelled",
];
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
        for outcome in OUTCOMES {
            m.run(outcome, 0);
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
