//! The Discord adapter against a fake Discord (REST + gateway on loopback): what users would
//! notice — messages reaching the router, replies threaded without pings, long texts split in
//! order, reactions, edits, files, typing, slash commands answered ephemerally, 429s honoured,
//! reconnects, malformed ids, a token that never leaks, where a message was written (category,
//! thread parent, the thread itself) for `places:` rules and the prompt, and threads: their
//! starter message, opening one from a message, the starter addressed in its parent channel,
//! archived threads unarchived to answer in them.

mod common;

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use air_friends::config::{DiscordConfig, Secret};
use air_friends::platform::discord::DiscordAdapter;
use air_friends::platform::{
    ChannelId, CommandReply, ConnectionState, IncomingMessage, Location, MessageId, OutgoingFile,
    PlatformAdapter, PlatformError, PlatformEvent, PlatformKind, ReactionEmoji, ThreadInfo,
    UserCommandSpec, send_text,
};
use common::fake_discord::*;
use common::poll::eventually;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

const TOKEN: &str = "FAKE-DISCORD-TOKEN-Zx9q";
const WAIT: Duration = Duration::from_secs(20);

struct Harness {
    fake: FakeDiscord,
    adapter: Arc<DiscordAdapter>,
    events: mpsc::Receiver<PlatformEvent>,
    state: ConnectionState,
    shutdown: CancellationToken,
    task: JoinHandle<anyhow::Result<()>>,
    /// `PlatformEvent::Connected` events seen so far (new sessions).
    sessions: usize,
}

impl Harness {
    /// The next message or command; new-session events on the way are counted in `sessions`.
    async fn next_event(&mut self) -> PlatformEvent {
        loop {
            let event = tokio::time::timeout(WAIT, self.events.recv())
                .await
                .expect("an event within the timeout")
                .expect("sink open");
            match event {
                PlatformEvent::Connected(platform) => {
                    assert_eq!(platform, PlatformKind::Discord);
                    self.sessions += 1;
                }
                other => return other,
            }
        }
    }

    async fn stop(self) {
        self.shutdown.cancel();
        let result = tokio::time::timeout(WAIT, self.task)
            .await
            .expect("the runner stops on cancellation")
            .expect("runner task");
        assert!(result.is_ok(), "{result:?}");
        assert!(!self.state.is_connected());
    }
}

fn config(fake: &FakeDiscord, guild_ids: Vec<String>) -> DiscordConfig {
    DiscordConfig {
        enabled: true,
        token: Secret::new(TOKEN),
        api_base_url: Some(fake.api_base_url()),
        gateway_url: Some(fake.gateway_url()),
        guild_ids,
        ..DiscordConfig::default()
    }
}

/// An adapter for REST-only tests (no gateway connection).
async fn rest_only() -> (FakeDiscord, Arc<DiscordAdapter>) {
    let fake = FakeDiscord::start().await;
    let (adapter, _runner) = DiscordAdapter::new(
        &config(&fake, Vec::new()),
        reqwest::Client::new(),
        Vec::new(),
    )
    .expect("adapter");
    (fake, adapter)
}

/// An adapter connected to the fake's gateway (READY seen).
async fn connected(commands: Vec<UserCommandSpec>) -> Harness {
    let fake = FakeDiscord::start().await;
    let config = config(&fake, vec![GUILD_ID.to_owned()]);
    let (adapter, runner) =
        DiscordAdapter::new(&config, reqwest::Client::new(), commands).expect("adapter");
    let (tx, events) = mpsc::channel(32);
    let state = ConnectionState::new();
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(runner.run(tx, state.clone(), shutdown.clone()));
    let (probe_state, probe_adapter) = (state.clone(), adapter.clone());
    eventually(WAIT, "connected with the bot's id", move || {
        probe_state.is_connected() && probe_adapter.bot_user_id().is_some()
    })
    .await;
    Harness {
        fake,
        adapter,
        events,
        state,
        shutdown,
        task,
        sessions: 0,
    }
}

fn stats_command() -> UserCommandSpec {
    UserCommandSpec {
        name: "memory-stats".into(),
        description: "Show how many memories I keep about you".into(),
        input_schema: json!({
            "type": "object",
            "properties": {
                "importance": {"type": "string", "enum": ["high", "normal", "all"],
                               "description": "Which memories to count"},
                "maxAgeDays": {"type": "integer", "minimum": 1, "maximum": 365,
                               "description": "Only memories newer than this"}
            },
            "required": ["maxAgeDays"]
        }),
        hidden_in_guilds: Default::default(),
    }
}

#[tokio::test]
async fn gateway_messages_reach_the_router_with_the_mention_stripped() {
    let mut h = connected(Vec::new()).await;
    assert_eq!(
        h.adapter.bot_user_id().as_ref().map(|id| id.as_str()),
        Some(BOT_ID)
    );
    let own = message_create(
        &h.fake.next_id(),
        CHANNEL_ID,
        Some(GUILD_ID),
        user(BOT_ID, "friend-bot", true),
        "mine",
    );
    let other_bot = message_create(
        &h.fake.next_id(),
        CHANNEL_ID,
        Some(GUILD_ID),
        user(OTHER_BOT_ID, "other", true),
        "beep",
    );
    let other_guild = message_create(
        &h.fake.next_id(),
        "4999",
        Some("9999"),
        user(USER_ID, "alice", false),
        "elsewhere",
    );
    h.fake.push_message(own);
    h.fake.push_message(other_bot);
    h.fake.push_message(other_guild);
    let mention_id = h.fake.next_id();
    h.fake.push_message(message_create(
        &mention_id,
        CHANNEL_ID,
        Some(GUILD_ID),
        user(USER_ID, "alice", false),
        &format!("<@{BOT_ID}> how are you?"),
    ));
    let dm_id = h.fake.next_id();
    h.fake.push_message(message_create(
        &dm_id,
        DM_CHANNEL_ID,
        None,
        user(USER_ID, "alice", false),
        "a secret",
    ));

    let mut received = Vec::new();
    while received.len() < 2 {
        match h.next_event().await {
            PlatformEvent::Message(m) => received.push(m),
            other => panic!("unexpected {other:?}"),
        }
    }
    assert!(
        received.iter().all(|m| m.user_id == USER_ID && !m.is_bot),
        "{received:?}"
    );
    let mention = received
        .iter()
        .find(|m| m.message_id == mention_id)
        .expect("mention delivered");
    assert_eq!(mention.content, "how are you?");
    assert!(mention.mentions_bot && !mention.is_dm);
    assert_eq!(mention.channel_id, CHANNEL_ID);
    assert_eq!(mention.guild_id.as_deref(), Some(GUILD_ID));
    assert_eq!(mention.display_name, "Nick");
    let dm = received
        .iter()
        .find(|m| m.message_id == dm_id)
        .expect("DM delivered");
    assert!(dm.is_dm && !dm.mentions_bot && dm.guild_id.is_none());
    assert_eq!(dm.content, "a secret");
    assert_eq!(dm.display_name, "alice (global)");
    h.stop().await;
}

#[tokio::test]
async fn a_threaded_reply_references_the_anchor_without_pinging() {
    let (fake, adapter) = rest_only().await;
    let anchor: MessageId = fake
        .seed_message(CHANNEL_ID, USER_ID, "alice", false, "hello bot")
        .into();
    let sent = adapter
        .send_message(&CHANNEL_ID.into(), "hello human", Some(&anchor))
        .await
        .expect("sent");
    let posts = fake.requests_to("POST", &format!("/channels/{CHANNEL_ID}/messages"));
    assert_eq!(posts.len(), 1);
    let body = posts[0].json.clone().expect("json body");
    assert_eq!(body["content"], "hello human");
    assert_eq!(body["message_reference"]["message_id"], anchor.as_str());
    assert_eq!(body["allowed_mentions"]["replied_user"], false);
    assert!(
        !body["allowed_mentions"]["parse"]
            .as_array()
            .expect("parse")
            .contains(&json!("everyone"))
    );
    assert_eq!(
        posts[0].authorization.as_deref(),
        Some(format!("Bot {TOKEN}").as_str())
    );
    assert_eq!(
        fake.messages(CHANNEL_ID).last().map(|m| m.id.to_string()),
        Some(sent.message_id.to_string())
    );
}

