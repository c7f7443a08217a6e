//! `load_skills` and the data the daemon takes from it: schemas, rate limits, credentials,
//! slash commands, parameter validation, the auto-approve list; plus the manifests' contract
//! values of the 15 built-in skills (`skills/*/manifest.json`).

use std::path::{Path, PathBuf};

use air_friends::skills::{self, AutoApproveList, LoadError, builtin};
use serde_json::json;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn shipped() -> skills::LoadedSkills {
    skills::load_skills(&root().join("skills")).expect("shipped skills load")
}

#[test]
fn loads_all_fifteen_with_their_accessors() {
    let s = shipped();
    assert_eq!(s.len(), 15);
    assert!(s.warnings().is_empty(), "{:?}", s.warnings());
    let names: Vec<&str> = s.names().collect();
    let mut expected: Vec<&str> = builtin::builtin_names().collect();
    expected.sort_unstable();
    assert_eq!(names, expected);
    let users: Vec<&str> = s.user_commands().map(|x| x.name.as_str()).collect();
    assert_eq!(
        users,
        [
            "cancel-reminder",
            "list-reminders",
            "memory-export",
            "memory-search",
            "memory-stats"
        ]
    );
    let rl = s.rate_limit("memory-save").unwrap();
    assert_eq!((rl.window_ms, rl.max_requests), (60_000, 30));
    assert!(
        s.description("send-reply")
            .unwrap()
            .contains("only way the user sees text")
    );
    assert!(s.credential_env_vars("send-reply").is_empty());
    assert!(s.is_user_command("memory-stats") && !s.is_user_command("send-reply"));
    assert_eq!(
        s.input_schema("memory-search").unwrap()["properties"]["limit"]["maximum"],
        50
    );
}

#[test]
fn manifests_match_the_spec_table() {
    let s = shipped();
    let prop = |skill: &str, p: &str| s.input_schema(skill).unwrap()["properties"][p].clone();
    assert_eq!(prop("memory-search", "limit")["minimum"], 1);
    assert_eq!(prop("memory-search", "limit")["default"], 10);
    assert_eq!(prop("fetch-context", "limit")["maximum"], 100);
    assert_eq!(prop("fetch-context", "limit")["default"], 20);
    assert_eq!(
        prop("fetch-context", "type")["enum"],
        json!(["recent_messages", "search_messages", "user_info"])
    );
    assert_eq!(prop("memory-save", "content")["maxLength"], 4000);
    assert_eq!(
        prop("memory-save", "visibility")["enum"],
        json!(["public", "private"])
    );
    assert_eq!(prop("memory-save", "visibility")["default"], "public");
    assert_eq!(prop("memory-save", "importance")["default"], "normal");
    assert_eq!(prop("memory-export", "format")["default"], "markdown");
    assert_eq!(
        prop("memory-export", "importance")["enum"],
        json!(["high", "normal", "all"])
    );
    assert_eq!(prop("memory-export", "enabledOnly")["default"], true);
    assert_eq!(prop("send-file", "filePaths")["minItems"], 1);
    assert_eq!(prop("send-file", "filePaths")["maxItems"], 10);
    assert_eq!(prop("set-reminder", "scheduledAt")["format"], "date-time");
    assert_eq!(prop("memory-patch", "relatedTo")["type"], "array");
    for skill in s.iter() {
        for (flag, spec) in &skill.manifest.flags {
            let camel = flag
                .split('-')
                .enumerate()
                .map(|(i, w)| {
                    if i == 0 {
                        w.to_owned()
                    } else {
                        w[..1].to_uppercase() + &w[1..]
                    }
                })
                .collect::<String>();
            let expected = camel.strip_suffix("File").unwrap_or(&camel);
            assert_eq!(spec.param, expected, "{}: --{flag}", skill.name);
        }
    }
}

