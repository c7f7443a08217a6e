//! Migration of AIr-Friends data (`src/store/import.rs`) on files in exactly the format
//! AIr-Friends writes: `ts`-stamped memory and patch lines (patches out of order, before their
//! memory), reminders with `enabled` and `reminder-patch` lines, fields of later versions,
//! malformed lines; run twice; the data root and its `workspaces/` folder; dry runs; a tree in
//! another format yielding nothing.

use std::path::Path;

use air_friends::store::import::{dry_run, import_tree};
use air_friends::store::{
    ExportFilter, Importance, ReminderState, Scope, Store, Visibility, WorkspaceKey,
};

fn write(root: &Path, rel: &str, lines: &[&str]) {
    let path = root.join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, lines.join("\n") + "\n").unwrap();
}

/// An AIr-Friends data root: `workspaces/` with two users on two platforms, plus the agent's own
/// workspace and a hidden folder (both ignored). Five malformed lines (public file lines 7–10,
/// reminders line 7).
fn fixture(data_root: &Path) {
    write(
        data_root,
        "workspaces/discord/111/memory.public.jsonl",
        &[
            r#"{"id":"mem_a","ts":"2025-01-01T10:00:00.000Z","type":"memory","enabled":true,"visibility":"public","importance":"high","content":"Likes green tea","tier":"core","category":"preference"}"#,
            r#"{"id":"mem_b","ts":"2025-01-02T10:00:00.000Z","type":"memory","enabled":true,"visibility":"public","importance":"normal","content":"我每天早上喝咖啡","tier":"working","decay":0.8}"#,
            // Patches out of `ts` order: the later one (enabled) must win.
            r#"{"id":"mem_p2","ts":"2025-01-04T00:00:00.000Z","type":"patch","targetId":"mem_b","enabled":true}"#,
            r#"{"id":"mem_p1","ts":"2025-01-03T00:00:00.000Z","type":"patch","targetId":"mem_b","enabled":false,"importance":"high"}"#,
            // A later version's patch: relatedTo kept (a dangling id dropped), tier ignored.
            r#"{"id":"mem_p3","ts":"2025-01-05T00:00:00.000Z","type":"patch","targetId":"mem_a","relatedTo":["mem_b","mem_ghost"],"tier":"archive"}"#,
            "",
            r#"{"id":"mem_bad","ts":"#,
            r#"["not","an","object"]"#,
            r#"{"id":"mem_nots","type":"memory","enabled":true,"visibility":"public","importance":"normal","content":"no ts"}"#,
            r#"{"id":"mem_p4","ts":"2025-01-05T00:00:00.000Z","type":"patch","targetId":"mem_unknown","enabled":false}"#,
            // A patch listed before its memory still applies.
            r#"{"id":"mem_p5","ts":"2025-01-06T00:00:00.000Z","type":"patch","targetId":"mem_c","visibility":"private"}"#,
            r#"{"id":"mem_c","ts":"2025-01-05T12:00:00.000Z","type":"memory","enabled":true,"visibility":"public","importance":"normal","content":"plays go on weekends"}"#,
        ],
    );
    write(
        data_root,
        "workspaces/discord/111/memory.private.jsonl",
        &[
            r#"{"id":"mem_s","ts":"2025-01-01T12:00:00.000Z","type":"memory","enabled":true,"visibility":"private","importance":"high","content":"秘密：猫アレルギーがある","scope":"user"}"#,
        ],
    );
    write(
        data_root,
        "workspaces/discord/111/reminders.jsonl",
        &[
            r#"{"type":"reminder","id":"rem_1","createdAt":"2025-01-01T00:00:00.000Z","scheduledAt":"2030-01-01T09:00:00.000Z","message":"水を飲む","platform":"discord","userId":"111","enabled":true}"#,
            r#"{"type":"reminder","id":"rem_2","createdAt":"2025-01-01T00:00:00.000Z","scheduledAt":"2030-02-01T09:00:00.000Z","message":"call mom","platform":"discord","userId":"111","enabled":false}"#,
            // Cancelled by a patch listed before the reminder.
            r#"{"type":"reminder-patch","targetId":"rem_3","ts":"2025-01-03T00:00:00.000Z","changes":{"enabled":false}}"#,
            r#"{"type":"reminder","id":"rem_3","createdAt":"2025-01-02T00:00:00.000Z","scheduledAt":"2030-03-01T09:00:00.000Z","message":"stretch","platform":"discord","userId":"111","enabled":true}"#,
            // Disabled then re-enabled, patches out of order: pending.
            r#"{"type":"reminder-patch","targetId":"rem_5","ts":"2025-01-05T00:00:00.000Z","changes":{"enabled":true}}"#,
            r#"{"type":"reminder-patch","targetId":"rem_5","ts":"2025-01-04T00:00:00.000Z","changes":{"enabled":false}}"#,
            r#"{"type":"reminder","id":"rem_4","createdAt":"2025-01-01T00:00:00.000Z","message":"no schedule","platform":"discord","userId":"111","enabled":true}"#,
            r#"{"type":"reminder","id":"rem_5","createdAt":"2025-01-01T00:00:00.000Z","scheduledAt":"2030-04-01T09:00:00.000Z","message":"read","platform":"discord","userId":"111","enabled":true}"#,
        ],
    );
    write(
        data_root,
        "workspaces/misskey/9x/memory.public.jsonl",
        &[
            r#"{"id":"mem_m1","ts":"2025-03-01T00:00:00+09:00","type":"memory","enabled":true,"visibility":"public","importance":"normal","content":"週末は山に登る","tier":"archive"}"#,
        ],
    );
    write(data_root, "agent-workspace/notes/_index.md", &["# Notes"]);
    std::fs::create_dir_all(data_root.join("workspaces/.hidden/ignored")).unwrap();
    std::fs::write(
        data_root.join("workspaces/discord/111/notes.txt"),
        "not a data file",
    )
    .unwrap();
}

