//! The agent's environment, built from scratch for every session.
//!
//! Nothing is inherited wholesale. The agent gets a fixed list of basic variables, the
//! session's identity for the skill client, provider keys and skill credentials that are
//! explicitly listed, and the static `agent.env` map. Platform tokens and other daemon secrets
//! are removed even if an operator lists them by mistake.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::config::{AgentConfig, EnvSource};

/// Copied from the daemon's environment when set.
const BASE_VARS: &[&str] = &[
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "TERM", "LANG", "LC_ALL", "TZ",
];

/// Proxy variables, copied when set (the agent then shares the daemon's network); inside a
/// sandbox without network [`sandbox_proxy_env`] replaces them.
const PROXY_VARS: &[&str] = &[
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "ALL_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "all_proxy",
];

/// Never passed to the agent, whatever the configuration says — besides every platform's
/// secret variables ([`crate::config::platform_secret_vars`]): the daemon's configuration path
/// and systemd's channels, and the variables that make a shell or the dynamic linker run code the permission
/// gate never saw (`BASH_ENV`/`ENV` are sourced by every `bash -c`/`sh -c`, `BASH_FUNC_*`
/// imports functions that can shadow a program, `LD_PRELOAD` injects a library).
pub const FORBIDDEN_VARS: &[&str] = &[
    "AIR_FRIENDS_CONFIG",
    "NOTIFY_SOCKET",
    "WATCHDOG_USEC",
    "WATCHDOG_PID",
    "BASH_ENV",
    "ENV",
    "LD_PRELOAD",
    "LD_AUDIT",
];

/// Set for every agent, over anything the configuration says: OpenCode must ignore project
/// files in its working directory (`opencode.json`, `.opencode/`, `AGENTS.md`, `CLAUDE.md`)
/// and skills outside the ones the daemon lists (`.claude/skills/` and the like).
/// The workspace is the agent's own to write, so a hijacked session could otherwise leave a
/// configuration that lifts `bash: ask` (no more permission gate) or instructions that steer
/// every later session of that user (`tests/opencode_e2e.rs`
/// `files_an_agent_left_in_its_workspace_cannot_instruct_or_reconfigure_opencode`).
pub const AGENT_POLICY_ENV: &[(&str, &str)] = &[
    ("OPENCODE_DISABLE_PROJECT_CONFIG", "1"),
    ("OPENCODE_DISABLE_EXTERNAL_SKILLS", "1"),
    ("OPENCODE_DISABLE_CLAUDE_CODE_SKILLS", "1"),
];

/// Set for every agent unless `agent.env` sets the variable itself: JavaScriptCore (OpenCode
/// runs on Bun) sizes its heap as if the machine had 1 GiB of memory, which keeps an idle
/// warm OpenCode at about 540 MiB instead of 585 (−8 %) for about 8 % more CPU time over a
/// start and two turns, replies as fast (`docs/PERFORMANCE.md`, "An idle warm agent's
/// memory"). Less is much dearer: 512 MiB saves 17 % for 64 % more CPU and slower replies.
/// `BUN_JSC_forceRAMSize: "0"` in `agent.env` restores Bun's own sizing.
pub const AGENT_DEFAULT_ENV: &[(&str, &str)] = &[("BUN_JSC_forceRAMSize", "1073741824")];

/// Prefix of exported bash functions (`BASH_FUNC_name%%`), never passed.
const BASH_FUNCTION_PREFIX: &str = "BASH_FUNC_";

/// What identifies one agent session to the skill client.
#[derive(Debug, Clone)]
pub struct SessionIdentity {
    /// The Skill API session id.
    pub session_id: String,
    /// The caller token (a secret: never logged).
    pub token: String,
    /// Base URL of the Skill API, e.g. `http://127.0.0.1:3001`.
    pub api_url: String,
}

/// The daemon's model gateway as this session's agent reaches it: the agent is pointed at it
/// with its caller token as the API key, and the real provider keys stay in the daemon.
#[derive(Debug, Clone, Copy)]
pub struct ModelGateway<'a> {
    /// Root of this session's gateway routes, e.g. `http://127.0.0.1:3001/llm/<session id>`;
    /// provider `p` is served under `{route}/{p}`.
    pub route: &'a str,
    /// The providers it serves: (provider id, environment variable holding its key). The key
    /// variables are never passed to the agent.
    pub providers: &'a [(String, String)],
}

