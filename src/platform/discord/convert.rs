//! Conversions between Discord's shapes and the platform-neutral types: snowflake validation,
//! gateway messages (serenity's model) → [`IncomingMessage`], REST messages (lean serde structs of
//! our own, tolerant of missing optional fields) → [`ChatMessage`] / [`SentMessage`] /
//! [`UserInfo`], and reaction emojis → the URL path segment Discord expects.

use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::{Value, json};
use serenity::model::channel::Message;
use serenity::model::event::TypingStartEvent;

use super::DiscordSetupError;
use crate::platform::{
    Attachment, ChatMessage, CustomEmoji, IncomingMessage, MessageId, Origin, PlatformError,
    PlatformKind, ReactionEmoji, SentMessage, Typing, UserInfo,
};

/// Parses a Discord snowflake (a non-zero unsigned 64-bit decimal number), naming `what` in the
/// error.
pub(crate) fn snowflake(id: &str, what: &str) -> Result<u64, PlatformError> {
    let invalid = || {
        let shown: String = id.chars().take(40).collect();
        PlatformError::InvalidId(format!("{what} {shown:?} is not a Discord snowflake"))
    };
    crate::names::parse_snowflake(id).ok_or_else(invalid)
}

/// A user as Discord's REST API returns it.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct RestUser {
    pub id: String,
    pub username: String,
    #[serde(default)]
    pub global_name: Option<String>,
    #[serde(default)]
    pub bot: bool,
}

/// A guild member as Discord's REST API returns it.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct RestMember {
    #[serde(default)]
    pub nick: Option<String>,
    pub user: RestUser,
}

/// A message as Discord's REST API returns it (only what the adapter reads).
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct RestMessage {
    pub id: String,
    pub author: RestUser,
    #[serde(default)]
    pub content: String,
    pub timestamp: DateTime<Utc>,
    #[serde(default)]
    pub attachments: Vec<RestAttachment>,
}

/// A message attachment as Discord's REST API returns it.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct RestAttachment {
    pub id: String,
    pub filename: String,
    #[serde(default)]
    pub size: u64,
    pub url: String,
    #[serde(default)]
    pub content_type: Option<String>,
}

/// A channel as Discord's REST API returns it (only what the adapter reads).
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct RestChannel {
    pub id: String,
    /// Discord's channel type (0 text, 1 DM, 4 category, 10–12 threads, 15 forum, …).
    #[serde(rename = "type", default)]
    pub kind: u64,
    #[serde(default)]
    pub guild_id: Option<String>,
    /// A thread's channel or forum; a channel's category.
    #[serde(default)]
    pub parent_id: Option<String>,
    #[serde(default)]
    pub name: Option<String>,
    /// A thread's owner: the user who opened it.
    #[serde(default)]
    pub owner_id: Option<String>,
}

/// A guild emoji as Discord's REST API returns it.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct RestEmoji {
    #[serde(default)]
    pub id: Option<String>,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub animated: bool,
    #[serde(default = "yes")]
    pub available: bool,
}

fn yes() -> bool {
    true
}

impl RestMessage {
    /// The message in fetch-context shape.
    pub fn into_chat(self) -> ChatMessage {
        ChatMessage {
            message_id: self.id.into(),
            user_id: self.author.id.into(),
            username: self.author.username,
            content: self.content,
            timestamp: self.timestamp,
            is_bot: self.author.bot,
            attachments: self
                .attachments
                .into_iter()
                .map(|a| Attachment {
                    id: a.id,
                    url: a.url,
                    mime: a.content_type,
                    filename: a.filename,
                    size: a.size,
                })
                .collect(),
        }
    }

    /// The message as a send result.
    pub fn sent(&self) -> SentMessage {
        SentMessage {
            message_id: self.id.as_str().into(),
            timestamp: self.timestamp,
        }
    }
}

impl RestUser {
    /// The user with `nick` (a guild nickname) preferred as display name.
    pub fn into_info(self, nick: Option<String>) -> UserInfo {
        let display_name = nick
            .or(self.global_name)
            .filter(|n| !n.trim().is_empty())
            .unwrap_or_else(|| self.username.clone());
        UserInfo {
            user_id: self.id.into(),
            username: self.username,
            display_name,
        }
    }
}

