//! Runs the real binary: `serve` comes up, answers the ops endpoints, reports to systemd, and
//! stops cleanly on SIGTERM; broken configurations fail fast with the key path.

mod common;

use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{Daemon, TestConfig, bin};

const SECRET: &str = "discord-secret-token-abc123";

fn http_get(addr: &str, path: &str) -> (u16, String) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let resp = reqwest::get(format!("http://{addr}{path}")).await.unwrap();
        let status = resp.status().as_u16();
        (status, resp.text().await.unwrap())
    })
}

/// Checks every line of a Prometheus/OpenMetrics text exposition.
fn assert_prometheus_text(body: &str) {
    let mut samples = 0;
    for line in body.lines() {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (name_labels, value) = line.rsplit_once(' ').expect("sample has a value");
        value
            .parse::<f64>()
            .unwrap_or_else(|_| panic!("bad sample value in {line:?}"));
        let name = name_labels.split('{').next().unwrap();
        assert!(
            !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':'),
            "bad metric name in {line:?}"
        );
        if let Some(labels) = name_labels.strip_prefix(name) {
            assert!(labels.is_empty() || (labels.starts_with('{') && labels.ends_with('}')));
        }
        samples += 1;
    }
    assert!(samples > 0, "no samples in:\n{body}");
}

#[test]
fn serve_answers_ops_endpoints_and_stops_on_sigterm() {
    let cfg = TestConfig::new(&format!(
        "agent:\n  command: sh\nlogging:\n  level: debug\nplatforms:\n  discord:\n    token: {SECRET}\nshutdownGraceMs: 5000\n"
    ));
    let notify_path = cfg.dir.path().join("notify.sock");
    let notify = UnixDatagram::bind(&notify_path).unwrap();
    notify
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();

    let mut daemon = Daemon::start(
        &cfg.path,
        &[
            ("NOTIFY_SOCKET", notify_path.to_str().unwrap()),
            ("WATCHDOG_USEC", "200000"),
        ],
    );
    let addr = daemon.listener_addr("ops");

    let mut received = Vec::new();
    let mut buf = [0u8; 256];
    while !(received.iter().any(|m: &String| m.contains("READY=1"))
        && received.iter().any(|m| m.contains("WATCHDOG=1")))
    {
        let n = notify.recv(&mut buf).expect("systemd notification");
        received.push(String::from_utf8_lossy(&buf[..n]).into_owned());
    }

    let (status, body) = http_get(&addr, "/healthz");
    assert_eq!(status, 200);
    assert_eq!(body.trim(), "ok");

    // No platform is enabled: serve runs (for maintenance and tests) but is not ready, says
    // why, and never logs "ready".
    let (status, body) = http_get(&addr, "/readyz");
    assert_eq!(status, 503, "{body}");
    let ready: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(ready["status"], "not_ready");
    let mut names: Vec<&str> = ready["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    // The platforms and the sandbox register theirs concurrently.
    names.sort_unstable();
    assert_eq!(
        names,
        ["agent_command", "database", "model", "platforms", "sandbox"]
    );
    let check = |name: &str| {
        ready["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == name)
            .unwrap()
            .clone()
    };
    assert_eq!(check("platforms")["ok"], false);
    assert_eq!(check("platforms")["detail"], "none enabled");
    assert_eq!(check("model")["ok"], true, "no request has failed");
    assert_eq!(check("model")["degrades"], true);
    let sandbox = &check("sandbox");
    assert_eq!(sandbox["ok"], true, "{body}");
    // Which mechanisms confine the agents, ready or not.
    let info = sandbox["info"].as_str().unwrap_or_default();
    assert!(
        info.starts_with("bwrap: ") && info.contains("seccomp") && info.contains("nproc="),
        "{body}"
    );

    let (status, body) = http_get(&addr, "/metrics");
    assert_eq!(status, 200);
    assert_prometheus_text(&body);
    assert!(body.contains("air_friends_build_info{version="));
    // Labelled families appear with their first sample; these have one from the start.
    for family in [
        "air_friends_session_duration_seconds",
        "air_friends_active_sessions",
    ] {
        assert!(
            body.contains(&format!("# TYPE {family} ")),
            "{family} missing from /metrics:\n{body}"
        );
    }

    let started = Instant::now();
    daemon.terminate();
    let exit = daemon.wait_exit(Duration::from_secs(10));
    assert!(exit.success(), "exit status {exit:?}");
    assert!(started.elapsed() < Duration::from_secs(5));

    loop {
        let n = notify.recv(&mut buf).expect("STOPPING=1 notification");
        if String::from_utf8_lossy(&buf[..n]).contains("STOPPING=1") {
            break;
        }
    }
    let all = daemon.seen.join("\n");
    assert!(all.contains("\"message\":\"stopped\""), "{all}");
    assert!(all.contains("no platform is enabled"), "{all}");
    assert!(!all.contains("air-friends ready"), "{all}");
    assert!(!all.contains(SECRET), "a secret reached the log:\n{all}");
    for line in &daemon.seen {
        let v: serde_json::Value = serde_json::from_str(line).expect("every log line is JSON");
        assert!(v["timestamp"].is_string() && v["level"].is_string() && v["target"].is_string());
    }
}

/// `promtool` on `PATH` (Debian package `prometheus`; `.ci/run` installs it).
fn promtool() -> std::path::PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join("promtool"))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!(
                "promtool is not on PATH: this test lints /metrics with it. Install it with \
                 `apt-get install --no-install-recommends prometheus` (as .ci/run does)"
            )
        })
}

