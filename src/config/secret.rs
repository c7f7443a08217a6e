//! A string that must never be printed: platform tokens, API keys.
//!
//! `Debug`, `Display` and `Serialize` all print `***` (or an empty marker when unset), so a
//! secret cannot leak through logs, `check-config` output or error messages by accident. The
//! value is reachable only through [`Secret::expose`], which makes every use greppable.
//!
//! A secret's *value* can still end up in another key: `${DISCORD_TOKEN}` interpolated into a
//! URL, a provider key interpolated into `agent.env`. [`known_secret_values`] lists every value
//! the daemon treats as secret (for the log redactor too), and [`masked_yaml`] prints the
//! effective configuration with every string that contains one of them masked whole.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_yaml::Value;

use super::{Config, EnvSource};

/// What a set secret prints as.
pub const MASK: &str = "***";

/// A secret string with a redacting `Debug`, `Display` and `Serialize`.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a value.
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The real value. Call only where the secret is actually used (an HTTP header, a login).
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// True when no value is configured.
    pub fn is_empty(&self) -> bool {
        self.0.trim().is_empty()
    }

    fn masked(&self) -> &'static str {
        if self.is_empty() { "" } else { MASK }
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Secret({:?})", self.masked())
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.masked())
    }
}

impl Serialize for Secret {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.masked())
    }
}

impl<'de> Deserialize<'de> for Secret {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer).map(Secret)
    }
}

/// Every secret value the daemon knows: the configured secret fields (platform tokens, after
/// environment overrides) and the values of the provider API key variables named in
/// `agent.providerEnvVars` or in an `agent.providers` entry's `apiKeyEnv` that are set in
/// `env`. Empty values are left out.
pub fn known_secret_values(config: &Config, env: &impl EnvSource) -> Vec<String> {
    let mut values = config.secret_values();
    let gateway_keys = config
        .agent
        .providers
        .values()
        .map(|p| &p.api_key_env)
        .chain(config.memory.embeddings.iter().map(|e| &e.api_key_env))
        .chain(
            config
                .attachments
                .transcription
                .iter()
                .map(|t| &t.api_key_env),
        )
        .filter(|name| !name.is_empty());
    // MCP servers' headers are credentials by design (their values came from `${VAR}`s), and
    // so are a stdio server's variables.
    let mcp = config.mcp.servers.iter();
    for value in mcp.flat_map(|s| s.headers.values().chain(s.env.values())) {
        if !value.trim().is_empty() && !values.contains(value) {
            values.push(value.clone());
        }
    }
    for name in config.agent.provider_env_vars.iter().chain(gateway_keys) {
        if let Some(value) = env.var(name).filter(|v| !v.trim().is_empty())
            && !values.contains(&value)
        {
            values.push(value);
        }
    }
    values
}

/// The effective configuration as YAML (what `check-config` prints): secret fields print `***`,
/// and so does every other string value that contains a secret value anywhere in it.
pub fn masked_yaml(config: &Config, env: &impl EnvSource) -> Result<String, serde_yaml::Error> {
    let secrets = known_secret_values(config, env);
    let mut tree = serde_yaml::to_value(config)?;
    mask_containing(&mut tree, &secrets);
    serde_yaml::to_string(&tree)
}

