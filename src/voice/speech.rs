//! Text to speech for voice replies: `POST {baseUrl}/audio/speech` with
//! `{"model", "input", "voice", "response_format": "opus"}`, as the OpenAI API and compatible
//! servers take it; the answer must be Ogg Opus (told from its bytes, as Discord's voice
//! messages are), whose length and waveform are read from its pages (`crate::audio`).
//!
//! Before anything is sent the text must be within `speech.maxChars` and the user's
//! `minutesPerUserPerDay` must not be used up (the length of speech is estimated from the
//! text for that check; what is counted afterwards is the real length). The client follows no
//! redirect, waits at most `timeoutMs`, and reads at most [`MAX_SPEECH_BYTES`]. Every outcome
//! is one metric and one log record; a failure is [`NotSpoken`], whose words the agent gets.

use std::time::{Duration, Instant};

use serde_json::json;

use super::service::{CallFailure, Direction, Endpoint, Service};
use super::{VoiceMetrics, VoiceSetupError};
use crate::audio::{AudioType, opus_waveform};
use crate::config::{Config, EnvSource};
use crate::store::{Store, WorkspaceKey};

/// Most bytes of synthesised audio read (a 4096-character text is a few minutes of speech,
/// well under 1 MB of Opus).
pub const MAX_SPEECH_BYTES: usize = 25 * 1024 * 1024;
/// Characters per second of speech, to estimate a text's length before it is spoken.
const CHARS_PER_SECOND: u64 = 15;

/// Speech ready to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spoken {
    /// Ogg Opus audio.
    pub bytes: Vec<u8>,
    /// Its length.
    pub duration: Duration,
    /// Its waveform, up to 256 samples (Discord's voice-message preview).
    pub waveform: Vec<u8>,
}

/// Why a text was not spoken: told to the agent (which can send the text instead), counted by
/// [`label`](Self::label).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotSpoken {
    /// Longer than `speech.maxChars`.
    #[error(
        "the text is {chars} characters, longer than the {limit} a voice reply may speak; send it as text with send-reply, or shorten it"
    )]
    TooLong {
        /// The text's length.
        chars: usize,
        /// The cap.
        limit: u32,
    },
    /// The user's minutes of the day are used up.
    #[error(
        "this person's {minutes} minutes of voice replies for today are used up; send your answer as text with send-reply"
    )]
    DailyLimit {
        /// The cap, minutes.
        minutes: u32,
    },
    /// The key variable is unset.
    #[error(
        "the speech service is not set up on this bot; send your answer as text with send-reply"
    )]
    NoKey,
    /// An error status.
    #[error("the speech service answered HTTP {0}; send your answer as text with send-reply")]
    Http(u16),
    /// Not reachable.
    #[error("the speech service could not be reached; send your answer as text with send-reply")]
    Unreachable,
    /// No answer within `timeoutMs`.
    #[error("the speech service took too long; send your answer as text with send-reply")]
    Timeout,
    /// An answer that is not usable Ogg Opus audio.
    #[error(
        "the speech service did not answer usable Ogg Opus audio; send your answer as text with send-reply"
    )]
    BadAudio,
}

impl NotSpoken {
    /// The metric label ([`super::SPEECH_OUTCOMES`]).
    pub fn label(&self) -> &'static str {
        match self {
            NotSpoken::TooLong { .. } => "too_long",
            NotSpoken::DailyLimit { .. } => "daily_limit",
            NotSpoken::NoKey => "no_key",
            NotSpoken::Http(_) => "http_error",
            NotSpoken::Unreachable => "unreachable",
            NotSpoken::Timeout => "timeout",
            NotSpoken::BadAudio => "bad_audio",
        }
    }

    /// Whether the service failed (the operator's to fix).
    pub fn is_service_failure(&self) -> bool {
        !matches!(
            self,
            NotSpoken::TooLong { .. } | NotSpoken::DailyLimit { .. }
        )
    }
}

