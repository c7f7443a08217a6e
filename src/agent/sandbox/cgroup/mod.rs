//! A cgroup per agent (`agent.sandbox.cgroup`): the one wall that bounds an agent's memory —
//! its processes' and the pages of its tmpfs folders alike, which count against no process's
//! rlimit — and that counts its processes exactly and caps its CPU.
//!
//! At start-up [`Cgroups::discover`] finds, for each controller the limits need (`memory`,
//! `pids`, `cpu`), the hierarchy that has it ([`discover`]): the unified (v2) hierarchy when
//! the daemon's group is given the controller (systemd's `Delegate=yes`), else a legacy (v1)
//! hierarchy the daemon may write (as root). In v2 a group with processes cannot hand
//! controllers down, so the daemon first moves itself into a leaf `daemon/` of its delegated
//! group (the unit's `DelegateSubgroup=daemon` starts it there already) — but only when it is
//! alone in its group, never in a shared login session.
//!
//! For each agent, [`Cgroups::create`] makes a group beside the daemon's with the limits
//! written, and the agent joins it *before bubblewrap executes* (`pre_exec`, see
//! [`crate::agent::sys::join_cgroups_at_exec`]), so nothing the sandbox ever runs starts
//! outside it. When the agent stops, [`AgentCgroup::remove`] kills whatever is still in the
//! group and removes it; a kill by the memory limit is reported
//! ([`AgentCgroup::memory_kills`]).
//!
//! Blocking file-system work (cgroupfs is in-kernel, but still): callers run it on the
//! blocking pool.

pub mod discover;

use std::io::Write as _;
use std::os::fd::{AsRawFd as _, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use discover::{Home, Version};

/// Groups made for agents start with this (stale ones are removed at start-up).
const PREFIX: &str = "air-friends-agent-";

/// The leaf the daemon lives in when it hands v2 controllers down to its agents' groups.
pub const DAEMON_LEAF: &str = "daemon";

/// The CPU period the `cpu` limit is expressed in, in µs.
const CPU_PERIOD_US: u64 = 100_000;

/// What one agent's group is bounded to (`None`: not bounded by the cgroup).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CgroupLimits {
    /// `memory.max` / `memory.limit_in_bytes`: all the group's memory, tmpfs pages included.
    pub memory_bytes: Option<u64>,
    /// `pids.max`: processes and threads in the group.
    pub pids: Option<u64>,
    /// `cpu.max` / `cpu.cfs_quota_us`: CPU time in percent of one core.
    pub cpu_percent: Option<u64>,
}

impl CgroupLimits {
    /// The controllers these limits need.
    fn controllers(&self) -> Vec<&'static str> {
        [
            self.memory_bytes.map(|_| "memory"),
            self.pids.map(|_| "pids"),
            self.cpu_percent.map(|_| "cpu"),
        ]
        .into_iter()
        .flatten()
        .collect()
    }
}

/// Where the agents' groups are made, per hierarchy.
#[derive(Debug)]
struct Base {
    version: Version,
    /// The folder agent groups are made in.
    dir: PathBuf,
    controllers: Vec<&'static str>,
}

/// The cgroups this daemon gives its agents.
#[derive(Debug)]
pub struct Cgroups {
    bases: Vec<Base>,
    limits: CgroupLimits,
    /// Limits wanted that no hierarchy here can enforce.
    missing: Vec<&'static str>,
    next: AtomicU64,
}

/// Why agents cannot get a cgroup.
#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    /// No hierarchy here provides a controller the limits need, or the daemon may not use it.
    #[error("{0}")]
    Unavailable(String),
    /// Making or limiting an agent's group failed.
    #[error("cannot set up the agent's cgroup {path}: {source}")]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
}

fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> CgroupError + '_ {
    move |source| CgroupError::Io {
        path: path.to_path_buf(),
        source,
    }
}

