//! Reading an AIr-Friends export: finds the workspace folders of the tree, reads each folder's
//! JSONL files line by line and collects the records (with their locations and the problems
//! found) into a [`ParsedWorkspace`] (`records.rs`), ready to be counted or written. One line's
//! fields are read in `line.rs`.

use std::collections::{HashMap, HashSet};
use std::io::BufRead;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::line::{Line, Obj, parse_line, reminder_state};
use super::records::{
    FileKind, IgnoredFields, Loc, MemoryLine, ParsedWorkspace, ReminderLine, ReminderPatchLine,
};
use super::{ImportError, ImportWarning, WORKSPACES_DIR};
use crate::store::types::{Visibility, WorkspaceKey};

type WorkspaceEntry = Result<(WorkspaceKey, PathBuf), ImportWarning>;

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> ImportError + '_ {
    move |source| ImportError::Io {
        path: path.to_owned(),
        source,
    }
}

/// Non-hidden entries of `dir`, sorted by name, with whether each is a folder.
fn sorted_entries(dir: &Path) -> Result<Vec<(String, PathBuf, bool)>, ImportError> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io_err(dir))? {
        let entry = entry.map_err(io_err(dir))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') {
            continue;
        }
        let is_dir = entry.file_type().map_err(io_err(dir))?.is_dir();
        out.push((name, entry.path(), is_dir));
    }
    out.sort();
    Ok(out)
}

/// The three files a workspace folder may hold, with the kind of lines each holds.
const FILES: [(&str, FileKind); 3] = [
    (
        "memory.public.jsonl",
        FileKind::Memories(Visibility::Public),
    ),
    (
        "memory.private.jsonl",
        FileKind::Memories(Visibility::Private),
    ),
    ("reminders.jsonl", FileKind::Reminders),
];

/// Resolves the workspaces root (`<dir>/workspaces` when it exists, else `<dir>`) and lists the
/// user folders under it that hold at least one data file.
pub(super) fn list_tree(dir: &Path) -> Result<(PathBuf, bool, Vec<WorkspaceEntry>), ImportError> {
    if !dir.is_dir() {
        return Err(ImportError::NotADirectory(dir.to_owned()));
    }
    let nested = dir.join(WORKSPACES_DIR);
    let root = if nested.is_dir() {
        nested
    } else {
        dir.to_owned()
    };
    let platforms = sorted_entries(&root)?;
    let tree_empty = platforms.is_empty();
    let mut out = Vec::new();
    for (platform, platform_dir, is_dir) in platforms {
        if !is_dir {
            continue;
        }
        for (user, user_dir, is_dir) in sorted_entries(&platform_dir)? {
            if !is_dir || !FILES.iter().any(|(name, _)| user_dir.join(name).is_file()) {
                continue;
            }
            out.push(match WorkspaceKey::new(&platform, &user) {
                Ok(ws) => Ok((ws, user_dir)),
                Err(e) => Err(ImportWarning {
                    file: user_dir,
                    line: 0,
                    message: format!("skipped folder: {e}"),
                }),
            });
        }
    }
    Ok((root, tree_empty, out))
}

/// Reads the lines of one file; calls `each` with the line's location and object, and reports
/// unreadable or non-object lines as skipped. A missing file is no error.
fn for_each_object(
    path: &Path,
    parsed: &mut ParsedWorkspace,
    mut each: impl FnMut(Loc, &Map<String, Value>, &mut ParsedWorkspace),
) -> Result<(), ImportError> {
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io_err(path)(e)),
    };
    let mut reader = std::io::BufReader::new(file);
    let mut buf = Vec::new();
    let mut line = 0usize;
    loop {
        buf.clear();
        if reader.read_until(b'\n', &mut buf).map_err(io_err(path))? == 0 {
            return Ok(());
        }
        line += 1;
        let loc = Loc {
            file: path.to_owned(),
            line,
        };
        let Ok(text) = std::str::from_utf8(&buf) else {
            parsed.skip(&loc, "not valid UTF-8");
            continue;
        };
        let text = text.trim_start_matches('\u{feff}').trim();
        if text.is_empty() {
            continue;
        }
        match serde_json::from_str::<Value>(text) {
            Ok(Value::Object(obj)) => each(loc, &obj, parsed),
            Ok(_) => parsed.skip(&loc, "not a JSON object"),
            Err(e) => parsed.skip(&loc, format!("invalid JSON ({e})")),
        }
    }
}

