//! What an answer is charged when it does not report its usage — a provider that ignores
//! `stream_options.include_usage`, or a stream the agent hangs up on before the last chunk,
//! the one that carries the usage. Such an answer still cost the operator; charging nothing
//! would let an agent spend past every budget.
//!
//! The estimate, for what the answer did not report:
//! * **input**: the request body's bytes / 4, rounded up. The body is the whole prompt as JSON
//!   (mostly ASCII: `text::estimate_tokens`' rate of four characters a token); pictures sent as
//!   base64 make it an overestimate, on the side of the budget.
//! * **output**: the answer text the stream carried — the text, reasoning and tool-call argument
//!   deltas of the chat-completions, Responses and Messages streams — estimated by
//!   `text::estimate_tokens` (a CJK character a token, other text four characters a token); a
//!   JSON or other body that is not an event stream counts its bytes / 4.
//!
//! Not the request's `max_tokens`: OpenCode sends the model's whole output limit (tens of
//! thousands of tokens), so charging it would spend a day's budget on a greeting, while the
//! streamed text is what the upstream did produce. When a cut-short stream reported an output
//! count before it ended (Anthropic's `message_start`), the larger of the two is charged.

use serde::Deserialize;

use super::usage::Usage;
use crate::text::estimate_tokens;

/// Answer text gathered before it is estimated: bounds the memory, and the rounding up of each
/// batch costs at most one token per this many bytes.
const BATCH_BYTES: usize = 4096;

/// Input and output tokens.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tokens {
    /// Input (prompt) tokens.
    pub input: u64,
    /// Output (completion) tokens.
    pub output: u64,
}

impl Tokens {
    /// Input plus output.
    pub fn total(self) -> u64 {
        self.input.saturating_add(self.output)
    }
}

/// What one answer to a model call is charged: what it reported, and the estimate of what it
/// did not.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Charge {
    /// Tokens the upstream reported.
    pub reported: Tokens,
    /// Tokens charged by estimate, beyond the reported ones.
    pub estimated: Tokens,
}

impl Charge {
    /// The charge for an answer that reported `usage`, to a request of `sent_bytes` body bytes,
    /// whose text was estimated at `answer_tokens`; `complete` when the answer arrived whole
    /// (then a reported output count is final).
    pub fn of(usage: &Usage, sent_bytes: u64, answer_tokens: u64, complete: bool) -> Charge {
        let reported = Tokens {
            input: usage.input_tokens.unwrap_or(0),
            output: usage.output_tokens.unwrap_or(0),
        };
        let estimated = Tokens {
            input: match usage.input_tokens {
                Some(_) => 0,
                None => sent_bytes.div_ceil(4),
            },
            output: match usage.output_tokens {
                Some(_) if complete => 0,
                Some(n) => answer_tokens.saturating_sub(n),
                None => answer_tokens,
            },
        };
        Charge {
            reported,
            estimated,
        }
    }

    /// Reported plus estimated tokens: what the budgets count.
    pub fn total(&self) -> Tokens {
        Tokens {
            input: self.reported.input.saturating_add(self.estimated.input),
            output: self.reported.output.saturating_add(self.estimated.output),
        }
    }

    /// Whether any part of it is an estimate.
    pub fn is_estimated(&self) -> bool {
        self.estimated.total() > 0
    }
}

/// The answer text of a response, estimated as it passes.
#[derive(Debug, Default)]
pub(crate) struct AnswerText {
    /// Text not estimated yet (less than [`BATCH_BYTES`] plus one delta).
    pending: String,
    /// Tokens estimated so far.
    tokens: u64,
}

impl AnswerText {
    /// Adds the answer text one SSE event's `data` carries; anything else is ignored.
    pub(crate) fn add_event(&mut self, data: &[u8]) {
        let Ok(event) = serde_json::from_slice::<Event>(data) else {
            return;
        };
        for choice in event.choices.into_iter().flatten() {
            let Some(delta) = choice.delta else { continue };
            let arguments = delta
                .tool_calls
                .into_iter()
                .flatten()
                .filter_map(|call| call.function?.arguments);
            let texts = [
                delta.content,
                delta.reasoning_content,
                delta.reasoning,
                delta.refusal,
            ];
            for text in texts.into_iter().flatten().chain(arguments) {
                self.add_text(&text);
            }
        }
        match event.delta {
            Some(Delta::Text(text)) => self.add_text(&text),
            Some(Delta::Block(block)) => {
                for text in [block.text, block.partial_json, block.thinking]
                    .into_iter()
                    .flatten()
                {
                    self.add_text(&text);
                }
            }
            None => {}
        }
    }

    /// Adds `n` bytes of a body that is not an event stream, at four bytes a token.
    pub(crate) fn add_body_bytes(&mut self, n: usize) {
        self.tokens = self
            .tokens
            .saturating_add(u64::try_from(n.div_ceil(4)).unwrap_or(u64::MAX));
    }

    /// The tokens estimated for everything added.
    pub(crate) fn finish(mut self) -> u64 {
        self.flush();
        self.tokens
    }

