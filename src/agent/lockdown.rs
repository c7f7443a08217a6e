//! What `sandbox-init` ([`super::relay`]) does to itself inside the sandbox before it starts
//! the agent, and the self-check the start-up probe runs there.
//!
//! bubblewrap builds the walls (namespaces, mounts); this module closes what bubblewrap cannot
//! from outside:
//!
//! * **Never host root.** When the daemon runs as root, bubblewrap runs as root too and makes
//!   no user namespace, so the agent would be host uid 0 — and the kernel's sysctl checks look
//!   at the host uid, whatever the capabilities. So the sandbox keeps only `CAP_SETUID`,
//!   `CAP_SETGID` and `CAP_SETPCAP` for `sandbox-init`, which ([`drop_to`]) empties the
//!   capability bounding set, drops every supplementary group, switches to the dedicated agent
//!   user ([`HostUser`], `--as UID:GID`) — which clears the remaining capabilities — sets
//!   `no_new_privs` and checks that no capability is left. It then makes a user namespace of
//!   its own mapping only that user ([`own_user_namespace`]), so agents of a root daemon live
//!   in their own user namespace as those of an unprivileged daemon do (bubblewrap makes one
//!   for them), and the per-namespace process count below applies to this sandbox alone.
//! * **Resource limits** ([`Limit`], `--limit NAME=VALUE`): `RLIMIT_NPROC`, `RLIMIT_FSIZE`,
//!   `RLIMIT_NOFILE` and `RLIMIT_DATA`, set inside the sandbox's user namespace, where the
//!   kernel counts processes per namespace: one sandbox's fork bomb stops at its own limit and
//!   leaves other sandboxes and the daemon alone.
//! * **Sealed** ([`seal`]): a new, empty session keyring (the inherited one is the service's),
//!   then the seccomp filter ([`super::seccomp`]) — last, because it forbids the user namespace
//!   made above, and before the tokio runtime starts, while the process has one thread.
//!
//! [`self_check`] is what `sandbox-init --check` reports: every property above, seen from
//! inside, so the daemon refuses to start when one does not hold (fail-closed).

use std::io::Write as _;
use std::path::Path;

use super::sys;

/// The host user agents run as when the daemon runs as root (`--as UID:GID`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostUser {
    /// Host uid, never 0.
    pub uid: u32,
    /// Host gid, never 0.
    pub gid: u32,
}

impl HostUser {
    /// `UID:GID`, as `sandbox-init --as` takes it.
    pub fn to_arg(self) -> String {
        format!("{}:{}", self.uid, self.gid)
    }

    /// Parses `UID:GID`; refuses 0 for either (the point is never to be root).
    pub fn parse(text: &str) -> Option<Self> {
        let (uid, gid) = text.split_once(':')?;
        let (uid, gid) = (uid.parse().ok()?, gid.parse().ok()?);
        (uid != 0 && gid != 0).then_some(Self { uid, gid })
    }
}

/// One resource limit of the agent's processes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// `RLIMIT_NPROC`: processes and threads (of this sandbox's user namespace).
    Processes(u64),
    /// `RLIMIT_FSIZE`: the largest file a process may write or allocate, in bytes.
    FileBytes(u64),
    /// `RLIMIT_NOFILE`: open file descriptors per process.
    OpenFiles(u64),
    /// `RLIMIT_DATA`: a process's heap and private writable mappings, in bytes.
    DataBytes(u64),
}

impl Limit {
    /// `NAME=VALUE`, as `sandbox-init --limit` takes it.
    pub fn to_arg(self) -> String {
        let (name, value) = self.parts();
        format!("{name}={value}")
    }

    /// Parses `NAME=VALUE` (`nproc`, `fsize`, `nofile`, `data`; a positive number).
    pub fn parse(text: &str) -> Option<Self> {
        let (name, value) = text.split_once('=')?;
        let value: u64 = value.parse().ok().filter(|v| *v > 0)?;
        Some(match name {
            "nproc" => Self::Processes(value),
            "fsize" => Self::FileBytes(value),
            "nofile" => Self::OpenFiles(value),
            "data" => Self::DataBytes(value),
            _ => return None,
        })
    }

