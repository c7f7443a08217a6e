//! Where the configuration's folders and files are, so the binary runs the same from any
//! working directory (systemd starts it from `/`):
//! * a relative path in a configuration file is relative to that file's folder, never the
//!   working directory (`workspace.repoPath`, `storage.path`, `skillApi.socketDir`,
//!   `agent.skillsDir`, `agent.configDir`, `agent.sandbox.readOnlyPaths`, `prompts.dir`,
//!   `places[].persona`);
//! * `agent.skillsDir`, `agent.configDir` and `prompts.dir` left unset are the shipped
//!   defaults' folders (`crate::shipped`), written from the binary when needed. An operator's
//!   own folder, when set, replaces the shipped one and is never written.

use std::path::{Component, Path, PathBuf};

use super::{Config, ConfigIssue, EnvSource};
use crate::shipped::{Origin, Shipped};

/// The shipped folder for `env`'s `XDG_DATA_HOME` and `HOME` ([`crate::shipped::locate`]);
/// without `HOME` (a root service, a cleared environment), the effective user's home from the
/// password database.
pub fn shipped_for(env: &impl EnvSource) -> Shipped {
    let home = env.var("HOME").filter(|h| !h.is_empty()).or_else(|| {
        let user = nix::unistd::User::from_uid(nix::unistd::geteuid()).ok()??;
        Some(user.dir.to_string_lossy().into_owned())
    });
    crate::shipped::locate(env.var("XDG_DATA_HOME").as_deref(), home.as_deref())
}

/// The three keys whose unset value is a shipped folder: (key, the folder as configured, the
/// shipped folder).
pub fn shipped_keys<'a>(
    config: &'a Config,
    shipped: &Shipped,
) -> [(&'static str, &'a Path, PathBuf); 3] {
    [
        (
            "agent.skillsDir",
            &config.agent.skills_dir,
            shipped.skills(),
        ),
        (
            "agent.configDir",
            &config.agent.config_dir,
            shipped.agent_config(),
        ),
        ("prompts.dir", &config.prompts.dir, shipped.prompts()),
    ]
}

/// Makes every path of `config` usable from any working directory: unset shipped folders
/// point into `shipped`, and relative paths are joined to `base` (the configuration file's
/// folder; None keeps them as written, for text that came from no file).
pub fn resolve(config: &mut Config, base: Option<&Path>, shipped: &Shipped) {
    let fill = |p: &mut PathBuf, default: PathBuf| {
        if p.as_os_str().is_empty() {
            *p = default;
        }
    };
    fill(&mut config.agent.skills_dir, shipped.skills());
    fill(&mut config.agent.config_dir, shipped.agent_config());
    fill(&mut config.prompts.dir, shipped.prompts());
    let Some(base) = base else {
        return;
    };
    let rebase = |p: &mut PathBuf| {
        if p.is_relative() && !p.as_os_str().is_empty() {
            *p = joined(base, p);
        }
    };
    rebase(&mut config.workspace.repo_path);
    if let Some(p) = config.storage.path.as_mut() {
        rebase(p);
    }
    if let Some(p) = config.skill_api.socket_dir.as_mut() {
        rebase(p);
    }
    rebase(&mut config.agent.skills_dir);
    rebase(&mut config.agent.config_dir);
    rebase(&mut config.prompts.dir);
    for p in &mut config.agent.sandbox.read_only_paths {
        rebase(p);
    }
    for p in config.places.iter_mut().filter_map(|r| r.persona.as_mut()) {
        rebase(p);
    }
}

/// Writes the shipped defaults when `config` uses them and they live in the user's data
/// folder; a folder that cannot be written is an issue at the first key that uses it. (No
/// folder at all, [`Origin::Nowhere`], is left to `check-config`, which finds the folders
/// missing and says why.)
pub fn ensure_shipped(config: &Config, shipped: &Shipped) -> Option<ConfigIssue> {
    let (key, ..) = shipped_keys(config, shipped)
        .into_iter()
        .find(|(_, configured, default)| configured == default)?;
    if shipped.origin != Origin::UserData {
        return None;
    }
    shipped
        .ensure()
        .err()
        .map(|e| ConfigIssue::new(key, e.to_string()))
}

/// Where a folder of [`shipped_keys`] comes from, for `check-config`.
pub fn provenance(configured: &Path, default: &Path, shipped: &Shipped) -> String {
    if configured != default {
        return "set in the configuration".to_owned();
    }
    match shipped.origin {
        Origin::Package => "shipped with air-friends (the package's folder)".to_owned(),
        Origin::UserData => {
            "shipped with air-friends (written from the binary to your data folder)".to_owned()
        }
        Origin::Nowhere => "shipped with air-friends, but missing (no home folder)".to_owned(),
    }
}

/// `rel` under `base`, without the `./` segments a configuration usually writes.
fn joined(base: &Path, rel: &Path) -> PathBuf {
    let mut out = base.to_path_buf();
    for c in rel.components() {
        match c {
            Component::CurDir => {}
            other => out.push(other.as_os_str()),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shipped() -> Shipped {
        Shipped {
            dir: PathBuf::from("/usr/share/air-friends"),
            origin: Origin::Package,
        }
    }

    #[test]
    fn relative_paths_are_relative_to_the_configuration_files_folder() {
        let mut config = Config::default();
        config.workspace.repo_path = PathBuf::from("./data");
        config.storage.path = Some(PathBuf::from("db/air-friends.db"));
        config.prompts.dir = PathBuf::from("my-prompts");
        config.agent.sandbox.read_only_paths = vec!["opt".into(), "/abs".into()];
        resolve(&mut config, Some(Path::new("/etc/air-friends")), &shipped());
        assert_eq!(
            config.workspace.repo_path,
            PathBuf::from("/etc/air-friends/data")
        );
        assert_eq!(
            config.storage.path,
            Some(PathBuf::from("/etc/air-friends/db/air-friends.db"))
        );
        assert_eq!(
            config.prompts.dir,
            PathBuf::from("/etc/air-friends/my-prompts")
        );
        assert_eq!(
            config.agent.sandbox.read_only_paths,
            vec![PathBuf::from("/etc/air-friends/opt"), PathBuf::from("/abs")]
        );
        // Unset: the shipped folders, whatever the base.
        assert_eq!(
            config.agent.skills_dir,
            PathBuf::from("/usr/share/air-friends/skills")
        );
        assert_eq!(
            config.agent.config_dir,
            PathBuf::from("/usr/share/air-friends/agent-config")
        );
    }

    #[test]
    fn provenance_names_the_configuration_or_the_shipped_folder() {
        let s = shipped();
        let mut config = Config::default();
        config.prompts.dir = PathBuf::from("/etc/air-friends/prompts");
        resolve(&mut config, None, &s);
        let said: Vec<String> = shipped_keys(&config, &s)
            .iter()
            .map(|(key, configured, default)| {
                format!("{key}: {}", provenance(configured, default, &s))
            })
            .collect();
        assert_eq!(
            said,
            [
                "agent.skillsDir: shipped with air-friends (the package's folder)",
                "agent.configDir: shipped with air-friends (the package's folder)",
                "prompts.dir: set in the configuration",
            ]
        );
    }
}
