//! What the operator console costs the daemon: the page weight of *Now* (HTML, script and style
//! sheet) and the CPU of its live refresh, which an open page asks for every two seconds —
//! against the ops listener's `/healthz` in the same run (the cheapest answer the same router
//! gives) and against the full *Now* page; and the *Chat* page's refresh with 40 messages.
//!
//! The console is the real one: a store on disk, the real session registry with eight running
//! turns on its board (four public with a command, four DMs), and the readiness checks `serve`
//! registers for the database (a real file check) and two more. Requests go through the
//! routers in process (`tower::ServiceExt::oneshot`), so the figures are the handlers' own,
//! without a socket. Per case: wall p50/p99 and the process's CPU per call (`getrusage`).
//! Cases are interleaved.
//!
//! Run: `cargo bench --bench console` (`CONSOLE_BENCH_ITERS`, default 3000). Results are in
//! `docs/PERFORMANCE.md` ("Operator console").

#[path = "support/cases.rs"]
mod cases;

use std::time::{Duration, Instant};

use air_friends::admin::Console;
use air_friends::admin::auth::Auth;
use air_friends::agent::{Activity, ActivityObserver};
use air_friends::ops::{OpsState, Readiness, checks};
use air_friends::platform::{ChannelId, Origin, PlatformAdapter, PlatformKind, UserId};
use air_friends::session::{SessionContext, SessionRegistry};
use air_friends::store::Store;
use axum::Router;
use axum::body::Body;
use axum::http::{Request, header};
use cases::{Case, cpu};
use http_body_util::BodyExt;
use tower::ServiceExt;

async fn fetch(router: &Router, path: &str, cookie: &str) -> usize {
    let request = Request::get(path)
        .header(header::HOST, "127.0.0.1:8080")
        .header(header::COOKIE, cookie)
        .body(Body::empty())
        .unwrap();
    let response = router.clone().oneshot(request).await.unwrap();
    assert!(
        response.status().is_success(),
        "{path}: {}",
        response.status()
    );
    response
        .into_body()
        .collect()
        .await
        .unwrap()
        .to_bytes()
        .len()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let iters: usize = std::env::var("CONSOLE_BENCH_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3000);
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("air-friends.db");
    let store = Store::open(&db).await.unwrap();
    let readiness = Readiness::new();
    let path = db.clone();
    readiness.register("database", move || checks::database_writable(path.clone()));
    readiness.register("agent_command", || async { Ok(()) });
    readiness.register("discord", || async { Ok(()) });
    let console = Console::new(
        Auth::new(Duration::from_secs(600), Duration::from_secs(3600)),
        readiness.clone(),
    );
    let sessions = SessionRegistry::new(Duration::from_secs(3600));
    let board = console.board();
    let mut kept = Vec::new();
    for i in 0..8 {
        let dm = i % 2 == 1;
        let workspace = dir.path().join(format!("ws{i}"));
        std::fs::create_dir_all(&workspace).unwrap();
        let registered = sessions
            .register(SessionContext {
                origin: Origin {
                    platform: PlatformKind::Discord,
                    channel_id: ChannelId::from(format!("chan{i}")),
                    guild_id: (!dm).then(|| "guild".to_owned()),
                    user_id: UserId::from(format!("user{i}")),
                    username: format!("user number {i}"),
                    is_dm: dm,
                },
                trigger_message_id: None,
                workspace,
                purpose: Default::default(),
                place: Default::default(),
            })
            .unwrap();
        board.activity(
            registered.session_id.as_str(),
            &Activity::Tool {
                title: "bash".into(),
                command: Some("skills/send-reply/scripts/send-reply --text-file reply.md".into()),
            },
        );
        kept.push(registered);
    }
    console.attach(sessions, store);
    let admin = console.router();
    let ops = air_friends::ops::router(OpsState {
        readiness,
        metrics: air_friends::observability::Metrics::new(),
        draining: tokio_util::sync::CancellationToken::new(),
    });
    // Log in as a browser would.
    let (url, _) = console.login_link().unwrap();
    let login = &url[url.find("/admin/").unwrap()..];
    let answer = admin
        .clone()
        .oneshot(Request::get(login).body(Body::empty()).unwrap())
        .await
        .unwrap();
    let set = answer.headers()[header::SET_COOKIE].to_str().unwrap();
    let cookie = set.split(';').next().unwrap().to_owned();

    let html = fetch(&admin, "/admin/", &cookie).await;
    let css = fetch(&admin, "/admin/assets/console.css", &cookie).await;
    let js = fetch(&admin, "/admin/assets/console.js", &cookie).await;
    let live_bytes = fetch(&admin, "/admin/now/live", &cookie).await;
    // A chat of 40 messages (the bot's answers, as the adapter records them).
    let chat = console.chat();
    for i in 0..40 {
        chat.send_message(
            &air_friends::admin::chat::CHANNEL.into(),
            &format!("answer number {i}, a sentence of ordinary length for a chat"),
            None,
        )
        .await
        .unwrap();
    }

    let mut health = Case::new("ops /healthz (baseline)");
    let mut live = Case::new("console live refresh (/admin/now/live)");
    let mut page = Case::new("console Now page (/admin/)");
    let mut chat_live = Case::new("console chat refresh (/admin/chat/live, 40 messages)");
    for _ in 0..iters {
        for (case, router, path) in [
            (&mut health, &ops, "/healthz"),
            (&mut live, &admin, "/admin/now/live"),
            (&mut page, &admin, "/admin/"),
            (&mut chat_live, &admin, "/admin/chat/live"),
        ] {
            let (t, c) = (Instant::now(), cpu());
            fetch(router, path, &cookie).await;
            case.add(t.elapsed(), cpu() - c);
        }
    }
    println!(
        "Now with 8 running turns: HTML {html} B, style sheet {css} B, script {js} B: {} B in all; each refresh {live_bytes} B",
        html + css + js
    );
    let (base_p50, base_cpu) = (health.p(0.5), health.cpu_per_call());
    let per_refresh = live.cpu_per_call();
    cases::print_table(
        &mut [&mut health, &mut live, &mut page, &mut chat_live],
        "healthz",
        base_p50,
        base_cpu,
        3,
    );
    println!(
        "an open page (one refresh every 2 s) costs the daemon {:.1} µs of CPU per second ({:.4} % of one core)",
        per_refresh.as_secs_f64() * 1e6 / 2.0,
        per_refresh.as_secs_f64() / 2.0 * 100.0
    );
    println!("iterations: {iters} per case, interleaved");
    drop(kept);
}
