//! `ANY /llm/{session_id}/{provider}/{*rest}`: the gateway route.
//!
//! Checks, in this order (the first failure answers; see [`GatewayError`] for the statuses):
//! 1.–3. [`crate::session::authenticate`], as for the Skill API and with its statuses
//!    ([`crate::skill_api::auth::auth_status`]): on a session socket the socket's session must
//!    be `{session_id}` (403), before the lookup, so a hijacked agent learns nothing about
//!    other sessions; `{session_id}` is a live session (401); the key the client presented —
//!    `Authorization: Bearer X` and/or `x-api-key: X` — is that session's caller token,
//!    compared in constant time (401 when absent, 403 when wrong); and a turn is open: between
//!    the turns of a kept agent the session is closed (409 `NO_TURN_OPEN`), so a process the
//!    agent left running spends nothing;
//! 4. `{provider}` is configured (404 `UNKNOWN_PROVIDER`) and served — the provider of a model
//!    the operator chose, or one of `agent.extraProviders` (404 `PROVIDER_NOT_SERVED`);
//! 5. `{rest}` stays under its `baseUrl` (400: no dot segments or encoded slashes), and the
//!    method, `{rest}` and the absent query are one of the allowed endpoints
//!    ([`super::endpoints`]; 404 `ENDPOINT_NOT_ALLOWED`);
//! 6. its key is set in the daemon's environment (503);
//! 7. the user's daily token budgets (in the session's place, and overall) and the global one
//!    are not used up (429);
//! 8. the body is within `max_request_body` (413), and a chat-completions body is a JSON object
//!    (400 `BAD_REQUEST_BODY`), given `stream_options.include_usage` when it streams
//!    ([`super::request_body`]).
//!
//! Nothing reaches the upstream, and no key is attached, before every check passed. Then the
//! request is forwarded to `{baseUrl}/{rest}` with the real key in the provider's header. Of
//! the client's headers only `content-type`, `accept`, `content-length` and the provider's
//! `passHeaders` go upstream — never its `authorization`/`x-api-key` (the caller token),
//! cookies or `accept-encoding` (so the response stays readable for metering). Other request
//! bodies stream up and the response streams down chunk by chunk, never buffered; status,
//! `content-type` and the other end-to-end response headers are preserved.
//!
//! Upstream failures are counted in `llm_requests_total{outcome}`, and the classified ones (key
//! unset or rejected, rate limited, model unknown, unreachable, timed out, a server error, a
//! budget used up) go to the provider's health — one warn record when the class changes, the
//! turn ended after a grace when all its requests fail ([`super::health`]) — and to the
//! gateway's observer ([`super::observer`]); each request is a debug record. The client gets
//! the upstream's status (502 when unreachable, 504 on a timeout). An upstream error body is read (bounded) and the key scrubbed from it
//! before it is relayed, in case a provider echoes the key back.

mod upstream;

use axum::Json;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use reqwest::Url;
use serde_json::json;
use tokio::time::Instant;

use super::Gateway;
use super::budget::BudgetExceeded;
use super::endpoints::Endpoint;
use super::health::ModelFailure;
use super::meter::Recording;
use super::metrics::{Outcome, UNKNOWN_PROVIDER_LABEL};
use super::observer::{ProblemKind, ProviderFailure};
use super::providers::Provider;
use super::request_body::{self, Outgoing, SentBytes};
use crate::session::{AuthFailure, PlaceGrant, SessionHandle, authenticate};
use crate::skill_api::auth::{auth_status, presented};
use crate::store::WorkspaceKey;

