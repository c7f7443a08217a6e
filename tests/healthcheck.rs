//! `air-friends healthcheck` against the real daemon: exit 0 and `ready` while it serves (and
//! the daemon has logged "air-friends ready"), exit 1 with the failing check while it is not
//! ready, exit 1 with "not running" when nothing answers at `health.host:health.port`; a
//! platform that refuses the connection for good (Discord without the Message Content intent)
//! is one actionable error record, and `/readyz` (so `healthcheck`) says what to do.

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_intent_is_one_actionable_record_and_readyz_says_it() {
    let mut bot = DiscordServe::start(|_| DiscordSetup {
        refused_intents: true,
        ..DiscordSetup::default()
    })
    .await;
    let scratch = tempfile::tempdir().unwrap();
    // The start waited for "not connected", which readiness says before the refusal too: the
    // refusal's own words come once the gateway closed the connection.
    let (code, line) = tokio::task::block_in_place(|| {
        common::poll::blocking_poll(common::serve_discord::WAIT, || {
            let (code, line) = healthcheck(scratch.path(), &bot.ops_addr);
            line.contains("refused").then_some((code, line))
        })
    })
    .unwrap_or_else(|| healthcheck(scratch.path(), &bot.ops_addr));
    assert_eq!(code, Some(1), "{line}");
    assert!(
        line.contains(
            "discord: Discord refused the gateway intents: switch on the Message Content intent"
        ),
        "{line}"
    );
    let refused = tokio::task::block_in_place(|| {
        bot.logged_or_wait(|l| l["message"] == "Discord refused the connection; not retrying")
    });
    assert_eq!(refused["level"], "ERROR", "{refused}");
    // Every line up to a clean exit: the refusal is the only error, and "ready" never came.
    bot.daemon.terminate();
    let status =
        tokio::task::block_in_place(|| bot.daemon.wait_exit(std::time::Duration::from_secs(30)));
    assert!(status.success(), "{status:?}");
    let logged = bot.logged();
    let errors: Vec<_> = logged.iter().filter(|l| l["level"] == "ERROR").collect();
    assert_eq!(errors.len(), 1, "one record: {errors:?}");
    assert!(
        !logged.iter().any(|l| l["message"] == "air-friends ready"),
        "never ready"
    );
}