#[tokio::test]
async fn a_long_text_arrives_as_three_ordered_messages() {
    let (fake, adapter) = rest_only().await;
    let anchor: MessageId = fake
        .seed_message(CHANNEL_ID, USER_ID, "alice", false, "tell me a story")
        .into();
    let mut text = String::new();
    let mut n = 0;
    while text.chars().count() < 4500 {
        text.push_str(&format!(
            "Sentence number {n} of a long story about a fox. "
        ));
        n += 1;
    }
    let sent = send_text(adapter.as_ref(), &CHANNEL_ID.into(), &text, Some(&anchor))
        .await
        .expect("sent");
    assert_eq!(sent.len(), 3);
    let stored: Vec<_> = fake.messages(CHANNEL_ID).into_iter().skip(1).collect();
    assert_eq!(stored.len(), 3);
    assert_eq!(
        stored.iter().map(|m| m.id.to_string()).collect::<Vec<_>>(),
        sent.iter()
            .map(|s| s.message_id.to_string())
            .collect::<Vec<_>>()
    );
    assert!(stored[0].content.starts_with("Sentence number 0 "));
    let squash = |s: &str| s.split_whitespace().collect::<String>();
    let joined: String = stored.iter().map(|m| m.content.as_str()).collect();
    assert_eq!(squash(&joined), squash(&text));
    let posts = fake.requests_to("POST", &format!("/channels/{CHANNEL_ID}/messages"));
    assert!(
        posts[0]
            .json
            .as_ref()
            .is_some_and(|b| b.get("message_reference").is_some())
    );
    assert!(posts[1..].iter().all(|p| {
        p.json
            .as_ref()
            .is_some_and(|b| b.get("message_reference").is_none())
    }));
    // Adapters never truncate: a too-long text is refused with nothing sent.
    let err = adapter.send_message(&CHANNEL_ID.into(), &text, None).await;
    assert!(
        matches!(err, Err(PlatformError::InvalidInput(_))),
        "{err:?}"
    );
    assert_eq!(fake.requests_to("POST", "/channels").len(), 3);
}

#[tokio::test]
async fn reactions_and_edits_reach_discord() {
    let (fake, adapter) = rest_only().await;
    let target: MessageId = fake
        .seed_message(CHANNEL_ID, USER_ID, "alice", false, "nice")
        .into();
    let thumbs: ReactionEmoji = "👍".parse().expect("emoji");
    adapter
        .add_reaction(&CHANNEL_ID.into(), &target, &thumbs)
        .await
        .expect("unicode");
    let by_name: ReactionEmoji = ":blobcat:".parse().expect("emoji");
    adapter
        .add_reaction(&CHANNEL_ID.into(), &target, &by_name)
        .await
        .expect("custom by name");
    let by_id: ReactionEmoji = "wave:6001".parse().expect("emoji");
    adapter
        .add_reaction(&CHANNEL_ID.into(), &target, &by_id)
        .await
        .expect("custom by id");
    adapter
        .remove_reaction(&CHANNEL_ID.into(), &target, &thumbs)
        .await
        .expect("removed");
    let unknown: ReactionEmoji = ":nope:".parse().expect("emoji");
    let err = adapter
        .add_reaction(&CHANNEL_ID.into(), &target, &unknown)
        .await;
    assert!(matches!(err, Err(PlatformError::NotFound(_))), "{err:?}");
    let prefix = format!("/channels/{CHANNEL_ID}/messages/{target}/reactions/");
    let puts: Vec<String> = fake
        .requests_to("PUT", &prefix)
        .into_iter()
        .map(|r| r.path)
        .collect();
    assert_eq!(
        puts,
        vec![
            format!("{prefix}%F0%9F%91%8D/@me"),
            format!("{prefix}blobcat:{EMOJI_ID}/@me"),
            format!("{prefix}wave:6001/@me"),
        ]
    );
    assert_eq!(fake.requests_to("DELETE", &prefix).len(), 1);

    let mine = adapter
        .send_message(&CHANNEL_ID.into(), "first draft", None)
        .await
        .expect("sent");
    let edited = adapter
        .edit_message(
            &CHANNEL_ID.into(),
            &mine.message_id,
            "final text",
            Some(&target),
        )
        .await
        .expect("edited");
    assert_eq!(edited.message_id, mine.message_id, "Discord edits in place");
    let stored = fake.messages(CHANNEL_ID);
    assert_eq!(
        stored.last().map(|m| m.content.as_str()),
        Some("final text")
    );
    let err = adapter
        .edit_message(&CHANNEL_ID.into(), &target, "hijack", None)
        .await;
    assert!(matches!(err, Err(PlatformError::Forbidden(_))), "{err:?}");
    adapter
        .delete_message(&CHANNEL_ID.into(), &mine.message_id)
        .await
        .expect("deleted");
    let err = adapter
        .get_message(&CHANNEL_ID.into(), &mine.message_id)
        .await;
    assert!(matches!(err, Err(PlatformError::NotFound(_))), "{err:?}");
}

#[tokio::test]
async fn files_go_out_as_one_message_and_typing_is_posted() {
    let (fake, adapter) = rest_only().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("notes.txt");
    std::fs::write(&path, b"from disk").expect("write");
    let files = vec![
        OutgoingFile::from_bytes("export.json", b"{}".to_vec()).with_mime("application/json"),
        OutgoingFile::from_path("notes.txt", &path),
    ];
    let delivery = adapter
        .send_files(&CHANNEL_ID.into(), files, Some("here you go"), None)
        .await
        .expect("delivered");
    assert_eq!(delivery.messages.len(), 1);
    assert!(!delivery.is_partial());
    let posts = fake.requests_to("POST", &format!("/channels/{CHANNEL_ID}/messages"));
    assert_eq!(posts.len(), 1);
    assert_eq!(posts[0].parts, vec!["payload_json", "files[0]", "files[1]"]);
    assert_eq!(posts[0].filenames, vec!["export.json", "notes.txt"]);
    let payload = posts[0].json.clone().expect("payload_json");
    assert_eq!(payload["content"], "here you go");
    assert_eq!(payload["attachments"].as_array().map(Vec::len), Some(2));
    assert_eq!(fake.messages(CHANNEL_ID)[0].attachments.len(), 2);

    adapter
        .start_typing(&CHANNEL_ID.into())
        .await
        .expect("typing");
    assert_eq!(
        fake.requests_to("POST", &format!("/channels/{CHANNEL_ID}/typing"))
            .len(),
        1
    );
}

