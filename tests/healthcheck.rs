//! `air-friends healthcheck` against the real daemon: exit 0 and `ready` while it serves (and
//! the daemon has logged "air-friends ready"), exit 1 with the failing check while it is not
//! ready, exit 1 with "not running" when nothing answers at `health.host:health.port`.

mod common;

use std::path::Path;
use std::process::Command;

use common::serve_discord::{DiscordServe, DiscordSetup};
use common::{Daemon, TestConfig, bin};

/// Runs `air-friends healthcheck` with a configuration naming the ops listener at `addr`;
/// returns the exit code and the line printed.
fn healthcheck(dir: &Path, addr: &str) -> (Option<i32>, String) {
    let (host, port) = addr.rsplit_once(':').unwrap();
    let config = dir.join("healthcheck.yaml");
    std::fs::write(
        &config,
        format!("health:\n  host: {host}\n  port: {port}\n"),
    )
    .unwrap();
    let out = Command::new(bin())
        .args(["healthcheck", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).trim().to_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthcheck_exits_0_while_the_daemon_serves_and_1_when_it_does_not() {
    let mut bot = DiscordServe::start(|_| DiscordSetup::default()).await;
    let scratch = tempfile::tempdir().unwrap();
    let files = scratch.path();
    let (code, line) = healthcheck(files, &bot.ops_addr);
    assert_eq!((code, line.as_str()), (Some(0), "ready"));
    // Ready, and said so once Discord is connected (it was not logged before `/readyz` said so).
    let ready = tokio::task::block_in_place(|| {
        bot.daemon
            .wait_for_log(std::time::Duration::from_secs(10), |l| {
                l["message"] == "air-friends ready"
            })
    });
    assert_eq!(ready["status"], "ready", "{ready}");
    bot.stop();

    // Nothing listens there any more.
    let (code, line) = healthcheck(files, "127.0.0.1:1");
    assert_eq!(code, Some(1));
    assert!(line.starts_with("not running"), "{line}");

    // No platform enabled: the daemon runs but is not ready, and says why.
    let cfg = TestConfig::new("agent:\n  command: sh\n");
    let mut daemon = Daemon::start(&cfg.path, &[]);
    let addr = daemon.listener_addr("ops");
    let (code, line) = healthcheck(cfg.dir.path(), &addr);
    assert_eq!(code, Some(1), "{line}");
    assert!(
        line.starts_with("not ready") && line.contains("platforms: none enabled"),
        "{line}"
    );
    daemon.terminate();
}
