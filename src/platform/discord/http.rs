//! Discord's REST API, called through the daemon's shared reqwest 0.12 client.
//!
//! serenity's own HTTP client cannot be used for the adapter's calls when `apiBaseUrl` points it
//! at a proxy or a fake Discord: the proxy only applies with serenity's ratelimiter disabled, and
//! then serenity neither retries a 429 nor exposes Discord's `retry_after`
//! (`tests/discord_adapter.rs` drives the 429 path against the fake Discord). So every call
//! the adapter makes goes through [`Rest`], which:
//! * authenticates with `Authorization: Bot …` (a sensitive header value; the token never appears
//!   in a URL, an error or a log line);
//! * on 429 reads `retry_after` from the JSON body (or the `Retry-After` header, or falls back to a
//!   growing back-off ≥ 1 s), sleeps and retries a bounded number of times, then surfaces
//!   [`PlatformError::RateLimited`] with Discord's hint;
//! * maps statuses to [`PlatformError`] (404 → `NotFound`, 403 → `Forbidden`, others → `Api`
//!   with Discord's numeric `code` and message) and transport failures to `Transport` with the URL
//!   stripped (webhook URLs carry interaction tokens).
//!
//! Log lines name the call by its route label (`create_message`, `edit_original`, …), never by
//! its path.

use std::time::Duration;

use reqwest::header::{AUTHORIZATION, HeaderValue, RETRY_AFTER};
use reqwest::multipart::{Form, Part};
use reqwest::{Method, StatusCode};
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::backoff::Backoff;
use crate::platform::PlatformError;

/// Discord's production REST root.
const DISCORD_API: &str = "https://discord.com/api/v10";

/// How many times a 429 is retried before [`PlatformError::RateLimited`] is surfaced.
const DEFAULT_MAX_RETRIES: u32 = 3;

/// A `retry_after` longer than this is not slept through: the caller gets `RateLimited` at once.
const DEFAULT_MAX_WAIT: Duration = Duration::from_secs(10);

/// Back-off when a 429 carries no hint: 1 s, 2 s, 4 s, …
const FALLBACK_BACKOFF: Duration = Duration::from_secs(1);

/// Longest Discord error message kept in a [`PlatformError`].
const MAX_ERROR_MESSAGE: usize = 300;

/// A body for one request. Multipart bodies are kept as parts so a retried request can be rebuilt.
#[derive(Debug, Clone)]
pub(crate) enum Body {
    /// No body.
    Empty,
    /// A JSON body.
    Json(Value),
    /// `payload_json` plus `files[n]` parts (message with attachments).
    Files {
        /// The message fields.
        payload: Value,
        /// `(filename, mime, bytes)` per attachment, in order.
        files: Vec<(String, Option<String>, Vec<u8>)>,
    },
}

/// One REST call: a label for logs and errors, the method and the path below `/api/v10`.
#[derive(Debug, Clone)]
pub(crate) struct Route {
    /// Stable name of the call for logs (`create_message`).
    pub label: &'static str,
    /// HTTP method.
    pub method: Method,
    /// Path below the API root, starting with `/`.
    pub path: String,
}

impl Route {
    /// A route.
    pub fn new(label: &'static str, method: Method, path: impl Into<String>) -> Self {
        Self {
            label,
            method,
            path: path.into(),
        }
    }
}

/// The Discord REST client of the adapter (see the module documentation).
#[derive(Debug, Clone)]
pub(crate) struct Rest {
    client: reqwest::Client,
    root: String,
    auth: HeaderValue,
    max_retries: u32,
    max_wait: Duration,
}

/// The base URL could not be used, or the token cannot be sent as a header.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum RestSetupError {
    /// The token contains characters that cannot go into an HTTP header.
    #[error("the Discord token contains characters that are not allowed in an HTTP header")]
    BadToken,
}

