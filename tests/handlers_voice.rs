//! send-voice through the real Skill API router with a fake speech service on loopback: the
//! reply is spoken and sent as one Ogg Opus voice file (duration, waveform, the text as alt text
//! and caption), threaded like send-reply; it shares send-reply's one reply per turn and its
//! doom-loop stop; a speech failure sends nothing and leaves the reply to send-reply; the
//! minutes of voice are counted per user; without a speech service the skill is disabled.

mod common;
mod handlers_support;

use air_friends::audio::{AudioType, duration};
use air_friends::platform::fake::{Call, Op};
use air_friends::platform::{FileSource, OutgoingFile, PlatformError};
use common::fake_speech::{Answer, FakeSpeech, Speech, spoken_seconds};
use handlers_support::{App, Options, app, app_with};
use serde_json::json;

const SAID: &str = "See you at the station at noon.";

async fn voiced() -> (App, FakeSpeech) {
    let speech = FakeSpeech::start(Answer::Text(String::new())).await;
    let app = app_with(Options {
        speech: Some(speech.base_url.clone()),
        ..Options::default()
    })
    .await;
    (app, speech)
}

/// The one file of the one `send_files` call, with its caption and anchor.
fn sent_file(app: &App) -> (OutgoingFile, Option<String>, Option<String>) {
    let calls = app.discord.calls_of(Op::SendFiles);
    assert_eq!(calls.len(), 1, "{calls:?}");
    let Call::SendFiles {
        files,
        caption,
        reply_to,
        ..
    } = calls[0].clone()
    else {
        unreachable!()
    };
    assert_eq!(files.len(), 1);
    (files[0].clone(), caption, reply_to)
}

#[tokio::test]
async fn the_reply_is_spoken_and_sent_as_a_voice_file_threaded_to_the_trigger() {
    let (app, speech) = voiced().await;
    let s = app.guild_session("u1");
    let r = app.call(&s, "send-voice", json!({ "text": SAID })).await;
    let data = r.data().clone();
    let (file, caption, reply_to) = sent_file(&app);
    assert_eq!(reply_to.as_deref(), Some(s.trigger().as_str()));
    assert_eq!(caption.as_deref(), Some(SAID), "the text rides along");
    assert_eq!(file.filename, "voice-message.ogg");
    assert_eq!(file.mime.as_deref(), Some("audio/ogg"));
    assert_eq!(file.description.as_deref(), Some(SAID), "the alt text");
    let FileSource::Bytes(bytes) = &file.source else {
        panic!("{:?}", file.source)
    };
    assert_eq!(AudioType::sniff(bytes), Some(AudioType::OggOpus));
    let length = duration(bytes, AudioType::OggOpus).unwrap();
    let clip = file.voice.expect("marked as a voice message");
    assert_eq!(clip.duration, length);
    assert!((length.as_secs_f64() - spoken_seconds(SAID)).abs() < 0.01);
    assert!(!clip.waveform.is_empty() && clip.waveform.len() <= 256);
    assert_eq!(clip.waveform.iter().max(), Some(&255));
    assert_eq!(data["durationSecs"], json!(length.as_secs_f64()));
    assert!(data["messageId"].is_string());
    assert!(s.registered.handle.responded());
    // What the speech service was asked.
    let requests = speech.speech_requests();
    assert_eq!(requests.len(), 1);
    let body = &requests[0].1;
    assert_eq!(
        (
            &body["input"],
            &body["model"],
            &body["voice"],
            &body["response_format"]
        ),
        (
            &json!(SAID),
            &json!("tts-1"),
            &json!("alloy"),
            &json!("opus")
        )
    );
    // Counted in the user's day.
    let who = air_friends::store::WorkspaceKey::new("discord", "u1").unwrap();
    let used = app
        .store
        .voice_usage_on(chrono::Utc::now().date_naive(), Some(&who))
        .await
        .unwrap();
    assert_eq!(
        (used.speeches, used.audio_out_ms),
        (1, length.as_millis() as u64)
    );
}

