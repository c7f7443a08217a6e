//! The one containment rule for every path the agent names: `fs/*` requests
//! ([`crate::agent::fs`]), payload files ([`crate::skills::payload`]) and send-file
//! ([`crate::handlers::preflight`]). The agent is assumed hostile, so a path it gives is only
//! ever used through a [`Confine`].
//!
//! * **Containment** is decided on the canonical path (every symlink resolved) and by whole
//!   path components, so `/ws/user10` is not inside `/ws/user1` and `..` cannot climb out. The
//!   root itself is not "inside" (it is a directory, never a file to read or write).
//! * **Hidden subtrees** are refused although they are inside the root: a workspace's
//!   `private/` folder is hidden from every session that is not a direct message
//!   ([`Confine::workspace`]). A symlink elsewhere in the workspace that points into it is
//!   refused too, because the check runs on the resolved path.
//! * **Paths to create** resolve their deepest existing ancestor and append the missing names;
//!   any `..` is refused.
//! * **Opening** never blocks and never follows a swapped-in link: special files are refused
//!   from `lstat` before they are opened; the open uses `O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC`
//!   (a FIFO opens at once instead of waiting for a writer); the descriptor is then checked with
//!   `fstat` **before any byte is read** (regular file, exactly one hard link, size cap); and its
//!   real location, read back from `/proc/self/fd/<n>`, must still be inside the root and not
//!   hidden — which defeats a directory swapped for a symlink after canonicalisation. Writes
//!   open without truncating, check the same way, and only then truncate, so a hard link the
//!   agent made to a file it must not touch is never emptied.
//!
//! * **Programs approved by their path** (skill entrypoints, for the permission gate):
//!   [`canonical_program`] — a regular file at its own canonical path, so what is approved is
//!   what runs — and [`is_at_or_inside`], which the gate uses to refuse a skills folder the
//!   agent could write.
//!
//! Everything here is blocking file-system work: async callers run it in `spawn_blocking`.
//! Each caller maps [`ConfineError`] to its own public error codes.

use std::fs::{File, Metadata, OpenOptions};
use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Component, Path, PathBuf};

use nix::libc;

/// The workspace folder only direct-message sessions may use (notes made from private
/// memories live there).
pub const PRIVATE_DIR: &str = "private";

/// The workspace folder the sandbox covers with the read-only skills folder: on the host it is
/// an empty mount point, so no session reads or writes it through the daemon (what `fs/*`
/// would find there is not what the agent's own commands see).
pub const SKILLS_MOUNT: &str = "skills";

/// Flags of every open: never wait (FIFOs), never follow a final symlink, never leak the
/// descriptor into a child.
const OPEN_FLAGS: libc::c_int = libc::O_NONBLOCK | libc::O_NOFOLLOW | libc::O_CLOEXEC;

/// Why a path was refused. Messages never carry the path or an OS error text (callers add the
/// path as the agent wrote it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfineError {
    /// The path resolves outside the root (after symlinks), is the root itself, or uses `..`
    /// in a path to create.
    #[error("the path is outside the allowed directory")]
    Outside,
    /// The path is inside a hidden subtree (the private folder in a non-DM session).
    #[error("the path is in a folder that this conversation cannot use")]
    Hidden,
    /// Nothing exists at the (contained) path.
    #[error("no such file")]
    NotFound,
    /// A directory, FIFO, socket, device or symlink where a regular file is needed.
    #[error("it is {kind}, not a regular file")]
    NotRegular {
        /// What it is instead ("a FIFO", "a directory", ...).
        kind: &'static str,
    },
    /// The file has more than one hard link: the same inode may be reachable from a place
    /// the agent must not touch.
    #[error("the file has {links} hard links; only files with a single link are accepted")]
    TooManyLinks {
        /// Its link count.
        links: u64,
    },
    /// Larger than the caller's cap.
    #[error("the file has {size} bytes; the limit is {max}")]
    TooLarge {
        /// Its size (or the bytes read, when it grew while being read).
        size: u64,
        /// The cap.
        max: u64,
    },
    /// Something exists at a path that must be new ([`Confine::create_new`]).
    #[error("the file exists already")]
    Exists,
    /// Any other I/O failure (only the kind is kept: an OS message can carry a path).
    #[error("{0}")]
    Io(io::ErrorKind),
}

