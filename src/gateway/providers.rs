//! The providers the gateway serves, resolved once at start from `agent.providers`: parsed
//! upstream URLs, and each key read from the daemon's environment into a [`Secret`].
//!
//! Reading keys once means a key set or changed later takes a restart, and the key never has
//! to be looked up (or copied around) per request. A provider whose key variable is unset stays
//! listed: its requests answer 503 and the log says which variable to set, unless it has an
//! anonymous key (OpenCode Zen's `public`), which is sent instead. A provider the operator did
//! not choose (`AgentConfig::served_providers`) stays listed too, marked not served: its
//! requests answer 404.

use std::collections::{BTreeMap, BTreeSet};

use axum::http::HeaderName;
use reqwest::Url;

use crate::config::{AuthHeader, EnvSource, ProviderConfig, Secret};

/// Why the provider table could not be built (configuration that skipped validation).
#[derive(Debug, thiserror::Error)]
pub enum ProviderError {
    /// `baseUrl` does not parse.
    #[error("agent.providers.{id}.baseUrl: {url:?} is not a URL")]
    BaseUrl {
        /// The provider id.
        id: String,
        /// The configured value.
        url: String,
    },
    /// A header name that HTTP does not allow.
    #[error("agent.providers.{id}: {name:?} is not a header name")]
    HeaderName {
        /// The provider id.
        id: String,
        /// The configured value.
        name: String,
    },
}

/// How the key is put on the upstream request.
#[derive(Debug, Clone)]
pub(crate) enum KeyHeader {
    /// `Authorization: Bearer <key>`.
    Bearer,
    /// `<name>: <key>`.
    Named(HeaderName),
}

/// One resolved provider.
#[derive(Debug)]
pub(crate) struct Provider {
    /// The configured id (also the metric label).
    pub(crate) id: String,
    /// Upstream root.
    pub(crate) base_url: Url,
    /// `base_url`'s path without its trailing slash (empty for the root).
    base_path: String,
    /// The variable the key comes from (for the log line when it is unset).
    pub(crate) key_env: String,
    /// The key; `None` when `key_env` is unset or empty in the daemon's environment.
    pub(crate) key: Option<Secret>,
    /// Whether the provider is configured to send no key at all (`apiKeyEnv: ""`).
    pub(crate) keyless: bool,
    /// Whether `key` is the provider's anonymous key (`anonymousKey`, `key_env` unset).
    pub(crate) anonymous: bool,
    /// Whether the agent may use it (`AgentConfig::served_providers`).
    pub(crate) served: bool,
    pub(crate) key_header: KeyHeader,
    /// Client headers forwarded besides `content-type` and `accept`.
    pub(crate) pass_headers: Vec<HeaderName>,
}

/// The provider table, by id.
#[derive(Debug, Default)]
pub(crate) struct Providers(BTreeMap<String, Provider>);

impl Providers {
    /// Resolves `config`, reading every key from `env` now; the providers in `served` are the
    /// ones the agent may use. A provider's anonymous key is used only when `model`
    /// (`agent.model`, the keyless default included) is one of its models: otherwise a
    /// hijacked agent could send what it read to a third party the operator never chose,
    /// through a provider that needs no key.
    pub(crate) fn resolve(
        config: &BTreeMap<String, ProviderConfig>,
        model: Option<&str>,
        served: &BTreeSet<String>,
        env: &impl EnvSource,
    ) -> Result<Self, ProviderError> {
        let chosen = model
            .and_then(|m| m.split_once('/'))
            .map(|(provider, _)| provider);
        let mut out = BTreeMap::new();
        for (id, p) in config {
            let base_url = Url::parse(&p.base_url).map_err(|_| ProviderError::BaseUrl {
                id: id.clone(),
                url: p.base_url.clone(),
            })?;
            if base_url.cannot_be_a_base() {
                return Err(ProviderError::BaseUrl {
                    id: id.clone(),
                    url: p.base_url.clone(),
                });
            }
            let base_path = base_url.path().trim_end_matches('/').to_owned();
            let header = |name: &str| {
                HeaderName::from_bytes(name.to_ascii_lowercase().as_bytes()).map_err(|_| {
                    ProviderError::HeaderName {
                        id: id.clone(),
                        name: name.to_owned(),
                    }
                })
            };
            let key_header = match &p.auth_header {
                AuthHeader::Bearer => KeyHeader::Bearer,
                AuthHeader::XApiKey => KeyHeader::Named(HeaderName::from_static("x-api-key")),
                AuthHeader::Custom(name) => KeyHeader::Named(header(name)?),
            };
            let pass_headers = p
                .pass_headers
                .iter()
                .map(|h| header(h))
                .collect::<Result<Vec<_>, _>>()?;
            let keyless = p.api_key_env.is_empty();
            let own_key = (!keyless)
                .then(|| env.var(&p.api_key_env))
                .flatten()
                .filter(|k| !k.trim().is_empty());
            let anonymous_key = p
                .anonymous_key
                .clone()
                .filter(|_| chosen == Some(id.as_str()));
            let anonymous = own_key.is_none() && anonymous_key.is_some();
            let key = own_key.or(anonymous_key).map(|k| Secret::new(k.trim()));
            out.insert(
                id.clone(),
                Provider {
                    id: id.clone(),
                    base_url,
                    base_path,
                    key_env: p.api_key_env.clone(),
                    key,
                    keyless,
                    anonymous,
                    served: served.contains(id),
                    key_header,
                    pass_headers,
                },
            );
        }
        Ok(Self(out))
    }

