//! The client's flag grammar (`docs/SKILLS.md`, "Flag grammar"), derived from a manifest's
//! `flags`, `order` and `input_schema`:
//!
//! * `--flag value` and `--flag=value`; booleans are bare (`--enabled-only`) with `--no-flag`
//!   for false (`--flag=true|false` also works);
//! * arrays by repetition (`--file-paths a --file-paths b`), or split on the flag's declared
//!   `separator` (`--related-to mem_a,mem_b`);
//! * values converted to the schema type and checked against `enum`, `minimum`/`maximum`,
//!   `maxLength`, `minItems`/`maxItems` and `format: date-time`; schema defaults filled in;
//! * payload flags (`"payload": true`) collect a file path, read later by [`super::payload`];
//! * errors: unknown flags (with a suggestion), legacy free-text flags, `--file-path`, missing
//!   required flags, positional arguments unless `order` is declared, `key=value` without dashes.
//!
//! Every error message ends with a copy-pasteable corrected invocation.

mod convert;
mod parse;

use serde_json::{Map, Value};

use super::client::{ClientError, ErrorCode};
use super::manifest::{Manifest, ParamType};

pub use parse::parse_args;

/// A payload flag given on the command line: its file path is read later.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PayloadArg {
    /// The flag (`message-file`).
    pub flag: String,
    /// The parameter its text becomes (`message`).
    pub param: String,
    /// The path exactly as given.
    pub path: String,
}

/// The result of parsing a command line.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ParsedArgs {
    /// Parameters converted to their schema types, defaults filled in (payload texts not yet).
    pub params: Map<String, Value>,
    /// Payload files to read.
    pub payloads: Vec<PayloadArg>,
    /// `--help` was given: print [`usage`] instead of calling the API.
    pub help: bool,
}

/// The path the agent runs the skill by (`skills/<name>/scripts/<name>`).
pub fn script_path(name: &str, m: &Manifest) -> String {
    match (&m.entrypoint, &m.command) {
        (_, Some(cmd)) => cmd.clone(),
        (Some(ep), None) => format!("skills/{name}/{ep}"),
        (None, None) => format!("skills/{name}/scripts/{name}"),
    }
}

/// A copy-pasteable invocation: the required flags plus `extra` flags, with example values
/// (the property's `examples[0]`, else its default, first enum value or minimum).
pub fn example(name: &str, m: &Manifest, extra: &[&str]) -> String {
    let mut flags: Vec<String> = Vec::new();
    for param in m.required() {
        if let Some((flag, _)) = m.flag_for_param(param) {
            flags.push(flag.to_owned());
        }
    }
    for f in extra {
        if m.flags.contains_key(*f) && !flags.iter().any(|x| x == f) {
            flags.push((*f).to_owned());
        }
    }
    let mut out = script_path(name, m);
    for flag in flags {
        out.push_str(&format!(" --{flag}"));
        let Some(spec) = m.flags.get(&flag) else {
            continue;
        };
        if spec.payload {
            let stem = flag.trim_end_matches("-file");
            out.push_str(&format!(" \"$TMPDIR/$SESSION_ID/{stem}.md\""));
            continue;
        }
        let prop = m.property(&spec.param).cloned().unwrap_or(Value::Null);
        match ParamType::of(&prop) {
            ParamType::Boolean => {}
            ParamType::Array => {
                let item = prop.get("items").cloned().unwrap_or(Value::Null);
                out.push(' ');
                out.push_str(&example_value(&item, &prop));
            }
            _ => {
                out.push(' ');
                out.push_str(&example_value(&prop, &prop));
            }
        }
    }
    out
}

fn example_value(prop: &Value, outer: &Value) -> String {
    let pick = outer
        .get("examples")
        .and_then(|e| e.get(0))
        .and_then(|v| v.as_array().and_then(|a| a.first()).or(Some(v)))
        .or_else(|| prop.get("examples").and_then(|e| e.get(0)))
        .or_else(|| prop.get("default"))
        .or_else(|| prop.get("enum").and_then(|e| e.get(0)))
        .or_else(|| prop.get("minimum"));
    match pick {
        Some(Value::String(s)) => s.clone(),
        Some(v) => v.to_string(),
        None => "VALUE".to_owned(),
    }
}

