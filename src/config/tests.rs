//! Tests of loading and validation: one per rule.

use std::collections::HashMap;

use super::*;

fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let map: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    move |name: &str| map.get(name).cloned()
}

fn no_env() -> impl Fn(&str) -> Option<String> {
    env(&[])
}

fn issues(text: &str) -> Vec<String> {
    match load_str(text, &no_env()) {
        Ok(_) => panic!("expected errors for:\n{text}"),
        Err(e) => e.issues(),
    }
}

#[test]
fn empty_file_gives_defaults() {
    assert_eq!(load_str("", &no_env()).unwrap(), resolved_default());
    assert_eq!(
        load_str("# only a comment\n", &no_env()).unwrap(),
        resolved_default()
    );
}

/// The defaults as loading leaves them: the shipped folders filled in (`paths`).
fn resolved_default() -> Config {
    let mut config = Config::default();
    paths::resolve(&mut config, None, &paths::shipped_for(&no_env()));
    assert!(!config.agent.skills_dir.as_os_str().is_empty());
    config
}

#[test]
fn example_file_matches_the_defaults() {
    let parsed = load_str(EXAMPLE_YAML, &no_env()).expect("example parses");
    assert_eq!(parsed, resolved_default());
}

#[test]
fn the_system_flavour_differs_only_in_the_data_folder() {
    let system = load_str(&example_yaml(true), &no_env()).expect("parses");
    let mut expected = resolved_default();
    expected.workspace.repo_path = PathBuf::from(SYSTEM_DATA_DIR);
    assert_eq!(system, expected);
}

#[test]
fn example_file_documents_every_key() {
    fn keys(v: &serde_yaml::Value, prefix: &str, out: &mut Vec<String>) {
        if let Some(map) = v.as_mapping() {
            for (k, val) in map {
                let k = k.as_str().unwrap();
                let path = if prefix.is_empty() {
                    k.to_owned()
                } else {
                    format!("{prefix}.{k}")
                };
                out.push(path.clone());
                // agent.env is a free-form map, documented as a whole.
                if path != "agent.env" {
                    keys(val, &path, out);
                }
            }
        }
    }
    let mut default_keys = Vec::new();
    keys(
        &serde_yaml::to_value(Config::default()).unwrap(),
        "",
        &mut default_keys,
    );
    let mut example_keys = Vec::new();
    let example: serde_yaml::Value = serde_yaml::from_str(EXAMPLE_YAML).unwrap();
    keys(&example, "", &mut example_keys);
    for k in &default_keys {
        assert!(example_keys.contains(k), "config.example.yaml lacks {k}");
    }
}

#[test]
fn missing_required_key_names_its_path() {
    let got = issues("platforms:\n  misskey:\n    enabled: true\n    token: abc\n");
    assert_eq!(
        got,
        vec![
            "platforms.misskey.host: required when platforms.misskey.enabled (or set MISSKEY_HOST)"
        ]
    );
    let got = issues("platforms:\n  discord:\n    enabled: true\n");
    assert!(
        got[0].starts_with("platforms.discord.token: required"),
        "{got:?}"
    );
}

#[test]
fn wrong_type_names_its_path() {
    let got = issues("skillApi:\n  port: not-a-number\n");
    assert_eq!(got.len(), 1, "{got:?}");
    assert!(got[0].starts_with("skillApi.port: invalid type"), "{got:?}");
    let got = issues("agent:\n  args: acp\n");
    assert!(got[0].starts_with("agent.args: invalid type"), "{got:?}");
    let got = issues("accessControl:\n  replyTo: everyone\n");
    assert!(
        got[0].starts_with("accessControl.replyTo: unknown variant `everyone`"),
        "{got:?}"
    );
}

#[test]
fn unknown_keys_are_rejected_with_a_suggestion() {
    let got = issues(
        "platforms:\n  misskey:\n    hots: example.com\nagent:\n  maxConcurentSessions: 3\n",
    );
    assert_eq!(
        got,
        vec![
            "platforms.misskey.hots: unknown key; did you mean `host`?",
            "agent.maxConcurentSessions: unknown key; did you mean `maxConcurrentSessions`?",
        ]
    );
    let got = issues("skill_api:\n  port: 1\n");
    assert_eq!(
        got,
        vec!["skill_api: unknown key; did you mean `skillApi`?"]
    );
    let got = issues("logging:\n  zzzzzz: 1\n");
    assert_eq!(
        got,
        vec!["logging.zzzzzz: unknown key; valid keys here: level, format"]
    );
}

