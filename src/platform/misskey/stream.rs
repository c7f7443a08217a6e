//! The streaming connection: `ws(s)://{host}/streaming?i=TOKEN`, channel `main` (`mention`,
//! `reply`, `newChatMessage`) plus one `chatUser` channel per active chat partner.
//!
//! Misskey publishes `main`'s `newChatMessage` only 3 s after a chat message was sent, and only
//! while it is unread; `chatUser` delivers at once. So the first message from a peer arrives on
//! `main`, after which the peer's `chatUser` channel is connected (and kept across reconnects, up
//! to [`MisskeyOptions::max_chat_peers`](super::MisskeyOptions)); messages received there are
//! marked read so `main` stays quiet. A message seen on both channels is delivered once (ids are
//! remembered across reconnects).
//!
//! The connection is kept up with websocket pings; a connection silent for two ping intervals,
//! closed or failed is re-established after an exponential back-off with jitter, and every
//! channel is connected again. [`ConnectionState`] is true only while connected. Frames that do
//! not parse are logged and skipped. Text commands are answered by chat from tracked tasks that
//! stop with the stream.

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::sync::oneshot;
use tokio::time::{Instant, MissedTickBehavior};
use tokio_tungstenite::Connector;
use tokio_tungstenite::tungstenite::Message;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::MisskeyAdapter;
use super::commands::{ParsedCommand, parse_command};
use super::convert::{BotIdentity, chat_to_incoming, note_to_incoming};
use super::model::{self, ChannelEvent, Frame, Note};
use crate::platform::{
    CommandInvocation, CommandReply, ConnectionState, EventSink, IncomingMessage, PlatformEvent,
    PlatformKind, UserId, send_dm_text,
};

/// Message ids remembered for de-duplication.
const SEEN_CAPACITY: usize = 2048;
/// Our connection id of the `main` channel.
const MAIN_ID: &str = "main";
/// Prefix of our connection ids of `chatUser` channels (`chatUser:{peerId}`).
const CHAT_USER_PREFIX: &str = "chatUser:";

/// What the stream remembers across reconnects: chat peers to subscribe and delivered ids.
#[derive(Debug)]
pub struct StreamMemory {
    peers: VecDeque<String>,
    max_peers: usize,
    seen: HashSet<String>,
    seen_order: VecDeque<String>,
}

/// What remembering a chat peer changed.
#[derive(Debug, PartialEq, Eq)]
enum PeerChange {
    /// Already subscribed (now the most recent).
    Known,
    /// Newly added; the least recent peer was dropped to make room, if any.
    Added { evicted: Option<String> },
}

impl StreamMemory {
    /// Empty, keeping at most `max_peers` chat peers.
    pub fn new(max_peers: usize) -> Self {
        Self {
            peers: VecDeque::new(),
            max_peers: max_peers.max(1),
            seen: HashSet::new(),
            seen_order: VecDeque::new(),
        }
    }

    /// Records `key`; false when it was already seen.
    fn first_sighting(&mut self, key: String) -> bool {
        if self.seen.contains(&key) {
            return false;
        }
        if self.seen_order.len() >= SEEN_CAPACITY
            && let Some(oldest) = self.seen_order.pop_front()
        {
            self.seen.remove(&oldest);
        }
        self.seen.insert(key.clone());
        self.seen_order.push_back(key);
        true
    }

    /// Makes `peer` the most recent chat peer.
    fn add_peer(&mut self, peer: &str) -> PeerChange {
        if let Some(index) = self.peers.iter().position(|p| p == peer) {
            if let Some(known) = self.peers.remove(index) {
                self.peers.push_back(known);
            }
            return PeerChange::Known;
        }
        let evicted = if self.peers.len() >= self.max_peers {
            self.peers.pop_front()
        } else {
            None
        };
        self.peers.push_back(peer.to_owned());
        PeerChange::Added { evicted }
    }

    fn peers(&self) -> Vec<String> {
        self.peers.iter().cloned().collect()
    }
}

