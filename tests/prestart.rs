//! Agents started ahead of the message, with the real binary, the fake Discord (TYPING_START
//! on its gateway) and the scripted fake ACP agent: a typing DM user's agent is up before the
//! message and the message is prompted on it at once, with the whole first prompt (or, after a
//! restart, only what is new on the resumed session); typing that never becomes a message
//! costs one agent until `idleMs`; typing where a message would not be answered starts
//! nothing; a message typed while its agent starts waits for it; an agent retired after
//! `maxTurns` is followed by a successor.

mod common;

use std::time::Duration;

use common::fake_discord::{CHANNEL_ID, ChannelKind, DM_CHANNEL_ID, GUILD_ID, USER_ID, user};
use common::poll::eventually_async;
use common::serve::skill_script;
use common::serve_discord::{DiscordServe, DiscordSetup, noted_setup};
use serde_json::{Value, json};

fn setup(files: &std::path::Path, script_extra: Value, agent_extra: &str) -> DiscordSetup {
    DiscordSetup {
        agent_extra: agent_extra.to_owned(),
        ..noted_setup(files, script_extra)
    }
}

/// What became of the agents started ahead: (used, expired).
async fn prestarts(bot: &DiscordServe) -> (f64, f64) {
    let metrics = bot.metrics().await;
    let of = |outcome: &str| {
        common::metric_sample(
            &metrics,
            &format!("air_friends_prestart_total{{outcome=\"{outcome}\"}}"),
        )
    };
    (of("used"), of("expired"))
}

/// A TYPING_START of the test's user in `channel` (a DM when it is the DM channel).
fn typing(bot: &DiscordServe, channel: &str) {
    typing_as(bot, channel, USER_ID);
}

/// A TYPING_START of `user` in `channel`.
fn typing_as(bot: &DiscordServe, channel: &str, user: &str) {
    let mut d = json!({"channel_id": channel, "user_id": user, "timestamp": 1_700_000_000u64});
    if channel != DM_CHANNEL_ID {
        d["guild_id"] = json!(GUILD_ID);
    }
    bot.fake.dispatch("TYPING_START", d);
}

/// Waits for the log line of an agent started ahead (the `n`-th, counting from 1).
async fn started_ahead(bot: &mut DiscordServe, n: usize) -> Value {
    let line = bot.logged_or_wait(|l| l["message"] == "agent started ahead of the message");
    let count = bot
        .logged()
        .iter()
        .filter(|l| l["message"] == "agent started ahead of the message")
        .count();
    assert!(
        count <= n,
        "more agents started ahead than expected: {count}"
    );
    line
}

