//! What the user is told when the model could not answer, in plain words per cause.
//!
//! The texts are the operator's to edit, like the prompts: `prompts/model-failures.md` holds
//! one section per class (`## unreachable`, `## key_rejected`, ...; the names of
//! [`ProblemKind::as_str`]), the text under a heading being what the user gets. A class without
//! a section (or a missing file) gets its built-in text ([`default_text`]); a heading that
//! names no class is skipped with a warning. The file is read when a failure is told (rare, on
//! the blocking pool), so an edit takes effect at the next one.
//!
//! The texts never name internals (no provider, status or key name): those go to the operator's
//! log record and `/readyz` (`gateway::health`).

use std::path::{Path, PathBuf};

use crate::gateway::ProblemKind;

/// The file in the prompts folder.
pub const FILE_NAME: &str = "model-failures.md";

/// Longest text taken from the file, in characters (a chat message must fit it).
const MAX_CHARS: usize = 1_500;

/// The built-in text for `kind`.
pub fn default_text(kind: ProblemKind) -> &'static str {
    match kind {
        ProblemKind::Unreachable | ProblemKind::TimedOut | ProblemKind::ServerError => {
            "I can't reach my language model right now — the operator has been told. Please try again in a few minutes."
        }
        ProblemKind::KeyNotSet | ProblemKind::KeyRejected => {
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
    }
}

/// The operator's texts, read from a prompts folder.
#[derive(Debug, Clone)]
pub struct FailureTexts {
    file: PathBuf,
}

impl FailureTexts {
    /// Texts from `{prompts_dir}/model-failures.md`.
    pub fn new(prompts_dir: &Path) -> Self {
        Self {
            file: prompts_dir.join(FILE_NAME),
        }
    }

    /// The text for `kind`: the file's section, else the built-in one.
    pub async fn text(&self, kind: ProblemKind) -> String {
        let file = self.file.clone();
        tokio::task::spawn_blocking(move || text_from_file(&file, kind))
            .await
            .unwrap_or_else(|_| default_text(kind).to_owned())
    }
}

/// The section for `kind` of the file at `path`, or the built-in text.
fn text_from_file(path: &Path, kind: ProblemKind) -> String {
    let source = match std::fs::read_to_string(path) {
        Ok(source) => source,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return default_text(kind).to_owned();
        }
        Err(e) => {
            tracing::warn!(file = %path.display(), error = %e, "cannot read the model failure texts; using the built-in one");
            return default_text(kind).to_owned();
        }
    };
    section(&source, kind, path).unwrap_or_else(|| default_text(kind).to_owned())
}

/// The non-empty text under `## {kind}` in `source`, trimmed and cut to [`MAX_CHARS`].
fn section(source: &str, kind: ProblemKind, path: &Path) -> Option<String> {
    let mut current: Option<&str> = None;
    let mut text = String::new();
    for line in source.lines() {
        if let Some(heading) = line.strip_prefix("## ") {
            if current == Some(kind.as_str()) {
                break;
            }
            let name = heading.trim();
            if ProblemKind::from_name(name).is_none() {
                tracing::warn!(file = %path.display(), section = name, "a model failure text names no known cause; skipped");
            }
            current = Some(name);
            continue;
        }
        if current == Some(kind.as_str()) {
            text.push_str(line);
            text.push('\n');
        }
    }
    let text = text.trim();
    (!text.is_empty()).then(|| crate::text::prefix_chars(text, MAX_CHARS).to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = "# What the bot says\n\nIntro that is never sent.\n\n## unreachable\nThe model is away.\nBack soon.\n\n## rate_limited\n\n## no_such_class\nnever\n";

    #[test]
    fn a_section_replaces_the_built_in_text_of_its_class_only() {
        let path = Path::new("model-failures.md");
        assert_eq!(
            section(FILE, ProblemKind::Unreachable, path).as_deref(),
            Some("The model is away.\nBack soon.")
        );
        assert_eq!(section(FILE, ProblemKind::RateLimited, path), None, "empty");
        assert_eq!(section(FILE, ProblemKind::KeyRejected, path), None);
    }

    #[test]
    fn a_missing_file_gives_the_built_in_texts_which_name_no_internals() {
        let dir = tempfile::tempdir().unwrap();
        for kind in ProblemKind::ALL {
            let text = text_from_file(&dir.path().join(FILE_NAME), kind);
            assert_eq!(text, default_text(kind));
            for internal in ["HTTP", "401", "key", "provider", "API"] {
                assert!(!text.contains(internal), "{kind:?}: {text}");
            }
        }
    }

    #[test]
    fn the_shipped_file_has_a_text_for_every_class() {
        let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("prompts");
        let source = std::fs::read_to_string(shipped.join(FILE_NAME)).unwrap();
        for kind in ProblemKind::ALL {
            let text = section(&source, kind, &shipped).unwrap_or_default();
            assert!(!text.is_empty(), "no section for {}", kind.as_str());
        }
    }

    #[test]
    fn an_overlong_text_is_cut_to_fit_a_message() {
        let long = format!("## timed_out\n{}\n", "é".repeat(5_000));
        let text = section(&long, ProblemKind::TimedOut, Path::new("f")).unwrap();
        assert_eq!(text.chars().count(), MAX_CHARS);
    }
}
