//! The shipped defaults: the skills, prompts and agent configuration that come with
//! air-friends, embedded in the binary (build.rs) so that it runs from any folder.
//!
//! The daemon reads them from a folder on disk (the sandbox mounts the skills, OpenCode reads
//! its `opencode.json`), found by [`locate`]:
//! * the package's `/usr/share/air-friends` ([`PACKAGE_DIR`]) when its stamp file
//!   ([`STAMP_FILE`]) says it was written from this very build;
//! * otherwise the user's data folder, `$XDG_DATA_HOME/air-friends/defaults` (else
//!   `~/.local/share/air-friends/defaults`), which [`Shipped::ensure`] (re)writes from the
//!   embedded copy whenever its stamp differs, so an upgrade replaces the shipped defaults.
//!
//! An operator's own folders (`agent.skillsDir`, `agent.configDir`, `prompts.dir`) are never
//! written: they replace the shipped ones (see `config::paths`). The folder is swapped in
//! whole (written beside it, then renamed), so a reader never sees half of it.

use std::io;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

/// One embedded file: its path under the shipped folder, its bytes, and whether it is a
/// program (a skill's scripts).
#[derive(Debug, Clone, Copy)]
pub struct ShippedFile {
    /// `/`-separated, relative (`skills/send-reply/SKILL.md`).
    pub path: &'static str,
    /// The contents.
    pub bytes: &'static [u8],
    /// Written with mode 0755 rather than 0644.
    pub executable: bool,
}

/// Every shipped file, in path order.
pub static FILES: &[ShippedFile] = include!(concat!(env!("OUT_DIR"), "/shipped_files.rs"));

/// Where the Debian package installs the shipped defaults.
pub const PACKAGE_DIR: &str = "/usr/share/air-friends";

/// The file in a shipped folder naming the build it was written from ([`stamp`]).
pub const STAMP_FILE: &str = ".shipped";

/// The three folders inside a shipped folder.
pub const SKILLS: &str = "skills";
/// See [`SKILLS`].
pub const PROMPTS: &str = "prompts";
/// See [`SKILLS`].
pub const AGENT_CONFIG: &str = "agent-config";

/// The stamp of this build's defaults: the version and a hash of every embedded file.
pub fn stamp() -> String {
    format!(
        "air-friends {} {}\n",
        env!("CARGO_PKG_VERSION"),
        env!("SHIPPED_DIGEST")
    )
}

/// air-friends' folder in the user's data folder: `$XDG_DATA_HOME/air-friends`, else
/// `$HOME/.local/share/air-friends` (a relative `XDG_DATA_HOME` is ignored, as the XDG base
/// directory rules say). None without `HOME`.
pub fn user_data_dir(xdg_data_home: Option<&str>, home: Option<&str>) -> Option<PathBuf> {
    let data = xdg_data_home
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| {
            let home = home.filter(|h| !h.is_empty())?;
            Some(Path::new(home).join(".local/share"))
        })?;
    Some(data.join("air-friends"))
}

/// Where a shipped folder came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// The package's [`PACKAGE_DIR`], written from this build.
    Package,
    /// The user's data folder, written from the binary on demand.
    UserData,
    /// Neither: the package's folder is missing or from another build and there is no home.
    Nowhere,
}

/// The shipped folder this process uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shipped {
    /// The folder holding `skills/`, `prompts/` and `agent-config/`.
    pub dir: PathBuf,
    /// Where it came from.
    pub origin: Origin,
}

/// Why the shipped defaults could not be written.
#[derive(Debug, thiserror::Error)]
pub enum ShippedError {
    /// No package folder of this build and no `HOME` to write one under.
    #[error(
        "{PACKAGE_DIR} is missing or from another build, and there is no home folder to write \
         the shipped defaults to; set HOME, install the package, or set agent.skillsDir, \
         agent.configDir and prompts.dir"
    )]
    Nowhere,
    /// The folder exists, holds something, and was not written by air-friends: it may be an
    /// operator's own copy, which is never replaced.
    #[error(
        "{0} holds files but no {STAMP_FILE} stamp: it is not a folder of shipped defaults, and \
         it is left as it is; choose an empty or new folder"
    )]
    NotShipped(PathBuf),
    /// A file or folder could not be written.
    #[error("cannot write the shipped defaults to {path}: {source}")]
    Write {
        /// The file or folder.
        path: PathBuf,
        /// The operating system's error.
        source: io::Error,
    },
}

/// The shipped folder for this environment (see the module header). Reads one stamp file;
/// writes nothing.
pub fn locate(xdg_data_home: Option<&str>, home: Option<&str>) -> Shipped {
    locate_in(Path::new(PACKAGE_DIR), xdg_data_home, home)
}