/// Replaces every string in `value` that contains one of `secrets` with [`MASK`].
fn mask_containing(value: &mut Value, secrets: &[String]) {
    match value {
        Value::String(text) => {
            if secrets.iter().any(|s| text.contains(s.as_str())) {
                *text = MASK.to_owned();
            }
        }
        Value::Sequence(items) => {
            for item in items {
                mask_containing(item, secrets);
            }
        }
        Value::Mapping(map) => {
            for (_, item) in map.iter_mut() {
                mask_containing(item, secrets);
            }
        }
        Value::Tagged(tagged) => mask_containing(&mut tagged.value, secrets),
        Value::Null | Value::Bool(_) | Value::Number(_) => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::load_str;

    fn env(name: &str) -> Option<String> {
        match name {
            "DISCORD_TOKEN" => Some("discord-token-value".into()),
            "OPENAI_API_KEY" => Some("sk-openai-value".into()),
            "PLAIN" => Some("not-a-secret".into()),
            _ => None,
        }
    }

    #[test]
    fn values_containing_a_secret_are_masked_wherever_interpolated() {
        let text = "platforms:\n  discord:\n    enabled: true\n\
                    agent:\n  model: \"p/x-${DISCORD_TOKEN}-y\"\n  env:\n    \
                    OPENAI_API_KEY: ${OPENAI_API_KEY}\n    KEY_URL: \"https://h/?k=${OPENAI_API_KEY}\"\n    \
                    OTHER: ${PLAIN}\n  args: [\"--x=${DISCORD_TOKEN}\", \"acp\"]\n";
        let config = load_str(text, &env).expect("valid");
        let yaml = masked_yaml(&config, &env).expect("yaml");
        for secret in ["discord-token-value", "sk-openai-value"] {
            assert!(!yaml.contains(secret), "{secret} leaked:\n{yaml}");
        }
        let tree: Value = serde_yaml::from_str(&yaml).expect("parse");
        assert_eq!(tree["agent"]["model"], MASK);
        assert_eq!(tree["agent"]["env"]["OPENAI_API_KEY"], MASK);
        assert_eq!(tree["agent"]["env"]["KEY_URL"], MASK);
        assert_eq!(tree["agent"]["args"][0], MASK);
        assert_eq!(
            tree["agent"]["args"][1], "acp",
            "other values print as they are"
        );
        assert_eq!(tree["agent"]["env"]["OTHER"], "not-a-secret");
        assert_eq!(tree["platforms"]["discord"]["token"], MASK);
    }

    #[test]
    fn known_secret_values_include_provider_keys_from_the_environment() {
        let config = load_str("", &env).expect("valid");
        let values = known_secret_values(&config, &env);
        assert!(
            values.contains(&"discord-token-value".to_owned()),
            "{values:?}"
        );
        assert!(values.contains(&"sk-openai-value".to_owned()), "{values:?}");
        assert!(!values.contains(&"not-a-secret".to_owned()));
    }

    #[test]
    fn known_secret_values_include_gateway_provider_keys() {
        let env = |name: &str| (name == "LOCAL_LLM_KEY").then(|| "sk-local-value".to_owned());
        let text = "agent:\n  providerEnvVars: []\n  providers:\n    local:\n      \
                    baseUrl: http://127.0.0.1:8000/v1\n      apiKeyEnv: LOCAL_LLM_KEY\n";
        let config = load_str(text, &env).expect("valid");
        assert_eq!(known_secret_values(&config, &env), vec!["sk-local-value"]);
    }

    #[test]
    fn known_secret_values_include_the_speech_and_embedding_services_keys() {
        let env = |name: &str| match name {
            "VOICE_KEY" => Some("sk-voice-value".to_owned()),
            "EMBED_KEY" => Some("sk-embed-value".to_owned()),
            _ => None,
        };
        let text = "agent:\n  providerEnvVars: []\n  providers: {}\n\
                    attachments:\n  transcription:\n    baseUrl: https://speech.example/v1\n    \
                    apiKeyEnv: VOICE_KEY\n\
                    memory:\n  embeddings:\n    baseUrl: https://embed.example/v1\n    \
                    apiKeyEnv: EMBED_KEY\n    model: m\n    dimensions: 8\n";
        let config = load_str(text, &env).expect("valid");
        let mut values = known_secret_values(&config, &env);
        values.sort();
        assert_eq!(values, vec!["sk-embed-value", "sk-voice-value"]);
    }

    #[test]
    fn debug_display_and_serialize_mask_the_value() {
        let s = Secret::new("hunter2-token");
        assert_eq!(format!("{s:?}"), "Secret(\"***\")");
        assert_eq!(s.to_string(), "***");
        assert_eq!(serde_json::to_string(&s).unwrap(), "\"***\"");
        assert_eq!(s.expose(), "hunter2-token");
    }

    #[test]
    fn empty_secret_prints_empty() {
        let s = Secret::default();
        assert!(s.is_empty());
        assert_eq!(s.to_string(), "");
    }
}
