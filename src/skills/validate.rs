//! The skills validator (`docs/SKILLS.md`, "The validator"): runs the check chain on skill
//! packages and renders it as ✓/⚠/✗ lines with `→ fix:` hints (text) or as one JSON document (`--format json`).
//!
//! The chain, per skill directory: `layout`, `skill-md`, `body`, `manifest`, `input-schema`,
//! `flags`, `permissions`, `limits`, `entrypoint`, `docs` (docs and contract agree) and, with
//! `--builtin`, `builtin` (the manifest's schema equals the one the daemon accepts). A check
//! whose input could not be parsed is shown as skipped; the failure that caused it is already
//! reported by an earlier check.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};

use serde_json::Value;

use super::builtin;
use super::docs::flag_mentions;
use super::frontmatter::{self, MAX_BODY_LINES, SkillDoc};
use super::manifest::{self, Manifest, ParamType};
pub use super::report::{CheckResult, CheckStatus, Finding, Report, Severity, SkillReport};
use crate::confine::{Confine, ConfineError};

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

fn dir_name(dir: &Path) -> String {
    dir.canonicalize()
        .ok()
        .as_deref()
        .unwrap_or(dir)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Runs the checks that need only this directory: layout, SKILL.md, body, manifest.
fn parse_one(dir: PathBuf) -> (Parsed, Vec<CheckResult>) {
    let name = dir_name(&dir);
    let mut checks = vec![CheckResult::new(
        "layout",
        "directory is flat and named like the skill",
        check_layout(&dir, &name),
    )];

    let skill_md = dir.join("SKILL.md");
    let doc = if skill_md.is_file() {
        match std::fs::read_to_string(&skill_md) {
            Ok(text) => match frontmatter::parse(&text, Some(&name)) {
                Ok(doc) => {
                    checks.push(CheckResult::new(
                        "skill-md",
                        "SKILL.md frontmatter follows the Agent Skills rules",
                        Vec::new(),
                    ));
                    Some(doc)
                }
                Err(findings) => {
                    checks.push(CheckResult::new("skill-md", "", findings));
                    None
                }
            },
            Err(e) => {
                checks.push(CheckResult::new(
                    "skill-md",
                    "",
                    vec![Finding::error(
                        format!("cannot read SKILL.md: {e}"),
                        "save SKILL.md as UTF-8 text",
                    )],
                ));
                None
            }
        }
    } else {
        let fix = if dir.join("skill.md").is_file() {
            "rename skill.md to SKILL.md"
        } else {
            "create SKILL.md with name/description frontmatter and instructions for the agent"
        };
        checks.push(CheckResult::new(
            "skill-md",
            "",
            vec![Finding::error("Missing required file: SKILL.md", fix)],
        ));
        None
    };
    checks.push(match &doc {
        Some(doc) => CheckResult::new(
            "body",
            format!("SKILL.md body is present and under {MAX_BODY_LINES} lines"),
            check_body(doc),
        ),
        None => CheckResult::skipped("body", "SKILL.md could not be parsed"),
    });

    let manifest_path = dir.join("manifest.json");
    let manifest = match std::fs::read_to_string(&manifest_path) {
        Err(_) => {
            checks.push(CheckResult::new(
                "manifest",
                "",
                vec![Finding::error(
                    "Missing required file: manifest.json",
                    "create manifest.json with version, entrypoint (or command), input_schema, flags and permissions",
                )],
            ));
            None
        }
        Ok(text) => match Manifest::parse(&text) {
            Ok(m) => {
                checks.push(CheckResult::new(
                    "manifest",
                    "manifest.json parses; version is semver; entrypoint or command is set",
                    check_manifest_basics(&m),
                ));
                Some(m)
            }
            Err(e) => {
                checks.push(CheckResult::new(
                    "manifest",
                    "",
                    vec![Finding::error(
                        format!("manifest.json does not parse: {e}"),
                        "correct the JSON at the reported line (allowed keys: version, entrypoint, command, input_schema, flags, order, permissions, rate_limit, credentials, user_command)",
                    )],
                ));
                None
            }
        },
    };
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

/// Runs the checks that need the parsed manifest (and, for docs, SKILL.md and the other skills'
/// manifests).
fn contract_checks(
    p: &Parsed,
    manifests: &BTreeMap<String, Manifest>,
    opts: &ValidateOptions,
) -> Vec<CheckResult> {
    let ids = [
        "input-schema",
        "flags",
        "permissions",
        "limits",
        "entrypoint",
        "docs",
    ];
    let Some(m) = &p.manifest else {
        let mut skipped: Vec<CheckResult> = ids
            .iter()
            .map(|id| CheckResult::skipped(id, "manifest.json could not be parsed"))
            .collect();
        if opts.accepted_schemas.is_some() {
            skipped.push(CheckResult::skipped(
                "builtin",
                "manifest.json could not be parsed",
            ));
        }
        return skipped;
    };
    let mut out = vec![
        CheckResult::new(
            "input-schema",
            "input_schema follows the schema rules",
            manifest::check_input_schema(&m.input_schema),
        ),
        CheckResult::new(
            "flags",
            "flags map onto declared parameters",
            manifest::check_flags(m),
        ),
        CheckResult::new(
            "permissions",
            "permissions are resource:action:scope with glob scopes",
            m.permissions
                .iter()
                .flat_map(|perm| manifest::check_permission(perm))
                .collect(),
        ),
        CheckResult::new(
            "limits",
            "rate_limit and credentials are well-formed",
            check_limits(m),
        ),
        check_entrypoint(&p.dir, m),
    ];
    out.push(match &p.doc {
        Some(doc) => CheckResult::new(
            "docs",
            "SKILL.md documents exactly the manifest's flags",
            check_docs(&p.name, doc, m, manifests),
        ),
        None => CheckResult::skipped("docs", "SKILL.md could not be parsed"),
    });
    if let Some(accepted) = &opts.accepted_schemas {
        out.push(match accepted.get(&p.name) {
            None => CheckResult::new("builtin", "not a built-in skill", Vec::new()),
            Some(expected) => CheckResult::new(
                "builtin",
                "input_schema equals the schema the daemon accepts",
                builtin::schema_differences(expected, &m.input_schema)
                    .into_iter()
                    .map(|d| {
                        Finding::error(
                            format!("input_schema differs from what the daemon accepts: {d}"),
                            "make manifest.json's input_schema match the daemon's (or change both together)",
                        )
                    })
                    .collect(),
            ),
        });
    }
    out
}

/// Environment variables that must never reach the agent through a credential.
const RESERVED_ENV: [&str; 8] = [
    "DISCORD_TOKEN",
    "MISSKEY_TOKEN",
    "SKILL_API_TOKEN",
    "SKILL_API_URL",
    "SESSION_ID",
    "AIR_FRIENDS_BIN",
    "PATH",
    "HOME",
];

fn check_limits(m: &Manifest) -> Vec<Finding> {
    let mut out = Vec::new();
    if m.rate_limit
        .is_some_and(|rl| rl.window_ms == 0 || rl.max_requests == 0)
    {
        out.push(Finding::error(
            "rate_limit needs window_ms > 0 and max_requests > 0",
            "e.g. \"rate_limit\": {\"window_ms\": 60000, \"max_requests\": 30}",
        ));
    }
    let mut ids = BTreeSet::new();
    for c in &m.credentials {
        if !ids.insert(&c.id) {
            out.push(Finding::error(
                format!("credential id \"{}\" is declared twice", c.id),
                "give each credential a unique id",
            ));
        }
        let valid = !c.env_var.is_empty()
            && !c.env_var.starts_with(|ch: char| ch.is_ascii_digit())
            && c.env_var
                .bytes()
                .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_');
        if !valid {
            out.push(Finding::error(
                format!(
                    "credential env_var \"{}\" is not an environment variable name",
                    c.env_var
                ),
                "use UPPER_SNAKE_CASE, e.g. \"WEATHER_API_KEY\"",
            ));
        }
        if RESERVED_ENV.contains(&c.env_var.as_str()) {
            out.push(Finding::error(
                format!(
                    "credential env_var \"{}\" is reserved by the daemon",
                    c.env_var
                ),
                "use a variable specific to this skill, e.g. \"WEATHER_API_KEY\"",
            ));
        }
    }
    out
}

fn check_entrypoint(dir: &Path, m: &Manifest) -> CheckResult {
    if let Some(cmd) = &m.command {
        let ok = !cmd.is_empty()
            && cmd
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._+-/".contains(&b));
        let findings = if ok {
            Vec::new()
        } else {
            vec![Finding::error(
                format!("command \"{cmd}\" is not a plain program name"),
                "set \"command\" to the program alone (e.g. \"agent-browser\"); arguments belong in SKILL.md",
            )]
        };
        return CheckResult::new(
            "entrypoint",
            format!("command-based skill: runs `{cmd}`"),
            findings,
        );
    }
    let Some(ep) = &m.entrypoint else {
        return CheckResult::skipped("entrypoint", "no entrypoint or command");
    };
    let title = "entrypoint is an executable file inside the skill directory";
    let outside = || {
        Finding::error(
            format!("entrypoint \"{ep}\" is outside the skill directory"),
            format!(
                "put the script in {}/scripts/ and set \"entrypoint\": \"scripts/<name>\"",
                dir.display()
            ),
        )
    };
    let rel = Path::new(ep);
    if rel.is_absolute()
        || rel
            .components()
            .any(|c| matches!(c, Component::ParentDir | Component::Prefix(_)))
    {
        return CheckResult::new("entrypoint", title, vec![outside()]);
    }
    let path = dir.join(rel);
    // The same containment rule as every agent-named path (canonical, by whole components).
    let real = match Confine::new(dir).and_then(|c| c.resolve_existing(rel)) {
        Ok(real) => real,
        Err(ConfineError::Outside | ConfineError::Hidden) => {
            return CheckResult::new("entrypoint", title, vec![outside()]);
        }
        Err(_) => {
            return CheckResult::new(
                "entrypoint",
                title,
                vec![Finding::error(
                    format!("entrypoint \"{ep}\" does not exist"),
                    format!("create {} or correct \"entrypoint\"", path.display()),
                )],
            );
        }
    };
    let mut findings = Vec::new();
    match std::fs::metadata(&real) {
        Ok(meta) if meta.is_file() => {
            if !is_executable(&meta) {
                findings.push(Finding::error(
                    format!("entrypoint \"{ep}\" is not executable"),
                    format!(
                        "chmod +x {} (and commit the mode: git update-index --chmod=+x)",
                        path.display()
                    ),
                ));
            }
        }
        _ => findings.push(Finding::error(
            format!("entrypoint \"{ep}\" is not a regular file"),
            "point \"entrypoint\" at the script file itself",
        )),
    }
    CheckResult::new("entrypoint", title, findings)
}

#[cfg(unix)]
fn is_executable(meta: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::PermissionsExt;
    meta.permissions().mode() & 0o111 != 0
}

#[cfg(not(unix))]
fn is_executable(_meta: &std::fs::Metadata) -> bool {
    true
}

/// Check 4: every `--flag` the body mentions exists, and every flag is documented.
fn check_docs(
    name: &str,
    doc: &SkillDoc,
    m: &Manifest,
    manifests: &BTreeMap<String, Manifest>,
) -> Vec<Finding> {
    let mut out = Vec::new();
    let mut documented = BTreeSet::new();
    let mut reported = BTreeSet::new();
    for mention in flag_mentions(&doc.body, name) {
        let own = mention.skill == name;
        let target = if own {
            Some(m)
        } else {
            manifests.get(&mention.skill)
        };
        let Some(target) = target else { continue };
        let resolved = if target.flags.contains_key(&mention.flag) {
            Some(mention.flag.clone())
        } else {
            mention
                .flag
                .strip_prefix("no-")
                .filter(|f| target.flag_type(f) == ParamType::Boolean)
                .map(str::to_owned)
        };
        match resolved {
            Some(flag) if own => {
                documented.insert(flag);
            }
            Some(_) => {}
            None => {
                if !reported.insert((mention.skill.clone(), mention.flag.clone())) {
                    continue;
                }
                let line = doc.body_line + mention.line - 1;
                let closest = closest_flag(&mention.flag, target);
                let whose = if own {
                    "manifest.json".to_owned()
                } else {
                    format!("{}'s manifest", mention.skill)
                };
                let fix = match closest {
                    Some(c) => format!(
                        "write --{c} (the declared flag), or add \"{}\" to {whose} flags",
                        mention.flag
                    ),
                    None => format!(
                        "remove --{} from SKILL.md, or add \"{}\" to {whose} flags",
                        mention.flag, mention.flag
                    ),
                };
                let what = if own {
                    format!("--{}", mention.flag)
                } else {
                    format!("--{} for {}", mention.flag, mention.skill)
                };
                out.push(Finding::error(
                    format!("SKILL.md line {line} teaches {what}, which {whose} does not declare"),
                    fix,
                ));
            }
        }
    }
    for (flag, spec) in &m.flags {
        if !documented.contains(flag) {
            out.push(Finding::error(
                format!(
                    "flag --{flag} (parameter \"{}\") is not documented in SKILL.md",
                    spec.param
                ),
                format!(
                    "describe --{flag} in the body: what it sets, its type or values, its default"
                ),
            ));
        }
    }
    out
}

fn closest_flag(flag: &str, m: &Manifest) -> Option<String> {
    m.flags
        .keys()
        .map(|k| (strsim::jaro_winkler(flag, k), k))
        .filter(|(score, _)| *score > 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, k)| k.clone())
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
