//! `air-friends setup`: installs what the daemon needs on this machine, so the README's quick
//! start is one command (tests/setup.rs runs it in a scratch HOME).
//!
//! * OpenCode, pinned to [`OPENCODE_VERSION`] (the version the tests and `.ci/run` use), with
//!   npm into a folder the daemon owns ([`opencode_dir`]); [`agent_lookup::AgentLookup`]
//!   finds it there when `agent.command` is the bare default `opencode` and not on `PATH`.
//! * The system packages, with `apt-get` (through `sudo` unless running as root): ripgrep
//!   (OpenCode's file tools), bubblewrap (the agent sandbox), npm when OpenCode must be
//!   installed and npm is missing, and with `--test-tools` promtool (tests/serve.rs).
//! * `config.yaml`, the documented default (`print-default-config`), when there is none.
//!
//! Idempotent: what is already there is kept and named. The machine is probed first
//! ([`Machine::probe`]), the [`Plan`] derived from it alone ([`Plan::for_machine`], unit
//! tested), then printed (`--dry-run`) or run step by step, each command echoed before it runs.

pub mod agent_lookup;

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use crate::command_path::resolve_command;
use crate::config::{DEFAULT_AGENT_USER, EnvSource, ProcessEnv};

/// The OpenCode release air-friends is tested with (tests/opencode_e2e.rs; `.ci/run` reads it
/// from `air-friends setup --print-opencode-version`).
pub const OPENCODE_VERSION: &str = "1.18.33";

/// The npm package OpenCode is published as.
pub const OPENCODE_PACKAGE: &str = "opencode-ai";

/// The default `agent.command`; only this bare name is also looked for in [`opencode_dir`].
pub const OPENCODE_COMMAND: &str = "opencode";

/// The folder `air-friends setup` installs OpenCode into: `$XDG_DATA_HOME/air-friends/opencode`,
/// else `$HOME/.local/share/air-friends/opencode` (a relative `XDG_DATA_HOME` is ignored, as
/// the XDG base directory rules say). None without `HOME`.
pub fn opencode_dir(env: &impl EnvSource) -> Option<PathBuf> {
    let data = env
        .var("XDG_DATA_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| {
            let home = env.var("HOME").filter(|h| !h.is_empty())?;
            Some(Path::new(&home).join(".local/share"))
        })?;
    Some(data.join("air-friends/opencode"))
}

/// The executable npm links for OpenCode inside [`opencode_dir`].
pub fn opencode_executable(env: &impl EnvSource) -> Option<PathBuf> {
    opencode_dir(env).map(|dir| executable_in(&dir))
}

/// The `opencode` npm links in `node_modules/.bin` of the install folder `dir`.
fn executable_in(dir: &Path) -> PathBuf {
    dir.join("node_modules/.bin").join(OPENCODE_COMMAND)
}

/// The options of `air-friends setup` (see `src/cli.rs`).
#[derive(Debug, Clone)]
pub struct Options {
    /// Where to write the default configuration when there is none.
    pub config: PathBuf,
    /// Print the plan only.
    pub dry_run: bool,
    /// Also install what only the tests need (promtool).
    pub test_tools: bool,
}

/// A system package and the command that shows it is installed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Package {
    /// The Debian package.
    pub name: &'static str,
    /// The command it provides, looked for on `PATH`.
    pub command: &'static str,
    /// What it is for, in the report.
    pub purpose: &'static str,
}

const RIPGREP: Package = Package {
    name: "ripgrep",
    command: "rg",
    purpose: "OpenCode's file tools",
};
const BUBBLEWRAP: Package = Package {
    name: "bubblewrap",
    command: "bwrap",
    purpose: "the agent sandbox",
};
const NPM: Package = Package {
    name: "npm",
    command: "npm",
    purpose: "installs OpenCode",
};
const PROMTOOL: Package = Package {
    name: "prometheus",
    command: "promtool",
    purpose: "the tests lint /metrics with promtool",
};

