//! `manifest.json`, the machine contract of a skill package (`docs/SKILLS.md`,
//! "manifest.json"): the types, parsing, and the rules the validator enforces on the version,
//! the input schema, the flags and the permissions. Every rule returns [`Finding`]s (message +
//! fix hint) instead of failing fast, so the validator can show the whole check chain at once.

mod flags;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::report::Finding;

pub use flags::check_flags;

/// Free-text flags of the old protocol. Free text never goes on the command line (the shell
/// expands `$VAR` inside it), so these names are reserved: the client rejects them with
/// `SKILL_LEGACY_FLAG` and no manifest may declare them.
pub const LEGACY_FREE_TEXT_FLAGS: [&str; 4] = ["message", "content", "query", "caption"];

/// The removed singular file flag (replaced by the repeatable `--file-paths`).
pub const SINGLE_FILE_FLAG: &str = "file-path";

/// A parsed `manifest.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// Semantic version of the package (`1.0.0`).
    pub version: String,
    /// Executable the agent runs, relative to the skill directory (`scripts/<name>`); absent
    /// for command-based skills.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entrypoint: Option<String>,
    /// For command-based skills: the program the agent runs (e.g. `agent-browser`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// JSON Schema of the `parameters` object the Skill API receives.
    pub input_schema: Value,
    /// CLI flag (kebab-case, without `--`) → parameter mapping.
    #[serde(default)]
    pub flags: BTreeMap<String, FlagSpec>,
    /// Optional: flags that may also be given positionally, in this order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub order: Vec<String>,
    /// `resource:action:scope` grants; the scope is a glob.
    #[serde(default)]
    pub permissions: Vec<String>,
    /// Per-(skill, user) rate limit enforced by the Skill API.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_limit: Option<RateLimit>,
    /// Secrets this skill needs in the agent's environment.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub credentials: Vec<Credential>,
    /// Also offered to humans as a slash command (`docs/SKILLS.md`, "User commands").
    #[serde(default)]
    pub user_command: bool,
}

/// How one CLI flag maps onto a parameter.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FlagSpec {
    /// Name of the `input_schema` property the flag sets.
    pub param: String,
    /// The flag carries the path of a payload file whose UTF-8 text becomes the parameter.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub payload: bool,
    /// For array parameters: one flag value may hold several items joined by this separator
    /// (e.g. `","` for `--related-to mem_a,mem_b`). Repetition works either way.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub separator: Option<String>,
}

/// A manifest's per-(skill, user) rate limit, as the Skill API enforces it
/// (`skill_api::ratelimit`): at most `max_requests` calls in any sliding `window_ms`, and calls
/// paced by a token bucket of capacity `burst` refilled at `max_requests` per window. Both
/// must admit a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateLimit {
    /// Length of the sliding window in milliseconds (> 0).
    pub window_ms: u64,
    /// Calls allowed per window (> 0).
    pub max_requests: u32,
    /// Calls allowed back to back (the bucket's capacity); defaults to `max_requests`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst: Option<u32>,
}

/// A secret the skill needs; only `env_var` ever reaches the agent's environment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Credential {
    /// Stable identifier of the credential.
    pub id: String,
    /// Environment variable the agent receives it in.
    pub env_var: String,
    /// What it is for (shown to operators).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// The JSON type of a parameter, as the client converts command-line text into it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParamType {
    /// JSON string.
    String,
    /// JSON integer.
    Integer,
    /// JSON number.
    Number,
    /// JSON boolean.
    Boolean,
    /// JSON array (items described by the schema's `items`).
    Array,
    /// Anything else (object, null, missing type).
    Other,
}

impl ParamType {
    /// The type named by a property schema's `type`.
    pub fn of(prop: &Value) -> ParamType {
        match prop.get("type").and_then(Value::as_str) {
            Some("string") => ParamType::String,
            Some("integer") => ParamType::Integer,
            Some("number") => ParamType::Number,
            Some("boolean") => ParamType::Boolean,
            Some("array") => ParamType::Array,
            _ => ParamType::Other,
        }
    }
}

impl Manifest {
    /// Parses `manifest.json` text (unknown keys are errors).
    pub fn parse(text: &str) -> Result<Manifest, String> {
        serde_json::from_str(text).map_err(|e| e.to_string())
    }