impl Rest {
    /// A client for `api_base_url` (`None` = Discord; otherwise the scheme, host and port that
    /// replace `https://discord.com`, like serenity's proxy setting).
    pub fn new(
        client: reqwest::Client,
        api_base_url: Option<&str>,
        token: &str,
    ) -> Result<Self, RestSetupError> {
        let root = match api_base_url {
            Some(base) => format!("{}/api/v10", base.trim_end_matches('/')),
            None => DISCORD_API.to_owned(),
        };
        let token = token.trim();
        let token = token.strip_prefix("Bot ").unwrap_or(token);
        let mut auth =
            HeaderValue::from_str(&format!("Bot {token}")).map_err(|_| RestSetupError::BadToken)?;
        auth.set_sensitive(true);
        Ok(Self {
            client,
            root,
            auth,
            max_retries: DEFAULT_MAX_RETRIES,
            max_wait: DEFAULT_MAX_WAIT,
        })
    }

    /// Performs `route` and decodes the JSON answer as `T`.
    pub async fn json<T: DeserializeOwned>(
        &self,
        route: Route,
        body: Body,
    ) -> Result<T, PlatformError> {
        self.json_ref(&route, &body).await
    }

    /// [`json`](Self::json) with the route and body kept, for a caller that may send them again
    /// (a message into a thread that had to be unarchived first).
    pub async fn json_ref<T: DeserializeOwned>(
        &self,
        route: &Route,
        body: &Body,
    ) -> Result<T, PlatformError> {
        let bytes = self.send(route, body).await?;
        serde_json::from_slice(&bytes).map_err(|err| {
            tracing::warn!(route = route.label, error = %err, "undecodable Discord response");
            PlatformError::Api {
                status: 200,
                code: None,
                message: format!("undecodable response to {}: {err}", route.label),
            }
        })
    }

    /// Performs `route`, ignoring any answer body (204s, typing, reactions, callbacks).
    pub async fn call(&self, route: Route, body: Body) -> Result<(), PlatformError> {
        self.send(&route, &body).await.map(drop)
    }

    async fn send(&self, route: &Route, body: &Body) -> Result<Vec<u8>, PlatformError> {
        let mut attempt = 0u32;
        loop {
            let response = self.request(route, body)?.send().await.map_err(|err| {
                let err = err.without_url();
                tracing::debug!(route = route.label, error = %err, "Discord request failed");
                PlatformError::Transport(format!("{}: {err}", route.label))
            })?;
            let status = response.status();
            let header_hint = response
                .headers()
                .get(RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<f64>().ok());
            let bytes = response
                .bytes()
                .await
                .map_err(|err| PlatformError::Transport(format!("{}: {err}", route.label)))?;
            if status.is_success() {
                return Ok(bytes.to_vec());
            }
            if status != StatusCode::TOO_MANY_REQUESTS {
                return Err(map_status(status, &bytes, route.label));
            }
            let wait = retry_after(&bytes, header_hint)
                .unwrap_or_else(|| Backoff::new(FALLBACK_BACKOFF, Duration::MAX).ceiling(attempt));
            if attempt >= self.max_retries || wait > self.max_wait {
                tracing::warn!(
                    route = route.label,
                    attempts = attempt + 1,
                    retry_after_ms = wait.as_millis() as u64,
                    "Discord rate limit: giving up"
                );
                return Err(PlatformError::RateLimited { retry_after: wait });
            }
            attempt += 1;
            tracing::info!(
                route = route.label,
                attempt,
                retry_after_ms = wait.as_millis() as u64,
                "Discord rate limit: waiting before retrying"
            );
            tokio::time::sleep(wait).await;
        }
    }

    fn request(
        &self,
        route: &Route,
        body: &Body,
    ) -> Result<reqwest::RequestBuilder, PlatformError> {
        let url = format!("{}{}", self.root, route.path);
        let builder = self
            .client
            .request(route.method.clone(), url)
            .header(AUTHORIZATION, self.auth.clone());
        Ok(match body {
            Body::Empty => builder,
            Body::Json(value) => builder.json(value),
            Body::Files { payload, files } => builder.multipart(files_form(payload, files)?),
        })
    }
}

/// The multipart form of a message with attachments.
fn files_form(
    payload: &Value,
    files: &[(String, Option<String>, Vec<u8>)],
) -> Result<Form, PlatformError> {
    let payload = Part::text(payload.to_string())
        .mime_str("application/json")
        .map_err(|err| PlatformError::InvalidInput(err.to_string()))?;
    let mut form = Form::new().part("payload_json", payload);
    for (index, (filename, mime, bytes)) in files.iter().enumerate() {
        let part = Part::bytes(bytes.clone()).file_name(filename.clone());
        let mime = mime.as_deref().unwrap_or("application/octet-stream");
        let part = part
            .mime_str(mime)
            .or_else(|_| {
                Part::bytes(bytes.clone())
                    .file_name(filename.clone())
                    .mime_str("application/octet-stream")
            })
            .map_err(|err| PlatformError::InvalidInput(err.to_string()))?;
        form = form.part(format!("files[{index}]"), part);
    }
    Ok(form)
}

