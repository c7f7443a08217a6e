//! Prompt templates: `prompts/system.md` (and other named templates such as `maintenance.md`,
//! rendered uncached by [`PromptLibrary::render_template`]) with `{{fragment}}` includes (each `fragment.md` in the
//! same folder, recursively, cycles refused). Unknown placeholders are left as they are, with a
//! warning. The rendered prompt is cached and re-rendered when a file in the folder changes
//! (size or modification time) or after [`PromptLibrary::invalidate`] (SIGHUP).

use crate::sync::Recover;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::SystemTime;

/// Deepest include nesting.
const MAX_DEPTH: usize = 8;

/// Why the prompt could not be rendered.
#[derive(Debug, thiserror::Error)]
pub enum PromptError {
    /// `system.md` is missing or unreadable.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
}

type Fingerprint = BTreeMap<PathBuf, (u64, Option<SystemTime>)>;

/// The prompt folder with a render cache.
#[derive(Debug)]
pub struct PromptLibrary {
    /// The system prompt's file (`system.md`, or a persona's own file).
    main: PathBuf,
    /// Where `{{fragment}}` includes are looked up, in order (the persona's folder, then the
    /// shared prompts folder).
    dirs: Vec<PathBuf>,
    cache: Mutex<Option<(Fingerprint, String)>>,
}

impl PromptLibrary {
    /// A library reading `dir`.
    pub fn new(dir: &Path) -> Self {
        Self {
            main: dir.join("system.md"),
            dirs: vec![dir.to_path_buf()],
            cache: Mutex::new(None),
        }
    }

    /// A place's persona (`places[].persona`): a folder with its own `system.md`, or one file
    /// that replaces `system.md`. Includes are looked up beside it first, then in `shared` (the
    /// `prompts.dir` every place shares).
    pub fn persona(persona: &Path, shared: &Path) -> Self {
        let (main, dir) = if persona.is_dir() {
            (persona.join("system.md"), persona.to_path_buf())
        } else {
            let dir = persona.parent().unwrap_or(Path::new(".")).to_path_buf();
            (persona.to_path_buf(), dir)
        };
        let mut dirs = vec![dir];
        if dirs[0] != shared {
            dirs.push(shared.to_path_buf());
        }
        Self {
            main,
            dirs,
            cache: Mutex::new(None),
        }
    }

    /// The shared folder (templates such as `maintenance.md` are read there).
    fn dir(&self) -> &Path {
        self.dirs.last().map_or(Path::new("."), PathBuf::as_path)
    }

    /// Forgets the cached rendering (called on SIGHUP).
    pub fn invalidate(&self) {
        *self.cache.locked() = None;
    }

    /// The rendered system prompt (blocking file work; call from `spawn_blocking` or use
    /// [`system_prompt`](Self::system_prompt)).
    pub fn render_blocking(&self) -> Result<String, PromptError> {
        let mut fp = Fingerprint::new();
        for dir in &self.dirs {
            fp.extend(fingerprint(dir));
        }
        if let Ok(m) = std::fs::metadata(&self.main) {
            fp.insert(self.main.clone(), (m.len(), m.modified().ok()));
        }
        {
            let cache = self.cache.locked();
            if let Some((cached_fp, text)) = cache.as_ref()
                && *cached_fp == fp
            {
                return Ok(text.clone());
            }
        }
        let path = self.main.clone();
        let text =
            std::fs::read_to_string(&path).map_err(|source| PromptError::Read { path, source })?;
        let stem = self
            .main
            .file_stem()
            .map_or_else(|| "system".to_owned(), |s| s.to_string_lossy().into_owned());
        let rendered = expand(&self.dirs, &text, &mut vec![stem]);
        *self.cache.locked() = Some((fp, rendered.clone()));
        Ok(rendered)
    }

    /// The rendered system prompt, off the async workers.
    pub async fn system_prompt(self: &std::sync::Arc<Self>) -> Result<String, PromptError> {
        let me = self.clone();
        tokio::task::spawn_blocking(move || me.render_blocking())
            .await
            .unwrap_or_else(|e| {
                Err(PromptError::Read {
                    path: PathBuf::from("system.md"),
                    source: std::io::Error::other(e),
                })
            })
    }
}

impl PromptLibrary {
    /// `name.md` of the folder rendered with its `{{fragment}}` includes, uncached (for prompts
    /// used rarely, such as `maintenance.md`). `None` when the file does not exist, so the
    /// caller can fall back to the built-in text; other read errors are errors.
    pub async fn render_template(&self, name: &str) -> Result<Option<String>, PromptError> {
        let dir = self.dir().to_path_buf();
        let name = name.to_owned();
        tokio::task::spawn_blocking(move || {
            let path = dir.join(format!("{name}.md"));
            match std::fs::read_to_string(&path) {
                Ok(text) => Ok(Some(expand(&[dir], &text, &mut vec![name]))),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                Err(source) => Err(PromptError::Read { path, source }),
            }
        })
        .await
        .unwrap_or_else(|e| {
            Err(PromptError::Read {
                path: PathBuf::from("template"),
                source: std::io::Error::other(e),
            })
        })
    }
}

/// The system prompt of every place: the shared library (`prompts.dir`) and one library per
/// persona the `places:` rules name (`places[].persona`): those of the rules at start made at
/// once, one a reloaded rule names for the first time made when it is first needed.
#[derive(Debug)]
pub struct Personas {
    shared: std::sync::Arc<PromptLibrary>,
    own: Mutex<BTreeMap<PathBuf, std::sync::Arc<PromptLibrary>>>,
}

