//! `air-friends check-config` prints the effective configuration with every secret's value
//! masked wherever it ended up: a platform token interpolated into another key, a provider key
//! interpolated into `agent.env` or the agent's arguments.

use std::process::Command;

const DISCORD: &str = "discord-token-4f2a9c";
const PROVIDER: &str = "sk-or-v1-77e0b3";

#[test]
fn check_config_masks_secret_values_interpolated_into_other_keys() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("config.yaml");
    std::fs::write(
        &path,
        "platforms:\n  discord:\n    enabled: true\n    token: ${DISCORD_TOKEN}\n\
         agent:\n  command: sh\n  args: [\"acp\", \"--tag=x-${DISCORD_TOKEN}-y\"]\n  env:\n    \
         OPENROUTER_API_KEY: ${OPENROUTER_API_KEY}\n    PROXY_URL: \"https://p/?key=${OPENROUTER_API_KEY}\"\n    \
         LANG_HINT: en\n",
    )
    .expect("write");
    let out = Command::new(env!("CARGO_BIN_EXE_air-friends"))
        .args(["check-config", "--config"])
        .arg(&path)
        .env("DISCORD_TOKEN", DISCORD)
        .env("OPENROUTER_API_KEY", PROVIDER)
        .env_remove("SKILL_API_PORT")
        .env_remove("HEALTH_PORT")
        .output()
        .expect("run check-config");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    for secret in [DISCORD, PROVIDER] {
        assert!(
            !stdout.contains(secret) && !stderr.contains(secret),
            "{secret} printed:\n{stdout}{stderr}"
        );
    }
    let effective: serde_yaml::Value = serde_yaml::from_str(&stdout).expect("yaml");
    let agent = &effective["agent"];
    assert_eq!(agent["args"][0], "acp");
    assert_eq!(agent["args"][1], "***");
    assert_eq!(agent["env"]["OPENROUTER_API_KEY"], "***");
    assert_eq!(agent["env"]["PROXY_URL"], "***");
    assert_eq!(agent["env"]["LANG_HINT"], "en", "other values are printed");
    assert_eq!(effective["platforms"]["discord"]["token"], "***");
}
