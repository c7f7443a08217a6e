//! The README's quick start, in a scratch HOME: `air-friends setup` installs OpenCode where the
//! daemon finds it and writes a configuration `check-config` accepts, and a second run does
//! nothing. `npm`, `apt-get` and `sudo` are stubs on a `PATH` of the test's own that record
//! their argv (no network): the stub `apt-get install` creates the commands of the packages
//! it is asked for, the stub `npm install --prefix DIR` creates the `opencode` executable npm
//! links in `DIR`, printing the requested version.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use air_friends::setup::OPENCODE_VERSION;

const NPM: &str = r#"#!/bin/sh
echo "npm $*" >> "$STUB_LOG"
prefix=
spec=
while [ $# -gt 0 ]; do
  case "$1" in
    --prefix) prefix="$2"; shift ;;
    opencode-ai@*) spec="$1" ;;
  esac
  shift
done
[ -n "$prefix" ] && [ -n "$spec" ] || exit 3
/bin/mkdir -p "$prefix/node_modules/.bin"
printf '#!/bin/sh\necho %s\n' "${spec#opencode-ai@}" > "$prefix/node_modules/.bin/opencode"
/bin/chmod +x "$prefix/node_modules/.bin/opencode"
"#;

const APT_GET: &str = r#"#!/bin/sh
echo "apt-get $*" >> "$STUB_LOG"
[ "$1" = install ] || exit 0
for p in "$@"; do
  case "$p" in
    ripgrep) c=rg ;;
    bubblewrap) c=bwrap ;;
    *) continue ;;
  esac
  printf '#!/bin/sh\nexit 0\n' > "$STUB_BIN/$c"
  /bin/chmod +x "$STUB_BIN/$c"
done
"#;

const SUDO: &str = r#"#!/bin/sh
echo "sudo $*" >> "$STUB_LOG"
exec "$@"
"#;

/// A scratch HOME and a `PATH` holding only the stubs.
struct Scratch {
    _dir: tempfile::TempDir,
    home: PathBuf,
    bin: PathBuf,
    log: PathBuf,
    config: PathBuf,
}

impl Scratch {
    fn new() -> Scratch {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        let bin = dir.path().join("bin");
        std::fs::create_dir_all(&home).unwrap();
        std::fs::create_dir_all(&bin).unwrap();
        for (name, script) in [("npm", NPM), ("apt-get", APT_GET), ("sudo", SUDO)] {
            write_executable(&bin.join(name), script);
        }
        Scratch {
            log: dir.path().join("argv.log"),
            config: dir.path().join("work/config.yaml"),
            _dir: dir,
            home,
            bin,
        }
    }

    /// `air-friends ARGS` in the repository (where the default configuration's `./prompts`
    /// and `./skills` are), with only this scratch machine's environment.
    fn run(&self, args: &[&str]) -> Output {
        self.run_with_home(args, &self.home)
    }

    fn run_with_home(&self, args: &[&str], home: &Path) -> Output {
        Command::new(common::bin())
            .args(args)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .env_clear()
            .env("PATH", &self.bin)
            .env("HOME", home)
            .env("STUB_LOG", &self.log)
            .env("STUB_BIN", &self.bin)
            .output()
            .unwrap()
    }

    fn setup(&self, extra: &[&str]) -> String {
        let config = self.config.display().to_string();
        let mut args = vec!["setup", "--config", &config];
        args.extend(extra);
        let out = self.run(&args);
        assert!(out.status.success(), "setup failed: {}", text(&out));
        String::from_utf8(out.stdout).unwrap()
    }

    fn recorded(&self) -> Vec<String> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    fn opencode_dir(&self) -> PathBuf {
        self.home.join(".local/share/air-friends/opencode")
    }
}

fn write_executable(path: &Path, script: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, script).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