impl RestEmoji {
    /// The emoji in neutral form; `None` for unusable ones (no name or id, unavailable).
    pub fn into_custom(self) -> Option<CustomEmoji> {
        match (self.id, self.name) {
            (Some(id), Some(name)) if self.available && !name.is_empty() => Some(CustomEmoji {
                name,
                id: Some(id),
                animated: self.animated,
            }),
            _ => None,
        }
    }
}

/// Why a gateway message is not handed to the router.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Skip {
    /// Written by the bot itself.
    OwnMessage,
    /// Written by another bot (or a webhook).
    Bot,
    /// From a guild outside `guildIds`.
    OtherGuild,
}

/// Converts a gateway MESSAGE_CREATE into an [`IncomingMessage`], or says why it is skipped.
///
/// `bot_id` is the bot's own user id (0 before READY); `guild_ids` the configured guild filter
/// (empty = every guild).
pub(crate) fn incoming(
    message: &Message,
    bot_id: u64,
    guild_ids: &[u64],
) -> Result<IncomingMessage, Skip> {
    if bot_id != 0 && message.author.id.get() == bot_id {
        return Err(Skip::OwnMessage);
    }
    if message.author.bot || message.webhook_id.is_some() {
        return Err(Skip::Bot);
    }
    if let Some(guild) = message.guild_id
        && !guild_ids.is_empty()
        && !guild_ids.contains(&guild.get())
    {
        return Err(Skip::OtherGuild);
    }
    let (content, mentioned_in_text) = strip_mention(&message.content, bot_id);
    let mentions_bot =
        mentioned_in_text || (bot_id != 0 && message.mentions.iter().any(|u| u.id.get() == bot_id));
    let referenced = message.referenced_message.as_deref();
    let reply_to_message_id = message
        .message_reference
        .as_ref()
        .and_then(|r| r.message_id)
        .or(referenced.map(|m| m.id))
        .map(|id| MessageId::new(id.to_string()));
    let replied_to_bot = bot_id != 0 && referenced.is_some_and(|m| m.author.id.get() == bot_id);
    let display_name = message
        .member
        .as_ref()
        .and_then(|m| m.nick.clone())
        .or_else(|| message.author.global_name.clone())
        .filter(|n| !n.trim().is_empty())
        .unwrap_or_else(|| message.author.name.clone());
    let attachments = attachments(message);
    let timestamp = message
        .timestamp
        .to_rfc3339()
        .and_then(|t| DateTime::parse_from_rfc3339(&t).ok())
        .map(|t| t.with_timezone(&Utc))
        .or_else(|| DateTime::from_timestamp(message.timestamp.unix_timestamp(), 0))
        .unwrap_or_else(Utc::now);
    Ok(IncomingMessage {
        platform: PlatformKind::Discord,
        channel_id: message.channel_id.to_string().into(),
        guild_id: message.guild_id.map(|g| g.to_string()),
        user_id: message.author.id.to_string().into(),
        username: message.author.name.clone(),
        display_name,
        message_id: message.id.to_string().into(),
        is_dm: message.guild_id.is_none(),
        content,
        attachments,
        timestamp,
        reply_to_message_id,
        replied_to_bot,
        is_bot: message.author.bot,
        mentions_bot,
        location: Default::default(),
    })
}

/// A TYPING_START as the daemon's [`Typing`] (its location still empty), or why it is skipped:
/// the bot's own, a bot member's, another guild's.
pub(crate) fn typing(
    event: &TypingStartEvent,
    bot_id: u64,
    guild_ids: &[u64],
) -> Result<Typing, Skip> {
    if bot_id != 0 && event.user_id.get() == bot_id {
        return Err(Skip::OwnMessage);
    }
    if event.member.as_ref().is_some_and(|m| m.user.bot) {
        return Err(Skip::Bot);
    }
    if let Some(guild) = event.guild_id
        && !guild_ids.is_empty()
        && !guild_ids.contains(&guild.get())
    {
        return Err(Skip::OtherGuild);
    }
    Ok(Typing {
        origin: Origin {
            platform: PlatformKind::Discord,
            channel_id: event.channel_id.to_string().into(),
            guild_id: event.guild_id.map(|g| g.to_string()),
            user_id: event.user_id.to_string().into(),
            username: event
                .member
                .as_ref()
                .map(|m| m.user.name.clone())
                .unwrap_or_default(),
            is_dm: event.guild_id.is_none(),
        },
        location: Default::default(),
    })
}