/// Why the gateway itself answered instead of the upstream. Each variant maps to exactly one
/// status and code ([`status`](Self::status), [`code`](Self::code)); the body never carries
/// more than the variant's fixed message.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    /// The path is not `/llm/<session>/<provider>/<path>`.
    #[error("the path must be /llm/<session>/<provider>/<path>")]
    BadRoute,
    /// The request may not act for the session it names (another session's channel, no such
    /// session, a missing or wrong key, no turn open).
    #[error("{0}")]
    Auth(AuthFailure),
    /// `{provider}` is not configured.
    #[error("no such provider")]
    UnknownProvider,
    /// `{provider}` is configured but not served: no model the operator chose is its, and
    /// `agent.extraProviders` does not name it.
    #[error("this provider is not served")]
    ProviderNotServed,
    /// The path after the provider could climb out of its base URL.
    #[error("the path is not allowed")]
    BadPath,
    /// The method and path (and query) are not an endpoint the gateway forwards.
    #[error("the gateway does not forward this endpoint")]
    EndpointNotAllowed,
    /// A chat-completions body is not a JSON object (or broke off while being read).
    #[error("the request body must be a JSON object")]
    BadRequestBody,
    /// The provider's key variable is unset in the daemon's environment.
    #[error("the daemon has no key for this provider")]
    ProviderKeyNotSet {
        /// The variable to set (logged, not sent).
        env: String,
    },
    /// A daily budget is used up.
    #[error("the daily token budget is used up")]
    OverBudget(BudgetExceeded),
    /// The request body exceeds `max_request_body`.
    #[error("the request body is too large")]
    BodyTooLarge,
    /// The upstream could not be connected to.
    #[error("the model provider is unreachable")]
    Unreachable {
        /// The connection error (logged, not sent).
        detail: String,
    },
    /// The upstream did not answer in time.
    #[error("the model provider did not answer in time")]
    TimedOut {
        /// The error (logged, not sent).
        detail: String,
    },
    /// The upstream request failed otherwise.
    #[error("the request to the model provider failed")]
    UpstreamFailed {
        /// The error (logged, not sent).
        detail: String,
    },
    /// The gateway itself failed.
    #[error("internal error")]
    Internal {
        /// The cause (logged, not sent).
        detail: String,
    },
}

impl GatewayError {
    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        match self {
            GatewayError::BadRoute | GatewayError::BadPath | GatewayError::BadRequestBody => {
                StatusCode::BAD_REQUEST
            }
            GatewayError::Auth(failure) => auth_status(*failure),
            GatewayError::UnknownProvider
            | GatewayError::ProviderNotServed
            | GatewayError::EndpointNotAllowed => StatusCode::NOT_FOUND,
            GatewayError::ProviderKeyNotSet { .. } => StatusCode::SERVICE_UNAVAILABLE,
            GatewayError::OverBudget(_) => StatusCode::TOO_MANY_REQUESTS,
            GatewayError::BodyTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            GatewayError::Unreachable { .. } | GatewayError::UpstreamFailed { .. } => {
                StatusCode::BAD_GATEWAY
            }
            GatewayError::TimedOut { .. } => StatusCode::GATEWAY_TIMEOUT,
            GatewayError::Internal { .. } => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The machine-readable code in the body (`error.code`).
    pub fn code(&self) -> &'static str {
        match self {
            GatewayError::BadRoute => "BAD_ROUTE",
            GatewayError::Auth(failure) => failure.code(),
            GatewayError::UnknownProvider => "UNKNOWN_PROVIDER",
            GatewayError::ProviderNotServed => "PROVIDER_NOT_SERVED",
            GatewayError::BadPath => "BAD_PATH",
            GatewayError::EndpointNotAllowed => "ENDPOINT_NOT_ALLOWED",
            GatewayError::BadRequestBody => "BAD_REQUEST_BODY",
            GatewayError::ProviderKeyNotSet { .. } => "PROVIDER_KEY_NOT_SET",
            GatewayError::OverBudget(_) => "BUDGET_EXCEEDED",
            GatewayError::BodyTooLarge => "BODY_TOO_LARGE",
            GatewayError::Unreachable { .. } => "UPSTREAM_UNREACHABLE",
            GatewayError::TimedOut { .. } => "UPSTREAM_TIMEOUT",
            GatewayError::UpstreamFailed { .. } => "UPSTREAM_FAILED",
            GatewayError::Internal { .. } => "INTERNAL",
        }
    }

