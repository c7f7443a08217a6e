//! One attachment download: every hop checked by [`Origins::check`] (redirects are followed
//! here, one at a time, never by the HTTP client), names resolved by [`PublicResolver`], the
//! body read to a byte cap (a `Content-Length` over it stops the download before the body), the
//! whole download — redirects included — under one time-out. No proxy from the environment, no
//! cookies, no credentials: a URL from a stranger's message is fetched as an anonymous GET.

use std::time::Duration;

use reqwest::{StatusCode, Url, header};

use super::origin::{NonPublicAddress, NotAllowed, Origins, PublicResolver};

/// Redirects followed before giving up.
const MAX_REDIRECTS: usize = 5;

/// Why a download produced no file.
#[derive(Debug, thiserror::Error)]
pub enum DownloadError {
    /// The URL (or a redirect's target) is not one the platform's files come from.
    #[error(transparent)]
    NotAllowed(#[from] NotAllowed),
    /// A public host's name resolved only to non-public addresses.
    #[error("the link's server has no public address")]
    PrivateAddress,
    /// More than the cap.
    #[error("larger than {limit} bytes")]
    TooBig {
        /// The cap.
        limit: u64,
    },
    /// Not done within the time-out.
    #[error("the download took too long")]
    Timeout,
    /// The server answered with an error status.
    #[error("the server answered {0}")]
    Status(StatusCode),
    /// Redirected more than `MAX_REDIRECTS` times.
    #[error("too many redirects")]
    Redirects,
    /// A redirect without a usable `Location`.
    #[error("the server redirected nowhere")]
    BadRedirect,
    /// Connection or protocol failure.
    #[error("the download failed")]
    Failed,
}

/// The HTTP client attachments are fetched with.
#[derive(Debug, Clone)]
pub struct Downloader {
    client: reqwest::Client,
    timeout: Duration,
}

impl Downloader {
    /// A client that resolves through `resolver` and gives each download `timeout`.
    pub fn new(resolver: PublicResolver, timeout: Duration) -> Result<Self, reqwest::Error> {
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .dns_resolver(std::sync::Arc::new(resolver))
            .connect_timeout(timeout.min(Duration::from_secs(10)))
            .user_agent(concat!("air-friends/", env!("CARGO_PKG_VERSION")))
            .build()?;
        Ok(Downloader { client, timeout })
    }

    /// Downloads `url` (allowed by `origins`) with at most `limit` bytes of body.
    pub async fn get(
        &self,
        origins: &Origins,
        url: &str,
        limit: u64,
    ) -> Result<Vec<u8>, DownloadError> {
        tokio::time::timeout(self.timeout, self.follow(origins, url, limit))
            .await
            .unwrap_or(Err(DownloadError::Timeout))
    }

    async fn follow(
        &self,
        origins: &Origins,
        url: &str,
        limit: u64,
    ) -> Result<Vec<u8>, DownloadError> {
        let mut url = Url::parse(url).map_err(|_| NotAllowed::NotHttp)?;
        for _ in 0..=MAX_REDIRECTS {
            origins.check(&url)?;
            let mut response = self
                .client
                .get(url.clone())
                .send()
                .await
                .map_err(classify)?;
            let status = response.status();
            if status.is_redirection() {
                let next = response
                    .headers()
                    .get(header::LOCATION)
                    .and_then(|l| l.to_str().ok())
                    .and_then(|l| url.join(l).ok())
                    .ok_or(DownloadError::BadRedirect)?;
                url = next;
                continue;
            }
            if !status.is_success() {
                return Err(DownloadError::Status(status));
            }
            if response.content_length().is_some_and(|n| n > limit) {
                return Err(DownloadError::TooBig { limit });
            }
            let mut body = Vec::new();
            while let Some(chunk) = response.chunk().await.map_err(classify)? {
                if body.len() as u64 + chunk.len() as u64 > limit {
                    return Err(DownloadError::TooBig { limit });
                }
                body.extend_from_slice(&chunk);
            }
            return Ok(body);
        }
        Err(DownloadError::Redirects)
    }
}

/// A client error in our terms: the resolver's refusal is told apart from other failures.
fn classify(e: reqwest::Error) -> DownloadError {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&e);
    while let Some(s) = source {
        if s.is::<NonPublicAddress>() {
            return DownloadError::PrivateAddress;
        }
        source = s.source();
    }
    if e.is_timeout() {
        DownloadError::Timeout
    } else {
        DownloadError::Failed
    }
}
