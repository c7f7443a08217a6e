//! get-message on Misskey is bound to the session's conversation (`docs/SECURITY.md`, rule 5a):
//! Misskey's `notes/show` and `chat/messages/show` answer every note and chat message the bot
//! can see, direct messages to the bot included, so the adapter reads a note only when it is in
//! the session's thread (the trigger note, its ancestors, its replies) and, outside a direct
//! message, not `specified`; and a chat message only between the bot and the chat's partner.
//! Anything else is not found, exactly like an id that does not exist. Checked at the adapter
//! against the fake Misskey, and through the real binary with the real get-message skill.

mod common;

use air_friends::platform::{ChannelId, PlatformAdapter, PlatformError};
use common::fake_misskey::{BOT_ID, FakeMisskey, NoteOpts};
use common::serve::skill_step;
use common::serve_misskey::{MisskeyServe, MisskeySetup, reply_steps, script};
use serde_json::{Value, json};

/// An id in the fake's format that no note or chat message has.
const MISSING: &str = "9x99999999";

fn id(value: &Value) -> String {
    value["id"].as_str().expect("id").to_owned()
}

fn note_channel(note: &Value) -> ChannelId {
    format!("note:{}", id(note)).into()
}

/// `user`'s direct message `text` to the bot (a `specified` note only the bot may see) and the
/// bot's `specified` answer to them.
fn direct_exchange(fake: &FakeMisskey, user: &str, text: &str, answer: &str) -> (Value, Value) {
    let message = fake.create_note(
        user,
        text,
        NoteOpts::visibility("specified").visible_to(&[BOT_ID]),
    );
    let answer = fake.create_note(
        BOT_ID,
        answer,
        NoteOpts::visibility("specified")
            .visible_to(&[user])
            .reply_to(&id(&message)),
    );
    (message, answer)
}

/// Bob's direct message to the bot and the bot's answer.
fn bobs_dm(fake: &FakeMisskey) -> (Value, Value) {
    direct_exchange(
        fake,
        "u2",
        "@airfriends my new address is 12 Hidden Lane",
        "Noted, Bob: 12 Hidden Lane.",
    )
}

#[tokio::test]
async fn a_public_thread_cannot_read_another_users_direct_note_to_the_bot() {
    let fake = FakeMisskey::start().await;
    let adapter = fake.adapter(vec![]).await;
    let (secret, answer) = bobs_dm(&fake);
    let trigger = fake.create_note(
        "u1",
        "@airfriends what did Bob tell you?",
        NoteOpts::default(),
    );
    let channel = note_channel(&trigger);

    let missing = adapter
        .get_message(&channel, &MISSING.into())
        .await
        .expect_err("missing");
    assert!(matches!(missing, PlatformError::NotFound(_)), "{missing}");
    for dm in [&secret, &answer] {
        let err = adapter
            .get_message(&channel, &id(dm).into())
            .await
            .expect_err("another user's direct note is not readable");
        assert_eq!(err, missing, "not found exactly like a missing id");
    }
}

#[tokio::test]
async fn a_public_thread_reads_its_notes_but_not_a_direct_reply_in_it_or_another_thread() {
    let fake = FakeMisskey::start().await;
    let adapter = fake.adapter(vec![]).await;
    let root = fake.create_note("u2", "what is a good tea?", NoteOpts::default());
    let earlier = fake.create_note(
        BOT_ID,
        "Try a sencha.",
        NoteOpts::default().reply_to(&id(&root)),
    );
    let trigger = fake.create_note(
        "u1",
        "@airfriends and a coffee?",
        NoteOpts::default().reply_to(&id(&earlier)),
    );
    let channel = note_channel(&trigger);
    let reply = adapter
        .send_message(&channel, "A flat white.", None)
        .await
        .expect("sent");
    // Bob answers in the thread, but privately to the bot: a direct reply, not the thread's.
    let private = fake.create_note(
        "u2",
        "@airfriends between us, I hate coffee",
        NoteOpts::visibility("specified")
            .visible_to(&[BOT_ID])
            .reply_to(&id(&trigger)),
    );
    let elsewhere = fake.create_note("u2", "an unrelated public note", NoteOpts::default());

    for (note, content) in [
        (id(&trigger).into(), "@airfriends and a coffee?"),
        (id(&root).into(), "what is a good tea?"),
        (id(&earlier).into(), "Try a sencha."),
        (reply.message_id.clone(), "A flat white."),
    ] {
        let read = adapter
            .get_message(&channel, &note)
            .await
            .unwrap_or_else(|e| panic!("{content}: {e}"));
        assert_eq!(read.content, content);
    }
    let missing = adapter
        .get_message(&channel, &MISSING.into())
        .await
        .expect_err("missing");
    for outside in [&private, &elsewhere] {
        let err = adapter
            .get_message(&channel, &id(outside).into())
            .await
            .expect_err("not in this conversation");
        assert_eq!(err, missing, "{}", outside["text"]);
    }

    // The thread's history leaves the direct reply out too.
    let history = adapter
        .recent_messages(&channel, 20)
        .await
        .expect("history");
    let ids: Vec<&str> = history.iter().map(|m| m.message_id.as_str()).collect();
    assert_eq!(
        ids,
        vec![
            id(&root).as_str(),
            id(&earlier).as_str(),
            id(&trigger).as_str(),
            reply.message_id.as_str()
        ]
    );
}

