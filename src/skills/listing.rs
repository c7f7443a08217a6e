//! `air-friends skill --help`: the client mode's usage and the skills it would find, each with
//! the first sentence of its SKILL.md description.
//!
//! The folders are the ones [`super::client::resolve_manifest`] searches, in its order:
//! `$AIR_FRIENDS_SKILLS_DIR`, then `./skills`. A skill is a subfolder with a kebab-case name
//! and a `manifest.json` (what the client needs to call it); a name already found in an
//! earlier folder is not listed again, as the client would never reach it. When neither folder
//! holds a skill, the built-in skills embedded in the binary are listed (the client's
//! fallback). Listing never fails: a skill whose SKILL.md is missing or broken is listed with a
//! pointer to `air-friends skills validate`.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use super::builtin;
use super::client::ClientEnv;
use super::frontmatter;
use super::manifest;

/// One skill found in a folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedSkill {
    /// The skill's name (its folder's name).
    pub name: String,
    /// The first sentence of its description, or why there is none.
    pub summary: String,
}

/// The skills of one folder, as the client would find them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkillFolder {
    /// The folder.
    pub dir: PathBuf,
    /// Its skills not found in an earlier folder, by name.
    pub skills: Vec<ListedSkill>,
}

/// The folders the client searches, in its order (see the module docs).
pub fn search_folders(env: &ClientEnv) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = env.skills_dir.iter().cloned().collect();
    dirs.push(env.cwd.join("skills"));
    dirs
}

/// The skills found in `dirs`, each name only in the first folder that has it; folders that
/// do not exist or hold no new skill are left out.
pub fn find_skills(dirs: &[PathBuf]) -> Vec<SkillFolder> {
    let mut seen = BTreeSet::new();
    let mut folders = Vec::new();
    for dir in dirs {
        let skills: Vec<ListedSkill> = skill_names(dir)
            .into_iter()
            .filter(|name| seen.insert(name.clone()))
            .map(|name| ListedSkill {
                summary: summary(&dir.join(&name)),
                name,
            })
            .collect();
        if !skills.is_empty() {
            folders.push(SkillFolder {
                dir: dir.clone(),
                skills,
            });
        }
    }
    folders
}

/// The text `air-friends skill --help` prints.
pub fn skill_help(env: &ClientEnv) -> String {
    let mut out = String::from(
        "Usage: air-friends skill NAME [FLAGS...]\n       air-friends skill NAME --help\n\n\
         Client mode, run by skill scripts: calls skill NAME on the daemon's Skill API as the\n\
         agent session named by SESSION_ID, SKILL_API_TOKEN and SKILL_API_URL.\n\
         `air-friends skill NAME --help` lists the flags of one skill.\n",
    );
    let dirs = search_folders(env);
    let folders = find_skills(&dirs);
    if folders.is_empty() {
        let looked: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
        let builtin: Vec<ListedSkill> = builtin::builtin_names()
            .map(|name| ListedSkill {
                name: name.to_owned(),
                summary: String::new(),
            })
            .collect();
        let _ = write!(
            out,
            "\nNo skills found in {}; the built-in skills:\n",
            looked.join(" or ")
        );
        render(&mut out, &builtin);
    }
    for folder in &folders {
        let _ = write!(out, "\nSkills in {}:\n", folder.dir.display());
        render(&mut out, &folder.skills);
    }
    out
}

/// Names of the subfolders of `dir` that the client could call, sorted.
fn skill_names(dir: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut names: Vec<String> = entries
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|name| manifest::is_kebab(name) && dir.join(name).join("manifest.json").is_file())
        .collect();
    names.sort();
    names
}

/// The first sentence of the description in `skill_dir/SKILL.md`, or why there is none.
fn summary(skill_dir: &Path) -> String {
    let name = skill_dir.file_name().and_then(|n| n.to_str());
    let broken = || {
        format!(
            "(no valid SKILL.md; run `air-friends skills validate {}`)",
            skill_dir.display()
        )
    };
    match std::fs::read_to_string(skill_dir.join("SKILL.md")) {
        Ok(text) => match frontmatter::parse(&text, name) {
            Ok(doc) => first_sentence(&doc.frontmatter.description),
            Err(_) => broken(),
        },
        Err(_) => broken(),
    }
}

