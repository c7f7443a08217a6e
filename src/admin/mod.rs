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
//!   style, no frames, forms only to itself), `nosniff`, a referrer only to itself, and no
//!   caching.
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
pub mod chat;
mod guard;
mod memories;
pub mod pages;
mod steer;
mod users;

use std::sync::{Arc, OnceLock};

use axum::Router;
use axum::extract::{Form, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use serde::Deserialize;

use crate::conversation::warm::WarmPool;
use crate::ops::Readiness;
use crate::session::SessionRegistry;
use crate::store::{InboxRow, InboxState, Store};
use auth::{Auth, COOKIE};
use board::Board;
use guard::{Problem, changing, workspace};
use pages::{NowView, TurnView};

/// The console's Content-Security-Policy.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                       connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

const CSS: &str = include_str!("assets/console.css");
const JS: &str = include_str!("assets/console.js");

/// What the console steers in the running daemon.
#[derive(Clone, Debug)]
pub struct Steering {
    /// The router (where each user stands with the rate limit).
    pub router: crate::conversation::Router,
    /// The warm agents (*Now* lists them; one can be retired), when `agent.warm` keeps any.
    pub warm: Option<WarmPool>,
    /// `agent.budget.tokensPerUserPerDay`, the budget of a user the operator set none for.
    pub user_budget: Option<u64>,
    /// `admin.cost`: the prices *Now* estimates today's cost with.
    pub prices: Option<crate::config::TokenPrices>,
}

/// What the console reads and steers; cheap to clone.
#[derive(Clone, Debug)]
pub struct Console {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    auth: Auth,
    board: Arc<Board>,
    /// The *Chat* page's platform adapter.
    chat: Arc<chat::WebChat>,
    readiness: Readiness,
    /// Set once the daemon runs: its sessions and database.
    daemon: OnceLock<(SessionRegistry, Store)>,
    /// Set once the daemon runs: what the console steers.
    steering: OnceLock<Steering>,
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
                chat: Arc::new(chat::WebChat::new()),
                readiness,
                daemon: OnceLock::new(),
                steering: OnceLock::new(),
                base_url: OnceLock::new(),
                config: OnceLock::new(),
            }),
        }
    }

    /// The board the agent runner reports to.
    pub fn board(&self) -> Arc<Board> {
        self.inner.board.clone()
    }

    /// The *Chat* page's platform adapter: the daemon runs it among its platforms (the
    /// `console` platform) and [`connect`](chat::WebChat::connect)s it to its event queue.
    pub fn chat(&self) -> Arc<chat::WebChat> {
        self.inner.chat.clone()
    }

    /// The running daemon's sessions and database (once, at start).
    pub fn attach(&self, sessions: SessionRegistry, store: Store) {
        self.inner.board.attach(sessions.clone());
        let _ = self.inner.daemon.set((sessions, store));
    }

    /// What the console steers in the running daemon (once, at start).
    pub fn steer(&self, steering: Steering) {
        let _ = self.inner.steering.set(steering);
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
            .route("/admin/skills", get(skills))
            .route("/admin/config", get(config))
            .merge(memories::routes())
            .merge(users::routes())
            .merge(steer::routes())
            .merge(chat::routes())
            .route("/admin/turns/{session}", get(timeline))
            .route("/admin/login", get(login))
            .route("/admin/logout", post(logout))
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

    /// The running turns as *Now* and *Chat* show them (a DM's without its command).
    fn running_turns(&self) -> Vec<TurnView> {
        let Some((sessions, _)) = self.inner.daemon.get() else {
            return Vec::new();
        };
        self.inner
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
            .collect()
    }

    async fn now_view(&self) -> NowView {
        let checks = self.inner.readiness.run().await;
        let Some((_, store)) = self.inner.daemon.get() else {
            return NowView {
                checks,
                ..NowView::default()
            };
        };
        let turns = self.running_turns();
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
        let warm = self
            .inner
            .steering
            .get()
            .and_then(|s| s.warm.as_ref())
            .map(|pool| {
                pool.idle_agents()
                    .into_iter()
                    .map(|a| pages::WarmView {
                        platform: a.key.platform().as_str().to_owned(),
                        channel: a.key.channel().to_owned(),
                        user: a.key.user().to_owned(),
                        dm: a.key.is_dm(),
                        idle_ms: u64::try_from(a.idle_for.as_millis()).unwrap_or(u64::MAX),
                        turns: a.turns,
                        ahead: a.ahead,
                    })
                    .collect()
            });
        let cost_today = self
            .inner
            .steering
            .get()
            .and_then(|s| s.prices.as_ref())
            .zip(tokens_today)
            .map(|(prices, u)| {
                (
                    prices.cost(u.input_tokens, u.output_tokens),
                    prices.currency.clone(),
                )
            });
        NowView {
            checks,
            turns,
            tokens_today,
            cost_today,
            tokens_week,
            warm,
        }
    }
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
        // Not `no-referrer`: with it a browser sends `Origin: null` on the console's own form
        // posts, which the origin check must refuse (tests/admin_browser.rs found it).
        ("referrer-policy", "same-origin"),
        ("cache-control", "no-store"),
        ("cross-origin-opener-policy", "same-origin"),
        ("cross-origin-resource-policy", "same-origin"),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}

