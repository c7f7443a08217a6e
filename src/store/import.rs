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

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::io::BufRead;
use std::path::{Path, PathBuf};

use chrono::DateTime;
use serde_json::{Map, Value};

use super::memories::{self, MemoryInsert};
use super::reminders::{self, ReminderInsert};
use super::types::{
    Importance, MAX_ID_LEN, MAX_REMINDER_CHARS, MemoryPatch, ReminderState, Visibility,
    WorkspaceKey,
};
use super::{Store, StoreError};

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

/// Imports the data tree under `dir` into `store` (see the module docs for the format). Safe to
/// run again: nothing already imported is added twice.
pub async fn import_tree(store: &Store, dir: &Path) -> Result<ImportReport, ImportError> {
    run(Some(store), dir).await
}

/// Parses the data tree under `dir` and reports what [`import_tree`] would import, writing
/// nothing (no store is opened).
pub async fn dry_run(dir: &Path) -> Result<ImportReport, ImportError> {
    run(None, dir).await
}

fn join_err(e: tokio::task::JoinError) -> ImportError {
    ImportError::Store(StoreError::Internal(format!("import task: {e}")))
}

async fn run(store: Option<&Store>, dir: &Path) -> Result<ImportReport, ImportError> {
    let dir = dir.to_owned();
    let (root, tree_empty, workspaces) = tokio::task::spawn_blocking(move || list_tree(&dir))
        .await
        .map_err(join_err)??;
    let mut report = ImportReport::new(root, store.is_none(), tree_empty);
    let mut ignored = IgnoredFields::default();
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
fn list_tree(dir: &Path) -> Result<(PathBuf, bool, Vec<WorkspaceEntry>), ImportError> {
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

/// Where a line came from.
#[derive(Debug, Clone)]
struct Loc {
    file: PathBuf,
    line: usize,
}

impl Loc {
    fn warn(&self, message: impl Into<String>) -> ImportWarning {
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
struct IgnoredFields(BTreeMap<String, (usize, Loc)>);

impl IgnoredFields {
    fn note(&mut self, name: String, loc: &Loc) {
        self.0.entry(name).or_insert_with(|| (0, loc.clone())).0 += 1;
    }

    fn merge(&mut self, other: IgnoredFields) {
        for (name, (n, loc)) in other.0 {
            self.0.entry(name).or_insert((0, loc)).0 += n;
        }
    }

    fn into_warnings(self) -> impl Iterator<Item = ImportWarning> {
        self.0.into_iter().map(|(name, (n, loc))| {
            loc.warn(format!(
                "field `{name}` has no equivalent in air-friends and was ignored \
                 ({n} lines; first here)"
            ))
        })
    }
}

/// One JSON object being read: typed getters that remember which fields were used, so the rest
/// can be reported as ignored.
struct Obj<'a> {
    map: &'a Map<String, Value>,
    used: Vec<&'static str>,
}

impl<'a> Obj<'a> {
    fn new(map: &'a Map<String, Value>) -> Self {
        Obj {
            map,
            used: Vec::new(),
        }
    }

    fn get(&mut self, name: &'static str) -> Option<&'a Value> {
        self.used.push(name);
        self.map.get(name).filter(|v| !v.is_null())
    }

    fn str(&mut self, name: &'static str) -> Result<Option<&'a str>, String> {
        match self.get(name) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(other) => Err(format!("`{name}` must be a string, got {other}")),
        }
    }

    fn required_str(&mut self, name: &'static str) -> Result<&'a str, String> {
        self.str(name)?.ok_or_else(|| format!("missing `{name}`"))
    }

    fn bool(&mut self, name: &'static str) -> Result<Option<bool>, String> {
        match self.get(name) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(other) => Err(format!("`{name}` must be true or false, got {other}")),
        }
    }

    fn time(&mut self, name: &'static str) -> Result<i64, String> {
        let s = self.required_str(name)?;
        let ms = DateTime::parse_from_rfc3339(s)
            .map_err(|e| format!("`{name}` is not an ISO 8601 time ({s:?}: {e})"))?
            .timestamp_millis();
        super::from_ms(ms).map_err(|_| format!("`{name}` is out of range"))?;
        Ok(ms)
    }

    fn ids(&mut self, name: &'static str) -> Result<Option<Vec<String>>, String> {
        match self.get(name) {
            None => Ok(None),
            Some(Value::Array(items)) => items
                .iter()
                .map(|v| match v {
                    Value::String(s) => Ok(s.clone()),
                    other => Err(format!("`{name}` must list string ids, got {other}")),
                })
                .collect::<Result<Vec<_>, _>>()
                .map(Some),
            Some(other) => Err(format!("`{name}` must be a list of ids, got {other}")),
        }
    }

    /// Reports every field no getter asked for (`prefix` names the enclosing object).
    fn note_ignored(&self, prefix: &str, loc: &Loc, ignored: &mut IgnoredFields) {
        for key in self.map.keys() {
            if !self.used.contains(&key.as_str()) {
                ignored.note(format!("{prefix}{key}"), loc);
            }
        }
    }
}

struct MemoryLine {
    loc: Loc,
    row: MemoryInsert,
}

struct PatchLine {
    loc: Loc,
    id: String,
    target: String,
    changes: MemoryPatch,
    at_ms: i64,
}

struct ReminderLine {
    loc: Loc,
    row: ReminderInsert,
    patches: usize,
}

struct ReminderPatchLine {
    loc: Loc,
    target: String,
    enabled: Option<bool>,
    at_ms: i64,
}

/// Everything parsed from one workspace folder.
struct ParsedWorkspace {
    ws: WorkspaceKey,
    memories: Vec<MemoryLine>,
    patches: Vec<PatchLine>,
    reminders: Vec<ReminderLine>,
    skipped: usize,
    warnings: Vec<ImportWarning>,
    ignored: IgnoredFields,
}

impl ParsedWorkspace {
    fn skip(&mut self, loc: &Loc, message: impl fmt::Display) {
        self.skipped += 1;
        self.warnings.push(loc.warn(format!("skipped: {message}")));
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum FileKind {
    Memories(Visibility),
    Reminders,
}

enum Line {
    Memory(MemoryInsert),
    Patch(PatchLine),
    Reminder(ReminderInsert),
    ReminderPatch(ReminderPatchLine),
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

fn parse_workspace(ws: WorkspaceKey, dir: &Path) -> Result<ParsedWorkspace, ImportError> {
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
                            if parsed.memories.iter().any(|m| m.row.id == row.id) {
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
                            if parsed.reminders.iter().any(|r| r.row.id == row.id) {
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

/// AIr-Friends reminders are only enabled or not; a disabled one will never be delivered.
fn reminder_state(enabled: bool) -> ReminderState {
    if enabled {
        ReminderState::Pending
    } else {
        ReminderState::Cancelled
    }
}

fn check_id(id: &str, what: &str) -> Result<(), String> {
    if id.is_empty()
        || id.len() > MAX_ID_LEN
        || id.chars().any(|c| c.is_whitespace() || c.is_control())
    {
        return Err(format!("invalid {what} id {id:?}"));
    }
    Ok(())
}

fn importance(value: &str) -> Result<Importance, String> {
    match value {
        "high" => Ok(Importance::High),
        "normal" => Ok(Importance::Normal),
        other => Err(format!("unknown importance {other:?} (high or normal)")),
    }
}

fn visibility(value: &str) -> Result<Visibility, String> {
    match value {
        "public" => Ok(Visibility::Public),
        "private" => Ok(Visibility::Private),
        other => Err(format!("unknown visibility {other:?} (public or private)")),
    }
}

fn parse_line(
    ws: &WorkspaceKey,
    kind: FileKind,
    loc: &Loc,
    obj: &mut Obj<'_>,
    parsed: &mut ParsedWorkspace,
) -> Result<Line, String> {
    let line_type = obj.required_str("type")?;
    match (line_type, kind) {
        ("memory", FileKind::Memories(vis)) => parse_memory(ws, vis, loc, obj, parsed),
        ("patch", FileKind::Memories(_)) => parse_patch(obj),
        ("reminder", FileKind::Reminders) => parse_reminder(ws, loc, obj, parsed),
        ("reminder-patch", FileKind::Reminders) => parse_reminder_patch(loc, obj, parsed),
        (other, _) => Err(format!("line type {other:?} does not belong in this file")),
    }
}

fn parse_memory(
    ws: &WorkspaceKey,
    file_visibility: Visibility,
    loc: &Loc,
    obj: &mut Obj<'_>,
    parsed: &mut ParsedWorkspace,
) -> Result<Line, String> {
    let id = obj.required_str("id")?;
    check_id(id, "memory")?;
    let created = obj.time("ts")?;
    let content = obj.required_str("content")?;
    memories::validate_content(content).map_err(|e| e.to_string())?;
    let mut vis = file_visibility;
    if let Some(v) = obj.str("visibility")?.map(visibility).transpose()?
        && v != file_visibility
    {
        vis = Visibility::Private;
        parsed.warnings.push(loc.warn(format!(
            "visibility {v} disagrees with the file ({file_visibility}); imported as private"
        )));
    }
    let importance = obj
        .str("importance")?
        .map(importance)
        .transpose()?
        .unwrap_or(Importance::Normal);
    Ok(Line::Memory(MemoryInsert {
        id: id.to_owned(),
        workspace: ws.clone(),
        content: content.to_owned(),
        visibility: vis,
        importance,
        enabled: obj.bool("enabled")?.unwrap_or(true),
        related_to: obj.ids("relatedTo")?.unwrap_or_default(),
        supersedes: obj.ids("supersedes")?.unwrap_or_default(),
        created_at_ms: created,
    }))
}

fn parse_patch(obj: &mut Obj<'_>) -> Result<Line, String> {
    let id = obj.required_str("id")?;
    check_id(id, "patch")?;
    let target = obj.required_str("targetId")?;
    check_id(target, "memory")?;
    let at_ms = obj.time("ts")?;
    // A patch that only sets fields without an equivalent (`tier`, `decay`) is still recorded:
    // it moves the memory's last-modified time, as in AIr-Friends.
    let changes = MemoryPatch {
        enabled: obj.bool("enabled")?,
        visibility: obj.str("visibility")?.map(visibility).transpose()?,
        importance: obj.str("importance")?.map(importance).transpose()?,
        related_to: obj.ids("relatedTo")?,
        supersedes: obj.ids("supersedes")?,
    };
    Ok(Line::Patch(PatchLine {
        loc: Loc {
            file: PathBuf::new(),
            line: 0,
        },
        id: id.to_owned(),
        target: target.to_owned(),
        changes,
        at_ms,
    }))
}

fn parse_reminder(
    ws: &WorkspaceKey,
    loc: &Loc,
    obj: &mut Obj<'_>,
    parsed: &mut ParsedWorkspace,
) -> Result<Line, String> {
    let id = obj.required_str("id")?;
    check_id(id, "reminder")?;
    let message = obj.required_str("message")?;
    if message.trim().is_empty() || message.chars().count() > MAX_REMINDER_CHARS {
        return Err(format!(
            "reminder message must be 1..={MAX_REMINDER_CHARS} characters and not blank"
        ));
    }
    let scheduled = obj.time("scheduledAt")?;
    let created = obj.time("createdAt")?;
    // The folder names the workspace; the line's own copy is only checked.
    let (platform, user) = (obj.str("platform")?, obj.str("userId")?);
    if platform.is_some_and(|p| p != ws.platform()) || user.is_some_and(|u| u != ws.user_id()) {
        parsed.warnings.push(loc.warn(format!(
            "reminder names {}/{}, imported into the folder's workspace {ws}",
            platform.unwrap_or("?"),
            user.unwrap_or("?")
        )));
    }
    let enabled = obj.bool("enabled")?.unwrap_or(true);
    Ok(Line::Reminder(ReminderInsert {
        id: id.to_owned(),
        workspace: ws.clone(),
        message: message.to_owned(),
        scheduled_at_ms: scheduled,
        created_at_ms: created,
        state: reminder_state(enabled),
        attempts: 0,
        delivered_at_ms: None,
        late: false,
        updated_at_ms: created,
    }))
}

fn parse_reminder_patch(
    loc: &Loc,
    obj: &mut Obj<'_>,
    parsed: &mut ParsedWorkspace,
) -> Result<Line, String> {
    let target = obj.required_str("targetId")?;
    check_id(target, "reminder")?;
    let at_ms = obj.time("ts")?;
    let Some(Value::Object(changes)) = obj.get("changes") else {
        return Err("`changes` must be an object".into());
    };
    let mut changes = Obj::new(changes);
    let enabled = changes.bool("enabled")?;
    changes.note_ignored("changes.", loc, &mut parsed.ignored);
    Ok(Line::ReminderPatch(ReminderPatchLine {
        loc: loc.clone(),
        target: target.to_owned(),
        enabled,
        at_ms,
    }))
}

/// What one workspace's import produced.
struct Outcome {
    summary: WorkspaceSummary,
    warnings: Vec<ImportWarning>,
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
fn count_only(parsed: ParsedWorkspace) -> Outcome {
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
fn write_workspace(
    conn: &rusqlite::Connection,
    mut parsed: ParsedWorkspace,
) -> Result<Outcome, StoreError> {
    let ws_text = parsed.ws.to_string();
    let mut summary = empty_summary(&parsed);
    let mut warnings = std::mem::take(&mut parsed.warnings);
    // Ids a reference may point at: this workspace's memories, existing or being imported.
    let mut known: HashSet<String> = parsed.memories.iter().map(|m| m.row.id.clone()).collect();
    let mut keep_known = |conn: &rusqlite::Connection,
                          loc: &Loc,
                          owner: &str,
                          ids: &mut Vec<String>,
                          warnings: &mut Vec<ImportWarning>|
     -> Result<(), StoreError> {
        let mut kept = Vec::with_capacity(ids.len());
        for id in ids.drain(..) {
            let exists =
                known.contains(&id) || memories::seq_in_workspace(conn, &ws_text, &id)?.is_some();
            if exists {
                known.insert(id.clone());
            }
            if id != owner && exists && !kept.contains(&id) {
                kept.push(id);
            } else {
                warnings.push(loc.warn(format!(
                    "dropped reference to {id:?}: not another memory of this workspace"
                )));
            }
        }
        *ids = kept;
        Ok(())
    };

    for MemoryLine { loc, mut row } in std::mem::take(&mut parsed.memories) {
        match memories::workspace_of(conn, &row.id)? {
            Some(owner) if owner == ws_text => summary.memories.duplicate += 1,
            Some(_) => {
                summary.skipped += 1;
                warnings.push(loc.warn(format!(
                    "skipped: memory id {:?} already belongs to another workspace",
                    row.id
                )));
            }
            None => {
                let owner = row.id.clone();
                keep_known(conn, &loc, &owner, &mut row.related_to, &mut warnings)?;
                keep_known(conn, &loc, &owner, &mut row.supersedes, &mut warnings)?;
                memories::insert(conn, &row)?;
                summary.memories.imported += 1;
            }
        }
    }

    let mut touched = HashSet::new();
    for mut p in std::mem::take(&mut parsed.patches) {
        let Some(seq) = memories::seq_in_workspace(conn, &ws_text, &p.target)? else {
            // Its memory was skipped above (owned by another workspace).
            summary.skipped += 1;
            warnings.push(p.loc.warn(format!(
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
            keep_known(conn, &p.loc, &target, list, &mut warnings)?;
        }
        if memories::insert_patch(conn, seq, &p.id, &p.changes, p.at_ms, "import")? {
            summary.patches.imported += 1;
            touched.insert(seq);
        } else {
            summary.patches.duplicate += 1;
        }
    }
    // The fold orders patches by time, so file order does not matter.
    for seq in touched {
        memories::refold(conn, seq)?;
    }

    for r in std::mem::take(&mut parsed.reminders) {
        let existing = reminders::get(conn, &r.row.id)?.map(|x| x.workspace.to_string());
        match existing {
            Some(owner) if owner == ws_text => {
                summary.reminders.duplicate += 1;
                summary.reminder_patches.duplicate += r.patches;
            }
            Some(_) => {
                summary.skipped += 1;
                warnings.push(r.loc.warn(format!(
                    "skipped: reminder id {:?} already belongs to another workspace",
                    r.row.id
                )));
            }
            None => {
                reminders::insert(conn, &r.row)?;
                summary.reminders.imported += 1;
                summary.reminder_patches.imported += r.patches;
            }
        }
    }
    Ok(Outcome { summary, warnings })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(json: &str) -> Map<String, Value> {
        match serde_json::from_str(json).unwrap() {
            Value::Object(m) => m,
            _ => unreachable!("test input is an object"),
        }
    }

    fn workspace() -> ParsedWorkspace {
        ParsedWorkspace {
            ws: WorkspaceKey::new("discord", "1").unwrap(),
            memories: Vec::new(),
            patches: Vec::new(),
            reminders: Vec::new(),
            skipped: 0,
            warnings: Vec::new(),
            ignored: IgnoredFields::default(),
        }
    }

    fn loc(line: usize) -> Loc {
        Loc {
            file: PathBuf::from("memory.public.jsonl"),
            line,
        }
    }

    #[test]
    fn a_memory_line_keeps_its_ts_as_created_time_and_maps_related_ids() {
        let mut parsed = workspace();
        let ws = parsed.ws.clone();
        let map = obj(
            r#"{"id":"mem_1","ts":"2025-01-02T03:04:05.678Z","type":"memory","enabled":false,
                "visibility":"public","importance":"high","content":"x","relatedTo":["mem_2"]}"#,
        );
        let mut o = Obj::new(&map);
        let Ok(Line::Memory(m)) = parse_line(
            &ws,
            FileKind::Memories(Visibility::Public),
            &loc(1),
            &mut o,
            &mut parsed,
        ) else {
            panic!("not parsed as a memory");
        };
        assert_eq!(m.created_at_ms, 1_735_787_045_678);
        assert!(!m.enabled);
        assert_eq!(m.importance, Importance::High);
        assert_eq!(m.related_to, vec!["mem_2".to_string()]);
    }

    #[test]
    fn a_private_line_in_the_public_file_stays_private() {
        let mut parsed = workspace();
        let ws = parsed.ws.clone();
        let map = obj(
            r#"{"id":"mem_1","ts":"2025-01-02T03:04:05Z","type":"memory","visibility":"private","content":"x"}"#,
        );
        let Ok(Line::Memory(m)) = parse_line(
            &ws,
            FileKind::Memories(Visibility::Public),
            &loc(1),
            &mut Obj::new(&map),
            &mut parsed,
        ) else {
            panic!("not parsed as a memory");
        };
        assert_eq!(m.visibility, Visibility::Private);
        assert_eq!(parsed.warnings.len(), 1);
    }

    #[test]
    fn unused_fields_are_collected_once_per_name() {
        let mut ignored = IgnoredFields::default();
        for line in 1..=3 {
            let map = obj(r#"{"type":"memory","tier":"core","decay":0.5}"#);
            let mut o = Obj::new(&map);
            o.get("type");
            o.note_ignored("", &loc(line), &mut ignored);
        }
        let warnings: Vec<_> = ignored.into_warnings().collect();
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(warnings[0].message.contains("`decay`") && warnings[0].message.contains("3 lines"));
        assert_eq!(warnings[1].line, 1, "points at the first occurrence");
    }

    #[test]
    fn invented_fields_of_the_old_importer_are_rejected() {
        let mut parsed = workspace();
        let ws = parsed.ws.clone();
        // `createdAt` instead of `ts`: AIr-Friends never wrote it on memories.
        let map = obj(
            r#"{"type":"memory","id":"mem_1","content":"x","createdAt":"2025-01-01T00:00:00Z"}"#,
        );
        let err = parse_line(
            &ws,
            FileKind::Memories(Visibility::Public),
            &loc(1),
            &mut Obj::new(&map),
            &mut parsed,
        )
        .err()
        .unwrap();
        assert!(err.contains("`ts`"), "{err}");
    }
}
