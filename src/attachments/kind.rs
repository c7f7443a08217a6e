//! What a downloaded file is, decided from its bytes: the platform's MIME type and the file
//! name are what the sender claims, so they only choose between readings the bytes allow.
//!
//! * **Images** are PNG, JPEG, GIF and WebP, told by their signatures. A file that claims one
//!   of those types but has none of the signatures is a lie ([`Kind::Mislabelled`]) and is not
//!   kept; other image types (HEIC, SVG, BMP) are ordinary files the agent can still read.
//! * **Audio** is Ogg (Opus or Vorbis), MP3, M4A, WAV and WebM, told by their containers
//!   (`crate::audio`); audio in other formats is an ordinary file.
//! * **Text** is valid UTF-8 without NUL bytes whose claimed type or extension is a text one
//!   (or that claims nothing at all).

/// A picture format the model can take as an image block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImageType {
    /// `image/png`.
    Png,
    /// `image/jpeg`.
    Jpeg,
    /// `image/gif`.
    Gif,
    /// `image/webp`.
    Webp,
}

impl ImageType {
    /// The MIME type.
    pub fn mime(self) -> &'static str {
        match self {
            ImageType::Png => "image/png",
            ImageType::Jpeg => "image/jpeg",
            ImageType::Gif => "image/gif",
            ImageType::Webp => "image/webp",
        }
    }

    /// The decoder's format.
    pub fn format(self) -> image::ImageFormat {
        match self {
            ImageType::Png => image::ImageFormat::Png,
            ImageType::Jpeg => image::ImageFormat::Jpeg,
            ImageType::Gif => image::ImageFormat::Gif,
            ImageType::Webp => image::ImageFormat::WebP,
        }
    }

    /// The format of `bytes`, from its signature.
    pub fn sniff(bytes: &[u8]) -> Option<ImageType> {
        if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
            Some(ImageType::Png)
        } else if bytes.starts_with(&[0xFF, 0xD8, 0xFF]) {
            Some(ImageType::Jpeg)
        } else if bytes.starts_with(b"GIF87a") || bytes.starts_with(b"GIF89a") {
            Some(ImageType::Gif)
        } else if bytes.len() >= 12 && &bytes[..4] == b"RIFF" && &bytes[8..12] == b"WEBP" {
            Some(ImageType::Webp)
        } else {
            None
        }
    }

    /// The format a MIME type names (parameters ignored).
    fn of_mime(mime: &str) -> Option<ImageType> {
        match mime {
            "image/png" => Some(ImageType::Png),
            "image/jpeg" | "image/jpg" | "image/pjpeg" => Some(ImageType::Jpeg),
            "image/gif" => Some(ImageType::Gif),
            "image/webp" => Some(ImageType::Webp),
            _ => None,
        }
    }

    /// The format a file extension names.
    fn of_extension(ext: &str) -> Option<ImageType> {
        match ext {
            "png" => Some(ImageType::Png),
            "jpg" | "jpeg" | "jfif" => Some(ImageType::Jpeg),
            "gif" => Some(ImageType::Gif),
            "webp" => Some(ImageType::Webp),
            _ => None,
        }
    }
}

/// What a downloaded file turned out to be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// A picture of a supported format (whatever it claimed to be).
    Image(ImageType),
    /// Audio of a format the transcription service takes (whatever it claimed to be).
    Audio(crate::audio::AudioType),
    /// UTF-8 text.
    Text(String),
    /// It claims to be a supported picture format but its bytes are not one.
    Mislabelled {
        /// What it claimed (MIME type or extension).
        claimed: String,
    },
    /// Anything else: kept as a file.
    Other,
}

/// Extensions of text formats worth showing inline.
const TEXT_EXTENSIONS: &[&str] = &[
    "txt",
    "md",
    "markdown",
    "rst",
    "org",
    "csv",
    "tsv",
    "json",
    "jsonl",
    "ndjson",
    "yaml",
    "yml",
    "toml",
    "ini",
    "cfg",
    "conf",
    "xml",
    "html",
    "htm",
    "css",
    "scss",
    "js",
    "mjs",
    "cjs",
    "ts",
    "tsx",
    "jsx",
    "rs",
    "py",
    "rb",
    "go",
    "java",
    "kt",
    "kts",
    "swift",
    "c",
    "h",
    "cc",
    "cpp",
    "hpp",
    "cs",
    "php",
    "pl",
    "lua",
    "sh",
    "bash",
    "zsh",
    "fish",
    "ps1",
    "sql",
    "r",
    "jl",
    "hs",
    "ml",
    "ex",
    "exs",
    "erl",
    "clj",
    "scala",
    "dart",
    "vue",
    "svelte",
    "tex",
    "bib",
    "log",
    "diff",
    "patch",
    "srt",
    "vtt",
    "env",
    "gitignore",
    "dockerfile",
    "makefile",
    "cmake",
    "gradle",
    "nix",
    "proto",
    "graphql",
    "svg",
];

/// `application/*` types that are text.
const TEXT_APPLICATION_TYPES: &[&str] = &[
    "application/json",
    "application/x-ndjson",
    "application/xml",
    "application/yaml",
    "application/x-yaml",
    "application/toml",
    "application/javascript",
    "application/x-javascript",
    "application/typescript",
    "application/x-sh",
    "application/x-shellscript",
    "application/sql",
    "application/x-tex",
    "application/x-subrip",
    "image/svg+xml",
];

/// A declared MIME type without parameters, lowercase.
pub fn essence(mime: &str) -> String {
    mime.split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase()
}

fn extension(name: &str) -> Option<String> {
    let (_, ext) = name.rsplit_once('.')?;
    Some(ext.to_ascii_lowercase())
}