    /// The schema of one property, if declared.
    pub fn property(&self, param: &str) -> Option<&Value> {
        self.input_schema.get("properties")?.get(param)
    }

    /// Names listed in the schema's `required`.
    pub fn required(&self) -> Vec<&str> {
        self.input_schema
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default()
    }

    /// The flag that sets `param`, if any.
    pub fn flag_for_param(&self, param: &str) -> Option<(&str, &FlagSpec)> {
        self.flags
            .iter()
            .find(|(_, f)| f.param == param)
            .map(|(n, f)| (n.as_str(), f))
    }

    /// The type of the parameter a flag sets.
    pub fn flag_type(&self, flag: &str) -> ParamType {
        self.flags
            .get(flag)
            .and_then(|f| self.property(&f.param))
            .map_or(ParamType::Other, ParamType::of)
    }
}

/// Checks a version string against Semantic Versioning 2.0.0 (the `semver` crate's strict
/// parser: no `v` prefix, no leading zeros, three numeric parts).
pub fn is_semver(v: &str) -> bool {
    semver::Version::parse(v).is_ok()
}

/// Whether `s` is a kebab-case identifier (`[a-z0-9]+(-[a-z0-9]+)*`).
pub fn is_kebab(s: &str) -> bool {
    !s.is_empty()
        && !s.starts_with('-')
        && !s.ends_with('-')
        && !s.contains("--")
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// The schema rules (`docs/SKILLS.md`, "manifest.json"): object type, no `$ref`, typed and
/// described properties, bounded integers, `enum` for closed sets, `required` ⊆ properties, no
/// additional properties.
pub fn check_input_schema(schema: &Value) -> Vec<Finding> {
    let mut out = Vec::new();
    let Some(obj) = schema.as_object() else {
        out.push(Finding::error(
            "input_schema is not a JSON object",
            r#"write "input_schema": {"type": "object", "properties": {...}, "additionalProperties": false}"#,
        ));
        return out;
    };
    find_refs(schema, "input_schema", &mut out);
    if obj.get("type").and_then(Value::as_str) != Some("object") {
        out.push(Finding::error(
            "input_schema.type must be \"object\"",
            r#"set "type": "object" at the top of input_schema"#,
        ));
    }
    if obj.get("additionalProperties") != Some(&Value::Bool(false)) {
        out.push(Finding::error(
            "input_schema does not set \"additionalProperties\": false",
            r#"add "additionalProperties": false so unknown parameters are rejected"#,
        ));
    }
    let empty = serde_json::Map::new();
    let props = match obj.get("properties") {
        None => &empty,
        Some(Value::Object(p)) => p,
        Some(_) => {
            out.push(Finding::error(
                "input_schema.properties is not an object",
                r#"write "properties": {"name": {"type": ..., "description": ...}}"#,
            ));
            &empty
        }
    };
    for (name, prop) in props {
        check_property(
            &format!("input_schema.properties.{name}"),
            prop,
            true,
            &mut out,
        );
    }
    match obj.get("required") {
        None => {}
        Some(Value::Array(req)) => {
            for r in req {
                match r.as_str() {
                    Some(r) if props.contains_key(r) => {}
                    Some(r) => out.push(Finding::error(
                        format!("input_schema.required lists \"{r}\", which is not a declared property"),
                        format!("declare \"{r}\" under input_schema.properties or remove it from required"),
                    )),
                    None => out.push(Finding::error(
                        "input_schema.required contains a non-string entry",
                        "list property names as strings",
                    )),
                }
            }
        }
        Some(_) => out.push(Finding::error(
            "input_schema.required is not an array",
            r#"write "required": ["name", ...]"#,
        )),
    }
    if out.is_empty()
        && let Err(e) = jsonschema::meta::validate(schema)
    {
        out.push(Finding::error(
            format!("input_schema is not a valid JSON Schema: {e}"),
            "correct the keyword at the reported location",
        ));
    }
    out
}

fn find_refs(v: &Value, path: &str, out: &mut Vec<Finding>) {
    match v {
        Value::Object(m) => {
            for (k, child) in m {
                if k == "$ref" || k == "$dynamicRef" {
                    out.push(Finding::error(
                        format!("{path} uses \"{k}\"; references are not allowed"),
                        "inline the referenced schema where it is used",
                    ));
                } else {
                    find_refs(child, &format!("{path}.{k}"), out);
                }
            }
        }
        Value::Array(a) => {
            for (i, child) in a.iter().enumerate() {
                find_refs(child, &format!("{path}[{i}]"), out);
            }
        }
        _ => {}
    }
}

fn check_property(path: &str, prop: &Value, top: bool, out: &mut Vec<Finding>) {
    let Some(p) = prop.as_object() else {
        out.push(Finding::error(
            format!("{path} is not an object"),
            r#"describe it as {"type": ..., "description": ...}"#,
        ));
        return;
    };
    let ty = p.get("type").and_then(Value::as_str);
    if ty.is_none() {
        out.push(Finding::error(
            format!("{path} has no \"type\""),
            format!("add \"type\" (string, integer, number, boolean or array) to {path}"),
        ));
    }
    if top
        && p.get("description")
            .and_then(Value::as_str)
            .is_none_or(|d| d.trim().is_empty())
    {
        out.push(Finding::error(
            format!("{path} has no \"description\""),
            format!("add a \"description\" to {path}: it becomes the slash-command option text"),
        ));
    }
    match ty {
        Some("integer") => {
            let missing: Vec<String> = ["minimum", "maximum"]
                .into_iter()
                .filter(|b| !p.get(*b).is_some_and(Value::is_number))
                .map(|b| format!("\"{b}\""))
                .collect();
            if !missing.is_empty() {
                out.push(Finding::error(
                    format!("{path} is an integer without {}", missing.join(" and ")),
                    format!("add \"minimum\" and \"maximum\" to {path} (the slash command and the client check them)"),
                ));
            }
        }
        Some("string") if !p.contains_key("enum") => {
            if let Some(values) = closed_set_hint(p) {
                out.push(Finding::error(
                    format!("{path} names a closed set of values but does not use \"enum\""),
                    format!("add \"enum\": {values} to {path}"),
                ));
            }
        }
        Some("array") => match p.get("items") {
            Some(items) => check_property(&format!("{path}.items"), items, false, out),
            None => out.push(Finding::error(
                format!("{path} is an array without \"items\""),
                format!("add \"items\": {{\"type\": \"string\"}} (or the item type) to {path}"),
            )),
        },
        _ => {}
    }
    if let (Some(default), Some(values)) =
        (p.get("default"), p.get("enum").and_then(Value::as_array))
        && !values.contains(default)
    {
        out.push(Finding::error(
            format!("{path}.default {default} is not one of its enum values"),
            format!("set the default to one of {}", Value::Array(values.clone())),
        ));
    }
}

/// A string property "names a closed set" when its `pattern` is an alternation of words
/// (`^(a|b)$`) or its description says "one of".
fn closed_set_hint(p: &serde_json::Map<String, Value>) -> Option<String> {
    if let Some(pattern) = p.get("pattern").and_then(Value::as_str) {
        let inner = pattern
            .trim_start_matches('^')
            .trim_end_matches('$')
            .trim_start_matches('(')
            .trim_end_matches(')');
        let words: Vec<&str> = inner.split('|').collect();
        if words.len() > 1
            && words.iter().all(|w| {
                !w.is_empty()
                    && w.bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
            })
        {
            return Some(Value::from(words).to_string());
        }
    }
    let desc = p.get("description").and_then(Value::as_str)?.to_lowercase();
    desc.contains("one of")
        .then(|| "[\"value-a\", \"value-b\"]".to_owned())
}

/// Rules on one permission: `resource:action:scope`, the scope a glob, never a regex; a single
/// `*` path segment where `**` is probably meant is a warning.
pub fn check_permission(perm: &str) -> Vec<Finding> {
    let mut out = Vec::new();
    let mut parts = perm.splitn(3, ':');
    let (Some(resource), Some(action), Some(scope)) = (parts.next(), parts.next(), parts.next())
    else {
        out.push(Finding::error(
            format!("permission \"{perm}\" is not resource:action:scope"),
            "write e.g. \"fs:read:{workspace}/**\" or \"platform:send:channel\"",
        ));
        return out;
    };
    let ident = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
    };
    if !ident(resource) || !ident(action) {
        out.push(Finding::error(
            format!("permission \"{perm}\": resource and action must be lowercase words"),
            "write e.g. \"memory:write:{workspace}/**\"",
        ));
    }
    if scope.is_empty() {
        out.push(Finding::error(
            format!("permission \"{perm}\" has an empty scope"),
            format!("write \"{resource}:{action}:<glob>\""),
        ));
        return out;
    }
    if looks_like_regex(scope) {
        out.push(Finding::error(
            format!("permission \"{perm}\": scope \"{scope}\" looks like a regular expression; scopes are globs"),
            format!("use the glob \"{resource}:{action}:{}\"", regex_to_glob(scope)),
        ));
        return out;
    }
    if scope.contains('/') && has_single_star_segment(scope) {
        out.push(Finding::warning(
            format!("permission \"{perm}\": \"*\" matches one path level only"),
            format!(
                "if the whole tree is meant, write \"{resource}:{action}:{}\"",
                scope.replace("/*", "/**").replace("/***", "/**")
            ),
        ));
    }
    out
}