async fn open_store(dir: &Path) -> Store {
    Store::open(&dir.join("i.db")).await.unwrap()
}

fn discord() -> WorkspaceKey {
    WorkspaceKey::new("discord", "111").unwrap()
}

#[tokio::test]
async fn real_air_friends_memories_keep_ids_and_ts_and_patches_apply_in_ts_order() {
    let data = tempfile::tempdir().unwrap();
    fixture(data.path());
    let db = tempfile::tempdir().unwrap();
    let store = open_store(db.path()).await;

    let report = import_tree(&store, data.path()).await.unwrap();
    assert_eq!(report.root, data.path().join("workspaces"));
    assert_eq!(report.memories.imported, 5, "{:#?}", report.warnings);
    assert_eq!(report.patches.imported, 4);
    assert!(!report.found_nothing());

    let w = discord();
    let a = store
        .get_memory(&w, "mem_a", Scope::PublicOnly)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(a.created_at.to_rfc3339(), "2025-01-01T10:00:00+00:00");
    assert_eq!(a.importance, Importance::High);
    assert_eq!(
        a.related_to,
        vec!["mem_b".to_string()],
        "relatedTo kept, dangling id dropped"
    );
    let b = store
        .get_memory(&w, "mem_b", Scope::PublicOnly)
        .await
        .unwrap()
        .unwrap();
    assert!(
        b.enabled,
        "the later patch (enabled) wins although it comes first in the file"
    );
    assert_eq!(
        b.importance,
        Importance::High,
        "the earlier patch still applies its other field"
    );
    assert_eq!(b.updated_at.to_rfc3339(), "2025-01-04T00:00:00+00:00");
    assert_eq!(
        store
            .get_memory(&w, "mem_c", Scope::PublicOnly)
            .await
            .unwrap(),
        None,
        "made private by a patch listed before it"
    );
    let s = store
        .get_memory(&w, "mem_s", Scope::IncludePrivate)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(s.visibility, Visibility::Private);
    assert_eq!(
        store
            .get_memory(&w, "mem_s", Scope::PublicOnly)
            .await
            .unwrap(),
        None
    );
    let hits = store
        .search_memories(&w, "アレルギー", Scope::IncludePrivate, 5)
        .await
        .unwrap();
    assert_eq!(hits[0].memory.id, "mem_s");
    let m = WorkspaceKey::new("misskey", "9x").unwrap();
    let hits = store
        .search_memories(&m, "山に", Scope::PublicOnly, 5)
        .await
        .unwrap();
    assert_eq!(hits[0].memory.id, "mem_m1");
    assert_eq!(
        hits[0].memory.created_at.to_rfc3339(),
        "2025-02-28T15:00:00+00:00"
    );
}