    fn outcome(&self) -> Outcome {
        match self {
            GatewayError::OverBudget(_) => Outcome::OverBudget,
            GatewayError::ProviderKeyNotSet { .. } => Outcome::NoKey,
            GatewayError::Unreachable { .. } => Outcome::Unreachable,
            GatewayError::TimedOut { .. } => Outcome::TimedOut,
            GatewayError::UpstreamFailed { .. } | GatewayError::Internal { .. } => {
                Outcome::UpstreamError
            }
            GatewayError::BadRoute
            | GatewayError::Auth(_)
            | GatewayError::UnknownProvider
            | GatewayError::ProviderNotServed
            | GatewayError::BadPath
            | GatewayError::EndpointNotAllowed
            | GatewayError::BadRequestBody
            | GatewayError::BodyTooLarge => Outcome::Refused,
        }
    }
}

impl IntoResponse for GatewayError {
    /// An OpenAI-style error body, so the agent's SDK shows the message.
    fn into_response(self) -> Response {
        let body = json!({"error": {
            "message": self.to_string(),
            "type": "gateway_error",
            "code": self.code(),
        }});
        (self.status(), Json(body)).into_response()
    }
}

/// A refused request with what its log line names.
struct Refusal {
    error: GatewayError,
    session_id: Option<String>,
    provider: Option<String>,
    /// The session, once authenticated (its turn is told of a model failure).
    session: Option<SessionHandle>,
}

impl From<GatewayError> for Refusal {
    fn from(error: GatewayError) -> Self {
        Self {
            error,
            session_id: None,
            provider: None,
            session: None,
        }
    }
}

/// The route handler: every refusal is logged and counted here, once.
pub(crate) async fn proxy(State(gateway): State<Gateway>, request: Request) -> Response {
    let started = Instant::now();
    match forward(&gateway, request, started).await {
        Ok(response) => response,
        Err(refusal) => {
            let provider = refusal
                .provider
                .as_deref()
                .unwrap_or(UNKNOWN_PROVIDER_LABEL);
            let session_id = refusal.session_id.as_deref().unwrap_or("");
            let error = &refusal.error;
            gateway
                .inner
                .metrics
                .record_request(provider, error.outcome(), started.elapsed());
            let kind = match error {
                GatewayError::ProviderKeyNotSet { .. } => Some(ProblemKind::KeyNotSet),
                GatewayError::Unreachable { .. } => Some(ProblemKind::Unreachable),
                GatewayError::TimedOut { .. } => Some(ProblemKind::TimedOut),
                GatewayError::UpstreamFailed { .. } => Some(ProblemKind::ServerError),
                GatewayError::OverBudget(_) => Some(ProblemKind::BudgetExhausted),
                _ => None,
            };
            if let Some(kind) = kind {
                failed(
                    &gateway,
                    refusal.session.as_ref(),
                    provider,
                    kind,
                    (None, error.status().as_u16()),
                );
            }
            match error {
                // Logged (with the limit) by the budget check itself.
                GatewayError::OverBudget(_) => {}
                GatewayError::Internal { detail } => tracing::error!(
                    provider,
                    session_id,
                    detail = %detail,
                    "model gateway request failed inside the gateway"
                ),
                GatewayError::ProviderNotServed => tracing::warn!(
                    provider,
                    session_id,
                    code = error.code(),
                    "model gateway request refused: the provider is not served; name its model in agent.model or the provider in agent.extraProviders"
                ),
                // The provider's health logs a class once when it starts (gateway::health);
                // each request is a debug record.
                GatewayError::ProviderKeyNotSet { env } => tracing::debug!(
                    provider,
                    session_id,
                    env = %env,
                    "model provider key not set: set this variable in the daemon's environment and restart"
                ),
                GatewayError::Unreachable { detail }
                | GatewayError::TimedOut { detail }
                | GatewayError::UpstreamFailed { detail } => tracing::debug!(
                    provider,
                    session_id,
                    status = error.status().as_u16(),
                    detail = %detail,
                    "model provider request failed"
                ),
                _ => tracing::warn!(
                    provider,
                    session_id,
                    status = error.status().as_u16(),
                    code = error.code(),
                    "model gateway request refused"
                ),
            }
            refusal.error.into_response()
        }
    }
}