async fn metric_at_least(bot: &DiscordServe, series: &str, value: f64) {
    eventually_async(Duration::from_secs(30), series, async || {
        (common::metric_sample(&bot.metrics().await, series) >= value).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_typing_dm_users_agent_is_up_before_the_message_and_answers_it() {
    let mut bot = DiscordServe::start(|files| DiscordSetup {
        // In the real sandbox: an agent started ahead is confined like any other.
        sandbox: Some(String::new()),
        ..setup(files, json!({}), "")
    })
    .await;
    typing(&bot, DM_CHANNEL_ID);
    let line = started_ahead(&mut bot, 1).await;
    assert_eq!(line["why"], "typing", "{line}");
    assert_eq!(line["resumed"], false, "{line}");
    assert_eq!(bot.agents_started(), 1);
    assert_eq!(bot.received("session/new").len(), 1, "its session is open");
    assert!(
        bot.prompts().is_empty(),
        "nothing is prompted before the message"
    );
    // Typing goes on (Discord repeats it every ~10 s): still one agent.
    typing(&bot, DM_CHANNEL_ID);

    bot.dm("hello there");
    bot.wait_bot_messages(DM_CHANNEL_ID, 1).await;
    bot.wait_interactions_finished(1);
    assert_eq!(
        bot.agents_started(),
        1,
        "the message used the agent started ahead"
    );
    let prompts = bot.prompts();
    assert_eq!(prompts.len(), 1, "{prompts:?}");
    assert!(
        prompts[0].contains("hello there") && prompts[0].contains("## Session"),
        "the first prompt of an agent started ahead is the whole one: {}",
        prompts[0]
    );
    assert_eq!(prestarts(&bot).await, (1.0, 0.0), "used once, none wasted");
    let metrics = bot.metrics().await;
    assert_eq!(
        common::metric_sample(
            &metrics,
            "air_friends_turn_start_seconds_count{start=\"prestarted\"}"
        ),
        1.0
    );
    assert_eq!(
        common::metric_sample(
            &metrics,
            "air_friends_turn_start_seconds_count{start=\"cold\"}"
        ),
        0.0
    );
    // Its next message is an ordinary warm turn: only what is new.
    bot.dm("and another thing");
    bot.wait_bot_messages(DM_CHANNEL_ID, 2).await;
    let prompts = bot.prompts();
    assert!(
        !prompts[1].contains("## Session") && prompts[1].contains("and another thing"),
        "{}",
        prompts[1]
    );
    bot.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_restart_the_agent_started_ahead_resumes_the_conversation() {
    let mut bot = DiscordServe::start(|files| setup(files, json!({"resume": "resume"}), "")).await;
    bot.dm("remember the word PELICAN");
    bot.wait_bot_messages(DM_CHANNEL_ID, 1).await;
    bot.wait_interactions_finished(1);
    bot.restart(false).await;

    typing(&bot, DM_CHANNEL_ID);
    let line = started_ahead(&mut bot, 1).await;
    assert_eq!(line["resumed"], true, "{line}");
    assert_eq!(bot.received("session/resume").len(), 1);
    bot.dm("what was the word?");
    bot.wait_bot_messages(DM_CHANNEL_ID, 2).await;
    assert_eq!(bot.agents_started(), 2, "one before the restart, one ahead");
    let prompts = bot.prompts();
    assert_eq!(prompts.len(), 2, "{prompts:?}");
    assert!(
        prompts[1].contains("what was the word?")
            && prompts[1].contains("continues on your earlier session")
            && !prompts[1].contains("PELICAN"),
        "the resumed session gets only what is new: {}",
        prompts[1]
    );
    bot.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typing_that_never_becomes_a_message_costs_one_agent_until_idle() {
    let mut bot =
        DiscordServe::start(|files| setup(files, json!({}), "  warm:\n    idleMs: 1500\n")).await;
    typing(&bot, DM_CHANNEL_ID);
    started_ahead(&mut bot, 1).await;
    metric_at_least(&bot, "air_friends_prestart_total{outcome=\"expired\"}", 1.0).await;
    let metrics = bot.metrics().await;
    assert_eq!(
        common::metric_sample(&metrics, "air_friends_warm_retired_total{reason=\"idle\"}"),
        1.0,
        "{metrics}"
    );
    assert_eq!(
        common::metric_sample(&metrics, "air_friends_prestart_total{outcome=\"used\"}"),
        0.0
    );
    assert_eq!(
        common::metric_sample(&metrics, "air_friends_warm_processes"),
        0.0
    );
    // The next message starts cold, as if nobody had typed.
    bot.dm("sorry, I was away");
    bot.wait_bot_messages(DM_CHANNEL_ID, 1).await;
    assert_eq!(bot.agents_started(), 2);
    bot.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typing_starts_an_agent_only_where_any_message_would_be_answered() {
    const LOUNGE: &str = "4300";
    let mut bot = DiscordServe::start(|files| DiscordSetup {
        extra_yaml: format!(
            "places:\n  - {{name: lounge, match: {{channel: '{LOUNGE}'}}, reply: always}}\n"
        ),
        ..setup(files, json!({}), "")
    })
    .await;
    bot.fake
        .add_channel(LOUNGE, ChannelKind::Text, None, "lounge");
    // A mention-only channel: the message may not be for the bot.
    typing(&bot, CHANNEL_ID);
    // The place that answers everything.
    typing(&bot, LOUNGE);
    let line = started_ahead(&mut bot, 1).await;
    assert_eq!(line["place"], "lounge", "{line}");
    bot.push(LOUNGE, user(USER_ID, "alice", false), "morning all");
    bot.wait_bot_messages(LOUNGE, 1).await;
    bot.wait_interactions_finished(1);
    assert_eq!(
        bot.agents_started(),
        1,
        "no agent for the mention-only channel's typing"
    );
    assert_eq!(prestarts(&bot).await, (1.0, 0.0), "used once, none wasted");
    bot.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_typed_while_its_agent_starts_waits_for_that_agent() {
    // The agent takes 1.5 s to start; the message comes 0.2 s after the typing.
    let mut bot =
        DiscordServe::start(|files| setup(files, json!({"initialize": {"delayMs": 1500}}), ""))
            .await;
    typing(&bot, DM_CHANNEL_ID);
    // serenity hands each gateway event to its own task: the message must not overtake the
    // typing sign on its way to the router (on Discord it follows by seconds, not microseconds).
    tokio::time::sleep(Duration::from_millis(200)).await;
    bot.dm("quick question");
    bot.wait_bot_messages(DM_CHANNEL_ID, 1).await;
    bot.wait_interactions_finished(1);
    started_ahead(&mut bot, 1).await;
    assert_eq!(
        bot.agents_started(),
        1,
        "no second agent for the same conversation"
    );
    assert_eq!(prestarts(&bot).await, (1.0, 0.0), "used once, none wasted");
    bot.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_retired_after_max_turns_is_followed_by_a_successor() {
    let mut bot =
        DiscordServe::start(|files| setup(files, json!({}), "  warm:\n    maxTurns: 1\n")).await;
    bot.dm("first");
    bot.wait_bot_messages(DM_CHANNEL_ID, 1).await;
    let line = started_ahead(&mut bot, 1).await;
    assert_eq!(line["why"], "successor", "{line}");
    assert_eq!(
        bot.agents_started(),
        2,
        "the successor is up before the next message"
    );
    bot.dm("second");
    bot.wait_bot_messages(DM_CHANNEL_ID, 2).await;
    bot.wait_interactions_finished(2);
    let prompts = bot.prompts();
    assert_eq!(prompts.len(), 2, "{prompts:?}");
    assert!(
        prompts[1].contains("## Session") && prompts[1].contains("second"),
        "a successor's first prompt is the whole one: {}",
        prompts[1]
    );
    assert_eq!(prestarts(&bot).await, (1.0, 0.0), "used once, none wasted");
    let metrics = bot.metrics().await;
    assert_eq!(
        common::metric_sample(
            &metrics,
            "air_friends_warm_retired_total{reason=\"max_turns\"}"
        ),
        2.0,
        "each agent retired after its one turn"
    );
    bot.stop();
}

/// In a place that answers everyone, a user typing while their own message is being answered
/// gets no second agent (theirs comes back warm), while another user typing in the same
/// channel at the same time gets theirs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typing_during_ones_own_turn_starts_nothing_but_another_users_typing_does() {
    const LOUNGE: &str = "4300";
    const BOB: &str = "5001";
    let mut bot = DiscordServe::start(|files| {
        let mut setup = setup(files, json!({}), "");
        // The turn takes a while: the typing signs come during it.
        let steps = setup.script["turns"][0]["steps"].as_array_mut().unwrap();
        steps.insert(0, json!({"sleepMs": 1500}));
        DiscordSetup {
            extra_yaml: format!(
                "places:\n  - {{name: lounge, match: {{channel: '{LOUNGE}'}}, reply: always}}\n"
            ),
            ..setup
        }
    })
    .await;
    bot.fake
        .add_channel(LOUNGE, ChannelKind::Text, None, "lounge");
    bot.push(LOUNGE, user(USER_ID, "alice", false), "morning all");
    eventually_async(
        Duration::from_secs(30),
        "alice's turn running",
        async || (!bot.prompts().is_empty()).then_some(()),
    )
    .await;
    typing(&bot, LOUNGE);
    typing_as(&bot, LOUNGE, BOB);
    bot.wait_bot_messages(LOUNGE, 1).await;
    let line = started_ahead(&mut bot, 1).await;
    assert_eq!(line["why"], "typing", "{line}");
    bot.wait_interactions_finished(1);
    assert_eq!(
        bot.agents_started(),
        2,
        "alice's and bob's, no second one for alice"
    );
    bot.push(LOUNGE, user(BOB, "bob", false), "hi");
    bot.wait_bot_messages(LOUNGE, 2).await;
    bot.wait_interactions_finished(2);
    assert_eq!(bot.agents_started(), 2);
    assert_eq!(prestarts(&bot).await, (1.0, 0.0), "bob's was used");
    bot.stop();
}

/// A hostile agent started ahead tries to act before any message: as it starts it runs the
/// real send-reply with a text of its own. Its session's turn stays closed until its first
/// prompt, so the Skill API refuses the call and nothing reaches the user; the message that
/// comes is then answered as usual.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_started_ahead_can_do_nothing_before_its_first_prompt() {
    let mut bot = DiscordServe::start(|files| {
        let early = format!(
            "printf 'PLANTED EARLY' > \"$TMPDIR/$SESSION_ID/early.md\" && {} --message-file \"$TMPDIR/$SESSION_ID/early.md\"",
            skill_script("send-reply")
        );
        setup(files, json!({"initialize": {"run": early}}), "")
    })
    .await;
    typing(&bot, DM_CHANNEL_ID);
    started_ahead(&mut bot, 1).await;
    let attempt = bot
        .agent_log_lines()
        .into_iter()
        .find(|v| v["event"] == "run")
        .expect("the agent tried to send before any message");
    assert!(
        attempt["result"].to_string().contains("NO_TURN_OPEN"),
        "the early call was not refused for want of a turn: {attempt}"
    );
    bot.dm("hello");
    bot.wait_bot_messages(DM_CHANNEL_ID, 1).await;
    bot.wait_interactions_finished(1);
    let sent: Vec<String> = bot
        .bot_messages(DM_CHANNEL_ID)
        .into_iter()
        .map(|m| m.content)
        .collect();
    assert_eq!(sent, ["Noted."], "only the answer reached the user");
    bot.stop();
}
