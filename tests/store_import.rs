//! Import of an AIr-Friends JSONL data tree: round trip, idempotence, patch order, malformed
//! lines reported with file and line, unknown fields and CJK content.

use std::path::Path;

use air_friends::store::import::import_tree;
use air_friends::store::{
    ExportFilter, Importance, ReminderState, Scope, Store, Visibility, WorkspaceKey,
};

fn write(root: &Path, rel: &str, lines: &[&str]) {
    let path = root.join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, lines.join("\n") + "\n").unwrap();
}

/// A tree with two users on two platforms, patches out of order, unknown fields, CJK text,
/// and five malformed lines.
fn fixture(root: &Path) {
    write(
        root,
        "discord/111/memory.public.jsonl",
        &[
            r#"{"type":"memory","id":"mem_a","content":"Likes green tea","visibility":"public","importance":"high","enabled":true,"createdAt":"2025-01-01T10:00:00.000Z","mood":"ignored unknown field"}"#,
            r#"{"type":"memory","id":"mem_b","content":"我每天早上喝咖啡","importance":"normal","createdAt":"2025-01-02T10:00:00Z"}"#,
            // Patches listed out of timestamp order: the later one must win.
            r#"{"type":"patch","id":"pat_2","memoryId":"mem_b","changes":{"enabled":true},"timestamp":"2025-01-04T00:00:00Z"}"#,
            r#"{"type":"patch","id":"pat_1","memoryId":"mem_b","changes":{"enabled":false,"importance":"high"},"timestamp":"2025-01-03T00:00:00Z"}"#,
            // Alias spellings, top-level changes, no patch id, a dangling reference.
            r#"{"type":"patch","targetId":"mem_a","relatedTo":["mem_b","mem_ghost"],"createdAt":1736000000000}"#,
            "",
            r#"{"type":"memory","id":"mem_bad""#,
            r#"["not","an","object"]"#,
            r#"{"type":"memory","id":"mem_nocontent","createdAt":"2025-01-01T00:00:00Z"}"#,
            r#"{"type":"patch","memoryId":"mem_unknown","changes":{"enabled":false},"timestamp":"2025-01-05T00:00:00Z"}"#,
        ],
    );
    write(
        root,
        "discord/111/memory.private.jsonl",
        &[
            r#"{"type":"memory","id":"mem_p","content":"秘密：猫アレルギーがある","visibility":"private","importance":"high","createdAt":"2025-01-01T12:00:00Z"}"#,
        ],
    );
    write(
        root,
        "discord/111/reminders.jsonl",
        &[
            r#"{"type":"reminder","id":"rem_1","message":"水を飲む","scheduledAt":"2030-01-01T09:00:00Z","createdAt":"2025-01-01T00:00:00Z","state":"pending","platform":"discord","userId":"111"}"#,
            r#"{"type":"reminder","id":"rem_2","message":"call mom","scheduledAt":"2025-02-01T09:00:00Z","createdAt":"2025-01-01T00:00:00Z"}"#,
            r#"{"type":"reminder-patch","reminderId":"rem_2","status":"sent","deliveredAt":"2025-02-01T09:00:01Z","attempts":1,"timestamp":"2025-02-01T09:00:01Z"}"#,
            r#"{"type":"reminder","id":"rem_3","scheduledAt":"2025-02-01T09:00:00Z"}"#,
        ],
    );
    write(
        root,
        "misskey/9x/memory.public.jsonl",
        &[r#"{"id":"mem_m1","text":"週末は山に登る","createdAt":"2025-03-01T00:00:00+09:00"}"#],
    );
    std::fs::create_dir_all(root.join(".hidden/ignored")).unwrap();
    std::fs::write(root.join("discord/111/notes.txt"), "not a data file").unwrap();
}

#[tokio::test]
async fn round_trip_idempotence_and_malformed_lines() {
    let data = tempfile::tempdir().unwrap();
    fixture(data.path());
    let db = tempfile::tempdir().unwrap();
    let store = Store::open(&db.path().join("i.db")).await.unwrap();

    let report = import_tree(&store, data.path()).await.unwrap();
    assert_eq!(report.workspaces, 2);
    assert_eq!(report.memories.imported, 4);
    assert_eq!(report.patches.imported, 3);
    assert_eq!(report.reminders.imported, 2);
    assert_eq!(report.reminder_patches.imported, 1);
    assert_eq!(report.malformed, 5, "{:#?}", report.warnings);
    let public_file = data.path().join("discord/111/memory.public.jsonl");
    for line in [7, 8, 9, 10] {
        assert!(
            report.warnings.iter().any(|w| w.file == public_file
                && w.line == line
                && w.message.starts_with("skipped")),
            "no warning for line {line}: {:#?}",
            report.warnings
        );
    }
    let reminders_file = data.path().join("discord/111/reminders.jsonl");
    assert!(
        report
            .warnings
            .iter()
            .any(|w| w.file == reminders_file && w.line == 4)
    );
    assert!(
        report
            .warnings
            .iter()
            .any(|w| w.message.contains("mem_ghost")),
        "dangling reference reported"
    );
    let text = report.to_string();
    assert!(
        text.contains("imported 4 memories, 3 patches, 2 reminders"),
        "{text}"
    );
    assert!(text.contains("5 malformed"), "{text}");

    // Ids, timestamps and folded patches kept.
    let w = WorkspaceKey::new("discord", "111").unwrap();
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
        "dangling id dropped"
    );
    let b = store
        .get_memory(&w, "mem_b", Scope::PublicOnly)
        .await
        .unwrap()
        .unwrap();
    assert!(
        b.enabled,
        "the later patch (enabled) wins although it came first in the file"
    );
    assert_eq!(
        b.importance,
        Importance::High,
        "earlier patch still applies its other fields"
    );
    assert_eq!(b.updated_at.to_rfc3339(), "2025-01-04T00:00:00+00:00");
    let p = store
        .get_memory(&w, "mem_p", Scope::IncludePrivate)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(p.visibility, Visibility::Private);
    assert_eq!(
        store
            .get_memory(&w, "mem_p", Scope::PublicOnly)
            .await
            .unwrap(),
        None
    );

    // Imported CJK content is searchable.
    let hits = store
        .search_memories(&w, "咖啡", Scope::PublicOnly, 5)
        .await
        .unwrap();
    assert_eq!(hits[0].memory.id, "mem_b");
    let hits = store
        .search_memories(&w, "アレルギー", Scope::IncludePrivate, 5)
        .await
        .unwrap();
    assert_eq!(hits[0].memory.id, "mem_p");
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

    let pending = store.pending_reminders(&w).await.unwrap();
    assert_eq!(
        pending.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(),
        vec!["rem_1"]
    );
    let r2 = store.get_reminder("rem_2").await.unwrap().unwrap();
    assert_eq!(r2.state, ReminderState::Delivered);
    assert_eq!(r2.attempts, 1);
    assert!(r2.delivered_at.is_some());

    // Second run adds nothing.
    let all = ExportFilter {
        scope: Scope::IncludePrivate,
        importance: None,
        enabled_only: false,
    };
    let before = store.export_memories(&w, all).await.unwrap();
    let again = import_tree(&store, data.path()).await.unwrap();
    assert_eq!(
        again.memories.imported + again.patches.imported + again.reminders.imported,
        0,
        "{again}"
    );
    assert_eq!(again.memories.duplicate, 4);
    assert_eq!(again.patches.duplicate, 3, "derived patch ids are stable");
    assert_eq!(again.reminders.duplicate, 2);
    assert_eq!(store.export_memories(&w, all).await.unwrap(), before);
    assert_eq!(
        store
            .memory_patches(&w, "mem_a", Scope::PublicOnly)
            .await
            .unwrap()
            .len(),
        1
    );
}