#[test]
fn env_override_beats_the_file() {
    let text =
        "skillApi:\n  port: 4000\nlogging:\n  level: warn\nagent:\n  autoApproveSkills: [a]\n";
    let cfg = load_str(
        text,
        &env(&[
            ("SKILL_API_PORT", "4100"),
            ("LOG_LEVEL", "debug"),
            ("AGENT_AUTO_APPROVE_SKILLS", "send-reply, memory-save,"),
            ("DISCORD_TOKEN", "tok-from-env"),
        ]),
    )
    .unwrap();
    assert_eq!(cfg.skill_api.port, 4100);
    assert_eq!(cfg.logging.level, "debug");
    assert_eq!(
        cfg.agent.auto_approve_skills,
        vec!["send-reply", "memory-save"]
    );
    assert_eq!(cfg.platforms.discord.token.expose(), "tok-from-env");
}

#[test]
fn env_override_with_a_bad_number_names_variable_and_key() {
    let err = load_str("", &env(&[("SKILL_API_PORT", "eighty")])).unwrap_err();
    assert_eq!(
        err.issues(),
        vec!["skillApi.port: from SKILL_API_PORT: expected a whole number, got \"eighty\""]
    );
}

#[test]
fn variables_are_interpolated_in_strings() {
    let text = "platforms:\n  misskey:\n    enabled: true\n    host: \"${MK_HOST}\"\n    token: \"${MK_TOKEN}\"\nagent:\n  args: [\"--x=${A:-dflt}\", \"cost $$5\"]\n";
    let cfg = load_str(
        text,
        &env(&[("MK_HOST", "mk.example"), ("MK_TOKEN", "t0k3n-value")]),
    )
    .unwrap();
    assert_eq!(cfg.platforms.misskey.host, "mk.example");
    assert_eq!(cfg.platforms.misskey.token.expose(), "t0k3n-value");
    assert_eq!(cfg.agent.args, vec!["--x=dflt", "cost $5"]);
}

#[test]
fn unset_variable_is_an_error_at_its_key() {
    let got = issues("platforms:\n  discord:\n    token: \"${NOPE_TOKEN}\"\n");
    assert_eq!(got.len(), 1);
    assert!(
        got[0].starts_with("platforms.discord.token: environment variable NOPE_TOKEN is not set"),
        "{got:?}"
    );
    let got = issues("agent:\n  args: [\"${BROKEN\"]\n");
    assert!(got[0].starts_with("agent.args.0: unterminated"), "{got:?}");
}

#[test]
fn secrets_are_masked_in_debug_and_serialisation() {
    let cfg = load_str(
        "platforms:\n  discord:\n    enabled: true\n    token: super-secret-discord\n",
        &no_env(),
    )
    .unwrap();
    let debug = format!("{cfg:?}");
    assert!(!debug.contains("super-secret-discord"));
    let yaml = serde_yaml::to_string(&cfg).unwrap();
    assert!(!yaml.contains("super-secret-discord"));
    assert!(yaml.contains("token: '***'"), "{yaml}");
    assert_eq!(cfg.secret_values(), vec!["super-secret-discord"]);
}

#[test]
fn skill_api_must_stay_on_loopback_unless_allowed() {
    let got = issues("skillApi:\n  host: 0.0.0.0\n");
    assert!(
        got[0].starts_with("skillApi.host: 0.0.0.0 is not a loopback address"),
        "{got:?}"
    );
    assert!(
        load_str(
            "skillApi:\n  host: 0.0.0.0\n  allowNonLoopback: true\n",
            &no_env()
        )
        .is_ok()
    );
    assert!(load_str("skillApi:\n  host: localhost\n", &no_env()).is_ok());
    assert!(load_str("skillApi:\n  host: \"::1\"\n", &no_env()).is_ok());
    let got = issues("skillApi:\n  host: example.com\n");
    assert!(
        got[0].starts_with("skillApi.host: \"example.com\" is not an IP"),
        "{got:?}"
    );
}

