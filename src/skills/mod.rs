//! The skills protocol (`docs/SKILLS.md`): skill packages `skills/<name>/{SKILL.md, manifest.json,
//! scripts/<name>}`, loading and validating them, the client that skill scripts run, and the
//! auto-approve list data.
//!
//! * [`manifest`] — `manifest.json` types and the schema/flag/permission rules.
//! * [`frontmatter`] — SKILL.md parsing and the Agent Skills frontmatter rules.
//! * [`docs`] — `--flag` mentions in SKILL.md bodies (docs-versus-contract drift).
//! * [`validate`] — the validator's check chain.
//! * [`report`] — findings, check chains and their text/JSON rendering.
//! * [`builtin`] — the table of built-in skills: their manifests embedded in the binary;
//!   schema comparison.
//! * [`args`] — the client's flag grammar.
//! * [`payload`] — the payload-file contract.
//! * [`client`] — client mode: identity, HTTP call, output and exit codes.
//! * [`listing`] — `air-friends skill --help`: the skills the client would find.
//! * [`autoapprove`] — `scriptPaths` / `commandPrefixes` for the permission gate.
//!
//! The daemon calls [`load_skills`] at start: every package is validated (the same checks as
//! `air-friends skills validate`) and a failure carries the validator's message.

pub mod args;
pub mod autoapprove;
pub mod builtin;
pub mod client;
pub mod docs;
pub mod frontmatter;
pub mod listing;
pub mod manifest;
pub mod payload;
pub mod report;
pub mod validate;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value;

pub use autoapprove::AutoApproveList;
pub use builtin::{SchemaDifference, embedded_schemas, schema_differences};
pub use client::{ClientError, ErrorCode};
pub use frontmatter::{Frontmatter, SkillDoc};
pub use manifest::{Credential, FlagSpec, Manifest, RateLimit};
pub use validate::{Report, ValidateOptions, validate_dirs};

/// Why the skills directory could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// A package failed validation; the message lists every error with its fix.
    #[error(
        "skills in {dir} failed validation (run `air-friends skills validate {dir}`):\n{message}"
    )]
    Invalid {
        /// The directory that was loaded.
        dir: PathBuf,
        /// The validator's failures, one per line.
        message: String,
        /// The full report.
        report: Box<Report>,
    },
    /// An input schema could not be compiled for parameter validation.
    #[error("skill {skill}: input_schema cannot be compiled: {message}")]
    Schema {
        /// The skill.
        skill: String,
        /// The compiler's message.
        message: String,
    },
}

/// One problem with a call's parameters, for `INVALID_PARAMS` `details` (the Skill API
/// re-exports it as `skill_api::ParamProblem`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ParamProblem {
    /// JSON Pointer into `parameters` (`""` is the parameters object itself, `/limit` a field).
    pub path: String,
    /// What is wrong there, in plain words.
    pub problem: String,
}

/// A loaded, validated skill package (`skills/<name>/`): what the package says. The Skill API
/// serves it from the [`skill_api::SkillSpec`](crate::skill_api::SkillSpec) derived from it
/// (`SkillSpec::from_package`).
#[derive(Debug, Clone)]
pub struct SkillPackage {
    /// Name (= directory name = frontmatter name).
    pub name: String,
    /// The package directory.
    pub dir: PathBuf,
    /// SKILL.md frontmatter and body.
    pub doc: SkillDoc,
    /// manifest.json.
    pub manifest: Manifest,
    validator: Arc<jsonschema::Validator>,
}

impl SkillPackage {
    /// The frontmatter description (what the skill does and when to use it).
    pub fn description(&self) -> &str {
        &self.doc.frontmatter.description
    }

    /// The JSON Schema of the parameters.
    pub fn input_schema(&self) -> &Value {
        &self.manifest.input_schema
    }

    /// The compiled `input_schema` (formats such as `date-time` checked), compiled once when the
    /// skill was loaded; the Skill API validates calls with it
    /// (`skill_api::SkillSpec::from_package`).
    pub fn compiled_schema(&self) -> Arc<jsonschema::Validator> {
        Arc::clone(&self.validator)
    }
}

/// Compiles a skill's `input_schema` the way every call is validated: formats (`date-time`,
/// ...) are checked, not just annotations. The error is the compiler's message.
pub fn compile_schema(schema: &Value) -> Result<jsonschema::Validator, String> {
    jsonschema::options()
        .should_validate_formats(true)
        .build(schema)
        .map_err(|e| e.to_string())
}