/// Why a program path cannot be approved ([`canonical_program`]).
#[derive(Debug)]
pub enum ProgramRefusal {
    /// The path resolves somewhere else (a symlink on the way) or to something that is not a
    /// regular file.
    NotCanonical {
        /// Where it resolves to.
        real: PathBuf,
    },
    /// The path cannot be resolved (missing, unreadable).
    Unresolvable(io::Error),
}

/// The rule for a program the daemon approves by its path (a skill entrypoint): a regular file
/// at its own canonical path — it exists and no component is a symlink, `.` or `..` — so the
/// file approved is exactly the file that runs, and a folder swapped for a link is refused.
pub fn canonical_program(path: &Path) -> Result<(), ProgramRefusal> {
    match std::fs::canonicalize(path) {
        Ok(real) if real == path && real.is_file() => Ok(()),
        Ok(real) => Err(ProgramRefusal::NotCanonical { real }),
        Err(e) => Err(ProgramRefusal::Unresolvable(e)),
    }
}

/// Whether `dir` (canonical) is `root` or inside it, `root` resolved when it exists (as written,
/// made absolute, when it does not).
pub fn is_at_or_inside(dir: &Path, root: &Path) -> bool {
    let root = std::fs::canonicalize(root)
        .or_else(|_| std::path::absolute(root))
        .unwrap_or_else(|_| root.to_path_buf());
    dir.starts_with(root)
}

/// A root directory the agent's paths must stay inside, minus its hidden subtrees.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Confine {
    /// Canonical root (or, while it does not exist yet, its canonical ancestor plus names).
    root: PathBuf,
    /// Refused subtrees: each as written under the root and, when it exists, canonicalised.
    hidden: Vec<PathBuf>,
    /// Subtrees inside a hidden one that stay visible (a session's own staging folder in the
    /// otherwise hidden `tmp/`), in both spellings as well.
    shown: Vec<PathBuf>,
}

impl Confine {
    /// Confines to `root`, canonicalised now. The root need not exist yet (a payload staging
    /// directory appears with the first file): then nothing inside it is found, and paths
    /// outside are still [`ConfineError::Outside`].
    pub fn new(root: &Path) -> Result<Self, ConfineError> {
        let absolute = std::path::absolute(root).map_err(|e| ConfineError::Io(e.kind()))?;
        if has_parent_dir(&absolute) {
            // A root is given by the daemon; one that climbs is a bug, refuse everything.
            return Err(ConfineError::Outside);
        }
        let (root, _) = locate(&absolute)?;
        Ok(Self {
            root,
            hidden: Vec::new(),
            shown: Vec::new(),
        })
    }

    /// Confines to a user workspace: `{workspace}/private/` is hidden unless `dm`, and the
    /// sandbox's mount point `{workspace}/skills/` always.
    pub fn workspace(workspace: &Path, dm: bool) -> Result<Self, ConfineError> {
        let confine = Self::new(workspace)?.hiding(SKILLS_MOUNT);
        Ok(if dm {
            confine
        } else {
            confine.hiding(PRIVATE_DIR)
        })
    }

    /// Also refuses everything under `relative` (a subtree of the root).
    pub fn hiding(mut self, relative: impl AsRef<Path>) -> Self {
        let spellings = self.spellings(relative.as_ref());
        self.hidden.extend(spellings);
        self
    }

    /// Keeps `relative` visible although a hidden subtree contains it: only paths inside
    /// `relative` are let through that subtree; other hidden subtrees stay hidden.
    pub fn showing(mut self, relative: impl AsRef<Path>) -> Self {
        let spellings = self.spellings(relative.as_ref());
        self.shown.extend(spellings);
        self
    }

    /// `relative` under the root as written and, when it exists elsewhere, canonicalised.
    fn spellings(&self, relative: &Path) -> Vec<PathBuf> {
        let lexical = self.root.join(relative);
        let mut out = Vec::new();
        if let Ok(real) = std::fs::canonicalize(&lexical)
            && real != lexical
            && real != self.root
        {
            out.push(real);
        }
        out.push(lexical);
        out
    }

