//! Whether the bot holds, in each channel of a server, the permissions the `places:` rules ask
//! of it there ([`PlaceDuties`]): checked at each GUILD_CREATE (the bot joins or connects), so
//! the operator learns at start-up — not from a user left in silence — that the bot sees a
//! channel where it cannot answer, react, send files or open threads.
//!
//! A channel the bot cannot see (no *View Channel*) is left out: a server hides channels from
//! the bot on purpose. In one the bot sees and answers in, it needs *Send Messages* (not in a
//! forum: posts are threads) and *Read Message History* (replies and the context), *Send
//! Messages in Threads* unless the place's threads are off, *Create Public Threads* for
//! `threads: perConversation`, and what the place's skills use (the bits of
//! `invite::skill_permissions`, the same `discord invite-url` asks for). The permissions are
//! computed from the GUILD_CREATE's roles, the bot's member and the channel's overwrites
//! (serenity's `Guild::user_permissions_in`). One warning per server names each channel, its
//! place and what is missing; a reconnect repeats it only when it changed.

use std::collections::HashMap;
use std::sync::Mutex;

use serenity::all::{ChannelType, Guild, Permissions, UserId};

use super::invite;
use crate::config::ThreadsPolicy;
use crate::platform::duties::{ChannelAt, Duties, PlaceDuties};
use crate::sync::Recover;

/// Channels named in one warning; the rest are counted.
const NAMED: usize = 10;

/// One channel where the bot lacks something.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Lacking {
    /// The channel's id.
    pub channel: u64,
    /// The channel's name.
    pub name: String,
    /// The place the channel is in.
    pub place: String,
    /// What the bot needs there and does not hold.
    pub missing: Permissions,
}

/// What the bot needs in a channel of `kind` with `duties`; empty where it never answers.
pub(crate) fn needed(kind: ChannelType, duties: &Duties) -> Permissions {
    let forum = kind == ChannelType::Forum;
    if !duties.answers || (forum && duties.threads == ThreadsPolicy::Off) {
        return Permissions::empty();
    }
    let mut bits = invite::READ_MESSAGE_HISTORY;
    if !forum {
        bits |= invite::SEND_MESSAGES;
    }
    if duties.threads != ThreadsPolicy::Off {
        bits |= invite::SEND_MESSAGES_IN_THREADS;
    }
    if duties.threads == ThreadsPolicy::PerConversation && !forum {
        bits |= invite::CREATE_PUBLIC_THREADS;
    }
    bits |= invite::skill_permissions(|skill| duties.allows(skill));
    Permissions::from_bits_truncate(bits)
}

/// The channels of `guild` (text, announcement and forum channels the bot sees) where it lacks
/// what `duties` ask; `None` when the bot's member is not in the payload (nothing to compute
/// with).
pub(crate) fn lacking(
    guild: &Guild,
    bot: UserId,
    duties: &dyn PlaceDuties,
) -> Option<Vec<Lacking>> {
    let member = guild.members.get(&bot)?;
    let mut found: Vec<Lacking> = guild
        .channels
        .values()
        .filter(|c| {
            matches!(
                c.kind,
                ChannelType::Text | ChannelType::News | ChannelType::Forum
            )
        })
        .filter_map(|channel| {
            let held = guild.user_permissions_in(channel, member);
            if !held.view_channel() {
                return None;
            }
            let at = ChannelAt {
                guild: guild.id.get().to_string(),
                category: channel.parent_id.map(|p| p.get().to_string()),
                channel: channel.id.get().to_string(),
            };
            let duties = duties.duties(&at);
            let missing = needed(channel.kind, &duties) - held;
            (!missing.is_empty()).then(|| Lacking {
                channel: channel.id.get(),
                name: channel.name.clone(),
                place: duties.place.to_string(),
                missing,
            })
        })
        .collect();
    found.sort_by_key(|l| l.channel);
    Some(found)
}

/// `lacking` in words: `#general (4000, place default): Send Messages, Add Reactions; …`.
pub(crate) fn summary(lacking: &[Lacking]) -> String {
    let mut parts: Vec<String> = lacking
        .iter()
        .take(NAMED)
        .map(|l| {
            format!(
                "#{} ({}, place {}): {}",
                l.name,
                l.channel,
                l.place,
                l.missing.get_permission_names().join(", ")
            )
        })
        .collect();
    if lacking.len() > NAMED {
        parts.push(format!("and {} more channels", lacking.len() - NAMED));
    }
    parts.join("; ")
}

