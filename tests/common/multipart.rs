//! `multipart/form-data` bodies as the fakes receive them (Discord's files, Misskey's drive
//! uploads, the speech service's audio): split on the boundary byte for byte, so binary files
//! arrive intact.
#![allow(dead_code)]

/// One part of a form.
#[derive(Debug, Clone)]
pub struct Part {
    /// The part's `name`.
    pub name: String,
    /// Its `filename`, when it is a file.
    pub filename: Option<String>,
    /// Its `Content-Type`, when given.
    pub content_type: Option<String>,
    /// Its bytes.
    pub bytes: Vec<u8>,
}

/// The parts of `body`, in order; none when `content_type` names no boundary.
pub fn parts(content_type: &str, body: &[u8]) -> Vec<Part> {
    let Some(boundary) = content_type.split("boundary=").nth(1) else {
        return Vec::new();
    };
    let delimiter = format!("--{}", boundary.trim_matches('"'));
    let positions = find_all(body, delimiter.as_bytes());
    let mut out = Vec::new();
    for pair in positions.windows(2) {
        let part = &body[pair[0] + delimiter.len()..pair[1]];
        let part = part.strip_prefix(b"\r\n").unwrap_or(part);
        let part = part.strip_suffix(b"\r\n").unwrap_or(part);
        let Some(split) = find_all(part, b"\r\n\r\n").first().copied() else {
            continue;
        };
        let head = String::from_utf8_lossy(&part[..split]).into_owned();
        let content_type = head
            .lines()
            .find_map(|l| {
                l.strip_prefix("Content-Type: ")
                    .or(l.strip_prefix("content-type: "))
            })
            .map(|v| v.trim().to_owned());
        out.push(Part {
            name: header_param(&head, "name").unwrap_or_default(),
            filename: header_param(&head, "filename"),
            content_type,
            bytes: part[split + 4..].to_vec(),
        });
    }
    out
}

fn find_all(haystack: &[u8], needle: &[u8]) -> Vec<usize> {
    if needle.is_empty() || haystack.len() < needle.len() {
        return Vec::new();
    }
    (0..=haystack.len() - needle.len())
        .filter(|&i| &haystack[i..i + needle.len()] == needle)
        .collect()
}

fn header_param(head: &str, key: &str) -> Option<String> {
    let marker = format!("{key}=\"");
    head.split(';').find_map(|segment| {
        let segment = segment.trim();
        segment
            .strip_prefix(&marker)
            .and_then(|rest| rest.strip_suffix('"').or(rest.split('"').next()))
            .map(str::to_owned)
    })
}
