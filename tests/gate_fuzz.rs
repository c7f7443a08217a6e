//! Fuzzes the permission gate against the real shell: whatever the gate approves must, run
//! through `/bin/bash -c` (as OpenCode runs commands), execute only the skill entrypoint, with
//! exactly the argv the gate's lexer predicted.
//!
//! Command lines are built from shell-ish fragments: real entrypoints (absolute, relative,
//! after `sh`/`bash`), look-alikes (a copy in the workspace, a symlinked entrypoint that is on
//! the list, `..`, `//`, quoted or globbed paths, paths that merely end like a skill), command
//! skills, metacharacters, quotes, every `$` form, `${IFS}`, globs, braces, tildes,
//! backslashes, control characters, spaces and tabs, glued together or not. For each approved
//! line, in a scratch tree:
//!
//! * the entrypoint scripts append their name to a trace file and write their argv
//!   (NUL-separated) to an argv file, both outside the scratch tree;
//! * `PATH` holds only shims (`touch`, `cat`, `curl`, `rm`, `id`, `env`, `ls`, `sleep`, `nc`,
//!   …) that append their own name to the trace; the `sh` and `bash` shims also do so and then
//!   run the real interpreter, since `sh <entrypoint>` is an approved form;
//! * `TMPDIR` and `SESSION_ID` have known values.
//!
//! The trace must name the entrypoint and nothing else (plus the interpreter shim when the line
//! started with a bare `sh`/`bash`), the argv must equal the lexer's words with the two
//! variables substituted, and the scratch tree must be unchanged. The test also requires that a
//! good share of the cases were approved, so it cannot pass by refusing everything.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use air_friends::agent::shell::{self, Var, Word};
use air_friends::agent::{ApprovalRules, PermissionGate};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

const SESSION_ID: &str = "sess-fuzz-1";
const CASES: u32 = 512;

/// Programs that must never run; each shim records its name.
const SHIMS: &[&str] = &[
    "touch", "cat", "curl", "rm", "id", "env", "ls", "sleep", "nc", "wget", "python3", "perl",
    "cp", "mv", "chmod", "mkdir", "tee", "echo", "printf", "dash", "true", "x", "evil",
];

/// The scratch tree and the files outside it that record what ran.
struct Scratch {
    _dir: tempfile::TempDir,
    /// Everything that must stay unchanged: skills, both workspaces.
    root: PathBuf,
    skills: PathBuf,
    /// A workspace holding a look-alike `skills/` the agent could have written.
    workspace: PathBuf,
    /// A workspace whose `skills` is the real skills folder, as the sandbox mounts it.
    mounted: PathBuf,
    trace: PathBuf,
    argv: PathBuf,
    bin: PathBuf,
    home: PathBuf,
}

fn write_script(path: &Path, body: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, format!("#!/bin/sh\n{body}")).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

