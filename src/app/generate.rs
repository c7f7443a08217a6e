//! `air-friends completions SHELL` and `air-friends man`: shell completion scripts
//! (`clap_complete`) and the man pages (`clap_mangen`: the top-level page, and with
//! `--out-dir` one page per visible subcommand, which the top-level page's SEE ALSO names), all
//! generated from the same [`crate::cli::Cli`] definition that parses the command line, so they
//! never drift from it.

use std::io::Write;
use std::path::Path;
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

/// Writes the top-level page and one per visible subcommand (and nested subcommand,
/// `air-friends-skills-validate.1`) into `dir`, creating it.
pub(super) fn man_pages(dir: &Path) -> ExitCode {
    let written =
        std::fs::create_dir_all(dir).and_then(|()| clap_mangen::generate_to(Cli::command(), dir));
    match written {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!(
                "air-friends: cannot write the man pages into {}: {e}",
                dir.display()
            );
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
