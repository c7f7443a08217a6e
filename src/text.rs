//! Text utilities shared by the skill handlers, the prompt builder and the platform adapters.
//!
//! * The content pipeline every agent-written text goes through before it reaches a platform
//!   (send-reply, edit-reply, captions, reminders): [`strip_xml_tags`], then
//!   [`unescape_newlines`]; [`process_outgoing`] does both.
//! * Platform length limits ([`TextLimits`], [`LengthUnit`]) and [`split_message`], which cuts a
//!   long reply into several messages at natural boundaries and never truncates.
//! * [`estimate_tokens`], the token estimate of the prompt budget.
//!
//! Everything here is a pure function over `&str`; nothing allocates more than a copy of its input
//! and every scan is linear or near-linear, so hostile input cannot make it hang.
//!
//! Code is left alone by the content pipeline: fenced code blocks and inline code spans (see
//! `code.rs`) keep their `<tags>` and their `\n` escapes.

mod code;
mod split;

pub use split::split_message;

use serde::{Deserialize, Serialize};

/// How a platform counts the length of a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LengthUnit {
    /// UTF-16 code units, as Discord counts (an emoji outside the BMP counts 2).
    Utf16,
    /// Unicode scalar values (`char`s), as Misskey's schema validation counts.
    Chars,
}

impl LengthUnit {
    /// Length of one character in this unit.
    pub fn char_len(self, c: char) -> usize {
        match self {
            LengthUnit::Utf16 => c.len_utf16(),
            LengthUnit::Chars => 1,
        }
    }

    /// Length of `text` in this unit.
    pub fn len(self, text: &str) -> usize {
        match self {
            LengthUnit::Utf16 => text.encode_utf16().count(),
            LengthUnit::Chars => text.chars().count(),
        }
    }
}

/// The longest message a platform accepts in one send, and how it measures length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TextLimits {
    /// Maximum length of one message, in `unit`s.
    pub max: usize,
    /// How length is counted.
    pub unit: LengthUnit,
}

impl TextLimits {
    /// Limits of `max` units counted as `unit`.
    pub const fn new(max: usize, unit: LengthUnit) -> Self {
        Self { max, unit }
    }

    /// Length of `text` in this limit's unit.
    pub fn len(&self, text: &str) -> usize {
        self.unit.len(text)
    }

    /// Whether `text` fits in one message (stops counting as soon as it does not).
    pub fn fits(&self, text: &str) -> bool {
        self.fits_in(text, self.max)
    }

    /// Whether `text` is at most `max` units long in this limit's unit, counting no further than
    /// needed.
    pub(crate) fn fits_in(&self, text: &str, max: usize) -> bool {
        let mut units = 0usize;
        text.chars().all(|c| {
            units += self.unit.char_len(c);
            units <= max
        })
    }
}

/// Removes XML-like tags an LLM may emit (`<thinking>`, `</reply>`, `<tool_call name="x">`,
/// `<br/>`), keeping the text between them.
///
/// What counts as a tag:
/// * `<name>`, `</name>`, `<name/>` and `<name attr="v" ...>` where `name` starts with an ASCII
///   letter or `_` and continues with ASCII letters, digits, `_`, `-` or `.`. Attributes must be
///   `key=value` pairs (quoted or bare; bare boolean attributes are allowed only next to at least
///   one `key=value`), so `x <y and z> w` is prose, not a tag. A tag is at most 512 bytes.
/// * `<br>` / `<br/>` become a line break instead of disappearing.
///
/// What is kept as typed:
/// * anything that does not match the shape above: `a < b`, `x<3`, `<3`, `<-`, `<a@b.c>`,
///   `<https://example.com>`, Discord's `<@123>`, `<#123>`, `<:emoji:123>`, `<t:1700000000:R>`,
///   comments `<!-- -->` and `<?xml?>`;
/// * an opening tag glued to a preceding ASCII letter, digit or `_` (`Vec<String>`, `Option<T>`):
///   that is a generic type, not markup (closing and self-closing tags, and `<br>`, are always
///   removed);
/// * everything inside fenced code blocks and inline code spans.
///
/// The text inside removed tags is kept, including the content of `<thinking>` blocks.
pub fn strip_xml_tags(text: &str) -> String {
    if !text.contains('<') {
        return text.to_owned();
    }
    let protected = code::protected_ranges(text);
    code::map_unprotected(text, &protected, strip_tags_in)
}

