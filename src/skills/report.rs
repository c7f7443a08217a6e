//! The validator's report: findings (message + fix hint), check results, per-skill check
//! chains, and their rendering as ✓/⚠/✗ text or as JSON (`--format json`).

use std::fmt::Write as _;
use std::path::PathBuf;

use serde_json::{Value, json};

/// How serious a finding is: errors fail validation, warnings do not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    /// Fails the skill.
    Error,
    /// Reported, but the skill still passes.
    Warning,
}

/// One problem found by a check, with the hint that fixes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// Error or warning.
    pub severity: Severity,
    /// What is wrong (reference `skills-ref` wording where it has one).
    pub message: String,
    /// How to fix it.
    pub fix: Option<String>,
}

impl Finding {
    /// An error with a fix hint.
    pub fn error(message: impl Into<String>, fix: impl Into<String>) -> Finding {
        Finding {
            severity: Severity::Error,
            message: message.into(),
            fix: Some(fix.into()),
        }
    }

    /// A warning with a fix hint.
    pub fn warning(message: impl Into<String>, fix: impl Into<String>) -> Finding {
        Finding {
            severity: Severity::Warning,
            message: message.into(),
            fix: Some(fix.into()),
        }
    }

    /// Whether this finding fails validation.
    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }

    fn to_json(&self) -> Value {
        json!({
            "severity": match self.severity { Severity::Error => "error", Severity::Warning => "warning" },
            "message": self.message,
            "fix": self.fix,
        })
    }
}

/// The outcome of one check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckStatus {
    /// No findings.
    Pass,
    /// Warnings only.
    Warn,
    /// At least one error.
    Fail,
    /// Not run because its input could not be parsed (reported by an earlier check).
    Skipped,
}

impl CheckStatus {
    fn as_str(self) -> &'static str {
        match self {
            CheckStatus::Pass => "pass",
            CheckStatus::Warn => "warn",
            CheckStatus::Fail => "fail",
            CheckStatus::Skipped => "skipped",
        }
    }

    fn symbol(self) -> &'static str {
        match self {
            CheckStatus::Pass => "✓",
            CheckStatus::Warn => "⚠",
            CheckStatus::Fail => "✗",
            CheckStatus::Skipped => "·",
        }
    }
}

/// One link of a skill's check chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckResult {
    /// Stable check id (`layout`, `skill-md`, ..., `builtin`).
    pub check: &'static str,
    /// What the check verifies (shown on ✓ lines).
    pub title: String,
    /// Problems found.
    pub findings: Vec<Finding>,
    /// Set when the check did not run.
    pub skipped: bool,
}

impl CheckResult {
    pub(crate) fn new(
        check: &'static str,
        title: impl Into<String>,
        findings: Vec<Finding>,
    ) -> Self {
        CheckResult {
            check,
            title: title.into(),
            findings,
            skipped: false,
        }
    }

    pub(crate) fn skipped(check: &'static str, why: &str) -> Self {
        CheckResult {
            check,
            title: format!("skipped ({why})"),
            findings: Vec::new(),
            skipped: true,
        }
    }

    /// Pass, warn, fail or skipped.
    pub fn status(&self) -> CheckStatus {
        if self.skipped {
            CheckStatus::Skipped
        } else if self.findings.iter().any(Finding::is_error) {
            CheckStatus::Fail
        } else if self.findings.is_empty() {
            CheckStatus::Pass
        } else {
            CheckStatus::Warn
        }
    }
}

/// The check chain of one skill directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkillReport {
    /// The skill name (the directory name).
    pub name: String,
    /// The directory as given.
    pub path: PathBuf,
    /// The chain, in order.
    pub checks: Vec<CheckResult>,
}

impl SkillReport {
    /// Fail if any check failed, warn if any warned, else pass.
    pub fn status(&self) -> CheckStatus {
        let statuses: Vec<CheckStatus> = self.checks.iter().map(CheckResult::status).collect();
        if statuses.contains(&CheckStatus::Fail) {
            CheckStatus::Fail
        } else if statuses.contains(&CheckStatus::Warn) {
            CheckStatus::Warn
        } else {
            CheckStatus::Pass
        }
    }

    fn count(&self, severity: Severity) -> usize {
        self.checks
            .iter()
            .flat_map(|c| &c.findings)
            .filter(|f| f.severity == severity)
            .count()
    }
}

/// The result of validating one or more directories.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    /// One report per skill directory found.
    pub skills: Vec<SkillReport>,
    /// Problems with the arguments themselves (a path that does not exist, no skills found).
    pub errors: Vec<(PathBuf, Finding)>,
}

