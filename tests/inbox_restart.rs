//! Nothing lost, nothing twice across restarts (issue 31), with the real binary on the fake
//! Discord and the scripted fake agent: a message whose turn was cut by `kill -9` is answered
//! once after the restart; restarting again (twice, quickly) answers nothing a second time; a
//! crash after the answer, while the agent still works, does not answer it again; a
//! message older than `catchUp.maxAgeMinutes` at the restart is recorded as skipped, too old,
//! and not answered.

mod common;

use std::path::Path;
use std::time::Duration;

use common::fake_discord::CHANNEL_ID;
use common::poll::eventually;
use common::serve_discord::{DiscordServe, DiscordSetup, one_turn, reply_steps, text_path};
use serde_json::{Value, json};

/// The answer the agent sends.
const ANSWER: &str = "Here I am, after the restart.";

/// A turn that hangs the first time it runs (marking `flag`), and answers every later time.
fn hangs_once_then_answers(files: &Path) -> Value {
    let flag = files.join("first-turn-started");
    let mut steps = vec![json!({"run": format!(
        "if [ ! -e '{flag}' ]; then touch '{flag}'; sleep 60; fi",
        flag = flag.display()
    )})];
    steps.extend(reply_steps(&text_path(files, "answer.txt")));
    one_turn(steps)
}

async fn bot(catch_up: &str) -> DiscordServe {
    DiscordServe::start(|files| DiscordSetup {
        script: hangs_once_then_answers(files),
        texts: vec![("answer.txt", ANSWER.to_owned())],
        extra_yaml: catch_up.to_owned(),
        ..DiscordSetup::default()
    })
    .await
}

/// Waits until the first turn's agent is running (its flag file exists).
async fn first_turn_running(bot: &DiscordServe) {
    let flag = bot.files.path().join("first-turn-started");
    eventually(Duration::from_secs(60), "the first turn runs", || {
        flag.exists()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_cut_by_a_crash_is_answered_once_after_the_restart() {
    let mut bot = bot("").await;
    bot.mention("are you there?");
    first_turn_running(&bot).await;
    bot.restart(true).await;
    let replies = bot.wait_bot_messages(CHANNEL_ID, 1).await;
    assert_eq!(replies[0].content, ANSWER);
    let metrics = bot.metrics().await;
    assert!(
        metrics.contains(r#"air_friends_inbox_messages_total{state="queued",reason="resumed"} 1"#),
        "{metrics}"
    );

    // Two quick restarts: the message is settled, nothing is answered again.
    bot.restart(false).await;
    bot.restart(true).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(bot.bot_messages(CHANNEL_ID).len(), 1, "answered twice");
    bot.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_too_old_at_the_restart_is_skipped_and_not_answered() {
    let mut bot = bot("catchUp:\n  maxAgeMinutes: 0\n").await;
    bot.mention("are you there?");
    first_turn_running(&bot).await;
    bot.restart(true).await;
    let skipped = bot.logged_or_wait(|l| {
        l["message"] == "a message left unanswered at the last stop is not answered"
    });
    assert_eq!(skipped["reason"], "too_old", "{skipped}");
    let metrics = bot.metrics().await;
    assert!(
        metrics.contains(r#"air_friends_inbox_messages_total{state="skipped",reason="too_old"} 1"#),
        "{metrics}"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(bot.bot_messages(CHANNEL_ID).is_empty(), "answered anyway");
    bot.stop();
}

/// A turn that answers, then keeps working (hangs) the first time it runs (marking `flag`).
fn answers_then_hangs_once(files: &Path) -> Value {
    let flag = files.join("first-turn-started");
    let mut steps = reply_steps(&text_path(files, "answer.txt"));
    steps.push(json!({"run": format!(
        "if [ ! -e '{flag}' ]; then touch '{flag}'; sleep 60; fi",
        flag = flag.display()
    )}));
    one_turn(steps)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_after_the_answer_does_not_answer_the_message_again() {
    let mut bot = DiscordServe::start(|files| DiscordSetup {
        script: answers_then_hangs_once(files),
        texts: vec![("answer.txt", ANSWER.to_owned())],
        ..DiscordSetup::default()
    })
    .await;
    bot.mention("are you there?");
    bot.wait_bot_messages(CHANNEL_ID, 1).await;
    first_turn_running(&bot).await;
    // The agent is still working after its answer: the message is answered already.
    let store = bot.config.dir.path().join("data").join("air-friends.db");
    eventually(
        Duration::from_secs(30),
        "the message marked answered",
        || answered_in(&store) == 1,
    )
    .await;
    bot.restart(true).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(bot.bot_messages(CHANNEL_ID).len(), 1, "answered twice");
    let metrics = bot.metrics().await;
    assert!(
        !metrics.contains(r#"reason="resumed"} 1"#),
        "handed back after the restart: {metrics}"
    );
    bot.stop();
}

/// How many inbox records of `db` are `answered` (read beside the running daemon).
fn answered_in(db: &Path) -> i64 {
    let Ok(conn) =
        rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
    else {
        return 0;
    };
    conn.query_row(
        "SELECT count(*) FROM inbox WHERE state = 'answered'",
        [],
        |r| r.get(0),
    )
    .unwrap_or(0)
}
