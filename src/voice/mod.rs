//! The speech services the daemon calls for voice: a voice message is sent to an
//! OpenAI-compatible `/audio/transcriptions` service ([`transcribe`]) and its transcript given
//! to the agent; a voice reply's text is spoken by an `/audio/speech` service ([`speech`]) into
//! Ogg Opus for the send-voice skill. What both share — endpoint and key, the client, the
//! daily minutes — is `service.rs`. The agent has no network and holds no key, so it is the daemon that calls;
//! the audio's length (read from its container by `crate::audio`) is checked against
//! the configured caps before anything is sent, and what was transcribed is counted per user
//! and UTC day with the user's tokens (`store::VoiceUsage`), which the daily minutes limits
//! read. Every call is counted in [`VoiceMetrics`] by outcome.
//!
//! Documented for operators in `docs/VOICE.md`.

pub mod metrics;
mod service;
pub mod speech;
pub mod transcribe;

pub use metrics::{SPEECH_OUTCOMES, TRANSCRIPTION_OUTCOMES, VoiceMetrics};
pub use speech::{NotSpoken, Speaker, Spoken};
pub use transcribe::{Clip, Heard, NotHeard, Transcriber};

/// Why a speech service could not be set up (configuration that skipped validation).
#[derive(Debug, thiserror::Error)]
pub enum VoiceSetupError {
    /// `provider` names no provider of `agent.providers`.
    #[error("{at}.provider: {provider:?} is not one of agent.providers")]
    UnknownProvider {
        /// The configuration key.
        at: &'static str,
        /// The configured value.
        provider: String,
    },
    /// The HTTP client could not be built.
    #[error("cannot build the {at} client: {source}")]
    Client {
        /// The configuration key.
        at: &'static str,
        /// The cause.
        source: reqwest::Error,
    },
}

/// A minute and seconds for people: `0:42`, `12:05`, `1:02:03`.
pub fn clock(d: std::time::Duration) -> String {
    let s = d.as_secs() + u64::from(d.subsec_millis() >= 500);
    let (h, m, s) = (s / 3600, s / 60 % 60, s % 60);
    if h > 0 {
        format!("{h}:{m:02}:{s:02}")
    } else {
        format!("{m}:{s:02}")
    }
}

#[cfg(test)]
mod tests {
    use super::clock;
    use std::time::Duration;

    #[test]
    fn durations_read_as_a_clock() {
        assert_eq!(clock(Duration::from_millis(0)), "0:00");
        assert_eq!(clock(Duration::from_millis(41_600)), "0:42");
        assert_eq!(clock(Duration::from_secs(725)), "12:05");
        assert_eq!(clock(Duration::from_secs(3723)), "1:02:03");
    }
}