impl Scratch {
    fn new() -> Scratch {
        let dir = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(dir.path()).unwrap();
        let root = base.join("scratch");
        let skills = root.join("skills");
        let workspace = root.join("ws");
        let mounted = root.join("ws-mounted");
        let out = base.join("out");
        let bin = out.join("bin");
        let home = out.join("home");
        let trace = out.join("trace");
        let argv = out.join("argv");
        for d in [&workspace.join("tmp"), &mounted.join("tmp"), &bin, &home] {
            std::fs::create_dir_all(d).unwrap();
        }
        let recorder = |name: &str| {
            format!(
                "printf '%s\\n' 'entry:{name}' >> '{}'\nfor a in \"$@\"; do printf '%s\\000' \"$a\"; done > '{}'\n",
                trace.display(),
                argv.display()
            )
        };
        for name in ["send-reply", "memory-save"] {
            write_script(
                &skills.join(format!("{name}/scripts/{name}")),
                &recorder(name),
            );
        }
        std::fs::create_dir_all(skills.join("linked/scripts")).unwrap();
        std::os::unix::fs::symlink(
            skills.join("send-reply/scripts/send-reply"),
            skills.join("linked/scripts/linked"),
        )
        .unwrap();
        let lookalike = format!("printf 'lookalike\\n' >> '{}'\n", trace.display());
        for path in [
            workspace.join("skills/send-reply/scripts/send-reply"),
            workspace.join("M/skills/send-reply/scripts/send-reply"),
            skills.join("send-reply/scripts/send-reply-evil"),
        ] {
            write_script(&path, &lookalike);
        }
        std::os::unix::fs::symlink("../skills", mounted.join("skills")).unwrap();
        write_script(&bin.join("af-cmd"), &recorder("af-cmd"));
        for name in SHIMS {
            write_script(
                &bin.join(name),
                &format!("printf '%s\\n' '{name}' >> '{}'\n", trace.display()),
            );
        }
        for (name, real) in [("sh", "/bin/sh"), ("bash", "/bin/bash")] {
            write_script(
                &bin.join(name),
                &format!(
                    "printf '%s\\n' '{name}' >> '{}'\nexec {real} \"$@\"\n",
                    trace.display()
                ),
            );
        }
        Scratch {
            _dir: dir,
            root,
            skills,
            workspace,
            mounted,
            trace,
            argv,
            bin,
            home,
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
                command_prefixes: vec!["af-cmd".into()],
                skills_mounted_in_workspace: mounted,
            },
            false,
        )
    }

    fn workspace(&self, mounted: bool) -> &Path {
        if mounted {
            &self.mounted
        } else {
            &self.workspace
        }
    }

    fn value(&self, var: Var, mounted: bool) -> String {
        match var {
            Var::TmpDir => self.workspace(mounted).join("tmp").display().to_string(),
            Var::SessionId => SESSION_ID.to_owned(),
        }
    }

    /// Every entry under the scratch root with its type, size, mode and mtime.
    fn snapshot(&self) -> BTreeMap<PathBuf, (u32, u64, i64, i64)> {
        let mut out = BTreeMap::new();
        let mut stack = vec![self.root.clone()];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                let meta = std::fs::symlink_metadata(&path).unwrap();
                if meta.is_dir() {
                    stack.push(path.clone());
                }
                out.insert(
                    path,
                    (meta.mode(), meta.len(), meta.mtime(), meta.mtime_nsec()),
                );
            }
        }
        out
    }

    /// Runs `line` with `/bin/bash -c` in the workspace; returns what bash printed.
    fn run(&self, line: &str, mounted: bool) -> Result<String, TestCaseError> {
        for f in [&self.trace, &self.argv] {
            let _ = std::fs::remove_file(f);
        }
        let mut child = Command::new("/bin/bash")
            .arg("-c")
            .arg(line)
            .current_dir(self.workspace(mounted))
            .env_clear()
            .env("PATH", &self.bin)
            .env("HOME", &self.home)
            .env("TMPDIR", self.value(Var::TmpDir, mounted))
            .env("SESSION_ID", SESSION_ID)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| TestCaseError::fail(format!("cannot run bash for {line:?}: {e}")))?;
        let deadline = Instant::now() + Duration::from_secs(10);
        while child.try_wait().unwrap().is_none() {
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                return Err(TestCaseError::fail(format!("{line:?} hung")));
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        let out = child.wait_with_output().unwrap();
        Ok(format!(
            "status {:?}, stdout {:?}, stderr {:?}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// What an approved line must do, derived from the lexer's words: the trace lines and the
/// argv the entrypoint receives.
fn expected(s: &Scratch, words: &[Word], mounted: bool) -> (Vec<String>, Vec<String>) {
    let first = words[0].as_bare_literal().unwrap();
    let mut trace = Vec::new();
    let mut rest = words;
    if matches!(
        first,
        "sh" | "bash" | "/bin/sh" | "/bin/bash" | "/usr/bin/sh" | "/usr/bin/bash"
    ) {
        if !first.contains('/') {
            trace.push(first.to_owned());
        }
        rest = &words[1..];
    }
    let program = rest[0].as_bare_literal().unwrap();
    let name = Path::new(program).file_name().unwrap().to_str().unwrap();
    trace.push(format!("entry:{name}"));
    let argv = rest[1..]
        .iter()
        .map(|w| w.expand(|v| s.value(v, mounted)))
        .collect();
    (trace, argv)
}

fn check(
    s: &Scratch,
    line: &str,
    mounted: bool,
    approved: &Cell<usize>,
) -> Result<(), TestCaseError> {
    let decision = s.gate(mounted).decide_command(line, s.workspace(mounted));
    if !decision.allow {
        return Ok(());
    }
    approved.set(approved.get() + 1);
    let words = shell::lex(line)
        .map_err(|e| TestCaseError::fail(format!("approved {line:?} does not lex: {e}")))?;
    let (want_trace, want_argv) = expected(s, &words, mounted);
    let before = s.snapshot();
    let output = s.run(line, mounted)?;
    let trace: Vec<String> = std::fs::read_to_string(&s.trace)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect();
    prop_assert_eq!(
        &trace,
        &want_trace,
        "{:?} ({}) ran something else; bash: {}",
        line,
        decision.reason,
        output
    );
    let raw = std::fs::read(&s.argv).unwrap_or_default();
    let mut argv: Vec<String> = raw
        .split(|b| *b == 0)
        .map(|a| String::from_utf8(a.to_vec()).unwrap())
        .collect();
    argv.pop(); // the empty piece after the last NUL
    prop_assert_eq!(
        &argv,
        &want_argv,
        "{:?}: argv differs; bash: {}",
        line,
        output
    );
    prop_assert_eq!(
        s.snapshot(),
        before,
        "{:?} changed the scratch tree; bash: {}",
        line,
        output
    );
    Ok(())
}

/// Program words the gate approves (the relative ones only with the skills mounted). `{S}` is
/// the skills folder, `{W}` the look-alike workspace.
const REAL: &[&str] = &[
    "{S}/send-reply/scripts/send-reply",
    "{S}/memory-save/scripts/memory-save",
    "skills/send-reply/scripts/send-reply",
    "./skills/memory-save/scripts/memory-save",
    "af-cmd",
];

/// Look-alike program words and other programs.
const FAKE: &[&str] = &[
    "{S}/linked/scripts/linked",
    "{S}/send-reply/scripts/send-reply-evil",
    "{S}/../skills/send-reply/scripts/send-reply",
    "{S}//send-reply/scripts/send-reply",
    "{S}/./send-reply/scripts/send-reply",
    "{W}/skills/send-reply/scripts/send-reply",
    "{W}/M/skills/send-reply/scripts/send-reply",
    "/x/M/skills/send-reply/scripts/send-reply",
    "\"{S}/send-reply/scripts/send-reply\"",
    "'{S}/send-reply/scripts/send-reply'",
    "{S}/send-reply/scripts/send-repl?",
    "{S}/send-reply/scripts/send-repl[y]",
    "{S}/send-reply/scripts/send-{reply,x}",
    "{S}/send-reply/scripts/send\\-reply",
    "~/skills/send-reply/scripts/send-reply",
    "{W}/*/skills/send-reply/scripts/send-reply",
    "$TMPDIR/../skills/send-reply/scripts/send-reply",
    "af-cmd-evil",
    "touch",
    "id",
];

/// Words that may come before the program.
const PREFIXES: &[&str] = &[
    "",
    "",
    "",
    "sh ",
    "bash ",
    "/bin/sh ",
    "/usr/bin/bash ",
    "env ",
    "exec ",
    "command ",
    "time ",
    "X=1 ",
    "touch ",
    "sh -c ",
    "! ",
    "{ ",
    "( ",
];

/// Arguments the gate approves.
const SAFE_ARGS: &[&str] = &[
    "--message-file",
    "\"$TMPDIR/$SESSION_ID/r.md\"",
    "$TMPDIR/$SESSION_ID/r.md",
    "${TMPDIR}",
    "${SESSION_ID}",
    "\"${TMPDIR}\"x",
    "--importance",
    "high",
    "'single $quoted; text | `id` * ~ {a,b} \\'",
    "\"dq text; * ~ {a,b} # 'x'\"",
    "a'b'\"c\"d",
    "--emoji",
    "👍",
    ":party_blob:",
    "--x=1",
    "''",
    "\"\"",
    "%@+,:=-_./",
    "日本語",
    "--message-id",
    "123",
];

/// Fragments the gate must refuse (or that change the meaning of what they touch).
const DANGER: &[&str] = &[
    ";",
    "|",
    "&",
    "&&",
    "||",
    ">x",
    "<x",
    ">>x",
    "2>&1",
    "<<EOF",
    "<<<x",
    "(",
    ")",
    "#",
    "*",
    "?",
    "[a]",
    "{a,b}",
    "{1..2}",
    "~",
    "~root",
    "\\",
    "\\ ",
    "`id`",
    "!",
    "!!",
    "$",
    "$(id)",
    "${IFS}",
    "$IFS",
    "${X:=x}",
    "${X@P}",
    "$((1+1))",
    "$[1]",
    "$'\\x41'",
    "$\"x\"",
    "<(id)",
    ">(id)",
    "=(id)",
    "\n",
    "\r",
    "\x01",
    "\x0b",
    "\x1b",
    "\x7f",
    "\u{85}",
    "\u{a0}",
    "\u{3000}",
    "'",
    "\"",
    "touch",
    "id",
    "--message",
    "--content=x",
    "'--query'",
    "$TMPDIRX",
    "$SESSION_IDx",
    "${TMPDIR",
    "${TMPDIR:-x}",
    "\"$\"",
    "\"\\\\\"",
    "\"!x\"",
    "\"`id`\"",
    "'unterminated",
    "X=1",
    "-c",
    "touch${IFS}x",
    "$0",
    "$@",
    "$*",
    "$#",
    "$$",
    "$-",
    "$_",
    "@(a)",
    "+(a)",
    "^x",
    "\t",
];

/// Joins between fragments; the empty one glues them into one word.
const JOINS: &[&str] = &[" ", " ", " ", "\t", "  ", ""];

fn program() -> impl Strategy<Value = &'static str> {
    prop_oneof![pick(REAL), pick(FAKE)]
}

fn pick(list: &'static [&'static str]) -> impl Strategy<Value = &'static str> {
    proptest::sample::select(list)
}

