//! Slash commands for user-command skills: generation of Discord application commands
//! from [`UserCommandSpec`]s, the registration body, and the answer to an INTERACTION_CREATE.
//!
//! * Options come from the skill's `input_schema`: `string` / `integer` / `number` / `boolean`
//!   properties, `enum` → choices, `minimum`/`maximum` → `min_value`/`max_value`,
//!   `minLength`/`maxLength` → `min_length`/`max_length`, `required`, `description`. Required
//!   options come first (Discord rejects a required option after an optional one). Other types
//!   cannot be expressed as options and are left out (the handler then validates as usual).
//! * camelCase parameter names become lowercase snake_case option names (Discord allows only
//!   `^[-_\p{L}\p{N}]{1,32}$` in lowercase); invocations are mapped back to the schema's names.
//! * An invocation is deferred ephemerally at once (callback type 5, flag 64), handed to the
//!   router as a [`CommandInvocation`], and its [`CommandReply`] is delivered by editing the
//!   deferred response; text beyond one message goes out as ephemeral follow-ups (never truncated).
//! * A reply may carry a button ([`ReplyButton`], e.g. `/forget`'s confirmation) that runs
//!   another of these commands for whoever presses it: its `custom_id` names the command and
//!   one string parameter, and a press (a MESSAGE_COMPONENT interaction) is answered like that
//!   slash command. The command still checks everything itself (a `/forget-confirm` code works
//!   only for the person it was given to).

use std::time::Duration;

use reqwest::Method;
use serde_json::{Map, Value, json};
use serenity::model::application::{
    CommandDataOptionValue, CommandInteraction, ComponentInteraction,
};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use super::http::{Body, Rest, Route};
use crate::platform::{
    CommandInvocation, CommandReply, EventSink, Origin, PlatformEvent, PlatformKind, ReplyButton,
    UserCommandSpec,
};

/// Discord's limit on command and option descriptions, in characters.
const MAX_DESCRIPTION: usize = 100;
/// Discord's limit on command and option names, in characters.
const MAX_NAME: usize = 32;
/// Discord's limit on options per command and choices per option.
const MAX_OPTIONS: usize = 25;
/// Ephemeral message flag.
const EPHEMERAL: u64 = 64;

/// Option types Discord knows that we generate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OptionKind {
    String = 3,
    Integer = 4,
    Boolean = 5,
    Number = 10,
}

/// One generated option.
#[derive(Debug, Clone, PartialEq)]
struct SlashOption {
    /// Discord's option name (lowercase).
    name: String,
    /// The `input_schema` property it stands for.
    schema_name: String,
    kind: OptionKind,
    description: String,
    required: bool,
    choices: Vec<Value>,
    limits: Map<String, Value>,
}

/// One generated command.
#[derive(Debug, Clone, PartialEq)]
struct SlashCommand {
    name: String,
    description: String,
    options: Vec<SlashOption>,
    /// Guilds where no place allows the skill: not registered there.
    hidden_in_guilds: std::collections::BTreeSet<String>,
}

/// A spec that cannot become a slash command.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("user command {name:?} cannot be registered on Discord: {reason}")]
pub struct CommandSpecError {
    /// The skill's name.
    pub name: String,
    /// What is wrong with it.
    pub reason: String,
}

/// The slash commands of the running adapter.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct CommandSet {
    commands: Vec<SlashCommand>,
}

impl CommandSet {
    /// Generates the commands for `specs`; specs that cannot be expressed are reported and left
    /// out, an option that cannot be expressed is left out of its command.
    pub fn build(specs: &[UserCommandSpec]) -> (Self, Vec<CommandSpecError>) {
        let mut commands = Vec::new();
        let mut errors = Vec::new();
        for spec in specs {
            match command_from_spec(spec) {
                Ok(command)
                    if commands
                        .iter()
                        .any(|c: &SlashCommand| c.name == command.name) =>
                {
                    errors.push(spec_error(spec, "a command with this name already exists"));
                }
                Ok(command) => commands.push(command),
                Err(err) => errors.push(err),
            }
        }
        (Self { commands }, errors)
    }

    /// The bulk-overwrite body of guild `guild`: the commands some place there allows.
    pub fn guild_body(&self, guild: u64) -> Value {
        let guild = guild.to_string();
        self.body(None, |command| !command.hidden_in_guilds.contains(&guild))
    }

