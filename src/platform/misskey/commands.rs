//! Text commands: a note or chat message to the bot that starts with `/name`, where
//! `name` is a skill offered to humans ([`UserCommandSpec`]), runs that skill instead of going to
//! the agent.
//!
//! Grammar, a small mirror of the skill client's: `/memory-search coffee beans --limit 5`.
//! `--kebab-flag value` and `--kebab-flag=value` set the schema's camelCase parameter, typed by
//! the schema (`integer` with its `minimum`/`maximum`, `number`, `boolean` as a bare flag or
//! `--no-flag`, `string` checked against `enum`, `array` by repetition); the remaining free text
//! goes to the schema's single required string parameter, if it has one (e.g. `query`). Values
//! may be quoted with `"…"` or `'…'`. Schema defaults are filled in. Errors come back with a
//! short usage text to send to the user.

use crate::names::{to_camel, to_kebab};
use serde_json::{Map, Number, Value};

use crate::platform::UserCommandSpec;

/// The outcome of reading a message as a command.
#[derive(Debug, Clone, PartialEq)]
pub enum ParsedCommand {
    /// Not a command for one of the offered skills: an ordinary message.
    NotCommand,
    /// A well-formed command.
    Command {
        /// Skill (command) name.
        skill: String,
        /// Typed parameters by their schema names.
        parameters: Map<String, Value>,
    },
    /// A command for an offered skill with unusable arguments.
    Invalid {
        /// Skill (command) name.
        skill: String,
        /// What is wrong, followed by the usage text, for the user.
        help: String,
    },
}

/// Reads `content` (mention already stripped) as a command for one of `specs`.
pub fn parse_command(content: &str, specs: &[UserCommandSpec]) -> ParsedCommand {
    let Some(rest) = content.trim_start().strip_prefix('/') else {
        return ParsedCommand::NotCommand;
    };
    let name_end = rest.find(char::is_whitespace).unwrap_or(rest.len());
    let name = &rest[..name_end];
    let Some(spec) = specs
        .iter()
        .find(|spec| spec.name.eq_ignore_ascii_case(name))
    else {
        return ParsedCommand::NotCommand;
    };
    match parse_arguments(&rest[name_end..], &spec.input_schema) {
        Ok(parameters) => ParsedCommand::Command {
            skill: spec.name.clone(),
            parameters,
        },
        Err(problem) => ParsedCommand::Invalid {
            skill: spec.name.clone(),
            help: format!("{problem}\n{}", usage(spec)),
        },
    }
}

/// A short usage text for `spec`, generated from its schema.
pub fn usage(spec: &UserCommandSpec) -> String {
    let properties = properties(&spec.input_schema);
    let required = required(&spec.input_schema);
    let free = free_text_parameter(&spec.input_schema);
    let mut line = format!("Usage: /{}", spec.name);
    if let Some(free) = &free {
        line.push_str(&format!(" <{free}>"));
    }
    let mut lines = Vec::new();
    for (name, schema) in &properties {
        if Some(name) == free.as_ref() {
            continue;
        }
        let flag = to_kebab(name);
        let kind = type_of(schema);
        let shown = if kind == "boolean" {
            format!("--{flag}")
        } else {
            format!("--{flag} <{}>", value_hint(schema))
        };
        if required.contains(name) {
            line.push_str(&format!(" {shown}"));
        } else {
            line.push_str(&format!(" [{shown}]"));
        }
        let description = schema
            .get("description")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let default = schema
            .get("default")
            .map(|d| format!(" (default {d})"))
            .unwrap_or_default();
        lines.push(format!("  --{flag}: {description}{default}"));
    }
    let mut text = line;
    if !spec.description.is_empty() {
        text.push('\n');
        text.push_str(&spec.description);
    }
    for entry in lines {
        text.push('\n');
        text.push_str(&entry);
    }
    text
}

