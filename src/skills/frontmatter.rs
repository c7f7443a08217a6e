//! `SKILL.md` parsing and the Agent Skills frontmatter rules (`docs/SKILLS.md`, "SKILL.md
//! frontmatter"), with the error wording of the reference `skills-ref` validator wherever it has
//! one.

use std::collections::BTreeMap;

use serde_yaml::Value as Yaml;

use super::report::Finding;

/// The top-level frontmatter keys the Agent Skills specification allows.
pub const ALLOWED_KEYS: [&str; 6] = [
    "allowed-tools",
    "compatibility",
    "description",
    "license",
    "metadata",
    "name",
];

/// Recommended maximum length of a SKILL.md body.
pub const MAX_BODY_LINES: usize = 500;

/// The validated frontmatter of a SKILL.md.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frontmatter {
    /// Skill name (equals the directory name).
    pub name: String,
    /// What the skill does and when to use it.
    pub description: String,
    /// Licence name or bundled licence file.
    pub license: Option<String>,
    /// Environment requirements.
    pub compatibility: Option<String>,
    /// Free-form string map.
    pub metadata: BTreeMap<String, String>,
    /// Experimental pre-approved tools (space-separated).
    pub allowed_tools: Option<String>,
}

/// A parsed SKILL.md.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkillDoc {
    /// The frontmatter.
    pub frontmatter: Frontmatter,
    /// The Markdown body after the closing `---`.
    pub body: String,
    /// 1-based line number of the body's first line in the file.
    pub body_line: usize,
}

/// Splits SKILL.md into frontmatter YAML text, body, and the body's first line number.
fn split(text: &str) -> Result<(&str, &str, usize), Finding> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let Some(rest) = text.strip_prefix("---") else {
        return Err(Finding::error(
            "SKILL.md must start with YAML frontmatter (---)",
            "begin the file with a line \"---\", the name/description keys, and a closing \"---\"",
        ));
    };
    let rest = rest
        .strip_prefix("\r\n")
        .or_else(|| rest.strip_prefix('\n'))
        .unwrap_or(rest);
    let mut offset = 0;
    for (i, line) in rest.split_inclusive('\n').enumerate() {
        if line.trim_end() == "---" {
            let yaml = &rest[..offset];
            let body = &rest[offset + line.len()..];
            return Ok((yaml, body, i + 3));
        }
        offset += line.len();
    }
    Err(Finding::error(
        "SKILL.md frontmatter not properly closed with ---",
        "add a line containing only \"---\" after the frontmatter keys",
    ))
}

/// Parses SKILL.md and checks the frontmatter rules. `dir_name` is the skill directory's name
/// (the `name` must equal it). All rule violations are reported, not just the first.
pub fn parse(text: &str, dir_name: Option<&str>) -> Result<SkillDoc, Vec<Finding>> {
    let (yaml, body, body_line) = split(text).map_err(|f| vec![f])?;
    let map = read_mapping(yaml)?;
    let mut errors = Vec::new();
    let fields = collect_fields(map, &mut errors);

    let name = required_string(&fields, "name", &mut errors);
    if let Some(n) = &name {
        check_name(n, dir_name, &mut errors);
    }
    let description = required_string(&fields, "description", &mut errors);
    if let Some(d) = &description {
        check_description(d, &mut errors);
    }
    let compatibility = compatibility_field(&fields, &mut errors);
    let license = license_field(&fields, &mut errors);
    let metadata = metadata_field(&fields, &mut errors);
    let allowed_tools = allowed_tools_field(&fields, &mut errors);
    match (errors.is_empty(), name, description) {
        (true, Some(name), Some(description)) => Ok(SkillDoc {
            frontmatter: Frontmatter {
                name,
                description,
                license,
                compatibility,
                metadata,
                allowed_tools,
            },
            body: body.to_owned(),
            body_line,
        }),
        _ => Err(errors),
    }
}

