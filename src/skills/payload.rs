//! The payload-file contract (`docs/SKILLS.md`, "Payload files"): free text reaches a skill
//! only through a file the agent wrote with its file tool into the session's staging directory
//! `{workspace}/tmp/{sessionId}/`.
//!
//! The client resolves the given path against its cwd and opens it through
//! [`crate::confine`]: canonical (symlinks resolved) and strictly inside the staging directory
//! by whole components — `tmp/sess10` is not inside `tmp/sess1` — and only a regular file with
//! a single hard link, opened without blocking (a FIFO is refused, never waited on) and checked
//! before any byte is read, at most [`MAX_PAYLOAD_BYTES`], as UTF-8. **Deletion rule:** the file
//! is deleted by the client only after the Skill API answered 2xx; after any error it is kept,
//! so a corrected retry can use it again.

use std::path::{Path, PathBuf};

use super::client::{ClientError, ErrorCode};
use crate::confine::{Confine, ConfineError};

/// Largest payload file the client reads (the Skill API's body limit is 1 MiB).
pub const MAX_PAYLOAD_BYTES: u64 = 1024 * 1024;

/// A payload file that was read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Payload {
    /// The canonical path (deleted after success).
    pub path: PathBuf,
    /// The file's text, exactly as written.
    pub text: String,
}

/// The staging directory of a session: `{workspace}/tmp/{session_id}`.
pub fn staging_dir(workspace: &Path, session_id: &str) -> PathBuf {
    workspace.join("tmp").join(session_id)
}

/// Resolves, checks and reads the payload file `given` (as typed after `--<flag>`).
/// `example` is the corrected invocation appended to error messages.
pub fn read_payload(
    flag: &str,
    given: &str,
    cwd: &Path,
    workspace: &Path,
    session_id: &str,
    example: &str,
) -> Result<Payload, ClientError> {
    let workspace = absolute(workspace, cwd);
    let req = Request {
        flag,
        given,
        stem: flag.trim_end_matches("-file"),
        staging: staging_dir(&workspace, session_id),
        candidate: absolute(Path::new(given), cwd),
        example,
    };
    if given.trim().is_empty() {
        return Err(req.err(
            ErrorCode::MissingPayload,
            format!(
                "--{flag} is empty: write the text to $TMPDIR/$SESSION_ID/{}.md first and pass that path.",
                req.stem
            ),
        ));
    }
    let opened =
        Confine::new(&req.staging).and_then(|c| c.open_read(&req.candidate, MAX_PAYLOAD_BYTES));
    let file = opened.and_then(|f| Ok((f.path().to_path_buf(), f.read_all()?)));
    let (real, bytes) = file.map_err(|e| req.refused(e))?;
    let text = req.text(bytes)?;
    Ok(Payload { path: real, text })
}

/// One payload flag being read: what its error messages name.
struct Request<'a> {
    flag: &'a str,
    given: &'a str,
    /// The flag without `-file`: the suggested file name.
    stem: &'a str,
    staging: PathBuf,
    candidate: PathBuf,
    example: &'a str,
}

