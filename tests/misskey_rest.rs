//! The Misskey adapter's REST side against the fake Misskey server: replies and their
//! visibility, chat, edits, deletions, history, search, reactions, files, rate limits, errors.

mod common;

use std::time::Duration;

use air_friends::config::Secret;
use air_friends::platform::misskey::MisskeyAdapter;
use air_friends::platform::{
    ChannelId, OutgoingFile, PlatformAdapter, PlatformError, ReactionEmoji,
};
use common::fake_misskey::{BOT_ID, FakeError, FakeMisskey, NoteOpts, TOKEN, fast_options};
use serde_json::json;

fn id(value: &serde_json::Value) -> String {
    value["id"].as_str().expect("id").to_owned()
}

#[tokio::test]
async fn a_reply_to_a_public_note_stays_public_and_threads_to_it() {
    let fake = FakeMisskey::start().await;
    let adapter = fake.adapter(vec![]).await;
    assert_eq!(
        adapter.bot_user_id().as_ref().map(|id| id.as_str()),
        Some(BOT_ID)
    );
    let note = fake.create_note("u1", "@airfriends hi", NoteOpts::default());
    let sent = adapter
        .send_message(&format!("note:{}", id(&note)).into(), "hello alice", None)
        .await
        .expect("sent");
    let create = fake.calls_to("notes/create");
    assert_eq!(
        create,
        vec![json!({"text": "hello alice", "replyId": id(&note), "visibility": "public"})]
    );
    let stored = fake.note(sent.message_id.as_str()).expect("stored");
    assert_eq!(stored["replyId"], id(&note));
    assert_eq!(stored["userId"], BOT_ID);
}

#[tokio::test]
async fn a_reply_to_a_specified_note_is_specified_to_its_author() {
    let fake = FakeMisskey::start().await;
    let adapter = fake.adapter(vec![]).await;
    let note = fake.create_note(
        "u1",
        "@airfriends secret",
        NoteOpts::visibility("specified").visible_to(&[BOT_ID, "u2"]),
    );
    let sent = adapter
        .send_message(&format!("note:{}", id(&note)).into(), "psst", None)
        .await
        .expect("sent");
    let stored = fake.note(sent.message_id.as_str()).expect("stored");
    assert_eq!(stored["visibility"], "specified");
    assert_eq!(stored["visibleUserIds"], json!(["u1", "u2"]));
}

#[tokio::test]
async fn home_and_followers_replies_keep_their_visibility() {
    let fake = FakeMisskey::start().await;
    let adapter = fake.adapter(vec![]).await;
    for visibility in ["home", "followers"] {
        let note = fake.create_note("u1", "hey", NoteOpts::visibility(visibility));
        let sent = adapter
            .send_message(&format!("note:{}", id(&note)).into(), "hello", None)
            .await
            .expect("sent");
        assert_eq!(
            fake.note(sent.message_id.as_str()).expect("stored")["visibility"],
            visibility
        );
    }
}

#[tokio::test]
async fn an_explicit_anchor_overrides_the_thread_note() {
    let fake = FakeMisskey::start().await;
    let adapter = fake.adapter(vec![]).await;
    let first = fake.create_note("u1", "one", NoteOpts::default());
    let second = fake.create_note("u1", "two", NoteOpts::default().reply_to(&id(&first)));
    let sent = adapter
        .send_message(
            &format!("note:{}", id(&first)).into(),
            "answer",
            Some(&id(&second).into()),
        )
        .await
        .expect("sent");
    assert_eq!(
        fake.note(sent.message_id.as_str()).expect("stored")["replyId"],
        id(&second)
    );
}

