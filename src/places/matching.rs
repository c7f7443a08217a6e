//! A rule's `match` against a place: whether it fits ([`fits`]). Pure and unit-tested here;
//! whether a rule can fit anything at all, and whether an earlier rule leaves it nothing, are
//! the configuration's checks (`config/validate/places.rs`).

use super::spot::Spot;
use crate::config::PlaceMatch;
use crate::platform::PlatformKind;

/// Whether `m` fits a message written at `spot`: every key given fits.
pub fn fits(m: &PlaceMatch, spot: &Spot) -> bool {
    let one_of = |ids: &[String], value: &Option<String>| {
        ids.is_empty() || value.as_ref().is_some_and(|v| ids.contains(v))
    };
    let channel = m.channel.is_empty()
        || match spot.platform {
            // A thread belongs to its channel: a rule for the channel covers its threads.
            PlatformKind::Discord => {
                one_of(&m.channel, &spot.channel) || one_of(&m.channel, &spot.parent)
            }
            PlatformKind::Misskey => one_of(&m.channel, &spot.community_channel),
            PlatformKind::Console => false,
        };
    m.platform
        .as_deref()
        .is_none_or(|p| p == spot.platform.as_str())
        && m.dm.is_none_or(|dm| dm == spot.dm)
        && one_of(&m.guild, &spot.guild)
        && one_of(&m.parent, &spot.parent)
        && one_of(&m.category, &spot.category)
        && channel
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(yaml: &str) -> PlaceMatch {
        serde_yaml::from_str(yaml).unwrap_or_else(|e| panic!("{yaml}: {e}"))
    }

    fn spot(text: &str) -> Spot {
        text.parse().unwrap()
    }

    #[test]
    fn every_key_given_must_fit() {
        let support = m("{platform: discord, guild: '1', channel: ['2', '3']}");
        assert!(fits(&support, &spot("discord/guild/1/channel/2")));
        assert!(fits(&support, &spot("discord/guild/1/channel/3")));
        assert!(!fits(&support, &spot("discord/guild/1/channel/4")));
        assert!(!fits(&support, &spot("discord/guild/9/channel/2")));
        assert!(!fits(&support, &spot("discord/dm")));
        assert!(fits(&m("{}"), &spot("console/dm")));
        assert!(fits(&m("{dm: true}"), &spot("misskey/dm")));
        assert!(!fits(&m("{dm: true}"), &spot("misskey")));
        assert!(fits(&m("{dm: false}"), &spot("misskey")));
    }

    /// A rule for a channel covers its threads; `parent` fits only threads of it.
    #[test]
    fn threads_belong_to_their_channel() {
        let thread = spot("discord/guild/1/parent/2/channel/77");
        assert!(fits(&m("{channel: '2'}"), &thread));
        assert!(fits(&m("{parent: '2'}"), &thread));
        assert!(!fits(
            &m("{parent: '2'}"),
            &spot("discord/guild/1/channel/2")
        ));
        assert!(fits(
            &m("{category: '5'}"),
            &spot("discord/guild/1/category/5/parent/2/channel/77")
        ));
    }

    #[test]
    fn misskey_channels_are_the_notes_channel() {
        let rule = m("{platform: misskey, channel: abc}");
        assert!(fits(&rule, &spot("misskey/channel/abc")));
        assert!(!fits(&rule, &spot("misskey")));
        assert!(!fits(&rule, &spot("discord/guild/1/channel/abc")));
        assert!(!fits(&m("{channel: '1'}"), &spot("console/dm")));
    }

    /// Numbers written without quotes are ids too.
    #[test]
    fn ids_may_be_numbers() {
        let rule = m("{guild: 123456789012345678, channel: [1, 2]}");
        assert_eq!(rule.guild, ["123456789012345678"]);
        assert_eq!(rule.channel, ["1", "2"]);
    }
}
