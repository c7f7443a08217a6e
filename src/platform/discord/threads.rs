//! Discord threads and forum posts: where the message a thread began with lives, opening a
//! thread from a message, and sending into an archived thread.
//!
//! A thread opened from a message has that message's id, and the message stays in the parent
//! channel; a forum (or media) post's first message is in the post itself, with the post's id.
//! The daemon treats a thread as the conversation's channel and its id as the starter's message
//! id, so [`DiscordAdapter::home_of`] sends reads of and reactions to that id to the parent
//! channel, and [`DiscordAdapter::reply_anchor`] drops a reply reference to it (the thread shows
//! its starter at the top). Every other message is addressed as given.
//!
//! Discord refuses messages in an archived thread (JSON code 50083).
//! [`DiscordAdapter::create_message`] then unarchives it (`PATCH /channels/{id}`
//! `{"archived": false}`) and sends once more. When the bot may not unarchive it (a missing
//! permission, a locked thread) the send fails with [`PlatformError::Forbidden`] and one warning
//! names the cause; it never loops.

use reqwest::Method;
use serde_json::json;

use super::DiscordAdapter;
use super::channels::{ChannelFacts, ChannelKind, MAX_NAME_CHARS, one_line};
use super::convert::{RestChannel, RestMessage, snowflake};
use super::http::{Body, Route};
use crate::platform::{ChannelId, ChatMessage, MessageId, PlatformError};

/// Discord's JSON code for "A thread has already been created for this message".
const THREAD_EXISTS: &str = "160004";

/// Discord's JSON code for "Thread is archived".
const THREAD_ARCHIVED: &str = "50083";

/// How long a thread the bot opens stays active without a message: a day, in minutes.
const AUTO_ARCHIVE_MINUTES: u32 = 1440;

/// The name of a thread whose requested name is empty once cleaned.
const FALLBACK_THREAD_NAME: &str = "conversation";

/// Where the message a channel began with lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Starter {
    /// Not a thread (a channel, a forum, a DM): it began with no message.
    NotAThread,
    /// A thread opened from a message of this parent channel.
    InParent(u64),
    /// A forum post (or a thread whose parent is unknown): in the thread itself.
    InThread,
}

/// The name a thread is opened with: `name` on one line (control characters become spaces),
/// cut to Discord's 100 characters, [`FALLBACK_THREAD_NAME`] when nothing is left.
pub(crate) fn thread_name(name: &str) -> String {
    let name = one_line(name, MAX_NAME_CHARS);
    if name.is_empty() {
        FALLBACK_THREAD_NAME.to_owned()
    } else {
        name
    }
}

/// Whether `error` is Discord's answer `status` with JSON code `code`.
fn has_code(error: &PlatformError, status: u16, code: &str) -> bool {
    matches!(
        error,
        PlatformError::Api { status: s, code: Some(c), .. } if *s == status && c == code
    )
}

impl DiscordAdapter {
    /// Where the message `channel` began with lives (see the module documentation); a DM is
    /// no thread and asks nothing.
    pub(super) async fn starter_of(&self, channel: u64) -> Result<Starter, PlatformError> {
        let channels = &self.shared.channels;
        if channels.known_guild(channel) == Some(None) {
            return Ok(Starter::NotAThread);
        }
        let facts = channels.facts(&self.rest, channel, None).await?;
        if facts.kind != ChannelKind::Thread {
            return Ok(Starter::NotAThread);
        }
        let Some(parent) = facts.parent else {
            return Ok(Starter::InThread);
        };
        let parent_facts = channels.facts(&self.rest, parent, facts.guild).await?;
        Ok(if parent_facts.kind == ChannelKind::Forum {
            Starter::InThread
        } else {
            Starter::InParent(parent)
        })
    }