#[tokio::test]
async fn disabled_reminders_are_not_pending_and_reminder_patches_apply_in_ts_order() {
    let data = tempfile::tempdir().unwrap();
    fixture(data.path());
    let db = tempfile::tempdir().unwrap();
    let store = open_store(db.path()).await;
    let report = import_tree(&store, data.path()).await.unwrap();
    assert_eq!(report.reminders.imported, 4, "{:#?}", report.warnings);
    assert_eq!(report.reminder_patches.imported, 3);

    let pending = store.pending_reminders(&discord()).await.unwrap();
    let mut ids: Vec<_> = pending.iter().map(|r| r.id.as_str()).collect();
    ids.sort();
    assert_eq!(ids, vec!["rem_1", "rem_5"]);
    for id in ["rem_2", "rem_3"] {
        let r = store.get_reminder(id).await.unwrap().unwrap();
        assert_eq!(r.state, ReminderState::Cancelled, "{id}");
    }
    let r1 = store.get_reminder("rem_1").await.unwrap().unwrap();
    assert_eq!(r1.message, "水を飲む");
    assert_eq!(r1.created_at.to_rfc3339(), "2025-01-01T00:00:00+00:00");
    assert_eq!(r1.scheduled_at.to_rfc3339(), "2030-01-01T09:00:00+00:00");
}

#[tokio::test]
async fn malformed_lines_are_skipped_with_a_warning_naming_file_and_line() {
    let data = tempfile::tempdir().unwrap();
    fixture(data.path());
    let db = tempfile::tempdir().unwrap();
    let store = open_store(db.path()).await;
    let report = import_tree(&store, data.path()).await.unwrap();
    assert_eq!(report.skipped, 5, "{:#?}", report.warnings);
    let ws = data.path().join("workspaces/discord/111");
    for (file, line) in [
        ("memory.public.jsonl", 7),
        ("memory.public.jsonl", 8),
        ("memory.public.jsonl", 9),
        ("memory.public.jsonl", 10),
        ("reminders.jsonl", 7),
    ] {
        assert!(
            report.warnings.iter().any(|w| w.file == ws.join(file)
                && w.line == line
                && w.message.starts_with("skipped")),
            "no warning for {file}:{line}: {:#?}",
            report.warnings
        );
    }
    let summary = &report.workspaces[0];
    assert_eq!(summary.workspace, discord());
    assert_eq!(summary.skipped, 5);
    assert_eq!(report.workspaces[1].skipped, 0);
    assert_eq!(
        summary.to_string(),
        "discord/111: 4 memories, 4 patches applied, 4 reminders, 3 reminder patches, \
         5 lines skipped"
    );
}

#[tokio::test]
async fn fields_without_an_equivalent_are_ignored_with_one_warning_per_field_name() {
    let data = tempfile::tempdir().unwrap();
    fixture(data.path());
    let db = tempfile::tempdir().unwrap();
    let store = open_store(db.path()).await;
    let report = import_tree(&store, data.path()).await.unwrap();
    for (field, lines) in [("tier", 4), ("category", 1), ("decay", 1), ("scope", 1)] {
        let about: Vec<_> = report
            .warnings
            .iter()
            .filter(|w| w.message.contains(&format!("field `{field}`")))
            .collect();
        assert_eq!(about.len(), 1, "{field}: {about:#?}");
        assert!(
            about[0].message.contains(&format!("({lines} lines")),
            "{}",
            about[0].message
        );
    }
    let tier = report
        .warnings
        .iter()
        .find(|w| w.message.contains("field `tier`"))
        .unwrap();
    assert_eq!(
        (tier.file.file_name().unwrap(), tier.line),
        ("memory.public.jsonl".as_ref(), 1),
        "points at the first line that had it"
    );
}