#[tokio::test]
async fn a_missing_directory_is_an_error_and_an_empty_one_imports_nothing() {
    let db = tempfile::tempdir().unwrap();
    let store = Store::open(&db.path().join("i.db")).await.unwrap();
    let err = import_tree(&store, &db.path().join("nope"))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("is not a directory"), "{err}");
    let empty = tempfile::tempdir().unwrap();
    let report = import_tree(&store, empty.path()).await.unwrap();
    assert_eq!(report, Default::default());
}

#[tokio::test]
async fn ids_owned_by_another_workspace_are_not_stolen() {
    let data = tempfile::tempdir().unwrap();
    write(
        data.path(),
        "discord/1/memory.public.jsonl",
        &[
            r#"{"type":"memory","id":"mem_same","content":"one","createdAt":"2025-01-01T00:00:00Z"}"#,
        ],
    );
    write(
        data.path(),
        "discord/2/memory.public.jsonl",
        &[
            r#"{"type":"memory","id":"mem_same","content":"two","createdAt":"2025-01-01T00:00:00Z"}"#,
            "\u{0}\u{1}garbage",
        ],
    );
    let db = tempfile::tempdir().unwrap();
    let store = Store::open(&db.path().join("i.db")).await.unwrap();
    let report = import_tree(&store, data.path()).await.unwrap();
    assert_eq!(report.memories.imported, 1);
    assert_eq!(report.malformed, 2);
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
