//! Turning one command-line value into the JSON value its schema names: the type conversion,
//! then the `minimum`/`maximum`, `enum`, `maxLength` and `format: date-time` checks.

use serde_json::{Map, Number, Value};

use super::Ctx;
use crate::skills::client::ClientError;
use crate::skills::manifest::ParamType;

/// Stores `raw` as `param`: arrays split on `separator` and appended to, other types once only.
pub(super) fn set_value(
    ctx: &Ctx<'_>,
    params: &mut Map<String, Value>,
    flag: &str,
    param: &str,
    separator: Option<&str>,
    prop: &Value,
    raw: &str,
) -> Result<(), ClientError> {
    if ParamType::of(prop) == ParamType::Array {
        let item_schema = prop.get("items").cloned().unwrap_or(Value::Null);
        let pieces: Vec<&str> = match separator {
            Some(sep) if !sep.is_empty() => raw
                .split(sep)
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .collect(),
            _ => vec![raw],
        };
        let mut converted = Vec::new();
        for piece in pieces {
            converted.push(convert(ctx, flag, &item_schema, piece)?);
        }
        let entry = params
            .entry(param.to_owned())
            .or_insert_with(|| Value::Array(Vec::new()));
        if let Value::Array(items) = entry {
            items.extend(converted);
        }
        return Ok(());
    }
    if params.contains_key(param) {
        return Err(ctx.usage(format!("--{flag} is given twice; it takes one value."), &[]));
    }
    let v = convert(ctx, flag, prop, raw)?;
    params.insert(param.to_owned(), v);
    Ok(())
}

/// Converts one command-line value to the type `schema` names and checks its constraints.
fn convert(ctx: &Ctx<'_>, flag: &str, schema: &Value, raw: &str) -> Result<Value, ClientError> {
    let value = to_type(ctx, flag, schema, raw)?;
    check_range(ctx, flag, schema, raw, &value)?;
    check_enum(ctx, flag, schema, raw, &value)?;
    if let Value::String(s) = &value {
        check_string(ctx, flag, schema, raw, s)?;
    }
    Ok(value)
}

/// The schema's bounds as a phrase (" between 1 and 50"), empty without bounds.
fn bounds(schema: &Value) -> String {
    match (schema.get("minimum"), schema.get("maximum")) {
        (Some(lo), Some(hi)) => format!(" between {lo} and {hi}"),
        (Some(lo), None) => format!(" of at least {lo}"),
        (None, Some(hi)) => format!(" of at most {hi}"),
        (None, None) => String::new(),
    }
}

/// `raw` as an integer, number, boolean or (any other type) string.
fn to_type(ctx: &Ctx<'_>, flag: &str, schema: &Value, raw: &str) -> Result<Value, ClientError> {
    Ok(match ParamType::of(schema) {
        ParamType::Integer => match raw.trim().parse::<i64>() {
            Ok(n) => Value::Number(n.into()),
            Err(_) => {
                return Err(ctx.usage(
                    format!(
                        "--{flag} expects a whole number{}, not \"{raw}\".",
                        bounds(schema)
                    ),
                    &[flag],
                ));
            }
        },
        ParamType::Number => match raw.trim().parse::<f64>().ok().and_then(Number::from_f64) {
            Some(n) => Value::Number(n),
            None => {
                return Err(ctx.usage(
                    format!(
                        "--{flag} expects a number{}, not \"{raw}\".",
                        bounds(schema)
                    ),
                    &[flag],
                ));
            }
        },
        ParamType::Boolean => match raw {
            "true" => Value::Bool(true),
            "false" => Value::Bool(false),
            _ => {
                return Err(ctx.usage(
                    format!("--{flag} expects true or false, not \"{raw}\"."),
                    &[flag],
                ));
            }
        },
        _ => Value::String(raw.to_owned()),
    })
}

/// A number within `minimum`/`maximum`.
fn check_range(
    ctx: &Ctx<'_>,
    flag: &str,
    schema: &Value,
    raw: &str,
    value: &Value,
) -> Result<(), ClientError> {
    let Some(n) = value.as_f64() else {
        return Ok(());
    };
    let lo = schema.get("minimum").and_then(Value::as_f64);
    let hi = schema.get("maximum").and_then(Value::as_f64);
    if lo.is_some_and(|lo| n < lo) || hi.is_some_and(|hi| n > hi) {
        return Err(ctx.usage(
            format!("--{flag} must be{}; {raw} is out of range.", bounds(schema)),
            &[flag],
        ));
    }
    Ok(())
}

/// A value among the schema's `enum`, if it has one.
fn check_enum(
    ctx: &Ctx<'_>,
    flag: &str,
    schema: &Value,
    raw: &str,
    value: &Value,
) -> Result<(), ClientError> {
    let Some(allowed) = schema.get("enum").and_then(Value::as_array) else {
        return Ok(());
    };
    if allowed.contains(value) {
        return Ok(());
    }
    let list: Vec<String> = allowed
        .iter()
        .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_owned))
        .collect();
    Err(ctx.usage(
        format!(
            "--{flag} must be one of: {}; \"{raw}\" is not allowed.",
            list.join(", ")
        ),
        &[flag],
    ))
}

/// A string within `maxLength` and, for `format: date-time`, an RFC 3339 date-time.
fn check_string(
    ctx: &Ctx<'_>,
    flag: &str,
    schema: &Value,
    raw: &str,
    s: &str,
) -> Result<(), ClientError> {
    if let Some(max) = schema.get("maxLength").and_then(Value::as_u64)
        && s.chars().count() as u64 > max
    {
        return Err(ctx.usage(
            format!("--{flag} is longer than {max} characters."),
            &[flag],
        ));
    }
    if schema.get("format").and_then(Value::as_str) == Some("date-time")
        && chrono::DateTime::parse_from_rfc3339(s).is_err()
    {
        return Err(ctx.usage(
            format!(
                "--{flag} expects an ISO 8601 / RFC 3339 date-time in UTC such as 2030-01-31T09:00:00Z, not \"{raw}\"."
            ),
            &[flag],
        ));
    }
    Ok(())
}
