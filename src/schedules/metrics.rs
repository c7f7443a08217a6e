//! Schedule metrics: `air_friends_schedule_runs_total{schedule, outcome}` — every run and
//! every skipped run, by its outcome (`posted`, `silent`, `skipped_missed`, `skipped_overlap`,
//! `skipped_quiet`, `failed`, …). Schedule names come from the configuration, so the label is
//! bounded; each schedule's `posted` and `failed` are at 0 from registration on.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

use crate::observability::Metrics;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RunLabels {
    schedule: String,
    outcome: String,
}

/// The schedules' metrics.
#[derive(Clone, Debug, Default)]
pub struct ScheduleMetrics {
    runs: Family<RunLabels, Counter>,
}

impl ScheduleMetrics {
    /// Registers the family, with `posted` and `failed` of each of `names` at 0.
    pub fn new<'a>(metrics: &Metrics, names: impl IntoIterator<Item = &'a str>) -> Self {
        let m = Self::default();
        for name in names {
            for outcome in ["posted", "failed"] {
                drop(m.runs.get_or_create(&RunLabels {
                    schedule: name.to_owned(),
                    outcome: outcome.to_owned(),
                }));
            }
        }
        metrics.register(|r| {
            r.register(
                "schedule_runs",
                "Runs of operator schedules by outcome, skipped runs included",
                m.runs.clone(),
            )
        });
        m
    }

    /// Counts one run of `schedule` that ended with `outcome`.
    pub fn run(&self, schedule: &str, outcome: &str) {
        self.runs
            .get_or_create(&RunLabels {
                schedule: schedule.to_owned(),
                outcome: outcome.to_owned(),
            })
            .inc();
    }
}
