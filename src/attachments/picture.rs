//! A picture made ready for the model: decoded (which proves the bytes are the image they
//! claim to be), turned upright by its EXIF orientation, and downscaled when it has more than
//! `attachments.maxImagePixels` pixels so a phone photo does not fill the model's context.
//! Pictures that need neither are sent as the original bytes.
//!
//! Blocking CPU work (a 12-megapixel JPEG takes tens of milliseconds): callers run it in
//! `spawn_blocking`, a few at a time across the daemon (`slots.rs`). Memory stays within one
//! budget per picture (512 MiB): decoding is bounded by [`image::Limits`], so a small file that
//! claims huge dimensions (a decompression bomb) fails instead of allocating gigabytes; the
//! picture is downscaled *before* it is turned upright, so turning never copies the full-size
//! picture; and a picture whose decoded copy plus what is made from it would not fit the budget
//! (a large one turned without downscaling) is refused before it is decoded.

use std::io::Cursor;

use base64::Engine;
use image::codecs::jpeg::JpegEncoder;
use image::metadata::Orientation;
use image::{DynamicImage, ImageDecoder, ImageReader, Limits};

use super::kind::ImageType;

/// Longest side decoded.
const MAX_SIDE: u32 = 16_384;
/// Most memory a decoder may allocate.
const MAX_ALLOC: u64 = 512 * 1024 * 1024;
/// Quality of a re-encoded JPEG.
const JPEG_QUALITY: u8 = 85;

/// A picture as it goes to the model.
#[derive(Clone, PartialEq, Eq)]
pub struct Picture {
    /// Width and height of the original, upright.
    pub original: (u32, u32),
    /// Width and height of what is sent.
    pub sent: (u32, u32),
    /// MIME type of what is sent.
    pub mime: &'static str,
    /// What is sent, base64.
    pub base64: String,
}

impl std::fmt::Debug for Picture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Picture")
            .field("original", &self.original)
            .field("sent", &self.sent)
            .field("mime", &self.mime)
            .field("base64_bytes", &self.base64.len())
            .finish()
    }
}

impl Picture {
    /// Whether it was made smaller.
    pub fn downscaled(&self) -> bool {
        self.sent != self.original
    }

    /// About what the model is charged for it (providers count roughly one token per 750
    /// pixels), for the warm agent's context estimate.
    pub fn estimated_tokens(&self) -> usize {
        usize::try_from(u64::from(self.sent.0) * u64::from(self.sent.1) / 750).unwrap_or(usize::MAX)
    }
}

/// Why a picture cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum PictureError {
    /// The bytes do not decode (damaged, truncated, not this format, over the decoder's limits).
    #[error("the picture could not be read: {0}")]
    Unreadable(String),
    /// Its decoded copy and what is made from it would take more than the budget.
    #[error("the picture needs {needed} bytes to prepare, more than the {budget} allowed")]
    OverBudget {
        /// Bytes the decoded picture and its downscaled or turned copy take together.
        needed: u64,
        /// The budget, bytes.
        budget: u64,
    },
}

/// Decodes `bytes` as `kind` and prepares what the model gets, within 512 MiB.
pub fn prepare(bytes: &[u8], kind: ImageType, max_pixels: u64) -> Result<Picture, PictureError> {
    prepare_within(bytes, kind, max_pixels, MAX_ALLOC)
}

/// [`prepare`] with a memory budget of `budget` bytes for the decoder and for the pictures held
/// at once (the decoded one and its downscaled or turned copy).
pub fn prepare_within(
    bytes: &[u8],
    kind: ImageType,
    max_pixels: u64,
    budget: u64,
) -> Result<Picture, PictureError> {
    let err = |e: image::ImageError| PictureError::Unreadable(e.to_string());
    let mut reader = ImageReader::with_format(Cursor::new(bytes), kind.format());
    let mut limits = Limits::default();
    limits.max_image_width = Some(MAX_SIDE);
    limits.max_image_height = Some(MAX_SIDE);
    limits.max_alloc = Some(budget);
    reader.limits(limits);
    let mut decoder = reader.into_decoder().map_err(err)?;
    let orientation = decoder.orientation().unwrap_or(Orientation::NoTransforms);
    let plan = Plan::new(
        decoder.dimensions(),
        u64::from(decoder.color_type().bytes_per_pixel()),
        orientation,
        max_pixels,
    );
    if plan.peak_bytes() > budget {
        return Err(PictureError::OverBudget {
            needed: plan.peak_bytes(),
            budget,
        });
    }
    let mut img = DynamicImage::from_decoder(decoder).map_err(err)?;
    if !plan.downscales() && orientation == Orientation::NoTransforms {
        return Ok(Picture {
            original: plan.upright,
            sent: plan.upright,
            mime: kind.mime(),
            base64: base64::engine::general_purpose::STANDARD.encode(bytes),
        });
    }
    if plan.downscales() {
        let (w, h) = plan.stored(plan.sent);
        // Area averaging on integers: several times faster than a separable filter on a
        // phone photo and as good for a reduction of this size (`benches/attachments.rs`).
        // The full-size picture is dropped here, before it is turned.
        img = img.thumbnail_exact(w, h);
    }
    img.apply_orientation(orientation);
    let sent = (img.width(), img.height());
    let mut out = Vec::new();
    let mime = if img.color().has_alpha() {
        img.write_to(&mut Cursor::new(&mut out), image::ImageFormat::Png)
            .map_err(err)?;
        ImageType::Png.mime()
    } else {
        JpegEncoder::new_with_quality(&mut out, JPEG_QUALITY)
            .encode_image(&img.into_rgb8())
            .map_err(err)?;
        ImageType::Jpeg.mime()
    };
    Ok(Picture {
        original: plan.upright,
        sent,
        mime,
        base64: base64::engine::general_purpose::STANDARD.encode(&out),
    })
}