/// A model request failed for `kind`: the gateway's observer (if any) is told when the
/// provider is configured, and the provider's health and the session's turn note it (see
/// [`super::health`]). `status` is the upstream's status when it answered, and the status the
/// agent got.
fn failed(
    gateway: &Gateway,
    session: Option<&SessionHandle>,
    provider_id: &str,
    kind: ProblemKind,
    (upstream_status, status): (Option<u16>, u16),
) {
    let inner = &gateway.inner;
    inner.health.failed(
        session,
        ModelFailure {
            kind,
            provider: provider_id.to_owned(),
            status: Some(status),
        },
    );
    let (Some(observer), Some(provider)) = (inner.observer.get(), inner.providers.get(provider_id))
    else {
        return;
    };
    observer.provider_failed(&ProviderFailure {
        session_id: session.map_or_else(String::new, |s| s.id().as_str().to_owned()),
        provider: provider.id.clone(),
        key_env: provider.key_env.clone(),
        anonymous: provider.anonymous,
        base_url: provider.base_url.to_string(),
        kind,
        status: upstream_status,
    });
}

/// Splits a raw path into `(session id, provider, rest)`; `rest` stays percent-encoded.
fn split_route(path: &str) -> Option<(&str, &str, &str)> {
    let tail = path.strip_prefix("/llm/")?;
    let (session_id, tail) = tail.split_once('/')?;
    let (provider, rest) = tail.split_once('/')?;
    Some((session_id, provider, rest))
}

/// The checks in order (see the module's header), then the request upstream and its answer
/// back: relayed with the key scrubbed on an error status, else streamed through the meter.
async fn forward(
    gateway: &Gateway,
    request: Request,
    started: Instant,
) -> Result<Response, Refusal> {
    let inner = &gateway.inner;
    let (parts, body) = request.into_parts();
    let path = parts.uri.path();
    let (session_id, provider_id, rest) = split_route(path).ok_or(GatewayError::BadRoute)?;
    // A configured provider's id is a safe label; anything else is `unknown`.
    let label = inner.providers.get(provider_id).map(|p| p.id.as_str());
    let refuse_as = |error: GatewayError, session: Option<&SessionHandle>| Refusal {
        error,
        session_id: Some(session_id.to_owned()),
        provider: label.map(str::to_owned),
        session: session.cloned(),
    };

    let session = authenticate(
        &inner.sessions,
        session_id,
        &presented(&parts.headers, &parts.extensions),
    )
    .map_err(|failure| refuse_as(GatewayError::Auth(failure), None))?;
    let refuse = |error: GatewayError| refuse_as(error, Some(&session));

    let (provider, endpoint, url) = target(gateway, &parts, provider_id, rest).map_err(refuse)?;
    let context = session.context();
    let workspace = WorkspaceKey::new(
        context.origin.platform.as_str(),
        context.origin.user_id.as_str(),
    )
    .ok();
    check_budget(gateway, workspace.as_ref(), &context.place)
        .await
        .map_err(refuse)?;
    let limit = inner.settings.max_request_body;
    request_body::check_declared_length(&parts.headers, limit).map_err(refuse)?;
    let outgoing = match endpoint {
        Endpoint::ChatCompletions => Outgoing::Whole(
            request_body::chat_completions(body, limit)
                .await
                .map_err(refuse)?,
        ),
        _ => Outgoing::Streamed(body),
    };

    let sent = SentBytes::default();
    let upstream = upstream::send(
        inner,
        parts.method.clone(),
        &parts.headers,
        outgoing,
        provider,
        url,
        &sent,
    )
    .await
    .map_err(refuse)?;
    if upstream.status().as_u16() >= 400 {
        return Ok(upstream::relay_error(gateway, upstream, provider, &session, started).await);
    }
    inner.health.succeeded(&session);
    let recording = Recording {
        gateway: gateway.clone(),
        provider: provider.id.clone(),
        session_id: session_id.to_owned(),
        session: session.clone(),
        workspace,
        started,
        model_call: endpoint.is_model_call(),
        sent,
    };
    Ok(upstream::metered(upstream, recording))
}