/// Human/agent-readable usage of a skill: every flag with its type, values, default.
pub fn usage(name: &str, m: &Manifest) -> String {
    let mut out = format!("Usage: {} [flags]\n\nFlags:\n", script_path(name, m));
    let required = m.required();
    for (flag, spec) in &m.flags {
        let prop = m.property(&spec.param).cloned().unwrap_or(Value::Null);
        let mut line = format!("  --{flag}");
        if spec.payload {
            line.push_str(" PATH   file in $TMPDIR/$SESSION_ID/ whose text becomes ");
            line.push_str(&spec.param);
        } else {
            match ParamType::of(&prop) {
                ParamType::Boolean => line.push_str(&format!(" | --no-{flag}")),
                ParamType::Array => line.push_str(" VALUE (repeatable)"),
                _ => line.push_str(" VALUE"),
            }
            if let Some(e) = prop.get("enum") {
                line.push_str(&format!("   one of {e}"));
            }
            if let (Some(lo), Some(hi)) = (prop.get("minimum"), prop.get("maximum")) {
                line.push_str(&format!("   {lo}..{hi}"));
            }
        }
        if let Some(d) = prop.get("default") {
            line.push_str(&format!("   (default {d})"));
        }
        if required.contains(&spec.param.as_str()) {
            line.push_str("   (required)");
        }
        if let Some(desc) = prop.get("description").and_then(Value::as_str) {
            line.push_str(&format!("\n      {desc}"));
        }
        out.push_str(&line);
        out.push('\n');
    }
    out.push_str(&format!("\nExample:\n  {}\n", example(name, m, &[])));
    out
}

/// The skill being parsed for: what every error message needs for its corrected example.
#[derive(Clone, Copy)]
struct Ctx<'a> {
    name: &'a str,
    m: &'a Manifest,
}