#[tokio::test]
async fn history_search_users_emojis_and_dms() {
    let (fake, adapter) = rest_only().await;
    for i in 0..130 {
        let content = if i % 40 == 0 {
            format!("Pizza night {i}")
        } else {
            format!("chat {i}")
        };
        fake.seed_message(CHANNEL_ID, USER_ID, "alice", false, &content);
    }
    let recent = adapter
        .recent_messages(&CHANNEL_ID.into(), 5)
        .await
        .expect("recent");
    let contents: Vec<&str> = recent.iter().map(|m| m.content.as_str()).collect();
    assert_eq!(
        contents,
        vec!["chat 125", "chat 126", "chat 127", "chat 128", "chat 129"]
    );
    let found = adapter
        .search_messages(&CHANNEL_ID.into(), "PIZZA tacos", 10)
        .await
        .expect("search");
    let contents: Vec<&str> = found.iter().map(|m| m.content.as_str()).collect();
    assert_eq!(
        contents,
        vec![
            "Pizza night 0",
            "Pizza night 40",
            "Pizza night 80",
            "Pizza night 120"
        ]
    );
    assert!(
        fake.requests_to(
            "GET",
            &format!("/channels/{CHANNEL_ID}/messages?limit=100&before=")
        )
        .len()
            == 1,
        "the search pages through history"
    );
    let one = adapter
        .get_message(&CHANNEL_ID.into(), &recent[0].message_id)
        .await
        .expect("get");
    assert_eq!(one.content, "chat 125");
    assert!(!one.is_bot);

    let info = adapter
        .user_info(&CHANNEL_ID.into(), &USER_ID.into())
        .await
        .expect("member");
    assert_eq!(
        (info.username.as_str(), info.display_name.as_str()),
        ("alice", "Ali")
    );
    let emojis = adapter
        .custom_emojis(&CHANNEL_ID.into())
        .await
        .expect("emojis");
    assert_eq!(emojis.len(), 1);
    assert_eq!(emojis[0].name, "blobcat");
    assert_eq!(emojis[0].id.as_deref(), Some(EMOJI_ID));
    assert!(
        adapter
            .custom_emojis(&DM_CHANNEL_ID.into())
            .await
            .expect("none in DMs")
            .is_empty()
    );

    adapter
        .send_dm(&USER_ID.into(), "your reminder")
        .await
        .expect("dm");
    adapter
        .send_dm(&USER_ID.into(), "another one")
        .await
        .expect("dm");
    assert_eq!(
        fake.requests_to("POST", "/users/@me/channels").len(),
        1,
        "the DM channel is reused"
    );
    let dm: Vec<String> = fake
        .messages(DM_CHANNEL_ID)
        .into_iter()
        .map(|m| m.content)
        .collect();
    assert_eq!(dm, vec!["your reminder", "another one"]);
    let delivery = adapter
        .send_dm_files(
            &USER_ID.into(),
            vec![OutgoingFile::from_bytes("memories.md", b"# m".to_vec())],
            None,
        )
        .await
        .expect("dm file");
    assert_eq!(delivery.messages.len(), 1);
}

#[tokio::test]
async fn malformed_ids_are_invalid_without_a_request() {
    let (fake, adapter) = rest_only().await;
    let thumbs = ReactionEmoji::Unicode("👍".into());
    let results = vec![
        adapter
            .send_message(&"general".into(), "hi", None)
            .await
            .err(),
        adapter
            .send_message(&CHANNEL_ID.into(), "hi", Some(&"msg-1".into()))
            .await
            .err(),
        adapter
            .edit_message(&CHANNEL_ID.into(), &"12x".into(), "hi", None)
            .await
            .err(),
        adapter.get_message(&"0".into(), &"1".into()).await.err(),
        adapter
            .add_reaction(&CHANNEL_ID.into(), &"".into(), &thumbs)
            .await
            .err(),
        adapter
            .user_info(&CHANNEL_ID.into(), &"@alice".into())
            .await
            .err(),
        adapter
            .send_dm(&"99999999999999999999999".into(), "hi")
            .await
            .err(),
        adapter.start_typing(&"-1".into()).await.err(),
    ];
    for result in results {
        assert!(
            matches!(result, Some(PlatformError::InvalidId(_))),
            "{result:?}"
        );
    }
    assert!(fake.requests().is_empty(), "{:?}", fake.requests());
}

#[tokio::test]
async fn rate_limits_are_waited_out_then_surfaced() {
    let (fake, adapter) = rest_only().await;
    fake.rate_limit("/typing", 2, 0.2);
    let started = Instant::now();
    adapter
        .start_typing(&CHANNEL_ID.into())
        .await
        .expect("succeeds after two 429s");
    assert!(
        started.elapsed() >= Duration::from_millis(400),
        "retry_after honoured"
    );
    assert_eq!(
        fake.requests_to("POST", &format!("/channels/{CHANNEL_ID}/typing"))
            .len(),
        3
    );

    fake.rate_limit("/messages", 10, 0.05);
    let err = adapter.send_message(&CHANNEL_ID.into(), "hi", None).await;
    assert_eq!(
        err,
        Err(PlatformError::RateLimited {
            retry_after: Duration::from_millis(50)
        })
    );
    assert_eq!(
        fake.requests_to("POST", &format!("/channels/{CHANNEL_ID}/messages"))
            .len(),
        4
    );

    fake.rate_limit("/emojis", 1, 30.0);
    let started = Instant::now();
    let err = adapter.custom_emojis(&CHANNEL_ID.into()).await;
    assert_eq!(
        err,
        Err(PlatformError::RateLimited {
            retry_after: Duration::from_secs(30)
        })
    );
    assert!(err.as_ref().err().is_some_and(PlatformError::is_retryable));
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "a long wait is not slept through"
    );
}

#[tokio::test]
async fn slash_commands_are_registered_and_answered_ephemerally() {
    let mut h = connected(vec![stats_command()]).await;
    let guild_path = format!("/applications/{APP_ID}/guilds/{GUILD_ID}/commands");
    let registered = h.fake.wait_for_requests("PUT", &guild_path, 1).await;
    let body = registered[0].json.clone().expect("body");
    let command = &body[0];
    assert_eq!(command["name"], "memory-stats");
    assert_eq!(
        command["description"],
        "Show how many memories I keep about you"
    );
    assert_eq!(
        command["options"],
        json!([
            {"type": 4, "name": "max_age_days", "description": "Only memories newer than this",
             "required": true, "min_value": 1, "max_value": 365},
            {"type": 3, "name": "importance", "description": "Which memories to count",
             "required": false, "choices": [{"name": "high", "value": "high"},
             {"name": "normal", "value": "normal"}, {"name": "all", "value": "all"}]}
        ])
    );
    let global = h
        .fake
        .wait_for_requests("PUT", &format!("/applications/{APP_ID}/commands"), 1)
        .await;
    let global = global[0].json.clone().expect("global body");
    assert_eq!(
        global[0]["contexts"],
        json!([1]),
        "globally only in DMs: no duplicates in the guild"
    );

    let options = json!([{"name": "max_age_days", "type": 4, "value": 30},
                         {"name": "importance", "type": 3, "value": "high"}]);
    h.fake.push_interaction(interaction_create(
        "9100",
        "tok-guild",
        "memory-stats",
        options,
        true,
    ));
    let invocation = match h.next_event().await {
        PlatformEvent::Command(c) => c,
        other => panic!("expected a command, got {other:?}"),
    };
    let callbacks = h
        .fake
        .requests_to("POST", "/interactions/9100/tok-guild/callback");
    assert_eq!(callbacks.len(), 1, "deferred before the command runs");
    assert_eq!(
        callbacks[0].json,
        Some(json!({"type": 5, "data": {"flags": 64}}))
    );
    assert_eq!(invocation.skill, "memory-stats");
    assert_eq!(
        Value::Object(invocation.parameters.clone()),
        json!({"maxAgeDays": 30, "importance": "high"})
    );
    assert_eq!(invocation.origin.user_id, USER_ID);
    assert_eq!(invocation.origin.username, "alice");
    assert_eq!(invocation.origin.channel_id, CHANNEL_ID);
    assert_eq!(invocation.origin.guild_id.as_deref(), Some(GUILD_ID));
    assert!(!invocation.origin.is_dm);
    let long = "Memory statistics line. ".repeat(120);
    invocation
        .reply
        .send(CommandReply::text(long.clone()))
        .expect("reply");
    let original = format!("/webhooks/{APP_ID}/tok-guild/messages/@original");
    let edits = h.fake.wait_for_requests("PATCH", &original, 1).await;
    let followups = h
        .fake
        .wait_for_requests("POST", &format!("/webhooks/{APP_ID}/tok-guild"), 1)
        .await;
    let first = edits[0]
        .json
        .as_ref()
        .and_then(|j| j["content"].as_str())
        .expect("content")
        .to_owned();
    let rest = followups[0].json.clone().expect("followup");
    assert_eq!(rest["flags"], 64, "follow-ups are ephemeral too");
    let squash = |s: &str| s.split_whitespace().collect::<String>();
    assert_eq!(
        squash(&format!(
            "{first}{}",
            rest["content"].as_str().unwrap_or_default()
        )),
        squash(&long)
    );

    h.fake.push_interaction(interaction_create(
        "9200",
        "tok-dm",
        "memory-stats",
        json!([{"name": "max_age_days", "type": 4, "value": 1}]),
        false,
    ));
    let invocation = match h.next_event().await {
        PlatformEvent::Command(c) => c,
        other => panic!("expected a command, got {other:?}"),
    };
    assert!(invocation.origin.is_dm && invocation.origin.guild_id.is_none());
    assert_eq!(invocation.origin.channel_id, DM_CHANNEL_ID);
    assert_eq!(invocation.origin.user_id, USER_ID);
    invocation
        .reply
        .send(CommandReply::error("No memories yet."))
        .expect("reply");
    let edits = h
        .fake
        .wait_for_requests(
            "PATCH",
            &format!("/webhooks/{APP_ID}/tok-dm/messages/@original"),
            1,
        )
        .await;
    assert_eq!(
        edits[0].json.as_ref().map(|j| j["content"].clone()),
        Some(json!("⚠️ No memories yet."))
    );
    h.stop().await;
}

