//! The built-in skills' manifests — the one table of built-in skills ([`BUILTIN_MANIFESTS`],
//! whose names are [`BUILTIN_SKILLS`]; the handler registry and the tests are checked against it), embedded in the binary with `include_str!`: the client's
//! fallback when no skills directory is found, and the reference schemas of
//! `skills validate --builtin` (check 5) until the daemon's handler registry provides them.

use std::collections::BTreeMap;
use std::fmt;

use serde_json::Value;

use super::manifest::Manifest;

/// `(name, manifest.json text)` of every built-in skill, by name.
pub const BUILTIN_MANIFESTS: &[(&str, &str)] = &[
    (
        "cancel-reminder",
        include_str!("../../skills/cancel-reminder/manifest.json"),
    ),
    (
        "edit-reply",
        include_str!("../../skills/edit-reply/manifest.json"),
    ),
    (
        "fetch-context",
        include_str!("../../skills/fetch-context/manifest.json"),
    ),
    (
        "get-message",
        include_str!("../../skills/get-message/manifest.json"),
    ),
    (
        "list-reminders",
        include_str!("../../skills/list-reminders/manifest.json"),
    ),
    (
        "memory-export",
        include_str!("../../skills/memory-export/manifest.json"),
    ),
    (
        "memory-patch",
        include_str!("../../skills/memory-patch/manifest.json"),
    ),
    (
        "memory-save",
        include_str!("../../skills/memory-save/manifest.json"),
    ),
    (
        "memory-search",
        include_str!("../../skills/memory-search/manifest.json"),
    ),
    (
        "memory-stats",
        include_str!("../../skills/memory-stats/manifest.json"),
    ),
    (
        "react-message",
        include_str!("../../skills/react-message/manifest.json"),
    ),
    (
        "send-file",
        include_str!("../../skills/send-file/manifest.json"),
    ),
    (
        "send-reply",
        include_str!("../../skills/send-reply/manifest.json"),
    ),
    (
        "send-voice",
        include_str!("../../skills/send-voice/manifest.json"),
    ),
    (
        "set-reminder",
        include_str!("../../skills/set-reminder/manifest.json"),
    ),
];

/// Names of the built-in skills, in [`BUILTIN_MANIFESTS`]' order (each has a handler in the
/// daemon).
pub const BUILTIN_SKILLS: [&str; BUILTIN_MANIFESTS.len()] = {
    let mut names = [""; BUILTIN_MANIFESTS.len()];
    let mut i = 0;
    while i < names.len() {
        names[i] = BUILTIN_MANIFESTS[i].0;
        i += 1;
    }
    names
};

/// Names of the built-in skills.
pub fn builtin_names() -> impl Iterator<Item = &'static str> {
    BUILTIN_MANIFESTS.iter().map(|(n, _)| *n)
}

/// The embedded manifest of a built-in skill.
pub fn builtin_manifest(name: &str) -> Option<Result<Manifest, String>> {
    BUILTIN_MANIFESTS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, text)| Manifest::parse(text))
}

/// Skill name → embedded `input_schema` (entries whose manifest does not parse are left out;
/// a test guarantees they all parse).
pub fn embedded_schemas() -> BTreeMap<String, Value> {
    BUILTIN_MANIFESTS
        .iter()
        .filter_map(|(n, text)| Some(((*n).to_owned(), Manifest::parse(text).ok()?.input_schema)))
        .collect()
}

/// One place where two schemas differ.
#[derive(Debug, Clone, PartialEq)]
pub struct SchemaDifference {
    /// JSON-pointer-like location (`/properties/limit/maximum`).
    pub path: String,
    /// What the daemon accepts there (`None`: absent).
    pub expected: Option<Value>,
    /// What the manifest says there (`None`: absent).
    pub actual: Option<Value>,
}

impl fmt::Display for SchemaDifference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let show = |v: &Option<Value>| v.as_ref().map_or("(absent)".to_owned(), Value::to_string);
        write!(
            f,
            "at {} the manifest has {} but the daemon accepts {}",
            if self.path.is_empty() {
                "/"
            } else {
                &self.path
            },
            show(&self.actual),
            show(&self.expected)
        )
    }
}

/// Compares the schema the daemon accepts (`expected`) with a manifest's (`actual`) and lists
/// every difference. `required` is compared as a set; everything else exactly. Public so the
/// integrator can point `--builtin` at the handler registry's schemas.
pub fn schema_differences(expected: &Value, actual: &Value) -> Vec<SchemaDifference> {
    let mut out = Vec::new();
    diff(expected, actual, String::new(), &mut out);
    out
}

fn diff(expected: &Value, actual: &Value, path: String, out: &mut Vec<SchemaDifference>) {
    match (expected, actual) {
        (Value::Object(e), Value::Object(a)) => {
            let keys: std::collections::BTreeSet<&String> = e.keys().chain(a.keys()).collect();
            for k in keys {
                let p = format!("{path}/{k}");
                match (e.get(k), a.get(k)) {
                    (Some(ev), Some(av)) if k == "required" => {
                        if sorted(ev) != sorted(av) {
                            out.push(SchemaDifference {
                                path: p,
                                expected: Some(ev.clone()),
                                actual: Some(av.clone()),
                            });
                        }
                    }
                    (Some(ev), Some(av)) => diff(ev, av, p, out),
                    (ev, av) => out.push(SchemaDifference {
                        path: p,
                        expected: ev.cloned(),
                        actual: av.cloned(),
                    }),
                }
            }
        }
        (e, a) if e == a => {}
        (e, a) => out.push(SchemaDifference {
            path,
            expected: Some(e.clone()),
            actual: Some(a.clone()),
        }),
    }
}

fn sorted(v: &Value) -> Vec<String> {
    let mut items: Vec<String> = v
        .as_array()
        .map(|a| a.iter().map(Value::to_string).collect())
        .unwrap_or_default();
    items.sort();
    items
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_embedded_manifest_parses() {
        for (name, text) in BUILTIN_MANIFESTS {
            Manifest::parse(text).unwrap_or_else(|e| panic!("{name}: {e}"));
        }
        assert_eq!(embedded_schemas().len(), BUILTIN_MANIFESTS.len());
    }

    #[test]
    fn differences_are_located() {
        let a =
            json!({"type": "object", "required": ["a", "b"], "properties": {"n": {"maximum": 5}}});
        let b = json!({"type": "object", "required": ["b", "a"], "properties": {"n": {"maximum": 6}, "x": {}}});
        let d = schema_differences(&a, &b);
        assert_eq!(d.len(), 2, "{d:?}");
        assert_eq!(d[0].path, "/properties/n/maximum");
        assert_eq!(d[1].path, "/properties/x");
        assert!(
            d[0].to_string()
                .contains("manifest has 6 but the daemon accepts 5")
        );
        assert!(schema_differences(&a, &a).is_empty());
    }
}
