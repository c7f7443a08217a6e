//! `air-friends backup FILE [--force]`: copies the configured database with
//! [`crate::store::backup`] and prints what was written. Runs beside a live daemon; needs no
//! runtime and starts no logging (one line on stderr on failure, exit 1).

use std::path::Path;
use std::process::ExitCode;

use crate::store::backup::{BackupError, backup_database};

use super::{ConfigCheck, load_config};

/// Backs up the database named by the configuration at `config_path` to `dest`.
pub(super) fn backup_main(config_path: &Path, dest: &Path, force: bool) -> ExitCode {
    let config = match load_config(config_path, ConfigCheck::File) {
        Ok((config, _warnings)) => config,
        Err(code) => return code,
    };
    let source = config.database_path();
    match backup_database(&source, dest, force) {
        Ok(report) => {
            println!(
                "backed up {} to {}: {} bytes, schema version {}",
                source.display(),
                report.path.display(),
                report.bytes,
                report.schema_version
            );
            ExitCode::SUCCESS
        }
        Err(BackupError::Exists(path)) => {
            eprintln!(
                "air-friends: {} already exists; pass --force to replace it",
                path.display()
            );
            ExitCode::FAILURE
        }
        Err(e @ BackupError::NoDatabase(_)) => {
            eprintln!(
                "air-friends: {e} (storage.path, else workspace.repoPath/air-friends.db, in {})",
                config_path.display()
            );
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("air-friends: backup failed: {e}");
            ExitCode::FAILURE
        }
    }
}
