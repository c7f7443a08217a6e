//! Usage that cannot be skipped (issue 29): streamed chat requests ask for usage, and an
//! answer that still reports none — or is cut short before its usage — is charged an estimate
//! that the budgets count.

use super::*;
use crate::common::fake_provider::NO_USAGE_ANSWER_BYTES;
/// The attack (issue 29): an agent asks for a streamed answer without
/// `stream_options.include_usage` (or turns it off), so the answer reports no usage. The
/// gateway sets it in the body it forwards, keeping the rest of `stream_options`, and the
/// usage the upstream then reports is metered exactly.
#[tokio::test]
async fn streamed_chat_requests_ask_the_upstream_for_usage() {
    let upstream = FakeProvider::start(REAL_KEY).await;
    let h = harness(&upstream.base_url).await;
    let options = [
        None,
        Some(json!({"include_usage": false, "continuous_usage_stats": false})),
        Some(json!("off")),
        Some(Value::Null),
    ];
    for stream_options in &options {
        let mut body = chat_body(script::HONEST);
        if let Some(o) = stream_options {
            body["stream_options"] = o.clone();
        }
        let response = h.send(h.json_to("fake", "chat/completions", &body)).await;
        assert_eq!(response.status(), StatusCode::OK);
        let text = body_text(response).await;
        assert!(text.contains("\"usage\""), "{text}");
    }
    let received = upstream.received();
    assert_eq!(received.len(), options.len());
    for r in &received {
        let body = r.json();
        assert_eq!(body["stream_options"]["include_usage"], true, "{body}");
        assert_eq!(body["messages"][0]["content"], "hi", "the rest is kept");
        assert_eq!(
            r.headers[header::CONTENT_LENGTH],
            r.body.len().to_string(),
            "the length is the rewritten body's"
        );
    }
    assert_eq!(
        received[1].json()["stream_options"]["continuous_usage_stats"],
        false
    );
    assert_eq!(
        h.usage_today(Some("u1")).await,
        LlmUsage {
            input_tokens: 48,
            output_tokens: 12,
            requests: 4
        },
        "the honest provider's 12 + 3 tokens per request"
    );
    let text = h.metrics_text();
    assert!(
        text.contains(r#"air_friends_llm_requests_total{provider="fake",outcome="ok"} 4"#),
        "{text}"
    );

    // A request that does not stream gets no `stream_options` (OpenAI refuses them there).
    let plain = json!({"model": "honest", "stream": false, "messages": []});
    body_text(h.send(h.json_to("fake", "chat/completions", &plain)).await).await;
    assert_eq!(upstream.received()[4].json(), plain);
}

/// A chat request the gateway cannot read as a JSON object cannot be given
/// `include_usage`: it is refused (400) rather than forwarded unmetered, and nothing leaves.
#[tokio::test]
async fn a_chat_request_whose_body_is_not_a_json_object_is_refused_before_the_upstream() {
    let upstream = FakeProvider::start(REAL_KEY).await;
    let h = harness(&upstream.base_url).await;
    let bodies: [&[u8]; 5] = [
        b"not json",
        b"[1, 2]",
        b"{\"stream\": true,",
        b"{\"stream\": true} trailing",
        b"{\"model\": \"\xff\xfe\"}",
    ];
    for body in bodies {
        let request = h
            .request_to("fake", "POST", "chat/completions")
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::CONTENT_LENGTH, body.len())
            .body(Body::from(body))
            .unwrap();
        let response = h.send(request).await;
        assert_eq!(
            response.status(),
            StatusCode::BAD_REQUEST,
            "{}",
            String::from_utf8_lossy(body)
        );
        assert_eq!(error_code(response).await, "BAD_REQUEST_BODY");
    }
    assert!(upstream.received().is_empty());
}

