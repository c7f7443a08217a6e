//! Misskey reply chains as conversations: a note that begins a chain and every reply below it
//! are one conversation, keyed by that root note ([`MisskeyAdapter::conversation_of`]), so the
//! chain's notes are answered one at a time, by the same warm agent, each reply still going to
//! the note it answers (the message's channel stays `note:{id}`).
//!
//! The key is `note:{root}` for notes anyone may read. A `specified` note's key also names its
//! readers (`note:{root}~{tag}`, [`scope::readers_tag`](super::scope::readers_tag)), so a
//! direct exchange never shares an agent — and what that agent was shown — with notes other
//! people read, the rule `scope.rs` keeps for every read.
//!
//! The root is found in what the adapter remembers — every note it was given, and each reply
//! the bot itself posted, with its chain's root ([`Roots`], at most [`CAPACITY`] notes) — or
//! with one `notes/conversation` (the ancestors, nearest first; the last is the root when the
//! chain is shorter than a page). A look-up that fails or takes longer than
//! [`LOOKUP_TIMEOUT`] takes the nearest parent as the root and logs it: the note is still
//! answered, in a conversation of its own.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::Duration;

use serde_json::json;

use super::MisskeyAdapter;
use super::model::Note;
use super::scope::readers_tag;
use crate::sync::Recover;

/// Notes whose root is remembered.
pub(super) const CAPACITY: usize = 10_000;

/// The longest a note waits for its chain's root.
pub(super) const LOOKUP_TIMEOUT: Duration = Duration::from_secs(4);

/// Ancestors asked for at most (Misskey's page).
const MAX_ANCESTORS: usize = 100;

/// The root note of each known note (bounded: the oldest entries go first).
#[derive(Debug, Default)]
pub(super) struct Roots {
    inner: Mutex<RootsInner>,
}

#[derive(Debug, Default)]
struct RootsInner {
    root_of: HashMap<String, String>,
    order: VecDeque<String>,
}

impl Roots {
    /// The root of `note_id`, when known.
    pub(super) fn get(&self, note_id: &str) -> Option<String> {
        self.inner.locked().root_of.get(note_id).cloned()
    }

    /// Remembers that `note_id`'s chain begins at `root`.
    pub(super) fn remember(&self, note_id: &str, root: &str) {
        let mut inner = self.inner.locked();
        if inner
            .root_of
            .insert(note_id.to_owned(), root.to_owned())
            .is_none()
        {
            inner.order.push_back(note_id.to_owned());
        }
        while inner.order.len() > CAPACITY {
            if let Some(oldest) = inner.order.pop_front() {
                inner.root_of.remove(&oldest);
            }
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.inner.locked().root_of.len()
    }
}

impl MisskeyAdapter {
    /// The conversation `note` belongs to: `note:{root}`, with its readers' tag for a
    /// `specified` note (see the module documentation).
    pub(super) async fn conversation_of(&self, note: &Note) -> String {
        let root = self.root_of(note).await;
        match readers_tag(note) {
            None => format!("note:{root}"),
            Some(tag) => format!("note:{root}~{tag}"),
        }
    }

    /// Remembers that the bot's reply `reply_id` to `parent_id` is in the parent's chain.
    pub(super) fn remember_reply(&self, reply_id: &str, parent_id: &str) {
        let root = self
            .roots
            .get(parent_id)
            .unwrap_or_else(|| parent_id.to_owned());
        self.roots.remember(reply_id, &root);
    }

    /// The root note of `note`'s reply chain.
    async fn root_of(&self, note: &Note) -> String {
        if let Some(root) = self.roots.get(&note.id) {
            return root;
        }
        let Some(parent) = note.reply_id.as_deref() else {
            self.roots.remember(&note.id, &note.id);
            return note.id.clone();
        };
        let root = match self.roots.get(parent) {
            Some(root) => root,
            None => self.look_up_root(note, parent).await,
        };
        self.roots.remember(&note.id, &root);
        root
    }

    /// Asks Misskey for `note`'s ancestors and remembers each one's root.
    async fn look_up_root(&self, note: &Note, parent: &str) -> String {
        let asked = self.api.call::<Vec<Note>>(
            "notes/conversation",
            json!({ "noteId": note.id, "limit": MAX_ANCESTORS }),
        );
        let ancestors = match tokio::time::timeout(LOOKUP_TIMEOUT, asked).await {
            Ok(Ok(ancestors)) => ancestors,
            Ok(Err(error)) => {
                tracing::warn!(platform = "misskey", message_id = %note.id, error = %error,
                    "could not read the reply chain above a note; it starts a conversation of its own");
                return parent.to_owned();
            }
            Err(_) => {
                tracing::warn!(platform = "misskey", message_id = %note.id,
                    timeout_ms = LOOKUP_TIMEOUT.as_millis() as u64,
                    "reading the reply chain above a note timed out; it starts a conversation of its own");
                return parent.to_owned();
            }
        };
        // Nearest first: the first one known gives the root; else the farthest one is it.
        let known = ancestors
            .iter()
            .position(|a| self.roots.get(&a.id).is_some());
        let root = match known {
            Some(i) => self.roots.get(&ancestors[i].id).unwrap_or_default(),
            None => ancestors
                .last()
                .map_or_else(|| parent.to_owned(), |a| a.id.clone()),
        };
        for ancestor in &ancestors[..known.unwrap_or(ancestors.len())] {
            self.roots.remember(&ancestor.id, &root);
        }
        root
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_memory_is_bounded_and_forgets_the_oldest_first() {
        let roots = Roots::default();
        for i in 0..CAPACITY + 5 {
            roots.remember(&format!("n{i}"), "r");
        }
        assert_eq!(roots.len(), CAPACITY);
        assert_eq!(roots.get("n0"), None);
        assert_eq!(roots.get("n4"), None);
        assert_eq!(roots.get("n5").as_deref(), Some("r"));
        // Remembering a note again does not count it twice.
        roots.remember("n5", "r2");
        assert_eq!(roots.len(), CAPACITY);
        assert_eq!(roots.get("n5").as_deref(), Some("r2"));
    }
}
