//! Voice metrics: transcriptions and voice replies by outcome ([`TRANSCRIPTION_OUTCOMES`],
//! [`SPEECH_OUTCOMES`], every label at 0 from registration on), the seconds of audio heard and
//! spoken, and how long each service took.

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

/// Every `outcome` label of `voice_speeches_total` (`ok`, then [`super::NotSpoken::label`]'s).
pub const SPEECH_OUTCOMES: [&str; 8] = [
    "ok",
    "too_long",
    "daily_limit",
    "no_key",
    "http_error",
    "unreachable",
    "timeout",
    "bad_audio",
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: String,
}

/// Service latency buckets, seconds.
const LATENCY_BUCKETS: [f64; 10] = [0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0];

/// Handles to the voice metric families.
#[derive(Clone, Debug)]
pub struct VoiceMetrics {
    transcriptions: Family<OutcomeLabels, Counter>,
    seconds_in: Counter<f64, std::sync::atomic::AtomicU64>,
    latency: Histogram,
    speeches: Family<OutcomeLabels, Counter>,
    seconds_out: Counter<f64, std::sync::atomic::AtomicU64>,
    speech_latency: Histogram,
}

/// Sets every `outcome` of `family` at 0.
fn zeroed(family: &Family<OutcomeLabels, Counter>, outcomes: &[&str]) {
    for outcome in outcomes {
        drop(family.get_or_create(&OutcomeLabels {
            outcome: (*outcome).to_owned(),
        }));
    }
}

impl VoiceMetrics {
    /// Registers the families in `metrics`.
    pub fn new(metrics: &Metrics) -> Self {
        let m = Self::unregistered();
        zeroed(&m.transcriptions, &TRANSCRIPTION_OUTCOMES);
        zeroed(&m.speeches, &SPEECH_OUTCOMES);
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
            r.register(
                "voice_speeches",
                "Voice replies asked of the speech service (or not), by outcome",
                m.speeches.clone(),
            );
            r.register(
                "voice_spoken_audio_seconds",
                "Seconds of speech synthesised for voice replies",
                m.seconds_out.clone(),
            );
            r.register(
                "voice_speech_seconds",
                "Time the speech service took for one reply",
                m.speech_latency.clone(),
            );
        });
        m
    }

    /// Metrics that are not exported (tests, benches).
    pub fn unregistered() -> Self {
        Self {
            transcriptions: Family::default(),
            seconds_in: Counter::default(),
            latency: Histogram::new(LATENCY_BUCKETS),
            speeches: Family::default(),
            seconds_out: Counter::default(),
            speech_latency: Histogram::new(LATENCY_BUCKETS),
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

    /// One voice reply's `outcome`.
    pub(super) fn speech(&self, outcome: &'static str) {
        self.speeches
            .get_or_create(&OutcomeLabels {
                outcome: outcome.to_owned(),
            })
            .inc();
    }

    /// A spoken reply: its audio `seconds` and the service's `latency` in seconds.
    pub(super) fn spoken(&self, seconds: f64, latency: f64) {
        self.seconds_out.inc_by(seconds);
        self.speech_latency.observe(latency);
    }
}