/// The frontmatter text as a YAML mapping.
fn read_mapping(yaml: &str) -> Result<serde_yaml::Mapping, Vec<Finding>> {
    let value: Yaml = serde_yaml::from_str(yaml).map_err(|e| {
        vec![Finding::error(
            format!("Invalid YAML in frontmatter: {e}"),
            "quote values that contain \": \" or start with a special character",
        )]
    })?;
    let Yaml::Mapping(map) = value else {
        return Err(vec![Finding::error(
            "SKILL.md frontmatter must be a YAML mapping",
            "write the frontmatter as \"key: value\" lines (name, description, ...)",
        )]);
    };
    Ok(map)
}

/// The mapping's entries by key text; keys outside [`ALLOWED_KEYS`] are one finding.
fn collect_fields(map: serde_yaml::Mapping, errors: &mut Vec<Finding>) -> BTreeMap<String, Yaml> {
    let mut fields: BTreeMap<String, Yaml> = BTreeMap::new();
    let mut extra = Vec::new();
    for (k, v) in map {
        let key = match k {
            Yaml::String(s) => s,
            other => serde_yaml::to_string(&other)
                .unwrap_or_default()
                .trim()
                .to_owned(),
        };
        if !ALLOWED_KEYS.contains(&key.as_str()) {
            extra.push(key.clone());
        }
        fields.insert(key, v);
    }
    if !extra.is_empty() {
        extra.sort();
        let allowed: Vec<String> = ALLOWED_KEYS.iter().map(|k| format!("'{k}'")).collect();
        errors.push(Finding::error(
            format!(
                "Unexpected fields in frontmatter: {}. Only [{}] are allowed.",
                extra.join(", "),
                allowed.join(", ")
            ),
            "move project-specific data into manifest.json (or into `metadata` as strings) and remove the key",
        ));
    }
    fields
}

fn check_description(d: &str, errors: &mut Vec<Finding>) {
    let k = d.chars().count();
    if k > 1024 {
        errors.push(Finding::error(
            format!("Description exceeds 1024 character limit ({k} chars)"),
            "shorten the description; move details into the body",
        ));
    }
}

/// Optional `compatibility`: a non-empty string of at most 500 characters.
fn compatibility_field(
    fields: &BTreeMap<String, Yaml>,
    errors: &mut Vec<Finding>,
) -> Option<String> {
    match fields.get("compatibility") {
        None => None,
        Some(Yaml::String(c)) => {
            let k = c.chars().count();
            if k > 500 {
                errors.push(Finding::error(
                    format!("Compatibility exceeds 500 character limit ({k} chars)"),
                    "shorten compatibility to the essential requirements",
                ));
            } else if c.trim().is_empty() {
                errors.push(Finding::error(
                    "Field 'compatibility' must be a non-empty string",
                    "remove the key or describe the requirements",
                ));
            }
            Some(c.clone())
        }
        Some(_) => {
            errors.push(Finding::error(
                "Field 'compatibility' must be a string",
                "write compatibility as a single string",
            ));
            None
        }
    }
}

/// Optional `license`: a string.
fn license_field(fields: &BTreeMap<String, Yaml>, errors: &mut Vec<Finding>) -> Option<String> {
    match fields.get("license") {
        None => None,
        Some(Yaml::String(l)) => Some(l.clone()),
        Some(_) => {
            errors.push(Finding::error(
                "Field 'license' must be a string",
                "write the licence name, e.g. \"license: MIT\"",
            ));
            None
        }
    }
}

/// Optional `metadata`: a flat map of scalar keys to scalar values, read as strings.
fn metadata_field(
    fields: &BTreeMap<String, Yaml>,
    errors: &mut Vec<Finding>,
) -> BTreeMap<String, String> {
    match fields.get("metadata") {
        None => BTreeMap::new(),
        Some(Yaml::Mapping(m)) => {
            let mut out = BTreeMap::new();
            for (k, v) in m {
                match (scalar_string(k), scalar_string(v)) {
                    (Some(k), Some(v)) => {
                        out.insert(k, v);
                    }
                    _ => errors.push(Finding::error(
                        "Field 'metadata' must map string keys to string values",
                        "use flat \"key: value\" pairs under metadata",
                    )),
                }
            }
            out
        }
        Some(_) => {
            errors.push(Finding::error(
                "Field 'metadata' must map string keys to string values",
                "write metadata as a mapping: \"metadata:\\n  author: me\"",
            ));
            BTreeMap::new()
        }
    }
}