/// Why a connection ended.
#[derive(Debug)]
enum Ended {
    /// Shutdown was requested.
    Shutdown,
    /// Nobody reads events any more.
    SinkClosed,
    /// The connection failed or was lost; `connected` tells whether it had been up.
    Dropped { connected: bool, reason: String },
}

/// A text command's answer: known now (a usage text), or awaited from the invocation.
enum Answer {
    Ready(String),
    Pending(oneshot::Receiver<CommandReply>),
}

/// Everything one streaming run shares.
struct Streamer {
    adapter: Arc<MisskeyAdapter>,
    identity: BotIdentity,
    sink: EventSink,
    shutdown: CancellationToken,
    tasks: TaskTracker,
    tasks_cancel: CancellationToken,
}

/// Streams until `shutdown` (see the module documentation).
pub(super) async fn run(
    adapter: Arc<MisskeyAdapter>,
    identity: BotIdentity,
    sink: EventSink,
    state: ConnectionState,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let tasks_cancel = shutdown.child_token();
    let streamer = Streamer {
        adapter,
        identity,
        sink,
        shutdown: shutdown.clone(),
        tasks: TaskTracker::new(),
        tasks_cancel: tasks_cancel.clone(),
    };
    let reconnect = streamer.adapter.options.reconnect;
    let mut attempt = 0u32;
    let result = loop {
        let ended = streamer.session(&state).await;
        state.set(false);
        match ended {
            Ended::Shutdown => break Ok(()),
            Ended::SinkClosed => {
                break Err(anyhow::anyhow!(
                    "the event sink was closed; the misskey stream stopped"
                ));
            }
            Ended::Dropped { connected, reason } => {
                if connected {
                    attempt = 0;
                }
                let delay = reconnect.delay(attempt);
                attempt = attempt.saturating_add(1);
                tracing::warn!(
                    platform = "misskey",
                    reason = %reason,
                    attempt,
                    delay_ms = delay.as_millis() as u64,
                    "misskey stream disconnected, reconnecting"
                );
                tokio::select! {
                    _ = shutdown.cancelled() => break Ok(()),
                    _ = tokio::time::sleep(delay) => {}
                }
            }
        }
    };
    state.set(false);
    streamer.tasks.close();
    if result.is_err() {
        tasks_cancel.cancel();
    }
    streamer.tasks.wait().await;
    tracing::info!(platform = "misskey", "misskey stream stopped");
    result
}

impl Streamer {
    /// One connection, from handshake to its end.
    async fn session(&self, state: &ConnectionState) -> Ended {
        let options = &self.adapter.options;
        let connecting = tokio::time::timeout(
            options.request_timeout,
            tokio_tungstenite::connect_async_tls_with_config(
                self.adapter.streaming_url(),
                None,
                false,
                self.adapter.tls.clone().map(Connector::Rustls),
            ),
        );
        let socket = tokio::select! {
            _ = self.shutdown.cancelled() => return Ended::Shutdown,
            result = connecting => match result {
                Ok(Ok((socket, _response))) => socket,
                Ok(Err(error)) => return self.dropped(false, &error.to_string()),
                Err(_) => return self.dropped(false, "the websocket handshake timed out"),
            },
        };
        let (mut write, mut read) = socket.split();
        let mut frames = vec![connect_frame("main", MAIN_ID, json!({}))];
        frames.extend(
            self.adapter
                .memory()
                .peers()
                .iter()
                .map(|p| chat_user_connect(p)),
        );
        for frame in frames {
            if let Err(error) = write.send(Message::text(frame)).await {
                return self.dropped(false, &error.to_string());
            }
        }
        state.set(true);
        tracing::info!(platform = "misskey", host = %self.adapter.host, "misskey stream connected");
        // Misskey's stream has no resume: what was sent while it was down was never delivered.
        if let Err(ended) = self
            .deliver(PlatformEvent::Connected(PlatformKind::Misskey))
            .await
        {
            return ended;
        }
        let ping_every = options.ping_interval;
        let mut ping = tokio::time::interval_at(Instant::now() + ping_every, ping_every);
        ping.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut last_traffic = Instant::now();
        loop {
            // Biased: frames already received are read before the silence check runs.
            tokio::select! {
                biased;
                _ = self.shutdown.cancelled() => {
                    // Best effort: the server may already be gone.
                    let _ = write.send(Message::Close(None)).await;
                    return Ended::Shutdown;
                }
                frame = read.next() => {
                    last_traffic = Instant::now();
                    let text = match frame {
                        None => return self.dropped(true, "the server closed the stream"),
                        Some(Err(error)) => return self.dropped(true, &error.to_string()),
                        Some(Ok(Message::Close(_))) => {
                            return self.dropped(true, "the server closed the stream");
                        }
                        Some(Ok(Message::Text(text))) => text,
                        Some(Ok(_)) => continue,
                    };
                    let replies = match self.handle_text(text.as_str()).await {
                        Ok(replies) => replies,
                        Err(ended) => return ended,
                    };
                    for reply in replies {
                        if let Err(error) = write.send(Message::text(reply)).await {
                            return self.dropped(true, &error.to_string());
                        }
                    }
                }
                _ = ping.tick() => {
                    if last_traffic.elapsed() > ping_every * 2 {
                        return self.dropped(true, "no traffic for two ping intervals");
                    }
                    if let Err(error) = write.send(Message::Ping(Default::default())).await {
                        return self.dropped(true, &error.to_string());
                    }
                }
            }
        }
    }