fn sample(body: &str, series: &str) -> f64 {
    body.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no sample {series} in:\n{body}"))
        .parse()
        .unwrap()
}

#[test]
fn promtool_check_metrics_passes_on_a_live_daemon() {
    use std::io::Write;
    let promtool = promtool();
    // Misskey enabled but unreachable: its platform series exist, disconnected.
    let cfg = TestConfig::new(
        "agent:\n  command: sh\nplatforms:\n  misskey:\n    enabled: true\n    host: 127.0.0.1:9\n    secure: false\n    token: x\n",
    );
    let mut daemon = Daemon::start(&cfg.path, &[]);
    let addr = daemon.listener_addr("ops");
    let (status, body) = http_get(&addr, "/metrics");
    assert_eq!(status, 200);

    let mut lint = Command::new(&promtool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    lint.stdin
        .take()
        .unwrap()
        .write_all(body.as_bytes())
        .unwrap();
    let out = lint.wait_with_output().unwrap();
    let problems = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && problems.trim().is_empty(),
        "promtool check metrics ({}):\n{problems}\n--- /metrics:\n{body}",
        out.status
    );

    // What promtool saw is what operators need from the first scrape on.
    assert_eq!(
        sample(
            &body,
            r#"air_friends_platform_connected{platform="misskey"}"#
        ),
        0.0
    );
    for series in [
        r#"air_friends_sessions_total{platform="misskey",place="default",outcome="replied"}"#,
        r#"air_friends_messages_received_total{platform="misskey",decision="queued"}"#,
        r#"air_friends_skill_calls_total{skill="send-reply",status="500"}"#,
        r#"air_friends_platform_errors_total{platform="misskey",operation="send_message",kind="transport"}"#,
        r#"air_friends_llm_budget_refusals_total{limit="user"}"#,
    ] {
        assert_eq!(sample(&body, series), 0.0, "{series}");
    }
    // The daemon is non-dumpable; its own /proc/self still reads.
    assert!(sample(&body, "process_resident_memory_bytes") > 1e6);
    assert!(sample(&body, "process_open_fds") >= 3.0);
    assert!(sample(&body, "process_max_fds") >= sample(&body, "process_open_fds"));
    assert!(sample(&body, "process_cpu_seconds_total") > 0.0);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let started = sample(&body, "process_start_time_seconds");
    assert!(
        started <= now + 1.0 && started > now - 120.0,
        "{started} vs {now}"
    );

    daemon.terminate();
    assert!(daemon.wait_exit(Duration::from_secs(10)).success());
}

