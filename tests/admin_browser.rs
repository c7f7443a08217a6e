//! The operator console in a real browser (Debian's `chromium`, headless) against the real
//! daemon on the fake Discord: `air-friends admin-link` prints a link; opened, it logs in and
//! shows *Now* with the running turn of a DM (without its text), its script refreshes the live
//! section under the Content-Security-Policy; the same link opened again is refused; a browser
//! without the cookie gets the login page. Screenshots of the pages are written to
//! `{CARGO_TARGET_TMPDIR}/console/`.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::fake_discord::DM_CHANNEL_ID;
use common::serve_discord::{DiscordServe, DiscordSetup, one_turn, reply_steps, text_path};
use serde_json::json;

/// Debian's chromium, or `None` outside CI when it is not installed (under `CI=true` a
/// missing browser fails the test).
fn chromium() -> Option<PathBuf> {
    let found = ["chromium", "chromium-browser", "google-chrome"]
        .iter()
        .find_map(|name| {
            std::env::var_os("PATH").and_then(|paths| {
                std::env::split_paths(&paths)
                    .map(|dir| dir.join(name))
                    .find(|p| p.is_file())
            })
        });
    if found.is_none() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "chromium is not installed (apt-get install chromium); CI must run the browser tests"
        );
        eprintln!("chromium not installed: the browser test does not run here");
    }
    found
}

/// A fresh headless browser (its own profile in `profile`) run with `args` on `url`: stdout.
fn browse(browser: &Path, profile: &Path, args: &[&str], url: &str) -> String {
    let out = Command::new(browser)
        .args([
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--hide-scrollbars",
            "--window-size=1280,860",
            "--virtual-time-budget=4000",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .arg(url)
        .output()
        .expect("run chromium");
    assert!(
        out.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `air-friends admin-link` against the daemon of `config`: the link it prints.
fn admin_link(config: &Path) -> String {
    let out = Command::new(common::bin())
        .args(["admin-link", "--config"])
        .arg(config)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "admin-link failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_logs_in_once_shows_the_running_turn_and_refreshes_it() {
    let Some(browser) = chromium() else { return };
    let shots = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("console");
    std::fs::create_dir_all(&shots).unwrap();
    let mut bot = DiscordServe::start(|files| {
        let mut steps = vec![json!({"sleepMs": 15000})];
        steps.extend(reply_steps(&text_path(files, "reply.md")));
        DiscordSetup {
            script: one_turn(steps),
            texts: vec![("reply.md", "All done.".to_owned())],
            extra_yaml: "admin:\n  enabled: true\n".to_owned(),
            ..DiscordSetup::default()
        }
    })
    .await;
    let secret_text = "my secret plan qx7 for the weekend";
    bot.dm(secret_text);
    common::poll::poll(common::serve_discord::WAIT, || {
        bot.received("session/prompt").into_iter().next()
    })
    .await
    .expect("the turn runs");
    let profile = tempfile::tempdir().unwrap();

    // Without the cookie: the login page.
    let root = format!("http://{}/admin/", bot.ops_addr);
    let page = browse(&browser, profile.path(), &["--dump-dom"], &root);
    assert!(page.contains("air-friends admin-link"), "{page}");

    // The link logs in; Now shows the DM's turn, not its text; the script refreshed it.
    let link = admin_link(&bot.config.path);
    assert!(link.starts_with(&root), "{link}");
    let page = browse(&browser, profile.path(), &["--dump-dom"], &link);
    assert!(page.contains("Running turns (1)"), "{page}");
    assert!(page.contains(">DM<"), "{page}");
    assert!(page.contains("discord"), "{page}");
    assert!(!page.contains("qx7"), "a DM's text is never shown: {page}");
    assert!(
        page.contains("data-updated="),
        "the live section was refreshed by the script (CSP allows it): {page}"
    );
    // The same link again, in another browser: refused.
    let again = browse(
        &browser,
        tempfile::tempdir().unwrap().path(),
        &["--dump-dom"],
        &link,
    );
    assert!(again.contains("This link is not valid"), "{again}");
    // The first browser keeps its session (the cookie lasts admin.sessionHours).
    let kept = browse(&browser, profile.path(), &["--dump-dom"], &root);
    assert!(kept.contains("<h1>Now</h1>"), "{kept}");

    // Screenshots: the login page and Now with the turn.
    let login_shot = shots.join("login.png");
    browse(
        &browser,
        tempfile::tempdir().unwrap().path(),
        &[&format!("--screenshot={}", login_shot.display())],
        &root,
    );
    let now_shot = shots.join("now.png");
    browse(
        &browser,
        tempfile::tempdir().unwrap().path(),
        &[&format!("--screenshot={}", now_shot.display())],
        &admin_link(&bot.config.path),
    );
    // The other pages, in a browser logged in with a fresh link (its profile keeps the cookie).
    let other = tempfile::tempdir().unwrap();
    let page = browse(
        &browser,
        other.path(),
        &["--dump-dom"],
        &admin_link(&bot.config.path),
    );
    assert!(page.contains("<h1>Now</h1>"), "{page}");
    let mut shots_taken = vec![login_shot.clone(), now_shot.clone()];
    for (name, heading) in [
        ("conversations", "<h1>Conversations</h1>"),
        ("memories", "<h1>Memories</h1>"),
        ("skills", "<h1>Skills</h1>"),
        ("config", "<h1>Configuration</h1>"),
    ] {
        let url = format!("{root}{name}");
        let page = browse(&browser, other.path(), &["--dump-dom"], &url);
        assert!(page.contains(heading), "{page}");
        assert!(
            !page.contains(common::serve_discord::TOKEN),
            "no secret on {name}: {page}"
        );
        let shot = shots.join(format!("{name}.png"));
        browse(
            &browser,
            other.path(),
            &[&format!("--screenshot={}", shot.display())],
            &url,
        );
        shots_taken.push(shot);
    }
    for shot in &shots_taken {
        let bytes = std::fs::read(shot).unwrap();
        assert!(bytes.starts_with(b"\x89PNG"), "{}", shot.display());
        assert!(
            bytes.len() > 5_000,
            "{} is {} bytes",
            shot.display(),
            bytes.len()
        );
    }

    // The turn ends: Now says so.
    let replies = bot.wait_bot_messages(DM_CHANNEL_ID, 1).await;
    assert_eq!(replies[0].content, "All done.");
    let page = browse(
        &browser,
        tempfile::tempdir().unwrap().path(),
        &["--dump-dom"],
        &admin_link(&bot.config.path),
    );
    assert!(page.contains("No turn is running."), "{page}");
    let record = bot.logged_or_wait(|l| l["message"] == "admin action" && l["action"] == "login");
    assert!(
        record["who"].as_str().is_some_and(|w| w.len() == 8),
        "{record}"
    );
    bot.stop();
}
