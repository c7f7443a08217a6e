//! The retention job: once a day (and shortly after a start) it deletes what `retention:` says
//! is kept no longer — memories disabled for `disabledMemoryDays` (with their changes, index
//! entries and vectors), model usage records and schedule run records older than `usageDays`,
//! and files older than
//! `sessionFileHours` left in the workspaces' session folders (`{workspace}/tmp/`). Each pass
//! logs one line with its counts and records them in `privacy_log` (`requested_by =
//! retention`, no subject) when it removed anything.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use chrono::Utc;
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::config::RetentionConfig;
use crate::store::erasure::RequestedBy;
use crate::store::{Store, StoreError};

/// The first pass runs this long after the start (the start's own work goes first).
const FIRST_PASS_AFTER: Duration = Duration::from_secs(60);
/// Then once a day.
const EVERY: Duration = Duration::from_secs(86_400);
/// Disabled memories deleted per write job (other writes go on between them).
const PURGE_BATCH: u32 = 500;

/// What one pass removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Removed {
    /// Memories disabled long enough.
    pub disabled_memories: u64,
    /// Model usage rows (overall and per place).
    pub usage_rows: u64,
    /// Records of operator schedules' runs.
    pub schedule_runs: u64,
    /// Files in session folders.
    pub session_files: u64,
}

impl Removed {
    fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

/// The retention job over `store` and the workspaces under `workspaces_root`.
#[derive(Debug, Clone)]
pub struct Retention {
    store: Store,
    workspaces_root: PathBuf,
    settings: RetentionConfig,
}

impl Retention {
    /// The job for `settings`.
    pub fn new(store: Store, workspaces_root: PathBuf, settings: RetentionConfig) -> Self {
        Self {
            store,
            workspaces_root,
            settings,
        }
    }

    /// Runs a pass [`FIRST_PASS_AFTER`] the start and every day after, until `stop`.
    pub async fn run(self, stop: CancellationToken) -> anyhow::Result<()> {
        let mut wait = FIRST_PASS_AFTER;
        loop {
            tokio::select! {
                () = stop.cancelled() => return Ok(()),
                () = tokio::time::sleep(wait) => {}
            }
            if let Err(error) = self.pass().await {
                tracing::warn!(%error, "retention pass failed; the next one is in a day");
            }
            wait = EVERY;
        }
    }

    /// One pass: deletes what is past its retention now; answers the counts.
    pub async fn pass(&self) -> Result<Removed, StoreError> {
        let now = Utc::now();
        // `n` days before now; `None` for 0 (kept) and for a period longer than time goes
        // back (nothing is that old).
        let cutoff = |n: u64| {
            let days = chrono::Duration::try_days(i64::try_from(n).ok()?)?;
            (n > 0).then(|| now.checked_sub_signed(days)).flatten()
        };
        let mut removed = Removed::default();
        let s = &self.settings;
        if let Some(before) = cutoff(s.disabled_memory_days) {
            removed.disabled_memories = self
                .store
                .purge_disabled_memories(before, PURGE_BATCH)
                .await?;
        }
        if let Some(before) = cutoff(s.usage_days) {
            removed.usage_rows = self.store.prune_usage(before.date_naive()).await?;
            removed.schedule_runs = self.store.schedule_runs_prune(before).await? as u64;
        }
        if s.session_file_hours > 0 {
            let age = Duration::from_secs(s.session_file_hours.saturating_mul(3_600));
            let root = self.workspaces_root.clone();
            removed.session_files =
                tokio::task::spawn_blocking(move || old_session_files(&root, age))
                    .await
                    .map_err(|e| StoreError::Internal(format!("session file sweep: {e}")))?;
        }
        tracing::info!(
            name: "retention_pass",
            disabled_memories = removed.disabled_memories,
            usage_rows = removed.usage_rows,
            schedule_runs = removed.schedule_runs,
            session_files = removed.session_files,
            "retention_pass"
        );
        if !removed.is_empty() {
            let detail = serde_json::to_value(removed).unwrap_or_default();
            self.store
                .privacy_log("retention", RequestedBy::Retention, None, detail)
                .await?;
        }
        Ok(removed)
    }
}

/// Deletes the files older than `age` under `{root}/{platform}/{user}/tmp/` (and the folders
/// left empty there); answers how many files went. Links are removed, never followed.
fn old_session_files(root: &Path, age: Duration) -> u64 {
    let Some(cutoff) = SystemTime::now().checked_sub(age) else {
        return 0;
    };
    let mut removed = 0;
    for platform in read_dirs(root) {
        for workspace in read_dirs(&platform) {
            let tmp = workspace.join("tmp");
            if std::fs::symlink_metadata(&tmp).is_ok_and(|m| m.is_dir()) {
                removed += sweep(&tmp, cutoff, false);
            }
        }
    }
    removed
}

/// The folders directly in `dir` (not links).
fn read_dirs(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                .map(|e| e.path())
                .collect()
        })
        .unwrap_or_default()
}

/// Deletes the files in `dir` last changed before `cutoff`, recursively, and the sub-folders
/// that end up empty (`dir` itself too when `remove_if_empty`); answers how many files went.
fn sweep(dir: &Path, cutoff: SystemTime, remove_if_empty: bool) -> u64 {
    let mut removed = 0;
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if meta.is_dir() {
            removed += sweep(&path, cutoff, true);
        } else if meta.modified().is_ok_and(|m| m < cutoff) && std::fs::remove_file(&path).is_ok() {
            removed += 1;
        }
    }
    if remove_if_empty {
        // Fails (and keeps it) while anything is left in it.
        let _ = std::fs::remove_dir(dir);
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_old_files_in_session_folders_go_and_links_are_not_followed() {
        let root = tempfile::tempdir().unwrap();
        let ws = root.path().join("discord/1");
        let old_session = ws.join("tmp/s1");
        let new_session = ws.join("tmp/s2");
        std::fs::create_dir_all(&old_session).unwrap();
        std::fs::create_dir_all(&new_session).unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("keep.txt"), "not ours").unwrap();
        let old = SystemTime::now() - Duration::from_secs(7_200);
        for (path, when) in [
            (old_session.join("a.png"), Some(old)),
            (new_session.join("b.png"), None),
            (ws.join("notes.md"), Some(old)),
        ] {
            std::fs::write(&path, "x").unwrap();
            if let Some(when) = when {
                std::fs::File::options()
                    .write(true)
                    .open(&path)
                    .unwrap()
                    .set_modified(when)
                    .unwrap();
            }
        }
        std::os::unix::fs::symlink(outside.path(), new_session.join("link")).unwrap();
        let removed = old_session_files(root.path(), Duration::from_secs(3_600));
        // The old attachment; the link is not followed (its target's file stays) and, being a
        // fresh entry, stays too.
        assert_eq!(removed, 1);
        assert!(!old_session.exists(), "an emptied session folder goes");
        assert!(new_session.join("b.png").exists());
        assert!(
            ws.join("notes.md").exists(),
            "files outside tmp/ are the user's"
        );
        assert!(outside.path().join("keep.txt").exists());
        assert!(ws.join("tmp").exists());
    }
}
