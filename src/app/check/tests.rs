//! Tests of the strict check shared by `check-config` and `serve` (`check.rs`): the machine's
//! side, and file and machine problems in one run. One test per rule.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use super::*;

fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let map: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    move |name: &str| map.get(name).cloned()
}

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// A machine where everything the default base config names exists: a prompts folder with
/// `system.md`, the repository's skills, `sh` on `PATH`, Discord enabled.
struct Machine {
    dir: tempfile::TempDir,
    path_var: String,
}

impl Machine {
    fn new() -> Machine {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("prompts")).unwrap();
        std::fs::write(dir.path().join("prompts/system.md"), "You are a friend.").unwrap();
        Machine {
            dir,
            path_var: "/usr/bin:/bin".into(),
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The base config with `agent` and `extra` keys appended (whole sections: `agent` is
    /// written here, so pass agent keys through `agent`, indented by two spaces).
    fn config(&self, agent: &str, extra: &str) -> String {
        format!(
            "prompts:\n  dir: {prompts}\nagent:\n  command: sh\n  skillsDir: {skills}\n{agent}\
             platforms:\n  discord:\n    enabled: true\n    token: t0k3n\n{extra}",
            prompts = self.path("prompts").display(),
            skills = repo("skills").display(),
        )
    }

    fn check(&self, text: &str) -> Result<Checked, Rejected> {
        let home = self.path("home");
        check_str(
            text,
            &env(&[
                ("PATH", &self.path_var),
                ("OPENROUTER_API_KEY", "sk-or"),
                ("HOME", home.to_str().unwrap()),
            ]),
        )
    }

    fn errors(&self, text: &str) -> Vec<String> {
        match self.check(text) {
            Ok(_) => panic!("expected errors for:\n{text}"),
            Err(r) => r.error.issues(),
        }
    }

    fn warnings(&self, text: &str) -> Vec<String> {
        match self.check(text) {
            Ok(c) => c.warnings.iter().map(ToString::to_string).collect(),
            Err(r) => panic!("unexpected errors: {:?}", r.error.issues()),
        }
    }
}

#[test]
fn a_complete_setup_passes_with_no_warning() {
    let m = Machine::new();
    let checked = m.check(&m.config("", "")).expect("valid");
    assert!(checked.warnings.is_empty(), "{:?}", checked.warnings);
    assert_eq!(checked.config.agent.command, "sh");
}

#[test]
fn with_no_provider_key_the_free_model_is_a_warning_that_names_it() {
    let m = Machine::new();
    let home = m.path("home");
    let checked = check_str(
        &m.config("", ""),
        &env(&[("PATH", &m.path_var), ("HOME", home.to_str().unwrap())]),
    )
    .expect("valid");
    let got: Vec<String> = checked.warnings.iter().map(ToString::to_string).collect();
    assert_eq!(got.len(), 1, "{got:?}");
    assert!(
        got[0].starts_with("agent.model: no model provider key is set")
            && got[0].contains("opencode/big-pickle"),
        "{got:?}"
    );
}

#[test]
fn prompts_dir_must_be_a_folder_holding_system_md() {
    let m = Machine::new();
    let text = m.config("", "").replace(
        &m.path("prompts").display().to_string(),
        "/nonexistent/prompts",
    );
    assert_eq!(
        m.errors(&text),
        vec![
            "prompts.dir: /nonexistent/prompts is not a folder (it holds system.md and its fragments)"
        ]
    );
    std::fs::remove_file(m.path("prompts/system.md")).unwrap();
    let got = m.errors(&m.config("", ""));
    assert_eq!(got.len(), 1, "{got:?}");
    assert!(
        got[0].starts_with("prompts.dir: ") && got[0].ends_with("has no system.md"),
        "{got:?}"
    );
}

#[test]
fn skills_dir_must_be_a_folder_whose_packages_load() {
    let m = Machine::new();
    let text = m
        .config("", "")
        .replace(&repo("skills").display().to_string(), "/nonexistent/skills");
    let got = m.errors(&text);
    assert_eq!(got.len(), 1, "{got:?}");
    assert!(
        got[0].starts_with("agent.skillsDir: /nonexistent/skills is not a folder"),
        "{got:?}"
    );

    let broken = m.path("skills/broken-skill");
    std::fs::create_dir_all(&broken).unwrap();
    std::fs::write(
        broken.join("SKILL.md"),
        "---\nname: broken-skill\ndescription: x\nversion: 2\n---\nbody\n",
    )
    .unwrap();
    let text = m.config("", "").replace(
        &repo("skills").display().to_string(),
        &m.path("skills").display().to_string(),
    );
    let got = m.errors(&text);
    assert_eq!(got.len(), 1, "{got:?}");
    assert!(
        got[0].starts_with("agent.skillsDir: ")
            && got[0].contains("failed validation")
            && got[0].contains("Unexpected fields in frontmatter: version"),
        "{got:?}"
    );
}

#[test]
fn every_list_of_skill_names_names_skills_in_the_skills_dir() {
    let m = Machine::new();
    let got = m.errors(&m.config(
        "  autoApproveSkills: [send-reply, memory-sav]\n",
        "skills:\n  disabled: [send-replay, zzzz-qqqq-xxxx]\n",
    ));
    let skills = repo("skills").display().to_string();
    assert_eq!(got.len(), 3, "{got:?}");
    assert_eq!(
        got[0],
        format!(
            "skills.disabled.0: no skill \"send-replay\" in {skills}; did you mean `send-reply`?"
        )
    );
    assert!(
        got[1].starts_with("skills.disabled.1: no skill \"zzzz-qqqq-xxxx\"")
            && got[1].contains("skills there: cancel-reminder, edit-reply,"),
        "with nothing close, the skills are listed: {got:?}"
    );
    assert_eq!(
        got[2],
        format!(
            "agent.autoApproveSkills.1: no skill \"memory-sav\" in {skills}; did you mean `memory-save`?"
        )
    );
    // AGENT_AUTO_APPROVE_SKILLS is held to the same rule, at the key it overrides.
    let err = check_str(
        &m.config("", ""),
        &env(&[
            ("PATH", "/usr/bin:/bin"),
            ("AGENT_AUTO_APPROVE_SKILLS", "memory-saev"),
            ("HOME", m.path("home").to_str().unwrap()),
        ]),
    )
    .unwrap_err();
    assert!(
        err.error.issues()[0].starts_with("agent.autoApproveSkills.0: no skill \"memory-saev\""),
        "{:?}",
        err.error.issues()
    );
}

#[test]
fn agent_command_must_resolve_as_the_daemon_finds_it() {
    let mut m = Machine::new();
    let got = m.errors(
        &m.config("", "")
            .replace("command: sh", "command: no-such-agent-xyz"),
    );
    assert_eq!(
        got,
        vec![
            "agent.command: \"no-such-agent-xyz\" was not found on PATH; install it or give the executable's full path"
        ]
    );
    let got = m.errors(
        &m.config("", "")
            .replace("command: sh", "command: /nonexistent/agent"),
    );
    assert_eq!(
        got,
        vec!["agent.command: \"/nonexistent/agent\" is not an executable file"]
    );
    // The same `sh` is not found when PATH does not lead to it.
    m.path_var = m.dir.path().display().to_string();
    let got = m.errors(&m.config("", ""));
    assert!(
        got[0].starts_with("agent.command: \"sh\" was not found"),
        "{got:?}"
    );
}

#[test]
fn sandbox_read_only_paths_must_exist() {
    let m = Machine::new();
    let got = m.errors(&m.config(
        &format!(
            "  sandbox:\n    readOnlyPaths: [{}, /nonexistent/opt]\n",
            m.dir.path().display()
        ),
        "",
    ));
    assert_eq!(
        got,
        vec!["agent.sandbox.readOnlyPaths.1: /nonexistent/opt does not exist"]
    );
}

#[test]
fn an_agent_config_dir_set_to_a_missing_folder_is_a_warning() {
    let m = Machine::new();
    let got = m.warnings(&m.config("  configDir: /nonexistent/agent-config\n", ""));
    assert_eq!(
        got,
        vec![
            "agent.configDir: /nonexistent/agent-config is not a folder; the agent starts without air-friends' agent configuration"
        ]
    );
    let existing = format!("  configDir: {}\n", m.dir.path().display());
    assert!(m.warnings(&m.config(&existing, "")).is_empty());
}

#[test]
fn no_enabled_platform_is_a_warning_not_an_error() {
    let m = Machine::new();
    let text = m.config("", "").replace("enabled: true", "enabled: false");
    assert_eq!(
        m.warnings(&text),
        vec![
            "platforms: no platform is enabled: serve answers nobody (fine for `air-friends chat`); \
             set platforms.discord.enabled or platforms.misskey.enabled"
        ]
    );
    // The warning comes with the errors, too.
    let broken = text.replace("command: sh", "command: no-such-agent-xyz");
    let rejected = m.check(&broken).unwrap_err();
    assert_eq!(rejected.warnings.len(), 1);
    assert_eq!(rejected.warnings[0].path, "platforms");
}

#[test]
fn file_and_machine_problems_are_reported_in_one_run() {
    let m = Machine::new();
    let text = m
        .config(
            "  maxTurnMs: soon\n  maxConcurentSessions: 2\n",
            "logging:\n  level: loud\nskills:\n  disabled: [send-replay]\n",
        )
        .replace("command: sh", "command: no-such-agent-xyz")
        .replace(
            &m.path("prompts").display().to_string(),
            "/nonexistent/prompts",
        );
    let got = m.errors(&text);
    let keys: Vec<&str> = got.iter().map(|g| g.split_once(": ").unwrap().0).collect();
    assert_eq!(
        keys,
        [
            "agent.maxConcurentSessions",
            "agent.maxTurnMs",
            "logging.level",
            "prompts.dir",
            "skills.disabled.0",
            "agent.command",
        ],
        "{got:?}"
    );
}

#[test]
fn a_key_with_a_type_error_is_not_checked_on_the_machine_through_its_default() {
    // The default command (`opencode`) is on no PATH here; only the type error is reported.
    let mut m = Machine::new();
    m.path_var = m.dir.path().display().to_string();
    let got = m.errors(&m.config("", "").replace("command: sh", "command: [sh]"));
    assert_eq!(got.len(), 1, "{got:?}");
    assert!(got[0].starts_with("agent.command: invalid type"), "{got:?}");
}

/// A place's skills must be skills of the skills folder, its persona a prompt file or a folder
/// with system.md; naming a disabled skill, or turning on what is off everywhere, is a warning.
#[test]
fn places_name_real_skills_and_personas() {
    let m = Machine::new();
    std::fs::write(m.path("support.md"), "You help.").unwrap();
    std::fs::create_dir(m.path("empty-persona")).unwrap();
    let got = m.errors(&m.config(
        "",
        &format!(
            "places:\n  - name: a\n    match: {{channel: '1'}}\n    skills: [send-reply, send-replay]\n    persona: {missing}\n  - name: b\n    match: {{channel: '2'}}\n    persona: {empty}\n",
            missing = m.path("nope.md").display(),
            empty = m.path("empty-persona").display(),
        ),
    ));
    assert_eq!(got.len(), 3, "{got:?}");
    assert!(
        got[0].starts_with("places.0.skills.1: no skill \"send-replay\"")
            && got[0].ends_with("did you mean `send-reply`?"),
        "{got:?}"
    );
    assert!(
        got[1].starts_with("places.0.persona: ") && got[1].contains("does not exist"),
        "{got:?}"
    );
    assert!(
        got[2].starts_with("places.1.persona: ") && got[2].ends_with("a folder without system.md"),
        "{got:?}"
    );
    let warnings = m.warnings(&m.config(
        "  warm:\n    enabled: false\n",
        &format!(
            "skills:\n  disabled: [send-file]\nplaces:\n  - name: a\n    match: {{dm: true}}\n    persona: {persona}\n    skills: [send-reply, send-file]\n    warm: true\n    voiceReplies: true\n",
            persona = m.path("support.md").display(),
        ),
    ));
    assert_eq!(
        warnings,
        [
            "places.0.skills.1: send-file is disabled by the configuration, so not used here either",
            "places.0.warm: true has no effect while agent.warm.enabled is false",
            "places.0.voiceReplies: true has no effect while speech is unset",
        ]
    );
}

#[test]
fn every_language_needs_its_texts_and_an_old_failure_file_is_pointed_to_its_new_home() {
    let m = Machine::new();
    std::fs::create_dir(m.path("prompts/texts")).unwrap();
    std::fs::write(
        m.path("prompts/texts/ja.md"),
        "## busy\n忙しい\n## nope\nx\n",
    )
    .unwrap();
    let places = "places:\n  - {name: tokyo, match: {dm: false}, language: ja}\n  - {name: rome, match: {dm: true}, language: it}\n";
    let got = m.errors(&m.config("", places));
    assert_eq!(got.len(), 1, "{got:?}");
    assert!(
        got[0].starts_with("places.1.language: no texts for \"it\"") && got[0].contains("it.md"),
        "{got:?}"
    );

    let one_place = "places:\n  - {name: tokyo, match: {dm: false}, language: ja}\n";
    std::fs::write(m.path("prompts/model-failures.md"), "## unreachable\nold\n").unwrap();
    let got = m.warnings(&m.config("", one_place));
    assert!(
        got.iter()
            .any(|w| w.starts_with("places.0.language:")
                && w.contains("\"nope\" names no daemon text")),
        "{got:?}"
    );
    assert!(
        got.iter()
            .any(|w| w.starts_with("places.0.language:") && w.contains("has no text for too_fast")),
        "{got:?}"
    );
    assert!(
        got.iter().any(|w| w.starts_with("prompts.dir:")
            && w.contains("model-failures.md is no longer read")
            && w.contains("texts/en.md")),
        "{got:?}"
    );

    // A tag that cannot name a file is the file's own error.
    let config = m
        .config("", "")
        .replace("prompts:\n", "prompts:\n  language: ../x\n");
    let got = m.errors(&config);
    assert!(
        got.iter()
            .any(|e| e.starts_with("prompts.language: \"../x\" is not a language tag")),
        "{got:?}"
    );
}

/// A schedule's cron, zone, place and prompt file are checked, each at its key; a schedule on a
/// platform that is off is a warning.
#[test]
fn schedules_need_a_timetable_a_place_to_post_and_their_prompt_file() {
    let m = Machine::new();
    std::fs::create_dir(m.path("prompts/schedules")).unwrap();
    std::fs::write(m.path("prompts/schedules/morning.md"), "Say good morning.").unwrap();
    let schedules = "schedules:\n\
        \x20 - {name: morning, cron: '0 8 * * *', timeZone: Europe/Berlin, place: discord/guild/1/channel/2, prompt: morning.md}\n\
        \x20 - {name: bad-cron, cron: '0 25 * * *', place: discord/guild/1/channel/2, prompt: morning.md}\n\
        \x20 - {name: bad-zone, cron: '@daily', timeZone: Mars/Olympus, place: discord/guild/1/channel/2, prompt: morning.md}\n\
        \x20 - {name: to-dm, cron: '@daily', place: discord/dm, prompt: morning.md}\n\
        \x20 - {name: no-file, cron: '@daily', place: discord/guild/1/channel/2, prompt: evening.md}\n\
        \x20 - {name: morning, cron: '@daily', place: console, prompt: ../system.md}\n";
    let got = m.errors(&m.config("", schedules));
    assert_eq!(
        got.iter()
            .map(|e| e.split(": ").next().unwrap())
            .collect::<Vec<_>>(),
        [
            "schedules.1.cron",
            "schedules.2.timeZone",
            "schedules.5.name",
            "schedules.5.prompt",
            "schedules.3.place",
            "schedules.4.prompt",
            "schedules.5.place",
        ],
        "{got:?}"
    );
    assert!(got[0].contains("is not a cron expression"), "{got:?}");
    assert!(got[1].contains("is not an IANA time zone"), "{got:?}");
    assert!(
        got[4].ends_with("a schedule posts in a public place, not a DM"),
        "{got:?}"
    );
    assert!(got[5].contains("evening.md is not a file"), "{got:?}");
    assert!(
        got[6].contains("console is not a place to post in"),
        "{got:?}"
    );
    // With Discord off a schedule there never runs.
    let warnings = m.warnings(
        &m.config(
            "",
            "schedules:\n  - {name: morning, cron: '@daily', place: discord/guild/1/channel/2, prompt: morning.md}\n",
        )
        .replace("enabled: true", "enabled: false"),
    );
    assert_eq!(
        warnings[0],
        "schedules.0.place: platforms.discord.enabled is off: this schedule never runs"
    );
}

/// An MCP server that does not accept connections is a warning naming it, not an error; one
/// that does is no warning.
#[test]
fn an_mcp_server_that_cannot_be_reached_now_is_a_warning() {
    let m = Machine::new();
    let up = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let down = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let down_port = down.local_addr().unwrap().port();
    drop(down);
    let servers = format!(
        "mcp:\n  servers:\n    - name: up\n      url: http://127.0.0.1:{}/mcp\n      local: true\n    \
         - name: down\n      url: http://127.0.0.1:{down_port}/mcp\n      local: true\n",
        up.local_addr().unwrap().port()
    );
    let warnings = m.warnings(&m.config("", &servers));
    assert_eq!(
        warnings,
        [format!(
            "mcp.servers.1.url: 127.0.0.1:{down_port} does not accept connections now: the agent's calls to \"down\" fail until it does"
        )]
    );
}

/// A stdio MCP server whose program is not on PATH is a warning naming it.
#[test]
fn a_stdio_mcp_server_whose_program_is_missing_is_a_warning() {
    let m = Machine::new();
    let servers = "mcp:\n  servers:\n    - name: here\n      kind: stdio\n      command: [sh, -c, 'true']\n    \
         - name: gone\n      kind: stdio\n      command: [no-such-mcp-server-7]\n";
    let warnings = m.warnings(&m.config("", servers));
    assert_eq!(
        warnings,
        [
            "mcp.servers.1.command.0: \"no-such-mcp-server-7\" is not an executable on PATH: the agent's calls to \"gone\" fail until it is installed"
        ]
    );
}

/// The console on a listener that is not loopback is a warning; on loopback, none.
#[test]
fn the_console_on_a_network_listener_is_a_warning() {
    let m = Machine::new();
    let warnings = m.warnings(&m.config("", "admin:\n  enabled: true\n"));
    assert!(warnings.is_empty(), "{warnings:?}");
    let warnings = m.warnings(&m.config(
        "",
        "admin:\n  enabled: true\nhealth:\n  host: 0.0.0.0\n  port: 0\n",
    ));
    assert_eq!(
        warnings,
        [
            "admin.enabled: the console is served in plain HTTP on 0.0.0.0: keep health.host on 127.0.0.1 and use an SSH tunnel, or put TLS in front"
        ]
    );
}
