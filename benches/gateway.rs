//! Model gateway overhead: streamed chat completions sent to an upstream directly and through
//! the gateway's route, interleaved in one run (direct, gateway, direct, ...), so both sides see
//! the same machine state.
//!
//! Two upstreams on loopback:
//! * `fake-llm` — the tests' fake OpenAI-compatible server (`tests/common/fake_llm.rs`): the
//!   whole SSE answer (6 chunks, usage in the last) in one response body.
//! * `paced` — the first SSE chunk at once, the rest `PACE` later, as a model streams tokens:
//!   time to first byte through the gateway must stay near the direct one (no buffering).
//!
//! The gateway is the real one ([`Gateway::router`]) served by axum on `127.0.0.1:0`, with a
//! registered session, a `Store` under Cargo's target tmp dir (every response's usage is
//! written, as in the daemon) and the metrics registry. One keep-alive `reqwest` client sends
//! every request; latency is from `send` to the end of the body, TTFB to the first body chunk.
//!
//! Run: `cargo bench --bench gateway` (`harness = false`; prints `RESULT` lines and a Markdown
//! table). `GATEWAY_BENCH_REQUESTS` sets the measured requests per side and case (default 2 000;
//! 100 more per side are a warm-up). Results are recorded in `docs/PERFORMANCE.md` ("Model
//! gateway"), earlier runs in `docs/performance/gateway.md`.

#[path = "../tests/common/fake_llm.rs"]
mod fake_llm;

use air_friends::platform::Origin;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use air_friends::config::{AgentConfig, AuthHeader, ProviderConfig};
use air_friends::gateway::{Gateway, GatewayMetrics, GatewaySettings};
use air_friends::observability::Metrics;
use air_friends::platform::PlatformKind;
use air_friends::session::{SessionContext, SessionRegistry};
use air_friends::store::Store;
use axum::body::{Body, Bytes};
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::post;
use axum::serve::ListenerExt;
use fake_llm::{FakeLlm, Step};

/// Unmeasured requests per side at the start of each case.
const WARMUP: usize = 100;
/// Pause of the `paced` upstream between its first chunk and the rest.
const PACE: Duration = Duration::from_millis(2);
const KEY_ENV: &str = "GATEWAY_BENCH_KEY";
const BODY: &str = r#"{"model":"fake-model","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}"#;

struct Sample {
    total: Duration,
    ttfb: Duration,
}

async fn paced() -> impl IntoResponse {
    let first = "data: {\"model\":\"paced\",\"choices\":[{\"delta\":{\"content\":\"Hel\"}}]}\n\n";
    let rest = "data: {\"model\":\"paced\",\"choices\":[{\"delta\":{\"content\":\"lo\"}}]}\n\n\
                data: {\"model\":\"paced\",\"choices\":[],\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":2}}\n\n\
                data: [DONE]\n\n";
    let stream = futures_util::stream::unfold(0u8, move |step| async move {
        match step {
            0 => Some((Ok::<_, std::io::Error>(Bytes::from(first)), 1)),
            1 => {
                tokio::time::sleep(PACE).await;
                Some((Ok(Bytes::from(rest)), 2))
            }
            _ => None,
        }
    });
    (
        [(header::CONTENT_TYPE, "text/event-stream")],
        Body::from_stream(stream),
    )
}

async fn serve(app: axum::Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    // TCP_NODELAY as the daemon's listeners must set it: otherwise Nagle holds the chunked
    // body's last small write until the client's delayed ACK (~40 ms on Linux).
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}")
}

