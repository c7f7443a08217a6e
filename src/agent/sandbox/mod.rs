//! The OS sandbox around every agent process (`agent.sandbox.mode`, see `docs/SECURITY.md`).
//!
//! The permission gate decides which commands the agent may run, but a hijacked agent must not
//! be able to do harm even where the gate is out of the way (YOLO mode, a bug, a tool that does
//! not ask). So every agent runs inside [bubblewrap](https://github.com/containers/bubblewrap):
//!
//! * a fresh PID namespace with its own `/proc`: the daemon, other agents and their
//!   environments (`SKILL_API_TOKEN`, provider keys) are not visible; when the agent's
//!   process tree loses its PID 1 the kernel kills every process in it, double forks and
//!   `setsid` included, and `--die-with-parent` ties that PID 1 to the daemon;
//! * a private `/tmp` (size-capped tmpfs) that also holds the agent's home folder, so agent
//!   state never leaks between sessions;
//! * read-only: `/usr` (and the merged-`/usr` links), the few `/etc` files programs need
//!   (TLS roots, name resolution, users, alternatives), the agent's executable and its install,
//!   this daemon's executable (the skill scripts run it), the agent configuration folder, the
//!   skills folder (at its own path and at `{workspace}/skills`, so the relative paths the
//!   skill docs teach reach the real, unwritable scripts), and `agent.sandbox.readOnlyPaths`;
//! * writable: only the session's workspace; `{workspace}/private/` is covered by an empty
//!   read-only tmpfs unless the session is a direct message;
//! * not visible at all: the database, the configuration, `prompts/`, other workspaces and the
//!   daemon's home; no capabilities (`--cap-drop ALL`), new IPC and UTS namespaces;
//! * read-only even for root: `/proc/sys` and `/proc/sysrq-trigger` (bubblewrap leaves them
//!   writable to a root sandbox), `/dev`, and bubblewrap's own root;
//! * never host root, and locked down before the agent starts: every agent runs under
//!   `air-friends sandbox-init` ([`super::lockdown`]), which — when the daemon runs as root —
//!   becomes the dedicated agent user (`agent.sandbox.user`, [`identity`]) in a user namespace
//!   of its own, sets `agent.sandbox.limits`, takes a new session keyring and loads the
//!   seccomp filter ([`super::seccomp`]);
//! * no network (`--unshare-net`: only the sandbox's own loopback) when the session has a Skill
//!   API socket folder: it is bound read-only at [`SANDBOX_SOCKET_DIR`], and the agent is started
//!   under `air-friends sandbox-init` ([`super::relay`]), which relays
//!   `127.0.0.1:`[`SANDBOX_API_PORT`] to its `api.sock`. So the daemon's ops port, other loopback
//!   services, cloud metadata and the internet are unreachable, while OpenCode and the skill
//!   scripts keep using [`sandbox_api_url`]. Without a socket folder the network stays shared:
//!   only for callers that serve no Skill API to the agent (runner-level tests); the daemon
//!   always passes one when sandboxed;
//! * with `agent.sandbox.egressAllowHosts` set, a second relay `127.0.0.1:`[`SANDBOX_PROXY_PORT`]
//!   to the folder's `proxy.sock`, where the daemon serves a CONNECT proxy for those hosts only
//!   ([`crate::egress`]); the agent's `HTTPS_PROXY` points at it ([`Sandbox::adjust_network_env`]).
//!
//! A bind of a folder that would expose a protected path (the data folder with the database
//! and workspaces, the prompts) is refused when the sandbox is built, so a mistaken
//! `readOnlyPaths` entry or an agent installed inside the data folder fails at start, not
//! silently. The sandbox is fail-closed: [`Sandbox::probe`] runs `sandbox-init --check` in a
//! real sandbox at start-up — `/proc/sys` not writable, no capability, the seccomp filter and
//! the keyring refusal in force, not host root — and `serve`/`chat` refuse to start when any
//! of it fails, with the reason and the fix.
//!
//! The bubblewrap command line itself is put together in `bwrap`.

mod bwrap;
pub mod cgroup;
mod identity;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::agent::lockdown::{CheckReport, HostUser};
use crate::config::{CgroupMode, SandboxConfig, SandboxMode};
use bwrap::Bwrap;
use cgroup::{AgentCgroup, CgroupError, CgroupLimits, Cgroups};
pub use identity::{agent_host_user, hand_over};

/// The agent's home inside the sandbox (on the private `/tmp`).
pub const SANDBOX_HOME: &str = "/tmp/home";

/// Where the session's socket folder is bound inside the sandbox (read-only).
pub const SANDBOX_SOCKET_DIR: &str = "/run/air-friends";

/// The socket file, in the session's socket folder, that the relay forwards to.
pub const API_SOCKET_NAME: &str = "api.sock";

