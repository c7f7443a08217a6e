//! The operator console (`admin.enabled`; `docs/CONSOLE.md`): pages served by the daemon on its
//! ops listener under `/admin/`, every asset inside the binary.
//!
//! * **Login** ([`auth`]): `air-friends admin-link` asks the daemon, over its control socket,
//!   for a one-time link; opening it sets an `HttpOnly`, `SameSite=Strict` session cookie.
//!   Nothing under `/admin/` but the login link and the style sheet and script answers without
//!   a valid session (401 and a page saying how to log in).
//! * **Every state-changing request** is a `POST` carrying the session's CSRF token, from the
//!   console's own origin (`Origin`, `Sec-Fetch-Site`), else 403. Each is an audit record
//!   (`admin action`: who — the session's short name —, what, on what).
//! * **Every answer** has a strict Content-Security-Policy (only the console's own script and
//!   style, no frames, forms only to itself), `nosniff`, no referrer and no caching.
//! * **Pages** ([`pages`]): *Now* — the readiness checks, the running turns with what each
//!   agent is doing ([`board`]), today's tokens — refreshed every two seconds by a small
//!   script; a turn can be cancelled from it. Nothing of a direct message but its kind of work
//!   is shown. *Conversations* — the latest messages the bot was asked to answer, how each
//!   ended and how long it took, a public one's text (never a direct message's). *Memories* — every user's memories and reminders by state; a user's public
//!   memories, searched, each disabled or enabled with a recorded patch as the skill does;
//!   private ones only counted. *Skills* — calls, errors by code and latency per skill over a
//!   day and a week, with SVG charts. *Config* — the configuration as loaded, secrets masked.

pub mod auth;
pub mod board;
pub mod pages;

use std::sync::{Arc, OnceLock};