    /// The bulk-overwrite body. Global commands carry the interaction `contexts` they are usable
    /// in (0 = guild, 1 = bot DM); guild commands (`None`) carry none.
    pub fn registration_body(&self, contexts: Option<&[u8]>) -> Value {
        self.body(contexts, |_| true)
    }

    fn body(&self, contexts: Option<&[u8]>, offered: impl Fn(&SlashCommand) -> bool) -> Value {
        Value::Array(
            self.commands
                .iter()
                .filter(|command| offered(command))
                .map(|command| {
                    let mut body = json!({
                        "name": command.name,
                        "type": 1,
                        "description": command.description,
                        "options": command.options.iter().map(option_json).collect::<Vec<_>>(),
                    });
                    if let (Some(contexts), Some(object)) = (contexts, body.as_object_mut()) {
                        object.insert("contexts".into(), json!(contexts));
                        object.insert("integration_types".into(), json!([0]));
                    }
                    body
                })
                .collect(),
        )
    }

    /// The skill name and schema-named, typed parameters of an invocation of `name`, or `None`
    /// when it is not one of ours.
    pub fn parameters(
        &self,
        name: &str,
        options: &[serenity::model::application::CommandDataOption],
    ) -> Option<(String, Map<String, Value>)> {
        let command = self.commands.iter().find(|c| c.name == name)?;
        let mut parameters = Map::new();
        for given in options {
            let Some(option) = command.options.iter().find(|o| o.name == given.name) else {
                tracing::debug!(command = name, option = %given.name, "unknown option ignored");
                continue;
            };
            let value = match &given.value {
                CommandDataOptionValue::String(s) => Value::String(s.clone()),
                CommandDataOptionValue::Integer(n) => Value::from(*n),
                CommandDataOptionValue::Number(n) => Value::from(*n),
                CommandDataOptionValue::Boolean(b) => Value::Bool(*b),
                _ => continue,
            };
            parameters.insert(option.schema_name.clone(), value);
        }
        Some((command.name.clone(), parameters))
    }
}

impl CommandSet {
    /// The command and parameters a reply button's `custom_id` ([`button_id`]) names: one of
    /// these commands with one of its string options, else `None`.
    pub fn button(&self, custom_id: &str) -> Option<(String, Map<String, Value>)> {
        let rest = custom_id.strip_prefix("cmd:")?;
        let mut parts = rest.splitn(3, ':');
        let (name, parameter, value) = (parts.next()?, parts.next()?, parts.next()?);
        let command = self.commands.iter().find(|c| c.name == name)?;
        command
            .options
            .iter()
            .find(|o| o.schema_name == parameter && o.kind == OptionKind::String)?;
        let mut parameters = Map::new();
        parameters.insert(parameter.to_owned(), Value::String(value.to_owned()));
        Some((command.name.clone(), parameters))
    }
}

fn spec_error(spec: &UserCommandSpec, reason: impl Into<String>) -> CommandSpecError {
    CommandSpecError {
        name: spec.name.clone(),
        reason: reason.into(),
    }
}

/// Whether `name` is a valid lowercase Discord command / option name.
fn valid_name(name: &str) -> bool {
    let count = name.chars().count();
    (1..=MAX_NAME).contains(&count)
        && name.chars().all(|c| {
            (c.is_alphanumeric() || c == '-' || c == '_') && c.to_lowercase().eq(std::iter::once(c))
        })
}

/// `enabledOnly` → `enabled_only`; characters Discord does not allow become `_`.
pub(crate) fn option_name(schema_name: &str) -> String {
    let mut out = String::with_capacity(schema_name.len() + 4);
    for c in schema_name.chars() {
        if c.is_uppercase() {
            if !out.is_empty() && !out.ends_with(['_', '-']) {
                out.push('_');
            }
            out.extend(c.to_lowercase());
        } else if c.is_alphanumeric() || c == '-' || c == '_' {
            out.push(c);
        } else {
            out.push('_');
        }
    }
    out.chars().take(MAX_NAME).collect()
}

/// `text` cut to Discord's description limit (ending in `…` when cut), or `fallback` when empty.
fn description(text: Option<&str>, fallback: &str) -> String {
    let text = text
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .unwrap_or(fallback);
    let text = text.lines().next().unwrap_or(fallback);
    if text.chars().count() <= MAX_DESCRIPTION {
        return text.to_owned();
    }
    let mut cut: String = text.chars().take(MAX_DESCRIPTION - 1).collect();
    cut.push('…');
    cut
}