/// The loopback port inside the sandbox on which `sandbox-init` relays to the session's socket.
pub const SANDBOX_API_PORT: u16 = 3001;

/// The loopback port inside the sandbox on which `sandbox-init` relays to the session's
/// `proxy.sock` (the egress proxy), when `agent.sandbox.egressAllowHosts` is set.
pub const SANDBOX_PROXY_PORT: u16 = 3128;

/// The egress proxy as the sandboxed agent reaches it (`HTTPS_PROXY`): `http://127.0.0.1:3128`.
pub fn sandbox_proxy_url() -> String {
    format!("http://127.0.0.1:{SANDBOX_PROXY_PORT}")
}

/// The Skill API (and model gateway) as the sandboxed agent reaches it:
/// `http://127.0.0.1:3001`.
pub fn sandbox_api_url() -> String {
    format!("http://127.0.0.1:{SANDBOX_API_PORT}")
}

/// How long the start-up probe may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// Why the sandbox cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// bubblewrap is not installed.
    #[error(
        "the agent sandbox needs bubblewrap, but {program:?} was not found on PATH. Fix: install it \
         (`apt-get install bubblewrap`), or set agent.sandbox.bwrapPath, or run without a sandbox \
         with agent.sandbox.mode: none (not recommended: the agent could then read the database \
         and the configuration)"
    )]
    Missing {
        /// The configured program.
        program: String,
    },
    /// bubblewrap is installed but cannot create the sandbox.
    #[error(
        "the agent sandbox does not start: {detail}. Fix: allow unprivileged user namespaces \
         (`sysctl -w kernel.unprivileged_userns_clone=1` and `user.max_user_namespaces` > 0; under \
         systemd do not set PrivateUsers=, ProtectKernelTunables=, ProtectKernelLogs=, \
         ProcSubset=pid or RestrictNamespaces= that forbid user/pid/ipc/uts/mount/net namespaces, \
         see contrib/systemd/air-friends.service), or set \
         agent.sandbox.mode: none \
         (not recommended)"
    )]
    Broken {
        /// What bubblewrap said.
        detail: String,
    },
    /// A path the sandbox would expose contains something the agent must never see.
    #[error(
        "the agent sandbox would expose {protected} through the read-only path {path}; move the \
         agent's installation out of it or fix agent.sandbox.readOnlyPaths"
    )]
    Exposes {
        /// The bind that was refused.
        path: PathBuf,
        /// The protected path inside it.
        protected: PathBuf,
    },
    /// The daemon runs as root and the agent user is missing or is root itself.
    #[error(
        "the daemon runs as root, so agents run as the unprivileged user {name:?} \
         (agent.sandbox.user), which {problem}. Fix: run `air-friends setup` (it creates the \
         user), or `useradd --system --no-create-home --shell /usr/sbin/nologin {name}`, or run \
         the daemon as an unprivileged user"
    )]
    AgentUser {
        /// The configured name.
        name: String,
        /// What is wrong with it.
        problem: String,
    },
    /// The sandbox starts, but a wall does not hold inside it.
    #[error(
        "the agent sandbox starts but does not hold: {detail}. Fix: use bubblewrap 0.5 or newer \
         with seccomp (Debian's bubblewrap), run the daemon as an unprivileged user or as root \
         with agent.sandbox.user set to an unprivileged user, and do not run it in a container \
         that forbids user namespaces"
    )]
    Leaky {
        /// What does not hold.
        detail: String,
    },
    /// The agents' cgroup cannot be used: `agent.sandbox.cgroup: required` and memory cannot
    /// be bounded here, or a sandboxed command cannot join its group.
    #[error(
        "the agents' cgroup cannot be used: {detail}. Fix: run the daemon under systemd with \
         the unit in contrib/systemd (Delegate=, DelegateSubgroup=daemon), or as root on a \
         machine with cgroup v1 memory and pids hierarchies; or set agent.sandbox.cgroup: off \
         to run with the per-process limits only (memory then unbounded)"
    )]
    Cgroup {
        /// Why.
        detail: String,
    },
    /// A path the sandbox needs is missing or unreadable.
    #[error("the agent sandbox needs {path}: {source}")]
    Path {
        /// The path.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
}

/// What the sandbox is built from (fixed for the daemon's life).
#[derive(Debug, Clone)]
pub struct SandboxSetup<'a> {
    /// `agent.sandbox.*`.
    pub config: &'a SandboxConfig,
    /// The agent executable as resolved on the agent's `PATH` (`None` when it was not found:
    /// sessions then fail to start it, and `/readyz` reports the missing command).
    pub agent_program: Option<&'a Path>,
    /// This daemon's executable (the skill scripts exec it).
    pub air_friends_bin: &'a Path,
    /// The skills folder.
    pub skills_dir: &'a Path,
    /// The agent configuration folder (`agent.configDir`), when it exists.
    pub agent_config_dir: Option<&'a Path>,
    /// Paths the agent must never see (data folder, database, prompts, configuration file).
    pub protected: &'a [PathBuf],
    /// `PATH` used to find bubblewrap.
    pub path_var: Option<&'a str>,
}

