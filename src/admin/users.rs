//! *Users*: every user with tokens or messages in the last seven days, and every user the
//! operator decided something about — per user and day the tokens and messages, where they
//! stand with the rate limit, their budget and what they used of it today — and the decisions:
//! block or unblock a user (kept in the database: `store::controls`; the router refuses a
//! blocked user's messages), set their own daily budget or go back to the configured one.
//! Each decision is an audit record (`admin action`).

use std::collections::BTreeMap;

use axum::Router;
use axum::extract::{Form, State};
use axum::http::HeaderMap;
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use chrono::{NaiveDate, Utc};
use maud::{Markup, html};
use serde::Deserialize;

use super::{Console, Problem, changing, pages, workspace};
use crate::store::activity::{UserActivity, UserDay};
use crate::store::controls::{ControlChange, UserControl};

/// Days the page counts.
const DAYS: u64 = 7;
/// Most users listed.
const USERS_SHOWN: usize = 500;

/// The page's routes.
pub(super) fn routes() -> Router<Console> {
    Router::new()
        .route("/admin/users", get(users))
        .route("/admin/users/control", post(control))
}

/// One user as the page shows them.
#[derive(Debug, Clone)]
struct UserRow {
    workspace: String,
    name: Option<String>,
    today: UserDay,
    week: UserActivity,
    control: Option<UserControl>,
    /// Where they stand with the rate limit, in words (`None`: the limit is off).
    rate: Option<String>,
}

async fn users(State(console): State<Console>, headers: HeaderMap) -> Result<Response, Problem> {
    let session = console.viewing(&headers)?;
    let store = console.store()?;
    let today = Utc::now().date_naive();
    let activity = store
        .user_activity(today - chrono::Days::new(DAYS - 1))
        .await?;
    // Everyone active (the most active first, at most USERS_SHOWN) and everyone with a control.
    let mut by_user: BTreeMap<(String, String), (Option<UserActivity>, Option<UserControl>)> =
        BTreeMap::new();
    for week in activity.into_iter().take(USERS_SHOWN) {
        let key = (week.platform.clone(), week.user_id.clone());
        by_user.entry(key).or_default().0 = Some(week);
    }
    for control in store.controls().all() {
        let key = (control.platform.clone(), control.user_id.clone());
        by_user.entry(key).or_default().1 = Some(control);
    }
    let steering = console.inner.steering.get();
    let mut rows: Vec<UserRow> = by_user
        .into_iter()
        .map(|((platform, user_id), (week, control))| {
            let week = week.unwrap_or_else(|| UserActivity {
                platform: platform.clone(),
                user_id: user_id.clone(),
                name: None,
                days: BTreeMap::new(),
            });
            let rate = steering.and_then(|s| {
                let state = s.router.rate_state(&platform, &user_id)?;
                Some(match state.cooling_for {
                    Some(left) => format!(
                        "cooling down, {} min left",
                        left.as_secs().div_ceil(60).max(1)
                    ),
                    None => format!("{} of {} messages in the window", state.recent, state.max),
                })
            });
            UserRow {
                workspace: format!("{platform}/{user_id}"),
                name: week.name.clone(),
                today: week.days.get(&today).copied().unwrap_or_default(),
                week,
                control,
                rate,
            }
        })
        .collect();
    // Blocked users first, then the most tokens, then the most messages.
    rows.sort_by_key(|r| {
        (
            !r.control.as_ref().is_some_and(|c| c.blocked),
            std::cmp::Reverse(r.week.tokens()),
            std::cmp::Reverse(r.week.messages()),
        )
    });
    let configured = steering.and_then(|s| s.user_budget);
    Ok(Html(page(&rows, configured, today, &session.csrf).into_string()).into_response())
}

#[derive(Deserialize)]
struct ControlForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    ws: String,
    /// `block`, `unblock`, `budget`.
    #[serde(default)]
    action: String,
    /// The budget (`budget`): tokens per day; empty: the configured one.
    #[serde(default)]
    tokens: String,
}