impl Request<'_> {
    fn err(&self, code: ErrorCode, msg: String) -> ClientError {
        ClientError::new(code, format!("{msg} Corrected example: {}", self.example))
    }

    fn out_of_bounds(&self, why: &str) -> ClientError {
        self.err(
            ErrorCode::PayloadOutOfBounds,
            format!(
                "--{} {}: {why}. Payload files must be inside this session's staging directory $TMPDIR/$SESSION_ID/ ({}). Write the text there with your file tool, then pass that path.",
                self.flag,
                self.given,
                self.staging.display()
            ),
        )
    }

    fn not_found(&self, why: String) -> ClientError {
        self.err(
            ErrorCode::PayloadNotFound,
            format!(
                "--{} {}: {why}. Write the text with your file tool to $TMPDIR/$SESSION_ID/{}.md (inside {}) and pass exactly that path; a file is deleted after a successful call, so write a new one for every call.",
                self.flag,
                self.given,
                self.stem,
                self.staging.display()
            ),
        )
    }

    /// The error for a file the confinement refused to open or read.
    fn refused(&self, e: ConfineError) -> ClientError {
        let (flag, given) = (self.flag, self.given);
        match e {
            ConfineError::Outside | ConfineError::Hidden => {
                let is_link = std::fs::symlink_metadata(&self.candidate)
                    .map(|m| m.file_type().is_symlink())
                    .unwrap_or(false);
                self.out_of_bounds(if is_link {
                    "it is a symbolic link pointing outside the staging directory"
                } else {
                    "the path is outside the staging directory"
                })
            }
            ConfineError::TooManyLinks { links } => self.out_of_bounds(&format!(
                "the file has {links} hard links, so it may be a file from outside the staging directory; write a new file"
            )),
            ConfineError::NotFound if !self.staging.is_dir() => {
                self.not_found("the staging directory does not exist yet".to_owned())
            }
            ConfineError::NotFound => self.not_found("no such file".to_owned()),
            ConfineError::NotRegular { kind } => {
                self.not_found(format!("this is {kind}, not a regular file"))
            }
            ConfineError::TooLarge { size, max } => self.err(
                ErrorCode::Usage,
                format!(
                    "--{flag} {given}: the file has {size} bytes; the limit is {max}. Shorten the text."
                ),
            ),
            ConfineError::Io(kind) => self.not_found(kind.to_string()),
            e @ ConfineError::Exists => self.not_found(e.to_string()),
        }
    }

    /// The file's bytes as non-empty UTF-8 text.
    fn text(&self, bytes: Vec<u8>) -> Result<String, ClientError> {
        let (flag, given) = (self.flag, self.given);
        let text = String::from_utf8(bytes).map_err(|_| {
            self.err(
                ErrorCode::Usage,
                format!(
                    "--{flag} {given}: the file is not UTF-8 text. Write it again as plain UTF-8 text."
                ),
            )
        })?;
        if text.trim().is_empty() {
            return Err(self.err(
                ErrorCode::MissingPayload,
                format!("--{flag} {given}: the file is empty. Write the text into it first."),
            ));
        }
        Ok(text)
    }
}

/// Deletes payload files after a successful call (errors ignored: the session's staging
/// directory is removed when the session ends anyway).
pub fn delete_payloads(payloads: &[Payload]) {
    for p in payloads {
        let _ = std::fs::remove_file(&p.path);
    }
}

