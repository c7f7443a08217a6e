//! The Misskey adapter's streaming side against the fake Misskey server: mentions, replies and
//! chat messages become events, the bot's own and other bots' notes are ignored, `chatUser`
//! subscriptions and de-duplication, reconnects, malformed frames, text commands, shutdown, and
//! the token staying out of logs.

mod common;

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use air_friends::platform::misskey::MisskeyAdapter;
use air_friends::platform::{
    CommandInvocation, CommandReply, ConnectionState, IncomingMessage, PlatformAdapter,
    PlatformEvent, PlatformKind, UserCommandSpec,
};
use common::fake_misskey::{BOT_ID, FakeMisskey, NoteOpts, TOKEN, fast_options};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

const WAIT: Duration = Duration::from_secs(10);

struct Running {
    adapter: Arc<MisskeyAdapter>,
    events: mpsc::Receiver<PlatformEvent>,
    state: ConnectionState,
    shutdown: CancellationToken,
    task: JoinHandle<anyhow::Result<()>>,
    /// `PlatformEvent::Connected` events seen so far (stream connections).
    sessions: usize,
}

/// The next message or command; stream connections on the way (`PlatformEvent::Connected`)
/// are counted in `sessions`.
async fn next_event(
    events: &mut mpsc::Receiver<PlatformEvent>,
    sessions: &mut usize,
) -> PlatformEvent {
    loop {
        let event = tokio::time::timeout(WAIT, events.recv())
            .await
            .expect("an event within 10 s")
            .expect("the adapter is running");
        match event {
            PlatformEvent::Connected(platform) => {
                assert_eq!(platform, PlatformKind::Misskey);
                *sessions += 1;
            }
            other => return other,
        }
    }
}

impl Running {
    async fn start(fake: &FakeMisskey, commands: Vec<UserCommandSpec>) -> Running {
        let adapter = fake.adapter(commands).await;
        let (sink, events) = mpsc::channel(16);
        let state = ConnectionState::new();
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(adapter.clone().run(sink, state.clone(), shutdown.clone()));
        fake.wait_for_subscription("main", None, 1).await;
        fake.wait_until("connected", || state.is_connected().then_some(()))
            .await;
        Running {
            adapter,
            events,
            state,
            shutdown,
            task,
            sessions: 0,
        }
    }

    async fn next(&mut self) -> PlatformEvent {
        next_event(&mut self.events, &mut self.sessions).await
    }

    async fn next_message(&mut self) -> IncomingMessage {
        match self.next().await {
            PlatformEvent::Message(message) => message,
            other => panic!("expected a message, got {other:?}"),
        }
    }

    async fn next_command(&mut self) -> CommandInvocation {
        match self.next().await {
            PlatformEvent::Command(command) => command,
            other => panic!("expected a command, got {other:?}"),
        }
    }

    async fn stop(self) {
        self.shutdown.cancel();
        let result = tokio::time::timeout(WAIT, self.task)
            .await
            .expect("stops within 10 s")
            .expect("no panic");
        assert!(result.is_ok(), "{result:?}");
        assert!(!self.state.is_connected());
    }
}

fn id(value: &Value) -> String {
    value["id"].as_str().expect("id").to_owned()
}

fn command_specs() -> Vec<UserCommandSpec> {
    vec![
        UserCommandSpec {
            name: "memory-stats".into(),
            description: "Show memory statistics".into(),
            input_schema: json!({"type": "object", "properties": {},
                "additionalProperties": false}),
            hidden_in_guilds: Default::default(),
        },
        UserCommandSpec {
            name: "memory-search".into(),
            description: "Search memories".into(),
            input_schema: json!({"type": "object", "properties": {
                "query": {"type": "string", "description": "Keywords"},
                "limit": {"type": "integer", "minimum": 1, "maximum": 50, "default": 10,
                          "description": "Max results"}
            }, "required": ["query"], "additionalProperties": false}),
            hidden_in_guilds: Default::default(),
        },
    ]
}