fn text(out: &Output) -> String {
    format!(
        "{}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn setup_installs_the_pinned_opencode_where_the_daemon_finds_it_and_a_config_that_passes() {
    let s = Scratch::new();
    let stdout = s.setup(&[]);

    // The plan as run: apt-get for the two missing packages (npm is there), directly as root
    // and through sudo otherwise; npm for the pinned OpenCode into the setup folder.
    let sudo = if nix::unistd::geteuid().is_root() {
        ""
    } else {
        "sudo "
    };
    let npm = format!(
        "npm install --prefix {} --no-audit --no-fund --loglevel=error opencode-ai@{OPENCODE_VERSION}",
        s.opencode_dir().display()
    );
    let mut expected = Vec::new();
    for apt in [
        "apt-get update -q",
        "apt-get install -y -q --no-install-recommends ripgrep bubblewrap",
    ] {
        if !sudo.is_empty() {
            expected.push(format!("{sudo}{apt}"));
        }
        expected.push(apt.to_owned());
    }
    expected.push(npm);
    assert_eq!(s.recorded(), expected, "stdout:\n{stdout}");
    assert!(stdout.contains("next: "), "{stdout}");
    assert!(stdout.contains("air-friends chat"), "{stdout}");

    // The documented default configuration, written where asked.
    let default = Command::new(common::bin())
        .arg("print-default-config")
        .output()
        .unwrap();
    assert_eq!(std::fs::read(&s.config).unwrap(), default.stdout);

    // check-config accepts it: `agent.command: opencode` resolves through the setup folder...
    let config = s.config.display().to_string();
    let checked = s.run(&["check-config", "--config", &config]);
    assert!(checked.status.success(), "{}", text(&checked));
    assert!(
        String::from_utf8_lossy(&checked.stdout).contains("command: opencode"),
        "{}",
        text(&checked)
    );
    // ...and only through it: with another HOME the same file names the missing command and
    // the fix.
    let elsewhere = tempfile::tempdir().unwrap();
    let rejected = s.run_with_home(&["check-config", "--config", &config], elsewhere.path());
    assert!(!rejected.status.success(), "{}", text(&rejected));
    assert!(
        String::from_utf8_lossy(&rejected.stderr).contains("run `air-friends setup`"),
        "{}",
        text(&rejected)
    );

    // A second run finds everything in place and runs nothing.
    let before = std::fs::metadata(&s.config).unwrap().modified().unwrap();
    let again = s.setup(&[]);
    assert_eq!(s.recorded(), expected, "second run:\n{again}");
    assert!(again.contains("nothing to do"), "{again}");
    assert!(
        again.contains(&format!("OpenCode {OPENCODE_VERSION}")),
        "{again}"
    );
    assert_eq!(
        std::fs::metadata(&s.config).unwrap().modified().unwrap(),
        before
    );
}

#[test]
fn dry_run_prints_the_plan_and_changes_nothing() {
    let s = Scratch::new();
    let stdout = s.setup(&["--dry-run", "--test-tools"]);
    assert!(s.recorded().is_empty(), "{:?}", s.recorded());
    assert!(!s.config.exists());
    assert!(!s.opencode_dir().exists());
    for planned in [
        "apt-get install -y -q --no-install-recommends ripgrep bubblewrap prometheus chromium chromium-driver",
        &format!("opencode-ai@{OPENCODE_VERSION}"),
        &format!("write {}", s.config.display()),
    ] {
        assert!(stdout.contains(planned), "{planned:?} not in:\n{stdout}");
    }
}

#[test]
fn the_printed_version_is_the_pinned_one_ci_installs() {
    let out = Command::new(common::bin())
        .args(["setup", "--print-opencode-version"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        format!("{OPENCODE_VERSION}\n")
    );
    // `.ci/run` installs OpenCode with `air-friends setup` and names no version of its own.
    let ci =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(".ci/run")).unwrap();
    assert!(ci.contains(" setup "), "{ci}");
    assert!(
        !ci.contains(OPENCODE_VERSION),
        ".ci/run pins its own version:\n{ci}"
    );
}

/// The README's quick start is two commands: the first installs everything (the binary, then
/// `air-friends setup`, the step the tests above run) and starts `air-friends chat`, the
/// second runs the tests; neither needs sudo.
#[test]
fn the_readme_quick_start_is_these_two_commands() {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    let quick = readme
        .split("## Quick start")
        .nth(1)
        .and_then(|rest| rest.split("```sh\n").nth(1))
        .and_then(|block| block.split("```").next())
        .expect("a sh block under ## Quick start");
    let commands: Vec<&str> = quick.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(commands.len(), 2, "{quick}");
    let install: Vec<&str> = commands[0].split(" && ").collect();
    assert_eq!(
        install[0], "cargo install --locked --path .",
        "{}",
        commands[0]
    );
    assert_eq!(install[1], "air-friends setup", "{}", commands[0]);
    assert!(install[2].ends_with("air-friends chat"), "{}", commands[0]);
    assert!(
        commands[1].ends_with("cargo test --locked"),
        "{}",
        commands[1]
    );
    assert!(!quick.contains("sudo"), "{quick}");
}
