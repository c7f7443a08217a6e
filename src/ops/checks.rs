//! Built-in readiness checks: the database location is writable, the agent command exists.

use std::path::{Path, PathBuf};

/// Ok when the database file (or, before it exists, its folder) can be written.
/// Blocking file-system work runs on the blocking pool.
pub async fn database_writable(db_path: PathBuf) -> Result<(), String> {
    tokio::task::spawn_blocking(move || check_writable(&db_path))
        .await
        .map_err(|e| format!("check failed: {e}"))?
}

fn check_writable(db_path: &Path) -> Result<(), String> {
    if db_path.exists() {
        return std::fs::OpenOptions::new()
            .append(true)
            .open(db_path)
            .map(drop)
            .map_err(|e| format!("{} is not writable: {e}", db_path.display()));
    }
    let dir = match db_path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    if !dir.is_dir() {
        return Err(format!("folder {} does not exist", dir.display()));
    }
    tempfile::tempfile_in(&dir)
        .map(drop)
        .map_err(|e| format!("folder {} is not writable: {e}", dir.display()))
}

/// Ok when `command` resolves to an executable file (directly when it contains a `/`, else on
/// `PATH`).
pub async fn command_resolves(command: String, path_var: Option<String>) -> Result<(), String> {
    tokio::task::spawn_blocking(move || {
        resolve_command(&command, path_var.as_deref())
            .map(drop)
            .ok_or_else(|| format!("agent command {command:?} not found on PATH"))
    })
    .await
    .map_err(|e| format!("check failed: {e}"))?
}

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

fn is_executable(path: &Path) -> bool {
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

    #[tokio::test]
    async fn database_checks() {
        let dir = tempfile::tempdir().unwrap();
        assert!(database_writable(dir.path().join("a.db")).await.is_ok());
        let missing = dir.path().join("no/such/dir/a.db");
        let err = database_writable(missing).await.unwrap_err();
        assert!(err.contains("does not exist"), "{err}");
    }
}
