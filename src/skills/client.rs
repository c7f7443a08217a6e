//! Client mode, `air-friends skill <name> [args]` (`docs/SKILLS.md`, "Flag grammar"): what a
//! skill script runs.
//!
//! Steps: find the manifest of `<name>` → parse the flags ([`super::args`]) → read the identity
//! from the environment → read the payload files ([`super::payload`]) →
//! `POST {SKILL_API_URL}/api/skill/{name}` with `Authorization: Bearer $SKILL_API_TOKEN` and
//! `{"sessionId", "parameters"}` → print the answer.
//!
//! * **Manifest lookup:** `$AIR_FRIENDS_SKILLS_DIR/<name>/manifest.json` if that variable is set
//!   and the file exists, else `./skills/<name>/manifest.json` relative to the cwd, else the
//!   manifest embedded in the binary for the built-in skills.
//! * **Identity:** `SESSION_ID`, `SKILL_API_TOKEN`, `SKILL_API_URL` (missing →
//!   `SKILL_SESSION_UNRESOLVED`); the URL must be `http(s)` to a loopback host (`127.0.0.1`,
//!   `::1`, `localhost`), anything else → `SKILL_API_UNREACHABLE` without connecting.
//!   `{workspace}` = `AGENT_WORKSPACE`, else the cwd. Proxy variables are ignored.
//! * **Output:** 2xx → the server's body on stdout, exit 0, payload files deleted. Non-2xx →
//!   the server's JSON error on stderr, exit 1. Client errors → `{"success":false,"error",
//!   "code"}` on stderr; exit 2 for usage errors (the command line is wrong: `SKILL_USAGE`,
//!   `SKILL_UNKNOWN_FLAG`, `SKILL_LEGACY_FLAG`, `SKILL_SINGLE_FILE_FLAG`,
//!   `SKILL_MISSING_PAYLOAD`), exit 1 for everything else.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Value, json};

use super::args::{self, script_path};
use super::builtin;
use super::manifest::{self, Manifest};
use super::payload::{self, Payload};

/// How long the client waits for the Skill API (send-file uploads can take a while).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(300);

/// The client's error codes (`docs/SKILLS.md`, "Client error codes").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorCode {
    /// Malformed command line (bad value, missing flag, positional argument, `key=value`).
    Usage,
    /// A flag the skill does not have.
    UnknownFlag,
    /// `--message`, `--content`, `--query`, `--caption` (free text on the command line).
    LegacyFlag,
    /// A required payload flag is missing, or its file is empty.
    MissingPayload,
    /// The payload path lies outside `{workspace}/tmp/{sessionId}`.
    PayloadOutOfBounds,
    /// The payload file does not exist (or is a directory).
    PayloadNotFound,
    /// The removed singular `--file-path`.
    SingleFileFlag,
    /// `SESSION_ID`, `SKILL_API_TOKEN` or `SKILL_API_URL` is missing or malformed.
    SessionUnresolved,
    /// The Skill API cannot be reached (refused, timed out, non-loopback URL, non-JSON answer).
    ApiUnreachable,
}

impl ErrorCode {
    /// The wire name (`SKILL_USAGE`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::Usage => "SKILL_USAGE",
            ErrorCode::UnknownFlag => "SKILL_UNKNOWN_FLAG",
            ErrorCode::LegacyFlag => "SKILL_LEGACY_FLAG",
            ErrorCode::MissingPayload => "SKILL_MISSING_PAYLOAD",
            ErrorCode::PayloadOutOfBounds => "SKILL_PAYLOAD_OUT_OF_BOUNDS",
            ErrorCode::PayloadNotFound => "SKILL_PAYLOAD_NOT_FOUND",
            ErrorCode::SingleFileFlag => "SKILL_SINGLE_FILE_FLAG",
            ErrorCode::SessionUnresolved => "SKILL_SESSION_UNRESOLVED",
            ErrorCode::ApiUnreachable => "SKILL_API_UNREACHABLE",
        }
    }

    /// 2 for usage errors (the command line itself is wrong), 1 otherwise.
    pub fn exit_code(self) -> u8 {
        match self {
            ErrorCode::Usage
            | ErrorCode::UnknownFlag
            | ErrorCode::LegacyFlag
            | ErrorCode::MissingPayload
            | ErrorCode::SingleFileFlag => 2,
            ErrorCode::PayloadOutOfBounds
            | ErrorCode::PayloadNotFound
            | ErrorCode::SessionUnresolved
            | ErrorCode::ApiUnreachable => 1,
        }
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A client-side error: its code and a message written for an LLM, ending in a corrected
/// invocation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct ClientError {
    /// The error code.
    pub code: ErrorCode,
    /// The message.
    pub message: String,
}

