//! The Misskey REST client: `POST {base}/api/<endpoint>` with the token as `i` in the JSON body
//! (or as a form field for `drive/files/create`), Misskey's `{"error": {code, id, message}}`
//! mapped onto [`PlatformError`], and `RATE_LIMIT_EXCEEDED` / 429 retried with exponential
//! back-off a bounded number of times before it surfaces as [`PlatformError::RateLimited`].
//!
//! The token never leaves this module except in request bodies: transport errors are stripped of
//! their URL and scrubbed of the token, and nothing here logs a request body.

use std::future::Future;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use super::model::{DriveFile, ErrorBody};
use crate::backoff::Backoff;
use crate::config::Secret;
use crate::platform::PlatformError;

/// Error codes that mean "the bot's credentials do not allow this".
const AUTH_CODES: &[&str] = &[
    "CREDENTIAL_REQUIRED",
    "AUTHENTICATION_FAILED",
    "PERMISSION_DENIED",
    "YOUR_ACCOUNT_SUSPENDED",
    "YOUR_ACCOUNT_MOVED",
    "ACCESS_DENIED",
    "YOU_HAVE_BEEN_BLOCKED",
    "ROLE_PERMISSION_DENIED",
];

/// Longest alt text (`comment`) of a drive file Misskey keeps, in characters.
pub const MAX_FILE_COMMENT_CHARS: usize = 512;

/// How the REST client retries rate-limited calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Retries after the first attempt (so `max_retries + 1` requests at most).
    pub max_retries: u32,
    /// Delay schedule between attempts.
    pub backoff: Backoff,
}

impl Default for RetryPolicy {
    /// Three retries after 1, 2 and 4 s (± jitter).
    fn default() -> Self {
        Self {
            max_retries: 3,
            backoff: Backoff::new(Duration::from_secs(1), Duration::from_secs(30)),
        }
    }
}

/// A Misskey REST client bound to one instance and token.
#[derive(Clone)]
pub struct Api {
    http: reqwest::Client,
    base: String,
    token: Secret,
    retry: RetryPolicy,
    timeout: Duration,
}

impl std::fmt::Debug for Api {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Api")
            .field("base", &self.base)
            .field("token", &self.token)
            .finish_non_exhaustive()
    }
}

impl Api {
    /// A client for `{scheme}://{host}/api/`.
    pub fn new(
        http: reqwest::Client,
        host: &str,
        secure: bool,
        token: Secret,
        retry: RetryPolicy,
        timeout: Duration,
    ) -> Self {
        let scheme = if secure { "https" } else { "http" };
        Self {
            http,
            base: format!("{scheme}://{host}/api/"),
            token,
            retry,
            timeout,
        }
    }

    /// Calls `endpoint` with the JSON object `params` and decodes the answer.
    pub async fn call<T: DeserializeOwned>(
        &self,
        endpoint: &str,
        params: Value,
    ) -> Result<T, PlatformError> {
        let bytes = self.call_raw(endpoint, params).await?;
        serde_json::from_slice(&bytes).map_err(|err| PlatformError::Api {
            status: 200,
            code: None,
            message: format!("unexpected answer from {endpoint}: {err}"),
        })
    }

    /// Calls `endpoint` and ignores the answer (Misskey answers 204 for deletions and reactions).
    pub async fn call_unit(&self, endpoint: &str, params: Value) -> Result<(), PlatformError> {
        self.call_raw(endpoint, params).await.map(drop)
    }

    /// Uploads one file with `drive/files/create` (multipart: `i`, `name`, `file`, and its alt
    /// text as `comment`, cut to [`MAX_FILE_COMMENT_CHARS`]).
    pub async fn upload(
        &self,
        filename: &str,
        bytes: Vec<u8>,
        mime: Option<&str>,
        comment: Option<&str>,
    ) -> Result<DriveFile, PlatformError> {
        let comment: Option<String> =
            comment.map(|c| c.chars().take(MAX_FILE_COMMENT_CHARS).collect());
        let endpoint = "drive/files/create";
        let url = format!("{}{endpoint}", self.base);
        let body = self
            .with_retry(endpoint, || {
                let part = mime
                    .and_then(|mime| part_with_mime(bytes.clone(), filename, mime).ok())
                    .unwrap_or_else(|| {
                        reqwest::multipart::Part::bytes(bytes.clone())
                            .file_name(filename.to_owned())
                    });
                let mut form = reqwest::multipart::Form::new()
                    .text("i", self.token.expose().to_owned())
                    .text("name", filename.to_owned());
                if let Some(comment) = &comment {
                    form = form.text("comment", comment.clone());
                }
                let form = form.part("file", part);
                self.http
                    .post(&url)
                    .timeout(self.timeout.saturating_mul(4))
                    .multipart(form)
                    .send()
            })
            .await?;
        serde_json::from_slice(&body).map_err(|err| PlatformError::Api {
            status: 200,
            code: None,
            message: format!("unexpected answer from {endpoint}: {err}"),
        })
    }

