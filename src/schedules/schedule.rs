//! One configured schedule made ready to run ([`Schedule`]): its timetable, the place it posts
//! in and the channel that is, and its prompt file — or why it cannot run
//! ([`ScheduleError`]). `check-config` and the daemon read schedules through here, so both
//! refuse the same ones.

use std::path::{Path, PathBuf};

use crate::config::ScheduleConfig;
use crate::places::{Spot, SpotError};
use crate::platform::{ChannelId, PlatformKind};
use crate::timetable::{Timetable, TimetableError};

/// A schedule ready to run.
#[derive(Debug, Clone)]
pub struct Schedule {
    /// Its configuration.
    pub config: ScheduleConfig,
    /// When it runs.
    pub timetable: Timetable,
    /// Where it posts, as `places:` rules see it.
    pub spot: Spot,
    /// The channel (or thread) it posts in.
    pub channel: ChannelId,
    /// The task's file.
    pub prompt_path: PathBuf,
}

/// Why a schedule cannot run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    /// The cron expression or the time zone.
    #[error(transparent)]
    Timetable(#[from] TimetableError),
    /// The place is not written as `places explain` takes one.
    #[error("{0}")]
    Place(#[from] SpotError),
    /// A DM is not a place to post in on a schedule.
    #[error("a schedule posts in a public place, not a DM")]
    Dm,
    /// A Discord place without its channel.
    #[error("name the channel or thread to post in, e.g. discord/guild/1/channel/2")]
    NoChannel,
    /// A platform schedules cannot post on.
    #[error("schedules post on Discord and Misskey; {0} is not a place to post in")]
    Platform(PlatformKind),
    /// A visibility that is not a timeline's, or one where there is no timeline.
    #[error("{0}")]
    Visibility(String),
}

/// The visibilities of a post on the bot's Misskey timeline.
const TIMELINE_VISIBILITIES: [&str; 3] = ["public", "home", "followers"];

impl Schedule {
    /// Reads `config`; its relative prompt file is under `{prompts_dir}/schedules/`.
    pub fn new(config: &ScheduleConfig, prompts_dir: &Path) -> Result<Self, ScheduleError> {
        let timetable = Timetable::parse(&config.cron, &config.time_zone)?;
        let spot: Spot = config.place.parse()?;
        if spot.dm {
            return Err(ScheduleError::Dm);
        }
        let timeline = spot.platform == PlatformKind::Misskey && spot.community_channel.is_none();
        if let Some(visibility) = &config.visibility {
            if !timeline {
                return Err(ScheduleError::Visibility(
                    "visibility is for a post on the bot's Misskey timeline (place: misskey)"
                        .to_owned(),
                ));
            }
            if !TIMELINE_VISIBILITIES.contains(&visibility.as_str()) {
                return Err(ScheduleError::Visibility(format!(
                    "{visibility:?} is not public, home or followers"
                )));
            }
        }
        let channel = match spot.platform {
            PlatformKind::Discord => spot.channel.clone().ok_or(ScheduleError::NoChannel)?,
            PlatformKind::Misskey => match &spot.community_channel {
                Some(id) => format!("channel:{id}"),
                None => format!(
                    "timeline:{}",
                    config.visibility.as_deref().unwrap_or("home")
                ),
            },
            other => return Err(ScheduleError::Platform(other)),
        };
        Ok(Self {
            config: config.clone(),
            timetable,
            spot,
            channel: ChannelId::new(channel),
            prompt_path: config.prompt_path(prompts_dir),
        })
    }

    /// The schedule's name.
    pub fn name(&self) -> &str {
        &self.config.name
    }

    /// The timetable as the store keeps it: a different one means the next run is computed
    /// again.
    pub fn timetable_key(&self) -> String {
        self.timetable.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(place: &str) -> ScheduleConfig {
        ScheduleConfig {
            name: "morning".into(),
            cron: "0 8 * * *".into(),
            time_zone: "Europe/Berlin".into(),
            place: place.into(),
            prompt: "morning.md".into(),
            ..ScheduleConfig::default()
        }
    }

    #[test]
    fn a_discord_channel_is_a_place_to_post_and_others_say_why_not() {
        let prompts = Path::new("/srv/prompts");
        let s = Schedule::new(&config("discord/guild/1/channel/2"), prompts).unwrap();
        assert_eq!(s.channel.as_str(), "2");
        assert_eq!(s.spot.guild.as_deref(), Some("1"));
        assert_eq!(
            s.prompt_path,
            Path::new("/srv/prompts/schedules/morning.md")
        );
        assert_eq!(s.timetable_key(), "0 8 * * * (Europe/Berlin)");
        let err = |place: &str| Schedule::new(&config(place), prompts).unwrap_err();
        assert_eq!(err("discord/dm"), ScheduleError::Dm);
        assert_eq!(err("discord/guild/1"), ScheduleError::NoChannel);
        assert_eq!(
            err("console"),
            ScheduleError::Platform(PlatformKind::Console)
        );
        assert!(matches!(err("slack/x"), ScheduleError::Place(_)));
        // Misskey: a channel, or the bot's own timeline with its visibility.
        let misskey = |place: &str, visibility: Option<&str>| {
            let mut c = config(place);
            c.visibility = visibility.map(Into::into);
            Schedule::new(&c, prompts).map(|s| s.channel.as_str().to_owned())
        };
        assert_eq!(misskey("misskey/channel/abc", None).unwrap(), "channel:abc");
        assert_eq!(misskey("misskey", None).unwrap(), "timeline:home");
        assert_eq!(
            misskey("misskey", Some("public")).unwrap(),
            "timeline:public"
        );
        for (place, visibility) in [
            ("misskey", "specified"),
            ("misskey/channel/abc", "public"),
            ("discord/guild/1/channel/2", "home"),
        ] {
            assert!(
                matches!(
                    misskey(place, Some(visibility)),
                    Err(ScheduleError::Visibility(_))
                ),
                "{place} {visibility}"
            );
        }
    }
}
