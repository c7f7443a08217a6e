//! Build script: records the commit the binary was built from, for `air-friends --version`
//! (`src/cli.rs`, tests/cli.rs `version_shows_the_package_version_and_the_commit`).
//!
//! `AIR_FRIENDS_COMMIT` is `git rev-parse --short=12 HEAD`, with `-dirty` when `git status
//! --porcelain` lists anything, or `unknown` when there is no git or no repository (a release
//! tarball). A packager may set `AIR_FRIENDS_BUILD_COMMIT` to record the commit instead.
//!
//! The script reruns only when `HEAD`, the branch it points to or `packed-refs` change (a
//! commit, a checkout), not on every build and not on every `git status` (which rewrites the
//! index): `-dirty` describes the work tree as it was when `HEAD` last moved.
//!
//! It also embeds the shipped defaults (`skills/`, `prompts/`, `agent-config/`) in the binary:
//! `$OUT_DIR/shipped_files.rs` lists every file with `include_bytes!` and whether it is
//! executable (a skill's scripts must stay so), and `SHIPPED_DIGEST` is a hash of all of it, so
//! a folder written from one build is recognised (`src/shipped.rs`). Hand-written rather than
//! `include_dir`: that crate keeps no file modes.

#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=AIR_FRIENDS_BUILD_COMMIT");
    let commit = match std::env::var("AIR_FRIENDS_BUILD_COMMIT") {
        Ok(c) if !c.trim().is_empty() => c.trim().to_owned(),
        _ => {
            watch_git_state();
            git_commit().unwrap_or_else(|| "unknown".to_owned())
        }
    };
    println!("cargo:rustc-env=AIR_FRIENDS_COMMIT={commit}");
    embed_shipped();
}

/// The folders of the package directory shipped inside the binary.
const SHIPPED: &[&str] = &["skills", "prompts", "agent-config"];

/// Writes `$OUT_DIR/shipped_files.rs` and sets `SHIPPED_DIGEST` (FNV-1a over each file's
/// path, mode and bytes, in path order).
fn embed_shipped() {
    use std::fmt::Write as _;
    use std::os::unix::fs::PermissionsExt as _;
    let root = env_path("CARGO_MANIFEST_DIR");
    let mut files = Vec::new();
    for dir in SHIPPED {
        println!("cargo:rerun-if-changed={dir}");
        collect(&root, &root.join(dir), &mut files);
    }
    files.sort();
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let mut feed = |bytes: &[u8]| {
        for b in bytes {
            hash ^= u64::from(*b);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
    };
    let mut out = String::from("&[\n");
    for rel in &files {
        let full = root.join(rel);
        let executable = std::fs::metadata(&full)
            .map(|m| m.permissions().mode() & 0o111 != 0)
            .unwrap_or(false);
        let bytes = std::fs::read(&full).unwrap_or_else(|e| panic!("{}: {e}", full.display()));
        feed(rel.as_bytes());
        feed(&[0, u8::from(executable)]);
        feed(&(bytes.len() as u64).to_le_bytes());
        feed(&bytes);
        let _ = writeln!(
            out,
            "    ShippedFile {{ path: {rel:?}, bytes: include_bytes!({full:?}), executable: {executable} }},",
            full = full.display().to_string(),
        );
    }
    out.push_str("]\n");
    let target = env_path("OUT_DIR").join("shipped_files.rs");
    std::fs::write(&target, out).unwrap_or_else(|e| panic!("{}: {e}", target.display()));
    println!("cargo:rustc-env=SHIPPED_DIGEST={hash:016x}");
}

/// Every regular file under `dir`, as a `/`-separated path relative to `root`.
fn collect(root: &std::path::Path, dir: &std::path::Path, files: &mut Vec<String>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries {
        let path = entry.expect("directory entry").path();
        let kind = std::fs::symlink_metadata(&path)
            .expect("file type")
            .file_type();
        if kind.is_dir() {
            collect(root, &path, files);
        } else if kind.is_file() {
            let rel = path
                .strip_prefix(root)
                .expect("under the package directory");
            files.push(rel.to_string_lossy().into_owned());
        }
    }
}

/// Runs `git` with `args` in the package directory; its trimmed stdout when it succeeds.
fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .args(args)
        .current_dir(env_path("CARGO_MANIFEST_DIR"))
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    Some(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

fn env_path(var: &str) -> PathBuf {
    PathBuf::from(std::env::var_os(var).unwrap_or_default())
}

/// The short commit, `-dirty` appended when the work tree has changes.
fn git_commit() -> Option<String> {
    let hash = git(&["rev-parse", "--short=12", "HEAD"]).filter(|h| !h.is_empty())?;
    let dirty = git(&["status", "--porcelain"]).is_some_and(|s| !s.is_empty());
    Some(if dirty { format!("{hash}-dirty") } else { hash })
}

/// `cargo:rerun-if-changed` for the files a commit or checkout touches. Only existing files
/// are named: cargo reruns the script on every build for a path that does not exist.
fn watch_git_state() {
    let Some(git_dir) = git(&["rev-parse", "--absolute-git-dir"]) else {
        return;
    };
    let git_dir = PathBuf::from(git_dir);
    // In a linked work tree, branches and packed-refs live in the common directory.
    let common = git(&["rev-parse", "--git-common-dir"])
        .map(|c| absolute(&c))
        .unwrap_or_else(|| git_dir.clone());
    let mut watched = vec![git_dir.join("HEAD"), common.join("packed-refs")];
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watched.push(common.join(branch));
    }
    for path in watched.iter().filter(|p| p.is_file()) {
        println!("cargo:rerun-if-changed={}", path.display());
    }
}

/// `path` as git printed it: a relative path is relative to the package directory (git's cwd).
fn absolute(path: &str) -> PathBuf {
    let p = PathBuf::from(path);
    if p.is_absolute() {
        p
    } else {
        env_path("CARGO_MANIFEST_DIR").join(p)
    }
}
