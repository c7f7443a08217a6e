//! Audio attachments (voice messages), read from their bytes without decoding any audio:
//! which container and codec a file is ([`AudioType::sniff`]), how long it lasts by its
//! container ([`duration`]), so a message too long to transcribe is refused before it is sent
//! anywhere, and for Ogg Opus the waveform Discord shows on a voice message ([`opus_waveform`]).
//!
//! The bytes come from strangers, so nothing here trusts them: every offset is checked against
//! the buffer, every length read from the file is bounded by it, every loop moves forward, the
//! Matroska walk has a fixed shape (no recursion), and a duration no voice message has (over
//! 100 hours, not a number, negative) makes the file [`AudioError::Damaged`].
//!
//! * **Ogg** (Opus, Vorbis): the codec from the first packet; the duration from the granule
//!   position of the stream's last page, found by scanning back from the end.
//! * **MP3**: an MPEG Layer III frame (after an ID3v2 tag), confirmed by the next frame; the
//!   duration from a `Xing`/`Info` or `VBRI` frame count, else from the bitrate.
//! * **M4A**: a file starting with an `ftyp` box whose major brand is not a HEIF/AVIF picture's
//!   or a QuickTime movie's (telling audio from video would mean reading the tracks, so an MP4
//!   video also reads as M4A; the service takes its sound); the duration from `moov`/`mvhd`
//!   (or `mvex`/`mehd` for a fragmented file).
//! * **WAV**: `RIFF`…`WAVE`; the `data` size over the `fmt ` byte rate.
//! * **WebM** (and Matroska): the `Duration` of the segment's `Info`, else the time of the last
//!   block, as browsers' recorders often write no duration.

use std::time::Duration;

/// The longest duration believed, in seconds: anything longer is a hostile number.
const MAX_SECONDS: u64 = 100 * 60 * 60;

/// An audio format the transcription service takes, told from the bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AudioType {
    /// Opus in Ogg (Discord's and most apps' voice messages), `audio/ogg`.
    OggOpus,
    /// Vorbis in Ogg, `audio/ogg`.
    OggVorbis,
    /// MPEG-1/2/2.5 Layer III, `audio/mpeg`.
    Mp3,
    /// An MP4 (ISO base media) file, `audio/mp4`.
    M4a,
    /// RIFF WAVE, `audio/wav`.
    Wav,
    /// WebM or Matroska, `audio/webm`.
    Webm,
}

impl AudioType {
    /// The MIME type.
    pub fn mime(self) -> &'static str {
        match self {
            AudioType::OggOpus | AudioType::OggVorbis => "audio/ogg",
            AudioType::Mp3 => "audio/mpeg",
            AudioType::M4a => "audio/mp4",
            AudioType::Wav => "audio/wav",
            AudioType::Webm => "audio/webm",
        }
    }

    /// The usual file extension, without the dot.
    pub fn extension(self) -> &'static str {
        match self {
            AudioType::OggOpus | AudioType::OggVorbis => "ogg",
            AudioType::Mp3 => "mp3",
            AudioType::M4a => "m4a",
            AudioType::Wav => "wav",
            AudioType::Webm => "webm",
        }
    }

    /// The format's name, for humans.
    pub fn name(self) -> &'static str {
        match self {
            AudioType::OggOpus => "Ogg Opus",
            AudioType::OggVorbis => "Ogg Vorbis",
            AudioType::Mp3 => "MP3",
            AudioType::M4a => "M4A",
            AudioType::Wav => "WAV",
            AudioType::Webm => "WebM",
        }
    }

    /// The format of `bytes`, from its signature and first structures; `None` for anything
    /// else (other Ogg codecs such as Theora or FLAC included).
    pub fn sniff(bytes: &[u8]) -> Option<AudioType> {
        if bytes.starts_with(b"OggS") {
            ogg::stream(bytes).ok().map(|s| s.kind)
        } else if wav::is_wav(bytes) {
            Some(AudioType::Wav)
        } else if ebml::is_webm(bytes) {
            Some(AudioType::Webm)
        } else if mp4::is_mp4(bytes) {
            Some(AudioType::M4a)
        } else if mp3::is_mp3(bytes) {
            Some(AudioType::Mp3)
        } else {
            None
        }
    }
}

/// Why an audio file's duration or waveform could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AudioError {
    /// Its structures are cut off or inconsistent, or it claims an unbelievable duration.
    #[error("the audio file is cut short or damaged")]
    Damaged,
    /// The file is sound but does not say how long it is.
    #[error("its length could not be read from the file")]
    NoDuration,
    /// The bytes are not the format asked about.
    #[error("it is not an audio format that can be transcribed")]
    Unsupported,
}

/// The duration read from the container of `bytes`, taken to be of type `t` (as
/// [`AudioType::sniff`] told): [`AudioError::Unsupported`] when its signature is not that
/// format's, [`AudioError::Damaged`] when it is cut short or claims more than 100 hours.
pub fn duration(bytes: &[u8], t: AudioType) -> Result<Duration, AudioError> {
    match t {
        AudioType::OggOpus | AudioType::OggVorbis => ogg::duration(bytes, t),
        AudioType::Mp3 => mp3::duration(bytes),
        AudioType::M4a => mp4::duration(bytes),
        AudioType::Wav => wav::duration(bytes),
        AudioType::Webm => ebml::duration(bytes),
    }
}

/// An Ogg Opus voice message's duration and waveform as Discord wants them: up to 256
/// amplitude bytes (0–255), one per equal slice of the audio packets, each the slice's mean
/// packet size scaled so that the largest slice is 255. An Opus packet grows with the loudness
/// and detail of its 20 ms, so its size is a proxy for amplitude that needs no decoder. With
/// fewer than 256 packets there is one byte per packet; with no audio packet, none.
pub fn opus_waveform(bytes: &[u8]) -> Result<(Duration, Vec<u8>), AudioError> {
    let stream = ogg::stream(bytes)?;
    if stream.kind != AudioType::OggOpus {
        return Err(AudioError::Unsupported);
    }
    let length = ogg::duration(bytes, AudioType::OggOpus)?;
    // Two passes, so that memory stays 256 slices however many packets a file packs in: the
    // count, then the sizes. The first two packets are the OpusHead and OpusTags headers.
    let mut packets = 0usize;
    ogg::for_each_packet(bytes, stream.serial, |_| packets += 1);
    let mut slices = Slices::new(packets.saturating_sub(2));
    let mut index = 0usize;
    ogg::for_each_packet(bytes, stream.serial, |size| {
        if let Some(audio) = index.checked_sub(2) {
            slices.add(audio, size);
        }
        index += 1;
    });
    Ok((length, slices.scaled()))
}

