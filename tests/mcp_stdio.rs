//! `stdio` MCP servers through the broker: the daemon starts the server for the session on its
//! first request and relays the agent's requests to it (the fake agent's `mcp-stdio` mode is the
//! server). Only the allowed tools are listed and called, a refused tool never reaches the
//! server, the server's own variable (a secret) is in its environment and nowhere else, its
//! requests to the client are answered "not offered", a line that is not JSON is skipped, a
//! crashed server is started again and initialized as the agent had it, and the process ends
//! when the session does. In the real bubblewrap (the daemon on the fake Discord) the server has
//! no network, sees neither the configuration nor the database, and the agent, in its own
//! sandbox, cannot read the server's secret.

mod common;
mod handlers_support;

use std::sync::Arc;

use air_friends::agent::Sandbox;
use air_friends::attachments::SystemLookup;
use air_friends::config::{McpConfig, McpKind, McpServerConfig};
use air_friends::mcp::{Broker, McpMetrics, StdioHost};
use axum::http::StatusCode;
use common::mcp_client::{self, call, rpc, tool_names};
use handlers_support::{App, Session, app};
use serde_json::{Value, json};

const SECRET: &str = "stdio-secret-4Jq";
const ALLOWED: [&str; 8] = [
    "search", "env", "seen", "ask", "garbage", "crash", "read", "probe",
];

fn stdio_server() -> McpServerConfig {
    McpServerConfig {
        name: "feeds".into(),
        description: "The feed reader".into(),
        kind: McpKind::Stdio,
        command: vec![
            common::fake_agent().display().to_string(),
            "mcp-stdio".into(),
        ],
        env: [("MCP_TOKEN".to_owned(), SECRET.to_owned())].into(),
        tools: ALLOWED.iter().map(|t| t.to_string()).collect(),
        timeout_ms: 10_000,
        ..McpServerConfig::default()
    }
}

fn broker(app: &App, host: Option<StdioHost>) -> Broker {
    let broker = Broker::new(
        &McpConfig {
            servers: vec![stdio_server()],
            calls_per_user_per_day: None,
        },
        app.state.sessions().clone(),
        McpMetrics::default(),
        Arc::new(SystemLookup),
    )
    .unwrap();
    match host {
        Some(host) => broker.with_stdio(host),
        None => broker,
    }
}

async fn send(broker: &Broker, s: &Session, method: &str, body: Value) -> (StatusCode, Value) {
    let id = s.registered.session_id.to_string();
    let token = s.registered.caller_token.expose_secret();
    let (status, json, _) = mcp_client::send(broker, (&id, "feeds"), token, method, body).await;
    (status, json)
}

/// The text of a tool call's answer.
fn text(answer: &Value) -> String {
    answer["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no text in {answer}"))
        .to_owned()
}