#[tokio::test]
async fn a_mention_becomes_an_incoming_message() {
    let fake = FakeMisskey::start().await;
    let mut running = Running::start(&fake, vec![]).await;
    let parent = fake.create_note(BOT_ID, "earlier bot note", NoteOpts::default());
    let note = fake.mention(
        "u1",
        &format!("@airfriends@{} what's the weather?", fake.host()),
        NoteOpts::visibility("home").reply_to(&id(&parent)),
    );
    let message = running.next_message().await;
    assert_eq!(message.channel_id, format!("note:{}", id(&note)));
    assert_eq!(message.message_id, id(&note));
    assert_eq!(message.user_id, "u1");
    assert_eq!(message.username, "alice");
    assert_eq!(message.display_name, "Alice");
    assert_eq!(message.content, "what's the weather?");
    assert!(message.mentions_bot);
    assert!(message.replied_to_bot);
    assert_eq!(message.reply_to_message_id, Some(id(&parent).into()));
    assert!(!message.is_dm && !message.is_bot);
    assert_eq!(message.guild_id, None);

    let direct = fake.mention(
        "u2",
        "@airfriends just between us",
        NoteOpts::visibility("specified").visible_to(&[BOT_ID]),
    );
    let message = running.next_message().await;
    assert_eq!(message.message_id, id(&direct));
    assert_eq!(message.content, "just between us");
    assert!(message.is_dm);
    assert!(!message.replied_to_bot);
    running.stop().await;
}

#[tokio::test]
async fn the_bots_own_notes_and_other_bots_are_ignored() {
    let fake = FakeMisskey::start().await;
    let mut running = Running::start(&fake, vec![]).await;
    fake.add_user("b9", "otherbot", None, true);
    fake.mention(BOT_ID, "@airfriends talking to myself", NoteOpts::default());
    fake.mention("b9", "@airfriends beep boop", NoteOpts::default());
    let human = fake.mention("u1", "@airfriends hello", NoteOpts::default());
    let message = running.next_message().await;
    assert_eq!(message.message_id, id(&human), "bot notes were skipped");
    assert_eq!(message.content, "hello");
    running.stop().await;
}

#[tokio::test]
async fn a_reply_to_the_bot_arriving_as_mention_and_reply_is_delivered_once() {
    let fake = FakeMisskey::start().await;
    let mut running = Running::start(&fake, vec![]).await;
    let bot_note = fake.create_note(BOT_ID, "a bot thought", NoteOpts::default());
    let reply = fake.create_note(
        "u1",
        "@airfriends I agree",
        NoteOpts::default().reply_to(&id(&bot_note)),
    );
    fake.push_main("reply", reply.clone());
    fake.push_main("mention", reply.clone());
    let sentinel = fake.mention("u2", "@airfriends next", NoteOpts::default());
    let first = running.next_message().await;
    assert_eq!(first.message_id, id(&reply));
    assert!(first.replied_to_bot);
    let second = running.next_message().await;
    assert_eq!(
        second.message_id,
        id(&sentinel),
        "the duplicate was dropped"
    );
    running.stop().await;
}

#[tokio::test]
async fn chat_messages_arrive_subscribe_chat_user_and_are_deduplicated() {
    let fake = FakeMisskey::start().await;
    let mut running = Running::start(&fake, vec![]).await;
    // The first message from a new peer comes through main's (delayed) newChatMessage.
    let first = fake.chat_to_bot("u1", "hi bot", true, false);
    let message = running.next_message().await;
    assert_eq!(message.channel_id, "chat:u1");
    assert_eq!(message.message_id, id(&first));
    assert!(message.is_dm);
    assert_eq!(message.username, "alice");
    assert_eq!(message.content, "hi bot");
    fake.wait_for_subscription("chatUser", Some("u1"), 1).await;

    // The answer goes to the chat API.
    running
        .adapter
        .send_message(&message.channel_id, "hello alice", None)
        .await
        .expect("answer");
    assert_eq!(
        fake.calls_to("chat/messages/create-to-user"),
        vec![json!({"toUserId": "u1", "text": "hello alice"})]
    );

    // A later message shows up on chatUser at once and on main after 3 s: delivered once.
    let second = fake.chat_to_bot("u1", "second message", true, true);
    let message = running.next_message().await;
    assert_eq!(message.message_id, id(&second));
    assert_eq!(message.username, "alice");
    let sentinel = fake.chat_to_bot("u2", "from bob", true, false);
    let message = running.next_message().await;
    assert_eq!(
        message.message_id,
        id(&sentinel),
        "no duplicate, and the bot's own echo skipped"
    );
    assert_eq!(message.username, "bob");
    // Messages read on chatUser are marked read, so main stays quiet.
    let frames = fake.client_frames();
    assert!(
        frames.iter().any(|f| f["type"] == "ch"
            && f["body"]["type"] == "read"
            && f["body"]["id"] == "chatUser:u1"),
        "{frames:?}"
    );
    running.stop().await;
}