fn absolute(p: &Path, cwd: &Path) -> PathBuf {
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        cwd.join(p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::confine::test_support::{mkfifo, within_5s};

    struct Fx {
        _tmp: tempfile::TempDir,
        ws: PathBuf,
        stage: PathBuf,
    }

    fn fx() -> Fx {
        let tmp = tempfile::tempdir().unwrap();
        let ws = tmp.path().join("ws");
        let stage = ws.join("tmp").join("sess1");
        std::fs::create_dir_all(&stage).unwrap();
        std::fs::create_dir_all(ws.join("tmp").join("sess10")).unwrap();
        Fx {
            _tmp: tmp,
            ws,
            stage,
        }
    }

    fn read(f: &Fx, given: &str, cwd: &Path) -> Result<Payload, ClientError> {
        read_payload("message-file", given, cwd, &f.ws, "sess1", "EXAMPLE")
    }

    #[test]
    fn reads_a_file_inside_the_staging_dir_exactly() {
        let f = fx();
        let text = "Hi \"there\" $HOME `x` \\n ünï 日本\n";
        std::fs::write(f.stage.join("r.md"), text).unwrap();
        let p = read(&f, f.stage.join("r.md").to_str().unwrap(), &f.ws).unwrap();
        assert_eq!(p.text, text);
        // relative to the cwd
        let p = read(&f, "tmp/sess1/r.md", &f.ws).unwrap();
        assert_eq!(p.text, text);
        delete_payloads(&[p]);
        assert!(!f.stage.join("r.md").exists());
    }

    #[test]
    fn dot_dot_escape_is_out_of_bounds() {
        let f = fx();
        std::fs::write(f.ws.join("secret.txt"), "s").unwrap();
        let e = read(&f, "tmp/sess1/../../secret.txt", &f.ws).unwrap_err();
        assert_eq!(e.code, ErrorCode::PayloadOutOfBounds);
        assert!(e.message.ends_with("Corrected example: EXAMPLE"));
        // also when the target does not exist
        let e = read(&f, "tmp/sess1/../../nope.txt", &f.ws).unwrap_err();
        assert_eq!(e.code, ErrorCode::PayloadOutOfBounds);
    }

    #[test]
    fn absolute_path_outside_is_out_of_bounds() {
        let f = fx();
        let e = read(&f, "/etc/hostname", &f.ws).unwrap_err();
        assert_eq!(e.code, ErrorCode::PayloadOutOfBounds);
        let e = read(&f, "/definitely/not/here.md", &f.ws).unwrap_err();
        assert_eq!(e.code, ErrorCode::PayloadOutOfBounds);
    }

    #[cfg(unix)]
    #[test]
    fn symlink_pointing_out_is_out_of_bounds() {
        let f = fx();
        std::fs::write(f.ws.join("secret.txt"), "s").unwrap();
        std::os::unix::fs::symlink(f.ws.join("secret.txt"), f.stage.join("link.md")).unwrap();
        let e = read(&f, "tmp/sess1/link.md", &f.ws).unwrap_err();
        assert_eq!(e.code, ErrorCode::PayloadOutOfBounds);
        assert!(e.message.contains("symbolic link"), "{}", e.message);
    }

    #[test]
    fn sibling_prefix_is_out_of_bounds() {
        let f = fx();
        let other = f.ws.join("tmp").join("sess10").join("r.md");
        std::fs::write(&other, "x").unwrap();
        let e = read(&f, other.to_str().unwrap(), &f.ws).unwrap_err();
        assert_eq!(e.code, ErrorCode::PayloadOutOfBounds);
    }

    #[test]
    fn missing_file_and_directory_are_not_found() {
        let f = fx();
        let e = read(&f, "tmp/sess1/none.md", &f.ws).unwrap_err();
        assert_eq!(e.code, ErrorCode::PayloadNotFound);
        std::fs::create_dir_all(f.stage.join("d")).unwrap();
        let e = read(&f, "tmp/sess1/d", &f.ws).unwrap_err();
        assert_eq!(e.code, ErrorCode::PayloadNotFound);
        // the staging dir itself is not a payload
        let e = read(&f, "tmp/sess1", &f.ws).unwrap_err();
        assert_eq!(e.code, ErrorCode::PayloadOutOfBounds);
    }

    #[test]
    fn empty_and_non_utf8_files() {
        let f = fx();
        std::fs::write(f.stage.join("e.md"), "  \n").unwrap();
        assert_eq!(
            read(&f, "tmp/sess1/e.md", &f.ws).unwrap_err().code,
            ErrorCode::MissingPayload
        );
        std::fs::write(f.stage.join("b.md"), [0xff, 0xfe, 0x00]).unwrap();
        assert_eq!(
            read(&f, "tmp/sess1/b.md", &f.ws).unwrap_err().code,
            ErrorCode::Usage
        );
    }

    #[test]
    fn a_fifo_is_refused_without_waiting_for_a_writer() {
        let f = fx();
        mkfifo(&f.stage.join("pipe.md"));
        let ws = f.ws.clone();
        let e = within_5s(move || {
            read_payload("message-file", "tmp/sess1/pipe.md", &ws, &ws, "sess1", "EX")
        })
        .unwrap_err();
        assert_eq!(e.code, ErrorCode::PayloadNotFound);
        assert!(e.message.contains("FIFO"), "{}", e.message);
    }

    #[test]
    fn a_hard_link_to_a_file_outside_is_out_of_bounds() {
        let f = fx();
        std::fs::write(f.ws.join("secret.txt"), "secret").unwrap();
        std::fs::hard_link(f.ws.join("secret.txt"), f.stage.join("h.md")).unwrap();
        let e = read(&f, "tmp/sess1/h.md", &f.ws).unwrap_err();
        assert_eq!(e.code, ErrorCode::PayloadOutOfBounds);
        assert!(e.message.contains("hard links"), "{}", e.message);
    }

    #[test]
    fn a_missing_staging_dir_is_not_found_inside_and_out_of_bounds_outside() {
        let f = fx();
        let e = read_payload(
            "message-file",
            "tmp/sess2/r.md",
            &f.ws,
            &f.ws,
            "sess2",
            "EX",
        )
        .unwrap_err();
        assert_eq!(e.code, ErrorCode::PayloadNotFound);
        assert!(e.message.contains("does not exist yet"), "{}", e.message);
        std::fs::write(f.ws.join("secret.txt"), "s").unwrap();
        let e =
            read_payload("message-file", "secret.txt", &f.ws, &f.ws, "sess2", "EX").unwrap_err();
        assert_eq!(e.code, ErrorCode::PayloadOutOfBounds);
    }
}
