//! [`Eraser`]: erasing one user's data everywhere the daemon keeps it, in an order that never
//! leaves a running agent on a deleted folder and can be run again after a failure.
//!
//! 1. The user is held in the session registry ([`SessionRegistry::hold_user`]): from then on
//!    no session starts for them, and their messages are answered with the `erasing` notice.
//! 2. A turn of theirs that is running refuses the erasure ([`EraseError::TurnRunning`]), or is
//!    stopped first when asked (`--now`).
//! 3. Their warm agents are stopped, and the eraser waits until no session of theirs is left.
//! 4. Their workspace folder and their conversations' agent-state folders are deleted.
//! 5. Their rows are erased from the store in one transaction with its `privacy_log` record,
//!    and the database file is rebuilt ([`Store::erase_user`]).
//!
//! Folders go before rows so that a failure part-way can be repaired by running it again: the
//! rows still name every folder until the last step.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::metrics::PrivacyMetrics;
use crate::conversation::continuity::STATE_DIR;
use crate::conversation::warm::WarmPool;
use crate::conversation::workspace::{Workspaces, safe_part};
use crate::platform::PlatformKind;
use crate::session::SessionRegistry;
use crate::store::erasure::{Erasure, RequestedBy};
use crate::store::{Store, StoreError, WorkspaceKey};

/// How long the eraser waits for the user's agents to stop.
const STOP_WAIT: Duration = Duration::from_secs(30);

/// Why an erasure did not happen (or not all of it).
#[derive(Debug, thiserror::Error)]
pub enum EraseError {
    /// The platform or user id cannot name a user.
    #[error("not a user: {0}")]
    InvalidUser(String),
    /// One of the user's turns is running (and the caller did not ask to stop it).
    #[error(
        "{turns} turn(s) of this user are running; wait for them to end, or stop them first (--now)"
    )]
    TurnRunning {
        /// How many.
        turns: usize,
    },
    /// Another erasure of the same user is under way.
    #[error("an erasure of this user is already under way")]
    AlreadyErasing,
    /// The user's agents had not stopped after [`STOP_WAIT`].
    #[error("{left} agent session(s) of this user were still running after {} s", STOP_WAIT.as_secs())]
    AgentsStillRunning {
        /// Sessions left.
        left: usize,
    },
    /// A folder could not be deleted; nothing was erased from the database yet.
    #[error("could not delete {path}: {source}")]
    Folder {
        /// The folder.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The store failed.
    #[error("the database failed: {0}")]
    Store(#[from] StoreError),
}

impl EraseError {
    /// A short code for logs, metrics and the control socket's answers.
    pub fn code(&self) -> &'static str {
        match self {
            Self::InvalidUser(_) => "invalid_user",
            Self::TurnRunning { .. } => "turn_running",
            Self::AlreadyErasing => "already_erasing",
            Self::AgentsStillRunning { .. } => "agents_running",
            Self::Folder { .. } => "folder",
            Self::Store(_) => "store",
        }
    }
}

/// What an erasure did (read back by `forget-user` from the daemon's answer).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ForgetReport {
    /// `platform/userId`.
    pub user: String,
    /// The rows removed, by kind.
    pub erased: crate::store::erasure::Erased,
    /// Files deleted from the workspace and the agent-state folders.
    pub files: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Turns stopped first (`--now`).
    pub turns_stopped: usize,
    /// Warm agents stopped.
    pub agents_stopped: usize,
    /// Whether the database file was rebuilt afterwards.
    pub vacuumed: bool,
    /// The `privacy_log` record's subject (the keyed hash naming the user there).
    pub record_subject: String,
}

/// Erases users' data (see the module docs). Cheap to clone.
#[derive(Debug, Clone)]
pub struct Eraser {
    store: Store,
    workspaces: Workspaces,
    state_root: PathBuf,
    live: Option<Live>,
    metrics: PrivacyMetrics,
}

/// The running daemon's parts an erasure must stop first.
#[derive(Debug, Clone)]
struct Live {
    sessions: SessionRegistry,
    warm: Option<WarmPool>,
}

impl Eraser {
    /// An eraser over `store`, the workspaces and `{repo_path}/agent-state`, with no running
    /// agents to stop (`forget-user` while no daemon runs).
    pub fn new(store: Store, workspaces: Workspaces, repo_path: &Path) -> Self {
        Self {
            store,
            workspaces,
            state_root: repo_path.join(STATE_DIR),
            live: None,
            metrics: PrivacyMetrics::default(),
        }
    }

    /// The same, counting each erasure in `metrics`.
    pub fn with_metrics(mut self, metrics: PrivacyMetrics) -> Self {
        self.metrics = metrics;
        self
    }

    /// The same, in the daemon: its sessions and warm agents are stopped first.
    pub fn with_agents(mut self, sessions: SessionRegistry, warm: Option<WarmPool>) -> Self {
        self.live = Some(Live { sessions, warm });
        self
    }