fn looks_like_regex(scope: &str) -> bool {
    scope.starts_with('^')
        || scope.ends_with('$')
        || scope.contains(".*")
        || scope.contains(".+")
        || scope.contains("[^")
        || scope.contains("]+")
        || scope.contains('\\')
        || scope.contains("(?")
        || scope.contains('|')
        || scope.contains('(')
}

/// Best-effort translation of a regex-looking scope into the glob that was probably meant.
pub fn regex_to_glob(scope: &str) -> String {
    let s = scope.trim_start_matches('^').trim_end_matches('$');
    let s = s
        .replace("[^/]+", "*")
        .replace("[^/]*", "*")
        .replace(".*", "**")
        .replace(".+", "**")
        .replace("\\.", ".")
        .replace('\\', "");
    if s.is_empty() { "**".to_owned() } else { s }
}

fn has_single_star_segment(scope: &str) -> bool {
    scope.split('/').any(|seg| seg == "*")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn semver_accepts_valid_and_rejects_invalid() {
        for ok in [
            "1.0.0",
            "0.1.0",
            "10.20.30",
            "1.0.0-alpha.1",
            "1.0.0+build.5",
        ] {
            assert!(is_semver(ok), "{ok}");
        }
        for bad in [
            "1.0", "1", "01.0.0", "1.0.0-", "v1.0.0", "1.0.x", "", "1.0.0-01", " 1.0.0",
        ] {
            assert!(!is_semver(bad), "{bad}");
        }
    }

    #[test]
    fn schema_rules_find_every_violation() {
        let schema = json!({
            "type": "object",
            "properties": {
                "n": {"type": "integer", "minimum": 1, "description": "n"},
                "x": {"description": "no type"},
                "y": {"type": "string"},
                "kind": {"type": "string", "description": "k", "pattern": "^(a|b)$"},
                "r": {"$ref": "#/defs/x"}
            },
            "required": ["n", "ghost"]
        });
        let msgs: Vec<String> = check_input_schema(&schema)
            .into_iter()
            .map(|f| f.message)
            .collect();
        let has = |s: &str| msgs.iter().any(|m| m.contains(s));
        assert!(has("additionalProperties"), "{msgs:?}");
        assert!(
            has("properties.n is an integer without \"maximum\""),
            "{msgs:?}"
        );
        assert!(has("properties.x has no \"type\""), "{msgs:?}");
        assert!(has("properties.y has no \"description\""), "{msgs:?}");
        assert!(has("does not use \"enum\""), "{msgs:?}");
        assert!(has("uses \"$ref\""), "{msgs:?}");
        assert!(has("\"ghost\""), "{msgs:?}");
    }

    #[test]
    fn permissions_regex_and_star() {
        let f = check_permission("fs:read:^/home/[^/]+");
        assert!(f[0].is_error());
        assert!(f[0].fix.as_deref().unwrap().contains("fs:read:/home/*"));
        let w = check_permission("fs:read:{workspace}/*");
        assert!(!w[0].is_error());
        assert!(w[0].fix.as_deref().unwrap().contains("{workspace}/**"));
        assert!(check_permission("fs:read:{workspace}/**").is_empty());
        assert!(check_permission("platform:send:dm").is_empty());
        assert!(check_permission("bad")[0].is_error());
    }
}
