//! What the daemon itself tells a user, in the language of the place (`prompts.language`,
//! `places[].language`): the short texts sent when the agent cannot answer — the queue is full,
//! the user writes too fast, the budget is spent, the model failed (one text per
//! [`ProblemKind`]), the workspace is full, the memory limit, any other error.
//!
//! The texts are the operator's to edit, like the prompts: `{prompts.dir}/texts/{language}.md`
//! holds one `## key` section per [`Notice`], the text under a heading being what the user gets
//! (`{minutes}` is filled in where the notice has it). A key a language's file leaves out comes
//! from the global language, then from the built-in English ([`Notice::english`]). The files
//! are read at start and on a reload (SIGHUP), on the caller's thread: [`Notices::load`] and
//! [`Notices::reload`] block, so the daemon calls them from the blocking pool.
//! [`check_languages`] is what `check-config` says of them.
//!
//! The texts never name internals (no provider, status or key name): those go to the operator's
//! log record and `/readyz` (`gateway::health`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use crate::gateway::ProblemKind;
use crate::sync::RecoverRw;

/// The folder of the language files, in the prompts folder.
pub const TEXTS_DIR: &str = "texts";

pub use crate::config::BUILT_IN_LANGUAGE;
use crate::names::is_language_tag;

/// Longest text taken from a file, in characters (a chat message must fit it).
const MAX_CHARS: usize = 1_500;

/// Largest language file read, in bytes.
const MAX_FILE_BYTES: u64 = 64 * 1024;

/// One thing the daemon tells a user.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Notice {
    /// The conversation's queue is full.
    Busy,
    /// The user is over the rate limit, for about `minutes`.
    TooFast {
        /// Minutes until messages are read again (at least 1).
        minutes: u64,
    },
    /// The user's (or the place's) daily budget is spent before the turn began.
    OutOfBudget,
    /// The user's workspace is over its quota.
    WorkspaceFull,
    /// The agent went over its memory limit.
    MemoryLimit,
    /// Anything else went wrong before an answer reached the user.
    Error,
    /// The user's data is being erased right now (`forget-user`): nothing of theirs is started
    /// until it is done.
    Erasing,
    /// The operator blocked the user in the console (told once, at their first message after
    /// the block).
    Blocked,
    /// Every model request of the turn failed with this cause.
    Model(ProblemKind),
}

/// The notices' keys besides the model failures', in the order of the shipped files.
const OWN_KEYS: [&str; 8] = [
    "busy",
    "too_fast",
    "out_of_budget",
    "workspace_full",
    "memory_limit",
    "error",
    "erasing",
    "blocked",
];

impl Notice {
    /// Every notice (with a sample value where it has one), in the order of the shipped files.
    pub fn all() -> impl Iterator<Item = Notice> {
        [
            Notice::Busy,
            Notice::TooFast { minutes: 1 },
            Notice::OutOfBudget,
            Notice::WorkspaceFull,
            Notice::MemoryLimit,
            Notice::Error,
            Notice::Erasing,
            Notice::Blocked,
        ]
        .into_iter()
        .chain(ProblemKind::ALL.into_iter().map(Notice::Model))
    }