/// Packet sizes summed over `min(256, n)` equal slices of `n` packets: slice `i` holds
/// packets `i·n/k` to `(i+1)·n/k` (exclusive), `k` being the number of slices.
struct Slices {
    packets: usize,
    /// Per slice: the sum of the sizes, the number of packets.
    sums: Vec<(u64, u64)>,
}

impl Slices {
    fn new(packets: usize) -> Slices {
        Slices {
            packets,
            sums: vec![(0, 0); packets.min(256)],
        }
    }

    /// Adds packet `index` (from 0) of `size` bytes.
    fn add(&mut self, index: usize, size: usize) {
        let k = self.sums.len();
        // The slice `i` with i·n/k <= index < (i+1)·n/k.
        let slice =
            (index.saturating_add(1).saturating_mul(k).saturating_sub(1)).checked_div(self.packets);
        if let Some((sum, count)) = slice.and_then(|i| self.sums.get_mut(i)) {
            *sum = sum.saturating_add(size as u64);
            *count += 1;
        }
    }

    /// Each slice's mean size, scaled so that the largest is 255.
    fn scaled(&self) -> Vec<u8> {
        let means: Vec<f64> = self
            .sums
            .iter()
            .map(|&(sum, count)| sum as f64 / count.max(1) as f64)
            .collect();
        let max = means.iter().copied().fold(0.0, f64::max);
        means
            .iter()
            .map(|m| {
                if max > 0.0 {
                    (m * 255.0 / max).round() as u8
                } else {
                    0
                }
            })
            .collect()
    }
}

/// `num / den` seconds, refused when `den` is 0 or the result is over [`MAX_SECONDS`].
fn ratio(num: u128, den: u64) -> Result<Duration, AudioError> {
    let den = u128::from(den);
    if den == 0 {
        return Err(AudioError::Damaged);
    }
    let (secs, rest) = (num / den, num % den);
    let max = u128::from(MAX_SECONDS);
    if secs > max || (secs == max && rest > 0) {
        return Err(AudioError::Damaged);
    }
    // `rest < den <= u64::MAX`, so this cannot overflow.
    let nanos = rest * 1_000_000_000 / den;
    Ok(Duration::new(secs as u64, nanos as u32))
}

/// `secs` seconds, refused when not a number, negative or over [`MAX_SECONDS`].
fn seconds(secs: f64) -> Result<Duration, AudioError> {
    if !secs.is_finite() || secs < 0.0 || secs > MAX_SECONDS as f64 {
        return Err(AudioError::Damaged);
    }
    Ok(Duration::from_secs_f64(secs))
}

/// `N` bytes at `at`, if all inside `b`.
fn bytes_at<const N: usize>(b: &[u8], at: usize) -> Option<[u8; N]> {
    b.get(at..at.checked_add(N)?)?.try_into().ok()
}

fn u16_le(b: &[u8], at: usize) -> Option<u16> {
    bytes_at(b, at).map(u16::from_le_bytes)
}

fn u32_le(b: &[u8], at: usize) -> Option<u32> {
    bytes_at(b, at).map(u32::from_le_bytes)
}

fn u32_be(b: &[u8], at: usize) -> Option<u32> {
    bytes_at(b, at).map(u32::from_be_bytes)
}

fn u64_le(b: &[u8], at: usize) -> Option<u64> {
    bytes_at(b, at).map(u64::from_le_bytes)
}

fn u64_be(b: &[u8], at: usize) -> Option<u64> {
    bytes_at(b, at).map(u64::from_be_bytes)
}

/// Ogg pages and the Opus and Vorbis streams in them.
mod ogg {
    use super::{AudioError, AudioType, Duration, ratio, u16_le, u32_le, u64_le};
    use memchr::memmem;

    /// Bytes in a page header before its segment table.
    const HEADER: usize = 27;
    /// The `header_type` flag of a page that continues the previous page's last packet.
    pub const CONTINUED: u8 = 0x01;

