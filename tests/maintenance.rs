//! Memory maintenance through the real `air-friends serve` with the scripted fake ACP agent,
//! whose steps run the real memory skills: a workspace with enough old memories is consolidated
//! in the quiet hours (here all day), public and private memories in separate runs. The agent
//! asks for everything (both merges in both runs, a patch of a young memory, a reply); the
//! daemon lets through only what the run may do: a public summary of public memories, a private
//! summary of private ones, nothing young touched, nothing sent. In a dry run nothing changes.

mod common;

use std::path::{Path, PathBuf};

use air_friends::store::{ExportFilter, Scope, Store, Visibility, WorkspaceKey};
use chrono::{Duration, Utc};
use common::fake_discord::USER_ID;
use common::serve::skill_step;
use common::serve_discord::{DiscordServe, DiscordSetup, one_turn};
use serde_json::{Value, json};

/// Old public memories the agent merges (ids kept by the import), and the others.
const HIKE_A: &str = "mem_hike_a";
const HIKE_B: &str = "mem_hike_b";
const TEA: &str = "mem_tea";
const YOUNG: &str = "mem_young";
const FEAR_A: &str = "mem_fear_a";
const FEAR_B: &str = "mem_fear_b";
const PUBLIC_SUMMARY: &str = "Loves hiking; hiked Yangmingshan in May.";
const PRIVATE_SUMMARY: &str = "Afraid of heights and of deep water.";

fn line(id: &str, ts: &str, visibility: &str, content: &str) -> String {
    json!({"id": id, "ts": ts, "type": "memory", "enabled": true, "visibility": visibility,
           "importance": "normal", "content": content})
    .to_string()
}

/// An AIr-Friends data folder for the fake Discord's user: four old public memories and a
/// young one, two old private ones.
fn data_tree(root: &Path) -> PathBuf {
    let ws = root.join("import/workspaces/discord").join(USER_ID);
    std::fs::create_dir_all(&ws).unwrap();
    let yesterday = (Utc::now() - Duration::days(1)).to_rfc3339();
    let public = [
        line(HIKE_A, "2025-01-02T03:04:05Z", "public", "likes hiking"),
        line(
            HIKE_B,
            "2025-05-20T10:00:00Z",
            "public",
            "hiked Yangmingshan in May",
        ),
        line(TEA, "2025-06-01T10:00:00Z", "public", "drinks oolong tea"),
        line(
            "mem_game",
            "2025-07-01T10:00:00Z",
            "public",
            "plays go on weekends",
        ),
        line(YOUNG, &yesterday, "public", "went hiking again yesterday"),
    ];
    std::fs::write(ws.join("memory.public.jsonl"), public.join("\n") + "\n").unwrap();
    let private = [
        line(
            FEAR_A,
            "2025-02-02T03:04:05Z",
            "private",
            "afraid of heights",
        ),
        line(
            FEAR_B,
            "2025-03-02T03:04:05Z",
            "private",
            "afraid of deep water",
        ),
    ];
    std::fs::write(ws.join("memory.private.jsonl"), private.join("\n") + "\n").unwrap();
    root.join("import")
}

/// The agent tries everything in every run; the daemon decides what happens.
fn greedy_agent(files: &Path) -> Value {
    let public = files.join("public.md");
    let private = files.join("private.md");
    std::fs::write(&public, PUBLIC_SUMMARY).unwrap();
    std::fs::write(&private, PRIVATE_SUMMARY).unwrap();
    std::fs::write(files.join("reply.md"), "hello from maintenance").unwrap();
    let copy = |from: &Path, to: &str| json!({"run": format!("cp '{}' \"$TMPDIR/$SESSION_ID/{to}\"", from.display())});
    one_turn(vec![
        copy(&public, "s1.md"),
        skill_step(
            "memory-save",
            &format!("--content-file $TMPDIR/$SESSION_ID/s1.md --supersedes {HIKE_A},{HIKE_B}"),
        ),
        copy(&private, "s2.md"),
        skill_step(
            "memory-save",
            &format!("--content-file $TMPDIR/$SESSION_ID/s2.md --supersedes {FEAR_A},{FEAR_B}"),
        ),
        skill_step("memory-patch", &format!("--memory-id {YOUNG} --no-enabled")),
        copy(&files.join("reply.md"), "reply.md"),
        skill_step("send-reply", "--message-file $TMPDIR/$SESSION_ID/reply.md"),
    ])
}

fn maintenance_yaml(dry_run: bool, quiet_hours: &str) -> String {
    format!(
        "memory:\n  maintenance:\n    enabled: true\n    dryRun: {dry_run}\n    quietHours: \"{quiet_hours}\"\n    minMemories: 3\n    intervalHours: 24\n    minAgeDays: 30\n"
    )
}

/// The daemon with the data tree and the greedy agent; the quiet hours are all day.
async fn start(dry_run: bool) -> DiscordServe {
    start_with(dry_run, "00:00-00:00").await
}