    fn dropped(&self, connected: bool, reason: &str) -> Ended {
        Ended::Dropped {
            connected,
            reason: self.adapter.api.scrub(reason),
        }
    }

    /// Handles one text frame; returns frames to send back (channel connections, read marks).
    async fn handle_text(&self, text: &str) -> Result<Vec<String>, Ended> {
        let frame: Frame = match serde_json::from_str(text) {
            Ok(frame) => frame,
            Err(error) => {
                tracing::warn!(platform = "misskey", error = %error, bytes = text.len(),
                    "malformed misskey frame skipped");
                return Ok(Vec::new());
            }
        };
        if frame.kind != "channel" {
            tracing::trace!(platform = "misskey", frame = %frame.kind, "misskey frame ignored");
            return Ok(Vec::new());
        }
        let event: ChannelEvent = match serde_json::from_value(frame.body) {
            Ok(event) => event,
            Err(error) => {
                tracing::warn!(platform = "misskey", error = %error,
                    "malformed misskey channel event skipped");
                return Ok(Vec::new());
            }
        };
        let on_main = event.id == MAIN_ID;
        let on_chat_user = event.id.starts_with(CHAT_USER_PREFIX);
        match event.kind.as_str() {
            "mention" | "reply" if on_main => {
                let reply_event = event.kind == "reply";
                match parse_event::<Note>(&event) {
                    Some(note) => self.on_note(note, reply_event).await.map(|()| Vec::new()),
                    None => Ok(Vec::new()),
                }
            }
            "newChatMessage" if on_main => match parse_event::<model::ChatMessage>(&event) {
                Some(message) => self.on_chat(message, true).await,
                None => Ok(Vec::new()),
            },
            "message" if on_chat_user => match parse_event::<model::ChatMessage>(&event) {
                Some(message) => self.on_chat(message, false).await,
                None => Ok(Vec::new()),
            },
            other => {
                tracing::trace!(platform = "misskey", channel = %event.id, event = other,
                    "misskey event ignored");
                Ok(Vec::new())
            }
        }
    }

    async fn on_note(&self, note: Note, reply_event: bool) -> Result<(), Ended> {
        if !self
            .adapter
            .memory()
            .first_sighting(format!("note:{}", note.id))
        {
            tracing::debug!(platform = "misskey", message_id = %note.id, "duplicate note skipped");
            return Ok(());
        }
        self.adapter.remember_user(note.user.clone());
        match note_to_incoming(&note, &self.identity, reply_event) {
            Ok(mut incoming) => {
                incoming.location.conversation = Some(self.adapter.conversation_of(&note).await);
                self.dispatch(incoming).await
            }
            Err(skip) => {
                tracing::debug!(platform = "misskey", message_id = %note.id,
                    reason = skip.as_str(), "note ignored");
                Ok(())
            }
        }
    }