/// Longest tag [`strip_xml_tags`] recognises, in bytes (bounds the work per `<`).
const MAX_TAG_LEN: usize = 512;

/// Strips tags from a text that holds no code.
fn strip_tags_in(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut cursor = 0;
    let mut search = 0;
    while let Some(offset) = text[search..].find('<') {
        let start = search + offset;
        let glued = text[..start]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
        match parse_tag(&text[start..], glued) {
            Some(tag) => {
                out.push_str(&text[cursor..start]);
                if tag.is_line_break {
                    out.push('\n');
                }
                cursor = start + tag.len;
                search = cursor;
            }
            None => search = start + 1,
        }
    }
    out.push_str(&text[cursor..]);
    out
}

/// A recognised tag at the start of a string.
struct Tag {
    /// Length in bytes, `<` to `>` inclusive.
    len: usize,
    /// `<br>` or `<br/>` (replaced by a line break).
    is_line_break: bool,
}

/// Parses a tag at the start of `s` (which starts with `<`). `glued` tells whether the `<` directly
/// follows a word character, in which case only closing and self-closing tags count.
fn parse_tag(s: &str, glued: bool) -> Option<Tag> {
    let bytes = s.as_bytes();
    let limit = bytes.len().min(MAX_TAG_LEN);
    let mut i = 1;
    let closing = bytes.get(i) == Some(&b'/');
    if closing {
        i += 1;
    }
    let name_start = i;
    match bytes.get(i) {
        Some(b) if b.is_ascii_alphabetic() || *b == b'_' => i += 1,
        _ => return None,
    }
    while i < limit && (bytes[i].is_ascii_alphanumeric() || matches!(bytes[i], b'_' | b'-' | b'.'))
    {
        i += 1;
    }
    let is_line_break = !closing && s[name_start..i].eq_ignore_ascii_case("br");
    let done = |len: usize| Some(Tag { len, is_line_break });
    match bytes.get(i) {
        Some(b'>') if !closing && glued && !is_line_break => None,
        Some(b'>') => done(i + 1),
        Some(b'/') if !closing && bytes.get(i + 1) == Some(&b'>') => done(i + 2),
        Some(b) if b.is_ascii_whitespace() => {
            let rest = skip_ws(bytes, i, limit);
            if closing {
                return (bytes.get(rest) == Some(&b'>')).then_some(Tag {
                    len: rest + 1,
                    is_line_break: false,
                });
            }
            let (end, self_closing) = parse_attributes(bytes, rest, limit)?;
            if glued && !self_closing {
                return None;
            }
            done(end)
        }
        _ => None,
    }
}

/// Index of the first non-whitespace byte at or after `i` (bounded by `limit`).
fn skip_ws(bytes: &[u8], mut i: usize, limit: usize) -> usize {
    while i < limit && bytes[i].is_ascii_whitespace() {
        i += 1;
    }
    i
}

/// Parses `key="v" key2='w' key3=bare flag` up to the closing `>` or `/>`; returns the index just
/// past the tag and whether it was self-closing. Attributes, when present, must include at least
/// one `key=value` pair (`<y and z>` is prose).
fn parse_attributes(bytes: &[u8], mut i: usize, limit: usize) -> Option<(usize, bool)> {
    let mut has_attribute = false;
    let mut has_value = false;
    loop {
        i = skip_ws(bytes, i, limit);
        let valid = !has_attribute || has_value;
        match bytes.get(i) {
            Some(b'>') if i < limit => return valid.then_some((i + 1, false)),
            Some(b'/') if i < limit && bytes.get(i + 1) == Some(&b'>') => {
                return valid.then_some((i + 2, true));
            }
            Some(b) if i < limit && (b.is_ascii_alphabetic() || *b == b'_') => has_attribute = true,
            _ => return None,
        }
        while i < limit
            && (bytes[i].is_ascii_alphanumeric() || matches!(bytes[i], b'_' | b'-' | b'.' | b':'))
        {
            i += 1;
        }
        if bytes.get(i) != Some(&b'=') {
            continue;
        }
        i += 1;
        has_value = true;
        match bytes.get(i) {
            Some(&quote @ (b'"' | b'\'')) => {
                i += 1;
                while i < limit && bytes[i] != quote {
                    i += 1;
                }
                if i >= limit {
                    return None;
                }
                i += 1;
            }
            Some(b) if !b.is_ascii_whitespace() && *b != b'>' && *b != b'<' => {
                while i < limit
                    && !bytes[i].is_ascii_whitespace()
                    && !matches!(bytes[i], b'>' | b'<')
                {
                    i += 1;
                }
                // A bare value may not swallow the `/` of `/>`.
                if bytes.get(i) == Some(&b'>') && bytes.get(i - 1) == Some(&b'/') {
                    i -= 1;
                }
            }
            _ => return None,
        }
    }
}