#[tokio::test]
async fn chat_messages_and_dms_go_to_create_to_user() {
    let fake = FakeMisskey::start().await;
    let adapter = fake.adapter(vec![]).await;
    let sent = adapter
        .send_message(&"chat:u1".into(), "hi there", None)
        .await
        .expect("sent");
    adapter
        .send_dm(&"u2".into(), "reminder!")
        .await
        .expect("dm");
    assert_eq!(
        fake.calls_to("chat/messages/create-to-user"),
        vec![
            json!({"toUserId": "u1", "text": "hi there"}),
            json!({"toUserId": "u2", "text": "reminder!"})
        ]
    );
    assert_eq!(fake.chat_messages()[0]["id"], sent.message_id.as_str());
    assert!(fake.calls_to("notes/create").is_empty());
}

#[tokio::test]
async fn editing_a_note_re_creates_it_threaded_to_the_anchor() {
    let fake = FakeMisskey::start().await;
    let adapter = fake.adapter(vec![]).await;
    let trigger = fake.create_note("u1", "question", NoteOpts::visibility("home"));
    let channel: ChannelId = format!("note:{}", id(&trigger)).into();
    let original = adapter
        .send_message(&channel, "first draft", Some(&id(&trigger).into()))
        .await
        .expect("sent");
    let edited = adapter
        .edit_message(
            &channel,
            &original.message_id,
            "final answer",
            Some(&id(&trigger).into()),
        )
        .await
        .expect("edited");
    assert_ne!(edited.message_id, original.message_id);
    assert!(
        fake.note(original.message_id.as_str()).is_none(),
        "original deleted"
    );
    let stored = fake.note(edited.message_id.as_str()).expect("re-created");
    assert_eq!(stored["text"], "final answer");
    assert_eq!(stored["replyId"], id(&trigger));
    assert_eq!(stored["visibility"], "home");
    assert_eq!(
        fake.calls_to("notes/delete"),
        vec![json!({"noteId": original.message_id})]
    );
    let endpoints = fake.endpoints();
    let created = endpoints.iter().rposition(|e| e == "notes/create");
    let deleted = endpoints.iter().position(|e| e == "notes/delete");
    assert!(created < deleted, "created before deleting: {endpoints:?}");
}

#[tokio::test]
async fn editing_a_chat_message_re_creates_it() {
    let fake = FakeMisskey::start().await;
    let adapter = fake.adapter(vec![]).await;
    let original = adapter
        .send_message(&"chat:u1".into(), "draft", None)
        .await
        .expect("sent");
    let edited = adapter
        .edit_message(&"chat:u1".into(), &original.message_id, "better", None)
        .await
        .expect("edited");
    assert_ne!(edited.message_id, original.message_id);
    let texts: Vec<_> = fake
        .chat_messages()
        .iter()
        .map(|m| m["text"].clone())
        .collect();
    assert_eq!(texts, vec![json!("better")]);
}

#[tokio::test]
async fn other_users_messages_cannot_be_edited_or_deleted() {
    let fake = FakeMisskey::start().await;
    let adapter = fake.adapter(vec![]).await;
    let note = fake.create_note("u1", "mine", NoteOpts::default());
    let channel: ChannelId = format!("note:{}", id(&note)).into();
    let err = adapter
        .edit_message(&channel, &id(&note).into(), "hacked", None)
        .await
        .expect_err("forbidden");
    assert!(matches!(err, PlatformError::Forbidden(_)), "{err}");
    let err = adapter
        .delete_message(&channel, &id(&note).into())
        .await
        .expect_err("forbidden");
    assert!(matches!(err, PlatformError::Forbidden(_)), "{err}");
    assert!(fake.calls_to("notes/create").is_empty());
    assert!(fake.calls_to("notes/delete").is_empty());
    assert!(fake.note(&id(&note)).is_some());
}

