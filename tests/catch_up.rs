//! The catch-up after a gap (issue 31), with the real binary on the fake Discord and the
//! scripted fake agent: messages sent while the daemon was stopped are answered once, in order,
//! after the start, and not again after further restarts; one older than
//! `catchUp.maxAgeMinutes` is recorded as skipped and not answered; a gateway connection that
//! could not resume starts a catch-up and a resume does not; fifty missed messages in one
//! channel (after a crash) get at most `catchUp.maxPerChannel` (5) answers, within Discord's limit on messages
//! per channel (5 per 5 s, enforced by the fake).

mod common;

use std::time::Duration;

use chrono::Utc;
use common::fake_discord::{BOT_ID, CHANNEL_ID, DM_CHANNEL_ID, Recorded, USER_ID, user};
use common::poll::eventually_async;
use common::serve_discord::{DiscordServe, DiscordSetup, WAIT, one_turn, reply_steps, text_path};

/// What the agent answers, every turn.
const ANSWER: &str = "Sorry, I was away. Here I am.";

async fn bot(extra_yaml: &str) -> DiscordServe {
    DiscordServe::start(|files| DiscordSetup {
        script: one_turn(reply_steps(&text_path(files, "answer.txt"))),
        texts: vec![("answer.txt", ANSWER.to_owned())],
        extra_yaml: extra_yaml.to_owned(),
        ..DiscordSetup::default()
    })
    .await
}