    /// The canonical root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Whether the normalised absolute `path` is strictly inside the root (component-wise)
    /// and outside every hidden subtree. Paths with `..` are refused: this is a check of
    /// resolved paths, not a resolver.
    pub fn check(&self, path: &Path) -> Result<(), ConfineError> {
        if has_parent_dir(path) || path == self.root || !path.starts_with(&self.root) {
            return Err(ConfineError::Outside);
        }
        let shown_in = |h: &PathBuf| {
            self.shown
                .iter()
                .any(|s| s.starts_with(h) && s != h && path.starts_with(s))
        };
        if self
            .hidden
            .iter()
            .any(|h| path.starts_with(h) && !shown_in(h))
        {
            return Err(ConfineError::Hidden);
        }
        Ok(())
    }

    /// Resolves an existing `requested` path (absolute, or relative to the root) to its
    /// canonical form inside the root. A missing path is [`ConfineError::NotFound`] only when
    /// it would lie inside (so the answer never tells whether something exists outside).
    pub fn resolve_existing(&self, requested: &Path) -> Result<PathBuf, ConfineError> {
        let (path, exists) = locate(&self.join(requested))?;
        self.check(&path)?;
        if exists {
            Ok(path)
        } else {
            Err(ConfineError::NotFound)
        }
    }

    /// Resolves a path that may not exist yet: no `..` anywhere; the deepest existing
    /// ancestor is canonicalised and the missing names appended; the result must be inside.
    pub fn resolve_for_create(&self, requested: &Path) -> Result<PathBuf, ConfineError> {
        let joined = self.join(requested);
        if has_parent_dir(&joined) {
            return Err(ConfineError::Outside);
        }
        let (path, _) = locate(&joined)?;
        self.check(&path)?;
        Ok(path)
    }

    /// Resolves and opens `requested` for reading: a regular file with one link and at most
    /// `max_bytes`, checked on the open descriptor before any read.
    pub fn open_read(
        &self,
        requested: &Path,
        max_bytes: u64,
    ) -> Result<ConfinedFile, ConfineError> {
        let path = self.resolve_existing(requested)?;
        self.open_resolved(path, max_bytes)
    }

    /// Opens a path already returned by [`Confine::resolve_existing`], re-checking everything
    /// on the descriptor (the path may have been swapped since it was resolved).
    pub fn open_resolved(
        &self,
        path: PathBuf,
        max_bytes: u64,
    ) -> Result<ConfinedFile, ConfineError> {
        self.check(&path)?;
        // Special files are refused before they are opened: opening a device can act.
        regular_single_link(&std::fs::symlink_metadata(&path).map_err(io_error)?)?;
        let file = OpenOptions::new()
            .read(true)
            .custom_flags(OPEN_FLAGS)
            .open(&path)
            .map_err(open_error)?;
        let meta = file.metadata().map_err(io_error)?;
        regular_single_link(&meta)?;
        if meta.len() > max_bytes {
            return Err(ConfineError::TooLarge {
                size: meta.len(),
                max: max_bytes,
            });
        }
        self.check_descriptor(&file)?;
        Ok(ConfinedFile {
            path,
            len: meta.len(),
            dev: meta.dev(),
            ino: meta.ino(),
            max_bytes,
            file,
        })
    }

