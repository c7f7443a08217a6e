//! `air-friends import jsonl <dir>`: imports an AIr-Friends data tree into the store.
//!
//! # Tree
//! ```text
//! <dir>/<platform>/<userId>/memory.public.jsonl    memory + patch lines (public memories)
//! <dir>/<platform>/<userId>/memory.private.jsonl   memory + patch lines (private memories)
//! <dir>/<platform>/<userId>/reminders.jsonl        reminder + reminder-patch lines
//! ```
//! The workspace key is `<platform>/<userId>` from the directory names. Hidden entries, other files
//! and missing files are ignored.
//!
//! # Line format
//! One JSON object per line; blank lines are skipped; unknown fields are ignored; field names are
//! camelCase, with the aliases listed accepted too. Times are RFC 3339 strings or numbers
//! (milliseconds since the epoch; values below 10^11 are taken as seconds).
//! ```text
//! {"type":"memory","id":"mem_…","content":"…","visibility":"public","importance":"high",
//!  "enabled":true,"createdAt":"2025-01-02T03:04:05.678Z","relatedTo":[…],"supersedes":[…]}
//!     content|text; importance high|normal (default normal; "low" = normal); enabled default
//!     true; createdAt|created_at|timestamp (required). The file decides the visibility: a
//!     `visibility` field that disagrees is reported as a warning and ignored.
//! {"type":"patch","id":"pat_…","memoryId":"mem_…","changes":{"enabled":false},
//!  "timestamp":"…"}
//!     target: memoryId|targetId|memory_id|target_id; changes: changes|patch|fields object, or
//!     the change fields (enabled, visibility, importance, relatedTo, supersedes) at top level;
//!     time: timestamp|createdAt|created_at|at (required); id optional (a stable id is derived
//!     from the content when absent, so re-imports stay idempotent).
//! {"type":"reminder","id":"rem_…","message":"…","scheduledAt":"…","createdAt":"…",
//!  "state":"pending","attempts":0,"deliveredAt":null,"late":false}
//!     message|content|text; scheduledAt|scheduled_at|dueAt|remindAt (required); createdAt
//!     defaults to scheduledAt; state|status pending|delivered|sent|cancelled|canceled|failed
//!     (default pending).
//! {"type":"reminder-patch","reminderId":"rem_…","state":"cancelled","timestamp":"…"}
//!     target: reminderId|targetId|reminder_id; changes (state, deliveredAt, attempts, late) as
//!     for patches; folded into the reminder before it is inserted.
//! ```
//! `type` (or `kind`) may be omitted when the file and fields make it obvious.
//!
//! # Semantics
//! Ids and timestamps are kept. Memories are inserted before patches; patches are applied in
//! timestamp order (file order breaks ties) and folded like API patches. References to ids that
//! do not exist in the workspace are dropped with a warning. Re-running adds nothing: existing
//! ids count as duplicates. A malformed line is skipped with a warning naming file and line; it
//! never aborts the import. Each workspace is imported in one transaction.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::io::BufRead;
use std::path::{Path, PathBuf};

use chrono::DateTime;
use serde_json::{Map, Value};

use super::memories::{self, MemoryInsert};
use super::reminders::{self, ReminderInsert};
use super::types::{Importance, MAX_ID_LEN, MemoryPatch, ReminderState, Visibility, WorkspaceKey};
use super::{Store, StoreError};

/// Imported / already-present counts for one kind of record.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Newly written.
    pub imported: usize,
    /// Already in the store (same id), skipped.
    pub duplicate: usize,
}

/// A problem found while importing: a skipped line, or a line imported with an adjustment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImportWarning {
    /// The file (or directory) concerned.
    pub file: PathBuf,
    /// 1-based line number; 0 for problems that concern the whole file or directory.
    pub line: usize,
    /// What was wrong and what was done about it.
    pub message: String,
}