#[tokio::test]
async fn a_dropped_gateway_connection_resumes_and_events_flow_again() {
    let mut h = connected(Vec::new()).await;
    assert_eq!(h.fake.gateway_counts(), (1, 0));
    h.fake.drop_connection();
    h.fake.wait_gateway(WAIT, |_, resumes| resumes >= 1).await;
    let state = h.state.clone();
    eventually(WAIT, "connected", move || state.is_connected()).await;
    let id = h.fake.next_id();
    h.fake.push_message(message_create(
        &id,
        CHANNEL_ID,
        Some(GUILD_ID),
        user(USER_ID, "alice", false),
        &format!("<@!{BOT_ID}> still there?"),
    ));
    match h.next_event().await {
        PlatformEvent::Message(m) => {
            assert_eq!(m.message_id, id);
            assert_eq!(m.content, "still there?");
        }
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(h.fake.gateway_counts().0, 1, "resumed, not re-identified");
    assert_eq!(h.sessions, 1, "a resume is not a new session (no catch-up)");
    h.stop().await;
}

#[tokio::test]
async fn an_outage_clears_the_connection_state_until_a_new_session_is_up() {
    let mut h = connected(Vec::new()).await;
    h.fake.set_gateway_refusing(true);
    h.fake.drop_connection();
    let state = h.state.clone();
    eventually(Duration::from_secs(30), "disconnected", move || {
        !state.is_connected()
    })
    .await;
    h.fake.set_gateway_refusing(false);
    let state = h.state.clone();
    eventually(Duration::from_secs(30), "reconnected", move || {
        state.is_connected()
    })
    .await;
    assert_eq!(h.fake.gateway_counts().0, 2, "a new session was identified");
    let id = h.fake.next_id();
    h.fake.push_message(message_create(
        &id,
        DM_CHANNEL_ID,
        None,
        user(USER_ID, "alice", false),
        "back?",
    ));
    match h.next_event().await {
        PlatformEvent::Message(m) => assert_eq!(m.message_id, id),
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(
        h.sessions, 2,
        "READY after the outage is a new session (a catch-up)"
    );
    h.stop().await;
}

/// Collects formatted log output in memory.
#[derive(Clone, Default)]
struct LogBuffer(Arc<Mutex<Vec<u8>>>);

impl Write for LogBuffer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn the_token_never_appears_in_logs_or_errors() {
    let logs = LogBuffer::default();
    let writer = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let mut h = connected(vec![stats_command()]).await;
    h.fake
        .wait_for_requests("PUT", &format!("/applications/{APP_ID}/commands"), 1)
        .await;
    let mut errors = Vec::new();
    h.fake.rate_limit("/typing", 10, 0.01);
    errors.push(
        h.adapter
            .start_typing(&CHANNEL_ID.into())
            .await
            .expect_err("rate limited"),
    );
    errors.push(
        h.adapter
            .get_message(&CHANNEL_ID.into(), &"123".into())
            .await
            .expect_err("not found"),
    );
    errors.push(
        h.adapter
            .user_info(&CHANNEL_ID.into(), &"777".into())
            .await
            .expect_err("unknown user"),
    );
    errors.push(
        h.adapter
            .send_dm(&"777".into(), "hi")
            .await
            .expect_err("cannot DM"),
    );
    let id = h.fake.next_id();
    h.fake.push_message(message_create(
        &id,
        CHANNEL_ID,
        Some(GUILD_ID),
        user(USER_ID, "alice", false),
        "hello",
    ));
    let _ = h.next_event().await;
    h.fake.drop_connection();
    h.fake.wait_gateway(WAIT, |_, resumes| resumes >= 1).await;
    let identify = h.fake.identify_payloads();
    assert!(
        identify[0]["token"]
            .as_str()
            .is_some_and(|t| t.ends_with(TOKEN)),
        "the token is used"
    );
    let adapter_debug = format!("{:?}", h.adapter);
    h.stop().await;

    let mut texts: Vec<String> = errors.iter().map(ToString::to_string).collect();
    texts.extend(errors.iter().map(|e| format!("{e:?}")));
    texts.push(adapter_debug);
    let (_, runner) = DiscordAdapter::new(
        &DiscordConfig {
            token: Secret::new(TOKEN),
            enabled: true,
            ..DiscordConfig::default()
        },
        reqwest::Client::new(),
        Vec::new(),
    )
    .expect("adapter");
    texts.push(format!("{runner:?}"));
    let logged =
        String::from_utf8_lossy(&logs.0.lock().unwrap_or_else(|e| e.into_inner())).into_owned();
    assert!(
        logged.contains("Discord gateway ready"),
        "logs were captured"
    );
    std::fs::write("/tmp/discord-token-test.log", &logged).ok();
    for text in texts.iter().chain(std::iter::once(&logged)) {
        assert!(!text.contains(TOKEN), "token leaked in: {text}");
    }
}

#[test]
fn the_fakes_payloads_match_serenitys_model() {
    use serenity::model::prelude::{CommandInteraction, Guild, Message, Ready};
    let guild: Guild = serde_json::from_value(guild_create()).expect("GUILD_CREATE");
    assert_eq!(guild.members.len(), 2);
    assert_eq!(guild.emojis.len(), 1);
    let _: Ready = serde_json::from_value(ready("ws://x")).expect("READY");
    let dm = message_create("1", DM_CHANNEL_ID, None, user(USER_ID, "a", false), "x");
    let _: Message = serde_json::from_value(dm).expect("MESSAGE_CREATE");
    let interaction = interaction_create("1", "t", "memory-stats", json!([]), true);
    let parsed: CommandInteraction =
        serde_json::from_value(interaction).expect("INTERACTION_CREATE");
    assert_eq!(
        parsed.user.id.to_string(),
        USER_ID,
        "the user is taken from the member"
    );
}

#[tokio::test]
async fn missed_messages_are_read_back_after_the_cursor_oldest_first() {
    let h = connected(Vec::new()).await;
    let cursor = h
        .fake
        .seed_message(CHANNEL_ID, USER_ID, "alice", false, "seen before the gap");
    let first = h.fake.seed_message(
        CHANNEL_ID,
        USER_ID,
        "alice",
        false,
        &format!("<@{BOT_ID}> are you there?"),
    );
    h.fake
        .seed_message(CHANNEL_ID, BOT_ID, "friend-bot", true, "my own words");
    h.fake
        .seed_message(CHANNEL_ID, OTHER_BOT_ID, "other", true, "another bot");
    let second = h
        .fake
        .seed_message(CHANNEL_ID, USER_ID, "alice", false, "hello?");
    let missed = h
        .adapter
        .missed_messages(
            &ChannelId::from(CHANNEL_ID),
            &MessageId::from(cursor.as_str()),
            100,
        )
        .await
        .expect("read back");
    let ids: Vec<&str> = missed
        .messages
        .iter()
        .map(|m| m.message_id.as_str())
        .collect();
    assert_eq!(
        ids,
        vec![first.as_str(), second.as_str()],
        "bots left out, oldest first"
    );
    assert!(!missed.more);
    let mention = &missed.messages[0];
    assert!(mention.mentions_bot && !mention.is_dm, "{mention:?}");
    assert_eq!(mention.content, "are you there?");
    assert_eq!(mention.guild_id.as_deref(), Some(GUILD_ID));

    // A DM channel's messages are DMs (REST messages carry no guild).
    let dm_cursor = h
        .fake
        .seed_message(DM_CHANNEL_ID, USER_ID, "alice", false, "old");
    h.fake
        .seed_message(DM_CHANNEL_ID, USER_ID, "alice", false, "psst");
    let dm = h
        .adapter
        .missed_messages(
            &ChannelId::from(DM_CHANNEL_ID),
            &MessageId::from(dm_cursor.as_str()),
            100,
        )
        .await
        .expect("read back");
    assert_eq!(dm.messages.len(), 1);
    assert!(dm.messages[0].is_dm && dm.messages[0].guild_id.is_none());

    // More than asked for: the newest are kept, and `more` says some were left out.
    let many: Vec<String> = (0..150)
        .map(|i| {
            h.fake
                .seed_message(CHANNEL_ID, USER_ID, "alice", false, &format!("n{i}"))
        })
        .collect();
    let missed = h
        .adapter
        .missed_messages(
            &ChannelId::from(CHANNEL_ID),
            &MessageId::from(second.as_str()),
            120,
        )
        .await
        .expect("read back");
    assert!(missed.more);
    assert_eq!(missed.messages.len(), 120);
    assert_eq!(
        missed.messages.last().map(|m| m.message_id.as_str()),
        many.last().map(String::as_str)
    );
    assert_eq!(missed.messages[0].message_id.as_str(), many[30]);
    let reads = h
        .fake
        .requests_to("GET", &format!("/channels/{CHANNEL_ID}/messages"));
    assert!(
        reads.iter().all(|r| r.path.contains("limit=100")),
        "pages of at most 100: {reads:?}"
    );
    h.stop().await;
}

/// Runs the gateway runner until it stops by itself; returns its result and connection state.
async fn run_until_refused(
    fake: &FakeDiscord,
    token: &str,
) -> (anyhow::Result<()>, ConnectionState) {
    let mut config = config(fake, vec![GUILD_ID.to_owned()]);
    config.token = Secret::new(token);
    let (_adapter, runner) =
        DiscordAdapter::new(&config, reqwest::Client::new(), Vec::new()).expect("adapter");
    let (tx, _events) = mpsc::channel(32);
    let state = ConnectionState::new();
    let result = tokio::time::timeout(
        WAIT,
        runner.run(tx, state.clone(), CancellationToken::new()),
    )
    .await
    .expect("stops by itself: retrying cannot help");
    (result, state)
}

#[tokio::test]
async fn a_rejected_token_or_a_refused_intent_stops_the_runner_with_the_fix() {
    let fake = FakeDiscord::start().await;
    fake.expect_token(TOKEN);
    let (result, state) = run_until_refused(&fake, "WRONG-TOKEN-Qx7").await;
    assert!(
        result.is_ok(),
        "said once, not again as a task error: {result:?}"
    );
    assert!(!state.is_connected());
    let problem = state.problem().expect("readiness says why");
    assert!(
        problem.starts_with("Discord rejected the bot token"),
        "{problem}"
    );
    assert!(problem.contains("Reset Token") && problem.contains("docs/PLATFORMS.md"));
    assert!(!problem.contains("WRONG-TOKEN"));

    fake.refuse_intents(true);
    let (result, state) = run_until_refused(&fake, TOKEN).await;
    assert!(result.is_ok(), "{result:?}");
    let problem = state.problem().expect("readiness says why");
    assert!(
        problem.starts_with("Discord refused the gateway intents")
            && problem.contains("Message Content intent"),
        "{problem}"
    );
    // Switched on: the next start connects, and connecting clears the problem.
    fake.refuse_intents(false);
    let h = connected(Vec::new()).await;
    assert!(h.state.problem().is_none());
    h.stop().await;
}

// ---------------------------------------------------------------------------------------------
// Where a message was written (`IncomingMessage::location`).

/// The next `count` messages, in whatever order serenity's event tasks deliver them.
async fn next_messages(h: &mut Harness, count: usize) -> Vec<IncomingMessage> {
    let mut received = Vec::with_capacity(count);
    while received.len() < count {
        match h.next_event().await {
            PlatformEvent::Message(m) => received.push(m),
            other => panic!("unexpected {other:?}"),
        }
    }
    received
}

/// A message from alice in `channel` of the guild; returns its id.
fn push_guild_message(fake: &FakeDiscord, channel: &str, content: &str) -> String {
    let id = fake.next_id();
    fake.push_message(message_create(
        &id,
        channel,
        Some(GUILD_ID),
        user(USER_ID, "alice", false),
        content,
    ));
    id
}

/// How many `GET /channels/{channel}` look-ups (not message reads) the fake has seen.
fn channel_lookups(fake: &FakeDiscord, channel: &str) -> usize {
    let path = format!("/channels/{channel}");
    fake.requests_to("GET", &path)
        .iter()
        .filter(|r| r.path == path)
        .count()
}

fn location(thread_parent: Option<&str>, category: Option<&str>) -> Location {
    Location {
        thread_parent_id: thread_parent.map(str::to_owned),
        category_id: category.map(str::to_owned),
        ..Location::default()
    }
}

/// Where a message in a thread of `parent` (in [`CATEGORY_ID`]) was written.
fn thread_location(parent: &str, thread: ThreadInfo) -> Location {
    Location {
        thread: Some(Box::new(thread)),
        ..location(Some(parent), Some(CATEGORY_ID))
    }
}

/// [`THREAD_ID`] as a message in it sees it: opened by alice in `#general`.
fn the_thread() -> ThreadInfo {
    ThreadInfo {
        name: "a thread".into(),
        parent_name: Some("general".into()),
        in_forum: false,
        started_by_bot: false,
    }
}

/// [`FORUM_POST_ID`] as a message in it sees it: alice's post in the forum.
fn the_forum_post() -> ThreadInfo {
    ThreadInfo {
        name: "a forum post".into(),
        parent_name: Some("forum".into()),
        in_forum: true,
        started_by_bot: false,
    }
}

fn find<'a>(received: &'a [IncomingMessage], id: &str) -> &'a IncomingMessage {
    received
        .iter()
        .find(|m| m.message_id == id)
        .unwrap_or_else(|| panic!("message {id} delivered: {received:?}"))
}

