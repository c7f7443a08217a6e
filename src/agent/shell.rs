//! A whitelist lexer for the one kind of shell command the permission gate may approve: a
//! single simple command made of plain words.
//!
//! The gate must approve only what the shell will really run, so it has to read a command
//! line the way `/bin/bash -c` (what OpenCode runs) reads it. Rather than model all of bash,
//! this lexer accepts a small subset whose meaning is the same in every POSIX shell and in
//! bash, and refuses everything else with a typed [`LexError`]:
//!
//! * words are separated by spaces and tabs; newline, NUL and every other control character
//!   (C0, DEL, C1) are refused anywhere, as is any other Unicode whitespace;
//! * unquoted text may hold letters, digits, non-ASCII characters and `-_./,:=+%@` only. Every
//!   other ASCII character is refused unquoted: `; | & < > ( )` (lists, pipes, redirections,
//!   subshells, process substitution), `# * ? [ ] { } ~` (comments, globs, brace and tilde
//!   expansion), `\` and quotes of the `$'…'`/`$"…"` kinds, backticks, `!` (history and
//!   pipeline negation), `^` and the rest;
//! * `'…'` is literal text;
//! * `"…"` is literal text except `$`, which must start one of the allowed expansions; `\`,
//!   backticks and `!` are refused inside double quotes;
//! * the only expansions are `$TMPDIR`, `${TMPDIR}`, `$SESSION_ID` and `${SESSION_ID}` (the
//!   payload-file pattern the skills teach), unquoted or inside double quotes; every other `$`
//!   form (`$IFS`, `${X:=…}`, `${X@P}`, `$((…))`, `$1`, `$'…'`, a trailing `$`, …) is refused;
//! * the first word may not be an assignment (`X=1 cmd`) or a reserved word (`time`, `if`, …).
//!
//! Unquoted `$TMPDIR` is still field-split and globbed by the shell; that is safe only because
//! the daemon sets both variables itself (a workspace path and a session id, neither holding
//! blanks nor glob characters). `tests/gate_fuzz.rs` runs what this lexer accepts through
//! `/bin/bash -c` and checks that bash produced exactly the argv [`Word::expand`] predicts.
//!
//! No kept crate fits: general shell parsers accept the whole grammar and would leave the
//! whitelist to be rebuilt over their syntax tree, and word splitters such as `shlex` do not
//! report expansions at all.

use std::iter::Peekable;
use std::str::CharIndices;

/// Unquoted ASCII punctuation with no meaning to the shell (in a non-first word; `=` in the
/// first word is caught as an assignment).
const SAFE_PUNCT: &[char] = &['-', '_', '.', '/', ',', ':', '=', '+', '%', '@'];

/// Words that change the grammar when they start a command.
const RESERVED: &[&str] = &[
    "case", "coproc", "do", "done", "elif", "else", "esac", "fi", "for", "function", "if", "in",
    "select", "then", "time", "until", "while",
];

/// One of the two variables a command may expand.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Var {
    /// `$TMPDIR`: the session's temporary directory.
    TmpDir,
    /// `$SESSION_ID`: the session's id.
    SessionId,
}

impl Var {
    /// The variable's name in the environment.
    pub fn name(self) -> &'static str {
        match self {
            Var::TmpDir => "TMPDIR",
            Var::SessionId => "SESSION_ID",
        }
    }

    fn from_name(name: &str) -> Option<Var> {
        match name {
            "TMPDIR" => Some(Var::TmpDir),
            "SESSION_ID" => Some(Var::SessionId),
            _ => None,
        }
    }
}

/// A piece of a double-quoted string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    /// Literal text.
    Text(String),
    /// An allowed expansion (not field-split inside quotes).
    Var(Var),
}

/// A part of a word, as the shell reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Part {
    /// Unquoted literal text (only safe characters).
    Literal(String),
    /// `'…'`: literal text.
    SingleQuoted(String),
    /// `"…"`: text and allowed expansions.
    DoubleQuoted(Vec<Piece>),
    /// An unquoted allowed expansion.
    Var(Var),
}

/// One word of the command: the parts the shell concatenates into one argument.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Word {
    /// The parts, in order.
    pub parts: Vec<Part>,
}

impl Word {
    /// The text when the word is bare unquoted literal text (no quotes, no expansion): the only
    /// form a program word may take.
    pub fn as_bare_literal(&self) -> Option<&str> {
        match self.parts.as_slice() {
            [Part::Literal(s)] => Some(s),
            _ => None,
        }
    }

    /// The argument the shell passes for this word, with `value` giving each variable's value.
    pub fn expand(&self, value: impl Fn(Var) -> String) -> String {
        self.render(value)
    }

