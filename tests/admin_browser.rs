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

/// The first of `names` on `PATH` (`command_path`, the daemon's own lookup), or `None` outside
/// CI when none is installed (under `CI=true` a missing program fails the test: `package` is
/// what installs it).
fn installed(names: &[&str], package: &str) -> Option<PathBuf> {
    let path = std::env::var("PATH").ok();
    let found = names
        .iter()
        .find_map(|name| air_friends::command_path::resolve_command(name, path.as_deref()));
    if found.is_none() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "{} is not installed (apt-get install {package}); CI must run the browser tests",
            names[0]
        );
        eprintln!(
            "{} not installed: the browser test does not run here",
            names[0]
        );
    }
    found
}

/// Debian's chromium.
fn chromium() -> Option<PathBuf> {
    installed(
        &["chromium", "chromium-browser", "google-chrome"],
        "chromium",
    )
}

/// `chromedriver` (Debian's `chromium-driver`), for the WebDriver tests.
fn chromedriver() -> Option<PathBuf> {
    installed(&["chromedriver"], "chromium-driver")
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

/// A headless chromium driven through WebDriver; the driver process is killed on drop.
struct Driven {
    client: fantoccini::Client,
    driver: std::process::Child,
    _profile: tempfile::TempDir,
}

impl Drop for Driven {
    fn drop(&mut self) {
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

impl Driven {
    /// Starts `chromedriver` on a free loopback port and a headless `browser` session in it.
    async fn start(driver: &Path, browser: &Path) -> Driven {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new(driver)
            .arg(format!("--port={port}"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start chromedriver");
        let profile = tempfile::tempdir().unwrap();
        let mut caps = serde_json::Map::new();
        caps.insert(
            "goog:chromeOptions".into(),
            json!({
                "binary": browser.display().to_string(),
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                         "--no-first-run", "--hide-scrollbars", "--window-size=1280,900",
                         format!("--user-data-dir={}", profile.path().display())],
            }),
        );
        let url = format!("http://127.0.0.1:{port}");
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        let client = loop {
            match fantoccini::ClientBuilder::new(connector.clone())
                .capabilities(caps.clone())
                .connect(&url)
                .await
            {
                Ok(client) => break client,
                Err(error) if std::time::Instant::now() < deadline => {
                    let _ = error;
                    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                }
                Err(error) => panic!("no WebDriver session: {error}"),
            }
        };
        Driven {
            client,
            driver: child,
            _profile: profile,
        }
    }

    async fn goto(&self, url: &str) {
        self.client.goto(url).await.unwrap();
    }

    async fn source(&self) -> String {
        self.client.source().await.unwrap()
    }

    /// Waits until the page's HTML satisfies `check` (the live section refreshes itself).
    async fn wait_for(&self, what: &str, check: impl Fn(&str) -> bool) -> String {
        let deadline = std::time::Instant::now() + common::serve_discord::WAIT;
        loop {
            let page = self.source().await;
            if check(&page) {
                return page;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "waited for {what}; the page is:\n{page}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(250)).await;
        }
    }

    /// Opens `url` again until its HTML satisfies `check` (a page without a live section).
    async fn reload_until(&self, url: &str, what: &str, check: impl Fn(&str) -> bool) -> String {
        let deadline = std::time::Instant::now() + common::serve_discord::WAIT;
        loop {
            self.goto(url).await;
            let page = self.source().await;
            if check(&page) {
                return page;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "waited for {what}; the page is:\n{page}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        }
    }

    /// Clicks the element `css` finds (found again when the live section replaced it meanwhile).
    async fn click(&self, css: &str) {
        let mut last = None;
        for _ in 0..20 {
            let found = self.client.find(fantoccini::Locator::Css(css)).await;
            match found {
                Ok(element) => match element.click().await {
                    Ok(()) => return,
                    Err(error) => last = Some(error.to_string()),
                },
                Err(error) => last = Some(error.to_string()),
            }
            tokio::time::sleep(std::time::Duration::from_millis(250)).await;
        }
        panic!("could not click {css}: {last:?}");
    }

    async fn type_into(&self, css: &str, text: &str) {
        let element = self
            .client
            .find(fantoccini::Locator::Css(css))
            .await
            .unwrap();
        element.send_keys(text).await.unwrap();
    }

    async fn screenshot(&self, path: &Path) {
        let png = self.client.screenshot().await.unwrap();
        assert!(
            png.starts_with(b"\x89PNG") && png.len() > 5_000,
            "{}",
            path.display()
        );
        std::fs::write(path, png).unwrap();
    }
}

/// A page on another origin (`localhost`, not the console's `127.0.0.1`) with a form that
/// posts to the console, as a hostile site would.
async fn hostile_site(form_action: String, fields: Vec<(&'static str, String)>) -> String {
    use axum::response::Html;
    let inputs: String = fields
        .iter()
        .map(|(name, value)| format!("<input name=\"{name}\" value=\"{value}\">"))
        .collect();
    let page = format!(
        "<!doctype html><html><body><form method=\"post\" action=\"{form_action}\">{inputs}\
         <button id=\"go\" type=\"submit\">win a prize</button></form></body></html>"
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let app = axum::Router::new().route(
        "/",
        axum::routing::get(move || {
            let page = page.clone();
            async move { Html(page) }
        }),
    );
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://localhost:{port}/")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_watches_a_turn_cancels_it_blocks_the_user_and_disables_a_memory_in_the_browser()
 {
    use common::fake_discord::{CHANNEL_ID, USER_ID};
    use common::serve::skill_step;
    let (Some(browser), Some(driver)) = (chromium(), chromedriver()) else {
        return;
    };
    let shots = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("console");
    std::fs::create_dir_all(&shots).unwrap();
    // The first turn saves a public memory and answers.
    let mut bot = DiscordServe::start(|files| {
        let memory = files.join("memory.md");
        std::fs::write(&memory, "likes green tea qm5").unwrap();
        let mut steps = vec![
            json!({"run": format!("cp '{}' \"$TMPDIR/$SESSION_ID/memory.md\"", memory.display())}),
            skill_step(
                "memory-save",
                "--content-file $TMPDIR/$SESSION_ID/memory.md",
            ),
        ];
        steps.extend(reply_steps(&text_path(files, "reply.md")));
        DiscordSetup {
            script: one_turn(steps),
            texts: vec![("reply.md", "Saved.".to_owned())],
            extra_yaml: "admin:\n  enabled: true\n".to_owned(),
            ..DiscordSetup::default()
        }
    })
    .await;
    bot.mention("remember that I like green tea");
    bot.wait_bot_messages(CHANNEL_ID, 1).await;

    let web = Driven::start(&driver, &browser).await;
    let root = format!("http://{}/admin/", bot.ops_addr);
    web.goto(&admin_link(&bot.config.path)).await;
    web.wait_for("Now", |p| p.contains("<h1>Now</h1>")).await;

    // The agent that answered waits warm for the conversation's next message: retire it, so
    // the next message starts an agent with the next script.
    web.wait_for("the warm agent", |p| p.contains("Warm agents (1 idle)"))
        .await;
    web.click("table.warm button").await;
    web.wait_for("no warm agent", |p| p.contains("Warm agents (0 idle)"))
        .await;
    let retired = bot
        .logged_or_wait(|l| l["message"] == "admin action" && l["action"] == "retire warm agent");
    assert_eq!(retired["retired"], true, "{retired}");

    // A long turn starts while Now is open: it appears without a reload, and is cancelled.
    bot.agent.write(one_turn(vec![json!({"sleepMs": 30000})]));
    bot.mention("write me a very long essay");
    web.wait_for("the running turn", |p| p.contains("Running turns (1)"))
        .await;
    web.screenshot(&shots.join("now-live.png")).await;
    web.click("tr[data-session] button").await;
    web.wait_for("the turn to end", |p| p.contains("No turn is running."))
        .await;
    let cancelled =
        bot.logged_or_wait(|l| l["message"] == "admin action" && l["action"] == "cancel turn");
    assert_eq!(cancelled["cancelled"], true, "{cancelled}");

    // Block the user on Users; their next message is refused, told once, and not answered.
    web.goto(&format!("{root}users")).await;
    let row = format!("tr[data-user=\"discord/{USER_ID}\"]");
    web.wait_for("the user", |p| p.contains(&format!("discord/{USER_ID}")))
        .await;
    web.click(&format!("{row} form:not(.budget) button")).await;
    let page = web.wait_for("the block", |p| p.contains("Unblock")).await;
    assert!(page.contains("blocked"), "{page}");
    web.screenshot(&shots.join("users.png")).await;
    let prompts_before = bot.received("session/prompt").len();
    let before = bot.bot_messages(CHANNEL_ID).len();
    bot.mention("why won't you answer me");
    let told = bot.wait_bot_messages(CHANNEL_ID, before + 1).await;
    assert!(
        told.last()
            .unwrap()
            .content
            .contains("stopped me from answering you"),
        "{:?}",
        told.last()
    );
    web.goto(&format!("{root}conversations")).await;
    web.wait_for("the refused message", |p| p.contains("skipped (blocked)"))
        .await;
    assert_eq!(
        bot.received("session/prompt").len(),
        prompts_before,
        "no agent ran for the blocked user"
    );

    // Another site's form, even carrying the session's token, changes nothing: the browser
    // does not send the SameSite=Strict cookie across sites.
    web.goto(&format!("{root}users")).await;
    let page = web.source().await;
    let csrf = page
        .split("name=\"csrf\" value=\"")
        .nth(1)
        .unwrap()
        .split('"')
        .next()
        .unwrap()
        .to_owned();
    let hostile = hostile_site(
        format!("{root}users/control"),
        vec![
            ("csrf", csrf),
            ("ws", format!("discord/{USER_ID}")),
            ("action", "unblock".to_owned()),
        ],
    )
    .await;
    web.goto(&hostile).await;
    web.click("#go").await;
    // No cookie went with it: the console answers as to anyone without a session.
    web.wait_for("the refusal", |p| p.contains("air-friends admin-link"))
        .await;
    web.goto(&format!("{root}users")).await;
    let page = web
        .wait_for("Users", |p| p.contains("<h1>Users</h1>"))
        .await;
    assert!(page.contains("Unblock"), "still blocked: {page}");

    // Find the public memory and disable it.
    web.goto(&format!("{root}memories/of?ws=discord/{USER_ID}"))
        .await;
    web.type_into("input[name=q]", "green tea").await;
    web.click("form.search button").await;
    web.wait_for("the memory", |p| p.contains("likes green tea qm5"))
        .await;
    web.click("table.memories tr.enabled button").await;
    let page = web
        .wait_for("the memory disabled", |p| p.contains("class=\"disabled\""))
        .await;
    assert!(page.contains("Enable"), "{page}");
    web.screenshot(&shots.join("memories-of.png")).await;
    let disabled =
        bot.logged_or_wait(|l| l["message"] == "admin action" && l["action"] == "disable memory");
    assert!(
        disabled["who"].as_str().is_some_and(|w| w.len() == 8),
        "{disabled}"
    );

    // Chat from the browser: the operator's message is a DM on the console platform, answered
    // by the agent through send-reply, while the page shows what the agent is doing.
    let answer = text_path(bot.files.path(), "chat.md");
    std::fs::write(&answer, "Hello operator, all is well.").unwrap();
    let mut steps = vec![json!({"sleepMs": 5000})];
    steps.extend(reply_steps(&answer));
    bot.agent.write(one_turn(steps));
    web.goto(&format!("{root}chat")).await;
    web.type_into("form.chat textarea", "How are you today?")
        .await;
    web.click("form.chat button").await;
    web.wait_for("the status line", |p| p.contains("The bot is "))
        .await;
    let page = web
        .wait_for("the answer", |p| p.contains("Hello operator, all is well."))
        .await;
    assert!(page.contains("How are you today?"), "{page}");
    web.screenshot(&shots.join("chat.png")).await;
    // Conversations shows a turn beside its message (the console's own chat is not in the
    // inbox), and its timeline: the first turn, in public, ran two skills.
    web.reload_until(&format!("{root}conversations"), "the first turn", |p| {
        p.split("<tr")
            .any(|row| row.contains("class=\"answered\"") && row.contains("timeline"))
    })
    .await;
    web.click("tr.answered a[href^='/admin/turns/']").await;
    let timeline = web
        .wait_for("the timeline", |p| p.contains("<h1>A turn of"))
        .await;
    assert!(
        timeline.contains("2 skill calls (memory-save, send-reply)"),
        "{timeline}"
    );
    assert!(
        timeline.contains("skills/memory-save/scripts/memory-save"),
        "a public turn shows its command lines: {timeline}"
    );
    web.screenshot(&shots.join("timeline.png")).await;
    let prompt = bot
        .prompts()
        .into_iter()
        .find(|p| p.contains("How are you today?"))
        .expect("the agent was prompted with the operator's message");
    assert!(
        !prompt.contains("qm5"),
        "the operator's conversation shows nothing of another user's: {prompt}"
    );
    let _ = web.client.clone().close().await;
    drop(web);
    bot.stop();
}
