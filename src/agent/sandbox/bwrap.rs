//! The bubblewrap command line: the arguments every sandbox shares (namespaces, system and
//! runtime mounts, each runtime bind checked against the protected paths) and the ones of one
//! session (its workspace, staging folder, network and relays).

use std::ffi::{OsStr, OsString};
use std::path::{Component, Path, PathBuf};

use super::{
    API_SOCKET_NAME, Mounts, SANDBOX_API_PORT, SANDBOX_HOME, SANDBOX_PROXY_PORT,
    SANDBOX_SOCKET_DIR, SandboxError, SandboxSetup,
};
use crate::agent::lockdown::{HostUser, Limit};
use crate::config::SandboxConfig;

/// `/etc` entries bound read-only when they exist: TLS roots, name resolution, user and group
/// names, time zone, the dynamic linker cache and Debian's alternatives links (`/usr/bin/awk`
/// points into `/etc/alternatives`).
const ETC_ENTRIES: &[&str] = &[
    "/etc/ssl",
    "/etc/ca-certificates",
    "/etc/pki",
    "/etc/resolv.conf",
    "/etc/hosts",
    "/etc/host.conf",
    "/etc/nsswitch.conf",
    "/etc/gai.conf",
    "/etc/passwd",
    "/etc/group",
    "/etc/localtime",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/alternatives",
    "/etc/mime.types",
];

/// Top-level folders that are links into `/usr` on merged-`/usr` systems, or real folders
/// elsewhere (then bound read-only).
const USR_LINKS: &[&str] = &["/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"];

/// A resolved bubblewrap sandbox.
#[derive(Debug)]
pub(super) struct Bwrap {
    pub(super) program: PathBuf,
    /// Arguments shared by every session (system and runtime mounts, namespaces).
    pub(super) base: Vec<OsString>,
    /// The agent executable, canonical (what bubblewrap runs), when it was found.
    pub(super) agent_program: Option<PathBuf>,
    /// The skills folder, canonical.
    pub(super) skills_dir: PathBuf,
    /// This daemon's executable, canonical (bound read-only): runs `sandbox-init` in sandboxes
    /// without network.
    pub(super) air_friends_bin: PathBuf,
    /// `agent.sandbox.egressAllowHosts` is set: sandboxes without network also relay
    /// [`SANDBOX_PROXY_PORT`] to the session folder's `proxy.sock` (the daemon serves it).
    pub(super) egress: bool,
    /// The host user agents become (`sandbox-init --as`) when the daemon runs as root.
    pub(super) agent_user: Option<HostUser>,
    /// `agent.sandbox.limits`, set by `sandbox-init` inside the sandbox.
    pub(super) limits: Vec<Limit>,
    /// What `base` mounts where (its mount points' parents are opened in `base` already).
    pub(super) mounts: MountTable,
}

impl Bwrap {
    /// Resolves bubblewrap and every path to bind; refuses a bind that would expose a
    /// protected path.
    pub(super) fn build(setup: &SandboxSetup<'_>) -> Result<Self, SandboxError> {
        let config = setup.config;
        let program = crate::command_path::resolve_command(
            &config.bwrap_path.display().to_string(),
            setup.path_var,
        )
        .ok_or_else(|| SandboxError::Missing {
            program: config.bwrap_path.display().to_string(),
        })?;
        let agent_user = super::identity::agent_host_user(config)?;
        let protected: Vec<PathBuf> = setup
            .protected
            .iter()
            .map(|p| p.canonicalize().unwrap_or_else(|_| absolute(p)))
            .collect();
        let agent_program = setup.agent_program.map(canonical).transpose()?;
        let skills_dir = canonical(setup.skills_dir)?;
        let mut base = system_args(config, agent_user.is_some());
        let air_friends_bin = canonical(setup.air_friends_bin)?;
        let runtime = runtime_paths(setup, agent_program.as_deref(), &air_friends_bin)?;
        bind_runtime(&mut base, &runtime, &protected)?;
        let mut mounts = MountTable::default();
        let bound = mounts.scan(&base);
        mounts.open_parents(&bound, &mut base);
        refuse_exposure(&skills_dir, &protected)?;
        Ok(Bwrap {
            program,
            base,
            agent_program,
            skills_dir,
            air_friends_bin,
            egress: !config.egress_allow_hosts.is_empty(),
            agent_user,
            limits: super::identity::limits(config),
            mounts,
        })
    }