impl Report {
    /// True when nothing failed (warnings allowed).
    pub fn ok(&self) -> bool {
        self.errors.is_empty() && self.skills.iter().all(|s| s.status() != CheckStatus::Fail)
    }

    /// Number of error findings, including argument errors.
    pub fn error_count(&self) -> usize {
        self.errors.len()
            + self
                .skills
                .iter()
                .map(|s| s.count(Severity::Error))
                .sum::<usize>()
    }

    /// Number of warning findings.
    pub fn warning_count(&self) -> usize {
        self.skills.iter().map(|s| s.count(Severity::Warning)).sum()
    }

    /// Process exit code: 0 when [`Report::ok`], else 1.
    pub fn exit_code(&self) -> u8 {
        if self.ok() { 0 } else { 1 }
    }

    /// Renders the check chains. Skills that pass cleanly get one line unless `verbose`.
    pub fn render_text(&self, verbose: bool) -> String {
        let mut out = String::new();
        for (path, f) in &self.errors {
            let _ = writeln!(out, "✗ {}: {}", path.display(), f.message);
            if let Some(fix) = &f.fix {
                let _ = writeln!(out, "    → fix: {fix}");
            }
        }
        for skill in &self.skills {
            let status = skill.status();
            if status == CheckStatus::Pass && !verbose {
                let _ = writeln!(
                    out,
                    "✓ {} ({}: {} checks passed)",
                    skill.name,
                    skill.path.display(),
                    skill.checks.iter().filter(|c| !c.skipped).count()
                );
                continue;
            }
            let _ = writeln!(
                out,
                "{} {} ({})",
                status.symbol(),
                skill.name,
                skill.path.display()
            );
            for check in &skill.checks {
                let st = check.status();
                if check.findings.is_empty() {
                    let _ = writeln!(out, "  {} {}: {}", st.symbol(), check.check, check.title);
                    continue;
                }
                for f in &check.findings {
                    let sym = if f.is_error() { "✗" } else { "⚠" };
                    let _ = writeln!(out, "  {sym} {}: {}", check.check, f.message);
                    if let Some(fix) = &f.fix {
                        let _ = writeln!(out, "      → fix: {fix}");
                    }
                }
            }
        }
        let failed = self
            .skills
            .iter()
            .filter(|s| s.status() == CheckStatus::Fail)
            .count();
        let _ = writeln!(
            out,
            "{} skill(s) checked: {} passed, {} failed; {} error(s), {} warning(s)",
            self.skills.len(),
            self.skills.len() - failed,
            failed,
            self.error_count(),
            self.warning_count()
        );
        out
    }

    /// Only the failing parts (used in `load_skills` errors).
    pub fn render_failures(&self) -> String {
        let mut lines = Vec::new();
        for (path, f) in &self.errors {
            lines.push(format!("{}: {}", path.display(), f.message));
        }
        for skill in &self.skills {
            for check in &skill.checks {
                for f in check.findings.iter().filter(|f| f.is_error()) {
                    let fix = f
                        .fix
                        .as_deref()
                        .map(|x| format!(" (fix: {x})"))
                        .unwrap_or_default();
                    lines.push(format!(
                        "{} [{}]: {}{fix}",
                        skill.name, check.check, f.message
                    ));
                }
            }
        }
        lines.join("\n")
    }

    /// The machine-readable form (`--format json`).
    pub fn to_json(&self) -> Value {
        let failed = self
            .skills
            .iter()
            .filter(|s| s.status() == CheckStatus::Fail)
            .count();
        json!({
            "ok": self.ok(),
            "summary": {
                "skills": self.skills.len(),
                "passed": self.skills.len() - failed,
                "failed": failed,
                "errors": self.error_count(),
                "warnings": self.warning_count(),
            },
            "errors": self.errors.iter().map(|(p, f)| {
                let mut v = f.to_json();
                v["path"] = json!(p.display().to_string());
                v
            }).collect::<Vec<_>>(),
            "skills": self.skills.iter().map(|s| json!({
                "name": s.name,
                "path": s.path.display().to_string(),
                "status": s.status().as_str(),
                "checks": s.checks.iter().map(|c| json!({
                    "check": c.check,
                    "title": c.title,
                    "status": c.status().as_str(),
                    "findings": c.findings.iter().map(Finding::to_json).collect::<Vec<_>>(),
                })).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
        })
    }
}
