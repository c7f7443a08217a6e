//! `air-friends admin-link`: asks the running daemon, over its control socket (`app::control`),
//! for a one-time login link to the operator console (`admin`, docs/CONSOLE.md) and prints it.
//! The daemon mints it, so only someone who may use the control socket (the daemon's user, or
//! root) gets one.

use std::path::Path;
use std::process::ExitCode;

use anyhow::Context;

use super::control::request_admin_link;
use crate::store::owner::holder;

/// Prints a login link for the daemon of the configuration at `config_path`.
pub(super) fn admin_link_main(config_path: &Path) -> ExitCode {
    super::run_with_config(
        config_path,
        crate::observability::LogTarget::Stderr,
        super::quiet,
        |config, _live_tokens| async move {
            anyhow::ensure!(
                config.admin.enabled,
                "the operator console is off: set admin.enabled: true and restart the daemon"
            );
            let database = config.database_path();
            let pid = holder(&database)?.with_context(|| {
                format!(
                    "the daemon is not running on {}: the console is served by it (start `air-friends serve`)",
                    database.display()
                )
            })?;
            let (url, minutes) = request_admin_link(&database)
                .await
                .with_context(|| format!("the daemon (pid {pid}) gave no link"))?;
            println!("{url}");
            eprintln!("Open it in a browser within {minutes} minutes; it works once.");
            Ok(())
        },
    )
}
