//! The bubblewrap command line: the arguments every sandbox shares (namespaces, system and
//! runtime mounts, each runtime bind checked against the protected paths) and the ones of one
//! session (its workspace, staging folder, network and relays).

use std::ffi::{OsStr, OsString};
use std::path::{Component, Path, PathBuf};

use super::{
    API_SOCKET_NAME, SANDBOX_API_PORT, SANDBOX_HOME, SANDBOX_PROXY_PORT, SANDBOX_SOCKET_DIR,
    SandboxError, SandboxSetup,
};
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
}

impl Bwrap {
    /// Resolves bubblewrap and every path to bind; refuses a bind that would expose a
    /// protected path.
    pub(super) fn build(setup: &SandboxSetup<'_>) -> Result<Self, SandboxError> {
        let config = setup.config;
        let program = crate::ops::checks::resolve_command(
            &config.bwrap_path.display().to_string(),
            setup.path_var,
        )
        .ok_or_else(|| SandboxError::Missing {
            program: config.bwrap_path.display().to_string(),
        })?;
        let protected: Vec<PathBuf> = setup
            .protected
            .iter()
            .map(|p| p.canonicalize().unwrap_or_else(|_| absolute(p)))
            .collect();
        let agent_program = setup.agent_program.map(canonical).transpose()?;
        let skills_dir = canonical(setup.skills_dir)?;
        let mut base = system_args(config);
        let air_friends_bin = canonical(setup.air_friends_bin)?;
        let runtime = runtime_paths(setup, agent_program.as_deref(), &air_friends_bin)?;
        bind_runtime(&mut base, &runtime, &protected)?;
        refuse_exposure(&skills_dir, &protected)?;
        Ok(Bwrap {
            program,
            base,
            agent_program,
            skills_dir,
            air_friends_bin,
            egress: !config.egress_allow_hosts.is_empty(),
        })
    }

    /// The arguments that start `program args` for a session in `workspace` (canonical): the
    /// shared ones, the session's mounts, no network with `api_socket_dir` (and the agent
    /// under `sandbox-init`, relaying to that folder's sockets).
    pub(super) fn session_args(
        &self,
        program: &Path,
        args: &[String],
        workspace: &Path,
        dm: bool,
        api_socket_dir: Option<&Path>,
        staging: Option<&Path>,
    ) -> Vec<OsString> {
        let mut out = self.base.clone();
        self.bind_workspace(&mut out, workspace, dm);
        if let Some(staging) = staging {
            bind_staging(&mut out, workspace, staging);
        }
        if let Some(dir) = api_socket_dir {
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
        extend(
            &mut out,
            &["--chdir".as_ref(), workspace.as_os_str(), "--".as_ref()],
        );
        if api_socket_dir.is_some() {
            self.start_under_relay(&mut out);
        }
        let agent = self.agent_program.as_deref().unwrap_or(program);
        out.push(agent.as_os_str().to_os_string());
        out.extend(args.iter().map(OsString::from));
        out
    }

    /// The workspace (writable), the skills folder (read-only, at its own path and at
    /// `{workspace}/skills`) and, outside a direct message, `private/` covered by an empty
    /// read-only tmpfs.
    fn bind_workspace(&self, out: &mut Vec<OsString>, workspace: &Path, dm: bool) {
        let ws = workspace.as_os_str();
        let skills = self.skills_dir.as_os_str();
        let skills_mount = workspace.join("skills");
        let private = workspace.join("private");
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

    /// `sandbox-init` with its relays, ahead of the agent's command.
    fn start_under_relay(&self, out: &mut Vec<OsString>) {
        let relay = format!("127.0.0.1:{SANDBOX_API_PORT}={SANDBOX_SOCKET_DIR}/{API_SOCKET_NAME}");
        extend(
            out,
            &[
                self.air_friends_bin.as_os_str(),
                "sandbox-init".as_ref(),
                "--relay".as_ref(),
                relay.as_ref(),
            ],
        );
        if self.egress {
            let proxy = format!(
                "127.0.0.1:{SANDBOX_PROXY_PORT}={SANDBOX_SOCKET_DIR}/{}",
                crate::egress::PROXY_SOCKET_NAME
            );
            extend(out, &["--relay".as_ref(), proxy.as_ref()]);
        }
        out.push("--".into());
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
            "--perms".as_ref(),
            "0700".as_ref(),
            "--tmpfs".as_ref(),
            tmp.as_os_str(),
            "--bind".as_ref(),
            staging.as_os_str(),
            staging.as_os_str(),
        ],
    );
}

/// The arguments every sandbox starts with: namespaces, no capabilities, `/usr` and its
/// merged-`/usr` links, the `/etc` entries, `/proc`, `/dev` and the private `/tmp` with the
/// agent's home.
fn system_args(config: &SandboxConfig) -> Vec<OsString> {
    let mut base: Vec<OsString> = [
        "--die-with-parent",
        "--new-session",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--cap-drop",
        "ALL",
        "--ro-bind",
        "/usr",
        "/usr",
    ]
    .iter()
    .map(OsString::from)
    .collect();
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
    base.extend(["--proc", "/proc", "--dev", "/dev"].map(OsString::from));
    // The private /tmp comes before the runtime binds, so a runtime path under /tmp stays
    // visible on top of it.
    let tmp_size = config.tmp_size_mb.saturating_mul(1024 * 1024).to_string();
    base.extend(
        [
            "--size",
            &tmp_size,
            "--tmpfs",
            "/tmp",
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
