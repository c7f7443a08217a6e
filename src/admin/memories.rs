//! *Memories*: every user's memories and reminders by state; a user's public memories,
//! searched, each disabled or enabled with a recorded patch as the memory-patch skill does;
//! private ones only counted and listed by id and date, their text shown only when the operator
//! reveals one (an audit record each time).

use axum::Router;
use axum::extract::{Form, Query, State};
use axum::http::HeaderMap;
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use serde::Deserialize;

use super::{Console, Problem, changing, pages, workspace};
use crate::store::{ExportFilter, MemoryPatch, Scope, Visibility};

/// The page's routes.
pub(super) fn routes() -> Router<Console> {
    Router::new()
        .route("/admin/memories", get(memories))
        .route("/admin/memories/of", get(memories_of))
        .route("/admin/memories/toggle", post(toggle_memory))
        .route("/admin/memories/reveal", post(reveal_memory))
}

async fn memories(State(console): State<Console>, headers: HeaderMap) -> Result<Response, Problem> {
    let session = console.viewing(&headers)?;
    let overview = console.store()?.workspace_overview().await?;
    Ok(Html(pages::memories_index(&overview, &session.csrf).into_string()).into_response())
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
) -> Result<Response, Problem> {
    let session = console.viewing(&headers)?;
    let store = console.store()?;
    let ws = workspace(&query.ws)?;
    let q = query.q.trim();
    // One read of every memory, split by visibility: of the private ones only what identifies
    // them, never their text.
    let (public_all, private): (Vec<_>, Vec<_>) = store
        .export_memories(&ws, ExportFilter::all(Scope::IncludePrivate))
        .await?
        .into_iter()
        .partition(|m| m.visibility != Visibility::Private);
    let private: Vec<pages::PrivateMemory> = private
        .into_iter()
        .rev()
        .map(|m| pages::PrivateMemory {
            id: m.id,
            created_at: m.created_at,
            enabled: m.enabled,
        })
        .collect();
    let public_total = public_all.len();
    let public = if q.is_empty() {
        public_all
            .into_iter()
            .rev()
            .take(pages::MEMORIES_SHOWN)
            .collect()
    } else {
        store
            .search_memories(&ws, q, Scope::PublicOnly, 100)
            .await?
            .into_iter()
            .map(|hit| hit.memory)
            .collect()
    };
    let view = pages::WorkspaceView {
        workspace: ws.to_string(),
        public,
        public_total,
        private,
        query: (!q.is_empty()).then(|| q.to_owned()),
    };
    Ok(Html(pages::memories_of(&view, &session.csrf).into_string()).into_response())
}

/// A form naming one memory of a workspace (`enabled`: what a toggle sets it to).
#[derive(Deserialize)]
struct MemoryForm {
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
    Form(form): Form<MemoryForm>,
) -> Result<Response, Problem> {
    let (_, session) = changing(&console, &headers, &form.csrf)?;
    let store = console.store()?;
    let ws = workspace(&form.ws)?;
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
            Ok(Redirect::to(&format!("/admin/memories/of?ws={ws}")).into_response())
        }
        Err(crate::store::StoreError::NotFound) => Err(Problem::NotFound("no such public memory")),
        Err(error) => Err(error.into()),
    }
}

/// Shows one private memory's text to the operator who asked, once, as the answer to the
/// request (never on a page that is shown again): an audit record each time.
async fn reveal_memory(
    State(console): State<Console>,
    headers: HeaderMap,
    Form(form): Form<MemoryForm>,
) -> Result<Response, Problem> {
    let (_, session) = changing(&console, &headers, &form.csrf)?;
    let ws = workspace(&form.ws)?;
    let memory = console
        .store()?
        .get_memory(&ws, &form.id, Scope::IncludePrivate)
        .await?
        .filter(|m| m.visibility == Visibility::Private)
        .ok_or(Problem::NotFound("no such private memory"))?;
    tracing::warn!(who = %session.who, action = "reveal private memory", workspace = %ws,
        memory_id = %memory.id, "admin action");
    Ok(Html(pages::revealed(&memory, &session.csrf).into_string()).into_response())
}
