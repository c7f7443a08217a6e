//! Where a command is found, the way a shell finds it: a name containing `/` is the path
//! itself, a bare name the first executable of that name in a `PATH`-style list. One rule for
//! every layer that looks for a program: `air-friends setup` (what is installed already), the
//! sandbox (bubblewrap) and the agent command's lookup (`setup::agent_lookup`, asked by
//! `check-config`, `/readyz` and the daemon).

use std::path::{Path, PathBuf};

/// Where `command` would be found: the path itself when it contains `/`, else the first
/// executable match in `path_var` (a `PATH`-style list).
pub fn resolve_command(command: &str, path_var: Option<&str>) -> Option<PathBuf> {
    if command.contains('/') {
        let p = PathBuf::from(command);
        return is_executable(&p).then_some(p);
    }
    std::env::split_paths(path_var?)
        .map(|dir| dir.join(command))
        .find(|candidate| is_executable(candidate))
}

/// Whether `path` is a regular file (after symbolic links) with an execute bit set.
pub fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolves_on_path_and_by_path() {
        assert!(resolve_command("sh", Some("/usr/bin:/bin")).is_some());
        assert!(resolve_command("/bin/sh", None).is_some());
        assert!(resolve_command("surely-not-a-command-xyz", Some("/usr/bin:/bin")).is_none());
        assert!(resolve_command("sh", None).is_none());
    }

    #[test]
    fn a_plain_file_is_not_executable() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("tool");
        std::fs::write(&f, "x").unwrap();
        assert!(resolve_command(f.to_str().unwrap(), None).is_none());
    }
}