#[tokio::test]
async fn a_second_run_adds_nothing_and_changes_nothing() {
    let data = tempfile::tempdir().unwrap();
    fixture(data.path());
    let db = tempfile::tempdir().unwrap();
    let store = open_store(db.path()).await;
    import_tree(&store, data.path()).await.unwrap();
    let all = ExportFilter::all(Scope::IncludePrivate);
    let before = store.export_memories(&discord(), all).await.unwrap();
    let pending_before = store.pending_reminders(&discord()).await.unwrap();

    let again = import_tree(&store, data.path()).await.unwrap();
    assert_eq!(
        again.memories.imported
            + again.patches.imported
            + again.reminders.imported
            + again.reminder_patches.imported,
        0,
        "{again}"
    );
    assert_eq!(again.memories.duplicate, 5);
    assert_eq!(again.patches.duplicate, 4);
    assert_eq!(again.reminders.duplicate, 4);
    assert!(!again.found_nothing(), "already imported is not nothing");
    assert_eq!(
        store.export_memories(&discord(), all).await.unwrap(),
        before
    );
    assert_eq!(
        store.pending_reminders(&discord()).await.unwrap(),
        pending_before
    );
    assert_eq!(
        store
            .memory_patches(&discord(), "mem_b", Scope::PublicOnly)
            .await
            .unwrap()
            .len(),
        2
    );
}

#[tokio::test]
async fn the_data_root_and_its_workspaces_folder_import_the_same() {
    let data = tempfile::tempdir().unwrap();
    fixture(data.path());
    let db_root = tempfile::tempdir().unwrap();
    let from_root = import_tree(&open_store(db_root.path()).await, data.path())
        .await
        .unwrap();
    let db_ws = tempfile::tempdir().unwrap();
    let workspaces = data.path().join("workspaces");
    let from_ws = import_tree(&open_store(db_ws.path()).await, &workspaces)
        .await
        .unwrap();
    assert_eq!(from_root.root, workspaces);
    assert_eq!(from_ws.root, workspaces);
    assert_eq!(from_root.workspaces, from_ws.workspaces);
    assert_eq!(from_ws.memories.imported, 5);
    assert_eq!(from_ws.reminders.imported, 4);
}

#[tokio::test]
async fn a_dry_run_counts_what_an_import_would_write() {
    let data = tempfile::tempdir().unwrap();
    fixture(data.path());
    let dry = dry_run(data.path()).await.unwrap();
    assert!(dry.dry_run);
    assert!(dry.to_string().starts_with("dry run, nothing written"));
    let db = tempfile::tempdir().unwrap();
    let store = open_store(db.path()).await;
    let real = import_tree(&store, data.path()).await.unwrap();
    assert_eq!(dry.workspaces, real.workspaces);
    assert_eq!(dry.skipped, real.skipped);
}

#[tokio::test]
async fn a_tree_in_another_format_yields_nothing_and_an_empty_one_is_not_an_error() {
    let data = tempfile::tempdir().unwrap();
    // The format an earlier version of this importer invented: no `ts`, `memoryId` patches.
    write(
        data.path(),
        "discord/42/memory.public.jsonl",
        &[
            r#"{"type":"memory","id":"mem_x","content":"likes tea","createdAt":"2025-01-01T00:00:00Z"}"#,
            r#"{"type":"patch","memoryId":"mem_x","changes":{"enabled":false},"timestamp":"2025-01-02T00:00:00Z"}"#,
        ],
    );
    let db = tempfile::tempdir().unwrap();
    let store = open_store(db.path()).await;
    let report = import_tree(&store, data.path()).await.unwrap();
    assert!(report.found_nothing(), "{report}");
    assert_eq!(report.skipped, 2);

    // Only the agent's own workspace: not empty, nothing to import.
    let agent_only = tempfile::tempdir().unwrap();
    write(
        agent_only.path(),
        "agent-workspace/notes/_index.md",
        &["# Notes"],
    );
    assert!(dry_run(agent_only.path()).await.unwrap().found_nothing());

    let empty = tempfile::tempdir().unwrap();
    std::fs::create_dir(empty.path().join("workspaces")).unwrap();
    let report = import_tree(&store, empty.path()).await.unwrap();
    assert!(report.tree_empty);
    assert!(!report.found_nothing());

    let err = import_tree(&store, &db.path().join("nope"))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("is not a directory"), "{err}");
}

