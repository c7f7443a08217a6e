//! `fs/read_text_file` and `fs/write_text_file` served for the agent, confined to the session
//! workspace by [`crate::confine`]: canonical, component-wise containment (`/ws/user10` is not
//! inside `/ws/user1`), `private/` hidden unless the session is a DM, and only regular files
//! with a single hard link, opened without blocking and checked on the descriptor before any
//! byte is read or truncated.
//!
//! [`serve`] is what the session's connection runs for each request, in a task of its own: the
//! blocking work goes to `spawn_blocking` under [`FS_REQUEST_TIMEOUT`], so a slow disk never
//! holds up the turn loop and its idle / max-turn timeouts (`tests/agent_runner.rs`).

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};

use super::rpc;
use crate::confine::{Confine, ConfineError};

/// Largest file served to the agent.
const MAX_READ_BYTES: u64 = 8 * 1024 * 1024;

/// Longest one fs request may take before the agent gets an error. (A blocking call that
/// outlives it keeps its thread until the OS returns; the answer is not waited for.)
pub const FS_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Most fs requests of one session in flight at once; more are refused at once, so an agent
/// cannot pin the blocking thread pool.
pub const MAX_FS_IN_FLIGHT: usize = 8;

/// JSON-RPC code for a path that does not exist (ACP "resource not found").
const RESOURCE_NOT_FOUND: i64 = -32002;

/// Why an fs request was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FsError {
    /// Missing or malformed parameters.
    #[error("invalid params: {0}")]
    InvalidParams(String),
    /// The path was refused by the workspace's containment rule.
    #[error("path refused: {0}")]
    Refused(#[from] ConfineError),
    /// The file is not UTF-8 text.
    #[error("the file is not UTF-8 text")]
    NotText,
    /// The request took longer than [`FS_REQUEST_TIMEOUT`].
    #[error("the file request took longer than {0:?}")]
    TimedOut(Duration),
    /// [`MAX_FS_IN_FLIGHT`] requests are already running.
    #[error("too many file requests at once; wait for the earlier ones")]
    Busy,
    /// The blocking task failed.
    #[error("internal error")]
    Internal,
}

impl FsError {
    /// The JSON-RPC error code the agent gets.
    pub fn rpc_code(&self) -> i64 {
        match self {
            FsError::InvalidParams(_) => rpc::INVALID_PARAMS,
            FsError::Refused(ConfineError::NotFound) => RESOURCE_NOT_FOUND,
            _ => rpc::INTERNAL_ERROR,
        }
    }
}

/// Serves one `fs/read_text_file` or `fs/write_text_file` request for a session whose
/// workspace is `workspace` (`dm`: `private/` visible), bounded by [`FS_REQUEST_TIMEOUT`].
pub async fn serve(
    method: &str,
    workspace: PathBuf,
    dm: bool,
    staging: Option<PathBuf>,
    params: Value,
) -> Result<Value, FsError> {
    let scope = Scope {
        workspace,
        dm,
        staging,
    };
    let work = async {
        match method {
            "fs/read_text_file" => read_scoped(scope, params).await,
            "fs/write_text_file" => write_scoped(scope, params).await,
            other => Err(FsError::InvalidParams(format!("not an fs method: {other}"))),
        }
    };
    tokio::time::timeout(FS_REQUEST_TIMEOUT, work)
        .await
        .map_err(|_| FsError::TimedOut(FS_REQUEST_TIMEOUT))?
}

/// What one session's fs requests may reach: its workspace (`private/` only in a DM) and, of
/// the workspace's temporary folder, only its own staging folder (`$TMPDIR/$SESSION_ID`) —
/// another live session of the same user stages its payloads (a DM reply made from private
/// memories, say) there too.
#[derive(Debug, Clone)]
struct Scope {
    workspace: PathBuf,
    dm: bool,
    staging: Option<PathBuf>,
}

