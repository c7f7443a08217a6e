//! Writing one parsed workspace into the store (one job on the writer thread): memories first,
//! then their patches (refolded afterwards), then reminders; ids already present are counted,
//! and references to ids that are not memories of the workspace are dropped. The dry run's
//! counting is here too, so both produce the same [`Outcome`].

use std::collections::HashSet;

use super::records::{Loc, MemoryLine, ParsedWorkspace, PatchLine, ReminderLine};
use super::{Counts, ImportWarning, WorkspaceSummary};
use crate::store::StoreError;
use crate::store::{memories, reminders};

/// What one workspace's import produced.
pub(super) struct Outcome {
    pub(super) summary: WorkspaceSummary,
    pub(super) warnings: Vec<ImportWarning>,
}

fn empty_summary(parsed: &ParsedWorkspace) -> WorkspaceSummary {
    WorkspaceSummary {
        workspace: parsed.ws.clone(),
        memories: Counts::default(),
        patches: Counts::default(),
        reminders: Counts::default(),
        reminder_patches: Counts::default(),
        skipped: parsed.skipped,
    }
}

/// The dry-run outcome: everything parsed counts as to be imported.
pub(super) fn count_only(parsed: ParsedWorkspace) -> Outcome {
    let mut summary = empty_summary(&parsed);
    summary.memories.imported = parsed.memories.len();
    summary.patches.imported = parsed.patches.len();
    summary.reminders.imported = parsed.reminders.len();
    summary.reminder_patches.imported = parsed.reminders.iter().map(|r| r.patches).sum();
    Outcome {
        summary,
        warnings: parsed.warnings,
    }
}

/// Writes one workspace; runs as one job on the store's writer thread.
pub(super) fn write_workspace(
    conn: &rusqlite::Connection,
    mut parsed: ParsedWorkspace,
) -> Result<Outcome, StoreError> {
    let mut writer = WorkspaceWriter::new(conn, &mut parsed);
    writer.write_memories(std::mem::take(&mut parsed.memories))?;
    let touched = writer.write_patches(std::mem::take(&mut parsed.patches))?;
    // The fold orders patches by time, so file order does not matter.
    for seq in touched {
        memories::refold(conn, seq)?;
    }
    writer.write_reminders(std::mem::take(&mut parsed.reminders))?;
    Ok(Outcome {
        summary: writer.summary,
        warnings: writer.warnings,
    })
}

/// One workspace being written: the running counts and warnings, and the ids a reference may
/// point at.
struct WorkspaceWriter<'c> {
    conn: &'c rusqlite::Connection,
    ws_text: String,
    summary: WorkspaceSummary,
    warnings: Vec<ImportWarning>,
    /// This workspace's memories, existing or being imported.
    known: HashSet<String>,
}

impl<'c> WorkspaceWriter<'c> {
    fn new(conn: &'c rusqlite::Connection, parsed: &mut ParsedWorkspace) -> Self {
        WorkspaceWriter {
            conn,
            ws_text: parsed.ws.to_string(),
            summary: empty_summary(parsed),
            warnings: std::mem::take(&mut parsed.warnings),
            known: parsed.memories.iter().map(|m| m.row.id.clone()).collect(),
        }
    }

    /// Keeps the ids of `ids` that are other memories of this workspace (each once) and drops
    /// the rest with a warning.
    fn keep_known(
        &mut self,
        loc: &Loc,
        owner: &str,
        ids: &mut Vec<String>,
    ) -> Result<(), StoreError> {
        let mut kept = Vec::with_capacity(ids.len());
        for id in ids.drain(..) {
            let exists = self.known.contains(&id)
                || memories::seq_in_workspace(self.conn, &self.ws_text, &id)?.is_some();
            if exists {
                self.known.insert(id.clone());
            }
            if id != owner && exists && !kept.contains(&id) {
                kept.push(id);
            } else {
                self.warnings.push(loc.warn(format!(
                    "dropped reference to {id:?}: not another memory of this workspace"
                )));
            }
        }
        *ids = kept;
        Ok(())
    }

    fn write_memories(&mut self, lines: Vec<MemoryLine>) -> Result<(), StoreError> {
        for MemoryLine { loc, mut row } in lines {
            match memories::workspace_of(self.conn, &row.id)? {
                Some(owner) if owner == self.ws_text => self.summary.memories.duplicate += 1,
                Some(_) => {
                    self.summary.skipped += 1;
                    self.warnings.push(loc.warn(format!(
                        "skipped: memory id {:?} already belongs to another workspace",
                        row.id
                    )));
                }
                None => {
                    let owner = row.id.clone();
                    self.keep_known(&loc, &owner, &mut row.related_to)?;
                    self.keep_known(&loc, &owner, &mut row.supersedes)?;
                    memories::insert(self.conn, &row)?;
                    self.summary.memories.imported += 1;
                }
            }
        }
        Ok(())
    }

    /// Records the memory patches; returns the memories that got a new patch (to be refolded).
    fn write_patches(&mut self, lines: Vec<PatchLine>) -> Result<HashSet<i64>, StoreError> {
        let mut touched = HashSet::new();
        for mut p in lines {
            let Some(seq) = memories::seq_in_workspace(self.conn, &self.ws_text, &p.target)? else {
                // Its memory was skipped above (owned by another workspace).
                self.summary.skipped += 1;
                self.warnings.push(p.loc.warn(format!(
                    "skipped: patch for memory {:?}, which was not imported",
                    p.target
                )));
                continue;
            };
            let target = p.target.clone();
            for list in [&mut p.changes.related_to, &mut p.changes.supersedes]
                .into_iter()
                .flatten()
            {
                self.keep_known(&p.loc, &target, list)?;
            }
            if memories::insert_patch(self.conn, seq, &p.id, &p.changes, p.at_ms, "import")? {
                self.summary.patches.imported += 1;
                touched.insert(seq);
            } else {
                self.summary.patches.duplicate += 1;
            }
        }
        Ok(touched)
    }

    fn write_reminders(&mut self, lines: Vec<ReminderLine>) -> Result<(), StoreError> {
        for r in lines {
            let existing = reminders::get(self.conn, &r.row.id)?.map(|x| x.workspace.to_string());
            match existing {
                Some(owner) if owner == self.ws_text => {
                    self.summary.reminders.duplicate += 1;
                    self.summary.reminder_patches.duplicate += r.patches;
                }
                Some(_) => {
                    self.summary.skipped += 1;
                    self.warnings.push(r.loc.warn(format!(
                        "skipped: reminder id {:?} already belongs to another workspace",
                        r.row.id
                    )));
                }
                None => {
                    reminders::insert(self.conn, &r.row)?;
                    self.summary.reminders.imported += 1;
                    self.summary.reminder_patches.imported += r.patches;
                }
            }
        }
        Ok(())
    }
}
