//! The seam between the Skill API and the skill handlers.
//!
//! A handler implements [`SkillHandler`] and receives a [`CallContext`] (who is calling, from
//! which conversation, with access to the session's mutable state) plus parameters that have
//! already been checked against the skill's input schema. What the server needs to know about a
//! skill is **data**, a [`SkillSpec`]: the JSON Schema of its parameters, its rate limit, whether
//! its results may be de-duplicated and whether it is enabled. The specs are derived from the
//! loaded packages' `skills/<name>/manifest.json` ([`SkillSpec::from_package`], in
//! `handlers::build_registry`); no handler contains validation
//! code of its own.
//!
//! Parameter preparation ([`RegisteredSkill::prepare_params`]): top-level `default` values of the
//! schema's `properties` are filled in for absent parameters, then the result is validated against
//! the compiled schema. Only top-level defaults are applied (skill schemas are flat objects,
//! `docs/SKILLS.md`, "manifest.json"); defaults inside nested objects or arrays are not.
//! `format` keywords (e.g. `date-time`) are asserted, not just annotations. Schemas cannot
//! fetch remote `$ref`s (no resolver is compiled in); a schema that needs one fails at
//! registration. Every string parameter, at any depth, is also refused when it contains a
//! control character (C0 except tab, LF and CR, plus DEL): `INVALID_PARAMS` with the path, never
//! a 500 from a store or platform further down.

use crate::sync::lock;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Map, Value};

use super::error::{ParamProblem, SkillError};
use crate::session::{
    Attempt, SessionContext, SessionHandle, SessionId, SessionState, TurnSlot, TurnSlots,
};
use crate::skills::SkillPackage;
pub use crate::skills::manifest::RateLimit;

/// Longest `problem` text reported per parameter (the validator may quote the whole value).
const MAX_PROBLEM_CHARS: usize = 300;

/// One skill's implementation. Object safe: the registry stores `Arc<dyn SkillHandler>`.
#[async_trait]
pub trait SkillHandler: Send + Sync + 'static {
    /// The skill name, equal to its directory name under `skills/` (e.g. `"send-reply"`).
    fn name(&self) -> &str;

    /// Whether a call only reads (nothing sent, nothing stored but bookkeeping queued without
    /// waiting). A read-only call runs on the request's own task: a client that disconnects
    /// cancels it, which is harmless, and saves the hand-over to a detached task. Every other
    /// call runs detached, so a disconnect never cancels a half-done platform action or store
    /// write (`skill_api::server`).
    fn read_only(&self) -> bool {
        false
    }

    /// This skill's doom-loop limit: the call of the turn (1-based, every call counted, those
    /// the rate limit, the schema or the quota refuse included) that also stops the agent.
    /// `None` (the default) for skills without one. The pipeline counts the call before anything
    /// else can refuse it ([`CallContext::count_attempt`]), so the limit fires whatever the
    /// pacing (`tests/skill_api_doom_loop.rs`); calls joined to an identical in-flight call or
    /// served from the de-duplication cache are the same call retried and do not count again.
    fn stops_agent_at(&self) -> Option<u32> {
        None
    }

    /// Runs the skill. `params` has been validated against the spec's `input_schema`, with
    /// top-level schema defaults filled in. The returned value becomes `data` of the success
    /// body. Per-session quotas are enforced here, on the handler's own per-turn slot
    /// ([`CallContext::with_slot`]), by returning [`SkillError::QuotaExceeded`].
    async fn call(&self, ctx: &CallContext, params: Value) -> Result<Value, SkillError>;
}

/// What a handler knows about the call it is serving.
pub struct CallContext {
    skill: String,
    session: SessionHandle,
    /// The session's context when the call began (a later turn does not change it mid-call).
    context: Arc<SessionContext>,
    /// The turn the call began in.
    turn: u64,
    termination: Mutex<Option<String>>,
    attempt: Mutex<Option<Attempt>>,
}

impl fmt::Debug for CallContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CallContext")
            .field("skill", &self.skill)
            .field("session", &self.session)
            .finish_non_exhaustive()
    }
}

impl CallContext {
    /// A context for a call of `skill` in `session` (public so handler tests can build one).
    pub fn new(skill: impl Into<String>, session: SessionHandle) -> Self {
        Self {
            skill: skill.into(),
            context: session.context(),
            turn: session.turn(),
            session,
            termination: Mutex::new(None),
            attempt: Mutex::new(None),
        }
    }