    /// Writes `bytes` to `requested` (created with its missing parent folders), replacing its
    /// content. An existing file must be a regular file with one link; it is checked on the
    /// descriptor before it is truncated. Returns the canonical path written.
    pub fn write(&self, requested: &Path, bytes: &[u8]) -> Result<PathBuf, ConfineError> {
        let path = self.resolve_for_create(requested)?;
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(io_error)?;
        }
        match std::fs::symlink_metadata(&path) {
            Ok(meta) => regular_single_link(&meta)?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_error(e)),
        }
        let mut file = OpenOptions::new()
            .write(true)
            .create(true)
            .custom_flags(OPEN_FLAGS)
            .open(&path)
            .map_err(open_error)?;
        regular_single_link(&file.metadata().map_err(io_error)?)?;
        self.check_descriptor(&file)?;
        file.set_len(0).map_err(io_error)?;
        file.write_all(bytes).map_err(io_error)?;
        Ok(path)
    }

    /// Creates `requested` (with its missing parent folders) holding `bytes`, with permission
    /// `mode`; fails with [`ConfineError::Exists`] when anything is at that path already (a
    /// symlink the agent planted included: the create does not follow it). The descriptor is
    /// checked like every other open before a byte is written. Returns the canonical path.
    pub fn create_new(
        &self,
        requested: &Path,
        bytes: &[u8],
        mode: u32,
    ) -> Result<PathBuf, ConfineError> {
        let path = self.resolve_for_create(requested)?;
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(io_error)?;
        }
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .custom_flags(OPEN_FLAGS)
            .open(&path)
            .map_err(|e| match e.kind() {
                io::ErrorKind::AlreadyExists => ConfineError::Exists,
                _ => open_error(e),
            })?;
        if let Err(e) = self.check_descriptor(&file) {
            // Created somewhere it must not be (a folder swapped after resolution): remove it
            // while the path still names the file just created, and write nothing.
            let ours = file.metadata().map_err(io_error)?;
            if std::fs::metadata(&path)
                .is_ok_and(|m| m.dev() == ours.dev() && m.ino() == ours.ino())
            {
                let _ = std::fs::remove_file(&path);
            }
            return Err(e);
        }
        file.write_all(bytes).map_err(io_error)?;
        Ok(path)
    }

    /// The descriptor's real location (the kernel's view, after any swap) must pass
    /// [`Confine::check`]. Fails closed where `/proc` is unavailable.
    fn check_descriptor(&self, file: &File) -> Result<(), ConfineError> {
        let real =
            std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd())).map_err(io_error)?;
        self.check(&real)
    }

    fn join(&self, requested: &Path) -> PathBuf {
        if requested.is_absolute() {
            requested.to_path_buf()
        } else {
            self.root.join(requested)
        }
    }
}

/// A file opened by [`Confine::open_resolved`]: regular, one link, within its cap.
#[derive(Debug)]
pub struct ConfinedFile {
    path: PathBuf,
    len: u64,
    dev: u64,
    ino: u64,
    max_bytes: u64,
    file: File,
}

impl ConfinedFile {
    /// The canonical path it was opened at.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Its size when it was opened.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether it was empty when opened.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether its path still names the opened file (not replaced since, by a rename or a
    /// symlink). Reading always uses the opened file, so this only tells the caller that the
    /// agent changed the path meanwhile.
    pub fn path_unchanged(&self) -> bool {
        std::fs::symlink_metadata(&self.path)
            .is_ok_and(|m| m.file_type().is_file() && m.dev() == self.dev && m.ino() == self.ino)
    }

    /// Reads the whole file, at most the cap it was opened with (a file that grew past it is
    /// [`ConfineError::TooLarge`]).
    pub fn read_all(self) -> Result<Vec<u8>, ConfineError> {
        let cap = usize::try_from(self.len.min(self.max_bytes)).unwrap_or(0);
        let mut bytes = Vec::with_capacity(cap);
        (&self.file)
            .take(self.max_bytes.saturating_add(1))
            .read_to_end(&mut bytes)
            .map_err(io_error)?;
        let read = u64::try_from(bytes.len()).unwrap_or(u64::MAX);
        if read > self.max_bytes {
            return Err(ConfineError::TooLarge {
                size: read,
                max: self.max_bytes,
            });
        }
        Ok(bytes)
    }
}

/// Canonicalises the deepest existing ancestor of the absolute `path` and appends the missing
/// names. Returns the result and whether `path` itself exists. A missing part that ends in
/// `..` has no meaning and is refused.
fn locate(path: &Path) -> Result<(PathBuf, bool), ConfineError> {
    let mut existing = path;
    let mut missing = Vec::new();
    loop {
        match std::fs::canonicalize(existing) {
            Ok(mut base) => {
                let exists = missing.is_empty();
                for name in missing.iter().rev() {
                    base.push(name);
                }
                return Ok((base, exists));
            }
            Err(e) if is_missing(&e) => {
                let name = existing.file_name().ok_or(ConfineError::Outside)?;
                missing.push(name);
                existing = existing.parent().ok_or(ConfineError::Outside)?;
            }
            Err(e) => return Err(io_error(e)),
        }
    }
}

