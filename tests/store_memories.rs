//! Store tests for memories: save/get/patch/stats/export/important, visibility, append-only,
//! patch folding, search (Latin, CJK, ranking, injection) and schema versioning.

#[path = "common/poll.rs"]
mod poll;

use std::path::PathBuf;

use poll::poll;

use air_friends::store::{
    ExportFilter, Importance, MemoryPatch, NewMemory, SCHEMA_VERSION, Scope, Store, StoreError,
    Visibility, WorkspaceKey,
};

async fn open() -> (tempfile::TempDir, PathBuf, Store) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nested/dir/air-friends.db");
    let store = Store::open(&path).await.unwrap();
    (dir, path, store)
}

fn ws(user: &str) -> WorkspaceKey {
    WorkspaceKey::new("discord", user).unwrap()
}

async fn save(
    store: &Store,
    w: &WorkspaceKey,
    content: &str,
    vis: Visibility,
    imp: Importance,
) -> String {
    store
        .save_memory(NewMemory {
            workspace: w.clone(),
            content: content.into(),
            visibility: vis,
            importance: imp,
        })
        .await
        .unwrap()
        .id
}

async fn pub_normal(store: &Store, w: &WorkspaceKey, content: &str) -> String {
    save(store, w, content, Visibility::Public, Importance::Normal).await
}

fn ids(hits: &[air_friends::store::ScoredMemory]) -> Vec<String> {
    hits.iter().map(|h| h.memory.id.clone()).collect()
}

#[test]
fn workspace_keys_are_validated_and_displayed() {
    let k = WorkspaceKey::new("misskey", "9abc").unwrap();
    assert_eq!(k.to_string(), "misskey/9abc");
    assert_eq!("misskey/9abc".parse::<WorkspaceKey>().unwrap(), k);
    for (p, u) in [
        ("", "1"),
        ("discord", ""),
        ("dis/cord", "1"),
        ("discord", "a/b"),
        ("discord", ".."),
        ("discord", "a b"),
    ] {
        assert!(
            matches!(WorkspaceKey::new(p, u), Err(StoreError::Invalid(_))),
            "{p:?}/{u:?}"
        );
    }
    assert_eq!(serde_json::to_value(&k).unwrap(), "misskey/9abc");
}

#[tokio::test]
async fn save_then_get_returns_the_memory_with_camel_case_json() {
    let (_d, path, store) = open().await;
    assert!(path.exists(), "open creates the parent directory and file");
    let w = ws("1");
    let saved = store
        .save_memory(NewMemory {
            workspace: w.clone(),
            content: "likes green tea".into(),
            visibility: Visibility::Public,
            importance: Importance::High,
        })
        .await
        .unwrap();
    assert!(saved.id.starts_with("mem_"));
    assert!(saved.enabled);
    assert_eq!(saved.created_at, saved.updated_at);
    let got = store
        .get_memory(&w, &saved.id, Scope::PublicOnly)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got, saved);
    let json = serde_json::to_value(&got).unwrap();
    assert_eq!(json["importance"], "high");
    assert_eq!(json["visibility"], "public");
    assert_eq!(json["workspace"], "discord/1");
    assert!(json["createdAt"].as_str().unwrap().ends_with('Z'));
    assert!(json["relatedTo"].as_array().unwrap().is_empty());
    // Another workspace cannot see it.
    assert_eq!(
        store
            .get_memory(&ws("2"), &saved.id, Scope::IncludePrivate)
            .await
            .unwrap(),
        None
    );
}

#[tokio::test]
async fn content_is_validated() {
    let (_d, _p, store) = open().await;
    for content in ["", "   \n", &"x".repeat(4001)] {
        let err = store
            .save_memory(NewMemory {
                workspace: ws("1"),
                content: content.to_string(),
                visibility: Visibility::Public,
                importance: Importance::Normal,
            })
            .await
            .unwrap_err();
        assert!(matches!(err, StoreError::Invalid(_)));
    }
    // 4000 CJK characters (12000 bytes) is within the limit: it counts characters.
    pub_normal(&store, &ws("1"), &"猫".repeat(4000)).await;
}

#[tokio::test]
async fn private_memories_never_appear_outside_dms() {
    let (_d, _p, store) = open().await;
    let w = ws("1");
    let public = save(
        &store,
        &w,
        "public coffee note",
        Visibility::Public,
        Importance::High,
    )
    .await;
    let private = save(
        &store,
        &w,
        "private coffee secret",
        Visibility::Private,
        Importance::High,
    )
    .await;

    assert_eq!(
        store
            .get_memory(&w, &private, Scope::PublicOnly)
            .await
            .unwrap(),
        None
    );
    assert!(
        store
            .get_memory(&w, &private, Scope::IncludePrivate)
            .await
            .unwrap()
            .is_some()
    );

    let hits = store
        .search_memories(&w, "coffee", Scope::PublicOnly, 10)
        .await
        .unwrap();
    assert_eq!(ids(&hits), vec![public.clone()]);
    let hits = store
        .search_memories(&w, "coffee", Scope::IncludePrivate, 10)
        .await
        .unwrap();
    assert_eq!(hits.len(), 2);

    let stats = store.memory_stats(&w, Scope::PublicOnly).await.unwrap();
    assert_eq!(stats.private, None);
    assert_eq!(stats.summary.total, 1);
    let stats = store.memory_stats(&w, Scope::IncludePrivate).await.unwrap();
    assert_eq!(stats.private.unwrap().total, 1);
    assert_eq!(stats.summary.total, 2);

    let filter = ExportFilter::all(Scope::PublicOnly);
    let exported = store.export_memories(&w, filter).await.unwrap();
    assert_eq!(
        exported.iter().map(|m| m.id.clone()).collect::<Vec<_>>(),
        vec![public.clone()]
    );

    let important = store
        .prompt_memories(&w, Scope::PublicOnly, 10)
        .await
        .unwrap();
    assert_eq!(
        important
            .memories
            .iter()
            .map(|m| m.id.clone())
            .collect::<Vec<_>>(),
        vec![public.clone()]
    );
    assert_eq!(important.total, 1);
    let both = store
        .prompt_memories(&w, Scope::IncludePrivate, 10)
        .await
        .unwrap();
    assert_eq!((both.memories.len(), both.total), (2, 2));

    // Patching a private memory from a public context: not found. Referencing it: invalid.
    let err = store
        .patch_memory(
            &w,
            &private,
            MemoryPatch {
                enabled: Some(false),
                ..Default::default()
            },
            Scope::PublicOnly,
        )
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::NotFound));
    let err = store
        .patch_memory(
            &w,
            &public,
            MemoryPatch {
                related_to: Some(vec![private.clone()]),
                ..Default::default()
            },
            Scope::PublicOnly,
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::InvalidReference { ref ids } if ids == &vec![private.clone()])
    );
}

