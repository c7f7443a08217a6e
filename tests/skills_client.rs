//! Client mode end to end: the real `skills/<name>/scripts/<name>` sh wrapper execs the real
//! binary (`AIR_FRIENDS_BIN`), which calls a recording Skill API stand-in on 127.0.0.1:0.

mod common;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::{Path as UrlPath, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use serde_json::{Value, json};
use tokio::net::TcpListener;

/// One request the stand-in received.
#[derive(Debug, Clone)]
struct Seen {
    skill: String,
    authorization: Option<String>,
    body: Value,
}

#[derive(Clone)]
struct Stub {
    seen: Arc<Mutex<Vec<Seen>>>,
    status: StatusCode,
    answer: Value,
}

async fn handle(
    State(stub): State<Stub>,
    UrlPath(skill): UrlPath<String>,
    headers: HeaderMap,
    body: String,
) -> (StatusCode, String) {
    let seen = Seen {
        skill,
        authorization: headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned),
        body: serde_json::from_str(&body).unwrap_or(Value::Null),
    };
    stub.seen.lock().unwrap().push(seen);
    (stub.status, stub.answer.to_string())
}

/// Starts the stand-in; returns its base URL and the request log.
async fn start_stub(status: StatusCode, answer: Value) -> (String, Arc<Mutex<Vec<Seen>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let app = Router::new()
        .route("/api/skill/{name}", post(handle))
        .with_state(Stub {
            seen: seen.clone(),
            status,
            answer,
        });
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}"), seen)
}

/// A workspace with the session staging dir `tmp/sess-1`.
struct Ws {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    stage: PathBuf,
}

fn workspace() -> Ws {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("ws");
    let stage = root.join("tmp").join("sess-1");
    std::fs::create_dir_all(&stage).unwrap();
    Ws {
        _tmp: tmp,
        root,
        stage,
    }
}

fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("skills")
        .join(name)
        .join("scripts")
        .join(name)
}

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

