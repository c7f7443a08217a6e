//! The operator console's routes (`/admin/…`), with sessions of the real registry and a real
//! store: nothing but the login page answers without a session; a login link works once and
//! sets an `HttpOnly`, `SameSite=Strict` cookie; a change needs the session's CSRF token and the
//! console's own origin; every answer carries the Content-Security-Policy; *Now* shows the
//! health checks and the running turns (a DM's without its command), and a turn can be
//! cancelled.

mod handlers_support;

use std::time::Duration;

use air_friends::admin::Console;
use air_friends::admin::auth::Auth;
use air_friends::agent::{Activity, ActivityObserver};
use air_friends::ops::Readiness;
use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use handlers_support::app;
use http_body_util::BodyExt;
use tower::ServiceExt;

fn console() -> Console {
    let readiness = Readiness::new();
    readiness.register("database", || async { Ok(()) });
    readiness.register("discord", || async { Err("not connected yet".to_owned()) });
    Console::new(
        Auth::new(Duration::from_secs(600), Duration::from_secs(3600)),
        readiness,
    )
}

struct Answer {
    status: StatusCode,
    headers: axum::http::HeaderMap,
    body: String,
}

async fn send(router: &Router, request: Request<Body>) -> Answer {
    let response = router.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    Answer {
        status,
        headers,
        body: String::from_utf8_lossy(&bytes).into_owned(),
    }
}

fn get(path: &str, cookie: Option<&str>) -> Request<Body> {
    let mut r = Request::get(path).header(header::HOST, "127.0.0.1:8080");
    if let Some(c) = cookie {
        r = r.header(header::COOKIE, c);
    }
    r.body(Body::empty()).unwrap()
}

fn post(path: &str, cookie: &str, form: &str, origin: Option<&str>) -> Request<Body> {
    let mut r = Request::post(path)
        .header(header::HOST, "127.0.0.1:8080")
        .header(header::COOKIE, cookie)
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded");
    if let Some(o) = origin {
        r = r.header(header::ORIGIN, o);
    }
    r.body(Body::from(form.to_owned())).unwrap()
}

/// Logs in with a fresh link: the cookie header to send, and the session's CSRF token (read
/// from the page, as a browser's form would carry it).
async fn login(console: &Console, router: &Router) -> (String, String) {
    let (url, _) = console.login_link().unwrap();
    let path = url.split_once("127.0.0.1").unwrap().1;
    let path = &path[path.find('/').unwrap()..];
    let answer = send(router, get(path, None)).await;
    assert_eq!(answer.status, StatusCode::SEE_OTHER);
    let set = answer.headers[header::SET_COOKIE]
        .to_str()
        .unwrap()
        .to_owned();
    let cookie = set.split(';').next().unwrap().to_owned();
    let page = send(router, get("/admin/", Some(&cookie))).await;
    let csrf = page
        .body
        .split("name=\"csrf\" value=\"")
        .nth(1)
        .unwrap()
        .split('"')
        .next()
        .unwrap()
        .to_owned();
    (cookie, csrf)
}

