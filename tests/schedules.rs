//! Operator schedules end to end (`schedules:`, docs/SCHEDULES.md): the real binary on the
//! fake Discord, driving the scripted fake ACP agent through the real skill scripts.
//!
//! A schedule run posts a new message (not a reply) in its channel, written by the place's
//! persona with the place's recent messages and the schedule's task in the prompt; `air-friends
//! schedules run NAME` runs one through the daemon's control socket and prints how it ended; a
//! quiet place skips a `quietIfNoActivity` run; a timetable fires on its own; a run missed while
//! the daemon was down is caught up once at the next start when young enough, and recorded as
//! skipped when not; `schedules list` prints the next runs.

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::bin;
use common::fake_discord::{CHANNEL_ID, GUILD_ID, USER_ID, user};
use common::serve_discord::{DiscordServe, DiscordSetup, one_turn, reply_steps, text_path};

const PERSONA: &str = "You are MORNING-HERALD, who greets the server.";
const TASK: &str = "Greet everyone and ask what they plan today (task qzxv-morning).";

fn schedules(args: &[&str], config: &Path) -> Output {
    Command::new(bin())
        .arg("schedules")
        .args(args)
        .arg("--config")
        .arg(config)
        .output()
        .unwrap()
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The channel's place with its persona; schedules posting there (each `(name, cron, extra
/// keys)`); the agent posts "Good morning!" with send-reply.
fn setup(files: &Path, entries: &[(&str, &str, &str)]) -> DiscordSetup {
    std::fs::write(files.join("herald.md"), PERSONA).unwrap();
    std::fs::write(files.join("morning.md"), TASK).unwrap();
    let mut yaml = format!(
        "places:\n  - name: lounge\n    match: {{channel: '{CHANNEL_ID}'}}\n    persona: {}\nschedules:\n",
        files.join("herald.md").display()
    );
    for (name, cron, extra) in entries {
        yaml.push_str(&format!(
            "  - name: {name}\n    cron: '{cron}'\n    timeZone: Europe/Berlin\n    place: discord/guild/{GUILD_ID}/channel/{CHANNEL_ID}\n    prompt: {prompt}\n{extra}",
            prompt = files.join("morning.md").display(),
        ));
    }
    DiscordSetup {
        script: one_turn(reply_steps(&text_path(files, "greeting.md"))),
        texts: vec![("greeting.md", "Good morning!".to_owned())],
        extra_yaml: yaml,
        ..DiscordSetup::default()
    }
}

/// Never due during a test: runs only by hand.
const YEARLY: &str = "0 0 1 1 *";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_by_hand_posts_a_new_message_in_its_place_with_the_places_persona() {
    let mut bot = DiscordServe::start(|files| setup(files, &[("morning", YEARLY, "")])).await;
    bot.push(
        CHANNEL_ID,
        user(USER_ID, "alice", false),
        "anyone up for tea later?",
    );

    let out = schedules(&["run", "morning"], &bot.config.path);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).starts_with("morning: posted, "),
        "{}",
        text(&out)
    );
    let posted = bot.wait_bot_messages(CHANNEL_ID, 1).await;
    assert_eq!(posted[0].content, "Good morning!");
    // A new message: no reference to any message.
    let post = bot.message_posts(CHANNEL_ID).pop().unwrap();
    let body = post.json.unwrap_or_default();
    assert!(
        body.get("message_reference").is_none(),
        "a scheduled post is no reply: {body}"
    );
    // The prompt: the place's persona, the task, the place's recent messages, and the
    // instructions of a post.
    let prompt = bot.prompts().pop().unwrap();
    for part in [
        "MORNING-HERALD",
        "## Scheduled post",
        "qzxv-morning",
        "anyone up for tea later?",
        "posting one new message in this place",
    ] {
        assert!(prompt.contains(part), "{part} missing from {prompt}");
    }
    // The session answers as the bot, in a public place.
    assert!(prompt.contains("a public conversation"), "{prompt}");
    let finished = bot.logged_or_wait(|v| v["message"] == "schedule run finished");
    assert_eq!(finished["schedule"], "morning");
    assert_eq!(finished["trigger"], "manual");
    assert!(
        bot.metrics()
            .await
            .contains("air_friends_schedule_runs_total{schedule=\"morning\",outcome=\"posted\"} 1"),
        "the run is counted"
    );

    // `schedules list` beside the running daemon shows the last run.
    let listing = text(&schedules(&["list"], &bot.config.path));
    assert!(
        listing.contains("UTC, manual: posted"),
        "the last run is listed: {listing}"
    );

    // Unknown names and schedules that are running are refused in words.
    let out = schedules(&["run", "evening"], &bot.config.path);
    assert!(!out.status.success());
    assert!(
        text(&out).contains("no schedule is named \"evening\""),
        "{}",
        text(&out)
    );
    bot.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_place_skips_a_quiet_if_no_activity_run_until_someone_writes() {
    let bot = DiscordServe::start(|files| {
        setup(
            files,
            &[("digest", YEARLY, "    quietIfNoActivity: true\n")],
        )
    })
    .await;
    bot.push(CHANNEL_ID, user(USER_ID, "alice", false), "hello there");
    // The first run has no earlier one to compare with: it runs.
    let out = schedules(&["run", "digest"], &bot.config.path);
    assert!(text(&out).starts_with("digest: posted"), "{}", text(&out));
    // Only the bot wrote since: skipped, which is no failure.
    let out = schedules(&["run", "digest"], &bot.config.path);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).starts_with("digest: skipped_quiet (nobody wrote there since"),
        "{}",
        text(&out)
    );
    assert_eq!(bot.bot_messages(CHANNEL_ID).len(), 1);
    // Someone writes: the next run posts.
    bot.push(CHANNEL_ID, user(USER_ID, "alice", false), "what's new?");
    let out = schedules(&["run", "digest"], &bot.config.path);
    assert!(text(&out).starts_with("digest: posted"), "{}", text(&out));
    assert_eq!(bot.wait_bot_messages(CHANNEL_ID, 2).await.len(), 2);
    bot.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timetable_fires_and_a_run_missed_during_a_restart_is_caught_up_or_skipped() {
    // `young` may be a minute late; `strict` never.
    let mut bot = DiscordServe::start(|files| {
        setup(
            files,
            &[
                ("young", "*/4 * * * * *", "    catchUpMinutes: 1\n"),
                ("strict", "*/4 * * * * *", "    catchUpMinutes: 0\n"),
            ],
        )
    })
    .await;
    // Both fire on their own within seconds.
    let fired = |bot: &mut DiscordServe, name: &'static str, trigger: &'static str| {
        bot.wait_log(move |v| {
            v["message"] == "schedule run finished"
                && v["schedule"] == name
                && v["trigger"] == trigger
        })
    };
    let young = fired(&mut bot, "young", "timetable");
    assert_eq!(young["outcome"], "posted", "{young}");
    assert!(bot.wait_bot_messages(CHANNEL_ID, 1).await[0].content == "Good morning!");
    // Down for longer than one period: each missed at least one run.
    bot.shut_down();
    std::thread::sleep(std::time::Duration::from_secs(5));
    bot.start_again().await;
    let caught = fired(&mut bot, "young", "catch_up");
    assert_eq!(caught["outcome"], "posted", "{caught}");
    let skipped =
        bot.logged_or_wait(|v| v["message"] == "schedule run skipped" && v["schedule"] == "strict");
    assert_eq!(skipped["outcome"], "skipped_missed", "{skipped}");
    assert!(
        skipped["detail"]
            .as_str()
            .unwrap()
            .contains("missed while the daemon was down"),
        "{skipped}"
    );
    // No caught-up run for `strict`.
    assert!(
        !bot.logged()
            .iter()
            .any(|v| v["message"] == "schedule run finished"
                && v["schedule"] == "strict"
                && v["trigger"] == "catch_up"),
        "strict ran a missed run"
    );
    bot.stop();
}

