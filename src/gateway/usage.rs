//! Token usage read from a model response as it streams past: the metering half of the gateway.
//!
//! [`UsageParser`] is fed every chunk the upstream sends, in order, split at arbitrary bytes, and
//! keeps only what it needs: for `text/event-stream` bodies one SSE line and one event's `data`
//! at a time (each bounded; an oversized line or event is skipped, never buffered whole), for
//! JSON bodies the body up to a bound. It never fails: anything that is not the JSON it expects
//! is ignored, so a provider's odd chunk cannot break the stream it rides on.
//!
//! Shapes understood (the last value seen wins, since providers report running totals):
//! * OpenAI-style `usage: {prompt_tokens, completion_tokens}` — in the last stream chunk when
//!   the client asked for `stream_options.include_usage` (OpenCode does), or in a JSON body.
//! * Anthropic: `message_start.message.usage.input_tokens` (plus the cache read/creation input
//!   tokens, which Anthropic reports apart), `message_delta.usage.output_tokens` (cumulative), and
//!   `usage: {input_tokens, output_tokens}` of a JSON message.
//! * The `model` field (top level, or of Anthropic's `message` / a Responses-API `response`).
//!
//! It also estimates the answer text as it passes ([`super::estimate`]), for an answer that
//! ends without reporting usage.

use serde::Deserialize;

use super::estimate::AnswerText;

/// Longest SSE line kept; a longer line is skipped (and the event it belongs to dropped).
pub const MAX_LINE_BYTES: usize = 1024 * 1024;
/// Longest SSE event `data` kept (its `data:` lines joined).
pub const MAX_EVENT_BYTES: usize = 1024 * 1024;
/// Longest JSON body parsed for usage; beyond it the response is not metered.
pub const MAX_JSON_BYTES: usize = 4 * 1024 * 1024;

/// What one response reported.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Usage {
    /// The `model` the upstream named, if any.
    pub model: Option<String>,
    /// Input (prompt) tokens.
    pub input_tokens: Option<u64>,
    /// Output (completion) tokens.
    pub output_tokens: Option<u64>,
}

impl Usage {
    /// Whether the response reported any token count.
    pub fn is_metered(&self) -> bool {
        self.input_tokens.is_some() || self.output_tokens.is_some()
    }
}

/// What a whole body showed: the usage it reported and the estimate of its answer text.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reading {
    /// The usage it reported.
    pub usage: Usage,
    /// Its answer text, in estimated tokens ([`super::estimate`]).
    pub answer_tokens: u64,
}

/// How the response body is framed, from its `Content-Type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyKind {
    /// `text/event-stream`: parsed event by event.
    EventStream,
    /// `application/json` (or `+json`): parsed once complete.
    Json,
    /// Anything else: passed through unread.
    Other,
}

impl BodyKind {
    /// Classifies a `Content-Type` value.
    pub fn of(content_type: Option<&str>) -> Self {
        let mime = content_type
            .and_then(|v| v.split(';').next())
            .map(|v| v.trim().to_ascii_lowercase())
            .unwrap_or_default();
        if mime == "text/event-stream" {
            BodyKind::EventStream
        } else if mime == "application/json" || mime.ends_with("+json") {
            BodyKind::Json
        } else {
            BodyKind::Other
        }
    }
}

/// Incremental usage extraction; see the module documentation.
#[derive(Debug)]
pub struct UsageParser {
    kind: BodyKind,
    /// The current SSE line (bounded by [`MAX_LINE_BYTES`]).
    line: Vec<u8>,
    /// The current line grew past the bound: skip to its end.
    line_overflow: bool,
    /// The previous byte ended a line with `\r`; a following `\n` belongs to it.
    after_cr: bool,
    /// The current event's `data` (bounded by [`MAX_EVENT_BYTES`]), or the JSON body.
    data: Vec<u8>,
    /// The current event (or the JSON body) grew past its bound: drop it.
    data_overflow: bool,
    /// The current event has at least one `data` line (an empty one counts).
    has_data: bool,
    usage: Usage,
    answer: AnswerText,
}

impl UsageParser {
    /// A parser for a body of `kind`.
    pub fn new(kind: BodyKind) -> Self {
        Self {
            kind,
            line: Vec::new(),
            line_overflow: false,
            after_cr: false,
            data: Vec::new(),
            data_overflow: false,
            has_data: false,
            usage: Usage::default(),
            answer: AnswerText::default(),
        }
    }