impl Cgroups {
    /// The cgroups of this process's hierarchies for `limits`. `Ok` with
    /// [`missing`](Self::missing) non-empty when only some limits can be enforced; an error when
    /// none can (with why, for the operator).
    pub fn discover(limits: CgroupLimits) -> Result<Cgroups, CgroupError> {
        Self::discover_as(limits, true)
    }

    /// What [`discover`](Self::discover) would find, changing nothing (no group made or
    /// removed, the daemon not moved): for `check-config`.
    pub fn survey(limits: CgroupLimits) -> Result<Cgroups, CgroupError> {
        Self::discover_as(limits, false)
    }

    fn discover_as(limits: CgroupLimits, act: bool) -> Result<Cgroups, CgroupError> {
        let read = |p: &str| std::fs::read_to_string(p).map_err(io_error(Path::new(p)));
        let memberships = discover::parse_memberships(&read("/proc/self/cgroup")?);
        let mounts = discover::parse_mounts(&read("/proc/self/mountinfo")?);
        let v2_available = discover::v2_group(&memberships, &mounts)
            .map(|dir| v2_group_controllers(&dir))
            .unwrap_or_default();
        let homes = discover::homes(&memberships, &mounts, &v2_available);
        Self::from_homes(homes, limits, std::process::id(), act)
    }

    /// The same from already discovered `homes` (testable on any folder tree); with `act`
    /// false nothing is changed.
    fn from_homes(
        homes: Vec<Home>,
        limits: CgroupLimits,
        pid: u32,
        act: bool,
    ) -> Result<Cgroups, CgroupError> {
        let wanted = limits.controllers();
        let mut bases = Vec::new();
        let mut refused = Vec::new();
        for home in homes {
            let controllers: Vec<&'static str> = home
                .controllers
                .iter()
                .copied()
                .filter(|c| wanted.contains(c))
                .collect();
            if controllers.is_empty() {
                continue;
            }
            let base = match home.version {
                Version::V1 => writable_dir(&home.dir).map(|()| home.dir.clone()),
                Version::V2 => v2_base(&home.dir, &controllers, pid, act),
            };
            match base {
                Ok(dir) => {
                    if act {
                        remove_stale(&dir);
                    }
                    bases.push(Base {
                        version: home.version,
                        dir,
                        controllers,
                    });
                }
                Err(why) => refused.push(format!("{} ({why})", controllers.join(", "))),
            }
        }
        let missing: Vec<&'static str> = wanted
            .iter()
            .copied()
            .filter(|c| !bases.iter().any(|b| b.controllers.contains(c)))
            .collect();
        if bases.is_empty() {
            let why = if refused.is_empty() {
                format!(
                    "no cgroup hierarchy here provides {} to this daemon",
                    wanted.join(", ")
                )
            } else {
                format!(
                    "the cgroup controllers cannot be used: {}",
                    refused.join("; ")
                )
            };
            return Err(CgroupError::Unavailable(why));
        }
        Ok(Cgroups {
            bases,
            limits,
            missing,
            next: AtomicU64::new(1),
        })
    }

    /// Limits wanted that no hierarchy here enforces (`memory`, `pids`, `cpu`).
    pub fn missing(&self) -> &[&'static str] {
        &self.missing
    }