fn command_from_spec(spec: &UserCommandSpec) -> Result<SlashCommand, CommandSpecError> {
    if !valid_name(&spec.name) {
        return Err(spec_error(
            spec,
            "the name must be 1-32 lowercase letters, digits, '-' or '_'",
        ));
    }
    let schema = &spec.input_schema;
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let properties = schema.get("properties").and_then(Value::as_object);
    let mut options: Vec<SlashOption> = Vec::new();
    for (schema_name, property) in properties.into_iter().flatten() {
        let is_required = required.contains(&schema_name.as_str());
        let Some(option) = option_from_property(schema_name, property, is_required) else {
            if is_required {
                return Err(spec_error(
                    spec,
                    format!("required parameter {schema_name:?} has no Discord option type"),
                ));
            }
            tracing::warn!(
                command = %spec.name,
                parameter = %schema_name,
                "parameter has no Discord option type; left out of the slash command"
            );
            continue;
        };
        if options.iter().any(|o| o.name == option.name) {
            return Err(spec_error(
                spec,
                format!("two parameters map to the option name {:?}", option.name),
            ));
        }
        options.push(option);
    }
    if options.len() > MAX_OPTIONS {
        return Err(spec_error(spec, "more than 25 options"));
    }
    // Required options first (stable, so the schema's order is kept within each group).
    options.sort_by_key(|o| !o.required);
    Ok(SlashCommand {
        name: spec.name.clone(),
        description: description(Some(&spec.description), &spec.name),
        options,
        hidden_in_guilds: spec.hidden_in_guilds.clone(),
    })
}

fn option_from_property(
    schema_name: &str,
    property: &Value,
    required: bool,
) -> Option<SlashOption> {
    let kind = match property.get("type").and_then(Value::as_str)? {
        "string" => OptionKind::String,
        "integer" => OptionKind::Integer,
        "number" => OptionKind::Number,
        "boolean" => OptionKind::Boolean,
        _ => return None,
    };
    let name = option_name(schema_name);
    if !valid_name(&name) {
        return None;
    }
    let choices: Vec<Value> = property
        .get("enum")
        .and_then(Value::as_array)
        .map(|values| {
            values
                .iter()
                .filter(|v| match kind {
                    OptionKind::String => v.is_string(),
                    OptionKind::Integer => v.is_i64() || v.is_u64(),
                    OptionKind::Number => v.is_number(),
                    OptionKind::Boolean => false,
                })
                .take(MAX_OPTIONS)
                .map(|v| {
                    let label = v.as_str().map_or_else(|| v.to_string(), str::to_owned);
                    json!({"name": description(Some(&label), "?"), "value": v})
                })
                .collect()
        })
        .unwrap_or_default();
    let mut limits = Map::new();
    let mut copy = |from: &str, to: &str| {
        if let Some(value) = property.get(from).filter(|v| v.is_number()) {
            limits.insert(to.to_owned(), value.clone());
        }
    };
    match kind {
        OptionKind::Integer | OptionKind::Number if choices.is_empty() => {
            copy("minimum", "min_value");
            copy("maximum", "max_value");
        }
        OptionKind::String if choices.is_empty() => {
            copy("minLength", "min_length");
            copy("maxLength", "max_length");
        }
        _ => {}
    }
    Some(SlashOption {
        name,
        schema_name: schema_name.to_owned(),
        kind,
        description: description(
            property.get("description").and_then(Value::as_str),
            schema_name,
        ),
        required,
        choices,
        limits,
    })
}

fn option_json(option: &SlashOption) -> Value {
    let mut value = json!({
        "type": option.kind as u8,
        "name": option.name,
        "description": option.description,
        "required": option.required,
    });
    if let Some(object) = value.as_object_mut() {
        if !option.choices.is_empty() {
            object.insert("choices".into(), Value::Array(option.choices.clone()));
        }
        object.extend(option.limits.clone());
    }
    value
}

/// What answering an interaction needs.
#[derive(Debug, Clone)]
pub(crate) struct InteractionContext {
    pub rest: Rest,
    pub commands: std::sync::Arc<CommandSet>,
    pub sink: EventSink,
    pub shutdown: CancellationToken,
    pub guild_ids: Vec<u64>,
    pub reply_timeout: Duration,
}