    fn parts(self) -> (&'static str, u64) {
        match self {
            Self::Processes(v) => ("nproc", v),
            Self::FileBytes(v) => ("fsize", v),
            Self::OpenFiles(v) => ("nofile", v),
            Self::DataBytes(v) => ("data", v),
        }
    }

    fn resource(self) -> nix::sys::resource::Resource {
        use nix::sys::resource::Resource;
        match self {
            Self::Processes(_) => Resource::RLIMIT_NPROC,
            Self::FileBytes(_) => Resource::RLIMIT_FSIZE,
            Self::OpenFiles(_) => Resource::RLIMIT_NOFILE,
            Self::DataBytes(_) => Resource::RLIMIT_DATA,
        }
    }
}

/// Why `sandbox-init` could not lock itself down (one line on stderr, exit code 1: the agent
/// never starts half-confined).
#[derive(Debug, thiserror::Error)]
pub enum LockdownError {
    /// A system call failed.
    #[error("cannot {what}: {source}")]
    Sys {
        /// What was being done.
        what: &'static str,
        /// The error.
        source: nix::Error,
    },
    /// A file under `/proc` could not be written.
    #[error("cannot write {path}: {source}")]
    Proc {
        /// The file.
        path: &'static str,
        /// The error.
        source: std::io::Error,
    },
    /// The seccomp filter could not be built or loaded.
    #[error("{0}")]
    Seccomp(String),
    /// Capabilities were left after the switch.
    #[error("capabilities are left after switching to the agent user ({0})")]
    CapabilitiesLeft(String),
}

fn failed(what: &'static str) -> impl FnOnce(nix::Error) -> LockdownError {
    move |source| LockdownError::Sys { what, source }
}

/// Switches this (still single-threaded) process to `user` for good: empties the bounding set,
/// drops supplementary groups, sets gid then uid (real, effective and saved), sets
/// `no_new_privs`, and checks that no capability survived.
pub fn drop_to(user: HostUser) -> Result<(), LockdownError> {
    use nix::unistd::{Gid, Uid, setgroups, setresgid, setresuid};
    clear_bounding_set()?;
    setgroups(&[]).map_err(failed("drop supplementary groups"))?;
    let gid = Gid::from_raw(user.gid);
    setresgid(gid, gid, gid).map_err(failed("switch to the agent group"))?;
    let uid = Uid::from_raw(user.uid);
    setresuid(uid, uid, uid).map_err(failed("switch to the agent user"))?;
    // The switch emptied the permitted and effective sets; bubblewrap's inheritable set stays.
    sys::clear_capabilities().map_err(failed("clear the capabilities"))?;
    nix::sys::prctl::set_no_new_privs().map_err(failed("set no_new_privs"))?;
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let caps = Capabilities::from_status(&status);
    if caps.any_set() {
        return Err(LockdownError::CapabilitiesLeft(caps.describe()));
    }
    Ok(())
}

/// Makes a user namespace of its own that maps only the current uid and gid to themselves.
/// Called after [`drop_to`] (an unprivileged process may do this for its own ids).
pub fn own_user_namespace() -> Result<(), LockdownError> {
    let (uid, gid) = (nix::unistd::getuid(), nix::unistd::getgid());
    // Changing uid made this process non-dumpable, which gives its /proc files to root; it
    // holds no secret, and it must write its own maps.
    nix::sys::prctl::set_dumpable(true).map_err(failed("make the process dumpable"))?;
    nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWUSER)
        .map_err(failed("create the agent's user namespace"))?;
    write_proc("/proc/self/setgroups", "deny")?;
    write_proc("/proc/self/uid_map", &format!("{uid} {uid} 1"))?;
    write_proc("/proc/self/gid_map", &format!("{gid} {gid} 1"))?;
    // The creator of a user namespace holds every capability in it, and its bounding set is
    // full again: give them all up, so neither this process nor the agent keeps any.
    clear_bounding_set()?;
    sys::clear_capabilities().map_err(failed("clear the capabilities"))
}

