//! The checks that need only the skill directory itself: its layout, SKILL.md (frontmatter
//! and body) and whether manifest.json parses. Their results feed the contract checks.

use std::path::{Path, PathBuf};

use super::{CheckResult, Finding, Parsed};
use crate::skills::frontmatter::{self, MAX_BODY_LINES, SkillDoc};
use crate::skills::manifest::{self, Manifest};

/// Runs the checks that need only this directory: layout, SKILL.md, body, manifest.
pub(super) fn parse_one(dir: PathBuf) -> (Parsed, Vec<CheckResult>) {
    let name = dir_name(&dir);
    let mut checks = vec![CheckResult::new(
        "layout",
        "directory is flat and named like the skill",
        check_layout(&dir, &name),
    )];
    let (doc, skill_md) = read_skill_md(&dir, &name);
    checks.push(skill_md);
    checks.push(match &doc {
        Some(doc) => CheckResult::new(
            "body",
            format!("SKILL.md body is present and under {MAX_BODY_LINES} lines"),
            check_body(doc),
        ),
        None => CheckResult::skipped("body", "SKILL.md could not be parsed"),
    });
    let (manifest, manifest_check) = read_manifest(&dir);
    checks.push(manifest_check);
    (
        Parsed {
            dir,
            name,
            doc,
            manifest,
        },
        checks,
    )
}

fn dir_name(dir: &Path) -> String {
    dir.canonicalize()
        .ok()
        .as_deref()
        .unwrap_or(dir)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The `skill-md` check: SKILL.md exists, reads, and its frontmatter follows the rules.
fn read_skill_md(dir: &Path, name: &str) -> (Option<SkillDoc>, CheckResult) {
    let skill_md = dir.join("SKILL.md");
    if !skill_md.is_file() {
        let fix = if dir.join("skill.md").is_file() {
            "rename skill.md to SKILL.md"
        } else {
            "create SKILL.md with name/description frontmatter and instructions for the agent"
        };
        return (
            None,
            CheckResult::new(
                "skill-md",
                "",
                vec![Finding::error("Missing required file: SKILL.md", fix)],
            ),
        );
    }
    match std::fs::read_to_string(&skill_md) {
        Ok(text) => match frontmatter::parse(&text, Some(name)) {
            Ok(doc) => (
                Some(doc),
                CheckResult::new(
                    "skill-md",
                    "SKILL.md frontmatter follows the Agent Skills rules",
                    Vec::new(),
                ),
            ),
            Err(findings) => (None, CheckResult::new("skill-md", "", findings)),
        },
        Err(e) => (
            None,
            CheckResult::new(
                "skill-md",
                "",
                vec![Finding::error(
                    format!("cannot read SKILL.md: {e}"),
                    "save SKILL.md as UTF-8 text",
                )],
            ),
        ),
    }
}

/// The `manifest` check: manifest.json exists, parses, and has its basics right.
fn read_manifest(dir: &Path) -> (Option<Manifest>, CheckResult) {
    let manifest_path = dir.join("manifest.json");
    match std::fs::read_to_string(&manifest_path) {
        Err(_) => (
            None,
            CheckResult::new(
                "manifest",
                "",
                vec![Finding::error(
                    "Missing required file: manifest.json",
                    "create manifest.json with version, entrypoint (or command), input_schema, flags and permissions",
                )],
            ),
        ),
        Ok(text) => match Manifest::parse(&text) {
            Ok(m) => {
                let check = CheckResult::new(
                    "manifest",
                    "manifest.json parses; version is semver; entrypoint or command is set",
                    check_manifest_basics(&m),
                );
                (Some(m), check)
            }
            Err(e) => (
                None,
                CheckResult::new(
                    "manifest",
                    "",
                    vec![Finding::error(
                        format!("manifest.json does not parse: {e}"),
                        "correct the JSON at the reported line (allowed keys: version, entrypoint, command, input_schema, flags, order, permissions, rate_limit, credentials, user_command)",
                    )],
                ),
            ),
        },
    }
}

fn check_layout(dir: &Path, name: &str) -> Vec<Finding> {
    let mut out = Vec::new();
    if !manifest::is_kebab(name) {
        out.push(Finding::error(
            format!("directory name '{name}' is not a valid skill name"),
            "rename the directory (lowercase a-z, 0-9 and single hyphens) and set the same name in SKILL.md",
        ));
    }
    let mut stack = vec![(dir.to_path_buf(), 0usize)];
    while let Some((d, depth)) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.filter_map(Result::ok) {
            let p = e.path();
            let is_dir = e.file_type().is_ok_and(|t| t.is_dir());
            if !is_dir {
                continue;
            }
            let child = e.file_name().to_string_lossy().into_owned();
            if depth == 0 && looks_like_version(&child) {
                out.push(Finding::error(
                    format!("version subfolder {}", p.display()),
                    "skills are flat: keep one version in the skill directory and record it in manifest.json \"version\"",
                ));
            }
            if p.join("SKILL.md").exists() {
                out.push(Finding::error(
                    format!("nested skill package {}", p.display()),
                    format!("skills are flat: move it next to this one (…/{child}/SKILL.md)"),
                ));
            } else if depth < 3 {
                stack.push((p, depth + 1));
            }
        }
    }
    out
}

fn looks_like_version(s: &str) -> bool {
    let s = s.strip_prefix('v').unwrap_or(s);
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit() || b == b'.')
}

fn check_body(doc: &SkillDoc) -> Vec<Finding> {
    let mut out = Vec::new();
    let lines = doc.body.lines().count();
    if doc.body.trim().is_empty() {
        out.push(Finding::warning(
            "SKILL.md has no body",
            "teach the agent: purpose, when to use, every flag, the payload-file pattern, limits, error codes",
        ));
    }
    if lines > MAX_BODY_LINES {
        out.push(Finding::warning(
            format!("SKILL.md body has {lines} lines (recommended: under {MAX_BODY_LINES})"),
            "move reference material into references/ and link it from the body",
        ));
    }
    out
}

fn check_manifest_basics(m: &Manifest) -> Vec<Finding> {
    let mut out = Vec::new();
    if !manifest::is_semver(&m.version) {
        out.push(Finding::error(
            format!("version \"{}\" is not semver", m.version),
            "write MAJOR.MINOR.PATCH, e.g. \"1.0.0\"",
        ));
    }
    match (&m.entrypoint, &m.command) {
        (Some(_), Some(_)) => out.push(Finding::error(
            "manifest sets both entrypoint and command",
            "keep \"entrypoint\" for a script skill or \"command\" for a command-based skill",
        )),
        (None, None) => out.push(Finding::error(
            "manifest sets neither entrypoint nor command",
            "add \"entrypoint\": \"scripts/<name>\" (or \"command\": \"<program>\")",
        )),
        _ => {}
    }
    out
}