/// A few characters from the shell's alphabet.
fn chars() -> impl Strategy<Value = String> {
    proptest::collection::vec(
        proptest::sample::select(
            "ab-_./=$'\"{}*?~\\;|&<>()#!` \t\n,:@%^[]"
                .chars()
                .collect::<Vec<_>>(),
        ),
        0..6,
    )
    .prop_map(|c| c.into_iter().collect())
}

fn arg(safe_only: bool) -> BoxedStrategy<String> {
    let safe = pick(SAFE_ARGS).prop_map(str::to_owned);
    if safe_only {
        return safe.boxed();
    }
    prop_oneof![
        3 => safe,
        2 => pick(DANGER).prop_map(str::to_owned),
        1 => chars(),
    ]
    .boxed()
}

/// `prefix program (join arg)*`, the structured shape of a skill call. `programs` picks the
/// program words; `safe_only` keeps the prefix and the arguments to approved forms, so the
/// program alone decides.
fn structured(
    programs: BoxedStrategy<&'static str>,
    safe_only: bool,
) -> impl Strategy<Value = String> {
    let prefix = if safe_only {
        pick(&["", "", "sh ", "bash ", "/bin/sh "]).boxed()
    } else {
        pick(PREFIXES).boxed()
    };
    (
        pick(&["", " ", "\t"]),
        prefix,
        programs,
        proptest::collection::vec((pick(JOINS), arg(safe_only)), 0..6),
        pick(&["", " ", "\t"]),
    )
        .prop_map(move |(lead, prefix, program, args, trail)| {
            let mut line = format!("{lead}{prefix}{program}");
            for (join, a) in args {
                line.push_str(if safe_only { " " } else { join });
                line.push_str(&a);
            }
            line.push_str(trail);
            line
        })
}

