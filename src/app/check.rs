//! The strict check behind both `check-config` and `serve`, so the two always agree: `serve`
//! refuses to start on exactly the errors `check-config` prints.
//!
//! On top of loading and [`Config::validate`] (the file alone, in `config`), it looks at the
//! machine the daemon will run on, with the skill loader and the agent command's lookup: that
//! is why it sits here with the commands rather than in `config`, below both. Relative paths are taken from the current folder, as the daemon takes
//! them. Errors:
//! * `prompts.dir` is a folder holding `system.md`;
//! * `agent.skillsDir` is a folder whose packages pass the skill loader;
//! * every name in a list of skills (`skills.disabled`, `agent.autoApproveSkills`,
//!   `places[].skills`) is a skill found there, with the closest one suggested;
//! * every `places[].persona` is a prompt file or a folder with `system.md`;
//! * every language (`prompts.language`, `places[].language`) has `texts/{language}.md` in
//!   `prompts.dir` (English is built in);
//! * `agent.command` resolves to an executable as the daemon finds it ([`AgentLookup`]: directly,
//!   on `PATH`, or for the default `opencode` in the folder `air-friends setup` installs it to);
//! * every `agent.sandbox.readOnlyPaths` entry exists;
//! * every schedule's place is one it can post in (`schedules::Schedule`) and its prompt file
//!   exists.
//!
//! Warnings (printed by `check-config`, logged by `serve`, never fatal):
//! * `agent.configDir` changed from its default but not a folder: the daemon then starts the
//!   agent without the configuration shipped with air-friends, which works but is rarely meant;
//! * no platform enabled: `serve` answers nobody, which is legitimate for a config only used by
//!   `air-friends chat`;
//! * a language file's skipped sections and the texts it leaves out; an old
//!   `model-failures.md` that is no longer read;
//! * a place that names a disabled skill, or turns on attachments or warm agents while they
//!   are off everywhere (it stays off);
//! * an enabled schedule on a platform that is not enabled (it never runs);
//! * an MCP server that does not accept a connection now, or a stdio one whose program is not
//!   on `PATH` (its tools fail until it does, or is installed);
//! * the operator console served on a listener that is not loopback (plain HTTP).

use std::path::Path;

use crate::config::paths;
use crate::config::{
    Config, ConfigError, ConfigIssue, EnvSource, Loaded, PLATFORMS, base_of, closest,
    is_skill_name, load_lenient, read_file,
};
use crate::setup::agent_lookup::AgentLookup;
use crate::shipped::{Origin, Shipped, ShippedError};
use crate::skills::load_skills;

/// A configuration that passed every check, and what deserves a warning.
#[derive(Debug)]
pub struct Checked {
    /// The effective configuration.
    pub config: Config,
    /// Problems that do not stop the daemon.
    pub warnings: Vec<ConfigIssue>,
    /// Where the unset skills, prompts and agent configuration come from.
    pub shipped: Shipped,
}

/// A configuration that failed the check.
#[derive(Debug, thiserror::Error)]
#[error("{error}")]
pub struct Rejected {
    /// Why: every error found (see [`ConfigError::issues`]).
    pub error: ConfigError,
    /// Warnings found on the way (empty when the file could not be read or parsed).
    pub warnings: Vec<ConfigIssue>,
}

impl From<ConfigError> for Rejected {
    fn from(error: ConfigError) -> Self {
        Rejected {
            error,
            warnings: Vec::new(),
        }
    }
}

/// Reads the file at `path` and runs every check on it.
pub fn check_file(path: &Path, env: &impl EnvSource) -> Result<Checked, Rejected> {
    check_loaded(
        load_lenient(&read_file(path)?, env, Some(&base_of(path)))?,
        env,
    )
}

/// Runs every check on configuration text: the load, [`Config::validate`], and the checks of
/// the machine in this module's header. `PATH`, `XDG_DATA_HOME` and `HOME` are read from `env`.
#[cfg(test)]
pub fn check_str(text: &str, env: &impl EnvSource) -> Result<Checked, Rejected> {
    check_loaded(load_lenient(text, env, None)?, env)
}

