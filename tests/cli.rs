//! The command line's own surface through the real binary: `skill --help` lists the skills,
//! `completions SHELL` and `man` generate from the parser, `--version` names the commit.

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::bin;

/// Runs the binary in `cwd` with a minimal environment plus `env`.
fn run(cwd: &Path, args: &[&str], env: &[(&str, &Path)]) -> Output {
    let mut cmd = Command::new(bin());
    cmd.args(args)
        .current_dir(cwd)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default());
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run air-friends")
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The shipped skills' names and the first sentence of each SKILL.md description.
fn shipped_skills() -> Vec<(String, String)> {
    let mut skills = Vec::new();
    for entry in std::fs::read_dir(repo().join("skills")).unwrap() {
        let dir = entry.unwrap().path();
        let text = std::fs::read_to_string(dir.join("SKILL.md")).unwrap();
        let doc = air_friends::skills::frontmatter::parse(&text, None).unwrap();
        let description = doc.frontmatter.description;
        let first = description
            .find(". ")
            .map_or(description.as_str(), |i| &description[..=i]);
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        skills.push((name, first.to_owned()));
    }
    assert!(skills.len() >= 14, "{skills:?}");
    skills
}

#[test]
fn skill_help_exits_0_and_lists_the_shipped_skills_with_their_descriptions() {
    let out = run(repo(), &["skill", "--help"], &[]);
    let text = stdout(&out);
    assert!(out.status.success(), "{out:?}");
    assert!(text.starts_with("Usage: air-friends skill NAME"), "{text}");
    assert!(text.contains("Skills in "), "{text}");
    for (name, first_sentence) in shipped_skills() {
        let line = text
            .lines()
            .find(|l| l.split_whitespace().next() == Some(name.as_str()))
            .unwrap_or_else(|| panic!("{name} not listed in:\n{text}"));
        assert!(
            line.ends_with(&first_sentence),
            "{line:?} vs {first_sentence:?}"
        );
    }
}

#[test]
fn skill_help_lists_the_folder_named_by_air_friends_skills_dir_first() {
    let tmp = tempfile::tempdir().unwrap();
    let custom = tmp.path().join("custom");
    std::fs::create_dir_all(custom.join("weather-now")).unwrap();
    std::fs::write(custom.join("weather-now/manifest.json"), "{}").unwrap();
    std::fs::write(
        custom.join("weather-now/SKILL.md"),
        "---\nname: weather-now\ndescription: Look up the weather. Use it when asked.\n---\n",
    )
    .unwrap();
    let out = run(
        tmp.path(),
        &["skill", "-h"],
        &[("AIR_FRIENDS_SKILLS_DIR", &custom)],
    );
    let text = stdout(&out);
    assert!(out.status.success(), "{out:?}");
    assert!(
        text.contains(&format!(
            "Skills in {}:\n  weather-now  Look up the weather.\n",
            custom.display()
        )),
        "{text}"
    );
    // No ./skills here: the rest of what the client can call are the built-in skills.
    assert!(!text.contains("built-in"), "{text}");
}

#[test]
fn skill_name_help_still_prints_that_skills_flags() {
    let out = run(repo(), &["skill", "send-reply", "--help"], &[]);
    let text = stdout(&out);
    assert!(out.status.success(), "{out:?}");
    assert!(text.starts_with("Usage: "), "{text}");
    assert!(text.contains("--message-file PATH"), "{text}");
    assert!(!text.contains("Skills in"), "{text}");
}

#[test]
fn skill_without_a_name_is_a_usage_error_that_lists_the_skills() {
    let out = run(repo(), &["skill"], &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(out.stdout.is_empty());
    assert!(stderr.contains("send-reply"), "{stderr}");
}

#[test]
fn completions_bash_is_a_valid_script_naming_the_subcommands() {
    let tmp = tempfile::tempdir().unwrap();
    let out = run(tmp.path(), &["completions", "bash"], &[]);
    let script = stdout(&out);
    assert!(out.status.success(), "{out:?}");
    for sub in [
        "serve",
        "chat",
        "check-config",
        "skill",
        "backup",
        "completions",
        "man",
    ] {
        assert!(
            script.contains(sub),
            "{sub} missing from the bash completions"
        );
    }
    let path = tmp.path().join("air-friends.bash");
    std::fs::write(&path, &script).unwrap();
    let check = Command::new("bash").arg("-n").arg(&path).output().unwrap();
    assert!(
        check.status.success(),
        "bash -n: {}",
        String::from_utf8_lossy(&check.stderr)
    );
}

#[test]
fn completions_exist_for_every_documented_shell() {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let out = run(repo(), &["completions", shell], &[]);
        assert!(out.status.success(), "{shell}: {out:?}");
        assert!(stdout(&out).contains("check-config"), "{shell}");
    }
    let out = run(repo(), &["completions", "tcsh"], &[]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "an unknown shell is a usage error"
    );
}

#[test]
fn man_page_is_roff_with_the_subcommands() {
    let out = run(repo(), &["man"], &[]);
    let page = stdout(&out);
    assert!(out.status.success(), "{out:?}");
    assert!(page.starts_with('.'), "{page}");
    assert!(
        page.lines().any(|l| l.starts_with(".TH air-friends 1 ")),
        "no .TH header:\n{page}"
    );
    for sub in ["backup", "completions", "check\\-config"] {
        assert!(page.contains(sub), "{sub} missing from the man page");
    }
}

#[test]
fn top_level_help_documents_completions_man_and_backup() {
    let out = run(repo(), &["--help"], &[]);
    let text = stdout(&out);
    assert!(out.status.success(), "{out:?}");
    for sub in ["completions", "man", "backup"] {
        assert!(
            text.lines().any(|l| l.trim_start().starts_with(sub)),
            "{sub} not in --help:\n{text}"
        );
    }
}