/// [`locate`] with the package folder given (tests).
pub fn locate_in(package: &Path, xdg_data_home: Option<&str>, home: Option<&str>) -> Shipped {
    if is_current(package) {
        return Shipped {
            dir: package.to_path_buf(),
            origin: Origin::Package,
        };
    }
    match user_data_dir(xdg_data_home, home) {
        Some(data) => Shipped {
            dir: data.join("defaults"),
            origin: Origin::UserData,
        },
        None => Shipped {
            dir: package.to_path_buf(),
            origin: Origin::Nowhere,
        },
    }
}

/// Whether `dir` holds this build's defaults (its stamp file is this build's [`stamp`]).
pub fn is_current(dir: &Path) -> bool {
    std::fs::read_to_string(dir.join(STAMP_FILE)).is_ok_and(|s| s == stamp())
}

impl Shipped {
    /// The shipped skills.
    pub fn skills(&self) -> PathBuf {
        self.dir.join(SKILLS)
    }

    /// The shipped prompts.
    pub fn prompts(&self) -> PathBuf {
        self.dir.join(PROMPTS)
    }

    /// The shipped agent configuration.
    pub fn agent_config(&self) -> PathBuf {
        self.dir.join(AGENT_CONFIG)
    }

    /// Makes sure the folder holds this build's defaults: the package's is current by
    /// construction; the user's is written when its stamp differs. Returns whether it wrote.
    pub fn ensure(&self) -> Result<bool, ShippedError> {
        match self.origin {
            Origin::Package => Ok(false),
            Origin::UserData => write(&self.dir),
            Origin::Nowhere => Err(ShippedError::Nowhere),
        }
    }
}

/// The error for a failed write of `path`.
fn err(path: &Path) -> impl FnOnce(io::Error) -> ShippedError + '_ {
    move |source| ShippedError::Write {
        path: path.to_path_buf(),
        source,
    }
}

/// Writes this build's defaults to `dir` unless it already holds them (see [`is_current`]):
/// into a fresh folder beside it first, then renamed into place, the previous folder (if any)
/// moved aside and removed. Folders get mode 0755 and files 0644 (0755 for programs) whatever
/// the umask, since the agents may run as another user. A folder that holds files but no
/// stamp is refused ([`ShippedError::NotShipped`]). Returns whether it wrote.
pub fn write(dir: &Path) -> Result<bool, ShippedError> {
    if is_current(dir) {
        return Ok(false);
    }
    let holds_files = std::fs::read_dir(dir).is_ok_and(|mut entries| entries.next().is_some());
    if holds_files && !dir.join(STAMP_FILE).is_file() {
        return Err(ShippedError::NotShipped(dir.to_path_buf()));
    }
    let parent = dir.parent().unwrap_or(Path::new("/"));
    std::fs::create_dir_all(parent).map_err(err(parent))?;
    let fresh = tempfile::Builder::new()
        .prefix(".shipped-new-")
        .tempdir_in(parent)
        .map_err(err(parent))?;
    fill(fresh.path())?;
    if is_current(dir) {
        // Another process put this build's defaults in place meanwhile.
        return Ok(false);
    }
    let aside = dir.exists().then(|| {
        parent.join(format!(
            ".shipped-old-{}-{}",
            std::process::id(),
            rand::random::<u32>()
        ))
    });
    if let Some(aside) = &aside {
        match std::fs::rename(dir, aside) {
            Ok(()) => {}
            // Another process moved the stale folder aside first (tests start many daemons
            // at once after a new build): it is gone, which is what this wanted.
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(err(dir)(e)),
        }
    }
    let fresh = fresh.keep();
    if let Err(e) = std::fs::rename(&fresh, dir) {
        let _ = std::fs::remove_dir_all(&fresh);
        if !is_current(dir) {
            return Err(err(dir)(e));
        }
    }
    if let Some(aside) = aside {
        let _ = std::fs::remove_dir_all(aside);
    }
    Ok(true)
}