#[tokio::test]
async fn voice_and_text_share_the_one_reply_of_a_turn_and_its_doom_loop_stop() {
    let (app, _speech) = voiced().await;
    let s = app.guild_session("u1");
    app.call(&s, "send-voice", json!({ "text": SAID }))
        .await
        .data();
    let again = app
        .call(&s, "send-reply", json!({"message": "and text"}))
        .await;
    assert_eq!(again.error(429), "QUOTA_EXCEEDED");
    let again = app.call(&s, "send-voice", json!({ "text": SAID })).await;
    assert_eq!(again.error(429), "QUOTA_EXCEEDED");
    assert!(
        again.message().contains("once per turn"),
        "{}",
        again.message()
    );
    assert!(!s.terminated());
    for _ in 0..2 {
        app.call(&s, "send-voice", json!({ "text": SAID })).await;
    }
    assert!(s.terminated(), "the 4th send-voice attempt stops the agent");
    assert!(app.discord.sent().is_empty(), "no text was sent");
    assert_eq!(app.discord.call_count(Op::SendFiles), 1);
    // The other way round: after a text reply, no voice.
    let t = app.guild_session("u2");
    app.call(&t, "send-reply", json!({"message": "text first"}))
        .await
        .data();
    let voice = app.call(&t, "send-voice", json!({ "text": SAID })).await;
    assert_eq!(voice.error(429), "QUOTA_EXCEEDED");
}

#[tokio::test]
async fn a_speech_failure_sends_nothing_and_leaves_the_reply_to_send_reply() {
    let (app, speech) = voiced().await;
    let s = app.guild_session("u1");
    for (failure, words) in [
        (Speech::Status(503), "answered HTTP 503"),
        (Speech::Bytes(b"ID3 not opus".to_vec()), "usable Ogg Opus"),
    ] {
        speech.speak_with(failure);
        let r = app.call(&s, "send-voice", json!({ "text": SAID })).await;
        assert_eq!(r.error(502), "PLATFORM_ERROR");
        assert!(
            r.message().contains(words) && r.message().contains("send-reply"),
            "{}",
            r.message()
        );
    }
    assert_eq!(app.discord.call_count(Op::SendFiles), 0);
    // Too long for a voice reply (the test app allows 200 characters): a parameter problem.
    speech.speak_with(Speech::Opus);
    let long = "word ".repeat(60);
    let r = app.call(&s, "send-voice", json!({ "text": long })).await;
    assert_eq!(r.error(400), "INVALID_PARAMS");
    assert_eq!(
        speech.speech_requests().len(),
        2,
        "a long text is never sent"
    );
    // The reply is still free.
    app.call(&s, "send-reply", json!({"message": "in words, then"}))
        .await
        .data();
    assert_eq!(app.discord.sent_texts(), ["in words, then"]);
}

#[tokio::test]
async fn a_platform_refusing_the_voice_message_leaves_the_reply_to_send_reply() {
    let (app, _speech) = voiced().await;
    let s = app.guild_session("u1");
    app.discord.fail_next(
        Op::SendFiles,
        PlatformError::Forbidden("Cannot send voice messages in this channel".into()),
    );
    let r = app.call(&s, "send-voice", json!({ "text": SAID })).await;
    assert_eq!(r.error(502), "PLATFORM_ERROR");
    assert!(
        r.message().contains("Cannot send voice messages") && r.message().contains("send-reply"),
        "{}",
        r.message()
    );
    app.call(&s, "send-reply", json!({"message": "in words"}))
        .await
        .data();
    assert_eq!(app.discord.sent_texts(), ["in words"]);
}

#[tokio::test]
async fn without_a_speech_service_send_voice_is_disabled() {
    let app = app().await;
    let s = app.guild_session("u1");
    let r = app.call(&s, "send-voice", json!({ "text": SAID })).await;
    assert_eq!(r.error(503), "SKILL_DISABLED");
    assert_eq!(app.discord.call_count(Op::SendFiles), 0);
}
