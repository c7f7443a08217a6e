//! Audio attachments read from their bytes (`air_friends::audio`), on files built byte by byte
//! (`common::audio`): each format is told from its bytes and its duration read from its
//! container (to the millisecond; an MP3 without a VBR header to the frame), Opus pre-skip is
//! subtracted, a browser recording without a duration is timed by its last block, and an Ogg
//! Opus voice message gets Discord's waveform from its packet sizes.
//!
//! Hostile files: every cut of every fixture and thousands of flipped bytes never panic nor
//! hang (each run has a watchdog), and numbers no voice message has (over 100 hours, a box
//! reaching past the end, endlessly nested elements) are refused.

mod common;

use std::sync::mpsc;
use std::time::Duration;

use air_friends::audio::{AudioError, AudioType, duration, opus_waveform};
use common::audio::*;

const ALL: [AudioType; 6] = [
    AudioType::OggOpus,
    AudioType::OggVorbis,
    AudioType::Mp3,
    AudioType::M4a,
    AudioType::Wav,
    AudioType::Webm,
];

const HUNDRED_HOURS: Duration = Duration::from_secs(100 * 3600);

const PNG: &[u8] = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x01\0\0\0\x01\x08\x02\0\0\0";
const TEXT: &[u8] = b"Hello! This is a text file, not a voice message.\n";

/// Asserts that `got` is `want_secs` seconds give or take `tolerance_secs`.
#[track_caller]
fn assert_near(got: Duration, want_secs: f64, tolerance_secs: f64) {
    let diff = (got.as_secs_f64() - want_secs).abs();
    assert!(
        diff <= tolerance_secs,
        "{got:?} is not {want_secs} s (± {tolerance_secs} s)"
    );
}

/// The duration of `bytes` as sniffed, asserting the sniffed type is `t`.
#[track_caller]
fn sniffed_duration(bytes: &[u8], t: AudioType) -> Result<Duration, AudioError> {
    assert_eq!(AudioType::sniff(bytes), Some(t));
    duration(bytes, t)
}

/// Runs `f` on another thread and fails if it panics or takes longer than `limit`.
fn within(limit: Duration, f: impl FnOnce() + Send + 'static) {
    let (done, finished) = mpsc::channel();
    let worker = std::thread::spawn(move || {
        f();
        done.send(()).ok();
    });
    match finished.recv_timeout(limit) {
        Ok(()) => worker.join().expect("the worker finished"),
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            if let Err(panic) = worker.join() {
                std::panic::resume_unwind(panic);
            }
        }
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("still running after {limit:?}"),
    }
}

/// Every function on `bytes`: nothing may panic, a duration is never over 100 hours and a
/// waveform never over 256 bytes.
fn exercise(bytes: &[u8]) {
    let _ = AudioType::sniff(bytes);
    for t in ALL {
        if let Ok(d) = duration(bytes, t) {
            assert!(d <= HUNDRED_HOURS, "{t:?}: {d:?}");
        }
    }
    if let Ok((d, wave)) = opus_waveform(bytes) {
        assert!(d <= HUNDRED_HOURS);
        assert!(wave.len() <= 256);
    }
}

/// A small seeded xorshift64 generator.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Index of the first occurrence of `needle` in `hay`.
fn find(hay: &[u8], needle: &[u8]) -> usize {
    hay.windows(needle.len())
        .position(|w| w == needle)
        .expect("the needle is there")
}

#[test]
fn each_type_has_its_mime_type_extension_and_name() {
    let table: Vec<_> = ALL
        .iter()
        .map(|t| (t.mime(), t.extension(), t.name()))
        .collect();
    assert_eq!(
        table,
        [
            ("audio/ogg", "ogg", "Ogg Opus"),
            ("audio/ogg", "ogg", "Ogg Vorbis"),
            ("audio/mpeg", "mp3", "MP3"),
            ("audio/mp4", "m4a", "M4A"),
            ("audio/wav", "wav", "WAV"),
            ("audio/webm", "webm", "WebM"),
        ]
    );
}