#[test]
fn cross_field_rules_each_report_their_key() {
    let cases: &[(&str, &str)] = &[
        ("health:\n  port: 3001\n", "health.port"),
        (
            "accessControl:\n  replyTo: whitelist\n",
            "accessControl.whitelist",
        ),
        (
            "accessControl:\n  whitelist: [\"discord/user/1\"]\n",
            "accessControl.whitelist.0",
        ),
        (
            "platforms:\n  discord:\n    guildIds: [\"abc\"]\n",
            "platforms.discord.guildIds.0",
        ),
        (
            "platforms:\n  discord:\n    apiBaseUrl: \"ftp://x\"\n",
            "platforms.discord.apiBaseUrl",
        ),
        (
            "platforms:\n  misskey:\n    host: \"https://mk.example\"\n",
            "platforms.misskey.host",
        ),
        ("agent:\n  command: \"\"\n", "agent.command"),
        (
            "agent:\n  maxConcurrentSessions: 0\n",
            "agent.maxConcurrentSessions",
        ),
        ("agent:\n  idleTimeoutMs: 2000000\n", "agent.idleTimeoutMs"),
        ("agent:\n  model: gpt\n", "agent.model"),
        (
            "agent:\n  autoApproveSkills: [\"Send_Reply\"]\n",
            "agent.autoApproveSkills.0",
        ),
        (
            "agent:\n  sandbox:\n    allowedEnvVars: [\"A-B\"]\n",
            "agent.sandbox.allowedEnvVars.0",
        ),
        ("agent:\n  tokenLimit: 10\n", "agent.tokenLimit"),
        (
            "skills:\n  sendFile:\n    maxTotalSizeMb: 1\n",
            "skills.sendFile.maxTotalSizeMb",
        ),
        (
            "skills:\n  sendFile:\n    allowedExtensions: [\".png\"]\n",
            "skills.sendFile.allowedExtensions.0",
        ),
        ("skills:\n  disabled: [\"Bad Name\"]\n", "skills.disabled.0"),
        (
            "reminders:\n  maxDaysAhead: 400\n",
            "reminders.maxDaysAhead",
        ),
        (
            "reminders:\n  maxRemindersPerUser: 0\n",
            "reminders.maxRemindersPerUser",
        ),
        (
            "memory:\n  recentMessageLimit: 500\n",
            "memory.recentMessageLimit",
        ),
        (
            "workspace:\n  workspacesDir: ../escape\n",
            "workspace.workspacesDir",
        ),
        ("logging:\n  level: \"info,[\"\n", "logging.level"),
        ("rateLimit:\n  maxMessages: 0\n", "rateLimit.maxMessages"),
    ];
    for (text, key) in cases {
        let got = issues(text);
        assert!(
            got.iter().any(|i| i.starts_with(&format!("{key}: "))),
            "{text:?} should report {key}, got {got:?}"
        );
    }
}

#[test]
fn all_problems_are_reported_at_once() {
    let got =
        issues("agent:\n  command: \"\"\n  maxConcurrentSessions: 0\nhealth:\n  host: nowhere\n");
    assert_eq!(got.len(), 3, "{got:?}");
}

#[test]
fn top_level_must_be_a_mapping() {
    assert_eq!(
        issues("- a\n- b\n")[0],
        "(top level): expected a mapping of sections such as `platforms:` and `agent:`"
    );
}

#[test]
fn yaml_syntax_errors_are_reported() {
    let err = load_str("agent: [unclosed\n", &no_env()).unwrap_err();
    assert!(matches!(err, ConfigError::Syntax { .. }), "{err}");
}

#[test]
fn database_path_defaults_under_repo_path() {
    let cfg = load_str("workspace:\n  repoPath: /srv/af\n", &no_env()).unwrap();
    assert_eq!(
        cfg.database_path(),
        std::path::PathBuf::from("/srv/af/air-friends.db")
    );
}

#[test]
fn skill_api_socket_dir_defaults_under_repo_path_and_can_be_set() {
    let cfg = load_str("workspace:\n  repoPath: /srv/af\n", &no_env()).unwrap();
    assert_eq!(
        cfg.skill_api_socket_dir(),
        std::path::PathBuf::from("/srv/af/run")
    );
    let cfg = load_str(
        "workspace:\n  repoPath: /srv/af\nskillApi:\n  socketDir: /run/af\n",
        &no_env(),
    )
    .unwrap();
    assert_eq!(
        cfg.skill_api_socket_dir(),
        std::path::PathBuf::from("/run/af")
    );
}