#[tokio::test]
async fn a_dropped_stream_reconnects_with_backoff_and_resubscribes() {
    let fake = FakeMisskey::start().await;
    let mut running = Running::start(&fake, vec![]).await;
    fake.chat_to_bot("u1", "hi", true, false);
    running.next_message().await;
    fake.wait_for_subscription("chatUser", Some("u1"), 1).await;

    fake.refuse_streaming(true);
    fake.drop_connections();
    fake.wait_until("disconnected", || {
        (!running.state.is_connected()).then_some(())
    })
    .await;
    // Refused handshakes are retried (with growing delays) while the state stays false.
    fake.wait_until("two refused attempts", || {
        (fake.streaming_attempts() >= 3).then_some(())
    })
    .await;
    assert!(!running.state.is_connected());
    assert_eq!(fake.connects_total(), 1);

    fake.refuse_streaming(false);
    fake.wait_for_subscription("main", None, 2).await;
    fake.wait_for_subscription("chatUser", Some("u1"), 2).await;
    fake.wait_until("connected", || running.state.is_connected().then_some(()))
        .await;
    let note = fake.mention("u1", "@airfriends still there?", NoteOpts::default());
    assert_eq!(running.next_message().await.message_id, id(&note));
    assert_eq!(
        running.sessions, 2,
        "every stream connection is a new session (Misskey has no resume): a catch-up each"
    );
    running.stop().await;
}