#[tokio::test]
async fn deleting_and_reading_messages() {
    let fake = FakeMisskey::start().await;
    let adapter = fake.adapter(vec![]).await;
    let note = fake.create_note("u1", "hello", NoteOpts::default());
    let channel: ChannelId = format!("note:{}", id(&note)).into();
    let sent = adapter
        .send_message(&channel, "bye", None)
        .await
        .expect("sent");
    let read = adapter
        .get_message(&channel, &id(&note).into())
        .await
        .expect("read");
    assert_eq!(read.content, "hello");
    assert_eq!(read.username, "alice");
    assert!(!read.is_bot);
    let own = adapter
        .get_message(&channel, &sent.message_id)
        .await
        .expect("own");
    assert!(own.is_bot);
    adapter
        .delete_message(&channel, &sent.message_id)
        .await
        .expect("deleted");
    let err = adapter
        .get_message(&channel, &sent.message_id)
        .await
        .expect_err("gone");
    assert!(matches!(err, PlatformError::NotFound(_)), "{err}");

    let chat = fake.create_chat("u1", BOT_ID, "chat hello");
    let read = adapter
        .get_message(&"chat:u1".into(), &id(&chat).into())
        .await
        .expect("chat");
    assert_eq!(
        (read.username.as_str(), read.content.as_str()),
        ("alice", "chat hello")
    );
    let mine = adapter
        .send_message(&"chat:u1".into(), "chat bye", None)
        .await
        .expect("sent");
    adapter
        .delete_message(&"chat:u1".into(), &mine.message_id)
        .await
        .expect("deleted");
    assert_eq!(fake.chat_messages().len(), 1);
}

#[tokio::test]
async fn thread_history_is_ancestors_the_note_and_children_oldest_first() {
    let fake = FakeMisskey::start().await;
    let adapter = fake.adapter(vec![]).await;
    let root = fake.create_note("u1", "root question", NoteOpts::default());
    let bot_reply = fake.create_note(
        BOT_ID,
        "bot answer",
        NoteOpts::default().reply_to(&id(&root)),
    );
    let follow_up = fake.create_note(
        "u1",
        "follow up",
        NoteOpts::default().reply_to(&id(&bot_reply)),
    );
    let child = fake.create_note(
        "u2",
        "bob chimes in",
        NoteOpts::default().reply_to(&id(&follow_up)),
    );
    let _unrelated = fake.create_note("u2", "elsewhere", NoteOpts::default());
    let history = adapter
        .recent_messages(&format!("note:{}", id(&follow_up)).into(), 20)
        .await
        .expect("history");
    let contents: Vec<&str> = history.iter().map(|m| m.content.as_str()).collect();
    assert_eq!(
        contents,
        vec!["root question", "bot answer", "follow up", "bob chimes in"]
    );
    assert!(history[1].is_bot);
    assert_eq!(history[3].message_id, id(&child));
    let latest = adapter
        .recent_messages(&format!("note:{}", id(&follow_up)).into(), 2)
        .await
        .expect("history");
    assert_eq!(latest.len(), 2);
    assert_eq!(latest[1].content, "bob chimes in");

    let found = adapter
        .search_messages(&format!("note:{}", id(&follow_up)).into(), "BOB root", 10)
        .await
        .expect("search");
    let contents: Vec<&str> = found.iter().map(|m| m.content.as_str()).collect();
    assert_eq!(contents, vec!["root question", "bob chimes in"]);
}

#[tokio::test]
async fn chat_history_and_search_are_oldest_first_with_names() {
    let fake = FakeMisskey::start().await;
    let adapter = fake.adapter(vec![]).await;
    fake.create_chat("u1", BOT_ID, "I like coffee");
    adapter
        .send_message(&"chat:u1".into(), "Coffee is great", None)
        .await
        .expect("sent");
    fake.create_chat("u1", BOT_ID, "and tea");
    fake.create_chat("u2", BOT_ID, "bob's coffee");
    let history = adapter
        .recent_messages(&"chat:u1".into(), 10)
        .await
        .expect("history");
    let lines: Vec<(String, String, bool)> = history
        .iter()
        .map(|m| (m.username.clone(), m.content.clone(), m.is_bot))
        .collect();
    assert_eq!(
        lines,
        vec![
            ("alice".into(), "I like coffee".into(), false),
            ("airfriends".into(), "Coffee is great".into(), true),
            ("alice".into(), "and tea".into(), false),
        ]
    );
    let found = adapter
        .search_messages(&"chat:u1".into(), "coffee TEA", 10)
        .await
        .expect("search");
    assert_eq!(found.len(), 3);
    assert_eq!(found[0].content, "I like coffee");
    assert!(found.iter().all(|m| m.content != "bob's coffee"));
    let searches = fake.calls_to("chat/messages/search");
    assert_eq!(searches[0]["userId"], "u1");
}

