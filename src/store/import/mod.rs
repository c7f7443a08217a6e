//! `air-friends import jsonl <dir>`: migrates an AIr-Friends data tree into the store.
//!
//! # Tree
//! `<dir>` is the AIr-Friends data root (the folder holding `workspaces/`) or that `workspaces/`
//! folder itself. Each user has one workspace folder:
//! ```text
//! workspaces/<platform>/<userId>/memory.public.jsonl    memory + patch lines (public memories)
//! workspaces/<platform>/<userId>/memory.private.jsonl   memory + patch lines (private memories)
//! workspaces/<platform>/<userId>/reminders.jsonl        reminder + reminder-patch lines
//! ```
//! The workspace key is `<platform>/<userId>` from the folder names. Hidden entries, other files
//! (`agent-workspace/`, notes) and folders without any of the three files are ignored.
//!
//! # Line format (what AIr-Friends writes, one JSON object per line)
//! ```text
//! {"id":"mem_…","ts":"2025-01-02T03:04:05.678Z","type":"memory","enabled":true,
//!  "visibility":"public","importance":"high","content":"…"}
//! {"id":"mem_…","ts":"…","type":"patch","targetId":"mem_…","enabled":false}
//!     optional enabled, visibility, importance; in the same file as its target
//! {"type":"reminder","id":"rem_…","createdAt":"…","scheduledAt":"…","message":"…",
//!  "platform":"discord","userId":"…","enabled":true}
//! {"type":"reminder-patch","targetId":"rem_…","ts":"…","changes":{"enabled":false}}
//! ```
//! Times are RFC 3339 strings. Later AIr-Friends versions add optional memory fields: `relatedTo`
//! and `supersedes` (id lists) are kept, on memories and on patches; `tier`, `category`, `scope`,
//! `decay`, `author` and any other field have no equivalent here and are ignored, with one warning
//! per field name for the whole run (not one per line).
//!
//! Earlier versions of this importer accepted an invented format (`createdAt` on memories,
//! `memoryId` and a `changes` object on memory patches, reminder `state`/`attempts`, numeric
//! times); AIr-Friends never wrote it, so it is no longer accepted.
//!
//! # Semantics
//! Ids and timestamps are kept: a memory's `createdAt` is its `ts`, a patch's time its `ts`.
//! Patches are applied in `ts` order whatever their order in the file (the store folds patches by
//! time, see `memories::refold`); a patch whose target is not a memory of the same file is
//! skipped. A visibility is private when the file or the line says so (never leaked to public).
//! Reminder patches are folded into their reminder in `ts` order before it is inserted; a
//! disabled reminder is cancelled, so never delivered. References to ids that are not memories of
//! the workspace are dropped with a warning. Re-running adds nothing: existing ids count as
//! already present. A malformed line is skipped with a warning naming file and line; it never
//! aborts the import. Each workspace is written in one job on the store's writer thread
//! (`tests/store_import.rs` holds all of this).

mod line;
mod parse;
mod records;
mod write;

use std::fmt;
use std::path::{Path, PathBuf};

use super::types::WorkspaceKey;
use super::{Store, StoreError};
use parse::{list_tree, parse_workspace};
use records::IgnoredFields;
use write::{count_only, write_workspace};

/// The folder inside the AIr-Friends data root that holds the per-user workspaces.
pub const WORKSPACES_DIR: &str = "workspaces";

/// New / already-present counts for one kind of record.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Newly written (in a dry run: found in the files, would be written unless already present).
    pub imported: usize,
    /// Already in the store (same id), left as it is.
    pub duplicate: usize,
}

impl Counts {
    fn add(&mut self, other: Counts) {
        self.imported += other.imported;
        self.duplicate += other.duplicate;
    }

    /// Records recognised in the files, new or not.
    pub fn found(&self) -> usize {
        self.imported + self.duplicate
    }
}

