//! Speech to text: `POST {baseUrl}/audio/transcriptions` as a multipart form (`file`, `model`,
//! `response_format=json`, and `language` when configured), as the OpenAI API, Groq and the
//! whisper.cpp and faster-whisper servers take it; the answer's `text` is the transcript.
//!
//! Before anything is sent the clip must be within `maxSeconds` and `maxMb` and the user's
//! `minutesPerUserPerDay`, so a long or unwanted file costs nothing but its download. The
//! client follows no redirects, waits at most `timeoutMs`, and reads at most
//! [`MAX_ANSWER_BYTES`] of the answer. Every outcome is one metric and one log record; a
//! failure is returned as [`NotHeard`], whose words the prompt's file listing shows.

use std::time::{Duration, Instant};

use super::service::{CallFailure, Direction, Endpoint, Service};
use super::{VoiceMetrics, VoiceSetupError};
use crate::config::{Config, EnvSource};
use crate::store::{Store, WorkspaceKey};

/// Most bytes of the service's answer read.
pub const MAX_ANSWER_BYTES: usize = 1024 * 1024;
/// Longest transcript kept, in characters (an hour of fast speech is about 60 000).
pub const MAX_TRANSCRIPT_CHARS: usize = 100_000;

/// An audio file to transcribe.
#[derive(Debug, Clone)]
pub struct Clip {
    /// The file.
    pub bytes: Vec<u8>,
    /// The name sent with it (its extension tells the service the format).
    pub file_name: String,
    /// Its MIME type, from its bytes.
    pub mime: &'static str,
    /// Its length read from the container, or why it could not be read.
    pub duration: Result<Duration, String>,
}

/// A transcript.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Heard {
    /// What was said, trimmed.
    pub text: String,
    /// The audio's length.
    pub duration: Duration,
}

/// Why an audio file was not transcribed: shown to the agent in the file listing, counted by
/// [`label`](Self::label).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotHeard {
    /// Longer than `maxSeconds`.
    #[error("not transcribed: it is {} long, longer than the {} limit", super::clock(*.length), super::clock(*.limit))]
    TooLong {
        /// The clip's length.
        length: Duration,
        /// The cap.
        limit: Duration,
    },
    /// Larger than `maxMb`.
    #[error("not transcribed: larger than the {limit_mb} MB limit for transcription")]
    TooBig {
        /// The cap, MB.
        limit_mb: u32,
    },
    /// Its length could not be read from the file.
    #[error("not transcribed: {0}")]
    Unreadable(String),
    /// The user's minutes of the day are used up.
    #[error(
        "not transcribed: the sender has used up today's transcription allowance ({minutes} min)"
    )]
    DailyLimit {
        /// The cap, minutes.
        minutes: u32,
    },
    /// The key variable is unset.
    #[error("not transcribed: the transcription service is not set up on this bot")]
    NoKey,
    /// The service answered an error status.
    #[error("not transcribed: the transcription service answered HTTP {0}")]
    Http(u16),
    /// The service could not be reached.
    #[error("not transcribed: the transcription service could not be reached")]
    Unreachable,
    /// No answer within `timeoutMs`.
    #[error("not transcribed: the transcription service took too long")]
    Timeout,
    /// An answer without a transcript.
    #[error("not transcribed: the transcription service answered something unusable")]
    BadAnswer,
    /// The transcript is empty.
    #[error("no speech was heard in it")]
    Silent,
}

impl NotHeard {
    /// The metric label ([`super::TRANSCRIPTION_OUTCOMES`]).
    pub fn label(&self) -> &'static str {
        match self {
            NotHeard::TooLong { .. } => "too_long",
            NotHeard::TooBig { .. } => "too_big",
            NotHeard::Unreadable(_) => "unreadable",
            NotHeard::DailyLimit { .. } => "daily_limit",
            NotHeard::NoKey => "no_key",
            NotHeard::Http(_) => "http_error",
            NotHeard::Unreachable => "unreachable",
            NotHeard::Timeout => "timeout",
            NotHeard::BadAnswer => "bad_answer",
            NotHeard::Silent => "silent",
        }
    }

    /// Whether the service failed (the operator's to fix), rather than the file or the user's
    /// allowance being the reason.
    pub fn is_service_failure(&self) -> bool {
        matches!(
            self,
            NotHeard::NoKey
                | NotHeard::Http(_)
                | NotHeard::Unreachable
                | NotHeard::Timeout
                | NotHeard::BadAnswer
        )
    }
}

impl From<CallFailure> for NotHeard {
    fn from(f: CallFailure) -> Self {
        match f {
            CallFailure::NoKey => NotHeard::NoKey,
            CallFailure::Http(status) => NotHeard::Http(status),
            CallFailure::Unreachable => NotHeard::Unreachable,
            CallFailure::Timeout => NotHeard::Timeout,
            CallFailure::BadAnswer => NotHeard::BadAnswer,
        }
    }
}

/// The transcription service of `attachments.transcription`; one per daemon, cheap to clone.
#[derive(Debug, Clone)]
pub struct Transcriber {
    service: Service,
    model: String,
    language: String,
    max_duration: Duration,
    max_mb: u32,
    metrics: VoiceMetrics,
}

impl Transcriber {
    /// The service `config` describes (`None` without `attachments.transcription`); its key is
    /// read from `env` now. `store`: where the daily minutes are counted.
    pub fn from_config(
        config: &Config,
        env: &impl EnvSource,
        store: Option<Store>,
        metrics: VoiceMetrics,
    ) -> Result<Option<Self>, VoiceSetupError> {
        let Some(t) = &config.attachments.transcription else {
            return Ok(None);
        };
        let endpoint = Endpoint {
            at: "attachments.transcription",
            provider: &t.provider,
            base_url: &t.base_url,
            api_key_env: &t.api_key_env,
            path: "audio/transcriptions",
            timeout: Duration::from_millis(t.timeout_ms),
            minutes_per_day: t.minutes_per_user_per_day,
            direction: Direction::In,
        };
        Ok(Some(Transcriber {
            service: Service::new(config, endpoint, env, store)?,
            model: t.model.clone(),
            language: t.language.trim().to_owned(),
            max_duration: Duration::from_secs(u64::from(t.max_seconds)),
            max_mb: t.max_mb,
            metrics,
        }))
    }