    /// The channel that holds `message` of `channel`: the parent for the starter of a thread
    /// opened from a message (`message` is the thread's id), else `channel` itself (no look-up).
    pub(super) async fn home_of(&self, channel: u64, message: u64) -> Result<u64, PlatformError> {
        if message != channel {
            return Ok(channel);
        }
        Ok(match self.starter_of(channel).await? {
            Starter::InParent(parent) => parent,
            Starter::NotAThread | Starter::InThread => channel,
        })
    }

    /// The reference a message sent to `channel` keeps: none for the starter of a thread opened
    /// from a message (it is in the parent channel and shown at the top of the thread). When
    /// the thread cannot be looked up the reference is kept: Discord drops a reference it cannot
    /// resolve (`fail_if_not_exists: false`), so the message arrives either way.
    pub(super) async fn reply_anchor<'a>(
        &self,
        channel: u64,
        reply_to: Option<&'a MessageId>,
    ) -> Option<&'a str> {
        let anchor = reply_to?.as_str();
        if crate::names::parse_snowflake(anchor) != Some(channel) {
            return Some(anchor);
        }
        match self.starter_of(channel).await {
            Ok(Starter::InParent(_)) => None,
            Ok(Starter::NotAThread | Starter::InThread) => Some(anchor),
            Err(error) => {
                tracing::debug!(platform = "discord", channel, error = %error, "thread look-up failed; the reply keeps its reference");
                Some(anchor)
            }
        }
    }

    /// `POST /channels/{channel}/messages` with `body` (the call named `label`); an archived
    /// thread is unarchived and the message sent once more.
    pub(super) async fn create_message(
        &self,
        channel: u64,
        label: &'static str,
        body: Body,
    ) -> Result<RestMessage, PlatformError> {
        let route = Route::new(label, Method::POST, format!("/channels/{channel}/messages"));
        match self.rest.json_ref(&route, &body).await {
            Err(error) if has_code(&error, 400, THREAD_ARCHIVED) => {
                self.unarchive(channel, label).await?;
                self.rest.json_ref(&route, &body).await
            }
            other => other,
        }
    }

    /// Unarchives the thread `channel` after the send `label` found it archived; a refusal is
    /// logged with its cause and becomes [`PlatformError::Forbidden`].
    async fn unarchive(&self, channel: u64, label: &'static str) -> Result<(), PlatformError> {
        let route = Route::new(
            "unarchive_thread",
            Method::PATCH,
            format!("/channels/{channel}"),
        );
        let body = Body::Json(json!({"archived": false}));
        match self.rest.call(route, body).await {
            Ok(()) => {
                tracing::info!(platform = "discord", channel, "archived thread unarchived");
                Ok(())
            }
            Err(cause) => {
                tracing::warn!(platform = "discord", channel, cause = %cause, "the thread is archived and could not be unarchived");
                Err(PlatformError::Forbidden(format!(
                    "{label}: the thread is archived and could not be unarchived"
                )))
            }
        }
    }

    /// [`thread_starter`](crate::platform::PlatformAdapter::thread_starter): the message the
    /// thread `channel_id` began with; `None` for a channel that is no thread and for a
    /// deleted message.
    pub(super) async fn starter_message(
        &self,
        channel_id: &ChannelId,
    ) -> Result<Option<ChatMessage>, PlatformError> {
        let channel = snowflake(channel_id.as_str(), "channel id")?;
        let home = match self.starter_of(channel).await? {
            Starter::NotAThread => return Ok(None),
            Starter::InParent(parent) => parent,
            Starter::InThread => channel,
        };
        let route = Route::new(
            "get_thread_starter",
            Method::GET,
            format!("/channels/{home}/messages/{channel}"),
        );
        match self.rest.json::<RestMessage>(route, Body::Empty).await {
            Ok(found) => Ok(Some(found.into_chat())),
            Err(PlatformError::NotFound(_)) => Ok(None),
            Err(other) => Err(other),
        }
    }

    /// [`open_thread`](crate::platform::PlatformAdapter::open_thread): a public thread from
    /// `message_id` of `channel_id`, named by [`thread_name`], remembered as the bot's; a
    /// thread already opened from that message is returned by its id (the message's).
    pub(super) async fn start_thread(
        &self,
        channel_id: &ChannelId,
        message_id: &MessageId,
        name: &str,
    ) -> Result<Option<ChannelId>, PlatformError> {
        let channel = snowflake(channel_id.as_str(), "channel id")?;
        let message = snowflake(message_id.as_str(), "message id")?;
        let name = thread_name(name);
        let route = Route::new(
            "start_thread",
            Method::POST,
            format!("/channels/{channel}/messages/{message}/threads"),
        );
        let body = json!({"name": name, "auto_archive_duration": AUTO_ARCHIVE_MINUTES});
        match self.rest.json::<RestChannel>(route, Body::Json(body)).await {
            Ok(created) => {
                let thread = snowflake(&created.id, "thread id")?;
                self.remember_opened(channel, thread, &created, &name).await;
                Ok(Some(ChannelId::new(thread.to_string())))
            }
            Err(error) if has_code(&error, 400, THREAD_EXISTS) => {
                Ok(Some(ChannelId::new(message.to_string())))
            }
            Err(error) => Err(error),
        }
    }

    /// Remembers the thread `thread` the bot just opened in `channel` (Discord's answer
    /// `created`, filled in where it is silent), so its first message resolves without a
    /// look-up. What cannot be told for sure is left to a look-up later.
    async fn remember_opened(&self, channel: u64, thread: u64, created: &RestChannel, name: &str) {
        let mut facts = match ChannelFacts::from_rest(created) {
            Ok(facts) => facts,
            Err(error) => {
                tracing::debug!(platform = "discord", channel = thread, error = %error, "opened thread not remembered");
                return;
            }
        };
        if facts.guild.is_none() {
            match self.guild_of(channel).await {
                Ok(Some(guild)) => facts.guild = Some(guild),
                Ok(None) | Err(_) => return,
            }
        }
        let bot = self.shared.bot_user_id_raw();
        facts.kind = ChannelKind::Thread;
        facts.parent = facts.parent.or(Some(channel));
        facts.name = facts.name.or_else(|| Some(name.to_owned()));
        facts.owner = facts.owner.or((bot != 0).then_some(bot));
        self.shared.channels.remember_facts(thread, facts);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_names_are_one_line_cut_and_never_empty() {
        assert_eq!(thread_name("Trip planning"), "Trip planning");
        assert_eq!(
            thread_name("line one\nline two\r\n\tthree\u{0}four"),
            "line one line two three four"
        );
        let long = "abc ".repeat(50);
        let cut = thread_name(&long);
        assert_eq!(cut.chars().count(), MAX_NAME_CHARS - 1, "{cut:?}");
        assert!(!cut.ends_with(' '));
        assert_eq!(
            thread_name(&"é".repeat(300)).chars().count(),
            MAX_NAME_CHARS
        );
        for empty in ["", "   ", "\n\r\t", "\u{7}\u{1b}"] {
            assert_eq!(thread_name(empty), FALLBACK_THREAD_NAME, "{empty:?}");
        }
    }

    #[test]
    fn discord_codes_are_told_apart() {
        let api = |status, code: &str| PlatformError::Api {
            status,
            code: Some(code.into()),
            message: "x".into(),
        };
        assert!(has_code(&api(400, THREAD_ARCHIVED), 400, THREAD_ARCHIVED));
        assert!(!has_code(&api(400, "50035"), 400, THREAD_ARCHIVED));
        assert!(!has_code(&api(403, THREAD_ARCHIVED), 400, THREAD_ARCHIVED));
        assert!(!has_code(
            &PlatformError::Forbidden("x".into()),
            400,
            THREAD_EXISTS
        ));
    }
}