/// The agent's confinement: either bubblewrap or none.
#[derive(Debug, Clone)]
pub struct Sandbox {
    bwrap: Option<Arc<Bwrap>>,
    /// Each agent's cgroup, when the daemon can have them.
    cgroups: Option<Arc<Cgroups>>,
    /// Why agents get no cgroup (for the summary), when they do not.
    no_cgroup: String,
}

/// The program and arguments that start one agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wrapped {
    /// What to execute.
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<OsString>,
}

/// What a session's sandbox binds besides the system and the agent's runtime.
#[derive(Debug, Clone, Copy)]
pub struct Mounts<'a> {
    /// The user's workspace (read-write; the agent's cwd).
    pub workspace: &'a Path,
    /// A direct message: the workspace's `private/` is the real one.
    pub dm: bool,
    /// The folder holding the session's `api.sock` (the sandbox then has no network).
    pub api_socket_dir: Option<&'a Path>,
    /// The session's staging folder, bound over `$TMPDIR/{session}`.
    pub staging: Option<&'a Path>,
    /// The conversation's agent-state folder (`conversation::continuity`), bound read-write as
    /// the agent's data folder (`$XDG_DATA_HOME`), so its session survives the process.
    pub state: Option<&'a Path>,
}

impl Sandbox {
    /// No sandbox (`agent.sandbox.mode: none`).
    pub fn none() -> Self {
        Self {
            bwrap: None,
            cgroups: None,
            no_cgroup: "no sandbox".to_owned(),
        }
    }

    /// The sandbox the configuration asks for. For `bwrap` this resolves bubblewrap and every
    /// path to bind, and refuses binds that would expose a protected path; call
    /// [`probe`](Self::probe) next to know that it really starts.
    pub fn from_config(setup: &SandboxSetup<'_>) -> Result<Self, SandboxError> {
        match setup.config.mode {
            SandboxMode::None => Ok(Self::none()),
            SandboxMode::Bwrap => {
                let bwrap = Some(Arc::new(Bwrap::build(setup)?));
                let (cgroups, no_cgroup) = agent_cgroups(setup.config)?;
                Ok(Self {
                    bwrap,
                    cgroups,
                    no_cgroup,
                })
            }
        }
    }

    /// True when agents run confined.
    pub fn is_enabled(&self) -> bool {
        self.bwrap.is_some()
    }

    /// What confines the agents, in one line for the start-up log: the user they run as, the
    /// limits, the filter, and what is not bounded.
    pub fn summary(&self) -> String {
        let Some(b) = &self.bwrap else {
            return "none: agents run unconfined".to_owned();
        };
        let user = match b.agent_user {
            Some(u) => format!(
                "agents run as uid {} in a user namespace of their own",
                u.uid
            ),
            None => "agents run as this daemon's user in bubblewrap's user namespace".to_owned(),
        };
        let limits: Vec<String> = b.limits.iter().map(|l| l.to_arg()).collect();
        let cgroup = match &self.cgroups {
            Some(c) => c.describe(),
            None => format!("memory not bounded ({})", self.no_cgroup),
        };
        format!(
            "bwrap: {user}; seccomp filter; limits {}; {cgroup}",
            if limits.is_empty() {
                "none".to_owned()
            } else {
                limits.join(" ")
            }
        )
    }

    /// A new cgroup for the agent of session `label`, when agents get one. Blocking.
    pub fn agent_cgroup(&self, label: &str) -> Result<Option<AgentCgroup>, CgroupError> {
        self.cgroups.as_ref().map(|c| c.create(label)).transpose()
    }

    /// The host user agents run as (a root daemon's), to whom the daemon hands what it makes
    /// for them (see [`hand_over`]).
    pub fn agent_user(&self) -> Option<HostUser> {
        self.bwrap.as_ref().and_then(|b| b.agent_user)
    }

    /// `bwrap` or `none`, for logs and readiness.
    pub fn mode(&self) -> SandboxMode {
        if self.is_enabled() {
            SandboxMode::Bwrap
        } else {
            SandboxMode::None
        }
    }

    /// True when the skills folder is also mounted at `{workspace}/skills` (read-only), so the
    /// permission gate may approve the relative form `skills/<name>/scripts/<entry>`.
    pub fn skills_mounted_in_workspace(&self) -> bool {
        self.is_enabled()
    }