    /// Its section heading in a language file.
    pub fn key(self) -> &'static str {
        match self {
            Notice::Busy => OWN_KEYS[0],
            Notice::TooFast { .. } => OWN_KEYS[1],
            Notice::OutOfBudget => OWN_KEYS[2],
            Notice::WorkspaceFull => OWN_KEYS[3],
            Notice::MemoryLimit => OWN_KEYS[4],
            Notice::Error => OWN_KEYS[5],
            Notice::Erasing => OWN_KEYS[6],
            Notice::Blocked => OWN_KEYS[7],
            Notice::Model(kind) => kind.as_str(),
        }
    }

    /// The placeholders its text may hold.
    fn placeholders(self) -> &'static [&'static str] {
        match self {
            Notice::TooFast { .. } => &["minutes"],
            _ => &[],
        }
    }

    /// The built-in English text (the template: placeholders not filled in).
    pub fn english(self) -> &'static str {
        match self {
            Notice::Busy => {
                "I'm a bit busy right now and can't take more messages here. Please try again in a moment."
            }
            Notice::TooFast { .. } => {
                "You're sending messages faster than I can keep up with. I'll listen again in about {minutes} min."
            }
            Notice::OutOfBudget => {
                "I've used up what I'm allowed to think for today, so I can't answer right now. Let's talk again tomorrow!"
            }
            Notice::WorkspaceFull => {
                "My notebook for you is full, so I can't work on this right now. The bot's operator has been told."
            }
            Notice::MemoryLimit => {
                "That needed more memory than I'm allowed to use, so I had to stop. Could you ask for something smaller?"
            }
            Notice::Error => "I ran into a problem answering that, please try again.",
            Notice::Erasing => {
                "I'm erasing everything I kept about you right now. Please write again in a minute."
            }
            Notice::Blocked => {
                "The operator of this bot has stopped me from answering you, so I won't reply to your messages."
            }
            Notice::Model(kind) => match kind {
                ProblemKind::Unreachable => {
                    "I can't reach my language model right now — the operator has been told. Please try again in a few minutes."
                }
                ProblemKind::TimedOut => {
                    "My language model isn't answering in time right now — the operator has been told. Please try again in a few minutes."
                }
                ProblemKind::ServerError => {
                    "My language model is having trouble right now — the operator has been told. Please try again in a few minutes."
                }
                ProblemKind::KeyNotSet => {
                    "I'm not set up to use my language model yet, so I can't answer. The operator has been told."
                }
                ProblemKind::KeyRejected => {
                    "My language model isn't letting me in right now, so I can't answer. The operator has been told."
                }
                ProblemKind::RateLimited => {
                    "My language model is too busy to answer right now. Please try again in a minute or two."
                }
                ProblemKind::ModelNotFound => {
                    "The language model I'm set up to use isn't available, so I can't answer. The operator has been told."
                }
                ProblemKind::BudgetExhausted => {
                    "I've used up what I'm allowed to think for today, so I can't finish this. Let's talk again tomorrow!"
                }
            },
        }
    }

    /// `template` with this notice's values in its placeholders.
    fn fill(self, template: &str) -> String {
        match self {
            Notice::TooFast { minutes } => template.replace("{minutes}", &minutes.to_string()),
            _ => template.to_owned(),
        }
    }
}

/// The texts of every language file, by language, then by key.
type Texts = HashMap<String, HashMap<&'static str, String>>;

/// One reading of the language files.
#[derive(Debug, Default)]
struct Book {
    /// The global language (`prompts.language`): the first fallback.
    default_language: String,
    texts: Texts,
}

/// The texts in force: the language files of a prompts folder, and the global language.
#[derive(Debug)]
pub struct Notices {
    dir: PathBuf,
    book: RwLock<Arc<Book>>,
}

impl Notices {
    /// The texts of `{prompts_dir}/texts/`, with `default_language` for keys a place's language
    /// leaves out. Reads the files (blocking); a problem with one is logged and its language
    /// falls back to the global language's texts.
    pub fn load(prompts_dir: &Path, default_language: &str) -> Self {
        let notices = Self {
            dir: prompts_dir.join(TEXTS_DIR),
            book: RwLock::default(),
        };
        notices.reload(default_language);
        notices
    }

    /// Only the built-in English texts (tests and tools without a prompts folder).
    pub fn built_in() -> Self {
        Self {
            dir: PathBuf::new(),
            book: RwLock::default(),
        }
    }

    /// Re-reads the language files, with `default_language` as the global language (start,
    /// SIGHUP; blocking).
    pub fn reload(&self, default_language: &str) {
        let texts = if self.dir.as_os_str().is_empty() {
            Texts::new()
        } else {
            read_texts(&self.dir)
        };
        *self.book.write_locked() = Arc::new(Book {
            default_language: default_language.to_owned(),
            texts,
        });
    }

