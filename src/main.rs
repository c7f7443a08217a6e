//! The `air-friends` binary: parses the command line and hands over to the library.

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = air_friends::cli::Cli::parse();
    air_friends::app::run(cli)
}