/// A message's files: its attachments, then the images of its embeds (a link to a picture
/// unfurls into an `image` embed whose picture is the thumbnail). Embed pictures are fetched
/// through Discord's media proxy (`proxy_url`) when there is one, never from the site the
/// link names. Stickers and custom emoji are not attachments.
fn attachments(message: &Message) -> Vec<Attachment> {
    let mut list: Vec<Attachment> = message
        .attachments
        .iter()
        .map(|a| Attachment {
            id: a.id.to_string(),
            url: a.url.clone(),
            mime: a.content_type.clone(),
            filename: a.filename.clone(),
            size: u64::from(a.size),
        })
        .collect();
    for (i, embed) in message.embeds.iter().enumerate() {
        let picture = embed
            .image
            .as_ref()
            .map(|p| (&p.url, &p.proxy_url))
            .or_else(|| {
                (embed.kind.as_deref() == Some("image"))
                    .then_some(embed.thumbnail.as_ref())
                    .flatten()
                    .map(|p| (&p.url, &p.proxy_url))
            });
        if let Some((url, proxy)) = picture {
            let name = url
                .split(['?', '#'])
                .next()
                .and_then(|u| u.rsplit('/').next())
                .filter(|n| !n.is_empty())
                .unwrap_or("embed-image");
            list.push(Attachment {
                id: format!("embed-{i}"),
                url: proxy.clone().unwrap_or_else(|| url.clone()),
                mime: None,
                filename: name.to_owned(),
                size: 0,
            });
        }
    }
    list
}

/// Removes every `<@bot>` / `<@!bot>` from `content`, joining the pieces with single spaces and
/// trimming; also says whether one was found.
pub(crate) fn strip_mention(content: &str, bot_id: u64) -> (String, bool) {
    if bot_id == 0 {
        return (content.trim().to_owned(), false);
    }
    let forms = [format!("<@{bot_id}>"), format!("<@!{bot_id}>")];
    let mut found = false;
    let mut pieces: Vec<&str> = vec![content];
    for form in &forms {
        let mut next = Vec::with_capacity(pieces.len());
        for piece in pieces {
            let parts: Vec<&str> = piece.split(form.as_str()).collect();
            found |= parts.len() > 1;
            next.extend(parts);
        }
        pieces = next;
    }
    let mut out = String::with_capacity(content.len());
    for piece in pieces {
        let piece = piece.trim();
        if piece.is_empty() {
            continue;
        }
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(piece);
    }
    (out, found)
}

/// The `{emoji}` path segment of Discord's reaction routes: the percent-encoded Unicode emoji, or
/// `name:id` for a custom one (whose id must be known by now).
pub(crate) fn reaction_segment(emoji: &ReactionEmoji) -> Result<String, PlatformError> {
    match emoji {
        ReactionEmoji::Unicode(text) => Ok(percent_encode(text)),
        ReactionEmoji::Custom {
            name, id: Some(id), ..
        } => {
            snowflake(id, "emoji id")?;
            Ok(format!("{}:{id}", percent_encode(name)))
        }
        ReactionEmoji::Custom { name, id: None, .. } => Err(PlatformError::NotFound(format!(
            "custom emoji :{name}: is not known"
        ))),
    }
}

/// Percent-encodes everything but RFC 3986 unreserved characters.
pub(crate) fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len() * 3);
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// The message fields shared by text and file sends.
pub(crate) fn message_payload(
    channel: u64,
    content: Option<&str>,
    reply_to: Option<&str>,
) -> Result<Value, PlatformError> {
    let mut payload = json!({"allowed_mentions": {"parse": ["users"], "replied_user": false}});
    if let Some(content) = content {
        payload["content"] = json!(content);
    }
    if let Some(anchor) = reply_to {
        let anchor = snowflake(anchor, "reply-to message id")?;
        payload["message_reference"] = json!({
            "message_id": anchor.to_string(),
            "channel_id": channel.to_string(),
            "fail_if_not_exists": false,
        });
    }
    Ok(payload)
}