    /// What `notice` says in `language`: that language's text, else the global language's,
    /// else the built-in English.
    pub fn text(&self, language: &str, notice: Notice) -> String {
        let book = self.book.read_locked().clone();
        let template = [language, &book.default_language]
            .into_iter()
            .find_map(|l| book.texts.get(l).and_then(|texts| texts.get(notice.key())))
            .map_or(notice.english(), String::as_str);
        notice.fill(template)
    }
}

/// Every `{tag}.md` of `dir` (none when it is missing).
fn read_texts(dir: &Path) -> Texts {
    let mut book = Texts::new();
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return book,
        Err(e) => {
            tracing::warn!(dir = %dir.display(), error = %e, "cannot read the folder of the daemon's texts; using the built-in ones");
            return book;
        }
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let Some(language) = language_of(&path) else {
            continue;
        };
        match read_file(&path) {
            Ok(file) => {
                for problem in &file.problems {
                    tracing::warn!(file = %path.display(), problem = %problem, "a daemon text is skipped");
                }
                book.insert(language.to_owned(), file.texts);
            }
            Err(e) => {
                tracing::warn!(file = %path.display(), error = %e, "cannot read the daemon's texts of a language; using the global language's");
            }
        }
    }
    book
}

/// The language a file of the texts folder is for (`ja.md`: `ja`); `None` for other files.
fn language_of(path: &Path) -> Option<&str> {
    let name = path.file_name()?.to_str()?;
    let tag = name.strip_suffix(".md")?;
    is_language_tag(tag).then_some(tag)
}

/// One language file, read.
#[derive(Debug, Default)]
struct LanguageFile {
    texts: HashMap<&'static str, String>,
    /// What was skipped, in words.
    problems: Vec<String>,
}

fn read_file(path: &Path) -> std::io::Result<LanguageFile> {
    use std::io::Read;
    let mut source = String::new();
    std::fs::File::open(path)?
        .take(MAX_FILE_BYTES + 1)
        .read_to_string(&mut source)?;
    if source.len() as u64 > MAX_FILE_BYTES {
        return Err(std::io::Error::other(format!(
            "larger than {MAX_FILE_BYTES} bytes"
        )));
    }
    Ok(parse(&source))
}

/// The `## key` sections of `source`: trimmed, cut to [`MAX_CHARS`]; unknown keys, empty
/// sections and unknown placeholders are named in `problems` (and skipped).
fn parse(source: &str) -> LanguageFile {
    let mut file = LanguageFile::default();
    let mut sections: Vec<(&str, String)> = Vec::new();
    for line in source.lines() {
        if let Some(heading) = line.strip_prefix("## ") {
            sections.push((heading.trim(), String::new()));
        } else if let Some((_, text)) = sections.last_mut() {
            text.push_str(line);
            text.push('\n');
        }
    }
    for (key, text) in sections {
        let Some(notice) = Notice::all().find(|n| n.key() == key) else {
            file.problems
                .push(format!("the section {key:?} names no daemon text"));
            continue;
        };
        let text = text.trim();
        if text.is_empty() {
            file.problems.push(format!("the section {key:?} is empty"));
            continue;
        }
        if let Some(unknown) = unknown_placeholder(notice, text) {
            file.problems.push(format!(
                "the section {key:?} has the placeholder {{{unknown}}}, which it cannot fill{}",
                match notice.placeholders() {
                    [] => String::new(),
                    known => format!(" (it has: {})", known.join(", ")),
                }
            ));
            continue;
        }
        file.texts.insert(
            notice.key(),
            crate::text::prefix_chars(text, MAX_CHARS).to_owned(),
        );
    }
    file
}