    /// A page header whose segment table is inside the buffer.
    #[derive(Debug)]
    pub struct Page<'a> {
        /// `header_type`: continued 0x01, first 0x02, last 0x04.
        pub flags: u8,
        /// The granule position; all ones when no packet ends on the page.
        pub granule: u64,
        /// The stream serial number.
        pub serial: u32,
        /// The lacing values, one per segment.
        pub lacing: &'a [u8],
    }

    impl Page<'_> {
        /// The page's size, header and body.
        pub fn len(&self) -> usize {
            HEADER + self.lacing.len() + self.body_len()
        }

        fn body_len(&self) -> usize {
            self.lacing.iter().map(|&v| usize::from(v)).sum()
        }
    }

    /// The page header at `at`: capture pattern, version 0, segment table inside `b`.
    pub fn header(b: &[u8], at: usize) -> Option<Page<'_>> {
        let head = b.get(at..at.checked_add(HEADER)?)?;
        if !head.starts_with(b"OggS") || head.get(4) != Some(&0) {
            return None;
        }
        let count = usize::from(*head.get(26)?);
        let table = at + HEADER;
        Some(Page {
            flags: *head.get(5)?,
            granule: u64_le(head, 6)?,
            serial: u32_le(head, 14)?,
            lacing: b.get(table..table + count)?,
        })
    }

    /// The whole page at `at`, its body inside `b` too, with the body.
    pub fn page(b: &[u8], at: usize) -> Option<(Page<'_>, &[u8])> {
        let page = header(b, at)?;
        let body_start = at + HEADER + page.lacing.len();
        let body = b.get(body_start..body_start + page.body_len())?;
        Some((page, body))
    }

    /// An Ogg stream's codec and clock, from its first packet.
    pub struct Stream {
        pub kind: AudioType,
        pub serial: u32,
        /// Granule units per second.
        pub rate: u64,
        /// Granules before the first real sample (Opus pre-skip).
        pub skip: u64,
    }

    /// The stream of the file's first page: [`AudioError::Unsupported`] when it is not Ogg or
    /// its codec is neither Opus nor Vorbis.
    pub fn stream(b: &[u8]) -> Result<Stream, AudioError> {
        if !b.starts_with(b"OggS") {
            return Err(AudioError::Unsupported);
        }
        let (page, body) = page(b, 0).ok_or(AudioError::Damaged)?;
        // The first packet runs to the first lacing value under 255.
        let end = page
            .lacing
            .iter()
            .position(|&v| v < 255)
            .map_or(body.len(), |last| {
                page.lacing
                    .iter()
                    .take(last + 1)
                    .map(|&v| usize::from(v))
                    .sum()
            });
        let packet = body.get(..end).ok_or(AudioError::Damaged)?;
        if packet.starts_with(b"OpusHead") {
            let skip = u16_le(packet, 10).ok_or(AudioError::Damaged)?;
            Ok(Stream {
                kind: AudioType::OggOpus,
                serial: page.serial,
                rate: 48_000,
                skip: u64::from(skip),
            })
        } else if packet.starts_with(b"\x01vorbis") {
            let rate = u32_le(packet, 12).ok_or(AudioError::Damaged)?;
            if rate == 0 {
                return Err(AudioError::Damaged);
            }
            Ok(Stream {
                kind: AudioType::OggVorbis,
                serial: page.serial,
                rate: u64::from(rate),
                skip: 0,
            })
        } else {
            Err(AudioError::Unsupported)
        }
    }

    /// The granule position of the last page of stream `serial` that has one, scanning back
    /// from the end.
    pub fn last_granule(b: &[u8], serial: u32) -> Option<u64> {
        let finder = memmem::FinderRev::new(b"OggS");
        let mut end = b.len();
        // Each candidate starts before `end`, so `end` shrinks every time round.
        while let Some(at) = b.get(..end).and_then(|h| finder.rfind(h)) {
            if let Some(page) = header(b, at)
                && page.serial == serial
                && page.granule != u64::MAX
            {
                return Some(page.granule);
            }
            end = at;
        }
        None
    }

    /// The duration of an Ogg file of type `t`.
    pub fn duration(b: &[u8], t: AudioType) -> Result<Duration, AudioError> {
        let s = stream(b)?;
        if s.kind != t {
            return Err(AudioError::Unsupported);
        }
        let granule = last_granule(b, s.serial).ok_or(AudioError::NoDuration)?;
        ratio(u128::from(granule.saturating_sub(s.skip)), s.rate)
    }

    /// Calls `f` with the size of each of stream `serial`'s packets, in order, header packets
    /// included. A packet whose start or end is missing (a damaged page, the end of the file)
    /// is left out.
    pub fn for_each_packet(b: &[u8], serial: u32, mut f: impl FnMut(usize)) {
        let finder = memmem::Finder::new(b"OggS");
        let mut open = None;
        let mut at = 0;
        loop {
            match page(b, at) {
                Some((page, _)) => {
                    if page.serial == serial {
                        open = page_packets(&page, open, &mut f);
                    }
                    at += page.len();
                }
                // Not a page here: look for the next capture pattern after it.
                None => match b.get(at + 1..).and_then(|rest| finder.find(rest)) {
                    Some(skip) => at += 1 + skip,
                    None => break,
                },
            }
        }
    }

    /// Calls `f` with the size of each packet ending on `page`; `open` is the size so far of
    /// a packet the previous page left unfinished. Returns this page's unfinished packet.
    fn page_packets(
        page: &Page<'_>,
        open: Option<usize>,
        f: &mut impl FnMut(usize),
    ) -> Option<usize> {
        let continued = page.flags & CONTINUED != 0;
        let mut current = if continued { open } else { None };
        // A continued packet whose start was not seen: skip its remaining segments.
        let mut orphan = continued && open.is_none();
        for &v in page.lacing {
            if orphan {
                orphan = v == 255;
                continue;
            }
            let size = current.unwrap_or(0).saturating_add(usize::from(v));
            if v < 255 {
                f(size);
                current = None;
            } else {
                current = Some(size);
            }
        }
        current
    }
}

/// MPEG audio Layer III frames, ID3v2 tags, Xing and VBRI headers.
mod mp3 {
    use super::{AudioError, Duration, bytes_at, ratio, u32_be};

    const BITRATES_V1: [u32; 16] = [
        0, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 0,
    ];
    const BITRATES_V2: [u32; 16] = [
        0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160, 0,
    ];
    const SAMPLE_RATES: [u32; 3] = [44_100, 48_000, 32_000];