    /// The arguments that start `program args` (the agent, or a program beside it such as a
    /// stdio MCP server) for a session in `workspace` (canonical): the shared ones, the
    /// session's mounts, a read-only root, no network with `api_socket_dir`, and the program
    /// under `sandbox-init` (locking itself down, relaying to that folder's sockets).
    pub(super) fn program_args(
        &self,
        program: &Path,
        args: &[String],
        mounts: &Mounts<'_>,
    ) -> Vec<OsString> {
        let mut out = self.mount_args(mounts);
        self.start_under_init(&mut out, mounts.api_socket_dir.is_some());
        out.push(program.as_os_str().to_os_string());
        out.extend(args.iter().map(OsString::from));
        out
    }

    /// The arguments of the start-up probe: a public session's sandbox in `workspace` with
    /// `api_socket_dir`, running `sandbox-init --check marker` instead of an agent.
    pub(super) fn probe_args(
        &self,
        workspace: &Path,
        api_socket_dir: &Path,
        marker: &Path,
    ) -> Vec<OsString> {
        let mut out = self.mount_args(&Mounts {
            workspace,
            dm: false,
            api_socket_dir: Some(api_socket_dir),
            staging: None,
            state: None,
        });
        out.extend(self.init_args());
        self.relay_args(&mut out);
        extend(&mut out, &["--check".as_ref(), marker.as_os_str()]);
        out
    }

    /// bubblewrap's options for a session, up to and including `--chdir WORKSPACE --`.
    fn mount_args(&self, mounts: &Mounts<'_>) -> Vec<OsString> {
        let workspace = mounts.workspace;
        let mut out = self.base.clone();
        self.bind_workspace(&mut out, workspace, mounts.dm);
        if let Some(staging) = mounts.staging {
            bind_staging(&mut out, workspace, staging);
        }
        if let Some(state) = mounts.state {
            bind_state(&mut out, state);
        }
        if let Some(dir) = mounts.api_socket_dir {
            // bubblewrap brings up `lo` in the new network namespace; nothing else exists there.
            extend(
                &mut out,
                &[
                    "--unshare-net".as_ref(),
                    "--ro-bind".as_ref(),
                    dir.as_os_str(),
                    SANDBOX_SOCKET_DIR.as_ref(),
                ],
            );
        }
        let mut mounts = self.mounts.clone();
        let bound = mounts.scan(&out[self.base.len()..]);
        mounts.open_parents(&bound, &mut out);
        // Last of the mounts: bubblewrap's own root (a tmpfs holding the mount points) becomes
        // read-only, so nothing can be written there outside the capped /tmp.
        extend(
            &mut out,
            &[
                "--remount-ro".as_ref(),
                "/".as_ref(),
                "--chdir".as_ref(),
                workspace.as_os_str(),
                "--".as_ref(),
            ],
        );
        out
    }

    /// The workspace (writable), the skills folder (read-only, at its own path and at
    /// `{workspace}/skills`) and, outside a direct message, `private/` covered by an empty
    /// read-only tmpfs.
    fn bind_workspace(&self, out: &mut Vec<OsString>, workspace: &Path, dm: bool) {
        let ws = workspace.as_os_str();
        let skills = self.skills_dir.as_os_str();
        let skills_mount = workspace.join(crate::confine::SKILLS_MOUNT);
        let private = workspace.join(crate::confine::PRIVATE_DIR);
        extend(out, &["--bind".as_ref(), ws, ws]);
        extend(out, &["--ro-bind".as_ref(), skills, skills]);
        extend(
            out,
            &["--ro-bind".as_ref(), skills, skills_mount.as_os_str()],
        );
        if !dm {
            extend(
                out,
                &[
                    "--perms".as_ref(),
                    "0555".as_ref(),
                    "--tmpfs".as_ref(),
                    private.as_os_str(),
                ],
            );
            extend(out, &["--remount-ro".as_ref(), private.as_os_str()]);
        }
    }