/// The shipped schemas validate calls the way the Skill API does: compiled once by the loader
/// and registered with that compilation (`SkillSpec::from_package`); violations come
/// back as `INVALID_PARAMS` details with JSON Pointer paths, formats (`date-time`) included.
#[test]
fn shipped_schemas_give_invalid_params_details_through_the_registry() {
    use air_friends::skill_api::{CallContext, SkillError, SkillHandler, SkillRegistry, SkillSpec};
    use serde_json::Value;
    use std::sync::Arc;

    struct Nothing(&'static str);
    #[async_trait::async_trait]
    impl SkillHandler for Nothing {
        fn name(&self) -> &str {
            self.0
        }
        async fn call(&self, _ctx: &CallContext, _params: Value) -> Result<Value, SkillError> {
            Ok(Value::Null)
        }
    }

    let s = shipped();
    let mut registry = SkillRegistry::new();
    for name in ["memory-search", "set-reminder"] {
        let skill = s.get(name).unwrap();
        let spec = SkillSpec::new(skill.input_schema().clone())
            .with_compiled_schema(skill.compiled_schema());
        registry.register(Arc::new(Nothing(name)), spec).unwrap();
    }
    let check = |name: &str, params: Value| {
        registry
            .get(name)
            .unwrap()
            .prepare_params(params.as_object().unwrap().clone())
    };
    let paths = |result: Result<Value, SkillError>| match result {
        Err(SkillError::InvalidParams { details }) => {
            details.into_iter().map(|d| d.path).collect::<Vec<_>>()
        }
        other => panic!("expected INVALID_PARAMS, got {other:?}"),
    };
    assert!(check("memory-search", json!({"query": "x", "limit": 5})).is_ok());
    let problems = paths(check(
        "memory-search",
        json!({"query": "x", "limit": 0, "extra": 1}),
    ));
    assert!(problems.iter().any(|p| p == "/limit"), "{problems:?}");
    assert!(
        problems.iter().any(|p| p == "/extra"),
        "the additional property is named: {problems:?}"
    );
    let bad = paths(check(
        "set-reminder",
        json!({"scheduledAt": "next tuesday", "message": "m"}),
    ));
    assert_eq!(bad, ["/scheduledAt"]);
    assert!(
        check(
            "set-reminder",
            json!({"scheduledAt": "2030-01-31T09:00:00Z", "message": "m"})
        )
        .is_ok()
    );
}

#[test]
fn embedded_schemas_equal_the_shipped_ones() {
    let s = shipped();
    let embedded = skills::embedded_schemas();
    for skill in s.iter() {
        let diffs = skills::schema_differences(&embedded[&skill.name], skill.input_schema());
        assert!(diffs.is_empty(), "{}: {diffs:?}", skill.name);
    }
}

#[test]
fn broken_skills_fail_to_load_with_the_validator_message() {
    let dir = root().join("tests/fixtures/skills/broken");
    match skills::load_skills(&dir) {
        Err(LoadError::Invalid {
            message, report, ..
        }) => {
            assert!(
                message
                    .contains("extra-key [skill-md]: Unexpected fields in frontmatter: version."),
                "{message}"
            );
            assert!(message.contains("(fix: "), "{message}");
            assert!(!report.ok());
        }
        other => panic!("expected Invalid, got {other:?}"),
    }
    let err = skills::load_skills(Path::new("/nonexistent/skills")).unwrap_err();
    assert!(err.to_string().contains("Path does not exist"), "{err}");
}

#[test]
fn third_party_skills_load_with_credentials_and_command_prefixes() {
    let s = skills::load_skills(&root().join("tests/fixtures/skills/thirdparty")).unwrap();
    assert_eq!(s.credential_env_vars("weather"), ["WEATHER_API_KEY"]);
    assert_eq!(
        s.enabled_credential_env_vars(|n| n == "weather"),
        ["WEATHER_API_KEY"]
    );
    assert!(s.enabled_credential_env_vars(|_| false).is_empty());
    let list = s.auto_approve(&[]);
    assert_eq!(
        list,
        AutoApproveList {
            entrypoints: vec!["weather/scripts/weather.py".into()],
            command_prefixes: vec!["agent-browser".into()],
        }
    );
}

#[test]
fn auto_approve_list_from_loaded_or_explicit_names() {
    let s = shipped();
    let all = AutoApproveList::from_skills(&s, &[]);
    assert_eq!(all.entrypoints.len(), 15);
    assert!(all.command_prefixes.is_empty());
    // Every shipped entrypoint is a regular file at its own canonical path: the daemon keeps
    // them all (it drops symlinked or missing ones at start).
    let skills_dir = std::fs::canonicalize(root().join("skills")).unwrap();
    for entry in &all.entrypoints {
        let path = skills_dir.join(entry);
        assert_eq!(std::fs::canonicalize(&path).unwrap(), path, "{entry}");
        assert!(path.is_file(), "{entry}");
    }
    assert!(
        all.entrypoints
            .contains(&"memory-save/scripts/memory-save".to_owned())
    );
    let some = AutoApproveList::from_skills(
        &s,
        &[
            "send-reply".into(),
            " react-message ".into(),
            "custom".into(),
        ],
    );
    assert_eq!(
        some.entrypoints,
        [
            "custom/scripts/custom",
            "react-message/scripts/react-message",
            "send-reply/scripts/send-reply"
        ]
    );
}