#[test]
fn provider_entries_merge_over_the_builtins_key_by_key() {
    let cfg = load_str(
        "agent:\n  providers:\n    openrouter:\n      baseUrl: https://proxy.example/or\n    \
         local:\n      baseUrl: http://127.0.0.1:11434/v1\n      apiKeyEnv: \"\"\n    \
         azure:\n      baseUrl: https://az.example/openai\n      apiKeyEnv: AZURE_KEY\n      authHeader: api-key\n",
        &no_env(),
    )
    .unwrap();
    let p = &cfg.agent.providers;
    assert_eq!(p["openrouter"].base_url, "https://proxy.example/or");
    assert_eq!(
        p["openrouter"].api_key_env, "OPENROUTER_API_KEY",
        "keys not named keep the built-in value"
    );
    assert_eq!(p["anthropic"], ProviderConfig::builtins()["anthropic"]);
    assert_eq!(p["anthropic"].auth_header, AuthHeader::XApiKey);
    assert_eq!(p["anthropic"].pass_headers[0], "anthropic-version");
    assert_eq!(p["local"].api_key_env, "");
    assert_eq!(p["local"].auth_header, AuthHeader::Bearer);
    assert_eq!(p["azure"].auth_header, AuthHeader::Custom("api-key".into()));
    assert_eq!(p.len(), 6);
}

#[test]
fn budgets_default_to_unlimited_and_accept_zero() {
    assert_eq!(Config::default().agent.budget, BudgetConfig::default());
    assert_eq!(Config::default().agent.budget.tokens_per_day, None);
    let cfg = load_str(
        "agent:\n  budget:\n    tokensPerUserPerDay: 0\n    tokensPerDay: 100000\n",
        &no_env(),
    )
    .unwrap();
    assert_eq!(cfg.agent.budget.tokens_per_user_per_day, Some(0));
    assert_eq!(cfg.agent.budget.tokens_per_day, Some(100_000));
}

#[test]
fn unusable_provider_entries_are_named() {
    let got = issues(
        "agent:\n  providers:\n    Bad/Id:\n      baseUrl: https://x.example\n    \
         plain:\n      baseUrl: http://api.example/v1\n      apiKeyEnv: K\n    \
         nourl:\n      apiKeyEnv: K\n    \
         creds:\n      baseUrl: https://user:pw@x.example\n    \
         hdr:\n      baseUrl: https://x.example\n      authHeader: content-length\n      passHeaders: [authorization, cookie, anthropic-version]\n",
    );
    let has = |prefix: &str| got.iter().any(|g| g.starts_with(prefix));
    assert!(has("agent.providers.Bad/Id: "), "{got:?}");
    assert!(
        has("agent.providers.plain.baseUrl: ") && got.iter().any(|g| g.contains("unencrypted")),
        "{got:?}"
    );
    assert!(has("agent.providers.nourl.baseUrl: "), "{got:?}");
    assert!(has("agent.providers.creds.baseUrl: "), "{got:?}");
    assert!(has("agent.providers.hdr.authHeader: "), "{got:?}");
    assert!(has("agent.providers.hdr.passHeaders.0: "), "{got:?}");
    assert!(has("agent.providers.hdr.passHeaders.1: "), "{got:?}");
    assert!(!has("agent.providers.hdr.passHeaders.2"), "{got:?}");
    assert_eq!(got.len(), 7, "{got:?}");
    // Plain http is fine to loopback, or with no key to send.
    load_str(
        "agent:\n  providers:\n    a:\n      baseUrl: http://localhost:8000/v1\n      apiKeyEnv: K\n    \
         b:\n      baseUrl: http://10.0.0.5:8000/v1\n      apiKeyEnv: \"\"\n",
        &no_env(),
    )
    .unwrap();
}

#[test]
fn unknown_keys_inside_a_provider_entry_are_reported() {
    let got = issues("agent:\n  providers:\n    openai:\n      baseURL: https://x.example\n");
    assert!(
        got.iter()
            .any(|g| g.starts_with("agent.providers.openai.baseURL: unknown key")),
        "{got:?}"
    );
}

#[test]
fn egress_allow_hosts_default_to_none_and_bad_entries_are_named() {
    assert!(
        load_str("", &no_env())
            .unwrap()
            .agent
            .sandbox
            .egress_allow_hosts
            .is_empty(),
        "no egress unless the operator lists hosts"
    );
    let got = issues(
        "agent:\n  sandbox:\n    egressAllowHosts: [api.github.com, \"*.npmjs.org\", 169.254.169.254, \"Example.com\", \"pypi.org:8443\", \"x.org:0\"]\n",
    );
    let has = |prefix: &str| got.iter().any(|g| g.starts_with(prefix));
    assert!(!has("agent.sandbox.egressAllowHosts.0"), "{got:?}");
    assert!(has("agent.sandbox.egressAllowHosts.1: "), "{got:?}");
    assert!(has("agent.sandbox.egressAllowHosts.2: "), "{got:?}");
    assert!(has("agent.sandbox.egressAllowHosts.3: "), "{got:?}");
    assert!(!has("agent.sandbox.egressAllowHosts.4"), "{got:?}");
    assert!(has("agent.sandbox.egressAllowHosts.5: "), "{got:?}");
    assert_eq!(got.len(), 4, "{got:?}");
}