fn parse_arguments(args: &str, schema: &Value) -> Result<Map<String, Value>, String> {
    let tokens = tokenize(args)?;
    let props = properties(schema);
    let mut parameters = Map::new();
    let mut free_text: Vec<String> = Vec::new();
    let mut iter = tokens.into_iter();
    while let Some(token) = iter.next() {
        let Some(flag) = flag_name(&token) else {
            free_text.push(token);
            continue;
        };
        let (flag, inline) = match flag.split_once('=') {
            Some((flag, value)) => (flag.to_owned(), Some(value.to_owned())),
            None => (flag.to_owned(), None),
        };
        let (name, negated) = resolve_flag(&props, &flag, inline.is_some())?;
        let property = &props[&name];
        let value = if type_of(property) == "boolean" {
            switch_value(&flag, negated, inline.as_deref())?
        } else {
            let raw = match inline {
                Some(raw) => raw,
                None => iter
                    .next()
                    .ok_or_else(|| format!("--{flag} needs a value."))?,
            };
            typed_value(&flag, property, &raw)?
        };
        store(&mut parameters, &flag, name, property, value)?;
    }
    if !free_text.is_empty() {
        place_free_text(&mut parameters, schema, &free_text)?;
    }
    for name in required(schema) {
        if !parameters.contains_key(&name) {
            return Err(format!("Missing --{}.", to_kebab(&name)));
        }
    }
    for (name, property) in &props {
        if let Some(default) = property.get("default")
            && !parameters.contains_key(name)
        {
            parameters.insert(name.clone(), default.clone());
        }
    }
    Ok(parameters)
}

/// The parameter `--flag` sets, and whether it came as `--no-<boolean>` (which takes no
/// `=value`).
fn resolve_flag(
    props: &Map<String, Value>,
    flag: &str,
    has_inline: bool,
) -> Result<(String, bool), String> {
    if let Some(name) = lookup(props, flag) {
        return Ok((name, false));
    }
    match flag.strip_prefix("no-").and_then(|f| lookup(props, f)) {
        Some(name) if type_of(&props[&name]) == "boolean" && !has_inline => Ok((name, true)),
        _ => Err(format!("Unknown option --{flag}.")),
    }
}

/// A boolean option's value: bare, negated, or `=true|false`.
fn switch_value(flag: &str, negated: bool, inline: Option<&str>) -> Result<Value, String> {
    match inline {
        None => Ok(Value::Bool(!negated)),
        Some("true") => Ok(Value::Bool(true)),
        Some("false") => Ok(Value::Bool(false)),
        Some(other) => Err(format!("--{flag} takes no value (got {other:?}).")),
    }
}

/// Sets `name` to `value`: arrays collect repeated options, anything else is given once.
fn store(
    parameters: &mut Map<String, Value>,
    flag: &str,
    name: String,
    property: &Value,
    value: Value,
) -> Result<(), String> {
    if type_of(property) == "array" {
        let entry = parameters
            .entry(name)
            .or_insert_with(|| Value::Array(Vec::new()));
        if let Value::Array(items) = entry {
            items.push(value);
        }
    } else if parameters.insert(name, value).is_some() {
        return Err(format!("--{flag} is given twice."));
    }
    Ok(())
}

/// The words outside options become the schema's free-text parameter, if it has one.
fn place_free_text(
    parameters: &mut Map<String, Value>,
    schema: &Value,
    free_text: &[String],
) -> Result<(), String> {
    let Some(target) = free_text_parameter(schema) else {
        return Err(format!(
            "Unexpected text {:?}: this command only takes --options.",
            free_text.join(" ")
        ));
    };
    if parameters.contains_key(&target) {
        return Err(format!(
            "{target} is given twice (as text and as --{}).",
            to_kebab(&target)
        ));
    }
    parameters.insert(target, Value::String(free_text.join(" ")));
    Ok(())
}

/// `--flag…` (or `—flag…`, as phones autocorrect it) without its dashes.
fn flag_name(token: &str) -> Option<&str> {
    token
        .strip_prefix("--")
        .or_else(|| token.strip_prefix('\u{2014}'))
        .filter(|rest| !rest.is_empty())
}