    /// Removes the token from `text` (for any message that might echo a URL or request).
    pub fn scrub(&self, text: &str) -> String {
        scrub(text, self.token.expose())
    }

    async fn call_raw(&self, endpoint: &str, params: Value) -> Result<Vec<u8>, PlatformError> {
        let mut body = match params {
            Value::Object(map) => map,
            Value::Null => Map::new(),
            other => {
                return Err(PlatformError::InvalidInput(format!(
                    "parameters of {endpoint} must be a JSON object, not {other}"
                )));
            }
        };
        body.insert("i".into(), Value::String(self.token.expose().to_owned()));
        let body = Value::Object(body);
        let url = format!("{}{endpoint}", self.base);
        self.with_retry(endpoint, || {
            self.http
                .post(&url)
                .timeout(self.timeout)
                .json(&body)
                .send()
        })
        .await
    }

    /// Sends with `send` until it is not rate limited or the retries are used up.
    async fn with_retry<F, Fut>(
        &self,
        endpoint: &str,
        mut send: F,
    ) -> Result<Vec<u8>, PlatformError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<reqwest::Response, reqwest::Error>>,
    {
        let mut attempt = 0;
        loop {
            let result = self.read(endpoint, send().await).await;
            match result {
                Err(PlatformError::RateLimited { .. }) => {
                    let delay = self.retry.backoff.delay(attempt);
                    if attempt >= self.retry.max_retries {
                        tracing::warn!(
                            endpoint,
                            attempts = attempt + 1,
                            "misskey rate limit persisted"
                        );
                        return Err(PlatformError::RateLimited { retry_after: delay });
                    }
                    tracing::debug!(
                        endpoint,
                        attempt,
                        delay_ms = delay.as_millis() as u64,
                        "misskey rate limited, backing off"
                    );
                    tokio::time::sleep(delay).await;
                    attempt += 1;
                }
                other => return other,
            }
        }
    }

    async fn read(
        &self,
        endpoint: &str,
        response: Result<reqwest::Response, reqwest::Error>,
    ) -> Result<Vec<u8>, PlatformError> {
        let response = response.map_err(|err| self.transport(endpoint, err))?;
        let status = response.status().as_u16();
        let bytes = response
            .bytes()
            .await
            .map_err(|err| self.transport(endpoint, err))?;
        if (200..300).contains(&status) {
            tracing::trace!(endpoint, status, "misskey call succeeded");
            return Ok(bytes.to_vec());
        }
        let error = map_error(status, &bytes, self.token.expose());
        tracing::debug!(endpoint, status, error = %error, "misskey call failed");
        Err(error)
    }

    fn transport(&self, endpoint: &str, err: reqwest::Error) -> PlatformError {
        let err = err.without_url();
        let mut message = format!("{endpoint}: {err}");
        let mut source = std::error::Error::source(&err);
        while let Some(cause) = source {
            message.push_str(": ");
            message.push_str(&cause.to_string());
            source = cause.source();
        }
        PlatformError::Transport(self.scrub(&message))
    }
}

fn part_with_mime(
    bytes: Vec<u8>,
    filename: &str,
    mime: &str,
) -> Result<reqwest::multipart::Part, reqwest::Error> {
    reqwest::multipart::Part::bytes(bytes)
        .file_name(filename.to_owned())
        .mime_str(mime)
}

/// Replaces every occurrence of `token` in `text` with `***` (no-op for an empty token).
pub fn scrub(text: &str, token: &str) -> String {
    if token.is_empty() {
        text.to_owned()
    } else {
        text.replace(token, crate::config::MASK)
    }
}