#[tokio::test]
async fn nothing_but_the_login_page_answers_without_a_session() {
    let console = console();
    let router = console.router();
    for path in ["/admin/", "/admin/now/live", "/admin/anything"] {
        let answer = send(&router, get(path, None)).await;
        assert_eq!(answer.status, StatusCode::UNAUTHORIZED, "{path}");
        assert!(answer.body.contains("air-friends admin-link"), "{path}");
        assert!(
            answer.headers["content-security-policy"]
                .to_str()
                .unwrap()
                .contains("default-src 'none'"),
            "{path}"
        );
    }
    let forged = send(&router, get("/admin/", Some("af_admin=0123abcd"))).await;
    assert_eq!(forged.status, StatusCode::UNAUTHORIZED, "a made-up cookie");
    let changed = send(&router, post("/admin/logout", "af_admin=x", "csrf=x", None)).await;
    assert_eq!(changed.status, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn a_login_link_works_once_and_sets_a_strict_cookie() {
    let console = console();
    let router = console.router();
    let (url, minutes) = console.login_link().unwrap();
    assert_eq!(minutes, 10);
    let path = &url[url.find("/admin/").unwrap()..];
    let first = send(&router, get(path, None)).await;
    assert_eq!(first.status, StatusCode::SEE_OTHER);
    assert_eq!(first.headers[header::LOCATION], "/admin/");
    let set = first.headers[header::SET_COOKIE].to_str().unwrap();
    for part in [
        "af_admin=",
        "HttpOnly",
        "SameSite=Strict",
        "Path=/admin",
        "Max-Age=3600",
    ] {
        assert!(set.contains(part), "{part} in {set}");
    }
    let again = send(&router, get(path, None)).await;
    assert_eq!(again.status, StatusCode::FORBIDDEN, "a used link");
    assert!(again.body.contains("This link is not valid"));
    assert!(
        again.headers.get(header::SET_COOKIE).is_none(),
        "no session from a used link"
    );
    let cookie = set.split(';').next().unwrap();
    let page = send(&router, get("/admin/", Some(cookie))).await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(page.body.contains("<h1>Now</h1>"), "{}", page.body);
    assert!(
        page.body.contains("not connected yet"),
        "the checks are shown"
    );
    for (name, value) in [
        ("x-frame-options", "DENY"),
        ("x-content-type-options", "nosniff"),
        ("cache-control", "no-store"),
        ("referrer-policy", "same-origin"),
    ] {
        assert_eq!(page.headers[name], value);
    }
}

#[tokio::test]
async fn a_change_needs_the_sessions_token_and_the_consoles_own_origin() {
    let console = console();
    let router = console.router();
    let (cookie, csrf) = login(&console, &router).await;
    let wrong = send(&router, post("/admin/logout", &cookie, "csrf=nope", None)).await;
    assert_eq!(wrong.status, StatusCode::FORBIDDEN, "a wrong CSRF token");
    let missing = send(&router, post("/admin/logout", &cookie, "", None)).await;
    assert_eq!(missing.status, StatusCode::FORBIDDEN, "no CSRF token");
    let form = format!("csrf={csrf}");
    let elsewhere = send(
        &router,
        post("/admin/logout", &cookie, &form, Some("http://evil.example")),
    )
    .await;
    assert_eq!(elsewhere.status, StatusCode::FORBIDDEN, "another origin");
    let mut cross = post("/admin/logout", &cookie, &form, None);
    cross
        .headers_mut()
        .insert("sec-fetch-site", "cross-site".parse().unwrap());
    assert_eq!(send(&router, cross).await.status, StatusCode::FORBIDDEN);
    // Still logged in after every refusal; then a real log-out ends the session.
    assert_eq!(
        send(&router, get("/admin/", Some(&cookie))).await.status,
        StatusCode::OK
    );
    let out = send(
        &router,
        post(
            "/admin/logout",
            &cookie,
            &form,
            Some("http://127.0.0.1:8080"),
        ),
    )
    .await;
    assert_eq!(out.status, StatusCode::SEE_OTHER);
    assert_eq!(
        send(&router, get("/admin/", Some(&cookie))).await.status,
        StatusCode::UNAUTHORIZED
    );
}

#[tokio::test]
async fn now_shows_the_running_turns_a_dms_without_its_command_and_cancels_one() {
    let app = app().await;
    let console = console();
    console.attach(app.state.sessions().clone(), app.store.clone());
    let router = console.router();
    let public = app.guild_session("u1");
    let dm = app.dm_session("u2");
    let board = console.board();
    let command = || Activity::Tool {
        title: "bash".into(),
        command: Some("skills/send-reply/scripts/send-reply --text-file reply-qv3.md".into()),
    };
    board.activity(public.registered.session_id.as_str(), &command());
    board.activity(dm.registered.session_id.as_str(), &command());
    let (cookie, csrf) = login(&console, &router).await;
    let live = send(&router, get("/admin/now/live", Some(&cookie))).await;
    assert_eq!(live.status, StatusCode::OK);
    assert!(live.body.contains("Running turns (2)"), "{}", live.body);
    assert_eq!(
        live.body.matches("reply-qv3.md").count(),
        1,
        "only the public turn's command: {}",
        live.body
    );
    assert!(live.body.contains("DM"));
    assert!(live.body.contains("model responses"), "today's tokens");
    assert!(
        !live.body.contains("Tokens, last 7 days"),
        "no chart without usage"
    );
    let ws = air_friends::store::WorkspaceKey::new("discord", "u1").unwrap();
    let today = chrono::Utc::now().date_naive();
    app.store
        .add_llm_usage(&ws, today, 1200, 345)
        .await
        .unwrap();
    app.store
        .add_llm_usage(&ws, today - chrono::Days::new(1), 100, 20)
        .await
        .unwrap();
    let live = send(&router, get("/admin/now/live", Some(&cookie))).await;
    assert!(
        live.body
            .contains("1200 input and 345 output tokens in 1 model responses"),
        "{}",
        live.body
    );
    assert!(live.body.contains("Tokens, last 7 days"), "{}", live.body);
    assert!(
        live.body.contains(">1545<"),
        "today's bar is labelled: {}",
        live.body
    );
    assert!(live.body.contains(">120<"), "yesterday's: {}", live.body);
    let id = public.registered.session_id.as_str();
    let signal = app
        .state
        .sessions()
        .termination_signal(&public.registered.session_id)
        .unwrap();
    let cancel = send(
        &router,
        post(
            &format!("/admin/turns/{id}/cancel"),
            &cookie,
            &format!("csrf={csrf}"),
            Some("http://127.0.0.1:8080"),
        ),
    )
    .await;
    assert_eq!(cancel.status, StatusCode::SEE_OTHER);
    assert_eq!(
        signal.reason().as_deref(),
        Some("cancelled by the operator")
    );
    let unknown = send(
        &router,
        post(
            "/admin/turns/0000/cancel",
            &cookie,
            &format!("csrf={csrf}"),
            None,
        ),
    )
    .await;
    assert_eq!(unknown.status, StatusCode::NOT_FOUND);
    board.activity(id, &Activity::Ended);
    let live = send(&router, get("/admin/now/live", Some(&cookie))).await;
    assert!(live.body.contains("Running turns (1)"), "{}", live.body);
}

#[tokio::test]
async fn skills_show_the_recorded_calls_and_config_masks_every_secret() {
    use air_friends::store::analytics::{SkillCallRow, bucket_of};
    let app = app().await;
    let console = console();
    console.attach(app.state.sessions().clone(), app.store.clone());
    let config = air_friends::config::load_str(
        "platforms:\n  discord:\n    enabled: true\n    token: discord-secret-4Kq\n",
        &|_: &str| None,
    )
    .unwrap();
    console.set_config(air_friends::config::masked_yaml(&config, &|_: &str| None).unwrap());
    let mut buckets = [0u64; air_friends::store::analytics::BUCKETS];
    buckets[bucket_of(30)] = 7;
    let hour = chrono::Utc::now();
    app.store
        .add_skill_calls(vec![
            SkillCallRow {
                hour,
                skill: "send-reply".into(),
                code: air_friends::store::analytics::OK_CODE.into(),
                calls: 6,
                buckets,
            },
            SkillCallRow {
                hour,
                skill: "send-reply".into(),
                code: "RATE_LIMITED".into(),
                calls: 1,
                buckets: [0; air_friends::store::analytics::BUCKETS],
            },
        ])
        .await
        .unwrap();
    let router = console.router();
    let (cookie, _) = login(&console, &router).await;
    let skills = send(&router, get("/admin/skills", Some(&cookie))).await;
    assert_eq!(skills.status, StatusCode::OK);
    assert!(
        skills.body.contains("<td>send-reply</td>"),
        "{}",
        skills.body
    );
    assert!(skills.body.contains("RATE_LIMITED"), "{}", skills.body);
    assert!(skills.body.contains("<svg"), "a chart");
    let config = send(&router, get("/admin/config", Some(&cookie))).await;
    assert_eq!(config.status, StatusCode::OK);
    assert!(
        !config.body.contains("discord-secret-4Kq"),
        "{}",
        config.body
    );
    assert!(config.body.contains("***"), "{}", config.body);
    for page in ["/admin/skills", "/admin/config"] {
        assert_eq!(
            send(&router, get(page, None)).await.status,
            StatusCode::UNAUTHORIZED,
            "{page}"
        );
    }
}

/// Memories: every user is listed with counts; a user's public memories are shown and
/// searched, a private one never (only counted); a public memory is disabled with a recorded
/// patch; a private memory's id cannot be changed from the console.
#[tokio::test]
async fn memories_show_public_ones_only_and_a_public_one_is_disabled_with_a_patch() {
    let app = app().await;
    let console = console();
    console.attach(app.state.sessions().clone(), app.store.clone());
    let router = console.router();
    let public_session = app.guild_session("u1");
    let public = app
        .save_memory(&public_session, "likes green tea qx1", "public")
        .await;
    let dm = app.dm_session("u1");
    let private = app
        .save_memory(&dm, "green allergy secret qx2", "private")
        .await;
    app.store.flush().await.unwrap();
    let (cookie, csrf) = login(&console, &router).await;

    let index = send(&router, get("/admin/memories", Some(&cookie))).await;
    assert_eq!(index.status, StatusCode::OK);
    assert!(index.body.contains("discord/u1"), "{}", index.body);

    let page = send(
        &router,
        get("/admin/memories/of?ws=discord/u1", Some(&cookie)),
    )
    .await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(page.body.contains("likes green tea qx1"), "{}", page.body);
    assert!(
        !page.body.contains("qx2"),
        "a private memory is never shown"
    );
    assert!(page.body.contains("Private memories: 1"), "{}", page.body);
    // It is listed by id and date only, to be revealed on purpose.
    assert!(page.body.contains(&private), "{}", page.body);
    let found = send(
        &router,
        get("/admin/memories/of?ws=discord/u1&q=green", Some(&cookie)),
    )
    .await;
    assert!(
        found.body.contains("qx1") && !found.body.contains("qx2"),
        "{}",
        found.body
    );

    let form = |id: &str, enabled: bool, token: &str| {
        format!("csrf={token}&ws=discord%2Fu1&id={id}&enabled={enabled}")
    };
    let refused = send(
        &router,
        post(
            "/admin/memories/toggle",
            &cookie,
            &form(&public, false, "nope"),
            None,
        ),
    )
    .await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN);
    let hidden = send(
        &router,
        post(
            "/admin/memories/toggle",
            &cookie,
            &form(&private, false, &csrf),
            None,
        ),
    )
    .await;
    assert_eq!(hidden.status, StatusCode::NOT_FOUND, "a private memory");
    let done = send(
        &router,
        post(
            "/admin/memories/toggle",
            &cookie,
            &form(&public, false, &csrf),
            None,
        ),
    )
    .await;
    assert_eq!(done.status, StatusCode::SEE_OTHER);
    let ws = air_friends::store::WorkspaceKey::new("discord", "u1").unwrap();
    let memory = app
        .store
        .get_memory(&ws, &public, air_friends::store::Scope::PublicOnly)
        .await
        .unwrap()
        .unwrap();
    assert!(!memory.enabled, "disabled");
    let patches = app
        .store
        .memory_patches(&ws, &public, air_friends::store::Scope::PublicOnly)
        .await
        .unwrap();
    assert_eq!(patches.len(), 1, "a recorded patch, as the skill makes");
    let secret = app
        .store
        .get_memory(&ws, &private, air_friends::store::Scope::IncludePrivate)
        .await
        .unwrap()
        .unwrap();
    assert!(secret.enabled, "the private memory is untouched");
    let bad = send(&router, get("/admin/memories/of?ws=nobody", Some(&cookie))).await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);

    // Revealing a private memory: only with the session's token, only a private one, and the
    // text is in that answer alone.
    let reveal = |id: &str, token: &str| format!("csrf={token}&ws=discord%2Fu1&id={id}");
    let refused = send(
        &router,
        post(
            "/admin/memories/reveal",
            &cookie,
            &reveal(&private, "nope"),
            None,
        ),
    )
    .await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN);
    assert!(!refused.body.contains("qx2"));
    let not_private = send(
        &router,
        post(
            "/admin/memories/reveal",
            &cookie,
            &reveal(&public, &csrf),
            None,
        ),
    )
    .await;
    assert_eq!(not_private.status, StatusCode::NOT_FOUND);
    let other = send(
        &router,
        post(
            "/admin/memories/reveal",
            &cookie,
            &format!("csrf={csrf}&ws=discord%2Fu2&id={private}"),
            None,
        ),
    )
    .await;
    assert_eq!(other.status, StatusCode::NOT_FOUND, "another user's id");
    let shown = send(
        &router,
        post(
            "/admin/memories/reveal",
            &cookie,
            &reveal(&private, &csrf),
            None,
        ),
    )
    .await;
    assert_eq!(shown.status, StatusCode::OK);
    assert!(
        shown.body.contains("green allergy secret qx2"),
        "{}",
        shown.body
    );
    assert!(shown.body.contains("recorded in the log"), "{}", shown.body);
    assert_eq!(shown.headers["cache-control"], "no-store");
    let again = send(
        &router,
        get("/admin/memories/of?ws=discord/u1", Some(&cookie)),
    )
    .await;
    assert!(
        !again.body.contains("qx2"),
        "revealed once, not kept on the page"
    );
}