impl Ctx<'_> {
    fn err(&self, code: ErrorCode, msg: String, extra: &[&str]) -> ClientError {
        ClientError::new(
            code,
            format!(
                "{msg} Corrected example: {}",
                example(self.name, self.m, extra)
            ),
        )
    }

    fn usage(&self, msg: String, extra: &[&str]) -> ClientError {
        self.err(ErrorCode::Usage, msg, extra)
    }

    fn flag_list(&self) -> String {
        if self.m.flags.is_empty() {
            return format!("none ({} takes no flags)", self.name);
        }
        self.m
            .flags
            .keys()
            .map(|f| format!("--{f}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn manifest() -> Manifest {
        Manifest::parse(
            &json!({
                "version": "1.0.0",
                "entrypoint": "scripts/demo",
                "input_schema": {
                    "type": "object",
                    "additionalProperties": false,
                    "required": ["message"],
                    "properties": {
                        "message": {"type": "string", "description": "text"},
                        "limit": {"type": "integer", "minimum": 1, "maximum": 50, "default": 10, "description": "n"},
                        "kind": {"type": "string", "enum": ["a", "b"], "default": "a", "description": "k"},
                        "enabledOnly": {"type": "boolean", "default": true, "description": "e"},
                        "enabled": {"type": "boolean", "description": "e"},
                        "filePaths": {"type": "array", "items": {"type": "string"}, "maxItems": 3, "description": "f"},
                        "relatedTo": {"type": "array", "items": {"type": "string"}, "description": "r"},
                        "at": {"type": "string", "format": "date-time", "description": "t"},
                        "id": {"type": "string", "description": "id", "examples": ["mem_1"]}
                    }
                },
                "flags": {
                    "message-file": {"param": "message", "payload": true},
                    "limit": {"param": "limit"},
                    "kind": {"param": "kind"},
                    "enabled-only": {"param": "enabledOnly"},
                    "enabled": {"param": "enabled"},
                    "file-paths": {"param": "filePaths"},
                    "related-to": {"param": "relatedTo", "separator": ","},
                    "at": {"param": "at"},
                    "id": {"param": "id"}
                }
            })
            .to_string(),
        )
        .unwrap()
    }

    fn parse(args: &[&str]) -> Result<ParsedArgs, ClientError> {
        let m = manifest();
        let args: Vec<String> = args.iter().map(|s| (*s).to_owned()).collect();
        parse_args("demo", &m, &args)
    }

    fn code(args: &[&str]) -> ErrorCode {
        parse(args).unwrap_err().code
    }

    const MSG: [&str; 2] = ["--message-file", "/tmp/x"];

    fn with_msg(extra: &[&'static str]) -> Vec<&'static str> {
        let mut v = MSG.to_vec();
        v.extend_from_slice(extra);
        v
    }

    #[test]
    fn space_and_equals_forms_and_defaults() {
        let p = parse(&with_msg(&["--limit", "5", "--kind=b"])).unwrap();
        assert_eq!(p.params["limit"], json!(5));
        assert_eq!(p.params["kind"], json!("b"));
        assert_eq!(p.params["enabledOnly"], json!(true), "default filled");
        assert!(!p.params.contains_key("enabled"), "no default, not set");
        assert_eq!(p.payloads[0].path, "/tmp/x");
        assert_eq!(p.payloads[0].param, "message");
        let p = parse(&["--message-file=/tmp/y"]).unwrap();
        assert_eq!(p.payloads[0].path, "/tmp/y");
        assert_eq!(p.params["limit"], json!(10));
    }

    #[test]
    fn booleans_bare_negated_and_explicit() {
        let p = parse(&with_msg(&["--no-enabled-only", "--enabled"])).unwrap();
        assert_eq!(p.params["enabledOnly"], json!(false));
        assert_eq!(p.params["enabled"], json!(true));
        let p = parse(&with_msg(&["--enabled=false"])).unwrap();
        assert_eq!(p.params["enabled"], json!(false));
        assert_eq!(code(&with_msg(&["--enabled=maybe"])), ErrorCode::Usage);
        assert_eq!(code(&with_msg(&["--no-enabled=true"])), ErrorCode::Usage);
        assert_eq!(code(&with_msg(&["--no-limit"])), ErrorCode::UnknownFlag);
        // A bare boolean followed by a word: the word is a positional argument.
        assert_eq!(code(&with_msg(&["--enabled", "false"])), ErrorCode::Usage);
    }

    #[test]
    fn arrays_by_repetition_and_separator() {
        let p = parse(&with_msg(&["--file-paths", "a", "--file-paths=b"])).unwrap();
        assert_eq!(p.params["filePaths"], json!(["a", "b"]));
        let p = parse(&with_msg(&["--related-to", "m1, m2", "--related-to", "m3"])).unwrap();
        assert_eq!(p.params["relatedTo"], json!(["m1", "m2", "m3"]));
        let e = parse(&with_msg(&[
            "--file-paths",
            "a",
            "--file-paths",
            "b",
            "--file-paths",
            "c",
            "--file-paths",
            "d",
        ]))
        .unwrap_err();
        assert_eq!(e.code, ErrorCode::Usage);
        assert!(e.message.contains("at most 3"), "{}", e.message);
    }

    #[test]
    fn type_enum_bounds_and_format_errors() {
        let e = parse(&with_msg(&["--limit", "many"])).unwrap_err();
        assert_eq!(e.code, ErrorCode::Usage);
        assert!(
            e.message.contains("whole number between 1 and 50"),
            "{}",
            e.message
        );
        let e = parse(&with_msg(&["--limit", "51"])).unwrap_err();
        assert!(e.message.contains("out of range"), "{}", e.message);
        assert_eq!(code(&with_msg(&["--limit", "0"])), ErrorCode::Usage);
        let e = parse(&with_msg(&["--kind", "c"])).unwrap_err();
        assert!(e.message.contains("one of: a, b"), "{}", e.message);
        assert!(e.message.contains("Corrected example: skills/demo/scripts/demo --message-file \"$TMPDIR/$SESSION_ID/message.md\" --kind a"), "{}", e.message);
        assert_eq!(code(&with_msg(&["--at", "tomorrow"])), ErrorCode::Usage);
        let p = parse(&with_msg(&["--at", "2030-01-31T09:00:00Z"])).unwrap();
        assert_eq!(p.params["at"], json!("2030-01-31T09:00:00Z"));
        assert_eq!(
            code(&with_msg(&["--limit", "1", "--limit", "2"])),
            ErrorCode::Usage
        );
        assert_eq!(code(&with_msg(&["--limit"])), ErrorCode::Usage);
        assert_eq!(
            code(&with_msg(&["--limit", "--kind", "a"])),
            ErrorCode::Usage
        );
    }

    #[test]
    fn unknown_legacy_and_single_file_flags() {
        let e = parse(&with_msg(&["--limt", "3"])).unwrap_err();
        assert_eq!(e.code, ErrorCode::UnknownFlag);
        assert!(e.message.contains("Did you mean --limit?"), "{}", e.message);
        assert_eq!(code(&with_msg(&["-l", "3"])), ErrorCode::UnknownFlag);
        for form in [&["--message", "hi $HOME"][..], &["--message=hi"][..]] {
            let e = parse(form).unwrap_err();
            assert_eq!(e.code, ErrorCode::LegacyFlag, "{form:?}");
            assert!(
                e.message
                    .contains("--message-file \"$TMPDIR/$SESSION_ID/message.md\""),
                "{}",
                e.message
            );
            assert!(!e.message.contains("$HOME"), "free text is not echoed");
        }
        for legacy in ["--content=x", "--query", "--caption"] {
            assert_eq!(
                code(&with_msg(&[legacy])),
                ErrorCode::LegacyFlag,
                "{legacy}"
            );
        }
        for form in [&["--file-path", "a.png"][..], &["--file-path=a.png"][..]] {
            let e = parse(&with_msg(form)).unwrap_err();
            assert_eq!(e.code, ErrorCode::SingleFileFlag);
            assert!(e.message.contains("--file-paths"), "{}", e.message);
        }
    }

    #[test]
    fn positional_and_key_value_rejected_without_order() {
        let e = parse(&with_msg(&["hello"])).unwrap_err();
        assert_eq!(e.code, ErrorCode::Usage);
        assert!(
            e.message.contains("no positional arguments"),
            "{}",
            e.message
        );
        let e = parse(&with_msg(&["limit=5"])).unwrap_err();
        assert_eq!(e.code, ErrorCode::Usage);
        assert!(e.message.contains("--limit VALUE"), "{}", e.message);
        let e = parse(&with_msg(&["messageId=5"])).unwrap_err();
        assert!(e.message.contains("--message-id"), "{}", e.message);
        assert_eq!(code(&with_msg(&["--", "x"])), ErrorCode::Usage);
    }

    #[test]
    fn a_skill_without_flags_says_so() {
        let m = Manifest::parse(
            &json!({
                "version": "1.0.0",
                "entrypoint": "scripts/stats",
                "input_schema": {"type": "object", "additionalProperties": false, "properties": {}},
                "flags": {}
            })
            .to_string(),
        )
        .unwrap();
        for args in [&["--verbose"][..], &["x"][..]] {
            let args: Vec<String> = args.iter().map(|s| (*s).to_owned()).collect();
            let e = parse_args("stats", &m, &args).unwrap_err();
            assert!(
                e.message
                    .contains("Valid flags: none (stats takes no flags)."),
                "{}",
                e.message
            );
        }
    }

    #[test]
    fn positional_with_order() {
        let mut m = manifest();
        m.order = vec!["id".into(), "limit".into(), "file-paths".into()];
        let args: Vec<String> = ["--message-file", "/x", "mem_9", "7", "a", "b"]
            .iter()
            .map(|s| (*s).to_owned())
            .collect();
        let p = parse_args("demo", &m, &args).unwrap();
        assert_eq!(p.params["id"], json!("mem_9"));
        assert_eq!(p.params["limit"], json!(7));
        assert_eq!(p.params["filePaths"], json!(["a", "b"]));
        // A flag given by name takes its slot out of the positional order.
        let args: Vec<String> = ["--message-file", "/x", "--id", "mem_1", "3"]
            .iter()
            .map(|s| (*s).to_owned())
            .collect();
        let p = parse_args("demo", &m, &args).unwrap();
        assert_eq!(p.params["limit"], json!(3));
        let args: Vec<String> = [
            "--message-file",
            "/x",
            "--limit",
            "2",
            "--id",
            "i",
            "x",
            "y",
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
        assert_eq!(
            parse_args("demo", &m, &args).unwrap().params["filePaths"],
            json!(["x", "y"])
        );
    }

    #[test]
    fn missing_required_and_payload() {
        let e = parse(&["--limit", "3"]).unwrap_err();
        assert_eq!(e.code, ErrorCode::MissingPayload);
        assert!(
            e.message.contains("$TMPDIR/$SESSION_ID/message.md"),
            "{}",
            e.message
        );
        assert_eq!(code(&["--message-file="]), ErrorCode::MissingPayload);
        assert_eq!(
            code(&["--message-file", "/a", "--message-file", "/b"]),
            ErrorCode::Usage
        );
    }

    #[test]
    fn help_and_usage_text() {
        let p = parse(&["--help"]).unwrap();
        assert!(p.help);
        let u = usage("demo", &manifest());
        assert!(u.contains("--limit VALUE   1..50   (default 10)"), "{u}");
        assert!(u.contains("--enabled-only | --no-enabled-only"), "{u}");
        assert!(u.contains("--message-file PATH"), "{u}");
    }

    #[test]
    fn example_uses_examples_and_script_path() {
        let m = manifest();
        assert_eq!(
            example("demo", &m, &["id", "enabled", "file-paths"]),
            "skills/demo/scripts/demo --message-file \"$TMPDIR/$SESSION_ID/message.md\" --id mem_1 --enabled --file-paths VALUE"
        );
    }
}