impl From<CallFailure> for NotSpoken {
    fn from(f: CallFailure) -> Self {
        match f {
            CallFailure::NoKey => NotSpoken::NoKey,
            CallFailure::Http(status) => NotSpoken::Http(status),
            CallFailure::Unreachable => NotSpoken::Unreachable,
            CallFailure::Timeout => NotSpoken::Timeout,
            CallFailure::BadAnswer => NotSpoken::BadAudio,
        }
    }
}

/// The speech service of `speech`; one per daemon, cheap to clone.
#[derive(Debug, Clone)]
pub struct Speaker {
    service: Service,
    model: String,
    voice: String,
    max_chars: u32,
    metrics: VoiceMetrics,
}

impl Speaker {
    /// The service `config` describes (`None` without `speech`); its key is read from `env`
    /// now. `store`: where the daily minutes are counted.
    pub fn from_config(
        config: &Config,
        env: &impl EnvSource,
        store: Option<Store>,
        metrics: VoiceMetrics,
    ) -> Result<Option<Self>, VoiceSetupError> {
        let Some(s) = &config.speech else {
            return Ok(None);
        };
        let endpoint = Endpoint {
            at: "speech",
            provider: &s.provider,
            base_url: &s.base_url,
            api_key_env: &s.api_key_env,
            path: "audio/speech",
            timeout: Duration::from_millis(s.timeout_ms),
            minutes_per_day: s.minutes_per_user_per_day,
            direction: Direction::Out,
        };
        Ok(Some(Speaker {
            service: Service::new(config, endpoint, env, store)?,
            model: s.model.clone(),
            voice: s.voice.clone(),
            max_chars: s.max_chars,
            metrics,
        }))
    }

    /// Speaks `text` for a conversation with `who`, counting it in their day.
    pub async fn speak(&self, who: &WorkspaceKey, text: &str) -> Result<Spoken, NotSpoken> {
        let started = Instant::now();
        let result = self.attempt(who, text).await;
        match &result {
            Ok(spoken) => {
                let latency = started.elapsed().as_secs_f64();
                self.metrics.speech("ok");
                self.metrics.spoken(spoken.duration.as_secs_f64(), latency);
                tracing::info!(
                    workspace = %who,
                    chars = text.chars().count(),
                    bytes = spoken.bytes.len(),
                    audio_s = spoken.duration.as_secs_f64(),
                    latency_ms = (latency * 1000.0) as u64,
                    "voice reply spoken"
                );
            }
            Err(why) => {
                self.metrics.speech(why.label());
                if why.is_service_failure() {
                    tracing::warn!(workspace = %who, reason = why.label(), detail = %why, "voice reply not spoken: the speech service failed");
                } else {
                    tracing::info!(workspace = %who, reason = why.label(), detail = %why, "voice reply not spoken");
                }
            }
        }
        result
    }

    async fn attempt(&self, who: &WorkspaceKey, text: &str) -> Result<Spoken, NotSpoken> {
        let chars = text.chars().count();
        if chars > self.max_chars as usize {
            return Err(NotSpoken::TooLong {
                chars,
                limit: self.max_chars,
            });
        }
        let request = self.service.post()?;
        let estimate = Duration::from_secs((chars as u64).div_ceil(CHARS_PER_SECOND));
        if let Some(minutes) = self.service.over_day(who, estimate).await {
            return Err(NotSpoken::DailyLimit { minutes });
        }
        let body = json!({
            "model": self.model,
            "input": text,
            "voice": self.voice,
            "response_format": "opus",
        });
        let bytes = self
            .service
            .answer(request.json(&body), MAX_SPEECH_BYTES)
            .await?;
        if AudioType::sniff(&bytes) != Some(AudioType::OggOpus) {
            return Err(NotSpoken::BadAudio);
        }
        let (duration, waveform) = opus_waveform(&bytes).map_err(|_| NotSpoken::BadAudio)?;
        if duration.is_zero() {
            return Err(NotSpoken::BadAudio);
        }
        self.service.count(who, duration).await;
        Ok(Spoken {
            bytes,
            duration,
            waveform,
        })
    }
}
