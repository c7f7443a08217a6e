//! *Chat*: the operator talks to the bot from the browser, as `air-friends chat` does from a
//! terminal — the operator is the direct-message partner on the `console` platform (user
//! [`OPERATOR`], workspace `console/operator`), and every message goes through the whole
//! pipeline (router, inbox, agent, skills) like one from Discord.
//!
//! [`WebChat`] is the platform adapter the daemon gets among its platforms when the console is
//! on: it keeps the conversation in a [`Transcript`] (what the page shows and the skills read,
//! edit and search), notes reactions beside their message, and names the files the bot sends
//! (their bytes are not kept). The page's live section shows the conversation and, while a turn
//! runs, what the agent is doing — the status line of the terminal chat — refreshed by the
//! console's script.

use std::sync::{Mutex, OnceLock};

use async_trait::async_trait;
use axum::Router;
use axum::extract::{Form, State};
use axum::http::HeaderMap;
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use maud::{Markup, html};
use serde::Deserialize;

use super::{Console, Problem, changing, pages};
use crate::platform::transcript::Transcript;
use crate::platform::{
    ChannelId, ChatMessage, CustomEmoji, EventSink, FileDelivery, IncomingMessage, MessageId,
    OutgoingFile, PlatformAdapter, PlatformError, PlatformEvent, PlatformKind, ReactionEmoji,
    SentMessage, TextLimits, UserId, UserInfo,
};
use crate::sync::Recover;

/// The operator's user id on the `console` platform.
pub const OPERATOR: &str = "operator";
/// The conversation's channel.
pub const CHANNEL: &str = "console-web";
/// The bot's id.
const BOT: &str = "air-friends";
/// The longest message either side sends (characters).
const MAX_CHARS: usize = 3000;
const TEXT_LIMITS: TextLimits = TextLimits::new(MAX_CHARS, crate::platform::LengthUnit::Chars);
/// Messages the page shows.
const SHOWN: usize = 200;

/// The *Chat* page's platform adapter (see the module docs).
#[derive(Debug, Default)]
pub struct WebChat {
    transcript: Transcript,
    /// Reactions, beside the message they are on: (message, what).
    notes: Mutex<Vec<(MessageId, String)>>,
    /// Where the operator's messages go (the daemon's event queue), once it runs.
    sink: OnceLock<EventSink>,
}

impl WebChat {
    /// An empty conversation, not connected yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Connects the page to the daemon's event queue (once, at start).
    pub fn connect(&self, sink: EventSink) {
        let _ = self.sink.set(sink);
    }

    /// The operator's message: recorded, then handed to the daemon as a direct message.
    async fn send(&self, text: &str) -> Result<(), Problem> {
        let sink = self.sink.get().ok_or(Problem::Starting)?;
        let m = self.transcript.record(OPERATOR, OPERATOR, text, false);
        let msg = IncomingMessage {
            platform: PlatformKind::Console,
            channel_id: CHANNEL.into(),
            guild_id: None,
            user_id: OPERATOR.into(),
            username: OPERATOR.into(),
            display_name: "the operator".into(),
            message_id: m.message_id,
            is_dm: true,
            content: text.to_owned(),
            attachments: Vec::new(),
            timestamp: m.timestamp,
            reply_to_message_id: None,
            replied_to_bot: false,
            is_bot: false,
            mentions_bot: false,
            location: Default::default(),
        };
        sink.send(PlatformEvent::Message(msg))
            .await
            .map_err(|_| Problem::Starting)
    }

    fn say(&self, text: &str) -> SentMessage {
        let m = self.transcript.record(BOT, BOT, text, true);
        SentMessage {
            message_id: m.message_id,
            timestamp: m.timestamp,
        }
    }

    fn note(&self, message_id: &MessageId, what: String) {
        self.notes.locked().push((message_id.clone(), what));
    }

    fn check_channel(channel_id: &ChannelId) -> Result<(), PlatformError> {
        if channel_id == CHANNEL {
            Ok(())
        } else {
            Err(PlatformError::NotFound(format!("channel {channel_id}")))
        }
    }

    fn check_user(user_id: &UserId) -> Result<(), PlatformError> {
        if user_id == OPERATOR {
            Ok(())
        } else {
            Err(PlatformError::NotFound(format!("user {user_id}")))
        }
    }

    /// Names the files (their bytes are not kept) in one message of the bot's.
    async fn files(
        &self,
        files: Vec<OutgoingFile>,
        caption: Option<&str>,
    ) -> Result<FileDelivery, PlatformError> {
        let mut names = Vec::new();
        for f in files {
            let name = f.filename.clone();
            let bytes = f.into_bytes().await?;
            names.push(format!("{name} ({} bytes)", bytes.len()));
        }
        let text = format!(
            "{}[files: {}]",
            caption.map(|c| format!("{c} ")).unwrap_or_default(),
            names.join(", ")
        );
        Ok(FileDelivery {
            messages: vec![self.say(&text)],
            failed: Vec::new(),
        })
    }