/// A problem found while importing: a skipped line, an ignored field, a dropped reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImportWarning {
    /// The file (or folder) concerned.
    pub file: PathBuf,
    /// 1-based line number; 0 for problems that concern the whole file or folder.
    pub line: usize,
    /// What was wrong and what was done about it.
    pub message: String,
}

impl fmt::Display for ImportWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: {}", self.file.display(), self.line, self.message)
    }
}

/// What one workspace (user folder) contributed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkspaceSummary {
    /// `<platform>/<userId>`.
    pub workspace: WorkspaceKey,
    /// Memory lines.
    pub memories: Counts,
    /// Memory patch lines applied.
    pub patches: Counts,
    /// Reminder lines.
    pub reminders: Counts,
    /// Reminder patch lines (folded into their reminder).
    pub reminder_patches: Counts,
    /// Lines skipped with a warning.
    pub skipped: usize,
}

impl fmt::Display for WorkspaceSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {} memories, {} patches applied, {} reminders, {} reminder patches, \
             {} lines skipped",
            self.workspace,
            self.memories.imported,
            self.patches.imported,
            self.reminders.imported,
            self.reminder_patches.imported,
            self.skipped
        )?;
        let present = self.memories.duplicate + self.patches.duplicate + self.reminders.duplicate;
        if present > 0 {
            write!(
                f,
                " (already present: {} memories, {} patches, {} reminders)",
                self.memories.duplicate, self.patches.duplicate, self.reminders.duplicate
            )?;
        }
        Ok(())
    }
}

/// Outcome of [`import_tree`] or [`dry_run`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImportReport {
    /// The folder the workspaces were read from (`<dir>/workspaces` or `<dir>`).
    pub root: PathBuf,
    /// True for [`dry_run`]: nothing was written and ids were not checked against the store.
    pub dry_run: bool,
    /// The root folder held no (non-hidden) entry at all.
    pub tree_empty: bool,
    /// One entry per workspace with data, in folder order.
    pub workspaces: Vec<WorkspaceSummary>,
    /// Memory lines, all workspaces.
    pub memories: Counts,
    /// Memory patch lines, all workspaces.
    pub patches: Counts,
    /// Reminder lines, all workspaces.
    pub reminders: Counts,
    /// Reminder patch lines, all workspaces.
    pub reminder_patches: Counts,
    /// Lines skipped because they could not be imported, all workspaces.
    pub skipped: usize,
    /// Every warning, in the order found (also logged with `tracing::warn!`).
    pub warnings: Vec<ImportWarning>,
}

impl ImportReport {
    fn new(root: PathBuf, dry_run: bool, tree_empty: bool) -> Self {
        ImportReport {
            root,
            dry_run,
            tree_empty,
            workspaces: Vec::new(),
            memories: Counts::default(),
            patches: Counts::default(),
            reminders: Counts::default(),
            reminder_patches: Counts::default(),
            skipped: 0,
            warnings: Vec::new(),
        }
    }

    /// True when the tree holds something but not one memory or reminder was recognised (new
    /// or already present): the wrong folder, or files in a format this importer does not read.
    /// The command exits non-zero then.
    pub fn found_nothing(&self) -> bool {
        !self.tree_empty && self.memories.found() == 0 && self.reminders.found() == 0
    }
}

impl fmt::Display for ImportReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.dry_run {
            writeln!(
                f,
                "dry run, nothing written; counts are what the files hold (ids already in the \
                 database are not checked)"
            )?;
        }
        for ws in &self.workspaces {
            writeln!(f, "{ws}")?;
        }
        write!(
            f,
            "{} workspaces under {}: imported {} memories, {} patches, {} reminders, \
             {} reminder patches; skipped as duplicate {} memories, {} patches, {} reminders, \
             {} reminder patches; {} malformed lines skipped; {} warnings",
            self.workspaces.len(),
            self.root.display(),
            self.memories.imported,
            self.patches.imported,
            self.reminders.imported,
            self.reminder_patches.imported,
            self.memories.duplicate,
            self.patches.duplicate,
            self.reminders.duplicate,
            self.reminder_patches.duplicate,
            self.skipped,
            self.warnings.len()
        )
    }
}

