//! Voice metrics: transcriptions by outcome ([`TRANSCRIPTION_OUTCOMES`], every label at 0 from
//! registration on), the seconds of audio transcribed, and how long the service took.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;

use crate::observability::Metrics;

/// Every `outcome` label of `voice_transcriptions_total` (`ok`, then [`super::NotHeard::label`]'s).
pub const TRANSCRIPTION_OUTCOMES: [&str; 11] = [
    "ok",
    "too_long",
    "too_big",
    "unreadable",
    "daily_limit",
    "no_key",
    "http_error",
    "unreachable",
    "timeout",
    "bad_answer",
    "silent",
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: String,
}

/// Handles to the voice metric families.
#[derive(Clone, Debug)]
pub struct VoiceMetrics {
    transcriptions: Family<OutcomeLabels, Counter>,
    seconds_in: Counter<f64, std::sync::atomic::AtomicU64>,
    latency: Histogram,
}

impl VoiceMetrics {
    /// Registers the families in `metrics`.
    pub fn new(metrics: &Metrics) -> Self {
        let m = Self::unregistered();
        for outcome in TRANSCRIPTION_OUTCOMES {
            drop(m.transcriptions.get_or_create(&OutcomeLabels {
                outcome: outcome.to_owned(),
            }));
        }
        metrics.register(|r| {
            r.register(
                "voice_transcriptions",
                "Audio attachments given to transcription (or not), by outcome",
                m.transcriptions.clone(),
            );
            r.register(
                "voice_transcribed_audio_seconds",
                "Seconds of audio transcribed",
                m.seconds_in.clone(),
            );
            r.register(
                "voice_transcription_seconds",
                "Time the transcription service took for one file",
                m.latency.clone(),
            );
        });
        m
    }

    /// Metrics that are not exported (tests, benches).
    pub fn unregistered() -> Self {
        Self {
            transcriptions: Family::default(),
            seconds_in: Counter::default(),
            latency: Histogram::new([0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0]),
        }
    }

    /// One transcription's `outcome`.
    pub(super) fn transcription(&self, outcome: &'static str) {
        self.transcriptions
            .get_or_create(&OutcomeLabels {
                outcome: outcome.to_owned(),
            })
            .inc();
    }

    /// A transcribed file: its audio `seconds` and the service's `latency` in seconds.
    pub(super) fn transcribed(&self, seconds: f64, latency: f64) {
        self.seconds_in.inc_by(seconds);
        self.latency.observe(latency);
    }
}
