//! `air-friends restore FILE`: puts a backup in place of the configured database with
//! [`crate::store::restore`] and prints what happened. Needs no runtime and starts no logging
//! (one line on stderr on failure, exit 1).

use std::path::Path;
use std::process::ExitCode;

use crate::store::restore::restore_database;

use super::{ConfigCheck, load_config};

/// Restores `backup` as the database named by the configuration at `config_path`.
pub(super) fn restore_main(config_path: &Path, backup: &Path) -> ExitCode {
    let config = match load_config(config_path, ConfigCheck::File) {
        Ok((config, _warnings)) => config,
        Err(code) => return code,
    };
    let database = config.database_path();
    match restore_database(backup, &database) {
        Ok(report) => {
            print!(
                "restored {} to {}: {} bytes, schema version {}",
                backup.display(),
                database.display(),
                report.bytes,
                report.schema_version
            );
            match report.aside {
                Some(aside) => println!("; the previous database is kept at {}", aside.display()),
                None => println!(),
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("air-friends: restore failed: {e}");
            ExitCode::FAILURE
        }
    }
}
