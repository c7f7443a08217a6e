//! The data of the permission gate's auto-approve list: which skill entrypoints and which
//! command programs count as skill invocations. Matching a command against it (lexing, path
//! checks, canonicalisation) is the gate's job in the agent runner; this module only derives
//! the list from the loaded skills. Entrypoints are relative to the skills directory, so no
//! path elsewhere can match by its ending.

use super::LoadedSkills;

/// Entrypoints and command programs of the skills whose invocations are approved.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AutoApproveList {
    /// Script entrypoints relative to the skills directory, such as
    /// `memory-save/scripts/memory-save`.
    pub entrypoints: Vec<String>,
    /// Programs of command-based skills (`agent-browser`), compared with a command's whole
    /// program word, each with its skill (which a place's `skills` may leave out).
    pub command_prefixes: Vec<CommandSkill>,
}

/// A command-based skill (manifest `command`): the program its invocations run, and its name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct CommandSkill {
    /// The program word.
    pub program: String,
    /// The skill's name.
    pub skill: String,
}

/// A skill whose program has its name.
impl From<&str> for CommandSkill {
    fn from(name: &str) -> Self {
        Self {
            program: name.to_owned(),
            skill: name.to_owned(),
        }
    }
}

impl AutoApproveList {
    /// Builds the list from the loaded skills. When `explicit` is non-empty
    /// (`agent.autoApproveSkills` / `AGENT_AUTO_APPROVE_SKILLS`), only those skills are listed;
    /// an explicit name that is not loaded gets the conventional `<name>/scripts/<name>`
    /// entrypoint. Otherwise every loaded skill is listed.
    pub fn from_skills(skills: &LoadedSkills, explicit: &[String]) -> AutoApproveList {
        let mut list = AutoApproveList::default();
        let names: Vec<String> = if explicit.is_empty() {
            skills.names().map(str::to_owned).collect()
        } else {
            explicit
                .iter()
                .map(|n| n.trim().to_owned())
                .filter(|n| !n.is_empty())
                .collect()
        };
        for name in names {
            match skills.get(&name) {
                Some(spec) => match (&spec.manifest.command, &spec.manifest.entrypoint) {
                    (Some(cmd), _) => list.command_prefixes.push(CommandSkill {
                        program: cmd.clone(),
                        skill: name.clone(),
                    }),
                    (None, Some(ep)) => list
                        .entrypoints
                        .push(format!("{name}/{}", ep.trim_start_matches("./"))),
                    (None, None) => {}
                },
                None => list.entrypoints.push(format!("{name}/scripts/{name}")),
            }
        }
        list.entrypoints.sort();
        list.entrypoints.dedup();
        list.command_prefixes.sort();
        list.command_prefixes
            .dedup_by(|a, b| a.program == b.program);
        list
    }
}