    /// Feeds the next chunk of the body.
    pub fn feed(&mut self, chunk: &[u8]) {
        match self.kind {
            BodyKind::Other => self.answer.add_body_bytes(chunk.len()),
            BodyKind::Json => {
                self.answer.add_body_bytes(chunk.len());
                if self.data_overflow {
                    return;
                }
                if self.data.len() + chunk.len() > MAX_JSON_BYTES {
                    self.data_overflow = true;
                    self.data = Vec::new();
                } else {
                    self.data.extend_from_slice(chunk);
                }
            }
            BodyKind::EventStream => self.feed_sse(chunk),
        }
    }

    /// What the whole body showed (call when it has ended, or was cut short: a final event
    /// without its terminating blank line still counts).
    pub fn finish(mut self) -> Reading {
        match self.kind {
            BodyKind::Other => {}
            BodyKind::Json => {
                if !self.data_overflow {
                    let body = std::mem::take(&mut self.data);
                    self.apply_json(&body);
                }
            }
            BodyKind::EventStream => {
                if !self.line.is_empty() || self.line_overflow {
                    self.end_line();
                }
                self.dispatch_event();
            }
        }
        Reading {
            usage: self.usage,
            answer_tokens: self.answer.finish(),
        }
    }

    fn feed_sse(&mut self, mut rest: &[u8]) {
        while !rest.is_empty() {
            if self.after_cr {
                self.after_cr = false;
                if rest[0] == b'\n' {
                    rest = &rest[1..];
                    continue;
                }
            }
            match rest.iter().position(|&b| b == b'\n' || b == b'\r') {
                Some(at) => {
                    self.push_line_bytes(&rest[..at]);
                    self.after_cr = rest[at] == b'\r';
                    self.end_line();
                    rest = &rest[at + 1..];
                }
                None => {
                    self.push_line_bytes(rest);
                    rest = &[];
                }
            }
        }
    }

    fn push_line_bytes(&mut self, bytes: &[u8]) {
        if self.line_overflow {
            return;
        }
        if self.line.len() + bytes.len() > MAX_LINE_BYTES {
            self.line_overflow = true;
            self.line = Vec::new();
        } else {
            self.line.extend_from_slice(bytes);
        }
    }