#[tokio::test]
async fn users_emojis_and_reactions() {
    let fake = FakeMisskey::start().await;
    let adapter = fake.adapter(vec![]).await;
    let info = adapter
        .user_info(&"chat:u1".into(), &"u1".into())
        .await
        .expect("user");
    assert_eq!(
        (info.username.as_str(), info.display_name.as_str()),
        ("alice", "Alice")
    );
    let bob = adapter
        .user_info(&"chat:u2".into(), &"u2".into())
        .await
        .expect("user");
    assert_eq!(bob.display_name, "bob");
    let err = adapter
        .user_info(&"chat:u1".into(), &"nobody".into())
        .await
        .expect_err("missing");
    assert!(matches!(err, PlatformError::NotFound(_)), "{err}");

    let emojis = adapter
        .custom_emojis(&"note:abc".into())
        .await
        .expect("emojis");
    let names: Vec<&str> = emojis.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names, vec!["blobcat", "party"]);

    let note = fake.create_note("u1", "react to me", NoteOpts::default());
    let channel: ChannelId = format!("note:{}", id(&note)).into();
    let thumbs: ReactionEmoji = "👍".parse().expect("emoji");
    let blob: ReactionEmoji = ":blobcat:".parse().expect("emoji");
    adapter
        .add_reaction(&channel, &id(&note).into(), &blob)
        .await
        .expect("react");
    adapter
        .add_reaction(&channel, &id(&note).into(), &blob)
        .await
        .expect("idempotent");
    assert_eq!(fake.note_reaction(&id(&note)).as_deref(), Some(":blobcat:"));
    adapter
        .remove_reaction(&channel, &id(&note).into(), &blob)
        .await
        .expect("unreact");
    adapter
        .remove_reaction(&channel, &id(&note).into(), &blob)
        .await
        .expect("idempotent");
    assert_eq!(fake.note_reaction(&id(&note)), None);

    let chat = fake.create_chat("u1", BOT_ID, "hi");
    adapter
        .add_reaction(&"chat:u1".into(), &id(&chat).into(), &thumbs)
        .await
        .expect("react");
    assert_eq!(fake.chat_reactions(&id(&chat)), vec!["👍"]);
    adapter
        .remove_reaction(&"chat:u1".into(), &id(&chat).into(), &thumbs)
        .await
        .expect("unreact");
    assert!(fake.chat_reactions(&id(&chat)).is_empty());
}

#[tokio::test]
async fn files_in_a_note_thread_go_out_as_one_note() {
    let fake = FakeMisskey::start().await;
    let adapter = fake.adapter(vec![]).await;
    let trigger = fake.create_note(
        "u1",
        "send me files",
        NoteOpts::visibility("specified").visible_to(&[BOT_ID]),
    );
    let files = vec![
        OutgoingFile::from_bytes("a.txt", b"alpha".to_vec()).with_mime("text/plain"),
        OutgoingFile::from_bytes("b.png", vec![0u8; 64]).with_mime("image/png"),
    ];
    let delivery = adapter
        .send_files(
            &format!("note:{}", id(&trigger)).into(),
            files,
            Some("here you go"),
            None,
        )
        .await
        .expect("delivered");
    assert_eq!(delivery.messages.len(), 1);
    assert!(delivery.failed.is_empty());
    let uploads = fake.calls_to("drive/files/create");
    assert_eq!(uploads.len(), 2);
    assert_eq!(uploads[0]["file"]["filename"], "a.txt");
    assert_eq!(uploads[0]["file"]["size"], 5);
    assert_eq!(uploads[1]["file"]["type"], "image/png");
    let note = fake
        .note(delivery.messages[0].message_id.as_str())
        .expect("note");
    assert_eq!(note["text"], "here you go");
    assert_eq!(note["files"].as_array().map(Vec::len), Some(2));
    assert_eq!(note["visibility"], "specified");
    assert_eq!(note["replyId"], id(&trigger));
}

