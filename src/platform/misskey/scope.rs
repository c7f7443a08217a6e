//! What one conversation may read on Misskey. `notes/show` and `chat/messages/show` answer every
//! note and chat message the bot can see — other users' direct messages to the bot included —
//! so reading by id is bound to the session's conversation here (`docs/SECURITY.md`, rule 5a):
//!
//! * a note channel (`note:{trigger}`) reads the trigger note, its ancestors and its children
//!   (replies, and quotes with content, as `notes/children` lists them), and of those only notes
//!   everyone the session answers may already read ([`ThreadScope::admits`]): outside a direct
//!   message no `specified` note at all; in one, the `specified` notes its partner may see;
//! * a chat channel (`chat:{peer}`) reads only 1:1 messages between the bot and `peer`.
//!
//! Anything else is [`not_found`], the very answer a missing id gets, so the agent cannot tell
//! "exists elsewhere" from "does not exist".

use std::collections::BTreeSet;

use super::model::{self, Note, Visibility};
use crate::platform::PlatformError;

/// The one answer for a message that is missing or outside the conversation.
pub fn not_found() -> PlatformError {
    PlatformError::NotFound("no such message in this conversation".into())
}

/// Maps a lookup failure that says "not there" onto [`not_found`], keeping other failures
/// (rate limits, transport) as they are.
pub fn as_not_found(error: PlatformError) -> PlatformError {
    match error {
        PlatformError::NotFound(_) => not_found(),
        other => other,
    }
}

/// Who may read a note: everyone, or the listed users.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Readers {
    /// Public, home and followers notes (the session's answer keeps that visibility).
    Anyone,
    /// A `specified` note: its author and its `visibleUserIds`.
    Only(BTreeSet<String>),
}

impl Readers {
    fn of(note: &Note) -> Readers {
        if note.visibility != Visibility::Specified {
            return Readers::Anyone;
        }
        let mut users: BTreeSet<String> = note.visible_user_ids.iter().cloned().collect();
        users.insert(note.user_id.clone());
        Readers::Only(users)
    }
}

/// A short tag naming who may read a `specified` note (its author and `visibleUserIds`, in
/// any order); `None` for a note anyone may read. Notes with the same readers get the same tag
/// (`chains.rs` keys a direct chain's conversation with it).
pub fn readers_tag(note: &Note) -> Option<String> {
    use std::hash::{Hash, Hasher};
    match Readers::of(note) {
        Readers::Anyone => None,
        Readers::Only(users) => {
            let mut hasher = std::collections::hash_map::DefaultHasher::new();
            users.hash(&mut hasher);
            Some(format!("{:016x}", hasher.finish()))
        }
    }
}

/// The thread of one note channel: its trigger note and who reads what the session writes there
/// (the bot's answer keeps the trigger's visibility, `send.rs`).
#[derive(Debug, Clone)]
pub struct ThreadScope {
    trigger_id: String,
    readers: Readers,
}

impl ThreadScope {
    /// The scope of the thread whose trigger is `trigger`.
    pub fn of(trigger: &Note) -> ThreadScope {
        ThreadScope {
            trigger_id: trigger.id.clone(),
            readers: Readers::of(trigger),
        }
    }

    /// Whether every reader of the session may already read `note`: any note that is not
    /// `specified`; a `specified` one only in a `specified` session whose every reader (its
    /// partner, in a direct message) is among the note's.
    pub fn admits(&self, note: &Note) -> bool {
        match (&self.readers, Readers::of(note)) {
            (_, Readers::Anyone) => true,
            (Readers::Anyone, Readers::Only(_)) => false,
            (Readers::Only(session), Readers::Only(note)) => session.is_subset(&note),
        }
    }

    /// Whether `note` is the trigger itself or one of its children (a reply, or a quote with
    /// text or files; a bare renote is not part of a thread).
    pub fn is_trigger_or_child(&self, note: &Note) -> bool {
        let quotes = note.renote_id.as_deref() == Some(self.trigger_id.as_str())
            && (note.text.is_some() || !note.files.is_empty());
        note.id == self.trigger_id
            || note.reply_id.as_deref() == Some(self.trigger_id.as_str())
            || quotes
    }
}

