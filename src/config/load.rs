//! Loading `config.yaml`: read, `${VAR}` interpolation, environment overrides, typed parse.
//!
//! Order of precedence: built-in defaults < the file < environment variables ([`ENV_OVERRIDES`]).
//! The file is parsed to a YAML value first so that interpolation and overrides work on a tree,
//! then deserialised with two wrappers: `serde_ignored` reports keys the schema does not know
//! (each becomes an error with the closest valid key suggested) and `serde_path_to_error` names
//! the exact key of a type error. Every problem is reported in one run: a key that cannot be
//! used (a type error, an unset variable) is dropped and the file read again, so the keys after
//! it are still checked. The process environment is read through [`EnvSource`], so tests pass
//! their own.

use std::path::{Path, PathBuf};

use serde_yaml::{Mapping, Value};

use super::{Config, ConfigError, ConfigIssue};

/// Where environment variables come from (the process, or a map in tests).
pub trait EnvSource {
    /// The value of `name`, if set.
    fn var(&self, name: &str) -> Option<String>;

    /// Why `name` could not be read when a file should hold it (see `env_file`); `None` when
    /// nothing is wrong.
    fn problem(&self, name: &str) -> Option<String> {
        let _ = name;
        None
    }
}

/// The real process environment, where every variable may also come from a file (`NAME_FILE`,
/// or systemd's `$CREDENTIALS_DIRECTORY/NAME`; see `env_file`).
#[derive(Debug, Clone, Copy, Default)]
pub struct ProcessEnv;

impl EnvSource for ProcessEnv {
    fn var(&self, name: &str) -> Option<String> {
        super::env_file::resolve(name, |n| std::env::var(n).ok())
            .ok()
            .flatten()
    }