#[test]
fn without_any_key_or_model_the_free_model_is_chosen_and_anything_else_wins() {
    let keys = |set: &'static str| move |name: &str| (name == set).then(|| "sk-x".to_owned());
    let agent = Config::default().agent;
    assert_eq!(
        agent.keyless_default_model(&no_env()),
        Some(KEYLESS_DEFAULT_MODEL)
    );
    // A key for any provider, the Zen key included: that provider's models are the choice.
    for set in [
        "OPENROUTER_API_KEY",
        "ANTHROPIC_API_KEY",
        "OPENCODE_API_KEY",
    ] {
        assert_eq!(agent.keyless_default_model(&keys(set)), None, "{set}");
    }
    // A blank key is no key.
    assert_eq!(
        agent.keyless_default_model(&|_: &str| Some("  ".to_owned())),
        Some(KEYLESS_DEFAULT_MODEL)
    );
    let configured = |yaml: &str| load_str(yaml, &no_env()).unwrap().agent;
    for yaml in [
        "agent:\n  model: openrouter/x\n",
        // A local server needs no key.
        "agent:\n  providers:\n    local: {baseUrl: \"http://127.0.0.1:11434/v1\", apiKeyEnv: \"\"}\n",
        // The operator's own OpenCode configuration picks the model.
        "agent:\n  env:\n    OPENCODE_CONFIG_CONTENT: '{\"model\": \"local/x\"}'\n",
        // Anonymous access turned off.
        "agent:\n  providers:\n    opencode: {anonymousKey: \"\"}\n",
    ] {
        assert_eq!(
            configured(yaml).keyless_default_model(&no_env()),
            None,
            "{yaml}"
        );
    }
}

#[test]
fn the_gateway_serves_the_named_models_providers_and_the_extra_ones_only() {
    let configured = |yaml: &str| load_str(yaml, &no_env()).unwrap().agent;
    let served = |yaml: &str| {
        configured(yaml)
            .served_providers()
            .into_iter()
            .collect::<Vec<_>>()
    };
    assert!(
        served("agent: {}\n").is_empty(),
        "no model named, nothing served"
    );
    assert_eq!(
        served("agent:\n  model: openrouter/anthropic/claude-sonnet-4\n"),
        ["openrouter"]
    );
    assert_eq!(
        served(concat!(
            "agent:\n  model: openrouter/x\n  extraProviders: [openai]\n  env:\n",
            "    OPENCODE_CONFIG_CONTENT: '{\"model\": \"local/x\", \"small_model\": \"anthropic/y\"}'\n",
            "  providers:\n    local: {baseUrl: \"http://127.0.0.1:11434/v1\", apiKeyEnv: \"\"}\n",
        )),
        ["anthropic", "local", "openai", "openrouter"]
    );
    let got = issues("agent:\n  extraProviders: [openai, nosuch]\n");
    assert_eq!(
        got,
        ["agent.extraProviders.1: \"nosuch\" is not a provider of agent.providers"]
    );
}

#[test]
fn embeddings_need_an_endpoint_a_model_and_a_length() {
    let got = issues("memory:\n  embeddings:\n    timeoutMs: 0\n");
    for key in [
        "memory.embeddings: needs a provider",
        "memory.embeddings.model: ",
        "memory.embeddings.dimensions: ",
    ] {
        assert!(got.iter().any(|g| g.starts_with(key)), "{key} in {got:?}");
    }
    let got =
        issues("memory:\n  embeddings:\n    provider: nosuch\n    model: m\n    dimensions: 8\n");
    assert!(
        got.iter()
            .any(|g| g.starts_with("memory.embeddings.provider: ")),
        "{got:?}"
    );
    let got = issues(
        "memory:\n  embeddings:\n    baseUrl: http://embed.example/v1\n    apiKeyEnv: K\n    model: m\n    dimensions: 8\n",
    );
    assert!(got.iter().any(|g| g.contains("unencrypted")), "{got:?}");
    let ok = load_str(
        "memory:\n  embeddings:\n    provider: openai\n    model: text-embedding-3-small\n    dimensions: 1536\n",
        &no_env(),
    )
    .unwrap();
    let e = ok.memory.embeddings.unwrap();
    assert_eq!((e.timeout_ms, e.batch_size), (3_000, 32));
}