/// The message each of the bot's posts in `channel` replies to, in the order posted.
fn answered(bot: &DiscordServe, channel: &str) -> Vec<String> {
    bot.message_posts(channel)
        .iter()
        .filter_map(|r: &Recorded| r.json.as_ref())
        .filter_map(|j| j["message_reference"]["message_id"].as_str())
        .map(str::to_owned)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_sent_while_the_bot_was_stopped_are_answered_once_in_order() {
    let mut bot = bot("").await;
    // The bot is addressed in a channel and by DM: both are followed from now on.
    let live_mention = bot.mention("hello");
    let live_dm = bot.dm("hi");
    bot.wait_bot_messages(CHANNEL_ID, 1).await;
    bot.wait_bot_messages(DM_CHANNEL_ID, 1).await;

    bot.shut_down();
    let now = Utc::now();
    let too_old = bot.sent_while_away(
        CHANNEL_ID,
        &format!("<@{BOT_ID}> this was an hour ago"),
        now - chrono::Duration::minutes(60),
    );
    let first = bot.sent_while_away(CHANNEL_ID, &format!("<@{BOT_ID}> first while away"), now);
    bot.sent_while_away(CHANNEL_ID, "just chatting, not to the bot", now);
    let second = bot.sent_while_away(CHANNEL_ID, &format!("<@{BOT_ID}> second while away"), now);
    let dm = bot.sent_while_away(DM_CHANNEL_ID, "are you back?", now);
    bot.start_again().await;

    bot.wait_bot_messages(CHANNEL_ID, 3).await;
    bot.wait_bot_messages(DM_CHANNEL_ID, 2).await;
    let caught = bot.logged_or_wait(|l| {
        l["message"] == "caught up on messages sent while away" && l["read"].as_u64() == Some(5)
    });
    assert_eq!(caught["trigger"], "start", "{caught}");
    assert_eq!(caught["too_old"], 1, "{caught}");
    let metrics = bot.metrics().await;
    assert!(
        metrics
            .contains(r#"air_friends_catch_up_runs_total{platform="discord",trigger="start"} 1"#),
        "{metrics}"
    );
    assert_eq!(
        common::metric_sample(
            &metrics,
            r#"air_friends_catch_up_messages_total{platform="discord",decision="queued"}"#
        ),
        3.0
    );
    assert!(
        metrics.contains(r#"air_friends_inbox_messages_total{state="skipped",reason="too_old"} 1"#),
        "{metrics}"
    );
    // Two quick restarts (one clean, one crash) with the same history: nothing twice.
    bot.restart(false).await;
    bot.restart(true).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        answered(&bot, CHANNEL_ID),
        vec![live_mention, first, second],
        "each answered once, in order; the hour-old one ({too_old}) and the chatter not at all"
    );
    assert_eq!(answered(&bot, DM_CHANNEL_ID), vec![live_dm, dm]);
    bot.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_session_catches_up_and_a_resume_does_not() {
    let bot = bot("").await;
    bot.mention("hello");
    bot.wait_bot_messages(CHANNEL_ID, 1).await;

    // A blip: serenity resumes the session, which replays what was missed (this fake does not
    // replay, so the message sent meanwhile stays unanswered until a catch-up).
    bot.fake.drop_connection();
    bot.fake.wait_gateway(WAIT, |_, resumes| resumes >= 1).await;
    let during_blip = bot.sent_while_away(
        CHANNEL_ID,
        &format!("<@{BOT_ID}> sent during the blip"),
        Utc::now(),
    );
    bot.wait_readiness(true).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let metrics = bot.metrics().await;
    assert_eq!(
        common::metric_sample(
            &metrics,
            r#"air_friends_catch_up_runs_total{platform="discord",trigger="reconnect"}"#
        ),
        0.0,
        "a resume is not a new session"
    );
    assert!(!answered(&bot, CHANNEL_ID).contains(&during_blip));

    // An outage the session cannot survive: a new session (READY) starts a catch-up.
    bot.fake.set_gateway_refusing(true);
    bot.fake.drop_connection();
    bot.wait_readiness(false).await;
    let during_outage = bot.sent_while_away(
        CHANNEL_ID,
        &format!("<@{BOT_ID}> sent during the outage"),
        Utc::now(),
    );
    bot.fake.set_gateway_refusing(false);
    bot.fake
        .wait_gateway(Duration::from_secs(60), |identifies, _| identifies >= 2)
        .await;
    bot.wait_bot_messages(CHANNEL_ID, 3).await;
    let replied = answered(&bot, CHANNEL_ID);
    assert_eq!(&replied[1..], &[during_blip, during_outage]);
    let metrics = bot.metrics().await;
    assert_eq!(
        common::metric_sample(
            &metrics,
            r#"air_friends_catch_up_runs_total{platform="discord",trigger="reconnect"}"#
        ),
        1.0
    );
    bot.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_missed_messages_get_at_most_the_configured_answers_within_the_rate_limit() {
    let mut bot = bot("").await;
    bot.mention("hello");
    bot.wait_bot_messages(CHANNEL_ID, 1).await;
    // The turn has settled (a crash before that would answer "hello" again after the start).
    eventually_async(WAIT, "the live message settled in the inbox", async || {
        bot.metrics()
            .await
            .contains(r#"air_friends_inbox_messages_total{state="answered",reason=""} 1"#)
            .then_some(())
    })
    .await;
    // A crash: the channel's cursor was saved when it was first addressed, not only at a stop.
    bot.crash();
    let missed: Vec<String> = (0..50)
        .map(|i| {
            bot.sent_while_away(
                CHANNEL_ID,
                &format!("<@{BOT_ID}> message {i} while away"),
                Utc::now(),
            )
        })
        .collect();
    // Discord allows 5 messages per 5 s in a channel; this fake enforces it from now on.
    bot.fake.limit_sends(5, Duration::from_secs(5));
    bot.start_again().await;
    bot.logged_or_wait(|l| l["message"] == "caught up on messages sent while away");
    bot.wait_bot_messages(CHANNEL_ID, 6).await;
    let metrics = bot.metrics().await;
    assert_eq!(
        common::metric_sample(
            &metrics,
            r#"air_friends_catch_up_messages_total{platform="discord",decision="skipped"}"#
        ),
        45.0,
        "{metrics}"
    );
    assert!(
        metrics.contains(
            r#"air_friends_inbox_messages_total{state="skipped",reason="catch_up_limit"} 45"#
        ),
        "{metrics}"
    );
    bot.wait_interactions_finished(5);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let replied = answered(&bot, CHANNEL_ID);
    assert_eq!(
        &replied[1..],
        &missed[..5],
        "the five oldest (catchUp.maxPerChannel), in order"
    );
    assert_eq!(bot.fake.send_limit_hits(), 0, "over Discord's limit");
    bot.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_feed_that_cannot_be_read_back_is_reported_and_the_others_are_still_caught_up() {
    let mut bot = bot("").await;
    // The bot is addressed in its channel and in one that is gone by the next start (the fake
    // knows no channel 4999: reading it back is 404 Unknown Channel).
    bot.mention("hello");
    bot.push(
        "4999",
        user(USER_ID, "alice", false),
        &format!("<@{BOT_ID}> in a channel about to be deleted"),
    );
    bot.wait_bot_messages(CHANNEL_ID, 1).await;
    bot.wait_interactions_finished(2);
    bot.shut_down();
    let missed = bot.sent_while_away(CHANNEL_ID, &format!("<@{BOT_ID}> still there?"), Utc::now());
    bot.start_again().await;

    bot.wait_bot_messages(CHANNEL_ID, 2).await;
    assert_eq!(answered(&bot, CHANNEL_ID)[1], missed);
    let failed = bot.logged_or_wait(|l| {
        l["message"] == "cannot read back what was sent while away" && l["feed"] == "4999"
    });
    assert_eq!(
        (failed["level"].as_str(), failed["kind"].as_str()),
        (Some("WARN"), Some("not_found")),
        "{failed}"
    );
    let caught = bot.logged_or_wait(|l| l["message"] == "caught up on messages sent while away");
    assert_eq!(
        (caught["failed_feeds"].as_u64(), caught["answered"].as_u64()),
        (Some(1), Some(1)),
        "{caught}"
    );
    let metrics = bot.metrics().await;
    assert_eq!(
        common::metric_sample(
            &metrics,
            r#"air_friends_catch_up_read_failures_total{platform="discord",kind="not_found"}"#
        ),
        1.0,
        "{metrics}"
    );
    bot.stop();
}
