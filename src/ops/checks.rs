//! Built-in readiness checks: the database location is writable. (Whether the agent command
//! exists is asked of `setup::agent_lookup`, which knows where `air-friends setup` puts it.)

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

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn database_checks() {
        let dir = tempfile::tempdir().unwrap();
        assert!(database_writable(dir.path().join("a.db")).await.is_ok());
        let missing = dir.path().join("no/such/dir/a.db");
        let err = database_writable(missing).await.unwrap_err();
        assert!(err.contains("does not exist"), "{err}");
    }
}