    /// What bounds the agents, in a few words for the start-up log and `/readyz`.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        for base in &self.bases {
            let version = match base.version {
                Version::V1 => "v1",
                Version::V2 => "v2",
            };
            for c in &base.controllers {
                parts.push(match *c {
                    "memory" => format!(
                        "memory {} MiB incl. tmpfs (cgroup {version})",
                        self.limits.memory_bytes.unwrap_or(0) >> 20
                    ),
                    "pids" => format!(
                        "{} processes (cgroup {version})",
                        self.limits.pids.unwrap_or(0)
                    ),
                    _ => format!(
                        "cpu {}% of a core (cgroup {version})",
                        self.limits.cpu_percent.unwrap_or(0)
                    ),
                });
            }
        }
        if !self.missing.is_empty() {
            parts.push(format!("not bounded: {}", self.missing.join(", ")));
        }
        parts.join(", ")
    }

    /// A new group for the agent of `label` (a session id), with the limits written. Blocking.
    pub fn create(&self, label: &str) -> Result<AgentCgroup, CgroupError> {
        // Several runners of one process (tests, benchmarks) count from 1 each: a name taken
        // is skipped.
        for _ in 0..1000 {
            let n = self.next.fetch_add(1, Ordering::Relaxed);
            // The daemon's pid keeps two daemons sharing a hierarchy apart.
            let name = format!("{PREFIX}{}-{}-{n}", std::process::id(), safe_label(label));
            match self.create_named(&name) {
                Err(CgroupError::Io { source, .. })
                    if source.kind() == std::io::ErrorKind::AlreadyExists => {}
                other => return other,
            }
        }
        Err(CgroupError::Unavailable(format!(
            "no free agent group name for {label:?}"
        )))
    }

    /// The group `name` in every hierarchy used, limits written. A partly made group is
    /// removed again by its drop.
    fn create_named(&self, name: &str) -> Result<AgentCgroup, CgroupError> {
        let mut group = AgentCgroup {
            dirs: Vec::new(),
            procs: Vec::new(),
            removed: false,
        };
        for base in &self.bases {
            let dir = base.dir.join(name);
            std::fs::create_dir(&dir).map_err(io_error(&dir))?;
            group
                .dirs
                .push((base.version, dir.clone(), base.controllers.clone()));
            for controller in &base.controllers {
                self.write_limit(base.version, &dir, controller)?;
            }
            let procs = dir.join("cgroup.procs");
            let file = std::fs::OpenOptions::new()
                .write(true)
                .open(&procs)
                .map_err(io_error(&procs))?;
            group.procs.push(OwnedFd::from(file));
        }
        Ok(group)
    }

    fn write_limit(
        &self,
        version: Version,
        dir: &Path,
        controller: &str,
    ) -> Result<(), CgroupError> {
        let l = &self.limits;
        match (controller, version) {
            ("memory", Version::V2) => {
                let bytes = l.memory_bytes.unwrap_or(u64::MAX);
                write(dir, "memory.max", &bytes.to_string())?;
                // Swapped-out pages would escape the bound; absent without swap accounting.
                let _ = write(dir, "memory.swap.max", "0");
            }
            ("memory", Version::V1) => {
                let bytes = l.memory_bytes.unwrap_or(u64::MAX).to_string();
                write(dir, "memory.limit_in_bytes", &bytes)?;
                let _ = write(dir, "memory.memsw.limit_in_bytes", &bytes);
            }
            ("pids", _) => write(dir, "pids.max", &l.pids.unwrap_or(0).to_string())?,
            (_, Version::V2) => write(
                dir,
                "cpu.max",
                &format!("{} {CPU_PERIOD_US}", cpu_quota(l.cpu_percent)),
            )?,
            (_, Version::V1) => {
                write(dir, "cpu.cfs_period_us", &CPU_PERIOD_US.to_string())?;
                write(
                    dir,
                    "cpu.cfs_quota_us",
                    &cpu_quota(l.cpu_percent).to_string(),
                )?;
            }
        }
        Ok(())
    }
}

fn cpu_quota(percent: Option<u64>) -> u64 {
    percent.unwrap_or(100).max(1) * CPU_PERIOD_US / 100
}

/// One agent's group (in each hierarchy used). Dropping it without [`remove`](Self::remove)
/// still kills what is in it and tries to remove it.
#[derive(Debug)]
pub struct AgentCgroup {
    dirs: Vec<(Version, PathBuf, Vec<&'static str>)>,
    procs: Vec<OwnedFd>,
    removed: bool,
}

impl AgentCgroup {
    /// The open `cgroup.procs` files a process joins the group through (by writing `0`).
    pub fn procs_fds(&self) -> Vec<RawFd> {
        self.procs.iter().map(|f| f.as_raw_fd()).collect()
    }