#[test]
fn each_format_is_told_from_its_bytes() {
    let cases = [
        (ogg_opus(1.0), AudioType::OggOpus),
        (ogg_vorbis(44_100, 44_100), AudioType::OggVorbis),
        (mp3_cbr(1.0), AudioType::Mp3),
        (mp3_xing(100), AudioType::Mp3),
        (mp3_vbri(100), AudioType::Mp3),
        (m4a(1000, 1000), AudioType::M4a),
        (m4a_v1(1000, 1000), AudioType::M4a),
        (wav(0.5, 8000), AudioType::Wav),
        (webm(Some(1000.0), 1000), AudioType::Webm),
        (webm_recorded(1000), AudioType::Webm),
        (
            [ebml_header("matroska"), ebml(webm_ids::SEGMENT, &[])].concat(),
            AudioType::Webm,
        ),
    ];
    for (i, (bytes, t)) in cases.iter().enumerate() {
        assert_eq!(AudioType::sniff(bytes), Some(*t), "case {i}");
    }
    // An ID3 tag and a single frame is an MP3 too, as is a single frame with an ID3v1 tag.
    assert_eq!(
        AudioType::sniff(&[id3v2(10), mp3_frame(false)].concat()),
        Some(AudioType::Mp3)
    );
    assert_eq!(
        AudioType::sniff(&[mp3_frame(false), id3v1()].concat()),
        Some(AudioType::Mp3)
    );
}

#[test]
fn other_bytes_are_not_audio() {
    let theora = OggMuxer::new(7, 255)
        .packets(&[([b"\x80theora".as_slice(), &[3; 34]].concat(), 0)])
        .finish();
    let flac = OggMuxer::new(7, 255)
        .packets(&[([b"\x7FFLAC\x01\x00".as_slice(), &[0; 40]].concat(), 0)])
        .finish();
    // An MPEG frame header whose next frame is not one (a chance 0xFFFB in other bytes).
    let mut broken_mp3 = mp3_frames(4);
    broken_mp3[418] = 0x00;
    let other_doc = [ebml_header("notwebm"), ebml(webm_ids::SEGMENT, &[])].concat();
    let webp = b"RIFF\x10\0\0\0WEBPVP8 \0\0\0\0".to_vec();
    // HEIF and AVIF pictures and QuickTime movies are ISO files too, but not audio.
    let iso = |brand: &[u8; 4]| [&[0, 0, 0, 16][..], b"ftyp", brand, &[0, 0, 0, 0]].concat();
    for (name, bytes) in [
        ("heic", iso(b"heic")),
        ("avif", iso(b"avif")),
        ("mif1", iso(b"mif1")),
        ("quicktime", iso(b"qt  ")),
        ("text", TEXT.to_vec()),
        ("png", PNG.to_vec()),
        ("theora", theora),
        ("flac", flac),
        ("broken mp3", broken_mp3),
        ("other EBML", other_doc),
        ("webp", webp),
        ("empty", Vec::new()),
    ] {
        assert_eq!(AudioType::sniff(&bytes), None, "{name}");
    }
    for t in ALL {
        assert_eq!(duration(TEXT, t), Err(AudioError::Unsupported), "{t:?}");
        assert_eq!(duration(PNG, t), Err(AudioError::Unsupported), "{t:?}");
    }
    for bytes in [
        TEXT.to_vec(),
        ogg_vorbis(44_100, 44_100),
        mp3_cbr(0.2),
        wav(0.1, 8000),
    ] {
        assert_eq!(opus_waveform(&bytes), Err(AudioError::Unsupported));
    }
    // An Ogg file of the other codec.
    let vorbis = ogg_vorbis(44_100, 44_100);
    assert_eq!(
        duration(&vorbis, AudioType::OggOpus),
        Err(AudioError::Unsupported)
    );
}

#[test]
fn ogg_opus_lasts_its_last_granule_less_the_pre_skip() {
    assert_near(
        sniffed_duration(&ogg_opus(3.0), AudioType::OggOpus).unwrap(),
        3.0,
        0.001,
    );
    assert_near(
        duration(&ogg_opus(0.5), AudioType::OggOpus).unwrap(),
        0.5,
        0.001,
    );
    // The pre-skip (here 80 ms) is subtracted: 100 packets are 1.92 s, not 2 s.
    let layout = OpusLayout {
        pre_skip: 3840,
        ..OpusLayout::default()
    };
    let file = ogg_opus_with(&opus_packets(100), &layout);
    assert_near(duration(&file, AudioType::OggOpus).unwrap(), 1.92, 0.001);
    // And so is the end trimming of the last page.
    let trimmed = OpusLayout {
        end_trim: 480,
        ..layout
    };
    let file = ogg_opus_with(&opus_packets(100), &trimmed);
    assert_near(duration(&file, AudioType::OggOpus).unwrap(), 1.91, 0.001);
    // Nothing but headers: no audio, no time (the pre-skip is not a negative duration).
    let headers = ogg_opus_with(&[], &OpusLayout::default());
    assert_eq!(duration(&headers, AudioType::OggOpus), Ok(Duration::ZERO));
}

