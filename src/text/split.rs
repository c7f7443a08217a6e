//! Splitting a long reply into several platform messages ([`split_message`]).
//!
//! The splitter walks the text part by part. For each part it takes the longest window that fits
//! the limit and looks for the best place to cut inside it, preferring, in order: a paragraph
//! break (blank line), a line break, the end of a sentence (`. ` `! ` `? ` and `。` `！` `？`,
//! closing quotes and brackets included), a run of whitespace, and — only inside a fenced code
//! block — a line break of the code. A boundary is preferred only if it lies in the second half
//! of the window (so a paragraph break near the start does not produce a tiny message); when no
//! boundary does, the latest boundary of any kind wins. With no boundary at all the text is cut
//! hard at the last grapheme-cluster boundary that fits, so neither a surrogate pair nor an
//! emoji sequence (ZWJ, skin tone, flag, keycap) is ever broken. A cut inside a line is never
//! placed where it would start the next message with line-start markup (a fence, `#`, `>`, a
//! bullet), and a part is never made of blank lines only.
//!
//! A part that ends inside a fenced code block gets the block's closing marker appended, and the
//! next part starts by re-opening the block with the original opening line (language included).
//! The room for that marker is reserved before choosing the cut, so parts never exceed the limit.
//! If the limit is too small to afford the fences (the fence lines would take more than half of
//! it), code blocks are split like prose instead.

use unicode_segmentation::GraphemeCursor;

use super::TextLimits;
use super::code::{Fence, find_fences};

/// Splits `text` into messages that each fit `limits`, never truncating.
///
/// * Empty or whitespace-only input gives **no parts** (handlers reject empty text before
///   sending; an empty `Vec` makes "nothing to send" explicit).
/// * Text that fits is returned unchanged as the only part.
/// * Otherwise every part is non-empty, at most `limits.max` units long (UTF-16 units for
///   Discord), trimmed at the cut, and the parts in order reproduce the text except for the
///   whitespace at the cuts and the fence lines added around a split code block (see the module
///   documentation for where cuts are made).
/// * A limit smaller than one character (e.g. 1 UTF-16 unit for an emoji) cannot be honoured;
///   that character then gets a part of its own.
pub fn split_message(text: &str, limits: TextLimits) -> Vec<String> {
    if text.trim().is_empty() {
        return Vec::new();
    }
    if limits.fits(text) {
        return vec![text.to_owned()];
    }
    let max = limits.max.max(1);
    let fences = find_fences(text);
    let fence_overhead = fences
        .iter()
        .map(|f| limits.len(&f.open_line) + limits.len(&f.close_marker) + 2)
        .max()
        .unwrap_or(0);
    let reopen_fences = fence_overhead > 0 && fence_overhead * 2 <= max;

    let mut parts = Vec::new();
    let mut pos = skip_whitespace(text, 0);
    let mut reopened: Option<usize> = None;
    while pos < text.len() {
        let mut part = match reopened {
            Some(index) => format!("{}\n", fences[index].open_line),
            None => String::new(),
        };
        let prefix_units = limits.len(&part);
        let rest = &text[pos..];
        if limits.fits_in(rest.trim_end(), max.saturating_sub(prefix_units)) {
            part.push_str(rest.trim_end());
            parts.push(part);
            break;
        }
        let reserve = if reopen_fences {
            // Bytes per unit are at most 4, so the window cannot reach past `pos + 4 * max`.
            let window_bytes_end = pos.saturating_add(max.saturating_mul(4));
            fences
                .iter()
                .filter(|f| f.content_end > pos && f.content_start < window_bytes_end)
                .map(|f| limits.len(&f.close_marker) + 1)
                .max()
                .unwrap_or(0)
        } else {
            0
        };
        let budget = max.saturating_sub(prefix_units + reserve).max(1);
        // Without fence handling, code is cut like prose.
        let zones: &[Fence] = if reopen_fences { &fences } else { &[] };
        let cut = choose_cut(text, pos, budget, zones, limits);
        part.push_str(text[pos..cut.end].trim_end());
        reopened = match cut.fence {
            Some(index) => {
                part.push('\n');
                part.push_str(&fences[index].close_marker);
                cut.reopen.then_some(index)
            }
            None => None,
        };
        if !part.trim().is_empty() {
            parts.push(part);
        }
        pos = match reopened {
            Some(_) => cut.next,
            None => skip_whitespace(text, cut.next),
        };
    }
    parts
}

