//! Shared helpers for integration tests that run the real `air-friends` binary: [`Daemon`]
//! (`serve` with its JSON log), [`TestConfig`], `chat` with typed input; the fakes
//! (`fake_discord`, `fake_misskey`, `fake_llm`, `fake_embeddings`, `fake_provider`); the
//! `serve` harnesses (`serve_discord`, `serve_misskey`, sharing `serve`); waiting for a
//! condition (`poll`); test pictures and peak memory (`pictures`).
#![allow(dead_code)]

pub mod audio;
pub mod fake_discord;
pub mod fake_embeddings;
pub mod fake_llm;
pub mod fake_mcp;
pub mod fake_mcp_sse;
pub mod fake_misskey;
pub mod fake_provider;
pub mod fake_speech;
pub mod file_server;
pub mod mcp_client;
pub mod multipart;
pub mod opencode;
pub mod pictures;
pub mod poll;
pub mod serve;
pub mod serve_discord;
pub mod serve_misskey;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Path of the binary under test.
pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_air-friends")
}

/// The scripted fake ACP agent (`examples/fake_acp_agent.rs`), built by `cargo test` beside
/// the binary under test.
pub fn fake_agent() -> PathBuf {
    let path = Path::new(bin())
        .parent()
        .expect("the binary's folder")
        .join("examples/fake_acp_agent");
    assert!(
        path.exists(),
        "{} is missing: run `cargo test` (which builds the examples) or `cargo build --examples`",
        path.display()
    );
    path
}

/// `air-friends chat --config <config>` (without `RUST_LOG`, stdio piped), for
/// [`run_with_input`]; the caller may add to its environment.
pub fn chat_command(config: &Path) -> Command {
    let mut cmd = Command::new(bin());
    cmd.args(["chat", "--config"])
        .arg(config)
        .env_remove("RUST_LOG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// Runs `cmd` with `input` written to its stdin (then closed); its output once it exited.
pub fn run_with_input(cmd: &mut Command, input: &[u8]) -> Output {
    let mut child = cmd.spawn().expect("spawn");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(input)
        .expect("write stdin");
    child.wait_with_output().expect("output")
}

/// The fake agent's log file (the script's `log`), relative to its working folder or joined to a
/// test's folder.
pub const AGENT_LOG: &str = "agent-log.jsonl";

/// A running `air-friends serve` whose stdout (JSON logs) is collected line by line.
pub struct Daemon {
    pub child: Child,
    lines: mpsc::Receiver<String>,
    pub seen: Vec<String>,
}

impl Daemon {
    /// Starts `air-friends serve --config <config>` with a minimal, explicit environment.
    pub fn start(config: &Path, extra_env: &[(&str, &str)]) -> Daemon {
        let mut cmd = Command::new(bin());
        cmd.arg("serve")
            .arg("--config")
            .arg(config)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default());
        for (k, v) in extra_env {
            cmd.env(k, v);
        }
        Daemon::spawn(cmd)
    }

    /// Starts `cmd` (an `air-friends serve` however it is run: another binary, another user)
    /// with its stdout collected line by line.
    pub fn spawn(mut cmd: Command) -> Daemon {
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("spawn air-friends");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Daemon {
            child,
            lines: rx,
            seen: Vec::new(),
        }
    }

    /// Waits for a JSON log line satisfying `pred` (up to `timeout`), returning it parsed.
    pub fn wait_for_log(
        &mut self,
        timeout: Duration,
        pred: impl Fn(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if let Ok(v) = serde_json::from_str::<serde_json::Value>(&line)
                        && pred(&v)
                    {
                        return v;
                    }
                }
                Err(_) => {
                    let stderr = self.stderr_so_far();
                    panic!(
                        "log line not seen within {timeout:?}; stdout so far:\n{}\nstderr:\n{stderr}",
                        self.seen.join("\n")
                    )
                }
            }
        }
    }

    /// Every log line seen so far, parsed.
    pub fn logged(&self) -> Vec<serde_json::Value> {
        self.seen
            .iter()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// The address a listener logged as `listening` (e.g. `listener = "ops"`).
    pub fn listener_addr(&mut self, listener: &str) -> String {
        let v = self.wait_for_log(Duration::from_secs(20), |v| {
            v["message"] == "listening" && v["listener"] == listener
        });
        v["addr"].as_str().unwrap().to_owned()
    }

    /// Sends SIGTERM.
    pub fn terminate(&self) {
        let status = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// Waits for exit (up to `timeout`), draining the remaining stdout into `seen`.
    pub fn wait_exit(&mut self, timeout: Duration) -> ExitStatus {
        let Some(status) = poll::blocking_poll(timeout, || self.child.try_wait().unwrap()) else {
            self.child.kill().ok();
            panic!("daemon did not exit within {timeout:?}");
        };
        while let Ok(line) = self.lines.recv_timeout(Duration::from_millis(200)) {
            self.seen.push(line);
        }
        status
    }

    fn stderr_so_far(&mut self) -> String {
        if self.child.try_wait().ok().flatten().is_none() {
            return "(still running)".into();
        }
        let mut s = String::new();
        if let Some(mut e) = self.child.stderr.take() {
            use std::io::Read;
            e.read_to_string(&mut s).ok();
        }
        s
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            self.child.kill().ok();
            self.child.wait().ok();
        }
    }
}

/// A temp dir with a config file whose listeners use port 0 and whose data lives inside it.
pub struct TestConfig {
    pub dir: tempfile::TempDir,
    pub path: PathBuf,
}

impl TestConfig {
    /// Writes `extra` YAML after the base settings (keys in `extra` must not repeat base
    /// sections: pass whole sections).
    pub fn new(extra: &str) -> TestConfig {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        std::fs::create_dir_all(&data).unwrap();
        let path = dir.path().join("config.yaml");
        let text = format!(
            "workspace:\n  repoPath: {data}\nhealth:\n  port: 0\nskillApi:\n  port: 0\n{extra}",
            data = data.display()
        );
        std::fs::write(&path, text).unwrap();
        TestConfig { dir, path }
    }
}

/// The value of the sample `series` (name and labels, e.g. `x_total{a="b"}`) in a Prometheus
/// exposition text, 0 when absent.
pub fn metric_sample(metrics: &str, series: &str) -> f64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or(0.0)
}
