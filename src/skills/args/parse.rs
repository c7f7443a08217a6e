//! Walking a command line against a manifest: one method per grammar element (a flag, a
//! switch, a payload path, positional slots), then the whole-line checks (array sizes,
//! defaults, required parameters).

use serde_json::Value;

use super::convert::set_value;
use super::{Ctx, ParsedArgs, PayloadArg};
use crate::skills::client::{ClientError, ErrorCode};
use crate::skills::manifest::{LEGACY_FREE_TEXT_FLAGS, Manifest, ParamType, SINGLE_FILE_FLAG};

/// Parses `args` (everything after `air-friends skill <name>`) against the manifest.
pub fn parse_args(name: &str, m: &Manifest, args: &[String]) -> Result<ParsedArgs, ClientError> {
    let mut p = Parser {
        ctx: Ctx { name, m },
        args,
        i: 0,
        out: ParsedArgs::default(),
        positional: Vec::new(),
        only_positional: false,
    };
    while p.i < args.len() {
        let arg = &args[p.i];
        p.i += 1;
        p.take(arg)?;
    }
    p.place_positional()?;
    if p.out.help {
        return Ok(p.out);
    }
    p.check_array_sizes()?;
    p.fill_defaults();
    p.check_required()?;
    Ok(p.out)
}

/// The state of one walk over a command line.
struct Parser<'a> {
    ctx: Ctx<'a>,
    args: &'a [String],
    /// The next argument to read.
    i: usize,
    out: ParsedArgs,
    positional: Vec<&'a str>,
    /// A bare `--` was seen: everything after it is positional.
    only_positional: bool,
}

impl<'a> Parser<'a> {
    /// One argument: a positional value, `--`, or a flag (with its value, if it takes one).
    fn take(&mut self, arg: &'a str) -> Result<(), ClientError> {
        let m = self.ctx.m;
        if self.only_positional || !arg.starts_with('-') || arg == "-" || is_negative_number(arg) {
            return self.take_positional(arg);
        }
        if arg == "--" {
            self.only_positional = true;
            return Ok(());
        }
        let Some(body) = arg.strip_prefix("--") else {
            return Err(self.ctx.err(
                ErrorCode::UnknownFlag,
                format!(
                    "Unknown option {arg}: single-dash options do not exist; flags are --name. Valid flags: {}.",
                    self.ctx.flag_list()
                ),
                &[],
            ));
        };
        let (flag, inline) = match body.split_once('=') {
            Some((f, v)) => (f, Some(v)),
            None => (body, None),
        };
        if flag == "help" && !m.flags.contains_key("help") {
            self.out.help = true;
            return Ok(());
        }
        self.reject_removed(flag)?;
        let (flag, negated) = self.resolve(flag)?;
        let Some(spec) = m.flags.get(flag) else {
            return Ok(());
        };
        let prop = m.property(&spec.param).cloned().unwrap_or(Value::Null);
        if ParamType::of(&prop) == ParamType::Boolean {
            return self.take_switch(flag, &spec.param, negated, inline);
        }
        let value = self.value_for(flag, inline)?;
        if spec.payload {
            return self.take_payload(flag, &spec.param, value);
        }
        set_value(
            &self.ctx,
            &mut self.out.params,
            flag,
            &spec.param,
            spec.separator.as_deref(),
            &prop,
            &value,
        )
    }