    /// The command line that starts `program args` for a session in `workspace` (canonical).
    /// Without a sandbox it is `program args` unchanged (and `api_socket_dir` is not used: the
    /// agent reaches the Skill API over TCP). With one and `api_socket_dir` (the folder holding
    /// the session's `api.sock`), the sandbox has no network and the agent runs under
    /// `sandbox-init`, relaying [`sandbox_api_url`] to that socket.
    /// In the sandbox the agent is its canonical executable (what the sandbox binds).
    pub fn wrap(&self, program: &Path, args: &[String], mounts: &Mounts<'_>) -> Wrapped {
        let agent = self
            .bwrap
            .as_ref()
            .and_then(|b| b.agent_program.as_deref())
            .unwrap_or(program);
        self.wrap_program(agent, args, mounts)
    }

    /// The command line that starts exactly `program args` — a program beside the agent, such
    /// as a stdio MCP server — in a sandbox of its own with a session's rules ([`wrap`]'s
    /// mounts, network and `sandbox-init`). `program` must be visible inside: under `/usr`, in
    /// `agent.sandbox.readOnlyPaths`, or the agent's own install.
    ///
    /// [`wrap`]: Self::wrap
    pub fn wrap_program(&self, program: &Path, args: &[String], mounts: &Mounts<'_>) -> Wrapped {
        let Some(b) = &self.bwrap else {
            return Wrapped {
                program: program.to_path_buf(),
                args: args.iter().map(OsString::from).collect(),
            };
        };
        Wrapped {
            program: b.program.clone(),
            args: b.program_args(program, args, mounts),
        }
    }

    /// Sets what differs inside the sandbox in the agent's environment: its home (and XDG
    /// folders) on the private `/tmp`. Without a sandbox only the data folder changes, to the
    /// conversation's `state` folder when there is one.
    pub fn adjust_env(
        &self,
        env: &mut std::collections::BTreeMap<String, String>,
        state: Option<&Path>,
    ) {
        if self.bwrap.is_none() {
            if let Some(state) = state {
                env.insert("XDG_DATA_HOME".into(), state.display().to_string());
            }
            return;
        }
        env.insert("HOME".into(), SANDBOX_HOME.into());
        for (var, sub) in [
            ("XDG_CONFIG_HOME", ".config"),
            ("XDG_DATA_HOME", ".local/share"),
            ("XDG_CACHE_HOME", ".cache"),
            ("XDG_STATE_HOME", ".local/state"),
        ] {
            env.insert(var.into(), format!("{SANDBOX_HOME}/{sub}"));
        }
        // The agent has no network: spare it the downloads it would try at every start (and
        // the operator the error lines they print). An operator's explicit value wins.
        for var in [
            "OPENCODE_DISABLE_MODELS_FETCH",
            "OPENCODE_DISABLE_AUTOUPDATE",
            "OPENCODE_DISABLE_LSP_DOWNLOAD",
            "OPENCODE_DISABLE_SHARE",
        ] {
            env.entry(var.into()).or_insert_with(|| "1".into());
        }
    }

    /// Sets the proxy variables of an agent started with [`wrap`](Self::wrap) and the same
    /// `api_socket_dir`. In a sandbox without network the daemon's own proxy variables (and any
    /// from `agent.env`) name addresses the agent cannot reach, so they are all removed; with
    /// `agent.sandbox.egressAllowHosts` set, HTTPS goes to the egress relay instead
    /// ([`env::sandbox_proxy_env`](super::env::sandbox_proxy_env)). Nothing changes without a
    /// sandbox or without a socket folder (the network is then the host's).
    pub fn adjust_network_env(
        &self,
        env: &mut std::collections::BTreeMap<String, String>,
        api_socket_dir: Option<&Path>,
    ) {
        let Some(b) = &self.bwrap else { return };
        if api_socket_dir.is_none() {
            return;
        }
        let proxy = b.egress.then(sandbox_proxy_url);
        super::env::sandbox_proxy_env(env, proxy.as_deref());
    }

    /// Makes the mount points inside `workspace` real folders before a sandboxed start:
    /// `skills/` (covered by the read-only skills folder) and `private/`. A link or file left
    /// there (for example by an agent that ran without the sandbox) is removed first, so a mount
    /// can never be redirected. With an [`agent_user`](Self::agent_user) the workspace,
    /// `private/` and `tmp/` are handed to it (files already inside keep their owner).
    pub fn prepare_workspace(&self, workspace: &Path) -> std::io::Result<()> {
        let Some(b) = &self.bwrap else {
            return Ok(());
        };
        for name in [crate::confine::SKILLS_MOUNT, crate::confine::PRIVATE_DIR] {
            ensure_real_dir(&workspace.join(name))?;
        }
        if let Some(user) = b.agent_user {
            hand_over(workspace, user)?;
            hand_over(&workspace.join(crate::confine::PRIVATE_DIR), user)?;
            // `$TMPDIR` (the staging folders' parent), when the daemon made it.
            let tmp = workspace.join("tmp");
            if std::fs::symlink_metadata(&tmp).is_ok_and(|m| m.is_dir()) {
                hand_over(&tmp, user)?;
            }
        }
        Ok(())
    }