#[test]
fn ogg_vorbis_lasts_its_last_granule_over_its_sample_rate() {
    let file = ogg_vorbis(44_100, 44_100 * 5 + 22_050);
    assert_near(
        sniffed_duration(&file, AudioType::OggVorbis).unwrap(),
        5.5,
        0.001,
    );
    assert_near(
        duration(&ogg_vorbis(16_000, 16_000 * 42), AudioType::OggVorbis).unwrap(),
        42.0,
        0.001,
    );
    assert_eq!(
        duration(&ogg_vorbis(0, 1000), AudioType::OggVorbis),
        Err(AudioError::Damaged)
    );
}

#[test]
fn an_ogg_page_claiming_over_a_hundred_hours_is_damaged() {
    let hundred_and_one_hours = 48_000 * 3600 * 101;
    let file = OggMuxer::new(OGG_SERIAL, 50)
        .packets(&[(opus_head(312), 0)])
        .packets(&[(opus_tags("x", &[]), 0)])
        .packets(&[(opus_packet(20, 0), hundred_and_one_hours)])
        .finish();
    assert_eq!(
        duration(&file, AudioType::OggOpus),
        Err(AudioError::Damaged)
    );
    assert_eq!(opus_waveform(&file), Err(AudioError::Damaged));
    // The largest granule an Ogg page can hold that is not "none".
    let file = OggMuxer::new(OGG_SERIAL, 50)
        .packets(&[(opus_head(312), 0)])
        .packets(&[(opus_packet(20, 0), u64::MAX - 1)])
        .finish();
    assert_eq!(
        duration(&file, AudioType::OggOpus),
        Err(AudioError::Damaged)
    );
}

#[test]
fn mp3_durations_come_from_vbr_headers_or_the_bitrate() {
    let frame = f64::from(MP3_FRAME_SAMPLES) / 44_100.0;
    let cbr = mp3_cbr(5.0);
    assert_near(sniffed_duration(&cbr, AudioType::Mp3).unwrap(), 5.0, frame);
    // A trailing ID3v1 tag is not audio.
    let tagged = [cbr.clone(), id3v1()].concat();
    assert_near(duration(&tagged, AudioType::Mp3).unwrap(), 5.0, frame);
    // Xing and VBRI count frames: exact whatever the file's size.
    let xing = mp3_xing(1000);
    assert_near(
        sniffed_duration(&xing, AudioType::Mp3).unwrap(),
        1000.0 * frame,
        0.001,
    );
    let vbri = mp3_vbri(500);
    assert_near(
        sniffed_duration(&vbri, AudioType::Mp3).unwrap(),
        500.0 * frame,
        0.001,
    );
    // A frame count that would be years long.
    assert_eq!(
        duration(&mp3_xing(u32::MAX), AudioType::Mp3),
        Err(AudioError::Damaged)
    );
}

#[test]
fn m4a_durations_come_from_mvhd_in_both_versions() {
    let v0 = m4a(1000, 4500);
    assert_near(sniffed_duration(&v0, AudioType::M4a).unwrap(), 4.5, 0.001);
    let v1 = m4a_v1(44_100, 44_100 * 7 + 441);
    assert_near(sniffed_duration(&v1, AudioType::M4a).unwrap(), 7.01, 0.001);
    // Unknown (all ones), no timescale, unbelievable.
    assert_eq!(
        duration(&m4a(1000, u32::MAX), AudioType::M4a),
        Err(AudioError::NoDuration)
    );
    assert_eq!(
        duration(&m4a_v1(1000, u64::MAX), AudioType::M4a),
        Err(AudioError::NoDuration)
    );
    assert_eq!(
        duration(&m4a(0, 4500), AudioType::M4a),
        Err(AudioError::Damaged)
    );
    assert_eq!(
        duration(&m4a_v1(1, 101 * 3600), AudioType::M4a),
        Err(AudioError::Damaged)
    );
    // No moov at all (a last box of size 0 runs to the end).
    let no_moov = [ftyp_m4a(), b"\0\0\0\0mdat".to_vec(), vec![0; 64]].concat();
    assert_eq!(
        duration(&no_moov, AudioType::M4a),
        Err(AudioError::NoDuration)
    );
}