#[tokio::test]
async fn chat_files_go_one_per_message_and_a_failure_is_a_partial_delivery() {
    let fake = FakeMisskey::start().await;
    let adapter = fake.adapter(vec![]).await;
    fake.script(
        "chat/messages/create-to-user",
        vec![
            None,
            Some(FakeError::new(400, "NO_SUCH_FILE", "No such file.")),
            None,
        ],
    );
    let files = vec![
        OutgoingFile::from_bytes("one.txt", b"1".to_vec()),
        OutgoingFile::from_bytes("two.txt", b"22".to_vec()),
        OutgoingFile::from_bytes("three.txt", b"333".to_vec()),
    ];
    let delivery = adapter
        .send_files(&"chat:u1".into(), files, Some("your files"), None)
        .await
        .expect("partially delivered");
    assert_eq!(delivery.messages.len(), 2);
    assert_eq!(delivery.failed.len(), 1);
    assert_eq!(delivery.failed[0].filename, "two.txt");
    let sends = fake.calls_to("chat/messages/create-to-user");
    assert_eq!(sends.len(), 3);
    assert_eq!(sends[0]["text"], "your files");
    assert!(sends[1].get("text").is_none() && sends[2].get("text").is_none());
    // The upload of the failed file was removed; the delivered ones stay.
    let deleted = fake.calls_to("drive/files/delete");
    assert_eq!(deleted, vec![json!({"fileId": sends[1]["fileId"]})]);
    let names: Vec<_> = fake
        .drive_files()
        .iter()
        .map(|f| f["name"].clone())
        .collect();
    assert_eq!(names, vec![json!("one.txt"), json!("three.txt")]);
}

#[tokio::test]
async fn chat_files_that_all_fail_are_an_error_and_leave_no_uploads() {
    let fake = FakeMisskey::start().await;
    let adapter = fake.adapter(vec![]).await;
    fake.script(
        "chat/messages/create-to-user",
        vec![Some(FakeError::new(
            400,
            "YOU_HAVE_BEEN_BLOCKED",
            "Blocked.",
        ))],
    );
    let files = vec![
        OutgoingFile::from_bytes("one.txt", b"1".to_vec()),
        OutgoingFile::from_bytes("two.txt", b"2".to_vec()),
    ];
    let err = adapter
        .send_dm_files(&"u1".into(), files, None)
        .await
        .expect_err("blocked");
    assert!(matches!(err, PlatformError::Forbidden(_)), "{err}");
    assert_eq!(
        fake.calls_to("drive/files/create").len(),
        1,
        "stopped after the block"
    );
    assert!(fake.drive_files().is_empty());
}

#[tokio::test]
async fn a_rate_limit_is_retried_after_back_off() {
    let fake = FakeMisskey::start().await;
    let adapter = fake.adapter(vec![]).await;
    fake.rate_limit("chat/messages/create-to-user", 2);
    let started = std::time::Instant::now();
    adapter
        .send_dm(&"u1".into(), "eventually")
        .await
        .expect("sent after retries");
    assert_eq!(fake.calls_to("chat/messages/create-to-user").len(), 3);
    assert_eq!(fake.chat_messages().len(), 1);
    // Two back-offs of at least half their 20 ms / 40 ms ceilings.
    assert!(started.elapsed() >= Duration::from_millis(30));
}