    /// A Layer III frame header.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct Frame {
        /// MPEG-1 (else 2 or 2.5).
        pub mpeg1: bool,
        /// One channel.
        pub mono: bool,
        /// Bits per second.
        pub bitrate: u32,
        /// Samples per second.
        pub sample_rate: u32,
        /// The frame's size in bytes, header included.
        pub len: usize,
    }

    impl Frame {
        /// The header `h`, if it is a valid Layer III one.
        pub fn parse(h: [u8; 4]) -> Option<Frame> {
            let [b0, b1, b2, b3] = h;
            let version = (b1 >> 3) & 3;
            let layer = (b1 >> 1) & 3;
            if b0 != 0xFF || b1 & 0xE0 != 0xE0 || version == 1 || layer != 1 || b3 & 3 == 2 {
                return None;
            }
            let mpeg1 = version == 3;
            let table = if mpeg1 { &BITRATES_V1 } else { &BITRATES_V2 };
            let kbps = *table.get(usize::from(b2 >> 4))?;
            let base = *SAMPLE_RATES.get(usize::from((b2 >> 2) & 3))?;
            if kbps == 0 {
                return None;
            }
            let sample_rate = match version {
                3 => base,
                2 => base / 2,
                _ => base / 4,
            };
            let bitrate = kbps * 1000;
            let per_frame = if mpeg1 { 144 } else { 72 };
            let len = (per_frame * bitrate / sample_rate) as usize + usize::from((b2 >> 1) & 1);
            Some(Frame {
                mpeg1,
                mono: b3 >> 6 == 3,
                bitrate,
                sample_rate,
                len,
            })
        }

        /// Samples each frame holds.
        pub fn samples(self) -> u32 {
            if self.mpeg1 { 1152 } else { 576 }
        }

        /// Bytes of side information after the header (where a Xing tag starts).
        fn side_info(self) -> usize {
            match (self.mpeg1, self.mono) {
                (true, false) => 32,
                (true, true) | (false, false) => 17,
                (false, true) => 9,
            }
        }
    }

    /// Where the audio starts: after an ID3v2 tag, if any.
    pub fn audio_start(b: &[u8]) -> Option<usize> {
        if !b.starts_with(b"ID3") {
            return Some(0);
        }
        let size = bytes_at::<4>(b, 6)?
            .iter()
            .fold(0usize, |n, &byte| (n << 7) | usize::from(byte & 0x7F));
        let footer = if b.get(5)? & 0x10 != 0 { 10 } else { 0 };
        Some(10 + size + footer)
    }

    /// The first frame (at the start of the audio) and where it is.
    pub fn first_frame(b: &[u8]) -> Option<(usize, Frame)> {
        let start = audio_start(b)?;
        Some((start, Frame::parse(bytes_at(b, start)?)?))
    }

    /// A first frame followed by a like frame (or an ID3v1 tag), or by the end of the file.
    pub fn is_mp3(b: &[u8]) -> bool {
        let Some((start, first)) = first_frame(b) else {
            return false;
        };
        let next = start + first.len;
        match bytes_at::<4>(b, next) {
            None => true,
            Some(h) if h.starts_with(b"TAG") => true,
            Some(h) => Frame::parse(h)
                .is_some_and(|f| f.mpeg1 == first.mpeg1 && f.sample_rate == first.sample_rate),
        }
    }

    /// The frame count of a `Xing`/`Info` tag in the first frame (at `start`).
    fn xing_frames(b: &[u8], start: usize, first: Frame) -> Option<u32> {
        let at = start + 4 + first.side_info();
        let tag = bytes_at::<4>(b, at)?;
        if &tag != b"Xing" && &tag != b"Info" {
            return None;
        }
        let flags = u32_be(b, at + 4)?;
        if flags & 1 == 0 {
            return None;
        }
        u32_be(b, at + 8)
    }

    /// The frame count of a `VBRI` tag in the first frame (at `start`).
    fn vbri_frames(b: &[u8], start: usize) -> Option<u32> {
        let at = start + 36;
        if &bytes_at::<4>(b, at)? != b"VBRI" {
            return None;
        }
        u32_be(b, at + 14)
    }

    /// The duration: frames × samples per frame from a VBR tag, else bytes over bitrate.
    pub fn duration(b: &[u8]) -> Result<Duration, AudioError> {
        let Some((start, first)) = first_frame(b) else {
            let looks_mp3 = b.starts_with(b"ID3") || b.first() == Some(&0xFF);
            return Err(if looks_mp3 {
                AudioError::Damaged
            } else {
                AudioError::Unsupported
            });
        };
        if let Some(frames) = xing_frames(b, start, first).or_else(|| vbri_frames(b, start)) {
            let samples = u128::from(frames) * u128::from(first.samples());
            return ratio(samples, u64::from(first.sample_rate));
        }
        let end = match b.len().checked_sub(128) {
            Some(tag) if tag >= start && b.get(tag..).is_some_and(|t| t.starts_with(b"TAG")) => tag,
            _ => b.len(),
        };
        let bits = (end.saturating_sub(start) as u128) * 8;
        ratio(bits, u64::from(first.bitrate))
    }
}

/// MP4 (ISO base media file format) boxes.
mod mp4 {
    use super::{AudioError, Duration, bytes_at, ratio, u32_be, u64_be};

    /// A box: its type, where its content starts and where it ends.
    #[derive(Debug)]
    pub struct Mp4Box {
        pub kind: [u8; 4],
        pub body: usize,
        pub end: usize,
    }

    /// Brands of ISO files that are pictures (HEIF, AVIF) or QuickTime movies: never audio
    /// for the transcription service.
    const NOT_AUDIO_BRANDS: [&[u8; 4]; 11] = [
        b"heic", b"heix", b"hevc", b"hevx", b"heim", b"heis", b"mif1", b"msf1", b"avif", b"avis",
        b"qt  ",
    ];

    /// Starts with an `ftyp` box whose major brand is not a picture's or a QuickTime movie's
    /// (audio or an MP4 video: see the module header).
    pub fn is_mp4(b: &[u8]) -> bool {
        b.get(4..8) == Some(b"ftyp")
            && b.get(8..12)
                .is_some_and(|brand| !NOT_AUDIO_BRANDS.iter().any(|n| &n[..] == brand))
    }

    /// The box at `at`, which must end by `end`.
    pub fn read_box(b: &[u8], at: usize, end: usize) -> Result<Mp4Box, AudioError> {
        let damaged = AudioError::Damaged;
        if at.checked_add(8).is_none_or(|h| h > end) {
            return Err(damaged);
        }
        let size = u32_be(b, at).ok_or(AudioError::Damaged)?;
        let kind = bytes_at::<4>(b, at + 4).ok_or(AudioError::Damaged)?;
        let (len, header): (u64, usize) = match size {
            0 => ((end - at) as u64, 8),
            1 => (u64_be(b, at + 8).ok_or(AudioError::Damaged)?, 16),
            n => (u64::from(n), 8),
        };
        let box_end = (at as u64).checked_add(len).ok_or(AudioError::Damaged)?;
        if len < header as u64 || box_end > end as u64 {
            return Err(damaged);
        }
        Ok(Mp4Box {
            kind,
            body: at + header,
            end: box_end as usize,
        })
    }

