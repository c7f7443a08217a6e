//! Thread per conversation (`places[].threads: perConversation`): a message the bot answers in
//! a server's channel first opens a thread from it, and the answer and the rest of the
//! conversation go there. The thread's channel is the conversation's from then on — its queue,
//! its warm agent, its inbox record's replies — so the message is moved into it before it is
//! queued there. Opening a thread that already exists (a restart answering the message again)
//! gives the same thread. When the thread cannot be opened (no permission, the platform has no
//! threads) the message is answered where it was written: nobody is left without an answer.

use crate::platform::{IncomingMessage, PlatformAdapter, PlatformError, ThreadInfo};

/// Discord's limit on a thread's name.
const MAX_NAME_CHARS: usize = 100;
/// The part of the message a thread's name is made of.
const NAME_FROM_MESSAGE_CHARS: usize = 80;

/// The name of a thread opened for `msg`: its first line of text (cut at a word where it can
/// be), else who wrote it.
pub fn thread_name(msg: &IncomingMessage) -> String {
    let first_line = msg
        .content
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("");
    let clean: String = first_line
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let clean = clean.trim();
    if clean.is_empty() {
        return cut(
            &format!("Conversation with {}", msg.display_name),
            MAX_NAME_CHARS,
        );
    }
    if clean.chars().count() <= NAME_FROM_MESSAGE_CHARS {
        return clean.to_owned();
    }
    let head = cut(clean, NAME_FROM_MESSAGE_CHARS);
    let at_word = head
        .rfind(char::is_whitespace)
        .filter(|&i| i >= NAME_FROM_MESSAGE_CHARS / 2)
        .map_or(head.as_str(), |i| &head[..i]);
    format!("{}…", at_word.trim_end())
}

fn cut(text: &str, chars: usize) -> String {
    text.chars().take(chars).collect()
}

/// `msg` moved into the thread opened from it: its channel is the thread, which records the
/// channel it was opened in. `Ok(None)`: the platform has no threads (answered in place).
pub async fn move_into_thread(
    platform: &dyn PlatformAdapter,
    msg: &IncomingMessage,
) -> Result<Option<IncomingMessage>, PlatformError> {
    let name = thread_name(msg);
    let Some(thread) = platform
        .open_thread(&msg.channel_id, &msg.message_id, &name)
        .await?
    else {
        return Ok(None);
    };
    let mut moved = msg.clone();
    moved.location.thread_parent_id = Some(msg.channel_id.as_str().to_owned());
    moved.location.thread = Some(Box::new(ThreadInfo {
        name,
        parent_name: None,
        in_forum: false,
        started_by_bot: true,
    }));
    moved.channel_id = thread;
    Ok(Some(moved))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::platform::fake::FakePlatform;

    fn msg(text: &str) -> IncomingMessage {
        FakePlatform::discord().push_incoming("c1", "u1", text)
    }

    #[test]
    fn a_thread_is_named_after_the_first_line_cut_at_a_word() {
        assert_eq!(
            thread_name(&msg("\n  How do I reset it?\nmore")),
            "How do I reset it?"
        );
        let long = "word ".repeat(40);
        let name = thread_name(&msg(&long));
        assert!(name.ends_with('…'), "{name}");
        assert!(
            name.chars().count() <= NAME_FROM_MESSAGE_CHARS + 1,
            "{name}"
        );
        assert!(!name.contains("wor…"), "cut at a word: {name}");
        let tabs = thread_name(&msg("a\tb\u{7}c"));
        assert_eq!(tabs, "a b c");
    }

    #[test]
    fn a_message_without_text_names_its_author() {
        let mut m = msg("   ");
        m.display_name = "Alice".into();
        assert_eq!(thread_name(&m), "Conversation with Alice");
        m.display_name = "x".repeat(300);
        assert_eq!(thread_name(&m).chars().count(), MAX_NAME_CHARS);
    }
}