#[test]
fn readyz_reports_an_agent_command_removed_after_start() {
    use std::os::unix::fs::PermissionsExt;
    // `serve` refuses to start without its agent command (tests/check_config.rs); once running,
    // /readyz is what notices the command going away (an upgrade, a deleted install).
    let bin_dir = tempfile::tempdir().unwrap();
    let agent = bin_dir.path().join("agent-xyz");
    std::fs::write(&agent, "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(&agent, std::fs::Permissions::from_mode(0o755)).unwrap();
    let cfg = TestConfig::new(&format!("agent:\n  command: {}\n", agent.display()));
    let mut daemon = Daemon::start(&cfg.path, &[]);
    let addr = daemon.listener_addr("ops");
    let check = |body: &str| {
        let v: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(v["checks"][1]["name"], "agent_command");
        v["checks"][1]["ok"].as_bool().unwrap()
    };
    let (_, body) = http_get(&addr, "/readyz");
    assert!(check(&body), "{body}");
    std::fs::remove_file(&agent).unwrap();
    let (status, body) = http_get(&addr, "/readyz");
    assert_eq!(status, 503);
    assert!(!check(&body), "{body}");
    daemon.terminate();
    assert!(daemon.wait_exit(Duration::from_secs(10)).success());
}

#[test]
fn broken_config_exits_non_zero_with_the_key_path() {
    let cfg = TestConfig::new("platforms:\n  misskey:\n    enabled: true\n    token: x\n");
    let out = Command::new(bin())
        .args(["serve", "--config"])
        .arg(&cfg.path)
        .env_remove("MISSKEY_HOST")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    assert!(
        stderr.contains("platforms.misskey.host: required when platforms.misskey.enabled"),
        "{stderr}"
    );
}

#[test]
fn a_sandbox_that_cannot_start_stops_serve_with_the_reason_and_the_fix_before_serving() {
    for (bwrap, reason) in [
        ("no-such-bwrap-xyz", "was not found on PATH"),
        // Exists but fails, like bubblewrap when user namespaces are refused.
        ("/bin/false", "the agent sandbox does not start"),
    ] {
        let cfg = TestConfig::new(&format!(
            "agent:\n  command: sh\n  sandbox:\n    bwrapPath: {bwrap}\n"
        ));
        let out = Command::new(bin())
            .args(["serve", "--config"])
            .arg(&cfg.path)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{bwrap}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        let last = stderr.lines().last().unwrap_or_default();
        assert!(last.contains(reason), "{bwrap}: {stderr}");
        assert!(
            last.contains("Fix:") && last.contains("agent.sandbox.mode: none"),
            "{stderr}"
        );
        // The probe runs beside the store's and the platforms' start, but gates serving.
        let output = format!("{stderr}{}", String::from_utf8_lossy(&out.stdout));
        for served in [
            "Skill API served",
            "skill api listening",
            "air-friends ready",
        ] {
            assert!(
                !output.contains(served),
                "{bwrap}: {served:?} logged: {output}"
            );
        }
    }
}

#[test]
fn missing_config_file_says_how_to_create_one() {
    let out = Command::new(bin())
        .args(["serve", "--config", "/nonexistent/config.yaml"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("print-default-config"), "{stderr}");
}

#[test]
fn a_busy_port_is_a_startup_failure() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let cfg = TestConfig::new("agent:\n  command: sh\n");
    let text = std::fs::read_to_string(&cfg.path)
        .unwrap()
        .replace("health:\n  port: 0", &format!("health:\n  port: {port}"));
    std::fs::write(&cfg.path, text).unwrap();
    let out = Command::new(bin())
        .args(["serve", "--config"])
        .arg(&cfg.path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("cannot bind the ops listener"), "{stderr}");
}

#[test]
fn check_config_masks_secrets_and_fails_on_errors() {
    let cfg = TestConfig::new(&format!(
        "agent:\n  command: sh\nplatforms:\n  discord:\n    enabled: true\n    token: {SECRET}\n"
    ));
    let out = Command::new(bin())
        .args(["check-config", "--config"])
        .arg(&cfg.path)
        .env("MISSKEY_TOKEN", "misskey-secret-from-env")
        .output()
        .unwrap();
    assert!(out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!stdout.contains(SECRET) && !stdout.contains("misskey-secret-from-env"));
    assert!(stdout.contains("token: '***'"), "{stdout}");
    let effective: serde_yaml::Value = serde_yaml::from_str(&stdout).unwrap();
    assert_eq!(effective["health"]["port"], 0);

    std::fs::write(&cfg.path, "agent:\n  maxConcurentSessions: 2\n").unwrap();
    let out = Command::new(bin())
        .args(["check-config", "--config"])
        .arg(&cfg.path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(
            "agent.maxConcurentSessions: unknown key; did you mean `maxConcurrentSessions`?"
        ),
        "{stderr}"
    );
}

#[test]
fn print_default_config_is_a_valid_config() {
    let out = Command::new(bin())
        .arg("print-default-config")
        .output()
        .unwrap();
    assert!(out.status.success());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.yaml");
    std::fs::write(&path, &out.stdout).unwrap();
    // The default agent command, `opencode`, must resolve: a stand-in leads PATH.
    let fake_bin = dir.path().join("bin");
    std::fs::create_dir(&fake_bin).unwrap();
    std::fs::write(fake_bin.join("opencode"), "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(
        fake_bin.join("opencode"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let path_var = std::env::join_paths(std::iter::once(fake_bin).chain(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    )))
    .unwrap();
    let check = Command::new(bin())
        .args(["check-config", "--config"])
        .arg(&path)
        .env("PATH", path_var)
        .env_remove("SKILL_API_PORT")
        .env_remove("HEALTH_PORT")
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
}

#[test]
fn invalid_skill_packages_stop_serve_with_the_validator_message() {
    let cfg = TestConfig::new("");
    let skills = cfg.dir.path().join("skills/broken-skill");
    std::fs::create_dir_all(&skills).unwrap();
    std::fs::write(
        skills.join("SKILL.md"),
        "---\nname: broken-skill\ndescription: x\nversion: 2\n---\nbody\n",
    )
    .unwrap();
    let text = std::fs::read_to_string(&cfg.path).unwrap();
    std::fs::write(
        &cfg.path,
        format!(
            "{text}agent:\n  command: sh\n  skillsDir: {}\n",
            cfg.dir.path().join("skills").display()
        ),
    )
    .unwrap();
    let out = Command::new(bin())
        .args(["serve", "--config"])
        .arg(&cfg.path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("failed validation"), "{stderr}");
    assert!(
        stderr.contains("Unexpected fields in frontmatter: version"),
        "{stderr}"
    );
}

/// An AIr-Friends data root as AIr-Friends writes it: `workspaces/discord/42/` with two memories,
/// a patch listed before the memory it disables, one reminder, and one line that is not JSON
/// (line 2 of `memory.public.jsonl`).
fn air_friends_data_root(root: &Path) {
    let ws = root.join("workspaces/discord/42");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(
        ws.join("memory.public.jsonl"),
        [
            r#"{"id":"mem_p1","ts":"2025-01-04T00:00:00.000Z","type":"patch","targetId":"mem_a2","enabled":false}"#,
            "this line is not json",
            r#"{"id":"mem_a1","ts":"2025-01-02T03:04:05.000Z","type":"memory","enabled":true,"visibility":"public","importance":"high","content":"likes green tea"}"#,
            r#"{"id":"mem_a2","ts":"2025-01-03T00:00:00.000Z","type":"memory","enabled":true,"visibility":"public","importance":"normal","content":"東京に住んでいる"}"#,
        ]
        .join("\n")
            + "\n",
    )
    .unwrap();
    std::fs::write(
        ws.join("reminders.jsonl"),
        r#"{"type":"reminder","id":"rem_1","createdAt":"2025-01-01T00:00:00.000Z","scheduledAt":"2030-01-01T09:00:00.000Z","message":"drink water","platform":"discord","userId":"42","enabled":true}"#.to_owned()
            + "\n",
    )
    .unwrap();
}

fn import_cmd(cfg: &TestConfig, extra: &[&str], dir: &Path) -> std::process::Output {
    Command::new(bin())
        .args(["import", "jsonl", "--config"])
        .arg(&cfg.path)
        .args(extra)
        .arg(dir)
        .env_remove("RUST_LOG")
        .output()
        .unwrap()
}

/// Memories in the database of `cfg` (the default `<repoPath>/air-friends.db`).
fn imported_memories(cfg: &TestConfig) -> usize {
    let db = cfg.dir.path().join("data/air-friends.db");
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let store = air_friends::store::Store::open(&db).await.unwrap();
        let ws = air_friends::store::WorkspaceKey::new("discord", "42").unwrap();
        let filter =
            air_friends::store::ExportFilter::all(air_friends::store::Scope::IncludePrivate);
        let n = store.export_memories(&ws, filter).await.unwrap().len();
        store.close().await.unwrap();
        n
    })
}