/// Why an import could not run at all (problems with single lines are warnings instead).
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    /// The argument is not a directory.
    #[error("{0} is not a directory")]
    NotADirectory(PathBuf),
    /// Reading the tree failed.
    #[error("reading {path}: {source}")]
    Io {
        /// What could not be read.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// Writing to the store failed (the current workspace was rolled back).
    #[error("writing to the store: {0}")]
    Store(#[from] StoreError),
}

/// Told after each workspace: its summary, how many workspaces are done, and how many there
/// are (a progress bar, or a line per workspace).
pub type Progress<'a> = &'a mut (dyn FnMut(&WorkspaceSummary, usize, usize) + Send);

/// Imports the data tree under `dir` into `store` (see the module docs for the format). Safe to
/// run again: nothing already imported is added twice.
pub async fn import_tree(store: &Store, dir: &Path) -> Result<ImportReport, ImportError> {
    run(Some(store), dir, &mut |_, _, _| {}).await
}

/// [`import_tree`], telling `progress` after each workspace.
pub async fn import_tree_with_progress(
    store: &Store,
    dir: &Path,
    progress: Progress<'_>,
) -> Result<ImportReport, ImportError> {
    run(Some(store), dir, progress).await
}

/// Parses the data tree under `dir` and reports what [`import_tree`] would import, writing
/// nothing (no store is opened).
pub async fn dry_run(dir: &Path) -> Result<ImportReport, ImportError> {
    run(None, dir, &mut |_, _, _| {}).await
}

fn join_err(e: tokio::task::JoinError) -> ImportError {
    ImportError::Store(StoreError::Internal(format!("import task: {e}")))
}

async fn run(
    store: Option<&Store>,
    dir: &Path,
    progress: Progress<'_>,
) -> Result<ImportReport, ImportError> {
    let dir = dir.to_owned();
    let (root, tree_empty, workspaces) = tokio::task::spawn_blocking(move || list_tree(&dir))
        .await
        .map_err(join_err)??;
    let mut report = ImportReport::new(root, store.is_none(), tree_empty);
    let mut ignored = IgnoredFields::default();
    let total = workspaces.iter().filter(|entry| entry.is_ok()).count();
    for entry in workspaces {
        let (ws, user_dir) = match entry {
            Ok(found) => found,
            Err(warning) => {
                report.warnings.push(warning);
                continue;
            }
        };
        let mut parsed = tokio::task::spawn_blocking(move || parse_workspace(ws, &user_dir))
            .await
            .map_err(join_err)??;
        ignored.merge(std::mem::take(&mut parsed.ignored));
        let outcome = match store {
            Some(store) => {
                store
                    .db()
                    .write(move |c| write_workspace(c, parsed))
                    .await?
            }
            None => count_only(parsed),
        };
        report.memories.add(outcome.summary.memories);
        report.patches.add(outcome.summary.patches);
        report.reminders.add(outcome.summary.reminders);
        report
            .reminder_patches
            .add(outcome.summary.reminder_patches);
        report.skipped += outcome.summary.skipped;
        report.warnings.extend(outcome.warnings);
        progress(&outcome.summary, report.workspaces.len() + 1, total);
        report.workspaces.push(outcome.summary);
    }
    report.warnings.extend(ignored.into_warnings());
    for w in &report.warnings {
        tracing::warn!(file = %w.file.display(), line = w.line, problem = %w.message, "import warning");
    }
    if let Some(store) = store
        && report.reminders.imported > 0
    {
        store.notify_reminders_changed();
    }
    tracing::info!(
        root = %report.root.display(),
        dry_run = report.dry_run,
        workspaces = report.workspaces.len(),
        memories = report.memories.imported,
        patches = report.patches.imported,
        reminders = report.reminders.imported,
        skipped = report.skipped,
        "import finished"
    );
    Ok(report)
}