/// Every skill of a skills directory, validated.
#[derive(Debug, Clone, Default)]
pub struct LoadedSkills {
    skills: BTreeMap<String, SkillPackage>,
    warnings: Vec<String>,
}

impl LoadedSkills {
    /// The skill called `name`.
    pub fn get(&self, name: &str) -> Option<&SkillPackage> {
        self.skills.get(name)
    }

    /// Skill names, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.skills.keys().map(String::as_str)
    }

    /// All skills, sorted by name.
    pub fn iter(&self) -> impl Iterator<Item = &SkillPackage> {
        self.skills.values()
    }

    /// Number of skills.
    pub fn len(&self) -> usize {
        self.skills.len()
    }

    /// True when no skill was loaded.
    pub fn is_empty(&self) -> bool {
        self.skills.is_empty()
    }

    /// `input_schema` of a skill.
    pub fn input_schema(&self, name: &str) -> Option<&Value> {
        self.get(name).map(SkillPackage::input_schema)
    }

    /// `rate_limit` of a skill (None: unlimited or unknown skill).
    pub fn rate_limit(&self, name: &str) -> Option<RateLimit> {
        self.get(name).and_then(|s| s.manifest.rate_limit)
    }

    /// The credential environment variables of one skill.
    pub fn credential_env_vars(&self, name: &str) -> Vec<&str> {
        self.get(name)
            .map(|s| {
                s.manifest
                    .credentials
                    .iter()
                    .map(|c| c.env_var.as_str())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Credential environment variables of every skill for which `enabled(name)` holds (the
    /// agent environment allow-list; `docs/SKILLS.md`, "Credentials and the agent's
    /// environment"), sorted and de-duplicated.
    pub fn enabled_credential_env_vars(&self, enabled: impl Fn(&str) -> bool) -> Vec<&str> {
        let mut vars: Vec<&str> = self
            .iter()
            .filter(|s| enabled(&s.name))
            .flat_map(|s| s.manifest.credentials.iter().map(|c| c.env_var.as_str()))
            .collect();
        vars.sort_unstable();
        vars.dedup();
        vars
    }

    /// Whether the skill is also a slash command for humans.
    pub fn is_user_command(&self, name: &str) -> bool {
        self.get(name).is_some_and(|s| s.manifest.user_command)
    }

    /// Skills with `user_command: true`.
    pub fn user_commands(&self) -> impl Iterator<Item = &SkillPackage> {
        self.iter().filter(|s| s.manifest.user_command)
    }

    /// The frontmatter description of a skill.
    pub fn description(&self, name: &str) -> Option<&str> {
        self.get(name).map(SkillPackage::description)
    }

    /// Validator warnings (the skills still loaded).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// The auto-approve list for these skills (see [`AutoApproveList::from_skills`]).
    pub fn auto_approve(&self, explicit: &[String]) -> AutoApproveList {
        AutoApproveList::from_skills(self, explicit)
    }
}

/// Loads and validates every skill package in `dir` (e.g. `agent.skillsDir`). Any validator
/// error fails the load with the validator's message; warnings are kept in
/// [`LoadedSkills::warnings`].
pub fn load_skills(dir: &Path) -> Result<LoadedSkills, LoadError> {
    let (report, parsed) =
        validate::validate_collect(&[dir.to_path_buf()], &ValidateOptions::default());
    if !report.ok() {
        return Err(LoadError::Invalid {
            dir: dir.to_path_buf(),
            message: report.render_failures(),
            report: Box::new(report),
        });
    }
    let mut loaded = LoadedSkills::default();
    for skill in &report.skills {
        for check in &skill.checks {
            for f in &check.findings {
                loaded
                    .warnings
                    .push(format!("{} [{}]: {}", skill.name, check.check, f.message));
            }
        }
    }
    for p in parsed {
        let (Some(doc), Some(manifest)) = (p.doc, p.manifest) else {
            continue;
        };
        let validator =
            compile_schema(&manifest.input_schema).map_err(|message| LoadError::Schema {
                skill: p.name.clone(),
                message,
            })?;
        loaded.skills.insert(
            p.name.clone(),
            SkillPackage {
                name: p.name,
                dir: p.dir,
                doc,
                manifest,
                validator: Arc::new(validator),
            },
        );
    }
    Ok(loaded)
}