/// What preparing one picture will make, known from its header before it is decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Plan {
    /// Width and height as stored.
    stored: (u32, u32),
    /// Width and height upright.
    upright: (u32, u32),
    /// Width and height sent, upright.
    sent: (u32, u32),
    /// Bytes per decoded pixel.
    pixel_bytes: u64,
    /// Whether turning it upright swaps width and height (a copy, not in place).
    turns: bool,
}

impl Plan {
    fn new(
        stored: (u32, u32),
        pixel_bytes: u64,
        orientation: Orientation,
        max_pixels: u64,
    ) -> Plan {
        let turns = matches!(
            orientation,
            Orientation::Rotate90
                | Orientation::Rotate270
                | Orientation::Rotate90FlipH
                | Orientation::Rotate270FlipH
        );
        let upright = if turns { (stored.1, stored.0) } else { stored };
        let sent = if area(upright) > max_pixels {
            fit(upright, max_pixels)
        } else {
            upright
        };
        Plan {
            stored,
            upright,
            sent,
            pixel_bytes,
            turns,
        }
    }

    fn downscales(&self) -> bool {
        self.sent != self.upright
    }

    /// `size` (upright) as stored, i.e. before turning.
    fn stored(&self, (w, h): (u32, u32)) -> (u32, u32) {
        if self.turns { (h, w) } else { (w, h) }
    }

    /// The most bytes of pictures held at once: the decoded picture with its downscaled copy,
    /// or, turned without downscaling, with its turned copy.
    fn peak_bytes(&self) -> u64 {
        let decoded = area(self.stored) * self.pixel_bytes;
        let copy = if self.downscales() {
            area(self.sent) * self.pixel_bytes
        } else if self.turns {
            decoded
        } else {
            0
        };
        decoded.saturating_add(copy)
    }
}

fn area((w, h): (u32, u32)) -> u64 {
    u64::from(w) * u64::from(h)
}

/// The largest size with `(w, h)`'s aspect ratio and at most `max_pixels` pixels (each side at
/// least 1).
fn fit((w, h): (u32, u32), max_pixels: u64) -> (u32, u32) {
    let scale = (max_pixels as f64 / (f64::from(w) * f64::from(h))).sqrt();
    let side = |s: u32| ((f64::from(s) * scale).floor() as u32).clamp(1, s);
    let (mut nw, mut nh) = (side(w), side(h));
    while u64::from(nw) * u64::from(nh) > max_pixels && (nw > 1 || nh > 1) {
        if nw >= nh {
            nw -= 1;
        } else {
            nh -= 1;
        }
    }
    (nw, nh)
}

#[cfg(test)]
mod tests {
    use super::*;
    use image::{Rgb, RgbImage, Rgba, RgbaImage};

    fn encoded(img: DynamicImage, format: image::ImageFormat) -> Vec<u8> {
        let mut out = Vec::new();
        img.write_to(&mut Cursor::new(&mut out), format).unwrap();
        out
    }

    fn decode(base64_data: &str) -> DynamicImage {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(base64_data)
            .unwrap();
        image::load_from_memory(&bytes).unwrap()
    }

    #[test]
    fn a_small_picture_goes_as_its_own_bytes() {
        let png = encoded(
            DynamicImage::ImageRgb8(RgbImage::from_pixel(40, 30, Rgb([200, 10, 10]))),
            image::ImageFormat::Png,
        );
        let p = prepare(&png, ImageType::Png, 10_000).unwrap();
        assert_eq!(
            (p.original, p.sent, p.mime),
            ((40, 30), (40, 30), "image/png")
        );
        assert!(!p.downscaled());
        assert_eq!(
            base64::engine::general_purpose::STANDARD
                .decode(&p.base64)
                .unwrap(),
            png
        );
    }

