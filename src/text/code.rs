//! Markdown code detection shared by the text utilities: fenced code blocks (used by
//! [`split_message`](super::split_message) to avoid cutting inside them and to re-open them when it
//! must) and the byte ranges that the content pipeline leaves untouched (fenced blocks and inline
//! code spans), so that `Vec<String>` or `"a\nb"` inside code survive
//! [`strip_xml_tags`](super::strip_xml_tags) and [`unescape_newlines`](super::unescape_newlines).
//!
//! The rules follow CommonMark closely enough for chat messages: a fence is a line indented by at
//! most three spaces that starts with three or more backticks or tildes; it is closed by a line of
//! at least as many of the same character and nothing else; an unclosed fence runs to the end of
//! the text. An inline code span is a run of N backticks closed by the next run of exactly N
//! backticks in the same paragraph (a blank line ends the search); an unmatched run is literal.

use std::collections::HashMap;
use std::ops::Range;

/// A fenced code block, in byte offsets of the text it was found in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Fence {
    /// First byte of the opening fence line (including its indentation).
    pub open_start: usize,
    /// The opening fence line without indentation or line break (e.g. "```rust"): re-emitted at
    /// the start of a part that continues the block after a split.
    pub open_line: String,
    /// The marker that closes this block (e.g. "```" or "~~~~"): appended to a part that ends
    /// inside the block.
    pub close_marker: String,
    /// First byte of the code (just after the opening line's line break).
    pub content_start: usize,
    /// End of the code: the first byte of the closing fence line, or the text's end if unclosed.
    pub content_end: usize,
    /// End of the closing fence line (before its line break), or the text's end if unclosed.
    pub end: usize,
}

/// An opening fence that has not been closed yet while scanning.
struct OpenFence {
    open_start: usize,
    open_line: String,
    marker: char,
    count: usize,
    content_start: usize,
}

/// Returns `(marker char, run length, rest of the line)` when `line` starts a fence.
fn fence_marker(line: &str) -> Option<(char, usize, &str)> {
    let indent = line.len() - line.trim_start_matches(' ').len();
    if indent > 3 {
        return None;
    }
    let body = &line[indent..];
    let marker = body.chars().next()?;
    if marker != '`' && marker != '~' {
        return None;
    }
    let count = body.len() - body.trim_start_matches(marker).len();
    if count < 3 {
        return None;
    }
    Some((marker, count, &body[count..]))
}

/// Finds every fenced code block of `text`, in order.
pub(crate) fn find_fences(text: &str) -> Vec<Fence> {
    let mut fences = Vec::new();
    let mut open: Option<OpenFence> = None;
    let mut offset = 0;
    for raw_line in text.split_inclusive('\n') {
        let start = offset;
        offset += raw_line.len();
        let line = raw_line.trim_end_matches(['\n', '\r']);
        match open.take() {
            None => {
                if let Some((marker, count, info)) = fence_marker(line) {
                    // A backtick fence's info string may not contain backticks (CommonMark).
                    if marker == '`' && info.contains('`') {
                        continue;
                    }
                    open = Some(OpenFence {
                        open_start: start,
                        open_line: line.trim_start_matches(' ').to_owned(),
                        marker,
                        count,
                        content_start: offset,
                    });
                }
            }
            Some(current) => {
                let closes = fence_marker(line).is_some_and(|(marker, count, rest)| {
                    marker == current.marker && count >= current.count && rest.trim().is_empty()
                });
                if closes {
                    fences.push(Fence {
                        open_start: current.open_start,
                        close_marker: current.marker.to_string().repeat(current.count),
                        open_line: current.open_line,
                        content_start: current.content_start,
                        content_end: start,
                        end: start + line.len(),
                    });
                } else {
                    open = Some(current);
                }
            }
        }
    }
    if let Some(current) = open {
        let end = text.len();
        fences.push(Fence {
            open_start: current.open_start,
            close_marker: current.marker.to_string().repeat(current.count),
            open_line: current.open_line,
            content_start: current.content_start.min(end),
            content_end: end,
            end,
        });
    }
    fences
}

/// Byte ranges of `text` that hold code (whole fenced blocks and inline code spans), sorted and
/// disjoint.
pub(crate) fn protected_ranges(text: &str) -> Vec<Range<usize>> {
    let mut ranges = Vec::new();
    let mut cursor = 0;
    for fence in find_fences(text) {
        inline_spans(text, cursor..fence.open_start, &mut ranges);
        ranges.push(fence.open_start..fence.end);
        cursor = fence.end;
    }
    inline_spans(text, cursor..text.len(), &mut ranges);
    ranges
}