impl fmt::Display for ImportWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: {}", self.file.display(), self.line, self.message)
    }
}

/// Outcome of [`import_tree`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImportReport {
    /// Workspaces (user directories) visited.
    pub workspaces: usize,
    /// Memory lines.
    pub memories: Counts,
    /// Memory patch lines.
    pub patches: Counts,
    /// Reminder lines.
    pub reminders: Counts,
    /// Reminder patch lines.
    pub reminder_patches: Counts,
    /// Lines skipped because they could not be imported.
    pub malformed: usize,
    /// Every warning, in the order found (also logged with `tracing::warn!`).
    pub warnings: Vec<ImportWarning>,
}

impl fmt::Display for ImportReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} workspaces: imported {} memories, {} patches, {} reminders, {} reminder patches; \
             skipped as duplicate {} memories, {} patches, {} reminders, {} reminder patches; \
             {} malformed lines skipped; {} warnings",
            self.workspaces,
            self.memories.imported,
            self.patches.imported,
            self.reminders.imported,
            self.reminder_patches.imported,
            self.memories.duplicate,
            self.patches.duplicate,
            self.reminders.duplicate,
            self.reminder_patches.duplicate,
            self.malformed,
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
    let dir = dir.to_owned();
    let workspaces = {
        let dir = dir.clone();
        tokio::task::spawn_blocking(move || list_workspaces(&dir))
            .await
            .map_err(|e| ImportError::Store(StoreError::Internal(format!("import task: {e}"))))??
    };
    let mut report = ImportReport::default();
    for entry in workspaces {
        let (ws, user_dir) = match entry {
            Ok(found) => found,
            Err(warning) => {
                report.warnings.push(warning);
                continue;
            }
        };
        report.workspaces += 1;
        let parsed = tokio::task::spawn_blocking(move || parse_workspace(ws, &user_dir))
            .await
            .map_err(|e| ImportError::Store(StoreError::Internal(format!("import task: {e}"))))??;
        let outcome = store
            .db()
            .write(move |c| write_workspace(c, parsed))
            .await?;
        report.memories.imported += outcome.report.memories.imported;
        report.memories.duplicate += outcome.report.memories.duplicate;
        report.patches.imported += outcome.report.patches.imported;
        report.patches.duplicate += outcome.report.patches.duplicate;
        report.reminders.imported += outcome.report.reminders.imported;
        report.reminders.duplicate += outcome.report.reminders.duplicate;
        report.reminder_patches.imported += outcome.report.reminder_patches.imported;
        report.reminder_patches.duplicate += outcome.report.reminder_patches.duplicate;
        report.malformed += outcome.report.malformed;
        report.warnings.extend(outcome.report.warnings);
    }
    for w in &report.warnings {
        tracing::warn!(file = %w.file.display(), line = w.line, "import: {}", w.message);
    }
    if report.reminders.imported > 0 {
        store.notify_reminders_changed();
    }
    tracing::info!(report = %report, "import finished");
    Ok(report)
}

type WorkspaceEntry = Result<(WorkspaceKey, PathBuf), ImportWarning>;

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> ImportError + '_ {
    move |source| ImportError::Io {
        path: path.to_owned(),
        source,
    }
}

fn sorted_dirs(dir: &Path) -> Result<Vec<(String, PathBuf)>, ImportError> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io_err(dir))? {
        let entry = entry.map_err(io_err(dir))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') || !entry.file_type().map_err(io_err(dir))?.is_dir() {
            continue;
        }
        out.push((name, entry.path()));
    }
    out.sort();
    Ok(out)
}

