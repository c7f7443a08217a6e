//! The rules on a manifest's `flags` and `order`: flag names, the parameter each flag sets
//! and its type, parameters no flag reaches, and which flags may be positional.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::{FlagSpec, LEGACY_FREE_TEXT_FLAGS, Manifest, ParamType, SINGLE_FILE_FLAG, is_kebab};
use crate::skills::report::Finding;

/// Rules on `flags` and `order`: kebab-case names, no reserved names, every flag maps to a
/// declared property of a compatible type, payload flags end in `-file` and set strings.
pub fn check_flags(m: &Manifest) -> Vec<Finding> {
    let mut out = Vec::new();
    let mut seen_params: BTreeMap<&str, &str> = BTreeMap::new();
    for (flag, spec) in &m.flags {
        check_flag_name(flag, &mut out);
        let Some(prop) = m.property(&spec.param) else {
            out.push(Finding::error(
                format!(
                    "flag \"{flag}\" sets parameter \"{}\", which input_schema does not declare",
                    spec.param
                ),
                format!(
                    "declare \"{}\" under input_schema.properties or correct the flag's \"param\"",
                    spec.param
                ),
            ));
            continue;
        };
        if let Some(other) = seen_params.insert(&spec.param, flag) {
            out.push(Finding::error(
                format!(
                    "flags \"{other}\" and \"{flag}\" both set parameter \"{}\"",
                    spec.param
                ),
                "keep one flag per parameter",
            ));
        }
        check_flag_type(flag, spec, ParamType::of(prop), &mut out);
    }
    check_unflagged_params(m, &seen_params, &mut out);
    check_order(m, &mut out);
    out
}

/// A flag's name: kebab-case, not a legacy free-text flag, not reserved.
fn check_flag_name(flag: &str, out: &mut Vec<Finding>) {
    if !is_kebab(flag) {
        out.push(Finding::error(
            format!("flag \"{flag}\" is not kebab-case"),
            "name flags with lowercase letters, digits and single hyphens (e.g. \"memory-id\")",
        ));
    }
    if LEGACY_FREE_TEXT_FLAGS.contains(&flag) {
        out.push(Finding::error(
            format!("flag \"{flag}\" is a reserved legacy free-text flag"),
            format!("rename it to \"{flag}-file\" with \"payload\": true: free text travels in payload files"),
        ));
    }
    if flag == SINGLE_FILE_FLAG || flag == "help" || flag.starts_with("no-") {
        out.push(Finding::error(
            format!("flag \"{flag}\" uses a reserved name"),
            "choose another name (\"help\", \"file-path\" and \"no-…\" are reserved)",
        ));
    }
}

/// A flag against the type of the parameter it sets: payload flags end in `-file` and set
/// strings, separators only on arrays.
fn check_flag_type(flag: &str, spec: &FlagSpec, ty: ParamType, out: &mut Vec<Finding>) {
    if spec.payload {
        if !flag.ends_with("-file") {
            out.push(Finding::error(
                format!("payload flag \"{flag}\" does not end in \"-file\""),
                format!("rename it to \"{flag}-file\" so the agent sees it takes a file path"),
            ));
        }
        if ty != ParamType::String {
            out.push(Finding::error(
                format!(
                    "payload flag \"{flag}\" sets \"{}\", which is not a string",
                    spec.param
                ),
                "payload files carry text: map them to string parameters",
            ));
        }
    }
    if spec.separator.is_some() && ty != ParamType::Array {
        out.push(Finding::error(
            format!(
                "flag \"{flag}\" has a separator but \"{}\" is not an array",
                spec.param
            ),
            "remove \"separator\" or make the parameter an array",
        ));
    }
}

/// A warning for every declared parameter that no flag sets.
fn check_unflagged_params(
    m: &Manifest,
    seen_params: &BTreeMap<&str, &str>,
    out: &mut Vec<Finding>,
) {
    let Some(Value::Object(props)) = m.input_schema.get("properties") else {
        return;
    };
    for name in props.keys() {
        if !seen_params.contains_key(name.as_str()) && m.flag_for_param(name).is_none() {
            out.push(Finding::warning(
                format!("parameter \"{name}\" has no flag; the client can never send it"),
                format!("add a flag for \"{name}\" to \"flags\""),
            ));
        }
    }
}

/// `order`: declared flags, each once, no payloads or booleans, an array only last.
fn check_order(m: &Manifest, out: &mut Vec<Finding>) {
    let mut in_order = BTreeSet::new();
    for (i, flag) in m.order.iter().enumerate() {
        if !in_order.insert(flag) {
            out.push(Finding::error(
                format!("order lists \"{flag}\" twice"),
                "list each flag once",
            ));
        }
        match m.flags.get(flag) {
            None => out.push(Finding::error(
                format!("order lists \"{flag}\", which is not in \"flags\""),
                "list only declared flags in \"order\"",
            )),
            Some(spec) if spec.payload => out.push(Finding::error(
                format!("order lists payload flag \"{flag}\""),
                "payload flags must be named explicitly; remove it from \"order\"",
            )),
            Some(_) => {
                let ty = m.flag_type(flag);
                if ty == ParamType::Boolean {
                    out.push(Finding::error(
                        format!("order lists boolean flag \"{flag}\""),
                        "booleans are bare flags; remove it from \"order\"",
                    ));
                }
                if ty == ParamType::Array && i + 1 != m.order.len() {
                    out.push(Finding::error(
                        format!("order lists array flag \"{flag}\" before the end"),
                        "an array can only be the last positional argument",
                    ));
                }
            }
        }
    }
}