/// Blocks, unblocks, or sets a user's budget.
async fn control(
    State(console): State<Console>,
    headers: HeaderMap,
    Form(form): Form<ControlForm>,
) -> Result<Response, Problem> {
    let (_, session) = changing(&console, &headers, &form.csrf)?;
    let store = console.store()?;
    let ws = workspace(&form.ws)?;
    let (change, action) = match form.action.as_str() {
        "block" => (
            ControlChange {
                blocked: Some(true),
                ..ControlChange::default()
            },
            "block user",
        ),
        "unblock" => (
            ControlChange {
                blocked: Some(false),
                ..ControlChange::default()
            },
            "unblock user",
        ),
        "budget" => {
            let tokens = form.tokens.trim();
            let budget = if tokens.is_empty() {
                None
            } else {
                let n = tokens.replace(['_', ',', ' '], "").parse::<u64>();
                Some(n.map_err(|_| {
                    Problem::BadRequest(
                        "the budget must be a whole number of tokens, or empty for the configured one",
                    )
                })?)
            };
            (
                ControlChange {
                    tokens_per_day: Some(budget),
                    ..ControlChange::default()
                },
                "set user budget",
            )
        }
        _ => return Err(Problem::BadRequest("no such action")),
    };
    let now = store.set_user_control(&ws, change, &session.who).await?;
    tracing::info!(who = %session.who, action, workspace = %ws,
        blocked = now.as_ref().is_some_and(|c| c.blocked),
        tokens_per_day = now.as_ref().and_then(|c| c.tokens_per_day),
        "admin action");
    Ok(Redirect::to("/admin/users").into_response())
}

fn page(rows: &[UserRow], configured: Option<u64>, today: NaiveDate, csrf: &str) -> Markup {
    let budget_text = |row: &UserRow| -> String {
        match (
            row.control.as_ref().and_then(|c| c.tokens_per_day),
            configured,
        ) {
            (Some(n), _) => format!("{n} (set here)"),
            (None, Some(n)) => format!("{n} (configured)"),
            (None, None) => "unlimited".to_owned(),
        }
    };
    let top: Vec<(String, u64, String)> = {
        let mut by_tokens: Vec<&UserRow> = rows.iter().filter(|r| r.week.tokens() > 0).collect();
        by_tokens.sort_by_key(|r| std::cmp::Reverse(r.week.tokens()));
        by_tokens
            .into_iter()
            .take(10)
            .map(|r| {
                let label = r.name.clone().unwrap_or_else(|| r.workspace.clone());
                (label, r.week.tokens(), r.week.tokens().to_string())
            })
            .collect()
    };
    pages::layout(
        "Users",
        Some(csrf),
        html! {
            h1 { "Users" }
            p { "Everyone who used the bot in the last " (DAYS) " days (UTC), and everyone blocked or given their own budget. "
                "Today is " (today.format("%a %d %b")) "." }
            @if !top.is_empty() {
                h2 { "Tokens per user, last " (DAYS) " days" }
                (pages::bars(top.into_iter()))
            }
            @if rows.is_empty() {
                p class="empty" { "Nobody yet." }
            } @else {
                table class="users" {
                    thead { tr {
                        th { "User" } th { "Tokens today" } th { "Tokens, " (DAYS) " days" }
                        th { "Messages today" } th { "Rate limit" } th { "Daily budget" } th { "State" } th {}
                    } }
                    tbody {
                        @for r in rows {
                            @let blocked = r.control.as_ref().is_some_and(|c| c.blocked);
                            tr class=(if blocked { "blocked" } else { "" }) data-user=(r.workspace) {
                                td {
                                    @if let Some(name) = &r.name { (name) br; }
                                    code { (r.workspace) }
                                }
                                td { (r.today.tokens) }
                                td { (r.week.tokens()) }
                                td { (r.today.messages)
                                    @if r.today.unanswered > 0 { " (" (r.today.unanswered) " not answered)" } }
                                td { (r.rate.as_deref().unwrap_or("off")) }
                                td {
                                    (budget_text(r))
                                    form method="post" action="/admin/users/control" class="budget" {
                                        input type="hidden" name="csrf" value=(csrf);
                                        input type="hidden" name="ws" value=(r.workspace);
                                        input type="hidden" name="action" value="budget";
                                        input type="number" name="tokens" min="0" placeholder="configured"
                                            value=[r.control.as_ref().and_then(|c| c.tokens_per_day)];
                                        button type="submit" { "Set" }
                                    }
                                }
                                td {
                                    @if blocked { span class="tag bad" { "blocked" } } @else { "answered" }
                                    @if let Some(c) = &r.control {
                                        br; span class="empty" { "by " (c.changed_by) ", " (c.changed_at.format("%Y-%m-%d %H:%M")) }
                                    }
                                }
                                td {
                                    form method="post" action="/admin/users/control" {
                                        input type="hidden" name="csrf" value=(csrf);
                                        input type="hidden" name="ws" value=(r.workspace);
                                        input type="hidden" name="action" value=(if blocked { "unblock" } else { "block" });
                                        button type="submit" { (if blocked { "Unblock" } else { "Block" }) }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        },
    )
}