/// Kinds of places to cut, best first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Boundary {
    Paragraph = 0,
    Line = 1,
    Sentence = 2,
    Space = 3,
    CodeLine = 4,
}

/// Where a part ends and the next one begins (byte offsets into the whole text).
#[derive(Debug, Clone, Copy)]
struct Cut {
    /// The part's content ends here (exclusive).
    end: usize,
    /// The next part starts here (before whitespace skipping).
    next: usize,
    /// Units of the part's content (`text[pos..end]`).
    units: usize,
    /// The fenced block the cut lies in, if any: the part gets its closing marker.
    fence: Option<usize>,
    /// Whether the next part continues that block (re-opening it). False when the cut is just
    /// before the block's own closing line: the added marker replaces that line, which the next
    /// part skips.
    reopen: bool,
}

/// Where a byte offset lies relative to the fenced code blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Zone {
    Outside,
    /// On an opening or closing fence line (never cut there).
    FenceLine,
    /// Inside the code of the block with this index.
    Code(usize),
}

fn zone_at(fences: &[Fence], offset: usize) -> Zone {
    let Some(i) = fences
        .partition_point(|f| f.open_start <= offset)
        .checked_sub(1)
    else {
        return Zone::Outside;
    };
    let fence = &fences[i];
    if offset < fence.content_start {
        Zone::FenceLine
    } else if offset < fence.content_end {
        Zone::Code(i)
    } else if offset < fence.end {
        Zone::FenceLine
    } else {
        Zone::Outside
    }
}

/// Characters that may follow sentence punctuation and belong to the sentence.
const CLOSERS: &[char] = &[
    ')', ']', '"', '\'', '」', '』', '）', '】', '》', '〉', '”', '’', '］',
];

/// If the character `c` at `offset` ends a sentence, returns the byte offset just past it and its
/// closing quotes/brackets.
fn sentence_end(text: &str, offset: usize, c: char, prev: Option<char>) -> Option<usize> {
    let ascii = matches!(c, '.' | '!' | '?');
    let cjk = matches!(c, '。' | '！' | '？' | '｡');
    if !ascii && !cjk {
        return None;
    }
    // "1. item", "v2." are not sentence ends.
    if c == '.' && prev.is_some_and(|p| p.is_ascii_digit()) {
        return None;
    }
    let mut end = offset + c.len_utf8();
    for closer in text[end..].chars().take(4) {
        if !CLOSERS.contains(&closer) {
            break;
        }
        end += closer.len_utf8();
    }
    if ascii && !text[end..].starts_with(char::is_whitespace) {
        return None;
    }
    Some(end)
}

/// Whether `text` starts with something that means more at the start of a line than in the middle
/// of one.
fn starts_with_line_markup(text: &str) -> bool {
    ["```", "~~~", "#", ">", "- ", "* ", "+ "]
        .iter()
        .any(|markup| text.starts_with(markup))
}

/// Whether the line break at `offset` is followed by a blank line.
fn paragraph_follows(text: &str, offset: usize) -> bool {
    text[offset + 1..]
        .trim_start_matches([' ', '\t', '\r'])
        .starts_with('\n')
}

/// Chooses where the part starting at `pos` ends, within `budget` units.
fn choose_cut(text: &str, pos: usize, budget: usize, fences: &[Fence], limits: TextLimits) -> Cut {
    let mut found = Candidates {
        text,
        last: [None; 5],
    };
    // Whether `text[pos..offset]` holds anything but whitespace: a part made only of blank
    // lines (e.g. an empty code block) is never worth a message.
    let mut has_content = false;
    let mut units = 0;
    let mut window_end = pos;
    let mut prev: Option<char> = None;
    for (i, c) in text[pos..].char_indices() {
        let offset = pos + i;
        let char_units = limits.unit.char_len(c);
        let zone = zone_at(fences, offset);
        if let Some((kind, cut)) = boundary_before(text, fences, offset, c, zone, units) {
            found.record(kind, cut, has_content);
        }
        // The boundaries above end before `c`, so they fit even when `c` does not.
        if units + char_units > budget {
            break;
        }
        units += char_units;
        window_end = offset + c.len_utf8();
        has_content |= zone != Zone::FenceLine && !c.is_whitespace();
        if zone == Zone::Outside
            && let Some(end) = sentence_end(text, offset, c, prev)
        {
            let end_units = units + limits.len(&text[window_end..end]);
            if end_units <= budget {
                found.record(
                    Boundary::Sentence,
                    Cut {
                        end,
                        next: end,
                        units: end_units,
                        fence: None,
                        reopen: false,
                    },
                    true,
                );
            }
        }
        prev = Some(c);
    }
    found
        .best(budget)
        .unwrap_or_else(|| hard_cut(text, pos, window_end, fences))
}

