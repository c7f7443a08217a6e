//! What the two speech services share: the endpoint and key (a provider of `agent.providers`
//! or a `baseUrl` of their own, the key read once from the daemon's environment), an HTTP
//! client that follows no redirect and waits at most `timeoutMs`, the user's minutes of the
//! day (checked before a call, counted after it, in `llm_usage`), and reading a bounded answer.

use std::time::Duration;

use chrono::Utc;

use super::VoiceSetupError;
use crate::config::{Config, EnvSource, Secret};
use crate::store::{Store, VoiceUsage, WorkspaceKey};

/// Which way the audio goes: what the daily minutes count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Direction {
    /// Audio heard (transcribed).
    In,
    /// Audio spoken (synthesised).
    Out,
}

/// Why a call was not made or failed, common to both services.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum CallFailure {
    /// The key variable is unset.
    NoKey,
    /// An error status.
    Http(u16),
    /// Not reachable.
    Unreachable,
    /// No answer in time.
    Timeout,
    /// An answer too large or cut short.
    BadAnswer,
}

/// One configured speech service.
#[derive(Debug, Clone)]
pub(super) struct Service {
    http: reqwest::Client,
    /// `{baseUrl}/{path}`.
    pub(super) url: String,
    /// `None` with `key_required`: the key variable is unset.
    key: Option<Secret>,
    key_required: bool,
    minutes_per_day: Option<u32>,
    direction: Direction,
    /// Where the minutes are counted; `None` counts nothing (tests, benches).
    store: Option<Store>,
}

/// Where a service is and how it is called (the fields its configuration shares).
pub(super) struct Endpoint<'a> {
    /// The configuration key, for errors.
    pub at: &'static str,
    pub provider: &'a str,
    pub base_url: &'a str,
    pub api_key_env: &'a str,
    /// The API path below the base URL.
    pub path: &'a str,
    pub timeout: Duration,
    pub minutes_per_day: Option<u32>,
    pub direction: Direction,
}

impl Service {
    /// The service at `e`, its key read from `env` now (an unset key is logged once).
    pub(super) fn new(
        config: &Config,
        e: Endpoint<'_>,
        env: &impl EnvSource,
        store: Option<Store>,
    ) -> Result<Self, VoiceSetupError> {
        let at = config
            .service_endpoint(e.provider, e.base_url, e.api_key_env)
            .ok_or_else(|| VoiceSetupError::UnknownProvider {
                at: e.at,
                provider: e.provider.to_owned(),
            })?;
        let http = reqwest::Client::builder()
            .timeout(e.timeout)
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("air-friends/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|source| VoiceSetupError::Client { at: e.at, source })?;
        let key_required = !at.api_key_env.is_empty();
        let key = key_required
            .then(|| env.var(&at.api_key_env))
            .flatten()
            .filter(|k| !k.trim().is_empty())
            .map(Secret::new);
        if key_required && key.is_none() {
            tracing::warn!(
                service = e.at,
                variable = %at.api_key_env,
                "the speech service's key variable is unset: it will not be called"
            );
        }
        Ok(Service {
            http,
            url: format!("{}/{}", at.base_url.trim_end_matches('/'), e.path),
            key,
            key_required,
            minutes_per_day: e.minutes_per_day,
            direction: e.direction,
            store,
        })
    }

    /// A POST to the service with its key, or [`CallFailure::NoKey`].
    pub(super) fn post(&self) -> Result<reqwest::RequestBuilder, CallFailure> {
        if self.key_required && self.key.is_none() {
            return Err(CallFailure::NoKey);
        }
        let request = self.http.post(&self.url);
        Ok(match &self.key {
            Some(key) => request.bearer_auth(key.expose()),
            None => request,
        })
    }

    /// Sends `request` and reads a success's body, at most `limit` bytes.
    pub(super) async fn answer(
        &self,
        request: reqwest::RequestBuilder,
        limit: usize,
    ) -> Result<Vec<u8>, CallFailure> {
        let mut response = request.send().await.map_err(failure)?;
        let status = response.status();
        if !status.is_success() {
            return Err(CallFailure::Http(status.as_u16()));
        }
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(failure)? {
            if body.len() + chunk.len() > limit {
                return Err(CallFailure::BadAnswer);
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    }

    /// `Some(limit)` when `more` would pass the user's minutes of today. A usage that cannot
    /// be read is logged and not checked.
    pub(super) async fn over_day(&self, who: &WorkspaceKey, more: Duration) -> Option<u32> {
        let (minutes, store) = (self.minutes_per_day?, self.store.as_ref()?);
        let day = Utc::now().date_naive();
        match store.voice_usage_on(day, Some(who)).await {
            Ok(used) => {
                let used = match self.direction {
                    Direction::In => used.audio_in_ms,
                    Direction::Out => used.audio_out_ms,
                };
                let wanted = used.saturating_add(more.as_millis() as u64);
                (wanted > u64::from(minutes) * 60_000).then_some(minutes)
            }
            Err(error) => {
                tracing::error!(workspace = %who, error = %error, "voice minutes not checked: the usage could not be read");
                None
            }
        }
    }

    /// Counts one call of `duration` in the user's day.
    pub(super) async fn count(&self, who: &WorkspaceKey, duration: Duration) {
        let Some(store) = &self.store else {
            return;
        };
        let ms = duration.as_millis() as u64;
        let usage = match self.direction {
            Direction::In => VoiceUsage {
                audio_in_ms: ms,
                transcriptions: 1,
                ..VoiceUsage::default()
            },
            Direction::Out => VoiceUsage {
                audio_out_ms: ms,
                speeches: 1,
                ..VoiceUsage::default()
            },
        };
        if let Err(error) = store
            .add_voice_usage(who, Utc::now().date_naive(), usage)
            .await
        {
            tracing::error!(workspace = %who, error = %error, "voice use not counted: the usage could not be written");
        }
    }
}

/// What a failed request means.
fn failure(e: reqwest::Error) -> CallFailure {
    if e.is_timeout() {
        CallFailure::Timeout
    } else if e.is_connect() || e.is_request() {
        CallFailure::Unreachable
    } else {
        CallFailure::BadAnswer
    }
}
