//! What the attachment step adds to a turn: one phone photo (12 megapixels, about 5 MB of
//! JPEG) fetched by the daemon's fetcher (`attachments::Attachments::receive`) from a loopback
//! HTTP server, sniffed, decoded, turned upright, downscaled to the default
//! `attachments.maxImagePixels`, re-encoded, base64-encoded and saved read-only into a staging
//! folder — against a baseline measured in the same run: a plain GET of the same bytes over the
//! same loopback (what any download costs). A small photo under the pixel cap (decoded to be
//! checked, then sent as its own bytes) is measured too. Runs are interleaved.
//!
//! Per case: wall time p50/p99 and the process's CPU time per call (the fetcher and the
//! loopback server both run in this process, so both are in it), and the ratio to the baseline.
//!
//! Run: `cargo bench --bench attachments` (`ATTACH_BENCH_ITERS`, default 40). Results are in
//! `docs/PERFORMANCE.md` ("Attachments"), earlier runs in `docs/performance/attachments.md`.

#[path = "support/cases.rs"]
mod cases;

use std::sync::Arc;
use std::time::Instant;

use air_friends::attachments::{
    AttachmentMetrics, AttachmentSettings, Attachments, Origins, SystemLookup,
};
use air_friends::config::AttachmentsConfig;
use air_friends::platform::{Attachment, PlatformKind};
use axum::extract::Path as UrlPath;
use axum::response::IntoResponse;
use cases::{Case, cpu};
use image::codecs::jpeg::JpegEncoder;
use image::{Rgb, RgbImage};

/// A photo-like picture: smooth gradients with sensor-like noise (so it compresses like a
/// photo, not like a flat test card).
fn photo(w: u32, h: u32, quality: u8) -> Vec<u8> {
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let img = RgbImage::from_fn(w, h, |x, y| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let n = (seed % 48) as u32;
        Rgb([
            ((x * 255 / w + n) % 256) as u8,
            ((y * 255 / h + n) % 256) as u8,
            (((x + y) * 128 / (w + h) + n) % 256) as u8,
        ])
    });
    let mut out = Vec::new();
    JpegEncoder::new_with_quality(&mut out, quality)
        .encode_image(&img)
        .unwrap();
    out
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let iters: usize = std::env::var("ATTACH_BENCH_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(40);
    let big = photo(4032, 3024, 70);
    let small = photo(800, 600, 85);
    println!(
        "photo: 4032×3024, {:.2} MB; small photo: 800×600, {:.0} KB",
        big.len() as f64 / 1_048_576.0,
        small.len() as f64 / 1024.0
    );
    let files: Arc<Vec<(&'static str, Vec<u8>)>> = Arc::new(vec![
        ("photo.jpg", big.clone()),
        ("small.jpg", small.clone()),
    ]);
    let app = axum::Router::new().route(
        "/files/{name}",
        axum::routing::get(move |UrlPath(name): UrlPath<String>| {
            let files = files.clone();
            async move {
                let (_, bytes) = files.iter().find(|(n, _)| *n == name).unwrap();
                ([("content-type", "image/jpeg")], bytes.clone()).into_response()
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    let fetcher = Attachments::new(
        AttachmentSettings::from(&AttachmentsConfig::default()),
        [(PlatformKind::Misskey, Origins::misskey(&addr, false, &[]))].into(),
        Arc::new(SystemLookup),
        AttachmentMetrics::unregistered(),
    )
    .unwrap();
    let plain = reqwest::Client::builder().no_proxy().build().unwrap();
    let attachment = |name: &str, size: usize| Attachment {
        id: name.into(),
        url: format!("http://{addr}/files/{name}"),
        mime: Some("image/jpeg".into()),
        filename: name.into(),
        size: size as u64,
    };
    let (photo_file, small_file) = (
        attachment("photo.jpg", big.len()),
        attachment("small.jpg", small.len()),
    );

    let mut baseline = Case::new("baseline: plain GET of the 5 MB photo");
    let mut step = Case::new("attachment step, 5 MB photo (downscaled)");
    let mut decode = Case::new("decode only, 5 MB photo (the floor of checking the bytes)");
    let mut step_small = Case::new("attachment step, 800×600 photo (sent as is)");
    let mut sent = (0, 0);
    let who = air_friends::store::WorkspaceKey::new("misskey", "u1").unwrap();
    for i in 0..iters + 2 {
        let warmup = i < 2;
        // Baseline.
        let (c0, t0) = (cpu(), Instant::now());
        let body = plain
            .get(format!("http://{addr}/files/photo.jpg"))
            .send()
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap();
        assert_eq!(body.len(), big.len());
        if !warmup {
            baseline.wall.push(t0.elapsed());
            baseline.cpu += cpu() - c0;
        }
        let (c0, t0) = (cpu(), Instant::now());
        let bytes = big.clone();
        let img = tokio::task::spawn_blocking(move || image::load_from_memory(&bytes).unwrap())
            .await
            .unwrap();
        assert_eq!(img.width(), 4032);
        if !warmup {
            decode.wall.push(t0.elapsed());
            decode.cpu += cpu() - c0;
        }
        for (case, file) in [(&mut step, &photo_file), (&mut step_small, &small_file)] {
            let dir = tempfile::tempdir().unwrap();
            let staging = dir.path().join("tmp/s");
            std::fs::create_dir_all(&staging).unwrap();
            let (c0, t0) = (cpu(), Instant::now());
            let received = fetcher
                .receive(
                    PlatformKind::Misskey,
                    &who,
                    std::slice::from_ref(file),
                    &staging,
                    dir.path(),
                )
                .await;
            let elapsed = t0.elapsed();
            let spent = cpu() - c0;
            let picture = received.pictures().next().expect("a picture");
            if picture.downscaled() {
                sent = picture.sent;
            }
            if !warmup {
                case.wall.push(elapsed);
                case.cpu += spent;
            }
        }
    }
    println!("(the downscaled photo is sent at {}×{})", sent.0, sent.1);
    let base_p50 = baseline.p(0.5);
    let base_cpu = baseline.cpu_per_call();
    cases::print_table(
        &mut [&mut baseline, &mut decode, &mut step, &mut step_small],
        "baseline",
        base_p50,
        base_cpu,
        1,
    );
    println!("iterations: {iters} per case, interleaved");
}