fn list_workspaces(dir: &Path) -> Result<Vec<WorkspaceEntry>, ImportError> {
    if !dir.is_dir() {
        return Err(ImportError::NotADirectory(dir.to_owned()));
    }
    let mut out = Vec::new();
    for (platform, platform_dir) in sorted_dirs(dir)? {
        for (user, user_dir) in sorted_dirs(&platform_dir)? {
            out.push(match WorkspaceKey::new(&platform, &user) {
                Ok(ws) => Ok((ws, user_dir)),
                Err(e) => Err(ImportWarning {
                    file: user_dir,
                    line: 0,
                    message: format!("skipped directory: {e}"),
                }),
            });
        }
    }
    Ok(out)
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

/// Everything parsed from one user directory.
struct ParsedWorkspace {
    ws: WorkspaceKey,
    memories: Vec<(Loc, MemoryInsert)>,
    patches: Vec<PatchLine>,
    reminders: Vec<ReminderLine>,
    report: ImportReport,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum FileKind {
    Memories(Visibility),
    Reminders,
}

/// Reads the lines of one file; calls `each` with (line number, parsed object) and reports
/// unreadable or non-object lines as malformed.
fn for_each_object(
    path: &Path,
    report: &mut ImportReport,
    mut each: impl FnMut(Loc, Map<String, Value>, &mut ImportReport),
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
        let text = match std::str::from_utf8(&buf) {
            Ok(t) => t.trim_start_matches('\u{feff}').trim(),
            Err(_) => {
                report.malformed += 1;
                report.warnings.push(loc.warn("skipped: not valid UTF-8"));
                continue;
            }
        };
        if text.is_empty() {
            continue;
        }
        match serde_json::from_str::<Value>(text) {
            Ok(Value::Object(obj)) => each(loc, obj, report),
            Ok(_) => {
                report.malformed += 1;
                report.warnings.push(loc.warn("skipped: not a JSON object"));
            }
            Err(e) => {
                report.malformed += 1;
                report
                    .warnings
                    .push(loc.warn(format!("skipped: invalid JSON ({e})")));
            }
        }
    }
}

fn parse_workspace(ws: WorkspaceKey, dir: &Path) -> Result<ParsedWorkspace, ImportError> {
    let mut parsed = ParsedWorkspace {
        ws,
        memories: Vec::new(),
        patches: Vec::new(),
        reminders: Vec::new(),
        report: ImportReport::default(),
    };
    let mut reminder_patches: Vec<(Loc, String, Map<String, Value>, i64)> = Vec::new();
    let files = [
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
    for (name, kind) in files {
        let path = dir.join(name);
        let mut report = std::mem::take(&mut parsed.report);
        for_each_object(&path, &mut report, |loc, obj, report| {
            let result = parse_line(&parsed.ws, kind, &loc, &obj, report);
            match result {
                Ok(Line::Memory(m)) => parsed.memories.push((loc, m)),
                Ok(Line::Patch(mut p)) => {
                    p.loc = loc;
                    parsed.patches.push(p);
                }
                Ok(Line::Reminder(r)) => parsed.reminders.push(ReminderLine {
                    loc,
                    row: r,
                    patches: 0,
                }),
                Ok(Line::ReminderPatch(target, changes, at)) => {
                    reminder_patches.push((loc, target, changes, at))
                }
                Err(message) => {
                    report.malformed += 1;
                    report
                        .warnings
                        .push(loc.warn(format!("skipped: {message}")));
                }
            }
        })?;
        parsed.report = report;
    }
    // Fold reminder patches (timestamp order, file order on ties) into their reminders.
    reminder_patches.sort_by_key(|(_, _, _, at)| *at);
    let index: HashMap<String, usize> = parsed
        .reminders
        .iter()
        .enumerate()
        .map(|(i, r)| (r.row.id.clone(), i))
        .collect();
    for (loc, target, changes, at) in reminder_patches {
        let Some(&i) = index.get(&target) else {
            parsed.report.malformed += 1;
            parsed.report.warnings.push(loc.warn(format!(
                "skipped: reminder patch for unknown reminder {target:?}"
            )));
            continue;
        };
        let line = &mut parsed.reminders[i];
        if let Err(message) = apply_reminder_changes(&mut line.row, &changes, at) {
            parsed.report.malformed += 1;
            parsed
                .report
                .warnings
                .push(loc.warn(format!("skipped: {message}")));
            continue;
        }
        line.patches += 1;
    }
    Ok(parsed)
}

enum Line {
    Memory(MemoryInsert),
    Patch(PatchLine),
    Reminder(ReminderInsert),
    ReminderPatch(String, Map<String, Value>, i64),
}

fn field<'a>(obj: &'a Map<String, Value>, names: &[&str]) -> Option<&'a Value> {
    names
        .iter()
        .find_map(|n| obj.get(*n).filter(|v| !v.is_null()))
}