#[tokio::test]
async fn patches_fold_into_the_current_view_and_keep_history() {
    let (_d, _p, store) = open().await;
    let w = ws("1");
    let a = pub_normal(&store, &w, "first").await;
    let b = pub_normal(&store, &w, "second").await;
    let c = pub_normal(&store, &w, "third").await;
    let p1 = store
        .patch_memory(
            &w,
            &a,
            MemoryPatch {
                importance: Some(Importance::High),
                related_to: Some(vec![b.clone()]),
                ..Default::default()
            },
            Scope::PublicOnly,
        )
        .await
        .unwrap();
    assert!(p1.patch_id.starts_with("pat_"));
    assert_eq!(p1.memory_id, a);
    let json = serde_json::to_value(&p1).unwrap();
    assert_eq!(
        json["changes"],
        serde_json::json!({"importance": "high", "relatedTo": [b.clone()]})
    );
    store
        .patch_memory(
            &w,
            &a,
            MemoryPatch {
                related_to: Some(vec![c.clone(), c.clone()]),
                supersedes: Some(vec![b.clone()]),
                enabled: Some(false),
                ..Default::default()
            },
            Scope::PublicOnly,
        )
        .await
        .unwrap();
    store
        .patch_memory(
            &w,
            &a,
            MemoryPatch {
                enabled: Some(true),
                ..Default::default()
            },
            Scope::PublicOnly,
        )
        .await
        .unwrap();
    let m = store
        .get_memory(&w, &a, Scope::PublicOnly)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(m.importance, Importance::High, "untouched by later patches");
    assert_eq!(
        m.related_to,
        vec![c.clone()],
        "later list replaces, duplicates removed"
    );
    assert_eq!(m.supersedes, vec![b.clone()]);
    assert!(m.enabled, "last writer wins");
    assert_eq!(m.content, "first");
    assert!(m.updated_at >= m.created_at);
    let history = store
        .memory_patches(&w, &a, Scope::PublicOnly)
        .await
        .unwrap();
    assert_eq!(history.len(), 3);
    assert_eq!(history[2].changes.enabled, Some(true));
}

#[tokio::test]
async fn patch_validation() {
    let (_d, _p, store) = open().await;
    let w = ws("1");
    let a = pub_normal(&store, &w, "mine").await;
    let other = pub_normal(&store, &ws("2"), "someone else's").await;
    let empty = store
        .patch_memory(&w, &a, MemoryPatch::default(), Scope::IncludePrivate)
        .await;
    assert!(matches!(empty, Err(StoreError::Invalid(_))));
    let selfref = store
        .patch_memory(
            &w,
            &a,
            MemoryPatch {
                supersedes: Some(vec![a.clone()]),
                ..Default::default()
            },
            Scope::IncludePrivate,
        )
        .await;
    assert!(matches!(selfref, Err(StoreError::Invalid(_))));
    let cross = store
        .patch_memory(
            &w,
            &a,
            MemoryPatch {
                related_to: Some(vec![other.clone(), "mem_nope".into()]),
                ..Default::default()
            },
            Scope::IncludePrivate,
        )
        .await
        .unwrap_err();
    match cross {
        StoreError::InvalidReference { ids } => {
            assert_eq!(ids, vec![other.clone(), "mem_nope".to_string()])
        }
        e => panic!("unexpected {e:?}"),
    }
    let foreign = store
        .patch_memory(
            &w,
            &other,
            MemoryPatch {
                enabled: Some(false),
                ..Default::default()
            },
            Scope::IncludePrivate,
        )
        .await;
    assert!(matches!(foreign, Err(StoreError::NotFound)));
    // Failed patches left nothing behind.
    assert!(
        store
            .memory_patches(&w, &a, Scope::IncludePrivate)
            .await
            .unwrap()
            .is_empty()
    );
}

#[tokio::test]
async fn memories_are_append_only_even_for_raw_sql() {
    let (_d, path, store) = open().await;
    let w = ws("1");
    let a = pub_normal(&store, &w, "immutable").await;
    store
        .patch_memory(
            &w,
            &a,
            MemoryPatch {
                enabled: Some(false),
                ..Default::default()
            },
            Scope::PublicOnly,
        )
        .await
        .unwrap();
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.busy_timeout(std::time::Duration::from_secs(5))
        .unwrap();
    for sql in [
        "UPDATE memories SET content = 'changed'",
        "UPDATE memories SET workspace = 'discord/2'",
        "DELETE FROM memories",
        "UPDATE memory_patches SET changes = '{}'",
        "DELETE FROM memory_patches",
    ] {
        let err = conn.execute(sql, []).unwrap_err();
        assert!(
            err.to_string().contains("append-only") || err.to_string().contains("never deleted"),
            "{sql}: {err}"
        );
    }
    let m = store
        .get_memory(&w, &a, Scope::PublicOnly)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(m.content, "immutable");
    assert!(!m.enabled, "disabled, not deleted");
    // Disabled memories are counted but not searched or prompted.
    assert!(
        store
            .search_memories(&w, "immutable", Scope::PublicOnly, 10)
            .await
            .unwrap()
            .is_empty()
    );
    let stats = store.memory_stats(&w, Scope::PublicOnly).await.unwrap();
    assert_eq!(
        (
            stats.public.total,
            stats.public.enabled,
            stats.public.disabled
        ),
        (1, 0, 1)
    );
}

