//! send-file preflight: every requested path is checked — and every limit
//! applied — before a single byte of any file is read, so a call either sends all its files or
//! none.
//!
//! Path rules: relative to the workspace; absolute paths and `..` components are rejected as
//! written; the rest goes through [`crate::confine`]: canonicalised (symlinks resolved) and
//! inside the canonical workspace **by whole path components** (`/ws/user10/x` is not inside
//! `/ws/user1`), never under `private/` unless the session is a DM, and only a regular file
//! with a single hard link, opened without blocking (a FIFO is refused, never waited on) and
//! checked on the descriptor. Then: optional extension allow-list (checked on the requested and
//! the resolved name), per-file size, file count and total size.
//!
//! [`check`] keeps every file open; [`load`] reads from those descriptors, so a path swapped
//! for a symlink in between is never followed (and is reported as changed). Both functions are
//! blocking: run them with `spawn_blocking`.

use std::path::{Component, Path, PathBuf};

use crate::config::SendFileConfig;
use crate::confine::{Confine, ConfineError, ConfinedFile};
use crate::platform::OutgoingFile;

const MIB: u64 = 1024 * 1024;

/// The limits of one send-file call (from `skills.sendFile`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileLimits {
    /// Largest single file, in bytes.
    pub max_file_bytes: u64,
    /// Most files per call.
    pub max_files: usize,
    /// Largest total of all files, in bytes.
    pub max_total_bytes: u64,
    /// Allowed extensions, lowercase without the dot; empty allows any.
    pub allowed_extensions: Vec<String>,
}

impl FileLimits {
    /// The limits configured in `skills.sendFile`.
    pub fn from_config(config: &SendFileConfig) -> Self {
        Self {
            max_file_bytes: config.max_file_size_mb.saturating_mul(MIB),
            max_files: usize::try_from(config.max_files_per_invocation).unwrap_or(usize::MAX),
            max_total_bytes: config.max_total_size_mb.saturating_mul(MIB),
            allowed_extensions: config
                .allowed_extensions
                .iter()
                .map(|e| e.trim_start_matches('.').to_ascii_lowercase())
                .collect(),
        }
    }
}

/// A file that passed every check, held open for [`load`].
#[derive(Debug)]
pub struct CheckedFile {
    /// The path as the agent wrote it.
    pub requested: String,
    /// The canonical path inside the workspace.
    pub path: PathBuf,
    /// Name shown on the platform (the requested path's last component).
    pub filename: String,
    /// Size in bytes at check time.
    pub size: u64,
    file: ConfinedFile,
}

/// Why a send-file request was refused. Every message tells the agent what to change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PreflightError {
    /// More files than `maxFilesPerInvocation`.
    #[error(
        "{count} files were requested but at most {max} can be sent in one call; send fewer files"
    )]
    TooManyFiles {
        /// Files requested.
        count: usize,
        /// The limit.
        max: usize,
    },
    /// An empty path.
    #[error("an empty path was given; name a file relative to your workspace")]
    Empty,
    /// An absolute path.
    #[error(
        "{path:?} is absolute; give the path relative to your workspace (e.g. output/chart.png)"
    )]
    Absolute {
        /// The path.
        path: String,
    },
    /// A `..` component.
    #[error(
        "{path:?} contains '..'; only files inside your workspace can be sent, name them without '..'"
    )]
    Traversal {
        /// The path.
        path: String,
    },
    /// Nothing at that path.
    #[error(
        "{path:?} does not exist in your workspace; check the name (paths are relative to the workspace)"
    )]
    NotFound {
        /// The path.
        path: String,
    },
    /// The resolved path (after symlinks) lies outside the workspace.
    #[error(
        "{path:?} resolves to a location outside your workspace (through a symlink); copy the file into the workspace first"
    )]
    Escapes {
        /// The path.
        path: String,
    },
    /// The resolved path is in `private/` and the session is not a DM.
    #[error(
        "{path:?} is in the private folder, which can only be used in a direct-message conversation; do not send it here"
    )]
    Hidden {
        /// The path.
        path: String,
    },
    /// A directory or special file (FIFO, socket, device).
    #[error("{path:?} is {kind}, not a regular file; send regular files only")]
    NotAFile {
        /// The path.
        path: String,
        /// What it is.
        kind: &'static str,
    },
    /// More than one hard link (it may be a file from outside the workspace).
    #[error(
        "{path:?} has {links} hard links, so it may be a file from outside your workspace; write or copy it to a new file first"
    )]
    HardLinked {
        /// The path.
        path: String,
        /// Its link count.
        links: u64,
    },
    /// Extension not in `allowedExtensions`.
    #[error("{path:?} has an extension that may not be sent; allowed: {allowed}")]
    Extension {
        /// The path.
        path: String,
        /// The allowed extensions, comma-separated.
        allowed: String,
    },
    /// Larger than `maxFileSizeMb`.
    #[error(
        "{path:?} is {size} bytes, over the per-file limit of {max} bytes; make it smaller or send something else"
    )]
    TooLarge {
        /// The path.
        path: String,
        /// Its size.
        size: u64,
        /// The limit.
        max: u64,
    },
    /// The files together exceed `maxTotalSizeMb`.
    #[error(
        "the files total {total} bytes, over the limit of {max} bytes per call; send fewer or smaller files"
    )]
    TotalTooLarge {
        /// The total size.
        total: u64,
        /// The limit.
        max: u64,
    },
    /// The file changed between the check and the read.
    #[error("{path:?} changed while it was being sent; do not modify files while sending them")]
    Changed {
        /// The path.
        path: String,
    },
    /// An I/O failure (permissions, the workspace itself missing, ...).
    #[error("{path:?} cannot be read: {message}")]
    Io {
        /// The path.
        path: String,
        /// The OS error.
        message: String,
    },
}