/// What is on this machine, as far as the plan cares.
#[derive(Debug, Clone)]
pub struct Machine {
    /// Running as root (apt-get without sudo).
    pub root: bool,
    /// `sudo` is on `PATH`.
    pub sudo: bool,
    /// Each package wanted and where its command was found.
    pub packages: Vec<(Package, Option<PathBuf>)>,
    /// The OpenCode folder ([`opencode_dir`]).
    pub opencode_dir: PathBuf,
    /// The version the installed OpenCode prints (None: not installed or not runnable).
    pub opencode_version: Option<String>,
    /// `opencode` on `PATH`, which the daemon runs before the setup folder's.
    pub opencode_on_path: Option<PathBuf>,
    /// The configuration file exists.
    pub config_exists: bool,
    /// The default agent user ([`DEFAULT_AGENT_USER`]) exists: a root daemon's agents run as it.
    pub agent_user_exists: bool,
}

/// Why setup stopped.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// Neither `XDG_DATA_HOME` nor `HOME` says where OpenCode goes.
    #[error("HOME is not set: cannot tell where to install OpenCode")]
    NoHome,
    /// Packages are missing, this is not root and there is no sudo.
    #[error(
        "{packages} must be installed, but this is not root and sudo is not installed; run \
         `air-friends setup` as root, or install them with your package manager"
    )]
    NoSudo {
        /// The missing packages, space separated.
        packages: String,
    },
    /// A command could not be started.
    #[error("cannot run `{command}`: {source}")]
    Spawn {
        /// The command line.
        command: String,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// A command failed.
    #[error("`{command}` failed ({status})")]
    Failed {
        /// The command line.
        command: String,
        /// Its exit status.
        status: std::process::ExitStatus,
    },
    /// npm finished but the pinned OpenCode does not run from the folder.
    #[error(
        "npm finished, but {path} does not report OpenCode {OPENCODE_VERSION} (it printed {got:?})"
    )]
    NotInstalled {
        /// The executable checked.
        path: PathBuf,
        /// What `--version` printed, if it ran.
        got: Option<String>,
    },
    /// The configuration could not be written.
    #[error("cannot write {path}: {source}")]
    WriteConfig {
        /// The file.
        path: PathBuf,
        /// The operating system's error.
        source: std::io::Error,
    },
}

impl Machine {
    /// Looks at this machine: the effective user, `PATH` (from `env`), the OpenCode folder and
    /// the configuration file.
    pub fn probe(env: &impl EnvSource, options: &Options) -> Result<Machine, SetupError> {
        let path_var = env.var("PATH");
        let on_path = |command: &str| resolve_command(command, path_var.as_deref());
        let opencode_dir = opencode_dir(env).ok_or(SetupError::NoHome)?;
        let exe = executable_in(&opencode_dir);
        let mut wanted = vec![RIPGREP, BUBBLEWRAP, NPM];
        if options.test_tools {
            wanted.push(PROMTOOL);
        }
        Ok(Machine {
            root: nix::unistd::geteuid().is_root(),
            sudo: on_path("sudo").is_some(),
            packages: wanted
                .into_iter()
                .map(|p| (p, on_path(p.command)))
                .collect(),
            opencode_version: opencode_version(&exe),
            opencode_dir,
            opencode_on_path: on_path(OPENCODE_COMMAND),
            config_exists: options.config.exists(),
            agent_user_exists: matches!(
                nix::unistd::User::from_name(DEFAULT_AGENT_USER),
                Ok(Some(_))
            ),
        })
    }

    fn opencode_installed(&self) -> bool {
        self.opencode_version.as_deref() == Some(OPENCODE_VERSION)
    }

    fn opencode_executable(&self) -> PathBuf {
        executable_in(&self.opencode_dir)
    }
}

/// What `opencode --version` prints, run with a throw-away HOME (OpenCode writes caches there).
fn opencode_version(exe: &Path) -> Option<String> {
    resolve_command(&exe.display().to_string(), None)?;
    let home = tempfile::tempdir().ok()?;
    let out = Command::new(exe)
        .arg("--version")
        .env("HOME", home.path())
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// One thing setup does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Run a program (argv), echoed first.
    Run(Vec<String>),
    /// Write the documented default configuration to this file.
    WriteConfig(PathBuf),
}