#[test]
fn import_jsonl_from_the_command_line_is_idempotent_and_reports_bad_lines() {
    let cfg = TestConfig::new("");
    let root = cfg.dir.path().join("AIr-Friends/data");
    air_friends_data_root(&root);
    let first = import_cmd(&cfg, &[], &root);
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let report = String::from_utf8_lossy(&first.stdout);
    assert!(
        report.contains(
            "discord/42: 2 memories, 1 patches applied, 1 reminders, 0 reminder patches, \
             1 lines skipped"
        ),
        "{report}"
    );
    assert!(report.contains("imported 2 memories"), "{report}");
    let warnings = String::from_utf8_lossy(&first.stderr);
    assert!(
        warnings.contains("memory.public.jsonl line=2"),
        "{warnings}"
    );
    // Not a terminal: a plain line per workspace as it is done (a progress bar on one).
    assert!(
        warnings.contains("imported discord/42: 2 memories, 1 patches applied")
            && warnings.contains("(1/1)"),
        "{warnings}"
    );
    assert_eq!(imported_memories(&cfg), 2);
    let second = import_cmd(&cfg, &[], &root);
    assert!(second.status.success());
    let report = String::from_utf8_lossy(&second.stdout);
    assert!(report.contains("imported 0 memories"), "{report}");
    assert!(
        report.contains("skipped as duplicate 2 memories, 1 patches, 1 reminders"),
        "{report}"
    );
    assert_eq!(imported_memories(&cfg), 2);
}

