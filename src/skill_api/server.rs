//! The HTTP server: routes, the request pipeline, audit events and metrics.
//!
//! `POST /api/skill/{name}` runs, in this order: parse + [`crate::session::authenticate`] (the
//! channel (403), the session (401), the caller token (401 missing, 403 wrong), an open turn
//! (409)) + touch (all in the [`AuthenticatedCall`] extractor) → resolve the skill
//! (404 `UNKNOWN_SKILL`; after authentication so unauthenticated callers learn nothing about
//! skills) → de-duplication → the one call pipeline ([`super::invoke`]: enabled (503
//! `SKILL_DISABLED`) and allowed for the session's purpose (403 `FORBIDDEN_CONTEXT`), the
//! doom-loop count, per-(skill, user) rate limit, schema validation, the handler (per-session
//! quotas live in handlers)) → audit event. Calls of a
//! skill with a doom-loop limit (`SkillHandler::stops_agent_at`) are counted right before the rate limit, so a
//! refused attempt still counts and a terminating one answers with `sessionTerminated`. For a
//! call that changes something, everything from the rate limit on runs in a task tracked by
//! [`SkillApiState`], detached from the HTTP request, so a disconnecting client neither cancels
//! a half-done platform action nor strands callers joined to it; a read-only call runs on the
//! request's own task (cheaper: no hand-over to another worker). A doom-loop termination requested during a call is fired when the response body has
//! been sent (or dropped), never before.

use std::any::Any;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::{Response as HttpResponse, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use http_body::{Frame, SizeHint};
use serde::Serialize;
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::time::Instant;
use tower_http::catch_panic::CatchPanicLayer;
use tracing::Instrument;

use super::auth::{AuthenticatedCall, CallRejection};
use super::dedup::{Claim, DedupCache, LeaderGuard, SharedOutcome};
use super::error::SkillError;
use super::handler::{CallContext, RegisteredSkill};
use super::invoke::invoke;
use super::listener::{ConnectionPolicy, run_listener};
use super::metrics::UNKNOWN_SKILL_LABEL;
use super::state::SkillApiState;
use crate::session::{SessionContext, SessionHandle};

/// Longest skill name echoed into logs (names are caller-controlled until resolved).
const MAX_LOGGED_NAME: usize = 64;

/// The Skill API router (state already applied), with the extra routes registered through
/// [`SkillApiState::with_extra_routes`] (the model gateway) merged in. The same router serves
/// the TCP listener and every session socket.
///
/// # Panics
///
/// Like [`Router::merge`]: if an extra route overlaps `/api/skill/{name}` or the extra router
/// has a fallback of its own (a composition error, caught by the first test that builds it).
pub fn router(state: SkillApiState) -> Router {
    let skill_routes = Router::new()
        .route(
            "/api/skill/{name}",
            post(skill_call).fallback(method_not_allowed),
        )
        .layer(CatchPanicLayer::custom(panic_response))
        .with_state(state.clone());
    let app = match state.extra_routes() {
        Some(extra) => skill_routes.merge(extra),
        None => skill_routes,
    };
    app.fallback(no_such_endpoint)
}

/// Serves the Skill API on `listener` until `shutdown` completes, then waits for in-flight
/// requests and detached skill executions to finish.
///
/// Connections (see [`SkillApiSettings`](super::SkillApiSettings)): at most `max_connections`
/// are served at once — beyond that the listener stops accepting and new clients wait in the
/// listen backlog for a free slot. Every connection is HTTP/1.1 with a header-read timeout: one
/// that has not sent a complete request head within `header_read_timeout` of opening, or of its
/// previous response, is closed. So an idle keep-alive client, a half-open socket or a client
/// trickling its head holds a slot for at most that long, and a waiting legitimate call gets a
/// slot within about one timeout (`tests/skill_api_connections.rs`). Bodies have their own
/// bound (`body_read_timeout`, in the authentication extractor). Each connection runs in a task
/// of this server's tracker; on shutdown every connection finishes its in-flight request and
/// closes, and `serve` returns once they all have. Session sockets
/// ([`SessionSocket`](super::SessionSocket)) are served by the same loop. With a serving
/// runtime ([`SkillApiState::serve_on`]) the loop and its connections run there.
pub async fn serve(
    listener: TcpListener,
    state: SkillApiState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let addr = listener.local_addr()?;
    let settings = state.settings().clone();
    tracing::info!(
        %addr,
        max_connections = settings.max_connections,
        header_read_timeout_ms = u64::try_from(settings.header_read_timeout.as_millis()).unwrap_or(u64::MAX),
        "skill api listening"
    );
    let policy = ConnectionPolicy {
        header_read_timeout: settings.header_read_timeout,
        max_connections: settings.max_connections,
        drain_timeout: None,
    };
    let app = router(state.clone());
    match state.runtime() {
        None => run_listener(listener, app, policy, shutdown).await,
        Some(runtime) => {
            // Registered with the serving runtime's reactor, so its readiness wakes that
            // runtime's thread, not the caller's.
            let listener = listener.into_std()?;
            let served = runtime.spawn(async move {
                let listener = TcpListener::from_std(listener)?;
                run_listener(listener, app, policy, shutdown).await;
                io::Result::Ok(())
            });
            served.await.map_err(io::Error::other)??;
        }
    }
    state.drain().await;
    tracing::info!(%addr, "skill api stopped");
    Ok(())
}

/// How a call's outcome was obtained, for the audit log.
#[derive(Clone, Copy, Debug)]
enum DedupStatus {
    /// Not looked up (rejected before de-duplication).
    None,
    /// Ran as the leader of its key.
    Miss,
    /// Joined an identical in-flight call.
    Joined,
    /// Served from the cache.
    Hit,
    /// Ran without de-duplication (non-cacheable skill or full cache).
    Bypass,
}

impl DedupStatus {
    fn as_str(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Miss => "miss",
            Self::Joined => "joined",
            Self::Hit => "hit",
            Self::Bypass => "bypass",
        }
    }
}

