//! Command-line interface (clap derive).

use std::path::PathBuf;

use clap::{Parser, Subcommand};

/// air-friends: an ACP coding agent as a chat companion on Discord and Misskey.
#[derive(Debug, Parser)]
#[command(name = "air-friends", version, about, long_about = None)]
pub struct Cli {
    /// Configuration file.
    #[arg(
        long,
        short = 'c',
        global = true,
        env = "AIR_FRIENDS_CONFIG",
        default_value = "./config.yaml"
    )]
    pub config: PathBuf,

    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the daemon: connect to the platforms and answer messages until SIGTERM/SIGINT.
    Serve,
    /// Validate the configuration file and print the effective configuration (secrets
    /// masked). Exits 1 when it has errors.
    CheckConfig,
    /// Print the documented default configuration (a starting point for config.yaml).
    PrintDefaultConfig,
}
