//! Loading `config.yaml`: read, `${VAR}` interpolation, environment overrides, typed parse.
//!
//! Order of precedence: built-in defaults < the file < environment variables ([`ENV_OVERRIDES`]).
//! The file is parsed to a YAML value first so that interpolation and overrides work on a tree,
//! then deserialised with two wrappers: `serde_ignored` reports keys the schema does not know
//! (each becomes an error with the closest valid key suggested) and `serde_path_to_error` names
//! the exact key of a type error. The process environment is read through [`EnvSource`], so
//! tests pass their own.

use std::path::{Path, PathBuf};

use serde_yaml::{Mapping, Value};

use super::{Config, ConfigError, ConfigIssue};

/// Where environment variables come from (the process, or a map in tests).
pub trait EnvSource {
    /// The value of `name`, if set.
    fn var(&self, name: &str) -> Option<String>;
}

/// The real process environment.
#[derive(Debug, Clone, Copy, Default)]
pub struct ProcessEnv;

impl EnvSource for ProcessEnv {
    fn var(&self, name: &str) -> Option<String> {
        std::env::var(name).ok()
    }
}

impl<F: Fn(&str) -> Option<String>> EnvSource for F {
    fn var(&self, name: &str) -> Option<String> {
        self(name)
    }
}

/// How an environment variable's text becomes a YAML value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EnvKind {
    /// Taken verbatim.
    Text,
    /// A non-negative integer.
    Integer,
    /// A comma-separated list of strings.
    List,
}

/// Environment variables that override file values: (variable, key path, kind).
pub const ENV_OVERRIDES: &[(&str, &str, EnvKind)] = &[
    ("DISCORD_TOKEN", "platforms.discord.token", EnvKind::Text),
    ("MISSKEY_HOST", "platforms.misskey.host", EnvKind::Text),
    ("MISSKEY_TOKEN", "platforms.misskey.token", EnvKind::Text),
    ("LOG_LEVEL", "logging.level", EnvKind::Text),
    ("LOG_FORMAT", "logging.format", EnvKind::Text),
    ("AGENT_MODEL", "agent.model", EnvKind::Text),
    (
        "AGENT_AUTO_APPROVE_SKILLS",
        "agent.autoApproveSkills",
        EnvKind::List,
    ),
    ("SKILL_API_PORT", "skillApi.port", EnvKind::Integer),
    ("HEALTH_PORT", "health.port", EnvKind::Integer),
];

/// Loads, overrides and validates the configuration file at `path`.
pub fn load_file(path: &Path, env: &impl EnvSource) -> Result<Config, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| {
        if source.kind() == std::io::ErrorKind::NotFound {
            ConfigError::NotFound {
                path: path.to_path_buf(),
            }
        } else {
            ConfigError::Read {
                path: path.to_path_buf(),
                source,
            }
        }
    })?;
    load_str(&text, env)
}

/// Parses configuration text (the contents of a `config.yaml`), applies interpolation and
/// environment overrides, and validates the result.
pub fn load_str(text: &str, env: &impl EnvSource) -> Result<Config, ConfigError> {
    let mut value: Value = serde_yaml::from_str(text).map_err(|e| ConfigError::Syntax {
        message: e.to_string(),
    })?;
    if value.is_null() {
        value = Value::Mapping(Mapping::new());
    }
    if !value.is_mapping() {
        return Err(ConfigError::Problems(vec![ConfigIssue::new(
            "(top level)",
            "expected a mapping of sections such as `platforms:` and `agent:`",
        )]));
    }

    let mut issues = Vec::new();
    interpolate(&mut value, &mut Vec::new(), env, &mut issues);
    apply_env_overrides(&mut value, env, &mut issues);
    if !issues.is_empty() {
        return Err(ConfigError::Problems(issues));
    }

    let config = deserialize(value)?;
    config.validate()?;
    Ok(config)
}

/// Deserialises the tree, collecting unknown keys and the first type error.
fn deserialize(value: Value) -> Result<Config, ConfigError> {
    let mut unknown: Vec<Vec<String>> = Vec::new();
    let result = {
        let mut on_unknown = |path: serde_ignored::Path<'_>| unknown.push(path_segments(&path));
        let ignored = serde_ignored::Deserializer::new(value, &mut on_unknown);
        serde_path_to_error::deserialize::<_, Config>(ignored)
    };

    let known = known_keys();
    let mut issues: Vec<ConfigIssue> = unknown
        .iter()
        .map(|segments| unknown_key_issue(segments, &known))
        .collect();
    match result {
        Ok(config) if issues.is_empty() => Ok(config),
        Ok(_) => Err(ConfigError::Problems(issues)),
        Err(err) => {
            let path = err.path().to_string();
            let path = if path == "." {
                "(top level)".to_owned()
            } else {
                path
            };
            issues.push(ConfigIssue::new(path, err.into_inner().to_string()));
            Err(ConfigError::Problems(issues))
        }
    }
}

fn path_segments(path: &serde_ignored::Path<'_>) -> Vec<String> {
    use serde_ignored::Path;
    let mut out = Vec::new();
    let mut cur = path;
    loop {
        match cur {
            Path::Root => break,
            Path::Seq { parent, index } => {
                out.push(index.to_string());
                cur = parent;
            }
            Path::Map { parent, key } => {
                out.push(key.clone());
                cur = parent;
            }
            Path::Some { parent }
            | Path::NewtypeStruct { parent }
            | Path::NewtypeVariant { parent } => cur = parent,
        }
    }
    out.reverse();
    out
}