fn check_loaded(mut loaded: Loaded, env: &impl EnvSource) -> Result<Checked, Rejected> {
    let mut errors = Vec::new();
    let mut warnings = Vec::new();
    check_machine(
        &loaded.config,
        &AgentLookup::from_env(env),
        &loaded.shipped,
        &mut errors,
        &mut warnings,
    );
    check_key_files(&loaded.config, env, &mut errors);
    if let Some(model) = loaded.config.agent.keyless_default_model(env) {
        warnings.push(ConfigIssue::new(
            "agent.model",
            format!(
                "no model provider key is set: the agent uses OpenCode Zen's free model {model} \
                 (what users write goes to opencode.ai); set a provider's key (e.g. \
                 OPENROUTER_API_KEY) and agent.model to choose another"
            ),
        ));
    }
    let kept = |loaded: &Loaded, issues: Vec<ConfigIssue>| -> Vec<ConfigIssue> {
        issues.into_iter().filter(|i| !loaded.hides(i)).collect()
    };
    let errors = kept(&loaded, errors);
    let warnings = kept(&loaded, warnings);
    loaded.issues.extend(errors);
    if loaded.issues.is_empty() {
        Ok(Checked {
            config: loaded.config,
            warnings,
            shipped: loaded.shipped,
        })
    } else {
        Err(Rejected {
            error: ConfigError::Problems(loaded.issues),
            warnings,
        })
    }
}

/// Every provider key named by `agent.providers.<id>.apiKeyEnv` whose file (`NAME_FILE`, or
/// the systemd credential) cannot be read: an error at that key, naming the file, never a
/// value (a key read as unset would only fail at the first model request).
fn check_key_files(config: &Config, env: &impl EnvSource, errors: &mut Vec<ConfigIssue>) {
    for (id, provider) in &config.agent.providers {
        let name = &provider.api_key_env;
        if name.is_empty() {
            continue;
        }
        if let Some(problem) = env.problem(name) {
            errors.push(ConfigIssue::new(
                format!("agent.providers.{id}.apiKeyEnv"),
                problem,
            ));
        }
    }
}

fn check_machine(
    config: &Config,
    agent_lookup: &AgentLookup,
    shipped: &Shipped,
    errors: &mut Vec<ConfigIssue>,
    warnings: &mut Vec<ConfigIssue>,
) {
    if shipped.origin == Origin::Nowhere
        && let Some((key, ..)) = paths::shipped_keys(config, shipped)
            .into_iter()
            .find(|(_, configured, default)| configured == default)
    {
        errors.push(ConfigIssue::new(key, ShippedError::Nowhere.to_string()));
    }
    let prompts = &config.prompts.dir;
    if !prompts.is_dir() {
        errors.push(ConfigIssue::new(
            "prompts.dir",
            format!(
                "{} is not a folder (it holds system.md and its fragments)",
                prompts.display()
            ),
        ));
    } else if !prompts.join("system.md").is_file() {
        errors.push(ConfigIssue::new(
            "prompts.dir",
            format!("{} has no system.md", prompts.display()),
        ));
    }

    if prompts.is_dir() {
        check_texts(config, errors, warnings);
    }
    check_skills(config, errors, warnings);
    check_personas(config, errors);
    check_place_switches(config, warnings);
    check_schedules(config, errors, warnings);
    check_mcp_reachable(config, agent_lookup.path_var(), warnings);
    check_console_exposure(config, warnings);

    let agent = &config.agent;
    let command = agent.command.trim();
    // An empty command is reported by `validate`.
    if !command.is_empty() && agent_lookup.resolve(command).is_none() {
        errors.push(ConfigIssue::new(
            "agent.command",
            agent_lookup.not_found(command),
        ));
    }

    for (i, path) in agent.sandbox.read_only_paths.iter().enumerate() {
        if !path.exists() {
            errors.push(ConfigIssue::new(
                format!("agent.sandbox.readOnlyPaths.{i}"),
                format!("{} does not exist", path.display()),
            ));
        }
    }

    if agent.config_dir != shipped.agent_config() && !agent.config_dir.is_dir() {
        warnings.push(ConfigIssue::new(
            "agent.configDir",
            format!(
                "{} is not a folder; the agent starts without air-friends' agent configuration",
                agent.config_dir.display()
            ),
        ));
    }

    if !PLATFORMS
        .iter()
        .any(|facts| (facts.enabled)(&config.platforms))
    {
        let switches: Vec<String> = PLATFORMS
            .iter()
            .map(|facts| format!("platforms.{}.enabled", facts.key))
            .collect();
        warnings.push(ConfigIssue::new(
            "platforms",
            format!(
                "no platform is enabled: serve answers nobody (fine for `air-friends chat`); \
                 set {}",
                switches.join(" or ")
            ),
        ));
    }
}

