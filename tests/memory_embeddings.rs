//! Meaning-based recall through the real Skill API router and a fake embedding server with
//! deterministic, meaningful vectors (`tests/common/fake_embeddings.rs`): memory-search finds
//! a memory that shares no keyword with the question and says it searched in hybrid mode;
//! with the service down or hanging it answers from the full-text index and says so; saves
//! never wait for the service; memories stored without the API (an import) are embedded by the
//! background job; private memories never come back in a public conversation, by vector or not.

mod common;
mod handlers_support;

use std::time::{Duration, Instant};

use air_friends::store::{Importance, NewMemory, Visibility, WorkspaceKey};
use common::fake_embeddings::{DIMENSIONS, FakeEmbeddings};
use common::poll::eventually_async;
use handlers_support::{App, Options, app_with};
use serde_json::{Value, json};

async fn app_against(fake: &FakeEmbeddings) -> App {
    app_with(Options {
        embeddings: Some((fake.base_url.clone(), "fake-embed".into(), DIMENSIONS)),
        ..Options::default()
    })
    .await
}

/// Runs the background job's steps until the queue is empty.
async fn embed_backlog(app: &App) {
    let semantic = app.semantic.as_ref().expect("embeddings on");
    while semantic.step().await.expect("embedding step") > 0 {}
    assert_eq!(app.store.embedding_backlog().await.unwrap(), 0);
}

fn ids(data: &Value) -> Vec<String> {
    data["memories"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_memory_sharing_no_keyword_with_the_question_is_found_by_meaning() {
    let fake = FakeEmbeddings::start().await;
    let app = app_against(&fake).await;
    let dm = app.dm_session("u1");
    let tea = app
        .save_memory(&dm, "favourite: bubble tea with less sugar", "public")
        .await;
    app.save_memory(&dm, "hiked Yangmingshan last spring", "public")
        .await;
    app.save_memory(&dm, "has a cat named Mochi", "public")
        .await;
    embed_backlog(&app).await;

    let found = app
        .call(
            &dm,
            "memory-search",
            json!({"query": "what does she drink?", "limit": 3}),
        )
        .await;
    let data = found.data();
    assert_eq!(data["mode"], "hybrid", "{data}");
    assert_eq!(ids(data).first(), Some(&tea), "{data}");
    assert!(data.get("modeReason").is_none());

    // Full-text hits keep their place: a keyword match comes first when it is also meant.
    let found = app
        .call(&dm, "memory-search", json!({"query": "cat", "limit": 3}))
        .await;
    assert_eq!(ids(found.data()).len(), 1, "{}", found.data());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_service_down_or_hanging_search_is_full_text_and_says_so() {
    let fake = FakeEmbeddings::start().await;
    let app = app_against(&fake).await;
    let dm = app.dm_session("u1");
    let tea = app
        .save_memory(&dm, "favourite: bubble tea", "public")
        .await;
    embed_backlog(&app).await;
    // (Each round asks differently: the Skill API answers a repeated call from its cache.)
    for (round, break_it) in [
        FakeEmbeddings::fail as fn(&FakeEmbeddings),
        FakeEmbeddings::hang,
    ]
    .into_iter()
    .enumerate()
    {
        break_it(&fake);
        let started = Instant::now();
        let found = app
            .call(
                &dm,
                "memory-search",
                json!({"query": format!("bubble tea {round}")}),
            )
            .await;
        let data = found.data();
        assert_eq!(data["mode"], "fulltext", "{data}");
        assert!(
            data["modeReason"]
                .as_str()
                .is_some_and(|r| r.contains("meaning-based search is unavailable")),
            "{data}"
        );
        assert_eq!(ids(data), vec![tea.clone()]);
        // Within the client's time-out (2 s in these tests), never stuck on the service.
        assert!(started.elapsed() < Duration::from_secs(10));
        // The question by meaning alone finds nothing now, and says why.
        let found = app
            .call(
                &dm,
                "memory-search",
                json!({"query": format!("what does she drink, round {round}?")}),
            )
            .await;
        assert_eq!(found.data()["count"], 0, "{}", found.data());
        fake.recover();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_save_never_waits_for_the_embedding_service() {
    let fake = FakeEmbeddings::start().await;
    fake.hang();
    let app = app_against(&fake).await;
    let dm = app.dm_session("u1");
    let started = Instant::now();
    for i in 0..5 {
        app.save_memory(&dm, &format!("note {i}: likes green tea"), "public")
            .await;
    }
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "saves waited: {:?}",
        started.elapsed()
    );
    assert_eq!(fake.requests(), 0, "no save called the service");
    assert_eq!(app.store.embedding_backlog().await.unwrap(), 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn imported_memories_are_embedded_by_the_background_job_and_private_ones_stay_private() {
    let fake = FakeEmbeddings::start().await;
    let app = app_against(&fake).await;
    // Stored without the Skill API, as `air-friends import` does.
    let ws = WorkspaceKey::new("discord", "u1").unwrap();
    let mut stored = Vec::new();
    for (content, visibility) in [
        ("loves iced coffee in summer", Visibility::Public),
        (
            "secret: drinks too much coffee when anxious",
            Visibility::Private,
        ),
    ] {
        let m = app
            .store
            .save_memory(NewMemory {
                workspace: ws.clone(),
                content: content.into(),
                visibility,
                importance: Importance::Normal,
            })
            .await
            .unwrap();
        stored.push(m.id);
    }
    assert_eq!(app.store.embedding_backlog().await.unwrap(), 2);
    // The daemon's background job finds them without being told.
    let stop = tokio_util::sync::CancellationToken::new();
    let job = tokio::spawn(app.semantic.clone().unwrap().run(stop.clone()));
    eventually_async(
        Duration::from_secs(10),
        "the backlog embedded",
        async || (app.store.embedding_backlog().await.unwrap() == 0).then_some(()),
    )
    .await;
    stop.cancel();
    job.await.unwrap();

    let guild = app.guild_session("u1");
    let found = app
        .call(
            &guild,
            "memory-search",
            json!({"query": "favourite drink?"}),
        )
        .await;
    assert_eq!(found.data()["mode"], "hybrid");
    assert_eq!(
        ids(found.data()),
        vec![stored[0].clone()],
        "{}",
        found.data()
    );
    let dm = app.dm_session("u1");
    let found = app
        .call(&dm, "memory-search", json!({"query": "favourite drink?"}))
        .await;
    let mut both = ids(found.data());
    both.sort();
    let mut expected = stored.clone();
    expected.sort();
    assert_eq!(both, expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_embeddings_search_says_it_is_full_text() {
    let app = handlers_support::app().await;
    let dm = app.dm_session("u1");
    app.save_memory(&dm, "likes tea", "public").await;
    let found = app
        .call(&dm, "memory-search", json!({"query": "tea"}))
        .await;
    assert_eq!(found.data()["mode"], "fulltext");
    assert!(found.data().get("modeReason").is_none());
}