/// The default configuration as a tree: every valid key appears in it.
fn known_keys() -> Value {
    serde_yaml::to_value(Config::default()).unwrap_or(Value::Null)
}

fn unknown_key_issue(segments: &[String], known: &Value) -> ConfigIssue {
    let path = segments.join(".");
    let (parent, key) = match segments.split_last() {
        Some((key, parent)) => (parent, key.as_str()),
        None => (&[][..], ""),
    };
    let mut level = known;
    for seg in parent {
        level = level.get(seg.as_str()).unwrap_or(&Value::Null);
    }
    let candidates: Vec<&str> = level
        .as_mapping()
        .map(|m| m.keys().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let message = match closest(key, &candidates) {
        Some(best) => format!("unknown key; did you mean `{best}`?"),
        None if candidates.is_empty() => "unknown key".to_owned(),
        None => format!("unknown key; valid keys here: {}", candidates.join(", ")),
    };
    ConfigIssue::new(path, message)
}

/// The candidate closest to `key`, if any is close enough to be a plausible typo.
fn closest<'a>(key: &str, candidates: &[&'a str]) -> Option<&'a str> {
    let norm = |s: &str| s.to_ascii_lowercase().replace(['_', '-'], "");
    let key_n = norm(key);
    candidates
        .iter()
        .map(|c| (*c, strsim::normalized_damerau_levenshtein(&key_n, &norm(c))))
        .filter(|(_, score)| *score >= 0.6)
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(c, _)| c)
}

/// Replaces `${VAR}` and `${VAR:-default}` in every string scalar; `$$` is a literal `$`.
fn interpolate(
    value: &mut Value,
    path: &mut Vec<String>,
    env: &impl EnvSource,
    issues: &mut Vec<ConfigIssue>,
) {
    match value {
        Value::String(s) if s.contains('$') => match expand(s, env) {
            Ok(expanded) => *s = expanded,
            Err(message) => issues.push(ConfigIssue::new(path.join("."), message)),
        },
        Value::Mapping(map) => {
            for (k, v) in map.iter_mut() {
                path.push(key_text(k));
                interpolate(v, path, env, issues);
                path.pop();
            }
        }
        Value::Sequence(seq) => {
            for (i, v) in seq.iter_mut().enumerate() {
                path.push(i.to_string());
                interpolate(v, path, env, issues);
                path.pop();
            }
        }
        Value::Tagged(tagged) => interpolate(&mut tagged.value, path, env, issues),
        _ => {}
    }
}

fn key_text(k: &Value) -> String {
    match k {
        Value::String(s) => s.clone(),
        other => serde_yaml::to_string(other)
            .map(|s| s.trim().to_owned())
            .unwrap_or_default(),
    }
}

/// Expands one string. Errors name the variable.
pub(crate) fn expand(s: &str, env: &impl EnvSource) -> Result<String, String> {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(pos) = rest.find('$') {
        out.push_str(&rest[..pos]);
        let after = &rest[pos + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(body) = after.strip_prefix('{') {
            let end = body
                .find('}')
                .ok_or_else(|| format!("unterminated `${{` in {s:?}"))?;
            let expr = &body[..end];
            let (name, default) = match expr.split_once(":-") {
                Some((n, d)) => (n, Some(d)),
                None => (expr, None),
            };
            if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                return Err(format!("`${{{expr}}}` is not a valid variable reference"));
            }
            match (env.var(name).filter(|v| !v.is_empty()), default) {
                (Some(v), _) => out.push_str(&v),
                (None, Some(d)) => out.push_str(d),
                (None, None) => {
                    return Err(format!(
                        "environment variable {name} is not set (referenced as `${{{name}}}`; \
                         set it or write `${{{name}:-default}}`)"
                    ));
                }
            }
            rest = &body[end + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    Ok(out)
}

fn apply_env_overrides(root: &mut Value, env: &impl EnvSource, issues: &mut Vec<ConfigIssue>) {
    for (var, key_path, kind) in ENV_OVERRIDES {
        let Some(raw) = env.var(var).filter(|v| !v.trim().is_empty()) else {
            continue;
        };
        let value = match kind {
            EnvKind::Text => Value::String(raw),
            EnvKind::Integer => match raw.trim().parse::<u64>() {
                Ok(n) => Value::Number(n.into()),
                Err(_) => {
                    issues.push(ConfigIssue::new(
                        *key_path,
                        format!("from {var}: expected a whole number, got {raw:?}"),
                    ));
                    continue;
                }
            },
            EnvKind::List => Value::Sequence(
                raw.split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(|s| Value::String(s.to_owned()))
                    .collect(),
            ),
        };
        set_path(root, key_path, value);
    }
}

/// Sets `a.b.c` in a mapping tree, creating intermediate mappings (replacing non-mappings).
fn set_path(root: &mut Value, key_path: &str, value: Value) {
    let mut cur = root;
    let mut parts = key_path.split('.').peekable();
    while let Some(part) = parts.next() {
        if !cur.is_mapping() {
            *cur = Value::Mapping(Mapping::new());
        }
        let Value::Mapping(map) = cur else { return };
        let key = Value::String(part.to_owned());
        if parts.peek().is_none() {
            map.insert(key, value);
            return;
        }
        cur = map
            .entry(key)
            .or_insert_with(|| Value::Mapping(Mapping::new()));
    }
}

/// The default location of the configuration file.
pub fn default_path() -> PathBuf {
    PathBuf::from("./config.yaml")
}
