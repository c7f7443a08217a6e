//! Places end to end (`places:` in the configuration, docs/PLACES.md): the real binary on the
//! fake Discord, driving the scripted fake ACP agent. One support channel gets its own persona,
//! model, reply policy and skills; a thread of it is the same place; a DM keeps the global
//! settings; a channel whose own daily budget is spent is told so without an agent. Threads
//! and forum posts are conversations of their own, and a thread-per-conversation channel opens
//! one. A reload switches a persona and retires only the affected warm agent. And
//! `air-friends places explain` through the binary.

mod common;

use std::path::Path;
use std::process::Command;

use air_friends::conversation::notices::{Notice, Notices};
use common::fake_discord::{
    APP_ID, BOT_ID, CATEGORY_ID, CHANNEL_ID, ChannelKind, DM_CHANNEL_ID, FORUM_ID, FORUM_POST_ID,
    GUILD_ID, THREAD_ID, USER_ID, user,
};
use common::poll::eventually;
use common::serve::skill_step;
use common::serve_discord::{DiscordServe, DiscordSetup, WAIT, one_turn, reply_steps, text_path};
use common::{TestConfig, bin};
use serde_json::{Value, json};

/// A text channel whose rule spends nothing: its daily budget per user is 0.
const SPENT_CHANNEL: &str = "4300";

/// The support desk's persona: its own text, and a fragment of the shared prompts folder.
const SUPPORT_PERSONA: &str = "You are SUPPORT-DESK, the help desk of this server.\n\n{{safety}}";

/// The model option the fake agent offers (so the daemon selects a place's model by ACP).
fn model_option() -> Value {
    json!([{"id": "model", "category": "model", "type": "select",
        "currentValue": "openrouter/big",
        "options": [{"value": "openrouter/big", "name": "Big"},
                    {"value": "openrouter/cheap", "name": "Cheap"}]}])
}

fn places_yaml(files: &Path) -> String {
    format!(
        "places:\n\
         \x20 - name: support\n\
         \x20   match: {{platform: discord, channel: '{CHANNEL_ID}'}}\n\
         \x20   persona: {persona}\n\
         \x20   model: openrouter/cheap\n\
         \x20   reply: always\n\
         \x20   skills: [send-reply]\n\
         \x20 - name: spent\n\
         \x20   match: {{category: '{CATEGORY_ID}', channel: '{SPENT_CHANNEL}'}}\n\
         \x20   tokensPerUserPerDay: 0\n\
         \x20   language: ja\n",
        persona = files.join("support.md").display(),
    )
}

/// Every agent reacts (asking permission, then without asking) and replies.
fn setup(files: &Path) -> DiscordSetup {
    std::fs::write(files.join("support.md"), SUPPORT_PERSONA).unwrap();
    let react = skill_step("react-message", "--emoji 👍");
    let mut steps = vec![
        react.clone(),
        json!({"run": react["permission"].as_str().unwrap()}),
    ];
    steps.extend(reply_steps(&text_path(files, "answer.md")));
    DiscordSetup {
        script: json!({
            "sessionNew": {"configOptions": model_option()},
            "turns": [{"steps": steps, "stopReason": "end_turn"}]
        }),
        texts: vec![("answer.md", "Here to help.".to_owned())],
        agent_extra: "  model: openrouter/big\n  warm:\n    enabled: false\n".to_owned(),
        extra_yaml: places_yaml(files),
        ..DiscordSetup::default()
    }
}

/// The agent log's lines of the `n`-th agent process (0-based), split at each `initialize`.
fn agent_runs(bot: &DiscordServe) -> Vec<Vec<Value>> {
    let mut runs: Vec<Vec<Value>> = Vec::new();
    for line in bot.agent_log_lines() {
        if line["received"]["method"] == "initialize" {
            runs.push(Vec::new());
        }
        if let Some(run) = runs.last_mut() {
            run.push(line);
        }
    }
    runs
}