#[test]
fn import_jsonl_dry_run_reports_the_summary_and_creates_no_database() {
    let cfg = TestConfig::new("");
    let root = cfg.dir.path().join("AIr-Friends/data");
    air_friends_data_root(&root);
    let out = import_cmd(&cfg, &["--dry-run"], &root.join("workspaces"));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(report.starts_with("dry run, nothing written"), "{report}");
    assert!(report.contains("discord/42: 2 memories"), "{report}");
    assert!(
        !cfg.dir.path().join("data/air-friends.db").exists(),
        "a dry run must not create the database"
    );
}

#[test]
fn import_jsonl_exits_1_when_a_non_empty_tree_yields_nothing() {
    let cfg = TestConfig::new("");
    let root = cfg.dir.path().join("wrong");
    std::fs::create_dir_all(root.join("discord/42")).unwrap();
    std::fs::write(
        root.join("discord/42/memory.public.jsonl"),
        "{\"type\":\"memory\",\"id\":\"mem_x\",\"content\":\"no ts\"}\n",
    )
    .unwrap();
    let out = import_cmd(&cfg, &[], &root);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("found no AIr-Friends memory or reminder"),
        "{stderr}"
    );
    // An empty folder is nothing to do, not an error.
    let empty = cfg.dir.path().join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    assert!(import_cmd(&cfg, &[], &empty).status.success());
}