impl PreflightError {
    /// The index into `filePaths` this error is about (`None` for whole-call limits).
    pub fn index_in(&self, requested: &[String]) -> Option<usize> {
        let path = match self {
            Self::Absolute { path }
            | Self::Traversal { path }
            | Self::NotFound { path }
            | Self::Escapes { path }
            | Self::Hidden { path }
            | Self::NotAFile { path, .. }
            | Self::HardLinked { path, .. }
            | Self::Extension { path, .. }
            | Self::TooLarge { path, .. }
            | Self::Changed { path }
            | Self::Io { path, .. } => path,
            Self::TooManyFiles { .. } | Self::Empty | Self::TotalTooLarge { .. } => return None,
        };
        requested.iter().position(|r| r == path)
    }
}

/// The folder under the workspace holding one staging folder per session.
const STAGING_ROOT: &str = "tmp";

/// Checks every requested path and limit without reading any file content. `dm`: the session
/// is a direct message, so `private/` may be sent. `session`: the caller's session id; the
/// staging folders of the user's other sessions (`tmp/<other>/`, which hold their payloads
/// and the files attached to their messages, a DM's included) are hidden, its own is not.
pub fn check(
    workspace: &Path,
    dm: bool,
    session: &str,
    requested: &[String],
    limits: &FileLimits,
) -> Result<Vec<CheckedFile>, PreflightError> {
    if requested.len() > limits.max_files {
        return Err(PreflightError::TooManyFiles {
            count: requested.len(),
            max: limits.max_files,
        });
    }
    for path in requested {
        check_lexically(path)?;
    }
    let confine = Confine::workspace(workspace, dm)
        .map_err(|e| PreflightError::Io {
            path: workspace.display().to_string(),
            message: e.to_string(),
        })?
        .hiding(STAGING_ROOT)
        .showing(Path::new(STAGING_ROOT).join(session));
    let mut checked = Vec::with_capacity(requested.len());
    let mut total: u64 = 0;
    for path in requested {
        let file = check_one(&confine, path, limits)?;
        total = total.saturating_add(file.size);
        checked.push(file);
    }
    if total > limits.max_total_bytes {
        return Err(PreflightError::TotalTooLarge {
            total,
            max: limits.max_total_bytes,
        });
    }
    Ok(checked)
}