/// The schema property named by a kebab-case flag (or by its own spelling).
fn lookup(props: &Map<String, Value>, flag: &str) -> Option<String> {
    let camel = to_camel(flag);
    [camel.as_str(), flag]
        .into_iter()
        .find(|name| props.contains_key(*name))
        .map(str::to_owned)
}

fn typed_value(flag: &str, property: &Value, raw: &str) -> Result<Value, String> {
    let kind = match type_of(property) {
        "array" => property.get("items").map_or("string", type_of),
        other => other,
    };
    let item = if type_of(property) == "array" {
        property.get("items").unwrap_or(&Value::Null)
    } else {
        property
    };
    match kind {
        "integer" => {
            let n: i64 = raw
                .parse()
                .map_err(|_| format!("--{flag} must be a whole number (got {raw:?})."))?;
            let min = item.get("minimum").and_then(Value::as_i64);
            let max = item.get("maximum").and_then(Value::as_i64);
            if min.is_some_and(|min| n < min) || max.is_some_and(|max| n > max) {
                return Err(format!(
                    "--{flag} must be between {} and {} (got {n}).",
                    min.map_or("…".into(), |v| v.to_string()),
                    max.map_or("…".into(), |v| v.to_string())
                ));
            }
            Ok(Value::Number(n.into()))
        }
        "number" => raw
            .parse::<f64>()
            .ok()
            .and_then(Number::from_f64)
            .map(Value::Number)
            .ok_or_else(|| format!("--{flag} must be a number (got {raw:?}).")),
        _ => {
            if let Some(allowed) = item.get("enum").and_then(Value::as_array)
                && !allowed.iter().any(|v| v.as_str() == Some(raw))
            {
                let names: Vec<&str> = allowed.iter().filter_map(Value::as_str).collect();
                return Err(format!(
                    "--{flag} must be one of {} (got {raw:?}).",
                    names.join(", ")
                ));
            }
            Ok(Value::String(raw.to_owned()))
        }
    }
}

/// Splits on whitespace, keeping `"…"` and `'…'` together.
fn tokenize(text: &str) -> Result<Vec<String>, String> {
    let mut tokens = Vec::new();
    let mut current = String::new();
    let mut in_token = false;
    let mut quote: Option<char> = None;
    for c in text.chars() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => current.push(c),
            None if c == '"' || c == '\'' => {
                quote = Some(c);
                in_token = true;
            }
            None if c.is_whitespace() => {
                if in_token {
                    tokens.push(std::mem::take(&mut current));
                    in_token = false;
                }
            }
            None => {
                current.push(c);
                in_token = true;
            }
        }
    }
    if quote.is_some() {
        return Err("A quote is not closed.".into());
    }
    if in_token {
        tokens.push(current);
    }
    Ok(tokens)
}

fn properties(schema: &Value) -> Map<String, Value> {
    schema
        .get("properties")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default()
}

