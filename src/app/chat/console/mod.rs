//! The console platform, `air-friends chat`'s front end: a local terminal conversation that
//! runs the full pipeline as a DM from one local user, for trying a persona and agent set-up
//! without any platform account. It lives with the command rather than beside the other
//! adapters in `platform` because it also shows what the agent runner and the model gateway
//! report, two layers above the platforms.
//!
//! Each input line is a message from the local user; everything the bot does (replies, edits,
//! reactions, files) is printed as a line. Files the bot sends are saved into a downloads
//! folder and their paths printed. The conversation history lives in memory for
//! `recent_messages` / `search_messages`.
//!
//! The adapter also observes the agent runner and the model gateway (the command, its parent
//! `app::chat`, subscribes it to both): [`status`] shows what the agent is doing while a turn
//! runs and prints one actionable line when the model provider fails.
//!
//! Input comes from [`stdin_lines`], read on a thread of its own so that Ctrl-C never waits
//! for the next Enter.

pub mod status;

use crate::sync::Recover;
use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

pub use status::Diagnostics;
use status::Screen;

use crate::agent::{Activity, ActivityObserver};
use crate::gateway::{ProviderFailure, ProviderObserver};

use crate::platform::transcript::Transcript;
use crate::platform::{
    ChannelId, ChatMessage, CustomEmoji, EventSink, FileDelivery, IncomingMessage, MessageId,
    OutgoingFile, PlatformAdapter, PlatformError, PlatformEvent, PlatformKind, ReactionEmoji,
    SentMessage, TextLimits, UserId, UserInfo,
};

/// The longest message the console prints at once (3000 characters, a long chat message).
const TEXT_LIMITS: TextLimits = TextLimits::new(3000, crate::platform::LengthUnit::Chars);

/// The local user's id.
pub const LOCAL_USER: &str = "local";
/// The one conversation's channel id.
pub const CHANNEL: &str = "console";
/// The bot's id.
pub const BOT_USER: &str = "air-friends";

/// How often the status line's elapsed time is refreshed.
const STATUS_EVERY: Duration = Duration::from_secs(1);

/// Lines typed but not yet taken by [`ConsoleAdapter::run`].
const INPUT_QUEUE: usize = 16;

/// The console adapter.
pub struct ConsoleAdapter {
    screen: Mutex<Screen>,
    transcript: Transcript,
    downloads: PathBuf,
    username: String,
}

impl std::fmt::Debug for ConsoleAdapter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConsoleAdapter").finish_non_exhaustive()
    }
}

impl ConsoleAdapter {
    /// Prints to `out`; saves received files into `downloads`; the local user is `username`.
    /// No status line, and provider failures are not shown (see [`Self::with_diagnostics`]).
    pub fn new(out: Box<dyn Write + Send>, downloads: PathBuf, username: &str) -> Self {
        Self {
            screen: Mutex::new(Screen::new(out, Diagnostics::none())),
            transcript: Transcript::new(),
            downloads,
            username: username.to_owned(),
        }
    }

    /// Shows the status line and the actionable lines as `diagnostics` says.
    pub fn with_diagnostics(self, diagnostics: Diagnostics) -> Self {
        let out = self
            .screen
            .into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .into_out();
        Self {
            screen: Mutex::new(Screen::new(out, diagnostics)),
            ..self
        }
    }