/// One audit event + metrics sample per call, emitted exactly once: by
/// [`finish`](Self::finish), or on drop when the client went away first (status 499).
///
/// It holds what the event names by reference where it can (the registered skill, the
/// session's handle and turn context) and copies nothing per call beyond the requested name.
struct Audit {
    state: SkillApiState,
    started: Instant,
    /// The name in the request path, as sent (truncated when logged).
    requested: String,
    /// The registered skill of that name, if any (its name is the metrics label).
    skill: Option<Arc<RegisteredSkill>>,
    /// The authenticated session and the context of its turn.
    session: Option<(SessionHandle, Arc<SessionContext>)>,
    /// The session a rejected call named (before or without authentication).
    named_session: Option<String>,
    body_bytes: usize,
    dedup: DedupStatus,
    terminate: bool,
    done: bool,
}

impl Audit {
    fn start(state: &SkillApiState, requested: String) -> Self {
        Self {
            state: state.clone(),
            started: Instant::now(),
            skill: state.skills().get(&requested),
            requested,
            session: None,
            named_session: None,
            body_bytes: 0,
            dedup: DedupStatus::None,
            terminate: false,
            done: false,
        }
    }

    fn finish(mut self, response: Response, code: &'static str) -> Response {
        self.done = true;
        self.emit(response.status(), code);
        response
    }

    fn finish_error(self, error: &SkillError) -> Response {
        let response = error.to_http().into_response();
        self.finish(response, error.code())
    }

    /// The requested name as logged: at most [`MAX_LOGGED_NAME`] characters.
    fn logged_name(&self) -> &str {
        crate::text::prefix_chars(&self.requested, MAX_LOGGED_NAME)
    }