    fn problem(&self, name: &str) -> Option<String> {
        super::env_file::resolve(name, |n| std::env::var(n).ok()).err()
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

/// Environment variables that override file values, besides each platform's
/// ([`PLATFORMS`](crate::config::PLATFORMS)): (variable, key path, kind).
pub const ENV_OVERRIDES: &[(&str, &str, EnvKind)] = &[
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
/// Relative paths in it are relative to the file's folder (`config::paths`).
pub fn load_file(path: &Path, env: &impl EnvSource) -> Result<Config, ConfigError> {
    finish(load_lenient(&read_file(path)?, env, Some(&base_of(path)))?)
}

/// The folder relative paths in the configuration file at `path` are relative to.
pub(crate) fn base_of(path: &Path) -> PathBuf {
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    absolute
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("/"))
}

/// The text of the configuration file at `path`.
pub(crate) fn read_file(path: &Path) -> Result<String, ConfigError> {
    std::fs::read_to_string(path).map_err(|source| {
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
    })
}

/// Parses configuration text (the contents of a `config.yaml`), applies interpolation and
/// environment overrides, and validates the result. The file-system checks `check-config` and
/// `serve` add on top are in `app::check`.
pub fn load_str(text: &str, env: &impl EnvSource) -> Result<Config, ConfigError> {
    finish(load_lenient(text, env, None)?)
}

fn finish(loaded: Loaded) -> Result<Config, ConfigError> {
    if loaded.issues.is_empty() {
        Ok(loaded.config)
    } else {
        Err(ConfigError::Problems(loaded.issues))
    }
}

/// A configuration read as far as possible: every key that could not be used (a type error, an
/// unset variable) is dropped so its default applies, and the rest is still checked.
pub(crate) struct Loaded {
    /// The configuration, with defaults at the dropped keys.
    pub config: Config,
    /// Every problem found: interpolation, unknown keys, type errors, then [`Config::validate`].
    pub issues: Vec<ConfigIssue>,
    /// Dotted paths of the dropped keys; later checks skip what lies under them, since they
    /// would only be judging the stand-in default.
    pub dropped: Vec<String>,
    /// The shipped folder the unset folders were resolved to (`config::paths`).
    pub shipped: crate::shipped::Shipped,
}

impl Loaded {
    /// Whether a later check's `issue` would only be judging a dropped key's stand-in default:
    /// it is at or under a dropped key, or its message names one (cross-field rules cite the
    /// other key, e.g. "longer than agent.maxTurnMs").
    pub fn hides(&self, issue: &ConfigIssue) -> bool {
        self.dropped.iter().any(|d| {
            let under = issue
                .path
                .strip_prefix(d.as_str())
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('.'));
            under || issue.message.contains(d.as_str())
        })
    }
}

/// Reads the whole file, collecting every problem instead of stopping at the first. Only YAML
/// syntax errors and a non-mapping top level (nothing usable at all) are returned as errors.
/// Paths are resolved (`config::paths`): relative ones against `base`, the file's folder
/// (None: text from no file, kept as written), unset shipped folders to the shipped defaults,
/// written when needed.
pub(crate) fn load_lenient(
    text: &str,
    env: &impl EnvSource,
    base: Option<&Path>,
) -> Result<Loaded, ConfigError> {
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
    let mut unusable = Vec::new();
    interpolate(&mut value, &mut Vec::new(), env, &mut issues, &mut unusable);
    let mut dropped: Vec<String> = unusable
        .iter()
        .filter_map(|segments| drop_key(&mut value, segments))
        .collect();
    apply_env_overrides(&mut value, env, &mut issues);

    let (config, mut parse_issues, parse_dropped) = deserialize(value);
    issues.append(&mut parse_issues);
    dropped.extend(parse_dropped);
    let Some(mut config) = config else {
        return Err(ConfigError::Problems(issues));
    };
    let shipped = super::paths::shipped_for(env);
    super::paths::resolve(&mut config, base, &shipped);
    issues.extend(super::paths::ensure_shipped(&config, &shipped));
    let mut loaded = Loaded {
        config,
        issues,
        dropped,
        shipped,
    };
    if let Err(ConfigError::Problems(found)) = loaded.config.validate() {
        let kept: Vec<ConfigIssue> = found.into_iter().filter(|i| !loaded.hides(i)).collect();
        loaded.issues.extend(kept);
    }
    Ok(loaded)
}

/// A type error drops at most this many keys before the file is given up on.
const MAX_DROPPED_KEYS: usize = 64;

/// Deserialises the tree, collecting unknown keys and every type error: serde stops at the
/// first type error, so the offending key is dropped (its default applies) and the tree is read
/// again, until it parses. Returns the configuration (None when a type error cannot be pinned
/// to a key), the problems (unknown keys first, in file order, then type errors) and the dotted
/// paths of the dropped keys.
fn deserialize(mut value: Value) -> (Option<Config>, Vec<ConfigIssue>, Vec<String>) {
    let mut unknown: Vec<Vec<String>> = Vec::new();
    let mut type_errors = Vec::new();
    let mut dropped = Vec::new();
    let config = loop {
        let mut seen: Vec<Vec<String>> = Vec::new();
        let result = {
            let mut on_unknown = |path: serde_ignored::Path<'_>| seen.push(path_segments(&path));
            let ignored = serde_ignored::Deserializer::new(value.clone(), &mut on_unknown);
            serde_path_to_error::deserialize::<_, Config>(ignored)
        };
        for path in seen {
            if !unknown.contains(&path) {
                unknown.push(path);
            }
        }
        let err = match result {
            Ok(config) => break Some(config),
            Err(err) => err,
        };
        let path = err.path().to_string();
        let segments = error_segments(err.path());
        type_errors.push(ConfigIssue::new(
            if path == "." {
                "(top level)".to_owned()
            } else {
                path
            },
            err.into_inner().to_string(),
        ));
        match segments.and_then(|s| drop_key(&mut value, &s)) {
            Some(key) if dropped.len() < MAX_DROPPED_KEYS => dropped.push(key),
            _ => break None,
        }
    };

    let known = known_keys();
    let mut issues: Vec<ConfigIssue> = unknown
        .iter()
        .map(|segments| unknown_key_issue(segments, &known))
        .collect();
    issues.extend(type_errors);
    (config, issues, dropped)
}

/// One step of a key path in the YAML tree.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    Key(String),
    Index(usize),
}