/// The [`Asked`] of a command or component interaction (the two serenity types share these
/// fields), `what` naming it in the log.
macro_rules! asked {
    ($interaction:ident, $what:expr) => {
        Asked {
            app: $interaction.application_id.get(),
            callback: callback_route($interaction.id.get(), &$interaction.token),
            token: $interaction.token.clone(),
            channel: $interaction.channel_id.to_string(),
            guild: $interaction.guild_id.map(|g| g.get()),
            user: &$interaction.user,
            what: $what,
        }
    };
}

/// Answers one slash-command interaction (see the module documentation). Runs inside serenity's
/// per-event task; returns early on shutdown.
pub(crate) async fn handle(ctx: &InteractionContext, interaction: CommandInteraction) {
    let found = ctx
        .commands
        .parameters(&interaction.data.name, &interaction.data.options);
    let asked = asked!(interaction, &interaction.data.name);
    answer(ctx, asked, found).await;
}

/// Answers a press of a button under a command's answer ([`button_id`]): the command it names
/// runs as a slash command would, for the user who pressed it.
pub(crate) async fn handle_button(ctx: &InteractionContext, interaction: ComponentInteraction) {
    let found = ctx.commands.button(&interaction.data.custom_id);
    let asked = asked!(interaction, &interaction.data.custom_id);
    answer(ctx, asked, found).await;
}

/// One interaction to answer.
struct Asked<'a> {
    app: u64,
    callback: Route,
    token: String,
    channel: String,
    guild: Option<u64>,
    user: &'a serenity::model::user::User,
    /// The command's name or the button's id (for the log).
    what: &'a str,
}

/// Defers `asked` ephemerally, hands the command to the router and delivers its answer; a
/// command that is not offered (or not in an allowed guild) is refused at once.
async fn answer(
    ctx: &InteractionContext,
    asked: Asked<'_>,
    found: Option<(String, Map<String, Value>)>,
) {
    let allowed = asked
        .guild
        .is_none_or(|g| ctx.guild_ids.is_empty() || ctx.guild_ids.contains(&g));
    let (skill, parameters) = match found {
        Some(found) if allowed => found,
        _ => {
            tracing::info!(command = %asked.what, "interaction for an unavailable command");
            let body = json!({"type": 4, "data": {
                "content": "This command is not available here.", "flags": EPHEMERAL}});
            if let Err(error) = ctx.rest.call(asked.callback, Body::Json(body)).await {
                tracing::warn!(error = %error, "could not answer an interaction");
            }
            return;
        }
    };
    let defer = json!({"type": 5, "data": {"flags": EPHEMERAL}});
    if let Err(error) = ctx.rest.call(asked.callback, Body::Json(defer)).await {
        tracing::warn!(command = %skill, error = %error, "could not defer an interaction");
        return;
    }
    let (reply_tx, reply_rx) = oneshot::channel();
    let user = asked.user;
    let invocation = CommandInvocation {
        origin: Origin {
            platform: PlatformKind::Discord,
            channel_id: asked.channel.into(),
            guild_id: asked.guild.map(|g| g.to_string()),
            user_id: user.id.to_string().into(),
            username: user.name.clone(),
            is_dm: asked.guild.is_none(),
        },
        skill: skill.clone(),
        parameters,
        message_id: None,
        reply: reply_tx,
    };
    tracing::info!(command = %skill, user_id = %user.id, is_dm = asked.guild.is_none(), "slash command");
    let reply = tokio::select! {
        sent = ctx.sink.send(PlatformEvent::Command(invocation)) => match sent {
            Ok(()) => tokio::select! {
                reply = tokio::time::timeout(ctx.reply_timeout, reply_rx) => match reply {
                    Ok(Ok(reply)) => reply,
                    Ok(Err(_)) => CommandReply::error("The command could not be completed."),
                    Err(_) => CommandReply::error("The command took too long; please try again later."),
                },
                () = ctx.shutdown.cancelled() => CommandReply::error("The bot is shutting down."),
            },
            Err(_) => CommandReply::error("The bot is shutting down."),
        },
        () = ctx.shutdown.cancelled() => CommandReply::error("The bot is shutting down."),
    };
    deliver(ctx, asked.app, &asked.token, &skill, &reply).await;
}

fn callback_route(id: u64, token: &str) -> Route {
    Route::new(
        "interaction_callback",
        Method::POST,
        format!("/interactions/{id}/{token}/callback"),
    )
}