fn required(schema: &Value) -> Vec<String> {
    schema
        .get("required")
        .and_then(Value::as_array)
        .map(|names| {
            names
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

/// The single required, free-form string parameter, which takes the command's free text.
fn free_text_parameter(schema: &Value) -> Option<String> {
    let props = properties(schema);
    let mut candidates = required(schema).into_iter().filter(|name| {
        props
            .get(name)
            .is_some_and(|p| type_of(p) == "string" && p.get("enum").is_none())
    });
    let first = candidates.next()?;
    candidates.next().is_none().then_some(first)
}

fn type_of(schema: &Value) -> &str {
    schema
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("string")
}

fn value_hint(schema: &Value) -> String {
    if let Some(values) = schema.get("enum").and_then(Value::as_array) {
        let names: Vec<&str> = values.iter().filter_map(Value::as_str).collect();
        return names.join("|");
    }
    match (
        type_of(schema),
        schema.get("minimum").and_then(Value::as_i64),
        schema.get("maximum").and_then(Value::as_i64),
    ) {
        ("integer", Some(min), Some(max)) => format!("{min}-{max}"),
        (kind, _, _) => kind.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn specs() -> Vec<UserCommandSpec> {
        let spec = |name: &str, schema: Value| UserCommandSpec {
            name: name.into(),
            description: format!("The {name} command"),
            input_schema: schema,
            hidden_in_guilds: Default::default(),
        };
        vec![
            spec(
                "memory-stats",
                json!({"type": "object", "properties": {}, "additionalProperties": false}),
            ),
            spec(
                "memory-search",
                json!({"type": "object", "properties": {
                    "query": {"type": "string", "description": "Keywords"},
                    "limit": {"type": "integer", "minimum": 1, "maximum": 50, "default": 10,
                              "description": "How many"}
                }, "required": ["query"], "additionalProperties": false}),
            ),
            spec(
                "cancel-reminder",
                json!({"type": "object", "properties": {
                    "reminderId": {"type": "string", "description": "Reminder id"}
                }, "required": ["reminderId"]}),
            ),
            spec(
                "memory-export",
                json!({"type": "object", "properties": {
                    "format": {"type": "string", "enum": ["markdown", "json"],
                               "default": "markdown", "description": "Format"},
                    "enabledOnly": {"type": "boolean", "default": true, "description": "Only enabled"}
                }}),
            ),
        ]
    }

    fn command(text: &str) -> (String, Value) {
        match parse_command(text, &specs()) {
            ParsedCommand::Command { skill, parameters } => (skill, Value::Object(parameters)),
            other => panic!("{text:?} → {other:?}"),
        }
    }

    fn help(text: &str) -> String {
        match parse_command(text, &specs()) {
            ParsedCommand::Invalid { help, .. } => help,
            other => panic!("{text:?} → {other:?}"),
        }
    }

    #[test]
    fn commands_parse_into_typed_parameters() {
        assert_eq!(command("/memory-stats"), ("memory-stats".into(), json!({})));
        assert_eq!(
            command("/memory-search coffee beans"),
            (
                "memory-search".into(),
                json!({"query": "coffee beans", "limit": 10})
            )
        );
        assert_eq!(
            command("/memory-search --limit 5 \"green tea\""),
            (
                "memory-search".into(),
                json!({"query": "green tea", "limit": 5})
            )
        );
        assert_eq!(
            command("/cancel-reminder --reminder-id rem_1"),
            ("cancel-reminder".into(), json!({"reminderId": "rem_1"}))
        );
        assert_eq!(
            command("/memory-export --format=json --no-enabled-only"),
            (
                "memory-export".into(),
                json!({"format": "json", "enabledOnly": false})
            )
        );
        assert_eq!(
            command("  /memory-export \u{2014}enabled-only"),
            (
                "memory-export".into(),
                json!({"format": "markdown", "enabledOnly": true})
            )
        );
    }

    #[test]
    fn other_text_is_not_a_command() {
        for text in ["/foo bar", "hello /memory-stats", "memory-stats", "/", ""] {
            assert_eq!(
                parse_command(text, &specs()),
                ParsedCommand::NotCommand,
                "{text}"
            );
        }
    }

    #[test]
    fn bad_arguments_come_back_with_usage() {
        let text = help("/memory-search --limit 500 tea");
        assert!(text.contains("between 1 and 50"), "{text}");
        assert!(
            text.contains("Usage: /memory-search <query> [--limit <1-50>]"),
            "{text}"
        );
        assert!(help("/memory-search").contains("Missing --query"));
        assert!(help("/memory-stats please").contains("Unexpected text"));
        assert!(help("/memory-export --format pdf").contains("one of markdown, json"));
        assert!(help("/memory-search --bogus x").contains("Unknown option --bogus"));
        assert!(help("/cancel-reminder --reminder-id").contains("needs a value"));
        assert!(help("/memory-search \"open").contains("quote"));
        assert!(help("/memory-search --limit x tea").contains("whole number"));
        assert!(help("/cancel-reminder a --reminder-id b").contains("given twice"));
    }

    #[test]
    fn case_conversions() {
        assert_eq!(to_camel("reminder-id"), "reminderId");
        assert_eq!(to_camel("limit"), "limit");
        assert_eq!(to_kebab("enabledOnly"), "enabled-only");
    }
}