/// The attack (issue 29): six ~1 000-token streamed answers without usage passed a 500-token
/// daily budget, since nothing was charged for them. Now an answer that still reports no
/// usage (a provider that ignores `include_usage`) is charged an estimate, and the budget
/// refuses the next requests.
#[tokio::test]
async fn a_500_token_budget_holds_against_streams_without_usage() {
    let upstream = FakeProvider::start(REAL_KEY).await;
    let budget = BudgetConfig {
        tokens_per_user_per_day: Some(500),
        tokens_per_day: None,
    };
    let h = harness_with(
        fake_only(&upstream.base_url),
        budget,
        GatewaySettings::default(),
    )
    .await;
    let first = h.send(h.chat_as(script::NO_USAGE)).await;
    assert_eq!(first.status(), StatusCode::OK);
    assert!(body_text(first).await.ends_with("data: [DONE]\n\n"));
    h.gateway.drain().await;
    for attempt in 2..=3 {
        let refused = h.send(h.chat_as(script::NO_USAGE)).await;
        assert_eq!(
            refused.status(),
            StatusCode::TOO_MANY_REQUESTS,
            "request {attempt}"
        );
        assert_eq!(error_code(refused).await, "BUDGET_EXCEEDED");
    }
    assert_eq!(upstream.received().len(), 1, "only the first one left");
    assert!(
        upstream.received()[0].json()["stream_options"]["include_usage"] == true,
        "usage was asked for"
    );
}

/// What an answer without usage is charged: its streamed text (the tokens
/// `text::estimate_tokens` counts) as output, the request body's bytes / 4 as input; recorded
/// in the store like any usage (so budgets count it) and in the metrics apart from reported
/// usage (`llm_estimated_tokens_total`, outcome `estimated`).
#[tokio::test]
async fn a_stream_without_usage_is_charged_an_estimate_recorded_as_estimated() {
    let upstream = FakeProvider::start(REAL_KEY).await;
    let h = harness(&upstream.base_url).await;
    let response = h.send(h.chat_as(script::NO_USAGE)).await;
    assert_eq!(response.status(), StatusCode::OK);
    body_text(response).await;
    let output = NO_USAGE_ANSWER_BYTES as u64 / 4;
    let charged = estimated(&upstream, output);
    assert_eq!(h.usage_today(Some("u1")).await, charged);
    h.assert_metrics(&[
        &format!(
            r#"air_friends_llm_estimated_tokens_total{{model="no-usage",kind="output"}} {output}"#
        ),
        &format!(
            r#"air_friends_llm_estimated_tokens_total{{model="no-usage",kind="input"}} {}"#,
            charged.input_tokens
        ),
        r#"air_friends_llm_requests_total{provider="fake",outcome="estimated"} 1"#,
    ]);
    let text = h.metrics_text();
    assert!(
        !text.contains(r#"air_friends_llm_tokens_total{model="no-usage""#),
        "estimates are not counted as reported usage:\n{text}"
    );
}

/// The one request `upstream` received, charged by estimate: its body's bytes / 4 as input,
/// `output` as output.
fn estimated(upstream: &FakeProvider, output: u64) -> LlmUsage {
    let sent = upstream.received()[0].body.len() as u64;
    LlmUsage {
        input_tokens: sent.div_ceil(4),
        output_tokens: output,
        requests: 1,
    }
}

/// The attack: the agent reads the answer and hangs up before the last chunk, the one that
/// carries the usage. What it received is charged all the same.
#[tokio::test]
async fn a_stream_the_client_drops_before_its_usage_is_still_charged() {
    let upstream = FakeProvider::start(REAL_KEY).await;
    let h = harness(&upstream.base_url).await;
    let response = h.send(h.chat_as(script::GATED)).await;
    assert_eq!(response.status(), StatusCode::OK);
    let mut body = response.into_body();
    assert!(String::from_utf8_lossy(&first_chunk(&mut body).await).contains("\"one\""));
    drop(body);
    assert_eq!(
        h.usage_today(Some("u1")).await,
        estimated(&upstream, 1),
        "the request and the one short chunk received"
    );
    h.assert_metrics(&[
        r#"air_friends_llm_requests_total{provider="fake",outcome="aborted"} 1"#,
        r#"air_friends_llm_estimated_tokens_total{model="gated",kind="output"} 1"#,
    ]);
}
