//! One JSONL line of an export: typed getters over its JSON object that remember which fields
//! were read (the rest are reported as ignored), and one parser per line type that checks the
//! fields and builds the record to import.

use std::path::PathBuf;

use chrono::DateTime;
use serde_json::{Map, Value};

use super::records::{FileKind, IgnoredFields, Loc, ParsedWorkspace, PatchLine, ReminderPatchLine};
use crate::store::memories::{self, MemoryInsert};
use crate::store::reminders::ReminderInsert;
use crate::store::types::{
    Importance, MAX_ID_LEN, MAX_REMINDER_CHARS, MemoryPatch, ReminderState, Visibility,
    WorkspaceKey,
};

/// One JSON object being read: typed getters that remember which fields were used, so the rest
/// can be reported as ignored.
pub(super) struct Obj<'a> {
    map: &'a Map<String, Value>,
    used: Vec<&'static str>,
}

impl<'a> Obj<'a> {
    pub(super) fn new(map: &'a Map<String, Value>) -> Self {
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
        crate::store::from_ms(ms).map_err(|_| format!("`{name}` is out of range"))?;
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
    pub(super) fn note_ignored(&self, prefix: &str, loc: &Loc, ignored: &mut IgnoredFields) {
        for key in self.map.keys() {
            if !self.used.contains(&key.as_str()) {
                ignored.note(format!("{prefix}{key}"), loc);
            }
        }
    }
}

pub(super) enum Line {
    Memory(MemoryInsert),
    Patch(PatchLine),
    Reminder(ReminderInsert),
    ReminderPatch(ReminderPatchLine),
}

/// AIr-Friends reminders are only enabled or not; a disabled one will never be delivered.
pub(super) fn reminder_state(enabled: bool) -> ReminderState {
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

pub(super) fn parse_line(
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
        recurrence: None,
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
