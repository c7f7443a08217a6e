//! The skill packages the daemon serves: loaded and validated from `agent.skillsDir`, with the
//! user commands they offer the platforms' users, and the `places:` rules that narrow them per
//! place (read here because a place's skills are judged against the enabled ones).

use std::path::PathBuf;
use std::sync::Arc;

use super::absolute;
use crate::config::Config;
use crate::places::{LivePlaces, Places};
use crate::platform::UserCommandSpec;
use crate::privacy::commands::PrivacyCommands;
use crate::skills::{LoadedSkills, load_skills};

/// The skill packages (validated), their canonical folder, and the user commands they offer
/// (disabled skills left out).
pub(super) struct SkillPackages {
    /// Canonical: the prompt, the sandbox mounts and the permission gate all name the skill
    /// scripts by this one real path.
    pub(super) dir: PathBuf,
    /// The packages found in `dir`.
    pub(super) loaded: LoadedSkills,
    /// The user commands of the enabled skills, for the platforms to register.
    pub(super) commands: Vec<UserCommandSpec>,
    /// The `places:` rules over the enabled skills, replaced by a reload.
    pub(super) places: Arc<LivePlaces>,
    /// The names of the skills the configuration enables (what a reload's rules narrow).
    pub(super) enabled: Vec<String>,
}

impl SkillPackages {
    /// Loads `agent.skillsDir`; a package that fails validation stops the daemon, warnings
    /// are logged.
    pub(super) fn load(config: &Config) -> anyhow::Result<Self> {
        let dir = std::fs::canonicalize(&config.agent.skills_dir)
            .unwrap_or_else(|_| absolute(&config.agent.skills_dir));
        let loaded = load_skills(&dir).map_err(|e| {
            anyhow::anyhow!("skill packages in {} failed validation: {e}", dir.display())
        })?;
        for warning in loaded.warnings() {
            tracing::warn!(warning = %warning, "skill package warning");
        }
        let enabled = loaded
            .names()
            .filter(|name| config.skill_enabled(name))
            .map(str::to_owned)
            .collect::<Vec<_>>();
        let rules = Places::new(config, enabled.iter().cloned());
        // A command no place of a configured guild allows is not registered there.
        let guilds = &config.platforms.discord.guild_ids;
        let commands: Vec<UserCommandSpec> = loaded
            .user_commands()
            .filter(|s| config.skill_enabled(&s.name))
            .map(|s| UserCommandSpec {
                name: s.name.clone(),
                description: s.description().to_owned(),
                input_schema: s.input_schema().clone(),
                hidden_in_guilds: guilds
                    .iter()
                    .filter(|guild| !rules.allows_in_guild(guild, &s.name))
                    .cloned()
                    .collect(),
            })
            .chain(PrivacyCommands::specs())
            .collect();
        let places = Arc::new(rules.into());
        Ok(Self {
            dir,
            loaded,
            commands,
            places,
            enabled,
        })
    }
}
