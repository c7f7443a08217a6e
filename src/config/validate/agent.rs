//! The checks of the `agent` section: the command and its limits, warm agents, the token
//! budget, the names it lists (skills, environment variables, egress hosts) and the model
//! providers the gateway forwards to.

use super::Problems;
use super::values::{check_base_url, is_env_name, is_skill_name};
use crate::config::{AuthHeader, Config};

impl Config {
    /// The `agent` section apart from its providers (`check_gateway`).
    pub(super) fn check_agent(&self, v: &mut Problems) {
        self.check_agent_limits(v);
        self.check_warm(v);
        let c = &self.agent.continuity;
        if c.enabled {
            for (key, zero) in [
                ("agent.continuity.keepDays", c.keep_days == 0),
                ("agent.continuity.maxStateMb", c.max_state_mb == 0),
            ] {
                if zero {
                    v.add(
                        key,
                        "must be greater than 0 (agent.continuity.enabled: false turns it off)",
                    );
                }
            }
        }
        self.check_token_limit(v);
        self.check_agent_names(v);
        self.check_agent_env(v);
    }

    /// The command, the session limits and the timeouts.
    fn check_agent_limits(&self, v: &mut Problems) {
        let a = &self.agent;
        if a.command.trim().is_empty() {
            v.add("agent.command", "must not be empty");
        }
        if a.max_concurrent_sessions == 0 {
            v.add("agent.maxConcurrentSessions", "must be at least 1");
        }
        if a.max_queued_per_conversation == 0 {
            v.add("agent.maxQueuedPerConversation", "must be at least 1");
        }
        for (key, ms) in [
            ("agent.connectTimeoutMs", a.connect_timeout_ms),
            ("agent.idleTimeoutMs", a.idle_timeout_ms),
            ("agent.maxTurnMs", a.max_turn_ms),
            ("agent.modelFailureGraceMs", a.model_failure_grace_ms),
        ] {
            if ms == 0 {
                v.add(key, "must be greater than 0");
            }
        }
        if a.idle_timeout_ms > a.max_turn_ms {
            v.add(
                "agent.idleTimeoutMs",
                format!(
                    "{} is longer than agent.maxTurnMs ({}); it would never fire",
                    a.idle_timeout_ms, a.max_turn_ms
                ),
            );
        }
    }

    /// `agent.warm`, when warm agents are on.
    fn check_warm(&self, v: &mut Problems) {
        let w = &self.agent.warm;
        if w.enabled {
            for (key, zero) in [
                ("agent.warm.idleMs", w.idle_ms == 0),
                ("agent.warm.maxProcesses", w.max_processes == Some(0)),
                ("agent.warm.maxTurns", w.max_turns == 0),
                ("agent.warm.maxContextTokens", w.max_context_tokens == 0),
            ] {
                if zero {
                    v.add(
                        key,
                        "must be greater than 0 (agent.warm.enabled: false turns warm agents off)",
                    );
                }
            }
        }
    }

    /// `agent.tokenLimit`, and the important memories' share of it.
    fn check_token_limit(&self, v: &mut Problems) {
        let a = &self.agent;
        if self.context.important_memories_budget >= a.token_limit {
            v.add(
                "context.importantMemoriesBudget",
                format!(
                    "{} is not less than agent.tokenLimit ({}): the memories would leave no room for the conversation",
                    self.context.important_memories_budget, a.token_limit
                ),
            );
        }
        if a.token_limit < 1_000 {
            v.add(
                "agent.tokenLimit",
                "must be at least 1000 (the instructions alone need several hundred tokens)",
            );
        }
    }

    /// The model id and the skill names.
    fn check_agent_names(&self, v: &mut Problems) {
        let a = &self.agent;
        if let Some(model) = &a.model
            && !model.contains('/')
        {
            v.add(
                "agent.model",
                format!("{model:?} must be `provider/model`, e.g. `openrouter/anthropic/claude-sonnet-4`"),
            );
        }
        for (i, name) in a.auto_approve_skills.iter().enumerate() {
            if !is_skill_name(name) {
                v.add(
                    format!("agent.autoApproveSkills.{i}"),
                    format!("{name:?} is not a skill name (lowercase letters, digits, hyphens)"),
                );
            }
        }
    }

