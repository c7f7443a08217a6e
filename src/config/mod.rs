//! Configuration: typed sections of `config.yaml`, loading with `${VAR}` interpolation and
//! environment overrides, and validation that names the exact key of every problem. The strict
//! check that adds the machine's side (paths, skills, the agent command), shared by
//! `check-config` and `serve`, builds on the lenient load (`Loaded`) and lives with the commands
//! (`app::check`).

mod env_file;
mod load;
mod model;
pub mod paths;
mod quiet_hours;
mod secret;
mod validate;

use std::fmt;
use std::path::PathBuf;

pub use load::{ENV_OVERRIDES, EnvKind, EnvSource, ProcessEnv, default_path, load_file, load_str};
pub(crate) use load::{Loaded, base_of, closest, load_lenient, read_file};
pub use model::*;
pub use quiet_hours::QuietHours;
pub use secret::{MASK, Secret, known_secret_values, masked_yaml};
pub use validate::{is_skill_name, parse_host};

/// The documented example configuration; `print-default-config` prints it.
pub const EXAMPLE_YAML: &str = include_str!("../../config.example.yaml");

/// The data folder of a system install (the package's, `setup --system`'s).
pub const SYSTEM_DATA_DIR: &str = "/var/lib/air-friends";

/// [`EXAMPLE_YAML`], or with `system` the system install's flavour: the same text with the
/// data in [`SYSTEM_DATA_DIR`] (the package's `/etc/air-friends/config.yaml`).
pub fn example_yaml(system: bool) -> String {
    if system {
        EXAMPLE_YAML.replacen(
            "  repoPath: ./data\n",
            &format!("  repoPath: {SYSTEM_DATA_DIR}\n"),
            1,
        )
    } else {
        EXAMPLE_YAML.to_owned()
    }
}

/// One problem with the configuration, at a key path such as `platforms.misskey.host`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigIssue {
    /// Dotted key path (sequence items by index: `agent.args.0`).
    pub path: String,
    /// What is wrong and how to fix it.
    pub message: String,
}

impl ConfigIssue {
    /// A problem at `path`.
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for ConfigIssue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// Why a configuration could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file does not exist.
    #[error(
        "config file {} not found (create one with `air-friends print-default-config > config.yaml`)",
        path.display()
    )]
    NotFound {
        /// The path that was tried.
        path: PathBuf,
    },
    /// The file exists but could not be read.
    #[error("cannot read config file {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not valid YAML.
    #[error("config is not valid YAML: {message}")]
    Syntax {
        /// The parser's message, with line and column.
        message: String,
    },
    /// Unknown keys, wrong types, unset variables or failed checks, each with its key path.
    #[error("{}", join_issues(.0))]
    Problems(Vec<ConfigIssue>),
}

fn join_issues(issues: &[ConfigIssue]) -> String {
    issues
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("\n")
}

impl ConfigError {
    /// The individual problems (one for the I/O and syntax variants).
    pub fn issues(&self) -> Vec<String> {
        match self {
            ConfigError::Problems(list) => list.iter().map(ToString::to_string).collect(),
            other => vec![other.to_string()],
        }
    }
}

#[cfg(test)]
mod tests;