    /// The group's folders, one per hierarchy.
    pub fn dirs(&self) -> impl Iterator<Item = &Path> {
        self.dirs.iter().map(|(_, d, _)| d.as_path())
    }

    /// How many processes the memory limit has killed in this group so far.
    pub fn memory_kills(&self) -> u64 {
        let Some((version, dir, _)) = self.dirs.iter().find(|(_, _, c)| c.contains(&"memory"))
        else {
            return 0;
        };
        let file = match version {
            Version::V2 => "memory.events",
            Version::V1 => "memory.oom_control",
        };
        std::fs::read_to_string(dir.join(file))
            .ok()
            .and_then(|text| {
                text.lines()
                    .find_map(|l| l.strip_prefix("oom_kill ")?.trim().parse().ok())
            })
            .unwrap_or(0)
    }

    /// Kills every process still in the group and removes it, retrying (1 ms, doubling to
    /// 50 ms, about two seconds in all) while the kernel lets go of the dying processes.
    /// Blocking.
    pub fn remove(mut self) -> Result<(), CgroupError> {
        self.removed = true;
        self.procs.clear();
        let mut pause = Duration::from_millis(1);
        let mut waited = Duration::ZERO;
        loop {
            let mut left = None;
            for (version, dir, _) in &self.dirs {
                if !dir.exists() {
                    continue;
                }
                if *version == Version::V2 {
                    let _ = write(dir, "cgroup.kill", "1");
                }
                kill_members(dir);
                if std::fs::remove_dir(dir).is_err() && dir.exists() {
                    left = Some(dir.clone());
                }
            }
            let Some(dir) = left else {
                return Ok(());
            };
            if waited >= Duration::from_secs(2) {
                return Err(CgroupError::Io {
                    source: std::io::Error::other("processes remain in it after SIGKILL"),
                    path: dir,
                });
            }
            std::thread::sleep(pause);
            waited += pause;
            pause = (pause * 2).min(Duration::from_millis(50));
        }
    }
}

impl Drop for AgentCgroup {
    fn drop(&mut self) {
        if self.removed {
            return;
        }
        for (_, dir, _) in &self.dirs {
            kill_members(dir);
            let _ = std::fs::remove_dir(dir);
        }
    }
}

/// SIGKILLs every process listed in `dir/cgroup.procs`; how many there were.
fn kill_members(dir: &Path) -> usize {
    let Ok(text) = std::fs::read_to_string(dir.join("cgroup.procs")) else {
        return 0;
    };
    let pids: Vec<i32> = text.lines().filter_map(|l| l.trim().parse().ok()).collect();
    for pid in &pids {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(*pid), nix::sys::signal::SIGKILL);
    }
    pids.len()
}

fn write(dir: &Path, file: &str, value: &str) -> Result<(), CgroupError> {
    let path = dir.join(file);
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .and_then(|mut f| f.write_all(value.as_bytes()))
        .map_err(io_error(&path))
}

/// The controllers a v2 group is given (its `cgroup.controllers`).
fn v2_group_controllers(dir: &Path) -> Vec<String> {
    std::fs::read_to_string(dir.join("cgroup.controllers"))
        .map(|t| t.split_whitespace().map(str::to_owned).collect())
        .unwrap_or_default()
}

fn writable_dir(dir: &Path) -> Result<(), String> {
    nix::unistd::access(dir, nix::unistd::AccessFlags::W_OK)
        .map_err(|e| format!("{} is not writable: {e}", dir.display()))
}