/// Everything the environment is built from.
#[derive(Debug)]
pub struct EnvInputs<'a> {
    /// Agent configuration (provider keys, allowed vars, static env, config dir).
    pub agent: &'a AgentConfig,
    /// The session's identity.
    pub identity: &'a SessionIdentity,
    /// The user's workspace (cwd of the agent).
    pub workspace: &'a Path,
    /// This executable, for the skill scripts (`AIR_FRIENDS_BIN`).
    pub air_friends_bin: &'a Path,
    /// The skills folder (absolute), for the skill client.
    pub skills_dir: &'a Path,
    /// Environment variables named by enabled skills' `credentials`.
    pub skill_credentials: &'a [String],
    /// Secret values the daemon holds; any variable whose value equals one is dropped.
    pub secret_values: &'a [String],
    /// The model gateway, when the daemon serves the providers' APIs itself.
    pub gateway: Option<ModelGateway<'a>>,
}

/// Builds the agent's environment from `daemon_env` and `inputs`.
pub fn build_agent_env(
    inputs: &EnvInputs<'_>,
    daemon_env: &impl EnvSource,
) -> BTreeMap<String, String> {
    let mut env = copied_vars(inputs, daemon_env);
    for (name, value) in AGENT_DEFAULT_ENV {
        env.insert((*name).to_owned(), (*value).to_owned());
    }
    for (k, v) in &inputs.agent.env {
        env.insert(k.clone(), v.clone());
    }
    set_session_vars(&mut env, inputs);
    for (name, value) in AGENT_POLICY_ENV {
        env.insert((*name).to_owned(), (*value).to_owned());
    }
    remove_forbidden(&mut env);
    keep_absolute_path(&mut env);
    remove_secret_carriers(&mut env, inputs.secret_values);
    env
}

/// The variables copied from the daemon's environment when set: the basic and proxy ones, and
/// the listed provider keys, allowed variables and skill credentials (but no key of a provider
/// the gateway serves).
fn copied_vars(inputs: &EnvInputs<'_>, daemon_env: &impl EnvSource) -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    let copy = |env: &mut BTreeMap<String, String>, name: &str| {
        if let Some(value) = daemon_env.var(name).filter(|v| !v.is_empty()) {
            env.insert(name.to_owned(), value);
        }
    };
    for name in BASE_VARS.iter().chain(PROXY_VARS) {
        copy(&mut env, name);
    }
    let gateway_keys: Vec<&str> = inputs
        .gateway
        .iter()
        .flat_map(|g| g.providers.iter().map(|(_, var)| var.as_str()))
        .collect();
    for name in inputs
        .agent
        .provider_env_vars
        .iter()
        .chain(&inputs.agent.sandbox.allowed_env_vars)
        .chain(inputs.skill_credentials)
    {
        if !gateway_keys.contains(&name.as_str()) {
            copy(&mut env, name);
        }
    }
    env
}

/// OpenCode's configuration, the session's folders and identity for the skill client, and
/// where this executable and the skills are.
fn set_session_vars(env: &mut BTreeMap<String, String>, inputs: &EnvInputs<'_>) {
    let config_file: PathBuf = inputs.agent.config_dir.join("opencode.json");
    if config_file.is_file() {
        env.insert(
            "OPENCODE_CONFIG".into(),
            absolute(&config_file).display().to_string(),
        );
    }
    let inline = opencode_inline_config(
        env.get("OPENCODE_CONFIG_CONTENT").map(String::as_str),
        inputs,
    );
    env.insert("OPENCODE_CONFIG_CONTENT".into(), inline);
    let workspace = inputs.workspace.display().to_string();
    env.insert(
        "TMPDIR".into(),
        inputs.workspace.join("tmp").display().to_string(),
    );
    env.insert("AGENT_WORKSPACE".into(), workspace);
    env.insert("SESSION_ID".into(), inputs.identity.session_id.clone());
    env.insert("SKILL_API_TOKEN".into(), inputs.identity.token.clone());
    env.insert("SKILL_API_URL".into(), inputs.identity.api_url.clone());
    env.insert(
        "AIR_FRIENDS_BIN".into(),
        inputs.air_friends_bin.display().to_string(),
    );
    env.insert(
        "AIR_FRIENDS_SKILLS_DIR".into(),
        inputs.skills_dir.display().to_string(),
    );
}

