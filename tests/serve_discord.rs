//! `air-friends serve` end to end on Discord: the real binary connects to a fake Discord (REST +
//! gateway on loopback) and answers through the scripted fake ACP agent, which runs the real
//! skill scripts against the daemon's Skill API. Every test checks what a Discord user would
//! notice: replies threaded to their message without a ping, DMs answered in the DM, long
//! answers split in order, reactions, edits, files, the typing indicator, slash commands answered
//! ephemerally without an agent, 429s and gateway blips survived, and exactly one short error
//! reply when the agent never answers.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use air_friends::conversation::notices::Notice;
use common::fake_discord::{
    APP_ID, BOT_ID, CHANNEL_ID, DM_CHANNEL_ID, GUILD_ID, OTHER_BOT_ID, interaction_create, user,
};
use common::poll::eventually;
use common::serve::{skill_script, skill_step};
use common::serve_discord::{DiscordServe, DiscordSetup, WAIT, one_turn, reply_steps, text_path};
use serde_json::{Value, json};

/// A script that answers every prompt with the text of `name` (written by the test).
fn answering(files: &Path, name: &'static str, text: &str) -> DiscordSetup {
    DiscordSetup {
        script: one_turn(reply_steps(&text_path(files, name))),
        texts: vec![(name, text.to_owned())],
        ..DiscordSetup::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mention_in_a_guild_channel_gets_a_threaded_reply_without_a_ping() {
    let text = "Hello Alice! I'm the friendly bot of this server.";
    let mut bot = DiscordServe::start(|files| answering(files, "hello.md", text)).await;

    let trigger = bot.mention("hi there, who are you?");
    let replies = bot.wait_bot_messages(CHANNEL_ID, 1).await;
    assert_eq!(replies[0].content, text, "{}", bot.agent_events());

    let posts = bot.message_posts(CHANNEL_ID);
    let body = posts[0].json.as_ref().expect("a JSON message body");
    assert_eq!(body["content"], text);
    assert_eq!(
        body["message_reference"]["message_id"], trigger,
        "the reply is threaded to the mention"
    );
    assert_eq!(
        body["allowed_mentions"]["replied_user"], false,
        "replying does not ping Alice"
    );

    let finished = bot.wait_interactions_finished(1);
    assert_eq!(finished[0]["responded"], true);
    assert_eq!(
        bot.bot_messages(CHANNEL_ID).len(),
        1,
        "no error reply on top"
    );
    assert!(bot.bot_messages(DM_CHANNEL_ID).is_empty());
    assert_eq!(bot.agents_started(), 1);
    let prompt = bot.prompts().join("\n");
    assert!(
        prompt.contains("hi there, who are you?") && !prompt.contains(&format!("<@{BOT_ID}>")),
        "the agent got the message without the mention: {prompt}"
    );
    // The operator sees it in /metrics: one routed message, one replied session, one
    // successful send-reply call.
    let metrics = bot.metrics().await;
    for sample in [
        r#"air_friends_messages_received_total{platform="discord",decision="queued"} 1"#,
        r#"air_friends_sessions_total{platform="discord",place="default",outcome="replied"} 1"#,
        r#"air_friends_skill_calls_total{skill="send-reply",status="200"} 1"#,
    ] {
        assert!(metrics.contains(sample), "{sample} missing:\n{metrics}");
    }
    bot.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_direct_message_is_answered_in_the_dm() {
    let text = "Sure, we can talk here in private.";
    let mut bot = DiscordServe::start(|files| answering(files, "dm.md", text)).await;

    let trigger = bot.dm("can we talk privately?");
    let replies = bot.wait_bot_messages(DM_CHANNEL_ID, 1).await;
    assert_eq!(replies[0].content, text, "{}", bot.agent_events());
    let post = &bot.message_posts(DM_CHANNEL_ID)[0];
    assert_eq!(
        post.json.as_ref().unwrap()["message_reference"]["message_id"],
        trigger
    );

    bot.wait_interactions_finished(1);
    assert_eq!(bot.bot_messages(DM_CHANNEL_ID).len(), 1);
    assert!(
        bot.message_posts(CHANNEL_ID).is_empty(),
        "nothing of the DM leaks into the guild channel"
    );
    bot.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_reply_arrives_as_three_messages_in_order() {
    // 45 numbered lines, 4500 characters in all.
    let lines: Vec<String> = (1..=45)
        .map(|i| format!("Line {i:02}: {}", "the quick brown fox jumps. ".repeat(3)))
        .map(|l| format!("{l:.<99}"))
        .collect();
    let mut text = lines.join("\n");
    text.push('!');
    assert_eq!(text.chars().count(), 4500);
    let mut bot = DiscordServe::start(|files| answering(files, "long.md", &text)).await;

    let trigger = bot.mention("tell me a long story");
    bot.wait_bot_messages(CHANNEL_ID, 3).await;
    bot.wait_interactions_finished(1);
    let replies = bot.bot_messages(CHANNEL_ID);
    assert_eq!(replies.len(), 3, "{replies:?}");
    for reply in &replies {
        assert!(
            !reply.content.trim().is_empty() && reply.content.encode_utf16().count() <= 2000,
            "each part fits one Discord message"
        );
    }
    let received: Vec<&str> = replies
        .iter()
        .flat_map(|r| r.content.lines())
        .filter(|l| !l.trim().is_empty())
        .collect();
    let sent: Vec<&str> = text.lines().collect();
    assert_eq!(received, sent, "all lines arrive, whole and in order");

    let posts = bot.message_posts(CHANNEL_ID);
    assert_eq!(posts.len(), 3);
    assert_eq!(
        posts[0].json.as_ref().unwrap()["message_reference"]["message_id"],
        trigger,
        "the first part is the threaded reply"
    );
    bot.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reaction_and_an_edit_reach_discord() {
    let send = skill_script("send-reply");
    let edit = skill_script("edit-reply");
    let mut bot = DiscordServe::start(|files| {
        let first = text_path(files, "first.md");
        let second = text_path(files, "second.md");
        // send-reply prints {"success":true,"data":{"messageId":"…",…}}; the agent edits that
        // message with edit-reply.
        let reply_then_edit = format!(
            "cp '{first}' \"$TMPDIR/$SESSION_ID/first.md\" && \
             out=$('{send}' --message-file \"$TMPDIR/$SESSION_ID/first.md\") && \
             id=$(printf '%s' \"$out\" | sed -n 's/.*\"messageId\": *\"\\([0-9]*\\)\".*/\\1/p') && \
             cp '{second}' \"$TMPDIR/$SESSION_ID/second.md\" && \
             '{edit}' --message-id \"$id\" --message-file \"$TMPDIR/$SESSION_ID/second.md\"",
            first = first.display(),
            second = second.display(),
        );
        DiscordSetup {
            script: one_turn(vec![
                skill_step("react-message", "--emoji 👍"),
                json!({"run": reply_then_edit}),
            ]),
            texts: vec![
                ("first.md", "Let me think… 42?".into()),
                ("second.md", "The answer is 42, definitely.".into()),
            ],
            ..DiscordSetup::default()
        }
    })
    .await;

    let trigger = bot.mention("what is the answer?");
    let reaction = format!("/channels/{CHANNEL_ID}/messages/{trigger}/reactions/");
    let reactions = bot.wait_requests("PUT", &reaction, 1).await;
    assert_eq!(
        reactions[0].path,
        format!("{reaction}%F0%9F%91%8D/@me"),
        "a 👍 on Alice's message"
    );

    let replies = bot.wait_bot_messages(CHANNEL_ID, 1).await;
    let reply_id = replies[0].id.to_string();
    let edits = bot
        .wait_requests(
            "PATCH",
            &format!("/channels/{CHANNEL_ID}/messages/{reply_id}"),
            1,
        )
        .await;
    assert_eq!(
        edits[0].json.as_ref().unwrap()["content"],
        "The answer is 42, definitely.",
        "{}",
        bot.agent_events()
    );
    bot.wait_interactions_finished(1);
    let replies = bot.bot_messages(CHANNEL_ID);
    assert_eq!(replies.len(), 1, "edited in place, no second message");
    assert_eq!(replies[0].content, "The answer is 42, definitely.");
    bot.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_file_delivers_one_message_with_all_attachments() {
    let mut bot = DiscordServe::start(|_| DiscordSetup {
        script: one_turn(vec![
            json!({"run": "mkdir -p output && printf 'first file' > output/notes.txt && printf 'a,b\\n1,2\\n' > output/table.csv"}),
            skill_step(
                "send-file",
                "--file-paths output/notes.txt --file-paths output/table.csv",
            ),
        ]),
        extra_yaml: "skills:\n  sendFile:\n    enabled: true\n".into(),
        ..DiscordSetup::default()
    })
    .await;

    let trigger = bot.mention("send me the files please");
    let replies = bot.wait_bot_messages(CHANNEL_ID, 1).await;
    assert_eq!(
        replies[0].attachments,
        ["notes.txt", "table.csv"],
        "{}",
        bot.agent_events()
    );
    let finished = bot.wait_interactions_finished(1);
    assert_eq!(finished[0]["responded"], true);

    let posts = bot.message_posts(CHANNEL_ID);
    assert_eq!(posts.len(), 1, "one message carries both files");
    assert_eq!(posts[0].parts, ["payload_json", "files[0]", "files[1]"]);
    assert_eq!(posts[0].filenames, ["notes.txt", "table.csv"]);
    assert_eq!(
        posts[0].json.as_ref().unwrap()["message_reference"]["message_id"],
        trigger
    );
    assert_eq!(bot.bot_messages(CHANNEL_ID).len(), 1, "no error reply");
    bot.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typing_is_shown_while_the_agent_works() {
    let mut bot = DiscordServe::start(|files| {
        let mut steps = vec![json!({"sleepMs": 2500})];
        steps.extend(reply_steps(&text_path(files, "slow.md")));
        DiscordSetup {
            script: one_turn(steps),
            texts: vec![("slow.md", "Sorry for the wait!".into())],
            ..DiscordSetup::default()
        }
    })
    .await;

    bot.mention("take your time");
    bot.wait_requests("POST", &format!("/channels/{CHANNEL_ID}/typing"), 1)
        .await;
    assert!(
        bot.message_posts(CHANNEL_ID).is_empty(),
        "typing shows while the agent is still working"
    );
    bot.wait_bot_messages(CHANNEL_ID, 1).await;
    let requests = bot.fake.requests();
    let typing = requests
        .iter()
        .position(|r| r.method == "POST" && r.path == format!("/channels/{CHANNEL_ID}/typing"))
        .unwrap();
    let reply = requests
        .iter()
        .position(|r| r.method == "POST" && r.path == format!("/channels/{CHANNEL_ID}/messages"))
        .unwrap();
    assert!(typing < reply, "typing starts before the reply");
    bot.wait_interactions_finished(1);
    bot.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_memory_stats_slash_command_is_registered_and_answered_ephemerally() {
    let mut bot = DiscordServe::start(|_| DiscordSetup::default()).await;

    let registered = bot
        .wait_requests(
            "PUT",
            &format!("/applications/{APP_ID}/guilds/{GUILD_ID}/commands"),
            1,
        )
        .await;
    let commands = registered[0].json.clone().expect("a JSON body");
    let command = |name: &str| -> Value {
        commands
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("/{name} is registered: {commands}"))
    };
    let stats = command("memory-stats");
    assert_eq!(stats["type"], 1, "a chat-input command");
    assert!(!stats["description"].as_str().unwrap().is_empty());
    assert_eq!(stats["options"], json!([]), "memory-stats takes no options");
    let search = command("memory-search");
    let options = search["options"].as_array().unwrap();
    assert_eq!(options[0]["name"], "query");
    assert_eq!(options[0]["type"], 3);
    assert_eq!(options[0]["required"], true);
    assert_eq!(options[0]["max_length"], 1000);
    assert_eq!(options[1]["name"], "limit");
    assert_eq!(options[1]["type"], 4);
    assert_eq!(options[1]["min_value"], 1);
    assert_eq!(options[1]["max_value"], 50);
    assert_ne!(options[1]["required"], true);
    for name in ["memory-export", "list-reminders", "cancel-reminder"] {
        command(name);
    }

    let id = bot.fake.next_id();
    let token = "interaction-token-abc";
    bot.fake.push_interaction(interaction_create(
        &id,
        token,
        "memory-stats",
        json!([]),
        true,
    ));
    let callbacks = bot
        .wait_requests("POST", &format!("/interactions/{id}/{token}/callback"), 1)
        .await;
    assert_eq!(
        callbacks[0].json,
        Some(json!({"type": 5, "data": {"flags": 64}})),
        "deferred, ephemeral"
    );
    let edits = bot
        .wait_requests(
            "PATCH",
            &format!("/webhooks/{APP_ID}/{token}/messages/@original"),
            1,
        )
        .await;
    let content = edits[0].json.as_ref().unwrap()["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(content.contains("Your memories"), "{content}");
    assert!(
        content.contains("Private memories are counted only in a direct message."),
        "{content}"
    );
    bot.wait_log(|v| v["message"] == "user_command" && v["skill"] == "memory-stats");

    // In a DM the private memories are counted too.
    let id = bot.fake.next_id();
    let token = "interaction-token-dm";
    bot.fake.push_interaction(interaction_create(
        &id,
        token,
        "memory-stats",
        json!([]),
        false,
    ));
    let edits = bot
        .wait_requests(
            "PATCH",
            &format!("/webhooks/{APP_ID}/{token}/messages/@original"),
            1,
        )
        .await;
    let content = edits[0].json.as_ref().unwrap()["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        content.contains("Your memories") && content.contains("\nprivate "),
        "{content}"
    );
    assert!(!content.contains("counted only in a direct message"));

    assert!(
        !bot.agent.log.exists(),
        "no agent was started for a slash command"
    );
    assert!(bot.message_posts(CHANNEL_ID).is_empty(), "nothing public");
    assert!(bot.fake.requests_to("POST", "/channels/").is_empty());
    bot.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_on_the_reply_is_waited_out_and_the_reply_arrives() {
    let mut bot = DiscordServe::start(|files| {
        // The agent waits for the test's go-ahead, so the 429 hits the reply itself (not the
        // history read before the agent starts, which shares the path).
        let waiting = files.join("agent-waiting");
        let go = files.join("go");
        let mut steps = vec![json!({"run": format!(
            "touch '{}' && while [ ! -e '{}' ]; do sleep 0.05; done",
            waiting.display(),
            go.display()
        )})];
        steps.extend(reply_steps(&text_path(files, "patient.md")));
        DiscordSetup {
            script: one_turn(steps),
            texts: vec![("patient.md", "Worth the wait.".into())],
            ..DiscordSetup::default()
        }
    })
    .await;

    bot.mention("are you there?");
    let waiting = bot.files.path().join("agent-waiting");
    eventually(WAIT, "the agent is running", || waiting.exists()).await;
    bot.fake
        .rate_limit(&format!("/channels/{CHANNEL_ID}/messages"), 1, 1.5);
    std::fs::write(bot.files.path().join("go"), "").unwrap();

    let path = format!("/channels/{CHANNEL_ID}/messages");
    eventually(WAIT, "the first reply attempt", || {
        !bot.message_posts(CHANNEL_ID).is_empty()
    })
    .await;
    let first = Instant::now();
    let replies = bot.wait_bot_messages(CHANNEL_ID, 1).await;
    let waited = first.elapsed();
    assert_eq!(replies[0].content, "Worth the wait.");
    assert!(
        waited >= Duration::from_millis(1300),
        "the retry came after retry_after (1.5 s), not {waited:?}"
    );
    let posts: Vec<_> = bot
        .fake
        .requests()
        .into_iter()
        .filter(|r| r.method == "POST" && r.path == path)
        .collect();
    assert_eq!(posts.len(), 2, "one 429, one retry");
    assert_eq!(posts[0].json, posts[1].json, "the same message is retried");
    let limited = bot.wait_log(|v| v["message"] == "Discord rate limit: waiting before retrying");
    assert_eq!(limited["retry_after_ms"], 1500);

    let finished = bot.wait_interactions_finished(1);
    assert_eq!(finished[0]["responded"], true);
    assert_eq!(bot.bot_messages(CHANNEL_ID).len(), 1, "no error reply");
    bot.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_disconnects_are_survived_and_readyz_follows_the_connection() {
    let mut bot = DiscordServe::start(|files| answering(files, "back.md", "Still here!")).await;
    assert_eq!(bot.fake.gateway_counts(), (1, 0));

    // A network blip: serenity resumes; the bot keeps answering.
    bot.fake.drop_connection();
    bot.fake
        .wait_gateway(WAIT, |identifies, resumes| identifies + resumes >= 2)
        .await;
    bot.wait_readiness(true).await;
    bot.mention("still there?");
    assert_eq!(
        bot.wait_bot_messages(CHANNEL_ID, 1).await[0].content,
        "Still here!"
    );
    bot.wait_interactions_finished(1);

    // An outage: /readyz reports Discord down until the gateway is back.
    let before = bot.fake.gateway_counts();
    bot.fake.set_gateway_refusing(true);
    bot.fake.drop_connection();
    bot.wait_readiness(false).await;
    let (status, body) = bot.readyz().await;
    assert_eq!(status, 503, "{body}");
    bot.fake.set_gateway_refusing(false);
    bot.fake
        .wait_gateway(Duration::from_secs(90), |identifies, resumes| {
            identifies + resumes > before.0 + before.1
        })
        .await;
    bot.wait_readiness(true).await;

    bot.mention("and now?");
    let replies = bot.wait_bot_messages(CHANNEL_ID, 2).await;
    assert_eq!(replies[1].content, "Still here!");
    bot.wait_interactions_finished(2);
    assert_eq!(bot.bot_messages(CHANNEL_ID).len(), 2);
    bot.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bots_are_ignored_and_a_silent_agent_gets_one_error_reply() {
    // An agent that ends every turn without using a skill.
    let mut bot = DiscordServe::start(|_| DiscordSetup {
        script: one_turn(Vec::new()),
        ..DiscordSetup::default()
    })
    .await;

    // The bot's own message and another bot's, both mentioning the bot.
    bot.push(
        CHANNEL_ID,
        user(BOT_ID, "friend-bot", true),
        &format!("<@{BOT_ID}> note to self"),
    );
    bot.push(
        CHANNEL_ID,
        user(OTHER_BOT_ID, "other-bot", true),
        &format!("<@{BOT_ID}> beep boop, answer me"),
    );
    // A slash command after them: once it is answered, the messages before it were handled.
    let id = bot.fake.next_id();
    bot.fake.push_interaction(interaction_create(
        &id,
        "barrier-token",
        "memory-stats",
        json!([]),
        true,
    ));
    bot.wait_requests(
        "PATCH",
        &format!("/webhooks/{APP_ID}/barrier-token/messages/@original"),
        1,
    )
    .await;
    assert!(!bot.agent.log.exists(), "no agent was started for bots");
    assert!(bot.message_posts(CHANNEL_ID).is_empty());
    assert!(
        bot.fake
            .requests_to("POST", &format!("/channels/{CHANNEL_ID}/typing"))
            .is_empty()
    );

    // A human gets exactly one short error reply, threaded to their message.
    let trigger = bot.mention("hello?");
    let replies = bot.wait_bot_messages(CHANNEL_ID, 1).await;
    assert_eq!(replies[0].content, Notice::Error.english());
    let finished = bot.wait_interactions_finished(1);
    assert_eq!(finished[0]["responded"], false);
    assert_eq!(bot.bot_messages(CHANNEL_ID).len(), 1, "one error reply");
    let posts = bot.message_posts(CHANNEL_ID);
    assert_eq!(
        posts[0].json.as_ref().unwrap()["message_reference"]["message_id"],
        trigger
    );
    assert_eq!(bot.agents_started(), 1);
    assert_eq!(
        bot.prompts().len(),
        2,
        "one prompt and one retry prompt on the same session"
    );
    bot.stop();
}