    fn add_text(&mut self, text: &str) {
        self.pending.push_str(text);
        if self.pending.len() >= BATCH_BYTES {
            self.flush();
        }
    }

    fn flush(&mut self) {
        let tokens = estimate_tokens(&self.pending);
        self.tokens = self
            .tokens
            .saturating_add(u64::try_from(tokens).unwrap_or(u64::MAX));
        self.pending.clear();
    }
}

/// The text-carrying parts of a stream event of the three APIs; everything else is skipped.
#[derive(Deserialize)]
struct Event {
    /// Chat completions: `choices[].delta`.
    choices: Option<Vec<Choice>>,
    /// Responses: `delta` text (`response.output_text.delta` and the like); Messages: the
    /// `content_block_delta`'s `delta` object.
    delta: Option<Delta>,
}

#[derive(Deserialize)]
struct Choice {
    delta: Option<ChatDelta>,
}

#[derive(Deserialize)]
struct ChatDelta {
    content: Option<String>,
    reasoning_content: Option<String>,
    reasoning: Option<String>,
    refusal: Option<String>,
    tool_calls: Option<Vec<ToolCall>>,
}

#[derive(Deserialize)]
struct ToolCall {
    function: Option<Function>,
}

#[derive(Deserialize)]
struct Function {
    arguments: Option<String>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Delta {
    Text(String),
    Block(BlockDelta),
}

#[derive(Deserialize)]
struct BlockDelta {
    text: Option<String>,
    partial_json: Option<String>,
    thinking: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn estimated(events: &[&str]) -> u64 {
        let mut text = AnswerText::default();
        for e in events {
            text.add_event(e.as_bytes());
        }
        text.finish()
    }

    #[test]
    fn the_text_deltas_of_the_three_apis_are_counted_and_nothing_else() {
        let chat = [
            r#"{"id":"c1","model":"gpt-x","choices":[{"index":0,"delta":{"role":"assistant","content":"abcd"}}]}"#,
            r#"{"choices":[{"delta":{"reasoning_content":"efgh","tool_calls":[{"index":0,"id":"call_1","function":{"name":"write","arguments":"{\"a\":1}"}}]}}]}"#,
            r#"{"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2}}"#,
        ];
        // "abcdefgh" + "{\"a\":1}" (7 characters): 15 ASCII characters, 4 tokens.
        assert_eq!(estimated(&chat), 4);
        let messages = [
            r#"{"type":"message_start","message":{"model":"claude-x","content":[],"usage":{"input_tokens":25}}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello"}}"#,
            r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"x\""}}"#,
            r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":15}}"#,
        ];
        assert_eq!(
            estimated(&messages),
            3,
            "Hello and the partial JSON: 9 characters"
        );
        let responses = [
            r#"{"type":"response.output_text.delta","item_id":"m1","delta":"こんにちは"}"#,
            r#"{"type":"response.completed","response":{"output":[{"content":[{"text":"こんにちは"}]}]}}"#,
        ];
        assert_eq!(
            estimated(&responses),
            5,
            "a CJK character is a token; done events are not deltas"
        );
        assert_eq!(estimated(&["not json", "[DONE]", r#"{"delta":7}"#]), 0);
    }

    #[test]
    fn long_answers_are_estimated_in_batches_without_losing_tokens() {
        let mut text = AnswerText::default();
        let event = r#"{"choices":[{"delta":{"content":"abc"}}]}"#;
        for _ in 0..4000 {
            text.add_event(event.as_bytes());
        }
        assert!(text.pending.len() < BATCH_BYTES + 3);
        // 12 000 ASCII characters: 3 000 tokens, plus at most one per batch rounded up.
        let tokens = text.finish();
        assert!((3000..=3003).contains(&tokens), "{tokens}");
    }

    #[test]
    fn what_was_not_reported_is_estimated() {
        let usage = |input, output| Usage {
            model: None,
            input_tokens: input,
            output_tokens: output,
        };
        let tokens = |input, output| Tokens { input, output };
        let exact = Charge::of(&usage(Some(10), Some(5)), 400, 50, true);
        assert_eq!(
            (exact.reported, exact.estimated),
            (tokens(10, 5), tokens(0, 0))
        );
        assert!(!exact.is_estimated());
        let none = Charge::of(&usage(None, None), 401, 50, true);
        assert_eq!(
            (none.reported, none.estimated),
            (tokens(0, 0), tokens(101, 50))
        );
        assert!(none.is_estimated());
        // Cut short after Anthropic's message_start: its output count is a running total.
        let cut = Charge::of(&usage(Some(25), Some(1)), 400, 50, false);
        assert_eq!(
            (cut.reported, cut.estimated),
            (tokens(25, 1), tokens(0, 49))
        );
        assert_eq!(cut.total(), tokens(25, 50));
        let cut_after_usage = Charge::of(&usage(Some(25), Some(60)), 400, 50, false);
        assert!(!cut_after_usage.is_estimated());
    }
}
