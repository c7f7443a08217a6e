//! send-file through the real Skill API router: preflight (every escape kind, every limit, all or
//! nothing), the reply anchor after a file, the per-session quota and doom-loop termination,
//! partial delivery in Misskey chats, and captions through the content pipeline.

mod handlers_support;

use std::os::unix::fs::symlink;
use std::path::Path;

use air_friends::handlers::{FileSlot, ReplySlot};
use air_friends::platform::fake::{Call, Op};
use air_friends::platform::{FileSource, PlatformError};
use handlers_support::{App, Options, Session, app, app_with};
use serde_json::{Value, json};

fn write(path: &Path, bytes: usize) {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).expect("mkdir");
    }
    std::fs::write(path, vec![b'x'; bytes]).expect("write");
}

fn ws(s: &Session) -> &Path {
    &s.context.workspace
}

async fn send(app: &App, s: &Session, params: Value) -> handlers_support::SkillResponse {
    app.call(s, "send-file", params).await
}

#[tokio::test]
async fn a_file_is_threaded_to_the_trigger_and_the_reply_threads_under_the_file() {
    let app = app().await;
    let s = app.guild_session("u1");
    write(&ws(&s).join("out/chart.png"), 1000);
    let r = send(
        &app,
        &s,
        json!({"filePaths": ["out/chart.png"], "caption": "<caption>The chart\\nas asked</caption>"}),
    )
    .await;
    let data = r.data().clone();
    let delivery = &app.discord.file_deliveries()[0];
    assert_eq!(delivery.filenames, vec!["chart.png"]);
    assert_eq!(delivery.caption.as_deref(), Some("The chart\nas asked"));
    assert_eq!(delivery.reply_to.as_deref(), Some(s.trigger().as_str()));
    assert_eq!(data["messageId"], delivery.message_ids[0]);
    assert_eq!(data["messageIds"], json!(delivery.message_ids));
    assert_eq!(data["filesCount"], 1);
    assert!(
        data["nextAction"]
            .as_str()
            .is_some_and(|a| a.contains("send-reply")),
        "{data}"
    );
    // The bytes that went out are the file's.
    let Some(Call::SendFiles { files, .. }) = app.discord.calls_of(Op::SendFiles).pop() else {
        panic!("no send_files call");
    };
    assert!(matches!(&files[0].source, FileSource::Bytes(b) if b.len() == 1000));
    // A file counts as a response but leaves the reply quota alone.
    let handle = &s.registered.handle;
    assert!(handle.responded());
    assert_eq!(handle.with_slot(|r: &mut ReplySlot| r.successes), 0);
    assert_eq!(
        handle
            .with_slot(|f: &mut FileSlot| f.last_message_id.as_ref().map(ToString::to_string))
            .as_deref(),
        Some(delivery.message_ids[0].as_str())
    );
    // The reply anchor is now the file message.
    app.call(&s, "send-reply", json!({"message": "Here it is."}))
        .await
        .data();
    let reply = app.discord.sent().pop().expect("reply");
    assert_eq!(
        reply.reply_to.as_deref(),
        Some(delivery.message_ids[0].as_str())
    );
    assert!(
        s.registered
            .handle
            .with_slot(|r: &mut ReplySlot| r.last_sent_message_id.is_some())
    );
    assert_eq!(
        s.registered
            .handle
            .with_slot(|f: &mut FileSlot| f.last_message_id.as_ref().map(ToString::to_string))
            .as_deref(),
        Some(delivery.message_ids[0].as_str()),
        "send-reply never moves lastFileMessageId"
    );
}

#[tokio::test]
async fn escapes_are_refused_and_nothing_is_sent() {
    let app = app().await;
    let probe = app.guild_session("u1");
    let root = ws(&probe).parent().expect("platform dir").to_path_buf();
    write(&ws(&probe).join("ok.txt"), 10);
    write(&root.join("u10/secret.txt"), 10);
    write(&root.join("other/secret.txt"), 10);
    symlink(root.join("other/secret.txt"), ws(&probe).join("link.txt")).expect("symlink");
    symlink(root.join("u10"), ws(&probe).join("sibling")).expect("symlink");
    let absolute = ws(&probe).join("ok.txt").display().to_string();
    let cases = [
        (json!([absolute]), "/filePaths/0", "absolute"),
        (json!(["../other/secret.txt"]), "/filePaths/0", ".."),
        (json!(["link.txt"]), "/filePaths/0", "outside"),
        (json!(["sibling/secret.txt"]), "/filePaths/0", "outside"),
        (json!(["ok.txt", "../u10/secret.txt"]), "/filePaths/1", ".."),
        (
            json!(["ok.txt", "missing.txt"]),
            "/filePaths/1",
            "does not exist",
        ),
    ];
    for (paths, pointer, words) in cases {
        // A fresh session per case: failed calls still count towards the doom-loop limit.
        let s = app.guild_session("u1");
        let r = send(&app, &s, json!({ "filePaths": paths })).await;
        assert_eq!(r.error(400), "INVALID_PARAMS", "{paths}");
        assert_eq!(r.body["details"][0]["path"], pointer, "{paths}");
        let problem = r.body["details"][0]["problem"].as_str().unwrap_or_default();
        assert!(problem.contains(words), "{paths}: {problem}");
        assert!(!s.registered.handle.responded());
    }
    assert_eq!(app.discord.call_count(Op::SendFiles), 0, "nothing was sent");
}