fn is_missing(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::ENOTDIR)
}

fn has_parent_dir(path: &Path) -> bool {
    path.components().any(|c| matches!(c, Component::ParentDir))
}

/// A regular file with exactly one hard link (from `lstat` or `fstat`).
fn regular_single_link(meta: &Metadata) -> Result<(), ConfineError> {
    let kind = meta.file_type();
    if !kind.is_file() {
        let kind = if kind.is_dir() {
            "a directory"
        } else if kind.is_symlink() {
            "a symbolic link"
        } else if kind.is_fifo() {
            "a FIFO (named pipe)"
        } else if kind.is_socket() {
            "a socket"
        } else if kind.is_block_device() || kind.is_char_device() {
            "a device"
        } else {
            "a special file"
        };
        return Err(ConfineError::NotRegular { kind });
    }
    if meta.nlink() > 1 {
        return Err(ConfineError::TooManyLinks {
            links: meta.nlink(),
        });
    }
    Ok(())
}

fn io_error(e: io::Error) -> ConfineError {
    match e.kind() {
        io::ErrorKind::NotFound => ConfineError::NotFound,
        kind => ConfineError::Io(kind),
    }
}

/// `open` errors: `ELOOP` means the final component became a symlink after it was resolved;
/// `ENXIO` a FIFO without a reader (write side) or a socket.
fn open_error(e: io::Error) -> ConfineError {
    match e.raw_os_error() {
        Some(libc::ELOOP) => ConfineError::NotRegular {
            kind: "a symbolic link",
        },
        Some(libc::ENXIO) => ConfineError::NotRegular {
            kind: "a special file",
        },
        _ => io_error(e),
    }
}

/// Helpers for the unit tests of every caller that opens agent-named files.
#[cfg(test)]
pub(crate) mod test_support {
    use std::path::Path;
    use std::sync::mpsc;
    use std::time::Duration;

    /// Makes a FIFO (named pipe) at `path`.
    pub(crate) fn mkfifo(path: &Path) {
        let ok = std::process::Command::new("mkfifo")
            .arg(path)
            .status()
            .expect("run mkfifo")
            .success();
        assert!(ok, "mkfifo {}", path.display());
    }

    /// Runs `f` on a thread and fails the test (instead of hanging it) after 5 s.
    pub(crate) fn within_5s<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(f());
        });
        rx.recv_timeout(Duration::from_secs(5))
            .expect("the file operation blocked")
    }
}

#[cfg(test)]
mod tests {
    use super::test_support::{mkfifo, within_5s};
    use super::*;
    use std::os::unix::fs::symlink;

    /// `{tmp}/user1` (the root) with `notes/a.txt` and `private/p.txt`, and its sibling
    /// `{tmp}/user10` with `secret.txt`.
    struct Tree {
        _dir: tempfile::TempDir,
        base: PathBuf,
        ws: PathBuf,
    }

    fn tree() -> Tree {
        let dir = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(dir.path()).unwrap();
        let ws = base.join("user1");
        std::fs::create_dir_all(ws.join("notes")).unwrap();
        std::fs::create_dir_all(ws.join("private")).unwrap();
        std::fs::create_dir_all(base.join("user10")).unwrap();
        std::fs::write(ws.join("notes/a.txt"), "one\n").unwrap();
        std::fs::write(ws.join("private/p.txt"), "private").unwrap();
        std::fs::write(base.join("user10/secret.txt"), "secret").unwrap();
        Tree {
            _dir: dir,
            base,
            ws,
        }
    }

    fn public(t: &Tree) -> Confine {
        Confine::workspace(&t.ws, false).unwrap()
    }

    fn read(c: &Confine, p: impl AsRef<Path>) -> Result<Vec<u8>, ConfineError> {
        c.open_read(p.as_ref(), 1024)?.read_all()
    }