/// Turns literal escape sequences an agent wrote into real line breaks.
///
/// Rules:
/// * `\n` (a backslash followed by `n`) and `\r\n` become a line break.
/// * An escaped backslash is left alone: in a run of backslashes before `n`, only an odd run
///   produces a line break (its last backslash is consumed), so `\\n` stays `\\n` and `\\\n`
///   becomes `\\` + line break. `\r` alone, `\t` and other escapes are kept as typed.
/// * If the text already contains a real line break, code is protected: `"a\nb"` inside a fenced
///   block or an inline code span stays as typed. A text with no real line break at all was
///   written on one line with escapes throughout, so it is unescaped everywhere, code included
///   (otherwise its fences could not even be recognised).
pub fn unescape_newlines(text: &str) -> String {
    if !text.contains('\\') {
        return text.to_owned();
    }
    if text.contains('\n') {
        let protected = code::protected_ranges(text);
        code::map_unprotected(text, &protected, unescape_in)
    } else {
        unescape_in(text)
    }
}

/// Unescapes `\n` and `\r\n` everywhere in `text`.
fn unescape_in(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        let mut run = 1;
        while chars.peek() == Some(&'\\') {
            chars.next();
            run += 1;
        }
        if run % 2 == 0 {
            out.extend(std::iter::repeat_n('\\', run));
            continue;
        }
        out.extend(std::iter::repeat_n('\\', run - 1));
        match chars.peek() {
            Some('n') => {
                chars.next();
                out.push('\n');
            }
            Some('r') => {
                let mut lookahead = chars.clone();
                lookahead.next();
                if lookahead.next() == Some('\\') && lookahead.next() == Some('n') {
                    chars = lookahead;
                    out.push('\n');
                } else {
                    out.push('\\');
                }
            }
            _ => out.push('\\'),
        }
    }
    out
}

/// The content pipeline: [`strip_xml_tags`], then [`unescape_newlines`], then trims
/// leading and trailing whitespace (removing a wrapping `<reply>…</reply>` leaves line breaks
/// behind). An empty result means there is nothing to send; handlers reject it.
pub fn process_outgoing(text: &str) -> String {
    unescape_newlines(&strip_xml_tags(text)).trim().to_owned()
}

/// Whether `c` counts as a whole token in [`estimate_tokens`]: Han ideographs (including
/// extensions and compatibility ideographs), kana, Hangul, CJK symbols and punctuation, and
/// full-width forms. Wider than [`writes_without_spaces`], which decides how text is split
/// into words: punctuation and full-width forms cost a token but are no word.
pub fn counts_as_one_token(c: char) -> bool {
    matches!(c as u32,
        0x1100..=0x11FF       // Hangul Jamo
        | 0x2E80..=0x2FDF     // CJK radicals, Kangxi radicals
        | 0x3000..=0x303F     // CJK symbols and punctuation
        | 0x3040..=0x30FF     // Hiragana, Katakana
        | 0x3100..=0x31FF     // Bopomofo, Hangul compatibility Jamo, Kanbun, Katakana ext.
        | 0x3200..=0x9FFF     // enclosed CJK, CJK ext. A, CJK unified ideographs
        | 0xAC00..=0xD7AF     // Hangul syllables
        | 0xF900..=0xFAFF     // CJK compatibility ideographs
        | 0xFF00..=0xFFEF     // half-width and full-width forms
        | 0x20000..=0x3FFFF   // CJK ext. B and later (planes 2 and 3)
    )
}

