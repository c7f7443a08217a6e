//! The response tap: a stream wrapper that hands every chunk on the moment it arrives and lets
//! the [`UsageParser`] look at it on the way, then, when the response ends (completely, broken,
//! or dropped because the client went away), charges it exactly once: the usage it reported,
//! and for a model call an estimate of what it did not report ([`super::estimate`]) — so an
//! answer without usage, or one the agent hung up on before its usage arrived, still counts
//! against the budgets.
//!
//! Counting: `llm_tokens_total` (reported), `llm_estimated_tokens_total` (estimated) and
//! `llm_requests_total`/`llm_request_duration_seconds` at once; the session's tally and the
//! per-user row (`Store::add_llm_usage`, reported plus estimated) in a task on the gateway's
//! tracker, because a `Drop` cannot await. [`Gateway::drain`](super::Gateway::drain) waits for
//! those writes.

use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::Bytes;
use chrono::Utc;
use futures_util::Stream;
use tokio::time::Instant;

use super::Gateway;
use super::estimate::Charge;
use super::metrics::Outcome;
use super::request_body::SentBytes;
use super::usage::{Reading, UsageParser};
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
    /// A model call is charged, by estimate when it reports no usage; other endpoints are not.
    pub(crate) model_call: bool,
    /// The request body's bytes that went upstream (the input estimate).
    pub(crate) sent: SentBytes,
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
    fn count(self, reading: Reading, end: End) {
        let inner = &self.gateway.inner;
        let usage = &reading.usage;
        // Outside a model call nothing is estimated: no bytes sent, no answer tokens.
        let (sent, answer) = if self.model_call {
            (self.sent.get(), reading.answer_tokens)
        } else {
            (0, 0)
        };
        let charge = Charge::of(usage, sent, answer, matches!(end, End::Complete));
        let outcome = match end {
            End::Complete if charge.is_estimated() => Outcome::Estimated,
            End::Complete => Outcome::Ok,
            End::Broken => Outcome::StreamError,
            End::Dropped => Outcome::Aborted,
        };
        let elapsed = self.started.elapsed();
        inner
            .metrics
            .record_request(&self.provider, outcome, elapsed);
        let model = usage.model.as_deref();
        self.log(&charge, outcome, model, elapsed);
        if usage.is_metered() {
            let reported = charge.reported;
            inner
                .metrics
                .record_tokens(model, reported.input, reported.output);
        }
        if charge.is_estimated() {
            let estimated = charge.estimated;
            inner
                .metrics
                .record_estimated_tokens(model, estimated.input, estimated.output);
        }
        if !usage.is_metered() && !charge.is_estimated() {
            return;
        }
        let total = charge.total();
        self.session.with_state(|s| {
            s.model_tokens = s.model_tokens.saturating_add(total.total());
        });
        let Some(workspace) = self.workspace else {
            return;
        };
        let store = inner.store.clone();
        let day = Utc::now().date_naive();
        let session_id = self.session_id;
        let place = self.session.context().place.name.clone();
        inner.tasks.spawn(async move {
            if let Err(error) = store
                .add_llm_usage_in(&workspace, &place, day, total.input, total.output)
                .await
            {
                tracing::warn!(
                    %workspace,
                    session_id = %session_id,
                    error = %error,
                    "model usage could not be stored; today's budget undercounts it"
                );
            }
        });
    }

    /// One line per finished response: a warning when it broke or was charged an estimate.
    fn log(
        &self,
        charge: &Charge,
        outcome: Outcome,
        model: Option<&str>,
        elapsed: std::time::Duration,
    ) {
        if outcome == Outcome::StreamError {
            tracing::warn!(
                provider = %self.provider,
                session_id = %self.session_id,
                cause = "stream broke",
                "model response ended early"
            );
        }
        if charge.is_estimated() {
            tracing::warn!(
                provider = %self.provider,
                session_id = %self.session_id,
                outcome = outcome.as_str(),
                estimated_input_tokens = charge.estimated.input,
                estimated_output_tokens = charge.estimated.output,
                "model response reported no (or not all) token usage: charged an estimate"
            );
        } else if outcome != Outcome::StreamError {
            tracing::debug!(
                provider = %self.provider,
                session_id = %self.session_id,
                model = model.unwrap_or(""),
                input_tokens = charge.reported.input,
                output_tokens = charge.reported.output,
                outcome = outcome.as_str(),
                elapsed_ms = u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX),
                "model response finished"
            );
        }
    }
}