/// The latest usable cut of each [`Boundary`] kind seen so far.
struct Candidates<'a> {
    text: &'a str,
    last: [Option<Cut>; 5],
}

impl Candidates<'_> {
    /// Keeps `cut` as the latest of its kind, unless the part before it is empty
    /// (`has_content` false) or the cut would start the next message with line markup.
    fn record(&mut self, kind: Boundary, cut: Cut, has_content: bool) {
        // A cut inside a line must not move markup to the start of a message, where it would
        // change meaning (a fence, a heading, a quote, a bullet).
        let mid_line = matches!(kind, Boundary::Sentence | Boundary::Space);
        if has_content && !(mid_line && starts_with_line_markup(self.text[cut.next..].trim_start()))
        {
            self.last[kind as usize] = Some(cut);
        }
    }

    /// The best kind whose cut lies in the second half of the budget, else the latest cut of
    /// any kind.
    fn best(&self, budget: usize) -> Option<Cut> {
        let half = budget / 2;
        if let Some(cut) = self.last.iter().flatten().find(|cut| cut.units >= half) {
            return Some(*cut);
        }
        self.last
            .iter()
            .flatten()
            .max_by_key(|cut| cut.units)
            .copied()
    }
}

/// The boundary that ends just before the character `c` at `offset` (a line or paragraph break,
/// a code line, whitespace), with `units` the part's length up to there.
fn boundary_before(
    text: &str,
    fences: &[Fence],
    offset: usize,
    c: char,
    zone: Zone,
    units: usize,
) -> Option<(Boundary, Cut)> {
    match (c, zone) {
        ('\n', Zone::Outside) => {
            let kind = if paragraph_follows(text, offset) {
                Boundary::Paragraph
            } else {
                Boundary::Line
            };
            Some((
                kind,
                Cut {
                    end: offset,
                    next: offset + 1,
                    units,
                    fence: None,
                    reopen: false,
                },
            ))
        }
        ('\n', Zone::Code(index)) => {
            let fence = &fences[index];
            if offset <= fence.content_start {
                return None;
            }
            // Before the closing line, the block ends here: no need to re-open it.
            let closes = offset + 1 >= fence.content_end;
            Some((
                Boundary::CodeLine,
                Cut {
                    end: offset,
                    next: if closes { fence.end } else { offset + 1 },
                    units,
                    fence: Some(index),
                    reopen: !closes,
                },
            ))
        }
        (c, Zone::Outside) if c.is_whitespace() => Some((
            Boundary::Space,
            Cut {
                end: offset,
                next: offset + c.len_utf8(),
                units,
                fence: None,
                reopen: false,
            },
        )),
        _ => None,
    }
}

/// Cuts at the last grapheme boundary at or before `window_end` (after `pos`); falls back to the
/// character boundary when one cluster is longer than the whole window, and takes one character
/// when not even that fits. Never cuts through a fence line: a cut that would is moved before
/// an opening line, or made to close the block instead of its closing line.
fn hard_cut(text: &str, pos: usize, window_end: usize, fences: &[Fence]) -> Cut {
    let mut end = window_end;
    if end == pos {
        end = pos + text[pos..].chars().next().map_or(0, char::len_utf8);
    } else {
        let mut cursor = GraphemeCursor::new(window_end, text.len(), true);
        if cursor.is_boundary(text, 0) != Ok(true)
            && let Ok(Some(boundary)) = cursor.prev_boundary(text, 0)
            && boundary > pos
        {
            end = boundary;
        }
    }
    let plain = |end: usize| Cut {
        end,
        next: end,
        units: 0,
        fence: None,
        reopen: false,
    };
    match zone_at(fences, end) {
        Zone::Code(index) if end > fences[index].content_start => Cut {
            fence: Some(index),
            reopen: true,
            ..plain(end)
        },
        Zone::FenceLine => {
            let index = fences.partition_point(|f| f.open_start <= end) - 1;
            let fence = &fences[index];
            if end >= fence.content_end && fence.content_end > fence.content_start {
                Cut {
                    next: fence.end,
                    fence: Some(index),
                    ..plain(fence.content_end)
                }
            } else if fence.open_start > pos {
                plain(fence.open_start)
            } else {
                plain(end)
            }
        }
        _ => plain(end),
    }
}