use axum::Router;
use axum::extract::{Form, Path, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use serde::Deserialize;

use crate::ops::Readiness;
use crate::session::SessionRegistry;
use crate::store::{ExportFilter, InboxRow, InboxState, MemoryPatch, Scope, Store, WorkspaceKey};
use auth::{AdminSession, Auth, COOKIE};
use board::Board;
use pages::{NowView, TurnView};

/// The console's Content-Security-Policy.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                       connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

const CSS: &str = include_str!("assets/console.css");
const JS: &str = include_str!("assets/console.js");

/// What the console reads and steers; cheap to clone.
#[derive(Clone, Debug)]
pub struct Console {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    auth: Auth,
    board: Arc<Board>,
    readiness: Readiness,
    /// Set once the daemon runs: its sessions and database.
    daemon: OnceLock<(SessionRegistry, Store)>,
    /// Where the console is reached (`http://host:port`), once the ops listener is bound.
    base_url: OnceLock<String>,
    /// The configuration as loaded, secrets masked (YAML).
    config: OnceLock<String>,
}

impl Console {
    /// A console with `auth`, reading `readiness`.
    pub fn new(auth: Auth, readiness: Readiness) -> Self {
        Console {
            inner: Arc::new(Inner {
                auth,
                board: Arc::new(Board::default()),
                readiness,
                daemon: OnceLock::new(),
                base_url: OnceLock::new(),
                config: OnceLock::new(),
            }),
        }
    }

    /// The board the agent runner reports to.
    pub fn board(&self) -> Arc<Board> {
        self.inner.board.clone()
    }

    /// The running daemon's sessions and database (once, at start).
    pub fn attach(&self, sessions: SessionRegistry, store: Store) {
        let _ = self.inner.daemon.set((sessions, store));
    }

    /// The configuration the *Config* page shows: YAML with every secret masked
    /// (`config::masked_yaml`).
    pub fn set_config(&self, masked_yaml: String) {
        let _ = self.inner.config.set(masked_yaml);
    }

    /// The ops listener's address, for the links (once it is bound).
    pub fn set_base_url(&self, url: String) {
        let _ = self.inner.base_url.set(url);
    }

    /// A new one-time login link, and how many minutes it is valid.
    pub fn login_link(&self) -> Result<(String, u64), auth::Entropy> {
        let token = self.inner.auth.mint_link()?;
        let base = self
            .inner
            .base_url
            .get()
            .cloned()
            .unwrap_or_else(|| "http://127.0.0.1".into());
        tracing::info!(action = "link issued", "admin action");
        Ok((
            format!("{base}/admin/login?token={token}"),
            self.inner.auth.link_ttl().as_secs() / 60,
        ))
    }

    /// The console's routes, to merge into the ops router.
    pub fn router(&self) -> Router {
        Router::new()
            .route("/admin", get(|| async { Redirect::to("/admin/") }))
            .route("/admin/", get(now))
            .route("/admin/now/live", get(live))
            .route("/admin/conversations", get(conversations))
            .route("/admin/memories", get(memories))
            .route("/admin/memories/of", get(memories_of))
            .route("/admin/memories/toggle", post(toggle_memory))
            .route("/admin/skills", get(skills))
            .route("/admin/config", get(config))
            .route("/admin/login", get(login))
            .route("/admin/logout", post(logout))
            .route("/admin/turns/{session}/cancel", post(cancel))
            .route(
                "/admin/assets/console.css",
                get(|| async { asset("text/css", CSS) }),
            )
            .route(
                "/admin/assets/console.js",
                get(|| async { asset("text/javascript", JS) }),
            )
            .route("/admin/{*rest}", get(not_found).post(not_found))
            .layer(middleware::from_fn(secure_headers))
            .with_state(self.clone())
    }

    /// The session of a request's cookie.
    fn session_of(&self, headers: &HeaderMap) -> Option<(String, AdminSession)> {
        let token = cookie(headers, COOKIE)?;
        let session = self.inner.auth.session(&token)?;
        Some((token, session))
    }

    async fn now_view(&self) -> NowView {
        let checks = self.inner.readiness.run().await;
        let Some((sessions, store)) = self.inner.daemon.get() else {
            return NowView {
                checks,
                ..NowView::default()
            };
        };
        let turns = self
            .inner
            .board
            .running()
            .into_iter()
            .filter_map(|r| {
                let handle = sessions.lookup(&r.session_id)?;
                let context = handle.context();
                let dm = context.origin.is_dm;
                let user = if context.origin.username.is_empty() {
                    context.origin.user_id.to_string()
                } else {
                    context.origin.username.clone()
                };
                Some(TurnView {
                    session_id: r.session_id,
                    platform: context.origin.platform.as_str().to_owned(),
                    user,
                    place: context.place.name.to_string(),
                    dm,
                    elapsed_ms: r.elapsed_ms,
                    doing: r.doing,
                    command: r
                        .command
                        .filter(|_| !dm)
                        .map(|c| c.chars().take(160).collect()),
                })
            })
            .collect();
        let today = chrono::Utc::now().date_naive();
        let (tokens_today, tokens_week) =
            match store.tokens_per_day(today - chrono::Days::new(6)).await {
                Ok(days) => {
                    let now = days
                        .iter()
                        .find(|(day, _)| *day == today)
                        .map(|(_, u)| *u)
                        .unwrap_or_default();
                    let week = days
                        .iter()
                        .map(|(day, u)| (day.format("%a %d %b").to_string(), u.total_tokens()))
                        .collect();
                    (Some(now), week)
                }
                Err(error) => {
                    tracing::warn!(error = %error, "the console could not read the usage");
                    (None, Vec::new())
                }
            };
        NowView {
            checks,
            turns,
            tokens_today,
            tokens_week,
        }
    }
}

/// Lowercase hex.
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
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

fn asset(kind: &'static str, body: &'static str) -> Response {
    ([(header::CONTENT_TYPE, kind)], body).into_response()
}

/// The security headers of every console answer.
async fn secure_headers(request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    for (name, value) in [
        ("content-security-policy", CSP),
        ("x-content-type-options", "nosniff"),
        ("x-frame-options", "DENY"),
        ("referrer-policy", "no-referrer"),
        ("cache-control", "no-store"),
        ("cross-origin-opener-policy", "same-origin"),
        ("cross-origin-resource-policy", "same-origin"),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}

fn unauthorized() -> Response {
    (
        StatusCode::UNAUTHORIZED,
        Html(pages::logged_out().into_string()),
    )
        .into_response()
}

async fn not_found(State(console): State<Console>, headers: HeaderMap) -> Response {
    if console.session_of(&headers).is_none() {
        return unauthorized();
    }
    (StatusCode::NOT_FOUND, "no such page\n").into_response()
}

async fn now(State(console): State<Console>, headers: HeaderMap) -> Response {
    let Some((_, session)) = console.session_of(&headers) else {
        return unauthorized();
    };
    let view = console.now_view().await;
    Html(pages::now(&view, &session.csrf).into_string()).into_response()
}

async fn live(State(console): State<Console>, headers: HeaderMap) -> Response {
    let Some((_, session)) = console.session_of(&headers) else {
        return unauthorized();
    };
    let view = console.now_view().await;
    Html(pages::live(&view, &session.csrf).into_string()).into_response()
}

async fn skills(State(console): State<Console>, headers: HeaderMap) -> Response {
    let Some((_, session)) = console.session_of(&headers) else {
        return unauthorized();
    };
    let Some((_, store)) = console.inner.daemon.get() else {
        return (StatusCode::SERVICE_UNAVAILABLE, "the daemon is starting\n").into_response();
    };
    let now = chrono::Utc::now();
    let read = async {
        let day = store
            .skill_calls_since(now - chrono::Duration::hours(24))
            .await?;
        let week = store
            .skill_calls_since(now - chrono::Duration::days(7))
            .await?;
        Ok::<_, crate::store::StoreError>(pages::SkillsView { day, week })
    };
    match read.await {
        Ok(view) => Html(pages::skills(&view, &session.csrf).into_string()).into_response(),
        Err(error) => {
            tracing::warn!(error = %error, "the console could not read the skill calls");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                "the skill calls could not be read\n",
            )
                .into_response()
        }
    }
}

/// How many messages *Conversations* lists.
const CONVERSATIONS_SHOWN: u32 = 200;

#[derive(Deserialize)]
struct ConversationsQuery {
    #[serde(default)]
    state: String,
}

async fn conversations(
    State(console): State<Console>,
    headers: HeaderMap,
    Query(query): Query<ConversationsQuery>,
) -> Response {
    let Some((_, session)) = console.session_of(&headers) else {
        return unauthorized();
    };
    let Some((_, store)) = console.inner.daemon.get() else {
        return (StatusCode::SERVICE_UNAVAILABLE, "the daemon is starting\n").into_response();
    };
    let state = match query.state.as_str() {
        "" => None,
        "queued" => Some(InboxState::Queued),
        "answered" => Some(InboxState::Answered),
        "failed" => Some(InboxState::Failed),
        "skipped" => Some(InboxState::Skipped),
        _ => return (StatusCode::BAD_REQUEST, "no such state\n").into_response(),
    };
    match store.inbox_recent(state, CONVERSATIONS_SHOWN).await {
        Ok(rows) => {
            let rows: Vec<pages::TurnRow> = rows.into_iter().map(turn_row).collect();
            let page = pages::conversations(&rows, state.map(InboxState::as_str), &session.csrf);
            Html(page.into_string()).into_response()
        }
        Err(error) => store_failed(&error),
    }
}

/// A recorded message as the page shows it: its text only when it was not a direct message (a
/// payload that cannot be read counts as one).
fn turn_row(row: InboxRow) -> pages::TurnRow {
    let payload: serde_json::Value = serde_json::from_str(&row.payload).unwrap_or_default();
    let dm = payload["isDm"].as_bool().unwrap_or(true);
    let user = payload["username"]
        .as_str()
        .filter(|u| !u.is_empty())
        .map_or_else(|| row.user_id.clone(), str::to_owned);
    let text = payload["content"]
        .as_str()
        .filter(|_| !dm)
        .map(|t| crate::text::clip_chars(t, 200));
    pages::TurnRow {
        platform: row.platform,
        user,
        dm,
        received_at: row.received_at,
        took_ms: (row.state != "queued")
            .then(|| (row.updated_at - row.received_at).num_milliseconds()),
        state: row.state,
        reason: row.reason,
        text,
    }
}

async fn memories(State(console): State<Console>, headers: HeaderMap) -> Response {
    let Some((_, session)) = console.session_of(&headers) else {
        return unauthorized();
    };
    let Some((_, store)) = console.inner.daemon.get() else {
        return (StatusCode::SERVICE_UNAVAILABLE, "the daemon is starting\n").into_response();
    };
    match store.workspace_overview().await {
        Ok(overview) => {
            Html(pages::memories_index(&overview, &session.csrf).into_string()).into_response()
        }
        Err(error) => store_failed(&error),
    }
}

#[derive(Deserialize)]
struct WorkspaceQuery {
    #[serde(default)]
    ws: String,
    #[serde(default)]
    q: String,
}

async fn memories_of(
    State(console): State<Console>,
    headers: HeaderMap,
    Query(query): Query<WorkspaceQuery>,
) -> Response {
    let Some((_, session)) = console.session_of(&headers) else {
        return unauthorized();
    };
    let Some((_, store)) = console.inner.daemon.get() else {
        return (StatusCode::SERVICE_UNAVAILABLE, "the daemon is starting\n").into_response();
    };
    let Ok(ws) = query.ws.parse::<WorkspaceKey>() else {
        return (StatusCode::BAD_REQUEST, "ws must be platform/user\n").into_response();
    };
    let q = query.q.trim();
    let read = async {
        let all = store
            .export_memories(&ws, ExportFilter::all(Scope::PublicOnly))
            .await?;
        let private = store
            .workspace_overview()
            .await?
            .get(&ws.to_string())
            .map_or(0, |o| o.private);
        let public = if q.is_empty() {
            all.iter()
                .rev()
                .take(pages::MEMORIES_SHOWN)
                .cloned()
                .collect()
        } else {
            store
                .search_memories(&ws, q, Scope::PublicOnly, 100)
                .await?
                .into_iter()
                .map(|hit| hit.memory)
                .collect()
        };
        Ok::<_, crate::store::StoreError>(pages::WorkspaceView {
            workspace: ws.to_string(),
            public,
            public_total: all.len(),
            private,
            query: (!q.is_empty()).then(|| q.to_owned()),
        })
    };
    match read.await {
        Ok(view) => Html(pages::memories_of(&view, &session.csrf).into_string()).into_response(),
        Err(error) => store_failed(&error),
    }
}

#[derive(Deserialize)]
struct ToggleForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    ws: String,
    #[serde(default)]
    id: String,
    #[serde(default)]
    enabled: bool,
}

