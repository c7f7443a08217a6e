//! User workspaces: `{repoPath}/{workspacesDir}/{platform}/{userId}/` with a per-session
//! staging folder `tmp/{sessionId}/` that is removed when the session ends.
//!
//! Path parts come from platform ids, which are attacker-controlled text as far as the file
//! system is concerned: a part is accepted only if it is a plain name (letters, digits, `_`,
//! `-`, `.`, `@`), not empty, not starting with a dot and at most 128 bytes — anything else is
//! refused rather than rewritten, so two users can never map to one folder.

use std::path::{Path, PathBuf};

use crate::platform::PlatformKind;
use crate::session::SessionId;

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
    /// `agent.sandbox.limits.maxWorkspaceMb` in bytes; `None`: no cap.
    size_cap: Option<u64>,
}

/// A workspace that has reached its size cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkspaceFull {
    /// Bytes counted before the count stopped (at least `cap`).
    pub used: u64,
    /// The cap.
    pub cap: u64,
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
            size_cap: None,
        }
    }

    /// The same, with each workspace capped at `bytes` on disk (0: no cap).
    pub fn with_size_cap(mut self, bytes: u64) -> Self {
        self.size_cap = (bytes > 0).then_some(bytes);
        self
    }

    /// `Some` when `workspace` uses its size cap or more on disk (what its files occupy,
    /// sparse ones by their real blocks; the sandbox's `skills/` mount point is not counted).
    /// Checked before a turn starts and before attachments are saved: agents write files, and
    /// the workspaces share the data folder's file system with the database. The walk stops at
    /// the cap, so its cost is bounded by the cap, not by the folder. Off the async workers.
    pub async fn full(&self, workspace: &Path) -> Option<WorkspaceFull> {
        let cap = self.size_cap?;
        let path = workspace.to_path_buf();
        tokio::task::spawn_blocking(move || disk_usage_up_to(&path, cap))
            .await
            .ok()
            .filter(|used| *used >= cap)
            .map(|used| WorkspaceFull { used, cap })
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
        session_id: &SessionId,
    ) -> Result<SessionDirs, WorkspaceError> {
        let session_id = session_id.as_str();
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
    pub async fn prepare_scratch(
        &self,
        session_id: &SessionId,
    ) -> Result<SessionDirs, WorkspaceError> {
        let session_id = session_id.as_str();
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

/// What the files under `root` occupy on disk, counted until `stop` is reached (links are not
/// followed; unreadable folders count as empty; `{root}/skills` is the sandbox's mount point).
fn disk_usage_up_to(root: &Path, stop: u64) -> u64 {
    use std::os::unix::fs::MetadataExt as _;
    let mut used = 0u64;
    let mut folders = vec![root.to_path_buf()];
    while let Some(folder) = folders.pop() {
        let Ok(entries) = std::fs::read_dir(&folder) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if folder == root && entry.file_name() == crate::confine::SKILLS_MOUNT {
                continue;
            }
            let Ok(meta) = std::fs::symlink_metadata(&path) else {
                continue;
            };
            if meta.is_dir() {
                folders.push(path);
            } else {
                used = used.saturating_add(meta.blocks().saturating_mul(512));
                if used >= stop {
                    return used;
                }
            }
        }
    }
    used
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

    #[tokio::test]
    async fn a_workspace_is_full_at_its_cap_counting_real_blocks_but_not_the_skills_mount() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        std::fs::create_dir_all(ws.join("notes")).unwrap();
        std::fs::create_dir_all(ws.join("skills")).unwrap();
        std::fs::write(ws.join("skills/big"), vec![7u8; 3 << 20]).unwrap();
        let capped = Workspaces::new(dir.path()).with_size_cap(2 << 20);
        assert_eq!(capped.full(&ws).await, None, "skills/ is not counted");
        // A sparse file counts by what it occupies, not by its length.
        let sparse = std::fs::File::create(ws.join("sparse")).unwrap();
        sparse.set_len(1 << 30).unwrap();
        assert_eq!(capped.full(&ws).await, None);
        std::fs::write(ws.join("notes/a"), vec![1u8; 1 << 20]).unwrap();
        std::fs::write(ws.join("notes/b"), vec![1u8; 1 << 20]).unwrap();
        let full = capped
            .full(&ws)
            .await
            .expect("2 MiB of files reach a 2 MiB cap");
        assert!(full.used >= 2 << 20 && full.cap == 2 << 20, "{full:?}");
        assert_eq!(Workspaces::new(dir.path()).full(&ws).await, None, "no cap");
    }

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
            .prepare(PlatformKind::Discord, "42", &SessionId::for_test("sess1"))
            .await
            .unwrap();
        assert!(d.staging.is_dir());
        assert!(d.workspace.ends_with("workspaces/discord/42"));
        std::fs::write(d.staging.join("r.md"), "x").unwrap();
        w.cleanup(&d).await;
        assert!(!d.staging.exists());
        assert!(d.workspace.is_dir());
        assert!(
            w.prepare(PlatformKind::Discord, "../etc", &SessionId::for_test("s"))
                .await
                .is_err()
        );
    }
}