    /// The skill being called.
    pub fn skill(&self) -> &str {
        &self.skill
    }

    /// The calling session's id.
    pub fn session_id(&self) -> &SessionId {
        self.session.id()
    }

    /// The calling session's fixed context (platform, channel, user, DM flag, trigger, workspace).
    pub fn session(&self) -> &SessionContext {
        &self.context
    }

    /// `NO_TURN_OPEN` once the turn this call began in has ended (or a later one began): a
    /// delivering handler asks right before each send to the platform, so a call still running
    /// when its turn ended delivers nothing more.
    pub fn still_in_turn(&self) -> Result<(), SkillError> {
        if self.session.turn_is_open() && self.session.turn() == self.turn {
            Ok(())
        } else {
            Err(SkillError::Auth(crate::session::AuthFailure::NoTurnOpen))
        }
    }

    /// The session handle itself (for code that needs to keep it).
    pub fn handle(&self) -> &SessionHandle {
        &self.session
    }

    /// Reads or updates the session's mutable state under its lock. The closure must be short
    /// and synchronous; do not call platform or store APIs inside it.
    pub fn with_state<R>(&self, f: impl FnOnce(&mut SessionState) -> R) -> R {
        self.session.with_state(f)
    }

    /// Reads or updates this turn's slot of type `T` (the handler's own per-turn state) under
    /// the session's lock. Same rules as [`with_state`](Self::with_state).
    pub fn with_slot<T: TurnSlot, R>(&self, f: impl FnOnce(&mut T) -> R) -> R {
        self.session.with_slot(f)
    }

    /// Reads or updates several of this turn's slots in one step under the session's lock.
    /// Same rules as [`with_state`](Self::with_state).
    pub fn with_slots<R>(&self, f: impl FnOnce(&mut TurnSlots) -> R) -> R {
        self.session.with_slots(f)
    }

    /// Asks for this session's agent to be stopped **after** the response of this call has been
    /// sent (doom-loop protection). The first reason wins. Returning
    /// `SkillError::QuotaExceeded { terminate: true, .. }` has the same effect.
    pub fn terminate_after_response(&self, reason: impl Into<String>) {
        let mut slot = lock(&self.termination);
        if slot.is_none() {
            *slot = Some(reason.into());
        }
    }

    /// Counts this call toward its skill's doom-loop limit (`stops_agent_at`), once per call:
    /// the pipeline does it before the rate limit (so refused attempts count too), and a handler
    /// asking again gets the same [`Attempt`]. An attempt at the limit requests termination
    /// after the response ([`terminate_after_response`](Self::terminate_after_response)).
    pub fn count_attempt(&self, stops_agent_at: u32) -> Attempt {
        let attempt = {
            let mut slot = lock(&self.attempt);
            if let Some(attempt) = *slot {
                return attempt;
            }
            let number = self
                .session
                .with_state(|state| state.record_attempt(&self.skill));
            let attempt = Attempt {
                number,
                stops_agent_at,
            };
            *slot = Some(attempt);
            attempt
        };
        if attempt.terminates() {
            self.terminate_after_response(format!("{}: per-session quota exhausted", self.skill));
        }
        attempt
    }

    /// The termination requested during this call, if any.
    pub fn pending_termination(&self) -> Option<String> {
        lock(&self.termination).clone()
    }
}

/// Everything the server needs to know about a skill, as data.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct SkillSpec {
    /// JSON Schema of `parameters` (compiled once at registration).
    pub input_schema: Value,
    /// Optional per-(skill, user) rate limit.
    #[serde(default)]
    pub rate_limit: Option<RateLimit>,
    /// Whether identical calls within the de-duplication window may share a result. `send-file`
    /// sets this to `false`.
    #[serde(default = "default_true")]
    pub cacheable: bool,
    /// A disabled skill answers 503 `SKILL_DISABLED`.
    #[serde(default = "default_true")]
    pub enabled: bool,
    /// `input_schema` already compiled (by the skills loader): registration uses it instead of
    /// compiling the schema a second time.
    #[serde(skip)]
    pub compiled: Option<CompiledSchema>,
}

/// A compiled `input_schema`, shared. Two are equal when they are the same compilation.
#[derive(Clone)]
pub struct CompiledSchema(pub Arc<jsonschema::Validator>);