impl Scope {
    fn confine(&self) -> Result<Confine, FsError> {
        let confine = Confine::workspace(&self.workspace, self.dm)?;
        let staging = self
            .staging
            .as_deref()
            .and_then(|s| Some((s.parent()?.strip_prefix(&self.workspace).ok()?, s)));
        Ok(match staging {
            Some((tmp, own)) if !tmp.as_os_str().is_empty() => {
                let own = own
                    .strip_prefix(&self.workspace)
                    .unwrap_or(own)
                    .to_path_buf();
                confine.hiding(tmp).showing(own)
            }
            _ => confine,
        })
    }
}

/// Serves `fs/read_text_file` (`path`, optional 1-based `line` and `limit`).
pub async fn read_text_file(workspace: PathBuf, dm: bool, params: Value) -> Result<Value, FsError> {
    let scope = Scope {
        workspace,
        dm,
        staging: None,
    };
    read_scoped(scope, params).await
}

async fn read_scoped(scope: Scope, params: Value) -> Result<Value, FsError> {
    let path = required(&params, "path")?;
    let line = params.get("line").and_then(Value::as_u64);
    let limit = params.get("limit").and_then(Value::as_u64);
    blocking(move || {
        let confine = scope.confine()?;
        let bytes = confine
            .open_read(Path::new(&path), MAX_READ_BYTES)?
            .read_all()?;
        let text = String::from_utf8(bytes).map_err(|_| FsError::NotText)?;
        let content = match (line, limit) {
            (None, None) => text,
            (line, limit) => {
                let skip = line.unwrap_or(1).saturating_sub(1) as usize;
                let take = limit.map(|l| l as usize).unwrap_or(usize::MAX);
                text.split_inclusive('\n').skip(skip).take(take).collect()
            }
        };
        Ok(json!({"content": content}))
    })
    .await
}

/// Serves `fs/write_text_file` (`path`, `content`), creating parent folders inside the
/// workspace.
pub async fn write_text_file(
    workspace: PathBuf,
    dm: bool,
    params: Value,
) -> Result<Value, FsError> {
    let scope = Scope {
        workspace,
        dm,
        staging: None,
    };
    write_scoped(scope, params).await
}

async fn write_scoped(scope: Scope, params: Value) -> Result<Value, FsError> {
    let path = required(&params, "path")?;
    let content = required(&params, "content")?;
    blocking(move || {
        scope
            .confine()?
            .write(Path::new(&path), content.as_bytes())?;
        Ok(Value::Null)
    })
    .await
}

fn required(params: &Value, key: &str) -> Result<String, FsError> {
    params
        .get(key)
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| FsError::InvalidParams(format!("`{key}` is required")))
}