#[tokio::test]
async fn stats_count_by_state() {
    let (_d, _p, store) = open().await;
    let w = ws("1");
    save(&store, &w, "a", Visibility::Public, Importance::High).await;
    save(&store, &w, "b", Visibility::Public, Importance::Normal).await;
    let c = save(&store, &w, "c", Visibility::Private, Importance::Normal).await;
    store
        .patch_memory(
            &w,
            &c,
            MemoryPatch {
                enabled: Some(false),
                ..Default::default()
            },
            Scope::IncludePrivate,
        )
        .await
        .unwrap();
    let s = store.memory_stats(&w, Scope::IncludePrivate).await.unwrap();
    assert_eq!(
        (
            s.public.total,
            s.public.enabled,
            s.public.high_importance,
            s.public.normal_importance
        ),
        (2, 2, 1, 1)
    );
    let p = s.private.unwrap();
    assert_eq!(
        (p.total, p.enabled, p.disabled, p.normal_importance),
        (1, 0, 1, 1)
    );
    let json = serde_json::to_value(s).unwrap();
    assert_eq!(json["summary"]["total"], 3);
    assert_eq!(json["public"]["highImportance"], 1);
    assert_eq!(
        store
            .memory_stats(&ws("empty"), Scope::IncludePrivate)
            .await
            .unwrap()
            .summary
            .total,
        0
    );
}

#[tokio::test]
async fn export_filters_and_the_prompts_important_memories() {
    let (_d, _p, store) = open().await;
    let w = ws("1");
    let a = save(&store, &w, "a", Visibility::Public, Importance::High).await;
    let b = save(&store, &w, "b", Visibility::Public, Importance::Normal).await;
    let c = save(&store, &w, "c", Visibility::Public, Importance::High).await;
    store
        .patch_memory(
            &w,
            &c,
            MemoryPatch {
                enabled: Some(false),
                ..Default::default()
            },
            Scope::PublicOnly,
        )
        .await
        .unwrap();
    let all = |importance, enabled_only| ExportFilter {
        scope: Scope::PublicOnly,
        importance,
        enabled_only,
    };
    let idl = |v: Vec<air_friends::store::Memory>| v.into_iter().map(|m| m.id).collect::<Vec<_>>();
    assert_eq!(
        idl(store.export_memories(&w, all(None, false)).await.unwrap()),
        vec![a.clone(), b.clone(), c.clone()]
    );
    assert_eq!(
        idl(store.export_memories(&w, all(None, true)).await.unwrap()),
        vec![a.clone(), b.clone()]
    );
    assert_eq!(
        idl(store
            .export_memories(&w, all(Some(Importance::High), false))
            .await
            .unwrap()),
        vec![a.clone(), c.clone()]
    );
    assert_eq!(
        idl(store
            .prompt_memories(&w, Scope::PublicOnly, 10)
            .await
            .unwrap()
            .memories),
        vec![a.clone()]
    );
}

#[tokio::test]
async fn search_finds_keywords_ored_case_insensitively() {
    let (_d, _p, store) = open().await;
    let w = ws("1");
    let tea = pub_normal(&store, &w, "My favourite drink is Green Tea").await;
    let cat = pub_normal(&store, &w, "Has a cat named Mochi").await;
    pub_normal(&store, &w, "Works as a nurse").await;
    let hits = store
        .search_memories(&w, "GREEN mochi", Scope::PublicOnly, 10)
        .await
        .unwrap();
    let mut found = ids(&hits);
    found.sort();
    let mut expected = vec![tea.clone(), cat.clone()];
    expected.sort();
    assert_eq!(found, expected);
    assert!(hits.iter().all(|h| h.score > 0.0));
    // Substrings of words match too (trigram).
    assert_eq!(
        ids(&store
            .search_memories(&w, "favour", Scope::PublicOnly, 10)
            .await
            .unwrap()),
        vec![tea.clone()]
    );
    // Short Latin words match whole words.
    let go = pub_normal(&store, &w, "I go running at 6 am").await;
    assert_eq!(
        ids(&store
            .search_memories(&w, "GO", Scope::PublicOnly, 10)
            .await
            .unwrap()),
        vec![go]
    );
    assert!(
        store
            .search_memories(&w, "zebra", Scope::PublicOnly, 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        store
            .search_memories(&w, "   ", Scope::PublicOnly, 10)
            .await
            .unwrap()
            .is_empty()
    );
}

#[tokio::test]
async fn search_finds_cjk_substrings_in_real_sentences() {
    let (_d, _p, store) = open().await;
    let w = ws("1");
    let zh = pub_normal(&store, &w, "我每天早上都喝一杯咖啡，然后去公司上班。").await;
    let ja = pub_normal(
        &store,
        &w,
        "私は猫が大好きで、週末はよく猫カフェに行きます。",
    )
    .await;
    let ko = pub_normal(&store, &w, "저는 주말마다 등산을 합니다").await;
    let en = pub_normal(&store, &w, "Visited Tokyo in spring").await;
    let q = |query: &'static str| {
        let store = store.clone();
        let w = w.clone();
        async move {
            ids(&store
                .search_memories(&w, query, Scope::PublicOnly, 10)
                .await
                .unwrap())
        }
    };
    assert_eq!(
        q("咖啡").await,
        vec![zh.clone()],
        "2-character Chinese word"
    );
    assert_eq!(
        q("一杯咖啡").await,
        vec![zh.clone()],
        "4-character substring"
    );
    assert_eq!(q("上班").await, vec![zh.clone()]);
    assert_eq!(
        q("猫カフェ").await,
        vec![ja.clone()],
        "Japanese mixed kana/kanji"
    );
    assert_eq!(q("猫").await, vec![ja.clone()], "single kanji");
    assert_eq!(q("週末").await, vec![ja.clone()]);
    assert_eq!(q("등산").await, vec![ko.clone()], "Korean");
    assert_eq!(q("咖啡 tokyo").await.len(), 2, "mixed scripts OR'd");
    assert!(q("紅茶").await.is_empty());
    assert!(
        q("喝茶").await.is_empty(),
        "characters present but not adjacent"
    );
    let _ = en;
}

