//! The seccomp filter every sandboxed agent runs under, loaded by `sandbox-init`
//! ([`super::lockdown`]) as the last step before it starts the agent — after it made its own
//! user namespace, which the filter then forbids.
//!
//! The sandbox's namespaces and mounts decide what an agent can *see*; this filter takes away
//! kernel interfaces a chat agent never needs and an attacker would use to reach beyond them.
//! Each refused call fails with `EPERM` (the program sees an ordinary error; nothing is killed
//! but a foreign-architecture call):
//!
//! * kernel keys (`add_key`, `keyctl`, `request_key`): keyrings are shared by uid and by the
//!   session keyring a service inherits, so a key stored by one sandbox could be read by the
//!   next;
//! * tracing and introspection of other processes (`ptrace`, `process_vm_readv`/`writev`,
//!   `kcmp`, `pidfd_getfd`), `perf_event_open`, `bpf`, `userfaultfd` (a kernel-exploit
//!   staple), `io_uring` stays (runtimes use it);
//! * mounts and namespaces (`mount`, `umount2`, `pivot_root`, `chroot`, the new mount API,
//!   `open_by_handle_at`, `setns`, and `unshare`/`clone` asking for a new namespace):
//!   bubblewrap has made every namespace before the filter is loaded;
//! * the machine itself: kernel modules, `kexec`, `reboot`, `swapon`/`swapoff`, `acct`,
//!   `quotactl`, the clock, `syslog`, `iopl`/`ioperm`, `vhangup`.
//!
//! `clone3` passes its flags in memory, out of a filter's reach, so it answers `ENOSYS`: the
//! C library then falls back to `clone`, whose flags are checked. On x86-64, calls of the x32
//! ABI (numbers with bit 30 set) are refused as a whole, and calls of another architecture
//! (32-bit `int 0x80`) kill the process (seccompiler's architecture check).
//!
//! The program is compiled by seccompiler (a kept crate, Firecracker's) with a short prelude of
//! our own for what its rule language cannot say (`clone3`, the x32 ABI).

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch, sock_filter,
};

/// Why the filter could not be built (an architecture seccompiler does not know).
#[derive(Debug, thiserror::Error)]
#[error("cannot build the agent's seccomp filter: {0}")]
pub struct FilterError(String);

/// A compiled filter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Filter {
    program: BpfProgram,
}

/// Calls refused outright.
const DENIED: &[libc::c_long] = &[
    libc::SYS_add_key,
    libc::SYS_keyctl,
    libc::SYS_request_key,
    libc::SYS_ptrace,
    libc::SYS_process_vm_readv,
    libc::SYS_process_vm_writev,
    libc::SYS_kcmp,
    libc::SYS_pidfd_getfd,
    libc::SYS_perf_event_open,
    libc::SYS_bpf,
    libc::SYS_userfaultfd,
    libc::SYS_mount,
    libc::SYS_umount2,
    libc::SYS_pivot_root,
    libc::SYS_chroot,
    libc::SYS_fsopen,
    libc::SYS_fsconfig,
    libc::SYS_fsmount,
    libc::SYS_fspick,
    libc::SYS_move_mount,
    libc::SYS_open_tree,
    libc::SYS_mount_setattr,
    libc::SYS_open_by_handle_at,
    libc::SYS_name_to_handle_at,
    libc::SYS_setns,
    libc::SYS_init_module,
    libc::SYS_finit_module,
    libc::SYS_delete_module,
    libc::SYS_kexec_load,
    libc::SYS_kexec_file_load,
    libc::SYS_reboot,
    libc::SYS_swapon,
    libc::SYS_swapoff,
    libc::SYS_acct,
    libc::SYS_quotactl,
    libc::SYS_syslog,
    libc::SYS_settimeofday,
    libc::SYS_clock_settime,
    libc::SYS_clock_adjtime,
    libc::SYS_adjtimex,
    libc::SYS_vhangup,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_iopl,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_ioperm,
];

/// `unshare` and `clone` flags that make a namespace: refused when any is set.
const NAMESPACE_FLAGS: &[libc::c_int] = &[
    libc::CLONE_NEWUSER,
    libc::CLONE_NEWNS,
    libc::CLONE_NEWNET,
    libc::CLONE_NEWPID,
    libc::CLONE_NEWIPC,
    libc::CLONE_NEWUTS,
    libc::CLONE_NEWCGROUP,
    0x80, // CLONE_NEWTIME
];

