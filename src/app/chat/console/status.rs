//! The console's screen: the conversation on stdout, and on stderr the actionable line when a
//! model provider fails and — only when stderr is a terminal — a one-line status while a turn
//! runs (elapsed seconds and what the agent is doing: starting, thinking, running a skill).
//!
//! The status line is drawn in place (`\r`, erase line) from the runner's activity
//! (`agent::activity`) and redrawn about once a second by [`ConsoleAdapter::run_status`]. It is
//! erased before any other line is written, and is not drawn again once the turn's first
//! answer was printed or the turn ended. Everything is written under one lock, so a status
//! redraw never lands in the middle of a reply. Tested through a pseudo-terminal in
//! `tests/chat_console.rs`.
//!
//! [`ConsoleAdapter::run_status`]: super::ConsoleAdapter::run_status

use std::collections::HashSet;
use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use crate::agent::Activity;
use crate::gateway::{ProblemKind, ProviderFailure};

/// Moves to the start of the line and clears it.
const ERASE: &str = "\r\x1b[2K";

/// The longest tool title shown.
const TITLE_CHARS: usize = 40;

/// What the console reports besides the conversation, and where.
pub struct Diagnostics {
    /// Where the status line and the actionable lines go (stderr).
    pub err: Box<dyn Write + Send>,
    /// Draw the status line (stderr is a terminal).
    pub status_line: bool,
    /// The skills folder, to name the skill a command runs.
    pub skills_dir: PathBuf,
    /// The configured model (`agent.model`), named when the provider does not know it.
    pub model: Option<String>,
}

impl Diagnostics {
    /// Nowhere: no status line, actionable lines dropped.
    pub fn none() -> Self {
        Self {
            err: Box::new(std::io::sink()),
            status_line: false,
            skills_dir: PathBuf::new(),
            model: None,
        }
    }
}

/// What the agent of the running turn is doing.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Doing {
    Starting,
    Thinking,
    Skill(String),
    Tool(String),
}

struct Turn {
    session_id: String,
    started: Instant,
    doing: Doing,
    /// A line was printed for it: the status is not drawn again.
    answered: bool,
}

/// Both output streams and the status state, behind the adapter's one lock.
pub(super) struct Screen {
    out: Box<dyn Write + Send>,
    diagnostics: Diagnostics,
    /// The status line is on the terminal now.
    shown: bool,
    turn: Option<Turn>,
    /// Actionable lines printed during the current turn (each once per turn).
    told: HashSet<String>,
}

impl Screen {
    pub(super) fn new(out: Box<dyn Write + Send>, diagnostics: Diagnostics) -> Self {
        Self {
            out,
            diagnostics,
            shown: false,
            turn: None,
            told: HashSet::new(),
        }
    }

    /// The conversation stream back (to rebuild the screen with other diagnostics).
    pub(super) fn into_out(self) -> Box<dyn Write + Send> {
        self.out
    }

    /// Whether a status line is ever drawn.
    pub(super) fn has_status_line(&self) -> bool {
        self.diagnostics.status_line
    }

    /// Prints one conversation line (the status goes first; it stays away for this turn).
    pub(super) fn line(&mut self, text: &str) {
        self.erase();
        if let Some(turn) = &mut self.turn {
            turn.answered = true;
        }
        // A closed terminal leaves nobody to tell.
        let _ = writeln!(self.out, "{text}");
        let _ = self.out.flush();
    }

    /// Records what session `session_id` is doing and redraws.
    pub(super) fn activity(&mut self, session_id: &str, activity: &Activity) {
        match activity {
            Activity::Started => {
                self.told.clear();
                self.turn = Some(Turn {
                    session_id: session_id.to_owned(),
                    started: Instant::now(),
                    doing: Doing::Starting,
                    answered: false,
                });
            }
            Activity::Ended => {
                if self
                    .turn
                    .as_ref()
                    .is_some_and(|t| t.session_id == session_id)
                {
                    self.turn = None;
                    self.erase();
                }
                return;
            }
            Activity::Thinking | Activity::Tool { .. } => {
                let doing = match activity {
                    Activity::Tool { title, command } => command
                        .as_deref()
                        .and_then(|c| skill_of(c, &self.diagnostics.skills_dir))
                        .map_or_else(|| Doing::Tool(short(title)), Doing::Skill),
                    _ => Doing::Thinking,
                };
                match &mut self.turn {
                    Some(turn) if turn.session_id == session_id => turn.doing = doing,
                    _ => return,
                }
            }
        }
        self.draw();
    }