#[tokio::test]
async fn a_stdio_server_lists_and_runs_only_the_allowed_tools_with_its_own_secret() {
    let app = app().await;
    let b = broker(&app, Some(StdioHost::new(Sandbox::none(), None)));
    let s = app.guild_session("u1");
    let (status, init) = send(&b, &s, "POST", rpc(1, "initialize", json!({}))).await;
    assert_eq!(status, StatusCode::OK, "{init}");
    assert_eq!(init["result"]["serverInfo"]["name"], "fake-mcp-stdio");
    assert_eq!(init["id"], 1, "the agent's own id comes back");
    let (status, _) = send(
        &b,
        &s,
        "POST",
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let (_, listed) = send(&b, &s, "POST", rpc(2, "tools/list", json!({}))).await;
    let names = tool_names(&listed);
    assert_eq!(names.len(), ALLOWED.len(), "{listed}");
    assert!(!names.iter().any(|n| n == "delete_everything"), "{names:?}");
    let (_, found) = send(&b, &s, "POST", call(3, "search", json!({"q": "rust"}))).await;
    assert_eq!(text(&found), "found: rust");
    let (_, refused) = send(&b, &s, "POST", call(4, "delete_everything", json!({}))).await;
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    let (_, seen) = send(&b, &s, "POST", call(5, "seen", json!({}))).await;
    let seen: Value = serde_json::from_str(&text(&seen)).unwrap();
    assert_eq!(
        seen["calls"],
        json!(["search", "seen"]),
        "the refused tool never reached the server"
    );
    // Its environment: its own variable; nothing of the agent's.
    let (_, env) = send(&b, &s, "POST", call(6, "env", json!({}))).await;
    let env = text(&env);
    assert!(env.contains(&format!("MCP_TOKEN={SECRET}")), "{env}");
    assert!(
        !env.contains(s.registered.caller_token.expose_secret()),
        "{env}"
    );
    assert!(!env.contains("SKILL_API"), "{env}");
    // Its request to the client is answered by the broker; a line that is not JSON is skipped.
    let (_, asked) = send(&b, &s, "POST", call(7, "ask", json!({}))).await;
    assert!(text(&asked).contains("not offered"), "{asked}");
    let (_, garbage) = send(&b, &s, "POST", call(8, "garbage", json!({}))).await;
    assert_eq!(text(&garbage), "after garbage");
    // A batch comes back as a batch, in order.
    let (_, batch) = send(
        &b,
        &s,
        "POST",
        json!([
            call(9, "search", json!({"q": "a"})),
            call(10, "search", json!({"q": "b"}))
        ]),
    )
    .await;
    assert_eq!(batch[0]["id"], 9);
    assert_eq!(text(&batch[1]), "found: b");
    // No stream of its own for the agent.
    let (status, _) = send(&b, &s, "GET", json!({})).await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
}

#[tokio::test]
async fn a_crashed_server_starts_again_initialized_and_ends_with_the_session() {
    let app = app().await;
    let b = broker(&app, Some(StdioHost::new(Sandbox::none(), None)));
    let s = app.guild_session("u1");
    send(&b, &s, "POST", rpc(1, "initialize", json!({"client": 1}))).await;
    let (_, crashed) = send(&b, &s, "POST", call(2, "crash", json!({}))).await;
    assert_eq!(crashed["error"]["code"], -32603, "{crashed}");
    assert!(
        crashed["error"]["message"]
            .as_str()
            .unwrap()
            .contains("stopped"),
        "{crashed}"
    );
    // The next request starts it again, initialized as the agent had it.
    let (_, seen) = send(&b, &s, "POST", call(3, "seen", json!({}))).await;
    let seen: Value = serde_json::from_str(&text(&seen)).unwrap();
    assert_eq!(seen["initialized"], 1, "{seen}");
    assert_eq!(seen["calls"], json!(["seen"]), "a new process");
    let (_, env) = send(&b, &s, "POST", call(4, "env", json!({}))).await;
    let pid: u32 = text(&env)
        .lines()
        .find_map(|l| l.strip_prefix("PID="))
        .unwrap()
        .parse()
        .unwrap();
    assert!(running(pid));
    // Idle for less than the idle time and its session alive: kept.
    assert_eq!(b.reap(), 0);
    assert_eq!(b.links().open(), 1);
    // The session ends: the process with it.
    app.state.sessions().unregister(&s.registered.session_id);
    assert_eq!(b.reap(), 1);
    assert_eq!(b.links().open(), 0);
    common::poll::poll(std::time::Duration::from_secs(5), || {
        (!running(pid)).then_some(())
    })
    .await
    .expect("the server's process ends with its session");
}

/// Whether `pid` is a live process (not gone, not a zombie).
fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|stat| {
            let state = stat.rsplit(") ").next().unwrap_or_default();
            !state.starts_with('Z') && !state.starts_with('X')
        })
        .unwrap_or(false)
}

#[tokio::test]
async fn without_the_daemons_sandbox_host_a_stdio_server_is_never_started() {
    let app = app().await;
    let b = broker(&app, None);
    let s = app.guild_session("u1");
    let (status, body) = send(&b, &s, "POST", rpc(1, "tools/list", json!({}))).await;
    assert_eq!(status, StatusCode::BAD_GATEWAY, "{body}");
    assert_eq!(body["code"], "SERVER_UNREACHABLE");
    assert_eq!(b.links().open(), 0);
}