/// The x32 ABI's syscall number bit.
#[cfg(target_arch = "x86_64")]
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

impl Filter {
    /// Compiles the filter for this machine's architecture.
    pub fn build() -> Result<Self, FilterError> {
        let arch = TargetArch::try_from(std::env::consts::ARCH)
            .map_err(|e| FilterError(format!("{}: {e}", std::env::consts::ARCH)))?;
        let mut rules: BTreeMap<i64, Vec<SeccompRule>> =
            DENIED.iter().map(|&nr| (nr, Vec::new())).collect();
        // `unshare(flags)` and `clone(flags, ...)`: the flags are the first argument on every
        // architecture the filter is built for.
        for nr in [libc::SYS_unshare, libc::SYS_clone] {
            rules.insert(nr, namespace_rules()?);
        }
        let filter = SeccompFilter::new(
            rules,
            SeccompAction::Allow,
            SeccompAction::Errno(libc::EPERM as u32),
            arch,
        )
        .map_err(|e| FilterError(e.to_string()))?;
        let program: BpfProgram = filter
            .try_into()
            .map_err(|e: seccompiler::BackendError| FilterError(e.to_string()))?;
        Ok(Self {
            program: with_prelude(program),
        })
    }

    /// Loads the filter for this thread and every process it starts from now on (setting
    /// `no_new_privs`, which loading requires). Call while the process has one thread.
    pub fn apply(&self) -> Result<(), FilterError> {
        seccompiler::apply_filter(&self.program).map_err(|e| FilterError(e.to_string()))
    }

    /// The number of BPF instructions.
    pub fn len(&self) -> usize {
        self.program.len()
    }

    /// Never true: a filter has at least its architecture check.
    pub fn is_empty(&self) -> bool {
        self.program.is_empty()
    }
}

/// One rule per namespace flag: the call matches (and is refused) when that bit is set.
fn namespace_rules() -> Result<Vec<SeccompRule>, FilterError> {
    NAMESPACE_FLAGS
        .iter()
        .map(|&flag| {
            let flag = flag as u64;
            SeccompCondition::new(
                0,
                SeccompCmpArgLen::Qword,
                SeccompCmpOp::MaskedEq(flag),
                flag,
            )
            .and_then(|c| SeccompRule::new(vec![c]))
            .map_err(|e| FilterError(e.to_string()))
        })
        .collect()
}

/// `SECCOMP_RET_ERRNO | errno`.
fn ret_errno(errno: libc::c_int) -> u32 {
    0x0005_0000 | (errno as u32 & 0xffff)
}

/// Inserts, after seccompiler's architecture check (its first three instructions), the
/// checks it cannot express: `clone3` answers `ENOSYS`, and on x86-64 every x32 call `EPERM`.
/// Each inserted block loads the syscall number itself and falls through on no match, so the
/// jumps of the program after it are unchanged.
fn with_prelude(program: BpfProgram) -> BpfProgram {
    const LD_NR: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
    const JEQ: u16 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
    const RET: u16 = 0x06; // BPF_RET | BPF_K
    let stmt = |code, k| sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    };
    let jump = |code, k, jt, jf| sock_filter { code, jt, jf, k };
    let mut prelude = vec![
        stmt(LD_NR, 0), // seccomp_data.nr
        jump(JEQ, libc::SYS_clone3 as u32, 0, 1),
        stmt(RET, ret_errno(libc::ENOSYS)),
    ];
    #[cfg(target_arch = "x86_64")]
    {
        const JSET: u16 = 0x45; // BPF_JMP | BPF_JSET | BPF_K
        prelude.extend([
            jump(JSET, X32_SYSCALL_BIT, 0, 1),
            stmt(RET, ret_errno(libc::EPERM)),
        ]);
    }
    let split = program.len().min(3);
    let mut out = Vec::with_capacity(program.len() + prelude.len());
    out.extend_from_slice(&program[..split]);
    out.extend(prelude);
    out.extend_from_slice(&program[split..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_filter_builds_for_this_machine_and_fits_the_kernels_limit() {
        let filter = Filter::build().unwrap();
        // BPF_MAXINSNS.
        assert!(filter.len() > 10 && filter.len() < 4096, "{}", filter.len());
        // The architecture check comes first, then the prelude's syscall-number load.
        assert_eq!(filter.program[3].code, 0x20);
        assert_eq!(filter.program[4].k, libc::SYS_clone3 as u32);
    }
}