/// Maps an error answer (`status`, raw `body`) onto a [`PlatformError`]. Rate limits come back
/// with a zero `retry_after`; the retry loop fills in its back-off.
pub fn map_error(status: u16, body: &[u8], token: &str) -> PlatformError {
    let info = serde_json::from_slice::<ErrorBody>(body)
        .map(|body| body.error)
        .unwrap_or_default();
    let code = info.code.clone();
    let fallback = if body.is_empty() {
        "no error details"
    } else {
        "unexpected error body"
    };
    let message = scrub(info.message.as_deref().unwrap_or(fallback), token);
    let code_str = code.as_deref().unwrap_or("");
    if status == 429 || code_str == "RATE_LIMIT_EXCEEDED" {
        return PlatformError::RateLimited {
            retry_after: Duration::ZERO,
        };
    }
    if code_str.starts_with("NO_SUCH_") || (status == 404 && code.is_none()) {
        return PlatformError::NotFound(format!(
            "{message} ({})",
            code.as_deref().unwrap_or("404")
        ));
    }
    if AUTH_CODES.contains(&code_str) || (code.is_none() && matches!(status, 401 | 403)) {
        return PlatformError::Forbidden(format!(
            "{message} ({})",
            code.as_deref().unwrap_or("HTTP error")
        ));
    }
    PlatformError::Api {
        status,
        code,
        message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(code: &str, message: &str) -> Vec<u8> {
        serde_json::to_vec(&serde_json::json!({
            "error": {"message": message, "code": code, "id": "x", "kind": "client"}
        }))
        .unwrap_or_default()
    }

    #[test]
    fn misskey_errors_map_to_platform_errors() {
        assert!(matches!(
            map_error(
                429,
                &body("RATE_LIMIT_EXCEEDED", "Rate limit exceeded."),
                "tok-abc123"
            ),
            PlatformError::RateLimited { .. }
        ));
        assert!(matches!(
            map_error(400, &body("RATE_LIMIT_EXCEEDED", "x"), "tok-abc123"),
            PlatformError::RateLimited { .. }
        ));
        assert_eq!(
            map_error(400, &body("NO_SUCH_NOTE", "No such note."), "tok-abc123"),
            PlatformError::NotFound("No such note. (NO_SUCH_NOTE)".into())
        );
        assert!(matches!(
            map_error(400, &body("NO_SUCH_USER", "No such user."), "tok-abc123"),
            PlatformError::NotFound(_)
        ));
        for code in [
            "AUTHENTICATION_FAILED",
            "CREDENTIAL_REQUIRED",
            "PERMISSION_DENIED",
        ] {
            assert!(matches!(
                map_error(401, &body(code, "no"), "tok-abc123"),
                PlatformError::Forbidden(_)
            ));
        }
        assert!(matches!(
            map_error(403, b"", "tok-abc123"),
            PlatformError::Forbidden(_)
        ));
        assert_eq!(
            map_error(400, &body("INVALID_PARAM", "Invalid param."), "tok-abc123"),
            PlatformError::Api {
                status: 400,
                code: Some("INVALID_PARAM".into()),
                message: "Invalid param.".into()
            }
        );
        let err = map_error(502, b"<html>bad gateway</html>", "tok-abc123");
        assert!(err.is_retryable());
        assert!(matches!(
            err,
            PlatformError::Api {
                status: 502,
                code: None,
                ..
            }
        ));
    }

    #[test]
    fn the_token_is_scrubbed_from_error_messages() {
        let err = map_error(
            500,
            &body("INTERNAL_ERROR", "bad token sekrit123 here"),
            "sekrit123",
        );
        assert!(!err.to_string().contains("sekrit123"), "{err}");
        assert_eq!(
            scrub("wss://h/streaming?i=abc", "abc"),
            "wss://h/streaming?i=***"
        );
        assert_eq!(scrub("nothing", ""), "nothing");
    }

    #[test]
    fn debug_does_not_print_the_token() {
        let api = Api::new(
            reqwest::Client::new(),
            "example.org",
            true,
            Secret::new("tok-9f8e7d"),
            RetryPolicy::default(),
            Duration::from_secs(5),
        );
        assert!(!format!("{api:?}").contains("tok-9f8e7d"));
        assert_eq!(api.base, "https://example.org/api/");
    }
}