impl fmt::Debug for CompiledSchema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("CompiledSchema")
    }
}

impl PartialEq for CompiledSchema {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

fn default_true() -> bool {
    true
}

impl SkillSpec {
    /// The spec of a loaded skill package: its manifest's `input_schema` (with the compilation
    /// the loader made, so it is compiled once) and rate limit; cacheable and enabled.
    pub fn from_package(package: &SkillPackage) -> Self {
        let spec = Self::new(package.input_schema().clone())
            .with_compiled_schema(package.compiled_schema());
        match package.manifest.rate_limit {
            Some(limit) => spec.with_rate_limit(limit),
            None => spec,
        }
    }

    /// A cacheable, enabled, unlimited skill with this parameter schema.
    pub fn new(input_schema: Value) -> Self {
        Self {
            input_schema,
            rate_limit: None,
            cacheable: true,
            enabled: true,
            compiled: None,
        }
    }

    /// Uses `validator`, the compilation of this spec's `input_schema` (the skills loader's),
    /// instead of compiling it again at registration.
    pub fn with_compiled_schema(mut self, validator: Arc<jsonschema::Validator>) -> Self {
        self.compiled = Some(CompiledSchema(validator));
        self
    }

    /// Sets the rate limit.
    pub fn with_rate_limit(mut self, rate_limit: RateLimit) -> Self {
        self.rate_limit = Some(rate_limit);
        self
    }

    /// Sets whether results may be de-duplicated.
    pub fn with_cacheable(mut self, cacheable: bool) -> Self {
        self.cacheable = cacheable;
        self
    }

    /// Sets whether the skill is enabled.
    pub fn with_enabled(mut self, enabled: bool) -> Self {
        self.enabled = enabled;
        self
    }
}

/// Why a skill could not be registered.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// Two handlers claim the same name.
    #[error("skill {0:?} is registered twice")]
    Duplicate(String),
    /// The name is not `[a-z0-9-]`, 1–64 characters, without leading/trailing/double hyphens.
    #[error("invalid skill name {0:?}")]
    InvalidName(String),
    /// The input schema does not compile.
    #[error("skill {skill:?}: invalid input_schema: {message}")]
    InvalidSchema {
        /// The skill.
        skill: String,
        /// What the schema compiler said.
        message: String,
    },
    /// `window_ms` or `max_requests` is zero.
    #[error("skill {0:?}: rate_limit needs window_ms > 0 and max_requests > 0")]
    InvalidRateLimit(String),
}

/// A registered skill: handler, spec and compiled schema.
pub struct RegisteredSkill {
    name: String,
    handler: Arc<dyn SkillHandler>,
    spec: SkillSpec,
    validator: Arc<jsonschema::Validator>,
    defaults: Vec<(String, Value)>,
}

impl fmt::Debug for RegisteredSkill {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RegisteredSkill")
            .field("name", &self.name)
            .field("spec", &self.spec)
            .finish_non_exhaustive()
    }
}

impl RegisteredSkill {
    /// The skill name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The skill's spec.
    pub fn spec(&self) -> &SkillSpec {
        &self.spec
    }

    /// The handler.
    pub fn handler(&self) -> &Arc<dyn SkillHandler> {
        &self.handler
    }

    /// Fills top-level schema defaults into absent parameters and validates the result.
    /// Failure is `INVALID_PARAMS` with one `{path, problem}` per violation.
    pub fn prepare_params(&self, mut params: Map<String, Value>) -> Result<Value, SkillError> {
        for (key, default) in &self.defaults {
            if !params.contains_key(key) {
                params.insert(key.clone(), default.clone());
            }
        }
        let params = Value::Object(params);
        let mut details = Vec::new();
        // `is_valid` stops at the first violation and builds no errors: the cheap check for
        // the usual valid call; the errors are gathered only for an invalid one.
        if !self.validator.is_valid(&params) {
            for error in self.validator.iter_errors(&params) {
                details.extend(problems_of(&error));
            }
        }
        control_character_problems(&params, &mut String::new(), &mut details);
        if details.is_empty() {
            Ok(params)
        } else {
            Err(SkillError::InvalidParams { details })
        }
    }
}