    /// The first box of type `kind` among the boxes from `start` to `end`.
    pub fn find(
        b: &[u8],
        start: usize,
        end: usize,
        kind: &[u8; 4],
    ) -> Result<Option<Mp4Box>, AudioError> {
        let mut at = start;
        // Every box is at least 8 bytes long, so `at` grows every time round.
        while at < end {
            let found = read_box(b, at, end)?;
            if &found.kind == kind {
                return Ok(Some(found));
            }
            at = found.end;
        }
        Ok(None)
    }

    /// The duration from `moov`/`mvhd`; a fragmented file's (duration 0) from `mvex`/`mehd`.
    pub fn duration(b: &[u8]) -> Result<Duration, AudioError> {
        if !is_mp4(b) {
            return Err(AudioError::Unsupported);
        }
        let moov = find(b, 0, b.len(), b"moov")?.ok_or(AudioError::NoDuration)?;
        let mvhd = find(b, moov.body, moov.end, b"mvhd")?.ok_or(AudioError::NoDuration)?;
        let body = b.get(mvhd.body..mvhd.end).ok_or(AudioError::Damaged)?;
        let (scale, length) = match body.first() {
            Some(0) => (
                u32_be(body, 12),
                u32_be(body, 16).map(|d| if d == u32::MAX { u64::MAX } else { d.into() }),
            ),
            Some(1) => (u32_be(body, 20), u64_be(body, 24)),
            _ => (None, None),
        };
        let scale = scale.ok_or(AudioError::Damaged)?;
        let mut length = length.ok_or(AudioError::Damaged)?;
        if length == 0 {
            length = fragmented_length(b, &moov)?;
        }
        if length == u64::MAX {
            return Err(AudioError::NoDuration);
        }
        ratio(u128::from(length), u64::from(scale))
    }

    /// `mvex`/`mehd`'s fragment duration, in the movie's timescale.
    fn fragmented_length(b: &[u8], moov: &Mp4Box) -> Result<u64, AudioError> {
        let mvex = find(b, moov.body, moov.end, b"mvex")?.ok_or(AudioError::NoDuration)?;
        let mehd = find(b, mvex.body, mvex.end, b"mehd")?.ok_or(AudioError::NoDuration)?;
        let body = b.get(mehd.body..mehd.end).ok_or(AudioError::Damaged)?;
        let length = match body.first() {
            Some(0) => u32_be(body, 4).map(u64::from),
            Some(1) => u64_be(body, 4),
            _ => None,
        };
        match length.ok_or(AudioError::Damaged)? {
            0 => Err(AudioError::NoDuration),
            n => Ok(n),
        }
    }
}

/// RIFF WAVE chunks.
mod wav {
    use super::{AudioError, Duration, bytes_at, ratio, u32_le};

    /// `RIFF`, a size, `WAVE`.
    pub fn is_wav(b: &[u8]) -> bool {
        b.starts_with(b"RIFF") && b.get(8..12) == Some(b"WAVE")
    }

    /// The `data` chunk's size over the `fmt ` chunk's byte rate.
    pub fn duration(b: &[u8]) -> Result<Duration, AudioError> {
        if !is_wav(b) {
            return Err(AudioError::Unsupported);
        }
        let (mut byte_rate, mut data) = (None, None);
        let mut at = 12usize;
        // Every chunk is at least 8 bytes long, so `at` grows every time round.
        while let Some(id) = bytes_at::<4>(b, at)
            && let Some(size) = u32_le(b, at + 4)
        {
            let body = at + 8;
            let remaining = b.len().saturating_sub(body);
            match &id {
                b"fmt " if size >= 12 => {
                    byte_rate = Some(u32_le(b, body + 8).ok_or(AudioError::Damaged)?);
                }
                b"fmt " => return Err(AudioError::Damaged),
                b"data" => data = Some((size as usize).min(remaining)),
                _ => {}
            }
            if byte_rate.is_some() && data.is_some() {
                break;
            }
            let padded = (size as usize).saturating_add(size as usize & 1);
            at = body.saturating_add(padded);
        }
        match (byte_rate, data) {
            (Some(rate), Some(data)) => ratio(data as u128, u64::from(rate)),
            _ => Err(AudioError::Damaged),
        }
    }
}

/// EBML (WebM, Matroska) elements.
mod ebml {
    use super::{AudioError, Duration, ratio, seconds};

    const EBML: u32 = 0x1A45_DFA3;
    const DOC_TYPE: u32 = 0x4282;
    const SEGMENT: u32 = 0x1853_8067;
    const INFO: u32 = 0x1549_A966;
    const TIMECODE_SCALE: u32 = 0x2A_D7B1;
    const DURATION: u32 = 0x4489;
    const CLUSTER: u32 = 0x1F43_B675;
    const TIMECODE: u32 = 0xE7;
    const SIMPLE_BLOCK: u32 = 0xA3;
    const BLOCK_GROUP: u32 = 0xA0;
    const BLOCK: u32 = 0xA1;
    /// Elements that sit directly in a Segment (or above): one ends a Cluster of unknown size.
    const LEVEL_1: [u32; 10] = [
        EBML,
        SEGMENT,
        CLUSTER,
        INFO,
        0x114D_9B74, // SeekHead
        0x1654_AE6B, // Tracks
        0x1C53_BB6B, // Cues
        0x1254_C367, // Tags
        0x1043_A770, // Chapters
        0x1941_A469, // Attachments
    ];
    /// The default TimecodeScale: one tick is a millisecond.
    const DEFAULT_SCALE: u64 = 1_000_000;

    /// An EBML variable-length number at `at` with its length marker kept, and its length.
    pub fn vint(b: &[u8], at: usize) -> Option<(u64, usize)> {
        let first = *b.get(at)?;
        let len = first.leading_zeros() as usize + 1;
        if len > 8 {
            return None;
        }
        let mut value = u64::from(first);
        for i in 1..len {
            value = (value << 8) | u64::from(*b.get(at + i)?);
        }
        Some((value, len))
    }

