//! Who may do what in the console, and the typed answers when not: a request's session (from
//! its cookie), the checks of a state-changing request (the session's CSRF token, the
//! console's own origin and site), and [`Problem`], every answer a page gives instead of
//! itself (401 with the login page, 403 with the reason, 400, 404, 503 while the daemon starts,
//! 500 when the database could not be read — logged).

use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};

use super::auth::{AdminSession, COOKIE};
use super::{Console, pages};
use crate::store::{Store, StoreError, WorkspaceKey};

/// Why a page answers with something else than itself.
#[derive(Debug, thiserror::Error)]
pub(super) enum Problem {
    /// No valid session.
    #[error("no session")]
    Unauthorized,
    /// The session is valid, the request is not (the reason).
    #[error("{0}")]
    Forbidden(&'static str),
    /// The request names something that cannot be (the reason).
    #[error("{0}")]
    BadRequest(&'static str),
    /// What the request names is not there (the reason).
    #[error("{0}")]
    NotFound(&'static str),
    /// The daemon has not handed over its sessions and database yet.
    #[error("the daemon is starting")]
    Starting,
    /// The database could not be read or written.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        match self {
            Problem::Unauthorized => unauthorized(),
            Problem::Forbidden(why) => {
                (StatusCode::FORBIDDEN, format!("refused: {why}\n")).into_response()
            }
            Problem::BadRequest(why) => {
                (StatusCode::BAD_REQUEST, format!("{why}\n")).into_response()
            }
            Problem::NotFound(why) => (StatusCode::NOT_FOUND, format!("{why}\n")).into_response(),
            Problem::Starting => {
                (StatusCode::SERVICE_UNAVAILABLE, "the daemon is starting\n").into_response()
            }
            Problem::Store(error) => {
                tracing::warn!(error = %error, "the console could not read the database");
                (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "the database could not be read\n",
                )
                    .into_response()
            }
        }
    }
}

/// What a request without a valid session gets: 401 and the page saying how to log in.
pub(super) fn unauthorized() -> Response {
    (
        StatusCode::UNAUTHORIZED,
        Html(pages::logged_out().into_string()),
    )
        .into_response()
}

impl Console {
    /// The session of a request's cookie (its token and the session).
    pub(super) fn session_of(&self, headers: &HeaderMap) -> Option<(String, AdminSession)> {
        let token = cookie(headers, COOKIE)?;
        let session = self.inner.auth.session(&token)?;
        Some((token, session))
    }

    /// The session of a request that only reads.
    pub(super) fn viewing(&self, headers: &HeaderMap) -> Result<AdminSession, Problem> {
        self.session_of(headers)
            .map(|(_, session)| session)
            .ok_or(Problem::Unauthorized)
    }

    /// The daemon's database.
    pub(super) fn store(&self) -> Result<&Store, Problem> {
        self.inner
            .daemon
            .get()
            .map(|(_, store)| store)
            .ok_or(Problem::Starting)
    }
}

/// The session of a state-changing request: a valid session, its CSRF token (`csrf`, from the
/// form), and the console's own origin; else why not (logged).
pub(super) fn changing(
    console: &Console,
    headers: &HeaderMap,
    csrf: &str,
) -> Result<(String, AdminSession), Problem> {
    let (token, session) = console.session_of(headers).ok_or(Problem::Unauthorized)?;
    let why = if !session.csrf_matches(csrf) {
        Some("the form's token is not this session's")
    } else if headers
        .get("sec-fetch-site")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|s| s != "same-origin" && s != "none")
    {
        Some("the request came from another site")
    } else if !same_origin(headers) {
        Some("the request came from another origin")
    } else {
        None
    };
    if let Some(why) = why {
        tracing::warn!(who = %session.who, refused = why, "admin action");
        return Err(Problem::Forbidden(why));
    }
    Ok((token, session))
}

/// A `platform/user` workspace key from a form or a query.
pub(super) fn workspace(ws: &str) -> Result<WorkspaceKey, Problem> {
    ws.parse()
        .map_err(|_| Problem::BadRequest("ws must be platform/user"))
}

/// Whether the request's `Origin`, when it has one, is the console's own (its `Host`).
fn same_origin(headers: &HeaderMap) -> bool {
    let Some(origin) = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok()) else {
        return true;
    };
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"))
        .is_some_and(|o| o == host)
}

/// A cookie's value from the request's `Cookie` headers.
fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.to_owned())
}
