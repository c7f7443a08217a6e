//! The console's actions on the running daemon besides users and memories: cancel a running
//! turn (its agent is told to stop, as a user's "stop" would), retire an idle warm agent (its
//! conversation's next message starts a fresh one). Each is an audit record.

use axum::Router;
use axum::extract::{Form, Path, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::post;
use serde::Deserialize;

use super::{Console, Problem, changing};
use crate::conversation::warm::ConversationKey;
use crate::platform::PlatformKind;

/// The actions' routes.
pub(super) fn routes() -> Router<Console> {
    Router::new()
        .route("/admin/turns/{session}/cancel", post(cancel))
        .route("/admin/warm/retire", post(retire_warm))
}

#[derive(Deserialize)]
struct CsrfForm {
    #[serde(default)]
    csrf: String,
}

async fn cancel(
    State(console): State<Console>,
    Path(session_id): Path<String>,
    headers: HeaderMap,
    Form(form): Form<CsrfForm>,
) -> Result<Response, Problem> {
    let (_, session) = changing(&console, &headers, &form.csrf)?;
    let (sessions, _) = console.inner.daemon.get().ok_or(Problem::Starting)?;
    let handle = sessions
        .lookup(&session_id)
        .ok_or(Problem::NotFound("no such turn (it may have ended)"))?;
    let cancelled = sessions.request_termination(handle.id(), "cancelled by the operator");
    tracing::info!(who = %session.who, action = "cancel turn", session_id = %session_id, cancelled, "admin action");
    Ok(Redirect::to("/admin/").into_response())
}

#[derive(Deserialize)]
struct RetireForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    platform: String,
    #[serde(default)]
    channel: String,
    #[serde(default)]
    user: String,
    #[serde(default)]
    dm: bool,
}

/// Stops one idle warm agent (its conversation's next message starts a new one).
async fn retire_warm(
    State(console): State<Console>,
    headers: HeaderMap,
    Form(form): Form<RetireForm>,
) -> Result<Response, Problem> {
    let (_, session) = changing(&console, &headers, &form.csrf)?;
    let pool = console
        .inner
        .steering
        .get()
        .and_then(|s| s.warm.as_ref())
        .ok_or(Problem::NotFound("no warm agents are kept"))?;
    let platform = form
        .platform
        .parse::<PlatformKind>()
        .map_err(|_| Problem::BadRequest("no such platform"))?;
    let key = ConversationKey::new(platform, &form.channel, &form.user, form.dm);
    let retired = pool.retire_idle(&key);
    tracing::info!(who = %session.who, action = "retire warm agent", platform = %form.platform,
        channel = %form.channel, user = %form.user, retired, "admin action");
    if !retired {
        return Err(Problem::NotFound(
            "no idle agent there (it may be answering, or gone)",
        ));
    }
    Ok(Redirect::to("/admin/").into_response())
}