/// Runs the skill's wrapper script like the agent's bash tool would: clean environment,
/// cwd = workspace, identity in the environment.
async fn run_script(ws: &Ws, url: &str, name: &str, args: &[&str]) -> Run {
    let out = tokio::process::Command::new(script(name))
        .args(args)
        .current_dir(&ws.root)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", "/home/agent-home")
        .env("AIR_FRIENDS_BIN", common::bin())
        .env("SESSION_ID", "sess-1")
        .env("SKILL_API_TOKEN", "tok-secret-123")
        .env("SKILL_API_URL", url)
        .env("AGENT_WORKSPACE", &ws.root)
        .env("TMPDIR", ws.root.join("tmp"))
        .output()
        .await
        .unwrap();
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn stderr_json(r: &Run) -> Value {
    serde_json::from_str(r.stderr.trim())
        .unwrap_or_else(|_| panic!("stderr is not JSON: {}", r.stderr))
}

const TRICKY: &str = "Hi \"friend\" — it's $HOME and ${USER} and $(whoami) and `id`;\n\
                      a literal \\n, a tab\t, 日本語テキスト, 'single' quotes\nlast line | > < & done\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_reply_through_the_wrapper_delivers_the_payload_exactly() {
    let answer = json!({"success": true, "data": {"messageId": "m-1", "messageIds": ["m-1"], "timestamp": "2030-01-01T00:00:00Z"}});
    let (url, seen) = start_stub(StatusCode::OK, answer.clone()).await;
    let ws = workspace();
    let file = ws.stage.join("reply.md");
    std::fs::write(&file, TRICKY).unwrap();

    // The path exactly as the SKILL.md teaches it, expanded by a shell.
    let path = format!("{}/sess-1/reply.md", ws.root.join("tmp").display());
    let r = run_script(&ws, &url, "send-reply", &["--message-file", &path]).await;

    assert_eq!(r.code, 0, "stderr: {}", r.stderr);
    assert_eq!(
        r.stdout,
        format!("{answer}\n"),
        "stdout is the server's JSON"
    );
    assert_eq!(r.stderr, "");
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].skill, "send-reply");
    assert_eq!(
        seen[0].authorization.as_deref(),
        Some("Bearer tok-secret-123")
    );
    assert_eq!(seen[0].body["sessionId"], "sess-1");
    assert_eq!(seen[0].body["parameters"], json!({"message": TRICKY}));
    assert!(
        !file.exists(),
        "the payload file is deleted after a 2xx answer"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_error_is_printed_on_stderr_with_exit_1_and_the_file_is_kept() {
    let answer = json!({"success": false, "error": "You already replied; use edit-reply.", "code": "QUOTA_EXCEEDED"});
    let (url, seen) = start_stub(StatusCode::TOO_MANY_REQUESTS, answer.clone()).await;
    let ws = workspace();
    let file = ws.stage.join("reply.md");
    std::fs::write(&file, "hello").unwrap();
    let r = run_script(
        &ws,
        &url,
        "send-reply",
        &["--message-file=tmp/sess-1/reply.md"],
    )
    .await;
    assert_eq!(r.code, 1);
    assert_eq!(r.stdout, "");
    assert_eq!(stderr_json(&r), answer);
    assert_eq!(seen.lock().unwrap().len(), 1);
    assert!(
        file.exists(),
        "kept after an error, so a corrected retry can reuse it"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flags_become_typed_parameters() {
    let (url, seen) = start_stub(StatusCode::OK, json!({"success": true, "data": {}})).await;
    let ws = workspace();
    let r = run_script(
        &ws,
        &url,
        "memory-patch",
        &[
            "--memory-id",
            "mem_1",
            "--no-enabled",
            "--related-to",
            "mem_2,mem_3",
            "--supersedes=mem_0",
        ],
    )
    .await;
    assert_eq!(r.code, 0, "{}", r.stderr);
    std::fs::write(ws.stage.join("q.md"), "birthday cake").unwrap();
    let r = run_script(
        &ws,
        &url,
        "memory-search",
        &["--query-file", "tmp/sess-1/q.md"],
    )
    .await;
    assert_eq!(r.code, 0, "{}", r.stderr);
    let r = run_script(
        &ws,
        &url,
        "send-file",
        &["--file-paths", "a.png", "--file-paths", "out/b.pdf"],
    )
    .await;
    assert_eq!(r.code, 0, "{}", r.stderr);
    let r = run_script(
        &ws,
        &url,
        "memory-export",
        &["--format", "json", "--no-enabled-only"],
    )
    .await;
    assert_eq!(r.code, 0, "{}", r.stderr);
    let seen = seen.lock().unwrap().clone();
    let params: Vec<(String, Value)> = seen
        .iter()
        .map(|s| (s.skill.clone(), s.body["parameters"].clone()))
        .collect();
    assert_eq!(
        params,
        [
            (
                "memory-patch".to_owned(),
                json!({"memoryId": "mem_1", "enabled": false, "relatedTo": ["mem_2", "mem_3"], "supersedes": ["mem_0"]})
            ),
            (
                "memory-search".to_owned(),
                json!({"query": "birthday cake", "limit": 10})
            ),
            (
                "send-file".to_owned(),
                json!({"filePaths": ["a.png", "out/b.pdf"]})
            ),
            (
                "memory-export".to_owned(),
                json!({"format": "json", "importance": "all", "enabledOnly": false})
            ),
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_errors_never_reach_the_server() {
    let (url, seen) = start_stub(StatusCode::OK, json!({"success": true})).await;
    let ws = workspace();
    std::fs::write(ws.root.join("secret.txt"), "secret").unwrap();
    std::os::unix::fs::symlink(ws.root.join("secret.txt"), ws.stage.join("link.md")).unwrap();
    std::fs::create_dir_all(ws.root.join("tmp/sess-10")).unwrap();
    std::fs::write(ws.root.join("tmp/sess-10/r.md"), "other session").unwrap();

    let cases: Vec<(&str, Vec<&str>, i32, &str)> = vec![
        (
            "send-reply",
            vec!["--message", "hi $HOME"],
            2,
            "SKILL_LEGACY_FLAG",
        ),
        ("send-reply", vec!["--message=hi"], 2, "SKILL_LEGACY_FLAG"),
        ("send-reply", vec![], 2, "SKILL_MISSING_PAYLOAD"),
        (
            "send-reply",
            vec!["--message-file", "tmp/sess-1/../../secret.txt"],
            1,
            "SKILL_PAYLOAD_OUT_OF_BOUNDS",
        ),
        (
            "send-reply",
            vec!["--message-file", "/etc/hostname"],
            1,
            "SKILL_PAYLOAD_OUT_OF_BOUNDS",
        ),
        (
            "send-reply",
            vec!["--message-file", "tmp/sess-1/link.md"],
            1,
            "SKILL_PAYLOAD_OUT_OF_BOUNDS",
        ),
        (
            "send-reply",
            vec!["--message-file", "tmp/sess-10/r.md"],
            1,
            "SKILL_PAYLOAD_OUT_OF_BOUNDS",
        ),
        (
            "send-reply",
            vec!["--message-file", "tmp/sess-1/missing.md"],
            1,
            "SKILL_PAYLOAD_NOT_FOUND",
        ),
        (
            "send-file",
            vec!["--file-path", "a.png"],
            2,
            "SKILL_SINGLE_FILE_FLAG",
        ),
        (
            "memory-search",
            vec!["--query-file", "x", "--limt", "3"],
            2,
            "SKILL_UNKNOWN_FLAG",
        ),
        (
            "memory-search",
            vec!["--query-file", "x", "limit=3"],
            2,
            "SKILL_USAGE",
        ),
        (
            "memory-search",
            vec!["--query-file", "x", "--limit", "500"],
            2,
            "SKILL_USAGE",
        ),
    ];
    for (skill, args, code, expected) in cases {
        let r = run_script(&ws, &url, skill, &args).await;
        assert_eq!(r.code, code, "{skill} {args:?}: {}", r.stderr);
        assert_eq!(r.stdout, "");
        let v = stderr_json(&r);
        assert_eq!(v["success"], false);
        assert_eq!(v["code"], expected, "{skill} {args:?}: {v}");
        let msg = v["error"].as_str().unwrap();
        assert!(
            msg.contains(&format!("skills/{skill}/scripts/{skill}")),
            "message has a corrected invocation: {msg}"
        );
        assert!(
            !msg.contains("/home/agent-home"),
            "no shell-expanded text echoed: {msg}"
        );
    }
    assert!(seen.lock().unwrap().is_empty());
}

/// Opens and closes the write side of `fifo`, so a reader blocked on it gets EOF (lets a test
/// fail instead of hanging when the reader was not protected).
fn release_fifo(fifo: &Path) {
    use std::os::unix::fs::OpenOptionsExt;
    let _ = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(nix::libc::O_NONBLOCK)
        .open(fifo);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fifo_or_hard_linked_payload_is_refused_at_once_and_never_reaches_the_server() {
    let (url, seen) = start_stub(StatusCode::OK, json!({"success": true})).await;
    let ws = workspace();
    let fifo = ws.stage.join("pipe.md");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    std::fs::write(ws.root.join("secret.txt"), "secret").unwrap();
    std::fs::hard_link(ws.root.join("secret.txt"), ws.stage.join("h.md")).unwrap();
    let cases = [
        ("tmp/sess-1/pipe.md", "SKILL_PAYLOAD_NOT_FOUND", "FIFO"),
        (
            "tmp/sess-1/h.md",
            "SKILL_PAYLOAD_OUT_OF_BOUNDS",
            "hard links",
        ),
    ];
    for (path, code, words) in cases {
        let args = ["--message-file", path];
        let run = run_script(&ws, &url, "send-reply", &args);
        let Ok(r) = tokio::time::timeout(std::time::Duration::from_secs(20), run).await else {
            release_fifo(&fifo);
            panic!("the client blocked reading {path}");
        };
        assert_eq!(r.code, 1, "{path}: {}", r.stderr);
        let v = stderr_json(&r);
        assert_eq!(v["code"], code, "{path}: {v}");
        assert!(v["error"].as_str().unwrap().contains(words), "{path}: {v}");
    }
    assert!(seen.lock().unwrap().is_empty(), "the secret was never sent");
    assert_eq!(
        std::fs::read_to_string(ws.root.join("secret.txt")).unwrap(),
        "secret"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn identity_and_url_errors() {
    let ws = workspace();
    // Non-loopback URL: refused without connecting.
    let r = run_script(&ws, "http://192.0.2.1:3001", "memory-stats", &[]).await;
    assert_eq!(r.code, 1);
    assert_eq!(stderr_json(&r)["code"], "SKILL_API_UNREACHABLE");
    assert!(r.stderr.contains("not a loopback address"), "{}", r.stderr);
    // Nothing listening.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let r = run_script(
        &ws,
        &format!("http://127.0.0.1:{port}"),
        "memory-stats",
        &[],
    )
    .await;
    assert_eq!(r.code, 1);
    assert_eq!(stderr_json(&r)["code"], "SKILL_API_UNREACHABLE");
    // No session identity at all.
    let out = tokio::process::Command::new(script("memory-stats"))
        .current_dir(&ws.root)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("AIR_FRIENDS_BIN", common::bin())
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let v: Value = serde_json::from_slice(&out.stderr).unwrap();
    assert_eq!(v["code"], "SKILL_SESSION_UNRESOLVED");
}