    /// Transcribes `clip` for the user `who`, counting it in their day. Never fails silently:
    /// every outcome is counted and logged once.
    pub async fn transcribe(&self, who: &WorkspaceKey, clip: Clip) -> Result<Heard, NotHeard> {
        let started = Instant::now();
        let (name, bytes) = (clip.file_name.clone(), clip.bytes.len());
        let result = self.attempt(who, clip).await;
        match &result {
            Ok(heard) => {
                let latency = started.elapsed().as_secs_f64();
                self.metrics.transcription("ok");
                self.metrics
                    .transcribed(heard.duration.as_secs_f64(), latency);
                tracing::info!(
                    workspace = %who,
                    name = %name,
                    bytes,
                    audio_s = heard.duration.as_secs_f64(),
                    chars = heard.text.chars().count(),
                    latency_ms = (latency * 1000.0) as u64,
                    "voice message transcribed"
                );
            }
            Err(why) => {
                self.metrics.transcription(why.label());
                if why.is_service_failure() {
                    tracing::warn!(workspace = %who, name = %name, reason = why.label(), detail = %why, "voice message not transcribed: the transcription service failed");
                } else {
                    tracing::info!(workspace = %who, name = %name, reason = why.label(), detail = %why, "voice message not transcribed");
                }
            }
        }
        result
    }

    async fn attempt(&self, who: &WorkspaceKey, clip: Clip) -> Result<Heard, NotHeard> {
        let duration = clip.duration.map_err(NotHeard::Unreadable)?;
        if duration.is_zero() {
            return Err(NotHeard::Silent);
        }
        if duration > self.max_duration {
            return Err(NotHeard::TooLong {
                length: duration,
                limit: self.max_duration,
            });
        }
        if clip.bytes.len() as u64 > u64::from(self.max_mb) * 1024 * 1024 {
            return Err(NotHeard::TooBig {
                limit_mb: self.max_mb,
            });
        }
        let request = self.service.post()?;
        if let Some(minutes) = self.service.over_day(who, duration).await {
            return Err(NotHeard::DailyLimit { minutes });
        }
        let file = reqwest::multipart::Part::bytes(clip.bytes)
            .file_name(clip.file_name)
            .mime_str(clip.mime)
            .map_err(|_| NotHeard::BadAnswer)?;
        let mut form = reqwest::multipart::Form::new()
            .part("file", file)
            .text("model", self.model.clone())
            .text("response_format", "json");
        if !self.language.is_empty() {
            form = form.text("language", self.language.clone());
        }
        let body = self
            .service
            .answer(request.multipart(form), MAX_ANSWER_BYTES)
            .await?;
        let text = transcript_of(&body)?;
        if text.is_empty() {
            return Err(NotHeard::Silent);
        }
        self.service.count(who, duration).await;
        Ok(Heard { text, duration })
    }
}

/// The `text` of a JSON answer, trimmed and cut to [`MAX_TRANSCRIPT_CHARS`].
fn transcript_of(body: &[u8]) -> Result<String, NotHeard> {
    #[derive(serde::Deserialize)]
    struct Answer {
        text: String,
    }
    let answer: Answer = serde_json::from_slice(body).map_err(|_| NotHeard::BadAnswer)?;
    let text = answer.text.trim();
    Ok(match text.char_indices().nth(MAX_TRANSCRIPT_CHARS) {
        Some((cut, _)) => text[..cut].to_owned(),
        None => text.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_answer_text_is_the_transcript() {
        assert_eq!(
            transcript_of(br#"{"text": "  hello there \n"}"#).unwrap(),
            "hello there"
        );
        assert_eq!(
            transcript_of(br#"{"text": "", "duration": 1.5}"#).unwrap(),
            ""
        );
    }

    #[test]
    fn an_answer_without_text_is_unusable() {
        for body in [&b"{}"[..], b"not json", br#"{"text": 5}"#, b""] {
            assert_eq!(transcript_of(body), Err(NotHeard::BadAnswer));
        }
    }

    #[test]
    fn a_long_transcript_is_cut_on_a_character_boundary() {
        let long = "é".repeat(MAX_TRANSCRIPT_CHARS + 10);
        let body = serde_json::to_vec(&serde_json::json!({ "text": long })).unwrap();
        let text = transcript_of(&body).unwrap();
        assert_eq!(text.chars().count(), MAX_TRANSCRIPT_CHARS);
    }

    #[test]
    fn every_reason_has_a_registered_label() {
        let reasons = [
            NotHeard::TooLong {
                length: Duration::from_secs(400),
                limit: Duration::from_secs(300),
            },
            NotHeard::TooBig { limit_mb: 25 },
            NotHeard::Unreadable("x".into()),
            NotHeard::DailyLimit { minutes: 5 },
            NotHeard::NoKey,
            NotHeard::Http(503),
            NotHeard::Unreachable,
            NotHeard::Timeout,
            NotHeard::BadAnswer,
            NotHeard::Silent,
        ];
        for r in &reasons {
            assert!(super::super::TRANSCRIPTION_OUTCOMES.contains(&r.label()));
        }
        assert_eq!(
            reasons[0].to_string(),
            "not transcribed: it is 6:40 long, longer than the 5:00 limit"
        );
    }
}
