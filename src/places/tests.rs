use super::*;

const SKILLS: [&str; 6] = [
    "send-reply",
    "react-message",
    "memory-save",
    "memory-patch",
    "memory-search",
    "send-file",
];

fn places(yaml: &str) -> Places {
    let config: Config = serde_yaml::from_str(yaml).unwrap_or_else(|e| panic!("{yaml}: {e}"));
    Places::new(&config, SKILLS.iter().map(|s| (*s).to_owned()))
}

fn spot(text: &str) -> Spot {
    text.parse().unwrap()
}

const RULES: &str = "
agent:
  model: openrouter/big
  warm:
    enabled: true
places:
  - name: support
    match: {platform: discord, channel: '2'}
    persona: /etc/air-friends/support.md
    model: openrouter/cheap
    reply: always
    skills: [send-reply, memory-save, memory-search, unknown-skill]
    memory: readOnly
    tokensPerUserPerDay: 1000
    warm: false
  - name: quiet-server
    match: {guild: '1'}
    reply: never
  - name: dms
    match: {dm: true}
    memory: 'off'
";

#[test]
fn the_first_rule_that_fits_wins_and_the_rest_is_global() {
    let p = places(RULES);
    let support = p.resolve(&spot("discord/guild/1/channel/2"));
    assert_eq!(&*support.name, "support");
    assert_eq!(support.rule, Some(0));
    assert_eq!(support.reply, Some(ReplyPolicy::Always));
    assert_eq!(support.model.as_deref(), Some("openrouter/cheap"));
    assert_eq!(
        support.persona.as_deref(),
        Some(std::path::Path::new("/etc/air-friends/support.md"))
    );
    assert!(!support.warm, "the rule turns warm agents off");
    assert!(support.attachments, "attachments.enabled's default");
    assert_eq!(support.tokens_per_user_per_day, Some(1000));

    let quiet = p.resolve(&spot("discord/guild/1/channel/3"));
    assert_eq!(&*quiet.name, "quiet-server");
    assert_eq!(quiet.reply, Some(ReplyPolicy::Never));
    assert_eq!(
        quiet.model.as_deref(),
        Some("openrouter/big"),
        "agent.model"
    );
    assert!(quiet.warm && quiet.skills.is_none());

    let elsewhere = p.resolve(&spot("misskey"));
    assert_eq!(&*elsewhere.name, DEFAULT_PLACE);
    assert_eq!(elsewhere.rule, None);
    assert_eq!(elsewhere.reply, None);
}

/// A rule's skills are narrowed to the enabled ones, and its memory access takes the memory
/// skills away: the grant the Skill API enforces says the same.
#[test]
fn skills_and_memory_access_narrow_what_the_agent_may_call() {
    let p = places(RULES);
    let support = p.resolve(&spot("discord/guild/1/channel/2"));
    let skills: Vec<&str> = support
        .skills
        .as_ref()
        .unwrap()
        .iter()
        .map(String::as_str)
        .collect();
    assert_eq!(skills, ["memory-search", "send-reply"]);
    let grant = support.grant();
    assert!(grant.allows_skill("send-reply") && grant.allows_skill("memory-search"));
    for refused in ["memory-save", "react-message", "unknown-skill"] {
        assert!(!grant.allows_skill(refused), "{refused}");
    }
    assert_eq!(&*grant.name, "support");
    assert_eq!(grant.tokens_per_user_per_day, Some(1000));

    let dm = p.resolve(&spot("misskey/dm"));
    assert_eq!(dm.memory, MemoryAccess::Off);
    assert!(dm.allows_skill("send-reply") && dm.allows_skill("send-file"));
    for memory in MEMORY_SKILLS {
        assert!(!dm.allows_skill(memory), "{memory}");
    }
    assert!(
        p.resolve(&spot("misskey"))
            .grant()
            .allows_skill("memory-save")
    );
}

/// A rule cannot switch on what the global settings switched off.
#[test]
fn a_rule_cannot_turn_on_what_is_off_everywhere() {
    let p = places(
        "attachments: {enabled: false}\nagent: {warm: {enabled: false}}\nplaces:\n  - name: files\n    match: {}\n    attachments: true\n    warm: true\n",
    );
    let place = p.resolve(&spot("discord/dm"));
    assert!(!place.attachments, "attachments.enabled is false");
    assert!(!place.warm, "agent.warm.enabled is false");
}