    pub(crate) fn get(&self, id: &str) -> Option<&Provider> {
        self.0.get(id)
    }

    /// Whether the agent may use at least one of them.
    pub(crate) fn any_served(&self) -> bool {
        self.0.values().any(|p| p.served)
    }
}

impl Provider {
    /// The upstream URL for `rest` (the raw, still percent-encoded path after the provider id),
    /// without a query (the allowed endpoints take none). `None` when `rest` holds a dot
    /// segment, a backslash or an encoded slash, any of which could climb out of the base path,
    /// or when the result leaves the base.
    pub(crate) fn upstream_url(&self, rest: &str) -> Option<Url> {
        let bad_segment = rest.split('/').any(|segment| {
            let lower = segment.to_ascii_lowercase();
            let decoded_dots = lower.replace("%2e", ".");
            decoded_dots == "." || decoded_dots == ".."
        });
        let lower = rest.to_ascii_lowercase();
        if rest.is_empty()
            || bad_segment
            || rest.contains('\\')
            || lower.contains("%2f")
            || lower.contains("%5c")
            || rest.contains(['?', '#'])
        {
            return None;
        }
        let mut url = self.base_url.clone();
        url.set_path(&format!("{}/{}", self.base_path, rest));
        url.set_query(None);
        let inside = url.origin() == self.base_url.origin()
            && url.path().starts_with(&format!("{}/", self.base_path));
        inside.then_some(url)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn provider(base: &str) -> Provider {
        let config = BTreeMap::from([(
            "p".to_owned(),
            ProviderConfig {
                base_url: base.into(),
                api_key_env: "P_KEY".into(),
                auth_header: AuthHeader::Bearer,
                pass_headers: vec![],
                anonymous_key: None,
            },
        )]);
        let env = |name: &str| (name == "P_KEY").then(|| " sk-real \n".to_owned());
        let mut providers =
            Providers::resolve(&config, None, &BTreeSet::new(), &env).expect("resolves");
        providers.0.remove("p").expect("p")
    }

    #[test]
    fn the_key_is_read_once_and_trimmed() {
        let p = provider("https://api.example/v1");
        assert_eq!(p.key.as_ref().map(Secret::expose), Some("sk-real"));
        assert!(!p.keyless);
    }

    #[test]
    fn an_unset_key_falls_back_to_the_anonymous_key_and_a_set_one_wins() {
        let config = ProviderConfig::builtins();
        let none = |_: &str| None::<String>;
        let zen_model = Some("opencode/big-pickle");
        let providers =
            Providers::resolve(&config, zen_model, &BTreeSet::new(), &none).expect("resolves");
        let zen = providers.get("opencode").expect("built in");
        assert_eq!(zen.key.as_ref().map(Secret::expose), Some("public"));
        assert!(zen.anonymous && !zen.keyless);
        let openrouter = providers.get("openrouter").expect("built in");
        assert!(openrouter.key.is_none(), "no anonymous access elsewhere");
        let set = |name: &str| (name == "OPENCODE_API_KEY").then(|| "sk-zen".to_owned());
        let providers =
            Providers::resolve(&config, zen_model, &BTreeSet::new(), &set).expect("resolves");
        let zen = providers.get("opencode").expect("built in");
        assert_eq!(zen.key.as_ref().map(Secret::expose), Some("sk-zen"));
        assert!(!zen.anonymous);
    }

    /// The attack: the operator runs OpenRouter; a hijacked agent points a request at the
    /// gateway's `opencode` route to hand what it read to opencode.ai, a service nobody chose.
    /// Without the model naming it, the anonymous key is never sent (the request answers 503
    /// like any provider without its key).
    #[test]
    fn anonymous_access_is_only_for_the_chosen_models_provider() {
        let config = ProviderConfig::builtins();
        let none = |_: &str| None::<String>;
        for model in [Some("openrouter/anthropic/claude-sonnet-4"), None] {
            let providers =
                Providers::resolve(&config, model, &BTreeSet::new(), &none).expect("resolves");
            let zen = providers.get("opencode").expect("built in");
            assert!(zen.key.is_none() && !zen.anonymous, "{model:?}");
        }
    }

    #[test]
    fn paths_are_joined_under_the_base() {
        for base in ["https://api.example/v1", "https://api.example/v1/"] {
            let p = provider(base);
            assert_eq!(
                p.upstream_url("chat/completions").unwrap().as_str(),
                "https://api.example/v1/chat/completions"
            );
        }
        let root = provider("http://127.0.0.1:9/");
        assert_eq!(
            root.upstream_url("v1/models").unwrap().as_str(),
            "http://127.0.0.1:9/v1/models"
        );
    }

    #[test]
    fn paths_that_could_leave_the_base_are_refused() {
        let p = provider("https://api.example/v1");
        for rest in [
            "",
            "..",
            "../admin",
            "chat/../../x",
            "%2e%2e/x",
            ".%2E/x",
            "./x",
            "a%2fb",
            "a%5Cb",
            "a\\..\\b",
        ] {
            assert!(p.upstream_url(rest).is_none(), "{rest:?} accepted");
        }
        assert!(
            p.upstream_url("models/gpt-4o%3Alatest").is_some(),
            "other escapes are fine"
        );
    }
}
