//! Where a downloaded file goes: `in/` under the session's staging folder, read-only, under a
//! name made safe from the sender's file name and unique in the folder (`cat.jpg`,
//! `cat-2.jpg`, ...). The staging folder is the agent's to write in, so the file is created
//! through [`Confine::create_new`]: nothing the agent planted there (a symlink named like the
//! next file, `in/` swapped for a link) can make the daemon write outside it.

use std::path::{Path, PathBuf};

use crate::confine::{Confine, ConfineError};

/// The folder under the staging folder that holds a session's incoming files.
pub const INCOMING_DIR: &str = "in";

/// Permission of a saved file: read-only for everyone who may see it.
const FILE_MODE: u32 = 0o444;

/// Longest saved name, in bytes (the extension included).
const MAX_NAME_BYTES: usize = 80;

/// Tries of `name-N.ext` before giving up.
const MAX_TRIES: u32 = 1_000;

/// A file name safe to write and to quote in a prompt: ASCII letters, digits, `.`, `-`, `_`
/// (anything else becomes `_`), no leading dot, at most `MAX_NAME_BYTES` with the extension
/// kept; `file` when nothing is left.
pub fn safe_name(original: &str) -> String {
    let base = original.rsplit(['/', '\\']).next().unwrap_or_default();
    let mut name: String = base
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') {
                c
            } else {
                '_'
            }
        })
        .collect();
    while name.starts_with('.') {
        name.remove(0);
    }
    let (stem, ext) = split_extension(&name);
    let ext = if ext.len() > 16 { "" } else { ext };
    let keep = MAX_NAME_BYTES.saturating_sub(ext.len() + 1).max(1);
    let stem: String = stem.chars().take(keep).collect();
    let stem = stem.trim_matches(['_', '.', '-']);
    let stem = if stem.is_empty() { "file" } else { stem };
    if ext.is_empty() {
        stem.to_owned()
    } else {
        format!("{stem}.{ext}")
    }
}

fn split_extension(name: &str) -> (&str, &str) {
    match name.rsplit_once('.') {
        Some((stem, ext)) if !stem.is_empty() && !ext.is_empty() => (stem, ext),
        _ => (name, ""),
    }
}

/// Writes `bytes` to a new read-only file named after `original` in `staging/in/`. Returns its
/// canonical path. Blocking: run it in `spawn_blocking`.
pub fn save(staging: &Path, original: &str, bytes: &[u8]) -> Result<PathBuf, ConfineError> {
    let confine = Confine::new(staging)?;
    let name = safe_name(original);
    let (stem, ext) = split_extension(&name);
    for n in 1..=MAX_TRIES {
        let candidate = match (n, ext) {
            (1, _) => name.clone(),
            (_, "") => format!("{stem}-{n}"),
            _ => format!("{stem}-{n}.{ext}"),
        };
        let relative = Path::new(INCOMING_DIR).join(candidate);
        // Taken (by an earlier file, or by anything the agent put there, a link included).
        if std::fs::symlink_metadata(staging.join(&relative)).is_ok() {
            continue;
        }
        match confine.create_new(&relative, bytes, FILE_MODE) {
            Err(ConfineError::Exists) => continue,
            other => return other,
        }
    }
    Err(ConfineError::Exists)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn names_are_made_safe_and_keep_their_extension() {
        for (given, safe) in [
            ("cat.jpg", "cat.jpg"),
            ("../../etc/passwd", "passwd"),
            ("..\\..\\boot.ini", "boot.ini"),
            (".bashrc", "bashrc"),
            ("猫の写真.PNG", "file.PNG"),
            ("my photo (1).jpeg", "my_photo__1.jpeg"),
            ("", "file"),
            ("...", "file"),
            ("a;rm -rf ~;.txt", "a_rm_-rf.txt"),
            ("$(reboot).md", "reboot.md"),
        ] {
            assert_eq!(safe_name(given), safe, "{given:?}");
        }
        let long = format!("{}.png", "x".repeat(300));
        let name = safe_name(&long);
        assert!(
            name.len() <= MAX_NAME_BYTES && name.ends_with(".png"),
            "{name}"
        );
    }

    #[test]
    fn saved_files_are_new_read_only_and_never_overwrite() {
        let dir = tempfile::tempdir().unwrap();
        let a = save(dir.path(), "cat.jpg", b"one").unwrap();
        let b = save(dir.path(), "cat.jpg", b"two").unwrap();
        let c = save(dir.path(), "README", b"three").unwrap();
        let d = save(dir.path(), "README", b"four").unwrap();
        let names: Vec<_> = [&a, &b, &c, &d]
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["cat.jpg", "cat-2.jpg", "README", "README-2"]);
        assert_eq!(std::fs::read(&a).unwrap(), b"one");
        assert_eq!(std::fs::read(&b).unwrap(), b"two");
        let mode = std::fs::metadata(&a).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o444);
        assert!(a.starts_with(dir.path().canonicalize().unwrap().join("in")));
    }

    #[test]
    fn a_planted_symlink_or_a_swapped_folder_is_never_written_through() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let staging = dir.path().join("staging");
        std::fs::create_dir_all(staging.join("in")).unwrap();
        // A link named like the next file, pointing at a file outside.
        let victim = outside.path().join("victim");
        std::fs::write(&victim, "keep").unwrap();
        std::os::unix::fs::symlink(&victim, staging.join("in/cat.jpg")).unwrap();
        let saved = save(&staging, "cat.jpg", b"evil").unwrap();
        assert_eq!(saved.file_name().unwrap(), "cat-2.jpg");
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
        // `in/` itself swapped for a link to a folder outside.
        std::fs::remove_dir_all(staging.join("in")).unwrap();
        std::os::unix::fs::symlink(outside.path(), staging.join("in")).unwrap();
        assert_eq!(
            save(&staging, "dog.jpg", b"evil"),
            Err(ConfineError::Outside)
        );
        assert!(!outside.path().join("dog.jpg").exists());
    }
}
