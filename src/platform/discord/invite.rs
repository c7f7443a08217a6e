//! The URL that invites the bot to a Discord server (`air-friends discord invite-url`): the
//! `bot` scope with exactly the permissions the enabled features use, and
//! `applications.commands` for the slash commands (always: `/privacy`, `/forget`). The application id is
//! the bot's user id, which the token's first segment carries (base64), so no request is made.

use base64::Engine as _;

/// See the channels (and their messages as they arrive).
pub const VIEW_CHANNEL: u64 = 1 << 10;
/// Answer in channels.
pub const SEND_MESSAGES: u64 = 1 << 11;
/// Answer in threads.
pub const SEND_MESSAGES_IN_THREADS: u64 = 1 << 38;
/// Read earlier messages: the conversation's context, reply anchors, the catch-up.
pub const READ_MESSAGE_HISTORY: u64 = 1 << 16;
/// react-message.
pub const ADD_REACTIONS: u64 = 1 << 6;
/// send-file in a server channel.
pub const ATTACH_FILES: u64 = 1 << 15;
/// send-voice in a server channel (with [`ATTACH_FILES`]).
pub const SEND_VOICE_MESSAGES: u64 = 1 << 46;
/// A place with `threads: perConversation` opens a thread from the message it answers.
pub const CREATE_PUBLIC_THREADS: u64 = 1 << 35;

/// What every installation uses: seeing, answering (replies, edits, errors, reminders) and
/// reading back.
const ALWAYS: u64 = VIEW_CHANNEL | SEND_MESSAGES | SEND_MESSAGES_IN_THREADS | READ_MESSAGE_HISTORY;

/// Permissions a skill uses in a server channel beyond [`ALWAYS`], by skill name (callers pass
/// only the skills the configuration enables: `Config::skill_enabled`). Skills that only
/// answer, read, or write to DMs (memory-export's files go by DM) need nothing more.
const SKILL_PERMISSIONS: &[(&str, u64)] = &[
    ("react-message", ADD_REACTIONS),
    ("send-file", ATTACH_FILES),
    ("send-voice", ATTACH_FILES | SEND_VOICE_MESSAGES),
];

/// The permission bits the enabled `skills` use.
pub fn permissions<'a>(skills: impl IntoIterator<Item = &'a str>) -> u64 {
    let skills: Vec<&str> = skills.into_iter().collect();
    ALWAYS | skill_permissions(|skill| skills.contains(&skill))
}

/// The bits beyond answering that the skills `allows` lets the agent use take (the permission
/// check of a place uses them too: `permissions`).
pub fn skill_permissions(allows: impl Fn(&str) -> bool) -> u64 {
    SKILL_PERMISSIONS
        .iter()
        .filter(|(name, _)| allows(name))
        .fold(0, |bits, (_, extra)| bits | extra)
}

/// The invite URL for application `client_id` with `permissions`, and the slash-command scope
/// when `slash_commands`.
pub fn invite_url(client_id: u64, permissions: u64, slash_commands: bool) -> String {
    let scope = if slash_commands {
        "bot%20applications.commands"
    } else {
        "bot"
    };
    format!(
        "https://discord.com/oauth2/authorize?client_id={client_id}&scope={scope}&permissions={permissions}"
    )
}

/// The application id a bot token carries (its first segment is the bot's user id in
/// base64); `None` when the token is not shaped like one.
pub fn application_id(token: &str) -> Option<u64> {
    let first = token.trim().strip_prefix("Bot ").unwrap_or(token.trim());
    let first = first.split('.').next()?;
    let engines = [
        base64::engine::general_purpose::STANDARD_NO_PAD,
        base64::engine::general_purpose::URL_SAFE_NO_PAD,
    ];
    engines.iter().find_map(|engine| {
        let bytes = engine.decode(first.trim_end_matches('=')).ok()?;
        let id: u64 = std::str::from_utf8(&bytes).ok()?.parse().ok()?;
        (id > 0).then_some(id)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permissions_follow_the_enabled_skills() {
        let base = permissions(["send-reply", "fetch-context", "memory-export"]);
        assert_eq!(base, ALWAYS, "answering, reading and DMs need nothing more");
        assert_eq!(base, 274_877_975_552);
        let all = permissions(["send-reply", "react-message", "send-file"]);
        assert_eq!(all, ALWAYS | ADD_REACTIONS | ATTACH_FILES);
        assert_eq!(all & (1 << 3), 0, "never Administrator");
        let voice = permissions(["send-reply", "send-voice"]);
        assert_eq!(voice, ALWAYS | ATTACH_FILES | SEND_VOICE_MESSAGES);
    }

    #[test]
    fn the_url_has_the_scopes_and_permissions() {
        assert_eq!(
            invite_url(42, ALWAYS, true),
            "https://discord.com/oauth2/authorize?client_id=42&scope=bot%20applications.commands&permissions=274877975552"
        );
        assert!(invite_url(42, ALWAYS, false).contains("&scope=bot&"));
    }

    #[test]
    fn the_application_id_is_read_from_the_token() {
        let first = base64::engine::general_purpose::STANDARD_NO_PAD.encode("1234567890123456789");
        assert_eq!(
            application_id(&format!("{first}.GhIjKl.signature-part")),
            Some(1_234_567_890_123_456_789)
        );
        assert_eq!(application_id("not a token"), None);
        assert_eq!(application_id(""), None);
    }
}