    /// One complete SSE line: a blank line dispatches the event, `data` lines accumulate, every
    /// other field and comment is ignored.
    fn end_line(&mut self) {
        let line = std::mem::take(&mut self.line);
        if std::mem::take(&mut self.line_overflow) {
            // Whatever the line was, the event it belongs to is incomplete now.
            self.data_overflow = true;
            return;
        }
        if line.is_empty() {
            self.dispatch_event();
            return;
        }
        let (field, value) = match line.iter().position(|&b| b == b':') {
            Some(at) => {
                let value = &line[at + 1..];
                (&line[..at], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (&line[..], &[][..]),
        };
        if field != b"data" || self.data_overflow {
            return;
        }
        let separator = usize::from(self.has_data);
        if self.data.len() + separator + value.len() > MAX_EVENT_BYTES {
            self.data_overflow = true;
            self.data = Vec::new();
            return;
        }
        if self.has_data {
            self.data.push(b'\n');
        }
        self.data.extend_from_slice(value);
        self.has_data = true;
    }

    fn dispatch_event(&mut self) {
        let data = std::mem::take(&mut self.data);
        let usable = self.has_data && !self.data_overflow;
        self.has_data = false;
        self.data_overflow = false;
        if usable {
            self.answer.add_event(&data);
        }
        // Most chunks carry neither usage nor (once known) a model: skip parsing those.
        if usable
            && (contains(&data, b"\"usage\"")
                || (self.usage.model.is_none() && contains(&data, b"\"model\"")))
        {
            self.apply_json(&data);
        }
    }

    fn apply_json(&mut self, json: &[u8]) {
        let Ok(event) = serde_json::from_slice::<Event>(json) else {
            return;
        };
        for part in [event.message, event.response].into_iter().flatten() {
            self.apply_part(part.model, part.usage);
        }
        self.apply_part(event.model, event.usage);
    }

    fn apply_part(&mut self, model: Option<String>, usage: Option<RawUsage>) {
        if let Some(model) = model.filter(|m| !m.is_empty())
            && self.usage.model.is_none()
        {
            self.usage.model = Some(model);
        }
        let Some(u) = usage else { return };
        let anthropic_input = u.input_tokens.map(|n| {
            n.saturating_add(u.cache_creation_input_tokens.unwrap_or(0))
                .saturating_add(u.cache_read_input_tokens.unwrap_or(0))
        });
        if let Some(n) = u.prompt_tokens.or(anthropic_input) {
            self.usage.input_tokens = Some(n);
        }
        if let Some(n) = u.completion_tokens.or(u.output_tokens) {
            self.usage.output_tokens = Some(n);
        }
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// The parts of a chunk, event or body that matter; everything else is skipped unread.
#[derive(Deserialize)]
struct Event {
    model: Option<String>,
    usage: Option<RawUsage>,
    /// Anthropic `message_start`.
    message: Option<Part>,
    /// OpenAI Responses API `response.completed`.
    response: Option<Part>,
}

#[derive(Deserialize)]
struct Part {
    model: Option<String>,
    usage: Option<RawUsage>,
}

#[derive(Deserialize)]
struct RawUsage {
    prompt_tokens: Option<u64>,
    completion_tokens: Option<u64>,
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    cache_creation_input_tokens: Option<u64>,
    cache_read_input_tokens: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    const OPENAI_STREAM: &str = concat!(
        "data: {\"id\":\"c1\",\"model\":\"gpt-x\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}],\"usage\":null}\n\n",
        ": keep-alive comment\n\n",
        "data: {\"id\":\"c1\",\"model\":\"gpt-x\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n",
        "data: {\"id\":\"c1\",\"model\":\"gpt-x\",\"choices\":[],\"usage\":{\"prompt_tokens\":123,\"completion_tokens\":45,\"total_tokens\":168}}\n\n",
        "data: [DONE]\n\n",
    );

    const ANTHROPIC_STREAM: &str = concat!(
        "event: message_start\n",
        "data: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-x\",\"content\":[],\"usage\":{\"input_tokens\":25,\"cache_read_input_tokens\":5,\"output_tokens\":1}}}\n\n",
        "event: content_block_delta\n",
        "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hello\"}}\n\n",
        "event: message_delta\n",
        "data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":15}}\n\n",
        "event: message_stop\n",
        "data: {\"type\":\"message_stop\"}\n\n",
    );

    fn parse_chunks(kind: BodyKind, chunks: &[&[u8]]) -> Usage {
        let mut p = UsageParser::new(kind);
        for c in chunks {
            p.feed(c);
        }
        p.finish().usage
    }

    fn expected(model: &str, input: u64, output: u64) -> Usage {
        Usage {
            model: Some(model.into()),
            input_tokens: Some(input),
            output_tokens: Some(output),
        }
    }

    #[test]
    fn openai_stream_usage_is_read_from_the_last_chunk() {
        let got = parse_chunks(BodyKind::EventStream, &[OPENAI_STREAM.as_bytes()]);
        assert_eq!(got, expected("gpt-x", 123, 45));
    }

    #[test]
    fn anthropic_stream_usage_combines_message_start_and_message_delta() {
        let got = parse_chunks(BodyKind::EventStream, &[ANTHROPIC_STREAM.as_bytes()]);
        assert_eq!(
            got,
            expected("claude-x", 30, 15),
            "cache reads count as input"
        );
    }

    #[test]
    fn a_split_at_any_byte_gives_the_same_usage() {
        for stream in [OPENAI_STREAM, ANTHROPIC_STREAM] {
            let whole = parse_chunks(BodyKind::EventStream, &[stream.as_bytes()]);
            let bytes = stream.as_bytes();
            for at in 0..=bytes.len() {
                let (a, b) = bytes.split_at(at);
                assert_eq!(
                    parse_chunks(BodyKind::EventStream, &[a, b]),
                    whole,
                    "split at {at}"
                );
            }
            let singles: Vec<&[u8]> = bytes.chunks(1).collect();
            assert_eq!(parse_chunks(BodyKind::EventStream, &singles), whole);
        }
    }

    #[test]
    fn crlf_and_cr_line_endings_are_understood() {
        for ending in ["\r\n", "\r"] {
            let stream = OPENAI_STREAM.replace('\n', ending);
            let bytes = stream.as_bytes();
            for at in 0..=bytes.len() {
                let (a, b) = bytes.split_at(at);
                assert_eq!(
                    parse_chunks(BodyKind::EventStream, &[a, b]),
                    expected("gpt-x", 123, 45),
                    "ending {ending:?}, split at {at}"
                );
            }
        }
    }

    #[test]
    fn multi_line_data_is_joined_before_parsing() {
        let stream = "data: {\"model\":\"m\",\ndata: \"usage\":{\"prompt_tokens\":7,\"completion_tokens\":3}}\n\n";
        let got = parse_chunks(BodyKind::EventStream, &[stream.as_bytes()]);
        assert_eq!(got, expected("m", 7, 3));
    }

    #[test]
    fn garbage_is_tolerated_and_later_events_still_count() {
        let stream = concat!(
            "data: {not json\n\n",
            "data: {\"usage\":\"a string\"}\n\n",
            "data: {\"usage\":{\"prompt_tokens\":-4}}\n\n",
            "\u{0}\u{ff}binary noise without a colon\n\n",
            "data:{\"model\":\"m2\",\"usage\":{\"prompt_tokens\":2,\"completion_tokens\":9}}\n\n",
        );
        let got = parse_chunks(BodyKind::EventStream, &[stream.as_bytes()]);
        assert_eq!(got, expected("m2", 2, 9));
        let invalid_utf8: &[u8] = b"data: \xff\xfe{\"usage\"\n\n";
        assert_eq!(
            parse_chunks(BodyKind::EventStream, &[invalid_utf8]),
            Usage::default()
        );
    }

    #[test]
    fn an_oversized_line_is_skipped_without_buffering_it() {
        let mut p = UsageParser::new(BodyKind::EventStream);
        p.feed(b"data: {\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":1},\"pad\":\"");
        let pad = vec![b'x'; 64 * 1024];
        for _ in 0..(MAX_LINE_BYTES / pad.len() + 2) {
            p.feed(&pad);
            assert!(
                p.line.len() <= MAX_LINE_BYTES,
                "the line buffer stays bounded"
            );
        }
        p.feed(b"\"}\n\n");
        p.feed(b"data: {\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":6}}\n\n");
        let got = p.finish().usage;
        assert_eq!((got.input_tokens, got.output_tokens), (Some(5), Some(6)));
    }

