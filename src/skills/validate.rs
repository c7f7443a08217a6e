//! The skills validator (`docs/SKILLS.md`, "The validator"): runs the check chain on skill
//! packages and renders it as ✓/⚠/✗ lines with `→ fix:` hints (text) or as one JSON document (`--format json`).
//!
//! The chain, per skill directory: `layout`, `skill-md`, `body`, `manifest`, `input-schema`,
//! `flags`, `permissions`, `limits`, `entrypoint`, `docs` (docs and contract agree) and, with
//! `--builtin`, `builtin` (the manifest's schema equals the one the daemon accepts). A check
//! whose input could not be parsed is shown as skipped; the failure that caused it is already
//! reported by an earlier check.

mod contract;
mod package;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::builtin;
use super::frontmatter::SkillDoc;
use super::manifest::Manifest;
pub use super::report::{CheckResult, CheckStatus, Finding, Report, Severity, SkillReport};
use contract::contract_checks;
use package::parse_one;

/// Options of a validation run.
#[derive(Debug, Clone, Default)]
pub struct ValidateOptions {
    /// Check 5 (`--builtin`): skill name → the input schema the daemon accepts. Skills not in
    /// the map pass the check as "not a built-in skill". [`builtin::embedded_schemas`] gives
    /// the copies embedded in the binary; the integrator may pass the handler registry's.
    pub accepted_schemas: Option<BTreeMap<String, Value>>,
}

/// What the validator parsed from one directory (reused by `load_skills`).
#[derive(Debug, Clone)]
pub(crate) struct Parsed {
    pub dir: PathBuf,
    pub name: String,
    pub doc: Option<SkillDoc>,
    pub manifest: Option<Manifest>,
}

/// Validates every skill found in `dirs`: each is a skill directory (it has SKILL.md or
/// manifest.json), a SKILL.md file, or a directory whose non-hidden subdirectories are skills.
pub fn validate_dirs(dirs: &[PathBuf], opts: &ValidateOptions) -> Report {
    validate_collect(dirs, opts).0
}

pub(crate) fn validate_collect(dirs: &[PathBuf], opts: &ValidateOptions) -> (Report, Vec<Parsed>) {
    let mut report = Report::default();
    let mut candidates = Vec::new();
    for dir in dirs {
        match discover(dir) {
            Ok(found) => candidates.extend(found),
            Err(f) => report.errors.push((dir.clone(), f)),
        }
    }
    let mut parsed: Vec<(Parsed, Vec<CheckResult>)> =
        candidates.into_iter().map(parse_one).collect();
    let manifests: BTreeMap<String, Manifest> = parsed
        .iter()
        .filter_map(|(p, _)| Some((p.name.clone(), p.manifest.clone()?)))
        .collect();
    let mut names = BTreeMap::new();
    for (p, checks) in &mut parsed {
        checks.extend(contract_checks(p, &manifests, opts));
        if let Some(prev) = names.insert(p.name.clone(), p.dir.clone()) {
            report.errors.push((
                p.dir.clone(),
                Finding::error(
                    format!("skill \"{}\" is also defined in {}", p.name, prev.display()),
                    "keep one directory per skill name",
                ),
            ));
        }
    }
    let mut out = Vec::new();
    for (p, checks) in parsed {
        report.skills.push(SkillReport {
            name: p.name.clone(),
            path: p.dir.clone(),
            checks,
        });
        out.push(p);
    }
    (report, out)
}

fn discover(dir: &Path) -> Result<Vec<PathBuf>, Finding> {
    if !dir.exists() {
        return Err(Finding::error(
            format!("Path does not exist: {}", dir.display()),
            "pass a skill directory or a directory of skills",
        ));
    }
    if dir.is_file() && dir.file_name().is_some_and(|n| n == "SKILL.md") {
        // Like `skills-ref validate <SKILL.md>`: validate the file's skill directory.
        let parent = dir.parent().unwrap_or(Path::new("."));
        let parent = if parent.as_os_str().is_empty() {
            Path::new(".")
        } else {
            parent
        };
        return Ok(vec![parent.to_path_buf()]);
    }
    if !dir.is_dir() {
        return Err(Finding::error(
            format!("Not a directory: {}", dir.display()),
            "pass the skill's directory, not a file inside it",
        ));
    }
    if dir.join("SKILL.md").exists() || dir.join("manifest.json").exists() {
        return Ok(vec![dir.to_path_buf()]);
    }
    let entries = std::fs::read_dir(dir).map_err(|e| {
        Finding::error(
            format!("cannot read {}: {e}", dir.display()),
            "check the directory's permissions",
        )
    })?;
    let mut found: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .filter(|e| e.path().is_dir())
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .map(|e| e.path())
        .collect();
    found.sort();
    if found.is_empty() {
        return Err(Finding::error(
            format!("no skill directories in {}", dir.display()),
            "create <dir>/<name>/SKILL.md and <dir>/<name>/manifest.json",
        ));
    }
    Ok(found)
}

/// `air-friends skills validate`: validates `dirs` (default `./skills`), returns the text to
/// print on stdout and the exit code.
pub fn run_cli(dirs: &[PathBuf], verbose: bool, json_format: bool, builtin: bool) -> (String, u8) {
    let dirs = if dirs.is_empty() {
        vec![PathBuf::from("skills")]
    } else {
        dirs.to_vec()
    };
    let opts = ValidateOptions {
        accepted_schemas: builtin.then(builtin::embedded_schemas),
    };
    let report = validate_dirs(&dirs, &opts);
    let text = if json_format {
        let mut s = serde_json::to_string_pretty(&report.to_json()).unwrap_or_default();
        s.push('\n');
        s
    } else {
        report.render_text(verbose)
    };
    (text, report.exit_code())
}