#[tokio::test]
async fn ids_owned_by_another_workspace_are_not_stolen() {
    let data = tempfile::tempdir().unwrap();
    let line = |content: &str| {
        format!(
            r#"{{"id":"mem_same","ts":"2025-01-01T00:00:00.000Z","type":"memory","enabled":true,"visibility":"public","importance":"normal","content":"{content}"}}"#
        )
    };
    write(
        data.path(),
        "workspaces/discord/1/memory.public.jsonl",
        &[&line("one")],
    );
    write(
        data.path(),
        "workspaces/discord/2/memory.public.jsonl",
        &[&line("two"), "\u{0}\u{1}garbage"],
    );
    let db = tempfile::tempdir().unwrap();
    let store = open_store(db.path()).await;
    let report = import_tree(&store, data.path()).await.unwrap();
    assert_eq!(report.memories.imported, 1);
    assert_eq!(report.skipped, 2, "{:#?}", report.warnings);
    let w1 = WorkspaceKey::new("discord", "1").unwrap();
    assert_eq!(
        store
            .get_memory(&w1, "mem_same", Scope::PublicOnly)
            .await
            .unwrap()
            .unwrap()
            .content,
        "one"
    );
}

/// A tree with one workspace of `n` memories (and one reminder), written to `dir`.
fn generated_tree(dir: &Path, n: usize) {
    let ws = dir.join("workspaces/discord/424242");
    std::fs::create_dir_all(&ws).unwrap();
    let mut text = String::with_capacity(n * 180);
    for i in 0..n {
        text.push_str(&format!(
            r#"{{"id":"mem_{i:08}","ts":"2025-01-01T10:00:00.000Z","type":"memory","enabled":true,"visibility":"public","importance":"normal","content":"generated note {i}: likes green tea and long walks"}}"#
        ));
        text.push('\n');
    }
    std::fs::write(ws.join("memory.public.jsonl"), text).unwrap();
    std::fs::write(
        ws.join("reminders.jsonl"),
        r#"{"type":"reminder","id":"rem_1","createdAt":"2025-01-01T00:00:00.000Z","scheduledAt":"2030-01-01T09:00:00.000Z","message":"drink water","platform":"discord","userId":"424242","enabled":true}"#,
    )
    .unwrap();
}

/// The fastest of two reads of the tree (`dry_run`: every line parsed and checked).
async fn read_time(dir: &Path, n: usize) -> std::time::Duration {
    let mut best = std::time::Duration::MAX;
    for _ in 0..2 {
        let started = std::time::Instant::now();
        let report = air_friends::store::import::dry_run(dir).await.unwrap();
        best = best.min(started.elapsed());
        assert_eq!(report.workspaces[0].memories.imported, n, "{report:?}");
    }
    best
}

/// The duplicate-id check scanned every earlier line: 100 000 memories took 52 s. Ten times
/// the lines must take about ten times as long (a ratio in one run; quadratic would be 100).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reading_an_export_grows_linearly_with_its_lines() {
    let (small, large) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    generated_tree(small.path(), 10_000);
    generated_tree(large.path(), 100_000);
    let t_small = read_time(small.path(), 10_000).await;
    let t_large = read_time(large.path(), 100_000).await;
    let ratio = t_large.as_secs_f64() / t_small.as_secs_f64();
    assert!(
        ratio < 25.0,
        "10x the lines took {ratio:.1}x as long ({t_small:?} → {t_large:?})"
    );
}
