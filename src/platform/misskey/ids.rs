//! Misskey ids as the rest of the daemon sees them: channel ids `note:{noteId}` (a note thread,
//! answered by replying to that note), `chat:{userId}` (a 1:1 chat), and the places a post that
//! answers no note goes (a scheduled run's): `channel:{channelId}` (a Misskey channel) and
//! `timeline:{public|home|followers}` (the bot's own timeline); and the validation of raw note,
//! message and user ids before they reach an API call.

use std::fmt;

use crate::platform::PlatformError;

/// Longest id accepted. Misskey's id schemes (`aid`, `aidx`, `meid`, `ulid`, `objectid`) stay
/// under 32 characters; the margin allows forks.
const MAX_ID_LEN: usize = 64;

/// A parsed channel id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Channel {
    /// A note thread; the id is the note the bot answers.
    Note(String),
    /// A 1:1 chat with the user.
    Chat(String),
    /// New notes of their own (a scheduled run's posts).
    Post(Post),
}

/// Where a note that answers no note is posted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Post {
    /// In the Misskey channel with this id.
    Community(String),
    /// On the bot's own timeline, with this visibility.
    Timeline(TimelineVisibility),
}

/// The visibility of a post on the bot's timeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimelineVisibility {
    /// Everyone, on the public timelines too.
    Public,
    /// Everyone, but only on followers' home timelines.
    Home,
    /// Followers only.
    Followers,
}

impl TimelineVisibility {
    /// Misskey's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Public => "public",
            Self::Home => "home",
            Self::Followers => "followers",
        }
    }

    /// Reads `public`, `home` or `followers`.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "public" => Some(Self::Public),
            "home" => Some(Self::Home),
            "followers" => Some(Self::Followers),
            _ => None,
        }
    }
}

impl Channel {
    /// Parses `note:{id}` / `chat:{id}`; anything else is [`PlatformError::InvalidId`].
    pub fn parse(channel_id: &str) -> Result<Self, PlatformError> {
        if let Some(id) = channel_id.strip_prefix("note:") {
            return Ok(Channel::Note(validate_id(id, "note")?.to_owned()));
        }
        if let Some(id) = channel_id.strip_prefix("chat:") {
            return Ok(Channel::Chat(validate_id(id, "user")?.to_owned()));
        }
        if let Some(id) = channel_id.strip_prefix("channel:") {
            return Ok(Channel::Post(Post::Community(
                validate_id(id, "channel")?.to_owned(),
            )));
        }
        if let Some(visibility) = channel_id
            .strip_prefix("timeline:")
            .and_then(TimelineVisibility::parse)
        {
            return Ok(Channel::Post(Post::Timeline(visibility)));
        }
        Err(PlatformError::InvalidId(format!(
            "{} is not a Misskey channel id (expected note:<noteId>, chat:<userId>, \
             channel:<channelId> or timeline:<public|home|followers>)",
            shorten(channel_id)
        )))
    }

    /// The channel id of a note thread.
    pub fn note(note_id: &str) -> String {
        format!("note:{note_id}")
    }

    /// The channel id of the chat with `user_id`.
    pub fn chat(user_id: &str) -> String {
        format!("chat:{user_id}")
    }
}

impl fmt::Display for Channel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Channel::Note(id) => write!(f, "note:{id}"),
            Channel::Chat(id) => write!(f, "chat:{id}"),
            Channel::Post(Post::Community(id)) => write!(f, "channel:{id}"),
            Channel::Post(Post::Timeline(v)) => write!(f, "timeline:{}", v.as_str()),
        }
    }
}

/// Checks that `id` looks like a Misskey id (1–64 ASCII letters and digits); `what` names it in
/// the error (`note`, `user`, `message`).
pub fn validate_id<'a>(id: &'a str, what: &str) -> Result<&'a str, PlatformError> {
    let ok =
        !id.is_empty() && id.len() <= MAX_ID_LEN && id.bytes().all(|b| b.is_ascii_alphanumeric());
    if ok {
        Ok(id)
    } else {
        Err(PlatformError::InvalidId(format!(
            "{} is not a valid Misskey {what} id",
            shorten(id)
        )))
    }
}

/// Quotes at most 80 characters of a rejected id for an error message.
fn shorten(id: &str) -> String {
    let cut: String = id.chars().take(80).collect();
    if cut.len() < id.len() {
        format!("{cut:?}…")
    } else {
        format!("{cut:?}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channel_ids_parse_and_print() {
        assert_eq!(
            Channel::parse("note:9zabc123"),
            Ok(Channel::Note("9zabc123".into()))
        );
        assert_eq!(Channel::parse("chat:u1"), Ok(Channel::Chat("u1".into())));
        assert_eq!(Channel::note("a1"), "note:a1");
        assert_eq!(Channel::chat("b2"), "chat:b2");
        assert_eq!(
            Channel::parse("chat:b2").map(|c| c.to_string()),
            Ok("chat:b2".to_owned())
        );
        for text in [
            "channel:c9",
            "timeline:home",
            "timeline:public",
            "timeline:followers",
        ] {
            assert_eq!(
                Channel::parse(text).map(|c| c.to_string()),
                Ok(text.to_owned())
            );
        }
        assert_eq!(
            Channel::parse("channel:c9"),
            Ok(Channel::Post(Post::Community("c9".into())))
        );
    }

    #[test]
    fn malformed_ids_are_invalid() {
        for bad in [
            "",
            "9zabc",
            "note:",
            "chat:",
            "dm:u1",
            "note:../x",
            "note:a b",
            "chat:u1?i=x",
            "note:日本",
            "channel:",
            "channel:../c",
            "timeline:specified",
            "timeline:",
        ] {
            assert!(
                matches!(Channel::parse(bad), Err(PlatformError::InvalidId(_))),
                "{bad:?} accepted"
            );
        }
        let long = "a".repeat(65);
        assert!(validate_id(&long, "note").is_err());
        assert!(validate_id(&"a".repeat(64), "note").is_ok());
        let err = validate_id(&"x".repeat(500), "note").expect_err("too long");
        assert!(err.to_string().len() < 200, "{err}");
    }
}
