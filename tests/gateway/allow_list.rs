//! The allow-list (issue 29): only the chat endpoints of the providers the operator chose
//! reach an upstream; everything else is 404 before a key is attached.

use super::*;
/// The attack (issue 29): a hijacked agent uses the operator's key for the provider's other
/// APIs — listing and deleting files, starting a fine-tuning job, generating images. Only the
/// endpoints a chat agent needs are forwarded, compared exactly (no prefix, no trailing slash,
/// no query, no other spelling); everything else is 404 and never reaches the upstream.
#[tokio::test]
async fn endpoints_other_than_the_chat_ones_are_404_and_never_reach_the_upstream() {
    let upstream = FakeProvider::start(REAL_KEY).await;
    let h = harness(&upstream.base_url).await;
    let cases = [
        ("GET", "files"),
        ("DELETE", "files/x"),
        ("POST", "fine_tuning/jobs"),
        ("POST", "images/generations"),
        ("GET", "chat/completions"),
        ("POST", "chat/completions/"),
        ("POST", "chat/completions?x=1"),
        ("POST", "Chat/Completions"),
        ("POST", "chat/complet%69ons"),
        ("POST", "chat//completions"),
        ("POST", "v1/chat/completions"),
        ("POST", "chat/completions/x"),
        ("GET", "models/gpt-4o"),
        ("DELETE", "models"),
        ("PUT", "responses"),
        ("POST", "messages/batches"),
        ("HEAD", "models"),
    ];
    for (method, rest) in cases {
        let request = h
            .request_to("fake", method, rest)
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::CONTENT_LENGTH, 2)
            .body(Body::from("{}"))
            .unwrap();
        let response = h.send(request).await;
        assert_eq!(response.status(), StatusCode::NOT_FOUND, "{method} {rest}");
        if method != "HEAD" {
            assert_eq!(error_code(response).await, "ENDPOINT_NOT_ALLOWED");
        }
    }
    assert!(
        upstream.received().is_empty(),
        "reached the upstream: {:?}",
        upstream.received()
    );

    let models = h
        .request_to("fake", "GET", "models")
        .body(Body::empty())
        .unwrap();
    let allowed = [
        models,
        h.json_to("fake", "responses", &json!({"model": "m"})),
        h.json_to("fake", "messages", &json!({"model": "m"})),
        h.chat_as(script::HONEST),
    ];
    for request in allowed {
        let response = h.send(request).await;
        assert_eq!(response.status(), StatusCode::OK);
        body_text(response).await;
    }
    let reached: Vec<(String, String)> = upstream
        .received()
        .iter()
        .map(|r| (r.method.to_string(), r.path.clone()))
        .collect();
    let expected = [
        ("GET", "/v1/models"),
        ("POST", "/v1/responses"),
        ("POST", "/v1/messages"),
        ("POST", "/v1/chat/completions"),
    ]
    .map(|(m, p)| (m.to_owned(), p.to_owned()));
    assert_eq!(reached, expected);
}

/// The attack (issue 29): the operator chose one provider's model; a hijacked agent sends what
/// it read (and spends) through another provider whose key the daemon holds too (an OpenAI key
/// kept for embeddings, say). Only `agent.model`'s provider is served; another one answers 404
/// and nothing reaches it.
#[tokio::test]
async fn a_provider_other_than_the_configured_models_is_404() {
    let upstream = FakeProvider::start(REAL_KEY).await;
    let providers = BTreeMap::from([
        (
            "fake".to_owned(),
            provider(&upstream.base_url, AuthHeader::Bearer, &[]),
        ),
        (
            "other".to_owned(),
            provider(&upstream.base_url, AuthHeader::Bearer, &[]),
        ),
    ]);
    let h = harness_with(
        providers.clone(),
        BudgetConfig::default(),
        GatewaySettings::default(),
    )
    .await;
    let response = h
        .send(h.json_to("other", "chat/completions", &chat_body(script::HONEST)))
        .await;
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    assert_eq!(error_code(response).await, "PROVIDER_NOT_SERVED");
    assert!(upstream.received().is_empty(), "a request left");

    let response = h.send(h.chat_as(script::HONEST)).await;
    assert_eq!(
        response.status(),
        StatusCode::OK,
        "the model's provider works"
    );
    body_text(response).await;
    assert!(
        h.metrics_text()
            .contains(r#"air_friends_llm_requests_total{provider="other",outcome="refused"} 1"#)
    );

    // Named by the operator, it is served.
    let agent = AgentConfig {
        model: Some("fake/fake-model".into()),
        extra_providers: vec!["other".into()],
        providers: providers.clone(),
        ..AgentConfig::default()
    };
    let h = harness_for(agent, GatewaySettings::default()).await;
    let response = h
        .send(h.json_to("other", "chat/completions", &chat_body(script::HONEST)))
        .await;
    assert_eq!(response.status(), StatusCode::OK);
    body_text(response).await;
    assert_eq!(upstream.received().len(), 2);
}