    fn emit(&self, status: StatusCode, code: &'static str) {
        let elapsed = self.started.elapsed();
        let metric_skill = self
            .skill
            .as_ref()
            .map_or(UNKNOWN_SKILL_LABEL, |s| s.name());
        self.state
            .metrics()
            .record_call(metric_skill, status.as_u16(), code, elapsed);
        let outcome = if status.is_success() { "ok" } else { "error" };
        let (session_id, user, platform) = match &self.session {
            Some((session, context)) => (
                session.id().as_str(),
                context.origin.user_id.as_str(),
                context.origin.platform.as_str(),
            ),
            None => (self.named_session.as_deref().unwrap_or("-"), "-", "-"),
        };
        tracing::info!(
            name: "skill_call",
            session_id,
            skill = self.logged_name(),
            user,
            platform,
            outcome,
            code,
            status = status.as_u16(),
            duration_ms = u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX),
            dedup = self.dedup.as_str(),
            body_bytes = self.body_bytes,
            terminate = self.terminate,
            "skill_call"
        );
    }
}

impl Drop for Audit {
    fn drop(&mut self) {
        if !self.done {
            self.emit(
                StatusCode::from_u16(499).unwrap_or(StatusCode::BAD_REQUEST),
                "CLIENT_CLOSED",
            );
        }
    }
}

/// The body of a successful call, `{"data": ..., "success": true}`, serialised from the
/// outcome in place (the outcome is shared with joined callers and the cache, so it is
/// borrowed, never copied). Same bytes as a `serde_json` object of the two keys.
#[derive(Serialize)]
struct Success<'a> {
    data: &'a Value,
    success: bool,
}

async fn skill_call(
    State(state): State<SkillApiState>,
    name: Result<Path<String>, PathRejection>,
    call: Result<AuthenticatedCall, CallRejection>,
) -> Response {
    let name = name.map(|Path(n)| n).unwrap_or_default();
    let mut audit = Audit::start(&state, name);
    let call = match call {
        Ok(call) => call,
        Err(rejection) => {
            audit.named_session = rejection.session_id;
            audit.body_bytes = rejection.body_bytes;
            return audit.finish_error(&rejection.error);
        }
    };
    let context = call.session.context();
    audit.session = Some((call.session.clone(), Arc::clone(&context)));
    audit.body_bytes = call.body_bytes;

    let Some(skill) = audit.skill.clone() else {
        let error = SkillError::UnknownSkill {
            name: audit.logged_name().to_owned(),
            available: state.skills().names(),
        };
        return audit.finish_error(&error);
    };
    let (outcome, termination, dedup) = dispatch(&state, skill, call, &context).await;
    audit.dedup = dedup;
    audit.terminate = termination.is_some();
    let (response, code) = match outcome.as_ref() {
        Ok(data) => (
            axum::Json(Success {
                data,
                success: true,
            })
            .into_response(),
            "OK",
        ),
        Err(error) if termination.is_some() => (
            error.to_http().with_termination_notice().into_response(),
            error.code(),
        ),
        Err(error) => (error.to_http().into_response(), error.code()),
    };
    let response = match termination {
        Some(guard) => {
            let (parts, body) = response.into_parts();
            Response::from_parts(
                parts,
                Body::new(TerminateAfterBody {
                    inner: body,
                    _guard: guard,
                }),
            )
        }
        None => response,
    };
    audit.finish(response, code)
}

/// De-duplication, then execution. Returns the outcome, the pending termination (only for the
/// caller whose call actually ran) and how the outcome was obtained.
async fn dispatch(
    state: &SkillApiState,
    skill: Arc<RegisteredSkill>,
    call: AuthenticatedCall,
    context: &SessionContext,
) -> (SharedOutcome, Option<TerminationGuard>, DedupStatus) {
    if !skill.spec().cacheable {
        let (outcome, term) = execute(state, skill, call, context, None).await;
        return (outcome, term, DedupStatus::Bypass);
    }
    let key = DedupCache::key(
        skill.name(),
        call.session.id(),
        call.session.turn(),
        &call.parameters,
    );
    loop {
        match state.dedup().claim(key.clone()) {
            Claim::Cached(outcome) => return (outcome, None, DedupStatus::Hit),
            Claim::Join(joiner) => {
                if let Some(outcome) = joiner.wait().await {
                    return (outcome, None, DedupStatus::Joined);
                }
                // The leader gave up (its task failed); claim again.
            }
            Claim::Leader(guard) => {
                let (outcome, term) = execute(state, skill, call, context, Some(guard)).await;
                return (outcome, term, DedupStatus::Miss);
            }
            Claim::Bypass => {
                let (outcome, term) = execute(state, skill, call, context, None).await;
                return (outcome, term, DedupStatus::Bypass);
            }
        }
    }
}