impl Personas {
    /// `shared` for places without a persona, and a library for each of `personas`.
    pub fn new<'a>(
        shared: std::sync::Arc<PromptLibrary>,
        personas: impl IntoIterator<Item = &'a Path>,
    ) -> Self {
        let shared_dir = shared.dir().to_path_buf();
        let own = personas
            .into_iter()
            .map(|p| {
                let library = PromptLibrary::persona(p, &shared_dir);
                (p.to_path_buf(), std::sync::Arc::new(library))
            })
            .collect();
        Self {
            shared,
            own: Mutex::new(own),
        }
    }

    /// The library of a place whose persona is `persona` (`None`: the shared one).
    pub fn library(&self, persona: Option<&Path>) -> std::sync::Arc<PromptLibrary> {
        let Some(persona) = persona else {
            return self.shared.clone();
        };
        self.own
            .locked()
            .entry(persona.to_path_buf())
            .or_insert_with(|| {
                std::sync::Arc::new(PromptLibrary::persona(persona, self.shared.dir()))
            })
            .clone()
    }

    /// Forgets every cached rendering (SIGHUP).
    pub fn invalidate(&self) {
        self.shared.invalidate();
        for library in self.own.locked().values() {
            library.invalidate();
        }
    }
}

fn fingerprint(dir: &Path) -> Fingerprint {
    let mut fp = Fingerprint::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let p = e.path();
            if p.extension().is_some_and(|x| x == "md")
                && let Ok(m) = e.metadata()
            {
                fp.insert(p, (m.len(), m.modified().ok()));
            }
        }
    }
    fp
}

/// Replaces `{{name}}` with the rendered `name.md` of the first of `dirs` that has one;
/// unknown names stay as written.
fn expand(dirs: &[PathBuf], text: &str, stack: &mut Vec<String>) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find("}}") else {
            out.push_str(&rest[start..]);
            return out;
        };
        let name = after[..end].trim();
        let valid = !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        let placeholder = &rest[start..start + 2 + end + 2];
        if !valid {
            out.push_str(placeholder);
        } else if stack.iter().any(|s| s == name) || stack.len() >= MAX_DEPTH {
            tracing::warn!(
                fragment = name,
                "prompt include cycle or too deep; left as is"
            );
            out.push_str(placeholder);
        } else {
            let fragment = dirs
                .iter()
                .find_map(|dir| std::fs::read_to_string(dir.join(format!("{name}.md"))).ok());
            match fragment {
                Some(fragment) => {
                    stack.push(name.to_owned());
                    out.push_str(expand(dirs, fragment.trim_end(), stack).as_str());
                    stack.pop();
                }
                None => {
                    tracing::warn!(fragment = name, "unknown prompt placeholder; left as is");
                    out.push_str(placeholder);
                }
            }
        }
        rest = &after[end + 2..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn includes_nest_and_unknowns_stay() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("system.md"),
            "A {{persona}} B {{nope}} C {{ bad name }}",
        )
        .unwrap();
        std::fs::write(dir.path().join("persona.md"), "[p {{style}}]\n").unwrap();
        std::fs::write(dir.path().join("style.md"), "s").unwrap();
        let lib = PromptLibrary::new(dir.path());
        assert_eq!(
            lib.render_blocking().unwrap(),
            "A [p s] B {{nope}} C {{ bad name }}"
        );
    }

    #[test]
    fn cycles_are_cut() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("system.md"), "{{a}}").unwrap();
        std::fs::write(dir.path().join("a.md"), "a{{b}}").unwrap();
        std::fs::write(dir.path().join("b.md"), "b{{a}}").unwrap();
        assert_eq!(
            PromptLibrary::new(dir.path()).render_blocking().unwrap(),
            "ab{{a}}"
        );
    }

    #[test]
    fn reloads_when_a_file_changes_and_on_invalidate() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("system.md"), "v1 {{f}}").unwrap();
        std::fs::write(dir.path().join("f.md"), "one").unwrap();
        let lib = PromptLibrary::new(dir.path());
        assert_eq!(lib.render_blocking().unwrap(), "v1 one");
        std::fs::write(dir.path().join("f.md"), "three").unwrap();
        assert_eq!(lib.render_blocking().unwrap(), "v1 three");
        lib.invalidate();
        assert_eq!(lib.render_blocking().unwrap(), "v1 three");
    }

    /// A persona file replaces `system.md`; its includes are found beside it first, then in
    /// the shared folder.
    #[test]
    fn a_persona_uses_its_own_includes_then_the_shared_ones() {
        let shared = tempfile::tempdir().unwrap();
        std::fs::write(shared.path().join("system.md"), "shared {{tone}}").unwrap();
        std::fs::write(shared.path().join("tone.md"), "kind").unwrap();
        std::fs::write(shared.path().join("rules.md"), "shared rules").unwrap();
        let own = tempfile::tempdir().unwrap();
        std::fs::write(own.path().join("support.md"), "support {{tone}} {{rules}}").unwrap();
        std::fs::write(own.path().join("tone.md"), "brisk").unwrap();
        let file = PromptLibrary::persona(&own.path().join("support.md"), shared.path());
        assert_eq!(
            file.render_blocking().unwrap(),
            "support brisk shared rules"
        );
        std::fs::write(own.path().join("system.md"), "folder {{rules}}").unwrap();
        let folder = PromptLibrary::persona(own.path(), shared.path());
        assert_eq!(folder.render_blocking().unwrap(), "folder shared rules");
        std::fs::write(own.path().join("tone.md"), "gentle").unwrap();
        assert_eq!(
            file.render_blocking().unwrap(),
            "support gentle shared rules",
            "a changed include is seen"
        );
    }

    #[test]
    fn missing_system_prompt_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        assert!(PromptLibrary::new(dir.path()).render_blocking().is_err());
    }
}