#[test]
fn version_shows_the_package_version_and_the_commit() {
    let out = run(repo(), &["--version"], &[]);
    let text = stdout(&out);
    assert!(out.status.success(), "{out:?}");
    let prefix = format!("air-friends {} (commit ", env!("CARGO_PKG_VERSION"));
    let commit = text
        .trim_end()
        .strip_prefix(&prefix)
        .and_then(|rest| rest.strip_suffix(')'))
        .unwrap_or_else(|| panic!("{text:?} is not `{prefix}…)`"));
    let hash = commit.strip_suffix("-dirty").unwrap_or(commit);
    let is_hash = hash.len() == 12 && hash.bytes().all(|b| b.is_ascii_hexdigit());
    assert!(is_hash || commit == "unknown", "{commit:?}");
    // Built from a git checkout (this test runs in one when git is installed): the commit is known.
    let in_git = Command::new("git")
        .args(["rev-parse", "HEAD"])
        .current_dir(repo())
        .output()
        .is_ok_and(|o| o.status.success());
    if in_git && std::env::var_os("AIR_FRIENDS_BUILD_COMMIT").is_none() {
        assert!(
            is_hash,
            "built in a git checkout but the commit is {commit:?}"
        );
    }
}

/// `man --out-dir` writes a page for every page the top-level page names (its SEE ALSO lists
/// one per subcommand), each a roff page of its own; hidden internals get none.
#[test]
fn every_man_page_the_top_level_page_names_exists() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("man1");
    let out = run(repo(), &["man", "--out-dir", dir.to_str().unwrap()], &[]);
    assert!(out.status.success(), "{out:?}");
    let top = std::fs::read_to_string(dir.join("air-friends.1")).unwrap();
    let named: Vec<String> = top
        .split("air\\-friends\\-")
        .skip(1)
        .filter_map(|rest| {
            rest.split_once("(1)")
                .map(|(name, _)| name.replace("\\-", "-"))
        })
        .filter(|name| !name.contains(char::is_whitespace))
        .collect();
    assert!(named.len() >= 10, "too few pages named: {named:?}\n{top}");
    for name in &named {
        let page = dir.join(format!("air-friends-{name}.1"));
        let text = std::fs::read_to_string(&page)
            .unwrap_or_else(|e| panic!("{} is named but missing: {e}", page.display()));
        assert!(text.starts_with('.'), "{name}: not roff");
    }
    for page in ["serve", "healthcheck", "check-config", "stats"] {
        assert!(
            named.iter().any(|n| n == page),
            "{page} not named: {named:?}"
        );
    }
    assert!(!dir.join("air-friends-sandbox-init.1").exists());
}

/// `discord invite-url` with a configuration in `dir` holding `extra` YAML and the token in
/// `DISCORD_TOKEN`; returns its output.
fn invite_url(dir: &Path, extra: &str, token: &str, args: &[&str]) -> Output {
    let config = dir.join("config.yaml");
    std::fs::write(
        &config,
        format!(
            "platforms:\n  discord:\n    enabled: true\nagent:\n  skillsDir: {}\n{extra}",
            repo().join("skills").display()
        ),
    )
    .unwrap();
    let mut cmd = Command::new(bin());
    cmd.args(["discord", "invite-url", "--config"])
        .arg(&config)
        .args(args)
        .current_dir(dir)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("DISCORD_TOKEN", token);
    cmd.output().expect("run air-friends")
}

#[test]
fn the_invite_url_asks_for_exactly_what_the_enabled_skills_use() {
    use base64::Engine as _;
    let dir = tempfile::tempdir().unwrap();
    let id = "1234567890123456789";
    let token = format!(
        "{}.GhIjKl.the-secret-part-XYZ",
        base64::engine::general_purpose::STANDARD_NO_PAD.encode(id)
    );
    let always: u64 = (1 << 10) | (1 << 11) | (1 << 38) | (1 << 16);
    let (reactions, files) = (1u64 << 6, 1u64 << 15);
    let url_with = |permissions: u64| {
        format!(
            "https://discord.com/oauth2/authorize?client_id={id}&scope=bot%20applications.commands&permissions={permissions}"
        )
    };
    let out = invite_url(dir.path(), "", &token, &[]);
    assert!(out.status.success(), "{out:?}");
    let url = stdout(&out).trim().to_owned();
    assert_eq!(
        url,
        url_with(always | reactions),
        "the shipped skills react and offer slash commands; send-file is off by default"
    );
    assert!(!url.contains("secret"));
    let out = invite_url(
        dir.path(),
        "skills:\n  sendFile:\n    enabled: true\n",
        &token,
        &[],
    );
    assert!(out.status.success(), "{out:?}");
    assert_eq!(stdout(&out).trim(), url_with(always | reactions | files));

    // Without react-message, send-file and the user-command skills, nothing of theirs; the
    // slash-command scope stays for the daemon's own `/privacy` and `/forget`.
    let out = invite_url(
        dir.path(),
        "skills:\n  disabled: [react-message, send-file, memory-stats, memory-search, memory-export, list-reminders, cancel-reminder]\n",
        &token,
        &["--client-id", "42"],
    );
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        stdout(&out).trim(),
        format!(
            "https://discord.com/oauth2/authorize?client_id=42&scope=bot%20applications.commands&permissions={always}"
        )
    );

    // No usable token and no --client-id: says what to do.
    let out = invite_url(dir.path(), "", "not-a-token", &[]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--client-id"), "{err}");
}