#[tokio::test]
async fn live_messages_carry_their_category_thread_parent_and_thread() {
    let mut h = connected(Vec::new()).await;
    h.fake.add_thread();
    h.fake.add_forum_post();
    let in_channel = push_guild_message(&h.fake, CHANNEL_ID, "in the channel");
    let in_thread = push_guild_message(&h.fake, THREAD_ID, "in a thread");
    let in_post = push_guild_message(&h.fake, FORUM_POST_ID, "in a forum post");
    let dm = h.fake.next_id();
    h.fake.push_message(message_create(
        &dm,
        DM_CHANNEL_ID,
        None,
        user(USER_ID, "alice", false),
        "in private",
    ));
    let received = next_messages(&mut h, 4).await;

    assert_eq!(
        find(&received, &in_channel).location,
        location(None, Some(CATEGORY_ID))
    );
    let thread = find(&received, &in_thread);
    assert_eq!(thread.channel_id, THREAD_ID);
    assert_eq!(thread.location, thread_location(CHANNEL_ID, the_thread()));
    assert_eq!(
        find(&received, &in_post).location,
        thread_location(FORUM_ID, the_forum_post())
    );
    let dm = find(&received, &dm);
    assert!(dm.is_dm);
    assert_eq!(dm.location, Location::default());
    assert_eq!(
        channel_lookups(&h.fake, DM_CHANNEL_ID),
        0,
        "a DM is not looked up"
    );

    // The thread and the forum post were looked up once each; a second message in the thread
    // asks nothing more.
    assert_eq!(channel_lookups(&h.fake, THREAD_ID), 1);
    assert_eq!(channel_lookups(&h.fake, FORUM_POST_ID), 1);
    assert_eq!(
        channel_lookups(&h.fake, FORUM_ID),
        1,
        "added by the test, not in GUILD_CREATE"
    );
    let again = push_guild_message(&h.fake, THREAD_ID, "still in the thread");
    let second = next_messages(&mut h, 1).await;
    assert_eq!(second[0].message_id, again);
    assert_eq!(
        second[0].location,
        thread_location(CHANNEL_ID, the_thread())
    );
    assert_eq!(channel_lookups(&h.fake, THREAD_ID), 1, "remembered");
    assert_eq!(
        channel_lookups(&h.fake, CHANNEL_ID),
        0,
        "the text channel (also as the thread's parent) is known from GUILD_CREATE"
    );

    // A thread is answered in like any channel.
    let sent = h
        .adapter
        .send_message(
            &THREAD_ID.into(),
            "answer in the thread",
            Some(&MessageId::from(again.as_str())),
        )
        .await
        .expect("sent to the thread");
    let stored = h.fake.messages(THREAD_ID);
    assert_eq!(
        stored
            .last()
            .map(|m| (m.id.to_string(), m.content.as_str())),
        Some((sent.message_id.to_string(), "answer in the thread"))
    );
    h.stop().await;
}