/// Users: who used the bot with their tokens and messages; a user blocked, unblocked and
/// given a budget, each kept in the database and shown.
#[tokio::test]
async fn users_show_activity_and_a_block_and_a_budget_are_kept() {
    use air_friends::store::{InboxRecord, WorkspaceKey};
    let app = app().await;
    let console = console();
    console.attach(app.state.sessions().clone(), app.store.clone());
    let router = console.router();
    let message = app.discord.push_incoming("guild-chan", "u1", "hello qz7");
    app.store
        .inbox_record(InboxRecord {
            platform: "discord".into(),
            message_id: message.message_id.to_string(),
            channel_id: message.channel_id.to_string(),
            user_id: "u1".into(),
            received_at: chrono::Utc::now(),
            payload: serde_json::to_string(&message).unwrap(),
        })
        .await
        .unwrap();
    let u1 = WorkspaceKey::new("discord", "u1").unwrap();
    let today = chrono::Utc::now().date_naive();
    app.store.add_llm_usage(&u1, today, 1200, 34).await.unwrap();
    let (cookie, csrf) = login(&console, &router).await;

    let page = send(&router, get("/admin/users", Some(&cookie))).await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(page.body.contains("discord/u1"), "{}", page.body);
    assert!(page.body.contains("1234"), "today's tokens: {}", page.body);
    assert!(page.body.contains("unlimited"), "{}", page.body);
    assert!(!page.body.contains("qz7"), "no message text on Users");

    let form = |action: &str, tokens: &str, token: &str| {
        format!("csrf={token}&ws=discord%2Fu1&action={action}&tokens={tokens}")
    };
    let refused = send(
        &router,
        post(
            "/admin/users/control",
            &cookie,
            &form("block", "", "nope"),
            None,
        ),
    )
    .await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN);
    assert!(!app.store.controls().is_blocked("discord", "u1"));
    let other_site = send(
        &router,
        post(
            "/admin/users/control",
            &cookie,
            &form("block", "", &csrf),
            Some("http://evil.example"),
        ),
    )
    .await;
    assert_eq!(other_site.status, StatusCode::FORBIDDEN);
    let blocked = send(
        &router,
        post(
            "/admin/users/control",
            &cookie,
            &form("block", "", &csrf),
            None,
        ),
    )
    .await;
    assert_eq!(blocked.status, StatusCode::SEE_OTHER);
    assert!(app.store.controls().is_blocked("discord", "u1"));
    let page = send(&router, get("/admin/users", Some(&cookie))).await;
    assert!(page.body.contains("Unblock"), "{}", page.body);

    let budget = send(
        &router,
        post(
            "/admin/users/control",
            &cookie,
            &form("budget", "5000", &csrf),
            None,
        ),
    )
    .await;
    assert_eq!(budget.status, StatusCode::SEE_OTHER);
    assert_eq!(app.store.controls().tokens_per_day(&u1), Some(5000));
    let page = send(&router, get("/admin/users", Some(&cookie))).await;
    assert!(page.body.contains("5000 (set here)"), "{}", page.body);
    for bad in [form("budget", "lots", &csrf), form("explode", "", &csrf)] {
        let answer = send(&router, post("/admin/users/control", &cookie, &bad, None)).await;
        assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{bad}");
    }
    let unblocked = send(
        &router,
        post(
            "/admin/users/control",
            &cookie,
            &form("unblock", "", &csrf),
            None,
        ),
    )
    .await;
    assert_eq!(unblocked.status, StatusCode::SEE_OTHER);
    assert!(!app.store.controls().is_blocked("discord", "u1"));
    assert_eq!(
        app.store.controls().tokens_per_day(&u1),
        Some(5000),
        "unblocking keeps the budget"
    );
    let cleared = send(
        &router,
        post(
            "/admin/users/control",
            &cookie,
            &form("budget", "", &csrf),
            None,
        ),
    )
    .await;
    assert_eq!(cleared.status, StatusCode::SEE_OTHER);
    assert_eq!(app.store.controls().tokens_per_day(&u1), None);
    // No warm agents are kept here: retiring one is a clear 404.
    let retire = send(
        &router,
        post(
            "/admin/warm/retire",
            &cookie,
            &format!("csrf={csrf}&platform=discord&channel=c&user=u1&dm=false"),
            None,
        ),
    )
    .await;
    assert_eq!(retire.status, StatusCode::NOT_FOUND);
}