/// Whether `c` belongs to a script written without spaces between words (Han, kana, Hangul):
/// such text is searched by character grams rather than by words (the memory store's short
/// index, the keywords of a related-message search).
pub fn writes_without_spaces(c: char) -> bool {
    matches!(c as u32,
        0x3040..=0x30FF      // hiragana, katakana
        | 0x31F0..=0x31FF    // katakana phonetic extensions
        | 0x3400..=0x4DBF    // CJK extension A
        | 0x4E00..=0x9FFF    // CJK unified ideographs
        | 0xAC00..=0xD7AF    // hangul syllables
        | 0x1100..=0x11FF    // hangul jamo
        | 0x3130..=0x318F    // hangul compatibility jamo
        | 0xF900..=0xFAFF    // CJK compatibility ideographs
        | 0xFF66..=0xFF9F    // half-width katakana
        | 0x20000..=0x3134F  // CJK extensions B..G
    )
}

/// The first `max_chars` characters of `text` (all of it when shorter), cut on a character
/// boundary: for echoing caller-controlled text into logs and error messages at a bounded size.
pub fn prefix_chars(text: &str, max_chars: usize) -> &str {
    match text.char_indices().nth(max_chars) {
        Some((cut, _)) => &text[..cut],
        None => text,
    }
}

/// `text` cut to `max_chars` characters with `…` appended when something was cut.
pub fn clip_chars(text: &str, max_chars: usize) -> String {
    let prefix = prefix_chars(text, max_chars);
    if prefix.len() == text.len() {
        text.to_owned()
    } else {
        format!("{prefix}…")
    }
}