fn str_field<'a>(obj: &'a Map<String, Value>, names: &[&str]) -> Result<Option<&'a str>, String> {
    match field(obj, names) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(other) => Err(format!("`{}` must be a string, got {other}", names[0])),
    }
}

fn bool_field(obj: &Map<String, Value>, names: &[&str]) -> Result<Option<bool>, String> {
    match field(obj, names) {
        None => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(other) => Err(format!("`{}` must be true or false, got {other}", names[0])),
    }
}

fn time_field(obj: &Map<String, Value>, names: &[&str]) -> Result<Option<i64>, String> {
    let ms = match field(obj, names) {
        None => return Ok(None),
        Some(Value::String(s)) => DateTime::parse_from_rfc3339(s)
            .map_err(|e| format!("`{}` is not an RFC 3339 time ({s:?}: {e})", names[0]))?
            .timestamp_millis(),
        Some(Value::Number(n)) => {
            let v = n
                .as_i64()
                .or_else(|| n.as_f64().map(|f| f as i64))
                .ok_or_else(|| format!("`{}` is not a valid time", names[0]))?;
            if v.abs() < 100_000_000_000 {
                v * 1000
            } else {
                v
            }
        }
        Some(other) => return Err(format!("`{}` is not a time: {other}", names[0])),
    };
    if super::from_ms(ms).is_err() {
        return Err(format!("`{}` is out of range", names[0]));
    }
    Ok(Some(ms))
}