    /// An element id at `at` (1 to 4 bytes, marker kept, as ids are written) and its length.
    pub fn read_id(b: &[u8], at: usize) -> Option<(u32, usize)> {
        let (value, len) = vint(b, at)?;
        (len <= 4).then_some((value as u32, len))
    }

    /// An element size at `at` (`None`: unknown, all value bits set) and its length.
    pub fn read_size(b: &[u8], at: usize) -> Option<(Option<u64>, usize)> {
        let (value, len) = vint(b, at)?;
        let mask = (1u64 << (7 * len)) - 1;
        let value = value & mask;
        Some(((value != mask).then_some(value), len))
    }

    /// An element: its id, where its data starts and ends, whether its size was unknown.
    #[derive(Debug)]
    pub struct Element {
        pub id: u32,
        pub data: usize,
        pub end: usize,
        pub unknown: bool,
    }

    /// The element at `at` inside a parent ending at `parent_end`. An unknown size (allowed
    /// for Segment and Cluster only) runs to the parent's end.
    pub fn element(b: &[u8], at: usize, parent_end: usize) -> Result<Element, AudioError> {
        let (id, id_len) = read_id(b, at).ok_or(AudioError::Damaged)?;
        let (size, size_len) = read_size(b, at + id_len).ok_or(AudioError::Damaged)?;
        let data = at + id_len + size_len;
        if data > parent_end {
            return Err(AudioError::Damaged);
        }
        let end = match size {
            None if id == SEGMENT || id == CLUSTER => parent_end,
            None => return Err(AudioError::Damaged),
            Some(n) => (data as u64)
                .checked_add(n)
                .filter(|&end| end <= parent_end as u64)
                .ok_or(AudioError::Damaged)? as usize,
        };
        Ok(Element {
            id,
            data,
            end,
            unknown: size.is_none(),
        })
    }

    /// An unsigned integer element's value (up to 8 bytes, big-endian).
    fn uint(b: &[u8], e: &Element) -> Result<u64, AudioError> {
        let data = b.get(e.data..e.end).ok_or(AudioError::Damaged)?;
        if data.len() > 8 {
            return Err(AudioError::Damaged);
        }
        Ok(data.iter().fold(0, |n, &byte| (n << 8) | u64::from(byte)))
    }

    /// A float element's value (4 or 8 bytes, big-endian).
    fn float(b: &[u8], e: &Element) -> Result<f64, AudioError> {
        let data = b.get(e.data..e.end).ok_or(AudioError::Damaged)?;
        if let Ok(four) = <[u8; 4]>::try_from(data) {
            Ok(f64::from(f32::from_be_bytes(four)))
        } else if let Ok(eight) = <[u8; 8]>::try_from(data) {
            Ok(f64::from_be_bytes(eight))
        } else {
            Err(AudioError::Damaged)
        }
    }

    /// Starts with an EBML header whose DocType is `webm` or `matroska`.
    pub fn is_webm(b: &[u8]) -> bool {
        let Ok(header) = element(b, 0, b.len()) else {
            return false;
        };
        if header.id != EBML {
            return false;
        }
        let mut at = header.data;
        while at < header.end {
            let Ok(e) = element(b, at, header.end) else {
                return false;
            };
            if e.id == DOC_TYPE {
                let doc = b.get(e.data..e.end).unwrap_or_default();
                let doc = doc.strip_suffix(b"\0").unwrap_or(doc);
                return doc == b"webm" || doc == b"matroska";
            }
            at = e.end;
        }
        false
    }

    /// What the Segment's children tell about its length.
    struct Timing {
        /// TimecodeScale, nanoseconds per tick.
        scale: u64,
        /// Info's Duration, in ticks.
        duration: Option<f64>,
        /// The latest block start seen, in ticks.
        last_block: Option<i128>,
    }

    /// The Segment's Info Duration, else the start of its last block.
    pub fn duration(b: &[u8]) -> Result<Duration, AudioError> {
        if !is_webm(b) {
            let magic = EBML.to_be_bytes();
            return Err(if b.starts_with(&magic) {
                AudioError::Damaged
            } else {
                AudioError::Unsupported
            });
        }
        let segment = find_segment(b)?;
        let timing = read_segment(b, &segment)?;
        if timing.scale == 0 {
            return Err(AudioError::Damaged);
        }
        if let Some(ticks) = timing.duration {
            return seconds(ticks * timing.scale as f64 / 1e9);
        }
        let ticks = timing.last_block.ok_or(AudioError::NoDuration)?.max(0) as u128;
        ratio(
            ticks.saturating_mul(u128::from(timing.scale)),
            1_000_000_000,
        )
    }

    /// The first top-level Segment.
    fn find_segment(b: &[u8]) -> Result<Element, AudioError> {
        let mut at = 0;
        while at < b.len() {
            let e = element(b, at, b.len())?;
            if e.id == SEGMENT {
                return Ok(e);
            }
            at = e.end;
        }
        Err(AudioError::NoDuration)
    }

    /// Walks the Segment's Info and Clusters, stopping at an Info with a Duration.
    fn read_segment(b: &[u8], segment: &Element) -> Result<Timing, AudioError> {
        let mut timing = Timing {
            scale: DEFAULT_SCALE,
            duration: None,
            last_block: None,
        };
        let mut at = segment.data;
        // Each step moves past at least an element header (or to a later element).
        while at < segment.end {
            let e = element(b, at, segment.end)?;
            at = match e.id {
                INFO => {
                    read_info(b, &e, &mut timing)?;
                    if timing.duration.is_some() {
                        break;
                    }
                    e.end
                }
                CLUSTER => {
                    let (last, next) = read_cluster(b, &e)?;
                    timing.last_block = timing.last_block.max(last);
                    next
                }
                _ => e.end,
            };
        }
        Ok(timing)
    }

