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

use chrono::Utc;

use super::{VoiceMetrics, VoiceSetupError};
use crate::config::{Config, EnvSource, Secret};
use crate::store::{Store, VoiceUsage, WorkspaceKey};

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

/// The transcription service of `attachments.transcription`; one per daemon, cheap to clone.
#[derive(Debug, Clone)]
pub struct Transcriber {
    http: reqwest::Client,
    url: String,
    /// `None` with `key_required`: the key variable is unset.
    key: Option<Secret>,
    key_required: bool,
    model: String,
    language: String,
    max_duration: Duration,
    max_mb: u32,
    minutes_per_day: Option<u32>,
    /// Where the daily minutes are counted; `None` counts nothing (tests, benches).
    store: Option<Store>,
    metrics: VoiceMetrics,
}

impl Transcriber {
    /// The service `config` describes (`None` without `attachments.transcription`); its key is
    /// read from `env` now.
    pub fn from_config(
        config: &Config,
        env: &impl EnvSource,
        store: Option<Store>,
        metrics: VoiceMetrics,
    ) -> Result<Option<Self>, VoiceSetupError> {
        const AT: &str = "attachments.transcription";
        let Some(t) = &config.attachments.transcription else {
            return Ok(None);
        };
        let at = config
            .service_endpoint(&t.provider, &t.base_url, &t.api_key_env)
            .ok_or_else(|| VoiceSetupError::UnknownProvider {
                at: AT,
                provider: t.provider.clone(),
            })?;
        let http = reqwest::Client::builder()
            .timeout(Duration::from_millis(t.timeout_ms))
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("air-friends/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|source| VoiceSetupError::Client { at: AT, source })?;
        let key_required = !at.api_key_env.is_empty();
        let key = key_required
            .then(|| env.var(&at.api_key_env))
            .flatten()
            .filter(|k| !k.trim().is_empty())
            .map(Secret::new);
        if key_required && key.is_none() {
            tracing::warn!(
                variable = %at.api_key_env,
                "voice messages will not be transcribed: the transcription key variable is unset"
            );
        }
        Ok(Some(Transcriber {
            http,
            url: format!("{}/audio/transcriptions", at.base_url.trim_end_matches('/')),
            key,
            key_required,
            model: t.model.clone(),
            language: t.language.trim().to_owned(),
            max_duration: Duration::from_secs(u64::from(t.max_seconds)),
            max_mb: t.max_mb,
            minutes_per_day: t.minutes_per_user_per_day,
            store,
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
        if self.key_required && self.key.is_none() {
            return Err(NotHeard::NoKey);
        }
        self.check_day(who, duration).await?;
        let text = self.send(clip.bytes, clip.file_name, clip.mime).await?;
        if text.is_empty() {
            return Err(NotHeard::Silent);
        }
        self.count(who, duration).await;
        Ok(Heard { text, duration })
    }

    /// `Err` when `duration` more would pass the user's minutes of today. A usage that cannot
    /// be read is logged and not checked.
    async fn check_day(&self, who: &WorkspaceKey, duration: Duration) -> Result<(), NotHeard> {
        let (Some(minutes), Some(store)) = (self.minutes_per_day, &self.store) else {
            return Ok(());
        };
        let day = Utc::now().date_naive();
        match store.voice_usage_on(day, Some(who)).await {
            Ok(used) => {
                let limit_ms = u64::from(minutes) * 60_000;
                let wanted = used.audio_in_ms.saturating_add(duration.as_millis() as u64);
                if wanted > limit_ms {
                    return Err(NotHeard::DailyLimit { minutes });
                }
            }
            Err(error) => tracing::error!(
                workspace = %who,
                error = %error,
                "transcription minutes not checked: the usage could not be read"
            ),
        }
        Ok(())
    }

    /// Counts a transcription of `duration` in the user's day.
    async fn count(&self, who: &WorkspaceKey, duration: Duration) {
        let Some(store) = &self.store else {
            return;
        };
        let usage = VoiceUsage {
            audio_in_ms: duration.as_millis() as u64,
            transcriptions: 1,
            ..VoiceUsage::default()
        };
        if let Err(error) = store
            .add_voice_usage(who, Utc::now().date_naive(), usage)
            .await
        {
            tracing::error!(workspace = %who, error = %error, "transcription not counted: the usage could not be written");
        }
    }

    /// The service's transcript of the file, trimmed and cut to [`MAX_TRANSCRIPT_CHARS`].
    async fn send(
        &self,
        bytes: Vec<u8>,
        file_name: String,
        mime: &'static str,
    ) -> Result<String, NotHeard> {
        let file = reqwest::multipart::Part::bytes(bytes)
            .file_name(file_name)
            .mime_str(mime)
            .map_err(|_| NotHeard::BadAnswer)?;
        let mut form = reqwest::multipart::Form::new()
            .part("file", file)
            .text("model", self.model.clone())
            .text("response_format", "json");
        if !self.language.is_empty() {
            form = form.text("language", self.language.clone());
        }
        let mut request = self.http.post(&self.url).multipart(form);
        if let Some(key) = &self.key {
            request = request.bearer_auth(key.expose());
        }
        let mut response = request.send().await.map_err(failure)?;
        let status = response.status();
        if !status.is_success() {
            return Err(NotHeard::Http(status.as_u16()));
        }
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(failure)? {
            if body.len() + chunk.len() > MAX_ANSWER_BYTES {
                return Err(NotHeard::BadAnswer);
            }
            body.extend_from_slice(&chunk);
        }
        transcript_of(&body)
    }
}

/// What a failed request means for the user.
fn failure(e: reqwest::Error) -> NotHeard {
    if e.is_timeout() {
        NotHeard::Timeout
    } else if e.is_connect() || e.is_request() {
        NotHeard::Unreachable
    } else {
        NotHeard::BadAnswer
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