/// A run of backticks inside the scanned segment.
struct Run {
    start: usize,
    len: usize,
    /// Index of the paragraph (blank-line separated) the run belongs to.
    paragraph: usize,
}

/// Appends the inline code spans found in `text[segment]` to `out`.
///
/// Runs in O(n log n): each run looks up the next run of the same length through a per-length
/// index instead of rescanning, so a pathological text of unmatched backticks stays cheap.
fn inline_spans(text: &str, segment: Range<usize>, out: &mut Vec<Range<usize>>) {
    let bytes = text.as_bytes();
    let mut runs: Vec<Run> = Vec::new();
    let mut paragraph = 0;
    let mut i = segment.start;
    while i < segment.end {
        match bytes[i] {
            b'`' => {
                let start = i;
                while i < segment.end && bytes[i] == b'`' {
                    i += 1;
                }
                runs.push(Run {
                    start,
                    len: i - start,
                    paragraph,
                });
                continue;
            }
            b'\n' => {
                // A blank line (only spaces, tabs or '\r' before the next '\n') ends a paragraph.
                let mut j = i + 1;
                while j < segment.end && matches!(bytes[j], b' ' | b'\t' | b'\r') {
                    j += 1;
                }
                if j < segment.end && bytes[j] == b'\n' {
                    paragraph += 1;
                }
            }
            _ => {}
        }
        i += 1;
    }
    let mut by_len: HashMap<usize, Vec<usize>> = HashMap::new();
    for (index, run) in runs.iter().enumerate() {
        by_len.entry(run.len).or_default().push(index);
    }
    let mut index = 0;
    while index < runs.len() {
        let run = &runs[index];
        let closing = by_len.get(&run.len).and_then(|candidates| {
            let next = candidates.partition_point(|&c| c <= index);
            candidates
                .get(next)
                .copied()
                .filter(|&c| runs[c].paragraph == run.paragraph)
        });
        match closing {
            Some(close) => {
                out.push(run.start..runs[close].start + runs[close].len);
                index = close + 1;
            }
            None => index += 1,
        }
    }
}

/// Applies `transform` to the parts of `text` outside `protected` and copies the protected ranges
/// verbatim.
pub(crate) fn map_unprotected(
    text: &str,
    protected: &[Range<usize>],
    mut transform: impl FnMut(&str) -> String,
) -> String {
    let mut out = String::with_capacity(text.len());
    let mut cursor = 0;
    for range in protected {
        out.push_str(&transform(&text[cursor..range.start]));
        out.push_str(&text[range.clone()]);
        cursor = range.end;
    }
    out.push_str(&transform(&text[cursor..]));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_a_closed_fence_with_language() {
        let text = "intro\n```rust\nfn main() {}\n```\nafter";
        let fences = find_fences(text);
        assert_eq!(fences.len(), 1);
        let fence = &fences[0];
        assert_eq!(fence.open_line, "```rust");
        assert_eq!(fence.close_marker, "```");
        assert_eq!(
            &text[fence.content_start..fence.content_end],
            "fn main() {}\n"
        );
        assert_eq!(
            &text[fence.open_start..fence.end],
            "```rust\nfn main() {}\n```"
        );
    }

    #[test]
    fn a_longer_or_different_marker_is_needed_to_close() {
        let text = "~~~~\n```\nstill code\n~~~\n~~~~~\nout";
        let fences = find_fences(text);
        assert_eq!(fences.len(), 1);
        assert_eq!(
            &text[fences[0].content_start..fences[0].content_end],
            "```\nstill code\n~~~\n"
        );
        assert_eq!(fences[0].close_marker, "~~~~");
    }

    #[test]
    fn an_unclosed_fence_runs_to_the_end() {
        let text = "a\n```py\nprint(1)\n";
        let fences = find_fences(text);
        assert_eq!(fences.len(), 1);
        assert_eq!(fences[0].content_end, text.len());
        assert_eq!(fences[0].end, text.len());
    }

    #[test]
    fn inline_spans_match_runs_of_equal_length_within_a_paragraph() {
        let text = "use `Vec<T>` and ``a ` b`` but ` alone\n\nnext ` para";
        let ranges = protected_ranges(text);
        let spans: Vec<&str> = ranges.iter().map(|r| &text[r.clone()]).collect();
        assert_eq!(spans, vec!["`Vec<T>`", "``a ` b``"]);
    }

    #[test]
    fn many_unmatched_backticks_are_cheap_and_literal() {
        let text = "` `` ```` ".repeat(20_000);
        let ranges = protected_ranges(&text);
        // Every run length repeats, so spans exist, and the call returns quickly.
        assert!(!ranges.is_empty());
        let mut last_end = 0;
        for range in &ranges {
            assert!(range.start >= last_end);
            last_end = range.end;
        }
    }
}