/// What setup found in place and what it will do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Lines naming what is already there (kept as it is).
    pub present: Vec<String>,
    /// The steps, in order.
    pub steps: Vec<Step>,
    /// Notes for the user (e.g. another `opencode` on `PATH` comes first).
    pub notes: Vec<String>,
}

impl Plan {
    /// The plan for `machine`: apt-get for missing packages (npm only when OpenCode must be
    /// installed), npm for OpenCode unless the pinned version runs from its folder, the
    /// configuration unless `config` exists.
    pub fn for_machine(machine: &Machine, config: &Path) -> Result<Plan, SetupError> {
        let mut plan = Plan {
            present: Vec::new(),
            steps: Vec::new(),
            notes: Vec::new(),
        };
        let need_opencode = !machine.opencode_installed();
        plan.add_packages(machine, need_opencode)?;
        plan.add_opencode(machine, need_opencode);
        plan.add_agent_user(machine);
        if machine.config_exists {
            plan.present
                .push(format!("configuration: {} (kept)", config.display()));
        } else {
            plan.steps.push(Step::WriteConfig(config.to_path_buf()));
        }
        Ok(plan)
    }

    /// The packages found, and apt-get for the missing ones (npm only if OpenCode is needed).
    fn add_packages(&mut self, machine: &Machine, need_opencode: bool) -> Result<(), SetupError> {
        let mut missing: Vec<&'static str> = Vec::new();
        for (package, found) in &machine.packages {
            match found {
                Some(path) => self.present.push(format!(
                    "{} ({}): {}",
                    package.name,
                    package.purpose,
                    path.display()
                )),
                None if *package == NPM && !need_opencode => {}
                None => missing.push(package.name),
            }
        }
        if missing.contains(&NPM.name) {
            // Debian's nodejs only recommends the certificates npm needs to reach its registry.
            missing.push("ca-certificates");
        }
        if missing.is_empty() {
            return Ok(());
        }
        let sudo: &[&str] = match (machine.root, machine.sudo) {
            (true, _) => &[],
            (false, true) => &["sudo"],
            (false, false) => {
                return Err(SetupError::NoSudo {
                    packages: missing.join(" "),
                });
            }
        };
        let argv = |args: &[&str]| -> Vec<String> {
            sudo.iter()
                .chain(args)
                .map(|s| s.to_string())
                .collect::<Vec<_>>()
        };
        self.steps
            .push(Step::Run(argv(&["apt-get", "update", "-q"])));
        let mut install = argv(&["apt-get", "install", "-y", "-q", "--no-install-recommends"]);
        install.extend(missing.iter().map(|p| p.to_string()));
        self.steps.push(Step::Run(install));
        Ok(())
    }

    /// As root, the unprivileged user a root daemon's agents run as (never host root; see
    /// `docs/SECURITY.md`), unless it exists. An unprivileged daemon's agents run as itself.
    fn add_agent_user(&mut self, machine: &Machine) {
        if !machine.root {
            return;
        }
        if machine.agent_user_exists {
            self.present.push(format!(
                "agent user (agents of a root daemon): {DEFAULT_AGENT_USER}"
            ));
            return;
        }
        self.steps.push(Step::Run(
            [
                "useradd",
                "--system",
                "--no-create-home",
                "--home-dir",
                "/nonexistent",
                "--shell",
                "/usr/sbin/nologin",
                DEFAULT_AGENT_USER,
            ]
            .map(str::to_owned)
            .to_vec(),
        ));
    }

    /// npm for OpenCode unless the pinned version is in place; a note if another `opencode`
    /// on PATH would come first.
    fn add_opencode(&mut self, machine: &Machine, need_opencode: bool) {
        let dir = machine.opencode_dir.display().to_string();
        if need_opencode {
            self.steps.push(Step::Run(
                [
                    "npm",
                    "install",
                    "--prefix",
                    &dir,
                    "--no-audit",
                    "--no-fund",
                    "--loglevel=error",
                    &format!("{OPENCODE_PACKAGE}@{OPENCODE_VERSION}"),
                ]
                .map(str::to_owned)
                .to_vec(),
            ));
        } else {
            self.present.push(format!(
                "OpenCode {OPENCODE_VERSION}: {}",
                machine.opencode_executable().display()
            ));
        }
        if let Some(other) = &machine.opencode_on_path {
            self.notes.push(format!(
                "`opencode` on PATH ({}) comes first for the daemon; remove it or set \
                 agent.command to {} to run the tested version",
                other.display(),
                machine.opencode_executable().display()
            ));
        }
    }
}

