//! The ops listener: `/healthz` (liveness), `/readyz` (readiness checks) and `/metrics`
//! (Prometheus text).

pub mod checks;
mod readiness;

use std::future::Future;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::json;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

pub use readiness::{CheckFuture, CheckReport, Readiness, Verdict};

use crate::observability::{Format, Metrics};

/// What the ops endpoints read.
#[derive(Clone, Debug)]
pub struct OpsState {
    /// Registered readiness checks.
    pub readiness: Readiness,
    /// The metrics registry.
    pub metrics: Metrics,
    /// Cancelled when the daemon starts draining: `/readyz` then answers 503 (as when a gating
    /// check fails; a failing degrading check answers 200 with `status: degraded`).
    pub draining: CancellationToken,
}

/// The ops router.
pub fn router(state: OpsState) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(state)
}

/// Serves the ops router, with `extra` routes beside it (the operator console), on an
/// already-bound listener until `shutdown` completes.
pub async fn serve(
    listener: TcpListener,
    state: OpsState,
    extra: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router(state).merge(extra))
        .with_graceful_shutdown(shutdown)
        .await
}

async fn healthz() -> impl IntoResponse {
    (StatusCode::OK, "ok\n")
}

async fn readyz(State(state): State<OpsState>) -> Response {
    let checks = state.readiness.run().await;
    let draining = state.draining.is_cancelled();
    let verdict = Verdict::of(&checks);
    let status = if !draining && verdict.serves() {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let body = json!({
        "status": if draining { "draining" } else { verdict.as_str() },
        "checks": checks,
    });
    (status, axum::Json(body)).into_response()
}

/// The registry in the format the scraper asks for (see [`Format::negotiate`]).
async fn metrics(State(state): State<OpsState>, headers: HeaderMap) -> Response {
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
    let format = Format::negotiate(accept);
    match state.metrics.encode(format) {
        Ok(text) => ([(header::CONTENT_TYPE, format.content_type())], text).into_response(),
        Err(e) => {
            tracing::error!(error = %e, "encoding metrics failed");
            StatusCode::INTERNAL_SERVER_ERROR.into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::http::Request;
    use tower::ServiceExt;

    fn state() -> OpsState {
        OpsState {
            readiness: Readiness::new(),
            metrics: Metrics::new(),
            draining: CancellationToken::new(),
        }
    }

    async fn get(app: Router, uri: &str) -> (StatusCode, String) {
        let resp = app
            .oneshot(Request::get(uri).body(Body::empty()).unwrap())
            .await
            .unwrap();
        let status = resp.status();
        let bytes = axum::body::to_bytes(resp.into_body(), 1 << 20)
            .await
            .unwrap();
        (status, String::from_utf8(bytes.to_vec()).unwrap())
    }

    #[tokio::test]
    async fn healthz_is_ok() {
        assert_eq!(get(router(state()), "/healthz").await.0, StatusCode::OK);
    }

    #[tokio::test]
    async fn readyz_reports_failing_checks_with_503() {
        let s = state();
        s.readiness.register("database", || async { Ok(()) });
        s.readiness
            .register("agent_command", || async { Err("not found".to_owned()) });
        let (status, body) = get(router(s), "/readyz").await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["status"], "not_ready");
        assert_eq!(v["checks"][1]["name"], "agent_command");
        assert_eq!(v["checks"][1]["detail"], "not found");
    }

    #[tokio::test]
    async fn readyz_is_ok_when_all_pass_and_503_while_draining() {
        let s = state();
        s.readiness.register("database", || async { Ok(()) });
        assert_eq!(get(router(s.clone()), "/readyz").await.0, StatusCode::OK);
        s.draining.cancel();
        let (status, body) = get(router(s), "/readyz").await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert!(body.contains("draining"));
    }

    #[tokio::test]
    async fn readyz_is_200_and_degraded_when_only_a_degrading_check_fails() {
        let s = state();
        s.readiness.register("database", || async { Ok(()) });
        s.readiness
            .register_degrading("model", || async { Err("key rejected".to_owned()) });
        let (status, body) = get(router(s), "/readyz").await;
        assert_eq!(status, StatusCode::OK);
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["status"], "degraded");
        assert_eq!(v["checks"][1]["name"], "model");
        assert_eq!(v["checks"][1]["degrades"], true);
        assert_eq!(v["checks"][1]["detail"], "key rejected");
    }

    #[tokio::test]
    async fn metrics_serves_the_format_the_scraper_asks_for() {
        let (status, body) = get(router(state()), "/metrics").await;
        assert_eq!(status, StatusCode::OK);
        assert!(
            body.contains("# TYPE air_friends_build_info gauge"),
            "{body}"
        );
        assert!(body.contains("process_start_time_seconds "), "{body}");

        let resp = router(state())
            .oneshot(
                Request::get("/metrics")
                    .header(header::ACCEPT, "application/openmetrics-text;version=1.0.0")
                    .body(Body::empty())
                    .unwrap(),
            )
            .await
            .unwrap();
        assert_eq!(
            resp.headers()[header::CONTENT_TYPE],
            Format::OpenMetrics.content_type()
        );
        let bytes = axum::body::to_bytes(resp.into_body(), 1 << 20)
            .await
            .unwrap();
        assert!(String::from_utf8_lossy(&bytes).ends_with("# EOF\n"));
    }
}
