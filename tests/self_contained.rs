//! The binary runs from anywhere (issue: install it like a service): the shipped skills, prompts
//! and agent configuration come from the binary itself, written to the user's data folder when
//! needed and replaced when another version wrote them; relative paths in a configuration file
//! are relative to that file's folder, never the working directory; `check-config` says where
//! each folder comes from. The binary is copied out of the build tree and run from `/`.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A copy of the binary in a folder of its own, a home, and a configuration folder.
struct Install {
    dir: tempfile::TempDir,
}

impl Install {
    fn new() -> Install {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("bin")).unwrap();
        std::fs::create_dir_all(dir.path().join("home")).unwrap();
        std::fs::create_dir_all(dir.path().join("etc")).unwrap();
        std::fs::copy(common::bin(), dir.path().join("bin/air-friends")).unwrap();
        Install { dir }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    /// Runs the copied binary from `cwd` with only PATH and HOME set.
    ///
    /// A copy just written can be "busy" for a moment: another test's thread that forked while
    /// the copy was open for writing holds it open until its child executes. So a start that
    /// fails with ETXTBSY is tried again (for up to two seconds).
    fn run(&self, cwd: &Path, args: &[&str]) -> Output {
        let mut tries = 0;
        loop {
            let result = Command::new(self.path("bin/air-friends"))
                .args(args)
                .current_dir(cwd)
                .env_clear()
                .env("PATH", "/usr/bin:/bin")
                .env("HOME", self.path("home"))
                .output();
            match result {
                Err(e) if e.kind() == std::io::ErrorKind::ExecutableFileBusy && tries < 100 => {
                    tries += 1;
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                other => return other.expect("run air-friends"),
            }
        }
    }

    fn config(&self, text: &str) -> PathBuf {
        let path = self.path("etc/config.yaml");
        std::fs::write(&path, text).unwrap();
        path
    }

    fn shipped(&self) -> PathBuf {
        self.path("home/.local/share/air-friends/defaults")
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// No skills, prompts or agent configuration named: the binary's own, from any folder.
const BARE: &str = "agent:\n  command: sh\n";

#[test]
fn a_copied_binary_runs_from_any_folder_with_the_defaults_it_carries() {
    let install = Install::new();
    let config = install.config(BARE);
    let config_arg = config.to_str().unwrap();
    let out = install.run(Path::new("/"), &["check-config", "--config", config_arg]);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let shipped = install.shipped();
    for (key, folder) in [
        ("agent.skillsDir", "skills"),
        ("agent.configDir", "agent-config"),
        ("prompts.dir", "prompts"),
    ] {
        let line = format!(
            "{config_arg}: {key}: {} (shipped with air-friends (written from the binary to your data folder))",
            shipped.join(folder).display()
        );
        assert!(stderr.contains(&line), "no {line:?} in\n{stderr}");
    }
    // Exactly what the checkout ships, programs still programs.
    let script = shipped.join("skills/send-reply/scripts/send-reply");
    assert_eq!(
        std::fs::read(&script).unwrap(),
        std::fs::read(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("skills/send-reply/scripts/send-reply")
        )
        .unwrap()
    );
    use std::os::unix::fs::PermissionsExt as _;
    assert_eq!(
        std::fs::metadata(&script).unwrap().permissions().mode() & 0o111,
        0o111
    );
    let stamp = std::fs::read_to_string(shipped.join(".shipped")).unwrap();
    assert!(stamp.starts_with(&format!("air-friends {} ", env!("CARGO_PKG_VERSION"))));

    // Another version's folder (an upgrade) is replaced whole at the next start; a file it
    // had and this version does not is gone.
    std::fs::write(
        shipped.join(".shipped"),
        "air-friends 0.0.1 0123456789abcdef\n",
    )
    .unwrap();
    std::fs::write(shipped.join("prompts/retired.md"), "old").unwrap();
    let out = install.run(
        &install.path("home"),
        &["check-config", "--config", config_arg],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        std::fs::read_to_string(shipped.join(".shipped")).unwrap(),
        stamp
    );
    assert!(!shipped.join("prompts/retired.md").exists());
}

#[test]
fn relative_paths_are_relative_to_the_configuration_files_folder() {
    let install = Install::new();
    // The operator's own copy of the prompts, beside the configuration, changed.
    let out = install.run(
        Path::new("/"),
        &["write-defaults", install.path("etc/mine").to_str().unwrap()],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    std::fs::write(
        install.path("etc/mine/prompts/persona.md"),
        "You are Mallow.",
    )
    .unwrap();
    let config = install.config(&format!(
        "{BARE}  skillsDir: ./mine/skills\nprompts:\n  dir: mine/prompts\nworkspace:\n  repoPath: ./data\n"
    ));
    let config_arg = config.to_str().unwrap();
    let etc = install.path("etc");
    let mut printed = Vec::new();
    for cwd in [Path::new("/"), install.path("home").as_path()] {
        let out = install.run(cwd, &["check-config", "--config", config_arg]);
        let stderr = text(&out.stderr);
        assert!(out.status.success(), "{stderr}");
        let yaml = text(&out.stdout);
        assert!(
            yaml.contains(&format!("repoPath: {}", etc.join("data").display())),
            "{yaml}"
        );
        assert!(
            yaml.contains(&format!("dir: {}", etc.join("mine/prompts").display())),
            "{yaml}"
        );
        assert!(
            stderr.contains(&format!(
                "prompts.dir: {} (set in the configuration)",
                etc.join("mine/prompts").display()
            )),
            "{stderr}"
        );
        assert!(
            stderr.contains(&format!(
                "agent.skillsDir: {} (set in the configuration)",
                etc.join("mine/skills").display()
            )),
            "{stderr}"
        );
        printed.push(yaml);
    }
    assert_eq!(printed[0], printed[1], "the same wherever it is started");
    // The operator's copy is never rewritten; only the unset agent.configDir was written.
    assert_eq!(
        std::fs::read_to_string(install.path("etc/mine/prompts/persona.md")).unwrap(),
        "You are Mallow."
    );
    assert!(
        install
            .shipped()
            .join("agent-config/opencode.json")
            .is_file()
    );
}

#[test]
fn write_defaults_never_replaces_a_folder_it_did_not_write() {
    let install = Install::new();
    let mine = install.path("etc/prompts");
    std::fs::create_dir_all(&mine).unwrap();
    std::fs::write(mine.join("system.md"), "mine").unwrap();
    let out = install.run(Path::new("/"), &["write-defaults", mine.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("no .shipped stamp"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(mine.join("system.md")).unwrap(),
        "mine"
    );
}