async fn not_found(State(console): State<Console>, headers: HeaderMap) -> Problem {
    match console.viewing(&headers) {
        Ok(_) => Problem::NotFound("no such page"),
        Err(problem) => problem,
    }
}

async fn now(State(console): State<Console>, headers: HeaderMap) -> Result<Response, Problem> {
    let session = console.viewing(&headers)?;
    let view = console.now_view().await;
    Ok(Html(pages::now(&view, &session.csrf).into_string()).into_response())
}

async fn live(State(console): State<Console>, headers: HeaderMap) -> Result<Response, Problem> {
    let session = console.viewing(&headers)?;
    let view = console.now_view().await;
    Ok(Html(pages::live(&view, &session.csrf).into_string()).into_response())
}

async fn skills(State(console): State<Console>, headers: HeaderMap) -> Result<Response, Problem> {
    let session = console.viewing(&headers)?;
    let store = console.store()?;
    let now = chrono::Utc::now();
    let day = store
        .skill_calls_since(now - chrono::Duration::hours(24))
        .await?;
    let week = store
        .skill_calls_since(now - chrono::Duration::days(7))
        .await?;
    let view = pages::SkillsView { day, week };
    Ok(Html(pages::skills(&view, &session.csrf).into_string()).into_response())
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
) -> Result<Response, Problem> {
    let session = console.viewing(&headers)?;
    let store = console.store()?;
    let state = match query.state.as_str() {
        "" => None,
        "queued" => Some(InboxState::Queued),
        "answered" => Some(InboxState::Answered),
        "failed" => Some(InboxState::Failed),
        "skipped" => Some(InboxState::Skipped),
        _ => return Err(Problem::BadRequest("no such state")),
    };
    let now = chrono::Utc::now();
    let rows = store.inbox_recent(state, CONVERSATIONS_SHOWN).await?;
    let hours = store
        .messages_per_hour(this_hour(now) - chrono::TimeDelta::hours(23))
        .await?;
    // The turns of these messages the board still holds (since the start): tokens, skills,
    // a timeline.
    let board = &console.inner.board;
    let running = board
        .running()
        .into_iter()
        .filter_map(|r| board.turn(&r.session_id));
    let turns: std::collections::HashMap<(String, String), board::TurnRecord> = board
        .finished()
        .into_iter()
        .rev()
        .chain(running)
        .filter_map(|t| Some(((t.platform.clone(), t.message_id.clone()?), t)))
        .collect();
    let rows: Vec<pages::TurnRow> = rows
        .into_iter()
        .map(|row| {
            let turn = turns.get(&(row.platform.clone(), row.message_id.clone()));
            turn_row(row, turn)
        })
        .collect();
    let page = pages::conversations(
        &rows,
        &last_24_hours(now, &hours),
        state.map(InboxState::as_str),
        &session.csrf,
    );
    Ok(Html(page.into_string()).into_response())
}