    /// TimecodeScale and Duration from an Info element.
    fn read_info(b: &[u8], info: &Element, timing: &mut Timing) -> Result<(), AudioError> {
        let mut at = info.data;
        while at < info.end {
            let e = element(b, at, info.end)?;
            match e.id {
                TIMECODE_SCALE => timing.scale = uint(b, &e)?,
                DURATION => timing.duration = Some(float(b, &e)?),
                _ => {}
            }
            at = e.end;
        }
        Ok(())
    }

    /// The latest block start in a Cluster (in ticks), and where the next element starts: a
    /// Cluster of unknown size ends where a level-1 element begins.
    fn read_cluster(b: &[u8], cluster: &Element) -> Result<(Option<i128>, usize), AudioError> {
        let mut timecode = 0u64;
        let mut latest: Option<i16> = None;
        let mut at = cluster.data;
        while at < cluster.end {
            if cluster.unknown && read_id(b, at).is_some_and(|(id, _)| LEVEL_1.contains(&id)) {
                break;
            }
            let e = element(b, at, cluster.end)?;
            match e.id {
                TIMECODE => timecode = uint(b, &e)?,
                SIMPLE_BLOCK => latest = latest.max(Some(block_time(b, &e)?)),
                BLOCK_GROUP => latest = latest.max(group_time(b, &e)?),
                _ => {}
            }
            at = e.end;
        }
        let last = latest.map(|rel| i128::from(timecode) + i128::from(rel));
        Ok((last, at))
    }

    /// The latest Block time in a BlockGroup.
    fn group_time(b: &[u8], group: &Element) -> Result<Option<i16>, AudioError> {
        let mut latest = None;
        let mut at = group.data;
        while at < group.end {
            let e = element(b, at, group.end)?;
            if e.id == BLOCK {
                latest = latest.max(Some(block_time(b, &e)?));
            }
            at = e.end;
        }
        Ok(latest)
    }