/// Optional `allowed-tools`: a string, or a list of strings joined with spaces.
fn allowed_tools_field(
    fields: &BTreeMap<String, Yaml>,
    errors: &mut Vec<Finding>,
) -> Option<String> {
    match fields.get("allowed-tools") {
        None => None,
        Some(Yaml::String(s)) => Some(s.clone()),
        Some(Yaml::Sequence(items)) if items.iter().all(|i| matches!(i, Yaml::String(_))) => Some(
            items
                .iter()
                .filter_map(Yaml::as_str)
                .collect::<Vec<_>>()
                .join(" "),
        ),
        Some(_) => {
            errors.push(Finding::error(
                "Field 'allowed-tools' must be a string",
                "write a space-separated string, e.g. \"allowed-tools: Bash(git:*) Read\"",
            ));
            None
        }
    }
}

fn scalar_string(v: &Yaml) -> Option<String> {
    match v {
        Yaml::String(s) => Some(s.clone()),
        Yaml::Number(n) => Some(n.to_string()),
        Yaml::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

fn required_string(
    fields: &BTreeMap<String, Yaml>,
    key: &str,
    errors: &mut Vec<Finding>,
) -> Option<String> {
    match fields.get(key) {
        None => {
            errors.push(Finding::error(
                format!("Missing required field in frontmatter: {key}"),
                format!("add \"{key}: ...\" to the frontmatter"),
            ));
            None
        }
        Some(Yaml::String(s)) if !s.trim().is_empty() => Some(s.trim().to_owned()),
        Some(_) => {
            errors.push(Finding::error(
                format!("Field '{key}' must be a non-empty string"),
                format!("give \"{key}\" a non-empty text value"),
            ));
            None
        }
    }
}

/// The name rules, in the reference validator's order and wording.
fn check_name(name: &str, dir_name: Option<&str>, errors: &mut Vec<Finding>) {
    let k = name.chars().count();
    let fix_name = name
        .to_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect::<String>();
    if k > 64 {
        errors.push(Finding::error(
            format!("Skill name '{name}' exceeds 64 character limit ({k} chars)"),
            "shorten the name (and rename the directory to match)",
        ));
    }
    if name != name.to_lowercase() {
        errors.push(Finding::error(
            format!("Skill name '{name}' must be lowercase"),
            format!("rename the skill to \"{fix_name}\" (directory too)"),
        ));
    }
    if name.starts_with('-') || name.ends_with('-') {
        errors.push(Finding::error(
            "Skill name cannot start or end with a hyphen",
            format!("use \"{}\"", name.trim_matches('-')),
        ));
    }
    if name.contains("--") {
        errors.push(Finding::error(
            "Skill name cannot contain consecutive hyphens",
            "replace \"--\" with a single \"-\"",
        ));
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c.is_uppercase())
        || !name.is_ascii()
    {
        errors.push(Finding::error(
            format!(
                "Skill name '{name}' contains invalid characters. Only letters, digits, and hyphens are allowed."
            ),
            format!("rename the skill to \"{fix_name}\" (lowercase a-z, 0-9 and -)"),
        ));
    }
    if let Some(dir) = dir_name
        && dir != name
    {
        errors.push(Finding::error(
            format!("Directory name '{dir}' must match skill name '{name}'"),
            format!("rename the directory to \"{name}\" or set \"name: {dir}\""),
        ));
    }
}

#[cfg(test)]
mod tests {
    /// The validator's detailed name checks agree with the one rule the rest of the crate
    /// uses ([`crate::names::is_skill_name`]).
    #[test]
    fn name_findings_agree_with_the_shared_rule() {
        let long = "x".repeat(65);
        for name in [
            "send-reply",
            "a",
            "a9-b",
            "-a",
            "a-",
            "a--b",
            "Send",
            "a_b",
            "a b",
            "ä",
            long.as_str(),
            "",
        ] {
            let mut errors = Vec::new();
            check_name(name, None, &mut errors);
            // An empty name is reported elsewhere (as missing).
            if name.is_empty() {
                continue;
            }
            assert_eq!(
                errors.is_empty(),
                crate::names::is_skill_name(name),
                "{name:?}: {errors:?}"
            );
        }
    }

    use super::*;

    fn errs(text: &str, dir: &str) -> Vec<String> {
        match parse(text, Some(dir)) {
            Ok(_) => Vec::new(),
            Err(e) => e.into_iter().map(|f| f.message).collect(),
        }
    }

    #[test]
    fn parses_a_valid_file() {
        let doc = parse(
            "---\nname: x-y\ndescription: Does x.\nmetadata:\n  v: 1\n---\n# Body\ntext\n",
            Some("x-y"),
        )
        .unwrap();
        assert_eq!(doc.frontmatter.name, "x-y");
        assert_eq!(doc.frontmatter.metadata["v"], "1");
        assert_eq!(doc.body, "# Body\ntext\n");
        assert_eq!(doc.body_line, 7);
    }

    #[test]
    fn reference_wording() {
        assert_eq!(
            errs("name: x\n", "x"),
            ["SKILL.md must start with YAML frontmatter (---)"]
        );
        assert_eq!(
            errs("---\nname: x\n", "x"),
            ["SKILL.md frontmatter not properly closed with ---"]
        );
        assert_eq!(
            errs("---\n- a\n---\n", "x"),
            ["SKILL.md frontmatter must be a YAML mapping"]
        );
        assert_eq!(
            errs("---\nname: x\n---\n", "x"),
            ["Missing required field in frontmatter: description"]
        );
        assert_eq!(
            errs("---\nname: x\ndescription: d\nversion: 1\n---\n", "x"),
            [
                "Unexpected fields in frontmatter: version. Only ['allowed-tools', 'compatibility', 'description', 'license', 'metadata', 'name'] are allowed."
            ]
        );
        assert_eq!(
            errs("---\nname: Abc\ndescription: d\n---\n", "Abc"),
            ["Skill name 'Abc' must be lowercase"]
        );
        assert_eq!(
            errs("---\nname: -a\ndescription: d\n---\n", "-a"),
            ["Skill name cannot start or end with a hyphen"]
        );
        assert_eq!(
            errs("---\nname: a--b\ndescription: d\n---\n", "a--b"),
            ["Skill name cannot contain consecutive hyphens"]
        );
        assert_eq!(
            errs("---\nname: a_b\ndescription: d\n---\n", "a_b"),
            [
                "Skill name 'a_b' contains invalid characters. Only letters, digits, and hyphens are allowed."
            ]
        );
        assert_eq!(
            errs("---\nname: a\ndescription: d\n---\n", "b"),
            ["Directory name 'b' must match skill name 'a'"]
        );
        let long = "a".repeat(65);
        assert_eq!(
            errs(&format!("---\nname: {long}\ndescription: d\n---\n"), &long),
            [format!(
                "Skill name '{long}' exceeds 64 character limit (65 chars)"
            )]
        );
        let desc = "d".repeat(1025);
        assert_eq!(
            errs(&format!("---\nname: a\ndescription: {desc}\n---\n"), "a"),
            ["Description exceeds 1024 character limit (1025 chars)"]
        );
        assert_eq!(
            errs(
                "---\nname: a\ndescription: d\ncompatibility: [1]\n---\n",
                "a"
            ),
            ["Field 'compatibility' must be a string"]
        );
        assert_eq!(
            errs("---\nname: a\ndescription: \"\"\n---\n", "a"),
            ["Field 'description' must be a non-empty string"]
        );
    }
}