#[test]
fn mp4_boxes_reaching_past_the_end_are_damaged() {
    let mut huge = ftyp_m4a();
    huge.extend(0xFFFF_FFFFu32.to_be_bytes());
    huge.extend(b"mdat");
    huge.extend([0; 32]);
    assert_eq!(duration(&huge, AudioType::M4a), Err(AudioError::Damaged));
    for largesize in [u64::MAX, u64::MAX - 8, 1 << 40, 100] {
        let mut file = ftyp_m4a();
        file.extend(1u32.to_be_bytes());
        file.extend(b"mdat");
        file.extend(largesize.to_be_bytes());
        file.extend([0; 32]);
        assert_eq!(
            duration(&file, AudioType::M4a),
            Err(AudioError::Damaged),
            "largesize {largesize}"
        );
    }
    // Smaller than its own header.
    let mut tiny = ftyp_m4a();
    tiny.extend(4u32.to_be_bytes());
    tiny.extend(b"moov");
    assert_eq!(duration(&tiny, AudioType::M4a), Err(AudioError::Damaged));
    // An mvhd too short for its fields.
    let short = [ftyp_m4a(), mp4_box(b"moov", &mp4_box(b"mvhd", &[0; 12]))].concat();
    assert_eq!(duration(&short, AudioType::M4a), Err(AudioError::Damaged));
}