/// First non-whitespace byte offset at or after `offset`.
fn skip_whitespace(text: &str, offset: usize) -> usize {
    text.len() - text[offset..].trim_start().len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::text::LengthUnit;
    use unicode_segmentation::UnicodeSegmentation;

    /// Limits like the platforms' (each platform's folder has its own; the splitter knows none).
    const DISCORD: TextLimits = TextLimits::new(2000, LengthUnit::Utf16);
    const MISSKEY_CHAT: TextLimits = TextLimits::new(2000, LengthUnit::Chars);

    fn squash(text: &str) -> String {
        text.chars().filter(|c| !c.is_whitespace()).collect()
    }

    fn assert_valid(parts: &[String], limits: TextLimits) {
        for (i, part) in parts.iter().enumerate() {
            assert!(!part.trim().is_empty(), "part {i} is empty");
            assert!(
                limits.fits(part),
                "part {i} has {} units > {}",
                limits.len(part),
                limits.max
            );
        }
    }

    /// A deterministic xorshift generator for the property-style tests.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    fn paragraph(words: usize, seed: usize) -> String {
        let vocabulary = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta"];
        let mut out = String::new();
        for i in 0..words {
            out.push_str(vocabulary[(i + seed) % vocabulary.len()]);
            out.push_str(if i % 9 == 8 { ". " } else { " " });
        }
        out.trim_end().to_owned() + "."
    }

    #[test]
    fn empty_and_blank_input_give_no_parts() {
        assert!(split_message("", DISCORD).is_empty());
        assert!(split_message(" \n\n\t", DISCORD).is_empty());
    }

    #[test]
    fn text_that_fits_is_returned_unchanged() {
        let text = "  hello\n\nworld  ";
        assert_eq!(split_message(text, DISCORD), vec![text]);
    }

    #[test]
    fn a_4500_character_discord_reply_becomes_three_ordered_parts() {
        let mut text = String::new();
        let mut n = 0;
        while text.chars().count() < 4500 {
            text.push_str(&format!("[{n}] "));
            text.push_str(&paragraph(40, n));
            text.push_str("\n\n");
            n += 1;
        }
        let text: String = text.chars().take(4500).collect();
        assert_eq!(text.chars().count(), 4500);
        let parts = split_message(&text, DISCORD);
        assert_eq!(
            parts.len(),
            3,
            "{:?}",
            parts.iter().map(String::len).collect::<Vec<_>>()
        );
        assert_valid(&parts, DISCORD);
        assert!(parts[0].starts_with("[0]"));
        assert_eq!(squash(&parts.concat()), squash(&text));
        // Cut at paragraph boundaries: each part ends a paragraph.
        for part in &parts[..2] {
            assert!(part.ends_with('.'), "{part:?}");
        }
    }

    #[test]
    fn emoji_count_two_utf16_units_and_are_never_halved() {
        let text = "😀".repeat(1500);
        let parts = split_message(&text, DISCORD);
        assert_eq!(parts.len(), 2);
        assert_valid(&parts, DISCORD);
        assert_eq!(parts[0].chars().count(), 1000);
        assert_eq!(parts.concat(), text);
        // Counted in characters, the same text fits one Misskey chat message.
        assert_eq!(split_message(&text, MISSKEY_CHAT).len(), 1);
    }

    #[test]
    fn hard_splits_respect_grapheme_clusters() {
        let family = "👨\u{200d}👩\u{200d}👧\u{200d}👦";
        let text = family.repeat(30);
        let limits = TextLimits::new(50, LengthUnit::Utf16);
        let parts = split_message(&text, limits);
        assert!(parts.len() > 1);
        assert_valid(&parts, limits);
        for part in &parts {
            assert!(part.graphemes(true).all(|g| g == family), "{part:?}");
        }
        assert_eq!(parts.concat(), text);
    }

    #[test]
    fn a_cluster_longer_than_the_limit_falls_back_to_characters() {
        let zalgo = format!("a{}", "\u{0301}".repeat(30));
        let limits = TextLimits::new(10, LengthUnit::Chars);
        let parts = split_message(&zalgo, limits);
        assert_valid(&parts, limits);
        assert_eq!(parts.concat(), zalgo);
    }

    #[test]
    fn cjk_counts_one_unit_and_japanese_sentences_are_respected() {
        let sentence = "今日はとても良い天気ですね。";
        let text = format!("{}「それは本当？」と聞いた。", sentence.repeat(10));
        let limits = TextLimits::new(40, LengthUnit::Utf16);
        let parts = split_message(&text, limits);
        assert!(parts.len() >= 4);
        assert_valid(&parts, limits);
        for part in &parts {
            assert!(
                part.ends_with('。') || part.ends_with('」'),
                "cut mid-sentence: {part:?}"
            );
        }
        assert_eq!(parts.concat(), text);
    }

    #[test]
    fn sentences_are_preferred_over_spaces() {
        let text = "One two three four. Five six seven eight nine ten eleven.";
        let parts = split_message(text, TextLimits::new(30, LengthUnit::Chars));
        assert_eq!(parts[0], "One two three four.");
    }

    #[test]
    fn decimal_points_and_list_numbers_are_not_sentence_ends() {
        let text = "Steps: 1. open the lid and look inside 2. close it";
        let parts = split_message(text, TextLimits::new(30, LengthUnit::Chars));
        assert!(!parts[0].ends_with("1."), "{parts:?}");
    }

    #[test]
    fn mid_line_cuts_never_start_a_part_with_markup() {
        let text = "Use the character # to start a comment, or > to quote, or ~~~ to fence code.";
        let parts = split_message(text, TextLimits::new(30, LengthUnit::Chars));
        assert!(parts.len() > 2);
        for part in &parts {
            assert!(!starts_with_line_markup(part), "{parts:?}");
        }
    }

    #[test]
    fn paragraphs_are_preferred_over_lines_when_far_enough() {
        let text = format!(
            "{}\n\n{}\n{}",
            "a".repeat(60),
            "b".repeat(20),
            "c".repeat(30)
        );
        let parts = split_message(&text, TextLimits::new(100, LengthUnit::Chars));
        assert_eq!(parts[0], "a".repeat(60));
    }

    #[test]
    fn an_early_paragraph_break_does_not_make_a_tiny_part() {
        let text = format!("hi\n\n{}\n{}", "b".repeat(80), "c".repeat(80));
        let parts = split_message(&text, TextLimits::new(100, LengthUnit::Chars));
        assert_eq!(parts[0], format!("hi\n\n{}", "b".repeat(80)));
    }

    #[test]
    fn a_code_block_that_fits_moves_to_the_next_part_whole() {
        let code = "```rust\nfn main() {\n    println!(\"hi\");\n}\n```";
        let text = format!(
            "{}\n{}\nAfter.",
            "Intro sentence here. ".repeat(4).trim_end(),
            code
        );
        let limits = TextLimits::new(100, LengthUnit::Chars);
        let parts = split_message(&text, limits);
        assert_valid(&parts, limits);
        assert_eq!(parts.len(), 2, "{parts:?}");
        assert!(parts[1].starts_with("```rust\n"), "{parts:?}");
        assert!(parts[1].contains("println!"));
    }

    #[test]
    fn a_long_code_block_is_closed_and_reopened_with_its_language() {
        let lines: Vec<String> = (0..40)
            .map(|i| format!("    print(\"line {i:02}\")"))
            .collect();
        let text = format!("Here you go:\n```python\n{}\n```\nDone.", lines.join("\n"));
        let limits = TextLimits::new(200, LengthUnit::Utf16);
        let parts = split_message(&text, limits);
        assert!(parts.len() >= 5);
        assert_valid(&parts, limits);
        for (i, part) in parts.iter().enumerate() {
            let fences = part
                .lines()
                .filter(|l| l.trim_start().starts_with("```"))
                .count();
            assert_eq!(fences % 2, 0, "unbalanced fences in part {i}: {part:?}");
            if i > 0 && i + 1 < parts.len() {
                assert!(part.starts_with("```python\n"), "{part:?}");
                assert!(part.ends_with("\n```"), "{part:?}");
            }
        }
        // Indentation inside the code survives the cuts.
        let code_lines: Vec<&str> = parts
            .iter()
            .flat_map(|p| p.lines())
            .filter(|l| l.contains("print("))
            .collect();
        assert_eq!(code_lines, lines);
        assert!(parts.last().is_some_and(|p| p.ends_with("Done.")));
    }

    #[test]
    fn a_block_cut_just_before_its_closing_line_is_closed_not_reopened() {
        let text = format!("```\n{}\n```\n{}", "a".repeat(20), "b".repeat(26));
        let limits = TextLimits::new(28, LengthUnit::Chars);
        let parts = split_message(&text, limits);
        assert_valid(&parts, limits);
        assert_eq!(
            parts,
            vec![format!("```\n{}\n```", "a".repeat(20)), "b".repeat(26)]
        );
    }

    #[test]
    fn a_tiny_limit_splits_code_like_prose() {
        let text = "```javascript\nconsole.log(1);\nconsole.log(2);\n```";
        let limits = TextLimits::new(12, LengthUnit::Chars);
        let parts = split_message(text, limits);
        assert_valid(&parts, limits);
        assert_eq!(squash(&parts.concat()), squash(text));
    }

    #[test]
    fn random_texts_split_within_limits_and_round_trip() {
        let pieces = [
            "word",
            "longerword",
            "😀",
            "👍🏽",
            "日本語",
            "テスト。",
            "Hi!",
            "ok?",
            "end.",
            " ",
            " ",
            " ",
            "\n",
            "\n\n",
            "🇯🇵",
            "é",
            "x",
        ];
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        for round in 0..300 {
            let mut text = String::new();
            for _ in 0..rng.below(400) {
                text.push_str(pieces[rng.below(pieces.len())]);
            }
            let unit = if round % 2 == 0 {
                LengthUnit::Utf16
            } else {
                LengthUnit::Chars
            };
            let limits = TextLimits::new(4 + rng.below(120), unit);
            let parts = split_message(&text, limits);
            assert_valid(&parts, limits);
            assert_eq!(squash(&parts.concat()), squash(&text), "round {round}");
            if text.trim().is_empty() {
                assert!(parts.is_empty());
            }
        }
    }

    #[test]
    fn random_texts_with_code_keep_fences_balanced() {
        let pieces = [
            "word ",
            "text. ",
            "\n",
            "\n\n",
            "\n```rust\nlet x = 1;\nlet y = 2;\n```\n",
            "\n~~~\nplain code line\nanother one\n~~~\n",
            "`inline` ",
            "日本。",
        ];
        let mut rng = Rng(42);
        for round in 0..300 {
            let mut text = String::new();
            for _ in 0..rng.below(120) {
                text.push_str(pieces[rng.below(pieces.len())]);
            }
            let limits = TextLimits::new(30 + rng.below(100), LengthUnit::Utf16);
            let parts = split_message(&text, limits);
            assert_valid(&parts, limits);
            let without_fences = |s: &str| {
                squash(
                    &s.lines()
                        .filter(|l| !l.starts_with("```") && !l.starts_with("~~~"))
                        .collect::<Vec<_>>()
                        .join("\n"),
                )
            };
            let joined = parts.join("\n");
            assert_eq!(
                without_fences(&joined),
                without_fences(&text),
                "round {round}"
            );
            if parts.len() > 1 {
                for part in &parts {
                    let fences = part
                        .lines()
                        .filter(|l| l.starts_with("```") || l.starts_with("~~~"))
                        .count();
                    assert_eq!(fences % 2, 0, "round {round}: {part:?}");
                }
            }
        }
    }

    #[test]
    fn large_inputs_split_quickly() {
        let text = "word ".repeat(200_000);
        let parts = split_message(&text, DISCORD);
        assert!(parts.len() >= 500);
        assert_valid(&parts, DISCORD);
    }
}