    /// The conversation as the page shows it: the latest messages with their notes.
    fn lines(&self) -> Vec<(ChatMessage, Vec<String>)> {
        let notes = self.notes.locked().clone();
        self.transcript
            .recent(SHOWN)
            .into_iter()
            .map(|m| {
                let mine = notes
                    .iter()
                    .filter(|(id, _)| *id == m.message_id)
                    .map(|(_, what)| what.clone())
                    .collect();
                (m, mine)
            })
            .collect()
    }
}

#[async_trait]
impl PlatformAdapter for WebChat {
    fn kind(&self) -> PlatformKind {
        PlatformKind::Console
    }

    fn bot_user_id(&self) -> Option<UserId> {
        Some(BOT.into())
    }

    fn text_limit(&self, _channel_id: &ChannelId) -> TextLimits {
        TEXT_LIMITS
    }

    fn dm_text_limit(&self) -> TextLimits {
        TEXT_LIMITS
    }

    async fn send_message(
        &self,
        channel_id: &ChannelId,
        text: &str,
        _reply_to: Option<&MessageId>,
    ) -> Result<SentMessage, PlatformError> {
        Self::check_channel(channel_id)?;
        Ok(self.say(text))
    }

    async fn edit_message(
        &self,
        channel_id: &ChannelId,
        message_id: &MessageId,
        text: &str,
        _reply_to: Option<&MessageId>,
    ) -> Result<SentMessage, PlatformError> {
        Self::check_channel(channel_id)?;
        self.transcript.edit_bot(message_id, text)
    }

    async fn delete_message(
        &self,
        channel_id: &ChannelId,
        message_id: &MessageId,
    ) -> Result<(), PlatformError> {
        Self::check_channel(channel_id)?;
        self.transcript.delete(message_id)
    }

    async fn get_message(
        &self,
        channel_id: &ChannelId,
        message_id: &MessageId,
    ) -> Result<ChatMessage, PlatformError> {
        Self::check_channel(channel_id)?;
        self.transcript.get(message_id)
    }

    async fn recent_messages(
        &self,
        channel_id: &ChannelId,
        limit: usize,
    ) -> Result<Vec<ChatMessage>, PlatformError> {
        Self::check_channel(channel_id)?;
        Ok(self.transcript.recent(limit))
    }

    async fn search_messages(
        &self,
        channel_id: &ChannelId,
        query: &str,
        limit: usize,
    ) -> Result<Vec<ChatMessage>, PlatformError> {
        Self::check_channel(channel_id)?;
        Ok(self.transcript.search(query, limit))
    }

    async fn user_info(
        &self,
        _channel_id: &ChannelId,
        user_id: &UserId,
    ) -> Result<UserInfo, PlatformError> {
        let (name, display) = match user_id.as_str() {
            OPERATOR => (OPERATOR, "the operator"),
            BOT => (BOT, BOT),
            other => return Err(PlatformError::NotFound(format!("user {other}"))),
        };
        Ok(UserInfo {
            user_id: user_id.clone(),
            username: name.into(),
            display_name: display.into(),
        })
    }

    async fn add_reaction(
        &self,
        channel_id: &ChannelId,
        message_id: &MessageId,
        emoji: &ReactionEmoji,
    ) -> Result<(), PlatformError> {
        self.get_message(channel_id, message_id).await?;
        self.note(message_id, format!("{BOT} reacted {emoji}"));
        Ok(())
    }

    async fn remove_reaction(
        &self,
        channel_id: &ChannelId,
        message_id: &MessageId,
        emoji: &ReactionEmoji,
    ) -> Result<(), PlatformError> {
        self.get_message(channel_id, message_id).await?;
        self.note(message_id, format!("{BOT} took back {emoji}"));
        Ok(())
    }

    async fn send_files(
        &self,
        channel_id: &ChannelId,
        files: Vec<OutgoingFile>,
        caption: Option<&str>,
        _reply_to: Option<&MessageId>,
    ) -> Result<FileDelivery, PlatformError> {
        Self::check_channel(channel_id)?;
        self.files(files, caption).await
    }

    async fn send_dm(&self, user_id: &UserId, text: &str) -> Result<SentMessage, PlatformError> {
        Self::check_user(user_id)?;
        Ok(self.say(text))
    }

    async fn send_dm_files(
        &self,
        user_id: &UserId,
        files: Vec<OutgoingFile>,
        caption: Option<&str>,
    ) -> Result<FileDelivery, PlatformError> {
        Self::check_user(user_id)?;
        self.files(files, caption).await
    }

    async fn custom_emojis(
        &self,
        _channel_id: &ChannelId,
    ) -> Result<Vec<CustomEmoji>, PlatformError> {
        Ok(Vec::new())
    }
}