/// Every schedule posts in a place it can post in, on an enabled platform (a warning: it never
/// runs otherwise), with its prompt file there. Its cron and zone are `validate`'s.
fn check_schedules(
    config: &Config,
    errors: &mut Vec<ConfigIssue>,
    warnings: &mut Vec<ConfigIssue>,
) {
    use crate::schedules::{Schedule, ScheduleError};
    for (i, s) in config.schedules.iter().enumerate() {
        let key = format!("schedules.{i}");
        if !s.prompt.as_os_str().is_empty() {
            let path = s.prompt_path(&config.prompts.dir);
            if !path.is_file() {
                errors.push(ConfigIssue::new(
                    format!("{key}.prompt"),
                    format!("{} is not a file (the schedule's task)", path.display()),
                ));
            }
        }
        match Schedule::new(s, &config.prompts.dir) {
            Ok(schedule) => {
                let platform = schedule.spot.platform.as_str();
                let enabled = PLATFORMS
                    .iter()
                    .find(|facts| facts.key == platform)
                    .is_some_and(|facts| (facts.enabled)(&config.platforms));
                if !enabled && s.enabled {
                    warnings.push(ConfigIssue::new(
                        format!("{key}.place"),
                        format!("platforms.{platform}.enabled is off: this schedule never runs"),
                    ));
                }
            }
            // The cron expression and the zone are reported by `validate`, an empty place too.
            Err(ScheduleError::Timetable(_)) => {}
            Err(_) if s.place.trim().is_empty() => {}
            Err(e) => errors.push(ConfigIssue::new(format!("{key}.place"), e.to_string())),
        }
    }
}

/// Every language the configuration names has its texts (`conversation::notices`); a prompts
/// folder of an older version still holding `model-failures.md` is told where its texts go now.
fn check_texts(config: &Config, errors: &mut Vec<ConfigIssue>, warnings: &mut Vec<ConfigIssue>) {
    let prompts = &config.prompts.dir;
    let languages = std::iter::once((
        "prompts.language".to_owned(),
        config.prompts.language.as_str(),
    ))
    .chain(config.places.iter().enumerate().filter_map(|(i, rule)| {
        rule.language
            .as_deref()
            .map(|l| (format!("places.{i}.language"), l))
    }));
    let found = crate::conversation::notices::check_languages(prompts, languages);
    errors.extend(
        found
            .errors
            .into_iter()
            .map(|(key, why)| ConfigIssue::new(key, why)),
    );
    warnings.extend(
        found
            .warnings
            .into_iter()
            .map(|(key, why)| ConfigIssue::new(key, why)),
    );
    let old = prompts.join("model-failures.md");
    if old.is_file() {
        warnings.push(ConfigIssue::new(
            "prompts.dir",
            format!(
                "{} is no longer read: its sections belong in {}/texts/{}.md (docs/PLACES.md)",
                old.display(),
                prompts.display(),
                config.prompts.language
            ),
        ));
    }
}

/// Every `places[].persona` is a prompt file, or a folder holding `system.md`.
fn check_personas(config: &Config, errors: &mut Vec<ConfigIssue>) {
    for (i, rule) in config.places.iter().enumerate() {
        let Some(persona) = &rule.persona else {
            continue;
        };
        let problem = if persona.is_dir() {
            (!persona.join("system.md").is_file())
                .then(|| format!("{} is a folder without system.md", persona.display()))
        } else {
            (!persona.is_file()).then(|| {
                format!(
                    "{} does not exist (a prompt file, or a folder with system.md)",
                    persona.display()
                )
            })
        };
        if let Some(problem) = problem {
            errors.push(ConfigIssue::new(format!("places.{i}.persona"), problem));
        }
    }
}

/// The console on a listener others can reach: its cookie and pages would cross the network
/// in plain HTTP.
fn check_console_exposure(config: &Config, warnings: &mut Vec<ConfigIssue>) {
    let host = config.health.host.trim_matches(['[', ']']);
    let loopback = host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    if config.admin.enabled && !loopback {
        warnings.push(ConfigIssue::new(
            "admin.enabled",
            format!(
                "the console is served in plain HTTP on {host}: keep health.host on 127.0.0.1 and use an SSH tunnel, or put TLS in front"
            ),
        ));
    }
}