/// Rejects empty and absolute paths and any `..` component, as written.
fn check_lexically(path: &str) -> Result<(), PreflightError> {
    if path.trim().is_empty() {
        return Err(PreflightError::Empty);
    }
    let p = Path::new(path);
    if p.is_absolute() || path.starts_with('/') || path.starts_with('\\') {
        return Err(PreflightError::Absolute { path: path.into() });
    }
    for component in p.components() {
        match component {
            Component::ParentDir => return Err(PreflightError::Traversal { path: path.into() }),
            Component::RootDir | Component::Prefix(_) => {
                return Err(PreflightError::Absolute { path: path.into() });
            }
            Component::CurDir | Component::Normal(_) => {}
        }
    }
    Ok(())
}

fn check_one(
    confine: &Confine,
    path: &str,
    limits: &FileLimits,
) -> Result<CheckedFile, PreflightError> {
    let file = confine
        .open_read(Path::new(path), limits.max_file_bytes)
        .map_err(|e| refusal(path, e))?;
    let filename = Path::new(path)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .ok_or_else(|| PreflightError::NotAFile {
            path: path.into(),
            kind: "a directory",
        })?;
    let allowed = limits.allowed_extensions.is_empty()
        || (extension_allowed(Path::new(path), limits) && extension_allowed(file.path(), limits));
    if !allowed {
        return Err(PreflightError::Extension {
            path: path.into(),
            allowed: limits.allowed_extensions.join(", "),
        });
    }
    Ok(CheckedFile {
        requested: path.into(),
        path: file.path().to_path_buf(),
        filename,
        size: file.len(),
        file,
    })
}

/// A containment refusal in send-file's words.
fn refusal(path: &str, error: ConfineError) -> PreflightError {
    let path = path.to_owned();
    match error {
        ConfineError::Outside => PreflightError::Escapes { path },
        ConfineError::Hidden => PreflightError::Hidden { path },
        ConfineError::NotFound => PreflightError::NotFound { path },
        ConfineError::NotRegular { kind } => PreflightError::NotAFile { path, kind },
        ConfineError::TooManyLinks { links } => PreflightError::HardLinked { path, links },
        ConfineError::TooLarge { size, max } => PreflightError::TooLarge { path, size, max },
        ConfineError::Io(kind) => PreflightError::Io {
            path,
            message: kind.to_string(),
        },
        // Only a create reports it; send-file reads.
        ConfineError::Exists => PreflightError::Io {
            path,
            message: ConfineError::Exists.to_string(),
        },
    }
}

fn extension_allowed(path: &Path, limits: &FileLimits) -> bool {
    path.extension()
        .map(|e| e.to_string_lossy().to_ascii_lowercase())
        .is_some_and(|ext| limits.allowed_extensions.contains(&ext))
}