    fn screen(&self) -> std::sync::MutexGuard<'_, Screen> {
        self.screen.locked()
    }

    /// Redraws the status line every `STATUS_EVERY` until `stop`, then erases it. Returns at
    /// once when there is no status line.
    pub async fn run_status(self: Arc<Self>, stop: CancellationToken) -> anyhow::Result<()> {
        if !self.screen().has_status_line() {
            return Ok(());
        }
        let mut every = tokio::time::interval(STATUS_EVERY);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        loop {
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = every.tick() => self.screen().draw(),
            }
        }
        self.screen().erase();
        Ok(())
    }

    fn print(&self, line: &str) {
        self.screen().line(line);
    }

    fn say(&self, text: &str) -> SentMessage {
        let m = self.transcript.record(BOT_USER, BOT_USER, text, true);
        self.print(&format!("{BOT_USER}> {text}"));
        SentMessage {
            message_id: m.message_id,
            timestamp: m.timestamp,
        }
    }

    /// Reads lines from `input` (see [`stdin_lines`]) until its end or `stop`, delivering each
    /// as a DM.
    pub async fn run(
        &self,
        mut input: mpsc::Receiver<std::io::Result<String>>,
        sink: EventSink,
        stop: CancellationToken,
    ) -> anyhow::Result<()> {
        loop {
            let line = tokio::select! {
                _ = stop.cancelled() => break,
                l = input.recv() => l.transpose()?,
            };
            let Some(line) = line else { break };
            let text = line.trim();
            if text.is_empty() {
                continue;
            }
            let m = self
                .transcript
                .record(LOCAL_USER, &self.username, text, false);
            let msg = IncomingMessage {
                platform: PlatformKind::Console,
                channel_id: CHANNEL.into(),
                guild_id: None,
                user_id: LOCAL_USER.into(),
                username: self.username.clone(),
                display_name: self.username.clone(),
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
            if sink.send(PlatformEvent::Message(msg)).await.is_err() {
                break;
            }
        }
        Ok(())
    }

    fn check_channel(channel_id: &ChannelId) -> Result<(), PlatformError> {
        if channel_id == CHANNEL {
            Ok(())
        } else {
            Err(PlatformError::NotFound(format!("channel {channel_id}")))
        }
    }

    async fn save_files(
        &self,
        files: Vec<OutgoingFile>,
        caption: Option<&str>,
    ) -> Result<FileDelivery, PlatformError> {
        tokio::fs::create_dir_all(&self.downloads)
            .await
            .map_err(|e| PlatformError::Transport(format!("downloads folder: {e}")))?;
        let mut names = Vec::new();
        for f in files {
            let name = f.filename.clone();
            let bytes = f.into_bytes().await?;
            let safe: String = name
                .chars()
                .map(|c| if c == '/' || c == '\\' { '_' } else { c })
                .collect();
            let path = self.downloads.join(safe.trim_start_matches('.'));
            tokio::fs::write(&path, &bytes)
                .await
                .map_err(|e| PlatformError::Transport(format!("saving {name}: {e}")))?;
            names.push(format!("{} ({} bytes)", path.display(), bytes.len()));
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
}

/// The terminal's input lines, for [`ConsoleAdapter::run`]. Read on a thread of its own that
/// is never joined: a blocking read of stdin cannot be interrupted, and as a runtime blocking
/// task it would hold the runtime's shutdown until the next Enter. The thread ends at EOF, at
/// a read error, or at the first line after the receiver is gone (or with the process).
pub fn stdin_lines() -> std::io::Result<mpsc::Receiver<std::io::Result<String>>> {
    let (tx, rx) = mpsc::channel(INPUT_QUEUE);
    std::thread::Builder::new()
        .name("console-stdin".into())
        .spawn(move || {
            for line in std::io::stdin().lock().lines() {
                let failed = line.is_err();
                if tx.blocking_send(line).is_err() || failed {
                    break;
                }
            }
        })?;
    Ok(rx)
}

impl ActivityObserver for ConsoleAdapter {
    fn activity(&self, session_id: &str, activity: &Activity) {
        self.screen().activity(session_id, activity);
    }
}

impl ProviderObserver for ConsoleAdapter {
    fn provider_failed(&self, failure: &ProviderFailure) {
        self.screen().failure(failure);
    }
}

#[async_trait]
impl PlatformAdapter for ConsoleAdapter {
    fn kind(&self) -> PlatformKind {
        PlatformKind::Console
    }

    fn bot_user_id(&self) -> Option<UserId> {
        Some(BOT_USER.into())
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
        let sent = self.transcript.edit_bot(message_id, text)?;
        self.print(&format!("{BOT_USER}> (edited) {text}"));
        Ok(sent)
    }

    async fn delete_message(
        &self,
        channel_id: &ChannelId,
        message_id: &MessageId,
    ) -> Result<(), PlatformError> {
        Self::check_channel(channel_id)?;
        self.transcript.delete(message_id)?;
        self.print(&format!("{BOT_USER}> (deleted a message)"));
        Ok(())
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
        match user_id.as_str() {
            LOCAL_USER => Ok(UserInfo {
                user_id: LOCAL_USER.into(),
                username: self.username.clone(),
                display_name: self.username.clone(),
            }),
            BOT_USER => Ok(UserInfo {
                user_id: BOT_USER.into(),
                username: BOT_USER.into(),
                display_name: BOT_USER.into(),
            }),
            other => Err(PlatformError::NotFound(format!("user {other}"))),
        }
    }

    async fn add_reaction(
        &self,
        channel_id: &ChannelId,
        message_id: &MessageId,
        emoji: &ReactionEmoji,
    ) -> Result<(), PlatformError> {
        self.get_message(channel_id, message_id).await?;
        self.print(&format!("{BOT_USER} reacted {emoji} to {message_id}"));
        Ok(())
    }

    async fn remove_reaction(
        &self,
        channel_id: &ChannelId,
        message_id: &MessageId,
        emoji: &ReactionEmoji,
    ) -> Result<(), PlatformError> {
        self.get_message(channel_id, message_id).await?;
        self.print(&format!(
            "{BOT_USER} removed reaction {emoji} from {message_id}"
        ));
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
        self.save_files(files, caption).await
    }

    async fn send_dm(&self, user_id: &UserId, text: &str) -> Result<SentMessage, PlatformError> {
        if user_id != LOCAL_USER {
            return Err(PlatformError::NotFound(format!("user {user_id}")));
        }
        Ok(self.say(text))
    }

    async fn send_dm_files(
        &self,
        user_id: &UserId,
        files: Vec<OutgoingFile>,
        caption: Option<&str>,
    ) -> Result<FileDelivery, PlatformError> {
        if user_id != LOCAL_USER {
            return Err(PlatformError::NotFound(format!("user {user_id}")));
        }
        self.save_files(files, caption).await
    }

    async fn custom_emojis(
        &self,
        _channel_id: &ChannelId,
    ) -> Result<Vec<CustomEmoji>, PlatformError> {
        Ok(Vec::new())
    }
}

#[cfg(test)]
mod tests {
    use super::status::tests::Buf;
    use super::*;

    #[tokio::test]
    async fn lines_become_dms_and_replies_are_printed() {
        let dir = tempfile::tempdir().unwrap();
        let buf = Buf::default();
        let console = ConsoleAdapter::new(Box::new(buf.clone()), dir.path().join("dl"), "me");
        let (tx, mut rx) = tokio::sync::mpsc::channel(8);
        let (lines, input) = mpsc::channel(4);
        for line in ["hello there", "", "  second  "] {
            lines.send(Ok(line.to_owned())).await.unwrap();
        }
        drop(lines);
        console
            .run(input, tx, CancellationToken::new())
            .await
            .unwrap();
        let PlatformEvent::Message(first) = rx.recv().await.unwrap() else {
            panic!()
        };
        assert!(first.is_dm);
        assert_eq!(first.content, "hello there");
        assert_eq!(first.platform, PlatformKind::Console);
        let PlatformEvent::Message(second) = rx.recv().await.unwrap() else {
            panic!()
        };
        assert_eq!(second.content, "second");
        let sent = console
            .send_message(&CHANNEL.into(), "hi!", Some(&first.message_id))
            .await
            .unwrap();
        console
            .edit_message(&CHANNEL.into(), &sent.message_id, "hi again!", None)
            .await
            .unwrap();
        console
            .add_reaction(&CHANNEL.into(), &first.message_id, &"👍".parse().unwrap())
            .await
            .unwrap();
        let d = console
            .send_files(
                &CHANNEL.into(),
                vec![OutgoingFile::from_bytes("../notes.txt", b"abc".to_vec())],
                Some("here"),
                None,
            )
            .await
            .unwrap();
        assert_eq!(d.messages.len(), 1);
        assert_eq!(
            std::fs::read(dir.path().join("dl/_notes.txt")).unwrap(),
            b"abc"
        );
        let out = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
        assert!(out.contains("air-friends> hi!\n"));
        assert!(out.contains("air-friends> (edited) hi again!"));
        assert!(out.contains("reacted 👍"));
        let recent = console.recent_messages(&CHANNEL.into(), 10).await.unwrap();
        assert_eq!(recent.first().unwrap().content, "hello there");
        let found = console
            .search_messages(&CHANNEL.into(), "SECOND", 5)
            .await
            .unwrap();
        assert_eq!(found.len(), 1);
    }
}