/// Drops every capability from the bounding set, up to the kernel's last.
fn clear_bounding_set() -> Result<(), LockdownError> {
    let last = std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok())
        .unwrap_or(63);
    sys::clear_bounding_set(last).map_err(failed("clear the capability bounding set"))
}

fn write_proc(path: &'static str, text: &str) -> Result<(), LockdownError> {
    std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .and_then(|mut f| f.write_all(text.as_bytes()))
        .map_err(|source| LockdownError::Proc { path, source })
}

/// The last steps before the agent starts: a new, empty session keyring (the inherited one may
/// hold the service's or an earlier session's keys), then the seccomp filter
/// ([`super::seccomp`]), which also refuses every later key call.
pub fn seal() -> Result<(), LockdownError> {
    sys::join_new_session_keyring().map_err(failed("make a new session keyring"))?;
    let filter =
        super::seccomp::Filter::build().map_err(|e| LockdownError::Seccomp(e.to_string()))?;
    filter
        .apply()
        .map_err(|e| LockdownError::Seccomp(e.to_string()))
}

/// Sets every limit, soft and hard (so the agent cannot raise it again).
pub fn apply_limits(limits: &[Limit]) -> Result<(), LockdownError> {
    for limit in limits {
        let (_, value) = limit.parts();
        nix::sys::resource::setrlimit(limit.resource(), value, value)
            .map_err(failed("set a resource limit"))?;
    }
    Ok(())
}

/// The capability sets of `/proc/self/status`, as hexadecimal masks.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Capabilities {
    /// `CapPrm`, `CapEff`, `CapBnd`, `CapAmb`, `CapInh` (absent lines read as set: unknown).
    masks: [(&'static str, u64); 5],
}

impl Capabilities {
    /// Reads the masks from a `/proc/<pid>/status` text.
    pub fn from_status(status: &str) -> Self {
        let mut masks = [
            ("CapPrm", u64::MAX),
            ("CapEff", u64::MAX),
            ("CapBnd", u64::MAX),
            ("CapAmb", u64::MAX),
            ("CapInh", u64::MAX),
        ];
        for (name, mask) in &mut masks {
            if let Some(value) = status_field(status, name) {
                *mask = u64::from_str_radix(value, 16).unwrap_or(u64::MAX);
            }
        }
        Self { masks }
    }

    /// True when any set holds any capability.
    pub fn any_set(&self) -> bool {
        self.masks.iter().any(|(_, m)| *m != 0)
    }

    /// The non-empty sets, e.g. `CapBnd=000001ffffffffff`.
    pub fn describe(&self) -> String {
        self.masks
            .iter()
            .filter(|(_, m)| *m != 0)
            .map(|(n, m)| format!("{n}={m:016x}"))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// The value of `Name:` in a `/proc/<pid>/status` text.
fn status_field<'a>(status: &'a str, name: &str) -> Option<&'a str> {
    status.lines().find_map(|line| {
        line.strip_prefix(name)
            .and_then(|rest| rest.strip_prefix(':'))
            .map(str::trim)
    })
}

/// What the sandbox looks like from inside: each field true when that wall holds.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CheckReport {
    /// No file of `/proc/sys` (nor `/proc/sysrq-trigger`) opens for writing.
    pub proc_sys_read_only: bool,
    /// No capability in any set, the bounding set included (e.g. `CapBnd=...` otherwise).
    pub capabilities: String,
    /// `no_new_privs` is set.
    pub no_new_privs: bool,
    /// A seccomp filter is in force (`Seccomp: 2`).
    pub seccomp_filter: bool,
    /// The kernel key calls are refused.
    pub keyring_refused: bool,
    /// The file this check wrote in its working folder, for the daemon to see whose it is.
    pub marker: String,
}

