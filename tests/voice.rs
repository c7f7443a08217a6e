//! Voice messages heard: the real `air-friends serve` against the fake Discord and the fake
//! Misskey, which serve audio made by the test (Ogg Opus, MP3), a fake OpenAI-compatible
//! transcription service on loopback, and the scripted fake agent, which records its prompts.
//! A voice message becomes the prompt's text with its duration; a too-long one is not sent to
//! the service and is listed with its reason; the service down is listed too; and in every
//! case the reply still arrives. The fetcher itself (`Attachments` with a `Transcriber`) is
//! checked for the transcript saved beside the audio and the per-user daily minutes. Voice
//! replies: the agent's send-voice becomes a Discord voice message (the flag, a valid Ogg Opus
//! file, its duration and waveform, the text as alt text) and a Misskey audio file with the
//! text on the message.

mod common;

use std::sync::Arc;
use std::time::Duration;

use air_friends::attachments::{
    AttachmentMetrics, AttachmentSettings, Attachments, Content, Hearing, Origins, SystemLookup,
};
use air_friends::audio::AudioType;
use air_friends::config::{AttachmentsConfig, Config, EnvSource, TranscriptionConfig};
use air_friends::platform::{Attachment, PlatformKind};
use air_friends::store::{Store, WorkspaceKey};
use air_friends::voice::{NotHeard, Transcriber, VoiceMetrics};
use common::audio;
use common::fake_discord::{DM_CHANNEL_ID, Served, USER_ID, message_create, user};
use common::fake_speech::{Answer, FakeSpeech, closed_base_url};
use common::serve_discord::{DiscordServe, DiscordSetup, one_turn, reply_steps, text_path};
use common::serve_misskey::{MisskeyServe, MisskeySetup};
use serde_json::{Value, json};

const REPLY: &str = "Noon at the station, got it.";
const SAID: &str = "meet me at the station at noon";
const KEY: &str = "sk-voice-9f3a";

/// A daemon on the fake Discord whose agent answers [`REPLY`], transcribing through
/// `base_url` with `transcription` (extra keys, each line indented by four spaces).
async fn discord(base_url: &str, transcription: &str) -> DiscordServe {
    let yaml = format!(
        "attachments:\n  timeoutMs: 5000\n  transcription:\n    baseUrl: {base_url}\n    \
         apiKeyEnv: VOICE_TEST_KEY\n    model: whisper-test\n    language: en\n{transcription}"
    );
    DiscordServe::start(move |files| DiscordSetup {
        script: one_turn(reply_steps(&text_path(files, "reply.md"))),
        texts: vec![("reply.md", REPLY.to_owned())],
        extra_yaml: yaml,
        env: vec![("VOICE_TEST_KEY", KEY.to_owned())],
        ..DiscordSetup::default()
    })
    .await
}

/// Pushes a Discord voice message to the bot's DMs (flag `IS_VOICE_MESSAGE`, no text) of `ogg` bytes lasting
/// `seconds`; returns the file's URL.
fn voice_message(bot: &DiscordServe, ogg: &[u8], seconds: f64) -> String {
    let url = bot.fake.serve_file(
        "voice-message.ogg",
        Served::Bytes("audio/ogg", ogg.to_vec()),
    );
    let id = bot.fake.next_id();
    let mut m = message_create(&id, DM_CHANNEL_ID, None, user(USER_ID, "alice", false), "");
    m["flags"] = json!(8192);
    m["attachments"] = json!([{
        "id": "91", "filename": "voice-message.ogg", "size": ogg.len(), "url": url,
        "proxy_url": url, "content_type": "audio/ogg", "duration_secs": seconds,
        "waveform": "AAAAAAAAAAA="
    }]);
    bot.fake.push_message(m);
    url
}