#[test]
fn the_readme_import_example_works_as_written() {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    let command = readme
        .split('`')
        .find(|s| s.starts_with("air-friends import jsonl "))
        .expect("README shows an `air-friends import jsonl …` example");
    let cfg = TestConfig::new("");
    let root = cfg.dir.path().join("AIr-Friends/data");
    air_friends_data_root(&root);
    // Only the two placeholders are replaced: the data root and the configuration file.
    let mut args: Vec<std::ffi::OsString> = Vec::new();
    let words: Vec<&str> = command.split_whitespace().collect();
    assert_eq!(words[0], "air-friends");
    for (i, word) in words.iter().enumerate().skip(1) {
        if word.starts_with("/path/to/") {
            args.push(root.clone().into());
        } else if words[i - 1] == "--config" {
            args.push(cfg.path.clone().into());
        } else {
            args.push(word.into());
        }
    }
    let out = Command::new(bin())
        .args(&args)
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{command}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("discord/42: 2 memories"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert_eq!(imported_memories(&cfg), 2);
}

#[test]
fn the_daemon_is_non_dumpable_so_its_own_uid_cannot_read_its_environment() {
    use std::io::BufRead;
    use std::os::unix::fs::PermissionsExt;
    // Root may read any process; run the daemon and the reader under one unprivileged uid.
    // `/proc/self` belongs to the effective uid.
    let root = std::os::unix::fs::MetadataExt::uid(&std::fs::metadata("/proc/self").unwrap()) == 0;
    let as_user = |program: &Path| {
        let mut cmd = if root {
            let mut c = Command::new("setpriv");
            c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
                .arg(program);
            c
        } else {
            Command::new(program)
        };
        cmd.env_clear().env("PATH", "/usr/bin:/bin");
        cmd
    };
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let exe = dir.path().join("air-friends");
    std::fs::copy(bin(), &exe).unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    if root {
        std::os::unix::fs::chown(&data, Some(65534), Some(65534)).unwrap();
    }
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = dir.path().join("config.yaml");
    std::fs::write(
        &config,
        format!(
            "workspace:\n  repoPath: {}\nhealth:\n  port: 0\nskillApi:\n  port: 0\nagent:\n  command: sh\n  skillsDir: {}\n  configDir: {}\n  sandbox:\n    mode: none\nprompts:\n  dir: {}\n",
            data.display(),
            repo.join("skills").display(),
            repo.join("agent-config").display(),
            repo.join("prompts").display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o644)).unwrap();
    let marker = "AF_ENVIRON_MARKER=visible-to-anyone-who-can-read-it";
    let (name, value) = marker.split_once('=').unwrap();
    let mut daemon = as_user(&exe)
        .args(["serve", "--config"])
        .arg(&config)
        .env(name, value)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = daemon.stdout.take().unwrap();
    let mut lines = std::io::BufReader::new(stdout).lines();
    let ready = lines
        .by_ref()
        .map_while(Result::ok)
        .any(|l| l.contains("\"listener\":\"ops\""));
    assert!(ready, "the daemon did not start");
    // A dumpable process of the same uid: its environment is readable (the probe is real).
    let mut control = as_user(Path::new("/usr/bin/sleep"))
        .arg("30")
        .env(name, value)
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let read = |pid: u32| {
        as_user(Path::new("/usr/bin/cat"))
            .arg(format!("/proc/{pid}/environ"))
            .output()
            .unwrap()
    };
    let control_read = read(control.id());
    let daemon_read = read(daemon.id());
    let _ = control.kill();
    let _ = control.wait();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(daemon.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let _ = daemon.wait();
    assert!(
        String::from_utf8_lossy(&control_read.stdout).contains(marker),
        "the control process's environment should be readable"
    );
    assert!(
        !daemon_read.status.success(),
        "the daemon's environ was readable"
    );
    assert!(!String::from_utf8_lossy(&daemon_read.stdout).contains(marker));
}

#[test]
fn import_jsonl_shows_a_progress_bar_on_a_terminal() {
    use std::io::Read as _;
    let cfg = TestConfig::new("");
    let root = cfg.dir.path().join("AIr-Friends/data");
    air_friends_data_root(&root);
    let pty = nix::pty::openpty(None, None).unwrap();
    let slave = std::fs::File::from(pty.slave);
    let mut child = Command::new(bin())
        .args(["import", "jsonl", "--config"])
        .arg(&cfg.path)
        .arg(&root)
        .env_remove("RUST_LOG")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::from(slave))
        .spawn()
        .unwrap();
    let mut master = std::fs::File::from(pty.master);
    let reader = std::thread::spawn(move || {
        let mut screen = Vec::new();
        let mut buf = [0u8; 4096];
        // EIO once the child, the last holder of the terminal, has exited.
        while let Ok(n @ 1..) = master.read(&mut buf) {
            screen.extend_from_slice(&buf[..n]);
        }
        String::from_utf8_lossy(&screen).into_owned()
    });
    assert!(child.wait().unwrap().success());
    let screen = reader.join().unwrap();
    assert!(
        screen.contains("importing [##############################] 1/1 workspaces, 2 memories"),
        "{screen:?}"
    );
    assert!(
        !screen.contains("imported discord/42"),
        "no plain lines on a terminal"
    );
}

/// The database `cfg` uses is one file: no write-ahead log beside it (or an empty one), and a
/// copy of the `.db` alone holds `memories` memories — what an operator who backs up only the
/// `.db` relies on. `after` names the command, for the message.
fn assert_one_file(cfg: &TestConfig, memories: i64, after: &str) {
    let db = cfg.dir.path().join("data/air-friends.db");
    let wal = cfg.dir.path().join("data/air-friends.db-wal");
    let wal_len = std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0);
    assert_eq!(wal_len, 0, "after {after}: the WAL holds {wal_len} bytes");
    let alone = tempfile::tempdir().unwrap();
    let copy = alone.path().join("copy.db");
    std::fs::copy(&db, &copy).unwrap();
    let conn = rusqlite::Connection::open(&copy).unwrap();
    let n: i64 = conn
        .query_row("SELECT count(*) FROM memories", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, memories, "after {after}: the .db alone");
}

#[test]
fn after_import_backup_and_serve_the_database_is_one_file() {
    let cfg = TestConfig::new("agent:\n  command: sh\nshutdownGraceMs: 5000\n");
    let root = cfg.dir.path().join("AIr-Friends/data");
    air_friends_data_root(&root);
    let out = import_cmd(&cfg, &[], &root);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_one_file(&cfg, 2, "import jsonl");

    let copy = cfg.dir.path().join("backup.db");
    let out = Command::new(bin())
        .args(["backup", "--config"])
        .arg(&cfg.path)
        .arg(&copy)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_one_file(&cfg, 2, "backup");
    assert!(!Path::new(&format!("{}-wal", copy.display())).exists());

    // serve writes too (its inbox, the maintenance bookkeeping) and stops on SIGTERM.
    let mut daemon = Daemon::start(&cfg.path, &[]);
    daemon.listener_addr("ops");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(daemon.child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let status = daemon.child.wait().unwrap();
    assert!(status.success(), "serve exited with {status}");
    assert_one_file(&cfg, 2, "serve");
}