/// The `custom_id` of a reply button: `cmd:{command}:{parameter}:{value}` (`None` when over
/// Discord's 100 characters). [`CommandSet::button`] reads it back.
fn button_id(button: &ReplyButton) -> Option<String> {
    let id = format!(
        "cmd:{}:{}:{}",
        button.command, button.parameter, button.value
    );
    (id.chars().count() <= 100).then_some(id)
}

/// Edits the deferred response with the first part of the reply and sends the rest as ephemeral
/// follow-ups.
async fn deliver(
    ctx: &InteractionContext,
    app: u64,
    token: &str,
    skill: &str,
    reply: &CommandReply,
) {
    let text = if reply.text.trim().is_empty() {
        "Done.".to_owned()
    } else if reply.is_error {
        format!("⚠️ {}", reply.text)
    } else {
        reply.text.clone()
    };
    let parts = crate::text::split_message(&text, super::TEXT_LIMITS);
    let no_pings = json!({"parse": []});
    for (index, part) in parts.iter().enumerate() {
        let (route, body) = if index == 0 {
            (
                Route::new(
                    "edit_original",
                    Method::PATCH,
                    format!("/webhooks/{app}/{token}/messages/@original"),
                ),
                {
                    let mut body = json!({"content": part, "allowed_mentions": no_pings});
                    if let Some(id) = reply.button.as_ref().and_then(button_id)
                        && parts.len() == 1
                    {
                        let label: String = reply
                            .button
                            .as_ref()
                            .map(|b| b.label.chars().take(80).collect())
                            .unwrap_or_default();
                        body["components"] = json!([{"type": 1, "components": [
                            {"type": 2, "style": 4, "label": label, "custom_id": id}
                        ]}]);
                    }
                    body
                },
            )
        } else {
            (
                Route::new(
                    "create_followup",
                    Method::POST,
                    format!("/webhooks/{app}/{token}"),
                ),
                json!({"content": part, "flags": EPHEMERAL, "allowed_mentions": no_pings}),
            )
        };
        if let Err(error) = ctx.rest.call(route, Body::Json(body)).await {
            tracing::warn!(command = %skill, part = index, error = %error, "could not deliver a command reply");
            return;
        }
    }
}

/// The interaction contexts of the **global** registration, or `None` when nothing is registered
/// globally.
///
/// With `guildIds` the commands are registered in each guild and, when DMs are allowed, globally
/// for the bot's DMs only (so they do not show twice in those guilds); without `guildIds` they are
/// registered globally for guilds and (if allowed) DMs.
pub(crate) fn global_contexts(per_guild: bool, allow_dm: bool) -> Option<Vec<u8>> {
    match (per_guild, allow_dm) {
        (true, true) => Some(vec![1]),
        (true, false) => None,
        (false, true) => Some(vec![0, 1]),
        (false, false) => Some(vec![0]),
    }
}

