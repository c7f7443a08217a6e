//! The checks that need the parsed manifest: input schema, flags, permissions, limits,
//! entrypoint, the docs-versus-contract comparison and, with `--builtin`, the accepted schema.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path};

use super::{CheckResult, Finding, Parsed, ValidateOptions};
use crate::confine::{Confine, ConfineError};
use crate::skills::builtin;
use crate::skills::docs::flag_mentions;
use crate::skills::frontmatter::SkillDoc;
use crate::skills::manifest::{self, Manifest, ParamType};

/// Runs the checks that need the parsed manifest (and, for docs, SKILL.md and the other skills'
/// manifests).
pub(super) fn contract_checks(
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

/// Environment variables of the daemon's own that must never reach the agent through a
/// credential (besides every platform's secret variables, `config::platform_secret_vars`).
const RESERVED_ENV: [&str; 6] = [
    "SKILL_API_TOKEN",
    "SKILL_API_URL",
    "SESSION_ID",
    "AIR_FRIENDS_BIN",
    "PATH",
    "HOME",
];

/// Whether `name` is the daemon's own or a platform's secret.
fn is_reserved(name: &str) -> bool {
    RESERVED_ENV.contains(&name) || crate::config::platform_secret_vars().any(|var| var == name)
}

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
        if is_reserved(&c.env_var) {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A skill credential can never be named after a platform's secret or the daemon's own
    /// variables; every platform's secret variable counts, not a list of their names.
    #[test]
    fn platform_secrets_and_the_daemons_variables_are_reserved() {
        for var in crate::config::platform_secret_vars() {
            assert!(is_reserved(var), "{var}");
        }
        for var in ["SKILL_API_TOKEN", "SESSION_ID", "PATH"] {
            assert!(is_reserved(var), "{var}");
        }
        assert!(!is_reserved("WEATHER_API_KEY"));
        assert!(!is_reserved("MISSKEY_HOST"), "not a secret");
    }
}
