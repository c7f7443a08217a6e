//! `air-friends forget-user PLATFORM/USER [--now]`: erases everything kept about one user
//! (`privacy::Eraser`) and prints what was removed, as counts. With the daemon running on the
//! configured database it asks the daemon, through its control socket (`app::control`), which
//! stops the user's agents first and refuses while one of their turns runs (unless `--now`);
//! without it, it erases directly, holding the database's lock so no daemon starts meanwhile.
//! One line on stderr on failure, exit 1.

use std::fmt::Write as _;
use std::path::Path;
use std::process::ExitCode;

use anyhow::Context;

use super::control::{ForgetUserRequest, request_forget_user};
use crate::conversation::workspace::Workspaces;
use crate::observability::LogTarget;
use crate::platform::PlatformKind;
use crate::privacy::{Eraser, ForgetReport};
use crate::store::Store;
use crate::store::erasure::RequestedBy;
use crate::store::owner::{OwnerLock, holder};

/// Erases `user` (`platform/userId`) of the configuration at `config_path`.
pub(super) fn forget_user_main(config_path: &Path, user: &str, now: bool) -> ExitCode {
    let user = user.to_owned();
    super::run_with_config(
        config_path,
        LogTarget::Stderr,
        super::quiet,
        move |config, _live_tokens| async move {
            let (platform, id) = parse_user(&user)?;
            let database = config.database_path();
            if !database.exists() {
                anyhow::bail!("no database at {}: nothing is kept", database.display());
            }
            let report = match holder(&database)? {
                Some(pid) => {
                    let request = ForgetUserRequest {
                        platform: platform.as_str().to_owned(),
                        user: id,
                        now,
                    };
                    request_forget_user(&database, &request)
                        .await
                        .with_context(|| format!("the daemon (pid {pid}) did not erase {user}"))?
                }
                None => {
                    let owner = OwnerLock::acquire(&database)?;
                    let store = Store::open(&database).await?;
                    let eraser = Eraser::new(
                        store.clone(),
                        Workspaces::new(&super::daemon::workspaces_root(&config)),
                        &config.workspace.repo_path,
                    );
                    let result = eraser
                        .forget_user(platform, &id, now, RequestedBy::Operator)
                        .await;
                    store.close().await?;
                    owner.release();
                    result.with_context(|| format!("could not erase {user}"))?
                }
            };
            print!("{}", describe(&report));
            Ok(())
        },
    )
}

/// `platform/userId` → its parts.
fn parse_user(user: &str) -> anyhow::Result<(PlatformKind, String)> {
    let (platform, id) = user
        .split_once('/')
        .with_context(|| format!("{user:?} is not PLATFORM/USER (e.g. discord/123456789)"))?;
    let platform = platform
        .parse::<PlatformKind>()
        .map_err(|_| anyhow::anyhow!("unknown platform {platform:?} (discord or misskey)"))?;
    Ok((platform, id.to_owned()))
}

/// The report as the command prints it.
fn describe(r: &ForgetReport) -> String {
    let e = &r.erased;
    let mut out = String::new();
    let _ = writeln!(out, "erased {}:", r.user);
    let rows = [
        ("memories", e.memories),
        ("memory changes", e.memory_patches),
        ("embedding vectors", e.vectors),
        ("reminders", e.reminders),
        ("usage records", e.usage_rows),
        ("maintenance runs", e.maintenance_runs),
        ("inbox messages", e.inbox_messages),
        ("conversation states", e.conversations),
        ("files", r.files),
        ("bytes of files", r.bytes),
    ];
    for (what, n) in rows {
        let _ = writeln!(out, "  {n:>8} {what}");
    }
    if r.turns_stopped + r.agents_stopped > 0 {
        let _ = writeln!(
            out,
            "  stopped first: {} running turn(s), {} warm agent(s)",
            r.turns_stopped, r.agents_stopped
        );
    }
    let _ = writeln!(
        out,
        "  database file {}",
        if r.vacuumed {
            "rebuilt (VACUUM): nothing erased stays in its free pages"
        } else {
            "NOT rebuilt (see the log): the rows are gone and overwritten, free pages kept"
        }
    );
    let _ = writeln!(
        out,
        "  recorded in privacy_log as subject {} (backups keep the data until they are rotated)",
        r.record_subject
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_user_is_platform_slash_id() {
        assert_eq!(
            parse_user("discord/123").unwrap(),
            (PlatformKind::Discord, "123".to_owned())
        );
        assert!(parse_user("123").is_err());
        assert!(parse_user("slack/1").is_err());
    }
}