impl std::fmt::Display for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Step::Run(argv) => write!(f, "$ {}", argv.join(" ")),
            Step::WriteConfig(path) => write!(
                f,
                "write {} (the documented default, as `air-friends print-default-config` prints it)",
                path.display()
            ),
        }
    }
}

/// Runs `step`; `opencode_exe` is checked after the npm install.
fn run_step(step: &Step, opencode_exe: &Path) -> Result<(), SetupError> {
    match step {
        Step::Run(argv) => {
            let command = argv.join(" ");
            let status = Command::new(&argv[0])
                .args(&argv[1..])
                .env("DEBIAN_FRONTEND", "noninteractive")
                .status()
                .map_err(|source| SetupError::Spawn {
                    command: command.clone(),
                    source,
                })?;
            if !status.success() {
                return Err(SetupError::Failed { command, status });
            }
            if argv[0] == "npm" {
                let got = opencode_version(opencode_exe);
                if got.as_deref() != Some(OPENCODE_VERSION) {
                    return Err(SetupError::NotInstalled {
                        path: opencode_exe.to_path_buf(),
                        got,
                    });
                }
            }
            Ok(())
        }
        Step::WriteConfig(path) => {
            if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
                std::fs::create_dir_all(parent).map_err(|source| SetupError::WriteConfig {
                    path: path.clone(),
                    source,
                })?;
            }
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(path)
                .and_then(|mut f| {
                    std::io::Write::write_all(&mut f, crate::config::EXAMPLE_YAML.as_bytes())
                })
                .map_err(|source| SetupError::WriteConfig {
                    path: path.clone(),
                    source,
                })
        }
    }
}