#[tokio::test]
async fn size_count_total_and_extension_limits_are_checked_before_sending() {
    let mut options = Options::default();
    options.skills.send_file.max_file_size_mb = 1;
    options.skills.send_file.max_total_size_mb = 1;
    options.skills.send_file.max_files_per_invocation = 2;
    options.skills.send_file.allowed_extensions = vec!["png".into()];
    let app = app_with(options).await;
    let probe = app.guild_session("u1");
    let mib = 1024 * 1024;
    write(&ws(&probe).join("big.png"), mib + 1);
    write(&ws(&probe).join("a.png"), mib * 6 / 10);
    write(&ws(&probe).join("b.png"), mib * 6 / 10);
    write(&ws(&probe).join("c.png"), 10);
    write(&ws(&probe).join("notes.txt"), 10);
    let cases = [
        (json!(["big.png"]), "per-file limit"),
        (json!(["a.png", "b.png"]), "total"),
        (json!(["c.png", "c.png", "c.png"]), "at most 2"),
        (json!(["c.png", "notes.txt"]), "extension"),
    ];
    for (paths, words) in cases {
        let s = app.guild_session("u1");
        let r = send(&app, &s, json!({ "filePaths": paths })).await;
        assert_eq!(r.error(400), "INVALID_PARAMS", "{paths}");
        assert!(
            r.body["details"][0]["problem"]
                .as_str()
                .is_some_and(|p| p.contains(words)),
            "{paths}: {}",
            r.body
        );
    }
    assert_eq!(app.discord.call_count(Op::SendFiles), 0);
    let s = app.guild_session("u1");
    send(&app, &s, json!({"filePaths": ["a.png", "c.png"]}))
        .await
        .data();
}

#[tokio::test]
async fn one_delivery_per_session_and_the_fourth_attempt_terminates() {
    let app = app().await;
    let s = app.guild_session("u1");
    for name in ["a.txt", "b.txt", "c.txt", "d.txt"] {
        write(&ws(&s).join(name), 5);
    }
    send(&app, &s, json!({"filePaths": ["a.txt"]})).await.data();
    for name in ["b.txt", "c.txt"] {
        let r = send(&app, &s, json!({ "filePaths": [name] })).await;
        assert_eq!(r.error(429), "QUOTA_EXCEEDED");
        assert!(!s.terminated());
    }
    let r = send(&app, &s, json!({"filePaths": ["d.txt"]})).await;
    assert_eq!(r.error(429), "QUOTA_EXCEEDED");
    assert!(
        s.terminated(),
        "4th send-file attempt terminates after responding"
    );
    assert_eq!(app.discord.file_deliveries().len(), 1);
}

#[tokio::test]
async fn misskey_chat_partial_delivery_reports_the_delivered_ids() {
    let app = app().await;
    app.misskey.add_user("u1", "alice", "Alice");
    let incoming = app.misskey.push_incoming_dm("u1", "send me both");
    let s = app.session_for(&incoming);
    write(&ws(&s).join("a.png"), 5);
    write(&ws(&s).join("b.png"), 5);
    app.misskey.fail_file(
        "b.png",
        PlatformError::Api {
            status: 500,
            code: Some("INTERNAL_ERROR".into()),
            message: "upload failed".into(),
        },
    );
    let r = send(
        &app,
        &s,
        json!({"filePaths": ["a.png", "b.png"], "caption": "two files"}),
    )
    .await;
    let data = r.data().clone();
    assert_eq!(data["partial"], true);
    assert_eq!(data["filesCount"], 1);
    assert_eq!(data["failedFiles"][0]["filename"], "b.png");
    let delivered = app.misskey.file_deliveries();
    assert_eq!(delivered[0].filenames, vec!["a.png"]);
    assert_eq!(data["messageIds"], json!(delivered[0].message_ids));
    assert!(s.registered.handle.responded());
    assert_eq!(
        s.registered
            .handle
            .with_slot(|f: &mut FileSlot| f.last_message_id.as_ref().map(ToString::to_string))
            .as_ref(),
        delivered[0].message_ids.last()
    );
}