/// Estimated token count of `text`: a CJK character counts 1, any other non-ASCII
/// character 0.5, an ASCII character 0.25; the total is rounded up.
pub fn estimate_tokens(text: &str) -> usize {
    let quarters: usize = text
        .chars()
        .map(|c| {
            if c.is_ascii() {
                1
            } else if counts_as_one_token(c) {
                4
            } else {
                2
            }
        })
        .sum();
    quarters.div_ceil(4)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_and_clips_count_characters_not_bytes() {
        assert_eq!(prefix_chars("héllo", 2), "hé");
        assert_eq!(prefix_chars("héllo", 5), "héllo");
        assert_eq!(prefix_chars("héllo", 50), "héllo");
        assert_eq!(prefix_chars("", 3), "");
        assert_eq!(prefix_chars("日本語", 0), "");
        assert_eq!(clip_chars("日本語テキスト", 3), "日本語…");
        assert_eq!(clip_chars("日本語", 3), "日本語");
    }

    #[test]
    fn limits_count_in_their_unit() {
        let text = "a😀日";
        assert_eq!(TextLimits::new(2000, LengthUnit::Utf16).len(text), 4);
        assert_eq!(TextLimits::new(3000, LengthUnit::Chars).len(text), 3);
        assert!(TextLimits::new(3, LengthUnit::Chars).fits(text));
        assert!(!TextLimits::new(3, LengthUnit::Utf16).fits(text));
        assert_eq!(LengthUnit::Utf16.char_len('😀'), 2);
        assert_eq!(LengthUnit::Chars.char_len('😀'), 1);
    }

    #[test]
    fn strips_llm_tags_and_keeps_their_text() {
        assert_eq!(
            strip_xml_tags("<reply>Hello <b>there</b>!</reply>"),
            "Hello there!"
        );
        assert_eq!(
            strip_xml_tags("<thinking>plan</thinking>\nAnswer"),
            "plan\nAnswer"
        );
        assert_eq!(
            strip_xml_tags(r#"<tool_call name="send-reply" id='1'>x</tool_call>"#),
            "x"
        );
        assert_eq!(strip_xml_tags("<tool_call name=x/>done"), "done");
        assert_eq!(strip_xml_tags("<Answer >ok</Answer >"), "ok");
        assert_eq!(strip_xml_tags("Hello</reply>"), "Hello");
        assert_eq!(strip_xml_tags("x<empty/>y"), "xy");
        assert_eq!(
            strip_xml_tags("こんにちは<reply>元気？</reply>"),
            "こんにちは元気？"
        );
    }

    #[test]
    fn line_break_tags_become_newlines() {
        assert_eq!(
            strip_xml_tags("one<br/>two<br>three<BR />"),
            "one\ntwo\nthree\n"
        );
    }

    #[test]
    fn keeps_things_that_are_not_tags() {
        for text in [
            "a < b and c > d",
            "x<3",
            "I <3 you",
            "<- back",
            "mail <a@b.c>",
            "see <https://example.com/a?b=1>",
            "hi <@123456789012345678> and <#123> <@&5>",
            "emoji <:blob:123> <a:dance:456>",
            "at <t:1700000000:R>",
            "<!-- comment --> <?xml version=\"1.0\"?>",
            "x <y and z> w",
            "Vec<String> and Option<T> and HashMap<K, V>",
            "<",
            "<a",
            "</",
            "<a b=\"unterminated>",
            "",
        ] {
            assert_eq!(strip_xml_tags(text), text, "{text:?}");
        }
    }

    #[test]
    fn code_keeps_its_tags() {
        let text =
            "Use `Vec<String>` or:\n```html\n<div class=\"a\">x</div>\n```\n<reply>ok</reply>";
        assert_eq!(
            strip_xml_tags(text),
            "Use `Vec<String>` or:\n```html\n<div class=\"a\">x</div>\n```\nok"
        );
    }

    #[test]
    fn long_pseudo_tags_are_not_tags() {
        let text = format!("<a x=\"{}\">", "y".repeat(600));
        assert_eq!(strip_xml_tags(&text), text);
    }

    #[test]
    fn unescapes_literal_newlines() {
        assert_eq!(unescape_newlines(r"a\nb"), "a\nb");
        assert_eq!(unescape_newlines(r"a\r\nb"), "a\nb");
        assert_eq!(unescape_newlines(r"a\n\nb"), "a\n\nb");
        assert_eq!(unescape_newlines(r"a\\nb"), r"a\\nb");
        assert_eq!(unescape_newlines(r"a\\\nb"), "a\\\\\nb");
        assert_eq!(unescape_newlines(r"C:\path\to\rome"), r"C:\path\to\rome");
        assert_eq!(
            unescape_newlines(r"tab\t and \r alone"),
            r"tab\t and \r alone"
        );
        assert_eq!(unescape_newlines(r"end\"), r"end\");
        assert_eq!(unescape_newlines("no escapes"), "no escapes");
    }

    #[test]
    fn code_escapes_survive_when_the_text_is_multiline() {
        let text = "Try:\n```c\nprintf(\"hi\\n\");\n```\nor `puts(\"a\\n\")`\\nthanks";
        assert_eq!(
            unescape_newlines(text),
            "Try:\n```c\nprintf(\"hi\\n\");\n```\nor `puts(\"a\\n\")`\nthanks"
        );
    }

    #[test]
    fn a_single_line_text_is_unescaped_everywhere() {
        let text = r"Here:\n```sh\necho hi\n```\nBye";
        assert_eq!(unescape_newlines(text), "Here:\n```sh\necho hi\n```\nBye");
    }

    #[test]
    fn process_outgoing_strips_unescapes_and_trims() {
        assert_eq!(
            process_outgoing("<reply>\nLine one\\nLine two\n</reply>\n"),
            "Line one\nLine two"
        );
        assert_eq!(process_outgoing("<thinking></thinking>  "), "");
    }

    #[test]
    fn token_estimate_follows_the_spec_weights() {
        assert_eq!(estimate_tokens(""), 0);
        assert_eq!(estimate_tokens("abcd"), 1);
        assert_eq!(estimate_tokens("abcde"), 2);
        assert_eq!(estimate_tokens("日本語"), 3);
        assert_eq!(estimate_tokens("こんにちは"), 5);
        assert_eq!(estimate_tokens("한국"), 2);
        assert_eq!(estimate_tokens("é"), 1);
        assert_eq!(estimate_tokens("éé"), 1);
        assert_eq!(estimate_tokens("😀😀😀"), 2);
        // 8 ASCII (2) + 2 CJK (2) + 1 other (0.5) = 4.5 → 5
        assert_eq!(estimate_tokens("Hi there漢字é"), 5);
    }

    #[test]
    fn cjk_detection_covers_scripts_and_punctuation() {
        for c in ['漢', 'ひ', 'カ', '한', '。', '！', '𠮷', 'Ａ'] {
            assert!(counts_as_one_token(c), "{c}");
        }
        for c in ['a', 'é', 'ß', '😀', 'Ж'] {
            assert!(!counts_as_one_token(c), "{c}");
        }
    }

    #[test]
    fn scripts_without_spaces_are_letters_not_punctuation() {
        for c in ['漢', 'ひ', 'カ', 'ｶ', '한', 'ㄱ', '𠮷'] {
            assert!(writes_without_spaces(c), "{c}");
        }
        for c in ['a', 'é', '。', '！', 'Ａ', '😀'] {
            assert!(!writes_without_spaces(c), "{c}");
        }
    }
}
