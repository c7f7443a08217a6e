//! Where the agent command (`agent.command`) is found, beside the folder `air-friends setup`
//! installs OpenCode into: the one place the daemon, `check-config`, `/readyz` (the
//! `agent_command` check) and the real-OpenCode tests all ask, so they never disagree.

use std::path::PathBuf;

use super::{OPENCODE_COMMAND, opencode_executable, system_opencode_executable};
use crate::command_path::{is_executable, resolve_command};
use crate::config::EnvSource;

/// Where the agent command (`agent.command`) is found: a path containing `/` as given; a bare
/// name on `PATH`; and the bare default `opencode`, when it is not on `PATH`, in the folder
/// `air-friends setup` installs OpenCode into ([`opencode_executable`]), then in the one
/// `air-friends setup --system` installs it into ([`system_opencode_executable`]). Built
/// once from the environment, so every caller sees the same answer.
#[derive(Debug, Clone, Default)]
pub struct AgentLookup {
    /// `PATH` as the daemon sees it.
    path_var: Option<String>,
    /// The OpenCode executable `air-friends setup` installs (None without `HOME`).
    setup_executable: Option<PathBuf>,
    /// The one `air-friends setup --system` installs.
    system_executable: PathBuf,
}

impl AgentLookup {
    /// `PATH` as the daemon sees it.
    pub fn path_var(&self) -> Option<&str> {
        self.path_var.as_deref()
    }

    /// The lookup for `env`'s `PATH`, `XDG_DATA_HOME` and `HOME`.
    pub fn from_env(env: &impl EnvSource) -> Self {
        AgentLookup {
            path_var: env.var("PATH"),
            setup_executable: opencode_executable(env),
            system_executable: system_opencode_executable(),
        }
    }

    /// The executable `command` runs, if any.
    pub fn resolve(&self, command: &str) -> Option<PathBuf> {
        resolve_command(command, self.path_var.as_deref()).or_else(|| {
            if command != OPENCODE_COMMAND {
                return None;
            }
            self.setup_executable
                .iter()
                .chain([&self.system_executable])
                .find(|exe| is_executable(exe))
                .cloned()
        })
    }

    /// Why `command` was not found, for an error message: where it was looked for and, for
    /// OpenCode, the command that installs it.
    pub fn not_found(&self, command: &str) -> String {
        if command.contains('/') {
            return format!("{command:?} is not an executable file");
        }
        match &self.setup_executable {
            Some(exe) if command == OPENCODE_COMMAND => format!(
                "{command:?} was not found on PATH, at {} or at {}; run `air-friends setup` \
                 (`air-friends setup --system` for the service) or give the executable's full \
                 path",
                exe.display(),
                self.system_executable.display()
            ),
            _ => format!(
                "{command:?} was not found on PATH; install it or give the executable's full path"
            ),
        }
    }
}

/// Ok when `command` resolves through `lookup` (the `agent_command` readiness check).
pub async fn command_resolves(command: String, lookup: AgentLookup) -> Result<(), String> {
    tokio::task::spawn_blocking(move || {
        lookup
            .resolve(&command)
            .map(drop)
            .ok_or_else(|| format!("agent command {}", lookup.not_found(&command)))
    })
    .await
    .map_err(|e| format!("check failed: {e}"))?
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn lookup_with_setup_folder(home: &Path, path_var: &str) -> AgentLookup {
        let home = home.display().to_string();
        let path_var = path_var.to_owned();
        AgentLookup::from_env(&move |name: &str| match name {
            "HOME" => Some(home.clone()),
            "PATH" => Some(path_var.clone()),
            _ => None,
        })
    }

    #[test]
    fn the_default_opencode_is_found_in_the_setup_folder_after_path() {
        let home = tempfile::tempdir().unwrap();
        let bin = tempfile::tempdir().unwrap();
        let path_var = bin.path().display().to_string();
        let lookup = lookup_with_setup_folder(home.path(), &path_var);
        let installed = opencode_executable(&|name: &str| {
            (name == "HOME").then(|| home.path().display().to_string())
        })
        .unwrap();
        assert!(lookup.resolve("opencode").is_none());
        assert!(
            lookup
                .not_found("opencode")
                .contains("run `air-friends setup`"),
            "{}",
            lookup.not_found("opencode")
        );

        std::fs::create_dir_all(installed.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink("/bin/sh", &installed).unwrap();
        assert_eq!(lookup.resolve("opencode"), Some(installed));
        // Only the bare default name is looked for there.
        assert!(lookup.resolve("other-agent").is_none());
        // PATH comes first.
        let on_path = bin.path().join("opencode");
        std::os::unix::fs::symlink("/bin/sh", &on_path).unwrap();
        assert_eq!(lookup.resolve("opencode"), Some(on_path));
    }
}