    #[test]
    fn a_final_event_without_its_blank_line_still_counts() {
        let stream = "data: {\"usage\":{\"prompt_tokens\":8,\"completion_tokens\":1}}";
        let got = parse_chunks(BodyKind::EventStream, &[stream.as_bytes()]);
        assert_eq!((got.input_tokens, got.output_tokens), (Some(8), Some(1)));
    }

    #[test]
    fn json_bodies_of_both_shapes_are_metered() {
        let openai = br#"{"id":"c","model":"gpt-y","choices":[],"usage":{"prompt_tokens":11,"completion_tokens":22}}"#;
        let (a, b) = openai.split_at(40);
        assert_eq!(
            parse_chunks(BodyKind::Json, &[a, b]),
            expected("gpt-y", 11, 22)
        );
        let anthropic = br#"{"type":"message","model":"claude-y","usage":{"input_tokens":3,"output_tokens":4}}"#;
        assert_eq!(
            parse_chunks(BodyKind::Json, &[anthropic]),
            expected("claude-y", 3, 4)
        );
        assert_eq!(
            parse_chunks(BodyKind::Json, &[b"{\"usage\": 5"]),
            Usage::default(),
            "truncated JSON"
        );
    }

    #[test]
    fn bodies_of_other_types_are_not_read_but_estimated_by_their_size() {
        let mut p = UsageParser::new(BodyKind::Other);
        p.feed(OPENAI_STREAM.as_bytes());
        let got = p.finish();
        assert_eq!(got.usage, Usage::default());
        assert_eq!(got.answer_tokens, OPENAI_STREAM.len().div_ceil(4) as u64);
    }

    #[test]
    fn the_answer_text_of_a_stream_is_estimated_as_it_passes() {
        let mut p = UsageParser::new(BodyKind::EventStream);
        for byte in ANTHROPIC_STREAM.as_bytes().chunks(7) {
            p.feed(byte);
        }
        let got = p.finish();
        assert_eq!(got.usage, expected("claude-x", 30, 15));
        assert_eq!(got.answer_tokens, 2, "Hello: five characters");
    }

    #[test]
    fn content_types_are_classified() {
        assert_eq!(
            BodyKind::of(Some("text/event-stream; charset=utf-8")),
            BodyKind::EventStream
        );
        assert_eq!(BodyKind::of(Some("Application/JSON")), BodyKind::Json);
        assert_eq!(
            BodyKind::of(Some("application/problem+json")),
            BodyKind::Json
        );
        assert_eq!(BodyKind::of(Some("text/plain")), BodyKind::Other);
        assert_eq!(BodyKind::of(None), BodyKind::Other);
    }
}