#[test]
fn transcription_needs_one_endpoint_a_model_and_sane_caps() {
    let got = issues(
        "attachments:\n  transcription:\n    model: \"\"\n    language: English\n    \
         maxSeconds: 0\n    maxMb: 0\n    timeoutMs: 0\n    minutesPerUserPerDay: 0\n",
    );
    for key in [
        "attachments.transcription: needs a provider",
        "attachments.transcription.model: ",
        "attachments.transcription.language: \"English\" is not an ISO-639-1 code",
        "attachments.transcription.maxSeconds: ",
        "attachments.transcription.maxMb: ",
        "attachments.transcription.timeoutMs: ",
        "attachments.transcription.minutesPerUserPerDay: ",
    ] {
        assert!(got.iter().any(|g| g.starts_with(key)), "{key} in {got:?}");
    }
    let got = issues(
        "attachments:\n  transcription:\n    provider: openai\n    baseUrl: https://x.example/v1\n",
    );
    assert!(
        got.iter()
            .any(|g| g.starts_with("attachments.transcription.baseUrl: set either")),
        "{got:?}"
    );
    let got = issues(
        "attachments:\n  transcription:\n    baseUrl: http://speech.example/v1\n    apiKeyEnv: K\n",
    );
    assert!(got.iter().any(|g| g.contains("unencrypted")), "{got:?}");
    let ok = load_str(
        "attachments:\n  transcription:\n    provider: openai\n    language: ja\n",
        &no_env(),
    )
    .unwrap();
    let t = ok.attachments.transcription.clone().unwrap();
    assert_eq!(
        (
            t.model.as_str(),
            t.max_seconds,
            t.max_mb,
            t.minutes_per_user_per_day
        ),
        ("whisper-1", 300, 25, None)
    );
    let at = ok
        .service_endpoint(&t.provider, &t.base_url, &t.api_key_env)
        .unwrap();
    assert_eq!(at.base_url, ok.agent.providers["openai"].base_url);
}

#[test]
fn type_errors_and_unknown_keys_are_reported_together() {
    let got = issues(
        "agent:\n  maxTurnMs: soon\n  maxConcurentSessions: 3\n  args: acp\n\
         skillApi:\n  port: high\nlogging:\n  levle: debug\n",
    );
    let has = |prefix: &str| got.iter().any(|g| g.starts_with(prefix));
    assert!(
        has("agent.maxConcurentSessions: unknown key; did you mean `maxConcurrentSessions`?"),
        "{got:?}"
    );
    assert!(
        has("logging.levle: unknown key; did you mean `level`?"),
        "{got:?}"
    );
    assert!(has("agent.maxTurnMs: invalid type"), "{got:?}");
    assert!(has("agent.args: invalid type"), "{got:?}");
    assert!(has("skillApi.port: invalid type"), "{got:?}");
    assert_eq!(got.len(), 5, "{got:?}");
}

#[test]
fn a_key_with_a_type_error_is_not_judged_again_through_its_default() {
    // maxTurnMs falls back to its default (900000), shorter than this idleTimeoutMs: that
    // cross-field complaint would be about a value the operator never wrote.
    let got = issues("agent:\n  idleTimeoutMs: 1000000\n  maxTurnMs: soon\n");
    assert_eq!(got.len(), 1, "{got:?}");
    assert!(
        got[0].starts_with("agent.maxTurnMs: invalid type"),
        "{got:?}"
    );
}

#[test]
fn an_unset_variable_does_not_hide_the_other_problems() {
    let got = issues(
        "platforms:\n  discord:\n    token: \"${NOPE_TOKEN}\"\nagent:\n  maxConcurentSessions: 1\n  tokenLimit: lots\n",
    );
    let has = |prefix: &str| got.iter().any(|g| g.starts_with(prefix));
    assert!(
        has("platforms.discord.token: environment variable NOPE_TOKEN is not set"),
        "{got:?}"
    );
    assert!(has("agent.maxConcurentSessions: unknown key"), "{got:?}");
    assert!(has("agent.tokenLimit: invalid type"), "{got:?}");
    assert_eq!(got.len(), 3, "{got:?}");
}

