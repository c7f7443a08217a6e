//! The platform seam as the Skill API handlers will use it: an agent's raw reply goes through the
//! content pipeline, is split to the platform's limit and sent through `Arc<dyn PlatformAdapter>`;
//! the test inspects the `FakePlatform` behind it.

use std::sync::Arc;

use air_friends::platform::fake::{Call, FakePlatform, Op};
use air_friends::platform::{
    OutgoingFile, PlatformAdapter, PlatformError, PlatformKind, PlatformRegistry, ReactionEmoji,
    send_text,
};
use air_friends::text::process_outgoing;

/// An agent reply of about 4500 characters with tags, literal `\n` escapes, CJK and emoji.
fn long_agent_reply() -> String {
    let mut reply = String::from("<reply>");
    let mut n = 0;
    while reply.chars().count() < 4500 {
        reply.push_str(&format!(
            "Paragraph {n}: 今日は良い天気ですね。 The quick brown fox 🦊 jumps over the lazy dog. \
             It keeps running and running through the forest.\\n\\n"
        ));
        n += 1;
    }
    reply.push_str("</reply>");
    reply
}

#[tokio::test]
async fn a_long_discord_reply_arrives_as_ordered_parts_within_the_limit() {
    let fake = Arc::new(FakePlatform::discord());
    let trigger = fake.push_incoming("chan", "u1", "tell me a long story");
    let adapter: Arc<dyn PlatformAdapter> = fake.clone();

    let text = process_outgoing(&long_agent_reply());
    assert!(!text.contains("<reply>") && !text.contains("\\n"));
    let sent = send_text(
        adapter.as_ref(),
        &trigger.channel_id,
        &text,
        Some(&trigger.message_id),
    )
    .await
    .expect("sent");

    let texts = fake.sent_texts();
    assert_eq!(sent.len(), texts.len());
    assert!(texts.len() >= 3, "{} parts", texts.len());
    for part in &texts {
        assert!(air_friends::platform::discord::TEXT_LIMITS.fits(part));
        assert!(!part.trim().is_empty());
    }
    assert!(texts[0].starts_with("Paragraph 0:"));
    let squash = |s: &str| s.split_whitespace().collect::<String>();
    assert_eq!(squash(&texts.concat()), squash(&text));
    match &fake.calls_of(Op::SendMessage)[0] {
        Call::SendMessage { reply_to, .. } => {
            assert_eq!(reply_to.as_deref(), Some(trigger.message_id.as_str()));
        }
        other => panic!("unexpected call {other:?}"),
    }
}

#[tokio::test]
async fn misskey_edit_returns_a_new_id_threaded_to_the_original_anchor() {
    let fake = Arc::new(FakePlatform::misskey());
    let trigger = fake.push_incoming("note:abc", "u1", "hello");
    let registry = PlatformRegistry::new().with(fake.clone());
    let adapter = registry.require(PlatformKind::Misskey).expect("configured");

    let first = adapter
        .send_message(
            &"note:abc".into(),
            "first answer",
            Some(&trigger.message_id),
        )
        .await
        .expect("sent");
    let edited = adapter
        .edit_message(
            &"note:abc".into(),
            &first.message_id,
            "better answer",
            Some(&trigger.message_id),
        )
        .await
        .expect("edited");
    assert_ne!(edited.message_id, first.message_id);
    let fetched = adapter
        .get_message(&"note:abc".into(), &edited.message_id)
        .await
        .expect("fetched");
    assert_eq!(fetched.content, "better answer");
    assert!(fetched.is_bot);
}

#[tokio::test]
async fn react_and_export_by_dm_through_the_trait() {
    let fake = Arc::new(FakePlatform::discord());
    fake.add_user("u1", "alice", "Alice");
    let trigger = fake.push_incoming("chan", "u1", "export my memories please");
    let adapter: Arc<dyn PlatformAdapter> = fake.clone();

    let thumbs: ReactionEmoji = "👍".parse().expect("emoji");
    adapter
        .add_reaction(&"chan".into(), &trigger.message_id, &thumbs)
        .await
        .expect("reacted");
    let export = OutgoingFile::from_bytes("memories.md", b"# Memories\n".to_vec())
        .with_mime("text/markdown");
    let delivery = adapter
        .send_dm_files(&"u1".into(), vec![export], Some("Here is your export."))
        .await
        .expect("delivered");
    assert_eq!(delivery.message_ids().len(), 1);
    assert_eq!(
        fake.reactions("chan", trigger.message_id.as_str()),
        vec![thumbs]
    );
    let files = fake.file_deliveries();
    assert_eq!(files[0].channel_id, fake.dm_channel_id("u1"));
    assert_eq!(files[0].filenames, vec!["memories.md"]);

    fake.rate_limit_next(Op::SendDm, std::time::Duration::from_millis(1200));
    let err = adapter
        .send_dm(&"u1".into(), "later")
        .await
        .expect_err("rate limited");
    assert!(err.is_retryable());
    assert!(matches!(err, PlatformError::RateLimited { .. }));
}