/// Drops every platform's secret variables, [`FORBIDDEN_VARS`] and exported shell functions,
/// with a warning for each.
fn remove_forbidden(env: &mut BTreeMap<String, String>) {
    for name in crate::config::platform_secret_vars().chain(FORBIDDEN_VARS.iter().copied()) {
        if env.remove(name).is_some() {
            tracing::warn!(var = name, "refused to pass this variable to the agent");
        }
    }
    env.retain(|name, _| {
        let function = name.starts_with(BASH_FUNCTION_PREFIX);
        if function {
            tracing::warn!(var = %name, "refused to pass an exported shell function to the agent");
        }
        !function
    });
}

/// Only absolute PATH entries: with `.` or a relative folder on PATH, a bare `sh` or a
/// command-based skill would resolve to a file the agent wrote in its workspace.
fn keep_absolute_path(env: &mut BTreeMap<String, String>) {
    if let Some(path) = env.get("PATH") {
        let kept: Vec<&str> = path.split(':').filter(|dir| dir.starts_with('/')).collect();
        let kept = kept.join(":");
        if kept != *path {
            tracing::warn!("relative PATH entries dropped from the agent's environment");
        }
        env.insert("PATH".into(), kept);
    }
}

/// Drops every variable whose value contains one of the daemon's `secret_values`.
fn remove_secret_carriers(env: &mut BTreeMap<String, String>, secret_values: &[String]) {
    env.retain(|name, value| {
        let leaked = secret_values
            .iter()
            .any(|s| !s.is_empty() && value.contains(s.as_str()));
        if leaked {
            tracing::warn!(var = %name, "variable carries a daemon secret; not passed to the agent");
        }
        !leaked
    });
}

/// Where loopback stays direct when the agent has an HTTPS proxy: the Skill API and the model
/// gateway on `127.0.0.1`.
pub const SANDBOX_NO_PROXY: &str = "127.0.0.1,localhost";

/// The proxy variables of an agent in a sandbox without network (see
/// `Sandbox::adjust_network_env`): every one copied from the daemon or set in `agent.env` is
/// removed, since it names an address the sandbox cannot reach; with `egress_proxy` (the
/// egress relay's URL) `HTTPS_PROXY`/`https_proxy` point at it and `NO_PROXY`/`no_proxy`
/// keep loopback direct. `HTTP_PROXY` stays unset: the egress proxy tunnels (CONNECT) only,
/// and plain HTTP would not be forwarded.
pub fn sandbox_proxy_env(env: &mut BTreeMap<String, String>, egress_proxy: Option<&str>) {
    for name in PROXY_VARS {
        env.remove(*name);
    }
    if let Some(url) = egress_proxy {
        for name in ["HTTPS_PROXY", "https_proxy"] {
            env.insert(name.to_owned(), url.to_owned());
        }
        for name in ["NO_PROXY", "no_proxy"] {
            env.insert(name.to_owned(), SANDBOX_NO_PROXY.to_owned());
        }
    }
}

/// OpenCode's inline configuration (`OPENCODE_CONFIG_CONTENT`, merged by OpenCode over
/// `OPENCODE_CONFIG`): the operator's own inline JSON from `agent.env` if any, plus the skills
/// folder for the skill tool (unless the operator lists skill paths), plus — for every provider
/// the gateway serves — `baseURL` on the gateway and the session's caller token as the API key,
/// overriding whatever the operator set for them. Inline JSON that does not parse is replaced
/// (with a warning) rather than passed on half-understood.
fn opencode_inline_config(operator: Option<&str>, inputs: &EnvInputs<'_>) -> String {
    use serde_json::{Map, Value, json};
    let mut root = match operator.map(serde_json::from_str::<Value>) {
        None => Map::new(),
        Some(Ok(Value::Object(map))) => map,
        Some(_) => {
            tracing::warn!("agent.env.OPENCODE_CONFIG_CONTENT is not a JSON object; ignored");
            Map::new()
        }
    };
    root.entry("skills")
        .or_insert_with(|| json!({"paths": [inputs.skills_dir.display().to_string()]}));
    if let Some(gateway) = inputs.gateway {
        let providers = object_entry(&mut root, "provider");
        for (id, _) in gateway.providers {
            let options = object_entry(object_entry(providers, id), "options");
            options.insert("baseURL".into(), json!(format!("{}/{id}", gateway.route)));
            options.insert("apiKey".into(), json!(inputs.identity.token));
        }
    }
    Value::Object(root).to_string()
}