/// The text block of every prompt the agents received, in order.
fn prompt_texts(log: &[Value]) -> Vec<String> {
    log.iter()
        .filter(|v| v["received"]["method"] == "session/prompt")
        .map(|v| {
            v["received"]["params"]["prompt"][0]["text"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_discord_voice_message_becomes_the_prompts_text_with_its_duration() {
    let speech = FakeSpeech::start(Answer::Text(SAID.into())).await;
    let bot = discord(&speech.base_url, "").await;
    let ogg = audio::ogg_opus(3.0);
    voice_message(&bot, &ogg, 3.0);
    let replies = bot.wait_bot_messages(DM_CHANNEL_ID, 1).await;
    assert_eq!(replies[0].content, REPLY, "{}", bot.agent_events());

    let uploads = speech.uploads();
    assert_eq!(uploads.len(), 1);
    let up = &uploads[0];
    assert_eq!(up.path, "/v1/audio/transcriptions");
    assert_eq!(up.authorization().as_deref(), Some("Bearer sk-voice-9f3a"));
    assert_eq!(up.field("model").as_deref(), Some("whisper-test"));
    assert_eq!(up.field("language").as_deref(), Some("en"));
    assert_eq!(up.field("response_format").as_deref(), Some("json"));
    let file = &up.form["file"];
    assert_eq!(file.bytes, ogg, "the audio is sent as it was downloaded");
    assert_eq!(file.file_name.as_deref(), Some("voice.ogg"));
    assert_eq!(file.content_type.as_deref(), Some("audio/ogg"));

    let text = prompt_texts(&bot.agent_log_lines()).remove(0);
    assert!(
        text.contains(&format!(
            "[voice message, 0:03; its transcript:]\n{SAID}\n\n## Files attached"
        )),
        "{text}"
    );
    assert!(
        text.contains("audio (0:03, Ogg Opus): a voice message; its transcript is the current message's text above; saved as `")
            && text.contains("/in/voice-message.ogg.txt`"),
        "{text}"
    );
    assert!(!text.contains(KEY), "{text}");
    let metrics = bot.metrics().await;
    for sample in [
        "air_friends_voice_transcriptions_total{outcome=\"ok\"} 1",
        "air_friends_voice_transcriptions_total{outcome=\"too_long\"} 0",
        "air_friends_voice_transcribed_audio_seconds_total 3",
    ] {
        assert!(metrics.contains(sample), "{sample} missing:\n{metrics}");
    }
    bot.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_voice_message_too_long_is_not_sent_and_the_reply_still_arrives() {
    let speech = FakeSpeech::start(Answer::Text(SAID.into())).await;
    let bot = discord(&speech.base_url, "    maxSeconds: 2\n").await;
    voice_message(&bot, &audio::ogg_opus(3.0), 3.0);
    let replies = bot.wait_bot_messages(DM_CHANNEL_ID, 1).await;
    assert_eq!(replies[0].content, REPLY, "{}", bot.agent_events());
    assert!(
        speech.uploads().is_empty(),
        "nothing is sent to the service"
    );
    let text = prompt_texts(&bot.agent_log_lines()).remove(0);
    assert!(
        text.contains(
            "audio (0:03, Ogg Opus), not transcribed: it is 0:03 long, longer than the 0:02 limit; you cannot hear it"
        ),
        "{text}"
    );
    let metrics = bot.metrics().await;
    let sample = "air_friends_voice_transcriptions_total{outcome=\"too_long\"} 1";
    assert!(metrics.contains(sample), "{sample} missing:\n{metrics}");
    bot.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_transcription_service_down_is_listed_and_the_reply_still_arrives() {
    let down = closed_base_url().await;
    let mut bot = discord(&down, "").await;
    voice_message(&bot, &audio::ogg_opus(2.0), 2.0);
    let replies = bot.wait_bot_messages(DM_CHANNEL_ID, 1).await;
    assert_eq!(replies[0].content, REPLY, "{}", bot.agent_events());
    let text = prompt_texts(&bot.agent_log_lines()).remove(0);
    assert!(
        text.contains(
            "audio (0:02, Ogg Opus), not transcribed: the transcription service could not be reached; you cannot hear it"
        ),
        "{text}"
    );
    let record = bot.logged_or_wait(|l| {
        l["message"] == "voice message not transcribed: the transcription service failed"
    });
    assert_eq!(record["reason"], "unreachable", "{record}");
    assert_eq!(record["level"], "WARN", "{record}");
    let metrics = bot.metrics().await;
    let sample = "air_friends_voice_transcriptions_total{outcome=\"unreachable\"} 1";
    assert!(metrics.contains(sample), "{sample} missing:\n{metrics}");
    bot.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn misskey_audio_in_a_chat_and_on_a_note_is_transcribed() {
    let speech = FakeSpeech::start(Answer::Text(SAID.into())).await;
    let dir = tempfile::tempdir().unwrap();
    let reply = dir.path().join("reply.md");
    std::fs::write(&reply, REPLY).unwrap();
    let setup = MisskeySetup {
        extra_yaml: format!(
            "attachments:\n  transcription:\n    baseUrl: {}\n    apiKeyEnv: \"\"\n",
            speech.base_url
        ),
        ..MisskeySetup::default()
    };
    let serve = MisskeyServe::start(one_turn(reply_steps(&reply)), setup).await;
    let mp3 = audio::mp3_cbr(5.0);
    // A chat message with only the audio: its transcript is the message's text.
    let chat_file = serve
        .fake
        .upload_file("u1", "memo.mp3", "audio/mpeg", mp3.clone());
    serve
        .fake
        .chat_file_to_bot("u1", "", chat_file["id"].as_str().unwrap());
    serve
        .wait_for_calls("chat/messages/create-to-user", 1)
        .await;
    // A note with words and the audio: the transcript is shown with the file.
    let note_file = serve
        .fake
        .upload_file("u1", "memo2.mp3", "audio/mpeg", mp3.clone());
    let opts = common::fake_misskey::NoteOpts {
        file_ids: vec![note_file["id"].as_str().unwrap().to_owned()],
        ..Default::default()
    };
    serve
        .fake
        .mention("u1", "@airfriends what do you think?", opts);
    serve.wait_for_calls("notes/create", 1).await;

    let texts = prompt_texts(&serve.agent_log_lines());
    assert!(
        texts[0].contains(&format!("[voice message, 0:05; its transcript:]\n{SAID}")),
        "{}",
        texts[0]
    );
    let note = texts.last().unwrap();
    assert!(note.contains("what do you think?"), "{note}");
    assert!(
        note.contains("audio (0:05, MP3): transcript shown below; saved as `")
            && note.contains(&format!(
                "### Transcript of \"memo2.mp3\"\n```\n{SAID}\n```"
            )),
        "{note}"
    );
    let uploads = speech.uploads();
    assert_eq!(uploads.len(), 2);
    assert_eq!(uploads[0].form["file"].bytes, mp3);
    assert_eq!(
        uploads[0].form["file"].file_name.as_deref(),
        Some("voice.mp3")
    );
    assert_eq!(
        uploads[0].authorization(),
        None,
        "no key configured, none sent"
    );
}

/// An environment holding only the transcription key.
struct KeyEnv;

impl EnvSource for KeyEnv {
    fn var(&self, name: &str) -> Option<String> {
        (name == "VOICE_KEY").then(|| KEY.to_owned())
    }
}

/// A fetcher for files of `instance` with transcription through `base_url`.
fn fetcher(
    instance: &str,
    base_url: &str,
    minutes: Option<u32>,
    store: Option<Store>,
) -> Attachments {
    let mut config = Config::default();
    config.attachments.transcription = Some(TranscriptionConfig {
        base_url: base_url.to_owned(),
        api_key_env: "VOICE_KEY".into(),
        minutes_per_user_per_day: minutes,
        ..TranscriptionConfig::default()
    });
    let transcriber =
        Transcriber::from_config(&config, &KeyEnv, store, VoiceMetrics::unregistered()).unwrap();
    Attachments::new(
        AttachmentSettings {
            timeout: Duration::from_secs(5),
            ..AttachmentSettings::from(&AttachmentsConfig::default())
        },
        [(
            PlatformKind::Misskey,
            Origins::misskey(instance, false, &[]),
        )]
        .into(),
        Arc::new(SystemLookup),
        AttachmentMetrics::unregistered(),
    )
    .unwrap()
    .with_transcriber(transcriber)
}

fn file(instance: &str, name: &str, mime: &str, size: usize) -> Attachment {
    Attachment {
        id: name.into(),
        url: format!("http://{instance}/files/{name}"),
        mime: Some(mime.into()),
        filename: name.into(),
        size: size as u64,
    }
}

#[tokio::test]
async fn the_transcript_is_saved_beside_the_audio_and_an_unreadable_file_is_not_sent() {
    let speech = FakeSpeech::start(Answer::Text(SAID.into())).await;
    let wav = audio::wav(1.5, 16_000);
    // An MP3 claiming 4 billion frames: more than 100 hours, so damaged.
    let broken = audio::mp3_xing(u32::MAX);
    let instance = common::file_server::serve_files(vec![
        ("hello.wav", "audio/wav", wav.clone()),
        ("broken.mp3", "audio/mpeg", broken.clone()),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let staging = dir.path().join("tmp/s1");
    std::fs::create_dir_all(&staging).unwrap();
    let who = WorkspaceKey::new("misskey", "u1").unwrap();
    let received = fetcher(&instance, &speech.base_url, None, None)
        .receive(
            PlatformKind::Misskey,
            &who,
            &[
                file(&instance, "hello.wav", "audio/wav", wav.len()),
                file(&instance, "broken.mp3", "audio/mpeg", broken.len()),
            ],
            &staging,
            dir.path(),
        )
        .await;
    let saved = received.files[0].result.as_ref().unwrap();
    assert_eq!(saved.mime, "audio/wav");
    let Content::Audio(audio) = &saved.content else {
        panic!("{:?}", saved.content)
    };
    assert_eq!(audio.duration, Ok(Duration::from_millis(1500)));
    let Hearing::Heard { text, path } = &audio.hearing else {
        panic!("{:?}", audio.hearing)
    };
    assert_eq!(text, SAID);
    assert_eq!(path, "tmp/s1/in/hello.wav.txt");
    assert_eq!(
        std::fs::read_to_string(dir.path().join(path)).unwrap(),
        SAID
    );
    assert_eq!(received.spoken().map(|(t, _)| t), Some(SAID));

    let broken_saved = received.files[1].result.as_ref().unwrap();
    let Content::Audio(audio) = &broken_saved.content else {
        panic!("{:?}", broken_saved.content)
    };
    let Hearing::NotHeard(why) = &audio.hearing else {
        panic!("{:?}", audio.hearing)
    };
    assert_eq!(
        why.to_string(),
        "not transcribed: the audio file is cut short or damaged"
    );
    assert_eq!(speech.uploads().len(), 1, "the broken file is not sent");
}

#[tokio::test]
async fn the_daily_minutes_are_counted_per_user_and_the_limit_holds() {
    let speech = FakeSpeech::start(Answer::Text(SAID.into())).await;
    let clip = audio::ogg_opus(40.0);
    let instance =
        common::file_server::serve_files(vec![("memo.ogg", "audio/ogg", clip.clone())]).await;
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("db.sqlite")).await.unwrap();
    let fetcher = fetcher(&instance, &speech.base_url, Some(1), Some(store.clone()));
    let staging = dir.path().join("tmp/s1");
    std::fs::create_dir_all(&staging).unwrap();
    let (alice, bob) = (
        WorkspaceKey::new("misskey", "alice").unwrap(),
        WorkspaceKey::new("misskey", "bob").unwrap(),
    );
    let one = [file(&instance, "memo.ogg", "audio/ogg", clip.len())];
    let hearing = |r: air_friends::attachments::Received| match r.files[0].result.clone() {
        Ok(saved) => match saved.content {
            Content::Audio(a) => a.hearing,
            other => panic!("{other:?}"),
        },
        Err(skip) => panic!("{skip:?}"),
    };
    let first = fetcher
        .receive(PlatformKind::Misskey, &alice, &one, &staging, dir.path())
        .await;
    assert!(matches!(hearing(first), Hearing::Heard { .. }));
    // 40 s more would pass alice's minute; bob has his own.
    let second = fetcher
        .receive(PlatformKind::Misskey, &alice, &one, &staging, dir.path())
        .await;
    let Hearing::NotHeard(why) = hearing(second) else {
        panic!("the second 40 s were transcribed")
    };
    assert_eq!(why, NotHeard::DailyLimit { minutes: 1 });
    assert_eq!(
        why.to_string(),
        "not transcribed: the sender has used up today's transcription allowance (1 min)"
    );
    let third = fetcher
        .receive(PlatformKind::Misskey, &bob, &one, &staging, dir.path())
        .await;
    assert!(matches!(hearing(third), Hearing::Heard { .. }));
    assert_eq!(speech.uploads().len(), 2);
    let today = chrono::Utc::now().date_naive();
    let used = store.voice_usage_on(today, Some(&alice)).await.unwrap();
    assert_eq!((used.audio_in_ms, used.transcriptions), (40_000, 1));
    let all = store.voice_usage_on(today, None).await.unwrap();
    assert_eq!((all.audio_in_ms, all.transcriptions), (80_000, 2));
    store.close().await.unwrap();
}

/// Steps that answer with send-voice: copy `text_file` into the session's folder, then run the
/// real send-voice script with it.
fn voice_steps(text_file: &std::path::Path) -> Vec<Value> {
    vec![
        json!({"run": format!("cp '{}' \"$TMPDIR/$SESSION_ID/voice.txt\"", text_file.display())}),
        common::serve::skill_step("send-voice", "--text-file $TMPDIR/$SESSION_ID/voice.txt"),
    ]
}

const SPOKEN: &str = "Of course. Noon at the station, see you there!";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_voice_posts_a_discord_voice_message_with_its_duration_and_waveform() {
    use base64::Engine;
    let speech = FakeSpeech::start(Answer::Text(String::new())).await;
    let yaml = format!(
        "speech:\n  baseUrl: {}\n  apiKeyEnv: SPEECH_TEST_KEY\n  voice: nova\n",
        speech.base_url
    );
    let bot = DiscordServe::start(move |files| DiscordSetup {
        script: one_turn(voice_steps(&text_path(files, "voice.txt"))),
        texts: vec![("voice.txt", SPOKEN.to_owned())],
        extra_yaml: yaml,
        env: vec![("SPEECH_TEST_KEY", KEY.to_owned())],
        ..DiscordSetup::default()
    })
    .await;
    bot.dm("can you say it out loud?");
    let sent = bot.wait_bot_messages(DM_CHANNEL_ID, 1).await;
    assert_eq!(sent[0].content, "", "a voice message carries no text");
    let posts = bot.message_posts(DM_CHANNEL_ID);
    let post = posts.last().expect("the voice message's request");
    let payload = post.json.as_ref().expect("payload_json");
    assert_eq!(payload["flags"], 8192, "IS_VOICE_MESSAGE: {payload}");
    assert!(payload.get("content").is_none(), "{payload}");
    let entry = &payload["attachments"][0];
    assert_eq!(entry["filename"], "voice-message.ogg");
    assert_eq!(entry["description"], SPOKEN, "the text as alt text");
    let ogg = &post.files[0];
    assert_eq!(AudioType::sniff(ogg), Some(AudioType::OggOpus));
    let length = air_friends::audio::duration(ogg, AudioType::OggOpus).unwrap();
    assert_eq!(entry["duration_secs"], json!(length.as_secs_f64()));
    let waveform = base64::engine::general_purpose::STANDARD
        .decode(entry["waveform"].as_str().expect("a waveform"))
        .unwrap();
    assert_eq!(
        waveform,
        air_friends::audio::opus_waveform(ogg).unwrap().1,
        "the waveform of the file sent"
    );
    assert!(!waveform.is_empty() && waveform.len() <= 256);
    // The speech service got the text with the daemon's key and the configured voice.
    let (headers, body) = speech.speech_requests().remove(0);
    assert_eq!(body["input"], SPOKEN);
    assert_eq!(body["voice"], "nova");
    assert_eq!(
        headers.get("authorization").and_then(|v| v.to_str().ok()),
        Some("Bearer sk-voice-9f3a")
    );
    let metrics = bot.metrics().await;
    for sample in [
        "air_friends_voice_speeches_total{outcome=\"ok\"} 1".to_owned(),
        format!(
            "air_friends_voice_spoken_audio_seconds_total {}",
            length.as_secs_f64()
        ),
    ] {
        assert!(metrics.contains(&sample), "{sample} missing:\n{metrics}");
    }
    bot.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_voice_on_misskey_is_an_audio_file_with_the_text_on_the_message_or_note() {
    let speech = FakeSpeech::start(Answer::Text(String::new())).await;
    let dir = tempfile::tempdir().unwrap();
    let text = dir.path().join("voice.txt");
    std::fs::write(&text, SPOKEN).unwrap();
    let setup = MisskeySetup {
        extra_yaml: format!(
            "speech:\n  baseUrl: {}\n  apiKeyEnv: \"\"\n",
            speech.base_url
        ),
        ..MisskeySetup::default()
    };
    let serve = MisskeyServe::start(one_turn(voice_steps(&text)), setup).await;
    serve.fake.chat_to_bot("u1", "say it please", true, false);
    let created = serve
        .wait_for_calls("chat/messages/create-to-user", 1)
        .await;
    let message = &created[0];
    assert_eq!(
        message["text"], SPOKEN,
        "the text on the message: {message}"
    );
    let file_id = message["fileId"].as_str().expect("the audio file");
    let drive = serve
        .fake
        .drive_files()
        .into_iter()
        .find(|f| f["id"] == file_id)
        .expect("the uploaded drive file");
    assert_eq!(drive["type"], "audio/ogg");
    assert_eq!(drive["comment"], SPOKEN, "the text as the file's alt text");
    let bytes = serve.fake.file_content(file_id).expect("its bytes");
    assert_eq!(AudioType::sniff(&bytes), Some(AudioType::OggOpus));
    // On a note: the reply note carries the audio and the text, threaded to the mention.
    let mention = serve.fake.mention(
        "u1",
        "@airfriends say it here too",
        common::fake_misskey::NoteOpts::default(),
    );
    let notes = serve.wait_for_calls("notes/create", 1).await;
    let note = &notes[0];
    assert_eq!(note["text"], SPOKEN, "{note}");
    assert_eq!(note["replyId"], mention["id"], "{note}");
    let file_ids = note["fileIds"].as_array().expect("the audio file");
    assert_eq!(file_ids.len(), 1, "{note}");
    let bytes = serve
        .fake
        .file_content(file_ids[0].as_str().unwrap())
        .expect("its bytes");
    assert_eq!(AudioType::sniff(&bytes), Some(AudioType::OggOpus));
}