pub(crate) fn check_url(
    url: &str,
    key: &'static str,
    schemes: &[&str],
    expected: &'static str,
) -> Result<(), DiscordSetupError> {
    let ok = schemes.iter().any(|s| url.starts_with(s))
        && url.len() > schemes.iter().map(|s| s.len()).max().unwrap_or(0)
        && reqwest::Url::parse(url).is_ok();
    if ok {
        Ok(())
    } else {
        Err(DiscordSetupError::InvalidUrl {
            key,
            value: url.to_owned(),
            expected,
        })
    }
}

pub(crate) fn check_text(text: &str) -> Result<(), PlatformError> {
    if text.trim().is_empty() {
        return Err(PlatformError::InvalidInput("the message is empty".into()));
    }
    let limits = super::TEXT_LIMITS;
    if !limits.fits(text) {
        return Err(PlatformError::InvalidInput(format!(
            "the message is {} UTF-16 units long; Discord allows {} (split it first)",
            limits.len(text),
            limits.max
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snowflakes_are_non_zero_u64_decimals() {
        assert_eq!(
            snowflake("1234567890123456789", "message id"),
            Ok(1234567890123456789)
        );
        for bad in [
            "",
            "0",
            "abc",
            "12a",
            "-5",
            " 1",
            "99999999999999999999",
            "1.5",
            "<@1>",
        ] {
            assert!(
                matches!(snowflake(bad, "channel id"), Err(PlatformError::InvalidId(m)) if m.contains("channel id")),
                "{bad:?} accepted"
            );
        }
    }

    #[test]
    fn mentions_are_stripped_and_detected() {
        assert_eq!(strip_mention("<@42> hello", 42), ("hello".into(), true));
        assert_eq!(
            strip_mention("hi <@!42>, how are you", 42),
            ("hi , how are you".into(), true)
        );
        assert_eq!(strip_mention("a <@42> b <@42>", 42), ("a b".into(), true));
        assert_eq!(
            strip_mention("<@43> hello", 42),
            ("<@43> hello".into(), false)
        );
        assert_eq!(strip_mention("  plain  ", 0), ("plain".into(), false));
    }

    #[test]
    fn reaction_segments_are_url_safe() {
        assert_eq!(
            reaction_segment(&ReactionEmoji::Unicode("👍".into())),
            Ok("%F0%9F%91%8D".into())
        );
        let custom = ReactionEmoji::Custom {
            name: "blob_cat".into(),
            id: Some("77".into()),
            animated: false,
        };
        assert_eq!(reaction_segment(&custom), Ok("blob_cat:77".into()));
        let unresolved = ReactionEmoji::Custom {
            name: "x".into(),
            id: None,
            animated: false,
        };
        assert!(matches!(
            reaction_segment(&unresolved),
            Err(PlatformError::NotFound(_))
        ));
    }

    fn gateway_message(value: serde_json::Value) -> Message {
        serde_json::from_value(value).expect("valid message")
    }

    fn base_message() -> serde_json::Value {
        json!({
            "id": "500", "channel_id": "300", "guild_id": "100",
            "author": {"id": "7", "username": "alice", "global_name": "Alice"},
            "member": {"nick": "Ali", "roles": [], "joined_at": "2024-01-01T00:00:00+00:00",
                       "deaf": false, "mute": false, "flags": 0},
            "content": "<@42> hello there", "timestamp": "2025-01-01T00:00:05+00:00",
            "tts": false, "mention_everyone": false,
            "mentions": [{"id": "42", "username": "bot", "bot": true}],
            "mention_roles": [], "embeds": [], "pinned": false, "type": 0,
            "attachments": [{"id": "9", "filename": "a.png", "size": 12, "url": "https://x/a.png",
                             "proxy_url": "https://y/a.png", "content_type": "image/png"}]
        })
    }

    #[test]
    fn embed_pictures_are_attachments_fetched_through_discords_proxy() {
        let mut m = base_message();
        m["embeds"] = json!([
            {"type": "image", "url": "https://example.org/cat.jpg",
             "thumbnail": {"url": "https://example.org/cat.jpg?x=1",
                           "proxy_url": "https://media.discordapp.net/external/abc/cat.jpg"}},
            {"type": "rich", "title": "card", "image": {"url": "https://example.org/big.png"}},
            {"type": "rich", "title": "text only"},
            {"type": "article", "thumbnail": {"url": "https://example.org/logo.png"}}
        ]);
        let kept = incoming(&gateway_message(m), 42, &[100]).expect("kept");
        let urls: Vec<(&str, &str, &str)> = kept
            .attachments
            .iter()
            .map(|a| (a.id.as_str(), a.filename.as_str(), a.url.as_str()))
            .collect();
        assert_eq!(
            urls,
            [
                ("9", "a.png", "https://x/a.png"),
                (
                    "embed-0",
                    "cat.jpg",
                    "https://media.discordapp.net/external/abc/cat.jpg"
                ),
                ("embed-1", "big.png", "https://example.org/big.png"),
            ]
        );
    }

    #[test]
    fn a_guild_mention_becomes_an_incoming_message() {
        let message = gateway_message(base_message());
        let kept = incoming(&message, 42, &[100]).expect("kept");
        assert_eq!(kept.content, "hello there");
        assert!(kept.mentions_bot && !kept.is_dm && !kept.is_bot);
        assert_eq!(kept.display_name, "Ali");
        assert_eq!(kept.guild_id.as_deref(), Some("100"));
        assert_eq!(kept.attachments[0].mime.as_deref(), Some("image/png"));
        assert_eq!(kept.attachments[0].size, 12);
        assert_eq!(kept.attachments.len(), 1);
        assert_eq!(kept.timestamp.to_rfc3339(), "2025-01-01T00:00:05+00:00");
        assert_eq!(incoming(&message, 42, &[101]), Err(Skip::OtherGuild));
    }

    #[test]
    fn replies_dms_and_bots() {
        let mut value = base_message();
        value["guild_id"] = serde_json::Value::Null;
        value["member"] = serde_json::Value::Null;
        value["content"] = json!("thanks");
        value["mentions"] = json!([]);
        value["message_reference"] = json!({"message_id": "400", "channel_id": "300"});
        value["referenced_message"] = {
            let mut parent = base_message();
            parent["id"] = json!("400");
            parent["author"] = json!({"id": "42", "username": "bot", "bot": true});
            parent
        };
        let message = gateway_message(value.clone());
        let incoming_dm = incoming(&message, 42, &[100]).expect("DMs pass the guild filter");
        assert!(incoming_dm.is_dm && !incoming_dm.mentions_bot && incoming_dm.replied_to_bot);
        assert_eq!(
            incoming_dm
                .reply_to_message_id
                .as_ref()
                .map(MessageId::as_str),
            Some("400")
        );
        assert_eq!(incoming_dm.display_name, "Alice");

        value["author"] = json!({"id": "42", "username": "bot", "bot": true});
        assert_eq!(
            incoming(&gateway_message(value.clone()), 42, &[]),
            Err(Skip::OwnMessage)
        );
        value["author"] = json!({"id": "8", "username": "other", "bot": true});
        assert_eq!(incoming(&gateway_message(value), 42, &[]), Err(Skip::Bot));
    }

    #[test]
    fn rest_shapes_convert() {
        let user: RestUser =
            serde_json::from_value(json!({"id": "7", "username": "alice", "global_name": null}))
                .expect("user");
        assert_eq!(user.clone().into_info(None).display_name, "alice");
        assert_eq!(user.into_info(Some("Ali".into())).display_name, "Ali");
        let emoji: RestEmoji =
            serde_json::from_value(json!({"id": "5", "name": "wave", "animated": true}))
                .expect("emoji");
        assert_eq!(
            emoji.into_custom(),
            Some(CustomEmoji {
                name: "wave".into(),
                id: Some("5".into()),
                animated: true
            })
        );
        let message: RestMessage = serde_json::from_value(json!({
            "id": "1", "author": {"id": "2", "username": "b", "bot": true},
            "content": "x", "timestamp": "2025-01-01T00:00:00.000000+00:00"
        }))
        .expect("message");
        let chat = message.into_chat();
        assert!(chat.is_bot);
        assert_eq!(chat.user_id, "2");
    }
}