/// Classifies `bytes` given what the sender claims (`mime`, `name`).
pub fn classify(bytes: &[u8], mime: Option<&str>, name: &str) -> Kind {
    let mime = mime.map(essence).filter(|m| !m.is_empty());
    let ext = extension(name);
    if let Some(image) = ImageType::sniff(bytes) {
        return Kind::Image(image);
    }
    if let Some(audio) = crate::audio::AudioType::sniff(bytes) {
        return Kind::Audio(audio);
    }
    // Claims a picture format the bytes do not have.
    if let Some(m) = mime.as_deref().filter(|m| ImageType::of_mime(m).is_some()) {
        return Kind::Mislabelled {
            claimed: m.to_owned(),
        };
    }
    let unclaimed = matches!(mime.as_deref(), None | Some("application/octet-stream"));
    if unclaimed
        && let Some(e) = ext
            .as_deref()
            .filter(|e| ImageType::of_extension(e).is_some())
    {
        return Kind::Mislabelled {
            claimed: format!(".{e} file"),
        };
    }
    let texty = mime
        .as_deref()
        .is_some_and(|m| m.starts_with("text/") || TEXT_APPLICATION_TYPES.contains(&m))
        || ext.as_deref().is_some_and(|e| TEXT_EXTENSIONS.contains(&e))
        || unclaimed;
    if texty && let Some(text) = as_text(bytes) {
        return Kind::Text(text);
    }
    Kind::Other
}

/// `bytes` as text: valid UTF-8 (a leading BOM dropped) with no NUL and few other control
/// characters (tab, newline, carriage return and form feed are text).
fn as_text(bytes: &[u8]) -> Option<String> {
    let bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
    let text = std::str::from_utf8(bytes).ok()?;
    let controls = text
        .chars()
        .filter(|c| c.is_control() && !matches!(c, '\t' | '\n' | '\r' | '\x0c'))
        .count();
    if text.contains('\0') || controls * 100 > text.len().max(1) {
        return None;
    }
    Some(text.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    const PNG: &[u8] = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR";
    const JPEG: &[u8] = &[0xFF, 0xD8, 0xFF, 0xE0, 0, 0x10, b'J', b'F', b'I', b'F'];

    #[test]
    fn pictures_are_told_by_their_bytes_not_by_their_claims() {
        assert_eq!(
            classify(PNG, Some("image/png"), "a.png"),
            Kind::Image(ImageType::Png)
        );
        // A PNG sent as a JPEG (or as nothing) is a PNG.
        assert_eq!(
            classify(PNG, Some("image/jpeg"), "a.jpg"),
            Kind::Image(ImageType::Png)
        );
        assert_eq!(classify(JPEG, None, "x"), Kind::Image(ImageType::Jpeg));
        assert_eq!(
            classify(b"GIF89a....", Some("application/octet-stream"), "g"),
            Kind::Image(ImageType::Gif)
        );
        assert_eq!(
            classify(b"RIFF\x10\0\0\0WEBPVP8 ", None, "w.webp"),
            Kind::Image(ImageType::Webp)
        );
        // RIFF but not WebP: a WAV file is audio, whatever it claims.
        assert_eq!(
            classify(b"RIFF\x10\0\0\0WAVEfmt ", Some("image/webp"), "a.webp"),
            Kind::Audio(crate::audio::AudioType::Wav)
        );
        // A HEIC photo is an ISO file like M4A audio, but neither a picture the model takes
        // nor audio: a plain file.
        assert_eq!(
            classify(
                b"\0\0\0\x18ftypheic\0\0\0\0mif1heic",
                Some("image/heic"),
                "p.heic"
            ),
            Kind::Other
        );
    }

    #[test]
    fn a_file_claiming_a_picture_format_without_its_bytes_is_mislabelled() {
        for (bytes, mime, name) in [
            (&b"#!/bin/sh\nrm -rf ~\n"[..], Some("image/png"), "cat.png"),
            (
                &b"\x7fELF\x02\x01\x01"[..],
                Some("image/jpeg; charset=x"),
                "p.jpg",
            ),
            (&b"<html>hi</html>"[..], None, "cat.PNG"),
        ] {
            assert!(
                matches!(classify(bytes, mime, name), Kind::Mislabelled { .. }),
                "{name}"
            );
        }
        // Other picture formats are just files.
        assert_eq!(
            classify(b"\0\0\0\x18ftypheic", Some("image/heic"), "a.heic"),
            Kind::Other
        );
    }

    #[test]
    fn text_is_utf8_without_nul_with_a_text_claim_or_none() {
        assert_eq!(
            classify(
                b"# Notes\n- one\n",
                Some("text/markdown; charset=utf-8"),
                "n.md"
            ),
            Kind::Text("# Notes\n- one\n".into())
        );
        assert_eq!(
            classify(b"{\"a\":1}", Some("application/json"), "a.json"),
            Kind::Text("{\"a\":1}".into())
        );
        assert_eq!(
            classify(
                b"fn main() {}\n",
                Some("application/octet-stream"),
                "main.rs"
            ),
            Kind::Text("fn main() {}\n".into())
        );
        assert_eq!(
            classify(b"\xEF\xBB\xBFhello", None, "x"),
            Kind::Text("hello".into())
        );
        // Binary, or a non-text claim, stays a file.
        assert_eq!(classify(b"a\0b", Some("text/plain"), "a.txt"), Kind::Other);
        assert_eq!(classify(b"\xff\xfe\x00", None, "a.txt"), Kind::Other);
        assert_eq!(
            classify(b"plain words", Some("application/pdf"), "a.pdf"),
            Kind::Other
        );
        assert_eq!(
            classify(b"\x01\x02\x03\x04\x05 words", Some("text/plain"), "a.txt"),
            Kind::Other
        );
    }
}
