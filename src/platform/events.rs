//! What platform adapters deliver to the daemon, and how they report their connection state.
//!
//! Adapters push [`PlatformEvent`]s into an [`EventSink`] (a bounded channel read by the
//! conversation router): ordinary messages, and user commands (Discord slash commands, Misskey
//! `/command` text) that run a skill handler without an agent and are answered through the
//! invocation's reply channel, and typing signs (a message is probably coming: its agent may
//! be started ahead). [`ConnectionState`] is what `/readyz` reads.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use crate::sync::Recover;

use serde_json::{Map, Value};
use tokio::sync::{mpsc, oneshot};

use super::{IncomingMessage, Location, MessageId, Origin, PlatformKind};

/// Where adapters send what they receive.
pub type EventSink = mpsc::Sender<PlatformEvent>;

/// One inbound event.
#[derive(Debug)]
pub enum PlatformEvent {
    /// A message (the router decides whether to answer it).
    Message(IncomingMessage),
    /// A user command for a skill with `user_command: true`.
    Command(CommandInvocation),
    /// The platform connected with a new session (at start, or after a drop it could not
    /// resume: Discord's READY, every Misskey stream connection): what was sent meanwhile was
    /// never delivered, so the daemon reads it back (the catch-up). Not sent on a resume,
    /// which replays what was missed.
    Connected(PlatformKind),
    /// A user started typing (Discord's TYPING_START): their message is probably seconds away.
    Typing(Typing),
}

/// Someone typing where the bot can see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Typing {
    /// Who and where (the username may be empty: a DM's typing event does not carry it).
    pub origin: Origin,
    /// Where in the platform, as a message written there would carry it.
    pub location: Location,
}

impl Typing {
    /// The conversation a message written now would belong to (see
    /// [`IncomingMessage::conversation`]).
    pub fn conversation(&self) -> &str {
        self.location
            .conversation
            .as_deref()
            .unwrap_or(self.origin.channel_id.as_str())
    }
}

/// A human running a skill directly.
#[derive(Debug)]
pub struct CommandInvocation {
    /// Who ran it and where: the channel it was used in (`chat:{user}` for Misskey chat), and
    /// whether that is a DM (private data may be shown only then).
    pub origin: Origin,
    /// Skill name, e.g. `memory-stats`.
    pub skill: String,
    /// Parameters by their `input_schema` names (camelCase), already typed.
    pub parameters: Map<String, Value>,
    /// The message that carried a text command (Misskey), if any.
    pub message_id: Option<MessageId>,
    /// Where the answer goes; the adapter delivers it (ephemeral on Discord, by DM on Misskey).
    pub reply: oneshot::Sender<CommandReply>,
}

/// The answer to a user command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandReply {
    /// Text for the user (already formatted for humans).
    pub text: String,
    /// True when the command failed (adapters may style it differently).
    pub is_error: bool,
    /// A button under the answer that runs another command (Discord); where there are no
    /// buttons (Misskey) the text says what to type instead.
    pub button: Option<ReplyButton>,
}

impl CommandReply {
    /// A successful answer.
    pub fn text(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            is_error: false,
            button: None,
        }
    }

    /// A failed command's answer.
    pub fn error(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            is_error: true,
            button: None,
        }
    }

    /// The same answer with `button` under it.
    pub fn with_button(mut self, button: ReplyButton) -> Self {
        self.button = Some(button);
        self
    }
}

/// A button that runs user command `command` with one string parameter, as its user (e.g.
/// `/forget-confirm` with the code `/forget` gave).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplyButton {
    /// What the button says.
    pub label: String,
    /// The command it runs.
    pub command: String,
    /// Its parameter's schema name.
    pub parameter: String,
    /// The value.
    pub value: String,
}

/// A platform's connection flag, shared between the adapter (writer) and readiness (reader),
/// with why it cannot connect when the adapter knows (a rejected token, a refused intent): what
/// `/readyz` then says.
#[derive(Debug, Clone, Default)]
pub struct ConnectionState {
    connected: Arc<AtomicBool>,
    problem: Arc<Mutex<Option<String>>>,
}

impl ConnectionState {
    /// Initially disconnected.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records the current state; connecting clears a recorded problem.
    pub fn set(&self, connected: bool) {
        self.connected.store(connected, Ordering::Release);
        if connected {
            *self.problem.locked() = None;
        }
    }

    /// Records that the platform cannot be connected, and why (an operator's fix, one line).
    pub fn fail(&self, problem: impl Into<String>) {
        self.connected.store(false, Ordering::Release);
        *self.problem.locked() = Some(problem.into());
    }

    /// Why the platform cannot be connected, when the adapter said.
    pub fn problem(&self) -> Option<String> {
        self.problem.locked().clone()
    }

    /// True while connected.
    pub fn is_connected(&self) -> bool {
        self.connected.load(Ordering::Acquire)
    }
}

/// A skill offered to humans as a command (manifest `user_command: true`): Discord registers it
/// as a slash command, Misskey accepts it as `/name --flag value` text.
#[derive(Debug, Clone, PartialEq)]
pub struct UserCommandSpec {
    /// Skill name (also the command name), e.g. `memory-stats`.
    pub name: String,
    /// One-line description for the command list (≤ 100 characters on Discord).
    pub description: String,
    /// The skill's `input_schema` (JSON Schema object): options are generated from it.
    pub input_schema: Value,
    /// Discord servers (guild ids) where no place allows the skill (`places[].skills`): its
    /// slash command is not registered there.
    pub hidden_in_guilds: std::collections::BTreeSet<String>,
}