#[tokio::test]
async fn search_ranks_by_relevance_then_importance_then_recency_and_respects_limit() {
    let (_d, _p, store) = open().await;
    let w = ws("1");
    // Same content -> same relevance: high importance first, then newest first.
    let old_normal = pub_normal(&store, &w, "likes ramen").await;
    let high = save(
        &store,
        &w,
        "likes ramen",
        Visibility::Public,
        Importance::High,
    )
    .await;
    let new_normal = pub_normal(&store, &w, "likes ramen").await;
    // Matching both keywords is more relevant than matching one.
    let both = pub_normal(&store, &w, "likes ramen and sushi").await;
    let hits = store
        .search_memories(&w, "ramen sushi", Scope::PublicOnly, 10)
        .await
        .unwrap();
    assert_eq!(
        ids(&hits),
        vec![
            both.clone(),
            high.clone(),
            new_normal.clone(),
            old_normal.clone()
        ]
    );
    assert!(hits.windows(2).all(|p| p[0].score >= p[1].score));
    let limited = store
        .search_memories(&w, "ramen", Scope::PublicOnly, 2)
        .await
        .unwrap();
    assert_eq!(limited.len(), 2);
}

#[tokio::test]
async fn fts_syntax_in_user_input_never_errors() {
    let (_d, _p, store) = open().await;
    let w = ws("1");
    let weird = pub_normal(
        &store,
        &w,
        r#"he said "hi" (col:x) NEAR(a b) AND OR NOT * ^ -- ; DROP TABLE memories"#,
    )
    .await;
    for q in [
        "\"",
        "\"\"",
        "AND OR NOT",
        "AND",
        "*",
        "col:x",
        "(",
        ")",
        "NEAR(",
        "NEAR(a b",
        "a*",
        "^x",
        "-x",
        "{content}: x",
        "content:hi",
        "' OR 1=1 --",
        "\\",
        "\0",
        "🙂",
        "NOT NOT",
        "\"unterminated",
        "; DROP TABLE memories",
        "+",
        "a:b:c",
        "((((",
        "\u{202e}",
    ] {
        let r = store
            .search_memories(&w, q, Scope::IncludePrivate, 10)
            .await;
        assert!(r.is_ok(), "query {q:?} failed: {r:?}");
    }
    assert_eq!(
        ids(&store
            .search_memories(&w, "NEAR(a", Scope::PublicOnly, 10)
            .await
            .unwrap()),
        vec![weird.clone()]
    );
    assert_eq!(
        ids(&store
            .search_memories(&w, "(col:x)", Scope::PublicOnly, 10)
            .await
            .unwrap()),
        vec![weird.clone()]
    );
    assert_eq!(
        ids(&store
            .search_memories(&w, "\"hi\"", Scope::PublicOnly, 10)
            .await
            .unwrap()),
        vec![weird]
    );
    assert_eq!(
        store
            .memory_stats(&w, Scope::PublicOnly)
            .await
            .unwrap()
            .public
            .total,
        1,
        "table intact"
    );
}