#[tokio::test]
async fn a_persistent_rate_limit_surfaces_as_rate_limited() {
    let fake = FakeMisskey::start().await;
    let adapter = fake.adapter(vec![]).await;
    fake.rate_limit("chat/messages/create-to-user", 10);
    let err = adapter
        .send_dm(&"u1".into(), "never")
        .await
        .expect_err("rate limited");
    assert!(matches!(err, PlatformError::RateLimited { .. }), "{err}");
    assert!(err.is_retryable());
    assert!(err.retry_after().is_some_and(|d| d > Duration::ZERO));
    assert_eq!(fake.calls_to("chat/messages/create-to-user").len(), 4);
    assert!(fake.chat_messages().is_empty());
}

#[tokio::test]
async fn bad_input_fails_before_any_request() {
    let fake = FakeMisskey::start().await;
    let adapter = fake.adapter(vec![]).await;
    let calls_before = fake.calls().len();
    for channel in ["", "note:", "dm:u1", "note:a/b", "chat:u1?x"] {
        let err = adapter
            .send_message(&channel.into(), "hi", None)
            .await
            .expect_err("invalid");
        assert!(
            matches!(err, PlatformError::InvalidId(_)),
            "{channel}: {err}"
        );
    }
    let err = adapter
        .send_message(&"note:n1".into(), "hi", Some(&"../x".into()))
        .await
        .expect_err("anchor");
    assert!(matches!(err, PlatformError::InvalidId(_)), "{err}");
    let err = adapter
        .send_message(&"chat:u1".into(), "  ", None)
        .await
        .expect_err("empty");
    assert!(matches!(err, PlatformError::InvalidInput(_)), "{err}");
    let long = "x".repeat(2001);
    let err = adapter
        .send_message(&"chat:u1".into(), &long, None)
        .await
        .expect_err("too long");
    assert!(matches!(err, PlatformError::InvalidInput(_)), "{err}");
    let err = adapter
        .send_files(&"chat:u1".into(), vec![], None, None)
        .await
        .expect_err("no files");
    assert!(matches!(err, PlatformError::InvalidInput(_)), "{err}");
    assert_eq!(fake.calls().len(), calls_before);
    // A 2001-character text is fine in a note thread (limit 3000).
    let note = fake.create_note("u1", "long please", NoteOpts::default());
    adapter
        .send_message(&format!("note:{}", id(&note)).into(), &long, None)
        .await
        .expect("fits a note");
}

#[tokio::test]
async fn missing_notes_are_not_found() {
    let fake = FakeMisskey::start().await;
    let adapter = fake.adapter(vec![]).await;
    let err = adapter
        .send_message(&"note:nothere".into(), "hi", None)
        .await
        .expect_err("missing");
    assert!(matches!(err, PlatformError::NotFound(_)), "{err}");
    let err = adapter
        .recent_messages(&"note:nothere".into(), 5)
        .await
        .expect_err("missing");
    assert!(matches!(err, PlatformError::NotFound(_)), "{err}");
}

#[tokio::test]
async fn a_wrong_token_is_forbidden_and_never_echoed() {
    let fake = FakeMisskey::start().await;
    let mut config = fake.config();
    config.token = Secret::new("wrong-token-XYZ");
    let adapter = MisskeyAdapter::new(&config, reqwest::Client::new(), vec![])
        .expect("adapter")
        .with_options(fast_options());
    let err = adapter.identify().await.expect_err("rejected");
    assert!(matches!(err, PlatformError::Forbidden(_)), "{err}");
    assert!(!err.to_string().contains("wrong-token-XYZ"));
    assert!(!format!("{err:?}").contains("wrong-token-XYZ"));
}