    /// Erases everything kept about `user` of `platform` (see the module docs). With `now`,
    /// a running turn of theirs is stopped first instead of refusing.
    pub async fn forget_user(
        &self,
        platform: PlatformKind,
        user: &str,
        now: bool,
        requested_by: RequestedBy,
    ) -> Result<ForgetReport, EraseError> {
        let valid = WorkspaceKey::new(platform.as_str(), user)
            .map_err(|e| EraseError::InvalidUser(e.to_string()))
            .and_then(|ws| {
                let folder = self
                    .workspaces
                    .path_for(platform, user)
                    .map_err(|e| EraseError::InvalidUser(e.to_string()))?;
                Ok((ws, folder))
            });
        let (ws, workspace) = match valid {
            Ok(valid) => valid,
            Err(error) => {
                self.metrics.erasure(requested_by.as_str(), error.code());
                return Err(error);
            }
        };
        let result = self
            .erase(platform, &ws, &workspace, now, requested_by)
            .await;
        self.metrics.erasure(
            requested_by.as_str(),
            result.as_ref().map_or_else(EraseError::code, |_| "ok"),
        );
        match &result {
            Ok(report) => tracing::info!(
                name: "user_erased",
                platform = %platform,
                user,
                requested_by = requested_by.as_str(),
                memories = report.erased.memories,
                reminders = report.erased.reminders,
                files = report.files,
                turns_stopped = report.turns_stopped,
                agents_stopped = report.agents_stopped,
                subject = %report.record_subject,
                "user_erased"
            ),
            Err(error) => tracing::warn!(
                name: "user_erasure_failed",
                platform = %platform,
                user,
                requested_by = requested_by.as_str(),
                code = error.code(),
                %error,
                "user_erasure_failed"
            ),
        }
        result
    }

    async fn erase(
        &self,
        kind: PlatformKind,
        ws: &WorkspaceKey,
        workspace: &Path,
        now: bool,
        requested_by: RequestedBy,
    ) -> Result<ForgetReport, EraseError> {
        let user = ws.user_id();
        let (_hold, (turns_stopped, agents_stopped)) = match &self.live {
            Some(live) => {
                let hold = live
                    .sessions
                    .hold_user(kind, user)
                    .ok_or(EraseError::AlreadyErasing)?;
                (Some(hold), live.stop_agents(kind, user, now).await?)
            }
            None => (None, (0, 0)),
        };
        let mut folders = vec![workspace.to_owned()];
        for name in self.store.continuity_folders_of(ws).await? {
            folders.push(self.state_folder(&name)?);
        }
        let (mut files, mut bytes) = (0, 0);
        for folder in &folders {
            let (f, b) = remove_folder(folder).await?;
            files += f;
            bytes += b;
        }
        let Erasure {
            erased,
            folders: named,
            record,
            vacuumed,
        } = self.store.erase_user(ws, requested_by).await?;
        // Named by a conversation that began between the read above and the erasure (none can
        // while the user is held; without a daemon, none runs).
        for name in named {
            if let Ok(folder) = self.state_folder(&name)
                && !folders.contains(&folder)
            {
                let (f, b) = remove_folder(&folder).await?;
                files += f;
                bytes += b;
            }
        }
        Ok(ForgetReport {
            user: ws.to_string(),
            erased,
            files,
            bytes,
            turns_stopped,
            agents_stopped,
            vacuumed,
            record_subject: record.subject,
        })
    }

    /// The agent-state folder `name` (a record's folder; one path part, or the record is
    /// corrupt).
    fn state_folder(&self, name: &str) -> Result<PathBuf, EraseError> {
        safe_part("agent-state folder", name)
            .map_err(|e| StoreError::Internal(format!("a continuity record's folder: {e}")))?;
        Ok(self.state_root.join(name))
    }
}

impl Live {
    /// Stops `user`'s agents: refuses while a turn of theirs runs (or stops it with `now`), stops
    /// their warm agents, and waits until none of their sessions is left. Answers the turns and
    /// the warm agents stopped.
    async fn stop_agents(
        &self,
        platform: PlatformKind,
        user: &str,
        now: bool,
    ) -> Result<(usize, usize), EraseError> {
        let running: Vec<_> = self
            .sessions
            .of_user(platform, user)
            .into_iter()
            .filter(|s| s.turn_is_open())
            .collect();
        if !running.is_empty() && !now {
            return Err(EraseError::TurnRunning {
                turns: running.len(),
            });
        }
        for session in &running {
            session.request_termination("the user's data is being erased");
        }
        let deadline = tokio::time::Instant::now() + STOP_WAIT;
        let mut agents = 0;
        loop {
            if let Some(warm) = &self.warm {
                agents += warm.retire_user(platform, user).await;
            }
            let left = self.sessions.of_user(platform, user).len();
            if left == 0 {
                return Ok((running.len(), agents));
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(EraseError::AgentsStillRunning { left });
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// Deletes `folder` and everything in it (gone already is fine); answers the files and bytes
/// it held. Off the async workers.
async fn remove_folder(folder: &Path) -> Result<(u64, u64), EraseError> {
    let path = folder.to_owned();
    tokio::task::spawn_blocking(move || {
        let counted = count_files(&path);
        match std::fs::remove_dir_all(&path) {
            Ok(()) => Ok(counted),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok((0, 0)),
            Err(source) => Err(EraseError::Folder { path, source }),
        }
    })
    .await
    .map_err(|e| EraseError::Folder {
        path: folder.to_owned(),
        source: std::io::Error::other(e),
    })?
}

/// Files under `dir` (not following links) and their bytes; what cannot be read counts 0.
pub(super) fn count_files(dir: &Path) -> (u64, u64) {
    let (mut files, mut bytes) = (0, 0);
    let mut stack = vec![dir.to_owned()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let Ok(meta) = entry.metadata() else { continue };
            if meta.is_dir() {
                stack.push(entry.path());
            } else {
                files += 1;
                bytes += meta.len();
            }
        }
    }
    (files, bytes)
}
