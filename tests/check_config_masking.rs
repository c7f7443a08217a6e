//! `air-friends check-config` prints the effective configuration with every secret's value
//! masked wherever it ended up: a platform token interpolated into another key, a provider key
//! interpolated into `agent.env` or the agent's arguments.

use std::process::Command;

const DISCORD: &str = "discord-token-4f2a9c";
const PROVIDER: &str = "sk-or-v1-77e0b3";

/// The configuration a successful `check-config` printed, having checked that neither secret
/// appears in its output.
fn effective_without_secrets(out: &std::process::Output) -> serde_yaml::Value {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    for secret in [DISCORD, PROVIDER] {
        assert!(
            !stdout.contains(secret) && !stderr.contains(secret),
            "{secret} printed:\n{stdout}{stderr}"
        );
    }
    serde_yaml::from_str(&stdout).expect("yaml")
}

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
    let effective = effective_without_secrets(&out);
    let agent = &effective["agent"];
    assert_eq!(agent["args"][0], "acp");
    assert_eq!(agent["args"][1], "***");
    assert_eq!(agent["env"]["OPENROUTER_API_KEY"], "***");
    assert_eq!(agent["env"]["PROXY_URL"], "***");
    assert_eq!(agent["env"]["LANG_HINT"], "en", "other values are printed");
    assert_eq!(effective["platforms"]["discord"]["token"], "***");
}

/// Secrets the service way: a token from `DISCORD_TOKEN_FILE`, a provider key from systemd's
/// credentials folder (`$CREDENTIALS_DIRECTORY/OPENROUTER_API_KEY`) are used and masked like
/// variables; a file that cannot be read stops the check at the key it sets, naming the file
/// and never printing a value.
#[test]
fn secrets_from_files_and_systemd_credentials_are_read_and_never_printed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("config.yaml");
    std::fs::write(
        &path,
        "platforms:\n  discord:\n    enabled: true\n\
         agent:\n  command: sh\n  env:\n    PROXY_URL: \"https://p/?key=${OPENROUTER_API_KEY}\"\n",
    )
    .expect("write");
    let token_file = dir.path().join("discord-token");
    std::fs::write(&token_file, format!("{DISCORD}\n")).unwrap();
    let credentials = dir.path().join("credentials");
    std::fs::create_dir(&credentials).unwrap();
    std::fs::write(credentials.join("OPENROUTER_API_KEY"), PROVIDER).unwrap();
    let check = |token_file: &std::path::Path| {
        Command::new(env!("CARGO_BIN_EXE_air-friends"))
            .args(["check-config", "--config"])
            .arg(&path)
            .env_remove("DISCORD_TOKEN")
            .env_remove("OPENROUTER_API_KEY")
            .env("DISCORD_TOKEN_FILE", token_file)
            .env("CREDENTIALS_DIRECTORY", &credentials)
            .env_remove("SKILL_API_PORT")
            .env_remove("HEALTH_PORT")
            .output()
            .expect("run check-config")
    };
    let out = check(&token_file);
    let effective = effective_without_secrets(&out);
    assert_eq!(
        effective["platforms"]["discord"]["token"], "***",
        "the token was read"
    );
    assert_eq!(
        effective["agent"]["env"]["PROXY_URL"], "***",
        "the key was read"
    );

    let out = check(&dir.path().join("no-such-file"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("platforms.discord.token") && stderr.contains("DISCORD_TOKEN_FILE="),
        "{stderr}"
    );
    assert!(!stderr.contains(DISCORD), "{stderr}");

    // A provider key whose credential cannot be read (a folder in its place) is named at its
    // provider's entry.
    std::fs::remove_file(credentials.join("OPENROUTER_API_KEY")).unwrap();
    std::fs::create_dir(credentials.join("OPENROUTER_API_KEY")).unwrap();
    let out = check(&token_file);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("agent.providers.openrouter.apiKeyEnv") && stderr.contains("credential "),
        "{stderr}"
    );
}