    /// `sandbox-init` with the agent user, the limits and (with `relays`) its relays, ahead of
    /// the agent's command and `--`.
    fn start_under_init(&self, out: &mut Vec<OsString>, relays: bool) {
        out.extend(self.init_args());
        if relays {
            self.relay_args(out);
        }
        out.push("--".into());
    }

    /// `air-friends sandbox-init [--as UID:GID] [--limit NAME=VALUE]...`.
    fn init_args(&self) -> Vec<OsString> {
        let mut out = vec![
            self.air_friends_bin.clone().into_os_string(),
            "sandbox-init".into(),
        ];
        if let Some(user) = self.agent_user {
            out.extend(["--as".into(), user.to_arg().into()]);
        }
        for limit in &self.limits {
            out.extend(["--limit".into(), limit.to_arg().into()]);
        }
        out
    }

    /// The relay to the session's `api.sock` (and to `proxy.sock` with egress).
    fn relay_args(&self, out: &mut Vec<OsString>) {
        let relay = format!("127.0.0.1:{SANDBOX_API_PORT}={SANDBOX_SOCKET_DIR}/{API_SOCKET_NAME}");
        extend(out, &["--relay".as_ref(), relay.as_ref()]);
        if self.egress {
            let proxy = format!(
                "127.0.0.1:{SANDBOX_PROXY_PORT}={SANDBOX_SOCKET_DIR}/{}",
                crate::egress::PROXY_SOCKET_NAME
            );
            extend(out, &["--relay".as_ref(), proxy.as_ref()]);
        }
    }
}

/// What bubblewrap's arguments mount where, for [`MountTable::open_parents`]: host folders and
/// links (never changed, nor anything inside them) and bubblewrap's own mount points (never
/// changed themselves: /tmp keeps its 1777). The base arguments' table is read once, when the
/// sandbox is built; a session adds its own mounts to a copy.
#[derive(Debug, Clone, Default)]
pub(super) struct MountTable {
    host: Vec<PathBuf>,
    points: Vec<PathBuf>,
}

impl MountTable {
    /// Adds the mounts of `args` and returns the bound folders whose parents to open.
    fn scan(&mut self, args: &[OsString]) -> Vec<PathBuf> {
        let mut bound = Vec::new();
        let mut i = 0;
        while i < args.len() {
            // A `-try` bind whose source is missing creates nothing (our sources are their
            // destinations' host paths).
            let source_exists = || args.get(i + 1).is_some_and(|s| Path::new(s).exists());
            let (offset, is_host, opens_parents) = match args[i].to_string_lossy().as_ref() {
                "--bind" | "--ro-bind" => (2, true, true),
                "--bind-try" | "--ro-bind-try" => (2, true, source_exists()),
                "--dev-bind" | "--symlink" => (2, true, false),
                "--tmpfs" | "--proc" | "--dev" | "--dir" => (1, false, false),
                _ => {
                    i += 1;
                    continue;
                }
            };
            if let Some(dest) = args.get(i + offset) {
                let dest = PathBuf::from(dest);
                if opens_parents {
                    bound.push(dest.clone());
                }
                if is_host {
                    self.host.push(dest);
                } else {
                    self.points.push(dest);
                }
            }
            i += offset + 1;
        }
        bound
    }

