//! Who the agent is on the host, and what it may use: the dedicated agent user of a root
//! daemon (`agent.sandbox.user`) and the resource limits (`agent.sandbox.limits`).
//!
//! A root daemon's bubblewrap makes no user namespace, so without a switch the agent would be
//! host uid 0 — and the kernel's sysctl checks look at the host uid, whatever capabilities are
//! dropped. So when the daemon's effective uid is 0, agents run as `agent.sandbox.user`,
//! which must exist and must not be root; otherwise the sandbox refuses to start (fail-closed)
//! naming the fix. Files the daemon makes for the agent (its workspace's mount points and
//! staging folder, its session socket) are handed to that user ([`hand_over`]); nothing else
//! of the data folder is.

use std::os::unix::fs::MetadataExt as _;
use std::path::Path;

use super::SandboxError;
use crate::agent::lockdown::{HostUser, Limit};
use crate::config::SandboxConfig;

/// The host user agents run as: `Some` when this process runs as root, `None` otherwise
/// (agents then run as the daemon's own user, in bubblewrap's user namespace).
pub fn agent_host_user(config: &SandboxConfig) -> Result<Option<HostUser>, SandboxError> {
    if !nix::unistd::geteuid().is_root() {
        return Ok(None);
    }
    let name = config.user.as_str();
    let user = nix::unistd::User::from_name(name)
        .map_err(|e| SandboxError::AgentUser {
            name: name.to_owned(),
            problem: format!("cannot be looked up: {e}"),
        })?
        .ok_or_else(|| SandboxError::AgentUser {
            name: name.to_owned(),
            problem: "does not exist".to_owned(),
        })?;
    HostUser::parse(&format!("{}:{}", user.uid, user.gid))
        .map(Some)
        .ok_or_else(|| SandboxError::AgentUser {
            name: name.to_owned(),
            problem: "is root (uid or gid 0)".to_owned(),
        })
}

/// `agent.sandbox.limits` as `sandbox-init` takes them (those set to 0 are left out).
pub fn limits(config: &SandboxConfig) -> Vec<Limit> {
    const MIB: u64 = 1024 * 1024;
    let l = &config.limits;
    [
        (l.max_processes > 0).then_some(Limit::Processes(l.max_processes)),
        (l.max_file_mb > 0).then(|| Limit::FileBytes(l.max_file_mb.saturating_mul(MIB))),
        (l.max_open_files > 0).then_some(Limit::OpenFiles(l.max_open_files)),
        (l.max_data_mb > 0).then(|| Limit::DataBytes(l.max_data_mb.saturating_mul(MIB))),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// Gives `path` (not following a link) to `user`, unless it is theirs already.
pub fn hand_over(path: &Path, user: HostUser) -> std::io::Result<()> {
    let meta = std::fs::symlink_metadata(path)?;
    if meta.uid() == user.uid && meta.gid() == user.gid {
        return Ok(());
    }
    std::os::unix::fs::lchown(path, Some(user.uid), Some(user.gid))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_leave_out_those_set_to_zero_and_count_mib() {
        let mut config = SandboxConfig::default();
        assert_eq!(
            limits(&config),
            [
                Limit::Processes(256),
                Limit::FileBytes(1024 << 20),
                Limit::OpenFiles(4096)
            ]
        );
        config.limits.max_processes = 0;
        config.limits.max_data_mb = 2;
        assert_eq!(
            limits(&config),
            [
                Limit::FileBytes(1024 << 20),
                Limit::OpenFiles(4096),
                Limit::DataBytes(2 << 20)
            ]
        );
    }

    #[test]
    fn as_root_a_missing_or_root_agent_user_is_refused_with_the_fix() {
        if !nix::unistd::geteuid().is_root() {
            let config = SandboxConfig::default();
            assert_eq!(
                agent_host_user(&config).unwrap(),
                None,
                "not root: no switch"
            );
            return;
        }
        for (name, want) in [("no-such-user-xyz", "does not exist"), ("root", "is root")] {
            let config = SandboxConfig {
                user: name.into(),
                ..SandboxConfig::default()
            };
            let err = agent_host_user(&config).unwrap_err().to_string();
            assert!(err.contains(want), "{err}");
            assert!(err.contains("air-friends setup"), "{err}");
        }
    }
}