async fn blocking(
    work: impl FnOnce() -> Result<Value, FsError> + Send + 'static,
) -> Result<Value, FsError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|_| FsError::Internal)?
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Tree {
        _dir: tempfile::TempDir,
        ws: PathBuf,
        sibling: PathBuf,
    }

    fn tree() -> Tree {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("user1");
        let sibling = dir.path().join("user10");
        std::fs::create_dir_all(ws.join("notes")).unwrap();
        std::fs::create_dir_all(&sibling).unwrap();
        std::fs::write(ws.join("notes/a.txt"), "one\ntwo\nthree\n").unwrap();
        std::fs::write(sibling.join("secret.txt"), "secret").unwrap();
        std::os::unix::fs::symlink(sibling.join("secret.txt"), ws.join("link")).unwrap();
        std::os::unix::fs::symlink(&sibling, ws.join("dirlink")).unwrap();
        Tree {
            _dir: dir,
            ws,
            sibling,
        }
    }

    #[tokio::test]
    async fn reads_inside_the_workspace_with_line_and_limit() {
        let t = tree();
        let v = read_text_file(
            t.ws.clone(),
            false,
            json!({"path": t.ws.join("notes/a.txt")}),
        )
        .await
        .unwrap();
        assert_eq!(v["content"], "one\ntwo\nthree\n");
        let v = read_text_file(
            t.ws.clone(),
            false,
            json!({"path": "notes/a.txt", "line": 2, "limit": 1}),
        )
        .await
        .unwrap();
        assert_eq!(v["content"], "two\n");
    }

    #[tokio::test]
    async fn reads_cannot_escape() {
        let t = tree();
        for p in [
            t.sibling.join("secret.txt"),
            t.ws.join("../user10/secret.txt"),
            t.ws.join("link"),
            t.ws.join("dirlink/secret.txt"),
            PathBuf::from("/etc/passwd"),
        ] {
            let err = read_text_file(t.ws.clone(), false, json!({"path": p}))
                .await
                .unwrap_err();
            assert_eq!(
                err,
                FsError::Refused(ConfineError::Outside),
                "{}",
                p.display()
            );
        }
        let err = read_text_file(t.ws.clone(), false, json!({}))
            .await
            .unwrap_err();
        assert!(matches!(err, FsError::InvalidParams(_)));
    }

    #[tokio::test]
    async fn writes_inside_create_folders_and_cannot_escape() {
        let t = tree();
        write_text_file(
            t.ws.clone(),
            false,
            json!({"path": t.ws.join("tmp/s1/r.md"), "content": "hi"}),
        )
        .await
        .unwrap();
        assert_eq!(
            std::fs::read_to_string(t.ws.join("tmp/s1/r.md")).unwrap(),
            "hi"
        );
        for p in [
            t.sibling.join("new.txt"),
            t.ws.join("../user10/new.txt"),
            t.ws.join("tmp/../../user10/new.txt"),
            t.ws.join("dirlink/new.txt"),
            t.ws.join("link"),
            PathBuf::from("/tmp/escape-test.txt"),
        ] {
            let err = write_text_file(t.ws.clone(), false, json!({"path": p, "content": "x"}))
                .await
                .unwrap_err();
            assert_eq!(
                err,
                FsError::Refused(ConfineError::Outside),
                "{}",
                p.display()
            );
        }
        assert_eq!(
            std::fs::read_to_string(t.sibling.join("secret.txt")).unwrap(),
            "secret"
        );
        assert!(!t.sibling.join("new.txt").exists());
    }

    #[tokio::test]
    async fn private_is_refused_in_public_sessions_and_served_in_dm() {
        let t = tree();
        std::fs::create_dir_all(t.ws.join("private")).unwrap();
        std::fs::write(t.ws.join("private/notes.md"), "from memories").unwrap();
        let params = json!({"path": "private/notes.md"});
        let err = read_text_file(t.ws.clone(), false, params.clone())
            .await
            .unwrap_err();
        assert_eq!(err, FsError::Refused(ConfineError::Hidden));
        assert!(!err.to_string().contains("from memories"));
        let v = read_text_file(t.ws.clone(), true, params).await.unwrap();
        assert_eq!(v["content"], "from memories");
        let write = json!({"path": "private/new.md", "content": "x"});
        let err = write_text_file(t.ws.clone(), false, write.clone())
            .await
            .unwrap_err();
        assert_eq!(err, FsError::Refused(ConfineError::Hidden));
        assert!(!t.ws.join("private/new.md").exists());
        write_text_file(t.ws.clone(), true, write).await.unwrap();
        assert!(t.ws.join("private/new.md").exists());
    }

    #[tokio::test]
    async fn serve_answers_each_refusal_with_its_rpc_code() {
        let t = tree();
        std::fs::write(t.ws.join("bin"), [0xff, 0xfe]).unwrap();
        for (method, params, error, code) in [
            (
                "fs/read_text_file",
                json!({"path": "none.txt"}),
                FsError::Refused(ConfineError::NotFound),
                RESOURCE_NOT_FOUND,
            ),
            (
                "fs/write_text_file",
                json!({"path": "x"}),
                FsError::InvalidParams("`content` is required".into()),
                rpc::INVALID_PARAMS,
            ),
            (
                "fs/read_text_file",
                json!({"path": "bin"}),
                FsError::NotText,
                rpc::INTERNAL_ERROR,
            ),
        ] {
            let got = serve(method, t.ws.clone(), false, None, params)
                .await
                .unwrap_err();
            assert_eq!(got, error, "{method}");
            assert_eq!(got.rpc_code(), code, "{method}");
        }
    }
}
