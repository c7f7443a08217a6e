//! The daemon's control socket: operator commands that need the running daemon (today
//! `forget-user`, which must stop the user's agents first) reach it here.
//!
//! A Unix socket beside the database, `{database}.control`, mode 0600: only the daemon's own
//! user (and root) can connect, so the file system is the authentication, and it is never on a
//! network. It speaks HTTP/1.1 (the Skill API's accept loop, `skill_api::listener`), one JSON
//! request and answer per call:
//!
//! * `POST /v1/forget-user` `{"platform": "discord", "user": "123", "now": false}` → 200 with
//!   the [`ForgetReport`]; 409 `turn_running` / `already_erasing`; 400 `invalid_user`; 500 the
//!   rest, each as `{"code": ..., "error": ...}`.
//! * `POST /v1/schedules/run` `{"name": "morning"}` → runs the schedule now and answers, when
//!   the run ends, 200 with the [`ScheduleRunReport`]; 404 `unknown_schedule`;
//!   409 `running`; 503 `draining`.
//! * `POST /v1/admin/link` `{}` → a one-time login link for the operator console:
//!   200 `{"url": ..., "minutes": ...}`; 404 `admin_disabled` when `admin.enabled` is off.
//!
//! The socket is bound under a temporary name, made 0600 and renamed into place, so it is
//! never reachable with wider permissions; a stale one (the daemon holds the database lock, so
//! it is no other daemon's) is replaced.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use axum::{Json, Router};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::net::{UnixListener, UnixStream};
use tokio_util::sync::CancellationToken;

use crate::admin::Console;
use crate::platform::PlatformKind;
use crate::privacy::{EraseError, Eraser, ForgetReport};
use crate::schedules::{Scheduler, TriggerError};
use crate::skill_api::listener::{ConnectionPolicy, run_listener};
use crate::store::erasure::RequestedBy;

/// How long a client waits for an answer (an erasure waits up to 30 s for agents to stop, then
/// vacuums the database).
const CLIENT_TIMEOUT: Duration = Duration::from_secs(600);

/// The control socket of the database at `database`.
pub fn socket_path(database: &Path) -> PathBuf {
    let mut name = database.as_os_str().to_owned();
    name.push(".control");
    PathBuf::from(name)
}

/// The body of `POST /v1/forget-user`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ForgetUserRequest {
    /// `discord` or `misskey`.
    pub platform: String,
    /// The user's id on it.
    pub user: String,
    /// Stop a running turn of theirs first instead of refusing.
    #[serde(default)]
    pub now: bool,
}

/// The body of `POST /v1/schedules/run`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScheduleRunRequest {
    /// The schedule's name.
    pub name: String,
}

/// How a run asked for by hand ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScheduleRunReport {
    /// The schedule.
    pub name: String,
    /// The run's outcome (`posted`, `silent`, `skipped_quiet`, `failed`, …).
    pub outcome: String,
    /// Why, when it did not post.
    pub detail: Option<String>,
    /// Model tokens the run used.
    pub tokens: u64,
}

/// What the control socket acts on.
#[derive(Clone)]
pub struct Control {
    /// Erases users.
    pub eraser: Eraser,
    /// Runs schedules by hand.
    pub scheduler: Scheduler,
    /// The operator console, when enabled: mints its login links.
    pub console: Option<Console>,
}

/// Binds the control socket of `database` (0600) and serves it until `stop`; the socket file is
/// removed when it ends.
pub async fn serve(
    database: &Path,
    control: Control,
    stop: CancellationToken,
) -> anyhow::Result<()> {
    let path = socket_path(database);
    let listener = bind(&path)?;
    tracing::info!(path = %path.display(), "control socket listening");
    let app = router(control);
    let policy = ConnectionPolicy {
        header_read_timeout: Duration::from_secs(10),
        max_connections: 4,
        drain_timeout: Some(Duration::from_secs(5)),
    };
    run_listener(listener, app, policy, stop.cancelled_owned()).await;
    let _ = std::fs::remove_file(&path);
    Ok(())
}

/// The control socket's routes.
fn router(control: Control) -> Router {
    Router::new()
        .route("/v1/forget-user", post(forget_user))
        .route("/v1/schedules/run", post(run_schedule))
        .route("/v1/admin/link", post(admin_link))
        .with_state(control)
}