fn prompt_of(run: &[Value]) -> String {
    run.iter()
        .filter(|v| v["received"]["method"] == "session/prompt")
        .map(|v| v["received"]["params"]["prompt"].to_string())
        .collect()
}

fn selected_model(run: &[Value]) -> Option<String> {
    run.iter()
        .find(|v| v["received"]["method"] == "session/set_config_option")
        .map(|v| {
            v["received"]["params"]["value"]
                .as_str()
                .unwrap()
                .to_owned()
        })
}

/// The results of the agent's steps in a run (permission decisions, skill outputs).
fn events_of(run: &[Value]) -> String {
    run.iter()
        .filter(|v| v.get("event").is_some())
        .map(Value::to_string)
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_place_gets_its_persona_model_policy_skills_and_budget() {
    let mut bot = DiscordServe::start(setup).await;
    bot.fake.add_thread();
    bot.fake
        .add_channel(SPENT_CHANNEL, ChannelKind::Text, Some(CATEGORY_ID), "spent");
    let alice = || user(USER_ID, "alice", false);

    // `reply: always`: a message that does not address the bot is answered in the support
    // channel, by the support persona on the cheap model, with send-reply only.
    bot.push(CHANNEL_ID, alice(), "how do I reset my password?");
    let replies = bot.wait_bot_messages(CHANNEL_ID, 1).await;
    assert_eq!(
        replies[0].content,
        "Here to help.",
        "{}",
        bot.agent_events()
    );
    bot.wait_interactions_finished(1);
    let runs = agent_runs(&bot);
    let support = &runs[0];
    let prompt = prompt_of(support);
    assert!(prompt.contains("SUPPORT-DESK"), "{prompt}");
    assert!(
        prompt.contains("# Boundaries"),
        "the persona's {{{{safety}}}} comes from the shared prompts folder: {prompt}"
    );
    assert!(
        !prompt.contains("{{safety}}"),
        "the include is expanded: {prompt}"
    );
    assert!(
        prompt.contains("Here you may use only these skills: send-reply"),
        "{prompt}"
    );
    assert_eq!(selected_model(support).as_deref(), Some("openrouter/cheap"));
    let events = events_of(support);
    assert!(
        events.contains(r#""allowed":false,"atUs""#) && events.contains("react-message"),
        "the gate refuses react-message here: {events}"
    );
    assert!(
        bot.logged()
            .iter()
            .any(|line| line["message"] == "permission decision"
                && line["reason"]
                    .as_str()
                    .is_some_and(|r| r.contains("not allowed in this place"))),
        "the daemon logs why"
    );
    assert!(
        events.contains("FORBIDDEN_CONTEXT"),
        "the Skill API refuses react-message here: {events}"
    );
    assert!(
        bot.fake
            .requests_to("PUT", &format!("/channels/{CHANNEL_ID}/messages"))
            .is_empty(),
        "no reaction in the support channel"
    );

    // A thread of the support channel is the same place: answered without a mention, in the
    // thread.
    bot.push(THREAD_ID, alice(), "and my username?");
    bot.wait_bot_messages(THREAD_ID, 1).await;
    bot.wait_interactions_finished(2);
    assert_eq!(
        selected_model(&agent_runs(&bot)[1]).as_deref(),
        Some("openrouter/cheap")
    );

    // A DM keeps the global settings: the shared persona, agent.model (already current, so
    // nothing is selected), every skill — the reaction goes through.
    bot.dm("hello there");
    bot.wait_bot_messages(DM_CHANNEL_ID, 1).await;
    bot.wait_interactions_finished(3);
    let dm = &agent_runs(&bot)[2];
    let prompt = prompt_of(dm);
    assert!(!prompt.contains("SUPPORT-DESK"), "{prompt}");
    assert!(!prompt.contains("Here you may use only"), "{prompt}");
    assert_eq!(selected_model(dm), None);
    eventually(WAIT, "the DM's reaction", || {
        !bot.fake
            .requests_to("PUT", &format!("/channels/{DM_CHANNEL_ID}/messages"))
            .is_empty()
    })
    .await;

    // Where the rule sets no reply policy, the platform's trigger rules apply: a message that
    // does not address the bot is not answered (routed in order, before the mention below).
    bot.push(SPENT_CHANNEL, alice(), "just chatting");
    // The spent channel's own budget (0 tokens a day) answers in words, without an agent, in
    // the place's language (the shipped Japanese texts).
    let before = bot.agents_started();
    bot.push(
        SPENT_CHANNEL,
        alice(),
        &format!("<@{}> are you there?", common::fake_discord::BOT_ID),
    );
    let replies = bot.wait_bot_messages(SPENT_CHANNEL, 1).await;
    assert_eq!(replies.len(), 1, "the chatter is not answered");
    let japanese = Notices::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("prompts"), "en")
        .text("ja", Notice::OutOfBudget);
    assert!(japanese.contains("また明日"), "{japanese}");
    assert_eq!(replies[0].content, japanese);
    assert_eq!(bot.agents_started(), before, "no agent for a spent place");

    let metrics = bot.metrics().await;
    for sample in [
        r#"air_friends_turns_total{platform="discord",place="support",outcome="replied"} 2"#,
        r#"air_friends_turns_total{platform="discord",place="default",outcome="replied"} 1"#,
        r#"air_friends_turns_total{platform="discord",place="spent",outcome="over_budget"} 1"#,
        r#"air_friends_llm_budget_refusals_total{limit="place"} 1"#,
        r#"air_friends_messages_received_total{platform="discord",decision="ignored"} 1"#,
    ] {
        assert!(metrics.contains(sample), "{sample} missing:\n{metrics}");
    }
    let finished = bot.wait_interactions_finished(3);
    let places: Vec<&str> = finished
        .iter()
        .map(|line| line["place"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(places, ["support", "support", "default"], "{finished:?}");
    bot.stop();
}

/// A channel whose threads are not answered (`threads: off`), and one of its threads.
const QUIET_CHANNEL: &str = "4400";
const QUIET_THREAD: &str = "4401";

/// `#help` opens a thread per conversation, the forum's posts are answered, the quiet
/// channel's threads are not.
fn thread_places(files: &Path) -> DiscordSetup {
    DiscordSetup {
        script: one_turn(reply_steps(&text_path(files, "answer.md"))),
        texts: vec![("answer.md", "Let's look at it here.".to_owned())],
        extra_yaml: format!(
            "places:\n\
             \x20 - {{name: help, match: {{platform: discord, channel: '{CHANNEL_ID}'}}, threads: perConversation}}\n\
             \x20 - {{name: forum, match: {{parent: '{FORUM_ID}'}}, reply: always}}\n\
             \x20 - {{name: quiet, match: {{channel: '{QUIET_CHANNEL}'}}, threads: off}}\n"
        ),
        ..DiscordSetup::default()
    }
}

/// Threads are conversations of their own: a mention in a thread-per-conversation channel
/// opens one thread from the message, named after it, and is answered inside; the follow-up
/// there needs no mention and is answered by the same warm agent, with no second thread. A
/// forum post's name and first message are in the prompt. A `threads: off` place's thread is
/// not answered while its channel is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn threads_are_conversations_of_their_own() {
    let mut bot = DiscordServe::start(thread_places).await;
    bot.fake.add_forum_post();
    bot.fake
        .add_channel(QUIET_CHANNEL, ChannelKind::Text, Some(CATEGORY_ID), "quiet");
    bot.fake.add_channel(
        QUIET_THREAD,
        ChannelKind::PublicThread,
        Some(QUIET_CHANNEL),
        "quiet thread",
    );
    let alice = || user(USER_ID, "alice", false);

    let asked = bot.mention("Printer on fire\nwhat now?");
    // A thread opened from a message has the message's id.
    let replies = bot.wait_bot_messages(&asked, 1).await;
    assert_eq!(replies[0].content, "Let's look at it here.");
    let opened = bot.fake.threads_opened();
    assert_eq!(opened.len(), 1, "{opened:?}");
    assert_eq!(
        opened[0].path,
        format!("/channels/{CHANNEL_ID}/messages/{asked}/threads")
    );
    assert_eq!(
        opened[0].json.as_ref().unwrap()["name"],
        "Printer on fire",
        "named after the message's first line"
    );
    assert!(
        bot.bot_messages(CHANNEL_ID).is_empty(),
        "nothing is answered in the channel itself"
    );
    bot.wait_interactions_finished(1);
    let prompt = bot.prompts().last().unwrap().clone();
    assert!(
        prompt.contains("This conversation is a thread, \u{201c}Printer on fire\u{201d}"),
        "{prompt}"
    );
    let agents = bot.agents_started();

    // The follow-up in the bot's thread: no mention, answered there by the thread's agent.
    bot.push(&asked, alice(), "it is still burning");
    bot.wait_bot_messages(&asked, 2).await;
    bot.wait_interactions_finished(2);
    assert_eq!(
        bot.agents_started(),
        agents,
        "the thread's warm agent answered"
    );
    assert_eq!(bot.fake.threads_opened().len(), 1, "no second thread");
    assert!(bot.bot_messages(CHANNEL_ID).is_empty());

    // A forum post: answered in the post, its name and first message in the prompt.
    bot.push(FORUM_POST_ID, alice(), "any ideas?");
    bot.wait_bot_messages(FORUM_POST_ID, 1).await;
    bot.wait_interactions_finished(3);
    let prompt = bot.prompts().last().unwrap().clone();
    assert!(
        prompt
            .contains("This conversation is a forum post, \u{201c}a forum post\u{201d} in #forum"),
        "{prompt}"
    );
    assert!(prompt.contains("the post's question"), "{prompt}");

    // `threads: off`: the thread's mention is not answered (routed in order, before the
    // channel's mention, which is).
    bot.push(QUIET_THREAD, alice(), &format!("<@{BOT_ID}> hello?"));
    bot.push(QUIET_CHANNEL, alice(), &format!("<@{BOT_ID}> hello?"));
    bot.wait_bot_messages(QUIET_CHANNEL, 1).await;
    assert!(bot.bot_messages(QUIET_THREAD).is_empty());
    let finished = bot.wait_interactions_finished(4);
    let places: Vec<&str> = finished
        .iter()
        .map(|line| line["place"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(places, ["help", "help", "forum", "quiet"], "{finished:?}");
    bot.stop();
}

/// `support` has its persona and the DM the shared one; every agent replies; warm agents on.
fn reload_setup(files: &Path) -> DiscordSetup {
    std::fs::write(files.join("support.md"), SUPPORT_PERSONA).unwrap();
    std::fs::write(
        files.join("support2.md"),
        "You are NEW-DESK, the renewed help desk.\n\n{{safety}}",
    )
    .unwrap();
    DiscordSetup {
        script: one_turn(reply_steps(&text_path(files, "answer.md"))),
        texts: vec![("answer.md", "Here to help.".to_owned())],
        extra_yaml: format!(
            "places:\n\
             \x20 - name: support\n\
             \x20   match: {{platform: discord, channel: '{CHANNEL_ID}'}}\n\
             \x20   persona: {persona}\n\
             \x20   reply: always\n",
            persona = files.join("support.md").display(),
        ),
        ..DiscordSetup::default()
    }
}

/// Runs `air-friends reload` on `config`: (success, stdout, stderr).
fn reload(config: &Path) -> (bool, String, String) {
    let out = Command::new(bin())
        .args(["reload", "--config"])
        .arg(config)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A reload switches a place's persona without a restart and retires that place's warm agent
/// only; a setting that cannot change live is reported as needing a restart and left alone;
/// a file that fails the check is not sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_switches_a_persona_and_retires_only_the_affected_warm_agent() {
    let mut bot = DiscordServe::start(reload_setup).await;
    let alice = || user(USER_ID, "alice", false);
    bot.push(CHANNEL_ID, alice(), "first question");
    bot.wait_bot_messages(CHANNEL_ID, 1).await;
    bot.dm("hello");
    bot.wait_bot_messages(DM_CHANNEL_ID, 1).await;
    bot.wait_interactions_finished(2);
    assert!(bot.prompts()[0].contains("SUPPORT-DESK"));
    assert_eq!(bot.agents_started(), 2);

    let path = bot.config.path.clone();
    let original = std::fs::read_to_string(&path).unwrap();
    // A broken file: refused before anything is sent.
    std::fs::write(&path, format!("{original}\nnoSuchKey: 1\n")).unwrap();
    let (ok, _, err) = reload(&path);
    assert!(!ok);
    assert!(err.contains("not asked to reload"), "{err}");
    assert!(err.contains("noSuchKey"), "{err}");

    // The support rule's persona changes (live) and so does agent.idleTimeoutMs (restart).
    let changed = original
        .replace("support.md", "support2.md")
        .replace("idleTimeoutMs: 30000", "idleTimeoutMs: 31000");
    assert_ne!(changed, original);
    std::fs::write(&path, changed).unwrap();
    let (ok, out, err) = reload(&path);
    assert!(ok, "{err}");
    assert!(out.contains("asked the daemon (pid"), "{out}");
    let line = bot.wait_log(|v| v["message"] == "configuration reloaded");
    assert_eq!(line["changed"], "[\"places\"]", "{line}");
    assert_eq!(line["needs_restart"], "[\"agent.idleTimeoutMs\"]", "{line}");

    // The support channel: a fresh agent with the new persona.
    bot.push(CHANNEL_ID, alice(), "second question");
    bot.wait_bot_messages(CHANNEL_ID, 2).await;
    bot.wait_interactions_finished(3);
    assert_eq!(bot.agents_started(), 3, "the support agent was retired");
    let prompts = bot.prompts();
    let last = prompts.last().unwrap();
    assert!(last.contains("NEW-DESK"), "{last}");
    assert!(!last.contains("SUPPORT-DESK"), "{last}");

    // The DM's place did not change: its warm agent answers.
    bot.dm("still there?");
    bot.wait_bot_messages(DM_CHANNEL_ID, 2).await;
    bot.wait_interactions_finished(4);
    assert_eq!(bot.agents_started(), 3, "the DM's warm agent was kept");
    let metrics = bot.metrics().await;
    assert!(
        metrics.contains(r#"air_friends_config_reloads_total{outcome="applied"} 1"#),
        "{metrics}"
    );
    bot.stop();
}

/// `places explain` prints each setting and the rule or key it comes from.
#[test]
fn places_explain_names_the_rule_behind_each_setting() {
    let files = tempfile::tempdir().unwrap();
    std::fs::write(files.path().join("support.md"), SUPPORT_PERSONA).unwrap();
    let config = TestConfig::new(&format!(
        "agent:\n  model: openrouter/big\n  skillsDir: {skills}\nprompts:\n  dir: {prompts}\n{places}",
        skills = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("skills")
            .display(),
        prompts = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("prompts")
            .display(),
        places = places_yaml(files.path()),
    ));
    let explain = |place: &str| {
        let out = Command::new(bin())
            .args(["places", "explain", "--config"])
            .arg(&config.path)
            .arg(place)
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (ok, text, err) = explain(&format!(
        "discord/guild/{GUILD_ID}/parent/{CHANNEL_ID}/channel/9"
    ));
    assert!(ok, "{err}");
    let line = |text: &str, key: &str| -> String {
        text.lines()
            .find(|l| l.split_whitespace().next() == Some(key))
            .unwrap_or_else(|| panic!("no {key} line in {text}"))
            .to_owned()
    };
    assert!(line(&text, "rule").contains("support"), "{text}");
    assert!(line(&text, "model").contains("openrouter/cheap"), "{text}");
    assert!(
        line(&text, "model").ends_with("(places.0 (support))"),
        "{text}"
    );
    assert!(line(&text, "reply").contains("always"), "{text}");
    assert!(line(&text, "skills").contains("send-reply"), "{text}");
    assert!(
        line(&text, "language").contains(" en ")
            && line(&text, "language").ends_with("(prompts.language)"),
        "{text}"
    );
    let (ok, text, _) = explain(&format!(
        "discord/guild/{GUILD_ID}/category/{CATEGORY_ID}/channel/{SPENT_CHANNEL}"
    ));
    assert!(ok);
    assert!(
        line(&text, "language").contains(" ja ")
            && line(&text, "language").ends_with("(places.1 (spent))"),
        "{text}"
    );

    let (ok, text, _) = explain("discord/dm");
    assert!(ok);
    assert!(
        line(&text, "rule").starts_with("rule")
            && line(&text, "rule").contains("default")
            && line(&text, "rule").ends_with("(no rule of places fits)"),
        "{text}"
    );
    assert!(line(&text, "model").ends_with("(agent.model)"), "{text}");

    let (ok, _, err) = explain("discord/room/1");
    assert!(!ok);
    assert!(err.contains("unknown part \"room\""), "{err}");
}

/// `air-friends reload` with no daemon on the configured database says so and fails.
#[test]
fn reload_without_a_daemon_says_so() {
    let config = TestConfig::new("");
    let (ok, out, err) = reload(&config.path);
    assert!(!ok, "{out}");
    assert!(err.contains("no daemon runs on"), "{err}");
}

/// A user command no place of a server allows is not registered there as a slash command;
/// one a channel's rule allows is; the DMs' global registration keeps every command.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slash_command_is_registered_only_where_a_place_allows_its_skill() {
    let bot = DiscordServe::start(|_| DiscordSetup {
        extra_yaml: format!(
            "places:\n\
             \x20 - {{name: help, match: {{guild: '{GUILD_ID}', channel: '{CHANNEL_ID}'}}, skills: [send-reply, memory-search]}}\n\
             \x20 - {{name: server, match: {{guild: '{GUILD_ID}'}}, skills: [send-reply]}}\n"
        ),
        ..DiscordSetup::default()
    })
    .await;
    let names = |body: &Value| -> Vec<String> {
        body.as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap().to_owned())
            .collect()
    };
    let guild = bot
        .wait_requests(
            "PUT",
            &format!("/applications/{APP_ID}/guilds/{GUILD_ID}/commands"),
            1,
        )
        .await;
    // `/privacy` and `/forget` are the daemon's own, no skills: a person may ask what is kept
    // about them, and have it forgotten, wherever the bot is.
    assert_eq!(
        names(guild[0].json.as_ref().unwrap()),
        ["memory-search", "privacy", "forget", "forget-confirm"]
    );
    let global = bot
        .wait_requests("PUT", &format!("/applications/{APP_ID}/commands"), 1)
        .await;
    let global = names(global[0].json.as_ref().unwrap());
    assert!(
        global.contains(&"memory-stats".to_owned()),
        "the DMs keep every command: {global:?}"
    );
    bot.stop();
}

/// On Misskey a note posted in a channel (its `channelId`) gets that channel's place: its
/// persona is in the prompt and its name labels the turn; a note elsewhere gets the defaults.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_misskey_channel_note_gets_its_channels_place() {
    use common::fake_misskey::NoteOpts;
    use common::serve_misskey::{MisskeyServe, MisskeySetup, log_field, reply_steps, script};
    let files = tempfile::tempdir().unwrap();
    let persona = files.path().join("club.md");
    std::fs::write(
        &persona,
        "You are CLUB-HOST, the book club's host.\n\n{{safety}}",
    )
    .unwrap();
    let mut serve = MisskeyServe::start(
        script(reply_steps("Welcome to the club.")),
        MisskeySetup {
            extra_yaml: format!(
                "places:\n  - {{name: book-club, match: {{platform: misskey, channel: club1}}, persona: {}}}\n",
                persona.display()
            ),
            ..MisskeySetup::default()
        },
    )
    .await;
    serve.fake.mention(
        "u1",
        "@airfriends which book this month?",
        NoteOpts::default().in_channel("club1"),
    );
    serve.wait_for_calls("notes/create", 1).await;
    let finished = serve.wait_for_log("interaction finished", &[("place", json!("book-club"))]);
    assert_eq!(log_field(&finished, "place"), "book-club");
    serve
        .fake
        .mention("u1", "@airfriends and outside?", NoteOpts::default());
    serve.wait_for_calls("notes/create", 2).await;
    serve.wait_for_log("interaction finished", &[("place", json!("default"))]);
    let prompts: Vec<String> = serve
        .agent_log_lines()
        .iter()
        .filter(|v| v["received"]["method"] == "session/prompt")
        .map(|v| v["received"]["params"]["prompt"].to_string())
        .collect();
    assert!(prompts[0].contains("CLUB-HOST"), "{}", prompts[0]);
    assert!(!prompts.last().unwrap().contains("CLUB-HOST"));
    serve.daemon.terminate();
    assert!(serve.daemon.wait_exit(WAIT).success());
}

/// At start-up the bot's permissions in each channel it sees are checked against what the
/// channel's place asks: one warning names each channel that lacks something, its place and
/// what is missing. A channel hidden from the bot, one whose place never answers, and one that
/// has everything are not named.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_up_names_the_permissions_a_place_needs_and_the_bot_lacks() {
    const BOT_ROLE: &str = "3001";
    const SEND_MESSAGES: u64 = 1 << 11;
    const ADD_REACTIONS: u64 = 1 << 6;
    const VIEW_CHANNEL: u64 = 1 << 10;
    const CREATE_PUBLIC_THREADS: u64 = 1 << 35;
    let denying = |id: &str, name: &str, deny: u64| {
        let mut channel =
            common::fake_discord::channel_json(id, ChannelKind::Text, Some(CATEGORY_ID), name);
        channel["permission_overwrites"] =
            json!([{"id": BOT_ROLE, "type": 0, "allow": "0", "deny": deny.to_string()}]);
        channel
    };
    // Everything an installation could be given, but Administrator (which overrides every
    // channel's overwrites).
    const ADMINISTRATOR: u64 = 1 << 3;
    let mut bot = DiscordServe::start(|_| DiscordSetup {
        role_permissions: Some(((1u64 << 51) - 1) & !ADMINISTRATOR),
        guild_channels: vec![
            denying("4400", "no-send", SEND_MESSAGES | ADD_REACTIONS),
            denying("4401", "hidden", VIEW_CHANNEL),
            denying("4402", "help", CREATE_PUBLIC_THREADS),
            denying("4403", "quiet", SEND_MESSAGES),
            denying("4404", "replies-only", ADD_REACTIONS),
        ],
        extra_yaml: "places:\n\
             \x20 - {name: help, match: {channel: '4402'}, threads: perConversation}\n\
             \x20 - {name: quiet, match: {channel: '4403'}, reply: never}\n\
             \x20 - {name: plain, match: {channel: '4404'}, skills: [send-reply]}\n"
            .to_owned(),
        ..DiscordSetup::default()
    })
    .await;
    let record = bot.logged_or_wait(|l| {
        l["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("the bot lacks permissions"))
    });
    let fields = &record;
    assert_eq!(record["level"], "WARN", "{record}");
    assert_eq!(
        fields["guild_id"].as_u64(),
        GUILD_ID.parse().ok(),
        "{record}"
    );
    assert_eq!(fields["channels"], 2, "{record}");
    let missing = fields["missing"].as_str().unwrap();
    assert_eq!(
        missing,
        "#no-send (4400, place default): Add Reactions, Send Messages; \
         #help (4402, place help): Create Public Threads",
        "{record}"
    );
    assert!(
        fields["fix"].as_str().unwrap().contains("invite-url"),
        "{record}"
    );
    bot.stop();
}