pub(super) fn parse_workspace(
    ws: WorkspaceKey,
    dir: &Path,
) -> Result<ParsedWorkspace, ImportError> {
    let mut parsed = ParsedWorkspace {
        ws,
        memories: Vec::new(),
        patches: Vec::new(),
        reminders: Vec::new(),
        skipped: 0,
        warnings: Vec::new(),
        ignored: IgnoredFields::default(),
    };
    let mut reminder_patches = Vec::new();
    // The ids seen so far, for the duplicate check: a scan of the lines read so far made the
    // import quadratic (100 000 memories took 52 s, nearly all of it comparing ids).
    let mut memory_ids: HashSet<String> = HashSet::new();
    let mut reminder_ids: HashSet<String> = HashSet::new();
    for (name, kind) in FILES {
        let path = dir.join(name);
        let mut file_memories = HashSet::new();
        let mut file_patches = Vec::new();
        for_each_object(&path, &mut parsed, |loc, obj, parsed| {
            let mut obj = Obj::new(obj);
            let ws = parsed.ws.clone();
            match parse_line(&ws, kind, &loc, &mut obj, parsed) {
                Ok(line) => {
                    obj.note_ignored("", &loc, &mut parsed.ignored);
                    match line {
                        Line::Memory(row) => {
                            if !memory_ids.insert(row.id.clone()) {
                                parsed.skip(&loc, format!("memory id {:?} appears twice", row.id));
                            } else {
                                file_memories.insert(row.id.clone());
                                parsed.memories.push(MemoryLine { loc, row });
                            }
                        }
                        Line::Patch(mut p) => {
                            p.loc = loc;
                            file_patches.push(p);
                        }
                        Line::Reminder(row) => {
                            if !reminder_ids.insert(row.id.clone()) {
                                parsed
                                    .skip(&loc, format!("reminder id {:?} appears twice", row.id));
                            } else {
                                parsed.reminders.push(ReminderLine {
                                    loc,
                                    row,
                                    patches: 0,
                                });
                            }
                        }
                        Line::ReminderPatch(mut p) => {
                            p.loc = loc;
                            reminder_patches.push(p);
                        }
                    }
                }
                Err(message) => parsed.skip(&loc, message),
            }
        })?;
        // AIr-Friends writes a patch into its target's file; lines may be in any order.
        for p in file_patches {
            if file_memories.contains(&p.target) {
                parsed.patches.push(p);
            } else {
                let message = format!(
                    "patch for {:?}, which is not a memory of this file",
                    p.target
                );
                parsed.skip(&p.loc, message);
            }
        }
    }
    fold_reminder_patches(&mut parsed, reminder_patches);
    Ok(parsed)
}

/// Applies reminder patches to their reminders in `ts` order (file order on equal times).
fn fold_reminder_patches(parsed: &mut ParsedWorkspace, mut patches: Vec<ReminderPatchLine>) {
    patches.sort_by_key(|p| p.at_ms);
    let index: HashMap<String, usize> = parsed
        .reminders
        .iter()
        .enumerate()
        .map(|(i, r)| (r.row.id.clone(), i))
        .collect();
    for p in patches {
        let Some(&i) = index.get(&p.target) else {
            let message = format!("reminder patch for unknown reminder {:?}", p.target);
            parsed.skip(&p.loc, message);
            continue;
        };
        let line = &mut parsed.reminders[i];
        if let Some(enabled) = p.enabled {
            line.row.state = reminder_state(enabled);
        }
        line.row.updated_at_ms = line.row.updated_at_ms.max(p.at_ms);
        line.patches += 1;
    }
}