#[tokio::test]
async fn concurrent_messages_in_a_new_thread_look_it_up_once() {
    let mut h = connected(Vec::new()).await;
    h.fake.add_thread();
    for i in 0..5 {
        push_guild_message(&h.fake, THREAD_ID, &format!("burst {i}"));
    }
    let received = next_messages(&mut h, 5).await;
    assert!(
        received
            .iter()
            .all(|m| m.location == thread_location(CHANNEL_ID, the_thread())),
        "{received:?}"
    );
    assert_eq!(channel_lookups(&h.fake, THREAD_ID), 1);
    h.stop().await;
}

#[tokio::test]
async fn a_channel_whose_look_up_fails_is_delivered_without_a_location_and_not_asked_again() {
    let mut h = connected(Vec::new()).await;
    let unknown = "4998";
    let first = push_guild_message(&h.fake, unknown, "where am I?");
    let received = next_messages(&mut h, 1).await;
    assert_eq!(received[0].message_id, first);
    assert_eq!(received[0].channel_id, unknown);
    assert_eq!(received[0].location, Location::default());
    assert_eq!(channel_lookups(&h.fake, unknown), 1, "looked up (404)");

    let second = push_guild_message(&h.fake, unknown, "still lost");
    let received = next_messages(&mut h, 1).await;
    assert_eq!(received[0].message_id, second);
    assert_eq!(received[0].location, Location::default());
    assert_eq!(
        channel_lookups(&h.fake, unknown),
        1,
        "a failed look-up is not repeated at once"
    );
    h.stop().await;
}

#[tokio::test]
async fn a_hanging_look_up_delays_the_message_only_briefly() {
    let mut h = connected(Vec::new()).await;
    let slow = "4997";
    // 429 with an 8 s retry_after: the REST client would wait 8 s before asking again.
    h.fake.rate_limit(&format!("/channels/{slow}"), 1, 8.0);
    let started = Instant::now();
    let id = push_guild_message(&h.fake, slow, "anyone?");
    let received = next_messages(&mut h, 1).await;
    let waited = started.elapsed();
    assert_eq!(received[0].message_id, id);
    assert_eq!(received[0].location, Location::default());
    assert!(
        waited < Duration::from_secs(7),
        "delivered after the look-up timeout, not the 8 s wait: {waited:?}"
    );
    let again = push_guild_message(&h.fake, slow, "hello?");
    let started = Instant::now();
    let received = next_messages(&mut h, 1).await;
    assert_eq!(received[0].message_id, again);
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "no second wait for the same channel"
    );
    assert_eq!(channel_lookups(&h.fake, slow), 1);
    h.stop().await;
}

#[tokio::test]
async fn missed_messages_carry_the_same_location_as_live_ones() {
    // REST only: no gateway cache, so every fact comes from `GET /channels/{id}`.
    let (fake, adapter) = rest_only().await;
    fake.add_thread();
    fake.add_forum_post();
    let read_back = |channel: &'static str| {
        let cursor = fake.seed_message(channel, USER_ID, "alice", false, "before");
        fake.seed_message(channel, USER_ID, "alice", false, "during the gap");
        let adapter = Arc::clone(&adapter);
        async move {
            let missed = adapter
                .missed_messages(
                    &ChannelId::from(channel),
                    &MessageId::from(cursor.as_str()),
                    10,
                )
                .await
                .expect("read back");
            assert_eq!(missed.messages.len(), 1, "{channel}");
            missed.messages[0].location.clone()
        }
    };
    assert_eq!(
        read_back(CHANNEL_ID).await,
        location(None, Some(CATEGORY_ID))
    );
    assert_eq!(
        read_back(THREAD_ID).await,
        thread_location(CHANNEL_ID, the_thread())
    );
    assert_eq!(
        read_back(FORUM_POST_ID).await,
        thread_location(FORUM_ID, the_forum_post())
    );
    assert_eq!(read_back(DM_CHANNEL_ID).await, Location::default());
    assert_eq!(
        read_back(CHANNEL_ID).await,
        location(None, Some(CATEGORY_ID))
    );
    for channel in [
        CHANNEL_ID,
        THREAD_ID,
        FORUM_POST_ID,
        FORUM_ID,
        DM_CHANNEL_ID,
    ] {
        assert_eq!(
            channel_lookups(&fake, channel),
            1,
            "{channel} looked up once for the guild and the location together"
        );
    }
    assert_eq!(
        channel_lookups(&fake, CATEGORY_ID),
        0,
        "a category needs no look-up"
    );
}