/// `air-friends setup [--dry-run] [--test-tools] [--config FILE]`: probes, prints what is in
/// place, runs (or with `--dry-run` prints) the plan, then the next command. Exit 1 with one
/// line on stderr when a step fails.
pub fn run_cli(options: &Options) -> ExitCode {
    match run(options, &ProcessEnv) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("air-friends setup: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(options: &Options, env: &impl EnvSource) -> Result<(), SetupError> {
    let machine = Machine::probe(env, options)?;
    let plan = Plan::for_machine(&machine, &options.config)?;
    for line in &plan.present {
        println!("in place: {line}");
    }
    if plan.steps.is_empty() {
        println!("nothing to do");
    } else if options.dry_run {
        println!("would run (--dry-run, nothing done):");
        for step in &plan.steps {
            println!("  {step}");
        }
    } else {
        let exe = machine.opencode_executable();
        for step in &plan.steps {
            println!("{step}");
            run_step(step, &exe)?;
        }
        println!("done");
    }
    for note in &plan.notes {
        println!("note: {note}");
    }
    println!(
        "next: OPENROUTER_API_KEY=sk-... air-friends chat --config {}   (or another provider's \
         key, see the README)",
        options.config.display()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn machine(root: bool, sudo: bool) -> Machine {
        Machine {
            root,
            sudo,
            packages: vec![
                (RIPGREP, None),
                (BUBBLEWRAP, Some("/usr/bin/bwrap".into())),
                (NPM, None),
            ],
            opencode_dir: "/h/.local/share/air-friends/opencode".into(),
            opencode_version: None,
            opencode_on_path: None,
            config_exists: false,
            agent_user_exists: true,
        }
    }

    fn runs(plan: &Plan) -> Vec<String> {
        plan.steps.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn as_root_apt_get_runs_without_sudo_and_npm_installs_the_pinned_version() {
        let plan = Plan::for_machine(&machine(true, false), Path::new("config.yaml")).unwrap();
        assert_eq!(
            runs(&plan),
            [
                "$ apt-get update -q",
                "$ apt-get install -y -q --no-install-recommends ripgrep npm ca-certificates",
                "$ npm install --prefix /h/.local/share/air-friends/opencode --no-audit --no-fund \
                 --loglevel=error opencode-ai@1.18.33",
                "write config.yaml (the documented default, as `air-friends print-default-config` prints it)",
            ]
        );
        assert_eq!(
            plan.present,
            [
                "bubblewrap (the agent sandbox): /usr/bin/bwrap",
                "agent user (agents of a root daemon): air-friends-agent"
            ]
        );
    }

    #[test]
    fn as_root_the_agent_user_is_created_when_missing_and_never_otherwise() {
        let mut m = machine(true, false);
        m.agent_user_exists = false;
        let plan = Plan::for_machine(&m, Path::new("c.yaml")).unwrap();
        assert!(
            runs(&plan).contains(
                &"$ useradd --system --no-create-home --home-dir /nonexistent --shell \
                  /usr/sbin/nologin air-friends-agent"
                    .to_owned()
            ),
            "{:?}",
            runs(&plan)
        );
        let mut unprivileged = machine(false, true);
        unprivileged.agent_user_exists = false;
        let plan = Plan::for_machine(&unprivileged, Path::new("c.yaml")).unwrap();
        assert!(!runs(&plan).iter().any(|r| r.contains("useradd")));
    }

    #[test]
    fn otherwise_through_sudo_or_not_at_all() {
        let plan = Plan::for_machine(&machine(false, true), Path::new("c.yaml")).unwrap();
        assert_eq!(runs(&plan)[0], "$ sudo apt-get update -q");
        assert!(runs(&plan)[1].starts_with("$ sudo apt-get install "));
        let err = Plan::for_machine(&machine(false, false), Path::new("c.yaml")).unwrap_err();
        assert!(
            matches!(&err, SetupError::NoSudo { packages } if packages == "ripgrep npm ca-certificates")
        );
    }

    #[test]
    fn what_is_in_place_is_kept() {
        let mut m = machine(false, false);
        m.packages[0].1 = Some("/usr/bin/rg".into());
        m.opencode_version = Some(OPENCODE_VERSION.into());
        m.config_exists = true;
        m.opencode_on_path = Some("/usr/local/bin/opencode".into());
        // npm is missing, but OpenCode is installed: nothing to install, no sudo needed.
        let plan = Plan::for_machine(&m, Path::new("c.yaml")).unwrap();
        assert!(plan.steps.is_empty(), "{plan:?}");
        assert_eq!(plan.present.len(), 4, "{plan:?}");
        assert!(
            plan.notes[0].contains("/usr/local/bin/opencode"),
            "{plan:?}"
        );

        // Another version in the folder is replaced.
        m.opencode_version = Some("1.0.0".into());
        let plan = Plan::for_machine(&m, Path::new("c.yaml")).unwrap_err();
        assert!(
            matches!(plan, SetupError::NoSudo { .. }),
            "npm must now be installed"
        );
    }

    #[test]
    fn the_folder_follows_xdg_data_home_then_home() {
        let env = |vars: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                vars.iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| v.to_string())
            }
        };
        assert_eq!(
            opencode_dir(&env(&[("HOME", "/h")])),
            Some("/h/.local/share/air-friends/opencode".into())
        );
        assert_eq!(
            opencode_dir(&env(&[("HOME", "/h"), ("XDG_DATA_HOME", "/d")])),
            Some("/d/air-friends/opencode".into())
        );
        assert_eq!(
            opencode_dir(&env(&[("HOME", "/h"), ("XDG_DATA_HOME", "rel")])),
            Some("/h/.local/share/air-friends/opencode".into())
        );
        assert_eq!(opencode_dir(&env(&[])), None);
        assert_eq!(
            opencode_executable(&env(&[("HOME", "/h")])),
            Some("/h/.local/share/air-friends/opencode/node_modules/.bin/opencode".into())
        );
    }
}