/// Conversations: the latest messages with how each ended and how long it took; a public
/// message's text, never a direct message's; filtered by state.
#[tokio::test]
async fn conversations_list_how_each_message_ended_without_a_dms_text() {
    use air_friends::store::{InboxRecord, InboxState};
    let app = app().await;
    let console = console();
    console.attach(app.state.sessions().clone(), app.store.clone());
    let router = console.router();
    let public = app
        .discord
        .push_incoming("guild-chan", "u1", "hello public qz5");
    app.discord.add_user("u2", "u2", "u2");
    let dm = app.discord.push_incoming_dm("u2", "my dm secret qz6");
    for (message, minutes) in [(&public, 2), (&dm, 1)] {
        app.store
            .inbox_record(InboxRecord {
                platform: "discord".into(),
                message_id: message.message_id.to_string(),
                channel_id: message.channel_id.to_string(),
                user_id: message.user_id.to_string(),
                received_at: chrono::Utc::now() - chrono::Duration::minutes(minutes),
                payload: serde_json::to_string(message).unwrap(),
            })
            .await
            .unwrap();
    }
    app.store
        .inbox_settle(
            "discord",
            public.message_id.as_ref(),
            InboxState::Failed,
            Some("model_unreachable"),
        )
        .await
        .unwrap();
    let (cookie, _) = login(&console, &router).await;
    let page = send(&router, get("/admin/conversations", Some(&cookie))).await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(page.body.contains("hello public qz5"), "{}", page.body);
    assert!(!page.body.contains("qz6"), "a DM's text is never shown");
    assert!(page.body.contains("(a direct message)"), "{}", page.body);
    assert!(
        page.body.contains("Messages per hour") && page.body.contains("<svg"),
        "{}",
        page.body
    );
    assert!(
        page.body.contains("failed (model_unreachable)"),
        "{}",
        page.body
    );
    let failed = send(
        &router,
        get("/admin/conversations?state=failed", Some(&cookie)),
    )
    .await;
    assert!(failed.body.contains("qz5"));
    assert!(
        !failed.body.contains("(a direct message)"),
        "{}",
        failed.body
    );
    let bad = send(
        &router,
        get("/admin/conversations?state=nope", Some(&cookie)),
    )
    .await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
}