/// Runs rate limit → schema validation → handler and publishes the outcome to the
/// de-duplication cache. A call that changes something runs in a tracked task of its own, so a
/// disconnecting client cannot cancel it half-way; a read-only one
/// ([`SkillHandler::read_only`](super::SkillHandler::read_only)) runs right here, on the
/// request's task (a disconnect cancels nothing that matters, and a joined caller whose leader
/// went away claims again).
async fn execute(
    state: &SkillApiState,
    skill: Arc<RegisteredSkill>,
    call: AuthenticatedCall,
    context: &SessionContext,
    leader: Option<LeaderGuard>,
) -> (SharedOutcome, Option<TerminationGuard>) {
    let span = tracing::info_span!(
        "skill",
        skill = skill.name(),
        session_id = %call.session.id(),
        platform = %context.origin.platform,
        channel = %context.origin.channel_id,
    );
    if skill.handler().read_only() {
        return run_call(state.clone(), skill, call, leader)
            .instrument(span)
            .await;
    }
    let task = state
        .tasks()
        .spawn(run_call(state.clone(), skill, call, leader).instrument(span));
    match task.await {
        Ok(done) => done,
        Err(join_error) => {
            let error = SkillError::internal(anyhow::anyhow!("skill task failed: {join_error}"));
            tracing::error!(error = %error, "skill call task failed");
            (Arc::new(Err(error)), None)
        }
    }
}

/// One call: the shared pipeline ([`invoke`]), then the published outcome and the pending
/// termination.
async fn run_call(
    state: SkillApiState,
    skill: Arc<RegisteredSkill>,
    call: AuthenticatedCall,
    leader: Option<LeaderGuard>,
) -> (SharedOutcome, Option<TerminationGuard>) {
    let ctx = CallContext::new(skill.name(), call.session.clone());
    let result = invoke(&state, &skill, &ctx, call.parameters).await;
    let mut reason = ctx.pending_termination();
    if reason.is_none()
        && let Err(SkillError::QuotaExceeded {
            terminate: true, ..
        }) = &result
    {
        reason = Some(format!("{}: per-session quota exhausted", skill.name()));
    }
    let outcome: SharedOutcome = Arc::new(result);
    if let Some(leader) = leader {
        leader.complete(Arc::clone(&outcome));
    }
    let termination = reason.map(|reason| TerminationGuard {
        session: call.session,
        reason,
    });
    (outcome, termination)
}

/// Requests the session's termination when dropped: it travels inside the response body, so the
/// runner is told to stop the agent only once the response has been written (or abandoned).
struct TerminationGuard {
    session: SessionHandle,
    reason: String,
}

impl Drop for TerminationGuard {
    fn drop(&mut self) {
        self.session.request_termination(&self.reason);
    }
}

/// A response body that fires its [`TerminationGuard`] when hyper drops it after sending.
struct TerminateAfterBody {
    inner: Body,
    _guard: TerminationGuard,
}

impl http_body::Body for TerminateAfterBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

async fn method_not_allowed(
    State(state): State<SkillApiState>,
    name: Result<Path<String>, PathRejection>,
) -> Response {
    let name = name.map(|Path(n)| n).unwrap_or_default();
    Audit::start(&state, name).finish_error(&SkillError::MethodNotAllowed)
}

async fn no_such_endpoint() -> Response {
    SkillError::NotFound(
        "There is no such endpoint; skills are called with POST /api/skill/{name}".into(),
    )
    .into_response()
}

fn panic_response(_panic: Box<dyn Any + Send + 'static>) -> HttpResponse<Body> {
    tracing::error!("skill api request handler panicked");
    SkillError::internal(anyhow::anyhow!("request handler panicked")).into_response()
}