    /// Makes every folder bubblewrap created on its own root to hold one of `bound` traversable
    /// (`--chmod 0755`). bubblewrap makes such folders 0700, and a root daemon's agent runs as
    /// another user: `/etc/alternatives`, a workspace under `/tmp/tmp.x` or an agent installed
    /// under `/root` would be out of its reach. Only folders that are neither host folders nor
    /// inside one are changed; they hold nothing but mount points.
    fn open_parents(&self, bound: &[PathBuf], out: &mut Vec<OsString>) {
        let mut parents: Vec<PathBuf> = bound
            .iter()
            .flat_map(|dest| dest.ancestors().skip(1).map(Path::to_path_buf))
            .filter(|a| a.parent().is_some())
            .filter(|a| !self.host.iter().any(|h| a.starts_with(h)) && !self.points.contains(a))
            .collect();
        parents.sort();
        parents.dedup();
        for parent in parents {
            out.extend(["--chmod".into(), "0755".into(), parent.into_os_string()]);
        }
    }
}

/// The session's own staging folder (`$TMPDIR/$SESSION_ID`, payload files) on an empty
/// private `$TMPDIR`: another session of the same user (a DM one, say, staging a reply made
/// from private memories) shares the workspace, but not its staging folder.
fn bind_staging(out: &mut Vec<OsString>, workspace: &Path, staging: &Path) {
    let Some(tmp) = staging.parent().filter(|t| t.starts_with(workspace)) else {
        return;
    };
    extend(
        out,
        &[
            // Sticky and open to all: the agent may run as a user other than bubblewrap's (a
            // root daemon's), and nothing but this session's folder is in this tmpfs.
            "--perms".as_ref(),
            "1777".as_ref(),
            "--tmpfs".as_ref(),
            tmp.as_os_str(),
            "--bind".as_ref(),
            staging.as_os_str(),
            staging.as_os_str(),
        ],
    );
}

/// The arguments every sandbox starts with: namespaces, no capabilities (as root only those
/// `sandbox-init` needs to become the agent user, which it drops with everything else), `/usr`
/// and its merged-`/usr` links, the `/etc` entries, `/proc` with its kernel tunables read-only,
/// a read-only `/dev` and the private `/tmp` with the agent's home.
fn system_args(config: &SandboxConfig, switches_user: bool) -> Vec<OsString> {
    let mut base: Vec<OsString> = [
        "--die-with-parent",
        "--new-session",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--cap-drop",
        "ALL",
    ]
    .iter()
    .map(OsString::from)
    .collect();
    if switches_user {
        for cap in ["CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP"] {
            base.extend(["--cap-add".into(), cap.into()]);
        }
    }
    base.extend(["--ro-bind", "/usr", "/usr"].map(OsString::from));
    for top in USR_LINKS {
        match std::fs::symlink_metadata(top) {
            Ok(m) if m.file_type().is_symlink() => {
                if let Ok(target) = std::fs::read_link(top) {
                    base.extend(["--symlink".into(), target.into_os_string(), (*top).into()]);
                }
            }
            Ok(m) if m.is_dir() => {
                base.extend(["--ro-bind".into(), (*top).into(), (*top).into()]);
            }
            _ => {}
        }
    }
    for entry in ETC_ENTRIES {
        base.extend(["--ro-bind-try".into(), (*entry).into(), (*entry).into()]);
    }
    // bubblewrap covers /proc/sys read-only only when access(W_OK) says it is writable, which
    // the kernel denies for the sysctl root even to root, so it stays writable for a root
    // sandbox (`core_pattern` runs a program as host root). Bound read-only here, always.
    base.extend(
        [
            "--proc",
            "/proc",
            "--ro-bind",
            "/proc/sys",
            "/proc/sys",
            "--ro-bind-try",
            "/proc/sysrq-trigger",
            "/proc/sysrq-trigger",
            "--dev",
            "/dev",
            "--remount-ro",
            "/dev",
        ]
        .map(OsString::from),
    );
    // The private /tmp comes before the runtime binds, so a runtime path under /tmp stays
    // visible on top of it.
    let tmp_size = config.tmp_size_mb.saturating_mul(1024 * 1024).to_string();
    base.extend(
        [
            "--perms",
            "1777",
            "--size",
            &tmp_size,
            "--tmpfs",
            "/tmp",
            "--perms",
            "0777",
            "--dir",
            SANDBOX_HOME,
        ]
        .map(OsString::from),
    );
    base
}