#[test]
fn log_level_must_be_a_level_or_filter_directives() {
    for good in [
        "info",
        "WARN",
        "off",
        "info,air_friends=debug",
        "air_friends=trace",
    ] {
        let text = format!("logging:\n  level: \"{good}\"\n");
        assert!(
            load_str(&text, &env(&[])).is_ok(),
            "{good} should be accepted"
        );
    }
    let got = issues("logging:\n  level: loud\n");
    assert_eq!(got.len(), 1, "{got:?}");
    assert!(got[0].starts_with("logging.level: \"loud\""), "{got:?}");
    assert!(
        got[0].contains("off, error, warn, info, debug, trace"),
        "names the accepted values: {got:?}"
    );
    for bad in ["info,loud", "air_friends=loud", ""] {
        let text = format!("logging:\n  level: \"{bad}\"\n");
        let got = issues(&text);
        assert!(got[0].starts_with("logging.level: "), "{bad}: {got:?}");
    }
    // LOG_LEVEL overrides the file and is held to the same rule.
    let err = load_str("", &env(&[("LOG_LEVEL", "loud")])).unwrap_err();
    assert!(err.issues()[0].starts_with("logging.level: \"loud\""));
}

#[test]
fn a_skill_runs_unless_the_configuration_turns_it_off() {
    let mut config = Config::default();
    assert!(config.skill_enabled("send-reply") && config.skill_enabled("set-reminder"));
    assert!(
        !config.skill_enabled("send-file"),
        "send-file is off by default"
    );
    config.skills.send_file.enabled = true;
    assert!(config.skill_enabled("send-file"));
    config.skills.disabled = vec!["send-file".into(), "react-message".into()];
    assert!(!config.skill_enabled("send-file") && !config.skill_enabled("react-message"));
    config.reminders.enabled = false;
    for name in REMINDER_SKILLS {
        assert!(!config.skill_enabled(name), "{name}");
    }
    assert!(config.skill_enabled("memory-save"));
}

/// Every rule of `places` is checked: its name, its match (a platform, keys that can fit
/// something, not covered by an earlier rule), its model's provider and a prefix to reply to.
#[test]
fn place_rules_are_checked() {
    let got = issues(
        "places:\n\
         \x20 - {name: all-dms, match: {dm: true}}\n\
         \x20 - {name: all-dms, match: {dm: true, platform: discord}}\n\
         \x20 - {name: Bad Name, match: {platform: slack}}\n\
         \x20 - {name: default, match: {platform: misskey, guild: '1'}}\n\
         \x20 - {name: cheap, match: {channel: '2'}, model: nowhere/model-x}\n\
         \x20 - {name: modelless, match: {channel: '3'}, model: just-a-name}\n\
         \x20 - {name: prefixed, match: {platform: discord, channel: '4'}, reply: prefix}\n\
         \x20 - {name: thread, match: {parent: '2'}}\n\
         \x20 - {name: zoned, match: {channel: '9'}, timeZone: Moon/Base}\n\
         \x20 - {name: tokyo, match: {channel: '8'}, timeZone: Asia/Tokyo}\n",
    );
    let expected = [
        "places.1.name: \"all-dms\" is already the name of places.0",
        "places.1.match: can never match: places.0 (all-dms) comes first and matches every place this rule matches",
        "places.2.name: \"Bad Name\" is not a rule name",
        "places.2.match.platform: \"slack\" is not a platform (discord, misskey, console)",
        "places.3.name: `default` names the settings no rule changed; choose another name",
        "places.3.match: can never match: guild is a Discord key, and the rule is for misskey",
        "places.4.model: the provider \"nowhere\" is not in agent.providers",
        "places.5.model: \"just-a-name\" must be `provider/model`",
        "places.6.reply: `prefix`, but platforms.discord.commandPrefix is empty",
        "places.7.match: can never match: places.4 (cheap) comes first",
        "places.8.timeZone: \"Moon/Base\" is not an IANA time zone",
    ];
    assert_eq!(got.len(), expected.len(), "{got:#?}");
    for (got, expected) in got.iter().zip(expected) {
        assert!(
            got.starts_with(expected),
            "{got:?} should start with {expected:?}"
        );
    }
}