impl ClientError {
    /// Builds an error.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> ClientError {
        ClientError {
            code,
            message: message.into(),
        }
    }

    /// The one-line JSON written to stderr.
    pub fn to_json(&self) -> String {
        #[derive(serde::Serialize)]
        struct Body<'a> {
            success: bool,
            error: &'a str,
            code: &'a str,
        }
        serde_json::to_string(&Body {
            success: false,
            error: &self.message,
            code: self.code.as_str(),
        })
        .unwrap_or_default()
    }
}

/// The environment the client runs in (read once from the process, or built by tests).
#[derive(Debug, Clone, Default)]
pub struct ClientEnv {
    /// `SESSION_ID`.
    pub session_id: Option<String>,
    /// `SKILL_API_TOKEN`.
    pub token: Option<String>,
    /// `SKILL_API_URL`.
    pub api_url: Option<String>,
    /// `AGENT_WORKSPACE` (falls back to `cwd`).
    pub workspace: Option<PathBuf>,
    /// The current directory.
    pub cwd: PathBuf,
    /// `AIR_FRIENDS_SKILLS_DIR`.
    pub skills_dir: Option<PathBuf>,
}

impl ClientEnv {
    /// Reads the process environment (empty variables count as unset).
    pub fn from_process() -> ClientEnv {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        ClientEnv {
            session_id: var("SESSION_ID"),
            token: var("SKILL_API_TOKEN"),
            api_url: var("SKILL_API_URL"),
            workspace: var("AGENT_WORKSPACE").map(PathBuf::from),
            cwd: std::env::current_dir().unwrap_or_else(|_| PathBuf::from(".")),
            skills_dir: var("AIR_FRIENDS_SKILLS_DIR").map(PathBuf::from),
        }
    }
}

/// What the client prints and its exit code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientOutput {
    /// Text for stdout.
    pub stdout: String,
    /// Text for stderr.
    pub stderr: String,
    /// Process exit code.
    pub exit_code: u8,
}

impl ClientOutput {
    fn error(e: &ClientError) -> ClientOutput {
        ClientOutput {
            stdout: String::new(),
            stderr: format!("{}\n", e.to_json()),
            exit_code: e.code.exit_code(),
        }
    }
}

/// Runs client mode on a small current-thread runtime.
pub fn run(name: &str, args: &[String], env: &ClientEnv) -> ClientOutput {
    match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt.block_on(call(name, args, env)),
        Err(e) => ClientOutput::error(&ClientError::new(
            ErrorCode::ApiUnreachable,
            format!("cannot start the client runtime: {e}"),
        )),
    }
}

/// Client mode: parses, reads payloads, calls the Skill API and renders the result.
pub async fn call(name: &str, args: &[String], env: &ClientEnv) -> ClientOutput {
    match call_inner(name, args, env).await {
        Ok(out) => out,
        Err(e) => ClientOutput::error(&e),
    }
}

async fn call_inner(
    name: &str,
    argv: &[String],
    env: &ClientEnv,
) -> Result<ClientOutput, ClientError> {
    let m = resolve_manifest(name, env)?;
    let parsed = args::parse_args(name, &m, argv)?;
    if parsed.help {
        return Ok(ClientOutput {
            stdout: args::usage(name, &m),
            stderr: String::new(),
            exit_code: 0,
        });
    }
    let (session_id, token, api_url) = identity(env)?;
    let endpoint = endpoint(&api_url, name)?;

    let mut params = parsed.params;
    let payloads = read_payloads(name, &m, &parsed.payloads, env, &session_id, &mut params)?;
    let body = json!({"sessionId": session_id, "parameters": Value::Object(params)});
    let (status, text) = post(name, &m, &endpoint, &token, &body).await?;
    if status.is_success() {
        payload::delete_payloads(&payloads);
        let mut stdout = text;
        if !stdout.ends_with('\n') {
            stdout.push('\n');
        }
        return Ok(ClientOutput {
            stdout,
            stderr: String::new(),
            exit_code: 0,
        });
    }
    Ok(api_error_output(&endpoint, status, &text))
}