    /// A (Simple)Block's time relative to its Cluster: after the track number, an i16.
    fn block_time(b: &[u8], block: &Element) -> Result<i16, AudioError> {
        let data = b.get(block.data..block.end).ok_or(AudioError::Damaged)?;
        let (_, track_len) = vint(data, 0).ok_or(AudioError::Damaged)?;
        super::bytes_at(data, track_len)
            .map(i16::from_be_bytes)
            .ok_or(AudioError::Damaged)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ebml_numbers_of_every_length_are_read_and_bad_ones_refused() {
        assert_eq!(ebml::vint(&[0x81], 0), Some((0x81, 1)));
        assert_eq!(ebml::vint(&[0x40, 0x02], 0), Some((0x4002, 2)));
        assert_eq!(
            ebml::read_id(&[0x1A, 0x45, 0xDF, 0xA3], 0),
            Some((0x1A45_DFA3, 4))
        );
        assert_eq!(ebml::read_size(&[0x82], 0), Some((Some(2), 1)));
        assert_eq!(ebml::read_size(&[0x40, 0x7F], 0), Some((Some(0x7F), 2)));
        // All value bits set: unknown, in every length.
        assert_eq!(ebml::read_size(&[0xFF], 0), Some((None, 1)));
        assert_eq!(
            ebml::read_size(&[0x01, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF], 0),
            Some((None, 8))
        );
        assert_eq!(
            ebml::read_size(&[0x01, 0, 0, 0, 0, 0, 1, 0], 0),
            Some((Some(256), 8))
        );
        // No marker in the first byte, an id longer than 4 bytes, cut short.
        assert_eq!(ebml::vint(&[0x00, 0xFF], 0), None);
        assert_eq!(ebml::read_id(&[0x08, 1, 2, 3, 4], 0), None);
        assert_eq!(ebml::vint(&[0x20, 1], 0), None);
        assert_eq!(ebml::vint(&[], 0), None);
    }

    #[test]
    fn ebml_elements_stay_inside_their_parent() {
        // A Timecode (E7) of 2 bytes inside a parent that ends after 3 bytes.
        let b = [0xE7, 0x82, 0x01, 0x02];
        assert!(ebml::element(&b, 0, 4).is_ok());
        assert_eq!(ebml::element(&b, 0, 3).unwrap_err(), AudioError::Damaged);
        // Unknown size only for Segment and Cluster, and then to the parent's end.
        assert_eq!(
            ebml::element(&[0xE7, 0xFF], 0, 2).unwrap_err(),
            AudioError::Damaged
        );
        let cluster = ebml::element(&[0x1F, 0x43, 0xB6, 0x75, 0xFF, 0, 0], 0, 7).unwrap();
        assert_eq!((cluster.data, cluster.end, cluster.unknown), (5, 7, true));
    }

    /// A page with no CRC (not checked here): `flags`, `granule`, `serial`, `lacing`, body.
    fn page(flags: u8, granule: u64, serial: u32, lacing: &[u8]) -> Vec<u8> {
        let mut p = b"OggS\0".to_vec();
        p.push(flags);
        p.extend_from_slice(&granule.to_le_bytes());
        p.extend_from_slice(&serial.to_le_bytes());
        p.extend_from_slice(&[0; 8]);
        p.push(lacing.len() as u8);
        p.extend_from_slice(lacing);
        let body: usize = lacing.iter().map(|&v| usize::from(v)).sum();
        p.extend(std::iter::repeat_n(7u8, body));
        p
    }

    #[test]
    fn ogg_pages_are_read_only_when_whole() {
        let p = page(0x02, 960, 9, &[255, 10, 3]);
        let (h, body) = ogg::page(&p, 0).unwrap();
        assert_eq!(
            (h.flags, h.granule, h.serial, h.len()),
            (0x02, 960, 9, 27 + 3 + 268)
        );
        assert_eq!(body.len(), 268);
        // Cut in the body: the header is still readable, the page is not.
        assert!(ogg::header(&p[..40], 0).is_some());
        assert!(ogg::page(&p[..40], 0).is_none());
        // Cut in the segment table, another version, no capture pattern.
        assert!(ogg::header(&p[..28], 0).is_none());
        let mut v1 = p.clone();
        v1[4] = 1;
        assert!(ogg::header(&v1, 0).is_none());
        assert!(ogg::header(&p, 1).is_none());
    }

    #[test]
    fn the_last_granule_is_that_of_the_first_stream_skipping_unknown_ones() {
        let mut b = page(0x02, 0, 1, &[19]);
        b.extend(page(0, 4800, 1, &[5]));
        b.extend(page(0, 9600, 2, &[5])); // another stream
        b.extend(page(0, u64::MAX, 1, &[255])); // no packet ends here
        assert_eq!(ogg::last_granule(&b, 1), Some(4800));
        assert_eq!(ogg::last_granule(&b, 2), Some(9600));
        assert_eq!(ogg::last_granule(&b, 3), None);
    }

    #[test]
    fn packets_are_put_together_across_pages() {
        let mut b = page(0x02, 0, 1, &[19]);
        b.extend(page(0, 0, 1, &[10, 255]));
        b.extend(page(ogg::CONTINUED, 0, 1, &[255, 4, 6]));
        // A continued page whose start was lost (a damaged page between).
        b.extend(b"OggS-garbage");
        b.extend(page(ogg::CONTINUED, 0, 1, &[255, 1, 8]));
        let mut sizes = Vec::new();
        ogg::for_each_packet(&b, 1, |size| sizes.push(size));
        assert_eq!(sizes, vec![19, 10, 514, 6, 8]);
    }

    #[test]
    fn mp3_frame_headers_are_read_and_bad_ones_refused() {
        // MPEG-1 Layer III, 128 kbit/s, 44.1 kHz, joint stereo, no padding.
        let f = mp3::Frame::parse([0xFF, 0xFB, 0x90, 0x40]).unwrap();
        assert!(f.mpeg1 && !f.mono);
        assert_eq!(
            (f.bitrate, f.sample_rate, f.len, f.samples()),
            (128_000, 44_100, 417, 1152)
        );
        // Padded: one byte more.
        assert_eq!(
            mp3::Frame::parse([0xFF, 0xFB, 0x92, 0x40]).unwrap().len,
            418
        );
        // MPEG-2, 64 kbit/s, 24 kHz, mono.
        let f = mp3::Frame::parse([0xFF, 0xF3, 0x84, 0xC0]).unwrap();
        assert!(!f.mpeg1 && f.mono);
        assert_eq!(
            (f.bitrate, f.sample_rate, f.len, f.samples()),
            (64_000, 24_000, 192, 576)
        );
        // MPEG-2.5, 8 kbit/s, 8 kHz.
        let f = mp3::Frame::parse([0xFF, 0xE3, 0x18, 0xC0]).unwrap();
        assert_eq!((f.bitrate, f.sample_rate, f.len), (8_000, 8_000, 72));
        for bad in [
            [0xFF, 0xFB, 0xF0, 0x40], // bitrate index 15
            [0xFF, 0xFB, 0x00, 0x40], // free format
            [0xFF, 0xFB, 0x9C, 0x40], // sample rate index 3
            [0xFF, 0xFD, 0x90, 0x40], // Layer II
            [0xFF, 0xEB, 0x90, 0x40], // reserved version
            [0xFF, 0xFB, 0x90, 0x42], // reserved emphasis
            [0xFE, 0xFB, 0x90, 0x40], // no sync
        ] {
            assert_eq!(mp3::Frame::parse(bad), None, "{bad:02x?}");
        }
    }

    #[test]
    fn id3v2_tags_are_skipped_with_their_footer() {
        assert_eq!(mp3::audio_start(b"\xFF\xFB"), Some(0));
        assert_eq!(mp3::audio_start(b"ID3\x04\0\0\0\0\x01\x7F"), Some(10 + 255));
        assert_eq!(
            mp3::audio_start(b"ID3\x04\0\x10\0\0\0\x05"),
            Some(10 + 5 + 10)
        );
        assert_eq!(mp3::audio_start(b"ID3\x04\0"), None);
    }

    #[test]
    fn durations_are_bounded() {
        assert_eq!(ratio(3, 2), Ok(Duration::from_millis(1500)));
        assert_eq!(ratio(1, 0), Err(AudioError::Damaged));
        assert_eq!(
            ratio(u128::from(MAX_SECONDS), 1),
            Ok(Duration::from_secs(MAX_SECONDS))
        );
        assert_eq!(
            ratio(u128::from(MAX_SECONDS) * 2 + 1, 2),
            Err(AudioError::Damaged)
        );
        assert_eq!(ratio(u128::MAX, 1), Err(AudioError::Damaged));
        assert_eq!(seconds(f64::NAN), Err(AudioError::Damaged));
        assert_eq!(seconds(-1.0), Err(AudioError::Damaged));
        assert_eq!(seconds(f64::INFINITY), Err(AudioError::Damaged));
        assert_eq!(seconds(2.5), Ok(Duration::from_millis(2500)));
    }

    /// The waveform of packets of `sizes`.
    fn waveform(sizes: &[usize]) -> Vec<u8> {
        let mut slices = Slices::new(sizes.len());
        for (i, &size) in sizes.iter().enumerate() {
            slices.add(i, size);
        }
        slices.scaled()
    }

    #[test]
    fn the_waveform_averages_equal_slices_and_scales_to_255() {
        assert_eq!(waveform(&[]), Vec::<u8>::new());
        assert_eq!(waveform(&[0, 0]), vec![0, 0]);
        assert_eq!(waveform(&[10, 20, 40]), vec![64, 128, 255]);
        let long: Vec<usize> = (0..512).map(|i| if i < 256 { 10 } else { 20 }).collect();
        let w = waveform(&long);
        assert_eq!(w.len(), 256);
        assert_eq!((w[0], w[127], w[128], w[255]), (128, 128, 255, 255));
        // 1000 packets in 256 slices of 3 or 4, each packet in the slice i·n/k puts it in.
        let mut slices = Slices::new(1000);
        for i in 0..1000 {
            slices.add(i, 1);
        }
        for (i, &(_, count)) in slices.sums.iter().enumerate() {
            assert_eq!(
                count as usize,
                (i + 1) * 1000 / 256 - i * 1000 / 256,
                "slice {i}"
            );
        }
    }
}