#[tokio::test]
async fn a_platform_failure_sends_nothing_and_leaves_the_quota() {
    let app = app().await;
    let s = app.guild_session("u1");
    write(&ws(&s).join("a.txt"), 5);
    app.discord
        .fail_next(Op::SendFiles, PlatformError::Transport("timeout".into()));
    let r = send(&app, &s, json!({"filePaths": ["a.txt"], "caption": "one"})).await;
    assert_eq!(r.error(502), "PLATFORM_ERROR");
    assert_eq!(r.body["retryable"], true);
    assert!(!s.registered.handle.responded());
    send(&app, &s, json!({"filePaths": ["a.txt"], "caption": "two"}))
        .await
        .data();
}

#[tokio::test]
async fn sessions_without_a_trigger_cannot_send_files() {
    let app = app().await;
    let s = app.triggerless_session("u1", true);
    write(&ws(&s).join("a.txt"), 5);
    let r = send(&app, &s, json!({"filePaths": ["a.txt"]})).await;
    assert_eq!(r.error(403), "FORBIDDEN_CONTEXT");
    assert_eq!(app.discord.call_count(Op::SendFiles), 0);
}

#[tokio::test]
async fn a_caption_over_the_limit_continues_in_a_message_under_the_file() {
    let app = app().await;
    let s = app.guild_session("u1");
    write(&ws(&s).join("a.txt"), 5);
    // 1500 emoji = 3000 UTF-16 units: over Discord's 2000 although within the schema's 2000
    // characters.
    let caption = "😀".repeat(1500);
    let data = send(
        &app,
        &s,
        json!({"filePaths": ["a.txt"], "caption": caption}),
    )
    .await
    .data()
    .clone();
    let delivery = &app.discord.file_deliveries()[0];
    let follow = app.discord.sent();
    assert_eq!(follow.len(), 1);
    assert_eq!(follow[0].reply_to.as_ref(), delivery.message_ids.last());
    let total: usize = delivery.caption.as_deref().map_or(0, |c| c.chars().count())
        + follow[0].text.chars().count();
    assert_eq!(total, 1500, "nothing truncated");
    assert_eq!(data["messageIds"].as_array().map(Vec::len), Some(2));
}

#[tokio::test]
async fn fifos_and_hard_links_are_refused_at_once_and_nothing_is_sent() {
    let app = app().await;
    let probe = app.guild_session("u1");
    let root = ws(&probe).parent().expect("platform dir").to_path_buf();
    let made = std::process::Command::new("mkfifo")
        .arg(ws(&probe).join("pipe.txt"))
        .status()
        .expect("mkfifo");
    assert!(made.success());
    write(&root.join("other/secret.txt"), 10);
    std::fs::hard_link(root.join("other/secret.txt"), ws(&probe).join("h.txt")).expect("link");
    write(&ws(&probe).join("ok.txt"), 10);
    for (paths, pointer, words) in [
        (json!(["ok.txt", "pipe.txt"]), "/filePaths/1", "FIFO"),
        (json!(["h.txt"]), "/filePaths/0", "hard links"),
    ] {
        let s = app.guild_session("u1");
        let call = send(&app, &s, json!({ "filePaths": paths }));
        let r = tokio::time::timeout(std::time::Duration::from_secs(10), call)
            .await
            .expect("send-file blocked on a special file");
        assert_eq!(r.error(400), "INVALID_PARAMS", "{paths}");
        assert_eq!(r.body["details"][0]["path"], pointer, "{paths}");
        let problem = r.body["details"][0]["problem"].as_str().unwrap_or_default();
        assert!(problem.contains(words), "{paths}: {problem}");
    }
    assert_eq!(app.discord.call_count(Op::SendFiles), 0, "nothing was sent");
}

#[tokio::test]
async fn private_files_are_refused_in_a_guild_and_sent_from_a_dm() {
    let app = app().await;
    let guild = app.guild_session("u1");
    write(&ws(&guild).join("private/notes.txt"), 10);
    symlink(
        ws(&guild).join("private/notes.txt"),
        ws(&guild).join("notes.txt"),
    )
    .expect("symlink");
    for path in ["private/notes.txt", "notes.txt"] {
        let s = app.guild_session("u1");
        let r = send(&app, &s, json!({ "filePaths": [path] })).await;
        assert_eq!(r.error(400), "INVALID_PARAMS", "{path}");
        let problem = r.body["details"][0]["problem"].as_str().unwrap_or_default();
        assert!(problem.contains("private folder"), "{path}: {problem}");
    }
    assert_eq!(app.discord.call_count(Op::SendFiles), 0);
    let dm = app.dm_session("u1");
    assert_eq!(ws(&dm), ws(&guild), "one workspace per user");
    send(&app, &dm, json!({"filePaths": ["private/notes.txt"]}))
        .await
        .data();
    assert_eq!(
        app.discord.file_deliveries()[0].filenames,
        vec!["notes.txt"]
    );
}
