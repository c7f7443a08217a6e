//! What hearing a voice message adds to a turn: a 60 s Discord-style voice message (Ogg Opus)
//! fetched by the daemon's fetcher (`attachments::Attachments::receive`) from a loopback HTTP
//! server, told from its bytes, its length read from the container, saved, sent to a fake
//! OpenAI-compatible transcription service on loopback (which answers at once), and the
//! transcript saved beside it — against what it cannot avoid, measured in the same run:
//!
//! * *download*: a plain GET of the same bytes over the same loopback;
//! * *upload*: a plain multipart POST of the bytes to the same fake service (the request any
//!   transcription makes);
//! * *step without transcription*: the fetcher with `attachments.transcription` unset (the
//!   audio is sniffed, its length read, and saved).
//!
//! The service answers at once, so what the step adds over download + upload is the daemon's
//! own cost; with a real service its latency (seconds for a minute of audio) comes on top.
//! Per case: wall time p50/p99, and CPU per call of the whole process (fetcher, servers and
//! clients all run in it) from `getrusage`. Cases are interleaved.
//!
//! Run: `cargo bench --bench voice` (`VOICE_BENCH_ITERS`, default 200). Results are in
//! `docs/PERFORMANCE.md` ("Voice").

#[path = "../tests/common/audio.rs"]
#[allow(dead_code)]
mod audio;
#[path = "support/cases.rs"]
mod cases;

use std::sync::Arc;
use std::time::{Duration, Instant};

use air_friends::attachments::{
    AttachmentMetrics, AttachmentSettings, Attachments, Content, Hearing, Origins, SystemLookup,
};
use air_friends::config::{AttachmentsConfig, Config, TranscriptionConfig};
use air_friends::platform::{Attachment, PlatformKind};
use air_friends::store::WorkspaceKey;
use air_friends::voice::{Transcriber, VoiceMetrics};
use axum::body::Bytes;
use axum::response::IntoResponse;
use cases::{Case, cpu};

/// A loopback server: `GET /files/voice.ogg` serves `ogg`, `POST /v1/audio/transcriptions`
/// answers a transcript at once. Returns its `127.0.0.1:PORT`.
async fn servers(ogg: Vec<u8>) -> String {
    let ogg = Bytes::from(ogg);
    let app = axum::Router::new()
        .route(
            "/files/voice.ogg",
            axum::routing::get(move || {
                let ogg = ogg.clone();
                async move { ([("content-type", "audio/ogg")], ogg).into_response() }
            }),
        )
        .route(
            "/v1/audio/transcriptions",
            axum::routing::post(|body: Bytes| async move {
                assert!(body.len() > 100_000);
                axum::Json(serde_json::json!({
                    "text": "so I was thinking we could meet at the station at noon, \
                             then walk to the park and have lunch by the pond"
                }))
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    addr
}

fn fetcher(addr: &str, transcription: bool) -> Attachments {
    let mut config = Config::default();
    config.attachments.transcription = transcription.then(|| TranscriptionConfig {
        base_url: format!("http://{addr}/v1"),
        ..TranscriptionConfig::default()
    });
    let transcriber = Transcriber::from_config(
        &config,
        &air_friends::config::ProcessEnv,
        None,
        VoiceMetrics::unregistered(),
    )
    .unwrap();
    Attachments::new(
        AttachmentSettings::from(&AttachmentsConfig::default()),
        [(PlatformKind::Misskey, Origins::misskey(addr, false, &[]))].into(),
        Arc::new(SystemLookup),
        AttachmentMetrics::unregistered(),
    )
    .unwrap()
    .with_transcriber(transcriber)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let iters: usize = std::env::var("VOICE_BENCH_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let ogg = audio::ogg_opus(60.0);
    println!(
        "voice message: 60 s of Ogg Opus, {:.0} KB",
        ogg.len() as f64 / 1024.0
    );
    let addr = servers(ogg.clone()).await;
    let (heard, unheard) = (fetcher(&addr, true), fetcher(&addr, false));
    let plain = reqwest::Client::builder().no_proxy().build().unwrap();
    let file = Attachment {
        id: "1".into(),
        url: format!("http://{addr}/files/voice.ogg"),
        mime: Some("audio/ogg".into()),
        filename: "voice-message.ogg".into(),
        size: ogg.len() as u64,
    };
    let who = WorkspaceKey::new("misskey", "u1").unwrap();
    let mut download = Case::new("download: plain GET of the file");
    let mut upload = Case::new("upload: plain multipart POST to the service");
    let mut step_off = Case::new("attachment step, transcription off");
    let mut step = Case::new("attachment step with transcription");
    for i in 0..iters + 5 {
        let warmup = i < 5;
        let (c0, t0) = (cpu(), Instant::now());
        let body = plain.get(&file.url).send().await.unwrap().bytes().await;
        assert_eq!(body.unwrap().len(), ogg.len());
        if !warmup {
            download.add(t0.elapsed(), cpu() - c0);
        }
        let (c0, t0) = (cpu(), Instant::now());
        let form = reqwest::multipart::Form::new()
            .part(
                "file",
                reqwest::multipart::Part::bytes(ogg.clone())
                    .file_name("voice.ogg")
                    .mime_str("audio/ogg")
                    .unwrap(),
            )
            .text("model", "whisper-1")
            .text("response_format", "json");
        let answer = plain
            .post(format!("http://{addr}/v1/audio/transcriptions"))
            .multipart(form)
            .send()
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap();
        assert!(!answer.is_empty());
        if !warmup {
            upload.add(t0.elapsed(), cpu() - c0);
        }
        for (case, fetcher, expect_heard) in
            [(&mut step_off, &unheard, false), (&mut step, &heard, true)]
        {
            let dir = tempfile::tempdir().unwrap();
            let staging = dir.path().join("tmp/s");
            std::fs::create_dir_all(&staging).unwrap();
            let (c0, t0) = (cpu(), Instant::now());
            let received = fetcher
                .receive(
                    PlatformKind::Misskey,
                    &who,
                    std::slice::from_ref(&file),
                    &staging,
                    dir.path(),
                )
                .await;
            let (wall, spent) = (t0.elapsed(), cpu() - c0);
            let Ok(saved) = &received.files[0].result else {
                panic!("{:?}", received.files[0].result)
            };
            let Content::Audio(a) = &saved.content else {
                panic!("{:?}", saved.content)
            };
            assert_eq!(a.duration, Ok(Duration::from_secs(60)));
            assert_eq!(matches!(a.hearing, Hearing::Heard { .. }), expect_heard);
            if !warmup {
                case.add(wall, spent);
            }
        }
    }
    let base_cpu = download.cpu_per_call() + upload.cpu_per_call();
    let base_p50 = download.p(0.5) + upload.p(0.5);
    cases::print_table(
        &mut [&mut download, &mut upload, &mut step_off, &mut step],
        "(download + upload)",
        base_p50,
        base_cpu,
        2,
    );
    println!("iterations: {iters} per case, interleaved");
}