    /// Runs `sandbox-init --check` inside a sandbox exactly like an agent's (a scratch
    /// workspace and socket folder, so without network, locked down, with its relay
    /// listening) and checks what it reports: `/proc/sys` not writable, no capability (the
    /// bounding set included), `no_new_privs`, the seccomp filter and the keyring calls
    /// refused, and the file it made not owned by host root. Ok at once without a sandbox.
    pub async fn probe(&self) -> Result<(), SandboxError> {
        let Some(b) = &self.bwrap else {
            return Ok(());
        };
        let scratch = tempfile::tempdir().map_err(|source| SandboxError::Path {
            path: std::env::temp_dir(),
            source,
        })?;
        let scratch_dir = |name: &str| {
            let dir = scratch.path().join(name);
            std::fs::create_dir(&dir)
                .and_then(|()| dir.canonicalize())
                .map_err(|source| SandboxError::Path { path: dir, source })
        };
        let workspace = scratch_dir("workspace")?;
        let sockets = scratch_dir("sockets")?;
        self.prepare_workspace(&workspace)
            .map_err(|source| SandboxError::Path {
                path: workspace.clone(),
                source,
            })?;
        let marker = workspace.join(".sandbox-probe");
        let broken = |detail: String| SandboxError::Broken { detail };
        // The probe joins a cgroup like an agent's: a hierarchy that takes no process fails here.
        let this = self.clone();
        let cgroup = tokio::task::spawn_blocking(move || this.agent_cgroup("probe"))
            .await
            .map_err(|e| e.to_string())
            .and_then(|made| made.map_err(|e| e.to_string()))
            .map_err(|detail| SandboxError::Cgroup { detail })?;
        let joined = cgroup.is_some();
        let mut command = tokio::process::Command::new(&b.program);
        command
            .args(b.probe_args(&workspace, &sockets, &marker))
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        if let Some(group) = &cgroup {
            crate::agent::sys::join_cgroups_at_exec(&mut command, group.procs_fds());
        }
        let output = tokio::time::timeout(PROBE_TIMEOUT, command.output()).await;
        if let Some(group) = cgroup {
            match tokio::task::spawn_blocking(move || group.remove()).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "the sandbox probe's cgroup was not removed")
                }
                Err(e) => tracing::warn!(error = %e, "removing the sandbox probe's cgroup failed"),
            }
        }
        let output = match output {
            Ok(Ok(output)) => output,
            Ok(Err(e)) if joined => {
                return Err(SandboxError::Cgroup {
                    detail: format!("a sandboxed command cannot start in its group ({e})"),
                });
            }
            Ok(Err(e)) => return Err(broken(format!("cannot run {}: {e}", b.program.display()))),
            Err(_) => {
                return Err(broken(format!(
                    "a sandboxed self-check did not finish within {PROBE_TIMEOUT:?}"
                )));
            }
        };
        if !output.status.success() {
            let stderr = String::from_utf8_lossy(&output.stderr);
            return Err(broken(format!(
                "bubblewrap exited with {}: {}",
                output.status,
                stderr.trim().lines().last().unwrap_or("no message")
            )));
        }
        let report: CheckReport = serde_json::from_slice(&output.stdout).map_err(|e| {
            broken(format!(
                "the sandboxed self-check printed no report ({e}): {}",
                String::from_utf8_lossy(&output.stdout).trim()
            ))
        })?;
        let mut failures = report.failures();
        match std::fs::symlink_metadata(&marker) {
            Ok(meta) if std::os::unix::fs::MetadataExt::uid(&meta) == 0 => {
                failures.push("the agent runs as host root (uid 0)".to_owned());
            }
            Ok(_) => {}
            Err(e) => failures.push(format!("the self-check's file is missing ({e})")),
        }
        if failures.is_empty() {
            Ok(())
        } else {
            Err(SandboxError::Leaky {
                detail: failures.join("; "),
            })
        }
    }
}

/// `agent.sandbox.limits` as the cgroup takes them.
fn cgroup_limits(config: &SandboxConfig) -> CgroupLimits {
    const MIB: u64 = 1024 * 1024;
    let l = &config.limits;
    let positive = |v: u64| (v > 0).then_some(v);
    CgroupLimits {
        memory_bytes: positive(l.max_memory_mb).map(|v| v.saturating_mul(MIB)),
        pids: positive(l.max_processes),
        cpu_percent: positive(l.max_cpu_percent),
    }
}

/// What would bound the agents' memory, processes and CPU under `config` on this machine, as
/// the daemon's start-up log would say it — found without changing anything (`check-config`).
pub fn cgroup_survey(config: &SandboxConfig) -> String {
    if config.mode == SandboxMode::None {
        return "agent.sandbox.mode is none: agents run unconfined".to_owned();
    }
    if config.cgroup == CgroupMode::Off {
        return "memory not bounded (agent.sandbox.cgroup is off)".to_owned();
    }
    match Cgroups::survey(cgroup_limits(config)) {
        Ok(groups) => groups.describe(),
        Err(e) => format!("memory not bounded (no cgroup: {e})"),
    }
}