async fn one(client: &reqwest::Client, url: &str, token: &str) -> Sample {
    let started = Instant::now();
    let mut response = client
        .post(url)
        .bearer_auth(token)
        .header(header::CONTENT_TYPE, "application/json")
        .body(BODY)
        .send()
        .await
        .unwrap();
    assert!(
        response.status().is_success(),
        "{url}: {}",
        response.status()
    );
    let mut ttfb = None;
    let mut bytes = 0;
    while let Some(chunk) = response.chunk().await.unwrap() {
        ttfb.get_or_insert_with(|| started.elapsed());
        bytes += chunk.len();
    }
    assert!(bytes > 0);
    Sample {
        total: started.elapsed(),
        ttfb: ttfb.unwrap_or_default(),
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

struct Stats {
    p50: Duration,
    p99: Duration,
}

fn stats(mut v: Vec<Duration>) -> Stats {
    v.sort();
    Stats {
        p50: percentile(&v, 50.0),
        p99: percentile(&v, 99.0),
    }
}

fn main() {
    let requests: usize = std::env::var("GATEWAY_BENCH_REQUESTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2_000);
    let key = "sk-bench-real-key";
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async move {
        let llm = FakeLlm::start(vec![Step::Text("hello".into())]).await;
        let paced_base = serve(axum::Router::new().route("/v1/chat/completions", post(paced))).await;
        let llm_root = llm.base_url.trim_end_matches("/v1").to_owned();

        let tmp = tempfile::Builder::new()
            .prefix("gateway-bench")
            .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
            .unwrap();
        let store = Store::open(&tmp.path().join("bench.db")).await.unwrap();
        let metrics = Metrics::new();
        let mut gateway_metrics = None;
        metrics.register(|r| gateway_metrics = Some(GatewayMetrics::new(r)));
        let sessions = SessionRegistry::new(Duration::from_secs(3600));
        let session = sessions
            .register(SessionContext {
                place: Default::default(),
                origin: Origin {
                    platform: PlatformKind::Console,
                    channel_id: "bench".into(),
                    guild_id: None,
                    user_id: "bench".into(),
                    username: "bench".into(),
                    is_dm: true,
                },
                purpose: Default::default(),
                trigger_message_id: None,
                workspace: tmp.path().to_path_buf(),
            })
            .unwrap();
        let provider = |base: &str| ProviderConfig {
            base_url: format!("{base}/v1"),
            api_key_env: KEY_ENV.into(),
            auth_header: AuthHeader::Bearer,
            pass_headers: Vec::new(),
            anonymous_key: None,
        };
        let agent = AgentConfig {
            providers: BTreeMap::from([
                ("fake-llm".to_owned(), provider(&llm_root)),
                ("paced".to_owned(), provider(&paced_base)),
            ]),
            // No model is named: both are served because they are listed.
            extra_providers: vec!["fake-llm".to_owned(), "paced".to_owned()],
            ..AgentConfig::default()
        };
        let env = |name: &str| (name == KEY_ENV).then(|| key.to_owned());
        let gateway = Gateway::new(
            &agent,
            &env,
            sessions.clone(),
            store.clone(),
            gateway_metrics.unwrap(),
            GatewaySettings::default(),
        )
        .unwrap();
        let gateway_base = serve(gateway.router()).await;
        let token = session.caller_token.expose_secret().to_owned();
        let client = reqwest::Client::new();

        println!("model gateway benchmark: {requests} requests per side and case, interleaved");
        let mut table = Vec::new();
        for (case, direct_base) in [("fake-llm", &llm_root), ("paced", &paced_base)] {
            let direct_url = format!("{direct_base}/v1/chat/completions");
            let gateway_url = format!(
                "{gateway_base}/llm/{}/{case}/chat/completions",
                session.session_id
            );
            let (mut direct, mut through) = (Vec::new(), Vec::new());
            for i in 0..WARMUP + requests {
                let d = one(&client, &direct_url, "sk-direct").await;
                let g = one(&client, &gateway_url, &token).await;
                if i >= WARMUP {
                    direct.push(d);
                    through.push(g);
                }
            }
            let added: Vec<Duration> = direct
                .iter()
                .zip(&through)
                .map(|(d, g)| g.total.saturating_sub(d.total))
                .collect();
            let d_total = stats(direct.iter().map(|s| s.total).collect());
            let g_total = stats(through.iter().map(|s| s.total).collect());
            let d_ttfb = stats(direct.iter().map(|s| s.ttfb).collect());
            let g_ttfb = stats(through.iter().map(|s| s.ttfb).collect());
            let pair = stats(added);
            // direct, gateway, paired added, TTFB direct, TTFB gateway: (p50, p99) in ms.
            let cells: Vec<(f64, f64)> = [d_total, g_total, pair, d_ttfb, g_ttfb]
                .iter()
                .map(|s| (ms(s.p50), ms(s.p99)))
                .collect();
            let [direct, gateway, added, ttfb_direct, ttfb_gateway] = cells[..] else {
                unreachable!("five statistics")
            };
            println!(
                "RESULT {case:<9} direct p50={:.3} p99={:.3} | gateway p50={:.3} p99={:.3} | \
                 added (paired) p50={:.3} p99={:.3} | ttfb direct p50={:.3} p99={:.3} \
                 gateway p50={:.3} p99={:.3} (ms)",
                direct.0, direct.1, gateway.0, gateway.1, added.0, added.1,
                ttfb_direct.0, ttfb_direct.1, ttfb_gateway.0, ttfb_gateway.1,
            );
            let row: Vec<String> = cells
                .iter()
                .map(|(p50, p99)| format!("{p50:.3} / {p99:.3}"))
                .collect();
            table.push(format!("| {case} | {} |", row.join(" | ")));
        }
        gateway.drain().await;
        let usage = store
            .llm_usage_on(chrono::Utc::now().date_naive(), None)
            .await
            .unwrap();
        assert_eq!(
            usage.requests as usize,
            2 * (WARMUP + requests),
            "every gateway response was metered"
        );
        println!();
        println!(
            "| upstream | direct p50 / p99 (ms) | gateway p50 / p99 (ms) | added, paired p50 / p99 (ms) | TTFB direct p50 / p99 (ms) | TTFB gateway p50 / p99 (ms) |"
        );
        println!("|---|---|---|---|---|---|");
        for row in table {
            println!("{row}");
        }
    });
}