    async fn on_chat(
        &self,
        message: model::ChatMessage,
        via_main: bool,
    ) -> Result<Vec<String>, Ended> {
        let peer = message.from_user_id.clone();
        if peer == self.identity.user_id || message.to_room_id.is_some() {
            return Ok(Vec::new());
        }
        let mut frames = Vec::new();
        {
            let mut memory = self.adapter.memory();
            if via_main {
                if let PeerChange::Added { evicted } = memory.add_peer(&peer) {
                    tracing::debug!(platform = "misskey", peer = %peer, "subscribing chatUser");
                    frames.push(chat_user_connect(&peer));
                    if let Some(evicted) = evicted {
                        frames.push(disconnect_frame(&format!("{CHAT_USER_PREFIX}{evicted}")));
                    }
                }
            } else {
                memory.add_peer(&peer);
                frames.push(read_frame(&peer));
            }
            if !memory.first_sighting(format!("chat:{}", message.id)) {
                tracing::debug!(platform = "misskey", message_id = %message.id,
                    "duplicate chat message skipped");
                return Ok(frames);
            }
        }
        let sender = self.adapter.sender_of(&message).await;
        match chat_to_incoming(&message, sender.as_ref(), &self.identity) {
            Ok(incoming) => self.dispatch(incoming).await?,
            Err(skip) => tracing::debug!(platform = "misskey", message_id = %message.id,
                reason = skip.as_str(), "chat message ignored"),
        }
        Ok(frames)
    }

    /// Delivers a message, or runs it as a text command.
    async fn dispatch(&self, incoming: IncomingMessage) -> Result<(), Ended> {
        let parsed = if self.adapter.commands.is_empty() {
            ParsedCommand::NotCommand
        } else {
            parse_command(&incoming.content, &self.adapter.commands)
        };
        match parsed {
            ParsedCommand::NotCommand => {
                tracing::debug!(platform = "misskey", channel_id = %incoming.channel_id,
                    message_id = %incoming.message_id, user_id = %incoming.user_id,
                    "misskey message received");
                self.deliver(PlatformEvent::Message(incoming)).await
            }
            ParsedCommand::Command { skill, parameters } => {
                tracing::info!(platform = "misskey", skill = %skill, user_id = %incoming.user_id,
                    message_id = %incoming.message_id, "misskey text command");
                let (reply, answer) = oneshot::channel();
                let user_id = incoming.user_id.clone();
                self.deliver(PlatformEvent::Command(CommandInvocation {
                    origin: incoming.origin(),
                    skill: skill.clone(),
                    parameters,
                    message_id: Some(incoming.message_id),
                    reply,
                }))
                .await?;
                self.spawn_answer(user_id, skill, Answer::Pending(answer));
                Ok(())
            }
            ParsedCommand::Invalid { skill, help } => {
                tracing::info!(platform = "misskey", skill = %skill, user_id = %incoming.user_id,
                    "misskey text command with bad arguments");
                self.spawn_answer(incoming.user_id, skill, Answer::Ready(help));
                Ok(())
            }
        }
    }

    async fn deliver(&self, event: PlatformEvent) -> Result<(), Ended> {
        tokio::select! {
            _ = self.shutdown.cancelled() => Err(Ended::Shutdown),
            sent = self.sink.send(event) => sent.map_err(|_| Ended::SinkClosed),
        }
    }

