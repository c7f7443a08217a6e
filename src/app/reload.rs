//! `air-friends reload`: checks the configuration file as `serve` would, then sends SIGHUP to
//! the daemon running on the configured database (the process holding its lock,
//! `store::owner::holder`). The daemon applies what can change live and logs the rest as
//! needing a restart (`daemon::on_sighup`); a file that fails the check is not sent at all.

use std::path::Path;
use std::process::ExitCode;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::config::ProcessEnv;
use crate::store::owner::holder;

/// Checks `config_path` and asks the daemon on its database to reload it.
pub(super) fn reload_main(config_path: &Path) -> ExitCode {
    let checked = match super::check::check_file(config_path, &ProcessEnv) {
        Ok(checked) => checked,
        Err(rejected) => {
            eprintln!(
                "air-friends: {} fails the check, so the daemon was not asked to reload it: {}",
                config_path.display(),
                rejected.error.issues().join("; ").replace('\n', " ")
            );
            return ExitCode::FAILURE;
        }
    };
    let database = checked.config.database_path();
    let pid = match holder(&database) {
        Ok(Some(pid)) => pid,
        Ok(None) => {
            eprintln!(
                "air-friends: no daemon runs on {} (nothing holds its lock); start it with `air-friends serve`",
                database.display()
            );
            return ExitCode::FAILURE;
        }
        Err(e) => {
            eprintln!("air-friends: {e}");
            return ExitCode::FAILURE;
        }
    };
    let Ok(raw) = i32::try_from(pid) else {
        eprintln!(
            "air-friends: the lock of {} names no pid",
            database.display()
        );
        return ExitCode::FAILURE;
    };
    match kill(Pid::from_raw(raw), Signal::SIGHUP) {
        Ok(()) => {
            println!(
                "asked the daemon (pid {pid}) to reload {}; its log says what changed (\"configuration reloaded\") and what needs a restart",
                config_path.display()
            );
            ExitCode::SUCCESS
        }
        Err(nix::errno::Errno::EPERM) => {
            eprintln!(
                "air-friends: not allowed to signal the daemon (pid {pid}): run this as its user or root, or `systemctl reload air-friends`"
            );
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("air-friends: cannot signal the daemon (pid {pid}): {e}");
            ExitCode::FAILURE
        }
    }
}
