//! User workspaces: `{repoPath}/{workspacesDir}/{platform}/{userId}/` with a per-session
//! staging folder `tmp/{sessionId}/` that is removed when the session ends.
//!
//! Path parts come from platform ids, which are attacker-controlled text as far as the file
//! system is concerned: a part is accepted only if it is a plain name (letters, digits, `_`,
//! `-`, `.`, `@`), not empty, not starting with a dot and at most 128 bytes — anything else is
//! refused rather than rewritten, so two users can never map to one folder.

use std::path::{Path, PathBuf};

use crate::platform::PlatformKind;

/// Why a workspace could not be prepared.
#[derive(Debug, thiserror::Error)]
pub enum WorkspaceError {
    /// An id that cannot be a folder name.
    #[error("{what} {value:?} cannot be used as a folder name")]
    UnsafeName {
        /// Which part.
        what: &'static str,
        /// The rejected text.
        value: String,
    },
    /// File-system failure.
    #[error("workspace I/O error at {}: {source}", path.display())]
    Io {
        /// The path that failed.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
}

/// Checks one path part.
pub fn safe_part(what: &'static str, value: &str) -> Result<(), WorkspaceError> {
    let ok = !value.is_empty()
        && value.len() <= 128
        && !value.starts_with('.')
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '@'));
    if ok {
        Ok(())
    } else {
        Err(WorkspaceError::UnsafeName {
            what,
            value: value.chars().take(64).collect(),
        })
    }
}

/// Where workspaces live.
#[derive(Debug, Clone)]
pub struct Workspaces {
    root: PathBuf,
}

/// One session's folders.
#[derive(Debug, Clone)]
pub struct SessionDirs {
    /// The user's workspace (agent cwd), or a scratch folder of the session's own.
    pub workspace: PathBuf,
    /// `{workspace}/tmp/{sessionId}` (payload files).
    pub staging: PathBuf,
    /// `workspace` is a scratch folder, removed whole when the session ends.
    pub scratch: bool,
}

/// The folder, under the workspaces root, holding maintenance runs' scratch workspaces (a
/// name no platform user id can take: they never start with a dot).
const SCRATCH_DIR: &str = ".scratch";

impl Workspaces {
    /// Workspaces under `root` (= `repoPath/workspacesDir`), made absolute.
    pub fn new(root: &Path) -> Self {
        Self {
            root: std::path::absolute(root).unwrap_or_else(|_| root.to_path_buf()),
        }
    }

    /// The root folder.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The workspace of `platform/user_id` (not created).
    pub fn path_for(
        &self,
        platform: PlatformKind,
        user_id: &str,
    ) -> Result<PathBuf, WorkspaceError> {
        safe_part("user id", user_id)?;
        Ok(self.root.join(platform.as_str()).join(user_id))
    }

    /// Creates the workspace and the session's staging folder.
    pub async fn prepare(
        &self,
        platform: PlatformKind,
        user_id: &str,
        session_id: &str,
    ) -> Result<SessionDirs, WorkspaceError> {
        safe_part("session id", session_id)?;
        let workspace = self.path_for(platform, user_id)?;
        let staging = workspace.join("tmp").join(session_id);
        let dirs = SessionDirs {
            workspace,
            staging,
            scratch: false,
        };
        create_staging(dirs).await
    }

    /// An empty workspace of the session's own, with its staging folder: for sessions that
    /// need no file of the user's (memory maintenance), so a hijacked one can neither read
    /// `private/` nor leave a file a later session of the user would read. Removed whole by
    /// [`cleanup`](Self::cleanup).
    pub async fn prepare_scratch(&self, session_id: &str) -> Result<SessionDirs, WorkspaceError> {
        safe_part("session id", session_id)?;
        let workspace = self.root.join(SCRATCH_DIR).join(session_id);
        let staging = workspace.join("tmp").join(session_id);
        create_staging(SessionDirs {
            workspace,
            staging,
            scratch: true,
        })
        .await
    }
}

/// Creates `dirs.staging` (and the folders above it) off the async workers.
async fn create_staging(dirs: SessionDirs) -> Result<SessionDirs, WorkspaceError> {
    {
        let s = dirs.staging.clone();
        tokio::task::spawn_blocking(move || {
            std::fs::create_dir_all(&s).map_err(|source| WorkspaceError::Io { path: s, source })
        })
        .await
        .map_err(|e| WorkspaceError::Io {
            path: dirs.staging.clone(),
            source: std::io::Error::other(e),
        })??;
    }
    Ok(dirs)
}

impl Workspaces {
    /// Removes the session's staging folder, or its whole scratch workspace (errors are
    /// logged: nothing to do about them).
    pub async fn cleanup(&self, dirs: &SessionDirs) {
        let s = if dirs.scratch {
            dirs.workspace.clone()
        } else {
            dirs.staging.clone()
        };
        let result = tokio::task::spawn_blocking(move || match std::fs::remove_dir_all(&s) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        })
        .await;
        if let Ok(Err(e)) = result {
            tracing::warn!(path = %dirs.staging.display(), scratch = dirs.scratch, error = %e, "could not remove staging folder");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsafe_parts_are_refused() {
        for bad in [
            "",
            ".",
            "..",
            ".hidden",
            "a/b",
            "a\\b",
            "../x",
            "a\0b",
            "名前",
            &"x".repeat(200),
        ] {
            assert!(safe_part("user id", bad).is_err(), "{bad:?}");
        }
        for good in [
            "123456789012345678",
            "9abcdefghij",
            "local",
            "user@host.example",
            "a_b-c.d",
        ] {
            assert!(safe_part("user id", good).is_ok(), "{good:?}");
        }
    }

    #[tokio::test]
    async fn prepare_and_cleanup() {
        let dir = tempfile::tempdir().unwrap();
        let w = Workspaces::new(&dir.path().join("workspaces"));
        let d = w
            .prepare(PlatformKind::Discord, "42", "sess1")
            .await
            .unwrap();
        assert!(d.staging.is_dir());
        assert!(d.workspace.ends_with("workspaces/discord/42"));
        std::fs::write(d.staging.join("r.md"), "x").unwrap();
        w.cleanup(&d).await;
        assert!(!d.staging.exists());
        assert!(d.workspace.is_dir());
        assert!(
            w.prepare(PlatformKind::Discord, "../etc", "s")
                .await
                .is_err()
        );
    }
}