/// Binds `path` with mode 0600 from the first moment it is reachable.
fn bind(path: &Path) -> anyhow::Result<UnixListener> {
    let mut staging = path.as_os_str().to_owned();
    staging.push(format!(".{}", std::process::id()));
    let staging = PathBuf::from(staging);
    let _ = std::fs::remove_file(&staging);
    let listener = UnixListener::bind(&staging)
        .with_context(|| format!("cannot bind the control socket {}", staging.display()))?;
    let placed = std::fs::set_permissions(&staging, std::fs::Permissions::from_mode(0o600))
        .and_then(|()| std::fs::rename(&staging, path));
    if let Err(e) = placed {
        let _ = std::fs::remove_file(&staging);
        return Err(e)
            .with_context(|| format!("cannot place the control socket {}", path.display()));
    }
    Ok(listener)
}

async fn admin_link(State(control): State<Control>) -> (StatusCode, Json<Value>) {
    let Some(console) = &control.console else {
        return failure(
            StatusCode::NOT_FOUND,
            "admin_disabled",
            "the operator console is off (set admin.enabled: true and restart)",
        );
    };
    match console.login_link() {
        Ok((url, minutes)) => (
            StatusCode::OK,
            Json(json!({"url": url, "minutes": minutes})),
        ),
        Err(e) => failure(StatusCode::INTERNAL_SERVER_ERROR, "entropy", &e.to_string()),
    }
}

/// Asks the daemon serving `database` for a one-time console login link: its URL and how many
/// minutes it is valid.
pub async fn request_admin_link(database: &Path) -> anyhow::Result<(String, u64)> {
    let answer = call(&socket_path(database), "/v1/admin/link", &json!({})).await?;
    let url = answer["url"]
        .as_str()
        .context("the daemon's answer has no url")?
        .to_owned();
    Ok((url, answer["minutes"].as_u64().unwrap_or_default()))
}

async fn forget_user(
    State(Control { eraser, .. }): State<Control>,
    body: Result<Json<ForgetUserRequest>, axum::extract::rejection::JsonRejection>,
) -> (StatusCode, Json<Value>) {
    let request = match request_of(body) {
        Ok(request) => request,
        Err(refused) => return refused,
    };
    let Ok(platform) = request.platform.parse::<PlatformKind>() else {
        let text = format!("unknown platform {:?}", request.platform);
        return failure(StatusCode::BAD_REQUEST, "invalid_user", &text);
    };
    match eraser
        .forget_user(platform, &request.user, request.now, RequestedBy::Operator)
        .await
    {
        Ok(report) => (
            StatusCode::OK,
            Json(serde_json::to_value(report).unwrap_or_default()),
        ),
        Err(error) => {
            let status = match &error {
                EraseError::InvalidUser(_) => StatusCode::BAD_REQUEST,
                EraseError::TurnRunning { .. } | EraseError::AlreadyErasing => StatusCode::CONFLICT,
                _ => StatusCode::INTERNAL_SERVER_ERROR,
            };
            failure(status, error.code(), &error.to_string())
        }
    }
}

async fn run_schedule(
    State(control): State<Control>,
    body: Result<Json<ScheduleRunRequest>, axum::extract::rejection::JsonRejection>,
) -> (StatusCode, Json<Value>) {
    let request = match request_of(body) {
        Ok(request) => request,
        Err(refused) => return refused,
    };
    tracing::info!(schedule = %request.name, "a schedule run was asked for by hand");
    match control.scheduler.run_now(&request.name).await {
        Ok(end) => {
            let report = ScheduleRunReport {
                name: request.name,
                outcome: end.outcome.to_owned(),
                detail: end.detail,
                tokens: end.tokens,
            };
            (
                StatusCode::OK,
                Json(serde_json::to_value(report).unwrap_or_default()),
            )
        }
        Err(error) => {
            let status = match &error {
                TriggerError::Unknown(_) => StatusCode::NOT_FOUND,
                TriggerError::Running(_) => StatusCode::CONFLICT,
                TriggerError::Draining => StatusCode::SERVICE_UNAVAILABLE,
            };
            failure(status, error.code(), &error.to_string())
        }
    }
}

/// A request's JSON body, or the 400 `bad_request` answer saying what is wrong with it.
fn request_of<T>(
    body: Result<Json<T>, axum::extract::rejection::JsonRejection>,
) -> Result<T, (StatusCode, Json<Value>)> {
    body.map(|Json(request)| request).map_err(|rejection| {
        failure(
            StatusCode::BAD_REQUEST,
            "bad_request",
            &rejection.body_text(),
        )
    })
}

fn failure(status: StatusCode, code: &str, error: &str) -> (StatusCode, Json<Value>) {
    (status, Json(json!({ "code": code, "error": error })))
}