#[test]
fn mcp_servers_need_a_name_a_safe_endpoint_and_known_places() {
    let got = issues(
        "mcp:\n  servers:\n    - name: Wiki\n      url: http://wiki.example.com/mcp\n      \
         headers: {Host: x, Authorization: 'Bearer k'}\n      tools: [search, search]\n      \
         places: [nowhere]\n    - name: lan\n      url: https://10.0.0.5/mcp\n    \
         - name: lan\n      url: http://10.0.0.5/mcp\n      local: true\n      timeoutMs: 0\n  \
         callsPerUserPerDay: 0\n",
    );
    for key in [
        "mcp.servers.0.name: \"Wiki\" is not a server name",
        "mcp.servers.0.url: \"http://wiki.example.com/mcp\" would send the server's headers unencrypted",
        "mcp.servers.0.headers.Host: set by the broker",
        "mcp.servers.0.tools.1: \"search\" is listed twice",
        "mcp.servers.0.places.0: \"nowhere\" is not the name of a places rule",
        "mcp.servers.1.url: 10.0.0.5 is not a public address; set local: true",
        "mcp.servers.2.name: \"lan\" is already the name of mcp.servers.1",
        "mcp.servers.2: timeoutMs",
        "mcp.callsPerUserPerDay: must be at least 1",
    ] {
        assert!(got.iter().any(|g| g.starts_with(key)), "{key} in {got:?}");
    }
    assert!(
        !got.iter().any(|g| g.starts_with("mcp.servers.2.url")),
        "a local server may use http and a private address: {got:?}"
    );
    let ok = load_str(
        "mcp:\n  servers:\n    - name: wiki\n      url: https://wiki.example.com/mcp\n      \
         headers: {Authorization: 'Bearer ${WIKI_TOKEN}'}\n      tools: [search]\n",
        &|name: &str| (name == "WIKI_TOKEN").then(|| "wiki-secret".to_owned()),
    )
    .unwrap();
    assert_eq!(
        ok.mcp.servers[0].headers["Authorization"],
        "Bearer wiki-secret"
    );
    assert!(ok.mcp.servers[0].serves_place("anywhere"));
    assert!(
        known_secret_values(&ok, &|_: &str| None).contains(&"Bearer wiki-secret".to_owned()),
        "a server's headers are secrets"
    );
}

#[test]
fn stdio_and_sse_servers_take_what_their_transport_needs_and_a_stdio_servers_env_is_secret() {
    let got = issues(
        "mcp:\n  servers:\n    - name: feeds\n      kind: stdio\n    \
         - name: tool\n      kind: stdio\n      command: [mcp-tool]\n      url: https://x.example/mcp\n      \
         env: {LD_PRELOAD: /tmp/x.so, PATH: /tmp, '1BAD': x, OK_NAME: y}\n    \
         - name: old\n      kind: sse\n      url: https://old.example.com/sse\n      command: [x]\n    \
         - name: old2\n      kind: sse\n      url: http://old.example.com/sse\n",
    );
    for key in [
        "mcp.servers.0.command: a stdio server needs its command",
        "mcp.servers.1: url, headers and local are for remote servers",
        "mcp.servers.1.env.LD_PRELOAD: set by the sandbox",
        "mcp.servers.1.env.PATH: set by the sandbox",
        "mcp.servers.1.env: \"1BAD\" is not an environment variable name",
        "mcp.servers.2: command and env are for kind: stdio",
        "mcp.servers.3.url: \"http://old.example.com/sse\" would send the server's headers unencrypted",
    ] {
        assert!(got.iter().any(|g| g.starts_with(key)), "{key} in {got:?}");
    }
    assert!(
        !got.iter().any(|g| g.contains("OK_NAME")),
        "a plain variable name is fine: {got:?}"
    );
    let ok = load_str(
        "mcp:\n  servers:\n    - name: feeds\n      kind: stdio\n      command: [mcp-feeds, --quiet]\n      \
         env: {FEED_KEY: '${FEED_KEY}'}\n      tools: [latest]\n",
        &|name: &str| (name == "FEED_KEY").then(|| "feed-secret".to_owned()),
    )
    .unwrap();
    assert_eq!(ok.mcp.servers[0].kind, McpKind::Stdio);
    assert!(
        known_secret_values(&ok, &|_: &str| None).contains(&"feed-secret".to_owned()),
        "a stdio server's variables are secrets"
    );
    let masked = masked_yaml(&ok, &|_: &str| None).unwrap();
    assert!(!masked.contains("feed-secret"), "{masked}");
}

#[test]
fn admin_prices_must_be_prices() {
    let got =
        issues("admin:\n  cost: {inputPerMillion: -1, outputPerMillion: .nan, currency: ''}\n");
    for key in [
        "admin.cost.inputPerMillion",
        "admin.cost.outputPerMillion",
        "admin.cost.currency",
    ] {
        assert!(got.iter().any(|i| i.contains(key)), "{key} in {got:?}");
    }
    let ok = load_str(
        "admin:\n  cost: {inputPerMillion: 0.15, outputPerMillion: 0.6}\n",
        &no_env(),
    )
    .unwrap();
    let prices = ok.admin.cost.unwrap();
    assert_eq!(prices.currency, "USD");
    assert!((prices.cost(1_000_000, 2_000_000) - 1.35).abs() < 1e-9);
}