/// The object under `key`, created (or replacing a non-object) when needed.
fn object_entry<'m>(
    map: &'m mut serde_json::Map<String, serde_json::Value>,
    key: &str,
) -> &'m mut serde_json::Map<String, serde_json::Value> {
    use serde_json::{Map, Value};
    let slot = map
        .entry(key.to_owned())
        .or_insert_with(|| Value::Object(Map::new()));
    if !slot.is_object() {
        *slot = Value::Object(Map::new());
    }
    match slot {
        Value::Object(m) => m,
        _ => unreachable!("the slot was just made an object"),
    }
}

fn absolute(p: &Path) -> PathBuf {
    std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// The environment of session `sess1` (caller token `tok`) in `/ws/discord/42`, without the
    /// gateway, built from `agent` with `daemon` as the daemon's environment.
    fn session_env(
        agent: &AgentConfig,
        daemon: &impl EnvSource,
        skill_credentials: &[String],
        secret_values: &[String],
    ) -> BTreeMap<String, String> {
        let identity = SessionIdentity {
            session_id: "sess1".into(),
            token: "tok".into(),
            api_url: "http://127.0.0.1:3001".into(),
        };
        build_agent_env(
            &EnvInputs {
                agent,
                identity: &identity,
                workspace: Path::new("/ws/discord/42"),
                air_friends_bin: Path::new("/usr/local/bin/air-friends"),
                skills_dir: Path::new("/opt/af/skills"),
                skill_credentials,
                secret_values,
                gateway: None,
            },
            daemon,
        )
    }

    #[test]
    fn builds_from_scratch_and_never_passes_daemon_secrets() {
        let daemon: HashMap<&str, &str> = HashMap::from([
            ("PATH", "/usr/bin:.:bin:/bin:"),
            ("HOME", "/home/af"),
            ("BASH_ENV", "/ws/evil.sh"),
            ("BASH_FUNC_skills%%", "() { id; }"),
            ("DISCORD_TOKEN", "discord-secret-value"),
            ("MISSKEY_TOKEN", "misskey-secret-value"),
            ("OPENROUTER_API_KEY", "or-key"),
            ("RANDOM_DAEMON_VAR", "x"),
            ("WEATHER_API_KEY", "weather"),
            ("SNEAKY", "prefix-discord-secret-value"),
            ("HTTPS_PROXY", "http://proxy:3128"),
        ]);
        let lookup = |n: &str| daemon.get(n).map(|s| s.to_string());
        let mut agent = AgentConfig::default();
        agent.sandbox.allowed_env_vars = vec![
            "DISCORD_TOKEN".into(),
            "SNEAKY".into(),
            "BASH_ENV".into(),
            "BASH_FUNC_skills%%".into(),
        ];
        agent.env.insert("LD_PRELOAD".into(), "/ws/evil.so".into());
        agent
            .env
            .insert("OPENCODE_DISABLE_PROJECT_CONFIG".into(), "0".into());
        agent
            .env
            .insert("OPENCODE_DISABLE_AUTOUPDATE".into(), "1".into());
        let creds = vec!["WEATHER_API_KEY".to_owned()];
        let secrets = vec![
            "discord-secret-value".to_owned(),
            "misskey-secret-value".to_owned(),
        ];
        let env = session_env(&agent, &lookup, &creds, &secrets);
        assert_eq!(env["PATH"], "/usr/bin:/bin");
        assert_eq!(env["OPENROUTER_API_KEY"], "or-key");
        assert_eq!(env["WEATHER_API_KEY"], "weather");
        assert_eq!(env["HTTPS_PROXY"], "http://proxy:3128");
        assert_eq!(env["TMPDIR"], "/ws/discord/42/tmp");
        assert_eq!(env["SESSION_ID"], "sess1");
        assert_eq!(env["SKILL_API_TOKEN"], "tok");
        assert_eq!(env["OPENCODE_DISABLE_AUTOUPDATE"], "1");
        assert_eq!(
            env["OPENCODE_CONFIG_CONTENT"],
            r#"{"skills":{"paths":["/opt/af/skills"]}}"#
        );
        assert!(!env.contains_key("RANDOM_DAEMON_VAR"));
        assert!(!env.contains_key("DISCORD_TOKEN"));
        assert!(!env.contains_key("MISSKEY_TOKEN"));
        assert!(!env.contains_key("SNEAKY"));
        assert_eq!(
            env["OPENCODE_DISABLE_PROJECT_CONFIG"], "1",
            "the policy wins"
        );
        for shell_code in ["BASH_ENV", "BASH_FUNC_skills%%", "LD_PRELOAD"] {
            assert!(
                !env.contains_key(shell_code),
                "{shell_code} reached the agent"
            );
        }
        for v in env.values() {
            assert!(!v.contains("discord-secret-value") && !v.contains("misskey-secret-value"));
        }
    }

    /// Whatever platform is added: its secret variables never reach an agent, even when the
    /// operator lists them as allowed or sets them in `agent.env`.
    #[test]
    fn no_platforms_secret_reaches_the_agent() {
        let vars: Vec<&str> = crate::config::platform_secret_vars().collect();
        assert!(!vars.is_empty());
        let lookup = |n: &str| vars.contains(&n).then(|| format!("secret-of-{n}"));
        let mut agent = AgentConfig::default();
        agent.sandbox.allowed_env_vars = vars.iter().map(|v| (*v).to_owned()).collect();
        for var in &vars {
            agent.env.insert((*var).to_owned(), "set-by-config".into());
        }
        let env = session_env(&agent, &lookup, &[], &[]);
        for var in vars {
            assert!(!env.contains_key(var), "{var} reached the agent");
        }
    }

    #[test]
    fn gateway_providers_get_the_gateway_url_and_the_session_token_never_the_key() {
        let daemon: HashMap<&str, &str> = HashMap::from([
            ("PATH", "/usr/bin"),
            ("OPENROUTER_API_KEY", "sk-or-real-key"),
            ("GEMINI_API_KEY", "gem-key"),
        ]);
        let lookup = |n: &str| daemon.get(n).map(|s| s.to_string());
        let mut agent = AgentConfig::default();
        agent.env.insert(
            "OPENCODE_CONFIG_CONTENT".into(),
            r#"{"model":"openrouter/x","provider":{"openrouter":{"options":{"apiKey":"sk-or-real-key","timeout":5}}}}"#.into(),
        );
        let identity = SessionIdentity {
            session_id: "s1".into(),
            token: "caller-token".into(),
            api_url: "http://127.0.0.1:3001".into(),
        };
        let providers = vec![("openrouter".to_owned(), "OPENROUTER_API_KEY".to_owned())];
        let env = build_agent_env(
            &EnvInputs {
                agent: &agent,
                identity: &identity,
                workspace: Path::new("/ws/u"),
                air_friends_bin: Path::new("/bin/af"),
                skills_dir: Path::new("/opt/skills"),
                skill_credentials: &[],
                secret_values: &["sk-or-real-key".to_owned()],
                gateway: Some(ModelGateway {
                    route: "http://127.0.0.1:3001/llm/s1",
                    providers: &providers,
                }),
            },
            &lookup,
        );
        assert!(
            !env.contains_key("OPENROUTER_API_KEY"),
            "the gateway's key reached the agent"
        );
        assert_eq!(
            env["GEMINI_API_KEY"], "gem-key",
            "keys the gateway does not serve still pass"
        );
        let inline: serde_json::Value =
            serde_json::from_str(&env["OPENCODE_CONFIG_CONTENT"]).unwrap();
        assert_eq!(
            inline["model"], "openrouter/x",
            "the operator's settings are kept"
        );
        let options = &inline["provider"]["openrouter"]["options"];
        assert_eq!(
            options["baseURL"],
            "http://127.0.0.1:3001/llm/s1/openrouter"
        );
        assert_eq!(options["apiKey"], "caller-token");
        assert_eq!(options["timeout"], 5);
        assert_eq!(inline["skills"]["paths"][0], "/opt/skills");
        assert!(env.values().all(|v| !v.contains("sk-or-real-key")));
    }

    /// The memory setting every agent gets, unless the operator's `agent.env` names it.
    #[test]
    fn agents_get_the_heap_setting_unless_the_operator_sets_their_own() {
        let nothing = |_: &str| None::<String>;
        let build = |agent: &AgentConfig| session_env(agent, &nothing, &[], &[]);
        let mut agent = AgentConfig::default();
        assert_eq!(build(&agent)["BUN_JSC_forceRAMSize"], "1073741824");
        agent.env.insert("BUN_JSC_forceRAMSize".into(), "0".into());
        assert_eq!(build(&agent)["BUN_JSC_forceRAMSize"], "0");
    }
}