    #[test]
    fn reads_a_regular_file_inside_by_relative_or_absolute_path() {
        let t = tree();
        let c = public(&t);
        assert_eq!(read(&c, "notes/a.txt").unwrap(), b"one\n");
        assert_eq!(read(&c, t.ws.join("notes/a.txt")).unwrap(), b"one\n");
        let file = c.open_read(Path::new("notes/a.txt"), 1024).unwrap();
        assert_eq!(file.path(), t.ws.join("notes/a.txt"));
        assert_eq!(file.len(), 4);
    }

    #[test]
    fn sibling_prefix_is_outside() {
        let t = tree();
        let c = public(&t);
        assert_eq!(
            read(&c, t.base.join("user10/secret.txt")),
            Err(ConfineError::Outside)
        );
        symlink(t.base.join("user10"), t.ws.join("sib")).unwrap();
        assert_eq!(read(&c, "sib/secret.txt"), Err(ConfineError::Outside));
        assert_eq!(
            c.resolve_for_create(Path::new("sib/new.txt")),
            Err(ConfineError::Outside)
        );
    }

    #[test]
    fn dot_dot_cannot_climb_out_and_is_refused_in_paths_to_create() {
        let t = tree();
        let c = public(&t);
        assert_eq!(read(&c, "../user10/secret.txt"), Err(ConfineError::Outside));
        assert_eq!(read(&c, "notes/../../user10/x"), Err(ConfineError::Outside));
        // `..` that stays inside is fine for an existing path ...
        assert_eq!(read(&c, "notes/../notes/a.txt").unwrap(), b"one\n");
        // ... but never in a path to create.
        assert_eq!(
            c.resolve_for_create(Path::new("notes/../n.txt")),
            Err(ConfineError::Outside)
        );
        assert_eq!(
            c.write(Path::new("../user10/x"), b"x"),
            Err(ConfineError::Outside)
        );
        assert!(!t.base.join("user10/x").exists());
    }

    #[test]
    fn symlinks_are_resolved_before_the_check() {
        let t = tree();
        let c = public(&t);
        symlink(t.base.join("user10/secret.txt"), t.ws.join("out.txt")).unwrap();
        symlink(t.ws.join("notes/a.txt"), t.ws.join("in.txt")).unwrap();
        assert_eq!(read(&c, "out.txt"), Err(ConfineError::Outside));
        assert_eq!(read(&c, "in.txt").unwrap(), b"one\n");
        assert_eq!(read(&c, "/etc/passwd"), Err(ConfineError::Outside));
    }

    #[test]
    fn missing_is_not_found_inside_and_outside_elsewhere() {
        let t = tree();
        let c = public(&t);
        assert_eq!(read(&c, "notes/none.txt"), Err(ConfineError::NotFound));
        assert_eq!(read(&c, "notes/a.txt/x"), Err(ConfineError::NotFound));
        assert_eq!(read(&c, "/definitely/not/here"), Err(ConfineError::Outside));
        assert_eq!(read(&c, "."), Err(ConfineError::Outside), "the root itself");
    }

    #[test]
    fn a_root_that_does_not_exist_yet_contains_nothing_and_still_bounds() {
        let t = tree();
        let c = Confine::new(&t.ws.join("tmp/sess1")).unwrap();
        assert_eq!(c.root(), t.ws.join("tmp/sess1"));
        assert_eq!(read(&c, "r.md"), Err(ConfineError::NotFound));
        assert_eq!(
            read(&c, t.ws.join("notes/a.txt")),
            Err(ConfineError::Outside)
        );
    }

    #[test]
    fn a_fifo_is_refused_without_blocking() {
        let t = tree();
        let c = public(&t);
        mkfifo(&t.ws.join("pipe"));
        let c2 = c.clone();
        assert_eq!(
            within_5s(move || read(&c2, "pipe")),
            Err(ConfineError::NotRegular {
                kind: "a FIFO (named pipe)"
            })
        );
        // Also when the lstat pre-check is passed by (resolved, then opened directly).
        let path = c.resolve_existing(Path::new("pipe")).unwrap();
        let c3 = c.clone();
        assert!(matches!(
            within_5s(move || c3.open_resolved(path, 1024)),
            Err(ConfineError::NotRegular { .. })
        ));
        let c4 = c.clone();
        assert!(matches!(
            within_5s(move || c4.write(Path::new("pipe"), b"x")),
            Err(ConfineError::NotRegular { .. })
        ));
    }