/// Disables or enables a public memory, as the memory-patch skill does (a recorded patch). A
/// private memory is not found here: the console never changes what it may not show.
async fn toggle_memory(
    State(console): State<Console>,
    headers: HeaderMap,
    Form(form): Form<ToggleForm>,
) -> Response {
    let csrf = CsrfForm {
        csrf: form.csrf.clone(),
    };
    let (_, session) = match changing(&console, &headers, &csrf) {
        Ok(found) => found,
        Err(refused) => return refused.into_response(),
    };
    let Some((_, store)) = console.inner.daemon.get() else {
        return (StatusCode::SERVICE_UNAVAILABLE, "the daemon is starting\n").into_response();
    };
    let Ok(ws) = form.ws.parse::<WorkspaceKey>() else {
        return (StatusCode::BAD_REQUEST, "ws must be platform/user\n").into_response();
    };
    let patch = MemoryPatch {
        enabled: Some(form.enabled),
        ..MemoryPatch::default()
    };
    match store
        .patch_memory(&ws, &form.id, patch, Scope::PublicOnly)
        .await
    {
        Ok(_) => {
            tracing::info!(who = %session.who, action = if form.enabled { "enable memory" } else { "disable memory" },
                workspace = %ws, memory_id = %form.id, "admin action");
            Redirect::to(&format!("/admin/memories/of?ws={ws}")).into_response()
        }
        Err(crate::store::StoreError::NotFound) => {
            (StatusCode::NOT_FOUND, "no such public memory\n").into_response()
        }
        Err(error) => store_failed(&error),
    }
}

