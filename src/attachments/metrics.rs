//! Attachment metrics: files fetched, files skipped by reason ([`SKIP_REASONS`], every label
//! at 0 from registration on), bytes downloaded, pictures sent and how long a turn's
//! attachment step took.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;

use crate::observability::Metrics;

/// Every `reason` label of `attachments_skipped_total` (`Skip::label`).
pub const SKIP_REASONS: [&str; 9] = [
    "too_big",
    "turn_limit",
    "not_allowed",
    "timeout",
    "http_error",
    "mislabelled",
    "bad_image",
    "failed",
    "no_url",
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: String,
}

/// Handles to the attachment metric families.
#[derive(Clone, Debug)]
pub struct AttachmentMetrics {
    fetched: Counter,
    skipped: Family<ReasonLabels, Counter>,
    bytes: Counter,
    images: Counter,
    step: Histogram,
}

impl AttachmentMetrics {
    /// Registers the families in `metrics`.
    pub fn new(metrics: &Metrics) -> Self {
        let m = Self::unregistered();
        for reason in SKIP_REASONS {
            drop(m.skipped.get_or_create(&ReasonLabels {
                reason: reason.to_owned(),
            }));
        }
        metrics.register(|r| {
            r.register(
                "attachments_fetched",
                "Attachment files downloaded and saved for the agent",
                m.fetched.clone(),
            );
            r.register(
                "attachments_skipped",
                "Attachment files not given to the agent, by reason",
                m.skipped.clone(),
            );
            r.register(
                "attachment_bytes",
                "Bytes of attachment files downloaded",
                m.bytes.clone(),
            );
            r.register(
                "attachment_images",
                "Pictures sent to the model as image blocks",
                m.images.clone(),
            );
            r.register(
                "attachment_step_seconds",
                "Time a turn spent fetching and preparing its attachments",
                m.step.clone(),
            );
        });
        m
    }

    /// Metrics that are not exported (tests, benches).
    pub fn unregistered() -> Self {
        Self {
            fetched: Counter::default(),
            skipped: Family::default(),
            bytes: Counter::default(),
            images: Counter::default(),
            step: Histogram::new([0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0]),
        }
    }

    pub(super) fn fetched(&self) {
        self.fetched.inc();
    }

    /// Bytes downloaded, whether the file was then kept or not.
    pub(super) fn downloaded(&self, bytes: u64) {
        self.bytes.inc_by(bytes);
    }

    pub(super) fn skipped(&self, reason: &'static str) {
        self.skipped
            .get_or_create(&ReasonLabels {
                reason: reason.to_owned(),
            })
            .inc();
    }

    pub(super) fn images_sent(&self, n: u64) {
        self.images.inc_by(n);
    }

    pub(super) fn step(&self, seconds: f64) {
        self.step.observe(seconds);
    }
}