#[test]
fn explain_names_the_rule_behind_each_setting() {
    let p = places(RULES);
    let lines = p.explain(&spot("discord/guild/1/channel/2"));
    let line = |key: &str| lines.iter().find(|l| l.key == key).unwrap().clone();
    assert_eq!(line("rule").value, "support");
    assert_eq!(line("reply").value, "always");
    assert_eq!(line("reply").source, "places.0 (support)");
    assert_eq!(line("model").source, "places.0 (support)");
    assert_eq!(line("attachments").source, "attachments.enabled");
    assert_eq!(line("skills").value, "memory-search, send-reply");

    let lines = p.explain(&spot("discord/guild/1/channel/3"));
    let line = |key: &str| lines.iter().find(|l| l.key == key).unwrap().clone();
    assert_eq!(line("rule").value, "quiet-server");
    assert_eq!(line("model").value, "openrouter/big");
    assert_eq!(line("model").source, "agent.model");
    assert_eq!(line("skills").value, "every enabled skill");
    assert_eq!(line("persona").source, "prompts.dir");

    let lines = p.explain(&spot("misskey"));
    assert_eq!(lines[0].value, "default");
    assert_eq!(lines[0].source, "no rule of places fits");
}

/// A skill is offered in a guild when some place there allows it: a rule for the whole guild
/// decides for every message in it; a channel's rule only for its channel, and the defaults
/// for the rest.
#[test]
fn a_skill_is_offered_in_a_guild_where_some_place_allows_it() {
    let p = places(
        "places:
  - {name: help, match: {guild: '1', channel: '10'}, skills: [send-reply, memory-search]}
  - {name: quiet-server, match: {guild: '1'}, skills: [send-reply]}
  - {name: dms, match: {dm: true}, skills: []}
  - {name: misskey, match: {platform: misskey}, skills: [react-message]}
  - {name: no-memories, match: {guild: '2', channel: '20'}, memory: 'off'}
",
    );
    assert!(p.allows_in_guild("1", "send-reply"));
    assert!(p.allows_in_guild("1", "memory-search"), "#10 allows it");
    assert!(
        !p.allows_in_guild("1", "react-message"),
        "nothing in guild 1 allows it; the DM and Misskey rules do not count"
    );
    assert!(
        p.allows_in_guild("2", "memory-save"),
        "the defaults apply outside #20"
    );
    assert!(p.allows_in_guild("3", "react-message"));
}

/// `voiceReplies: false` leaves send-voice out of a place's skills; elsewhere it is one of the
/// enabled skills as any other, and `explain` says where it is on.
#[test]
fn voice_replies_can_be_turned_off_in_a_place() {
    let config: Config = serde_yaml::from_str(
        "places:\n  - name: library\n    match: {platform: discord, channel: '7'}\n    voiceReplies: false\n",
    )
    .unwrap();
    let skills = ["send-reply", "send-voice"].map(str::to_owned);
    let p = Places::new(&config, skills);
    let library = p.resolve(&spot("discord/guild/1/channel/7"));
    assert!(library.allows_skill("send-reply") && !library.allows_skill("send-voice"));
    let elsewhere = p.resolve(&spot("discord/guild/1/channel/8"));
    assert!(elsewhere.allows_skill("send-voice"));
    let said = |spot_text: &str| {
        p.explain(&spot(spot_text))
            .into_iter()
            .find(|e| e.key == "voiceReplies")
            .map(|e| (e.value, e.source))
            .unwrap()
    };
    assert_eq!(
        said("discord/guild/1/channel/7"),
        ("off".to_owned(), "places.0 (library)".to_owned())
    );
    assert_eq!(
        said("discord/guild/1/channel/8"),
        ("on".to_owned(), "speech".to_owned())
    );
    // Without a speech service send-voice is not enabled, so it is off everywhere.
    let p = Places::new(&config, ["send-reply".to_owned()]);
    let (value, _) = p
        .explain(&spot("discord/guild/1/channel/8"))
        .into_iter()
        .find(|e| e.key == "voiceReplies")
        .map(|e| (e.value, e.source))
        .unwrap();
    assert_eq!(value, "off");
}
