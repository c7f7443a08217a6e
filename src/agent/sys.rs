//! The system calls no safe wrapper covers, in one audited place (the crate denies unsafe code
//! everywhere else): the capability sets `sandbox-init` empties and the session keyrings it
//! replaces and probes ([`super::lockdown`]), and the cgroup an agent joins before it executes
//! ([`super::sandbox::cgroup`]).
#![allow(unsafe_code)]

/// `KEYCTL_JOIN_SESSION_KEYRING` with no name: this process gets a new, empty session keyring
/// (not the one it inherited), which what it starts inherits.
pub fn join_new_session_keyring() -> Result<(), nix::Error> {
    // SAFETY: keyctl with integer arguments only (a null name).
    let id = unsafe { libc::syscall(libc::SYS_keyctl, 1 as libc::c_long, 0 as libc::c_long) };
    if id < 0 {
        Err(nix::Error::last())
    } else {
        Ok(())
    }
}

/// `KEYCTL_GET_KEYRING_ID` of the session keyring (without creating one).
pub fn session_keyring_id() -> Result<i64, nix::Error> {
    // SAFETY: keyctl with integer arguments only.
    let id = unsafe {
        libc::syscall(
            libc::SYS_keyctl,
            0 as libc::c_long,
            -3 as libc::c_long,
            0 as libc::c_long,
        )
    };
    if id < 0 {
        Err(nix::Error::last())
    } else {
        Ok(id)
    }
}

/// Drops capabilities `0..=last` from this thread's bounding set (`PR_CAPBSET_DROP`; one the
/// kernel does not know is skipped).
pub fn clear_bounding_set(last: u32) -> Result<(), nix::Error> {
    for cap in 0..=libc::c_ulong::from(last) {
        // SAFETY: prctl with PR_CAPBSET_DROP takes the capability number and no pointer.
        let rc = unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) };
        if rc != 0 {
            let err = nix::Error::last();
            if err != nix::Error::EINVAL {
                return Err(err);
            }
        }
    }
    Ok(())
}

/// Empties this thread's permitted, effective and inheritable capability sets (`capset`).
pub fn clear_capabilities() -> Result<(), nix::Error> {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: libc::c_int,
    }
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    // _LINUX_CAPABILITY_VERSION_3: two data words (64 capabilities).
    let mut header = Header {
        version: 0x2008_0522,
        pid: 0,
    };
    let data = [Data {
        effective: 0,
        permitted: 0,
        inheritable: 0,
    }; 2];
    // SAFETY: the header and the two data words are the layout capset(2) reads for version 3.
    let rc = unsafe { libc::syscall(libc::SYS_capset, &mut header as *mut Header, data.as_ptr()) };
    if rc != 0 {
        return Err(nix::Error::last());
    }
    Ok(())
}

/// Makes the process `command` starts join the cgroups whose open `cgroup.procs` files are
/// `procs` (writing `0` moves the writer), between fork and exec: everything it will ever run
/// starts inside them. A failed join fails the spawn. The files must stay open until the spawn
/// returns.
pub fn join_cgroups_at_exec(command: &mut tokio::process::Command, procs: Vec<std::os::fd::RawFd>) {
    let join = move || -> std::io::Result<()> {
        for fd in &procs {
            // SAFETY: write(2) of a static one-byte buffer to a descriptor the parent keeps
            // open; async-signal-safe and allocation-free, as a forked child requires.
            let n = unsafe { libc::write(*fd, b"0".as_ptr().cast(), 1) };
            if n != 1 {
                return Err(std::io::Error::last_os_error());
            }
        }
        Ok(())
    };
    // SAFETY: the closure only calls write(2) (see above); it neither allocates nor locks.
    unsafe {
        command.pre_exec(join);
    }
}
