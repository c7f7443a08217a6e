//! `fs/read_text_file` and `fs/write_text_file` served for the agent, confined to the session
//! workspace: paths are canonicalised (symlinks resolved) and must lie inside the canonical
//! workspace by whole path components, so `/ws/user10` is not inside `/ws/user1`.

use std::path::{Component, Path, PathBuf};

use serde_json::{Value, json};

/// Largest file served to the agent.
const MAX_READ_BYTES: u64 = 8 * 1024 * 1024;

/// Why an fs request was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FsError {
    /// Missing or malformed parameters.
    #[error("invalid params: {0}")]
    InvalidParams(String),
    /// The path resolves outside the workspace.
    #[error("path is outside the workspace")]
    OutsideWorkspace,
    /// The file does not exist.
    #[error("file not found")]
    NotFound,
    /// Any other I/O problem.
    #[error("{0}")]
    Io(String),
}

/// Resolves `requested` (absolute, or relative to the workspace) for reading: it must exist
/// and its canonical form must be inside the canonical workspace.
pub fn resolve_existing(workspace: &Path, requested: &Path) -> Result<PathBuf, FsError> {
    let root = canonical_root(workspace)?;
    let joined = if requested.is_absolute() {
        requested.to_path_buf()
    } else {
        root.join(requested)
    };
    let canonical = std::fs::canonicalize(&joined).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => FsError::NotFound,
        _ => FsError::Io(e.to_string()),
    })?;
    if canonical.starts_with(&root) {
        Ok(canonical)
    } else {
        Err(FsError::OutsideWorkspace)
    }
}

/// Resolves `requested` for writing: the deepest existing ancestor is canonicalised and must
/// be inside the workspace; the rest must be plain names (no `..`). An existing final symlink
/// is followed and checked too.
pub fn resolve_for_write(workspace: &Path, requested: &Path) -> Result<PathBuf, FsError> {
    let root = canonical_root(workspace)?;
    let joined = if requested.is_absolute() {
        requested.to_path_buf()
    } else {
        root.join(requested)
    };
    if std::fs::symlink_metadata(&joined).is_ok() {
        return resolve_existing(workspace, &joined);
    }
    let mut existing = joined.as_path();
    let mut rest = Vec::new();
    while std::fs::symlink_metadata(existing).is_err() {
        let Some(name) = existing.file_name() else {
            return Err(FsError::OutsideWorkspace);
        };
        rest.push(name.to_owned());
        existing = existing.parent().ok_or(FsError::OutsideWorkspace)?;
    }
    if joined
        .components()
        .any(|c| matches!(c, Component::ParentDir))
    {
        return Err(FsError::OutsideWorkspace);
    }
    let base = std::fs::canonicalize(existing).map_err(|e| FsError::Io(e.to_string()))?;
    if !base.starts_with(&root) {
        return Err(FsError::OutsideWorkspace);
    }
    let mut out = base;
    for name in rest.iter().rev() {
        out.push(name);
    }
    Ok(out)
}

fn canonical_root(workspace: &Path) -> Result<PathBuf, FsError> {
    std::fs::canonicalize(workspace).map_err(|e| FsError::Io(format!("workspace: {e}")))
}

/// Serves `fs/read_text_file` (`path`, optional 1-based `line` and `limit`).
pub async fn read_text_file(workspace: PathBuf, params: Value) -> Result<Value, FsError> {
    let path = params
        .get("path")
        .and_then(Value::as_str)
        .ok_or_else(|| FsError::InvalidParams("`path` is required".into()))?
        .to_owned();
    let line = params.get("line").and_then(Value::as_u64);
    let limit = params.get("limit").and_then(Value::as_u64);
    tokio::task::spawn_blocking(move || {
        let file = resolve_existing(&workspace, Path::new(&path))?;
        let meta = std::fs::metadata(&file).map_err(|e| FsError::Io(e.to_string()))?;
        if meta.len() > MAX_READ_BYTES {
            return Err(FsError::Io(format!(
                "file larger than {MAX_READ_BYTES} bytes"
            )));
        }
        let text = std::fs::read_to_string(&file).map_err(|e| FsError::Io(e.to_string()))?;
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
    .map_err(|e| FsError::Io(e.to_string()))?
}

/// Serves `fs/write_text_file` (`path`, `content`), creating parent folders inside the
/// workspace.
pub async fn write_text_file(workspace: PathBuf, params: Value) -> Result<Value, FsError> {
    let path = params
        .get("path")
        .and_then(Value::as_str)
        .ok_or_else(|| FsError::InvalidParams("`path` is required".into()))?
        .to_owned();
    let content = params
        .get("content")
        .and_then(Value::as_str)
        .ok_or_else(|| FsError::InvalidParams("`content` is required".into()))?
        .to_owned();
    tokio::task::spawn_blocking(move || {
        let file = resolve_for_write(&workspace, Path::new(&path))?;
        if let Some(parent) = file.parent() {
            std::fs::create_dir_all(parent).map_err(|e| FsError::Io(e.to_string()))?;
        }
        std::fs::write(&file, content).map_err(|e| FsError::Io(e.to_string()))?;
        Ok(Value::Null)
    })
    .await
    .map_err(|e| FsError::Io(e.to_string()))?
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
        let v = read_text_file(t.ws.clone(), json!({"path": t.ws.join("notes/a.txt")}))
            .await
            .unwrap();
        assert_eq!(v["content"], "one\ntwo\nthree\n");
        let v = read_text_file(
            t.ws.clone(),
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
            let err = read_text_file(t.ws.clone(), json!({"path": p}))
                .await
                .unwrap_err();
            assert_eq!(err, FsError::OutsideWorkspace, "{}", p.display());
        }
        let err = read_text_file(t.ws.clone(), json!({})).await.unwrap_err();
        assert!(matches!(err, FsError::InvalidParams(_)));
    }

    #[tokio::test]
    async fn writes_inside_create_folders_and_cannot_escape() {
        let t = tree();
        write_text_file(
            t.ws.clone(),
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
            let err = write_text_file(t.ws.clone(), json!({"path": p, "content": "x"}))
                .await
                .unwrap_err();
            assert_eq!(err, FsError::OutsideWorkspace, "{}", p.display());
        }
        assert_eq!(
            std::fs::read_to_string(t.sibling.join("secret.txt")).unwrap(),
            "secret"
        );
        assert!(!t.sibling.join("new.txt").exists());
    }
}
