//! Runs the real binary: `check-config` prints every problem of a file in one run and exits 1,
//! and `serve` refuses exactly the same files (one line on stderr) and logs the same warnings.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use common::{Daemon, TestConfig, bin};

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// Runs `air-friends <command> --config <path>` without the environment overrides of the
/// checked keys, so the file alone decides.
fn run(command: &str, path: &Path) -> Output {
    Command::new(bin())
        .args([command, "--config"])
        .arg(path)
        .env_remove("LOG_LEVEL")
        .env_remove("AGENT_AUTO_APPROVE_SKILLS")
        .env_remove("RUST_LOG")
        .output()
        .unwrap()
}

/// `check-config`'s error lines (two-space indent, not warnings), without the indent.
fn error_lines(out: &Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stderr)
        .lines()
        .filter_map(|l| l.strip_prefix("  "))
        .filter(|l| !l.starts_with("warning: ") && !l.starts_with("  "))
        .map(str::to_owned)
        .collect()
}

/// An agent section where everything exists, with `extra` agent keys (two-space indent).
fn agent(extra: &str) -> String {
    format!(
        "agent:\n  command: sh\n  skillsDir: {}\n{extra}prompts:\n  dir: {}\n",
        repo("skills").display(),
        repo("prompts").display()
    )
}

#[test]
fn check_config_prints_every_problem_at_once_and_serve_refuses_the_same_file() {
    let cfg = TestConfig::new(&format!(
        "agent:\n  command: no-such-agent-xyz\n  maxTurnMs: soon\n  maxConcurentSessions: 2\n  \
         autoApproveSkills: [memory-sav]\n  skillsDir: {}\n\
         logging:\n  level: loud\nprompts:\n  dir: /nonexistent/prompts\nskills:\n  disabled: [send-replay]\n",
        repo("skills").display()
    ));
    let check = run("check-config", &cfg.path);
    assert_eq!(check.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&check.stderr);
    let errors = error_lines(&check);
    let keys: Vec<&str> = errors
        .iter()
        .map(|l| l.split_once(": ").unwrap().0)
        .collect();
    assert_eq!(
        keys,
        [
            "agent.maxConcurentSessions",
            "agent.maxTurnMs",
            "logging.level",
            "prompts.dir",
            "skills.disabled.0",
            "agent.autoApproveSkills.0",
            "agent.command",
        ],
        "{stderr}"
    );
    assert!(
        errors[0].ends_with("did you mean `maxConcurrentSessions`?")
            && errors[4].ends_with("did you mean `send-reply`?")
            && errors[5].ends_with("did you mean `memory-save`?"),
        "{stderr}"
    );
    assert!(
        stderr.contains("  warning: platforms: no platform is enabled"),
        "{stderr}"
    );
    assert!(check.stdout.is_empty(), "nothing printed for a bad file");

    let serve = run("serve", &cfg.path);
    assert_eq!(serve.status.code(), Some(1));
    let line = String::from_utf8_lossy(&serve.stderr);
    assert_eq!(line.lines().count(), 1, "one line: {line}");
    for error in &errors {
        assert!(
            line.contains(error.as_str()),
            "serve lacks {error:?}: {line}"
        );
    }
}

#[test]
fn serve_refuses_each_error_check_config_reports() {
    let cases: Vec<(String, &str)> = vec![
        (agent("  maxTurnMs: soon\n"), "agent.maxTurnMs"),
        (
            agent("  maxConcurentSessions: 2\n"),
            "agent.maxConcurentSessions",
        ),
        (
            format!("{}logging:\n  level: loud\n", agent("")),
            "logging.level",
        ),
        (
            agent("").replace(
                &repo("prompts").display().to_string(),
                "/nonexistent/prompts",
            ),
            "prompts.dir",
        ),
        (
            agent("").replace(&repo("skills").display().to_string(), "/nonexistent/skills"),
            "agent.skillsDir",
        ),
        (
            format!("{}skills:\n  disabled: [send-replay]\n", agent("")),
            "skills.disabled.0",
        ),
        (
            agent("  autoApproveSkills: [memory-sav]\n"),
            "agent.autoApproveSkills.0",
        ),
        (
            agent("").replace("command: sh", "command: no-such-agent-xyz"),
            "agent.command",
        ),
        (
            agent("  sandbox:\n    readOnlyPaths: [/nonexistent/opt]\n"),
            "agent.sandbox.readOnlyPaths.0",
        ),
    ];
    for (yaml, key) in cases {
        let cfg = TestConfig::new(&yaml);
        let check = run("check-config", &cfg.path);
        assert_eq!(check.status.code(), Some(1), "{key}");
        let errors = error_lines(&check);
        assert_eq!(errors.len(), 1, "{key}: {errors:?}");
        assert!(errors[0].starts_with(&format!("{key}: ")), "{errors:?}");

        let serve = run("serve", &cfg.path);
        assert_eq!(serve.status.code(), Some(1), "{key}");
        let line = String::from_utf8_lossy(&serve.stderr);
        assert!(line.contains(errors[0].as_str()), "{key}: {line}");
    }
}

#[test]
fn no_enabled_platform_is_a_warning_check_config_prints_and_serve_logs() {
    let cfg = TestConfig::new(&agent("  configDir: /nonexistent/agent-config\n"));
    let check = run("check-config", &cfg.path);
    let stderr = String::from_utf8_lossy(&check.stderr);
    assert!(check.status.success(), "warnings do not fail: {stderr}");
    assert!(error_lines(&check).is_empty(), "{stderr}");
    assert!(
        stderr.contains("  warning: platforms: no platform is enabled: serve answers nobody"),
        "{stderr}"
    );
    assert!(
        stderr.contains("  warning: agent.configDir: /nonexistent/agent-config is not a folder"),
        "{stderr}"
    );

    let mut daemon = Daemon::start(&cfg.path, &[]);
    for key in ["agent.configDir", "platforms"] {
        let logged = daemon.wait_for_log(Duration::from_secs(20), |v| {
            v["message"] == "configuration warning" && v["key"] == key
        });
        assert_eq!(logged["level"], "WARN", "{logged}");
    }
    daemon.listener_addr("ops");
    daemon.terminate();
    assert!(daemon.wait_exit(Duration::from_secs(10)).success());
}

/// `check-config` says what will bound the agents' memory on this machine, changing nothing.
#[test]
fn check_config_says_what_bounds_the_agents_memory() {
    let line_of = |sandbox: &str| {
        let cfg = TestConfig::new(&agent(sandbox));
        let out = run("check-config", &cfg.path);
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{stderr}");
        stderr
            .lines()
            .find_map(|l| {
                l.split_once(": agents' cgroup: ")
                    .map(|(_, v)| v.to_owned())
            })
            .unwrap_or_else(|| panic!("no cgroup line: {stderr}"))
    };
    assert_eq!(
        line_of("  sandbox:\n    cgroup: off\n"),
        "memory not bounded (agent.sandbox.cgroup is off)"
    );
    assert_eq!(
        line_of("  sandbox:\n    mode: none\n"),
        "agent.sandbox.mode is none: agents run unconfined"
    );
    let default = line_of("  sandbox:\n    limits:\n      maxMemoryMb: 300\n");
    assert!(
        default.starts_with("memory 300 MiB incl. tmpfs (cgroup v")
            || default.starts_with("memory not bounded (no cgroup: "),
        "{default}"
    );
}
