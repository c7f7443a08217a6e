//! The response tap: a stream wrapper that hands every chunk on the moment it arrives and lets
//! the [`UsageParser`] look at it on the way, then, when the response ends (completely, broken,
//! or dropped because the client went away), counts what it read exactly once.
//!
//! Counting: `llm_tokens_total` and `llm_requests_total`/`llm_request_duration_seconds` at once;
//! the per-user row (`Store::add_llm_usage`) in a task on the gateway's tracker, because a
//! `Drop` cannot await. [`Gateway::drain`](super::Gateway::drain) waits for those writes.

use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::Bytes;
use chrono::Utc;
use futures_util::Stream;
use tokio::time::Instant;

use super::Gateway;
use super::metrics::Outcome;
use super::usage::{Usage, UsageParser};
use crate::session::SessionHandle;
use crate::store::WorkspaceKey;

type Upstream = Pin<Box<dyn Stream<Item = reqwest::Result<Bytes>> + Send>>;

/// What is needed to count a response once it ended.
pub(crate) struct Recording {
    pub(crate) gateway: Gateway,
    pub(crate) provider: String,
    pub(crate) session_id: String,
    /// The session: its turn's tally of model tokens (`SessionState::model_tokens`).
    pub(crate) session: SessionHandle,
    /// Whose usage this is; `None` when the session's user makes no valid workspace key.
    pub(crate) workspace: Option<WorkspaceKey>,
    pub(crate) started: Instant,
    /// A `POST` (a model call) is expected to report usage; other methods are not.
    pub(crate) expects_usage: bool,
}

/// How the stream ended.
#[derive(Clone, Copy)]
enum End {
    Complete,
    Broken,
    Dropped,
}

/// The metered response body stream.
pub(crate) struct Metered {
    inner: Upstream,
    parser: Option<UsageParser>,
    recording: Option<Recording>,
}

impl Metered {
    pub(crate) fn new(inner: Upstream, parser: UsageParser, recording: Recording) -> Self {
        Self {
            inner,
            parser: Some(parser),
            recording: Some(recording),
        }
    }

    fn end(&mut self, end: End) {
        let (Some(parser), Some(recording)) = (self.parser.take(), self.recording.take()) else {
            return;
        };
        recording.count(parser.finish(), end);
    }
}

impl Stream for Metered {
    type Item = reqwest::Result<Bytes>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let polled = self.inner.as_mut().poll_next(cx);
        match &polled {
            Poll::Ready(Some(Ok(chunk))) => {
                if let Some(parser) = self.parser.as_mut() {
                    parser.feed(chunk);
                }
            }
            Poll::Ready(Some(Err(_))) => self.end(End::Broken),
            Poll::Ready(None) => self.end(End::Complete),
            Poll::Pending => {}
        }
        polled
    }
}

impl Drop for Metered {
    fn drop(&mut self) {
        self.end(End::Dropped);
    }
}

impl Recording {
    fn count(self, usage: Usage, end: End) {
        let inner = &self.gateway.inner;
        let outcome = match end {
            End::Complete if usage.is_metered() || !self.expects_usage => Outcome::Ok,
            End::Complete => Outcome::Unmetered,
            End::Broken => Outcome::StreamError,
            End::Dropped => Outcome::Aborted,
        };
        let elapsed = self.started.elapsed();
        inner
            .metrics
            .record_request(&self.provider, outcome, elapsed);
        let input = usage.input_tokens.unwrap_or(0);
        let output = usage.output_tokens.unwrap_or(0);
        let model = usage.model.as_deref();
        match outcome {
            Outcome::Unmetered => tracing::warn!(
                provider = %self.provider,
                session_id = %self.session_id,
                "model response reported no token usage: not metered, not counted against budgets"
            ),
            Outcome::StreamError => tracing::warn!(
                provider = %self.provider,
                session_id = %self.session_id,
                cause = "stream broke",
                "model response ended early"
            ),
            _ => tracing::debug!(
                provider = %self.provider,
                session_id = %self.session_id,
                model = model.unwrap_or(""),
                input_tokens = input,
                output_tokens = output,
                outcome = outcome.as_str(),
                elapsed_ms = u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX),
                "model response finished"
            ),
        }
        if !usage.is_metered() {
            return;
        }
        inner.metrics.record_tokens(model, input, output);
        self.session.with_state(|s| {
            s.model_tokens = s.model_tokens.saturating_add(input.saturating_add(output));
        });
        let Some(workspace) = self.workspace else {
            return;
        };
        let store = inner.store.clone();
        let day = Utc::now().date_naive();
        let session_id = self.session_id;
        inner.tasks.spawn(async move {
            if let Err(error) = store.add_llm_usage(&workspace, day, input, output).await {
                tracing::warn!(
                    %workspace,
                    session_id = %session_id,
                    error = %error,
                    "model usage could not be stored; today's budget undercounts it"
                );
            }
        });
    }
}