/// The agents' cgroups `agent.sandbox.cgroup` asks for, or why there are none. `required`
/// fails unless memory is bounded.
fn agent_cgroups(config: &SandboxConfig) -> Result<(Option<Arc<Cgroups>>, String), SandboxError> {
    let limits = cgroup_limits(config);
    if config.cgroup == CgroupMode::Off {
        return Ok((None, "agent.sandbox.cgroup is off".to_owned()));
    }
    if limits == CgroupLimits::default() {
        return Ok((None, "no cgroup limit is set".to_owned()));
    }
    let found = Cgroups::discover(limits);
    let required = config.cgroup == CgroupMode::Required;
    match found {
        Ok(groups) if required && groups.missing().contains(&"memory") => {
            Err(SandboxError::Cgroup {
                detail: format!("no cgroup here bounds memory ({})", groups.describe()),
            })
        }
        Ok(groups) => Ok((Some(Arc::new(groups)), String::new())),
        Err(e) if required => Err(SandboxError::Cgroup {
            detail: e.to_string(),
        }),
        Err(e) => {
            tracing::warn!(error = %e, "agents get no cgroup: their memory is not bounded");
            Ok((None, format!("no cgroup: {e}")))
        }
    }
}

/// Marks this process non-dumpable (`PR_SET_DUMPABLE` 0): processes of the same uid can then
/// neither ptrace it nor read its `/proc/<pid>/environ` or memory, which hold the platform
/// tokens. Children get the attribute reset when they exec, so agents are unaffected.
pub fn make_non_dumpable() -> Result<(), nix::Error> {
    nix::sys::prctl::set_dumpable(false)?;
    match nix::sys::prctl::get_dumpable()? {
        false => Ok(()),
        true => Err(nix::Error::EPERM),
    }
}