#[tokio::test]
async fn transport_errors_are_transport_and_token_free() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    drop(listener);
    let mut config = FakeMisskey::start().await.config();
    config.host = addr.to_string();
    let adapter = MisskeyAdapter::new(&config, reqwest::Client::new(), vec![])
        .expect("adapter")
        .with_options(fast_options());
    let err = adapter
        .send_dm(&"u1".into(), "hello")
        .await
        .expect_err("unreachable");
    assert!(matches!(err, PlatformError::Transport(_)), "{err}");
    assert!(err.is_retryable());
    assert!(!err.to_string().contains(TOKEN), "{err}");
}

#[tokio::test]
async fn missed_mentions_replies_and_chats_are_read_back_after_the_cursor() {
    let fake = FakeMisskey::start().await;
    let adapter = fake.adapter(vec![]).await;
    let cursor = fake.create_note("u1", "@airfriends seen before the gap", NoteOpts::default());
    let bot_note = fake.create_note(BOT_ID, "the bot's own note", NoteOpts::default());
    let mention = fake.create_note("u1", "@airfriends are you there?", NoteOpts::default());
    fake.create_note("u2", "nothing for the bot", NoteOpts::default());
    let reply = fake.create_note(
        "u2",
        "a reply without a mention",
        NoteOpts::default().reply_to(&id(&bot_note)),
    );
    let feed = adapter.catch_up_feed(&format!("note:{}", id(&cursor)).into());
    assert_eq!(
        feed.as_str(),
        "mentions",
        "every note thread is read through the notifications"
    );
    let missed = adapter
        .missed_messages(&feed, &id(&cursor).as_str().into(), 100)
        .await
        .expect("read back");
    let ids: Vec<&str> = missed
        .messages
        .iter()
        .map(|m| m.message_id.as_str())
        .collect();
    assert_eq!(ids, vec![id(&mention), id(&reply)], "oldest first");
    assert!(missed.messages[0].mentions_bot && missed.messages[1].replied_to_bot);
    assert_eq!(
        missed.messages[1].channel_id,
        format!("note:{}", id(&reply))
    );
    let asked = fake.calls_to("i/notifications");
    assert_eq!(asked[0]["sinceId"], json!(id(&cursor)));
    assert_eq!(
        asked[0]["markAsRead"],
        json!(false),
        "the catch-up marks nothing read"
    );

    // A chat is its own feed, read from its cursor; the bot's own messages are left out.
    let first = fake.create_chat("u1", BOT_ID, "seen");
    fake.create_chat(BOT_ID, "u1", "the bot's answer");
    let later = fake.create_chat("u1", BOT_ID, "are you back?");
    let chat = adapter.catch_up_feed(&"chat:u1".into());
    assert_eq!(chat.as_str(), "chat:u1");
    let missed = adapter
        .missed_messages(&chat, &id(&first).as_str().into(), 100)
        .await
        .expect("read back");
    let ids: Vec<&str> = missed
        .messages
        .iter()
        .map(|m| m.message_id.as_str())
        .collect();
    assert_eq!(ids, vec![id(&later)]);
    assert!(missed.messages[0].is_dm && !missed.more);

    // More than fit: the newest are kept, oldest first, and `more` says so.
    let many: Vec<String> = (0..30)
        .map(|i| id(&fake.create_chat("u1", BOT_ID, &format!("n{i}"))))
        .collect();
    let missed = adapter
        .missed_messages(&chat, &id(&later).as_str().into(), 10)
        .await
        .expect("read back");
    assert!(missed.more);
    let ids: Vec<&str> = missed
        .messages
        .iter()
        .map(|m| m.message_id.as_str())
        .collect();
    let newest: Vec<&str> = many[20..].iter().map(String::as_str).collect();
    assert_eq!(ids, newest);

    // A malformed cursor never reaches Misskey.
    let before = fake.calls().len();
    let bad = adapter
        .missed_messages(&chat, &"../x".into(), 10)
        .await
        .expect_err("invalid");
    assert!(matches!(bad, PlatformError::InvalidId(_)), "{bad:?}");
    assert_eq!(fake.calls().len(), before);
}
