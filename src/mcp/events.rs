//! A server's event stream (`text/event-stream`), read event by event as it arrives: each
//! complete event's `data` is one JSON-RPC message, which the exchange filters
//! ([`super::filter`]); an event that did not change passes byte for byte. Only one event is
//! held at a time (at most the answer's cap), so a stream is never buffered whole.

/// Why the stream was cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("one event of the server's stream is larger than the answer's cap")]
pub struct EventTooLarge;

/// Splits a byte stream into complete events (each with its blank-line terminator).
#[derive(Debug, Default)]
pub struct Events {
    pending: Vec<u8>,
    limit: usize,
}

impl Events {
    /// A splitter holding at most `limit` bytes of an unfinished event.
    pub fn new(limit: usize) -> Self {
        Events {
            pending: Vec::new(),
            limit,
        }
    }

    /// The events `chunk` completes, in order.
    pub fn push(&mut self, chunk: &[u8]) -> Result<Vec<Vec<u8>>, EventTooLarge> {
        self.pending.extend_from_slice(chunk);
        let mut out = Vec::new();
        while let Some(end) = event_end(&self.pending) {
            let rest = self.pending.split_off(end);
            out.push(std::mem::replace(&mut self.pending, rest));
        }
        if self.pending.len() > self.limit {
            return Err(EventTooLarge);
        }
        Ok(out)
    }

    /// What is left when the stream ends (an event without its terminator).
    pub fn finish(self) -> Vec<u8> {
        self.pending
    }
}

/// Where the first complete event of `bytes` ends (after its blank line).
fn event_end(bytes: &[u8]) -> Option<usize> {
    let lf = find(bytes, b"\n\n").map(|i| i + 2);
    let crlf = find(bytes, b"\r\n\r\n").map(|i| i + 4);
    match (lf, crlf) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// The JSON of an event's `data` lines (joined by newlines, as the format says), when it has
/// any.
pub fn data_of(event: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(event).ok()?;
    let lines: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .map(|d| d.strip_prefix(' ').unwrap_or(d))
        .collect();
    (!lines.is_empty()).then(|| lines.join("\n"))
}

/// The event's type (its `event` field; `message` when it has none, as the format says).
pub fn name_of(event: &[u8]) -> String {
    let text = String::from_utf8_lossy(event);
    text.lines()
        .filter_map(|l| l.strip_prefix("event:"))
        .map(|n| n.trim().to_owned())
        .next_back()
        .unwrap_or_else(|| "message".to_owned())
}

/// `event` with its data replaced by `data` (one line: JSON has no raw newlines), its other
/// fields (`id`, `event`, `retry`) kept.
pub fn with_data(event: &[u8], data: &str) -> Vec<u8> {
    let text = String::from_utf8_lossy(event);
    let mut out = String::new();
    let mut written = false;
    for line in text.lines() {
        if line.starts_with("data:") {
            if !written {
                out.push_str("data: ");
                out.push_str(data);
                out.push('\n');
                written = true;
            }
        } else if !line.is_empty() {
            out.push_str(line);
            out.push('\n');
        }
    }
    out.push('\n');
    out.into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_come_out_whole_whatever_the_chunks() {
        let stream = b"id: 1\ndata: {\"a\":1}\n\nevent: message\r\ndata: {\"b\":\r\ndata: 2}\r\n\r\ndata: tail";
        for size in [1, 2, 5, 7, stream.len()] {
            let mut events = Events::new(1024);
            let mut got = Vec::new();
            for chunk in stream.chunks(size) {
                got.extend(events.push(chunk).unwrap());
            }
            assert_eq!(got.len(), 2, "chunks of {size}");
            assert_eq!(got.concat(), stream[..stream.len() - 10].to_vec());
            assert_eq!(data_of(&got[0]).as_deref(), Some("{\"a\":1}"));
            assert_eq!(
                (name_of(&got[0]), name_of(&got[1])),
                ("message".into(), "message".into())
            );
            assert_eq!(data_of(&got[1]).as_deref(), Some("{\"b\":\n2}"));
            assert_eq!(events.finish(), b"data: tail");
        }
    }

    #[test]
    fn an_events_type_is_read() {
        assert_eq!(
            name_of(b"event: endpoint\ndata: /messages?s=1\n\n"),
            "endpoint"
        );
        assert_eq!(name_of(b"event:ping\n\n"), "ping");
    }

    #[test]
    fn an_event_larger_than_the_cap_cuts_the_stream() {
        let mut events = Events::new(16);
        assert_eq!(events.push(&[b'x'; 17]), Err(EventTooLarge));
    }

    #[test]
    fn new_data_keeps_the_events_other_fields() {
        let event = b"id: 7\nevent: message\ndata: {\"old\":\ndata: 1}\n\n";
        assert_eq!(
            with_data(event, "{\"new\":2}"),
            b"id: 7\nevent: message\ndata: {\"new\":2}\n\n".to_vec()
        );
    }
}