/// Reads every payload file given and sets its parameter to the file's text.
fn read_payloads(
    name: &str,
    m: &Manifest,
    given: &[args::PayloadArg],
    env: &ClientEnv,
    session_id: &str,
    params: &mut serde_json::Map<String, Value>,
) -> Result<Vec<Payload>, ClientError> {
    let workspace = env.workspace.clone().unwrap_or_else(|| env.cwd.clone());
    let mut payloads: Vec<Payload> = Vec::new();
    for p in given {
        let example = args::example(name, m, &[p.flag.as_str()]);
        let read =
            payload::read_payload(&p.flag, &p.path, &env.cwd, &workspace, session_id, &example)?;
        params.insert(p.param.clone(), Value::String(read.text.clone()));
        payloads.push(read);
    }
    Ok(payloads)
}

/// POSTs the call to the Skill API: the answer's status and body text.
async fn post(
    name: &str,
    m: &Manifest,
    endpoint: &reqwest::Url,
    token: &str,
    body: &Value,
) -> Result<(reqwest::StatusCode, String), ClientError> {
    let client = reqwest::Client::builder()
        .no_proxy()
        .timeout(REQUEST_TIMEOUT)
        .build()
        .map_err(|e| {
            ClientError::new(
                ErrorCode::ApiUnreachable,
                format!("cannot build the HTTP client: {e}"),
            )
        })?;
    let response = client
        .post(endpoint.clone())
        .bearer_auth(token)
        .json(body)
        .send()
        .await
        .map_err(|e| unreachable_error(name, m, &e))?;
    let status = response.status();
    let text = response
        .text()
        .await
        .map_err(|e| unreachable_error(name, m, &e))?;
    Ok((status, text))
}

/// A non-2xx answer: its JSON error passed on, or one of our own if the body is not JSON.
fn api_error_output(
    endpoint: &reqwest::Url,
    status: reqwest::StatusCode,
    text: &str,
) -> ClientOutput {
    let stderr = match serde_json::from_str::<Value>(text) {
        Ok(v @ Value::Object(_)) => v.to_string(),
        _ => ClientError::new(
            ErrorCode::ApiUnreachable,
            format!(
                "The Skill API at {} answered HTTP {} without a JSON error. SKILL_API_URL may not point at the air-friends daemon; do not retry, finish your turn.",
                redact_url(endpoint),
                status.as_u16()
            ),
        )
        .to_json(),
    };
    ClientOutput {
        stdout: String::new(),
        stderr: format!("{stderr}\n"),
        exit_code: 1,
    }
}

fn unreachable_error(name: &str, m: &Manifest, e: &reqwest::Error) -> ClientError {
    let what = if e.is_timeout() {
        format!(
            "did not answer within {} s; the call may or may not have taken effect",
            REQUEST_TIMEOUT.as_secs()
        )
    } else if e.is_connect() {
        "refused the connection (the daemon is not running or the session ended)".to_owned()
    } else {
        "failed while answering".to_owned()
    };
    ClientError::new(
        ErrorCode::ApiUnreachable,
        format!(
            "The Skill API {what}. Retry once with the same command ({}); if it fails again, stop calling skills and end your turn.",
            script_path(name, m)
        ),
    )
}