/// Writes every embedded file and, last, the stamp into the empty folder `root`.
fn fill(root: &Path) -> Result<(), ShippedError> {
    let set_mode = |path: &Path, mode: u32| {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(err(path))
    };
    set_mode(root, 0o755)?;
    for file in FILES {
        let path = root.join(file.path);
        let mut folder = path.parent();
        let mut made = Vec::new();
        while let Some(f) = folder.filter(|f| *f != root && !f.exists()) {
            made.push(f.to_path_buf());
            folder = f.parent();
        }
        for f in made.iter().rev() {
            std::fs::create_dir(f).map_err(err(f))?;
            set_mode(f, 0o755)?;
        }
        std::fs::write(&path, file.bytes).map_err(err(&path))?;
        set_mode(&path, if file.executable { 0o755 } else { 0o644 })?;
    }
    let stamp_path = root.join(STAMP_FILE);
    std::fs::write(&stamp_path, stamp()).map_err(err(&stamp_path))?;
    set_mode(&stamp_path, 0o644)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_binary_carries_every_shipped_folder_with_the_scripts_executable() {
        for dir in [SKILLS, PROMPTS, AGENT_CONFIG] {
            assert!(
                FILES.iter().any(|f| f.path.starts_with(&format!("{dir}/"))),
                "{dir}"
            );
        }
        let script = FILES
            .iter()
            .find(|f| f.path == "skills/send-reply/scripts/send-reply")
            .expect("send-reply's script");
        assert!(script.executable);
        let prompt = FILES
            .iter()
            .find(|f| f.path == "prompts/system.md")
            .unwrap();
        assert!(!prompt.executable);
        assert!(stamp().starts_with(&format!("air-friends {} ", env!("CARGO_PKG_VERSION"))));
    }

    #[test]
    fn written_once_kept_while_current_and_replaced_when_stale() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("air-friends/defaults");
        assert!(write(&dir).unwrap());
        assert!(is_current(&dir));
        let script = dir.join("skills/send-reply/scripts/send-reply");
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&script), 0o755);
        assert_eq!(mode(&dir.join("prompts/system.md")), 0o644);
        assert_eq!(mode(&dir.join("skills/send-reply")), 0o755);
        assert!(!write(&dir).unwrap(), "a current folder is kept");

        // A folder from another build (or edited by hand) is replaced whole.
        std::fs::write(dir.join(STAMP_FILE), "air-friends 0.0.0 0\n").unwrap();
        std::fs::write(dir.join("prompts/stray.md"), "left over").unwrap();
        assert!(write(&dir).unwrap());
        assert!(is_current(&dir));
        assert!(!dir.join("prompts/stray.md").exists());
        let left: Vec<_> = std::fs::read_dir(dir.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(
            left,
            vec![std::ffi::OsString::from("defaults")],
            "no temporary left"
        );
    }

    /// Many processes finding the same stale folder at once (the tests' daemons after a new
    /// build) all succeed, and the folder ends up current with nothing left beside it.
    #[test]
    fn concurrent_writers_of_a_stale_folder_all_succeed() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("air-friends/defaults");
        assert!(write(&dir).unwrap());
        for _ in 0..5 {
            std::fs::write(dir.join(STAMP_FILE), "air-friends 0.0.0 0\n").unwrap();
            let writers: Vec<_> = (0..8)
                .map(|_| {
                    let dir = dir.clone();
                    std::thread::spawn(move || write(&dir))
                })
                .collect();
            for writer in writers {
                writer.join().unwrap().expect("every writer succeeds");
            }
            assert!(is_current(&dir));
        }
        let left: Vec<_> = std::fs::read_dir(dir.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left, vec![std::ffi::OsString::from("defaults")]);
    }

    #[test]
    fn a_folder_of_someone_elses_files_is_never_replaced() {
        let tmp = tempfile::tempdir().unwrap();
        let mine = tmp.path().join("my-prompts");
        std::fs::create_dir(&mine).unwrap();
        std::fs::write(mine.join("system.md"), "my own").unwrap();
        assert!(matches!(write(&mine), Err(ShippedError::NotShipped(_))));
        assert_eq!(
            std::fs::read_to_string(mine.join("system.md")).unwrap(),
            "my own"
        );
        let empty = tmp.path().join("empty");
        std::fs::create_dir(&empty).unwrap();
        assert!(write(&empty).unwrap());
    }

    #[test]
    fn the_package_folder_wins_only_when_written_from_this_build() {
        let tmp = tempfile::tempdir().unwrap();
        let package = tmp.path().join("share");
        let home = tmp.path().join("home");
        let home = home.to_str();
        let user = locate_in(&package, None, home);
        assert_eq!(user.origin, Origin::UserData);
        assert_eq!(
            user.dir,
            tmp.path().join("home/.local/share/air-friends/defaults")
        );
        write(&package).unwrap();
        assert_eq!(
            locate_in(&package, None, home),
            Shipped {
                dir: package.clone(),
                origin: Origin::Package
            }
        );
        std::fs::write(package.join(STAMP_FILE), "air-friends 0.0.0 0\n").unwrap();
        assert_eq!(locate_in(&package, None, home).origin, Origin::UserData);
        let xdg = locate_in(&package, Some("/x/data"), home);
        assert_eq!(xdg.dir, PathBuf::from("/x/data/air-friends/defaults"));
        let nowhere = locate_in(&package, None, None);
        assert_eq!(nowhere.origin, Origin::Nowhere);
        assert!(matches!(nowhere.ensure(), Err(ShippedError::Nowhere)));
    }
}
