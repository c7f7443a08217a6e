//! `air-friends skills validate`: the shipped skills pass, each broken fixture fails with the
//! right ✗ line and fix hint, third-party skills (command-based, Python) pass, the JSON shape
//! and the exit codes.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use air_friends::skills::frontmatter;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn fixture(rel: &str) -> PathBuf {
    root().join("tests/fixtures/skills").join(rel)
}

/// Runs `skills validate` with `args` from the crate root; returns (exit code, stdout).
fn validate(args: &[&str]) -> (i32, String) {
    let out = Command::new(common::bin())
        .current_dir(root())
        .args(["skills", "validate"])
        .args(args)
        .output()
        .expect("run air-friends");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[test]
fn shipped_skills_pass_with_builtin_check() {
    let (code, out) = validate(&["--builtin", "skills"]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(
        out.lines().filter(|l| l.starts_with("✓ ")).count(),
        15,
        "{out}"
    );
    assert!(
        out.contains("15 passed, 0 failed; 0 error(s), 0 warning(s)"),
        "{out}"
    );
    // The default directory is ./skills.
    let (code, default_out) = validate(&[]);
    assert_eq!(code, 0);
    assert!(default_out.contains("15 skill(s) checked"));
}

#[test]
fn every_skill_md_follows_the_agent_skills_rules() {
    let mut seen = 0;
    for entry in std::fs::read_dir(root().join("skills")).unwrap() {
        let dir = entry.unwrap().path();
        let name = dir.file_name().unwrap().to_str().unwrap().to_owned();
        let text = std::fs::read_to_string(dir.join("SKILL.md")).unwrap();
        let doc =
            frontmatter::parse(&text, Some(&name)).unwrap_or_else(|e| panic!("{name}: {e:?}"));
        assert_eq!(doc.frontmatter.name, name);
        assert!(doc.frontmatter.description.chars().count() <= 1024);
        assert!(
            doc.body.lines().count() < frontmatter::MAX_BODY_LINES,
            "{name}"
        );
        // The body teaches the invocation by script path and every error code it can hit.
        assert!(
            doc.body.contains(&format!("skills/{name}/scripts/{name}")),
            "{name}"
        );
        for code in [
            "SKILL_USAGE",
            "SKILL_UNKNOWN_FLAG",
            "SKILL_SESSION_UNRESOLVED",
            "SKILL_API_UNREACHABLE",
            "INVALID_PARAMS",
            "SESSION_NOT_FOUND",
            "RATE_LIMITED",
        ] {
            assert!(doc.body.contains(code), "{name} does not document {code}");
        }
        let manifest = std::fs::read_to_string(dir.join("manifest.json")).unwrap();
        if manifest.contains("\"payload\": true") {
            for code in [
                "SKILL_LEGACY_FLAG",
                "SKILL_MISSING_PAYLOAD",
                "SKILL_PAYLOAD_OUT_OF_BOUNDS",
                "SKILL_PAYLOAD_NOT_FOUND",
            ] {
                assert!(doc.body.contains(code), "{name} does not document {code}");
            }
            assert!(
                doc.body.contains("$TMPDIR/$SESSION_ID/"),
                "{name}: payload pattern"
            );
        }
        // The wrapper is the exact one-line exec of the client.
        let script = std::fs::read_to_string(dir.join("scripts").join(&name)).unwrap();
        assert!(script.starts_with("#!/bin/sh\n"));
        assert!(
            script.contains(&format!(
                "exec \"${{AIR_FRIENDS_BIN:-air-friends}}\" skill {name} \"$@\""
            )),
            "{name}"
        );
        seen += 1;
    }
    assert_eq!(seen, 15);
}

/// (fixture, check id, text of the ✗ line, text of the fix hint)
const BROKEN: &[(&str, &str, &str, &str)] = &[
    (
        "extra-key",
        "skill-md",
        "Unexpected fields in frontmatter: version. Only ['allowed-tools', 'compatibility', 'description', 'license', 'metadata', 'name'] are allowed.",
        "move project-specific data into manifest.json",
    ),
    (
        "name-mismatch",
        "skill-md",
        "Directory name 'name-mismatch' must match skill name 'other-name'",
        "rename the directory to \"other-name\" or set \"name: name-mismatch\"",
    ),
    (
        "Upper-Name",
        "skill-md",
        "Skill name 'Upper-Name' must be lowercase",
        "rename the skill to \"upper-name\"",
    ),
    (
        "no-description",
        "skill-md",
        "Missing required field in frontmatter: description",
        "add \"description: ...\" to the frontmatter",
    ),
    (
        "open-schema",
        "input-schema",
        "input_schema does not set \"additionalProperties\": false",
        "add \"additionalProperties\": false",
    ),
    (
        "unbounded-int",
        "input-schema",
        "input_schema.properties.days is an integer without \"minimum\" and \"maximum\"",
        "add \"minimum\" and \"maximum\" to input_schema.properties.days",
    ),
    (
        "schema-ref",
        "input-schema",
        "input_schema.properties.city uses \"$ref\"; references are not allowed",
        "inline the referenced schema",
    ),
    (
        "regex-scope",
        "permissions",
        "scope \"^/home/[^/]+\" looks like a regular expression; scopes are globs",
        "use the glob \"fs:read:/home/*\"",
    ),
    (
        "not-executable",
        "entrypoint",
        "entrypoint \"scripts/not-executable\" is not executable",
        "chmod +x",
    ),
    (
        "outside-entrypoint",
        "entrypoint",
        "entrypoint \"../not-executable/scripts/not-executable\" is outside the skill directory",
        "set \"entrypoint\": \"scripts/<name>\"",
    ),
    (
        "undeclared-flag",
        "docs",
        "SKILL.md line 10 teaches --units, which manifest.json does not declare",
        "remove --units from SKILL.md, or add \"units\" to manifest.json flags",
    ),
    (
        "undocumented-flag",
        "docs",
        "flag --units (parameter \"units\") is not documented in SKILL.md",
        "describe --units in the body",
    ),
];

fn assert_fails_with(dir: &Path, check: &str, message: &str, fix: &str) {
    let (code, out) = validate(&[dir.to_str().unwrap()]);
    assert_eq!(code, 1, "{}: expected failure\n{out}", dir.display());
    let lines: Vec<&str> = out.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.starts_with(&format!("  ✗ {check}: ")) && l.contains(message))
        .unwrap_or_else(|| panic!("no ✗ {check} line with {message:?} in\n{out}"));
    let hint = lines.get(at + 1).copied().unwrap_or_default();
    assert!(
        hint.trim_start().starts_with("→ fix: ") && hint.contains(fix),
        "fix hint {fix:?} not under the ✗ line; got {hint:?}\n{out}"
    );
    assert!(out.contains("0 passed, 1 failed"), "{out}");
}

#[test]
fn each_broken_fixture_fails_its_check_with_a_fix_hint() {
    for (name, check, message, fix) in BROKEN {
        assert_fails_with(&fixture(&format!("broken/{name}")), check, message, fix);
    }
}

#[test]
fn single_star_scope_is_a_warning_that_still_passes() {
    let (code, out) = validate(&[fixture("broken/single-star").to_str().unwrap()]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("  ⚠ permissions: permission \"fs:read:{workspace}/*\": \"*\" matches one path level only"),
        "{out}"
    );
    assert!(
        out.contains("→ fix: if the whole tree is meant, write \"fs:read:{workspace}/**\""),
        "{out}"
    );
    assert!(
        out.contains("1 passed, 0 failed; 0 error(s), 1 warning(s)"),
        "{out}"
    );
}

#[test]
fn third_party_command_and_python_skills_pass() {
    let (code, out) = validate(&["--verbose", fixture("thirdparty").to_str().unwrap()]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("✓ entrypoint: command-based skill: runs `agent-browser`"),
        "{out}"
    );
    assert!(out.contains("✓ weather"), "{out}");
    assert!(
        out.contains("✓ docs: SKILL.md documents exactly the manifest's flags"),
        "{out}"
    );
}

#[test]
fn json_format_shape() {
    let out = Command::new(common::bin())
        .current_dir(root())
        .args(["skills", "validate", "--format", "json"])
        .arg(fixture("broken/extra-key"))
        .arg(fixture("thirdparty/weather"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stdout is JSON");
    assert_eq!(v["ok"], false);
    assert_eq!(v["summary"]["skills"], 2);
    assert_eq!(v["summary"]["passed"], 1);
    assert_eq!(v["summary"]["failed"], 1);
    assert_eq!(v["summary"]["errors"], 1);
    assert_eq!(v["summary"]["warnings"], 0);
    assert_eq!(v["errors"], serde_json::json!([]));
    let skills = v["skills"].as_array().unwrap();
    assert_eq!(skills[0]["name"], "extra-key");
    assert_eq!(skills[0]["status"], "fail");
    assert_eq!(skills[1]["name"], "weather");
    assert_eq!(skills[1]["status"], "pass");
    let checks = skills[0]["checks"].as_array().unwrap();
    let ids: Vec<&str> = checks
        .iter()
        .map(|c| c["check"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids,
        [
            "layout",
            "skill-md",
            "body",
            "manifest",
            "input-schema",
            "flags",
            "permissions",
            "limits",
            "entrypoint",
            "docs"
        ]
    );
    let md = &checks[1];
    assert_eq!(md["status"], "fail");
    assert_eq!(md["findings"][0]["severity"], "error");
    assert!(
        md["findings"][0]["message"]
            .as_str()
            .unwrap()
            .starts_with("Unexpected fields in frontmatter: version.")
    );
    assert!(md["findings"][0]["fix"].as_str().is_some());
    assert_eq!(checks[2]["status"], "skipped");
    assert_eq!(checks[3]["status"], "pass");
}

#[test]
fn exit_codes_and_argument_errors() {
    let (code, out) = validate(&["does/not/exist"]);
    assert_eq!(code, 1);
    assert!(
        out.contains("✗ does/not/exist: Path does not exist: does/not/exist"),
        "{out}"
    );
    let (code, out) = validate(&["skills/send-reply/SKILL.md"]);
    assert_eq!(code, 0, "a SKILL.md path validates its skill: {out}");
    assert!(out.contains("✓ send-reply"), "{out}");
    let (code, out) = validate(&["Cargo.toml"]);
    assert_eq!(code, 1);
    assert!(out.contains("Not a directory: Cargo.toml"), "{out}");
    // A directory of skills with one failing fails as a whole.
    let (code, out) = validate(&[fixture("broken").to_str().unwrap()]);
    assert_eq!(code, 1);
    assert!(
        out.contains("13 skill(s) checked: 1 passed, 12 failed"),
        "{out}"
    );
}

#[test]
fn builtin_check_reports_schema_drift() {
    // A copy of send-reply whose schema allows a longer message than the daemon accepts.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("send-reply");
    std::fs::create_dir_all(dir.join("scripts")).unwrap();
    let src = root().join("skills/send-reply");
    std::fs::copy(src.join("SKILL.md"), dir.join("SKILL.md")).unwrap();
    std::fs::copy(
        src.join("scripts/send-reply"),
        dir.join("scripts/send-reply"),
    )
    .unwrap();
    let manifest = std::fs::read_to_string(src.join("manifest.json"))
        .unwrap()
        .replace("\"maxLength\": 12000", "\"maxLength\": 99999");
    std::fs::write(dir.join("manifest.json"), manifest).unwrap();
    let (code, out) = validate(&[dir.to_str().unwrap()]);
    assert_eq!(code, 0, "without --builtin the copy is valid\n{out}");
    let (code, out) = validate(&["--builtin", dir.to_str().unwrap()]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("✗ builtin: input_schema differs from what the daemon accepts: at /properties/message/maxLength the manifest has 99999 but the daemon accepts 12000"),
        "{out}"
    );
}