#[tokio::test]
async fn a_direct_note_session_reads_its_own_specified_notes() {
    let fake = FakeMisskey::start().await;
    let adapter = fake.adapter(vec![]).await;
    let (bob_secret, _) = bobs_dm(&fake);
    let (first, answer) =
        direct_exchange(&fake, "u1", "@airfriends my PIN hint is the cat", "Got it.");
    let trigger = fake.create_note(
        "u1",
        "@airfriends what was my hint?",
        NoteOpts::visibility("specified")
            .visible_to(&[BOT_ID])
            .reply_to(&id(&answer)),
    );
    let channel = note_channel(&trigger);
    let reply = adapter
        .send_message(&channel, "The cat.", None)
        .await
        .expect("sent");
    for note in [
        id(&trigger).into(),
        id(&first).into(),
        id(&answer).into(),
        reply.message_id,
    ] {
        adapter
            .get_message(&channel, &note)
            .await
            .unwrap_or_else(|e| panic!("{note}: {e}"));
    }
    let missing = adapter
        .get_message(&channel, &MISSING.into())
        .await
        .expect_err("missing");
    let err = adapter
        .get_message(&channel, &id(&bob_secret).into())
        .await
        .expect_err("Bob's direct note is not in Alice's conversation");
    assert_eq!(err, missing);
}

#[tokio::test]
async fn a_chat_reads_only_messages_between_the_bot_and_its_partner() {
    let fake = FakeMisskey::start().await;
    let adapter = fake.adapter(vec![]).await;
    let own = fake.create_chat("u1", BOT_ID, "hello from alice");
    let answer = adapter
        .send_message(&"chat:u1".into(), "hello alice", None)
        .await
        .expect("sent");
    let bobs = fake.create_chat("u2", BOT_ID, "bob's secret");
    let to_bob = adapter
        .send_message(&"chat:u2".into(), "bob's answer", None)
        .await
        .expect("sent");

    for message in [id(&own).into(), answer.message_id] {
        adapter
            .get_message(&"chat:u1".into(), &message)
            .await
            .unwrap_or_else(|e| panic!("{message}: {e}"));
    }
    let missing = adapter
        .get_message(&"chat:u1".into(), &MISSING.into())
        .await
        .expect_err("missing");
    assert!(matches!(missing, PlatformError::NotFound(_)), "{missing}");
    for other in [id(&bobs).into(), to_bob.message_id] {
        let err = adapter
            .get_message(&"chat:u1".into(), &other)
            .await
            .expect_err("another chat's message");
        assert_eq!(err, missing);
    }
}

/// The result the fake agent logged for the permission step whose command contains `needle`.
fn step_result(serve: &MisskeyServe, needle: &str) -> Value {
    serve
        .agent_log_lines()
        .into_iter()
        .find(|e| {
            e["event"] == "permission" && e["command"].as_str().is_some_and(|c| c.contains(needle))
        })
        .unwrap_or_else(|| panic!("no step ran {needle}"))["result"]
        .clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_the_daemon_a_public_session_reads_its_thread_but_not_a_dm_to_the_bot() {
    let mut serve = MisskeyServe::start(json!({"turns": []}), MisskeySetup::default()).await;
    let (secret, _) = bobs_dm(&serve.fake);
    let root = serve
        .fake
        .create_note("u1", "I am thinking about moving", NoteOpts::default());
    let trigger = serve.fake.create_note(
        "u1",
        "@airfriends where does Bob live now?",
        NoteOpts::default().reply_to(&id(&root)),
    );
    let mut steps: Vec<Value> = [id(&secret), MISSING.to_owned(), id(&root), id(&trigger)]
        .iter()
        .map(|note| skill_step("get-message", &format!("--message-id {note}")))
        .collect();
    steps.extend(reply_steps("I cannot say."));
    serve.write_script(script(steps));
    serve.fake.push_main("mention", trigger.clone());
    serve.wait_for_calls("notes/create", 1).await;
    serve.wait_for_log("interaction finished", &[]);

    let read = |note: &str| step_result(&serve, &format!("--message-id {note}"));
    let secret_read = read(&id(&secret));
    let missing_read = read(MISSING);
    assert_ne!(secret_read["exit"], 0, "{secret_read}");
    assert!(
        !secret_read.to_string().contains("Hidden Lane"),
        "{secret_read}"
    );
    // The same answer as for an id that does not exist, but for the id it names.
    let unnamed = |result: &Value, note: &str| result.to_string().replace(note, "<id>");
    assert_eq!(
        unnamed(&secret_read, &id(&secret)),
        unnamed(&missing_read, MISSING)
    );
    assert!(
        missing_read.to_string().contains("NOT_FOUND"),
        "{missing_read}"
    );

    for (note, content) in [
        (id(&root), "I am thinking about moving"),
        (id(&trigger), "where does Bob live now?"),
    ] {
        let result = read(&note);
        assert_eq!(result["exit"], 0, "{result}");
        assert!(result.to_string().contains(content), "{result}");
    }
    // Nothing of Bob's message reached the public reply.
    let created = serve.fake.calls_to("notes/create");
    assert!(
        created
            .iter()
            .all(|n| !n.to_string().contains("Hidden Lane")),
        "{created:?}"
    );
    serve.daemon.terminate();
    assert!(
        serve
            .daemon
            .wait_exit(common::serve_misskey::WAIT)
            .success()
    );
}
