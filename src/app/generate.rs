//! `air-friends completions SHELL` and `air-friends man`: shell completion scripts
//! (`clap_complete`) and the man page (`clap_mangen`), both generated from the same
//! [`crate::cli::Cli`] definition that parses the command line, so they never drift from it.

use std::io::Write;
use std::process::ExitCode;

use clap::CommandFactory;
use clap_complete::Shell;

use crate::cli::Cli;

/// Prints the completion script for `shell` to stdout.
pub(super) fn completions(shell: Shell) -> ExitCode {
    let mut command = Cli::command();
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut command, "air-friends", &mut out);
    write_stdout(&out)
}

/// Prints the man page (roff, section 1) to stdout.
pub(super) fn man_page() -> ExitCode {
    let mut out = Vec::new();
    match clap_mangen::Man::new(Cli::command()).render(&mut out) {
        Ok(()) => write_stdout(&out),
        Err(e) => {
            eprintln!("air-friends: cannot render the man page: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Writes `bytes` to stdout; a closed pipe (`| head`) or full disk is exit 1 with one line.
fn write_stdout(bytes: &[u8]) -> ExitCode {
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(bytes).and_then(|()| stdout.flush()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("air-friends: cannot write to stdout: {e}");
            ExitCode::FAILURE
        }
    }
}