/// `path` as a real folder: a link or file there is removed, a missing folder is created.
fn ensure_real_dir(path: &Path) -> std::io::Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => {
            tracing::warn!(path = %path.display(), "replacing a link or file at a sandbox mount point");
            std::fs::remove_file(path)?;
            std::fs::create_dir(path)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => std::fs::create_dir(path),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::bwrap::install_root;
    use super::*;

    #[test]
    fn install_root_is_the_outermost_node_modules_or_the_file() {
        assert_eq!(
            install_root(Path::new(
                "/c/oc/node_modules/opencode-linux-x64/bin/opencode"
            )),
            PathBuf::from("/c/oc/node_modules")
        );
        assert_eq!(
            install_root(Path::new("/opt/a/node_modules/x/node_modules/y/bin/y")),
            PathBuf::from("/opt/a/node_modules")
        );
        assert_eq!(
            install_root(Path::new("/srv/bin/agent")),
            PathBuf::from("/srv/bin/agent")
        );
    }

    #[test]
    fn mount_points_become_real_folders() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path();
        std::fs::create_dir(ws.join("elsewhere")).unwrap();
        std::os::unix::fs::symlink(ws.join("elsewhere"), ws.join("skills")).unwrap();
        std::fs::write(ws.join("private"), "not a folder").unwrap();
        let sandbox = Sandbox {
            bwrap: Some(Arc::new(Bwrap {
                program: "/usr/bin/bwrap".into(),
                base: Vec::new(),
                agent_program: Some("/usr/bin/true".into()),
                skills_dir: "/opt/skills".into(),
                air_friends_bin: "/opt/af/air-friends".into(),
                egress: false,
                agent_user: None,
                limits: Vec::new(),
                mounts: Default::default(),
            })),
            cgroups: None,
            no_cgroup: String::new(),
        };
        sandbox.prepare_workspace(ws).unwrap();
        for name in ["skills", "private"] {
            let m = std::fs::symlink_metadata(ws.join(name)).unwrap();
            assert!(m.is_dir() && !m.file_type().is_symlink(), "{name}");
        }
        assert!(
            ws.join("elsewhere").is_dir(),
            "the link target is left alone"
        );
    }

    #[test]
    fn without_a_sandbox_the_command_is_unchanged() {
        let w = Sandbox::none().wrap(
            Path::new("opencode"),
            &["acp".into()],
            &Mounts {
                workspace: Path::new("/ws"),
                dm: false,
                api_socket_dir: Some(Path::new("/sockets/s1")),
                staging: None,
                state: None,
            },
        );
        assert_eq!(w.program, PathBuf::from("opencode"));
        assert_eq!(w.args, vec![OsString::from("acp")]);
        let mut env = std::collections::BTreeMap::from([("HOME".to_owned(), "/root".to_owned())]);
        Sandbox::none().adjust_env(&mut env, None);
        assert_eq!(env["HOME"], "/root");
        assert!(!env.contains_key("XDG_DATA_HOME"));
        Sandbox::none().adjust_env(&mut env, Some(Path::new("/repo/agent-state/f1")));
        assert_eq!(env["XDG_DATA_HOME"], "/repo/agent-state/f1");
    }

    /// The bubblewrap arguments, space-joined, that start `/a/agent acp` in `/ws/u1`.
    fn wrapped_line(dm: bool, api_socket_dir: Option<&Path>) -> String {
        line_of(&test_sandbox(false), dm, api_socket_dir)
    }

    /// A bubblewrap sandbox starting `/a/agent`, with or without the egress relay.
    fn test_sandbox(egress: bool) -> Sandbox {
        Sandbox {
            bwrap: Some(Arc::new(Bwrap {
                program: "/usr/bin/bwrap".into(),
                base: vec!["--unshare-pid".into()],
                agent_program: Some("/a/agent".into()),
                skills_dir: "/opt/skills".into(),
                air_friends_bin: "/opt/af/air-friends".into(),
                egress,
                agent_user: None,
                limits: vec![crate::agent::lockdown::Limit::Processes(64)],
                mounts: Default::default(),
            })),
            cgroups: None,
            no_cgroup: String::new(),
        }
    }

    fn line_of(sandbox: &Sandbox, dm: bool, api_socket_dir: Option<&Path>) -> String {
        let wrapped = sandbox.wrap(
            Path::new("agent"),
            &["acp".into()],
            &Mounts {
                workspace: Path::new("/ws/u1"),
                dm,
                api_socket_dir,
                staging: Some(Path::new("/ws/u1/tmp/s1")),
                state: None,
            },
        );
        let args: Vec<String> = wrapped
            .args
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        args.join(" ")
    }

    #[test]
    fn public_sessions_get_private_covered_and_dms_do_not() {
        let args = |dm| wrapped_line(dm, None);
        let public = args(false);
        assert!(
            public.contains("--tmpfs /ws/u1/private --remount-ro /ws/u1/private"),
            "{public}"
        );
        assert!(public.contains("--bind /ws/u1 /ws/u1"), "{public}");
        assert!(
            public.contains("--ro-bind /opt/skills /ws/u1/skills"),
            "{public}"
        );
        assert!(
            public.ends_with(
                "--remount-ro / --chdir /ws/u1 -- \
                 /opt/af/air-friends sandbox-init --limit nproc=64 -- /a/agent acp"
            ),
            "{public}"
        );
        assert!(!args(true).contains("private"));
    }

    #[test]
    fn a_program_beside_the_agent_runs_itself_in_the_same_walls() {
        let mounts = Mounts {
            workspace: Path::new("/ws/u1"),
            dm: false,
            api_socket_dir: Some(Path::new("/run/af/s1")),
            staging: None,
            state: None,
        };
        let sandbox = test_sandbox(false);
        let program = sandbox.wrap_program(
            Path::new("/usr/bin/mcp-feeds"),
            &["--quiet".into()],
            &mounts,
        );
        let agent = sandbox.wrap(
            Path::new("/usr/bin/mcp-feeds"),
            &["--quiet".into()],
            &mounts,
        );
        let line = |w: &Wrapped| {
            w.args
                .iter()
                .map(|a| a.to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join(" ")
        };
        assert!(
            line(&program).ends_with("-- /usr/bin/mcp-feeds --quiet"),
            "{}",
            line(&program)
        );
        assert!(
            line(&agent).ends_with("-- /a/agent --quiet"),
            "wrap runs the agent"
        );
        // Everything before the program is the same: the walls, the relay, sandbox-init.
        let walls = |w: &Wrapped| line(w).rsplit_once(" -- ").unwrap().0.to_owned();
        assert_eq!(walls(&program), walls(&agent));
        assert!(
            line(&program).contains("--unshare-net"),
            "{}",
            line(&program)
        );
    }

    #[test]
    fn a_socket_folder_takes_the_network_away_and_starts_the_agent_under_the_relay() {
        let line = |dir| wrapped_line(true, dir);
        let confined = line(Some(Path::new("/data/sockets/s1")));
        assert!(confined.contains("--unshare-net"), "{confined}");
        assert!(
            confined.contains("--ro-bind /data/sockets/s1 /run/air-friends"),
            "{confined}"
        );
        assert!(
            confined.ends_with(
                "--chdir /ws/u1 -- /opt/af/air-friends sandbox-init --limit nproc=64 \
                 --relay 127.0.0.1:3001=/run/air-friends/api.sock -- /a/agent acp"
            ),
            "{confined}"
        );
        assert_eq!(sandbox_api_url(), "http://127.0.0.1:3001");
        let shared = line(None);
        assert!(!shared.contains("--unshare-net"), "{shared}");
        assert!(!shared.contains("--relay"), "{shared}");
        assert!(
            shared.ends_with(
                "--chdir /ws/u1 -- /opt/af/air-friends sandbox-init --limit nproc=64 -- \
                 /a/agent acp"
            ),
            "locked down even on the host's network: {shared}"
        );
    }

    #[test]
    fn with_egress_hosts_the_relay_also_serves_the_proxy_and_https_goes_through_it() {
        let dir = Some(Path::new("/data/sockets/s1"));
        let line = line_of(&test_sandbox(true), true, dir);
        assert!(
            line.ends_with(
                "-- /opt/af/air-friends sandbox-init --limit nproc=64 \
                 --relay 127.0.0.1:3001=/run/air-friends/api.sock \
                 --relay 127.0.0.1:3128=/run/air-friends/proxy.sock -- /a/agent acp"
            ),
            "{line}"
        );
        assert!(
            !wrapped_line(true, dir).contains("3128"),
            "no egress relay unless hosts are listed"
        );
        assert!(
            !line_of(&test_sandbox(true), true, None).contains("--relay"),
            "no relay at all on the host's network"
        );

        let daemon_env = || {
            std::collections::BTreeMap::from([
                (
                    "HTTPS_PROXY".to_owned(),
                    "http://corp-proxy:8080".to_owned(),
                ),
                ("http_proxy".to_owned(), "http://corp-proxy:8080".to_owned()),
                (
                    "ALL_PROXY".to_owned(),
                    "socks5://corp-proxy:1080".to_owned(),
                ),
                ("PATH".to_owned(), "/usr/bin".to_owned()),
            ])
        };
        let mut egress = daemon_env();
        test_sandbox(true).adjust_network_env(&mut egress, dir);
        assert_eq!(egress["HTTPS_PROXY"], "http://127.0.0.1:3128");
        assert_eq!(egress["https_proxy"], "http://127.0.0.1:3128");
        assert_eq!(egress["NO_PROXY"], "127.0.0.1,localhost");
        assert_eq!(egress["no_proxy"], "127.0.0.1,localhost");
        assert!(!egress.contains_key("http_proxy") && !egress.contains_key("ALL_PROXY"));
        assert_eq!(egress["PATH"], "/usr/bin");

        let mut closed = daemon_env();
        test_sandbox(false).adjust_network_env(&mut closed, dir);
        assert_eq!(
            closed.keys().collect::<Vec<_>>(),
            ["PATH"],
            "without egress no proxy variable is left"
        );

        for (sandbox, socket_dir) in [(Sandbox::none(), dir), (test_sandbox(true), None)] {
            let mut shared = daemon_env();
            sandbox.adjust_network_env(&mut shared, socket_dir);
            assert_eq!(shared, daemon_env(), "the host's network keeps its proxies");
        }
    }

    #[test]
    fn binds_that_expose_protected_paths_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        std::fs::create_dir_all(data.join("bin")).unwrap();
        let agent = data.join("bin/agent");
        std::fs::write(&agent, "").unwrap();
        let skills = dir.path().join("skills");
        std::fs::create_dir(&skills).unwrap();
        let config = SandboxConfig {
            read_only_paths: vec![dir.path().to_path_buf()],
            bwrap_path: "/bin/sh".into(), // any executable: nothing is run here
            // A user every Debian machine has, so a root run does not depend on `setup`
            // having created the default agent user.
            user: "nobody".into(),
            ..SandboxConfig::default()
        };
        let protected = [data.join("air-friends.db")];
        let err = Sandbox::from_config(&SandboxSetup {
            config: &config,
            agent_program: Some(&agent),
            air_friends_bin: &agent,
            skills_dir: &skills,
            agent_config_dir: None,
            protected: &protected,
            path_var: None,
        })
        .unwrap_err();
        assert!(matches!(err, SandboxError::Exposes { .. }), "{err}");
        assert!(err.to_string().contains("air-friends.db"), "{err}");
    }

    #[test]
    fn a_missing_bwrap_names_the_fix() {
        let dir = tempfile::tempdir().unwrap();
        let config = SandboxConfig {
            bwrap_path: "no-such-bwrap-xyz".into(),
            ..SandboxConfig::default()
        };
        let err = Sandbox::from_config(&SandboxSetup {
            config: &config,
            agent_program: Some(Path::new("/bin/sh")),
            air_friends_bin: Path::new("/bin/sh"),
            skills_dir: dir.path(),
            agent_config_dir: None,
            protected: &[],
            path_var: Some("/usr/bin:/bin"),
        })
        .unwrap_err();
        assert!(
            err.to_string().contains("apt-get install bubblewrap"),
            "{err}"
        );
        assert!(
            err.to_string().contains("agent.sandbox.mode: none"),
            "{err}"
        );
    }
}
