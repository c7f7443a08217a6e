//! The shipped systemd unit (`contrib/systemd/air-friends.service`) must keep the agent sandbox
//! working: the daemon runs as an unprivileged user there, so bubblewrap works through a user
//! namespace, and the kernel then allows a fresh `/proc` only while the service's own `/proc`
//! is fully visible. These tests read the unit for the settings that break that, and reproduce
//! the kernel's behaviour with the real bubblewrap: a private mount namespace shaped like the
//! one systemd builds for each setting, and bubblewrap started as an unprivileged user inside.

use std::path::Path;
use std::process::Command;

fn unit() -> String {
    std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("contrib/systemd/air-friends.service"),
    )
    .unwrap()
}

/// The value of `key=` in the unit (last one wins, as in systemd), if set.
fn setting(unit: &str, key: &str) -> Option<String> {
    unit.lines()
        .filter_map(|l| l.trim().strip_prefix(&format!("{key}=")))
        .next_back()
        .map(str::to_owned)
}

#[test]
fn the_unit_allows_what_the_sandbox_needs_and_nothing_that_breaks_it() {
    let unit = unit();
    for breaking in ["ProtectKernelTunables", "ProtectKernelLogs", "PrivateUsers"] {
        let value = setting(&unit, breaking);
        assert!(
            matches!(value.as_deref(), None | Some("false" | "no")),
            "{breaking}={value:?} stops bubblewrap from starting agents"
        );
    }
    assert_ne!(setting(&unit, "ProcSubset").as_deref(), Some("pid"));
    let namespaces = setting(&unit, "RestrictNamespaces").expect("RestrictNamespaces is set");
    for ns in ["user", "pid", "ipc", "uts", "mnt", "net"] {
        assert!(
            namespaces.split_whitespace().any(|n| n == ns),
            "RestrictNamespaces lacks {ns}"
        );
    }
    let families = setting(&unit, "RestrictAddressFamilies").expect("families are restricted");
    for family in ["AF_UNIX", "AF_INET", "AF_NETLINK"] {
        assert!(
            families.contains(family),
            "RestrictAddressFamilies lacks {family}"
        );
    }
    let filter = setting(&unit, "SystemCallFilter").expect("a system call filter");
    assert!(
        filter.contains("@mount"),
        "bubblewrap needs mount and pivot_root"
    );
    assert_eq!(setting(&unit, "ProtectProc").as_deref(), Some("invisible"));
    // The agents' cgroups: the service's group is handed to the daemon, which starts in the
    // leaf the code expects and may write its subtree.
    let delegated = setting(&unit, "Delegate").expect("Delegate is set");
    for controller in ["memory", "pids", "cpu"] {
        assert!(
            delegated.split_whitespace().any(|c| c == controller),
            "Delegate lacks {controller}"
        );
    }
    assert_eq!(
        setting(&unit, "DelegateSubgroup").as_deref(),
        Some(air_friends::agent::sandbox::cgroup::DAEMON_LEAF)
    );
    assert!(
        !matches!(
            setting(&unit, "ProtectControlGroups").as_deref(),
            Some("true" | "yes" | "strict")
        ),
        "a read-only cgroup file system leaves agents' memory unbounded"
    );
}

/// Runs bubblewrap as an unprivileged user (uid 65534) in a private mount namespace whose
/// `/proc` was prepared by `prepare` (shell, run as root), like systemd prepares a service's.
/// Returns bubblewrap's output; only as root can the namespace be shaped.
fn sandbox_under(prepare: &str) -> std::process::Output {
    let script = format!(
        "set -e; {prepare}; exec setpriv --reuid=65534 --regid=65534 --clear-groups -- \
         bwrap --unshare-pid --unshare-net --ro-bind /usr /usr --symlink usr/bin /bin \
         --symlink usr/lib /lib --symlink usr/lib64 /lib64 --proc /proc --dev /dev \
         -- /bin/sh -c 'echo sandbox-started'"
    );
    Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c", &script])
        .output()
        .unwrap()
}

fn is_root() -> bool {
    std::os::unix::fs::MetadataExt::uid(&std::fs::metadata("/proc/self").unwrap()) == 0
}

/// Needs root (it shapes a mount namespace), so it is ignored in a plain `cargo test`;
/// `.ci/run` runs it as root with `--ignored`.
#[test]
#[ignore = "needs root to shape a mount namespace; .ci/run runs it with --ignored"]
fn protect_proc_invisible_keeps_the_sandbox_and_tunables_or_kernel_logs_would_break_it() {
    assert!(
        is_root(),
        "run as root: cargo test --test systemd_unit -- --ignored"
    );
    let started = |out: &std::process::Output| {
        String::from_utf8_lossy(&out.stdout).contains("sandbox-started")
    };
    // ProtectProc=invisible: /proc mounted with hidepid=invisible.
    let invisible = sandbox_under("mount -t proc -o hidepid=invisible proc /proc");
    assert!(
        started(&invisible),
        "{:?}",
        String::from_utf8_lossy(&invisible.stderr)
    );
    // ProtectKernelTunables=: /proc/sys bound read-only over itself.
    let tunables = sandbox_under(
        "mount -t proc proc /proc; mount --bind /proc/sys /proc/sys; \
         mount -o remount,bind,ro /proc/sys",
    );
    assert!(
        !started(&tunables),
        "expected bubblewrap to be refused /proc"
    );
    // ProtectKernelLogs=: /proc/kmsg masked.
    let logs = sandbox_under("mount -t proc proc /proc; mount --bind /dev/null /proc/kmsg");
    assert!(!started(&logs), "expected bubblewrap to be refused /proc");
    // ProcSubset=pid: /proc/sys/kernel/overflowuid is gone.
    let subset = sandbox_under("mount -t proc -o subset=pid proc /proc");
    assert!(
        !started(&subset),
        "expected bubblewrap to fail without /proc/sys"
    );
}