/// The start of `now`'s hour.
fn this_hour(now: chrono::DateTime<chrono::Utc>) -> chrono::DateTime<chrono::Utc> {
    use chrono::DurationRound;
    now.duration_trunc(chrono::TimeDelta::hours(1))
        .unwrap_or(now)
}

/// The 24 hours up to `now`'s, oldest first, labelled `HH`, with the count of each (0 for an
/// hour `counted` leaves out).
fn last_24_hours(
    now: chrono::DateTime<chrono::Utc>,
    counted: &[(chrono::DateTime<chrono::Utc>, u64)],
) -> Vec<(String, u64)> {
    use chrono::TimeDelta;
    let hour = this_hour(now);
    (0..24)
        .rev()
        .map(|back| {
            let start = hour - TimeDelta::hours(back);
            let n = counted
                .iter()
                .find(|(h, _)| *h == start)
                .map_or(0, |(_, n)| *n);
            (start.format("%H").to_string(), n)
        })
        .collect()
}

/// A recorded message as the page shows it: its text only when it was not a direct message (a
/// payload that cannot be read counts as one).
fn turn_row(row: InboxRow, turn: Option<&board::TurnRecord>) -> pages::TurnRow {
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
        turn: turn.map(|t| pages::TurnFacts {
            session_id: t.session_id.clone(),
            tokens: t.tokens,
            skill_calls: t.skill_calls().len(),
            place: t.place.clone(),
        }),
    }
}

async fn config(State(console): State<Console>, headers: HeaderMap) -> Result<Response, Problem> {
    let session = console.viewing(&headers)?;
    let yaml = console
        .inner
        .config
        .get()
        .map_or("(not available)", String::as_str);
    Ok(Html(pages::config(yaml, &session.csrf).into_string()).into_response())
}

#[derive(Deserialize)]
struct LoginQuery {
    #[serde(default)]
    token: String,
}

async fn login(
    State(console): State<Console>,
    headers: HeaderMap,
    Query(q): Query<LoginQuery>,
) -> Response {
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
    // Behind a TLS proxy the browser sees https: the cookie is then never sent without it.
    let secure = if behind_tls(&headers) { "; Secure" } else { "" };
    let cookie = format!(
        "{COOKIE}={token}; Path=/admin; HttpOnly; SameSite=Strict; Max-Age={max_age}{secure}"
    );
    let mut response = Redirect::to("/admin/").into_response();
    if let Ok(value) = HeaderValue::from_str(&cookie) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    response
}

/// Whether the request reached a TLS proxy in front of the listener (`X-Forwarded-Proto` or
/// `Forwarded` saying https): the listener itself speaks plain HTTP.
fn behind_tls(headers: &HeaderMap) -> bool {
    let said = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_ascii_lowercase)
    };
    said("x-forwarded-proto").is_some_and(|p| p.trim() == "https")
        || said("forwarded")
            .is_some_and(|f| f.split([';', ',']).any(|part| part.trim() == "proto=https"))
}

#[derive(Deserialize)]
struct CsrfForm {
    #[serde(default)]
    csrf: String,
}

async fn logout(
    State(console): State<Console>,
    headers: HeaderMap,
    Form(form): Form<CsrfForm>,
) -> Result<Response, Problem> {
    let (token, session) = changing(&console, &headers, &form.csrf)?;
    console.inner.auth.close(&token);
    tracing::info!(who = %session.who, action = "logout", "admin action");
    let mut response = Redirect::to("/admin/").into_response();
    let gone = format!("{COOKIE}=; Path=/admin; HttpOnly; SameSite=Strict; Max-Age=0");
    if let Ok(value) = HeaderValue::from_str(&gone) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    Ok(response)
}

/// A turn's timeline: what its agent did and when (running, or among the latest that ended).
async fn timeline(
    State(console): State<Console>,
    axum::extract::Path(session_id): axum::extract::Path<String>,
    headers: HeaderMap,
) -> Result<Response, Problem> {
    let session = console.viewing(&headers)?;
    let turn = console
        .inner
        .board
        .turn(&session_id)
        .ok_or(Problem::NotFound(
            "no such turn (only the latest are kept, since the start)",
        ))?;
    Ok(Html(pages::timeline(&turn, &session.csrf).into_string()).into_response())
}