    /// Prints the actionable line for `failure`, once per turn.
    pub(super) fn failure(&mut self, failure: &ProviderFailure) {
        let line = failure_line(failure, self.diagnostics.model.as_deref());
        if !self.told.insert(line.clone()) {
            return;
        }
        self.erase();
        let err = &mut self.diagnostics.err;
        let _ = writeln!(err, "{line}");
        let _ = err.flush();
        self.draw();
    }

    /// Redraws the status line with the elapsed time (once a second).
    pub(super) fn draw(&mut self) {
        if !self.diagnostics.status_line {
            return;
        }
        let Some(turn) = self.turn.as_ref().filter(|t| !t.answered) else {
            return;
        };
        let what = match &turn.doing {
            Doing::Starting => "starting the agent…".to_owned(),
            Doing::Thinking => "thinking…".to_owned(),
            Doing::Skill(name) => format!("running skill {name}…"),
            Doing::Tool(title) => format!("running {title}…"),
        };
        let secs = turn.started.elapsed().as_secs();
        let err = &mut self.diagnostics.err;
        let _ = write!(err, "{ERASE}[{secs}s] {what}");
        let _ = err.flush();
        self.shown = true;
    }

    /// Takes the status line off the terminal.
    pub(super) fn erase(&mut self) {
        if self.shown {
            let err = &mut self.diagnostics.err;
            let _ = write!(err, "{ERASE}");
            let _ = err.flush();
            self.shown = false;
        }
    }
}

/// The skill a command runs: the folder under the skills folder (or a `skills/` folder, as
/// mounted in the workspace) whose `scripts/` it calls.
fn skill_of(command: &str, skills_dir: &std::path::Path) -> Option<String> {
    let configured = format!("{}/", skills_dir.to_string_lossy().trim_end_matches('/'));
    let prefixes = [configured.as_str(), "skills/"];
    command
        .split_whitespace()
        .map(|word| word.trim_matches(|c| c == '\'' || c == '"'))
        .find_map(|word| {
            prefixes.iter().filter(|p| p.len() > 1).find_map(|prefix| {
                let at = word.find(prefix)?;
                let (name, tail) = word[at + prefix.len()..].split_once('/')?;
                (!name.is_empty() && tail.starts_with("scripts/")).then(|| name.to_owned())
            })
        })
}

fn short(title: &str) -> String {
    let line = title.lines().next().unwrap_or("");
    if line.chars().count() <= TITLE_CHARS {
        return line.to_owned();
    }
    let mut cut: String = line.chars().take(TITLE_CHARS - 1).collect();
    cut.push('…');
    cut
}

