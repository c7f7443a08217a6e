//! Where a message was written, as the `places:` rules see it ([`Spot`]): taken from a message
//! the adapter delivered, or parsed from the text `air-friends places explain` is given
//! (`discord/guild/1/channel/2`, `misskey/dm`, …).

use std::fmt;

use crate::platform::{IncomingMessage, Location, Origin, PlatformKind};

/// The facts a rule's `match` is judged on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spot {
    /// The platform.
    pub platform: PlatformKind,
    /// A direct message.
    pub dm: bool,
    /// Discord: the guild.
    pub guild: Option<String>,
    /// Discord: the channel (a thread's own id for a message in a thread).
    pub channel: Option<String>,
    /// Discord: a thread's or forum post's channel or forum.
    pub parent: Option<String>,
    /// Discord: the category.
    pub category: Option<String>,
    /// Misskey: the channel a note was posted in.
    pub community_channel: Option<String>,
}

impl Spot {
    /// Where `msg` was written.
    pub fn of(msg: &IncomingMessage) -> Self {
        Self::at(&msg.origin(), &msg.location)
    }

    /// Where a message from `origin` at `location` would be written (a typing user's).
    pub fn at(origin: &Origin, location: &Location) -> Self {
        Self {
            parent: location.thread_parent_id.clone(),
            category: location.category_id.clone(),
            community_channel: location.community_channel_id.clone(),
            ..Self::of_origin(origin)
        }
    }

    /// Where a user command was run: its channel and guild (a command carries no thread or
    /// category, so rules naming them do not fit it).
    pub fn of_origin(origin: &Origin) -> Self {
        let discord = origin.platform == PlatformKind::Discord;
        Self {
            dm: origin.is_dm,
            guild: origin.guild_id.clone(),
            channel: discord.then(|| origin.channel_id.as_str().to_owned()),
            ..Self::public(origin.platform)
        }
    }

    /// A public place on `platform` about which nothing else is known.
    pub fn public(platform: PlatformKind) -> Self {
        Self {
            platform,
            dm: false,
            guild: None,
            channel: None,
            parent: None,
            category: None,
            community_channel: None,
        }
    }
}

/// Why a place's text could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpotError {
    /// The first part is not a platform.
    #[error(transparent)]
    Platform(#[from] crate::platform::UnknownPlatform),
    /// A part that is not `dm` or a known key.
    #[error("unknown part {0:?}: expected dm, guild/ID, channel/ID, parent/ID or category/ID")]
    Part(String),
    /// A key without its id.
    #[error("{0} needs an id after it, e.g. {0}/123")]
    MissingId(String),
    /// A key the platform has no such thing for.
    #[error("{platform} has no {key}")]
    NotOnPlatform {
        /// The platform.
        platform: PlatformKind,
        /// The key.
        key: String,
    },
    /// A DM with a guild, parent or category.
    #[error("a DM has no guild, parent or category")]
    DmWithServer,
}

impl std::str::FromStr for Spot {
    type Err = SpotError;

    /// `platform`, then any of `dm`, `guild/ID`, `channel/ID`, `parent/ID`, `category/ID`, all
    /// separated by `/`. On Misskey `channel` is the channel a note was posted in.
    fn from_str(text: &str) -> Result<Self, SpotError> {
        let mut parts = text.trim().trim_matches('/').split('/');
        let platform: PlatformKind = parts.next().unwrap_or_default().parse()?;
        let mut spot = Spot::public(platform);
        while let Some(part) = parts.next() {
            if part == "dm" {
                spot.dm = true;
                continue;
            }
            let slot = match (platform, part) {
                (PlatformKind::Discord, "guild") => &mut spot.guild,
                (PlatformKind::Discord, "channel") => &mut spot.channel,
                (PlatformKind::Misskey, "channel") => &mut spot.community_channel,
                (PlatformKind::Discord, "parent") => &mut spot.parent,
                (PlatformKind::Discord, "category") => &mut spot.category,
                (_, "guild" | "channel" | "parent" | "category") => {
                    return Err(SpotError::NotOnPlatform {
                        platform,
                        key: part.to_owned(),
                    });
                }
                _ => return Err(SpotError::Part(part.to_owned())),
            };
            let id = parts
                .next()
                .filter(|id| !id.is_empty())
                .ok_or_else(|| SpotError::MissingId(part.to_owned()))?;
            *slot = Some(id.to_owned());
        }
        if spot.dm && (spot.guild.is_some() || spot.parent.is_some() || spot.category.is_some()) {
            return Err(SpotError::DmWithServer);
        }
        Ok(spot)
    }
}

impl fmt::Display for Spot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.platform)?;
        if self.dm {
            f.write_str("/dm")?;
        }
        for (key, value) in [
            ("guild", &self.guild),
            ("category", &self.category),
            ("parent", &self.parent),
            ("channel", &self.channel),
            ("channel", &self.community_channel),
        ] {
            if let Some(id) = value {
                write!(f, "/{key}/{id}")?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places_are_read_and_written_back() {
        for text in [
            "discord",
            "discord/dm",
            "discord/guild/1/category/3/channel/2",
            "discord/guild/1/parent/2/channel/9",
            "misskey/channel/abc",
            "misskey/dm",
            "console/dm",
        ] {
            let spot: Spot = text.parse().unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(spot.to_string(), text);
        }
        let spot: Spot = "misskey/channel/abc".parse().unwrap();
        assert_eq!(spot.community_channel.as_deref(), Some("abc"));
        assert_eq!(spot.channel, None);
    }

    #[test]
    fn bad_places_say_what_is_wrong() {
        let err = |text: &str| text.parse::<Spot>().unwrap_err().to_string();
        assert!(err("slack/x").contains("unknown platform"));
        assert!(err("discord/guild").contains("needs an id"));
        assert!(err("discord/room/1").contains("unknown part \"room\""));
        assert_eq!(err("misskey/guild/1"), "misskey has no guild");
        assert_eq!(
            err("discord/dm/guild/1"),
            "a DM has no guild, parent or category"
        );
    }
}