fn problems_of(error: &jsonschema::ValidationError<'_>) -> Vec<ParamProblem> {
    use jsonschema::error::ValidationErrorKind as Kind;
    let base = error.instance_path().as_str().to_owned();
    match error.kind() {
        Kind::Required { property } => {
            let name = property
                .as_str()
                .map_or_else(|| property.to_string(), str::to_owned);
            vec![ParamProblem {
                path: format!("{base}/{}", escape_pointer(&name)),
                problem: format!("required parameter \"{name}\" is missing"),
            }]
        }
        Kind::AdditionalProperties { unexpected } => unexpected
            .iter()
            .map(|name| ParamProblem {
                path: format!("{base}/{}", escape_pointer(name)),
                problem: format!("unknown parameter \"{name}\" is not accepted by this skill"),
            })
            .collect(),
        _ => vec![ParamProblem {
            path: base,
            problem: crate::text::clip_chars(&error.to_string(), MAX_PROBLEM_CHARS),
        }],
    }
}

/// Whether `c` is refused in string parameters: C0 controls except tab, line feed and carriage
/// return, plus DEL. NUL in particular cuts strings short in SQLite's FTS5 query syntax (a 500
/// from memory-search before this check) and in C APIs further down; no skill has a use for any
/// of them.
fn is_refused_control(c: char) -> bool {
    (c.is_ascii_control() && !matches!(c, '\t' | '\n' | '\r')) || c == '\u{7f}'
}

/// Appends one problem for every string (at any depth) that contains a refused control
/// character, naming its JSON Pointer path, the character and where it is.
fn control_character_problems(value: &Value, path: &mut String, out: &mut Vec<ParamProblem>) {
    match value {
        Value::String(text) => {
            if let Some((index, c)) = text
                .chars()
                .enumerate()
                .find(|(_, c)| is_refused_control(*c))
            {
                let name = if c == '\0' {
                    "NUL".to_owned()
                } else {
                    format!("U+{:04X}", u32::from(c))
                };
                out.push(ParamProblem {
                    path: path.clone(),
                    problem: format!(
                        "contains the control character {name} at character {index}; remove \
                         control characters (tab, line feed and carriage return are fine)"
                    ),
                });
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                let len = path.len();
                path.push_str(&format!("/{i}"));
                control_character_problems(item, path, out);
                path.truncate(len);
            }
        }
        Value::Object(map) => {
            for (key, item) in map {
                let len = path.len();
                path.push('/');
                path.push_str(&escape_pointer(key));
                control_character_problems(item, path, out);
                path.truncate(len);
            }
        }
        Value::Null | Value::Bool(_) | Value::Number(_) => {}
    }
}

fn escape_pointer(segment: &str) -> String {
    segment.replace('~', "~0").replace('/', "~1")
}

/// Maps skill names to handlers and specs. Built once at startup, then shared read-only.
#[derive(Debug, Default)]
pub struct SkillRegistry {
    skills: BTreeMap<String, Arc<RegisteredSkill>>,
}