/// Discord's hint: `retry_after` (seconds, fractional) in the JSON body, else the `Retry-After`
/// header. Negative or absurd values are ignored.
fn retry_after(body: &[u8], header: Option<f64>) -> Option<Duration> {
    let from_body = serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|v| v.get("retry_after").and_then(Value::as_f64));
    from_body
        .or(header)
        .filter(|secs| secs.is_finite() && *secs >= 0.0 && *secs < 86_400.0)
        .map(Duration::from_secs_f64)
}

/// Maps a non-success, non-429 answer to a [`PlatformError`].
pub(crate) fn map_status(status: StatusCode, body: &[u8], label: &str) -> PlatformError {
    let parsed = serde_json::from_slice::<Value>(body).ok();
    let code = parsed.as_ref().and_then(|v| v.get("code")).and_then(|c| {
        c.as_i64()
            .map(|n| n.to_string())
            .or(c.as_str().map(str::to_owned))
    });
    let mut message = parsed
        .as_ref()
        .and_then(|v| v.get("message"))
        .and_then(Value::as_str)
        .map(str::to_owned)
        .unwrap_or_else(|| status.canonical_reason().unwrap_or("error").to_owned());
    if message.chars().count() > MAX_ERROR_MESSAGE {
        message = message.chars().take(MAX_ERROR_MESSAGE).collect();
    }
    match status {
        StatusCode::NOT_FOUND => PlatformError::NotFound(format!("{label}: {message}")),
        StatusCode::FORBIDDEN => PlatformError::Forbidden(format!("{label}: {message}")),
        _ => PlatformError::Api {
            status: status.as_u16(),
            code,
            message,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_prefers_the_body_and_rejects_nonsense() {
        let body =
            br#"{"message":"You are being rate limited.","retry_after":0.25,"global":false}"#;
        assert_eq!(
            retry_after(body, Some(3.0)),
            Some(Duration::from_millis(250))
        );
        assert_eq!(
            retry_after(b"not json", Some(2.0)),
            Some(Duration::from_secs(2))
        );
        assert_eq!(retry_after(br#"{"retry_after":-1}"#, None), None);
        assert_eq!(retry_after(b"", None), None);
    }

    #[test]
    fn statuses_map_to_what_callers_branch_on() {
        let body = br#"{"message":"Unknown Message","code":10008}"#;
        assert!(matches!(
            map_status(StatusCode::NOT_FOUND, body, "get_message"),
            PlatformError::NotFound(m) if m.contains("Unknown Message")
        ));
        assert!(matches!(
            map_status(StatusCode::FORBIDDEN, b"{}", "edit_message"),
            PlatformError::Forbidden(_)
        ));
        let err = map_status(
            StatusCode::BAD_REQUEST,
            br#"{"message":"Invalid Form Body","code":50035}"#,
            "create_message",
        );
        assert_eq!(
            err,
            PlatformError::Api {
                status: 400,
                code: Some("50035".into()),
                message: "Invalid Form Body".into()
            }
        );
        assert!(map_status(StatusCode::BAD_GATEWAY, b"", "x").is_retryable());
    }

    #[test]
    fn the_token_is_a_sensitive_header_with_one_bot_prefix() {
        let rest = Rest::new(
            reqwest::Client::new(),
            Some("http://127.0.0.1:9/"),
            "Bot abc",
        )
        .expect("valid");
        assert_eq!(rest.root, "http://127.0.0.1:9/api/v10");
        assert_eq!(rest.auth.to_str().ok(), Some("Bot abc"));
        assert!(rest.auth.is_sensitive());
        assert!(format!("{rest:?}").contains("Sensitive"));
        assert!(!format!("{rest:?}").contains("abc"));
        assert_eq!(
            Rest::new(reqwest::Client::new(), None, "bad\ntoken").err(),
            Some(RestSetupError::BadToken)
        );
    }
}
