//! Pictures built for attachment tests, and the process's peak memory to measure what
//! preparing one costs.

use image::codecs::png::{CompressionType, FilterType, PngEncoder};
use image::{ExtendedColorType, ImageEncoder};

/// An EXIF block (big-endian TIFF) holding only `orientation` (1–8; 6 = turn 90° clockwise).
pub fn exif_orientation(orientation: u16) -> Vec<u8> {
    let mut exif = b"MM\0\x2a\0\0\0\x08".to_vec();
    exif.extend_from_slice(&1u16.to_be_bytes());
    exif.extend_from_slice(&0x0112u16.to_be_bytes());
    exif.extend_from_slice(&3u16.to_be_bytes());
    exif.extend_from_slice(&1u32.to_be_bytes());
    exif.extend_from_slice(&orientation.to_be_bytes());
    exif.extend_from_slice(&[0, 0, 0, 0, 0, 0]);
    exif
}

/// A one-colour RGB PNG of `w`×`h` pixels with EXIF `orientation`: large when decoded, a few
/// kilobytes as a file.
pub fn flat_png_with_orientation(w: u32, h: u32, orientation: u16) -> Vec<u8> {
    rgb_png_with_orientation(&vec![90u8; w as usize * h as usize * 3], w, h, orientation)
}

/// An RGB PNG of `w`×`h` `pixels` (row by row, 3 bytes each) with EXIF `orientation`.
pub fn rgb_png_with_orientation(pixels: &[u8], w: u32, h: u32, orientation: u16) -> Vec<u8> {
    let mut out = Vec::new();
    let mut encoder =
        PngEncoder::new_with_quality(&mut out, CompressionType::Default, FilterType::NoFilter);
    encoder
        .set_exif_metadata(exif_orientation(orientation))
        .expect("PNG takes EXIF");
    encoder
        .write_image(pixels, w, h, ExtendedColorType::Rgb8)
        .expect("encode the PNG");
    out
}

/// A `kB` field of `/proc/self/status` (`VmHWM`, `VmRSS`), in bytes.
pub fn status_bytes(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|rest| {
            rest.trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<u64>()
                .ok()
        })
        .map(|kb| kb * 1024)
        .unwrap_or_else(|| panic!("no {field} in /proc/self/status"))
}

/// How far this process's resident memory peaked above where it stood when `work` began.
/// The peak (`VmHWM`) is reset to the current size first (`/proc/self/clear_refs`, 5).
pub fn peak_growth<T>(work: impl FnOnce() -> T) -> (T, u64) {
    std::fs::write("/proc/self/clear_refs", "5").expect("reset the peak RSS");
    let before = status_bytes("VmRSS");
    let value = work();
    (value, status_bytes("VmHWM").saturating_sub(before))
}