impl SkillRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers `handler` under `handler.name()` with `spec`, compiling the schema unless the
    /// spec brings its compilation.
    pub fn register(
        &mut self,
        handler: Arc<dyn SkillHandler>,
        spec: SkillSpec,
    ) -> Result<(), RegistryError> {
        let name = handler.name().to_owned();
        if !crate::names::is_skill_name(&name) {
            return Err(RegistryError::InvalidName(name));
        }
        if self.skills.contains_key(&name) {
            return Err(RegistryError::Duplicate(name));
        }
        if let Some(limit) = spec.rate_limit
            && (limit.window_ms == 0 || limit.max_requests == 0)
        {
            return Err(RegistryError::InvalidRateLimit(name));
        }
        let validator = match &spec.compiled {
            Some(compiled) => Arc::clone(&compiled.0),
            None => Arc::new(crate::skills::compile_schema(&spec.input_schema).map_err(
                |message| RegistryError::InvalidSchema {
                    skill: name.clone(),
                    message,
                },
            )?),
        };
        let defaults = spec
            .input_schema
            .get("properties")
            .and_then(Value::as_object)
            .map(|props| {
                props
                    .iter()
                    .filter_map(|(key, prop)| Some((key.clone(), prop.get("default")?.clone())))
                    .collect()
            })
            .unwrap_or_default();
        self.skills.insert(
            name.clone(),
            Arc::new(RegisteredSkill {
                name,
                handler,
                spec,
                validator,
                defaults,
            }),
        );
        Ok(())
    }

    /// The skill registered under `name`.
    pub fn get(&self, name: &str) -> Option<Arc<RegisteredSkill>> {
        self.skills.get(name).cloned()
    }

    /// All registered names, sorted.
    pub fn names(&self) -> Vec<String> {
        self.skills.keys().cloned().collect()
    }

    /// Number of registered skills.
    pub fn len(&self) -> usize {
        self.skills.len()
    }

    /// Whether no skill is registered.
    pub fn is_empty(&self) -> bool {
        self.skills.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    struct Nop(&'static str);

    #[async_trait]
    impl SkillHandler for Nop {
        fn name(&self) -> &str {
            self.0
        }
        async fn call(&self, _ctx: &CallContext, params: Value) -> Result<Value, SkillError> {
            Ok(params)
        }
    }

    fn schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "text": {"type": "string", "description": "t", "maxLength": 5},
                "limit": {"type": "integer", "description": "l", "minimum": 1, "maximum": 50, "default": 10}
            },
            "required": ["text"],
            "additionalProperties": false
        })
    }

    fn registered() -> Arc<RegisteredSkill> {
        let mut reg = SkillRegistry::new();
        reg.register(Arc::new(Nop("echo")), SkillSpec::new(schema()))
            .expect("register");
        reg.get("echo").expect("present")
    }

    fn params(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn defaults_are_filled_before_validation() {
        let out = registered()
            .prepare_params(params(json!({"text": "hi"})))
            .expect("valid");
        assert_eq!(out, json!({"text": "hi", "limit": 10}));
    }

    #[test]
    fn violations_are_reported_with_paths() {
        let Err(SkillError::InvalidParams { details }) =
            registered().prepare_params(params(json!({"limit": 99, "extra": 1})))
        else {
            panic!("expected INVALID_PARAMS");
        };
        let paths: Vec<&str> = details.iter().map(|d| d.path.as_str()).collect();
        assert!(paths.contains(&"/text"), "{details:?}");
        assert!(paths.contains(&"/limit"), "{details:?}");
        assert!(paths.contains(&"/extra"), "{details:?}");
    }

    #[test]
    fn formats_are_enforced() {
        let mut reg = SkillRegistry::new();
        let schema = json!({
            "type": "object",
            "properties": {"at": {"type": "string", "description": "d", "format": "date-time"}},
            "additionalProperties": false
        });
        reg.register(Arc::new(Nop("when")), SkillSpec::new(schema))
            .expect("register");
        let skill = reg.get("when").expect("present");
        assert!(
            skill
                .prepare_params(params(json!({"at": "2026-12-01T10:00:00Z"})))
                .is_ok()
        );
        assert!(
            skill
                .prepare_params(params(json!({"at": "tomorrow"})))
                .is_err()
        );
    }

    #[test]
    fn control_characters_in_strings_are_invalid_params_naming_the_path() {
        let skill = registered();
        for (bad, name) in [
            ("a\u{0}b", "NUL"),
            ("a\u{1b}b", "U+001B"),
            ("\u{7f}", "U+007F"),
        ] {
            let Err(SkillError::InvalidParams { details }) =
                skill.prepare_params(params(json!({ "text": bad })))
            else {
                panic!("expected INVALID_PARAMS for {bad:?}");
            };
            let found = details
                .iter()
                .find(|d| d.path == "/text")
                .unwrap_or_else(|| panic!("{details:?}"));
            assert!(found.problem.contains(name), "{found:?}");
            assert!(found.problem.contains("control character"), "{found:?}");
        }
        assert!(
            skill
                .prepare_params(params(json!({"text": "a\tb\r\n"})))
                .is_ok(),
            "tab, CR and LF are ordinary text"
        );
    }

    #[test]
    fn control_characters_are_found_inside_arrays() {
        let mut reg = SkillRegistry::new();
        let schema = json!({
            "type": "object",
            "properties": {"files": {"type": "array", "items": {"type": "string"}, "description": "f"}},
            "additionalProperties": false
        });
        reg.register(Arc::new(Nop("files")), SkillSpec::new(schema))
            .expect("register");
        let Err(SkillError::InvalidParams { details }) = reg
            .get("files")
            .expect("present")
            .prepare_params(params(json!({"files": ["ok.txt", "x\u{0}.txt"]})))
        else {
            panic!("expected INVALID_PARAMS");
        };
        assert_eq!(details.len(), 1, "{details:?}");
        assert_eq!(details[0].path, "/files/1");
    }

    #[test]
    fn long_values_are_not_echoed_in_full() {
        let long = "x".repeat(5000);
        let Err(SkillError::InvalidParams { details }) =
            registered().prepare_params(params(json!({ "text": long })))
        else {
            panic!("expected INVALID_PARAMS");
        };
        assert!(details[0].problem.chars().count() <= MAX_PROBLEM_CHARS + 1);
    }

    #[test]
    fn registration_rejects_bad_names_duplicates_schemas_and_limits() {
        let mut reg = SkillRegistry::new();
        for bad in ["", "Bad", "-a", "a-", "a--b", "a_b"] {
            assert!(matches!(
                reg.register(Arc::new(Nop(bad)), SkillSpec::new(schema())),
                Err(RegistryError::InvalidName(_))
            ));
        }
        reg.register(Arc::new(Nop("a")), SkillSpec::new(schema()))
            .expect("first");
        assert!(matches!(
            reg.register(Arc::new(Nop("a")), SkillSpec::new(schema())),
            Err(RegistryError::Duplicate(_))
        ));
        assert!(matches!(
            reg.register(
                Arc::new(Nop("b")),
                SkillSpec::new(json!({"type": "not-a-type"}))
            ),
            Err(RegistryError::InvalidSchema { .. })
        ));
        assert!(matches!(
            reg.register(
                Arc::new(Nop("c")),
                SkillSpec::new(schema()).with_rate_limit(RateLimit {
                    window_ms: 0,
                    max_requests: 1,
                    burst: None
                })
            ),
            Err(RegistryError::InvalidRateLimit(_))
        ));
    }

    /// A spec that brings its compiled schema (the skills loader's) is registered with that very
    /// compilation; one without it is compiled at registration.
    #[test]
    fn a_compiled_schema_is_reused_not_compiled_again() {
        let compiled = Arc::new(crate::skills::compile_schema(&schema()).unwrap());
        let mut registry = SkillRegistry::new();
        registry
            .register(
                Arc::new(Nop("nop")),
                SkillSpec::new(schema()).with_compiled_schema(Arc::clone(&compiled)),
            )
            .unwrap();
        let reused = registry.get("nop").unwrap();
        assert!(Arc::ptr_eq(&reused.validator, &compiled));
        let fresh = registered();
        assert!(!Arc::ptr_eq(&fresh.validator, &compiled));
        assert!(fresh.validator.is_valid(&json!({"text": "hi"})));
    }

    #[test]
    fn spec_deserialises_from_manifest_like_json() {
        let spec: SkillSpec = serde_json::from_value(json!({
            "input_schema": schema(),
            "rate_limit": {"window_ms": 60000, "max_requests": 30, "burst": 5}
        }))
        .expect("spec");
        assert!(spec.cacheable && spec.enabled);
        assert_eq!(spec.rate_limit.and_then(|r| r.burst), Some(5));
    }

    #[test]
    fn a_call_delivers_only_while_the_turn_it_began_in_is_open() {
        let context = crate::session::SessionContext {
            place: Default::default(),
            origin: crate::platform::Origin {
                platform: crate::platform::PlatformKind::Discord,
                channel_id: "c".into(),
                guild_id: None,
                user_id: "u".into(),
                username: "u".into(),
                is_dm: true,
            },
            purpose: Default::default(),
            trigger_message_id: Some("m1".into()),
            workspace: std::path::PathBuf::from("/ws"),
        };
        let session = SessionHandle::unregistered("s1", context);
        let call = CallContext::new("send-reply", session.clone());
        assert!(call.still_in_turn().is_ok());
        session.end_turn();
        assert!(matches!(
            call.still_in_turn(),
            Err(SkillError::Auth(crate::session::AuthFailure::NoTurnOpen))
        ));
        // A later turn is not this call's turn either.
        session.begin_turn(Some("m2".into()));
        assert!(matches!(
            call.still_in_turn(),
            Err(SkillError::Auth(crate::session::AuthFailure::NoTurnOpen))
        ));
        assert!(
            CallContext::new("send-reply", session)
                .still_in_turn()
                .is_ok()
        );
    }
}
