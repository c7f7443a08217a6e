//! `air-friends setup`: installs what the daemon needs on this machine, so the README's quick
//! start is one command (tests/setup.rs runs it in a scratch HOME).
//!
//! * OpenCode, pinned to [`OPENCODE_VERSION`] (the version the tests and `.ci/run` use), with
//!   npm into a folder the daemon owns ([`opencode_dir`]); [`agent_lookup::AgentLookup`]
//!   finds it there when `agent.command` is the bare default `opencode` and not on `PATH`.
//! * The system packages, with `apt-get` (through `sudo` unless running as root): ripgrep
//!   (OpenCode's file tools), bubblewrap (the agent sandbox), npm when OpenCode must be
//!   installed and npm is missing, and with `--test-tools` promtool (tests/serve.rs) and
//!   chromium with chromium-driver (tests/admin_browser.rs).
//! * `config.yaml`, the documented default (`print-default-config`), when there is none.
//! * The shipped defaults (skills, prompts, agent configuration; `crate::shipped`) written from
//!   the binary to the user's data folder, unless that folder already holds this build's.
//!
//! With `--system` (as root, for a service): OpenCode goes to [`SYSTEM_OPENCODE_DIR`], where the
//! service user can run it; the shipped defaults to `/usr/share/air-friends` unless the package
//! put this build's there; the configuration to [`SYSTEM_CONFIG`]; and the service user
//! ([`SERVICE_USER`]) is created when missing (the package does that itself).
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

/// Where `air-friends setup --system` installs OpenCode, for the service user.
pub const SYSTEM_OPENCODE_DIR: &str = "/usr/lib/air-friends/opencode";

/// The configuration file of a system install (the package's conffile).
pub const SYSTEM_CONFIG: &str = "/etc/air-friends/config.yaml";

/// The user the systemd unit runs the daemon as.
pub const SERVICE_USER: &str = "air-friends";

/// Its home and the daemon's data folder (the unit's `StateDirectory=`).
pub const SERVICE_HOME: &str = "/var/lib/air-friends";

/// The folder `air-friends setup` installs OpenCode into: `$XDG_DATA_HOME/air-friends/opencode`,
/// else `$HOME/.local/share/air-friends/opencode` (a relative `XDG_DATA_HOME` is ignored, as
/// the XDG base directory rules say). None without `HOME`.
pub fn opencode_dir(env: &impl EnvSource) -> Option<PathBuf> {
    let data = crate::shipped::user_data_dir(
        env.var("XDG_DATA_HOME").as_deref(),
        env.var("HOME").as_deref(),
    )?;
    Some(data.join("opencode"))
}

/// The executable npm links for OpenCode inside [`opencode_dir`].
pub fn opencode_executable(env: &impl EnvSource) -> Option<PathBuf> {
    opencode_dir(env).map(|dir| executable_in(&dir))
}