/// The page's routes.
pub(super) fn routes() -> Router<Console> {
    Router::new()
        .route("/admin/chat", get(chat))
        .route("/admin/chat/live", get(live))
        .route("/admin/chat/send", post(send))
}

async fn chat(State(console): State<Console>, headers: HeaderMap) -> Result<Response, Problem> {
    let session = console.viewing(&headers)?;
    let live = live_section(&console);
    let page = pages::layout(
        "Chat",
        Some(&session.csrf),
        html! {
            h1 { "Chat" }
            p { "You talk to the bot as its direct-message partner on the " code { "console" }
                " platform (your memories are " code { "console/operator" } "'s)." }
            section id="live" data-src="/admin/chat/live" { (live) }
            form method="post" action="/admin/chat/send" class="chat" {
                input type="hidden" name="csrf" value=(session.csrf);
                textarea name="text" rows="3" maxlength=(MAX_CHARS) required placeholder="Write to the bot" {}
                button type="submit" { "Send" }
            }
        },
    );
    Ok(Html(page.into_string()).into_response())
}

async fn live(State(console): State<Console>, headers: HeaderMap) -> Result<Response, Problem> {
    console.viewing(&headers)?;
    Ok(Html(live_section(&console).into_string()).into_response())
}

/// The conversation and, while a turn of it runs, what the agent is doing.
fn live_section(console: &Console) -> Markup {
    let doing: Vec<(String, u64)> = console
        .running_turns()
        .into_iter()
        .filter(|t| t.platform == PlatformKind::Console.as_str())
        .map(|t| (t.doing, t.elapsed_ms))
        .collect();
    let lines = console.inner.chat.lines();
    html! {
        @if lines.is_empty() {
            p class="empty" { "No message yet." }
        }
        ol class="transcript" {
            @for (m, notes) in &lines {
                li class=(if m.is_bot { "bot" } else { "you" }) data-id=(m.message_id) {
                    span class="who" { (if m.is_bot { "bot" } else { "you" }) }
                    span class="text" { (m.content) }
                    @for note in notes { span class="note" { (note) } }
                }
            }
        }
        @for (what, ms) in &doing {
            p class="status" { "The bot is " (what) " (" (ms / 1000) " s)…" }
        }
    }
}

#[derive(Deserialize)]
struct SendForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    text: String,
}

async fn send(
    State(console): State<Console>,
    headers: HeaderMap,
    Form(form): Form<SendForm>,
) -> Result<Response, Problem> {
    let (_, session) = changing(&console, &headers, &form.csrf)?;
    let text = form.text.trim();
    if text.is_empty() {
        return Err(Problem::BadRequest("write something to send"));
    }
    if text.chars().count() > MAX_CHARS {
        return Err(Problem::BadRequest("the message is too long"));
    }
    console.inner.chat.send(text).await?;
    tracing::info!(who = %session.who, action = "chat", "admin action");
    Ok(Redirect::to("/admin/chat").into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_operators_message_is_a_dm_and_the_bots_answers_are_kept() {
        let chat = WebChat::new();
        assert!(matches!(chat.send("hi").await, Err(Problem::Starting)));
        let (tx, mut rx) = tokio::sync::mpsc::channel(4);
        chat.connect(tx);
        chat.send("Hello bot").await.unwrap();
        let PlatformEvent::Message(msg) = rx.recv().await.unwrap() else {
            panic!("a message")
        };
        assert!(msg.is_dm);
        assert_eq!(msg.platform, PlatformKind::Console);
        assert_eq!(msg.user_id.as_str(), OPERATOR);
        assert_eq!(msg.content, "Hello bot");
        let sent = chat
            .send_message(&CHANNEL.into(), "Hello operator", Some(&msg.message_id))
            .await
            .unwrap();
        chat.add_reaction(&CHANNEL.into(), &msg.message_id, &"👍".parse().unwrap())
            .await
            .unwrap();
        chat.edit_message(&CHANNEL.into(), &sent.message_id, "Hello again", None)
            .await
            .unwrap();
        assert!(
            chat.send_message(&"elsewhere".into(), "x", None)
                .await
                .is_err()
        );
        assert!(chat.send_dm(&"someone".into(), "x").await.is_err());
        let lines = chat.lines();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0].1, vec!["air-friends reacted 👍".to_owned()]);
        assert_eq!(lines[1].0.content, "Hello again");
        let d = chat
            .send_dm_files(
                &OPERATOR.into(),
                vec![OutgoingFile::from_bytes("notes.txt", b"abc".to_vec())],
                None,
            )
            .await
            .unwrap();
        assert_eq!(d.messages.len(), 1);
        assert!(
            chat.lines()[2].0.content.contains("notes.txt (3 bytes)"),
            "{:?}",
            chat.lines()
        );
    }
}