/// The folder a v2 daemon makes its agents' groups in: its delegated group, with the daemon
/// itself in the leaf [`DAEMON_LEAF`] and `controllers` handed down. The daemon moves itself
/// into the leaf only when it is the group's sole process (a service's); a group shared with
/// other processes (a login session) is left alone.
fn v2_base(own: &Path, controllers: &[&str], pid: u32, act: bool) -> Result<PathBuf, String> {
    let root = if own.file_name().is_some_and(|n| n == DAEMON_LEAF) {
        own.parent()
            .ok_or_else(|| format!("{} has no parent", own.display()))?
            .to_path_buf()
    } else {
        let procs = std::fs::read_to_string(own.join("cgroup.procs"))
            .map_err(|e| format!("cannot read {}: {e}", own.join("cgroup.procs").display()))?;
        let others = procs
            .lines()
            .filter_map(|l| l.trim().parse::<u32>().ok())
            .any(|p| p != pid);
        if others {
            return Err(format!(
                "{} holds other processes too; run the daemon as a service with Delegate=yes \
                 (contrib/systemd/air-friends.service)",
                own.display()
            ));
        }
        writable_dir(own)?;
        if !act {
            return Ok(own.to_path_buf());
        }
        let leaf = own.join(DAEMON_LEAF);
        match std::fs::create_dir(&leaf) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(format!("cannot make {}: {e}", leaf.display())),
        }
        write(&leaf, "cgroup.procs", &pid.to_string()).map_err(|e| e.to_string())?;
        own.to_path_buf()
    };
    writable_dir(&root)?;
    if !act {
        return Ok(root);
    }
    let enable: Vec<String> = controllers.iter().map(|c| format!("+{c}")).collect();
    write(&root, "cgroup.subtree_control", &enable.join(" ")).map_err(|e| e.to_string())?;
    Ok(root)
}

/// Removes the agent groups a previous run left behind: those named after a daemon that no
/// longer runs (its agents died with it, so they are empty). Another running daemon's groups
/// stay, empty or not — one it has just made is empty until its agent joins.
fn remove_stale(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(owner) = name
            .strip_prefix(PREFIX)
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if Path::new(&format!("/proc/{owner}")).exists() {
            continue;
        }
        if std::fs::remove_dir(entry.path()).is_ok() {
            tracing::info!(path = %entry.path().display(), "removed an agent cgroup a previous run left");
        }
    }
}