#[tokio::test]
async fn concurrent_saves_are_all_committed() {
    let (_d, path, store) = open().await;
    let w = ws("1");
    let mut tasks = Vec::new();
    for i in 0..200 {
        let store = store.clone();
        let w = w.clone();
        tasks.push(tokio::spawn(async move {
            pub_normal(&store, &w, &format!("note number {i}")).await
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.push(t.await.unwrap());
    }
    all.sort();
    all.dedup();
    assert_eq!(all.len(), 200);
    store.close().await.unwrap();
    let reopened = Store::open(&path).await.unwrap();
    assert_eq!(
        reopened
            .memory_stats(&w, Scope::PublicOnly)
            .await
            .unwrap()
            .public
            .total,
        200
    );
}

#[tokio::test]
async fn close_flushes_and_rejects_later_writes() {
    let (_d, path, store) = open().await;
    let w = ws("1");
    pub_normal(&store, &w, "before close").await;
    store.flush().await.unwrap();
    let clone = store.clone();
    store.close().await.unwrap();
    let err = clone
        .save_memory(NewMemory {
            workspace: w.clone(),
            content: "after".into(),
            visibility: Visibility::Public,
            importance: Importance::Normal,
        })
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Closed));
    let wal = path.with_extension("db-wal");
    assert!(
        !wal.exists() || std::fs::metadata(&wal).unwrap().len() == 0,
        "checkpointed"
    );
}

#[tokio::test]
async fn schema_version_is_recorded_and_newer_schemas_are_refused() {
    let (_d, path, store) = open().await;
    store.close().await.unwrap();
    let conn = rusqlite::Connection::open(&path).unwrap();
    let v: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(v, SCHEMA_VERSION);
    let mode: String = conn
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
    // Re-opening an up-to-date database is fine.
    Store::open(&path).await.unwrap().close().await.unwrap();
    conn.execute_batch(&format!("PRAGMA user_version = {}", SCHEMA_VERSION + 1))
        .unwrap();
    drop(conn);
    let err = Store::open(&path).await.unwrap_err();
    assert!(
        matches!(err, StoreError::NewerSchema { found, known } if found == SCHEMA_VERSION + 1 && known == SCHEMA_VERSION)
    );
    assert!(err.to_string().contains("upgrade air-friends"), "{err}");
}

#[tokio::test]
async fn search_is_exact_when_many_matches_are_hidden_or_tied() {
    let (_d, _p, store) = open().await;
    let w = ws("1");
    // An important memory saved first, then 150 equal-relevance ones, most of them private.
    let first_high = save(
        &store,
        &w,
        "likes udon",
        Visibility::Public,
        Importance::High,
    )
    .await;
    let mut public = vec![first_high.clone()];
    for i in 0..150 {
        let vis = if i % 10 == 0 {
            Visibility::Public
        } else {
            Visibility::Private
        };
        let id = save(&store, &w, "likes udon", vis, Importance::Normal).await;
        if vis == Visibility::Public {
            public.push(id);
        }
    }
    // Noise in another workspace never shows up.
    for _ in 0..50 {
        pub_normal(&store, &ws("2"), "likes udon").await;
    }
    let hits = store
        .search_memories(&w, "udon", Scope::PublicOnly, 10)
        .await
        .unwrap();
    assert_eq!(hits.len(), 10);
    assert_eq!(hits[0].memory.id, first_high, "importance breaks the tie");
    assert!(
        hits.iter()
            .all(|h| h.memory.visibility == Visibility::Public && h.memory.workspace == w)
    );
    // The rest are the newest public ones, newest first.
    let mut expected: Vec<String> = public[1..].to_vec();
    expected.reverse();
    assert_eq!(ids(&hits[1..]), expected[..9].to_vec());
    let all = store
        .search_memories(&w, "udon", Scope::PublicOnly, 50)
        .await
        .unwrap();
    assert_eq!(all.len(), public.len());
    let dm = store
        .search_memories(&w, "udon", Scope::IncludePrivate, 1000)
        .await
        .unwrap();
    assert_eq!(dm.len(), 151);
    assert!(
        store
            .search_memories(&ws("nobody"), "udon", Scope::IncludePrivate, 10)
            .await
            .unwrap()
            .is_empty()
    );
}

/// Saves `n` copies of `content` from concurrent tasks (so the writer batches them).
async fn fill(store: &Store, w: &WorkspaceKey, content: &'static str, n: usize) {
    let mut tasks = Vec::new();
    for _ in 0..n {
        let (store, w) = (store.clone(), w.clone());
        tasks.push(tokio::spawn(async move {
            pub_normal(&store, &w, content).await
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
}

#[tokio::test]
async fn search_ranks_a_bounded_window_of_newest_matches_per_keyword() {
    // The store ranks at most 1 000 matches per query (shared among the keywords); see
    // `search::RANK_WINDOW` and docs/performance/store.md ("What exactness is traded in search").
    let (_d, _p, store) = open().await;
    let w = ws("1");
    let best_udon = pub_normal(&store, &w, "udon udon udon").await;
    let chess = pub_normal(&store, &w, "plays chess on sundays").await;
    fill(&store, &w, "had udon for lunch with friends", 998).await;

    // 999 matches: within the window, so the ranking is exact and the oldest, most relevant
    // memory comes first.
    let hits = store
        .search_memories(&w, "udon", Scope::PublicOnly, 10)
        .await
        .unwrap();
    assert_eq!(hits[0].memory.id, best_udon);
    let mixed = store
        .search_memories(&w, "udon chess", Scope::PublicOnly, 50)
        .await
        .unwrap();
    assert_eq!(mixed[0].memory.id, chess, "the rare keyword weighs most");

    fill(&store, &w, "had udon for lunch with friends", 2).await;
    // 1 001 matches: the oldest one is outside the window of the newest 1 000 and no longer
    // ranked, however relevant (the documented trade-off)...
    let hits = store
        .search_memories(&w, "udon", Scope::PublicOnly, 10)
        .await
        .unwrap();
    assert_eq!(hits.len(), 10);
    assert!(!ids(&hits).contains(&best_udon));
    // ...but a rare keyword still finds its old matches next to a common one, with the score
    // the rare keyword alone gives it.
    let mixed = store
        .search_memories(&w, "udon chess", Scope::PublicOnly, 50)
        .await
        .unwrap();
    assert_eq!(mixed[0].memory.id, chess);
    let alone = store
        .search_memories(&w, "chess", Scope::PublicOnly, 1)
        .await
        .unwrap();
    assert_eq!(alone[0].memory.id, chess);
    assert!((alone[0].score - mixed[0].score).abs() < 1e-9);
}

/// The prompt's candidates: newest of saved-or-last-used first, then the most used; private
/// only in the private scope; disabled and normal-importance never; the total counts them all;
/// use by another workspace does not count.
#[tokio::test]
async fn prompt_memories_come_newest_or_most_recently_used_first() {
    let (_d, _p, store) = open().await;
    let w = ws("1");
    let oldest = save(&store, &w, "oldest", Visibility::Public, Importance::High).await;
    let middle = save(&store, &w, "middle", Visibility::Public, Importance::High).await;
    let secret = save(&store, &w, "secret", Visibility::Private, Importance::High).await;
    let _normal = save(&store, &w, "normal", Visibility::Public, Importance::Normal).await;
    let newest = save(&store, &w, "newest", Visibility::Public, Importance::High).await;
    let ids = |p: air_friends::store::PromptMemories| {
        (
            p.memories.into_iter().map(|m| m.id).collect::<Vec<_>>(),
            p.total,
        )
    };
    assert_eq!(
        ids(store
            .prompt_memories(&w, Scope::PublicOnly, 10)
            .await
            .unwrap()),
        (vec![newest.clone(), middle.clone(), oldest.clone()], 3)
    );
    // Used after every save: the oldest comes first; a use in another workspace is ignored.
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    store.note_memories_used(&w, vec![oldest.clone()]);
    store.note_memories_used(&ws("2"), vec![middle.clone()]);
    store.note_memories_used(&w, vec!["mem_unknown".into()]);
    store.flush().await.unwrap();
    assert_eq!(
        ids(store
            .prompt_memories(&w, Scope::PublicOnly, 2)
            .await
            .unwrap()),
        (vec![oldest.clone(), newest.clone()], 3)
    );
    assert_eq!(
        ids(store
            .prompt_memories(&w, Scope::IncludePrivate, 10)
            .await
            .unwrap()),
        (
            vec![
                oldest.clone(),
                newest.clone(),
                secret.clone(),
                middle.clone()
            ],
            4
        )
    );
    // Disabled memories leave both the list and the count.
    store
        .patch_memory(
            &w,
            &oldest,
            MemoryPatch {
                enabled: Some(false),
                ..Default::default()
            },
            Scope::PublicOnly,
        )
        .await
        .unwrap();
    assert_eq!(
        ids(store
            .prompt_memories(&w, Scope::PublicOnly, 10)
            .await
            .unwrap()),
        (vec![newest, middle], 2)
    );
}

/// memory-stats reads counts the store keeps in step with saves and patches (triggers in the
/// same transaction): after a random mix of both — patches that change a state, several, or
/// nothing — the counts equal a full count of the rows, per workspace and visibility.
#[tokio::test]
async fn kept_counts_match_a_full_count_after_random_saves_and_patches() {
    use air_friends::store::VisibilityStats;
    use rand::{RngExt, SeedableRng};
    let (_d, _p, store) = open().await;
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let workspaces = [ws("1"), ws("2")];
    let mut ids: Vec<(usize, String)> = Vec::new();
    let mut patched = 0;
    for step in 0..400 {
        let w = rng.random_range(0..workspaces.len());
        if ids.is_empty() || rng.random_bool(0.4) {
            let visibility = if rng.random_bool(0.3) {
                Visibility::Private
            } else {
                Visibility::Public
            };
            let importance = if rng.random_bool(0.2) {
                Importance::High
            } else {
                Importance::Normal
            };
            let id = save(
                &store,
                &workspaces[w],
                &format!("fact {step}"),
                visibility,
                importance,
            )
            .await;
            ids.push((w, id));
        } else {
            let (w, id) = ids[rng.random_range(0..ids.len())].clone();
            let patch = MemoryPatch {
                enabled: rng.random_bool(0.5).then(|| rng.random_bool(0.5)),
                visibility: rng.random_bool(0.3).then(|| {
                    if rng.random_bool(0.5) {
                        Visibility::Private
                    } else {
                        Visibility::Public
                    }
                }),
                importance: rng.random_bool(0.3).then(|| {
                    if rng.random_bool(0.5) {
                        Importance::High
                    } else {
                        Importance::Normal
                    }
                }),
                ..Default::default()
            };
            if store
                .patch_memory(&workspaces[w], &id, patch, Scope::IncludePrivate)
                .await
                .is_ok()
            {
                patched += 1;
            }
        }
    }
    assert!(patched > 100, "only {patched} patches applied");
    for w in &workspaces {
        let all = store
            .export_memories(w, ExportFilter::all(Scope::IncludePrivate))
            .await
            .unwrap();
        let count = |visibility: Visibility| {
            let mut s = VisibilityStats::default();
            for m in all.iter().filter(|m| m.visibility == visibility) {
                s.total += 1;
                if m.enabled {
                    s.enabled += 1;
                } else {
                    s.disabled += 1;
                }
                match m.importance {
                    Importance::High => s.high_importance += 1,
                    Importance::Normal => s.normal_importance += 1,
                }
            }
            s
        };
        let stats = store.memory_stats(w, Scope::IncludePrivate).await.unwrap();
        assert_eq!(stats.public, count(Visibility::Public), "{w}");
        assert_eq!(stats.private, Some(count(Visibility::Private)), "{w}");
    }
}

/// The embedding queue costs saves nothing while embeddings are off; turned on, it takes in
/// every memory without a vector (those saved or imported meanwhile) and every new one.
#[tokio::test]
async fn the_embedding_queue_fills_only_while_it_is_on_and_catches_up_when_turned_on() {
    let (_d, _p, store) = open().await;
    let w = ws("1");
    store.set_embedding_queue(false).await.unwrap();
    save(
        &store,
        &w,
        "while off",
        Visibility::Public,
        Importance::Normal,
    )
    .await;
    assert_eq!(store.embedding_backlog().await.unwrap(), 0);
    store.set_embedding_queue(true).await.unwrap();
    assert_eq!(store.embedding_backlog().await.unwrap(), 1, "caught up");
    save(
        &store,
        &w,
        "while on",
        Visibility::Private,
        Importance::High,
    )
    .await;
    let queued = store.embedding_queue(10).await.unwrap();
    assert_eq!(queued.len(), 2);
    assert_eq!(queued[1].content, "while on");
    store
        .put_vectors("m", vec![(queued[0].seq, vec![1.0, 0.0])])
        .await
        .unwrap();
    assert_eq!(store.embedding_backlog().await.unwrap(), 1);
    // Turning it on again queues nothing twice, and a vector's memory stays out.
    store.set_embedding_queue(true).await.unwrap();
    assert_eq!(store.embedding_backlog().await.unwrap(), 1);
    assert_eq!(store.workspace_vectors(&w, "m").await.unwrap().len(), 1);
    // Another model's vectors go back to the queue.
    assert_eq!(store.requeue_other_model_vectors("m2").await.unwrap(), 1);
    assert_eq!(store.embedding_backlog().await.unwrap(), 2);
}

/// The maintenance job's reads: due workspaces (more enabled memories than the threshold, no
/// run since the interval's start), a run's candidates (enabled, one visibility, older than
/// the cut-off, oldest first), and run records.
#[tokio::test]
async fn maintenance_finds_due_workspaces_and_old_memories_of_one_visibility() {
    use air_friends::store::MaintenanceRun;
    use chrono::{Duration, Utc};

    let (_dir, _path, store) = open().await;
    let (big, small) = (ws("big"), ws("small"));
    let mut public = Vec::new();
    for i in 0..4 {
        public.push(pub_normal(&store, &big, &format!("fact {i}")).await);
    }
    let private = save(
        &store,
        &big,
        "secret",
        Visibility::Private,
        Importance::High,
    )
    .await;
    pub_normal(&store, &small, "only one").await;
    store
        .patch_memory(
            &big,
            &public[3],
            MemoryPatch {
                enabled: Some(false),
                ..MemoryPatch::default()
            },
            Scope::IncludePrivate,
        )
        .await
        .unwrap();
    let week_ago = Utc::now() - Duration::hours(168);

    // 3 public + 1 private enabled: due above 3, not above 4.
    assert_eq!(
        store.maintenance_due(3, week_ago, 10).await.unwrap(),
        std::slice::from_ref(&big)
    );
    assert!(
        store
            .maintenance_due(4, week_ago, 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        store.maintenance_due(0, week_ago, 1).await.unwrap(),
        std::slice::from_ref(&big)
    );

    let later = Utc::now() + Duration::seconds(1);
    let (found, total) = store
        .maintenance_candidates(&big, Visibility::Public, later, 2)
        .await
        .unwrap();
    assert_eq!(total, 3);
    let found: Vec<&str> = found.iter().map(|m| m.id.as_str()).collect();
    assert_eq!(found, [public[0].as_str(), public[1].as_str()]);
    let (found, total) = store
        .maintenance_candidates(&big, Visibility::Private, later, 10)
        .await
        .unwrap();
    assert_eq!((found.len(), total), (1, 1));
    assert_eq!(found[0].id, private);
    let (found, total) = store
        .maintenance_candidates(&big, Visibility::Public, week_ago, 10)
        .await
        .unwrap();
    assert!(found.is_empty() && total == 0, "nothing is a week old");

    let run = MaintenanceRun {
        workspace: big.clone(),
        visibility: Visibility::Public,
        started_at: Utc::now(),
        finished_at: Utc::now(),
        outcome: "completed".into(),
        dry_run: false,
        read: 3,
        saved: 1,
        disabled: 2,
        tokens: 1234,
    };
    store.record_maintenance_run(run.clone()).await.unwrap();
    assert!(
        store
            .maintenance_due(3, week_ago, 10)
            .await
            .unwrap()
            .is_empty()
    );
    // A run older than the interval does not hold the workspace back.
    let future = Utc::now() + Duration::seconds(5);
    assert_eq!(
        store.maintenance_due(3, future, 10).await.unwrap(),
        std::slice::from_ref(&big)
    );
    let runs = store.maintenance_runs(&big).await.unwrap();
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].tokens, 1234);
    assert_eq!(runs[0].outcome, "completed");
}

/// A save superseding memories keeps both sides consistent: lineage on the new memory, the
/// old ones disabled with a patch in their history, the kept counts in step; an unknown id
/// leaves everything as it was.
#[tokio::test]
async fn saving_a_superseding_memory_is_one_transaction() {
    let (_dir, _path, store) = open().await;
    let w = ws("u");
    let a = pub_normal(&store, &w, "likes tea").await;
    let b = pub_normal(&store, &w, "drinks tea daily").await;
    let new = |content: &str| NewMemory {
        workspace: w.clone(),
        content: content.into(),
        visibility: Visibility::Public,
        importance: Importance::High,
    };
    let err = store
        .save_superseding(
            new("tea lover"),
            vec![a.clone(), "mem_missing".into()],
            Scope::PublicOnly,
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&err, StoreError::InvalidReference { ids } if ids == &["mem_missing"]),
        "{err:?}"
    );
    let stats = store.memory_stats(&w, Scope::PublicOnly).await.unwrap();
    assert_eq!((stats.public.total, stats.public.enabled), (2, 2));

    let (memory, disabled) = store
        .save_superseding(
            new("tea lover, drinks it daily"),
            vec![a.clone(), b.clone()],
            Scope::PublicOnly,
        )
        .await
        .unwrap();
    assert_eq!(memory.supersedes, [a.clone(), b.clone()]);
    assert_eq!(disabled, [a.clone(), b.clone()]);
    let old = store
        .get_memory(&w, &a, Scope::PublicOnly)
        .await
        .unwrap()
        .unwrap();
    assert!(!old.enabled);
    let history = store
        .memory_patches(&w, &a, Scope::PublicOnly)
        .await
        .unwrap();
    assert_eq!(history.len(), 1);
    assert_eq!(history[0].changes.enabled, Some(false));
    let stats = store.memory_stats(&w, Scope::PublicOnly).await.unwrap();
    assert_eq!((stats.public.total, stats.public.enabled), (3, 1));
    // Superseding an already disabled memory again disables nothing more.
    let (_, disabled) = store
        .save_superseding(new("tea, always"), vec![a.clone()], Scope::PublicOnly)
        .await
        .unwrap();
    assert!(disabled.is_empty());
}

/// The WAL is copied into the database by the store's checkpoint thread while the store keeps
/// running (the writer itself never checkpoints on its own): after a few thousand saves the
/// database file holds their pages without any explicit checkpoint or close.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_background_checkpointer_copies_the_wal_into_the_database() {
    let (_dir, path, store) = open().await;
    let w = ws("busy");
    let before = std::fs::metadata(&path).unwrap().len();
    let mut tasks = tokio::task::JoinSet::new();
    for t in 0..16 {
        let (store, w) = (store.clone(), w.clone());
        tasks.spawn(async move {
            for i in 0..200 {
                let content =
                    format!("memory {i} of writer {t}: likes kayak, jazz and a long sentence");
                pub_normal(&store, &w, &content).await;
            }
        });
    }
    tasks.join_all().await;
    let grown = poll(std::time::Duration::from_secs(10), || {
        let size = std::fs::metadata(&path).unwrap().len();
        (size > before + 1_000_000).then_some(size)
    })
    .await;
    let size = std::fs::metadata(&path).unwrap().len();
    assert!(
        grown.is_some(),
        "the database file is still {size} bytes (was {before}): nothing was checkpointed"
    );
    let stats = store.memory_stats(&w, Scope::PublicOnly).await.unwrap();
    assert_eq!(stats.public.total, 3_200);
}

/// Under saves that never pause, the WAL still starts again from its beginning now and then
/// (the checkpointer restarts it once it holds about 16 MB), so it does not grow by every frame
/// ever written: the largest WAL seen during the load stays near the restart size although the
/// load writes several times that.
#[tokio::test]
async fn the_wal_stays_bounded_under_saves_that_never_pause() {
    let (_dir, path, store) = open().await;
    let wal = path.with_file_name("air-friends.db-wal");
    let w = ws("steady");
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watcher = {
        let (wal, done) = (wal.clone(), done.clone());
        std::thread::spawn(move || {
            let mut largest = 0;
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                largest = largest.max(std::fs::metadata(&wal).map_or(0, |m| m.len()));
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
            largest
        })
    };
    let mut tasks = tokio::task::JoinSet::new();
    for t in 0..16 {
        let (store, w) = (store.clone(), w.clone());
        tasks.spawn(async move {
            for i in 0..500 {
                // Long enough that each save dirties several index pages.
                let content = format!(
                    "memory {i} of writer {t}: {}",
                    "likes kayak, jazz, long walks and a rather long sentence. ".repeat(8)
                );
                pub_normal(&store, &w, &content).await;
            }
        });
    }
    tasks.join_all().await;
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let largest = watcher.join().unwrap();
    // What the load wrote in all: the database file's growth plus what is still in the WAL is a
    // lower bound (each page is counted once however often it was written).
    let db = std::fs::metadata(&path).unwrap().len();
    eprintln!("largest WAL {largest} bytes, database {db} bytes");
    // 4 000 frames of 4 KiB pages (the restart size), and room for the frames written while a
    // restart waits.
    let bound = 6_000 * 4_120;
    assert!(
        largest <= bound,
        "the WAL reached {largest} bytes (bound {bound}): it is never restarted"
    );
    let stats = store.memory_stats(&w, Scope::PublicOnly).await.unwrap();
    assert_eq!(stats.public.total, 8_000);
}

/// Segments of a full-text index, counted from its `_idx` table (one or more rows per segment).
fn segments(path: &std::path::Path, table: &str) -> i64 {
    let db =
        rusqlite::Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .unwrap();
    db.query_row(
        &format!("SELECT count(DISTINCT segid) FROM {table}_idx"),
        [],
        |r| r.get(0),
    )
    .unwrap()
}

/// Every batch adds a segment to each full-text index, and saves leave merging to the writer's
/// idle time (both indexes' `automerge` is 0); once the writer is idle it merges them
/// (at most one segment per level is left), and searches find exactly what they found before.
#[tokio::test]
async fn an_idle_writer_merges_the_full_text_segments_and_search_is_unchanged() {
    let (_dir, path, store) = open().await;
    let w = ws("merge");
    // Ten saves, then a search, which has the queued saves indexed first: one new segment per
    // index for each ten.
    for i in 0..120 {
        let content = format!("likes topic{} and item{}, fact {i} 猫が好き", i % 7, i % 5);
        pub_normal(&store, &w, &content).await;
        if i % 10 == 9 {
            let found = store
                .search_memories(&w, &format!("fact {i}"), Scope::PublicOnly, 1)
                .await
                .unwrap();
            assert_eq!(found.len(), 1);
        }
    }
    for table in ["memories_fts", "memories_grams"] {
        let db = rusqlite::Connection::open_with_flags(
            &path,
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
        )
        .unwrap();
        let automerge: i64 = db
            .query_row(
                &format!("SELECT v FROM {table}_config WHERE k = 'automerge'"),
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(automerge, 0, "{table}: saves would merge segments");
    }
    let before_fts = segments(&path, "memories_fts");
    let before_grams = segments(&path, "memories_grams");
    let latin = ids(&store
        .search_memories(&w, "topic3 item2", Scope::PublicOnly, 50)
        .await
        .unwrap());
    let cjk = ids(&store
        .search_memories(&w, "猫", Scope::PublicOnly, 50)
        .await
        .unwrap());
    assert!(
        before_fts >= 4 && before_grams >= 4,
        "the saves left {before_fts} and {before_grams} segments: nothing to merge"
    );
    let merged = poll(std::time::Duration::from_secs(20), || {
        let now = (
            segments(&path, "memories_fts"),
            segments(&path, "memories_grams"),
        );
        (now.0 <= 3 && now.1 <= 3).then_some(now)
    })
    .await;
    assert!(
        merged.is_some(),
        "still {} and {} segments (were {before_fts} and {before_grams}): the idle writer merged nothing",
        segments(&path, "memories_fts"),
        segments(&path, "memories_grams")
    );
    assert_eq!(
        ids(&store
            .search_memories(&w, "topic3 item2", Scope::PublicOnly, 50)
            .await
            .unwrap()),
        latin
    );
    assert_eq!(
        ids(&store
            .search_memories(&w, "猫", Scope::PublicOnly, 50)
            .await
            .unwrap()),
        cjk
    );
    assert!(!latin.is_empty() && !cjk.is_empty());
    let stats = store.memory_stats(&w, Scope::PublicOnly).await.unwrap();
    assert_eq!(stats.public.total, 120);
}
