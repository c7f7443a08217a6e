//! `air-friends healthcheck`: the running daemon's readiness as an exit status, for container
//! health checks and monitors. It asks `/readyz` on the configured ops listener
//! (`health.host:health.port`) and prints one line: `ready`, `degraded: <checks>` (exit 0: the
//! daemon serves) or `not ready: <checks>` / why it could not be asked (exit 1).

use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use crate::config::{self, ProcessEnv};

/// How long the daemon may take to answer.
const TIMEOUT: Duration = Duration::from_secs(5);

/// Asks the daemon configured at `config_path`.
pub(super) fn healthcheck_main(config_path: &Path) -> ExitCode {
    let config = match config::load_file(config_path, &ProcessEnv) {
        Ok(config) => config,
        Err(e) => {
            eprintln!("air-friends: {e}");
            return ExitCode::FAILURE;
        }
    };
    let host = &config.health.host;
    let host = if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]")
    } else {
        host.clone()
    };
    let url = format!("http://{host}:{}/readyz", config.health.port);
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("air-friends: cannot start: {e}");
            return ExitCode::FAILURE;
        }
    };
    let (line, serves) = runtime.block_on(ask(&url));
    println!("{line}");
    if serves {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// The line to print and whether the daemon serves.
async fn ask(url: &str) -> (String, bool) {
    let client = match reqwest::Client::builder().timeout(TIMEOUT).build() {
        Ok(client) => client,
        Err(e) => return (format!("cannot ask {url}: {e}"), false),
    };
    let response = match client.get(url).send().await {
        Ok(response) => response,
        Err(e) if e.is_connect() => {
            return (
                format!("not running: nothing answers at {url} (health.host, health.port)"),
                false,
            );
        }
        Err(e) => return (format!("no answer from {url}: {e}"), false),
    };
    let status = response.status();
    let body: serde_json::Value = response.json().await.unwrap_or_default();
    (summary(&body, status.as_u16()), status.is_success())
}

/// `ready`, or the status and every failing check with its detail.
fn summary(body: &serde_json::Value, http: u16) -> String {
    let status = body["status"]
        .as_str()
        .map_or_else(|| format!("HTTP {http}"), |s| s.replace('_', " "));
    let failing: Vec<String> = body["checks"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["ok"] == false)
        .map(|c| {
            format!(
                "{}: {}",
                c["name"].as_str().unwrap_or("?"),
                c["detail"].as_str().unwrap_or("failing")
            )
        })
        .collect();
    if failing.is_empty() {
        status
    } else {
        format!("{status}: {}", failing.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_line_names_the_status_and_each_failing_check() {
        assert_eq!(
            summary(&json!({"status": "ready", "checks": []}), 200),
            "ready"
        );
        let degraded = json!({"status": "degraded", "checks": [
            {"name": "database", "ok": true},
            {"name": "model", "ok": false, "detail": "the provider rejected the key"}
        ]});
        assert_eq!(
            summary(&degraded, 200),
            "degraded: model: the provider rejected the key"
        );
        let down = json!({"status": "not_ready", "checks": [
            {"name": "discord", "ok": false, "detail": "not connected"},
            {"name": "platforms", "ok": false}
        ]});
        assert_eq!(
            summary(&down, 503),
            "not ready: discord: not connected; platforms: failing"
        );
        assert_eq!(summary(&json!(null), 502), "HTTP 502");
    }
}