/// The executable `air-friends setup --system` installs.
pub fn system_opencode_executable() -> PathBuf {
    executable_in(Path::new(SYSTEM_OPENCODE_DIR))
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
    /// Also install what only the tests need (promtool, chromium, chromium-driver).
    pub test_tools: bool,
    /// Install for a service (see the module header); `config` is then [`SYSTEM_CONFIG`].
    pub system: bool,
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
const CHROMIUM: Package = Package {
    name: "chromium",
    command: "chromium",
    purpose: "the tests drive the operator console in a headless browser",
};
const CHROMEDRIVER: Package = Package {
    name: "chromium-driver",
    command: "chromedriver",
    purpose: "the tests click through the operator console (WebDriver)",
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
    /// The folder the shipped defaults go to, and whether it holds this build's already.
    pub shipped: (PathBuf, bool),
    /// `--system`: whether the service user ([`SERVICE_USER`]) exists.
    pub service_user_exists: Option<bool>,
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
    /// `--system` needs root.
    #[error("setup --system installs for every user: run it as root")]
    SystemNeedsRoot,
    /// The shipped defaults could not be written.
    #[error(transparent)]
    Shipped(#[from] crate::shipped::ShippedError),
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
        let root = nix::unistd::geteuid().is_root();
        if options.system && !root {
            return Err(SetupError::SystemNeedsRoot);
        }
        let (opencode_dir, shipped_dir) = if options.system {
            (
                PathBuf::from(SYSTEM_OPENCODE_DIR),
                PathBuf::from(crate::shipped::PACKAGE_DIR),
            )
        } else {
            let data = crate::shipped::user_data_dir(
                env.var("XDG_DATA_HOME").as_deref(),
                env.var("HOME").as_deref(),
            )
            .ok_or(SetupError::NoHome)?;
            (data.join("opencode"), data.join("defaults"))
        };
        let exe = executable_in(&opencode_dir);
        let user_exists = |name: &str| matches!(nix::unistd::User::from_name(name), Ok(Some(_)));
        let mut wanted = vec![RIPGREP, BUBBLEWRAP, NPM];
        if options.test_tools {
            wanted.extend([PROMTOOL, CHROMIUM, CHROMEDRIVER]);
        }
        Ok(Machine {
            root,
            sudo: on_path("sudo").is_some(),
            packages: wanted
                .into_iter()
                .map(|p| (p, on_path(p.command)))
                .collect(),
            opencode_version: opencode_version(&exe),
            opencode_dir,
            opencode_on_path: on_path(OPENCODE_COMMAND),
            config_exists: options.config.exists(),
            agent_user_exists: user_exists(DEFAULT_AGENT_USER),
            shipped: (
                shipped_dir.clone(),
                crate::shipped::is_current(&shipped_dir),
            ),
            service_user_exists: options.system.then(|| user_exists(SERVICE_USER)),
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
    /// Write the documented default configuration to this file (with `system`, the system
    /// install's: data in [`SERVICE_HOME`], mode 0640, group [`SERVICE_USER`]).
    WriteConfig {
        /// The file.
        path: PathBuf,
        /// The system install's flavour.
        system: bool,
    },
    /// Write the shipped defaults from the binary to this folder (`crate::shipped::write`).
    WriteShipped(PathBuf),
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
        plan.add_service_user(machine);
        let (shipped, current) = &machine.shipped;
        if *current {
            plan.present.push(format!(
                "shipped skills, prompts and agent configuration: {} (this version's)",
                shipped.display()
            ));
        } else {
            plan.steps.push(Step::WriteShipped(shipped.clone()));
        }
        if machine.config_exists {
            plan.present
                .push(format!("configuration: {} (kept)", config.display()));
        } else {
            plan.steps.push(Step::WriteConfig {
                path: config.to_path_buf(),
                system: machine.service_user_exists.is_some(),
            });
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

    /// `--system`: the service user, unless it exists: a system user whose home is the data
    /// folder, with no login shell (the package creates the same with sysusers).
    fn add_service_user(&mut self, machine: &Machine) {
        match machine.service_user_exists {
            None => {}
            Some(true) => self.present.push(format!("service user: {SERVICE_USER}")),
            Some(false) => self.steps.push(Step::Run(
                [
                    "useradd",
                    "--system",
                    "--user-group",
                    "--no-create-home",
                    "--home-dir",
                    SERVICE_HOME,
                    "--shell",
                    "/usr/sbin/nologin",
                    SERVICE_USER,
                ]
                .map(str::to_owned)
                .to_vec(),
            )),
        }
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
            Step::WriteConfig { path, .. } => write!(
                f,
                "write {} (the documented default, as `air-friends print-default-config` prints it)",
                path.display()
            ),
            Step::WriteShipped(dir) => write!(
                f,
                "write {} (this version's shipped skills, prompts and agent configuration)",
                dir.display()
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
        Step::WriteShipped(dir) => {
            crate::shipped::write(dir)?;
            Ok(())
        }
        Step::WriteConfig { path, system } => write_config(path, *system),
    }
}

/// Writes the default configuration to `path`, which must not exist (see [`Step::WriteConfig`]).
fn write_config(path: &Path, system: bool) -> Result<(), SetupError> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let failed = |source| SetupError::WriteConfig {
        path: path.to_path_buf(),
        source,
    };
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(failed)?;
    }
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(if system { 0o640 } else { 0o644 })
        .open(path)
        .map_err(failed)?;
    std::io::Write::write_all(&mut file, crate::config::example_yaml(system).as_bytes())
        .map_err(failed)?;
    if system {
        let group = nix::unistd::Group::from_name(SERVICE_USER)
            .ok()
            .flatten()
            .ok_or_else(|| failed(std::io::Error::other(format!("no group {SERVICE_USER}"))))?;
        nix::unistd::fchown(&file, None, Some(group.gid))
            .map_err(|e| failed(std::io::Error::from(e)))?;
    }
    Ok(())
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
    let system_options;
    let options = if options.system {
        system_options = Options {
            config: PathBuf::from(SYSTEM_CONFIG),
            ..options.clone()
        };
        &system_options
    } else {
        options
    };
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
    if options.system {
        println!(
            "next: put the tokens and the provider's key in /etc/air-friends/credentials (see \
             docs/PLATFORMS.md), check with `air-friends check-config --config {config}`, then \
             `systemctl enable --now air-friends`",
            config = options.config.display()
        );
    } else {
        println!(
            "next: OPENROUTER_API_KEY=sk-... air-friends chat --config {}   (or another provider's \
             key, see the README)",
            options.config.display()
        );
    }
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
            shipped: ("/h/.local/share/air-friends/defaults".into(), true),
            service_user_exists: None,
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
                "agent user (agents of a root daemon): air-friends-agent",
                "shipped skills, prompts and agent configuration: \
                 /h/.local/share/air-friends/defaults (this version's)",
            ]
        );
    }

    #[test]
    fn shipped_defaults_of_another_version_are_written_again() {
        let mut m = machine(false, true);
        m.shipped.1 = false;
        let plan = Plan::for_machine(&m, Path::new("c.yaml")).unwrap();
        assert!(
            runs(&plan).contains(
                &"write /h/.local/share/air-friends/defaults (this version's shipped skills, \
                  prompts and agent configuration)"
                    .to_owned()
            ),
            "{:?}",
            runs(&plan)
        );
    }

    #[test]
    fn for_the_system_the_service_user_is_created_and_the_config_is_the_services() {
        let mut m = machine(true, false);
        m.opencode_dir = SYSTEM_OPENCODE_DIR.into();
        m.shipped = (crate::shipped::PACKAGE_DIR.into(), true);
        m.service_user_exists = Some(false);
        let plan = Plan::for_machine(&m, Path::new(SYSTEM_CONFIG)).unwrap();
        let steps = runs(&plan);
        assert!(
            steps.contains(
                &"$ useradd --system --user-group --no-create-home --home-dir \
                  /var/lib/air-friends --shell /usr/sbin/nologin air-friends"
                    .to_owned()
            ),
            "{steps:?}"
        );
        assert!(
            steps
                .iter()
                .any(|s| s.starts_with("$ npm install --prefix /usr/lib/air-friends/opencode ")),
            "{steps:?}"
        );
        assert_eq!(
            plan.steps.last(),
            Some(&Step::WriteConfig {
                path: SYSTEM_CONFIG.into(),
                system: true
            })
        );
        assert!(
            plan.present
                .iter()
                .any(|p| p.ends_with("/usr/share/air-friends (this version's)")),
            "{:?}",
            plan.present
        );
        m.service_user_exists = Some(true);
        let plan = Plan::for_machine(&m, Path::new(SYSTEM_CONFIG)).unwrap();
        assert!(!runs(&plan).iter().any(|r| r.contains("useradd")));
        assert!(
            plan.present
                .contains(&"service user: air-friends".to_owned())
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
        assert_eq!(plan.present.len(), 5, "{plan:?}");
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