    /// Answers a text command by chat to `user_id`, from a tracked task.
    fn spawn_answer(&self, user_id: UserId, skill: String, answer: Answer) {
        let adapter = Arc::clone(&self.adapter);
        let cancel = self.tasks_cancel.clone();
        let timeout = adapter.options.command_timeout;
        self.tasks.spawn(async move {
            let text = match answer {
                Answer::Ready(text) => text,
                Answer::Pending(reply) => tokio::select! {
                    _ = cancel.cancelled() => return,
                    outcome = tokio::time::timeout(timeout, reply) => match outcome {
                        Ok(Ok(reply)) => reply.text,
                        Ok(Err(_)) => {
                            tracing::warn!(platform = "misskey", skill = %skill,
                                "text command dropped without an answer");
                            "Sorry, that command could not be run right now.".to_owned()
                        }
                        Err(_) => {
                            tracing::warn!(platform = "misskey", skill = %skill,
                                timeout_ms = timeout.as_millis() as u64, "text command timed out");
                            "Sorry, that command took too long. Please try again later.".to_owned()
                        }
                    },
                },
            };
            if text.trim().is_empty() {
                return;
            }
            tokio::select! {
                _ = cancel.cancelled() => {}
                sent = send_dm_text(adapter.as_ref(), &user_id, &text) => {
                    if let Err(error) = sent {
                        tracing::warn!(platform = "misskey", skill = %skill, user_id = %user_id,
                            error = %error.error, delivered = error.sent.len(),
                            "could not deliver a text command's answer");
                    }
                }
            }
        });
    }
}

fn parse_event<T: serde::de::DeserializeOwned>(event: &ChannelEvent) -> Option<T> {
    match T::deserialize(&event.body) {
        Ok(value) => Some(value),
        Err(error) => {
            tracing::warn!(platform = "misskey", channel = %event.id, event = %event.kind,
                error = %error, "malformed misskey event skipped");
            None
        }
    }
}

fn connect_frame(channel: &str, id: &str, params: Value) -> String {
    json!({"type": "connect", "body": {"channel": channel, "id": id, "params": params}}).to_string()
}

fn chat_user_connect(peer: &str) -> String {
    connect_frame(
        "chatUser",
        &format!("{CHAT_USER_PREFIX}{peer}"),
        json!({ "otherId": peer }),
    )
}

fn disconnect_frame(id: &str) -> String {
    json!({"type": "disconnect", "body": {"id": id}}).to_string()
}

fn read_frame(peer: &str) -> String {
    json!({"type": "ch", "body": {"id": format!("{CHAT_USER_PREFIX}{peer}"), "type": "read",
        "body": {}}})
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_remembered_within_capacity() {
        let mut memory = StreamMemory::new(2);
        assert!(memory.first_sighting("a".into()));
        assert!(!memory.first_sighting("a".into()));
        for n in 0..SEEN_CAPACITY {
            memory.first_sighting(format!("x{n}"));
        }
        assert!(
            memory.first_sighting("a".into()),
            "the oldest id was forgotten"
        );
        assert!(memory.seen.len() <= SEEN_CAPACITY);
    }

    #[test]
    fn chat_peers_are_kept_most_recent_first_out() {
        let mut memory = StreamMemory::new(2);
        assert_eq!(memory.add_peer("a"), PeerChange::Added { evicted: None });
        assert_eq!(memory.add_peer("b"), PeerChange::Added { evicted: None });
        assert_eq!(memory.add_peer("a"), PeerChange::Known);
        assert_eq!(
            memory.add_peer("c"),
            PeerChange::Added {
                evicted: Some("b".into())
            }
        );
        assert_eq!(memory.peers(), vec!["a", "c"]);
    }

    #[test]
    fn frames_have_the_wire_shape() {
        let connect: Value = serde_json::from_str(&chat_user_connect("u1")).expect("json");
        assert_eq!(
            connect,
            json!({"type": "connect", "body": {"channel": "chatUser", "id": "chatUser:u1",
                "params": {"otherId": "u1"}}})
        );
        let read: Value = serde_json::from_str(&read_frame("u1")).expect("json");
        assert_eq!(read["body"]["type"], "read");
        let disconnect: Value = serde_json::from_str(&disconnect_frame("x")).expect("json");
        assert_eq!(
            disconnect,
            json!({"type": "disconnect", "body": {"id": "x"}})
        );
    }
}
