//! What [`FakePlatform`](super::FakePlatform) records and how it can be configured: the
//! [`Op`]erations of the trait, every [`Call`] with its arguments, the successful sends
//! ([`SentRecord`], [`FileRecord`]) and the file delivery [`FileMode`].

use super::super::{OutgoingFile, ReactionEmoji};

/// The operations of [`PlatformAdapter`](crate::platform::PlatformAdapter), to script failures
/// and filter calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Op {
    /// [`send_message`](crate::platform::PlatformAdapter::send_message)
    SendMessage,
    /// [`edit_message`](crate::platform::PlatformAdapter::edit_message)
    EditMessage,
    /// [`delete_message`](crate::platform::PlatformAdapter::delete_message)
    DeleteMessage,
    /// [`get_message`](crate::platform::PlatformAdapter::get_message)
    GetMessage,
    /// [`recent_messages`](crate::platform::PlatformAdapter::recent_messages)
    RecentMessages,
    /// [`search_messages`](crate::platform::PlatformAdapter::search_messages)
    SearchMessages,
    /// [`user_info`](crate::platform::PlatformAdapter::user_info)
    UserInfo,
    /// [`add_reaction`](crate::platform::PlatformAdapter::add_reaction)
    AddReaction,
    /// [`remove_reaction`](crate::platform::PlatformAdapter::remove_reaction)
    RemoveReaction,
    /// [`send_files`](crate::platform::PlatformAdapter::send_files)
    SendFiles,
    /// [`send_dm`](crate::platform::PlatformAdapter::send_dm)
    SendDm,
    /// [`send_dm_files`](crate::platform::PlatformAdapter::send_dm_files)
    SendDmFiles,
    /// [`custom_emojis`](crate::platform::PlatformAdapter::custom_emojis)
    CustomEmojis,
    /// [`start_typing`](crate::platform::PlatformAdapter::start_typing)
    StartTyping,
    /// [`thread_starter`](crate::platform::PlatformAdapter::thread_starter)
    ThreadStarter,
    /// [`open_thread`](crate::platform::PlatformAdapter::open_thread)
    OpenThread,
}

/// One recorded call with all its arguments (recorded before any failure is injected, so failed
/// attempts are visible too).
#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(missing_docs)] // the fields are the trait method's parameters
pub enum Call {
    /// A call of `send_message`.
    SendMessage {
        channel_id: String,
        text: String,
        reply_to: Option<String>,
    },
    /// A call of `edit_message`.
    EditMessage {
        channel_id: String,
        message_id: String,
        text: String,
        reply_to: Option<String>,
    },
    /// A call of `delete_message`.
    DeleteMessage {
        channel_id: String,
        message_id: String,
    },
    /// A call of `get_message`.
    GetMessage {
        channel_id: String,
        message_id: String,
    },
    /// A call of `recent_messages`.
    RecentMessages { channel_id: String, limit: usize },
    /// A call of `search_messages`.
    SearchMessages {
        channel_id: String,
        query: String,
        limit: usize,
    },
    /// A call of `user_info`.
    UserInfo { channel_id: String, user_id: String },
    /// A call of `add_reaction`.
    AddReaction {
        channel_id: String,
        message_id: String,
        emoji: ReactionEmoji,
    },
    /// A call of `remove_reaction`.
    RemoveReaction {
        channel_id: String,
        message_id: String,
        emoji: ReactionEmoji,
    },
    /// A call of `send_files`.
    SendFiles {
        channel_id: String,
        files: Vec<OutgoingFile>,
        caption: Option<String>,
        reply_to: Option<String>,
    },
    /// A call of `send_dm`.
    SendDm { user_id: String, text: String },
    /// A call of `send_dm_files`.
    SendDmFiles {
        user_id: String,
        files: Vec<OutgoingFile>,
        caption: Option<String>,
    },
    /// A call of `custom_emojis`.
    CustomEmojis { channel_id: String },
    /// A call of `start_typing`.
    StartTyping { channel_id: String },
    /// A call of `thread_starter`.
    ThreadStarter { channel_id: String },
    /// A call of `open_thread`.
    OpenThread {
        channel_id: String,
        message_id: String,
        name: String,
    },
}

impl Call {
    /// The operation this call was.
    pub fn op(&self) -> Op {
        match self {
            Call::SendMessage { .. } => Op::SendMessage,
            Call::EditMessage { .. } => Op::EditMessage,
            Call::DeleteMessage { .. } => Op::DeleteMessage,
            Call::GetMessage { .. } => Op::GetMessage,
            Call::RecentMessages { .. } => Op::RecentMessages,
            Call::SearchMessages { .. } => Op::SearchMessages,
            Call::UserInfo { .. } => Op::UserInfo,
            Call::AddReaction { .. } => Op::AddReaction,
            Call::RemoveReaction { .. } => Op::RemoveReaction,
            Call::SendFiles { .. } => Op::SendFiles,
            Call::SendDm { .. } => Op::SendDm,
            Call::SendDmFiles { .. } => Op::SendDmFiles,
            Call::CustomEmojis { .. } => Op::CustomEmojis,
            Call::StartTyping { .. } => Op::StartTyping,
            Call::ThreadStarter { .. } => Op::ThreadStarter,
            Call::OpenThread { .. } => Op::OpenThread,
        }
    }
}

/// A message the bot successfully sent with `send_message` or `send_dm`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SentRecord {
    /// Channel it went to (for a DM: [`dm_channel_id`](super::FakePlatform::dm_channel_id)).
    pub channel_id: String,
    /// Its generated id.
    pub message_id: String,
    /// Its text.
    pub text: String,
    /// What it replied to.
    pub reply_to: Option<String>,
    /// Sent by `send_dm` (rather than `send_message`).
    pub dm: bool,
}

/// A successful `send_files` / `send_dm_files`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileRecord {
    /// Channel it went to (for a DM: [`dm_channel_id`](super::FakePlatform::dm_channel_id)).
    pub channel_id: String,
    /// Names of the delivered files, in order.
    pub filenames: Vec<String>,
    /// The caption.
    pub caption: Option<String>,
    /// What it replied to.
    pub reply_to: Option<String>,
    /// Ids of the created messages.
    pub message_ids: Vec<String>,
}

/// How files are delivered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileMode {
    /// One message carrying every file (Discord, Misskey notes).
    OneMessage,
    /// One message per file, the caption on the first (Misskey chat).
    OnePerFile,
    /// One message per file in `chat:` channels and DMs, one message elsewhere (Misskey).
    OnePerFileInChat,
}