/// Finds the manifest of `name` (see the module docs for the lookup order).
pub fn resolve_manifest(name: &str, env: &ClientEnv) -> Result<Manifest, ClientError> {
    let known = || {
        builtin::builtin_names()
            .map(|n| format!("skills/{n}/scripts/{n}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    if !manifest::is_kebab(name) {
        return Err(ClientError::new(
            ErrorCode::Usage,
            format!(
                "\"{name}\" is not a skill name. Run a skill by its script path, e.g. {}.",
                known()
            ),
        ));
    }
    let mut candidates = Vec::new();
    if let Some(dir) = &env.skills_dir {
        candidates.push(dir.join(name).join("manifest.json"));
    }
    candidates.push(env.cwd.join("skills").join(name).join("manifest.json"));
    for path in candidates {
        if let Ok(text) = std::fs::read_to_string(&path) {
            return Manifest::parse(&text).map_err(|e| {
                ClientError::new(
                    ErrorCode::Usage,
                    format!(
                        "The manifest {} is broken ({e}); the skill cannot be called. Tell the operator to run `air-friends skills validate`; do not retry.",
                        path.display()
                    ),
                )
            });
        }
    }
    match builtin::builtin_manifest(name) {
        Some(Ok(m)) => Ok(m),
        Some(Err(e)) => Err(ClientError::new(
            ErrorCode::Usage,
            format!("The built-in manifest of {name} is broken ({e})."),
        )),
        None => Err(ClientError::new(
            ErrorCode::Usage,
            format!(
                "There is no skill named \"{name}\". Available: {}.",
                known()
            ),
        )),
    }
}

fn identity(env: &ClientEnv) -> Result<(String, String, String), ClientError> {
    let missing = |var: &str| {
        ClientError::new(
            ErrorCode::SessionUnresolved,
            format!(
                "{var} is not set, so this command is not running inside an air-friends agent session. Skills only work from the session's own shell; do not retry with made-up values, end your turn."
            ),
        )
    };
    let session = env
        .session_id
        .clone()
        .ok_or_else(|| missing("SESSION_ID"))?;
    if !session
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        return Err(ClientError::new(
            ErrorCode::SessionUnresolved,
            "SESSION_ID is malformed (only letters, digits, - and _ are possible). Do not change it; end your turn.",
        ));
    }
    let token = env
        .token
        .clone()
        .ok_or_else(|| missing("SKILL_API_TOKEN"))?;
    let url = env
        .api_url
        .clone()
        .ok_or_else(|| missing("SKILL_API_URL"))?;
    Ok((session, token, url))
}

/// `{SKILL_API_URL}/api/skill/{name}`, refusing anything but http(s) to a loopback host.
pub fn endpoint(api_url: &str, name: &str) -> Result<reqwest::Url, ClientError> {
    let refused = |why: &str| {
        ClientError::new(
            ErrorCode::ApiUnreachable,
            format!(
                "SKILL_API_URL {why}; the client only talks to the local daemon (http://127.0.0.1, http://[::1] or http://localhost). Do not change SKILL_API_URL; end your turn."
            ),
        )
    };
    let url = reqwest::Url::parse(api_url).map_err(|_| refused("is not a URL"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(refused("does not use http"));
    }
    let host = url
        .host_str()
        .unwrap_or("")
        .trim_start_matches('[')
        .trim_end_matches(']');
    let loopback = host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    if !loopback {
        return Err(refused("is not a loopback address"));
    }
    let base = api_url.trim_end_matches('/');
    reqwest::Url::parse(&format!("{base}/api/skill/{name}")).map_err(|_| refused("is not a URL"))
}

fn redact_url(u: &reqwest::Url) -> String {
    format!(
        "{}://{}{}",
        u.scheme(),
        u.host_str().unwrap_or(""),
        u.port().map(|p| format!(":{p}")).unwrap_or_default()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(dir: &std::path::Path) -> ClientEnv {
        ClientEnv {
            session_id: Some("sess1".into()),
            token: Some("tok".into()),
            api_url: Some("http://127.0.0.1:9".into()),
            workspace: Some(dir.to_path_buf()),
            cwd: dir.to_path_buf(),
            skills_dir: None,
        }
    }

    fn run_args(env: &ClientEnv, name: &str, a: &[&str]) -> ClientOutput {
        let a: Vec<String> = a.iter().map(|s| (*s).to_owned()).collect();
        run(name, &a, env)
    }

    fn err_code(out: &ClientOutput) -> String {
        let v: Value = serde_json::from_str(out.stderr.trim()).unwrap();
        assert_eq!(v["success"], false);
        assert!(v["error"].as_str().is_some_and(|s| !s.is_empty()));
        v["code"].as_str().unwrap().to_owned()
    }

    #[test]
    fn loopback_only() {
        for ok in [
            "http://127.0.0.1:3001",
            "http://localhost:3001/",
            "http://[::1]:3001",
            "https://127.0.0.2",
        ] {
            let u = endpoint(ok, "send-reply").unwrap();
            assert!(u.path().ends_with("/api/skill/send-reply"), "{u}");
        }
        for bad in [
            "http://10.0.0.1:3001",
            "http://example.com",
            "http://127.0.0.1.evil.com",
            "ftp://127.0.0.1",
            "not a url",
            "http://localhost@evil.com",
        ] {
            let e = endpoint(bad, "x").unwrap_err();
            assert_eq!(e.code, ErrorCode::ApiUnreachable, "{bad}");
        }
    }

    #[test]
    fn non_loopback_url_is_refused_before_any_payload_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let mut e = env(dir.path());
        e.api_url = Some("http://93.184.216.34/".into());
        let out = run_args(&e, "memory-stats", &[]);
        assert_eq!(out.exit_code, 1);
        assert_eq!(err_code(&out), "SKILL_API_UNREACHABLE");
    }

    #[test]
    fn missing_identity_is_session_unresolved() {
        let dir = tempfile::tempdir().unwrap();
        for which in 0..3 {
            let mut e = env(dir.path());
            match which {
                0 => e.session_id = None,
                1 => e.token = None,
                _ => e.api_url = None,
            }
            let out = run_args(&e, "memory-stats", &[]);
            assert_eq!(out.exit_code, 1);
            assert_eq!(err_code(&out), "SKILL_SESSION_UNRESOLVED");
        }
        let mut e = env(dir.path());
        e.session_id = Some("../x".into());
        assert_eq!(
            err_code(&run_args(&e, "memory-stats", &[])),
            "SKILL_SESSION_UNRESOLVED"
        );
    }

    #[test]
    fn unreachable_api() {
        let dir = tempfile::tempdir().unwrap();
        // Bind then drop a listener to get a port nobody listens on.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut e = env(dir.path());
        e.api_url = Some(format!("http://127.0.0.1:{port}"));
        let out = run_args(&e, "memory-stats", &[]);
        assert_eq!(out.exit_code, 1);
        assert_eq!(err_code(&out), "SKILL_API_UNREACHABLE");
        assert!(
            out.stderr
                .contains("skills/memory-stats/scripts/memory-stats")
        );
    }

    #[test]
    fn usage_errors_exit_2_and_help_exits_0() {
        let dir = tempfile::tempdir().unwrap();
        let e = env(dir.path());
        let out = run_args(&e, "send-reply", &["--message", "hi"]);
        assert_eq!(
            (out.exit_code, err_code(&out).as_str()),
            (2, "SKILL_LEGACY_FLAG")
        );
        let out = run_args(&e, "send-reply", &[]);
        assert_eq!(
            (out.exit_code, err_code(&out).as_str()),
            (2, "SKILL_MISSING_PAYLOAD")
        );
        let out = run_args(&e, "no-such-skill", &[]);
        assert_eq!((out.exit_code, err_code(&out).as_str()), (2, "SKILL_USAGE"));
        let out = run_args(&e, "../etc", &[]);
        assert_eq!((out.exit_code, err_code(&out).as_str()), (2, "SKILL_USAGE"));
        let out = run_args(&e, "memory-search", &["--help"]);
        assert_eq!(out.exit_code, 0);
        assert!(out.stdout.contains("--query-file PATH"), "{}", out.stdout);
    }

    #[test]
    fn payload_errors_surface_through_the_client() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("tmp/sess1")).unwrap();
        let e = env(dir.path());
        let out = run_args(&e, "send-reply", &["--message-file", "tmp/sess1/none.md"]);
        assert_eq!(
            (out.exit_code, err_code(&out).as_str()),
            (1, "SKILL_PAYLOAD_NOT_FOUND")
        );
        let out = run_args(&e, "send-reply", &["--message-file", "/etc/passwd"]);
        assert_eq!(
            (out.exit_code, err_code(&out).as_str()),
            (1, "SKILL_PAYLOAD_OUT_OF_BOUNDS")
        );
    }

    #[test]
    fn manifest_lookup_prefers_the_skills_dir() {
        let dir = tempfile::tempdir().unwrap();
        let skill = dir.path().join("custom").join("hello");
        std::fs::create_dir_all(&skill).unwrap();
        std::fs::write(
            skill.join("manifest.json"),
            r#"{"version":"1.0.0","entrypoint":"scripts/hello","input_schema":{"type":"object","additionalProperties":false,"properties":{}},"flags":{}}"#,
        )
        .unwrap();
        let mut e = env(dir.path());
        assert_eq!(
            resolve_manifest("hello", &e).unwrap_err().code,
            ErrorCode::Usage
        );
        e.skills_dir = Some(dir.path().join("custom"));
        assert_eq!(resolve_manifest("hello", &e).unwrap().version, "1.0.0");
        // built-ins come from the binary when no directory has them
        assert!(
            resolve_manifest("send-reply", &e)
                .unwrap()
                .flags
                .contains_key("message-file")
        );
    }
}