/// A `{name}` in `text` that `notice` does not fill.
fn unknown_placeholder(notice: Notice, text: &str) -> Option<String> {
    let mut rest = text;
    while let Some(start) = rest.find('{') {
        let after = &rest[start + 1..];
        let Some(end) = after.find('}') else { break };
        let name = &after[..end];
        let is_name = !name.is_empty() && name.bytes().all(|b| b.is_ascii_lowercase() || b == b'_');
        if is_name && !notice.placeholders().contains(&name) {
            return Some(name.to_owned());
        }
        rest = &after[end + 1..];
    }
    None
}

/// What [`check_languages`] found, each `(configuration key, message)`.
#[derive(Debug, Default)]
pub struct LanguageCheck {
    /// Languages without texts.
    pub errors: Vec<(String, String)>,
    /// Skipped sections, and texts a language file leaves out.
    pub warnings: Vec<(String, String)>,
}

/// What `check-config` says of the texts: for each `(key, language)` the configuration sets, an
/// error when `{prompts_dir}/texts/{language}.md` is missing (the built-in English needs none),
/// and a warning for each problem of a file that is there and each notice it leaves out.
pub fn check_languages<'a>(
    prompts_dir: &Path,
    languages: impl IntoIterator<Item = (String, &'a str)>,
) -> LanguageCheck {
    let dir = prompts_dir.join(TEXTS_DIR);
    let mut errors = Vec::new();
    let mut warnings = Vec::new();
    let mut seen: Vec<&str> = Vec::new();
    for (key, language) in languages {
        let path = dir.join(format!("{language}.md"));
        let file = match read_file(&path) {
            Ok(file) => file,
            Err(_) if language == BUILT_IN_LANGUAGE => continue,
            Err(e) => {
                errors.push((
                    key,
                    format!(
                        "no texts for {language:?}: cannot read {} ({e}); write it with a `## key` section per text (docs/PLACES.md)",
                        path.display()
                    ),
                ));
                continue;
            }
        };
        if seen.contains(&language) {
            continue;
        }
        seen.push(language);
        for problem in file.problems {
            warnings.push((key.clone(), format!("{}: {problem}", path.display())));
        }
        let missing: Vec<&str> = Notice::all()
            .map(Notice::key)
            .filter(|k| !file.texts.contains_key(k))
            .collect();
        if !missing.is_empty() {
            warnings.push((
                key,
                format!(
                    "{} has no text for {}: the global language's (or the built-in English) is used",
                    path.display(),
                    missing.join(", ")
                ),
            ));
        }
    }
    LanguageCheck { errors, warnings }
}

#[cfg(test)]
mod tests {
    use super::*;

    const JA: &str = "# 日本語\n\nIntro that is never sent.\n\n## busy\nいま少し忙しいです。\n\n## too_fast\n{minutes}分ほど待ってください。\n\n## error\n\n## no_such_text\nnever\n\n## memory_limit\n{bytes} too much\n";

