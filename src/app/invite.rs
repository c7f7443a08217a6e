//! `air-friends discord invite-url`: the URL that invites the bot to a Discord server with
//! exactly the scopes and permissions the enabled skills use (`platform::discord::invite`).

use std::path::Path;
use std::process::ExitCode;

use crate::config::{Config, ThreadsPolicy};
use crate::platform::discord::invite::{
    CREATE_PUBLIC_THREADS, application_id, invite_url, permissions,
};

/// What the `places:` rules need beyond the skills: opening threads where a rule says
/// `threads: perConversation`.
fn place_permissions(config: &Config) -> u64 {
    if config
        .places
        .iter()
        .any(|rule| rule.threads == Some(ThreadsPolicy::PerConversation))
    {
        CREATE_PUBLIC_THREADS
    } else {
        0
    }
}

/// Prints the invite URL for the configuration at `config_path`.
pub(super) fn invite_url_main(config_path: &Path, client_id: Option<u64>) -> ExitCode {
    let (config, skills) = match super::load_config_and_skills(config_path) {
        Ok(loaded) => loaded,
        Err(code) => return code,
    };
    let bits = permissions(skills.names().filter(|name| config.skill_enabled(name)))
        | place_permissions(&config);
    // `/privacy` and `/forget` (the daemon's own) are always offered, whatever the skills.
    let slash_commands = true;
    let Some(id) = client_id.or_else(|| application_id(config.platforms.discord.token.expose()))
    else {
        eprintln!(
            "air-friends: the application id cannot be read from platforms.discord.token \
             (DISCORD_TOKEN is unset or not a bot token); give it with --client-id ID (the \
             Application ID on the application's General Information page)"
        );
        return ExitCode::FAILURE;
    };
    println!("{}", invite_url(id, bits, slash_commands));
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_per_conversation_place_asks_to_create_threads() {
        let mut config = Config::default();
        assert_eq!(place_permissions(&config), 0);
        config.places =
            serde_yaml::from_str("- {name: help, match: {channel: '1'}, threads: perConversation}")
                .unwrap();
        assert_eq!(place_permissions(&config), CREATE_PUBLIC_THREADS);
    }
}
