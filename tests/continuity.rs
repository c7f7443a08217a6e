//! Conversation continuity with the real binary, the fake Discord and the scripted fake ACP
//! agent (which keeps its sessions as files in its data folder, as OpenCode keeps its database
//! there): after a restart the conversation's next agent resumes the earlier session in the
//! conversation's own state folder and is prompted with only what is new; a refused resume
//! falls back to a new session and the user is answered all the same; another conversation
//! never sees the first one's folder.

mod common;

use air_friends::conversation::notices::Notice;
use common::fake_discord::{CHANNEL_ID, DM_CHANNEL_ID};
use common::serve_discord::{
    DiscordServe, DiscordSetup, noted_setup, one_turn, reply_steps, text_path,
};
use serde_json::{Value, json};

fn setup(files: &std::path::Path, extra: Value) -> DiscordSetup {
    noted_setup(files, extra)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_restart_the_conversation_resumes_its_session_with_only_what_is_new() {
    let mut bot = DiscordServe::start(|files| setup(files, json!({"resume": "resume"}))).await;
    bot.mention("remember the word PELICAN");
    bot.wait_bot_messages(CHANNEL_ID, 1).await;
    bot.wait_interactions_finished(1);
    let first_session = bot.received("session/prompt")[0]["sessionId"]
        .as_str()
        .expect("the first prompt's session")
        .to_owned();

    bot.restart(false).await;
    bot.mention("what was the word?");
    bot.wait_bot_messages(CHANNEL_ID, 2).await;
    assert_eq!(
        bot.agents_started(),
        2,
        "the restart stopped the first agent"
    );
    let resumes = bot.received("session/resume");
    assert_eq!(resumes.len(), 1, "{resumes:?}");
    assert_eq!(resumes[0]["sessionId"], first_session.as_str());
    assert_eq!(
        bot.received("session/prompt")[1]["sessionId"],
        first_session.as_str(),
        "the second turn runs on the resumed session"
    );
    assert_eq!(
        bot.received("session/new").len(),
        1,
        "no second new session"
    );
    let prompts = bot.prompts();
    assert_eq!(prompts.len(), 2, "{prompts:?}");
    assert!(prompts[0].contains("PELICAN"), "{}", prompts[0]);
    assert!(
        !prompts[1].contains("PELICAN"),
        "the resumed session was shown the first message already: {}",
        prompts[1]
    );
    assert!(prompts[1].contains("what was the word?"), "{}", prompts[1]);
    assert!(
        prompts[1].contains("continues on your earlier session")
            && prompts[1].contains("Session id: "),
        "a resumed session is told its new session id: {}",
        prompts[1]
    );
    // The system prompt (the start of the first prompt) is not sent again.
    let first_text = bot.received("session/prompt")[0]["prompt"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let system_start: String = first_text.chars().take(120).collect();
    assert!(system_start.len() > 40, "{first_text}");
    let second_text = bot.received("session/prompt")[1]["prompt"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        !second_text.contains(&system_start) && second_text.len() < first_text.len(),
        "a follow-up, not the whole prompt: {second_text}"
    );
    let resumed = bot.logged_or_wait(|l| l["message"] == "agent session resumed");
    assert_eq!(resumed["method"], "session/resume", "{resumed}");

    // Another conversation of the same user (a DM) starts its own session in its own folder.
    bot.dm("hello in private");
    bot.wait_bot_messages(DM_CHANNEL_ID, 1).await;
    assert_eq!(bot.received("session/resume").len(), 1);
    assert_eq!(bot.received("session/new").len(), 2);
    bot.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_resume_starts_a_new_session_and_the_user_is_answered() {
    let mut bot = DiscordServe::start(|files| {
        setup(
            files,
            json!({"resume": "resume", "resumeError": "the session database is damaged"}),
        )
    })
    .await;
    bot.mention("first");
    bot.wait_bot_messages(CHANNEL_ID, 1).await;
    bot.restart(false).await;
    bot.mention("second");
    let replies = bot.wait_bot_messages(CHANNEL_ID, 2).await;
    assert_eq!(replies[1].content, "Noted.");
    assert_eq!(bot.received("session/resume").len(), 1);
    assert_eq!(
        bot.received("session/new").len(),
        2,
        "a new session instead"
    );
    let warning = bot.logged_or_wait(|l| {
        l["message"] == "the agent did not resume the conversation's session; starting a new one"
    });
    assert_eq!(warning["level"], "WARN", "{warning}");
    let prompts = bot.prompts();
    assert!(
        prompts[1].contains("first"),
        "a new session gets the whole prompt: {}",
        prompts[1]
    );
    bot.stop();
}

/// A hostile agent in the real sandbox plants files, a configuration and links in its data
/// folder (its conversation's state folder): another conversation of the same user (a DM)
/// never sees them, and before the first conversation's next start everything but the session
/// database is gone (links, configuration, plugins) while its session resumes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conversations_state_folder_is_its_own_and_keeps_only_its_session_database() {
    let plant = "mkdir -p \"$XDG_DATA_HOME/opencode/plugin\" && echo evil > \"$XDG_DATA_HOME/opencode/plugin/evil.js\" \
                 && echo '{\"plugin\":[\"evil\"]}' > \"$XDG_DATA_HOME/opencode.json\" \
                 && ln -sfn /etc \"$XDG_DATA_HOME/escape\" && ln -sfn / \"$XDG_DATA_HOME/opencode/root\" && echo planted";
    let mut bot = DiscordServe::start(|files| {
        let mut steps = vec![
            json!({"run": "echo \"seen: $(cd \"$XDG_DATA_HOME\" && find . -mindepth 1 | tr '\\n' ' ')\""}),
            json!({"run": plant}),
        ];
        steps.extend(reply_steps(&text_path(files, "answer.md")));
        let mut script = one_turn(steps);
        script["resume"] = json!("resume");
        DiscordSetup {
            script,
            texts: vec![("answer.md", "Noted.".to_owned())],
            sandbox: Some(String::new()),
            ..DiscordSetup::default()
        }
    })
    .await;
    let seen = |bot: &DiscordServe| -> Vec<String> {
        bot.agent_log_lines()
            .into_iter()
            .filter(|v| v["event"] == "run")
            .filter_map(|v| v["result"]["stdout"].as_str().map(str::to_owned))
            .filter(|out| out.starts_with("seen:"))
            .collect()
    };
    bot.mention("hello in public");
    bot.wait_bot_messages(CHANNEL_ID, 1).await;
    let planted = bot
        .agent_log_lines()
        .into_iter()
        .any(|v| v["event"] == "run" && v["result"]["stdout"] == "planted\n");
    assert!(
        planted,
        "the agent could not write its data folder: {}",
        bot.agent_events()
    );

    // The DM's agent sees a folder of its own: nothing the public one planted.
    bot.dm("hello in private");
    bot.wait_bot_messages(DM_CHANNEL_ID, 1).await;
    let views = seen(&bot);
    assert_eq!(views.len(), 2, "{views:?}");
    for planted in ["escape", "opencode.json", "plugin", "root"] {
        assert!(
            !views[1].contains(planted),
            "the DM saw {planted}: {}",
            views[1]
        );
    }

    // On the host the public folder holds what was planted, links included ...
    let root = bot.config.dir.path().join("data/agent-state");
    let folders: Vec<std::path::PathBuf> = std::fs::read_dir(&root)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    assert_eq!(folders.len(), 2, "one folder per conversation: {folders:?}");
    let public = folders
        .iter()
        .find(|f| {
            std::fs::symlink_metadata(f.join("escape")).is_ok_and(|m| m.file_type().is_symlink())
        })
        .expect("the public folder with the planted link")
        .clone();

    // ... and after a restart its next start keeps only the session database: no link, no
    // planted file; the session resumes from it.
    bot.restart(false).await;
    bot.mention("again in public");
    bot.wait_bot_messages(CHANNEL_ID, 2).await;
    assert!(
        public.join("opencode/opencode.db").is_file(),
        "the same folder, its database kept"
    );
    let views = seen(&bot);
    assert_eq!(views.len(), 3, "{views:?}");
    let found: Vec<&str> = views[2]["seen: ".len()..].split_whitespace().collect();
    assert_eq!(
        found,
        ["./opencode", "./opencode/opencode.db"],
        "what the agent found at its start: {}",
        views[2]
    );
    assert!(
        bot.agent_log_lines()
            .iter()
            .any(|v| v["received"]["method"] == "session/resume"),
        "the public conversation resumed"
    );
    bot.stop();
}

/// A state folder that is gone (removed, a restored database on a new machine) starts a new
/// session without a word to the user; an agent that cannot start on its kept state gets an
/// empty folder and a new session at the next message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_or_unusable_state_folder_starts_afresh() {
    let mut bot = DiscordServe::start(|files| setup(files, json!({"resume": "resume"}))).await;
    let script = |files: &std::path::Path, extra: Value| {
        let mut script = one_turn(reply_steps(&text_path(files, "answer.md")));
        script["resume"] = json!("resume");
        if let (Value::Object(script), Value::Object(extra)) = (&mut script, extra) {
            script.extend(extra);
        }
        script
    };
    bot.mention("first");
    bot.wait_bot_messages(CHANNEL_ID, 1).await;
    bot.restart(false).await;
    let root = bot.config.dir.path().join("data/agent-state");
    for folder in std::fs::read_dir(&root).unwrap().flatten() {
        std::fs::remove_dir_all(folder.path()).unwrap();
    }
    bot.mention("second");
    let replies = bot.wait_bot_messages(CHANNEL_ID, 2).await;
    assert_eq!(replies[1].content, "Noted.", "answered as usual");
    assert!(
        bot.received("session/resume").is_empty(),
        "nothing to resume"
    );
    assert_eq!(bot.received("session/new").len(), 2);

    // The next agent cannot even start: the user is told once; the message after that gets
    // a new session in an emptied folder, not another try at the kept one.
    bot.restart(false).await;
    let files = bot.files.path().to_path_buf();
    bot.agent.write(script(
        &files,
        json!({"initialize": {"error": "the database is damaged"}}),
    ));
    bot.mention("third");
    let replies = bot.wait_bot_messages(CHANNEL_ID, 3).await;
    assert_eq!(replies[2].content, Notice::Error.english());
    bot.agent.write(script(&files, json!({})));
    bot.mention("fourth");
    let replies = bot.wait_bot_messages(CHANNEL_ID, 4).await;
    assert_eq!(replies[3].content, "Noted.");
    assert!(
        bot.received("session/resume").is_empty(),
        "the kept session was forgotten after the failed start"
    );
    bot.stop();
}
