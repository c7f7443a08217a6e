//! What the lines of an export become before they are counted or written: where each came
//! from ([`Loc`]), one workspace's records ([`ParsedWorkspace`]: memories, patches, reminders,
//! what was skipped) and the fields without an equivalent here ([`IgnoredFields`]). Reading the
//! files (`parse.rs`), one line's parsers (`line.rs`) and the writer (`write.rs`) all build on
//! these types, and none of them on another's.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

use super::ImportWarning;
use crate::store::memories::MemoryInsert;
use crate::store::reminders::ReminderInsert;
use crate::store::types::{MemoryPatch, Visibility, WorkspaceKey};

/// Where a line came from.
#[derive(Debug, Clone)]
pub(super) struct Loc {
    pub(super) file: PathBuf,
    pub(super) line: usize,
}

impl Loc {
    pub(super) fn warn(&self, message: impl Into<String>) -> ImportWarning {
        ImportWarning {
            file: self.file.clone(),
            line: self.line,
            message: message.into(),
        }
    }
}

/// Fields without an equivalent here: name → (lines that had it, first occurrence), so that each
/// name is reported once for the whole run.
#[derive(Default)]
pub(super) struct IgnoredFields(BTreeMap<String, (usize, Loc)>);

impl IgnoredFields {
    pub(super) fn note(&mut self, name: String, loc: &Loc) {
        self.0.entry(name).or_insert_with(|| (0, loc.clone())).0 += 1;
    }

    pub(super) fn merge(&mut self, other: IgnoredFields) {
        for (name, (n, loc)) in other.0 {
            self.0.entry(name).or_insert((0, loc)).0 += n;
        }
    }

    pub(super) fn into_warnings(self) -> impl Iterator<Item = ImportWarning> {
        self.0.into_iter().map(|(name, (n, loc))| {
            loc.warn(format!(
                "field `{name}` has no equivalent in air-friends and was ignored \
                 ({n} lines; first here)"
            ))
        })
    }
}

pub(super) struct MemoryLine {
    pub(super) loc: Loc,
    pub(super) row: MemoryInsert,
}

pub(super) struct PatchLine {
    pub(super) loc: Loc,
    pub(super) id: String,
    pub(super) target: String,
    pub(super) changes: MemoryPatch,
    pub(super) at_ms: i64,
}

pub(super) struct ReminderLine {
    pub(super) loc: Loc,
    pub(super) row: ReminderInsert,
    pub(super) patches: usize,
}

pub(super) struct ReminderPatchLine {
    pub(super) loc: Loc,
    pub(super) target: String,
    pub(super) enabled: Option<bool>,
    pub(super) at_ms: i64,
}

/// Everything parsed from one workspace folder.
pub(super) struct ParsedWorkspace {
    pub(super) ws: WorkspaceKey,
    pub(super) memories: Vec<MemoryLine>,
    pub(super) patches: Vec<PatchLine>,
    pub(super) reminders: Vec<ReminderLine>,
    pub(super) skipped: usize,
    pub(super) warnings: Vec<ImportWarning>,
    pub(super) ignored: IgnoredFields,
}

impl ParsedWorkspace {
    pub(super) fn skip(&mut self, loc: &Loc, message: impl fmt::Display) {
        self.skipped += 1;
        self.warnings.push(loc.warn(format!("skipped: {message}")));
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum FileKind {
    Memories(Visibility),
    Reminders,
}