/// How long `check_mcp_reachable` waits for one MCP server to accept a connection.
const MCP_CONNECT_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// Every stdio MCP server's program is on `path_var`, and every remote one accepts a
/// connection now (a warning otherwise: it may be down for a while,
/// and the agent's calls to it fail until it is back; nothing of the daemon waits for it).
fn check_mcp_reachable(config: &Config, path_var: Option<&str>, warnings: &mut Vec<ConfigIssue>) {
    use std::net::{TcpStream, ToSocketAddrs};
    for (i, server) in config.mcp.servers.iter().enumerate() {
        if server.kind == crate::config::McpKind::Stdio {
            let program = server
                .command
                .first()
                .map(String::as_str)
                .unwrap_or_default();
            if !program.is_empty()
                && crate::command_path::resolve_command(program, path_var).is_none()
            {
                warnings.push(ConfigIssue::new(
                    format!("mcp.servers.{i}.command.0"),
                    format!(
                        "{program:?} is not an executable on PATH: the agent's calls to {:?} fail until it is installed",
                        server.name
                    ),
                ));
            }
            continue;
        }
        let Ok(url) = reqwest::Url::parse(&server.url) else {
            continue; // reported by `validate`
        };
        let (Some(host), Some(port)) = (url.host_str(), url.port_or_known_default()) else {
            continue;
        };
        let host = host.trim_matches(['[', ']']);
        let reached = (host, port)
            .to_socket_addrs()
            .map(|addrs| {
                addrs
                    .into_iter()
                    .any(|a| TcpStream::connect_timeout(&a, MCP_CONNECT_WAIT).is_ok())
            })
            .unwrap_or(false);
        if !reached {
            warnings.push(ConfigIssue::new(
                format!("mcp.servers.{i}.url"),
                format!(
                    "{host}:{port} does not accept connections now: the agent's calls to {:?} fail until it does",
                    server.name
                ),
            ));
        }
    }
}

/// A rule that turns on what is off everywhere: it stays off, which is rarely meant.
fn check_place_switches(config: &Config, warnings: &mut Vec<ConfigIssue>) {
    for (i, rule) in config.places.iter().enumerate() {
        for (key, on_here, global, on) in [
            (
                "attachments",
                rule.attachments,
                "attachments.enabled",
                config.attachments.enabled,
            ),
            (
                "warm",
                rule.warm,
                "agent.warm.enabled",
                config.agent.warm.enabled,
            ),
            (
                "voiceReplies",
                rule.voice_replies,
                "speech",
                config.speech.is_some(),
            ),
        ] {
            if on_here == Some(true) && !on {
                let off = if global == "speech" {
                    "unset".to_owned()
                } else {
                    "false".to_owned()
                };
                warnings.push(ConfigIssue::new(
                    format!("places.{i}.{key}"),
                    format!("true has no effect while {global} is {off}"),
                ));
            }
        }
    }
}

/// `agent.skillsDir` loads, and every list naming skills names loaded ones; a place that
/// names a skill the configuration disables gets a warning (it is not used there either).
fn check_skills(config: &Config, errors: &mut Vec<ConfigIssue>, warnings: &mut Vec<ConfigIssue>) {
    let dir = &config.agent.skills_dir;
    if !dir.is_dir() {
        errors.push(ConfigIssue::new(
            "agent.skillsDir",
            format!(
                "{} is not a folder (it holds one <name>/SKILL.md package per skill)",
                dir.display()
            ),
        ));
        return;
    }
    let skills = match load_skills(dir) {
        Ok(skills) => skills,
        Err(e) => {
            errors.push(ConfigIssue::new("agent.skillsDir", e.to_string()));
            return;
        }
    };
    let mut names: Vec<&str> = skills.names().collect();
    names.sort_unstable();
    let place_lists = config.places.iter().enumerate().filter_map(|(i, rule)| {
        let list = rule.skills.as_ref()?;
        Some((format!("places.{i}.skills"), list))
    });
    let lists = [
        ("skills.disabled".to_owned(), &config.skills.disabled),
        (
            "agent.autoApproveSkills".to_owned(),
            &config.agent.auto_approve_skills,
        ),
    ]
    .into_iter()
    .chain(place_lists);
    for (key, list) in lists {
        for (i, name) in list.iter().enumerate() {
            // A malformed name is reported by `validate`.
            if !is_skill_name(name) {
                continue;
            }
            if skills.get(name).is_some() {
                if key.starts_with("places.") && !config.skill_enabled(name) {
                    warnings.push(ConfigIssue::new(
                        format!("{key}.{i}"),
                        format!("{name} is disabled by the configuration, so not used here either"),
                    ));
                }
                continue;
            }
            let hint = match closest(name, &names) {
                Some(best) => format!("did you mean `{best}`?"),
                None if names.is_empty() => "that folder has no skills".to_owned(),
                None => format!("skills there: {}", names.join(", ")),
            };
            errors.push(ConfigIssue::new(
                format!("{key}.{i}"),
                format!("no skill {name:?} in {}; {hint}", dir.display()),
            ));
        }
    }
}

#[cfg(test)]
mod tests;
