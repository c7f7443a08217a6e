//! Privacy metrics: `air_friends_erasures_total{requested_by, outcome}` — each erasure (the
//! operator's `forget-user`, a user's confirmed `/forget everything`) by who asked and how it
//! ended (`ok`, or the refusal's or failure's code: `turn_running`, `already_erasing`,
//! `agents_running`, `folder`, `store`, `invalid_user`), every label at 0 from registration on.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

use crate::observability::Metrics;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ErasureLabels {
    requested_by: String,
    outcome: String,
}

/// Every outcome label of an erasure.
pub const ERASURE_OUTCOMES: [&str; 7] = [
    "ok",
    "turn_running",
    "already_erasing",
    "agents_running",
    "folder",
    "store",
    "invalid_user",
];

/// The erasure counter.
#[derive(Clone, Debug, Default)]
pub struct PrivacyMetrics {
    erasures: Family<ErasureLabels, Counter>,
}

impl PrivacyMetrics {
    /// Registers the family in `metrics`.
    pub fn new(metrics: &Metrics) -> Self {
        let m = Self::default();
        for requested_by in ["operator", "user"] {
            for outcome in ERASURE_OUTCOMES {
                drop(m.erasures.get_or_create(&ErasureLabels {
                    requested_by: requested_by.into(),
                    outcome: outcome.into(),
                }));
            }
        }
        metrics.register(|r| {
            r.register(
                "erasures",
                "Erasures of a user's data, by who asked and how they ended",
                m.erasures.clone(),
            );
        });
        m
    }

    /// Counts one erasure asked by `requested_by` that ended with `outcome`.
    pub fn erasure(&self, requested_by: &str, outcome: &str) {
        self.erasures
            .get_or_create(&ErasureLabels {
                requested_by: requested_by.to_owned(),
                outcome: outcome.to_owned(),
            })
            .inc();
    }
}