fn store_failed(error: &crate::store::StoreError) -> Response {
    tracing::warn!(error = %error, "the console could not read the database");
    (
        StatusCode::INTERNAL_SERVER_ERROR,
        "the database could not be read\n",
    )
        .into_response()
}

async fn config(State(console): State<Console>, headers: HeaderMap) -> Response {
    let Some((_, session)) = console.session_of(&headers) else {
        return unauthorized();
    };
    let yaml = console
        .inner
        .config
        .get()
        .map_or("(not available)", String::as_str);
    Html(pages::config(yaml, &session.csrf).into_string()).into_response()
}

#[derive(Deserialize)]
struct LoginQuery {
    #[serde(default)]
    token: String,
}

async fn login(State(console): State<Console>, Query(q): Query<LoginQuery>) -> Response {
    let Some((token, session)) = console.inner.auth.open(&q.token) else {
        tracing::warn!(action = "login refused", "admin action");
        return (
            StatusCode::FORBIDDEN,
            Html(pages::link_refused().into_string()),
        )
            .into_response();
    };
    tracing::info!(who = %session.who, action = "login", "admin action");
    let max_age = console.inner.auth.session_ttl().as_secs();
    let cookie =
        format!("{COOKIE}={token}; Path=/admin; HttpOnly; SameSite=Strict; Max-Age={max_age}");
    let mut response = Redirect::to("/admin/").into_response();
    if let Ok(value) = HeaderValue::from_str(&cookie) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    response
}