    /// A word that is not a flag: kept for [`Self::place_positional`], unless it looks like a
    /// `key=value` meant as a flag.
    fn take_positional(&mut self, arg: &'a str) -> Result<(), ClientError> {
        if !self.only_positional
            && self.ctx.m.order.is_empty()
            && let Some((key, _)) = arg.split_once('=')
            && !key.is_empty()
            && key
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            let flag = crate::names::to_kebab(key);
            return Err(self.ctx.usage(
                format!(
                    "\"{key}=…\" is not a flag: flags start with two dashes, e.g. --{flag} VALUE."
                ),
                &[flag.as_str()],
            ));
        }
        self.positional.push(arg);
        Ok(())
    }

    /// Legacy free-text flags and `--file-path`, each with its own explanation.
    fn reject_removed(&self, flag: &str) -> Result<(), ClientError> {
        let (name, m) = (self.ctx.name, self.ctx.m);
        if LEGACY_FREE_TEXT_FLAGS.contains(&flag) {
            let file_flag = format!("{flag}-file");
            let msg = if m.flags.contains_key(&file_flag) {
                format!(
                    "--{flag} no longer takes text: free text is never accepted on the command line, because the shell expands $VARIABLES inside it. Write the text with your file tool to $TMPDIR/$SESSION_ID/{flag}.md, then pass that path with --{file_flag}."
                )
            } else {
                format!(
                    "--{flag} is a removed free-text flag and {name} does not take it. Valid flags: {}.",
                    self.ctx.flag_list()
                )
            };
            return Err(self
                .ctx
                .err(ErrorCode::LegacyFlag, msg, &[file_flag.as_str()]));
        }
        if flag == SINGLE_FILE_FLAG {
            return Err(self.ctx.err(
                ErrorCode::SingleFileFlag,
                "--file-path was removed: pass every file with --file-paths, repeating the flag for several files (--file-paths a.png --file-paths b.png).".to_owned(),
                &["file-paths"],
            ));
        }
        Ok(())
    }

    /// The declared flag `flag` names, and whether it came as `--no-<switch>`.
    fn resolve<'f>(&self, flag: &'f str) -> Result<(&'f str, bool), ClientError> {
        let m = self.ctx.m;
        if m.flags.contains_key(flag) {
            return Ok((flag, false));
        }
        match flag.strip_prefix("no-") {
            Some(base) if m.flag_type(base) == ParamType::Boolean => Ok((base, true)),
            _ => {
                let hint = suggest(flag, m)
                    .map(|s| format!(" Did you mean --{s}?"))
                    .unwrap_or_default();
                let extra = suggest(flag, m);
                let extra: Vec<&str> = extra.as_deref().into_iter().collect();
                Err(self.ctx.err(
                    ErrorCode::UnknownFlag,
                    format!(
                        "Unknown flag --{flag} for {}.{hint} Valid flags: {}.",
                        self.ctx.name,
                        self.ctx.flag_list()
                    ),
                    &extra,
                ))
            }
        }
    }

    /// A boolean flag: bare, `--no-…`, or `=true|false`; once only.
    fn take_switch(
        &mut self,
        flag: &str,
        param: &str,
        negated: bool,
        inline: Option<&str>,
    ) -> Result<(), ClientError> {
        let value = match (negated, inline) {
            (true, None) => false,
            (false, None) => true,
            (false, Some("true")) => true,
            (false, Some("false")) => false,
            _ => {
                return Err(self.ctx.usage(
                    format!(
                        "--{flag} is a switch: write --{flag} for true or --no-{flag} for false, without a value."
                    ),
                    &[],
                ));
            }
        };
        if self.out.params.contains_key(param) {
            return Err(self.ctx.usage(format!("--{flag} is given twice."), &[]));
        }
        self.out.params.insert(param.to_owned(), Value::Bool(value));
        Ok(())
    }

    /// The value of a flag that takes one: after `=`, else the next argument unless that is a
    /// flag.
    fn value_for(&mut self, flag: &str, inline: Option<&str>) -> Result<String, ClientError> {
        if let Some(v) = inline {
            return Ok(v.to_owned());
        }
        match self.args.get(self.i) {
            Some(next) if !(next.starts_with("--") && next.len() > 2) => {
                self.i += 1;
                Ok(next.clone())
            }
            _ => Err(self.ctx.usage(format!("--{flag} needs a value."), &[flag])),
        }
    }

    /// A payload flag's file path: non-empty, once only.
    fn take_payload(&mut self, flag: &str, param: &str, path: String) -> Result<(), ClientError> {
        if path.trim().is_empty() {
            return Err(missing_payload(&self.ctx, flag));
        }
        if self.out.payloads.iter().any(|p| p.flag == flag) {
            return Err(self.ctx.usage(format!("--{flag} is given twice."), &[]));
        }
        self.out.payloads.push(PayloadArg {
            flag: flag.to_owned(),
            param: param.to_owned(),
            path,
        });
        Ok(())
    }

    /// Positional arguments, only where `order` allows them: each fills the next `order` flag
    /// not given by name; an array slot takes every value after it.
    fn place_positional(&mut self) -> Result<(), ClientError> {
        let m = self.ctx.m;
        let Some(first) = self.positional.first() else {
            return Ok(());
        };
        if m.order.is_empty() {
            return Err(self.ctx.usage(
                format!(
                    "Unexpected argument \"{first}\": {} takes no positional arguments; name every value with its flag. Valid flags: {}.",
                    self.ctx.name,
                    self.ctx.flag_list()
                ),
                &[],
            ));
        }
        let free: Vec<&String> = m
            .order
            .iter()
            .filter(|f| {
                m.flags
                    .get(f.as_str())
                    .is_none_or(|s| !self.out.params.contains_key(&s.param))
            })
            .collect();
        let mut slots = free.into_iter();
        let mut current: Option<&String> = None;
        for value in std::mem::take(&mut self.positional) {
            let slot = match current {
                Some(f) if m.flag_type(f) == ParamType::Array => Some(f),
                _ => slots.next(),
            };
            let Some(flag) = slot else {
                return Err(self.ctx.usage(
                    format!("Too many positional arguments: \"{value}\" has no place."),
                    &[],
                ));
            };
            current = Some(flag);
            let Some(spec) = m.flags.get(flag.as_str()) else {
                continue;
            };
            let prop = m.property(&spec.param).cloned().unwrap_or(Value::Null);
            set_value(
                &self.ctx,
                &mut self.out.params,
                flag,
                &spec.param,
                spec.separator.as_deref(),
                &prop,
                value,
            )?;
        }
        Ok(())
    }

    /// Every array within its `minItems`/`maxItems`.
    fn check_array_sizes(&self) -> Result<(), ClientError> {
        for (flag, spec) in &self.ctx.m.flags {
            let prop = self
                .ctx
                .m
                .property(&spec.param)
                .cloned()
                .unwrap_or(Value::Null);
            let Some(Value::Array(items)) = self.out.params.get(&spec.param) else {
                continue;
            };
            let n = items.len() as u64;
            if let Some(max) = prop.get("maxItems").and_then(Value::as_u64)
                && n > max
            {
                return Err(self.ctx.usage(
                    format!("--{flag} is given {n} times; at most {max} values are allowed."),
                    &[],
                ));
            }
            if let Some(min) = prop.get("minItems").and_then(Value::as_u64)
                && n < min
            {
                return Err(self.ctx.usage(
                    format!("--{flag} needs at least {min} value(s)."),
                    &[flag.as_str()],
                ));
            }
        }
        Ok(())
    }

    /// Schema defaults for every parameter neither a flag nor a payload set.
    fn fill_defaults(&mut self) {
        let Some(Value::Object(props)) = self.ctx.m.input_schema.get("properties") else {
            return;
        };
        for (param, prop) in props {
            if !self.out.params.contains_key(param)
                && !self.out.payloads.iter().any(|p| &p.param == param)
                && let Some(d) = prop.get("default")
            {
                self.out.params.insert(param.clone(), d.clone());
            }
        }
    }

    /// Every required parameter set, by a flag or a payload.
    fn check_required(&self) -> Result<(), ClientError> {
        let (name, m) = (self.ctx.name, self.ctx.m);
        for param in m.required() {
            if self.out.params.contains_key(param)
                || self.out.payloads.iter().any(|p| p.param == param)
            {
                continue;
            }
            return Err(match m.flag_for_param(param) {
                Some((flag, spec)) if spec.payload => missing_payload(&self.ctx, flag),
                Some((flag, _)) => self.ctx.usage(format!("{name} needs --{flag}."), &[]),
                None => self.ctx.usage(
                    format!(
                        "{name} needs parameter \"{param}\", which no flag sets (broken manifest)."
                    ),
                    &[],
                ),
            });
        }
        Ok(())
    }
}

fn missing_payload(ctx: &Ctx<'_>, flag: &str) -> ClientError {
    let stem = flag.trim_end_matches("-file");
    ctx.err(
        ErrorCode::MissingPayload,
        format!(
            "{} needs --{flag} with the path of a file holding the text: first write the text with your file tool to $TMPDIR/$SESSION_ID/{stem}.md, then run the command below.",
            ctx.name
        ),
        &[flag],
    )
}

fn suggest(flag: &str, m: &Manifest) -> Option<String> {
    m.flags
        .keys()
        .map(|k| (strsim::jaro_winkler(flag, k), k))
        .filter(|(score, _)| *score > 0.75)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, k)| k.clone())
}

fn is_negative_number(s: &str) -> bool {
    s.strip_prefix('-')
        .is_some_and(|r| !r.is_empty() && r.parse::<f64>().is_ok())
}