    #[test]
    fn a_large_photo_is_downscaled_to_the_pixel_cap_keeping_its_aspect() {
        let jpeg = encoded(
            DynamicImage::ImageRgb8(RgbImage::from_pixel(1600, 1200, Rgb([10, 120, 200]))),
            image::ImageFormat::Jpeg,
        );
        let p = prepare(&jpeg, ImageType::Jpeg, 120_000).unwrap();
        assert_eq!(p.original, (1600, 1200));
        assert!(u64::from(p.sent.0) * u64::from(p.sent.1) <= 120_000);
        assert_eq!((p.sent.0, p.sent.1), (400, 300));
        assert_eq!(p.mime, "image/jpeg");
        let back = decode(&p.base64);
        assert_eq!((back.width(), back.height()), (400, 300));
    }

    #[test]
    fn transparency_survives_downscaling_as_png() {
        let png = encoded(
            DynamicImage::ImageRgba8(RgbaImage::from_pixel(300, 300, Rgba([0, 0, 0, 0]))),
            image::ImageFormat::Png,
        );
        let p = prepare(&png, ImageType::Png, 10_000).unwrap();
        assert_eq!(p.mime, "image/png");
        assert!(decode(&p.base64).color().has_alpha());
    }

    #[test]
    fn truncated_or_lying_bytes_and_decompression_bombs_fail_cleanly() {
        let png = encoded(
            DynamicImage::ImageRgb8(RgbImage::from_pixel(64, 64, Rgb([1, 2, 3]))),
            image::ImageFormat::Png,
        );
        assert!(prepare(&png[..png.len() / 2], ImageType::Png, 1_000_000).is_err());
        assert!(prepare(b"\xFF\xD8\xFF not really", ImageType::Jpeg, 1_000_000).is_err());
        // A PNG header claiming 100 000 × 100 000 pixels.
        let mut bomb = png[..16].to_vec();
        bomb.extend_from_slice(&100_000u32.to_be_bytes());
        bomb.extend_from_slice(&100_000u32.to_be_bytes());
        bomb.extend_from_slice(&png[24..]);
        assert!(prepare(&bomb, ImageType::Png, 1_000_000).is_err());
    }

    #[test]
    fn a_turned_picture_is_planned_as_one_decoded_copy_plus_the_small_one() {
        let plan = Plan::new((4000, 3000), 3, Orientation::Rotate90, 1_200_000);
        assert_eq!(plan.upright, (3000, 4000));
        assert!(plan.downscales());
        assert_eq!(plan.sent, fit((3000, 4000), 1_200_000));
        assert_eq!(plan.stored(plan.sent), (plan.sent.1, plan.sent.0));
        let small = area(plan.sent) * 3;
        assert_eq!(plan.peak_bytes(), 36_000_000 + small);
        // Turned without downscaling, the turn copies the whole picture.
        let whole = Plan::new((4000, 3000), 3, Orientation::Rotate270FlipH, 20_000_000);
        assert!(!whole.downscales());
        assert_eq!(whole.peak_bytes(), 72_000_000);
        // Flipped or turned half-way happens in place.
        let flipped = Plan::new((4000, 3000), 3, Orientation::Rotate180, 20_000_000);
        assert_eq!(flipped.peak_bytes(), 36_000_000);
    }

    #[test]
    fn a_picture_over_the_budget_is_refused_before_decoding() {
        let png = encoded(
            DynamicImage::ImageRgb8(RgbImage::from_pixel(100, 100, Rgb([1, 2, 3]))),
            image::ImageFormat::Png,
        );
        assert!(prepare_within(&png, ImageType::Png, 1_000_000, 40_000).is_ok());
        assert!(matches!(
            prepare_within(&png, ImageType::Png, 1_000_000, 20_000),
            Err(PictureError::OverBudget {
                needed: 30_000,
                budget: 20_000
            })
        ));
    }

    #[test]
    fn fit_never_exceeds_the_cap() {
        for (w, h, cap) in [
            (4032, 3024, 1_200_000),
            (1, 100_000, 500),
            (7, 3, 20),
            (16_000, 9_000, 1_200_000),
        ] {
            let (nw, nh) = fit((w, h), cap);
            assert!(u64::from(nw) * u64::from(nh) <= cap, "{w}x{h} -> {nw}x{nh}");
            assert!(nw >= 1 && nh >= 1);
        }
    }
}