/// `label` as a group name part: letters, digits, `-` and `_` only, at most 48 characters.
fn safe_label(label: &str) -> String {
    label
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .take(48)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> CgroupLimits {
        CgroupLimits {
            memory_bytes: Some(64 << 20),
            pids: Some(32),
            cpu_percent: Some(50),
        }
    }

    /// A folder tree shaped like a v2 service group: the daemon alone in it, the controllers
    /// given to it.
    fn v2_tree(pid: u32) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("cgroup.procs"), format!("{pid}\n")).unwrap();
        std::fs::write(dir.path().join("cgroup.subtree_control"), "").unwrap();
        dir
    }

    #[test]
    fn a_v2_service_moves_itself_into_a_leaf_and_hands_the_controllers_down() {
        let tree = v2_tree(4242);
        let home = Home {
            version: Version::V2,
            dir: tree.path().to_path_buf(),
            controllers: vec!["memory", "pids", "cpu"],
        };
        // cgroupfs makes a group's files itself; a plain folder needs them made.
        std::fs::create_dir(tree.path().join(DAEMON_LEAF)).unwrap();
        std::fs::write(tree.path().join(DAEMON_LEAF).join("cgroup.procs"), "").unwrap();
        let groups = Cgroups::from_homes(vec![home], limits(), 4242, true).unwrap();
        assert!(groups.missing().is_empty());
        assert_eq!(
            std::fs::read_to_string(tree.path().join("daemon/cgroup.procs")).unwrap(),
            "4242"
        );
        assert_eq!(
            std::fs::read_to_string(tree.path().join("cgroup.subtree_control")).unwrap(),
            "+memory +pids +cpu"
        );
        assert!(
            groups
                .describe()
                .contains("memory 64 MiB incl. tmpfs (cgroup v2)")
        );
    }

    #[test]
    fn a_survey_changes_nothing() {
        let tree = v2_tree(4242);
        let home = Home {
            version: Version::V2,
            dir: tree.path().to_path_buf(),
            controllers: vec!["memory", "pids"],
        };
        let stale = tree.path().join(format!("{PREFIX}{}-s-1", u32::MAX));
        std::fs::create_dir(&stale).unwrap();
        let groups = Cgroups::from_homes(vec![home], limits(), 4242, false).unwrap();
        assert!(groups.describe().contains("memory 64 MiB"));
        assert!(!tree.path().join(DAEMON_LEAF).exists());
        assert!(stale.exists());
        assert_eq!(
            std::fs::read_to_string(tree.path().join("cgroup.subtree_control")).unwrap(),
            ""
        );
    }

    #[test]
    fn a_v2_group_shared_with_other_processes_is_left_alone() {
        let tree = v2_tree(4242);
        std::fs::write(tree.path().join("cgroup.procs"), "4242\n17\n").unwrap();
        let home = Home {
            version: Version::V2,
            dir: tree.path().to_path_buf(),
            controllers: vec!["memory"],
        };
        let err = Cgroups::from_homes(vec![home], limits(), 4242, true).unwrap_err();
        assert!(
            err.to_string().contains("holds other processes too"),
            "{err}"
        );
        assert!(!tree.path().join(DAEMON_LEAF).exists());
        assert_eq!(
            std::fs::read_to_string(tree.path().join("cgroup.subtree_control")).unwrap(),
            ""
        );
    }

    #[test]
    fn a_daemon_started_in_its_leaf_makes_agent_groups_beside_it() {
        let tree = v2_tree(1);
        let leaf = tree.path().join(DAEMON_LEAF);
        std::fs::create_dir(&leaf).unwrap();
        let home = Home {
            version: Version::V2,
            dir: leaf,
            controllers: vec!["memory", "pids"],
        };
        let only_memory = CgroupLimits {
            pids: None,
            cpu_percent: None,
            ..limits()
        };
        let groups = Cgroups::from_homes(vec![home], only_memory, 4242, true).unwrap();
        assert_eq!(
            std::fs::read_to_string(tree.path().join("cgroup.subtree_control")).unwrap(),
            "+memory"
        );
        // A plain folder cannot stand in for cgroupfs past this point (the kernel makes the
        // files of a new group), so making an agent group is tested on the real hierarchy.
        assert_eq!(groups.bases[0].dir, tree.path());
    }

    #[test]
    fn limits_nobody_can_enforce_are_named_and_none_at_all_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let home = Home {
            version: Version::V1,
            dir: dir.path().to_path_buf(),
            controllers: vec!["pids"],
        };
        let groups = Cgroups::from_homes(vec![home], limits(), 1, true).unwrap();
        assert_eq!(groups.missing(), ["memory", "cpu"]);
        assert!(
            groups.describe().ends_with("not bounded: memory, cpu"),
            "{}",
            groups.describe()
        );
        let err = Cgroups::from_homes(vec![], limits(), 1, true).unwrap_err();
        assert!(err.to_string().contains("no cgroup hierarchy"), "{err}");
    }

    #[test]
    fn only_groups_of_daemons_that_are_gone_are_removed_as_stale() {
        let dir = tempfile::tempdir().unwrap();
        let gone = dir.path().join(format!("{PREFIX}{}-s-1", u32::MAX));
        let running = dir
            .path()
            .join(format!("{PREFIX}{}-s-1", std::process::id()));
        let other = dir.path().join("someone-elses");
        for d in [&gone, &running, &other] {
            std::fs::create_dir(d).unwrap();
        }
        remove_stale(dir.path());
        assert!(!gone.exists());
        assert!(
            running.exists(),
            "a running daemon's (still empty) group was removed"
        );
        assert!(other.exists());
    }

    #[test]
    fn labels_become_safe_group_names() {
        assert_eq!(safe_label("discord:12/../x y"), "discord_12____x_y");
        assert_eq!(safe_label(&"a".repeat(100)).len(), 48);
        assert_eq!(cpu_quota(Some(150)), 150_000);
        assert_eq!(cpu_quota(Some(0)), 1_000);
    }
}