/// Checks 4 to 6 of the module's header: the served provider, the upstream URL of `rest` under
/// its base URL, the allowed endpoint, and the provider's key.
fn target<'g>(
    gateway: &'g Gateway,
    parts: &Parts,
    provider_id: &str,
    rest: &str,
) -> Result<(&'g Provider, Endpoint, Url), GatewayError> {
    let provider = gateway
        .inner
        .providers
        .get(provider_id)
        .ok_or(GatewayError::UnknownProvider)?;
    if !provider.served {
        return Err(GatewayError::ProviderNotServed);
    }
    let url = provider.upstream_url(rest).ok_or(GatewayError::BadPath)?;
    let endpoint = Endpoint::find(&parts.method, rest, parts.uri.query())
        .ok_or(GatewayError::EndpointNotAllowed)?;
    if !provider.keyless && provider.key.is_none() {
        return Err(GatewayError::ProviderKeyNotSet {
            env: provider.key_env.clone(),
        });
    }
    Ok((provider, endpoint, url))
}

/// The daily budgets of the session's user (when it has a workspace) in its place and
/// overall, and the global one.
async fn check_budget(
    gateway: &Gateway,
    workspace: Option<&WorkspaceKey>,
    place: &PlaceGrant,
) -> Result<(), GatewayError> {
    let inner = &gateway.inner;
    if let Some(workspace) = workspace {
        inner
            .budget
            .check_in(&inner.store, workspace, place)
            .await
            .map_err(GatewayError::OverBudget)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_split_into_session_provider_and_raw_rest() {
        assert_eq!(
            split_route("/llm/abc/openai/chat/completions"),
            Some(("abc", "openai", "chat/completions"))
        );
        assert_eq!(
            split_route("/llm/abc/p/a%2Fb"),
            Some(("abc", "p", "a%2Fb")),
            "rest stays encoded"
        );
        assert_eq!(split_route("/llm/abc"), None);
        assert_eq!(split_route("/api/skill/x"), None);
    }

    #[test]
    fn every_error_maps_to_its_status() {
        let cases = [
            (GatewayError::Auth(AuthFailure::SessionNotFound), 401),
            (GatewayError::Auth(AuthFailure::TokenMissing), 401),
            (GatewayError::Auth(AuthFailure::TokenMismatch), 403),
            (GatewayError::Auth(AuthFailure::WrongChannel), 403),
            (GatewayError::UnknownProvider, 404),
            (GatewayError::ProviderNotServed, 404),
            (GatewayError::Auth(AuthFailure::NoTurnOpen), 409),
            (GatewayError::EndpointNotAllowed, 404),
            (GatewayError::BadPath, 400),
            (GatewayError::BadRequestBody, 400),
            (GatewayError::ProviderKeyNotSet { env: "K".into() }, 503),
            (GatewayError::BodyTooLarge, 413),
            (
                GatewayError::Unreachable {
                    detail: String::new(),
                },
                502,
            ),
            (
                GatewayError::TimedOut {
                    detail: String::new(),
                },
                504,
            ),
            (
                GatewayError::Internal {
                    detail: String::new(),
                },
                500,
            ),
        ];
        for (error, status) in cases {
            assert_eq!(error.status().as_u16(), status, "{error:?}");
        }
    }
}
