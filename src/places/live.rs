//! The `places:` rules in force. A reload (SIGHUP, `air-friends reload`) replaces them whole:
//! each reader takes the current rules when it decides ([`LivePlaces::current`]) — the answer
//! policy when a message arrives, the interaction when its turn begins — and a turn keeps the
//! place it began with to its end, so one turn never mixes the old rules and the new.

use std::sync::{Arc, RwLock};

use super::{Places, Spot};
use crate::config::ReplyPolicy;
use crate::platform::PlatformKind;
use crate::platform::duties::{ChannelAt, Duties, PlaceDuties};
use crate::sync::RecoverRw;

/// The rules in force, shared by the answer policy, the interactions and the user commands.
#[derive(Debug)]
pub struct LivePlaces {
    current: RwLock<Arc<Places>>,
}

impl LivePlaces {
    /// Starts with `places`.
    pub fn new(places: Places) -> Self {
        Self {
            current: RwLock::new(Arc::new(places)),
        }
    }

    /// The rules in force now.
    pub fn current(&self) -> Arc<Places> {
        self.current.read_locked().clone()
    }

    /// Puts `places` in force for every message read from now on.
    pub fn replace(&self, places: Places) {
        *self.current.write_locked() = Arc::new(places);
    }
}

/// What the rules in force ask of the bot in a Discord channel (the adapter's permission check).
impl PlaceDuties for LivePlaces {
    fn duties(&self, at: &ChannelAt) -> Duties {
        let places = self.current();
        let spot = Spot {
            guild: Some(at.guild.clone()),
            channel: Some(at.channel.clone()),
            category: at.category.clone(),
            ..Spot::public(PlatformKind::Discord)
        };
        let place = places.resolve(&spot);
        Duties {
            place: place.name.clone(),
            answers: place.reply != Some(ReplyPolicy::Never),
            skills: Some(
                place
                    .skills
                    .clone()
                    .unwrap_or_else(|| Arc::new(places.enabled_skills().cloned().collect())),
            ),
            threads: place.threads,
        }
    }
}

impl From<Places> for LivePlaces {
    fn from(places: Places) -> Self {
        Self::new(places)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::places::Spot;

    #[test]
    fn a_snapshot_keeps_its_rules_after_a_replacement() {
        let live = LivePlaces::new(Places::none());
        let before = live.current();
        let config: Config =
            serde_yaml::from_str("places:\n  - {name: lounge, match: {dm: true}}\n").unwrap();
        live.replace(Places::new(&config, []));
        let dm: Spot = "discord/dm".parse().unwrap();
        assert_eq!(&*before.resolve(&dm).name, "default");
        assert_eq!(&*live.current().resolve(&dm).name, "lounge");
    }

    #[test]
    fn a_channels_duties_are_its_places_skills_reply_and_threads() {
        let config: Config = serde_yaml::from_str(
            "places:\n  - {name: quiet, match: {channel: '2'}, reply: never}\n  - {name: help, match: {category: '9'}, skills: [send-reply], threads: perConversation}\n",
        )
        .unwrap();
        let live = LivePlaces::new(Places::new(
            &config,
            ["send-reply".to_owned(), "react-message".to_owned()],
        ));
        let at = |category: Option<&str>, channel: &str| {
            live.duties(&ChannelAt {
                guild: "1".into(),
                category: category.map(str::to_owned),
                channel: channel.into(),
            })
        };
        let quiet = at(None, "2");
        assert!(!quiet.answers);
        let help = at(Some("9"), "3");
        assert_eq!(&*help.place, "help");
        assert!(help.allows("send-reply") && !help.allows("react-message"));
        assert_eq!(help.threads, crate::config::ThreadsPolicy::PerConversation);
        // The defaults name the enabled skills, not "every skill".
        let elsewhere = at(None, "4");
        assert_eq!(&*elsewhere.place, "default");
        assert!(
            elsewhere.answers
                && elsewhere.allows("react-message")
                && !elsewhere.allows("send-file")
        );
    }
}