fn id_list(obj: &Map<String, Value>, names: &[&str]) -> Result<Option<Vec<String>>, String> {
    match field(obj, names) {
        None => Ok(None),
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| match v {
                Value::String(s) => Ok(s.clone()),
                other => Err(format!("`{}` must list string ids, got {other}", names[0])),
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some),
        // "a,b" is accepted too (the skill's comma syntax).
        Some(Value::String(s)) => Ok(Some(
            s.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect(),
        )),
        Some(other) => Err(format!("`{}` must be a list of ids, got {other}", names[0])),
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
    match value.to_ascii_lowercase().as_str() {
        "high" => Ok(Importance::High),
        "normal" | "low" | "medium" => Ok(Importance::Normal),
        other => Err(format!("unknown importance {other:?}")),
    }
}

fn visibility(value: &str) -> Result<Visibility, String> {
    value
        .to_ascii_lowercase()
        .parse()
        .map_err(|_| format!("unknown visibility {value:?}"))
}

const TARGET_MEMORY: &[&str] = &["memoryId", "targetId", "memory_id", "target_id", "target"];
const TARGET_REMINDER: &[&str] = &[
    "reminderId",
    "targetId",
    "reminder_id",
    "target_id",
    "target",
];
const PATCH_TIME: &[&str] = &["timestamp", "createdAt", "created_at", "at", "updatedAt"];

fn parse_line(
    ws: &WorkspaceKey,
    kind: FileKind,
    loc: &Loc,
    obj: &Map<String, Value>,
    report: &mut ImportReport,
) -> Result<Line, String> {
    let declared = str_field(obj, &["type", "kind"])?.map(str::to_ascii_lowercase);
    let kind_name = match (declared.as_deref(), kind) {
        (Some(t), _) => t.replace('_', "-"),
        (None, FileKind::Reminders) if field(obj, TARGET_REMINDER).is_some() => {
            "reminder-patch".into()
        }
        (None, FileKind::Reminders) => "reminder".into(),
        (None, FileKind::Memories(_)) if field(obj, TARGET_MEMORY).is_some() => "patch".into(),
        (None, FileKind::Memories(_)) => "memory".into(),
    };
    match (kind_name.as_str(), kind) {
        ("memory", FileKind::Memories(vis)) => parse_memory(ws, vis, loc, obj, report),
        ("patch" | "memory-patch", FileKind::Memories(_)) => parse_patch(ws, obj),
        ("reminder", FileKind::Reminders) => parse_reminder(ws, obj),
        ("reminder-patch", FileKind::Reminders) => {
            let target = str_field(obj, TARGET_REMINDER)?
                .or(str_field(obj, &["id"])?)
                .ok_or("reminder patch without reminderId")?;
            let at = time_field(obj, PATCH_TIME)?.ok_or("reminder patch without timestamp")?;
            let changes = match field(obj, &["changes", "patch", "fields"]) {
                Some(Value::Object(c)) => c.clone(),
                Some(_) => return Err("`changes` must be an object".into()),
                None => obj.clone(),
            };
            Ok(Line::ReminderPatch(target.to_owned(), changes, at))
        }
        (other, _) => Err(format!("line type {other:?} does not belong in this file")),
    }
}

fn parse_memory(
    ws: &WorkspaceKey,
    file_visibility: Visibility,
    loc: &Loc,
    obj: &Map<String, Value>,
    report: &mut ImportReport,
) -> Result<Line, String> {
    let id = str_field(obj, &["id", "memoryId"])?.ok_or("memory without id")?;
    check_id(id, "memory")?;
    let content = str_field(obj, &["content", "text"])?.ok_or("memory without content")?;
    memories::validate_content(content).map_err(|e| e.to_string())?;
    if let Some(v) = str_field(obj, &["visibility"])?
        && visibility(v)? != file_visibility
    {
        report.warnings.push(loc.warn(format!(
            "visibility {v:?} disagrees with the file; imported as {file_visibility}"
        )));
    }
    let importance = match str_field(obj, &["importance"])? {
        Some(v) => importance(v)?,
        None => Importance::Normal,
    };
    let created = time_field(obj, &["createdAt", "created_at", "timestamp"])?
        .ok_or("memory without createdAt")?;
    Ok(Line::Memory(MemoryInsert {
        id: id.to_owned(),
        workspace: ws.clone(),
        content: content.to_owned(),
        visibility: file_visibility,
        importance,
        enabled: bool_field(obj, &["enabled"])?.unwrap_or(true),
        related_to: id_list(obj, &["relatedTo", "related_to", "related"])?.unwrap_or_default(),
        supersedes: id_list(obj, &["supersedes"])?.unwrap_or_default(),
        created_at_ms: created,
    }))
}

fn parse_patch(ws: &WorkspaceKey, obj: &Map<String, Value>) -> Result<Line, String> {
    let explicit_target = str_field(obj, TARGET_MEMORY)?;
    let line_id = str_field(obj, &["id", "patchId"])?;
    // `{"type":"patch","id":"mem_…",…}` without a target: the id names the memory.
    let (target, patch_id) = match explicit_target {
        Some(t) => (t, line_id),
        None => (line_id.ok_or("patch without memoryId")?, None),
    };
    check_id(target, "memory")?;
    let at = time_field(obj, PATCH_TIME)?.ok_or("patch without timestamp")?;
    let source = match field(obj, &["changes", "patch", "fields", "set"]) {
        Some(Value::Object(c)) => c,
        Some(_) => return Err("`changes` must be an object".into()),
        None => obj,
    };
    let changes = MemoryPatch {
        enabled: bool_field(source, &["enabled"])?,
        visibility: str_field(source, &["visibility"])?
            .map(visibility)
            .transpose()?,
        importance: str_field(source, &["importance"])?
            .map(importance)
            .transpose()?,
        related_to: id_list(source, &["relatedTo", "related_to", "related"])?,
        supersedes: id_list(source, &["supersedes"])?,
    };
    if changes.is_empty() {
        return Err("patch changes nothing".into());
    }
    let id = match patch_id {
        Some(id) => {
            check_id(id, "patch")?;
            id.to_owned()
        }
        None => derived_patch_id(ws, target, at, &changes),
    };
    Ok(Line::Patch(PatchLine {
        loc: Loc {
            file: PathBuf::new(),
            line: 0,
        },
        id,
        target: target.to_owned(),
        changes,
        at_ms: at,
    }))
}

/// A stable id for a patch line without one: FNV-1a over its workspace, target, time and changes.
fn derived_patch_id(ws: &WorkspaceKey, target: &str, at: i64, changes: &MemoryPatch) -> String {
    let json = serde_json::to_string(changes).unwrap_or_default();
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for part in [ws.to_string(), target.to_owned(), at.to_string(), json] {
        for byte in part.bytes().chain(std::iter::once(0)) {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    format!("pat_imp_{hash:016x}")
}

fn reminder_state(value: &str) -> Result<ReminderState, String> {
    match value.to_ascii_lowercase().as_str() {
        "pending" | "scheduled" => Ok(ReminderState::Pending),
        "delivered" | "sent" | "done" => Ok(ReminderState::Delivered),
        "cancelled" | "canceled" => Ok(ReminderState::Cancelled),
        "failed" => Ok(ReminderState::Failed),
        other => Err(format!("unknown reminder state {other:?}")),
    }
}

fn parse_reminder(ws: &WorkspaceKey, obj: &Map<String, Value>) -> Result<Line, String> {
    let id = str_field(obj, &["id", "reminderId"])?.ok_or("reminder without id")?;
    check_id(id, "reminder")?;
    let message = str_field(obj, &["message", "content", "text"])?
        .filter(|m| !m.trim().is_empty())
        .ok_or("reminder without message")?;
    if message.chars().count() > super::types::MAX_REMINDER_CHARS {
        return Err("reminder message too long".into());
    }
    let scheduled = time_field(obj, &["scheduledAt", "scheduled_at", "dueAt", "remindAt"])?
        .ok_or("reminder without scheduledAt")?;
    let created = time_field(obj, &["createdAt", "created_at"])?.unwrap_or(scheduled);
    let mut row = ReminderInsert {
        id: id.to_owned(),
        workspace: ws.clone(),
        message: message.to_owned(),
        scheduled_at_ms: scheduled,
        created_at_ms: created,
        state: ReminderState::Pending,
        attempts: 0,
        delivered_at_ms: None,
        late: false,
        updated_at_ms: created,
    };
    apply_reminder_changes(&mut row, obj, created)?;
    Ok(Line::Reminder(row))
}

fn apply_reminder_changes(
    row: &mut ReminderInsert,
    obj: &Map<String, Value>,
    at: i64,
) -> Result<(), String> {
    if let Some(s) = str_field(obj, &["state", "status"])? {
        row.state = reminder_state(s)?;
    }
    if let Some(d) = time_field(obj, &["deliveredAt", "delivered_at", "sentAt"])? {
        row.delivered_at_ms = Some(d);
    }
    if let Some(n) = field(obj, &["attempts"]) {
        row.attempts = n
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .ok_or("`attempts` must be a non-negative integer")?;
    }
    if let Some(l) = bool_field(obj, &["late"])? {
        row.late = l;
    }
    row.updated_at_ms = row.updated_at_ms.max(at);
    Ok(())
}

/// What one workspace's write job produced.
struct Outcome {
    report: ImportReport,
}

fn write_workspace(
    conn: &rusqlite::Connection,
    mut parsed: ParsedWorkspace,
) -> Result<Outcome, StoreError> {
    let ws_text = parsed.ws.to_string();
    let report = &mut parsed.report;
    // Ids a reference may point at: this workspace's memories, existing or being imported.
    let mut known: HashSet<String> = parsed.memories.iter().map(|(_, m)| m.id.clone()).collect();
    let mut exists = |conn: &rusqlite::Connection, id: &str| -> Result<bool, StoreError> {
        if known.contains(id) {
            return Ok(true);
        }
        let found = memories::seq_in_workspace(conn, &ws_text, id)?.is_some();
        if found {
            known.insert(id.to_owned());
        }
        Ok(found)
    };
    let mut keep_known = |conn: &rusqlite::Connection,
                          loc: &Loc,
                          owner: &str,
                          ids: &mut Vec<String>,
                          report: &mut ImportReport|
     -> Result<(), StoreError> {
        let mut kept = Vec::with_capacity(ids.len());
        for id in ids.drain(..) {
            if id != owner && exists(conn, &id)? && !kept.contains(&id) {
                kept.push(id);
            } else {
                report.warnings.push(loc.warn(format!(
                    "dropped reference to {id:?}: not another memory of this workspace"
                )));
            }
        }
        *ids = kept;
        Ok(())
    };

    for (loc, mut m) in std::mem::take(&mut parsed.memories) {
        match memories::workspace_of(conn, &m.id)? {
            Some(owner) if owner == ws_text => report.memories.duplicate += 1,
            Some(_) => {
                report.malformed += 1;
                report.warnings.push(loc.warn(format!(
                    "skipped: memory id {:?} already belongs to another workspace",
                    m.id
                )));
            }
            None => {
                let owner = m.id.clone();
                keep_known(conn, &loc, &owner, &mut m.related_to, report)?;
                keep_known(conn, &loc, &owner, &mut m.supersedes, report)?;
                memories::insert(conn, &m)?;
                report.memories.imported += 1;
            }
        }
    }

    let mut patches = std::mem::take(&mut parsed.patches);
    patches.sort_by_key(|p| p.at_ms); // stable: file order on equal times
    let mut touched = HashSet::new();
    for mut p in patches {
        let Some(seq) = memories::seq_in_workspace(conn, &ws_text, &p.target)? else {
            report.malformed += 1;
            report.warnings.push(
                p.loc
                    .warn(format!("skipped: patch for unknown memory {:?}", p.target)),
            );
            continue;
        };
        let target = p.target.clone();
        for list in [&mut p.changes.related_to, &mut p.changes.supersedes]
            .into_iter()
            .flatten()
        {
            keep_known(conn, &p.loc, &target, list, report)?;
        }
        if memories::insert_patch(conn, seq, &p.id, &p.changes, p.at_ms, "import")? {
            report.patches.imported += 1;
            touched.insert(seq);
        } else {
            report.patches.duplicate += 1;
        }
    }
    for seq in touched {
        memories::refold(conn, seq)?;
    }

    for r in std::mem::take(&mut parsed.reminders) {
        let existing: Option<String> =
            reminders::get(conn, &r.row.id)?.map(|x| x.workspace.to_string());
        match existing {
            Some(owner) if owner == ws_text => {
                report.reminders.duplicate += 1;
                report.reminder_patches.duplicate += r.patches;
            }
            Some(_) => {
                report.malformed += 1;
                report.warnings.push(r.loc.warn(format!(
                    "skipped: reminder id {:?} already belongs to another workspace",
                    r.row.id
                )));
            }
            None => {
                reminders::insert(conn, &r.row)?;
                report.reminders.imported += 1;
                report.reminder_patches.imported += r.patches;
            }
        }
    }
    Ok(Outcome {
        report: std::mem::take(report),
    })
}
