//! Audio files built for tests, byte by byte, with no encoder: Ogg Opus (valid pages with
//! their CRC, real Opus packet headers) and Ogg Vorbis headers, MP3 frames (constant bitrate,
//! Xing, VBRI), M4A, WAV and WebM. The audio itself is silence or filler: what the daemon reads
//! is the container, and each builder's duration is exact by construction.

/// The pre-skip [`ogg_opus`] writes in its OpusHead, in 48 kHz samples.
pub const OPUS_PRE_SKIP: u16 = 312;
/// Samples (at 48 kHz) in each 20 ms Opus packet.
pub const OPUS_PACKET_SAMPLES: u64 = 960;
/// The stream serial number [`ogg_opus`] and [`ogg_vorbis`] use.
pub const OGG_SERIAL: u32 = 0x4F70_7573;

/// Ogg's CRC-32: polynomial 0x04C11DB7, not reflected, starting at 0, no final xor.
pub fn ogg_crc(data: &[u8]) -> u32 {
    let mut crc = 0u32;
    for &byte in data {
        crc ^= u32::from(byte) << 24;
        for _ in 0..8 {
            crc = if crc & 0x8000_0000 != 0 {
                (crc << 1) ^ 0x04C1_1DB7
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// The lacing values of a packet of `len` bytes: 255s, then the rest (0 when `len` is a
/// multiple of 255, as Ogg requires).
pub fn lacing(len: usize) -> Vec<u8> {
    let mut values = vec![255u8; len / 255];
    values.push((len % 255) as u8);
    values
}

/// One Ogg page with its CRC. `flags`: 0x01 continued packet, 0x02 first page, 0x04 last.
pub fn ogg_page(
    flags: u8,
    granule: u64,
    serial: u32,
    sequence: u32,
    lacing: &[u8],
    body: &[u8],
) -> Vec<u8> {
    assert!(lacing.len() <= 255, "at most 255 segments a page");
    let mut page = b"OggS\0".to_vec();
    page.push(flags);
    page.extend_from_slice(&granule.to_le_bytes());
    page.extend_from_slice(&serial.to_le_bytes());
    page.extend_from_slice(&sequence.to_le_bytes());
    page.extend_from_slice(&[0; 4]);
    page.push(lacing.len() as u8);
    page.extend_from_slice(lacing);
    page.extend_from_slice(body);
    let crc = ogg_crc(&page);
    page[22..26].copy_from_slice(&crc.to_le_bytes());
    page
}

/// A page being filled by [`OggMuxer`].
#[derive(Default)]
struct PendingPage {
    continued: bool,
    granule: Option<u64>,
    lacing: Vec<u8>,
    body: Vec<u8>,
}

/// Lays packets out on Ogg pages of one logical stream, as an encoder would: a page holds up
/// to `max_segments` lacing values, a packet that does not fit goes on over the next pages
/// (flag 0x01), a page's granule position is that of the last packet ending on it (all ones
/// when none does), the first page is flagged 0x02 and the last 0x04.
pub struct OggMuxer {
    serial: u32,
    max_segments: usize,
    pages: Vec<PendingPage>,
}

impl OggMuxer {
    /// A muxer for stream `serial` with at most `max_segments` (1 to 255) segments a page.
    pub fn new(serial: u32, max_segments: usize) -> OggMuxer {
        assert!((1..=255).contains(&max_segments));
        OggMuxer {
            serial,
            max_segments,
            pages: Vec::new(),
        }
    }

    /// Adds `packets`, each with the granule position at its end, starting on a fresh page
    /// (as Ogg wants for each header and for the first audio packet).
    pub fn packets(&mut self, packets: &[(Vec<u8>, u64)]) -> &mut OggMuxer {
        let mut page = PendingPage::default();
        for (packet, granule) in packets {
            let values = lacing(packet.len());
            let mut offset = 0;
            for (i, &value) in values.iter().enumerate() {
                let end = offset + usize::from(value);
                page.lacing.push(value);
                page.body.extend_from_slice(&packet[offset..end]);
                offset = end;
                let last = i + 1 == values.len();
                if last {
                    page.granule = Some(*granule);
                }
                if page.lacing.len() == self.max_segments {
                    self.pages.push(std::mem::take(&mut page));
                    page.continued = !last;
                }
            }
        }
        if !page.lacing.is_empty() {
            self.pages.push(page);
        }
        self
    }

    /// The file: every page with its flags, sequence number and CRC.
    pub fn finish(&self) -> Vec<u8> {
        let count = self.pages.len();
        let mut out = Vec::new();
        for (i, page) in self.pages.iter().enumerate() {
            let mut flags = if page.continued { 0x01 } else { 0 };
            if i == 0 {
                flags |= 0x02;
            }
            if i + 1 == count {
                flags |= 0x04;
            }
            out.extend(ogg_page(
                flags,
                page.granule.unwrap_or(u64::MAX),
                self.serial,
                i as u32,
                &page.lacing,
                &page.body,
            ));
        }
        out
    }
}

/// An OpusHead packet: version 1, one channel, `pre_skip`, input rate 48 kHz, gain 0,
/// mapping family 0.
pub fn opus_head(pre_skip: u16) -> Vec<u8> {
    let mut head = b"OpusHead".to_vec();
    head.push(1);
    head.push(1);
    head.extend_from_slice(&pre_skip.to_le_bytes());
    head.extend_from_slice(&48_000u32.to_le_bytes());
    head.extend_from_slice(&0u16.to_le_bytes());
    head.push(0);
    head
}

/// An OpusTags packet: a vendor string and the user comments `comments`.
pub fn opus_tags(vendor: &str, comments: &[&str]) -> Vec<u8> {
    let mut tags = b"OpusTags".to_vec();
    tags.extend_from_slice(&(vendor.len() as u32).to_le_bytes());
    tags.extend_from_slice(vendor.as_bytes());
    tags.extend_from_slice(&(comments.len() as u32).to_le_bytes());
    for comment in comments {
        tags.extend_from_slice(&(comment.len() as u32).to_le_bytes());
        tags.extend_from_slice(comment.as_bytes());
    }
    tags
}

/// The size of the `index`th audio packet [`opus_packets`] makes: a saw-tooth between 5 and
/// 77 bytes, so the waveform has a shape.
pub fn opus_packet_size(index: usize) -> usize {
    5 + (index % 25) * 3
}

/// An Opus packet of `size` bytes (at least 1): TOC byte 0xF8 (CELT full band, 20 ms, mono,
/// one frame), then filler that a decoder reads as a frame.
pub fn opus_packet(size: usize, seed: usize) -> Vec<u8> {
    let mut packet = vec![0xF8];
    packet.extend((1..size).map(|i| (i * 31 + seed * 7) as u8));
    packet
}

/// `count` 20 ms Opus packets of [`opus_packet_size`] bytes.
pub fn opus_packets(count: usize) -> Vec<Vec<u8>> {
    (0..count)
        .map(|i| opus_packet(opus_packet_size(i), i))
        .collect()
}

/// How [`ogg_opus_with`] lays out a file.
pub struct OpusLayout {
    /// OpusHead's pre-skip, 48 kHz samples.
    pub pre_skip: u16,
    /// Most segments a page ([`OggMuxer`]); small values make packets span pages.
    pub max_segments: usize,
    /// Bytes of comment in OpusTags (a large one spans pages).
    pub tags_padding: usize,
    /// Samples of the last packet that are not audio (end trimming: the last granule position
    /// is this much short of the packets' samples).
    pub end_trim: u64,
}

impl Default for OpusLayout {
    fn default() -> Self {
        OpusLayout {
            pre_skip: OPUS_PRE_SKIP,
            max_segments: 50,
            tags_padding: 0,
            end_trim: 0,
        }
    }
}

/// An Ogg Opus file holding `packets` (20 ms each) laid out as `layout` says, as an encoder
/// writes a stream starting at 0: OpusHead alone on the first page, OpusTags on the next, then
/// the audio, the granule position after packet `i` being 960 × (i + 1) (the decoded samples,
/// pre-skip included), less `end_trim` for the last. It plays for the last granule position
/// less the pre-skip.
pub fn ogg_opus_with(packets: &[Vec<u8>], layout: &OpusLayout) -> Vec<u8> {
    let comment = format!("COMMENT={}", "x".repeat(layout.tags_padding));
    let tags = opus_tags("air-friends tests", &[comment.as_str()]);
    let count = packets.len();
    let audio: Vec<(Vec<u8>, u64)> = packets
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let granule = OPUS_PACKET_SAMPLES * (i as u64 + 1);
            let trim = if i + 1 == count { layout.end_trim } else { 0 };
            (p.clone(), granule - trim)
        })
        .collect();
    OggMuxer::new(OGG_SERIAL, layout.max_segments)
        .packets(&[(opus_head(layout.pre_skip), 0)])
        .packets(&[(tags, 0)])
        .packets(&audio)
        .finish()
}

/// The samples (48 kHz) of `seconds`, rounded.
fn opus_samples(seconds: f64) -> u64 {
    (seconds * 48_000.0).round() as u64
}

/// The number of 20 ms packets [`ogg_opus`] writes for `seconds`: like an encoder, enough for
/// the audio and the pre-skip (3 s is 151 packets).
pub fn opus_packet_count(seconds: f64) -> usize {
    let decoded = opus_samples(seconds) + u64::from(OPUS_PRE_SKIP);
    decoded.div_ceil(OPUS_PACKET_SAMPLES) as usize
}

/// A valid Ogg Opus voice message of exactly `seconds` (to the 48 kHz sample), as an encoder
/// writes one: mono, pre-skip 312, [`opus_packet_count`] packets of [`opus_packet_size`]
/// bytes, up to 50 a page, the last granule position trimmed to pre-skip + the audio's
/// samples. `opusdec` decodes it to exactly `seconds` of audio.
pub fn ogg_opus(seconds: f64) -> Vec<u8> {
    let count = opus_packet_count(seconds);
    let decoded = opus_samples(seconds) + u64::from(OPUS_PRE_SKIP);
    let layout = OpusLayout {
        end_trim: count as u64 * OPUS_PACKET_SAMPLES - decoded,
        ..OpusLayout::default()
    };
    ogg_opus_with(&opus_packets(count), &layout)
}

/// A minimal Ogg Vorbis file: the three header packets (identification with `sample_rate`,
/// comment, a stand-in setup) and one audio page whose granule position is `last_granule`.
pub fn ogg_vorbis(sample_rate: u32, last_granule: u64) -> Vec<u8> {
    let mut ident = b"\x01vorbis".to_vec();
    ident.extend_from_slice(&0u32.to_le_bytes());
    ident.push(1);
    ident.extend_from_slice(&sample_rate.to_le_bytes());
    ident.extend_from_slice(&0i32.to_le_bytes());
    ident.extend_from_slice(&64_000i32.to_le_bytes());
    ident.extend_from_slice(&0i32.to_le_bytes());
    ident.push(0xB8);
    ident.push(1);
    let mut comment = b"\x03vorbis".to_vec();
    comment.extend_from_slice(&5u32.to_le_bytes());
    comment.extend_from_slice(b"tests");
    comment.extend_from_slice(&0u32.to_le_bytes());
    comment.push(1);
    let setup = [b"\x05vorbis".as_slice(), &[0x42; 40]].concat();
    OggMuxer::new(OGG_SERIAL, 255)
        .packets(&[(ident, 0)])
        .packets(&[(comment, 0), (setup, 0)])
        .packets(&[(vec![0; 30], last_granule / 2), (vec![0; 30], last_granule)])
        .finish()
}

/// An ID3v2.4 tag with `body_len` bytes of padding as its content.
pub fn id3v2(body_len: usize) -> Vec<u8> {
    let mut tag = b"ID3\x04\0\0".to_vec();
    let n = body_len as u32;
    tag.extend([(n >> 21) as u8, (n >> 14) as u8, (n >> 7) as u8, n as u8].map(|b| b & 0x7F));
    tag.extend(std::iter::repeat_n(0u8, body_len));
    tag
}

/// Samples in an MPEG-1 Layer III frame.
pub const MP3_FRAME_SAMPLES: u32 = 1152;

/// An MPEG-1 Layer III frame, 128 kbit/s, 44.1 kHz, joint stereo: 417 bytes, 418 padded; silent
/// (its side information and data are zeros).
pub fn mp3_frame(padded: bool) -> Vec<u8> {
    let mut frame = vec![0xFF, 0xFB, if padded { 0x92 } else { 0x90 }, 0x40];
    frame.resize(if padded { 418 } else { 417 }, 0);
    frame
}

/// `count` frames of [`mp3_frame`], padded where an encoder pads to keep 128 kbit/s exactly.
pub fn mp3_frames(count: usize) -> Vec<u8> {
    // 144 × 128000 / 44100 = 417 and 42300/44100 bytes.
    let pad = |i: usize| ((i + 1) * 42_300) / 44_100 > (i * 42_300) / 44_100;
    (0..count).flat_map(|i| mp3_frame(pad(i))).collect()
}

/// The number of MPEG-1 frames in `seconds` at 44.1 kHz (rounded).
pub fn mp3_frame_count(seconds: f64) -> usize {
    (seconds * 44_100.0 / f64::from(MP3_FRAME_SAMPLES)).round() as usize
}

/// A constant-bitrate MP3 of `seconds` (rounded to a frame): an ID3v2 tag, then frames of
/// [`mp3_frames`], no VBR header.
pub fn mp3_cbr(seconds: f64) -> Vec<u8> {
    let mut file = id3v2(300);
    file.extend(mp3_frames(mp3_frame_count(seconds)));
    file
}

/// An MP3 whose first frame holds a `Xing` tag counting `frames` frames (which is what its
/// duration is read from), then three audio frames.
pub fn mp3_xing(frames: u32) -> Vec<u8> {
    let mut first = mp3_frame(false);
    // After the 4-byte header and 32 bytes of MPEG-1 stereo side information.
    first[36..40].copy_from_slice(b"Xing");
    first[40..44].copy_from_slice(&1u32.to_be_bytes());
    first[44..48].copy_from_slice(&frames.to_be_bytes());
    let mut file = id3v2(20);
    file.extend(first);
    file.extend(mp3_frames(3));
    file
}

/// An MP3 whose first frame holds a Fraunhofer `VBRI` tag counting `frames` frames, then three
/// audio frames.
pub fn mp3_vbri(frames: u32) -> Vec<u8> {
    let mut first = mp3_frame(false);
    first[36..40].copy_from_slice(b"VBRI");
    first[40..42].copy_from_slice(&1u16.to_be_bytes());
    first[50..54].copy_from_slice(&frames.to_be_bytes());
    let mut file = first;
    file.extend(mp3_frames(3));
    file
}

/// An ID3v1 tag (128 bytes, `TAG` first), as found at the end of old MP3s.
pub fn id3v1() -> Vec<u8> {
    let mut tag = b"TAGsong title".to_vec();
    tag.resize(128, b' ');
    tag
}

/// A WAV of `seconds` of 16-bit mono silence at `sample_rate`: `fmt `, an odd-sized `LIST`
/// chunk (padded to even, as RIFF wants) and `data`.
pub fn wav(seconds: f64, sample_rate: u32) -> Vec<u8> {
    let samples = (seconds * f64::from(sample_rate)).round() as u32;
    let mut fmt = Vec::new();
    fmt.extend_from_slice(&1u16.to_le_bytes());
    fmt.extend_from_slice(&1u16.to_le_bytes());
    fmt.extend_from_slice(&sample_rate.to_le_bytes());
    fmt.extend_from_slice(&(sample_rate * 2).to_le_bytes());
    fmt.extend_from_slice(&2u16.to_le_bytes());
    fmt.extend_from_slice(&16u16.to_le_bytes());
    let mut body = b"WAVE".to_vec();
    body.extend(riff_chunk(b"fmt ", &fmt));
    body.extend(riff_chunk(b"LIST", b"INFOISFT\x03\0\0\0ok\0"));
    body.extend(riff_chunk(b"data", &vec![0; samples as usize * 2]));
    riff_chunk(b"RIFF", &body)
}

/// A RIFF chunk: id, size (little-endian), body, a pad byte when the size is odd.
pub fn riff_chunk(id: &[u8; 4], body: &[u8]) -> Vec<u8> {
    let mut chunk = id.to_vec();
    chunk.extend_from_slice(&(body.len() as u32).to_le_bytes());
    chunk.extend_from_slice(body);
    if body.len() % 2 == 1 {
        chunk.push(0);
    }
    chunk
}

/// An MP4 box: 32-bit size, type, content.
pub fn mp4_box(kind: &[u8; 4], content: &[u8]) -> Vec<u8> {
    let mut b = ((content.len() + 8) as u32).to_be_bytes().to_vec();
    b.extend_from_slice(kind);
    b.extend_from_slice(content);
    b
}

/// An MP4 box written with a 64-bit size (size field 1, then the largesize).
pub fn mp4_large_box(kind: &[u8; 4], content: &[u8]) -> Vec<u8> {
    let mut b = 1u32.to_be_bytes().to_vec();
    b.extend_from_slice(kind);
    b.extend_from_slice(&((content.len() + 16) as u64).to_be_bytes());
    b.extend_from_slice(content);
    b
}

/// An `ftyp` box: major brand `M4A `, compatible `M4A `, `isom`, `mp42`.
pub fn ftyp_m4a() -> Vec<u8> {
    mp4_box(b"ftyp", b"M4A \0\0\0\0M4A isommp42")
}

/// An M4A file as a non-streaming encoder writes it: `ftyp`, `free`, `mdat` (filler), then
/// `moov` with a version 0 `mvhd` of `timescale` units a second and `duration` units.
pub fn m4a(timescale: u32, duration: u32) -> Vec<u8> {
    let mut mvhd = vec![0, 0, 0, 0];
    mvhd.extend_from_slice(&1u32.to_be_bytes());
    mvhd.extend_from_slice(&2u32.to_be_bytes());
    mvhd.extend_from_slice(&timescale.to_be_bytes());
    mvhd.extend_from_slice(&duration.to_be_bytes());
    mvhd.extend(mvhd_rest());
    m4a_around(&mp4_box(b"mvhd", &mvhd), false)
}

/// As [`m4a`] with a version 1 `mvhd` (64-bit times) and its `mdat` written with a 64-bit
/// size.
pub fn m4a_v1(timescale: u32, duration: u64) -> Vec<u8> {
    let mut mvhd = vec![1, 0, 0, 0];
    mvhd.extend_from_slice(&1u64.to_be_bytes());
    mvhd.extend_from_slice(&2u64.to_be_bytes());
    mvhd.extend_from_slice(&timescale.to_be_bytes());
    mvhd.extend_from_slice(&duration.to_be_bytes());
    mvhd.extend(mvhd_rest());
    m4a_around(&mp4_box(b"mvhd", &mvhd), true)
}

/// `mvhd` after the duration: rate, volume, reserved, matrix, pre-defined, next track id.
fn mvhd_rest() -> Vec<u8> {
    let mut rest = 0x0001_0000u32.to_be_bytes().to_vec();
    rest.extend_from_slice(&0x0100u16.to_be_bytes());
    rest.extend_from_slice(&[0; 10]);
    for m in [0x0001_0000u32, 0, 0, 0, 0x0001_0000, 0, 0, 0, 0x4000_0000] {
        rest.extend_from_slice(&m.to_be_bytes());
    }
    rest.extend_from_slice(&[0; 24]);
    rest.extend_from_slice(&2u32.to_be_bytes());
    rest
}

fn m4a_around(mvhd: &[u8], large_mdat: bool) -> Vec<u8> {
    let mut file = ftyp_m4a();
    file.extend(mp4_box(b"free", &[0; 8]));
    let media = vec![0x21; 600];
    file.extend(if large_mdat {
        mp4_large_box(b"mdat", &media)
    } else {
        mp4_box(b"mdat", &media)
    });
    let trak = mp4_box(b"trak", &mp4_box(b"tkhd", &[0; 84]));
    file.extend(mp4_box(b"moov", &[mvhd, &trak].concat()));
    file
}

/// An EBML element id's bytes (as written, marker included).
fn ebml_id(id: u32) -> Vec<u8> {
    let bytes = id.to_be_bytes();
    let skip = bytes.iter().position(|&b| b != 0).unwrap_or(3);
    bytes[skip..].to_vec()
}

/// An EBML size in the fewest bytes (all value bits set being reserved for "unknown").
pub fn ebml_size(size: u64) -> Vec<u8> {
    let len = (1..=8usize)
        .find(|&len| size < (1u64 << (7 * len)) - 1)
        .expect("size fits in 8 bytes");
    let marked = size | (1u64 << (7 * len));
    marked.to_be_bytes()[8 - len..].to_vec()
}

/// An EBML element: id, size, body.
pub fn ebml(id: u32, body: &[u8]) -> Vec<u8> {
    [ebml_id(id), ebml_size(body.len() as u64), body.to_vec()].concat()
}

/// An EBML element of unknown size (size byte 0xFF): runs to its parent's end, or for a
/// Cluster to the next level-1 element.
pub fn ebml_unknown(id: u32, body: &[u8]) -> Vec<u8> {
    [ebml_id(id), vec![0xFF], body.to_vec()].concat()
}

/// An EBML unsigned integer element in the fewest bytes.
pub fn ebml_uint(id: u32, value: u64) -> Vec<u8> {
    let bytes = value.to_be_bytes();
    let skip = bytes.iter().position(|&b| b != 0).unwrap_or(7);
    ebml(id, &bytes[skip..])
}

/// EBML ids of the elements the WebM builders write.
pub mod webm_ids {
    pub const EBML: u32 = 0x1A45_DFA3;
    pub const DOC_TYPE: u32 = 0x4282;
    pub const SEGMENT: u32 = 0x1853_8067;
    pub const INFO: u32 = 0x1549_A966;
    pub const TIMECODE_SCALE: u32 = 0x2A_D7B1;
    pub const DURATION: u32 = 0x4489;
    pub const TRACKS: u32 = 0x1654_AE6B;
    pub const TRACK_ENTRY: u32 = 0xAE;
    pub const TRACK_NUMBER: u32 = 0xD7;
    pub const CODEC_ID: u32 = 0x86;
    pub const CLUSTER: u32 = 0x1F43_B675;
    pub const TIMECODE: u32 = 0xE7;
    pub const SIMPLE_BLOCK: u32 = 0xA3;
    pub const BLOCK_GROUP: u32 = 0xA0;
    pub const BLOCK: u32 = 0xA1;
}

/// The EBML header of a WebM file (DocType `doc_type`).
pub fn ebml_header(doc_type: &str) -> Vec<u8> {
    use webm_ids::*;
    let body = [
        ebml_uint(0x4286, 1),
        ebml_uint(0x42F7, 1),
        ebml_uint(0x42F2, 4),
        ebml_uint(0x42F3, 8),
        ebml(DOC_TYPE, doc_type.as_bytes()),
        ebml_uint(0x4287, 4),
        ebml_uint(0x4285, 2),
    ]
    .concat();
    ebml(EBML, &body)
}

/// A block body: track 1, time `relative` to its cluster, keyframe flags, 3 bytes of payload.
fn block_body(relative: i16) -> Vec<u8> {
    [
        vec![0x81],
        relative.to_be_bytes().to_vec(),
        vec![0x80, 1, 2, 3],
    ]
    .concat()
}

/// The Clusters of a WebM file whose blocks start every 100 ms up to `blocks_end_ms` (the last
/// one exactly there, inside a BlockGroup), a Cluster a second; each Cluster's body.
fn webm_clusters(blocks_end_ms: u32) -> Vec<Vec<u8>> {
    use webm_ids::*;
    let mut times: Vec<u32> = (0..blocks_end_ms).step_by(100).collect();
    times.push(blocks_end_ms);
    let mut clusters: Vec<Vec<u8>> = Vec::new();
    for (i, &t) in times.iter().enumerate() {
        let cluster_time = t / 1000 * 1000;
        if clusters.len() as u32 <= t / 1000 {
            clusters.push(ebml_uint(TIMECODE, u64::from(cluster_time)));
        }
        let relative = (t - cluster_time) as i16;
        let block = if i + 1 == times.len() {
            ebml(BLOCK_GROUP, &ebml(BLOCK, &block_body(relative)))
        } else {
            ebml(SIMPLE_BLOCK, &block_body(relative))
        };
        clusters
            .last_mut()
            .expect("a cluster was started")
            .extend(block);
    }
    clusters
}

/// The segment's Info (TimecodeScale 1 ms, Duration `duration_ms` as a float64 if given) and
/// Tracks (one Opus track).
fn webm_head(duration_ms: Option<f64>) -> Vec<u8> {
    use webm_ids::*;
    let mut info = ebml_uint(TIMECODE_SCALE, 1_000_000);
    if let Some(ms) = duration_ms {
        info.extend(ebml(DURATION, &ms.to_be_bytes()));
    }
    let track = [ebml_uint(TRACK_NUMBER, 1), ebml(CODEC_ID, b"A_OPUS")].concat();
    [ebml(INFO, &info), ebml(TRACKS, &ebml(TRACK_ENTRY, &track))].concat()
}

/// A WebM file with known sizes everywhere: EBML header (DocType `webm`), a Segment with Info
/// (TimecodeScale 1 ms, Duration `duration_ms` when given), Tracks, and Clusters whose blocks
/// start every 100 ms, the last at `blocks_end_ms`.
pub fn webm(duration_ms: Option<f64>, blocks_end_ms: u32) -> Vec<u8> {
    use webm_ids::*;
    let mut segment = webm_head(duration_ms);
    for cluster in webm_clusters(blocks_end_ms) {
        segment.extend(ebml(CLUSTER, &cluster));
    }
    [ebml_header("webm"), ebml(SEGMENT, &segment)].concat()
}

/// A WebM file as a browser's MediaRecorder writes it: no Duration, and the Segment and every
/// Cluster of unknown size; its blocks as in [`webm`].
pub fn webm_recorded(blocks_end_ms: u32) -> Vec<u8> {
    use webm_ids::*;
    let mut segment = webm_head(None);
    for cluster in webm_clusters(blocks_end_ms) {
        segment.extend(ebml_unknown(CLUSTER, &cluster));
    }
    [ebml_header("webm"), ebml_unknown(SEGMENT, &segment)].concat()
}