    /// The word with its quotes removed and expansions written `$NAME`: what flag checks and
    /// log lines look at.
    pub fn template(&self) -> String {
        self.render(|v| format!("${}", v.name()))
    }

    fn render(&self, var: impl Fn(Var) -> String) -> String {
        let mut out = String::new();
        for part in &self.parts {
            match part {
                Part::Literal(s) | Part::SingleQuoted(s) => out.push_str(s),
                Part::Var(v) => out.push_str(&var(*v)),
                Part::DoubleQuoted(pieces) => {
                    for piece in pieces {
                        match piece {
                            Piece::Text(s) => out.push_str(s),
                            Piece::Var(v) => out.push_str(&var(*v)),
                        }
                    }
                }
            }
        }
        out
    }
}

/// Why a command line is outside the safe subset. `at` is a byte offset into the line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LexError {
    /// Newline, NUL, DEL or another control character.
    #[error("control character {ch:?} at byte {at}")]
    ControlCharacter {
        /// Byte offset.
        at: usize,
        /// The character.
        ch: char,
    },
    /// Whitespace other than space and tab.
    #[error("unusual whitespace {ch:?} at byte {at}; separate words with spaces")]
    UnusualSpace {
        /// Byte offset.
        at: usize,
        /// The character.
        ch: char,
    },
    /// An unquoted character the shell gives a meaning to.
    #[error(
        "shell metacharacter {ch:?} at byte {at} (lists, pipes, redirections, subshells, \
         comments, globs, braces, `~` and `\\` are refused; quote literal text with '…')"
    )]
    Metacharacter {
        /// Byte offset.
        at: usize,
        /// The character.
        ch: char,
    },
    /// A `$` form other than the four allowed expansions.
    #[error(
        "expansion {text:?} at byte {at}; only $TMPDIR, ${{TMPDIR}}, $SESSION_ID and \
         ${{SESSION_ID}} are allowed"
    )]
    Expansion {
        /// Byte offset of the `$`.
        at: usize,
        /// The start of the expansion, as written.
        text: String,
    },
    /// `\`, a backtick or `!` inside double quotes.
    #[error("{ch:?} inside double quotes at byte {at}; use single quotes for literal text")]
    InDoubleQuotes {
        /// Byte offset.
        at: usize,
        /// The character.
        ch: char,
    },
    /// A quote that is never closed.
    #[error("unterminated {quote} quote opened at byte {at}")]
    Unterminated {
        /// Byte offset of the opening quote.
        at: usize,
        /// `'` or `"`.
        quote: char,
    },
    /// `NAME=value` before the program: the shell would run the next word with a changed
    /// environment.
    #[error("leading assignment {word:?}; the command must start with the program")]
    Assignment {
        /// The assignment word.
        word: String,
    },
    /// A reserved word (`time`, `if`, `function`, …) starting the command.
    #[error("reserved word {word:?} at the start of the command")]
    ReservedWord {
        /// The word.
        word: String,
    },
}

/// Splits `line` into words as `bash -c` would, or says why the line is outside the subset.
/// An empty or blank line gives no words.
pub fn lex(line: &str) -> Result<Vec<Word>, LexError> {
    let mut lexer = Lexer {
        line,
        chars: line.char_indices().peekable(),
    };
    let mut words: Vec<Word> = Vec::new();
    let mut word: Option<Word> = None;
    while let Some((at, c)) = lexer.chars.next() {
        if c == ' ' || c == '\t' {
            if let Some(w) = word.take() {
                push_word(&mut words, w)?;
            }
            continue;
        }
        let parts = &mut word.get_or_insert_with(Word::default).parts;
        match c {
            '\'' => parts.push(Part::SingleQuoted(lexer.single_quoted(at)?)),
            '"' => parts.push(Part::DoubleQuoted(lexer.double_quoted(at)?)),
            '$' => parts.push(Part::Var(lexer.expansion(at)?)),
            c => {
                check_char(at, c)?;
                if !(c.is_ascii_alphanumeric() || SAFE_PUNCT.contains(&c) || !c.is_ascii()) {
                    return Err(LexError::Metacharacter { at, ch: c });
                }
                match parts.last_mut() {
                    Some(Part::Literal(s)) => s.push(c),
                    _ => parts.push(Part::Literal(c.to_string())),
                }
            }
        }
    }
    if let Some(w) = word {
        push_word(&mut words, w)?;
    }
    Ok(words)
}

/// Refuses control characters and unusual whitespace (anywhere, quoted or not).
fn check_char(at: usize, ch: char) -> Result<(), LexError> {
    if ch.is_control() {
        Err(LexError::ControlCharacter { at, ch })
    } else if ch.is_whitespace() && ch != ' ' {
        Err(LexError::UnusualSpace { at, ch })
    } else {
        Ok(())
    }
}