#[test]
fn wav_lasts_its_data_over_its_byte_rate() {
    let file = wav(2.5, 16_000);
    assert_near(sniffed_duration(&file, AudioType::Wav).unwrap(), 2.5, 0.001);
    let data_size_at = find(&file, b"data") + 4;
    // A streaming writer's size (0xFFFFFFFF), and a size past the end: the bytes there are.
    let mut streaming = file.clone();
    streaming[data_size_at..data_size_at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
    assert_near(duration(&streaming, AudioType::Wav).unwrap(), 2.5, 0.001);
    let cut = &file[..file.len() - 16_000];
    assert_near(duration(cut, AudioType::Wav).unwrap(), 2.0, 0.001);
    // fmt's byte rate (body offset 8; fmt's body starts at 20) of 0.
    let mut no_rate = file.clone();
    no_rate[28..32].copy_from_slice(&0u32.to_le_bytes());
    assert_eq!(duration(&no_rate, AudioType::Wav), Err(AudioError::Damaged));
    // 1 byte a second: 4 GB would be over a hundred hours.
    let mut slow = streaming.clone();
    slow[28..32].copy_from_slice(&1u32.to_le_bytes());
    assert_near(duration(&slow, AudioType::Wav).unwrap(), 80_000.0, 0.001);
    let huge = [&slow[..], &vec![0; 400_000]].concat();
    assert_eq!(duration(&huge, AudioType::Wav), Err(AudioError::Damaged));
}

#[test]
fn webm_lasts_its_duration_or_until_its_last_block() {
    let with = webm(Some(4321.5), 4000);
    assert_near(
        sniffed_duration(&with, AudioType::Webm).unwrap(),
        4.3215,
        0.001,
    );
    let without = webm(None, 4000);
    assert_near(
        sniffed_duration(&without, AudioType::Webm).unwrap(),
        4.0,
        0.001,
    );
    // MediaRecorder's shape: unknown-size Segment and Clusters, no Duration.
    let recorded = webm_recorded(2560);
    assert_near(
        sniffed_duration(&recorded, AudioType::Webm).unwrap(),
        2.56,
        0.001,
    );
    let recorded = webm_recorded(61_230);
    assert_near(duration(&recorded, AudioType::Webm).unwrap(), 61.23, 0.001);
    // Hostile durations.
    for bad in [f64::NAN, -5.0, f64::INFINITY, 101.0 * 3600.0 * 1000.0] {
        assert_eq!(
            duration(&webm(Some(bad), 1000), AudioType::Webm),
            Err(AudioError::Damaged),
            "{bad}"
        );
    }
    // Block times that overflow: the largest Timecode at the largest TimecodeScale.
    let huge = [
        ebml_header("webm"),
        ebml(
            webm_ids::SEGMENT,
            &[
                ebml(
                    webm_ids::INFO,
                    &ebml_uint(webm_ids::TIMECODE_SCALE, u64::MAX),
                ),
                ebml(
                    webm_ids::CLUSTER,
                    &[
                        ebml_uint(webm_ids::TIMECODE, u64::MAX),
                        ebml(webm_ids::SIMPLE_BLOCK, &[0x81, 0x7F, 0xFF, 0x80, 0]),
                    ]
                    .concat(),
                ),
            ]
            .concat(),
        ),
    ]
    .concat();
    assert_eq!(duration(&huge, AudioType::Webm), Err(AudioError::Damaged));
    // No Duration and no block.
    let empty = [
        ebml_header("webm"),
        ebml(
            webm_ids::SEGMENT,
            &ebml(
                webm_ids::INFO,
                &ebml_uint(webm_ids::TIMECODE_SCALE, 1_000_000),
            ),
        ),
    ]
    .concat();
    assert_eq!(
        duration(&empty, AudioType::Webm),
        Err(AudioError::NoDuration)
    );
}

#[test]
fn deeply_nested_unknown_size_webm_elements_end() {
    within(Duration::from_secs(60), || {
        // Clusters of unknown size, each inside the last, 100 000 deep.
        let mut file = ebml_header("webm");
        file.extend(ebml_unknown(webm_ids::SEGMENT, &[]));
        for _ in 0..100_000 {
            file.extend(ebml_unknown(webm_ids::CLUSTER, &[]));
        }
        assert_eq!(
            duration(&file, AudioType::Webm),
            Err(AudioError::NoDuration)
        );
        // Segments of unknown size inside each other.
        let mut file = ebml_header("webm");
        for _ in 0..100_000 {
            file.extend(ebml_unknown(webm_ids::SEGMENT, &[]));
        }
        assert!(duration(&file, AudioType::Webm).is_err());
        // Unknown size where it is not allowed (an Info, a BlockGroup).
        for id in [webm_ids::INFO, webm_ids::BLOCK_GROUP] {
            let mut file = ebml_header("webm");
            file.extend(ebml_unknown(webm_ids::SEGMENT, &[]));
            file.extend(ebml_unknown(webm_ids::CLUSTER, &[]));
            for _ in 0..10_000 {
                file.extend(ebml_unknown(id, &[]));
            }
            assert_eq!(duration(&file, AudioType::Webm), Err(AudioError::Damaged));
        }
    });
}

#[test]
fn the_opus_waveform_follows_the_packet_sizes() {
    let (length, wave) = opus_waveform(&ogg_opus(3.0)).unwrap();
    assert_near(length, 3.0, 0.001);
    // 3 s and the pre-skip take 151 packets of 20 ms: one byte each.
    let packets = opus_packet_count(3.0);
    assert_eq!(packets, 151);
    assert_eq!(wave.len(), packets);
    let sizes: Vec<usize> = (0..packets).map(opus_packet_size).collect();
    let max = *sizes.iter().max().unwrap() as f64;
    let expected: Vec<u8> = sizes
        .iter()
        .map(|&s| (s as f64 * 255.0 / max).round() as u8)
        .collect();
    assert_eq!(wave, expected);
    assert_eq!(wave.iter().max(), Some(&255));
}

#[test]
fn a_long_voice_message_has_256_waveform_bytes() {
    let (length, wave) = opus_waveform(&ogg_opus(20.0)).unwrap();
    assert_near(length, 20.0, 0.001);
    assert_eq!(wave.len(), 256);
    assert_eq!(wave.iter().max(), Some(&255));
    assert!(wave.iter().min().unwrap() < &100, "the saw-tooth shows");
}

#[test]
fn packets_and_headers_spanning_pages_are_put_together() {
    let sizes: [u16; 8] = [300, 1000, 20, 600, 5, 255, 510, 40];
    let packets: Vec<Vec<u8>> = sizes
        .iter()
        .enumerate()
        .map(|(i, &s)| opus_packet(usize::from(s), i))
        .collect();
    // Three segments a page: every packet over 765 bytes spans pages, and so do the headers'.
    let layout = OpusLayout {
        max_segments: 3,
        tags_padding: 2000,
        ..OpusLayout::default()
    };
    let file = ogg_opus_with(&packets, &layout);
    let (length, wave) = opus_waveform(&file).unwrap();
    // 8 packets of 960 samples less the pre-skip.
    assert_near(length, (8.0 * 960.0 - 312.0) / 48_000.0, 0.001);
    let expected: Vec<u8> = sizes
        .iter()
        .map(|&s| (f64::from(s) * 255.0 / 1000.0).round() as u8)
        .collect();
    assert_eq!(wave, expected);
    // Headers only: no waveform.
    let headers = ogg_opus_with(&[], &layout);
    assert_eq!(opus_waveform(&headers), Ok((Duration::ZERO, Vec::new())));
}

/// The fixtures the hostile-input tests cut and damage.
fn fixtures() -> Vec<(&'static str, Vec<u8>)> {
    let spanning = OpusLayout {
        max_segments: 3,
        tags_padding: 600,
        ..OpusLayout::default()
    };
    vec![
        ("ogg opus", ogg_opus(3.0)),
        (
            "ogg opus spanning",
            ogg_opus_with(&opus_packets(40), &spanning),
        ),
        ("ogg vorbis", ogg_vorbis(44_100, 88_200)),
        ("mp3 cbr", mp3_cbr(0.5)),
        ("mp3 xing", mp3_xing(100)),
        ("mp3 vbri", mp3_vbri(100)),
        ("m4a", m4a(1000, 4500)),
        ("m4a v1", m4a_v1(44_100, 44_100 * 3)),
        ("wav", wav(0.05, 8000)),
        ("webm", webm(Some(2500.0), 2500)),
        ("webm no duration", webm(None, 2500)),
        ("webm recorded", webm_recorded(2500)),
    ]
}

#[test]
fn every_cut_of_every_fixture_is_handled() {
    within(Duration::from_secs(300), || {
        let mut fixtures = fixtures();
        fixtures.push(("ogg opus 20 s", ogg_opus(20.0)));
        for (name, file) in fixtures {
            let t = AudioType::sniff(&file).expect("the fixture is audio");
            let full = duration(&file, t).expect("the fixture has a duration");
            // All cuts of small files, about 400 evenly spaced ones of larger files.
            let step = (file.len() / 400).max(1);
            for len in (0..file.len()).step_by(step) {
                let cut = &file[..len];
                exercise(cut);
                if let Ok(d) = duration(cut, t) {
                    assert!(d <= full, "{name} cut at {len}: {d:?} > {full:?}");
                }
            }
        }
    });
}

#[test]
fn thousands_of_damaged_bytes_are_handled() {
    within(Duration::from_secs(300), || {
        let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
        for (_, file) in fixtures() {
            for _ in 0..400 {
                let mut damaged = file.clone();
                for _ in 0..1 + rng.below(4) {
                    // Half the damage in the first 128 bytes, where the headers are.
                    let span = if rng.next().is_multiple_of(2) {
                        128.min(file.len())
                    } else {
                        file.len()
                    };
                    let at = rng.below(span);
                    damaged[at] ^= 1 + rng.below(255) as u8;
                }
                exercise(&damaged);
            }
        }
    });
}

#[test]
fn random_bytes_after_each_signature_are_handled() {
    within(Duration::from_secs(120), || {
        let mut rng = XorShift(42);
        let signatures: [&[u8]; 6] = [
            b"OggS\0\x02",
            b"ID3\x04\0\0",
            b"\xFF\xFB\x90\x40",
            b"\0\0\0\x20ftypM4A ",
            b"RIFF\0\0\0\0WAVE",
            b"\x1A\x45\xDF\xA3",
        ];
        for signature in signatures {
            for _ in 0..300 {
                let len = rng.below(600);
                let mut bytes = signature.to_vec();
                bytes.extend((0..len).map(|_| rng.next() as u8));
                exercise(&bytes);
            }
        }
    });
}