/// The runtime paths to bind read-only, canonical, sorted and without duplicates: the agent's
/// install, this daemon's executable, the agent configuration folder and
/// `agent.sandbox.readOnlyPaths`.
fn runtime_paths(
    setup: &SandboxSetup<'_>,
    agent_program: Option<&Path>,
    air_friends_bin: &Path,
) -> Result<Vec<PathBuf>, SandboxError> {
    let mut runtime: Vec<PathBuf> = agent_program.iter().map(|p| install_root(p)).collect();
    runtime.push(air_friends_bin.to_path_buf());
    if let Some(dir) = setup.agent_config_dir {
        runtime.push(canonical(dir)?);
    }
    for extra in &setup.config.read_only_paths {
        runtime.push(canonical(extra)?);
    }
    runtime.sort();
    runtime.dedup();
    Ok(runtime)
}

/// Binds each runtime path read-only (those under `/usr` are bound already), refusing one
/// that holds a protected path.
fn bind_runtime(
    base: &mut Vec<OsString>,
    runtime: &[PathBuf],
    protected: &[PathBuf],
) -> Result<(), SandboxError> {
    for path in runtime {
        refuse_exposure(path, protected)?;
        if path.starts_with("/usr") {
            continue;
        }
        base.extend([
            "--ro-bind".into(),
            path.clone().into_os_string(),
            path.clone().into_os_string(),
        ]);
    }
    Ok(())
}

/// [`SandboxError::Exposes`] when a protected path lies inside `path`.
fn refuse_exposure(path: &Path, protected: &[PathBuf]) -> Result<(), SandboxError> {
    match protected.iter().find(|p| p.starts_with(path)) {
        Some(hit) => Err(SandboxError::Exposes {
            path: path.to_path_buf(),
            protected: hit.clone(),
        }),
        None => Ok(()),
    }
}

fn canonical(p: &Path) -> Result<PathBuf, SandboxError> {
    p.canonicalize().map_err(|source| SandboxError::Path {
        path: p.to_path_buf(),
        source,
    })
}

fn extend(out: &mut Vec<OsString>, items: &[&OsStr]) {
    out.extend(items.iter().map(|s| s.to_os_string()));
}

/// What to bind for an agent executable: the outermost `node_modules` folder when it lives in
/// one (an npm install needs its package tree), else the executable file alone.
pub(super) fn install_root(program: &Path) -> PathBuf {
    let mut prefix = PathBuf::new();
    for component in program.components() {
        prefix.push(component);
        if component == Component::Normal("node_modules".as_ref()) {
            return prefix;
        }
    }
    program.to_path_buf()
}

fn absolute(p: &Path) -> PathBuf {
    std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf())
}

/// The conversation's agent-state folder, read-write, as the agent's data folder
/// (`$XDG_DATA_HOME` is `{SANDBOX_HOME}/.local/share`). The folders above it are made on the
/// private `/tmp` first, open to the agent user like the home itself.
fn bind_state(out: &mut Vec<OsString>, state: &Path) {
    let local = format!("{SANDBOX_HOME}/.local");
    let share = format!("{SANDBOX_HOME}/.local/share");
    extend(
        out,
        &[
            "--perms".as_ref(),
            "0777".as_ref(),
            "--dir".as_ref(),
            local.as_ref(),
            "--perms".as_ref(),
            "0777".as_ref(),
            "--dir".as_ref(),
            share.as_ref(),
            "--bind".as_ref(),
            state.as_os_str(),
            share.as_ref(),
        ],
    );
}
