//! The data of the permission gate's auto-approve list (SPEC.md §7): which script paths and
//! which command prefixes count as skill invocations. The gate itself (tokenising the command,
//! rejecting shell control characters and legacy flags) belongs to the agent runner; this module
//! only says whether a first token names an approved skill.

use super::LoadedSkills;

/// Script-path suffixes and command prefixes of the skills whose invocations are approved.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AutoApproveList {
    /// Suffixes such as `skills/memory-save/scripts/memory-save`: a first token approves when
    /// it equals one or ends with `/` + one.
    pub script_paths: Vec<String>,
    /// Programs of command-based skills (`agent-browser`): a first token approves when it
    /// equals one.
    pub command_prefixes: Vec<String>,
}

impl AutoApproveList {
    /// Builds the list from the loaded skills. When `explicit` is non-empty
    /// (`agent.autoApproveSkills` / `AGENT_AUTO_APPROVE_SKILLS`), only those skills are listed;
    /// an explicit name that is not loaded gets the conventional
    /// `skills/<name>/scripts/<name>` path. Otherwise every loaded skill is listed.
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
                    (Some(cmd), _) => list.command_prefixes.push(cmd.clone()),
                    (None, Some(ep)) => list
                        .script_paths
                        .push(format!("skills/{name}/{}", ep.trim_start_matches("./"))),
                    (None, None) => {}
                },
                None => list
                    .script_paths
                    .push(format!("skills/{name}/scripts/{name}")),
            }
        }
        list.script_paths.sort();
        list.script_paths.dedup();
        list.command_prefixes.sort();
        list.command_prefixes.dedup();
        list
    }

    /// Whether `token` (a command's first token, or the second after `sh`/`bash`) is an
    /// approved script: equal to a suffix, or ending with `/` + suffix.
    pub fn matches_script(&self, token: &str) -> bool {
        self.script_paths.iter().any(|suffix| {
            token == suffix
                || token
                    .strip_suffix(suffix.as_str())
                    .is_some_and(|head| head.ends_with('/'))
        })
    }

    /// Whether `token` (a command's first token) is an approved command-based skill.
    pub fn matches_prefix(&self, token: &str) -> bool {
        self.command_prefixes.iter().any(|p| p == token)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list() -> AutoApproveList {
        AutoApproveList {
            script_paths: vec!["skills/a/scripts/a".into()],
            command_prefixes: vec!["agent-browser".into()],
        }
    }

    #[test]
    fn script_matching_is_suffix_at_a_path_boundary() {
        let l = list();
        assert!(l.matches_script("skills/a/scripts/a"));
        assert!(l.matches_script("./skills/a/scripts/a"));
        assert!(l.matches_script("/srv/air/skills/a/scripts/a"));
        assert!(!l.matches_script("xskills/a/scripts/a"));
        assert!(!l.matches_script("skills/a/scripts/a2"));
        assert!(!l.matches_script("skills/b/scripts/b"));
        assert!(l.matches_prefix("agent-browser"));
        assert!(!l.matches_prefix("agent-browser2"));
        assert!(!l.matches_prefix("/usr/bin/agent-browser"));
    }
}
