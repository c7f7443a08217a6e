//! The checks of the `places` rules that need only the file: names, the keys of each `match`,
//! rules that can never fit a message (impossible, or covered by an earlier rule), the model's
//! provider, and a `prefix` policy where no prefix is set. Which skills exist and whether a
//! persona file is there are the machine's (`app/check.rs`).

use super::Problems;
use super::values::is_skill_name;
use crate::config::{Config, PLATFORMS, PlaceMatch, ReplyPolicy, ThreadsPolicy};

/// The platforms a rule may name.
const PLATFORM_NAMES: [&str; 3] = ["discord", "misskey", "console"];

impl Config {
    /// Every rule of `places`.
    pub(super) fn check_places(&self, v: &mut Problems) {
        let mut names: Vec<&str> = Vec::new();
        for (i, rule) in self.places.iter().enumerate() {
            let key = format!("places.{i}");
            if !is_place_name(&rule.name) {
                v.add(
                    format!("{key}.name"),
                    format!(
                        "{:?} is not a rule name (1-40 of a-z, 0-9, `-`, `_`, starting with a letter or digit; it names the rule in logs and metrics)",
                        rule.name
                    ),
                );
            } else if rule.name == crate::config::DEFAULT_PLACE {
                v.add(
                    format!("{key}.name"),
                    "`default` names the settings no rule changed; choose another name",
                );
            } else if let Some(first) = names.iter().position(|n| *n == rule.name) {
                v.add(
                    format!("{key}.name"),
                    format!("{:?} is already the name of places.{first}", rule.name),
                );
            }
            names.push(&rule.name);
            self.check_place_match(v, &key, i);
            if let Some(model) = &rule.model {
                match model.split_once('/') {
                    Some((provider, _)) if self.agent.providers.contains_key(provider) => {}
                    Some((provider, _)) => v.add(
                        format!("{key}.model"),
                        format!(
                            "the provider {provider:?} is not in agent.providers ({})",
                            self.agent
                                .providers
                                .keys()
                                .cloned()
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                    ),
                    None => v.add(
                        format!("{key}.model"),
                        format!("{model:?} must be `provider/model`"),
                    ),
                }
            }
            for (j, skill) in rule.skills.iter().flatten().enumerate() {
                if !is_skill_name(skill) {
                    v.add(
                        format!("{key}.skills.{j}"),
                        format!("{skill:?} is not a skill name"),
                    );
                }
            }
            if let Some(language) = &rule.language
                && !crate::names::is_language_tag(language)
            {
                v.add(format!("{key}.language"), super::not_a_language(language));
            }
            if let Some(zone) = &rule.time_zone
                && let Err(e) = crate::timetable::zone(zone)
            {
                v.add(format!("{key}.timeZone"), e.to_string());
            }
            if rule.reply == Some(ReplyPolicy::Prefix) {
                self.check_prefix(v, &key, &rule.matches);
            }
            if let Some(threads) = rule.threads
                && threads != ThreadsPolicy::Follow
                && let Some(why) = threads_cannot_apply(&rule.matches)
            {
                v.add(
                    format!("{key}.threads"),
                    format!("`{}` can never apply: {why}", threads.as_str()),
                );
            }
        }
    }

    fn check_place_match(&self, v: &mut Problems, key: &str, i: usize) {
        let rule = &self.places[i];
        if let Some(platform) = &rule.matches.platform
            && !PLATFORM_NAMES.contains(&platform.as_str())
        {
            v.add(
                format!("{key}.match.platform"),
                format!(
                    "{platform:?} is not a platform ({})",
                    PLATFORM_NAMES.join(", ")
                ),
            );
            return;
        }
        if let Some(why) = impossible(&rule.matches) {
            v.add(format!("{key}.match"), format!("can never match: {why}"));
            return;
        }
        if let Some((j, earlier)) = self.places[..i]
            .iter()
            .enumerate()
            .find(|(_, earlier)| covers(&earlier.matches, &rule.matches))
        {
            v.add(
                format!("{key}.match"),
                format!(
                    "can never match: places.{j} ({}) comes first and matches every place this rule matches",
                    earlier.name
                ),
            );
        }
    }

    /// `reply: prefix` where a platform the rule can match has no command prefix.
    fn check_prefix(&self, v: &mut Problems, key: &str, m: &PlaceMatch) {
        for facts in PLATFORMS {
            if m.platform.as_deref().is_some_and(|p| p != facts.key) {
                continue;
            }
            if (facts.triggers)(&self.platforms).command_prefix.is_empty() {
                v.add(
                    format!("{key}.reply"),
                    format!(
                        "`prefix`, but platforms.{}.commandPrefix is empty: nothing would be answered there",
                        facts.key
                    ),
                );
            }
        }
    }
}

/// A rule name: 1-40 of `a-z`, `0-9`, `-`, `_`, starting with a letter or digit.
pub(super) fn is_place_name(name: &str) -> bool {
    (1..=40).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
        && name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
}

/// Why `m` can never fit a message, if it cannot.
fn impossible(m: &PlaceMatch) -> Option<String> {
    let server_keys: Vec<&str> = [
        ("guild", &m.guild),
        ("parent", &m.parent),
        ("category", &m.category),
    ]
    .into_iter()
    .filter(|(_, ids)| !ids.is_empty())
    .map(|(key, _)| key)
    .collect();
    if let Some(key) = server_keys.first() {
        if let Some(p) = m.platform.as_deref().filter(|p| *p != "discord") {
            return Some(format!("{key} is a Discord key, and the rule is for {p}"));
        }
        if m.dm == Some(true) {
            return Some(format!("a DM has no {key}"));
        }
    }
    if !m.channel.is_empty() {
        if m.platform.as_deref() == Some("console") {
            return Some("the console has no channels".to_owned());
        }
        if m.dm == Some(true) {
            return Some("a DM has no channel a rule can name".to_owned());
        }
    }
    None
}

/// Whether every message `later` fits is fitted by `earlier` too, so `later` never wins. A
/// sufficient test, not a complete one: each key `earlier` names is named by `later` with no
/// value outside `earlier`'s (a `parent` inside `earlier`'s `channel` counts), after what
/// `later`'s keys imply (a guild, parent or category: Discord, not a DM).
fn covers(earlier: &PlaceMatch, later: &PlaceMatch) -> bool {
    let within = |outer: &[String], inner: &[String]| {
        outer.is_empty() || (!inner.is_empty() && inner.iter().all(|id| outer.contains(id)))
    };
    let on_a_server =
        !later.guild.is_empty() || !later.parent.is_empty() || !later.category.is_empty();
    let platform = later
        .platform
        .as_deref()
        .or(on_a_server.then_some("discord"));
    let dm = later
        .dm
        .or((on_a_server || !later.channel.is_empty()).then_some(false));
    let channel = earlier.channel.is_empty()
        || within(&earlier.channel, &later.channel)
        || (later.channel.is_empty() && within(&earlier.channel, &later.parent));
    earlier
        .platform
        .as_deref()
        .is_none_or(|p| platform == Some(p))
        && earlier.dm.is_none_or(|d| dm == Some(d))
        && within(&earlier.guild, &later.guild)
        && within(&earlier.parent, &later.parent)
        && within(&earlier.category, &later.category)
        && channel
}

/// Why a rule matching `m` never sees a Discord thread: `threads` is a Discord setting, and
/// DMs have none.
fn threads_cannot_apply(m: &PlaceMatch) -> Option<&'static str> {
    if m.platform.as_deref().is_some_and(|p| p != "discord") {
        return Some("only Discord has threads");
    }
    if m.dm == Some(true) {
        return Some("direct messages have no threads");
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(yaml: &str) -> PlaceMatch {
        serde_yaml::from_str(yaml).unwrap_or_else(|e| panic!("{yaml}: {e}"))
    }

    #[test]
    fn impossible_matches_are_named() {
        assert!(impossible(&m("{platform: discord, guild: '1'}")).is_none());
        assert!(
            impossible(&m("{platform: misskey, guild: '1'}"))
                .unwrap()
                .contains("Discord key")
        );
        assert!(impossible(&m("{dm: true, category: '1'}")).is_some());
        assert!(impossible(&m("{dm: true, channel: '1'}")).is_some());
        assert!(impossible(&m("{platform: console, channel: '1'}")).is_some());
    }

    #[test]
    fn an_earlier_wider_rule_covers_a_later_narrower_one() {
        let covered = [
            ("{}", "{dm: true}"),
            ("{platform: discord}", "{guild: '1'}"),
            ("{dm: false}", "{channel: '1'}"),
            ("{guild: ['1', '2']}", "{guild: '1', channel: '3'}"),
            ("{channel: '2'}", "{parent: '2'}"),
            ("{channel: ['2', '3']}", "{channel: '3', dm: false}"),
        ];
        for (earlier, later) in covered {
            assert!(covers(&m(earlier), &m(later)), "{earlier} covers {later}");
        }
        let open = [
            ("{dm: true}", "{}"),
            ("{guild: '1'}", "{guild: ['1', '2']}"),
            ("{guild: '1'}", "{platform: discord}"),
            ("{channel: '2'}", "{parent: '3'}"),
            ("{parent: '2'}", "{channel: '2'}"),
            ("{platform: misskey}", "{guild: '1'}"),
            ("{dm: true}", "{channel: '1'}"),
        ];
        for (earlier, later) in open {
            assert!(
                !covers(&m(earlier), &m(later)),
                "{earlier} leaves {later} something"
            );
        }
    }

    #[test]
    fn a_threads_setting_where_no_thread_can_be_is_named() {
        assert!(threads_cannot_apply(&m("{platform: discord, channel: '1'}")).is_none());
        assert!(threads_cannot_apply(&m("{}")).is_none());
        assert_eq!(
            threads_cannot_apply(&m("{platform: misskey}")),
            Some("only Discord has threads")
        );
        assert_eq!(
            threads_cannot_apply(&m("{dm: true}")),
            Some("direct messages have no threads")
        );
    }
}