#[test]
fn schedules_list_prints_each_schedules_next_runs() {
    let files = tempfile::tempdir().unwrap();
    let setup = setup(files.path(), &[("morning", "0 8 * * 1-5", "")]);
    let config = common::TestConfig::new(&setup.extra_yaml);
    let out = schedules(&["list"], &config.path);
    let listing = text(&out);
    assert!(out.status.success(), "{listing}");
    assert!(
        listing.contains("morning  0 8 * * 1-5 (Europe/Berlin)  enabled"),
        "{listing}"
    );
    assert!(listing.contains("(place rule: lounge)"), "{listing}");
    // No database yet: no last run is claimed.
    assert!(!listing.contains("last:"), "{listing}");
    let next: Vec<&str> = listing.lines().filter(|l| l.contains(" UTC)")).collect();
    assert_eq!(next.len(), 3, "{listing}");
    assert!(next.iter().all(|l| l.contains("08:00:00 CE")), "{listing}");
}

/// A hostile scheduled agent tries to keep a memory and set a reminder before it posts: both
/// are refused (403 `FORBIDDEN_CONTEXT`), nothing is kept, and its post still goes out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scheduled_run_keeps_no_memories_and_sets_no_reminders() {
    use common::serve::skill_step;
    use serde_json::json;
    let bot = DiscordServe::start(|files| {
        let mut s = setup(files, &[("morning", YEARLY, "")]);
        let mut steps = vec![
            json!({"run": "printf 'alice likes tea' > \"$TMPDIR/$SESSION_ID/mem.md\""}),
            skill_step(
                "memory-save",
                "--content-file $TMPDIR/$SESSION_ID/mem.md --visibility public",
            ),
            skill_step(
                "set-reminder",
                "--message-file $TMPDIR/$SESSION_ID/mem.md --scheduled-at 2027-06-01T00:00:00Z",
            ),
        ];
        steps.extend(reply_steps(&text_path(files, "greeting.md")));
        s.script = one_turn(steps);
        s
    })
    .await;
    let out = schedules(&["run", "morning"], &bot.config.path);
    assert!(text(&out).starts_with("morning: posted"), "{}", text(&out));
    let events = bot.agent_events();
    assert_eq!(
        events.matches("FORBIDDEN_CONTEXT").count(),
        2,
        "both refused: {events}"
    );
    assert!(
        events.contains("not available in a scheduled run"),
        "{events}"
    );
    let db = bot.config.dir.path().join("data/air-friends.db");
    let conn = rusqlite::Connection::open(db).unwrap();
    for table in ["memories", "reminders"] {
        let n: i64 = conn
            .query_row(&format!("SELECT COUNT(*) FROM {table}"), [], |r| r.get(0))
            .unwrap();
        assert_eq!(n, 0, "{table}: {events}");
    }
    bot.stop();
}