/// Chat: the operator's message goes to the daemon as a direct message on the console
/// platform (refused while the daemon starts, and without the session's token); the bot's
/// answers show on the page.
#[tokio::test]
async fn the_chat_page_sends_the_operators_message_as_a_dm_and_shows_the_answer() {
    use air_friends::platform::{PlatformAdapter, PlatformEvent, PlatformKind};
    let console = console();
    let router = console.router();
    let (cookie, csrf) = login(&console, &router).await;
    let form = |text: &str, token: &str| format!("csrf={token}&text={text}");
    let starting = send(
        &router,
        post("/admin/chat/send", &cookie, &form("hello", &csrf), None),
    )
    .await;
    assert_eq!(starting.status, StatusCode::SERVICE_UNAVAILABLE);
    let (tx, mut rx) = tokio::sync::mpsc::channel(4);
    console.chat().connect(tx);
    let forged = send(
        &router,
        post("/admin/chat/send", &cookie, &form("hello", "nope"), None),
    )
    .await;
    assert_eq!(forged.status, StatusCode::FORBIDDEN);
    let empty = send(
        &router,
        post("/admin/chat/send", &cookie, &form("+++", &csrf), None),
    )
    .await;
    assert_eq!(empty.status, StatusCode::BAD_REQUEST, "only spaces");
    let sent = send(
        &router,
        post(
            "/admin/chat/send",
            &cookie,
            &form("how+are+you%3F", &csrf),
            None,
        ),
    )
    .await;
    assert_eq!(sent.status, StatusCode::SEE_OTHER);
    let PlatformEvent::Message(msg) = rx.recv().await.unwrap() else {
        panic!("a message event")
    };
    assert_eq!(
        (msg.platform, msg.is_dm, msg.content.as_str()),
        (PlatformKind::Console, true, "how are you?")
    );
    console
        .chat()
        .send_message(
            &msg.channel_id,
            "fine, <b>thanks</b>",
            Some(&msg.message_id),
        )
        .await
        .unwrap();
    let page = send(&router, get("/admin/chat", Some(&cookie))).await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(page.body.contains("how are you?"), "{}", page.body);
    assert!(
        page.body.contains("fine, &lt;b&gt;thanks&lt;/b&gt;"),
        "escaped: {}",
        page.body
    );
    let live = send(&router, get("/admin/chat/live", None)).await;
    assert_eq!(live.status, StatusCode::UNAUTHORIZED);

    // A turn's timeline, from the board (here without a registry: no command line kept).
    let board = console.board();
    board.activity("s-timeline", &Activity::Started);
    board.activity(
        "s-timeline",
        &Activity::Tool {
            title: "bash".into(),
            command: Some("skills/memory-save/scripts/memory-save --content secret".into()),
        },
    );
    board.activity("s-timeline", &Activity::Ended);
    let page = send(&router, get("/admin/turns/s-timeline", Some(&cookie))).await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(page.body.contains("memory-save"), "{}", page.body);
    assert!(!page.body.contains("--content secret"), "{}", page.body);
    let gone = send(&router, get("/admin/turns/nope", Some(&cookie))).await;
    assert_eq!(gone.status, StatusCode::NOT_FOUND);
}

/// Behind a TLS proxy (`X-Forwarded-Proto: https`, `Forwarded: proto=https`) the session
/// cookie is `Secure`; on the plain listener it cannot be.
#[tokio::test]
async fn the_session_cookie_is_secure_behind_a_tls_proxy() {
    let console = console();
    let router = console.router();
    for (header, value, secure) in [
        ("x-forwarded-proto", "https", true),
        ("forwarded", "for=10.0.0.1;proto=https", true),
        ("x-forwarded-proto", "http", false),
    ] {
        let (url, _) = console.login_link().unwrap();
        let path = url.split_once("127.0.0.1").unwrap().1;
        let path = &path[path.find('/').unwrap()..];
        let request = Request::get(path)
            .header(header::HOST, "127.0.0.1:8080")
            .header(header, value)
            .body(Body::empty())
            .unwrap();
        let answer = send(&router, request).await;
        let cookie = answer.headers[header::SET_COOKIE]
            .to_str()
            .unwrap()
            .to_owned();
        assert_eq!(
            cookie.ends_with("; Secure"),
            secure,
            "{header}: {value} -> {cookie}"
        );
    }
}