/// `text` on one line, cut after its first sentence (a `.`, `!` or `?` followed by a space).
fn first_sentence(text: &str) -> String {
    let line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let end = line
        .char_indices()
        .zip(line.chars().skip(1))
        .find(|((_, c), next)| matches!(c, '.' | '!' | '?') && *next == ' ')
        .map(|((i, _), _)| i + 1);
    match end {
        Some(i) => line[..i].to_owned(),
        None => line,
    }
}

fn render(out: &mut String, skills: &[ListedSkill]) {
    let width = skills.iter().map(|s| s.name.len()).max().unwrap_or(0);
    for s in skills {
        let line = format!("  {:width$}  {}", s.name, s.summary);
        out.push_str(line.trim_end());
        out.push('\n');
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write_skill(root: &Path, name: &str, skill_md: Option<&str>) {
        let dir = root.join(name);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("manifest.json"), "{}").unwrap();
        if let Some(text) = skill_md {
            std::fs::write(dir.join("SKILL.md"), text).unwrap();
        }
    }

    fn skill_md(name: &str, description: &str) -> String {
        format!("---\nname: {name}\ndescription: \"{description}\"\n---\nBody.\n")
    }

    #[test]
    fn first_sentence_keeps_one_line_up_to_the_first_full_stop() {
        assert_eq!(
            first_sentence("Send your answer.  Call it\n once per turn (v1.0 rules)."),
            "Send your answer."
        );
        assert_eq!(first_sentence("No stop at all"), "No stop at all");
        assert_eq!(first_sentence("Version 1.5 is fine"), "Version 1.5 is fine");
    }

    #[test]
    fn an_earlier_folder_shadows_a_later_one_as_in_the_client_lookup() {
        let tmp = tempfile::tempdir().unwrap();
        let custom = tmp.path().join("custom");
        let cwd_skills = tmp.path().join("skills");
        write_skill(
            &custom,
            "send-reply",
            Some(&skill_md("send-reply", "Mine. More.")),
        );
        write_skill(
            &cwd_skills,
            "send-reply",
            Some(&skill_md("send-reply", "Theirs.")),
        );
        write_skill(&cwd_skills, "memory-save", None);
        std::fs::create_dir_all(cwd_skills.join("not-a-skill")).unwrap();
        std::fs::create_dir_all(cwd_skills.join("Bad_Name")).unwrap();
        std::fs::write(cwd_skills.join("Bad_Name/manifest.json"), "{}").unwrap();

        let env = ClientEnv {
            cwd: tmp.path().to_path_buf(),
            skills_dir: Some(custom.clone()),
            ..ClientEnv::default()
        };
        let folders = find_skills(&search_folders(&env));
        assert_eq!(folders.len(), 2);
        assert_eq!(folders[0].dir, custom);
        assert_eq!(
            folders[0].skills,
            [ListedSkill {
                name: "send-reply".into(),
                summary: "Mine.".into()
            }]
        );
        assert_eq!(folders[1].skills.len(), 1, "{folders:?}");
        assert_eq!(folders[1].skills[0].name, "memory-save");
        assert!(
            folders[1].skills[0]
                .summary
                .contains("air-friends skills validate"),
            "{folders:?}"
        );
    }

    #[test]
    fn without_any_skills_folder_the_builtin_skills_are_listed() {
        let tmp = tempfile::tempdir().unwrap();
        let env = ClientEnv {
            cwd: tmp.path().to_path_buf(),
            ..ClientEnv::default()
        };
        let text = skill_help(&env);
        assert!(text.contains("the built-in skills:"), "{text}");
        for name in builtin::builtin_names() {
            assert!(text.contains(&format!("\n  {name}\n")), "{name} in {text}");
        }
    }
}