async fn start_with(dry_run: bool, quiet_hours: &str) -> DiscordServe {
    let quiet_hours = quiet_hours.to_owned();
    DiscordServe::start(|files| DiscordSetup {
        script: greedy_agent(files),
        extra_yaml: maintenance_yaml(dry_run, &quiet_hours),
        import: Some(data_tree(files)),
        ..DiscordSetup::default()
    })
    .await
}

/// Waits for both runs (public, then private) and returns their log records.
fn wait_runs(bot: &mut DiscordServe) -> Vec<Value> {
    bot.wait_log(|v| v["message"] == "memory maintenance finished" && v["visibility"] == "private");
    bot.logged()
        .into_iter()
        .filter(|v| v["message"] == "memory maintenance finished")
        .collect()
}

async fn store_of(bot: &DiscordServe) -> Store {
    let config =
        air_friends::config::load_file(&bot.config.path, &air_friends::config::ProcessEnv).unwrap();
    Store::open(&config.database_path()).await.unwrap()
}

fn ws() -> WorkspaceKey {
    WorkspaceKey::new("discord", USER_ID).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn old_memories_are_merged_per_visibility_and_nothing_else_happens() {
    let mut bot = start(false).await;
    let runs = wait_runs(&mut bot);
    assert_eq!(runs.len(), 2, "{runs:#?}");
    for (run, (visibility, read)) in runs.iter().zip([("public", 4), ("private", 2)]) {
        assert_eq!(run["visibility"], visibility, "{run:#}");
        assert_eq!(run["outcome"], "completed", "{run:#}");
        assert_eq!(run["read"], read, "{run:#}");
        assert_eq!(run["saved"], 1, "{run:#}");
        assert_eq!(run["disabled"], 2, "{run:#}");
        assert_eq!(run["dry_run"], false, "{run:#}");
    }

    // The public run was shown the old public memories only; the private run the private ones.
    let sent = bot.prompts();
    assert_eq!(sent.len(), 2, "{sent:#?}");
    assert!(
        sent[0].contains(HIKE_A) && sent[0].contains(TEA),
        "{}",
        sent[0]
    );
    assert!(
        !sent[0].contains(FEAR_A) && !sent[0].contains("heights"),
        "{}",
        sent[0]
    );
    assert!(
        !sent[0].contains(YOUNG),
        "a young memory was shown: {}",
        sent[0]
    );
    assert!(
        sent[1].contains(FEAR_A) && !sent[1].contains(HIKE_A),
        "{}",
        sent[1]
    );

    let store = store_of(&bot).await;
    let w = ws();
    let public = store
        .export_memories(&w, ExportFilter::all(Scope::PublicOnly))
        .await
        .unwrap();
    let summary = public
        .iter()
        .find(|m| m.content == PUBLIC_SUMMARY)
        .expect("public summary");
    assert_eq!(summary.visibility, Visibility::Public);
    assert_eq!(summary.supersedes, [HIKE_A, HIKE_B]);
    assert!(
        public.iter().all(|m| !m.content.contains("heights")),
        "private content reached a public memory: {public:#?}"
    );
    let state = |id: &str| public.iter().find(|m| m.id == id).map(|m| m.enabled);
    assert_eq!(state(HIKE_A), Some(false));
    assert_eq!(state(HIKE_B), Some(false));
    assert_eq!(state(TEA), Some(true));
    assert_eq!(state(YOUNG), Some(true), "the young memory was touched");

    let all = store
        .export_memories(&w, ExportFilter::all(Scope::IncludePrivate))
        .await
        .unwrap();
    let private = all
        .iter()
        .find(|m| m.content == PRIVATE_SUMMARY)
        .expect("private summary");
    assert_eq!(private.visibility, Visibility::Private);
    assert_eq!(private.supersedes, [FEAR_A, FEAR_B]);
    assert_eq!(
        all.iter().filter(|m| m.content == PRIVATE_SUMMARY).count(),
        1
    );

    let recorded = store.maintenance_runs(&w).await.unwrap();
    assert_eq!(recorded.len(), 2);
    assert!(
        recorded
            .iter()
            .all(|r| r.outcome == "completed" && !r.dry_run)
    );

    // Nothing reached Discord: the reply was refused in both runs.
    assert!(bot.fake.requests_to("POST", "/api/v10/channels").is_empty());
    let refused = bot
        .agent_log_lines()
        .into_iter()
        .filter(|l| {
            l["event"] == "permission"
                && l["command"]
                    .as_str()
                    .is_some_and(|c| c.contains("send-reply"))
                && l["result"]["stderr"]
                    .as_str()
                    .is_some_and(|e| e.contains("FORBIDDEN_CONTEXT"))
        })
        .count();
    assert_eq!(refused, 2, "{:#?}", bot.agent_log_lines());
    let metrics = bot.metrics().await;
    assert!(
        metrics.contains("air_friends_maintenance_runs_total{outcome=\"completed\"} 2"),
        "{metrics}"
    );
    assert!(
        metrics.contains("air_friends_maintenance_memories_total{action=\"disabled\"} 4"),
        "{metrics}"
    );
    drop(store);
    bot.stop();
}

/// The agent of every maintenance run looks around its folder, reads `private/`, and leaves a
/// file behind for the user's next public session.
fn snooping_agent() -> Value {
    one_turn(vec![
        json!({"run": "pwd; ls -A"}),
        json!({"run": "cat private/diary.md"}),
        json!({"run": "cat diary-copy.md 2>/dev/null; echo copied > diary-copy.md; echo $?"}),
    ])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_maintenance_run_works_in_an_empty_folder_of_its_own_not_the_users_workspace() {
    let mut bot = DiscordServe::start(|files| DiscordSetup {
        script: snooping_agent(),
        extra_yaml: maintenance_yaml(false, "00:00-00:00"),
        import: Some(data_tree(files)),
        ..DiscordSetup::default()
    })
    .await;
    let config =
        air_friends::config::load_file(&bot.config.path, &air_friends::config::ProcessEnv).unwrap();
    let root = config
        .workspace
        .repo_path
        .join(&config.workspace.workspaces_dir);
    let user_ws = root.join("discord").join(USER_ID);
    std::fs::create_dir_all(user_ws.join("private")).unwrap();
    std::fs::write(user_ws.join("private/diary.md"), "my secret diary").unwrap();
    wait_runs(&mut bot);
    let runs: Vec<Value> = bot
        .agent_log_lines()
        .into_iter()
        .filter(|l| l["event"] == "run")
        .map(|l| l["result"].clone())
        .collect();
    assert_eq!(runs.len(), 6, "two runs of three steps: {runs:#?}");
    for run in runs.chunks(3) {
        let cwd = run[0]["stdout"].as_str().unwrap_or_default();
        let first_line = cwd.lines().next().unwrap_or_default();
        assert_ne!(
            Path::new(first_line),
            user_ws.as_path(),
            "a maintenance run works in the user's workspace: {run:#?}"
        );
        assert_eq!(
            cwd.lines().skip(1).collect::<Vec<_>>(),
            ["tmp"],
            "the folder holds only the staging folder: {run:#?}"
        );
        assert!(
            !run[1]["stdout"]
                .as_str()
                .unwrap_or_default()
                .contains("secret"),
            "a maintenance run read private/: {run:#?}"
        );
        assert_eq!(
            run[2]["stdout"].as_str().unwrap_or_default().trim(),
            "0",
            "the second run saw the first run's file: {run:#?}"
        );
    }
    assert!(
        !user_ws.join("diary-copy.md").exists(),
        "a maintenance run left a file in the user's workspace"
    );
    let scratch = root.join(".scratch");
    common::poll::eventually(
        std::time::Duration::from_secs(10),
        "the scratch folders are removed",
        || std::fs::read_dir(&scratch).is_ok_and(|mut d| d.next().is_none()),
    )
    .await;
    bot.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dry_run_changes_nothing_and_records_what_it_would_have_done() {
    let mut bot = start(true).await;
    let runs = wait_runs(&mut bot);
    assert_eq!(runs.len(), 2, "{runs:#?}");
    assert!(
        runs.iter()
            .all(|r| r["dry_run"] == true && r["saved"] == 1 && r["disabled"] == 2),
        "{runs:#?}"
    );
    let would: Vec<Value> = bot
        .logged()
        .into_iter()
        .filter(|v| v["message"] == "memory maintenance dry run: nothing written")
        .collect();
    assert_eq!(would.len(), 2, "{would:#?}");

    let store = store_of(&bot).await;
    let all = store
        .export_memories(&ws(), ExportFilter::all(Scope::IncludePrivate))
        .await
        .unwrap();
    assert_eq!(all.len(), 7, "{all:#?}");
    assert!(all.iter().all(|m| m.enabled), "{all:#?}");
    let recorded = store.maintenance_runs(&ws()).await.unwrap();
    assert!(recorded.len() == 2 && recorded.iter().all(|r| r.dry_run));
    drop(store);
    bot.stop();
}

/// Outside the quiet hours nothing runs, however due a workspace is: the window here opens two
/// hours from now (the daemon's local time, as the test's) and closes an hour later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outside_the_quiet_hours_no_run_starts() {
    let now = chrono::Local::now().time();
    let at = |hours: i64| (now + Duration::hours(hours)).format("%H:%M").to_string();
    let mut bot = start_with(false, &format!("{}-{}", at(2), at(3))).await;
    let scheduled = |v: &Value| v["message"] == "memory maintenance scheduled";
    if !bot.logged().iter().any(scheduled) {
        bot.wait_log(scheduled);
    }
    // The scheduler decides at once; give it far more than that.
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    // A run would have started the fake agent (its log file) and left a record.
    assert!(
        bot.agent_log_lines().is_empty(),
        "an agent was started outside the quiet hours"
    );
    let store = store_of(&bot).await;
    assert!(store.maintenance_runs(&ws()).await.unwrap().is_empty());
    drop(store);
    bot.stop();
}