#[tokio::test]
async fn malformed_frames_are_skipped_without_killing_the_stream() {
    let fake = FakeMisskey::start().await;
    let mut running = Running::start(&fake, vec![]).await;
    fake.push_raw("this is not json");
    fake.push_raw(r#"{"type":"channel","body":"nope"}"#);
    fake.push_raw(r#"{"type":"channel","body":{"id":"main","type":"mention","body":{"id":5}}}"#);
    fake.push_raw(r#"{"type":"channel","body":{"id":"main","type":"newChatMessage","body":[]}}"#);
    fake.push_raw(r#"{"type":"noteUpdated","body":{"id":"x","type":"reacted"}}"#);
    fake.push_main("follow", json!({"id": "u2"}));
    let note = fake.mention("u1", "@airfriends are you ok?", NoteOpts::default());
    assert_eq!(running.next_message().await.message_id, id(&note));
    assert!(running.state.is_connected());
    assert_eq!(fake.connects_total(), 1);
    running.stop().await;
}

#[tokio::test]
async fn a_text_command_is_invoked_and_answered_by_chat() {
    let fake = FakeMisskey::start().await;
    let mut running = Running::start(&fake, command_specs()).await;
    let message = fake.chat_to_bot("u1", "/memory-stats", true, false);
    let command = running.next_command().await;
    assert_eq!(command.skill, "memory-stats");
    assert!(command.parameters.is_empty());
    assert_eq!(command.origin.user_id, "u1");
    assert_eq!(command.origin.username, "alice");
    assert_eq!(command.origin.channel_id, "chat:u1");
    assert!(command.origin.is_dm);
    assert_eq!(command.message_id, Some(id(&message).into()));
    command
        .reply
        .send(CommandReply::text("You have 3 memories."))
        .expect("adapter waits");
    let sent = fake.wait_for_calls("chat/messages/create-to-user", 1).await;
    assert_eq!(
        sent[0],
        json!({"toUserId": "u1", "text": "You have 3 memories."})
    );

    // From a public note the command is answered privately too, never as a note.
    fake.mention(
        "u2",
        "@airfriends /memory-search coffee beans",
        NoteOpts::default(),
    );
    let command = running.next_command().await;
    assert_eq!(command.skill, "memory-search");
    assert_eq!(
        serde_json::Value::Object(command.parameters.clone()),
        json!({"query": "coffee beans", "limit": 10})
    );
    assert!(!command.origin.is_dm);
    command
        .reply
        .send(CommandReply::text("1. coffee beans from Kenya"))
        .expect("adapter waits");
    let sent = fake.wait_for_calls("chat/messages/create-to-user", 2).await;
    assert_eq!(sent[1]["toUserId"], "u2");
    assert!(fake.calls_to("notes/create").is_empty());
    running.stop().await;
}

#[tokio::test]
async fn unknown_commands_are_messages_and_bad_arguments_get_help() {
    let fake = FakeMisskey::start().await;
    let mut running = Running::start(&fake, command_specs()).await;
    fake.chat_to_bot("u1", "/foo bar", true, false);
    let message = running.next_message().await;
    assert_eq!(message.content, "/foo bar");
    fake.wait_for_subscription("chatUser", Some("u1"), 1).await;

    fake.chat_to_bot("u1", "/memory-search --limit 99 tea", false, true);
    let sent = fake.wait_for_calls("chat/messages/create-to-user", 1).await;
    let help = sent[0]["text"].as_str().expect("help text");
    assert!(help.contains("between 1 and 50"), "{help}");
    assert!(help.contains("Usage: /memory-search"), "{help}");

    // Nothing reached the router for the bad command.
    let sentinel = fake.chat_to_bot("u1", "plain text", false, true);
    assert_eq!(running.next_message().await.message_id, id(&sentinel));
    running.stop().await;
}

#[tokio::test]
async fn an_unanswered_command_times_out_with_an_apology() {
    let fake = FakeMisskey::start().await;
    let adapter = MisskeyAdapter::new(&fake.config(), reqwest::Client::new(), command_specs())
        .expect("adapter")
        .with_options(air_friends::platform::misskey::MisskeyOptions {
            command_timeout: Duration::from_millis(200),
            ..fast_options()
        });
    let adapter = Arc::new(adapter);
    let (sink, mut events) = mpsc::channel(4);
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(adapter.run(sink, ConnectionState::new(), shutdown.clone()));
    fake.wait_for_subscription("main", None, 1).await;
    fake.chat_to_bot("u1", "/memory-stats", true, false);
    let event = next_event(&mut events, &mut 0).await;
    let PlatformEvent::Command(command) = event else {
        panic!("expected a command");
    };
    let sent = fake.wait_for_calls("chat/messages/create-to-user", 1).await;
    assert!(
        sent[0]["text"]
            .as_str()
            .is_some_and(|t| t.contains("took too long"))
    );
    drop(command);
    shutdown.cancel();
    let result = tokio::time::timeout(WAIT, task)
        .await
        .expect("stops")
        .expect("no panic");
    assert!(result.is_ok());
}

/// A `MakeWriter` collecting every log line in memory.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("log buffer").extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Captured {
    type Writer = Captured;

    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

#[tokio::test]
async fn the_token_never_appears_in_logs_or_errors() {
    let logs = Captured::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(logs.clone())
        .with_max_level(tracing::Level::TRACE)
        .with_ansi(false)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let fake = FakeMisskey::start().await;
    let mut running = Running::start(&fake, command_specs()).await;
    fake.chat_to_bot("u1", "hello", true, false);
    running.next_message().await;
    fake.refuse_streaming(true);
    fake.drop_connections();
    fake.wait_until("refused reconnects", || {
        (fake.streaming_attempts() >= 3).then_some(())
    })
    .await;
    fake.rate_limit("chat/messages/create-to-user", 10);
    let err = running
        .adapter
        .send_dm(&"u1".into(), "x")
        .await
        .expect_err("rate limited");
    assert!(!err.to_string().contains(TOKEN));
    let err = running
        .adapter
        .send_message(&"note:missing".into(), "x", None)
        .await
        .expect_err("404");
    assert!(!format!("{err:?}").contains(TOKEN));
    fake.refuse_streaming(false);
    running.stop().await;

    let text = String::from_utf8(logs.0.lock().expect("logs").clone()).expect("utf-8");
    assert!(
        text.contains("reconnecting"),
        "the reconnects were logged:\n{text}"
    );
    assert!(
        text.contains("503"),
        "the refusal reason was logged:\n{text}"
    );
    assert!(!text.contains(TOKEN), "token leaked into the logs:\n{text}");
    assert!(
        !text.contains("SECRET"),
        "token leaked into the logs:\n{text}"
    );
}

#[tokio::test]
async fn pings_keep_a_quiet_connection_up() {
    let fake = FakeMisskey::start().await;
    let adapter = MisskeyAdapter::new(&fake.config(), reqwest::Client::new(), vec![])
        .expect("adapter")
        .with_options(air_friends::platform::misskey::MisskeyOptions {
            ping_interval: Duration::from_millis(200),
            ..fast_options()
        });
    let (sink, mut events) = mpsc::channel(4);
    let state = ConnectionState::new();
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(Arc::new(adapter).run(sink, state.clone(), shutdown.clone()));
    fake.wait_for_subscription("main", None, 1).await;
    // Several ping intervals without a single event: the pongs count as traffic.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert!(state.is_connected());
    assert_eq!(fake.connects_total(), 1);
    let note = fake.mention("u1", "@airfriends ping?", NoteOpts::default());
    let PlatformEvent::Message(message) = next_event(&mut events, &mut 0).await else {
        panic!("expected a message");
    };
    assert_eq!(message.message_id, id(&note));
    shutdown.cancel();
    let result = tokio::time::timeout(WAIT, task)
        .await
        .expect("stops")
        .expect("no panic");
    assert!(result.is_ok());
}

#[tokio::test]
async fn a_rejected_token_stops_run_and_readiness_says_why() {
    let fake = FakeMisskey::start().await;
    let mut config = fake.config();
    config.token = air_friends::config::Secret::new("not-the-token-QQQ");
    let adapter = MisskeyAdapter::new(&config, reqwest::Client::new(), vec![])
        .expect("adapter")
        .with_options(fast_options());
    let (sink, _events) = mpsc::channel(4);
    let state = ConnectionState::new();
    let result = tokio::time::timeout(
        WAIT,
        Arc::new(adapter).run(sink, state.clone(), CancellationToken::new()),
    )
    .await
    .expect("fails fast instead of retrying");
    assert!(
        result.is_ok(),
        "said once, not a second time as an error: {result:?}"
    );
    let problem = state.problem().expect("readiness says why");
    assert!(
        problem.starts_with("Misskey rejected the token"),
        "{problem}"
    );
    assert!(problem.contains("AUTHENTICATION_FAILED"), "{problem}");
    assert!(problem.contains("docs/PLATFORMS.md"), "{problem}");
    assert!(!problem.contains("not-the-token-QQQ"));
    assert!(!state.is_connected());
    assert_eq!(fake.streaming_attempts(), 0);
}

#[tokio::test]
async fn shutdown_during_reconnect_back_off_stops_promptly() {
    let fake = FakeMisskey::start().await;
    let adapter = MisskeyAdapter::new(&fake.config(), reqwest::Client::new(), vec![])
        .expect("adapter")
        .with_options(air_friends::platform::misskey::MisskeyOptions {
            reconnect: air_friends::platform::misskey::Backoff::new(
                Duration::from_secs(60),
                Duration::from_secs(60),
            ),
            ..fast_options()
        });
    let (sink, _events) = mpsc::channel(4);
    let state = ConnectionState::new();
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(Arc::new(adapter).run(sink, state.clone(), shutdown.clone()));
    fake.wait_for_subscription("main", None, 1).await;
    fake.refuse_streaming(true);
    fake.drop_connections();
    fake.wait_until("disconnected", || (!state.is_connected()).then_some(()))
        .await;
    // The adapter now waits 30–60 s before reconnecting; shutdown must not wait for that.
    shutdown.cancel();
    let result = tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .expect("stops within 5 s")
        .expect("no panic");
    assert!(result.is_ok());
    assert_eq!(fake.connects_total(), 1);
}
