//! `air-friends serve` end to end against the fake Misskey: the real binary with its store,
//! Skill API, router, agent runner (the scripted fake ACP agent running the real skill scripts)
//! and reminder scheduler, observed through what the fake instance receives — i.e. what a
//! Misskey user would see.

mod common;

use std::time::{Duration, Instant};

use air_friends::conversation::notices::Notice;
use chrono::{SecondsFormat, Utc};
use serde_json::{Value, json};

use common::fake_misskey::{BOT_ID, FakeError, NoteOpts};
use common::serve::{readyz_check, skill_script};
use common::serve_misskey::{MisskeyServe, MisskeySetup, WAIT, log_field, reply_steps, script};

fn id(v: &Value) -> String {
    v["id"].as_str().expect("id").to_owned()
}

fn text(v: &Value) -> &str {
    v["text"].as_str().unwrap_or_default()
}

fn stop(serve: &mut MisskeyServe) {
    serve.daemon.terminate();
    let status = serve.daemon.wait_exit(WAIT);
    assert!(status.success(), "exit status {status:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mentions_get_threaded_replies_with_the_notes_visibility() {
    let mut serve = MisskeyServe::start(
        script(reply_steps("Hi! Nice to hear from you.")),
        MisskeySetup::default(),
    )
    .await;

    // A `specified` note visible only to the bot: the reply stays `specified` to its author.
    let secret = serve.fake.mention(
        "u1",
        "@airfriends just between us: hello",
        NoteOpts::visibility("specified").visible_to(&[BOT_ID]),
    );
    let created = serve.wait_for_calls("notes/create", 1).await;
    assert_eq!(created[0]["replyId"], id(&secret));
    assert_eq!(created[0]["visibility"], "specified");
    assert_eq!(created[0]["visibleUserIds"], json!(["u1"]));
    assert_eq!(created[0]["text"], "Hi! Nice to hear from you.");

    // A `home` note: the reply is `home`, threaded to it.
    let home = serve.fake.mention(
        "u2",
        "@airfriends hi from home",
        NoteOpts::visibility("home"),
    );
    let created = serve.wait_for_calls("notes/create", 2).await;
    assert_eq!(created[1]["replyId"], id(&home));
    assert_eq!(created[1]["visibility"], "home");
    assert!(created[1].get("visibleUserIds").is_none(), "{}", created[1]);

    // What the users see: exactly one reply under each note, no error reply.
    let bot_notes: Vec<Value> = serve
        .fake
        .notes()
        .into_iter()
        .filter(|n| n["userId"] == BOT_ID)
        .collect();
    assert_eq!(bot_notes.len(), 2, "{bot_notes:?}");
    assert_eq!(bot_notes[0]["replyId"], id(&secret));
    assert_eq!(bot_notes[0]["visibility"], "specified");
    assert_eq!(bot_notes[1]["replyId"], id(&home));
    assert_eq!(bot_notes[1]["visibility"], "home");
    assert!(bot_notes.iter().all(|n| text(n) != Notice::Error.english()));
    assert!(
        serve
            .fake
            .calls_to("chat/messages/create-to-user")
            .is_empty()
    );
    stop(&mut serve);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chat_message_gets_a_chat_answer() {
    let mut serve = MisskeyServe::start(
        script(reply_steps("Hello Alice, this is a chat answer.")),
        MisskeySetup::default(),
    )
    .await;

    serve
        .fake
        .chat_to_bot("u1", "hi, are you around?", true, false);
    let sent = serve
        .wait_for_calls("chat/messages/create-to-user", 1)
        .await;
    assert_eq!(sent[0]["toUserId"], "u1");
    assert_eq!(sent[0]["text"], "Hello Alice, this is a chat answer.");

    // The answer sits in the chat between the bot and Alice, and nothing was posted as a note.
    let interaction = serve.wait_for_log("interaction finished", &[]);
    assert_eq!(log_field(&interaction, "responded"), true);
    let chat: Vec<Value> = serve
        .fake
        .chat_messages()
        .into_iter()
        .filter(|m| m["fromUserId"] == BOT_ID)
        .collect();
    assert_eq!(chat.len(), 1, "{chat:?}");
    assert_eq!(chat[0]["toUserId"], "u1");
    assert!(serve.fake.calls_to("notes/create").is_empty());
    stop(&mut serve);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edit_reply_recreates_the_note_under_the_original_anchor() {
    // The agent keeps send-reply's result to learn the message id, then edits that message.
    let send = skill_script("send-reply");
    let edit = skill_script("edit-reply");
    let steps = vec![
        json!({"run": "printf 'first draft' > \"$TMPDIR/$SESSION_ID/reply.md\""}),
        json!({"run": format!(
            "{send} --message-file \"$TMPDIR/$SESSION_ID/reply.md\" > \"$TMPDIR/$SESSION_ID/sent.json\""
        )}),
        json!({"run": "printf 'final answer, corrected' > \"$TMPDIR/$SESSION_ID/edit.md\""}),
        json!({"run": format!(
            r#"{edit} --message-id "$(sed -n 's/.*"messageId": *"\([^"]*\)".*/\1/p' "$TMPDIR/$SESSION_ID/sent.json")" --message-file "$TMPDIR/$SESSION_ID/edit.md""#
        )}),
    ];
    let mut serve = MisskeyServe::start(script(steps), MisskeySetup::default()).await;

    let anchor = serve
        .fake
        .mention("u1", "@airfriends what is 2+2?", NoteOpts::default());
    let deleted = serve.wait_for_calls("notes/delete", 1).await;
    let created = serve.fake.calls_to("notes/create");
    assert_eq!(created.len(), 2, "{created:?}");
    assert_eq!(created[0]["text"], "first draft");
    assert_eq!(created[1]["text"], "final answer, corrected");
    assert_eq!(created[0]["replyId"], id(&anchor));
    assert_eq!(
        created[1]["replyId"],
        id(&anchor),
        "the new note is threaded to the original anchor"
    );
    // Re-created first, then the original deleted.
    let endpoints = serve.fake.endpoints();
    let second_create = endpoints
        .iter()
        .enumerate()
        .filter(|(_, e)| *e == "notes/create")
        .nth(1)
        .map(|(i, _)| i)
        .unwrap();
    let delete = endpoints.iter().position(|e| e == "notes/delete").unwrap();
    assert!(second_create < delete, "{endpoints:?}");

    // The user sees only the corrected reply under their note.
    let bot_notes: Vec<Value> = serve
        .fake
        .notes()
        .into_iter()
        .filter(|n| n["userId"] == BOT_ID)
        .collect();
    assert_eq!(bot_notes.len(), 1, "{bot_notes:?}");
    assert_eq!(text(&bot_notes[0]), "final answer, corrected");
    assert_eq!(bot_notes[0]["replyId"], id(&anchor));
    assert_ne!(deleted[0]["noteId"], bot_notes[0]["id"]);
    let interaction = serve.wait_for_log("interaction finished", &[]);
    assert_eq!(log_field(&interaction, "responded"), true);
    assert_eq!(
        serve.fake.calls_to("notes/create").len(),
        2,
        "no error reply"
    );
    stop(&mut serve);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_reply_arrives_as_several_notes_in_order() {
    let paragraphs: Vec<String> = (1..=6)
        .map(|p| {
            (1..=25)
                .map(|s| format!("Paragraph {p} sentence {s} explains one more small thing."))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect();
    let long = paragraphs.join("\n\n");
    assert!(long.chars().count() > 3 * 3000 / 2, "{}", long.len());
    let mut serve = MisskeyServe::launch(json!({"turns": []}), MisskeySetup::default()).await;
    let long_path = serve.config.dir.path().join("long.md");
    std::fs::write(&long_path, &long).unwrap();
    serve.write_script(script(vec![
        json!({"run": format!("cp {} \"$TMPDIR/$SESSION_ID/reply.md\"", long_path.display())}),
        json!({"permission": format!(
            "{} --message-file $TMPDIR/$SESSION_ID/reply.md",
            skill_script("send-reply")
        )}),
    ]));
    serve.wait_ready().await;
    serve.fake.wait_for_subscription("main", None, 1).await;

    let anchor = serve
        .fake
        .mention("u1", "@airfriends tell me everything", NoteOpts::default());
    let finished = serve.wait_for_log("interaction finished", &[]);
    assert_eq!(log_field(&finished, "responded"), true);

    let created = serve.fake.calls_to("notes/create");
    assert!(created.len() >= 2, "{} notes", created.len());
    for part in &created {
        assert!(text(part).chars().count() <= 3000, "{}", text(part).len());
        assert_eq!(part["visibility"], "public");
    }
    assert_eq!(created[0]["replyId"], id(&anchor));
    // Read in order, the notes are the whole text: nothing lost, nothing reordered.
    let joined: Vec<&str> = created
        .iter()
        .flat_map(|n| text(n).split_whitespace())
        .collect();
    let original: Vec<&str> = long.split_whitespace().collect();
    assert_eq!(joined, original);
    // Stored in the same order, all in the thread of the user's note.
    let bot_notes: Vec<Value> = serve
        .fake
        .notes()
        .into_iter()
        .filter(|n| n["userId"] == BOT_ID)
        .collect();
    assert_eq!(bot_notes.len(), created.len());
    for (stored, sent) in bot_notes.iter().zip(&created) {
        assert_eq!(stored["text"], sent["text"]);
        assert_eq!(stored["replyId"], id(&anchor), "{stored}");
    }
    assert!(bot_notes.iter().all(|n| text(n) != Notice::Error.english()));
    stop(&mut serve);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_stats_by_chat_is_answered_without_an_agent() {
    let mut serve = MisskeyServe::start(
        script(reply_steps("An agent answered this one.")),
        MisskeySetup::default(),
    )
    .await;

    serve.fake.chat_to_bot("u1", "/memory-stats", true, false);
    let sent = serve
        .wait_for_calls("chat/messages/create-to-user", 1)
        .await;
    assert_eq!(sent[0]["toUserId"], "u1");
    let answer = text(&sent[0]);
    assert!(answer.starts_with("Your memories"), "{answer}");
    assert!(
        answer.contains("private"),
        "a DM shows the private row: {answer}"
    );
    serve.wait_for_log("user_command", &[("skill", json!("memory-stats"))]);
    assert!(
        !serve.agent.log.exists(),
        "an agent was started for a user command: {:?}",
        serve.agent_log_lines()
    );

    // A normal message after it in the same chat is the first (and only) agent run: the
    // command was never queued for an agent.
    serve
        .fake
        .wait_for_subscription("chatUser", Some("u1"), 1)
        .await;
    serve
        .fake
        .chat_to_bot("u1", "thanks! and hello", false, true);
    let sent = serve
        .wait_for_calls("chat/messages/create-to-user", 2)
        .await;
    assert_eq!(sent[1]["text"], "An agent answered this one.");
    serve.wait_for_log("interaction finished", &[]);
    assert_eq!(serve.agents_started(), 1);
    stop(&mut serve);
}

/// `/privacy` by chat: the daemon's own command, answered in the chat without an agent, with
/// the private memories counted (a chat is a DM).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn privacy_by_chat_is_answered_without_an_agent() {
    let mut serve = MisskeyServe::start(
        script(reply_steps("An agent answered this one.")),
        MisskeySetup::default(),
    )
    .await;
    serve.fake.chat_to_bot("u1", "/privacy", true, false);
    let sent = serve
        .wait_for_calls("chat/messages/create-to-user", 1)
        .await;
    assert_eq!(sent[0]["toUserId"], "u1");
    let answer = text(&sent[0]);
    assert!(
        answer.starts_with("Here is what I keep about you"),
        "{answer}"
    );
    assert!(
        answer.contains("0 public, 0 private, 0 disabled"),
        "{answer}"
    );
    serve.wait_for_log("user_command", &[("skill", json!("privacy"))]);
    assert!(!serve.agent.log.exists(), "an agent was started");
    stop(&mut serve);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reminder_set_in_a_chat_is_delivered_by_chat_on_time() {
    let mut serve = MisskeyServe::start(
        json!({"turns": []}),
        MisskeySetup {
            extra_yaml: "reminders:\n  minIntervalMs: 1000\n".into(),
            ..MisskeySetup::default()
        },
    )
    .await;
    // Due a few seconds from now: enough for the agent to start and call the skill.
    let due = Utc::now() + chrono::Duration::milliseconds(5000);
    let due_text = due.to_rfc3339_opts(SecondsFormat::Millis, true);
    let mut steps = vec![
        json!({"run": "printf 'Stretch your legs' > \"$TMPDIR/$SESSION_ID/reminder.md\""}),
        json!({"permission": format!(
            "{} --scheduled-at {due_text} --message-file $TMPDIR/$SESSION_ID/reminder.md",
            skill_script("set-reminder")
        )}),
    ];
    steps.extend(reply_steps("Sure, I will remind you in a moment."));
    serve.write_script(script(steps));

    serve
        .fake
        .chat_to_bot("u1", "remind me to stretch in a few seconds", true, false);
    let sent = serve
        .wait_for_calls("chat/messages/create-to-user", 1)
        .await;
    assert_eq!(sent[0]["text"], "Sure, I will remind you in a moment.");
    let permission = serve
        .agent_log_lines()
        .into_iter()
        .find(|e| {
            e["event"] == "permission"
                && e["command"]
                    .as_str()
                    .is_some_and(|c| c.contains("set-reminder"))
        })
        .expect("the agent asked to run set-reminder");
    assert_eq!(permission["allowed"], true);
    assert_eq!(permission["result"]["exit"], 0, "{permission}");
    assert!(
        Utc::now() < due,
        "the reminder fell due before the confirmation; the test machine is too slow"
    );

    // The reminder arrives by chat at its time.
    let delivered_at = serve
        .wait_for("the reminder", || {
            (serve.fake.calls_to("chat/messages/create-to-user").len() >= 2).then(Utc::now)
        })
        .await;
    let calls = serve.fake.calls_to("chat/messages/create-to-user");
    assert_eq!(calls[1]["toUserId"], "u1");
    assert!(
        text(&calls[1]).contains("Stretch your legs"),
        "{}",
        calls[1]
    );
    let lag = (delivered_at - due).num_milliseconds();
    assert!(lag < 1000, "delivered {lag} ms after its time");
    let log = serve.wait_for_log("reminder delivered", &[]);
    let logged_lag = log_field(&log, "lag_ms").as_i64().expect("lag_ms");
    assert!((0..1000).contains(&logged_lag), "lag_ms {logged_lag}");
    assert_eq!(log_field(&log, "late"), false);
    assert_eq!(serve.agents_started(), 1);
    stop(&mut serve);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_agent_yields_one_error_reply_and_bot_notes_are_ignored() {
    let mut serve = MisskeyServe::start(
        script(Vec::new()),
        MisskeySetup {
            extra_yaml: "logging:\n  level: debug\n".into(),
            ..MisskeySetup::default()
        },
    )
    .await;
    serve
        .fake
        .add_user("b2", "otherbot", Some("Other Bot"), true);

    // The bot's own note and another bot's note mentioning it: not answered, no agent.
    let own = serve
        .fake
        .mention(BOT_ID, "@airfriends a note to myself", NoteOpts::default());
    let other = serve
        .fake
        .mention("b2", "@airfriends hello fellow bot", NoteOpts::default());
    serve.wait_for_log(
        "note ignored",
        &[
            ("message_id", json!(id(&own))),
            ("reason", json!("own_message")),
        ],
    );
    serve.wait_for_log(
        "note ignored",
        &[
            ("message_id", json!(id(&other))),
            ("reason", json!("other_bot")),
        ],
    );

    // A user's mention with an agent that never answers: one short error reply.
    let asked = serve
        .fake
        .mention("u1", "@airfriends are you there?", NoteOpts::default());
    let finished = serve.wait_for_log("interaction finished", &[]);
    assert_eq!(log_field(&finished, "responded"), false);
    let created = serve.wait_for_calls("notes/create", 1).await;
    assert_eq!(created.len(), 1, "{created:?}");
    assert_eq!(created[0]["text"], Notice::Error.english());
    assert_eq!(created[0]["replyId"], id(&asked));
    // The agent got the one retry prompt before the daemon gave up.
    let prompts = serve
        .agent_log_lines()
        .iter()
        .filter(|e| e["received"]["method"] == "session/prompt")
        .count();
    assert_eq!(prompts, 2);
    assert_eq!(serve.agents_started(), 1, "{:?}", serve.agent_log_lines());
    assert!(
        serve
            .fake
            .notes()
            .iter()
            .all(|n| n["replyId"] != id(&own) && n["replyId"] != id(&other)),
        "a bot's note was answered"
    );
    stop(&mut serve);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_follows_the_stream_and_a_dropped_stream_reconnects() {
    let mut serve = MisskeyServe::launch(
        script(reply_steps("Still here after the reconnect.")),
        MisskeySetup {
            refuse_streaming: true,
            ..MisskeySetup::default()
        },
    )
    .await;

    // The instance refuses the websocket: not ready, and the daemon keeps trying.
    serve
        .wait_for("two refused handshakes", || {
            (serve.fake.streaming_attempts() >= 2).then_some(())
        })
        .await;
    let (status, body) = serve.readyz().await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["status"], "not_ready");
    assert_eq!(readyz_check(&body, "misskey"), Some(false), "{body}");
    assert_eq!(serve.fake.connects_total(), 0);

    // It accepts: ready.
    serve.fake.refuse_streaming(false);
    serve.wait_ready().await;
    serve.fake.wait_for_subscription("main", None, 1).await;
    let (status, body) = serve.readyz().await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["status"], "ready");

    // The stream drops: the daemon reconnects and resubscribes.
    serve.fake.drop_connections();
    serve.daemon_log_where(|v| {
        v["message"] == "misskey stream disconnected, reconnecting"
            && !log_field(v, "reason")
                .as_str()
                .unwrap_or("503")
                .contains("503")
    });
    serve.fake.wait_for_subscription("main", None, 2).await;
    serve.wait_ready().await;

    // A mention after the reconnect is still answered.
    let note = serve
        .fake
        .mention("u1", "@airfriends did you come back?", NoteOpts::default());
    let created = serve.wait_for_calls("notes/create", 1).await;
    assert_eq!(created[0]["replyId"], id(&note));
    assert_eq!(created[0]["text"], "Still here after the reconnect.");
    stop(&mut serve);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_waits_for_the_running_session_and_the_user_gets_the_reply() {
    let mut serve = MisskeyServe::launch(
        json!({"turns": []}),
        MisskeySetup {
            extra_yaml: "shutdownGraceMs: 20000\n".into(),
            ..MisskeySetup::default()
        },
    )
    .await;
    let marker = serve.config.dir.path().join("agent-working");
    let mut steps = vec![
        json!({"run": format!("touch {}", marker.display())}),
        json!({"sleepMs": 1500}),
    ];
    steps.extend(reply_steps("Answered while shutting down."));
    serve.write_script(script(steps));
    serve.wait_ready().await;
    serve.fake.wait_for_subscription("main", None, 1).await;

    let note = serve.fake.mention(
        "u1",
        "@airfriends a question just before the restart",
        NoteOpts::default(),
    );
    serve
        .wait_for("the agent to be working", || marker.exists().then_some(()))
        .await;
    let signalled = Instant::now();
    serve.daemon.terminate();

    let created = serve.wait_for_calls("notes/create", 1).await;
    assert_eq!(created[0]["text"], "Answered while shutting down.");
    assert_eq!(created[0]["replyId"], id(&note));
    let status = serve.daemon.wait_exit(WAIT);
    assert_eq!(status.code(), Some(0), "exit status {status:?}");
    assert!(
        signalled.elapsed() < Duration::from_secs(15),
        "the daemon waited for the whole grace period"
    );
    assert_eq!(
        serve.fake.calls_to("notes/create").len(),
        1,
        "no error reply on top of the answer"
    );
    let logs = serve.daemon.seen.join("\n");
    assert!(logs.contains("\"message\":\"shutting down\""), "{logs}");
    assert!(logs.contains("\"message\":\"stopped\""), "{logs}");
    assert!(
        serve.daemon.seen.iter().any(|l| {
            serde_json::from_str::<Value>(l).is_ok_and(|v| {
                v["message"] == "interaction finished" && log_field(&v, "responded") == true
            })
        }),
        "{logs}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mention_and_a_chat_sent_while_the_bot_was_stopped_are_answered_after_the_start() {
    let mut serve = MisskeyServe::start(
        script(reply_steps("Sorry, I was away. Here I am.")),
        MisskeySetup::default(),
    )
    .await;
    // The bot is addressed by a mention and in a chat: both feeds are followed from now on.
    let live = serve
        .fake
        .mention("u1", "@airfriends hello", NoteOpts::default());
    serve.wait_for_calls("notes/create", 1).await;
    serve.fake.chat_to_bot("u1", "hi", true, false);
    serve
        .wait_for_calls("chat/messages/create-to-user", 1)
        .await;

    let mut away = (String::new(), String::new());
    serve
        .restart_with_gap(|fake| {
            away.0 =
                id(&fake.create_note("u1", "@airfriends did you see this?", NoteOpts::default()));
            away.1 = id(&fake.create_chat("u1", BOT_ID, "are you back?"));
        })
        .await;
    let notes = serve.wait_for_calls("notes/create", 2).await;
    assert_eq!(notes[1]["replyId"], away.0.as_str(), "{notes:?}");
    let chats = serve
        .wait_for_calls("chat/messages/create-to-user", 2)
        .await;
    assert_eq!(chats[1]["toUserId"], "u1");
    let read = serve.fake.calls_to("i/notifications");
    assert_eq!(
        read[0]["sinceId"],
        id(&live).as_str(),
        "read from the cursor: {read:?}"
    );
    let caught =
        serve.daemon_log_where(|l| l["message"] == "caught up on messages sent while away");
    assert_eq!(log_field(&caught, "answered"), 2, "{caught}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        serve.fake.calls_to("notes/create").len(),
        2,
        "answered once"
    );
    stop(&mut serve);
}

/// A reply chain is one conversation keyed by its root note: a reply to the bot's answer is
/// answered by the same warm agent, in a reply to that note; a chain the bot never saw is
/// found from its ancestors (`notes/conversation`) and kept together from then on; a direct
/// (`specified`) reply in a public chain is a conversation of its own, so what it shows is
/// never in the agent that answers the public notes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_chain_is_one_conversation_keyed_by_its_root_note() {
    let mut serve =
        MisskeyServe::start(script(reply_steps("Noted.")), MisskeySetup::default()).await;

    // Alice begins a chain; the bot answers it, then her reply to the answer.
    let first = serve
        .fake
        .mention("u1", "@airfriends let us plan a trip", NoteOpts::default());
    let created = serve.wait_for_calls("notes/create", 1).await;
    assert_eq!(created[0]["replyId"], id(&first));
    let answer = serve
        .wait_for("the bot's first note", || {
            serve
                .fake
                .notes()
                .into_iter()
                .find(|n| n["userId"] == BOT_ID)
        })
        .await;
    let reply = serve.fake.create_note(
        "u1",
        "what about Kyoto?",
        NoteOpts::default().reply_to(&id(&answer)),
    );
    serve.fake.push_main("reply", reply.clone());
    let created = serve.wait_for_calls("notes/create", 2).await;
    assert_eq!(
        created[1]["replyId"],
        id(&reply),
        "answered where it was asked"
    );
    assert_eq!(serve.agents_started(), 1, "the chain's warm agent answered");

    // A chain the bot never saw: Bob, Alice, then Bob asks the bot three notes down.
    let top = serve
        .fake
        .create_note("u2", "anyone been to Sapporo?", NoteOpts::default());
    let middle = serve.fake.create_note(
        "u1",
        "in winter, yes",
        NoteOpts::default().reply_to(&id(&top)),
    );
    let ask = serve.fake.mention(
        "u2",
        "@airfriends what should we see there?",
        NoteOpts::default().reply_to(&id(&middle)),
    );
    let created = serve.wait_for_calls("notes/create", 3).await;
    assert_eq!(created[2]["replyId"], id(&ask));
    assert_eq!(serve.agents_started(), 2, "another chain, another agent");
    let bots_answer = serve
        .fake
        .notes()
        .into_iter()
        .find(|n| n["userId"] == BOT_ID && n["replyId"] == id(&ask))
        .expect("the answer to Bob");
    let follow_up = serve.fake.create_note(
        "u2",
        "and to eat?",
        NoteOpts::default().reply_to(&id(&bots_answer)),
    );
    serve.fake.push_main("reply", follow_up.clone());
    let created = serve.wait_for_calls("notes/create", 4).await;
    assert_eq!(created[3]["replyId"], id(&follow_up));
    assert_eq!(
        serve.agents_started(),
        2,
        "the looked-up chain stays one conversation"
    );

    // Alice answers the bot in her chain, but only to the bot: a conversation of its own.
    let last_answer = serve
        .fake
        .notes()
        .into_iter()
        .find(|n| n["userId"] == BOT_ID && n["replyId"] == id(&reply))
        .expect("the answer to Kyoto");
    let direct = serve.fake.create_note(
        "u1",
        "between us: my budget is small",
        NoteOpts::visibility("specified")
            .visible_to(&[BOT_ID])
            .reply_to(&id(&last_answer)),
    );
    serve.fake.push_main("reply", direct.clone());
    let created = serve.wait_for_calls("notes/create", 5).await;
    assert_eq!(created[4]["replyId"], id(&direct));
    assert_eq!(created[4]["visibility"], "specified");
    assert_eq!(
        serve.agents_started(),
        3,
        "a direct reply never reuses the public agent"
    );
    stop(&mut serve);
}

/// When the chain above a note cannot be read, the note is still answered — in a conversation
/// of its own — and the operator gets one warning naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chain_that_cannot_be_read_still_gets_its_answer() {
    let mut serve =
        MisskeyServe::start(script(reply_steps("Noted.")), MisskeySetup::default()).await;
    let top = serve
        .fake
        .create_note("u2", "anyone been to Sapporo?", NoteOpts::default());
    // The root look-up is the first read of the chain; the prompt's own read then succeeds.
    serve.fake.script(
        "notes/conversation",
        vec![Some(FakeError::new(400, "NO_SUCH_NOTE", "No such note."))],
    );
    let ask = serve.fake.mention(
        "u1",
        "@airfriends what should we see there?",
        NoteOpts::default().reply_to(&id(&top)),
    );
    let created = serve.wait_for_calls("notes/create", 1).await;
    assert_eq!(created[0]["replyId"], id(&ask));
    let warning = serve.wait_for_log(
        "could not read the reply chain above a note; it starts a conversation of its own",
        &[("message_id", json!(id(&ask)))],
    );
    assert_eq!(warning["level"], "WARN", "{warning}");
    stop(&mut serve);
}