/// What was last said per server, so a reconnect repeats a warning only when it changed.
#[derive(Debug, Default)]
pub(crate) struct Reports {
    said: Mutex<HashMap<u64, String>>,
}

impl Reports {
    /// Checks `guild` and logs what the bot lacks there (or that it lacks nothing any more).
    pub(crate) fn check(&self, guild: &Guild, bot: UserId, duties: &dyn PlaceDuties) {
        let guild_id = guild.id.get();
        let Some(lacking) = lacking(guild, bot, duties) else {
            tracing::debug!(
                platform = "discord",
                guild_id,
                "the bot's member is not in GUILD_CREATE; permissions not checked"
            );
            return;
        };
        let said = summary(&lacking);
        let before = self.said.locked().insert(guild_id, said.clone());
        if before.as_deref() == Some(said.as_str()) {
            return;
        }
        if lacking.is_empty() {
            if before.is_some() {
                tracing::info!(platform = "discord", guild_id, guild = %guild.name, "the bot now holds every permission its places need in this server");
            }
            return;
        }
        tracing::warn!(
            platform = "discord",
            guild_id,
            guild = %guild.name,
            channels = lacking.len(),
            missing = %said,
            fix = "grant them to the bot's role (Server Settings, Roles) or in each channel's permissions, or invite the bot again with `air-friends discord invite-url`",
            "the bot lacks permissions its places need in this server: users there get no answer or a partial one"
        );
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::sync::Arc;

    use super::*;

    fn duties(skills: &[&str], threads: ThreadsPolicy) -> Duties {
        Duties {
            place: Arc::from("p"),
            answers: true,
            skills: Some(Arc::new(
                skills
                    .iter()
                    .map(|s| (*s).to_owned())
                    .collect::<BTreeSet<_>>(),
            )),
            threads,
        }
    }

    #[test]
    fn the_needs_follow_the_places_skills_and_threads() {
        let base = needed(
            ChannelType::Text,
            &duties(&["send-reply"], ThreadsPolicy::Off),
        );
        assert_eq!(
            base,
            Permissions::SEND_MESSAGES | Permissions::READ_MESSAGE_HISTORY
        );
        let all = needed(
            ChannelType::Text,
            &duties(
                &["send-reply", "react-message", "send-file"],
                ThreadsPolicy::PerConversation,
            ),
        );
        for p in [
            Permissions::ADD_REACTIONS,
            Permissions::ATTACH_FILES,
            Permissions::CREATE_PUBLIC_THREADS,
            Permissions::SEND_MESSAGES_IN_THREADS,
        ] {
            assert!(all.contains(p), "{p:?}");
        }
        // A forum's posts are threads: no Send Messages, no thread of its own to open.
        let forum = needed(
            ChannelType::Forum,
            &duties(&["send-reply"], ThreadsPolicy::PerConversation),
        );
        assert_eq!(
            forum,
            Permissions::SEND_MESSAGES_IN_THREADS | Permissions::READ_MESSAGE_HISTORY
        );
        assert!(needed(ChannelType::Forum, &duties(&[], ThreadsPolicy::Off)).is_empty());
        let silent = Duties {
            answers: false,
            ..duties(&["react-message"], ThreadsPolicy::Follow)
        };
        assert!(needed(ChannelType::Text, &silent).is_empty());
    }

    #[test]
    fn the_summary_names_at_most_ten_channels() {
        let lacking: Vec<Lacking> = (0..12)
            .map(|i| Lacking {
                channel: i,
                name: format!("c{i}"),
                place: "default".into(),
                missing: Permissions::SEND_MESSAGES | Permissions::ADD_REACTIONS,
            })
            .collect();
        let said = summary(&lacking);
        assert!(said.starts_with("#c0 (0, place default): "), "{said}");
        assert!(
            said.contains("Send Messages") && said.contains("Add Reactions"),
            "{said}"
        );
        assert!(said.ends_with("; and 2 more channels"), "{said}");
        assert!(!said.contains("#c10"), "{said}");
    }
}