    #[test]
    fn sockets_directories_and_devices_are_not_regular_files() {
        let t = tree();
        let c = public(&t);
        let _listener = std::os::unix::net::UnixListener::bind(t.ws.join("sock")).unwrap();
        assert_eq!(
            read(&c, "sock"),
            Err(ConfineError::NotRegular { kind: "a socket" })
        );
        assert_eq!(
            read(&c, "notes"),
            Err(ConfineError::NotRegular {
                kind: "a directory"
            })
        );
        assert!(matches!(
            c.write(Path::new("notes"), b"x"),
            Err(ConfineError::NotRegular {
                kind: "a directory"
            })
        ));
        let dev = Confine::new(Path::new("/dev")).unwrap();
        assert_eq!(
            read(&dev, "null"),
            Err(ConfineError::NotRegular { kind: "a device" })
        );
    }

    #[test]
    fn a_hard_link_is_refused_for_reading() {
        let t = tree();
        let c = public(&t);
        std::fs::hard_link(t.base.join("user10/secret.txt"), t.ws.join("h.txt")).unwrap();
        assert_eq!(
            read(&c, "h.txt"),
            Err(ConfineError::TooManyLinks { links: 2 })
        );
    }

    #[test]
    fn write_does_not_truncate_a_hard_linked_file() {
        let t = tree();
        let c = public(&t);
        let victim = t.base.join("user10/secret.txt");
        std::fs::hard_link(&victim, t.ws.join("h.txt")).unwrap();
        assert_eq!(
            c.write(Path::new("h.txt"), b"overwritten"),
            Err(ConfineError::TooManyLinks { links: 2 })
        );
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "secret");
    }

    #[test]
    fn write_creates_folders_and_replaces_content() {
        let t = tree();
        let c = public(&t);
        let path = c.write(Path::new("tmp/s1/r.md"), b"long text").unwrap();
        assert_eq!(path, t.ws.join("tmp/s1/r.md"));
        c.write(Path::new("tmp/s1/r.md"), b"short").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "short");
    }

    #[test]
    fn a_size_cap_is_checked_before_reading() {
        let t = tree();
        let c = public(&t);
        assert_eq!(
            c.open_read(Path::new("notes/a.txt"), 3).unwrap_err(),
            ConfineError::TooLarge { size: 4, max: 3 }
        );
    }

    #[test]
    fn a_file_swapped_for_a_symlink_after_the_check_is_not_followed() {
        let t = tree();
        let c = public(&t);
        let path = c.resolve_existing(Path::new("notes/a.txt")).unwrap();
        std::fs::remove_file(&path).unwrap();
        symlink(t.base.join("user10/secret.txt"), &path).unwrap();
        assert_eq!(
            c.open_resolved(path, 1024).unwrap_err(),
            ConfineError::NotRegular {
                kind: "a symbolic link"
            }
        );
    }

    #[test]
    fn a_directory_swapped_for_a_symlink_after_the_check_is_caught_on_the_descriptor() {
        let t = tree();
        let c = public(&t);
        std::fs::write(t.base.join("user10/a.txt"), "secret").unwrap();
        let path = c.resolve_existing(Path::new("notes/a.txt")).unwrap();
        std::fs::rename(t.ws.join("notes"), t.ws.join("old")).unwrap();
        symlink(t.base.join("user10"), t.ws.join("notes")).unwrap();
        assert_eq!(
            c.open_resolved(path, 1024).unwrap_err(),
            ConfineError::Outside
        );
    }

    #[test]
    fn the_skills_mount_point_is_hidden_in_every_session() {
        let t = tree();
        std::fs::create_dir_all(t.ws.join("skills/send-reply")).unwrap();
        std::fs::write(t.ws.join("skills/send-reply/SKILL.md"), "host copy").unwrap();
        for dm in [false, true] {
            let c = Confine::workspace(&t.ws, dm).unwrap();
            assert_eq!(
                read(&c, "skills/send-reply/SKILL.md"),
                Err(ConfineError::Hidden)
            );
            assert_eq!(
                c.write(Path::new("skills/send-reply/scripts/send-reply"), b"evil"),
                Err(ConfineError::Hidden)
            );
        }
        assert!(!t.ws.join("skills/send-reply/scripts").exists());
    }

    #[test]
    fn private_is_hidden_in_public_sessions_even_through_a_symlink() {
        let t = tree();
        let c = public(&t);
        assert_eq!(read(&c, "private/p.txt"), Err(ConfineError::Hidden));
        assert_eq!(read(&c, "private/none.txt"), Err(ConfineError::Hidden));
        symlink(t.ws.join("private/p.txt"), t.ws.join("notes/p.txt")).unwrap();
        symlink(t.ws.join("private"), t.ws.join("p")).unwrap();
        assert_eq!(read(&c, "notes/p.txt"), Err(ConfineError::Hidden));
        assert_eq!(read(&c, "p/p.txt"), Err(ConfineError::Hidden));
        assert_eq!(
            c.write(Path::new("p/new.md"), b"x"),
            Err(ConfineError::Hidden)
        );
        assert_eq!(
            c.write(Path::new("private/new.md"), b"x"),
            Err(ConfineError::Hidden)
        );
        assert!(!t.ws.join("private/new.md").exists());
    }

    #[test]
    fn other_sessions_staging_is_hidden_and_the_own_one_is_not() {
        let t = tree();
        for s in ["tmp/mine", "tmp/theirs"] {
            std::fs::create_dir_all(t.ws.join(s)).unwrap();
            std::fs::write(t.ws.join(s).join("reply.md"), "x").unwrap();
        }
        std::fs::write(t.ws.join("tmp/loose.txt"), "x").unwrap();
        let c = Confine::workspace(&t.ws, true)
            .unwrap()
            .hiding("tmp")
            .showing("tmp/mine");
        assert!(c.resolve_existing(Path::new("tmp/mine/reply.md")).is_ok());
        for p in [
            "tmp/theirs/reply.md",
            "tmp/loose.txt",
            "tmp/mine/../theirs/reply.md",
        ] {
            assert!(c.resolve_existing(Path::new(p)).is_err(), "{p}");
        }
        // A link in the own folder pointing at another session's staging is refused too.
        std::os::unix::fs::symlink(t.ws.join("tmp/theirs"), t.ws.join("tmp/mine/peek")).unwrap();
        assert_eq!(
            c.resolve_existing(Path::new("tmp/mine/peek/reply.md")),
            Err(ConfineError::Hidden)
        );
        // Showing the own folder leaves `private/` hidden in a public session.
        let public = Confine::workspace(&t.ws, false)
            .unwrap()
            .hiding("tmp")
            .showing("tmp/mine");
        assert_eq!(
            public.resolve_existing(Path::new("private/p.txt")),
            Err(ConfineError::Hidden)
        );
        assert!(
            public
                .resolve_existing(Path::new("tmp/mine/reply.md"))
                .is_ok()
        );
    }

    #[test]
    fn private_is_hidden_before_it_exists() {
        let t = tree();
        std::fs::remove_dir_all(t.ws.join("private")).unwrap();
        let c = public(&t);
        assert_eq!(
            c.write(Path::new("private/n.md"), b"x"),
            Err(ConfineError::Hidden)
        );
        assert!(!t.ws.join("private").exists());
    }

    #[test]
    fn private_is_visible_in_a_dm_session() {
        let t = tree();
        let c = Confine::workspace(&t.ws, true).unwrap();
        assert_eq!(read(&c, "private/p.txt").unwrap(), b"private");
        c.write(Path::new("private/n.md"), b"note").unwrap();
        assert_eq!(
            std::fs::read_to_string(t.ws.join("private/n.md")).unwrap(),
            "note"
        );
    }
}