    fn folder(files: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join(TEXTS_DIR)).unwrap();
        for (name, text) in files {
            std::fs::write(dir.path().join(TEXTS_DIR).join(name), text).unwrap();
        }
        dir
    }

    #[test]
    fn a_language_file_replaces_the_texts_it_has_and_the_rest_falls_back() {
        let dir = folder(&[("ja.md", JA), ("de.md", "## error\nFehler.\n")]);
        let notices = Notices::load(dir.path(), "de");
        assert_eq!(notices.text("ja", Notice::Busy), "いま少し忙しいです。");
        assert_eq!(
            notices.text("ja", Notice::TooFast { minutes: 3 }),
            "3分ほど待ってください。"
        );
        // Empty in ja: the global language's.
        assert_eq!(notices.text("ja", Notice::Error), "Fehler.");
        // An unknown placeholder: skipped, so the built-in English.
        assert_eq!(
            notices.text("ja", Notice::MemoryLimit),
            Notice::MemoryLimit.english()
        );
        // A language without a file: the global language, then English.
        assert_eq!(notices.text("fr", Notice::Error), "Fehler.");
        assert_eq!(
            notices.text("fr", Notice::Model(ProblemKind::Unreachable)),
            Notice::Model(ProblemKind::Unreachable).english()
        );
    }

    #[test]
    fn a_reload_reads_the_files_again() {
        let dir = folder(&[("ja.md", "## busy\n前\n")]);
        let notices = Notices::load(dir.path(), "en");
        std::fs::write(dir.path().join(TEXTS_DIR).join("ja.md"), "## busy\n後\n").unwrap();
        assert_eq!(notices.text("ja", Notice::Busy), "前");
        notices.reload("ja");
        assert_eq!(notices.text("ja", Notice::Busy), "後");
        assert_eq!(
            notices.text("fr", Notice::Busy),
            "後",
            "ja is the global language now"
        );
    }

    #[test]
    fn the_built_in_texts_fill_their_placeholders_and_name_no_internals() {
        let notices = Notices::built_in();
        assert_eq!(
            notices.text("en", Notice::TooFast { minutes: 2 }),
            "You're sending messages faster than I can keep up with. I'll listen again in about 2 min."
        );
        for notice in Notice::all() {
            let text = notices.text("xx", notice);
            assert!(!text.contains('{'), "{text}");
            for internal in ["HTTP", "401", "API", "provider"] {
                assert!(!text.contains(internal), "{notice:?}: {text}");
            }
        }
    }

    #[test]
    fn every_shipped_language_has_every_text_and_english_is_the_built_in_one() {
        let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("prompts");
        let languages: Vec<String> = std::fs::read_dir(shipped.join(TEXTS_DIR))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter_map(|p| language_of(&p).map(str::to_owned))
            .collect();
        assert!(languages.len() >= 5, "{languages:?}");
        for language in &languages {
            let file = read_file(&shipped.join(TEXTS_DIR).join(format!("{language}.md"))).unwrap();
            assert!(file.problems.is_empty(), "{language}: {:?}", file.problems);
            for notice in Notice::all() {
                let text = file.texts.get(notice.key());
                assert!(text.is_some(), "{language} has no {}", notice.key());
                if language == BUILT_IN_LANGUAGE {
                    assert_eq!(text.unwrap(), notice.english(), "{}", notice.key());
                }
                if !notice.placeholders().is_empty() {
                    assert!(
                        text.unwrap().contains("{minutes}"),
                        "{language}: {}",
                        notice.key()
                    );
                }
            }
        }
    }

    #[test]
    fn the_check_names_a_missing_file_and_what_a_file_lacks() {
        let dir = folder(&[("ja.md", JA)]);
        let LanguageCheck { errors, warnings } = check_languages(
            dir.path(),
            [
                ("prompts.language".to_owned(), "en"),
                ("places.0.language".to_owned(), "ja"),
                ("places.1.language".to_owned(), "ja"),
                ("places.2.language".to_owned(), "eo"),
            ],
        );
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert_eq!(errors[0].0, "places.2.language");
        assert!(errors[0].1.contains("eo.md"), "{errors:?}");
        // Each problem of ja.md once, and what it lacks.
        let said: Vec<&str> = warnings.iter().map(|(_, w)| w.as_str()).collect();
        assert!(
            said.iter()
                .any(|w| w.contains("\"no_such_text\" names no daemon text")),
            "{said:?}"
        );
        assert!(
            said.iter().any(|w| w.contains("\"error\" is empty")),
            "{said:?}"
        );
        assert!(said.iter().any(|w| w.contains("{bytes}")), "{said:?}");
        assert!(
            said.iter()
                .any(|w| w.contains("has no text for") && w.contains("workspace_full")),
            "{said:?}"
        );
        assert!(
            warnings.iter().all(|(k, _)| k == "places.0.language"),
            "{warnings:?}"
        );
    }
}