/// On Misskey a schedule posts a new note in a Misskey channel (with the channel's recent
/// notes in the prompt), or on the bot's own timeline with the schedule's visibility: never a
/// reply, never specified.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_misskey_a_schedule_posts_in_a_channel_or_on_the_bots_timeline() {
    use common::fake_misskey::{BOT_ID, NoteOpts};
    use common::serve_misskey::{self, MisskeyServe, MisskeySetup};
    let files = tempfile::tempdir().unwrap();
    std::fs::write(files.path().join("task.md"), TASK).unwrap();
    let prompt = files.path().join("task.md");
    let bot = MisskeyServe::start(
        serve_misskey::script(serve_misskey::reply_steps("Good morning, channel!")),
        MisskeySetup {
            extra_yaml: format!(
                "schedules:\n\
                 \x20 - {{name: lounge, cron: '{YEARLY}', place: misskey/channel/chan1, prompt: {p}}}\n\
                 \x20 - {{name: timeline, cron: '{YEARLY}', place: misskey, visibility: public, prompt: {p}}}\n",
                p = prompt.display()
            ),
            ..MisskeySetup::default()
        },
    )
    .await;
    bot.fake.create_note(
        "u1",
        "who brings the cake on friday?",
        NoteOpts::default().in_channel("chan1"),
    );
    let out = schedules(&["run", "lounge"], &bot.config.path);
    assert!(text(&out).starts_with("lounge: posted"), "{}", text(&out));
    let out = schedules(&["run", "timeline"], &bot.config.path);
    assert!(text(&out).starts_with("timeline: posted"), "{}", text(&out));
    let created = bot.fake.calls_to("notes/create");
    assert_eq!(created.len(), 2, "{created:?}");
    assert_eq!(created[0]["channelId"], "chan1", "{created:?}");
    assert!(created[0].get("replyId").is_none(), "{created:?}");
    assert_eq!(created[1]["visibility"], "public", "{created:?}");
    assert!(
        created[1].get("replyId").is_none() && created[1].get("channelId").is_none(),
        "{created:?}"
    );
    let posts: Vec<_> = bot
        .fake
        .notes()
        .into_iter()
        .filter(|n| n["userId"] == BOT_ID)
        .collect();
    assert_eq!(posts.len(), 2);
    assert!(posts.iter().all(|n| n["text"] == "Good morning, channel!"));
    // The channel's run saw the channel's notes.
    let prompts: Vec<String> = bot
        .agent_log_lines()
        .iter()
        .filter(|v| v["received"]["method"] == "session/prompt")
        .map(|v| v["received"]["params"]["prompt"].to_string())
        .collect();
    assert!(
        prompts[0].contains("who brings the cake on friday?"),
        "{}",
        prompts[0]
    );
    assert!(
        !prompts[1].contains("who brings the cake"),
        "{}",
        prompts[1]
    );
}

/// `air-friends reload` puts a changed `schedules:` in force without a restart: a schedule
/// added to the file runs on its timetable, and the reload names `schedules` as changed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_adds_a_schedule_without_a_restart() {
    let mut bot = DiscordServe::start(|files| setup(files, &[("morning", YEARLY, "")])).await;
    let path = bot.config.path.clone();
    let original = std::fs::read_to_string(&path).unwrap();
    let morning = original
        .find("  - name: morning")
        .expect("the morning schedule");
    let entry = &original[morning..];
    let end = entry.find("\n  - ").map_or(entry.len(), |i| i + 1);
    let tick = entry[..end]
        .replace("name: morning", "name: tick")
        .replace(YEARLY, "*/2 * * * * *");
    std::fs::write(&path, format!("{original}{tick}")).unwrap();
    let out = Command::new(bin())
        .args(["reload", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let line = bot.wait_log(|v| v["message"] == "configuration reloaded");
    assert_eq!(line["changed"], "[\"schedules\"]", "{line}");
    assert_eq!(line["needs_restart"], "[]", "{line}");
    let fired =
        bot.wait_log(|v| v["message"] == "schedule run finished" && v["schedule"] == "tick");
    assert_eq!(fired["trigger"], "timetable", "{fired}");
    bot.stop();
}