    /// Environment variable names, egress hosts and the agent's own environment.
    fn check_agent_env(&self, v: &mut Problems) {
        let a = &self.agent;
        for (key, names) in [
            ("agent.providerEnvVars", &a.provider_env_vars),
            ("agent.sandbox.allowedEnvVars", &a.sandbox.allowed_env_vars),
        ] {
            for (i, name) in names.iter().enumerate() {
                if !is_env_name(name) {
                    v.add(
                        format!("{key}.{i}"),
                        format!("{name:?} is not an environment variable name"),
                    );
                }
            }
        }
        for (i, entry) in a.sandbox.egress_allow_hosts.iter().enumerate() {
            if let Err(problem) = crate::egress::parse_allow_entry(entry) {
                v.add(
                    format!("agent.sandbox.egressAllowHosts.{i}"),
                    problem.to_string(),
                );
            }
        }
        for name in a.env.keys() {
            if !is_env_name(name) {
                v.add(
                    format!("agent.env.{name}"),
                    "not an environment variable name",
                );
            }
        }
    }

    /// `agent.providers`: ids usable as one URL path segment, upstream URLs that keep the key
    /// on TLS (plain `http` only to loopback or without a key), header names the gateway can
    /// send without clobbering its own framing or auth; `agent.extraProviders` names only
    /// providers of that table.
    pub(super) fn check_gateway(&self, v: &mut Problems) {
        for (i, id) in self.agent.extra_providers.iter().enumerate() {
            if !self.agent.providers.contains_key(id) {
                v.add(
                    format!("agent.extraProviders.{i}"),
                    format!("{id:?} is not a provider of agent.providers"),
                );
            }
        }
        for (id, p) in &self.agent.providers {
            let key = format!("agent.providers.{id}");
            if !is_provider_id(id) {
                v.add(
                    &key,
                    format!("{id:?} is not a provider id (1-64 of a-z, 0-9, `.`, `_`, `-`; starting with a letter or digit)"),
                );
            }
            if let Err(problem) = check_base_url(&p.base_url, !p.api_key_env.is_empty()) {
                v.add(format!("{key}.baseUrl"), problem);
            }
            if !p.api_key_env.is_empty() && !is_env_name(&p.api_key_env) {
                v.add(
                    format!("{key}.apiKeyEnv"),
                    format!("{:?} is not an environment variable name", p.api_key_env),
                );
            }
            if let AuthHeader::Custom(name) = &p.auth_header
                && (!is_header_name(name) || RESERVED_HEADERS.contains(&name.as_str()))
            {
                v.add(
                    format!("{key}.authHeader"),
                    format!(
                        "{name:?} must be `bearer`, `x-api-key` or a header name other than {}",
                        RESERVED_HEADERS.join(", ")
                    ),
                );
            }
            for (i, name) in p.pass_headers.iter().enumerate() {
                let lower = name.to_ascii_lowercase();
                if !is_header_name(&lower)
                    || RESERVED_HEADERS.contains(&lower.as_str())
                    || ["authorization", "x-api-key", p.auth_header.as_str()]
                        .contains(&lower.as_str())
                {
                    v.add(
                        format!("{key}.passHeaders.{i}"),
                        format!("{name:?} cannot be passed: not a header name, an auth header or one the gateway sets itself"),
                    );
                }
            }
        }
    }
}

/// Headers a provider entry may not name: the gateway sets or strips them itself.
const RESERVED_HEADERS: &[&str] = &[
    "host",
    "content-length",
    "content-type",
    "content-encoding",
    "accept-encoding",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "te",
    "trailer",
    "upgrade",
    "proxy-authorization",
    "proxy-authenticate",
    "proxy-connection",
    "cookie",
];

fn is_provider_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 64
        && id.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && id.bytes().all(|b| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'_' | b'-')
        })
}

fn is_header_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}
