//! MCP servers over the older HTTP+SSE transport (`kind: sse`) through the broker, against a
//! fake on loopback: the broker opens the server's event stream once per session, posts the
//! agent's messages to the endpoint it names and gives the answers back as plain JSON. Only the
//! allowed tools are listed and called, a refused tool never reaches the server, the server's
//! secret header goes with the stream and every post and never the agent's token, an endpoint
//! on another host is not used, a redirect is not followed, a loopback address is refused
//! unless the server is local, and a stream that ended is opened again and initialized as the
//! agent had it.

mod common;
mod handlers_support;

use std::sync::Arc;

use air_friends::attachments::SystemLookup;
use air_friends::config::{McpConfig, McpKind, McpServerConfig};
use air_friends::mcp::{Broker, McpMetrics};
use axum::http::StatusCode;
use common::fake_mcp_sse::FakeMcpSse;
use common::mcp_client::{self, call, rpc, tool_names};
use handlers_support::{App, Session, app};
use serde_json::{Value, json};

const SECRET: &str = "Bearer sse-secret-8Lm";

fn server(url: &str, local: bool) -> McpServerConfig {
    McpServerConfig {
        name: "wiki".into(),
        kind: McpKind::Sse,
        url: url.into(),
        headers: [("Authorization".to_owned(), SECRET.to_owned())].into(),
        tools: vec!["search".into()],
        local,
        timeout_ms: 5_000,
        ..McpServerConfig::default()
    }
}

fn broker(app: &App, server: McpServerConfig) -> Broker {
    Broker::new(
        &McpConfig {
            servers: vec![server],
            calls_per_user_per_day: None,
        },
        app.state.sessions().clone(),
        McpMetrics::default(),
        Arc::new(SystemLookup),
    )
    .unwrap()
}

async fn post(broker: &Broker, s: &Session, body: Value) -> (StatusCode, Value) {
    let id = s.registered.session_id.to_string();
    let token = s.registered.caller_token.expose_secret();
    let (status, json, _) = mcp_client::send(broker, (&id, "wiki"), token, "POST", body).await;
    (status, json)
}

fn tool(id: u64, name: &str) -> Value {
    call(id, name, json!({"q": "onboarding"}))
}

#[tokio::test]
async fn over_one_stream_only_the_allowed_tools_are_listed_and_called_with_the_servers_secret() {
    let fake = FakeMcpSse::start().await;
    let app = app().await;
    let b = broker(&app, server(&format!("{}/sse", fake.base), true));
    let s = app.guild_session("u1");
    let (status, init) = post(&b, &s, rpc(1, "initialize", json!({}))).await;
    assert_eq!(status, StatusCode::OK, "{init}");
    assert_eq!(init["result"]["serverInfo"]["name"], "fake-mcp");
    let (status, _) = post(
        &b,
        &s,
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let (_, listed) = post(&b, &s, rpc(2, "tools/list", json!({}))).await;
    let names = tool_names(&listed);
    assert_eq!(names, ["search"], "{listed}");
    let (_, found) = post(&b, &s, tool(3, "search")).await;
    assert_eq!(found["id"], 3);
    assert!(found.to_string().contains("found: onboarding"), "{found}");
    let (_, refused) = post(&b, &s, tool(4, "delete_everything")).await;
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    assert_eq!(
        fake.posted(),
        [
            "initialize",
            "notifications/initialized",
            "tools/list",
            "tools/call:search"
        ],
        "the refused tool never reached the server"
    );
    assert_eq!(fake.opened(), 1, "one stream for the session");
    let token = s.registered.caller_token.expose_secret().to_owned();
    for (headers, _) in fake.requests() {
        assert_eq!(headers.get("authorization").unwrap(), SECRET);
        assert!(!format!("{headers:?}").contains(&token));
    }
    // Another session has a stream of its own.
    let other = app.guild_session("u2");
    let (_, listed) = post(&b, &other, rpc(1, "tools/list", json!({}))).await;
    assert_eq!(listed["result"]["tools"].as_array().unwrap().len(), 1);
    assert_eq!(fake.opened(), 2);
}

#[tokio::test]
async fn a_stream_that_ended_is_opened_again_and_initialized_as_the_agent_had_it() {
    let fake = FakeMcpSse::start().await;
    let app = app().await;
    let b = broker(&app, server(&format!("{}/sse", fake.base), true));
    let s = app.guild_session("u1");
    post(&b, &s, rpc(1, "initialize", json!({"capabilities": {}}))).await;
    fake.close_streams();
    // The broker sees the stream end; the next request opens a new one.
    common::poll::poll(std::time::Duration::from_secs(5), || {
        (b.reap() == 1).then_some(())
    })
    .await
    .expect("the ended stream is noticed");
    let (_, found) = post(&b, &s, tool(2, "search")).await;
    assert!(found.to_string().contains("found: onboarding"), "{found}");
    assert_eq!(fake.opened(), 2);
    let posted = fake.posted();
    assert_eq!(
        &posted[1..],
        [
            "initialize",
            "notifications/initialized",
            "tools/call:search"
        ],
        "{posted:?}"
    );
}

#[tokio::test]
async fn an_endpoint_on_another_host_a_redirect_and_a_loopback_address_are_refused() {
    let fake = FakeMcpSse::start().await;
    let app = app().await;
    let s = app.guild_session("u1");
    // The stream names an endpoint elsewhere: never posted to.
    fake.endpoint("http://127.0.0.2:9/messages");
    let b = broker(&app, server(&format!("{}/sse", fake.base), true));
    let (status, body) = post(&b, &s, rpc(1, "tools/list", json!({}))).await;
    assert_eq!(status, StatusCode::BAD_GATEWAY, "{body}");
    assert!(
        body["error"].as_str().unwrap().contains("another host"),
        "{body}"
    );
    assert!(fake.posted().is_empty());
    // A redirect of the stream is not followed.
    let b = broker(&app, server(&format!("{}/moved", fake.base), true));
    let (status, body) = post(&b, &s, rpc(1, "tools/list", json!({}))).await;
    assert_eq!(status, StatusCode::BAD_GATEWAY);
    assert_eq!(body["code"], "REDIRECT_REFUSED");
    assert_eq!(fake.opened(), 1, "only the first stream was opened");
    // Loopback, not marked local.
    let b = broker(&app, server(&format!("{}/sse", fake.base), false));
    let (status, body) = post(&b, &s, rpc(1, "tools/list", json!({}))).await;
    assert_eq!(status, StatusCode::BAD_GATEWAY);
    assert_eq!(body["code"], "SERVER_NOT_PUBLIC");
    assert_eq!(fake.opened(), 1);
}