/// A type error's location as tree steps; None when it names no key (the top level, an enum
/// variant).
fn error_segments(path: &serde_path_to_error::Path) -> Option<Vec<Segment>> {
    use serde_path_to_error::Segment as S;
    path.iter()
        .map(|s| match s {
            S::Map { key } => Some(Segment::Key(key.clone())),
            S::Seq { index } => Some(Segment::Index(*index)),
            S::Enum { .. } | S::Unknown => None,
        })
        .collect()
}

/// Removes the innermost mapping key on `path` (a sequence item takes its whole list with it,
/// so later items keep their indices meaningful) and returns its dotted path.
fn drop_key(root: &mut Value, path: &[Segment]) -> Option<String> {
    let last_key = path.iter().rposition(|s| matches!(s, Segment::Key(_)))?;
    let mut cur = root;
    for step in &path[..last_key] {
        cur = match step {
            Segment::Key(k) => cur.as_mapping_mut()?.get_mut(k.as_str())?,
            Segment::Index(i) => cur.as_sequence_mut()?.get_mut(*i)?,
        };
    }
    let Segment::Key(key) = &path[last_key] else {
        return None;
    };
    cur.as_mapping_mut()?.remove(key.as_str())?;
    Some(dotted(&path[..=last_key]))
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
pub(crate) fn closest<'a>(key: &str, candidates: &[&'a str]) -> Option<&'a str> {
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
/// The path of each value that cannot be expanded goes to `unusable`.
fn interpolate(
    value: &mut Value,
    path: &mut Vec<Segment>,
    env: &impl EnvSource,
    issues: &mut Vec<ConfigIssue>,
    unusable: &mut Vec<Vec<Segment>>,
) {
    match value {
        Value::String(s) if s.contains('$') => match expand(s, env) {
            Ok(expanded) => *s = expanded,
            Err(message) => {
                issues.push(ConfigIssue::new(dotted(path), message));
                unusable.push(path.clone());
            }
        },
        Value::Mapping(map) => {
            for (k, v) in map.iter_mut() {
                path.push(Segment::Key(key_text(k)));
                interpolate(v, path, env, issues, unusable);
                path.pop();
            }
        }
        Value::Sequence(seq) => {
            for (i, v) in seq.iter_mut().enumerate() {
                path.push(Segment::Index(i));
                interpolate(v, path, env, issues, unusable);
                path.pop();
            }
        }
        Value::Tagged(tagged) => interpolate(&mut tagged.value, path, env, issues, unusable),
        _ => {}
    }
}

/// `a.b.0` from tree steps.
fn dotted(path: &[Segment]) -> String {
    path.iter()
        .map(|s| match s {
            Segment::Key(k) => k.clone(),
            Segment::Index(i) => i.to_string(),
        })
        .collect::<Vec<_>>()
        .join(".")
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

/// Every override: each platform's, then [`ENV_OVERRIDES`].
fn all_env_overrides() -> impl Iterator<Item = (&'static str, &'static str, EnvKind)> {
    crate::config::PLATFORMS
        .iter()
        .flat_map(|p| p.env.iter())
        .map(|e| (e.var, e.key, e.kind))
        .chain(ENV_OVERRIDES.iter().copied())
}

fn apply_env_overrides(root: &mut Value, env: &impl EnvSource, issues: &mut Vec<ConfigIssue>) {
    for (var, key_path, kind) in all_env_overrides() {
        if let Some(problem) = env.problem(var) {
            issues.push(ConfigIssue::new(key_path, problem));
            continue;
        }
        let Some(raw) = env.var(var).filter(|v| !v.trim().is_empty()) else {
            continue;
        };
        let value = match kind {
            EnvKind::Text => Value::String(raw),
            EnvKind::Integer => match raw.trim().parse::<u64>() {
                Ok(n) => Value::Number(n.into()),
                Err(_) => {
                    issues.push(ConfigIssue::new(
                        key_path,
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