#[test]
fn the_fakes_channels_match_serenitys_model() {
    use serenity::model::prelude::{ChannelType, Guild, GuildChannel};
    let guild: Guild = serde_json::from_value(guild_create()).expect("GUILD_CREATE");
    let text = guild
        .channels
        .values()
        .find(|c| c.id.to_string() == CHANNEL_ID)
        .expect("the text channel");
    assert_eq!(
        text.parent_id.map(|p| p.to_string()).as_deref(),
        Some(CATEGORY_ID)
    );
    assert!(
        guild
            .channels
            .values()
            .any(|c| c.id.to_string() == CATEGORY_ID && c.kind == ChannelType::Category)
    );
    let thread: GuildChannel =
        serde_json::from_value(thread_json(THREAD_ID, CHANNEL_ID, "t", BOT_ID)).expect("thread");
    assert_eq!(
        thread.owner_id.map(|o| o.to_string()).as_deref(),
        Some(BOT_ID)
    );
    for (id, kind, parent, expected) in [
        (
            THREAD_ID,
            ChannelKind::PublicThread,
            CHANNEL_ID,
            ChannelType::PublicThread,
        ),
        (
            FORUM_ID,
            ChannelKind::Forum,
            CATEGORY_ID,
            ChannelType::Forum,
        ),
    ] {
        let channel: GuildChannel =
            serde_json::from_value(channel_json(id, kind, Some(parent), "x")).expect("channel");
        assert_eq!(channel.kind, expected);
        assert_eq!(
            channel.parent_id.map(|p| p.to_string()).as_deref(),
            Some(parent)
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Threads: starter messages, opening, the starter in the parent channel, archived threads.

/// [`THREAD_ID`] opened from alice's message in [`CHANNEL_ID`] (the message has the thread's
/// id and stays in the channel).
fn add_thread_from_message(fake: &FakeDiscord) {
    fake.add_thread();
    fake.seed_message_with_id(
        CHANNEL_ID,
        THREAD_ID,
        USER_ID,
        "alice",
        "shall we plan the trip?",
    );
}

/// The JSON bodies of the messages posted to `channel`.
fn posted(fake: &FakeDiscord, channel: &str) -> Vec<Value> {
    fake.requests_to("POST", &format!("/channels/{channel}/messages"))
        .into_iter()
        .filter(|r| r.path == format!("/channels/{channel}/messages"))
        .map(|r| r.json.unwrap_or(Value::Null))
        .collect()
}

#[tokio::test]
async fn a_threads_starter_is_read_from_its_channel_and_a_forum_posts_from_the_post() {
    let (fake, adapter) = rest_only().await;
    add_thread_from_message(&fake);
    fake.add_forum_post();

    let starter = adapter
        .thread_starter(&THREAD_ID.into())
        .await
        .expect("read")
        .expect("the thread began with a message");
    assert_eq!(starter.message_id, THREAD_ID);
    assert_eq!(starter.content, "shall we plan the trip?");
    assert_eq!(starter.user_id, USER_ID);
    assert_eq!(
        fake.requests_to("GET", &format!("/channels/{CHANNEL_ID}/messages/"))
            .len(),
        1,
        "read in the parent channel"
    );

    let first = adapter
        .thread_starter(&FORUM_POST_ID.into())
        .await
        .expect("read")
        .expect("the post began with a message");
    assert_eq!(first.message_id, FORUM_POST_ID);
    assert_eq!(first.content, "the post's question");
    assert_eq!(
        fake.requests_to(
            "GET",
            &format!("/channels/{FORUM_POST_ID}/messages/{FORUM_POST_ID}")
        )
        .len(),
        1,
        "read in the post itself"
    );

    for not_a_thread in [CHANNEL_ID, DM_CHANNEL_ID] {
        assert_eq!(
            adapter
                .thread_starter(&not_a_thread.into())
                .await
                .expect("answered"),
            None,
            "{not_a_thread}"
        );
    }
    // A thread whose starter was deleted has none.
    fake.add_channel(
        "4300",
        ChannelKind::PublicThread,
        Some(CHANNEL_ID),
        "orphan",
    );
    assert_eq!(
        adapter
            .thread_starter(&"4300".into())
            .await
            .expect("a 404 is no error"),
        None
    );
    assert!(matches!(
        adapter.thread_starter(&"x".into()).await,
        Err(PlatformError::InvalidId(_))
    ));
    assert!(matches!(
        adapter.thread_starter(&"4998".into()).await,
        Err(PlatformError::NotFound(_))
    ));
}

#[tokio::test]
async fn open_thread_names_a_thread_once_and_returns_it_again() {
    let (fake, adapter) = rest_only().await;
    let message = fake.seed_message(CHANNEL_ID, USER_ID, "alice", false, "plans?");
    let long = format!("Weekend\nplans\r\n\tfor {}", "x".repeat(300));
    let opened = adapter
        .open_thread(&CHANNEL_ID.into(), &message.as_str().into(), &long)
        .await
        .expect("opened")
        .expect("Discord has threads");
    assert_eq!(opened, message.as_str(), "a thread has its message's id");
    let posts = fake.threads_opened();
    assert_eq!(posts.len(), 1);
    assert_eq!(
        posts[0].path,
        format!("/channels/{CHANNEL_ID}/messages/{message}/threads")
    );
    let body = posts[0].json.clone().expect("json");
    let name = body["name"].as_str().expect("a name");
    assert_eq!(name.chars().count(), 100);
    assert!(name.starts_with("Weekend plans for xxx"), "{name:?}");
    assert_eq!(body["auto_archive_duration"], 1440);

    // Asked again (Discord answers 160004): the same thread.
    let again = adapter
        .open_thread(&CHANNEL_ID.into(), &message.as_str().into(), "other name")
        .await
        .expect("answered")
        .expect("the existing thread");
    assert_eq!(again, opened);
    assert_eq!(fake.threads_opened().len(), 2);

    // The new thread is remembered as the bot's: its starter is read without a look-up.
    let starter = adapter
        .thread_starter(&opened)
        .await
        .expect("read")
        .expect("its starter");
    assert_eq!(starter.content, "plans?");
    assert_eq!(channel_lookups(&fake, opened.as_str()), 0);

    // A name that is nothing once cleaned falls back; a message that is gone is not found.
    let quiet = fake.seed_message(CHANNEL_ID, USER_ID, "alice", false, "...");
    adapter
        .open_thread(&CHANNEL_ID.into(), &quiet.as_str().into(), "\n\t \r")
        .await
        .expect("opened");
    assert_eq!(
        fake.threads_opened()[2]
            .json
            .as_ref()
            .map(|b| b["name"].clone()),
        Some(json!("conversation"))
    );
    assert!(matches!(
        adapter
            .open_thread(&CHANNEL_ID.into(), &"123".into(), "gone")
            .await,
        Err(PlatformError::NotFound(_))
    ));
    assert!(matches!(
        adapter
            .open_thread(&CHANNEL_ID.into(), &"nope".into(), "bad")
            .await,
        Err(PlatformError::InvalidId(_))
    ));
}

#[tokio::test]
async fn a_message_in_a_thread_the_bot_opened_says_so() {
    let mut h = connected(Vec::new()).await;
    let asked = push_guild_message(&h.fake, CHANNEL_ID, "can we talk about trains?");
    assert_eq!(next_messages(&mut h, 1).await[0].message_id, asked);
    let thread = h
        .adapter
        .open_thread(&CHANNEL_ID.into(), &asked.as_str().into(), "Trains")
        .await
        .expect("opened")
        .expect("a thread");
    let inside = push_guild_message(&h.fake, thread.as_str(), "steam ones!");
    let received = next_messages(&mut h, 1).await;
    assert_eq!(received[0].message_id, inside);
    assert_eq!(
        received[0].location,
        thread_location(
            CHANNEL_ID,
            ThreadInfo {
                name: "Trains".into(),
                parent_name: Some("general".into()),
                in_forum: false,
                started_by_bot: true,
            }
        )
    );
    assert_eq!(
        channel_lookups(&h.fake, thread.as_str()),
        0,
        "known since it was opened"
    );
    h.stop().await;
}

#[tokio::test]
async fn a_thread_announced_on_the_gateway_needs_no_look_up() {
    let mut h = connected(Vec::new()).await;
    h.fake.add_thread();
    h.fake.announce_thread(THREAD_ID);
    // serenity updates its cache in event order, before the message's handler runs.
    let id = push_guild_message(&h.fake, THREAD_ID, "hello from a thread");
    let received = next_messages(&mut h, 1).await;
    assert_eq!(received[0].message_id, id);
    assert_eq!(
        received[0].location,
        thread_location(CHANNEL_ID, the_thread())
    );
    assert_eq!(
        channel_lookups(&h.fake, THREAD_ID),
        0,
        "known from THREAD_CREATE"
    );
    h.stop().await;
}

#[tokio::test]
async fn the_starter_is_reacted_to_and_read_in_the_parent_channel() {
    let (fake, adapter) = rest_only().await;
    add_thread_from_message(&fake);
    fake.add_forum_post();
    let thumbs: ReactionEmoji = "👍".parse().expect("emoji");
    let segment = "%F0%9F%91%8D".to_owned();

    adapter
        .add_reaction(&THREAD_ID.into(), &THREAD_ID.into(), &thumbs)
        .await
        .expect("reacted to the starter");
    assert_eq!(fake.reactions(CHANNEL_ID, THREAD_ID), vec![segment.clone()]);
    let read = adapter
        .get_message(&THREAD_ID.into(), &THREAD_ID.into())
        .await
        .expect("read the starter");
    assert_eq!(read.content, "shall we plan the trip?");
    adapter
        .remove_reaction(&THREAD_ID.into(), &THREAD_ID.into(), &thumbs)
        .await
        .expect("removed");
    assert!(fake.reactions(CHANNEL_ID, THREAD_ID).is_empty());

    // Other messages of the thread, and a forum post's first message, stay where they are.
    let reply = fake.seed_message(THREAD_ID, USER_ID, "alice", false, "yes!");
    adapter
        .add_reaction(&THREAD_ID.into(), &reply.as_str().into(), &thumbs)
        .await
        .expect("reacted in the thread");
    assert_eq!(fake.reactions(THREAD_ID, &reply), vec![segment.clone()]);
    adapter
        .add_reaction(&FORUM_POST_ID.into(), &FORUM_POST_ID.into(), &thumbs)
        .await
        .expect("reacted to the post");
    assert_eq!(fake.reactions(FORUM_POST_ID, FORUM_POST_ID), vec![segment]);
    assert_eq!(
        channel_lookups(&fake, THREAD_ID),
        1,
        "the thread is looked up once, and only for its own id"
    );
}

#[tokio::test]
async fn a_reply_to_the_starter_inside_its_thread_carries_no_reference() {
    let (fake, adapter) = rest_only().await;
    add_thread_from_message(&fake);
    fake.add_forum_post();
    adapter
        .send_message(&THREAD_ID.into(), "let's!", Some(&THREAD_ID.into()))
        .await
        .expect("sent");
    adapter
        .send_files(
            &THREAD_ID.into(),
            vec![OutgoingFile::from_bytes("map.txt", b"route".to_vec())],
            Some("the map"),
            Some(&THREAD_ID.into()),
        )
        .await
        .expect("files sent");
    let reply = fake.seed_message(THREAD_ID, USER_ID, "alice", false, "when?");
    adapter
        .send_message(&THREAD_ID.into(), "Saturday", Some(&reply.as_str().into()))
        .await
        .expect("sent");
    let bodies = posted(&fake, THREAD_ID);
    assert_eq!(bodies.len(), 3);
    assert!(bodies[0].get("message_reference").is_none(), "{bodies:?}");
    assert!(bodies[1].get("message_reference").is_none(), "{bodies:?}");
    assert_eq!(bodies[2]["message_reference"]["message_id"], reply.as_str());
    assert_eq!(fake.messages(THREAD_ID)[0].content, "let's!");

    // A forum post's first message is in the post: the reply references it.
    adapter
        .send_message(
            &FORUM_POST_ID.into(),
            "good question",
            Some(&FORUM_POST_ID.into()),
        )
        .await
        .expect("sent");
    assert_eq!(
        posted(&fake, FORUM_POST_ID)[0]["message_reference"]["message_id"],
        FORUM_POST_ID
    );
}

#[tokio::test]
async fn an_archived_thread_is_unarchived_and_the_message_sent() {
    let (fake, adapter) = rest_only().await;
    fake.add_thread();
    fake.archive_thread(THREAD_ID);
    let sent = adapter
        .send_message(&THREAD_ID.into(), "back again", None)
        .await
        .expect("sent after unarchiving");
    let patches = fake.channel_patches(THREAD_ID);
    assert_eq!(patches.len(), 1);
    assert_eq!(patches[0].json, Some(json!({"archived": false})));
    assert!(!fake.is_archived(THREAD_ID));
    assert_eq!(posted(&fake, THREAD_ID).len(), 2, "refused once, then sent");
    assert_eq!(
        fake.messages(THREAD_ID)
            .last()
            .map(|m| (m.id.to_string(), m.content.clone())),
        Some((sent.message_id.to_string(), "back again".to_owned()))
    );

    fake.archive_thread(THREAD_ID);
    let delivery = adapter
        .send_files(
            &THREAD_ID.into(),
            vec![OutgoingFile::from_bytes("notes.txt", b"n".to_vec())],
            None,
            None,
        )
        .await
        .expect("files sent after unarchiving");
    assert_eq!(delivery.messages.len(), 1);
    assert_eq!(fake.channel_patches(THREAD_ID).len(), 2);
    let last = fake
        .requests_to("POST", &format!("/channels/{THREAD_ID}/messages"))
        .pop()
        .expect("the retried upload");
    assert_eq!(
        last.filenames,
        vec!["notes.txt"],
        "the files are sent again"
    );
}

#[tokio::test]
async fn a_thread_that_cannot_be_unarchived_fails_once_with_a_clear_error() {
    let logs = LogBuffer::default();
    let writer = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let (fake, adapter) = rest_only().await;
    fake.add_thread();
    fake.archive_thread(THREAD_ID);
    fake.refuse_unarchive(403, 50013, "Missing Permissions");
    let err = adapter
        .send_message(&THREAD_ID.into(), "anyone?", None)
        .await
        .expect_err("refused");
    match &err {
        PlatformError::Forbidden(message) => assert!(
            message.contains("the thread is archived and could not be unarchived"),
            "{message}"
        ),
        other => panic!("expected Forbidden, got {other:?}"),
    }
    assert!(!err.is_retryable());
    assert_eq!(fake.channel_patches(THREAD_ID).len(), 1, "asked once");
    assert_eq!(posted(&fake, THREAD_ID).len(), 1, "not sent again");
    assert!(fake.is_archived(THREAD_ID));

    // A locked thread answers the unarchiving with 50083 again: still one try.
    fake.refuse_unarchive(400, 50083, "Thread is archived");
    let err = adapter
        .send_files(
            &THREAD_ID.into(),
            vec![OutgoingFile::from_bytes("a.txt", b"a".to_vec())],
            None,
            None,
        )
        .await
        .expect_err("refused");
    assert!(matches!(err, PlatformError::Forbidden(_)), "{err:?}");
    assert_eq!(fake.channel_patches(THREAD_ID).len(), 2);
    assert_eq!(posted(&fake, THREAD_ID).len(), 2);

    let logged =
        String::from_utf8_lossy(&logs.0.lock().unwrap_or_else(|e| e.into_inner())).into_owned();
    let warnings: Vec<&str> = logged
        .lines()
        .filter(|l| l.contains("WARN") && l.contains("could not be unarchived"))
        .collect();
    assert_eq!(warnings.len(), 2, "one warning per refused send:\n{logged}");
    assert!(
        warnings[0].contains(&format!("channel={THREAD_ID}"))
            && warnings[0].contains("cause=")
            && warnings[0].contains("Missing Permissions"),
        "{}",
        warnings[0]
    );
}

#[tokio::test]
async fn a_thread_with_a_malformed_owner_is_delivered_without_a_location() {
    let mut h = connected(Vec::new()).await;
    let bad = "4400";
    let mut thread = thread_json(bad, CHANNEL_ID, "odd", USER_ID);
    thread["owner_id"] = json!("not-a-snowflake");
    h.fake.add_channel_json(bad, thread);
    let id = push_guild_message(&h.fake, bad, "hello?");
    let received = next_messages(&mut h, 1).await;
    assert_eq!(received[0].message_id, id);
    assert_eq!(received[0].location, Location::default());
    assert_eq!(channel_lookups(&h.fake, bad), 1);
    assert!(matches!(
        h.adapter.thread_starter(&bad.into()).await,
        Err(PlatformError::InvalidId(_))
    ));
    h.stop().await;
}