#[derive(Deserialize)]
struct CsrfForm {
    #[serde(default)]
    csrf: String,
}

/// Why a state-changing request is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
enum Refused {
    /// No valid session.
    #[error("no session")]
    Unauthorized,
    /// The session is valid, the request is not (the reason).
    #[error("{0}")]
    Forbidden(&'static str),
}

impl IntoResponse for Refused {
    fn into_response(self) -> Response {
        match self {
            Refused::Unauthorized => unauthorized(),
            Refused::Forbidden(why) => {
                (StatusCode::FORBIDDEN, format!("refused: {why}\n")).into_response()
            }
        }
    }
}

/// The session of a state-changing request: a valid session, its CSRF token, and the
/// console's own origin; else why not (logged).
fn changing(
    console: &Console,
    headers: &HeaderMap,
    form: &CsrfForm,
) -> Result<(String, AdminSession), Refused> {
    let (token, session) = console.session_of(headers).ok_or(Refused::Unauthorized)?;
    let why = if !session.csrf_matches(&form.csrf) {
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
        return Err(Refused::Forbidden(why));
    }
    Ok((token, session))
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

async fn logout(
    State(console): State<Console>,
    headers: HeaderMap,
    Form(form): Form<CsrfForm>,
) -> Response {
    let (token, session) = match changing(&console, &headers, &form) {
        Ok(found) => found,
        Err(refused) => return refused.into_response(),
    };
    console.inner.auth.close(&token);
    tracing::info!(who = %session.who, action = "logout", "admin action");
    let mut response = Redirect::to("/admin/").into_response();
    let gone = format!("{COOKIE}=; Path=/admin; HttpOnly; SameSite=Strict; Max-Age=0");
    if let Ok(value) = HeaderValue::from_str(&gone) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    response
}

async fn cancel(
    State(console): State<Console>,
    Path(session_id): Path<String>,
    headers: HeaderMap,
    Form(form): Form<CsrfForm>,
) -> Response {
    let (_, session) = match changing(&console, &headers, &form) {
        Ok(found) => found,
        Err(refused) => return refused.into_response(),
    };
    let Some((sessions, _)) = console.inner.daemon.get() else {
        return (StatusCode::SERVICE_UNAVAILABLE, "the daemon is starting\n").into_response();
    };
    let Some(handle) = sessions.lookup(&session_id) else {
        return (StatusCode::NOT_FOUND, "no such turn (it may have ended)\n").into_response();
    };
    let cancelled = sessions.request_termination(handle.id(), "cancelled by the operator");
    tracing::info!(who = %session.who, action = "cancel turn", session_id = %session_id, cancelled, "admin action");
    Redirect::to("/admin/").into_response()
}