impl CheckReport {
    /// What does not hold, one phrase each (empty when everything holds).
    pub fn failures(&self) -> Vec<String> {
        let mut out = Vec::new();
        if !self.proc_sys_read_only {
            out.push("/proc/sys is writable inside the sandbox".to_owned());
        }
        if !self.capabilities.is_empty() {
            out.push(format!(
                "the agent keeps capabilities ({})",
                self.capabilities
            ));
        }
        if !self.no_new_privs {
            out.push("no_new_privs is not set".to_owned());
        }
        if !self.seccomp_filter {
            out.push("no seccomp filter is in force".to_owned());
        }
        if !self.keyring_refused {
            out.push("the kernel keyring calls are not refused".to_owned());
        }
        out
    }
}

/// Sysctl files whose write would harm the host; none may open for writing.
const HOST_SYSCTLS: &[&str] = &[
    "/proc/sys/kernel/core_pattern",
    "/proc/sys/vm/drop_caches",
    "/proc/sys/kernel/modprobe",
    "/proc/sysrq-trigger",
];

/// Checks the walls from inside and writes `marker` (a new file) in the working folder.
pub fn self_check(marker: &Path) -> std::io::Result<CheckReport> {
    let proc_sys_read_only = HOST_SYSCTLS.iter().all(|path| {
        // Opening for writing is the check; nothing is written.
        std::fs::OpenOptions::new().write(true).open(path).is_err()
    });
    let status = std::fs::read_to_string("/proc/self/status")?;
    let caps = Capabilities::from_status(&status);
    let keyring_refused = sys::session_keyring_id() == Err(nix::Error::EPERM);
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(marker)?;
    Ok(CheckReport {
        proc_sys_read_only,
        capabilities: caps.describe(),
        no_new_privs: status_field(&status, "NoNewPrivs") == Some("1"),
        seccomp_filter: status_field(&status, "Seccomp") == Some("2"),
        keyring_refused,
        marker: marker.display().to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_users_and_limits_round_trip_and_root_is_refused() {
        let user = HostUser { uid: 998, gid: 997 };
        assert_eq!(HostUser::parse(&user.to_arg()), Some(user));
        for bad in ["0:997", "998:0", "998", "a:b", "-1:5", ""] {
            assert_eq!(HostUser::parse(bad), None, "{bad}");
        }
        for limit in [
            Limit::Processes(512),
            Limit::FileBytes(1 << 30),
            Limit::OpenFiles(4096),
            Limit::DataBytes(8 << 30),
        ] {
            assert_eq!(Limit::parse(&limit.to_arg()), Some(limit));
        }
        for bad in ["nproc=0", "nproc=", "cpu=5", "nproc", "fsize=-1"] {
            assert_eq!(Limit::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn capabilities_are_read_from_status_and_missing_lines_count_as_set() {
        let status = "Name:\tx\nCapInh:\t0000000000000000\nCapPrm:\t0000000000000000\n\
                      CapEff:\t0000000000000000\nCapBnd:\t000001ffffffffff\nCapAmb:\t0000000000000000\n";
        let caps = Capabilities::from_status(status);
        assert!(caps.any_set());
        assert_eq!(caps.describe(), "CapBnd=000001ffffffffff");
        let clear = status.replace("000001ffffffffff", "0000000000000000");
        assert!(!Capabilities::from_status(&clear).any_set());
        assert!(Capabilities::from_status("Name:\tx\n").any_set());
    }

    #[test]
    fn a_report_names_every_wall_that_does_not_hold() {
        let mut report = CheckReport {
            proc_sys_read_only: true,
            capabilities: String::new(),
            no_new_privs: true,
            seccomp_filter: true,
            keyring_refused: true,
            marker: "/ws/m".into(),
        };
        assert!(report.failures().is_empty());
        report.proc_sys_read_only = false;
        report.capabilities = "CapBnd=1".into();
        report.seccomp_filter = false;
        let failures = report.failures().join("; ");
        assert!(failures.contains("/proc/sys is writable"), "{failures}");
        assert!(failures.contains("CapBnd=1"), "{failures}");
        assert!(failures.contains("seccomp"), "{failures}");
    }
}