/// A refusal or failure the daemon answered with.
#[derive(Debug, thiserror::Error)]
#[error("{error} ({code})")]
pub struct Refused {
    /// The error's code (`turn_running`, `invalid_user`, ...).
    pub code: String,
    /// What the daemon said.
    pub error: String,
}

/// Asks the daemon serving `database` to erase a user; answers its report, or its refusal as a
/// [`Refused`] inside the error.
pub async fn request_forget_user(
    database: &Path,
    request: &ForgetUserRequest,
) -> anyhow::Result<ForgetReport> {
    let path = socket_path(database);
    let answer = call(&path, "/v1/forget-user", request).await?;
    Ok(serde_json::from_value(answer)?)
}

/// Asks the daemon serving `database` to run schedule `name` now; answers how the run ended,
/// or the daemon's refusal as a [`Refused`] inside the error.
pub async fn request_schedule_run(
    database: &Path,
    name: &str,
) -> anyhow::Result<ScheduleRunReport> {
    let path = socket_path(database);
    let request = ScheduleRunRequest {
        name: name.to_owned(),
    };
    let answer = call(&path, "/v1/schedules/run", &request).await?;
    Ok(serde_json::from_value(answer)?)
}

/// One call on the control socket at `path`: the 200 answer's JSON, or a [`Refused`] error.
async fn call(path: &Path, route: &str, body: &impl Serialize) -> anyhow::Result<Value> {
    let stream = UnixStream::connect(path).await.with_context(|| {
        format!(
            "cannot reach the daemon's control socket {} (run this as the daemon's user, or root)",
            path.display()
        )
    })?;
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    let driver = tokio::spawn(connection);
    let request = hyper::Request::post(route)
        .header("host", "control")
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(serde_json::to_vec(body)?)))?;
    let exchange = async {
        let response = sender.send_request(request).await?;
        let status = response.status();
        let bytes = response.into_body().collect().await?.to_bytes();
        anyhow::Ok((status, bytes))
    };
    let (status, bytes) = tokio::time::timeout(CLIENT_TIMEOUT, exchange)
        .await
        .context("the daemon did not answer in time")??;
    driver.abort();
    let value: Value = serde_json::from_slice(&bytes)
        .with_context(|| format!("the daemon answered {status} with something not JSON"))?;
    if status.is_success() {
        return Ok(value);
    }
    let field = |k: &str| {
        value
            .get(k)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    };
    Err(Refused {
        code: field("code"),
        error: field("error"),
    }
    .into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::http::Request;
    use tower::ServiceExt;

    use crate::conversation::workspace::Workspaces;
    use crate::schedules::{Schedule, ScheduleMetrics, SchedulerParts};
    use crate::store::{Importance, NewMemory, Store, Visibility, WorkspaceKey};

    async fn call(app: &Router, body: &str) -> (StatusCode, Value) {
        call_at(app, "/v1/forget-user", body).await
    }

    async fn call_at(app: &Router, route: &str, body: &str) -> (StatusCode, Value) {
        let response = app
            .clone()
            .oneshot(
                Request::post(route)
                    .header("content-type", "application/json")
                    .body(Body::from(body.to_owned()))
                    .unwrap(),
            )
            .await
            .unwrap();
        let status = response.status();
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        (
            status,
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        )
    }

    /// Every refusal is a typed answer with its code; an erasure answers its report.
    #[tokio::test]
    async fn forget_user_answers_its_report_or_a_typed_refusal() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("air.db")).await.unwrap();
        let ws = WorkspaceKey::new("discord", "7").unwrap();
        store
            .save_memory(NewMemory {
                workspace: ws.clone(),
                content: "likes tea".into(),
                visibility: Visibility::Public,
                importance: Importance::Normal,
            })
            .await
            .unwrap();
        let eraser = Eraser::new(
            store.clone(),
            Workspaces::new(&dir.path().join("workspaces")),
            dir.path(),
        );
        let app = router(Control {
            eraser,
            scheduler: scheduler(&store, Vec::new()),
            console: None,
        });
        for (body, status, code) in [
            ("not json", StatusCode::BAD_REQUEST, "bad_request"),
            (
                r#"{"platform":"discord"}"#,
                StatusCode::BAD_REQUEST,
                "bad_request",
            ),
            (
                r#"{"platform":"discord","user":"7","extra":1}"#,
                StatusCode::BAD_REQUEST,
                "bad_request",
            ),
            (
                r#"{"platform":"slack","user":"7"}"#,
                StatusCode::BAD_REQUEST,
                "invalid_user",
            ),
            (
                r#"{"platform":"discord","user":"../7"}"#,
                StatusCode::BAD_REQUEST,
                "invalid_user",
            ),
            (
                r#"{"platform":"discord","user":"a b"}"#,
                StatusCode::BAD_REQUEST,
                "invalid_user",
            ),
        ] {
            let (got, answer) = call(&app, body).await;
            assert_eq!(
                (got, answer["code"].as_str()),
                (status, Some(code)),
                "{body}: {answer}"
            );
            assert!(answer["error"].is_string());
        }
        let (status, report) = call(&app, r#"{"platform":"discord","user":"7"}"#).await;
        assert_eq!(status, StatusCode::OK, "{report}");
        assert_eq!(report["user"], "discord/7");
        assert_eq!(report["erased"]["memories"], 1);
        assert!(serde_json::from_value::<ForgetReport>(report).is_ok());
        store.close().await.unwrap();
    }

    /// Posts "Hi." at once.
    struct Posts;

    #[async_trait::async_trait]
    impl crate::schedules::ScheduledRuns for Posts {
        async fn run_scheduled(
            &self,
            _task: &crate::conversation::scheduled::ScheduledTask,
            _stop: &CancellationToken,
        ) -> crate::conversation::scheduled::ScheduledEnd {
            crate::conversation::scheduled::ScheduledEnd {
                outcome: "posted",
                detail: None,
                tokens: 12,
            }
        }
    }

    /// A scheduler of `schedules` whose runs all post at once.
    fn scheduler(store: &Store, schedules: Vec<Schedule>) -> Scheduler {
        Scheduler::new(SchedulerParts {
            schedules,
            store: store.clone(),
            runs: std::sync::Arc::new(Posts),
            metrics: ScheduleMetrics::new(&crate::observability::Metrics::new(), ["hi"]),
            draining: CancellationToken::new(),
            stop: CancellationToken::new(),
            permits: std::sync::Arc::new(tokio::sync::Semaphore::new(1)),
        })
    }

    /// A run by hand answers its report when it ends; unknown names, a daemon without
    /// schedules and bad bodies are typed refusals.
    #[tokio::test]
    async fn a_schedule_run_answers_how_it_ended_or_a_typed_refusal() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("schedules")).unwrap();
        std::fs::write(dir.path().join("schedules/t.md"), "Say hi.").unwrap();
        let store = Store::open(&dir.path().join("air.db")).await.unwrap();
        let eraser = Eraser::new(
            store.clone(),
            Workspaces::new(&dir.path().join("workspaces")),
            dir.path(),
        );
        let without = router(Control {
            eraser: eraser.clone(),
            scheduler: scheduler(&store, Vec::new()),
            console: None,
        });
        let (status, answer) = call_at(&without, "/v1/admin/link", "{}").await;
        assert_eq!(
            (status, answer["code"].as_str()),
            (StatusCode::NOT_FOUND, Some("admin_disabled")),
            "no console, no link"
        );
        let (status, answer) = call_at(&without, "/v1/schedules/run", r#"{"name":"hi"}"#).await;
        assert_eq!(
            (status, answer["code"].as_str()),
            (StatusCode::NOT_FOUND, Some("unknown_schedule"))
        );
        let config = crate::config::ScheduleConfig {
            name: "hi".into(),
            cron: "@yearly".into(),
            place: "discord/guild/1/channel/2".into(),
            prompt: "t.md".into(),
            ..Default::default()
        };
        let app = router(Control {
            eraser,
            scheduler: scheduler(&store, vec![Schedule::new(&config, dir.path()).unwrap()]),
            console: None,
        });
        for (body, status, code) in [
            ("{}", StatusCode::BAD_REQUEST, "bad_request"),
            (
                r#"{"name":"hi","x":1}"#,
                StatusCode::BAD_REQUEST,
                "bad_request",
            ),
            (
                r#"{"name":"bye"}"#,
                StatusCode::NOT_FOUND,
                "unknown_schedule",
            ),
        ] {
            let (got, answer) = call_at(&app, "/v1/schedules/run", body).await;
            assert_eq!(
                (got, answer["code"].as_str()),
                (status, Some(code)),
                "{body}: {answer}"
            );
        }
        let (status, report) = call_at(&app, "/v1/schedules/run", r#"{"name":"hi"}"#).await;
        assert_eq!(status, StatusCode::OK, "{report}");
        assert_eq!(
            serde_json::from_value::<ScheduleRunReport>(report).unwrap(),
            ScheduleRunReport {
                name: "hi".into(),
                outcome: "posted".into(),
                detail: None,
                tokens: 12,
            }
        );
        store.close().await.unwrap();
    }
}
