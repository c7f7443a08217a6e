//! The resource half of the third attack, against the running daemon: `air-friends serve` on
//! the fake Discord runs the scripted fake agent in the real bubblewrap sandbox, with the
//! agent's cgroup required, and the agent does what a hijacked one would to exhaust the host —
//! 400 processes, 1 GiB of memory touched, a 2 GiB `fallocate`, writes into `/` and `/dev`,
//! and 600 MB written into the sandbox's own tmpfs (pages no process's rlimit counts). While
//! it runs, the test polls `/readyz` and the daemon's resident memory; afterwards the user has
//! been told in words and the operator has the cause in the metrics.

mod common;

use std::time::{Duration, Instant};

use air_friends::conversation::notices::Notice;
use common::fake_discord::CHANNEL_ID;
use common::serve_discord::{DiscordServe, DiscordSetup, WAIT, one_turn};
use serde_json::{Value, json};

/// Forks up to 400 sleepers and prints how many it got.
const FORK_400: &str = r#"perl -e 'my $n = 0; for (1..400) { my $p = fork; last unless defined $p; if ($p == 0) { close STDOUT; close STDERR; sleep 60; exit 0 } $n++ } print $n'"#;

/// The daemon's resident set in KiB.
fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resource_attack_from_the_sandbox_leaves_the_daemon_ready_and_the_user_told() {
    let steps = vec![
        json!({"run": FORK_400}),
        json!({"run": r#"perl -e '$x = "a" x (1 << 30); print length $x'; echo " exit $?""#}),
        json!({"run": "fallocate -l 2G big 2>/dev/null; echo $?"}),
        json!({"run": "(: > /planted) 2>/dev/null; (: > /dev/planted) 2>/dev/null; echo $?"}),
        json!({"run": "head -c 600000000 /dev/zero > /tmp/fill; echo $?"}),
        json!({"run": "echo survived"}),
    ];
    let bot = DiscordServe::start(|_| DiscordSetup {
        script: one_turn(steps),
        // Fails where no cgroup can bound memory: run as root, or under the systemd unit.
        sandbox: Some(
            "    tmpSizeMb: 1024\n    cgroup: required\n    limits:\n      maxMemoryMb: 256\n"
                .into(),
        ),
        ..DiscordSetup::default()
    })
    .await;
    let pid = bot.daemon.child.id();
    let before = rss_kib(pid);
    assert!(before > 0);

    bot.mention("please do something heavy");
    let (mut peak, mut polls) = (before, 0);
    let deadline = Instant::now() + WAIT;
    while bot.bot_messages(CHANNEL_ID).is_empty() {
        assert!(Instant::now() < deadline, "no answer within {WAIT:?}");
        let (code, body) = bot.readyz().await;
        assert_eq!(code, 200, "the daemon stopped being ready: {body}");
        peak = peak.max(rss_kib(pid));
        polls += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        polls >= 3,
        "the attack was over before readiness could be watched"
    );
    let replies = bot.wait_bot_messages(CHANNEL_ID, 1).await;
    assert_eq!(replies[0].content, Notice::MemoryLimit.english());
    assert!(
        peak < before + 64 * 1024,
        "the daemon's RSS went from {before} to {peak} KiB"
    );

    // What each step got: the agent's log lives in its workspace.
    let results: Vec<Value> = bot
        .agent
        .log_lines()
        .into_iter()
        .filter(|v| v["event"] == "run")
        .map(|v| v["result"]["stdout"].clone())
        .collect();
    let out = |i: usize| results.get(i).and_then(Value::as_str).unwrap_or("").trim();
    let forked: u32 = out(0).parse().unwrap_or(0);
    assert!(
        (1..256).contains(&forked),
        "{forked} processes: {results:?}"
    );
    assert!(
        out(1).ends_with("exit 137"),
        "1 GiB was touched: {results:?}"
    );
    assert_ne!(out(2), "0", "a 2 GiB fallocate passed: {results:?}");
    assert_ne!(out(3), "0", "wrote into / or /dev: {results:?}");
    assert!(
        results.len() < 6,
        "the agent outlived 600 MB of tmpfs in a 256 MiB sandbox: {results:?}"
    );

    let metrics = bot.metrics().await;
    assert!(
        metrics
            .contains(r#"air_friends_sessions_total{platform="discord",place="default",outcome="memory_limit"} 1"#),
        "{metrics}"
    );
    bot.stop();
}