/// Any fragments in any order, glued or spaced.
fn soup() -> impl Strategy<Value = String> {
    let fragment = prop_oneof![
        program().prop_map(str::to_owned),
        pick(PREFIXES).prop_map(str::to_owned),
        pick(SAFE_ARGS).prop_map(str::to_owned),
        pick(DANGER).prop_map(str::to_owned),
        chars(),
    ];
    proptest::collection::vec((fragment, pick(JOINS)), 1..8).prop_map(|parts| {
        parts
            .into_iter()
            .map(|(f, j)| format!("{f}{j}"))
            .collect::<String>()
    })
}

#[test]
fn whatever_the_gate_approves_runs_only_the_entrypoint_with_the_lexed_argv() {
    let s = Scratch::new();
    let fill = |line: String| {
        line.replace("{S}", &s.skills.display().to_string())
            .replace("{W}", &s.workspace.display().to_string())
    };
    let lines = prop_oneof![
        2 => structured(pick(REAL).boxed(), true),
        2 => structured(program().boxed(), true),
        2 => structured(program().boxed(), false),
        2 => soup(),
    ];
    let mut runner = TestRunner::new(Config {
        cases: CASES,
        failure_persistence: None,
        ..Config::default()
    });
    let approved = Cell::new(0usize);
    let result = runner.run(&(lines, any::<bool>()), |(line, mounted)| {
        check(&s, &fill(line), mounted, &approved)
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    // About a quarter of the cases are well-formed calls of real entrypoints, most approved.
    assert!(
        approved.get() >= CASES as usize / 8,
        "only {} of {CASES} cases were approved: the fuzz did not exercise the shell",
        approved.get()
    );
}

/// The hand-picked bypasses of the old gate, run through the same check: each must be refused
/// or, if approved, behave.
#[test]
fn known_bypasses_are_refused_and_real_calls_run_as_lexed() {
    let s = Scratch::new();
    let sk = s.skills.display().to_string();
    let approved = Cell::new(0usize);
    for (line, mounted, allow) in [
        (
            "touch${IFS}/x/M${IFS}/skills/send-reply/scripts/send-reply".to_owned(),
            false,
            false,
        ),
        (
            "sh skills/send-reply/scripts/send-reply".to_owned(),
            false,
            false,
        ),
        (
            "sh skills/send-reply/scripts/send-reply".to_owned(),
            true,
            true,
        ),
        (
            format!("{sk}/send-reply/scripts/send-reply ${{X:=$(touch x)}}"),
            false,
            false,
        ),
        (
            format!(
                "{sk}/send-reply/scripts/send-reply --message-file \"$TMPDIR/$SESSION_ID/r.md\" '$(id)'"
            ),
            false,
            true,
        ),
        (format!("{sk}/linked/scripts/linked"), false, false),
    ] {
        let d = s.gate(mounted).decide_command(&line, s.workspace(mounted));
        assert_eq!(d.allow, allow, "{line:?} (mounted {mounted}): {}", d.reason);
        check(&s, &line, mounted, &approved).unwrap();
    }
    assert_eq!(approved.get(), 2);
}

proptest! {
    #![proptest_config(Config { cases: 512, failure_persistence: None, ..Config::default() })]

    /// The lexer and the gate never panic, and what the lexer accepts keeps only safe
    /// characters unquoted.
    #[test]
    fn lexer_and_gate_never_panic_on_arbitrary_strings(
        line in prop_oneof![any::<String>(), "[ -~\t\n\r\0\u{85}\u{a0}é👍]{0,40}"],
    ) {
        let gate = PermissionGate::new(ApprovalRules::default(), false);
        let _ = gate.decide_command(&line, Path::new("/nonexistent"));
        if let Ok(words) = shell::lex(&line) {
            for word in &words {
                let text = word.template();
                prop_assert!(!text.chars().any(char::is_control), "{:?}", line);
                prop_assert!(!word.parts.is_empty());
            }
        }
    }
}