/// Reads checked files into memory from the descriptors [`check`] opened. A file that grew
/// past the per-file limit, or whose path no longer names it (renamed or replaced by a
/// symlink since the check), is refused (nothing is returned then).
pub fn load(files: Vec<CheckedFile>) -> Result<Vec<OutgoingFile>, PreflightError> {
    let mut out = Vec::with_capacity(files.len());
    for checked in files {
        let changed = || PreflightError::Changed {
            path: checked.requested.clone(),
        };
        if !checked.file.path_unchanged() {
            return Err(changed());
        }
        let bytes = match checked.file.read_all() {
            Ok(bytes) => bytes,
            Err(ConfineError::TooLarge { .. }) => return Err(changed()),
            Err(e) => return Err(refusal(&checked.requested, e)),
        };
        out.push(OutgoingFile::from_bytes(checked.filename, bytes));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::confine::test_support::{mkfifo, within_5s};
    use std::os::unix::fs::symlink;

    fn limits() -> FileLimits {
        FileLimits {
            max_file_bytes: 100,
            max_files: 3,
            max_total_bytes: 150,
            allowed_extensions: Vec::new(),
        }
    }

    fn paths(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    struct Fixture {
        _dir: tempfile::TempDir,
        ws: PathBuf,
        base: PathBuf,
    }

    fn fixture() -> Fixture {
        let dir = tempfile::tempdir().expect("tempdir");
        let base = dir.path().to_path_buf();
        let ws = base.join("user1");
        std::fs::create_dir_all(ws.join("out")).expect("mkdir");
        std::fs::create_dir_all(base.join("user10")).expect("mkdir");
        std::fs::write(ws.join("out/a.png"), [0u8; 60]).expect("write");
        std::fs::write(ws.join("out/b.txt"), [0u8; 60]).expect("write");
        std::fs::write(ws.join("big.bin"), [0u8; 101]).expect("write");
        std::fs::write(base.join("user10/secret.txt"), b"secret").expect("write");
        std::fs::write(base.join("outside.txt"), b"x").expect("write");
        Fixture {
            _dir: dir,
            ws,
            base,
        }
    }

    #[test]
    fn lexical_escapes_are_rejected_before_touching_the_disk() {
        let f = fixture();
        let l = limits();
        for (path, expect) in [
            ("/etc/passwd", "absolute"),
            ("../user10/secret.txt", "traversal"),
            ("out/../../outside.txt", "traversal"),
            ("", "empty"),
        ] {
            let err = check(&f.ws, false, "s1", &paths(&[path]), &l).expect_err(path);
            let kind = match err {
                PreflightError::Absolute { .. } => "absolute",
                PreflightError::Traversal { .. } => "traversal",
                PreflightError::Empty => "empty",
                other => panic!("{path}: unexpected {other:?}"),
            };
            assert_eq!(kind, expect, "{path}");
        }
    }

    #[test]
    fn symlink_and_sibling_prefix_escapes_are_rejected() {
        let f = fixture();
        symlink(f.base.join("outside.txt"), f.ws.join("link.txt")).expect("symlink");
        // A sibling whose name merely starts with the workspace's name.
        symlink(f.base.join("user10/secret.txt"), f.ws.join("sib.txt")).expect("symlink");
        symlink(f.base.join("user10"), f.ws.join("sibdir")).expect("symlink");
        for path in ["link.txt", "sib.txt", "sibdir/secret.txt"] {
            assert!(
                matches!(
                    check(&f.ws, false, "s1", &paths(&[path]), &limits()),
                    Err(PreflightError::Escapes { .. })
                ),
                "{path}"
            );
        }
        // A symlink that stays inside is fine.
        symlink(f.ws.join("out/a.png"), f.ws.join("inside.png")).expect("symlink");
        assert!(check(&f.ws, false, "s1", &paths(&["inside.png"]), &limits()).is_ok());
    }

    #[test]
    fn another_sessions_staging_folder_is_hidden_its_own_is_not() {
        let f = fixture();
        for sid in ["s1", "dm-session"] {
            let dir = f.ws.join("tmp").join(sid).join("in");
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("photo.png"), b"x").unwrap();
        }
        assert!(
            check(
                &f.ws,
                false,
                "s1",
                &paths(&["tmp/s1/in/photo.png"]),
                &limits()
            )
            .is_ok()
        );
        for path in [
            "tmp/dm-session/in/photo.png",
            "./tmp/dm-session/in/photo.png",
            "tmp/s1/../dm-session/in/photo.png",
        ] {
            assert!(
                check(&f.ws, false, "s1", &paths(&[path]), &limits()).is_err(),
                "{path}"
            );
        }
        // Through a link the agent made in its own folder.
        std::os::unix::fs::symlink(
            f.ws.join("tmp/dm-session/in/photo.png"),
            f.ws.join("tmp/s1/in/link.png"),
        )
        .unwrap();
        assert!(matches!(
            check(
                &f.ws,
                false,
                "s1",
                &paths(&["tmp/s1/in/link.png"]),
                &limits()
            ),
            Err(PreflightError::Hidden { .. })
        ));
    }

    #[test]
    fn limits_are_applied_to_the_whole_call() {
        let f = fixture();
        let ok = check(
            &f.ws,
            false,
            "s1",
            &paths(&["out/a.png", "./out/b.txt"]),
            &limits(),
        )
        .expect("ok");
        assert_eq!(ok.len(), 2);
        assert_eq!(ok[1].filename, "b.txt");
        assert!(matches!(
            check(&f.ws, false, "s1", &paths(&["big.bin"]), &limits()),
            Err(PreflightError::TooLarge { size: 101, .. })
        ));
        assert!(matches!(
            check(
                &f.ws,
                false,
                "s1",
                &paths(&["out/a.png", "out/b.txt", "out/a.png"]),
                &limits()
            ),
            Err(PreflightError::TotalTooLarge { total: 180, .. })
        ));
        assert!(matches!(
            check(&f.ws, false, "s1", &paths(&["a", "b", "c", "d"]), &limits()),
            Err(PreflightError::TooManyFiles { count: 4, max: 3 })
        ));
        assert!(matches!(
            check(&f.ws, false, "s1", &paths(&["out"]), &limits()),
            Err(PreflightError::NotAFile { .. })
        ));
        assert!(matches!(
            check(&f.ws, false, "s1", &paths(&["nope.txt"]), &limits()),
            Err(PreflightError::NotFound { .. })
        ));
        let only_png = FileLimits {
            allowed_extensions: vec!["png".into()],
            ..limits()
        };
        assert!(check(&f.ws, false, "s1", &paths(&["out/a.png"]), &only_png).is_ok());
        let err = check(
            &f.ws,
            false,
            "s1",
            &paths(&["out/a.png", "out/b.txt"]),
            &only_png,
        )
        .expect_err("txt refused");
        assert_eq!(err.index_in(&paths(&["out/a.png", "out/b.txt"])), Some(1));
        // A .png symlink to a .txt file does not get around the allow-list.
        symlink(f.ws.join("out/b.txt"), f.ws.join("fake.png")).expect("symlink");
        assert!(matches!(
            check(&f.ws, false, "s1", &paths(&["fake.png"]), &only_png),
            Err(PreflightError::Extension { .. })
        ));
    }

    #[test]
    fn load_reads_checked_files_and_refuses_swapped_ones() {
        let f = fixture();
        let checked = check(&f.ws, false, "s1", &paths(&["out/a.png"]), &limits()).expect("ok");
        let files = load(checked).expect("load");
        assert_eq!(files[0].filename, "a.png");
        let checked = check(&f.ws, false, "s1", &paths(&["out/a.png"]), &limits()).expect("ok");
        std::fs::remove_file(f.ws.join("out/a.png")).expect("rm");
        symlink(f.base.join("outside.txt"), f.ws.join("out/a.png")).expect("symlink");
        assert!(matches!(load(checked), Err(PreflightError::Changed { .. })));
    }

    #[test]
    fn limits_come_from_config() {
        let limits = FileLimits::from_config(&SendFileConfig {
            allowed_extensions: vec![".PNG".into()],
            ..SendFileConfig::default()
        });
        assert_eq!(limits.max_file_bytes, 25 * MIB);
        assert_eq!(limits.max_total_bytes, 50 * MIB);
        assert_eq!(limits.max_files, 10);
        assert_eq!(limits.allowed_extensions, vec!["png"]);
    }

    #[test]
    fn fifos_sockets_and_hard_links_are_refused_without_blocking() {
        let f = fixture();
        mkfifo(&f.ws.join("pipe.txt"));
        let _sock = std::os::unix::net::UnixListener::bind(f.ws.join("sock")).expect("bind");
        std::fs::hard_link(f.base.join("user10/secret.txt"), f.ws.join("h.txt")).expect("link");
        let ws = f.ws.clone();
        let results = within_5s(move || {
            ["pipe.txt", "sock", "h.txt"].map(|p| check(&ws, false, "s1", &paths(&[p]), &limits()))
        });
        assert!(
            matches!(&results[0], Err(PreflightError::NotAFile { kind, .. }) if kind.contains("FIFO"))
        );
        assert!(matches!(
            &results[1],
            Err(PreflightError::NotAFile {
                kind: "a socket",
                ..
            })
        ));
        assert!(matches!(
            &results[2],
            Err(PreflightError::HardLinked { links: 2, .. })
        ));
    }

    #[test]
    fn private_files_are_sent_only_from_a_dm() {
        let f = fixture();
        std::fs::create_dir_all(f.ws.join("private")).expect("mkdir");
        std::fs::write(f.ws.join("private/notes.txt"), b"p").expect("write");
        symlink(f.ws.join("private/notes.txt"), f.ws.join("out/n.txt")).expect("symlink");
        for path in ["private/notes.txt", "out/n.txt"] {
            let err = check(&f.ws, false, "s1", &paths(&[path]), &limits()).expect_err(path);
            assert!(
                matches!(err, PreflightError::Hidden { .. }),
                "{path}: {err:?}"
            );
            assert!(
                check(&f.ws, true, "s1", &paths(&[path]), &limits()).is_ok(),
                "{path}"
            );
        }
    }
}