/// The one line naming the cause and the fix.
fn failure_line(f: &ProviderFailure, model: Option<&str>) -> String {
    let p = &f.provider;
    let env = &f.key_env;
    let url = &f.base_url;
    match f.kind {
        ProblemKind::KeyRejected if f.anonymous => format!(
            "air-friends: the model provider \"{p}\" refused its free access without a key; set {env} (or another provider's key) in air-friends' environment and start again"
        ),
        ProblemKind::RateLimited if f.anonymous => format!(
            "air-friends: the model provider \"{p}\" is rate limiting its free access without a key; wait a little, or set {env} (or another provider's key)"
        ),
        ProblemKind::KeyNotSet => format!(
            "air-friends: the model provider \"{p}\" has no key: {env} is not set; set it in air-friends' environment and start again"
        ),
        ProblemKind::KeyRejected => format!(
            "air-friends: the model provider \"{p}\" rejected the key in {env}; put a valid key in {env} and start again"
        ),
        ProblemKind::RateLimited => format!(
            "air-friends: the model provider \"{p}\" is rate limiting the key in {env}; wait a little or raise the key's limits"
        ),
        ProblemKind::ModelNotFound => format!(
            "air-friends: the model provider \"{p}\" does not offer the model {}; set agent.model to one it offers",
            model.map_or_else(|| "requested".to_owned(), |m| format!("\"{m}\""))
        ),
        ProblemKind::Unreachable => format!(
            "air-friends: the model provider \"{p}\" is unreachable at {url}; check agent.providers.{p}.baseUrl and the network"
        ),
        ProblemKind::TimedOut => format!(
            "air-friends: the model provider \"{p}\" did not answer in time at {url}; check the network or try again later"
        ),
        ProblemKind::ServerError => format!(
            "air-friends: the model provider \"{p}\" answers with server errors{}; try again later or check the provider's status",
            f.status.map_or_else(String::new, |s| format!(" (HTTP {s})"))
        ),
        ProblemKind::BudgetExhausted => {
            "air-friends: the daily token budget (agent.budget) is used up; raise it or wait until tomorrow".to_owned()
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use std::path::Path;
    use std::sync::{Arc, Mutex};

    /// A terminal stream the tests read back (also the console adapter's tests).
    #[derive(Clone, Default)]
    pub(crate) struct Buf(pub(crate) Arc<Mutex<Vec<u8>>>);
    impl Write for Buf {
        fn write(&mut self, d: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(d);
            Ok(d.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    impl Buf {
        fn text(&self) -> String {
            String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
        }
    }

    fn screen(status_line: bool) -> (Screen, Buf, Buf) {
        let (out, err) = (Buf::default(), Buf::default());
        let screen = Screen::new(
            Box::new(out.clone()),
            Diagnostics {
                err: Box::new(err.clone()),
                status_line,
                skills_dir: PathBuf::from("/opt/af/skills"),
                model: Some("openrouter/x".into()),
            },
        );
        (screen, out, err)
    }

    #[test]
    fn the_status_names_the_skill_and_goes_before_the_reply() {
        let (mut s, out, err) = screen(true);
        s.activity("s1", &Activity::Started);
        s.activity("s1", &Activity::Thinking);
        s.activity(
            "s1",
            &Activity::Tool {
                title: "bash".into(),
                command: Some(
                    "/opt/af/skills/send-reply/scripts/send-reply --message-file x".into(),
                ),
            },
        );
        assert!(
            err.text().ends_with("[0s] running skill send-reply…"),
            "{:?}",
            err.text()
        );
        s.line("air-friends> hi");
        assert!(err.text().ends_with(ERASE), "erased before the reply");
        s.draw();
        assert!(
            err.text().ends_with(ERASE),
            "not drawn again after the answer"
        );
        assert_eq!(out.text(), "air-friends> hi\n");
    }

    #[test]
    fn without_a_terminal_there_is_no_status_but_the_actionable_line_once_per_turn() {
        let (mut s, _, err) = screen(false);
        s.activity("s1", &Activity::Started);
        let failure = ProviderFailure {
            session_id: "s1".into(),
            provider: "openrouter".into(),
            key_env: "OPENROUTER_API_KEY".into(),
            anonymous: false,
            base_url: "https://openrouter.ai/api/v1".into(),
            kind: ProblemKind::KeyRejected,
            status: Some(401),
        };
        s.failure(&failure);
        s.failure(&failure);
        assert_eq!(
            err.text(),
            "air-friends: the model provider \"openrouter\" rejected the key in OPENROUTER_API_KEY; put a valid key in OPENROUTER_API_KEY and start again\n"
        );
        s.activity("s2", &Activity::Started);
        s.failure(&failure);
        assert_eq!(err.text().lines().count(), 2, "told again in the next turn");
    }

    #[test]
    fn a_refused_free_access_says_which_key_to_set() {
        let failure = ProviderFailure {
            session_id: "s1".into(),
            provider: "opencode".into(),
            key_env: "OPENCODE_API_KEY".into(),
            anonymous: true,
            base_url: "https://opencode.ai/zen/v1".into(),
            kind: ProblemKind::RateLimited,
            status: Some(429),
        };
        let line = failure_line(&failure, Some("opencode/big-pickle"));
        assert!(
            line.contains("free access without a key") && line.contains("set OPENCODE_API_KEY"),
            "{line}"
        );
    }

    #[test]
    fn skills_are_named_by_the_script_they_run() {
        let dir = Path::new("/opt/af/skills");
        assert_eq!(
            skill_of("'/opt/af/skills/memory-save/scripts/save' --x", dir).as_deref(),
            Some("memory-save")
        );
        assert_eq!(
            skill_of(
                "skills/send-reply/scripts/send-reply",
                Path::new("/elsewhere")
            )
            .as_deref(),
            Some("send-reply")
        );
        assert_eq!(skill_of("ls /opt/af/skills/send-reply/SKILL.md", dir), None);
    }
}