/// The real daemon, the real bubblewrap: the agent gets the broker's endpoint for the stdio
/// server; the server runs in a sandbox of its own with the agent's rules (no network, no
/// configuration or database) and its secret, which the agent cannot find in its own sandbox
/// and which no log line carries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_the_real_sandbox_the_server_has_its_secret_and_no_network_and_the_agent_neither() {
    use common::fake_discord::DM_CHANNEL_ID;
    use common::serve_discord::{DiscordServe, DiscordSetup, one_turn, reply_steps, text_path};

    let mut bot = DiscordServe::start(move |files| {
        // A program of the operator's, not the agent's own (in the test's read-only folder).
        let program = files.join("fake-mcp");
        std::fs::copy(common::fake_agent(), &program).unwrap();
        let yaml = format!(
            "mcp:\n  servers:\n    - name: feeds\n      kind: stdio\n      description: The feed reader\n      \
             command: ['{}', mcp-stdio]\n      env: {{MCP_TOKEN: '${{FAKE_MCP_TOKEN}}'}}\n      \
             tools: [search, env, probe, read]\n",
            program.display()
        );
        let mut steps = vec![
            json!({"sleepMs": 8000}),
            json!({"run": "cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n' | grep -c MCP_TOKEN; echo \"token: $MCP_TOKEN\""}),
        ];
        steps.extend(reply_steps(&text_path(files, "reply.md")));
        let mut script = one_turn(steps);
        script["initialize"] = json!({"mcpCapabilities": {"http": true}});
        DiscordSetup {
            script,
            texts: vec![("reply.md", "Read the feeds.".to_owned())],
            extra_yaml: yaml,
            sandbox: Some(String::new()),
            env: vec![("FAKE_MCP_TOKEN", SECRET.to_owned())],
            ..DiscordSetup::default()
        }
    })
    .await;
    bot.dm("anything new in my feeds?");
    let new = common::poll::poll(common::serve_discord::WAIT, || {
        bot.received("session/new").into_iter().next()
    })
    .await
    .expect("session/new");
    let entry = &new["mcpServers"][0];
    assert_eq!(
        (&entry["type"], &entry["name"]),
        (&json!("http"), &json!("feeds"))
    );
    assert!(!new.to_string().contains(SECRET), "{new}");
    // The agent's relay is its sandbox's 127.0.0.1:3001; outside it, the session's socket.
    let url = entry["url"].as_str().unwrap().to_owned();
    let path = url
        .strip_prefix("http://127.0.0.1:3001")
        .unwrap()
        .to_owned();
    let session = path.split('/').nth(2).unwrap().to_owned();
    let socket = bot
        .config
        .dir
        .path()
        .join(format!("data/run/{session}/api.sock"));
    let auth = entry["headers"][0]["value"].as_str().unwrap().to_owned();
    let post = async |body: Value| -> Value {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut unix = tokio::net::UnixStream::connect(&socket).await.unwrap();
        let body = body.to_string();
        let request = format!(
            "POST {path} HTTP/1.1\r\nHost: sandbox\r\nAuthorization: {auth}\r\n\
             Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        unix.write_all(request.as_bytes()).await.unwrap();
        let mut answer = String::new();
        unix.read_to_string(&mut answer).await.unwrap();
        let (_, body) = answer.split_once("\r\n\r\n").unwrap();
        serde_json::from_str(body).unwrap_or_else(|_| panic!("{answer}"))
    };
    post(rpc(1, "initialize", json!({}))).await;
    let listed = post(rpc(2, "tools/list", json!({}))).await;
    assert_eq!(
        listed["result"]["tools"].as_array().unwrap().len(),
        4,
        "{listed}"
    );
    assert_eq!(
        text(&post(call(3, "search", json!({"q": "rss"}))).await),
        "found: rss"
    );
    let refused = post(call(4, "delete_everything", json!({}))).await;
    assert_eq!(refused["error"]["code"], -32602);
    let env = text(&post(call(5, "env", json!({}))).await);
    assert!(env.contains(&format!("MCP_TOKEN={SECRET}")), "{env}");
    assert!(env.contains("HOME=/tmp/home"), "the sandbox's home: {env}");
    assert!(
        !env.contains("FAKE_ACP_SCRIPT"),
        "nothing of the agent's: {env}"
    );
    // The fake Discord listens on the host's loopback: the test reaches it, the server not.
    let discord = reqwest::Url::parse(&bot.fake.api_base_url()).unwrap();
    let addr = format!("127.0.0.1:{}", discord.port().unwrap());
    assert!(std::net::TcpStream::connect(&addr).is_ok());
    let probe = text(&post(call(6, "probe", json!({"addr": addr}))).await);
    assert!(probe.starts_with("not connected"), "{probe}");
    for hidden in [bot.config.path.clone(), bot.config.dir.path().join("data")] {
        let read = text(&post(call(7, "read", json!({"path": hidden}))).await);
        assert!(read.starts_with("not read"), "{}: {read}", hidden.display());
    }
    let replies = bot.wait_bot_messages(DM_CHANNEL_ID, 1).await;
    assert_eq!(replies[0].content, "Read the feeds.");
    let run = bot
        .agent_log_lines()
        .into_iter()
        .find(|v| v["event"] == "run")
        .expect("the agent's look for the secret");
    let out = run["result"]["stdout"].as_str().unwrap().to_owned();
    assert_eq!(
        out, "0\ntoken: \n",
        "the agent sees no MCP_TOKEN anywhere: {run}"
    );
    assert!(!run.to_string().contains(SECRET));
    let record = bot.logged_or_wait(|l| l["message"] == "mcp tool call" && l["tool"] == "search");
    assert_eq!(record["server"], "feeds");
    assert!(
        !bot.logged().iter().any(|l| l.to_string().contains(SECRET)),
        "no log line carries the secret"
    );
    bot.stop();
}