/// Adds a finished word, checking the first one for an assignment or a reserved word.
fn push_word(words: &mut Vec<Word>, word: Word) -> Result<(), LexError> {
    if words.is_empty() {
        if let Some(Part::Literal(lead)) = word.parts.first()
            && let Some((name, _)) = lead.split_once('=')
            && is_name(name.strip_suffix('+').unwrap_or(name))
        {
            return Err(LexError::Assignment {
                word: word.template(),
            });
        }
        if let Some(w) = word.as_bare_literal()
            && RESERVED.contains(&w)
        {
            return Err(LexError::ReservedWord { word: w.to_owned() });
        }
    }
    words.push(word);
    Ok(())
}

/// A shell variable name: `[A-Za-z_][A-Za-z0-9_]*`.
fn is_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

struct Lexer<'a> {
    line: &'a str,
    chars: Peekable<CharIndices<'a>>,
}

impl Lexer<'_> {
    /// The text after an opening `'` at `open`, up to the closing one.
    fn single_quoted(&mut self, open: usize) -> Result<String, LexError> {
        let mut text = String::new();
        loop {
            match self.chars.next() {
                None => {
                    return Err(LexError::Unterminated {
                        at: open,
                        quote: '\'',
                    });
                }
                Some((_, '\'')) => return Ok(text),
                Some((at, c)) => {
                    check_char(at, c)?;
                    text.push(c);
                }
            }
        }
    }

    /// The pieces after an opening `"` at `open`, up to the closing one.
    fn double_quoted(&mut self, open: usize) -> Result<Vec<Piece>, LexError> {
        let mut pieces = Vec::new();
        loop {
            match self.chars.next() {
                None => {
                    return Err(LexError::Unterminated {
                        at: open,
                        quote: '"',
                    });
                }
                Some((_, '"')) => return Ok(pieces),
                Some((at, '$')) => pieces.push(Piece::Var(self.expansion(at)?)),
                Some((at, ch @ ('\\' | '`' | '!'))) => {
                    return Err(LexError::InDoubleQuotes { at, ch });
                }
                Some((at, c)) => {
                    check_char(at, c)?;
                    match pieces.last_mut() {
                        Some(Piece::Text(s)) => s.push(c),
                        _ => pieces.push(Piece::Text(c.to_string())),
                    }
                }
            }
        }
    }

    /// The variable of an expansion whose `$` is at `dollar`: `$NAME` (the longest run of name
    /// characters, as the shell reads it) or exactly `${NAME}`.
    fn expansion(&mut self, dollar: usize) -> Result<Var, LexError> {
        let braced = self.chars.next_if(|&(_, c)| c == '{').is_some();
        let mut name = String::new();
        while let Some((_, c)) = self
            .chars
            .next_if(|&(_, c)| c.is_ascii_alphanumeric() || c == '_')
        {
            name.push(c);
        }
        let closed = !braced || self.chars.next_if(|&(_, c)| c == '}').is_some();
        match Var::from_name(&name) {
            Some(var) if closed => Ok(var),
            _ => Err(LexError::Expansion {
                at: dollar,
                text: self.line[dollar..].chars().take(16).collect(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lit(s: &str) -> Part {
        Part::Literal(s.into())
    }

    fn word(parts: Vec<Part>) -> Word {
        Word { parts }
    }

    #[test]
    fn splits_words_on_spaces_and_tabs_and_keeps_quoted_parts() {
        let words = lex(" a\t'b c'd\"e $TMPDIR/${SESSION_ID}\" $SESSION_ID-x  ").unwrap();
        assert_eq!(
            words,
            [
                word(vec![lit("a")]),
                word(vec![
                    Part::SingleQuoted("b c".into()),
                    lit("d"),
                    Part::DoubleQuoted(vec![
                        Piece::Text("e ".into()),
                        Piece::Var(Var::TmpDir),
                        Piece::Text("/".into()),
                        Piece::Var(Var::SessionId),
                    ]),
                ]),
                word(vec![Part::Var(Var::SessionId), lit("-x")]),
            ]
        );
        assert!(lex("  \t ").unwrap().is_empty());
        assert_eq!(
            lex("''").unwrap(),
            [word(vec![Part::SingleQuoted(String::new())])]
        );
    }

    #[test]
    fn single_quotes_are_literal() {
        let words = lex(r#"x '$(id) `id` ; | & \ * ~ {a,b} # "'"#).unwrap();
        assert_eq!(
            words[1].expand(|_| unreachable!()),
            r#"$(id) `id` ; | & \ * ~ {a,b} # ""#
        );
        assert_eq!(words[1].as_bare_literal(), None);
    }

    #[test]
    fn expand_substitutes_and_template_names_the_variables() {
        let w = &lex("--message-file=\"$TMPDIR/$SESSION_ID/r.md\"").unwrap()[0];
        let value = |v: Var| match v {
            Var::TmpDir => "/ws/tmp".to_owned(),
            Var::SessionId => "s1".to_owned(),
        };
        assert_eq!(w.expand(value), "--message-file=/ws/tmp/s1/r.md");
        assert_eq!(w.template(), "--message-file=$TMPDIR/$SESSION_ID/r.md");
    }

    #[test]
    fn refuses_every_unquoted_metacharacter() {
        for ch in ";|&<>()#*?[]{}~\\`!^\"'$".chars() {
            let line = format!("a{ch}b");
            let err = lex(&line).unwrap_err();
            assert!(
                matches!(
                    err,
                    LexError::Metacharacter { .. }
                        | LexError::Unterminated { .. }
                        | LexError::Expansion { .. }
                ),
                "{line:?}: {err:?}"
            );
        }
        assert_eq!(
            lex("x a*").unwrap_err(),
            LexError::Metacharacter { at: 3, ch: '*' }
        );
    }

    #[test]
    fn refuses_expansions_other_than_the_four() {
        for line in [
            "x $IFS",
            "x ${IFS}",
            "x $TMPDIRX",
            "x ${TMPDIR:=/x}",
            "x ${TMPDIR@P}",
            "x ${TMPDIR",
            "x $((1+1))",
            "x $(id)",
            "x $'\\x41'",
            "x $\"msg\"",
            "x $1",
            "x $",
            "x \"$\"",
            "x \"${X:-$(id)}\"",
            "x $SESSION_ID_2",
            "x ${#TMPDIR}",
            "x ${!TMPDIR}",
        ] {
            assert!(
                matches!(lex(line), Err(LexError::Expansion { .. })),
                "{line:?}: {:?}",
                lex(line)
            );
        }
    }

    #[test]
    fn refuses_escapes_backticks_and_history_in_double_quotes() {
        for (line, at, ch) in [
            ("x \"a\\b\"", 4, '\\'),
            ("x \"`id`\"", 3, '`'),
            ("x \"!!\"", 3, '!'),
        ] {
            assert_eq!(
                lex(line).unwrap_err(),
                LexError::InDoubleQuotes { at, ch },
                "{line:?}"
            );
        }
    }

    #[test]
    fn refuses_control_characters_and_odd_whitespace_even_quoted() {
        for ch in ['\n', '\r', '\0', '\x01', '\x1b', '\x7f', '\u{85}'] {
            for (line, at) in [
                (format!("x a{ch}"), 3),
                (format!("x 'a{ch}'"), 4),
                (format!("x \"a{ch}\""), 4),
            ] {
                assert_eq!(
                    lex(&line).unwrap_err(),
                    LexError::ControlCharacter { at, ch },
                    "{line:?}"
                );
            }
        }
        assert!(matches!(
            lex("x\u{a0}y"),
            Err(LexError::UnusualSpace { .. })
        ));
        assert!(matches!(
            lex("x '\u{3000}'"),
            Err(LexError::UnusualSpace { .. })
        ));
    }

    #[test]
    fn refuses_unterminated_quotes() {
        assert_eq!(
            lex("x 'abc").unwrap_err(),
            LexError::Unterminated { at: 2, quote: '\'' }
        );
        assert_eq!(
            lex("x \"abc").unwrap_err(),
            LexError::Unterminated { at: 2, quote: '"' }
        );
    }

    #[test]
    fn refuses_a_leading_assignment_or_reserved_word_only_in_first_position() {
        for line in ["X=1 cmd", "X+=1 cmd", "_x=$TMPDIR cmd", "X='a b' cmd"] {
            assert!(
                matches!(lex(line), Err(LexError::Assignment { .. })),
                "{line:?}"
            );
        }
        for line in ["time cmd", "if x", "function f", "coproc cmd"] {
            assert!(
                matches!(lex(line), Err(LexError::ReservedWord { .. })),
                "{line:?}"
            );
        }
        assert_eq!(lex("cmd X=1 time").unwrap().len(), 3);
        assert_eq!(lex("'X=1' cmd").unwrap().len(), 2);
        assert_eq!(lex("-x=1 cmd").unwrap().len(), 2);
    }

    #[test]
    fn accepts_non_ascii_literals() {
        let words = lex("x --emoji 👍 日本語").unwrap();
        assert_eq!(words[2].as_bare_literal(), Some("👍"));
        assert_eq!(words[3].as_bare_literal(), Some("日本語"));
    }
}