/// Every Discord option name of `command` mapped to its schema name (for diagnostics and tests).
#[cfg(test)]
fn option_names(set: &CommandSet, command: &str) -> std::collections::BTreeMap<String, String> {
    set.commands
        .iter()
        .filter(|c| c.name == command)
        .flat_map(|c| c.options.iter())
        .map(|o| (o.name.clone(), o.schema_name.clone()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats_spec() -> UserCommandSpec {
        UserCommandSpec {
            name: "memory-stats".into(),
            description: "Show how many memories I keep about you".into(),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "importance": {"type": "string", "enum": ["high", "normal", "all"],
                                   "description": "Which memories to count"},
                    "maxAgeDays": {"type": "integer", "minimum": 1, "maximum": 365},
                    "enabledOnly": {"type": "boolean"},
                    "tags": {"type": "array", "items": {"type": "string"}}
                },
                "required": ["maxAgeDays"]
            }),
            hidden_in_guilds: Default::default(),
        }
    }

    /// A reply button's id names a command of the set and one of its string options; anything
    /// else (another command, an integer option, no prefix, too long) is no button.
    #[test]
    fn a_button_runs_only_an_offered_command_with_one_of_its_string_options() {
        let (set, _) = CommandSet::build(&[stats_spec()]);
        let button = ReplyButton {
            label: "Count".into(),
            command: "memory-stats".into(),
            parameter: "importance".into(),
            value: "high:and:more".into(),
        };
        let id = button_id(&button).expect("short enough");
        let (name, parameters) = set.button(&id).expect("a button of the set");
        assert_eq!(name, "memory-stats");
        assert_eq!(parameters["importance"], "high:and:more");
        for refused in [
            "cmd:memory-search:query:x",
            "cmd:memory-stats:maxAgeDays:5",
            "cmd:memory-stats:nope:x",
            "memory-stats:importance:high",
            "cmd:memory-stats",
        ] {
            assert_eq!(set.button(refused), None, "{refused}");
        }
        let long = ReplyButton {
            value: "x".repeat(100),
            ..button
        };
        assert_eq!(button_id(&long), None);
    }

    #[test]
    fn options_are_generated_from_the_schema() {
        let (set, errors) = CommandSet::build(&[stats_spec()]);
        assert!(errors.is_empty(), "{errors:?}");
        let body = set.registration_body(None);
        let command = &body[0];
        assert_eq!(command["name"], "memory-stats");
        assert_eq!(command["type"], 1);
        assert!(command.get("contexts").is_none());
        let global = set.registration_body(Some(&[1]));
        assert_eq!(global[0]["contexts"], json!([1]));
        let options = command["options"].as_array().expect("options");
        assert_eq!(options.len(), 3, "the array parameter is left out");
        assert_eq!(
            options[0],
            json!({"type": 4, "name": "max_age_days", "description": "maxAgeDays",
                   "required": true, "min_value": 1, "max_value": 365})
        );
        assert_eq!(options[1]["name"], "enabled_only");
        assert_eq!(options[1]["type"], 5);
        assert_eq!(options[2]["type"], 3);
        assert_eq!(options[2]["required"], false);
        assert_eq!(options[2]["description"], "Which memories to count");
        assert_eq!(
            options[2]["choices"],
            json!([{"name": "high", "value": "high"}, {"name": "normal", "value": "normal"},
                   {"name": "all", "value": "all"}])
        );
        assert_eq!(
            option_names(&set, "memory-stats")
                .get("max_age_days")
                .map(String::as_str),
            Some("maxAgeDays")
        );
    }

    #[test]
    fn invocations_map_back_to_schema_names() {
        let (set, _) = CommandSet::build(&[stats_spec()]);
        let options: Vec<serenity::model::application::CommandDataOption> =
            serde_json::from_value(json!([
                {"name": "max_age_days", "type": 4, "value": 30},
                {"name": "importance", "type": 3, "value": "high"},
                {"name": "enabled_only", "type": 5, "value": false},
                {"name": "bogus", "type": 3, "value": "x"}
            ]))
            .expect("options");
        let (skill, parameters) = set.parameters("memory-stats", &options).expect("ours");
        assert_eq!(skill, "memory-stats");
        assert_eq!(
            Value::Object(parameters),
            json!({"maxAgeDays": 30, "importance": "high", "enabledOnly": false})
        );
        assert!(set.parameters("other", &options).is_none());
    }

    #[test]
    fn names_and_descriptions_follow_discord_rules() {
        assert_eq!(option_name("enabledOnly"), "enabled_only");
        assert_eq!(option_name("memory-id"), "memory-id");
        assert_eq!(option_name("a.b"), "a_b");
        assert_eq!(option_name(&"x".repeat(40)).len(), 32);
        assert!(valid_name("list-reminders"));
        assert!(!valid_name("Memory"));
        assert!(!valid_name("a b"));
        assert!(!valid_name(""));
        let long = "d".repeat(150);
        let cut = description(Some(&long), "x");
        assert_eq!(cut.chars().count(), 100);
        assert!(cut.ends_with('…'));
        assert_eq!(description(Some("  "), "fallback"), "fallback");
    }

    #[test]
    fn unusable_specs_are_reported() {
        let mut bad_name = stats_spec();
        bad_name.name = "Memory Stats".into();
        let mut required_array = stats_spec();
        required_array.name = "x".into();
        required_array.input_schema["required"] = json!(["tags"]);
        let duplicate = stats_spec();
        let (set, errors) = CommandSet::build(&[stats_spec(), bad_name, required_array, duplicate]);
        assert_eq!(set.commands.len(), 1);
        assert_eq!(errors.len(), 3);
        assert!(errors[1].to_string().contains("tags"));
    }

    #[test]
    fn contexts_avoid_duplicates_in_guilds() {
        assert_eq!(global_contexts(true, true), Some(vec![1]));
        assert_eq!(global_contexts(false, true), Some(vec![0, 1]));
        assert_eq!(global_contexts(true, false), None);
        assert_eq!(global_contexts(false, false), Some(vec![0]));
    }
}