/// Whether chat `message` is a 1:1 message between the bot (`bot`, when known) and `peer`.
pub fn in_chat(message: &model::ChatMessage, bot: Option<&str>, peer: &str) -> bool {
    let (Some(bot), Some(to)) = (bot, message.to_user_id.as_deref()) else {
        return false;
    };
    let from = message.from_user_id.as_str();
    message.to_room_id.is_none() && ((from == bot && to == peer) || (from == peer && to == bot))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn note(id: &str, user: &str, visibility: &str, visible: &[&str]) -> Note {
        serde_json::from_value(json!({
            "id": id, "createdAt": "2025-01-01T00:00:00Z", "userId": user,
            "user": {"id": user, "username": user}, "text": "t",
            "visibility": visibility, "visibleUserIds": visible,
        }))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn a_public_session_admits_no_specified_note() {
        let scope = ThreadScope::of(&note("t", "alice", "public", &[]));
        for visibility in ["public", "home", "followers"] {
            assert!(scope.admits(&note("n", "bob", visibility, &[])));
        }
        assert!(!scope.admits(&note("n", "bob", "specified", &["bot"])));
        assert!(!scope.admits(&note("n", "bot", "specified", &["alice"])));
    }

    #[test]
    fn a_direct_session_admits_the_specified_notes_its_partner_reads() {
        let scope = ThreadScope::of(&note("t", "alice", "specified", &["bot"]));
        assert!(scope.admits(&note("t", "alice", "specified", &["bot"])));
        assert!(scope.admits(&note("n", "bot", "specified", &["alice"])));
        assert!(scope.admits(&note("n", "carol", "specified", &["bot", "alice"])));
        assert!(!scope.admits(&note("n", "bob", "specified", &["bot"])));
        assert!(!scope.admits(&note("n", "bot", "specified", &["bob"])));
        // A group note: every reader of the session's answer must read the note.
        let group = ThreadScope::of(&note("t", "alice", "specified", &["bot", "carol"]));
        assert!(group.admits(&note("n", "bot", "specified", &["alice", "carol"])));
        assert!(!group.admits(&note("n", "bot", "specified", &["alice"])));
    }

    #[test]
    fn the_readers_tag_names_the_readers_of_a_specified_note_only() {
        assert_eq!(readers_tag(&note("n", "alice", "public", &[])), None);
        assert_eq!(readers_tag(&note("n", "alice", "followers", &[])), None);
        let to_bot = readers_tag(&note("n", "alice", "specified", &["bot"])).unwrap();
        // The bot's answer, specified to alice: the same two readers.
        assert_eq!(
            readers_tag(&note("m", "bot", "specified", &["alice"])).as_deref(),
            Some(to_bot.as_str())
        );
        assert_ne!(
            readers_tag(&note("m", "alice", "specified", &["bot", "carol"])).as_deref(),
            Some(to_bot.as_str())
        );
    }

    #[test]
    fn children_are_replies_and_quotes_with_content() {
        let scope = ThreadScope::of(&note("t", "alice", "public", &[]));
        let mut child = note("c", "bob", "public", &[]);
        assert!(!scope.is_trigger_or_child(&child));
        child.reply_id = Some("t".into());
        assert!(scope.is_trigger_or_child(&child));
        let mut quote = note("q", "bob", "public", &[]);
        quote.renote_id = Some("t".into());
        assert!(scope.is_trigger_or_child(&quote));
        quote.text = None;
        assert!(!scope.is_trigger_or_child(&quote), "a bare renote");
        assert!(scope.is_trigger_or_child(&note("t", "alice", "public", &[])));
    }

    #[test]
    fn a_chat_reads_only_its_two_sides() {
        let message = |from: &str, to: Option<&str>, room: Option<&str>| model::ChatMessage {
            id: "m".into(),
            created_at: chrono::DateTime::default(),
            from_user_id: from.into(),
            from_user: None,
            to_user_id: to.map(str::to_owned),
            to_room_id: room.map(str::to_owned),
            text: None,
            file: None,
        };
        assert!(in_chat(
            &message("alice", Some("bot"), None),
            Some("bot"),
            "alice"
        ));
        assert!(in_chat(
            &message("bot", Some("alice"), None),
            Some("bot"),
            "alice"
        ));
        assert!(!in_chat(
            &message("bob", Some("bot"), None),
            Some("bot"),
            "alice"
        ));
        assert!(!in_chat(
            &message("bot", Some("bob"), None),
            Some("bot"),
            "alice"
        ));
        assert!(!in_chat(
            &message("alice", Some("bob"), None),
            Some("bot"),
            "alice"
        ));
        assert!(!in_chat(
            &message("alice", None, Some("r")),
            Some("bot"),
            "alice"
        ));
        assert!(!in_chat(
            &message("alice", Some("bot"), None),
            None,
            "alice"
        ));
    }
}
