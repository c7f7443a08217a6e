//! Whether to answer a message at all: trigger rules per platform, the reply policy of the
//! message's place (`places[].reply`, which replaces the trigger rules there), and access
//! control. Pure functions over the configuration, so every rule is unit-tested.

use std::sync::Arc;

use crate::config::{
    AccessControlConfig, PLATFORMS, PlatformsConfig, ReplyPolicy, ReplyTo, ThreadsPolicy,
    TriggerRules,
};
use crate::places::Spot;
use crate::places::{LivePlaces, Place};
use crate::platform::{IncomingMessage, Origin, PlatformKind, Typing};

/// Why a message is not answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ignore {
    /// Written by the bot itself.
    OwnMessage,
    /// Written by another bot.
    Bot,
    /// A DM while DMs are off.
    DmDisabled,
    /// Public, and neither mentions nor replies to the bot nor starts with the prefix.
    NotAddressed,
    /// Access control says no.
    NotAllowed,
    /// Nothing to answer (empty text and no attachments).
    Empty,
    /// The place's rule says `reply: never`.
    PlaceSilent,
    /// Written in a thread of a place whose rule says `threads: off`.
    ThreadsOff,
}

/// Trigger rules for every platform plus access control.
#[derive(Debug, Clone)]
pub struct Policy {
    /// Each platform's rules, from its facts ([`PLATFORMS`]); the console's are fixed.
    triggers: Vec<(PlatformKind, TriggerRules)>,
    /// For a platform without rules: answer nothing.
    silent: TriggerRules,
    access: AccessControlConfig,
    places: Arc<LivePlaces>,
}

impl Policy {
    /// From the configuration: each platform's trigger rules as its facts read them, and the
    /// places' reply policies.
    pub fn new(
        platforms: &PlatformsConfig,
        access: &AccessControlConfig,
        places: Arc<LivePlaces>,
    ) -> Self {
        let mut triggers: Vec<(PlatformKind, TriggerRules)> = PLATFORMS
            .iter()
            .filter_map(|facts| {
                let kind = facts.key.parse::<PlatformKind>().ok()?;
                Some((kind, (facts.triggers)(platforms)))
            })
            .collect();
        // The console is a DM from its local user.
        triggers.push((
            PlatformKind::Console,
            TriggerRules {
                allow_dm: true,
                respond_to_mention: true,
                command_prefix: String::new(),
            },
        ));
        Self {
            triggers,
            silent: TriggerRules::none(),
            access: access.clone(),
            places,
        }
    }

    fn triggers(&self, kind: PlatformKind) -> &TriggerRules {
        self.triggers
            .iter()
            .find(|(k, _)| *k == kind)
            .map_or(&self.silent, |(_, t)| t)
    }

    /// True when `platform/account/user` or `platform/channel/channel` is whitelisted.
    pub fn is_whitelisted(&self, msg: &IncomingMessage) -> bool {
        self.whitelists(&msg.origin())
    }

    fn whitelists(&self, origin: &Origin) -> bool {
        let account = format!("{}/account/{}", origin.platform, origin.user_id);
        let channel = format!("{}/channel/{}", origin.platform, origin.channel_id);
        self.access
            .whitelist
            .iter()
            .any(|e| *e == account || *e == channel)
    }

    fn allows(&self, origin: &Origin) -> bool {
        // The console platform is the operator's own (the terminal chat, the operator console's
        // page, both behind the operator's login): access control is for strangers.
        if origin.platform == PlatformKind::Console {
            return true;
        }
        match self.access.reply_to {
            ReplyTo::All => true,
            ReplyTo::Public => !origin.is_dm || self.whitelists(origin),
            ReplyTo::Whitelist => self.whitelists(origin),
        }
    }

    /// Whether whatever `typing` is about to send will be answered, whatever its text: a DM
    /// (unless DMs are off or the place wants a prefix), a place that answers every message,
    /// or a thread the bot opened for a conversation — by someone access control lets in, in
    /// the conversation it is written in (not a `perConversation` channel, whose answer moves
    /// to a new thread). Its agent may then be started before the message arrives.
    pub fn expects_message(&self, typing: &Typing, bot_user_id: Option<&str>) -> bool {
        let origin = &typing.origin;
        if bot_user_id.is_some_and(|id| origin.user_id == id) {
            return false;
        }
        let place = self
            .places
            .current()
            .resolve(&Spot::at(origin, &typing.location));
        let thread = typing.location.thread.as_ref();
        if place.reply == Some(ReplyPolicy::Never)
            || (thread.is_some() && place.threads == ThreadsPolicy::Off)
        {
            return false;
        }
        let answered = if origin.is_dm {
            self.triggers(origin.platform).allow_dm && place.reply != Some(ReplyPolicy::Prefix)
        } else if place.threads == ThreadsPolicy::PerConversation {
            thread.is_some_and(|t| t.started_by_bot)
                || thread.is_some() && place.reply == Some(ReplyPolicy::Always)
        } else {
            place.reply == Some(ReplyPolicy::Always)
        };
        answered && self.allows(origin)
    }

    /// The place `msg` was written in, under the rules in force now.
    pub fn place(&self, msg: &IncomingMessage) -> Arc<Place> {
        self.places.current().of(msg)
    }

    /// Decides; on success returns the content to answer (command prefix removed).
    pub fn decide(
        &self,
        msg: &IncomingMessage,
        bot_user_id: Option<&str>,
    ) -> Result<String, Ignore> {
        if bot_user_id.is_some_and(|id| msg.user_id == id) {
            return Err(Ignore::OwnMessage);
        }
        if msg.is_bot {
            return Err(Ignore::Bot);
        }
        let t = self.triggers(msg.platform);
        let place = self.place(msg);
        let reply = place.reply;
        if reply == Some(ReplyPolicy::Never) {
            return Err(Ignore::PlaceSilent);
        }
        let thread = msg.location.thread.as_ref();
        if thread.is_some() && place.threads == ThreadsPolicy::Off {
            return Err(Ignore::ThreadsOff);
        }
        // A thread the bot opened for a conversation continues it: no mention needed.
        let continues = place.threads == ThreadsPolicy::PerConversation
            && thread.is_some_and(|t| t.started_by_bot);
        let mut content = msg.content.clone();
        let prefixed = !t.command_prefix.is_empty() && content.starts_with(&t.command_prefix);
        if msg.is_dm {
            if !t.allow_dm {
                return Err(Ignore::DmDisabled);
            }
            if reply == Some(ReplyPolicy::Prefix) && !prefixed {
                return Err(Ignore::NotAddressed);
            }
        } else {
            let addressed = continues
                || match reply {
                    None => {
                        (msg.mentions_bot && t.respond_to_mention) || msg.replied_to_bot || prefixed
                    }
                    Some(ReplyPolicy::Mention) => {
                        msg.mentions_bot || msg.replied_to_bot || prefixed
                    }
                    Some(ReplyPolicy::Always) => true,
                    Some(ReplyPolicy::Prefix | ReplyPolicy::Never) => prefixed,
                };
            if !addressed {
                return Err(Ignore::NotAddressed);
            }
        }
        if prefixed {
            content = content[t.command_prefix.len()..].trim_start().to_owned();
        }
        if !self.allows(&msg.origin()) {
            return Err(Ignore::NotAllowed);
        }
        if content.trim().is_empty() && msg.attachments.is_empty() {
            return Err(Ignore::Empty);
        }
        Ok(content)
    }

    /// Whether answering `msg` (which [`decide`](Self::decide) admitted) first opens a thread
    /// from it: its place says `threads: perConversation` and it was written in a channel of a
    /// server, not in a thread or a DM.
    pub fn opens_thread(&self, msg: &IncomingMessage) -> bool {
        !msg.is_dm
            && msg.location.thread.is_none()
            && self.places.current().of(msg).threads == ThreadsPolicy::PerConversation
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::places::Places;
    use crate::platform::fake::FakePlatform;

    fn policy(f: impl FnOnce(&mut PlatformsConfig, &mut AccessControlConfig)) -> Policy {
        let mut p = PlatformsConfig::default();
        let mut a = AccessControlConfig::default();
        f(&mut p, &mut a);
        Policy::new(&p, &a, no_places())
    }

    fn no_places() -> Arc<LivePlaces> {
        Arc::new(Places::new(&crate::config::Config::default(), []).into())
    }

    /// `policy` with the `places:` rules of `yaml`.
    fn with_places(yaml: &str) -> Policy {
        let config: crate::config::Config = serde_yaml::from_str(yaml).unwrap();
        Policy::new(
            &config.platforms,
            &config.access_control,
            Arc::new(Places::new(&config, []).into()),
        )
    }

    /// A place's reply policy replaces the trigger rules there, and only there.
    #[test]
    fn each_place_answers_by_its_reply_policy() {
        let p = with_places(
            "platforms:\n  discord:\n    commandPrefix: '!af'\nplaces:\n               - {name: lounge, match: {channel: c1}, reply: always}\n               - {name: quiet, match: {channel: c2}, reply: never}\n               - {name: bots, match: {channel: c3}, reply: prefix}\n               - {name: dm-prefix, match: {dm: true}, reply: prefix}\n",
        );
        let in_channel = |channel: &str, text: &str, mention: bool| {
            let mut m = public_msg(text);
            m.channel_id = channel.into();
            m.mentions_bot = mention;
            m
        };
        assert_eq!(
            p.decide(&in_channel("c1", "hi all", false), None).unwrap(),
            "hi all"
        );
        assert_eq!(
            p.decide(&in_channel("c2", "hi", true), None),
            Err(Ignore::PlaceSilent)
        );
        assert_eq!(
            p.decide(&in_channel("c3", "hi", true), None),
            Err(Ignore::NotAddressed),
            "a mention is not the prefix"
        );
        assert_eq!(
            p.decide(&in_channel("c3", "!af hi", false), None).unwrap(),
            "hi"
        );
        assert_eq!(
            p.decide(&in_channel("c9", "hi", false), None),
            Err(Ignore::NotAddressed),
            "no rule: the platform's trigger rules"
        );
        assert!(p.decide(&in_channel("c9", "hi", true), None).is_ok());
        assert_eq!(p.decide(&dm("hello"), None), Err(Ignore::NotAddressed));
        assert_eq!(p.decide(&dm("!af hello"), None).unwrap(), "hello");
        // The bot's own messages and other bots stay unanswered everywhere.
        let mut bot = in_channel("c1", "beep", false);
        bot.is_bot = true;
        assert_eq!(p.decide(&bot, None), Err(Ignore::Bot));
    }

    /// `threads: off` silences a place's threads but not its channel; `perConversation`
    /// answers a thread the bot opened without a mention, opens a thread for a message in the
    /// channel, and never for a DM or a message already in a thread.
    #[test]
    fn each_place_answers_threads_by_its_threads_setting() {
        let p = with_places(
            "places:\n               - {name: quiet-threads, match: {channel: c1}, threads: off}\n               - {name: help, match: {channel: c2}, threads: perConversation}\n",
        );
        let msg = |channel: &str, thread: Option<bool>, mention: bool| {
            let mut m = public_msg("how do I?");
            m.channel_id = channel.into();
            m.mentions_bot = mention;
            if let Some(started_by_bot) = thread {
                m.channel_id = format!("{channel}-thread").into();
                m.location.thread_parent_id = Some(channel.to_owned());
                m.location.thread = Some(Box::new(crate::platform::ThreadInfo {
                    name: "a question".into(),
                    started_by_bot,
                    ..Default::default()
                }));
            }
            m
        };
        assert_eq!(
            p.decide(&msg("c1", Some(false), true), None),
            Err(Ignore::ThreadsOff)
        );
        assert!(p.decide(&msg("c1", None, true), None).is_ok());
        // perConversation: the bot's own thread continues without a mention...
        assert!(p.decide(&msg("c2", Some(true), false), None).is_ok());
        // ...someone else's thread still needs one.
        assert_eq!(
            p.decide(&msg("c2", Some(false), false), None),
            Err(Ignore::NotAddressed)
        );
        assert!(p.opens_thread(&msg("c2", None, true)));
        assert!(!p.opens_thread(&msg("c2", Some(true), false)));
        assert!(!p.opens_thread(&msg("c1", None, true)));
        let mut direct = dm("hi");
        direct.channel_id = "c2".into();
        assert!(!p.opens_thread(&direct));
        // Elsewhere (no rule): follow, and a started-by-bot thread needs a mention like any.
        assert_eq!(
            p.decide(&msg("c9", Some(true), false), None),
            Err(Ignore::NotAddressed)
        );
    }

    fn public_msg(text: &str) -> IncomingMessage {
        let fake = FakePlatform::discord();
        let mut m = fake.push_incoming("c1", "u1", text);
        m.is_dm = false;
        m.guild_id = Some("g1".into());
        m.mentions_bot = false;
        m.replied_to_bot = false;
        m
    }

    fn dm(text: &str) -> IncomingMessage {
        FakePlatform::discord().push_incoming_dm("u1", text)
    }

    #[test]
    fn triggers_in_public() {
        let p = policy(|p, _| p.discord.command_prefix = "!af".into());
        assert_eq!(
            p.decide(&public_msg("hi"), Some("bot")),
            Err(Ignore::NotAddressed)
        );
        let mut m = public_msg("hi");
        m.mentions_bot = true;
        assert_eq!(p.decide(&m, Some("bot")).unwrap(), "hi");
        let mut m = public_msg("hi");
        m.replied_to_bot = true;
        assert!(p.decide(&m, Some("bot")).is_ok());
        assert_eq!(
            p.decide(&public_msg("!af what time"), Some("bot")).unwrap(),
            "what time"
        );
        let p = policy(|p, _| p.discord.respond_to_mention = false);
        let mut m = public_msg("hi");
        m.mentions_bot = true;
        assert_eq!(p.decide(&m, None), Err(Ignore::NotAddressed));
    }

    #[test]
    fn dms_self_and_bots() {
        let p = policy(|_, _| {});
        assert!(p.decide(&dm("hello"), Some("bot")).is_ok());
        let p_off = policy(|p, _| p.discord.allow_dm = false);
        assert_eq!(
            p_off.decide(&dm("hello"), Some("bot")),
            Err(Ignore::DmDisabled)
        );
        let mut own = dm("hello");
        own.user_id = "bot".into();
        assert_eq!(p.decide(&own, Some("bot")), Err(Ignore::OwnMessage));
        let mut bot = dm("hello");
        bot.is_bot = true;
        assert_eq!(p.decide(&bot, Some("bot")), Err(Ignore::Bot));
        assert_eq!(p.decide(&dm("   "), Some("bot")), Err(Ignore::Empty));
    }

    /// Each platform answers by its own section's rules (read through its facts), never by
    /// another's.
    #[test]
    fn each_platform_answers_by_its_own_rules() {
        let p = policy(|p, _| p.misskey.allow_dm = false);
        let misskey_dm = FakePlatform::misskey().push_incoming_dm("u1", "hello");
        assert_eq!(p.decide(&misskey_dm, Some("bot")), Err(Ignore::DmDisabled));
        assert!(
            p.decide(&dm("hello"), Some("bot")).is_ok(),
            "Discord DMs stay on"
        );
        let console = FakePlatform::new(PlatformKind::Console).push_incoming_dm("u1", "hi");
        assert!(p.decide(&console, Some("bot")).is_ok());
        assert_eq!(
            Policy::new(
                &PlatformsConfig::default(),
                &AccessControlConfig::default(),
                no_places()
            )
            .triggers
            .len(),
            PLATFORMS.len() + 1
        );
    }

    #[test]
    fn access_control_modes() {
        let mut addressed = public_msg("hi");
        addressed.mentions_bot = true;
        let public = policy(|_, a| a.reply_to = ReplyTo::Public);
        assert!(public.decide(&addressed, None).is_ok());
        assert_eq!(public.decide(&dm("x"), None), Err(Ignore::NotAllowed));
        let public_wl = policy(|_, a| {
            a.reply_to = ReplyTo::Public;
            a.whitelist = vec!["discord/account/u1".into()];
        });
        assert!(public_wl.decide(&dm("x"), None).is_ok());

        let wl = policy(|_, a| {
            a.reply_to = ReplyTo::Whitelist;
            a.whitelist = vec!["discord/channel/c1".into()];
        });
        assert!(wl.decide(&addressed, None).is_ok());
        let mut elsewhere = addressed.clone();
        elsewhere.channel_id = "c2".into();
        assert_eq!(wl.decide(&elsewhere, None), Err(Ignore::NotAllowed));
        let mut other_platform = addressed.clone();
        other_platform.platform = PlatformKind::Misskey;
        assert_eq!(wl.decide(&other_platform, None), Err(Ignore::NotAllowed));
        // The console platform is the operator's own: answered whatever access control says.
        let operator = FakePlatform::new(PlatformKind::Console).push_incoming_dm("operator", "hi");
        assert!(wl.decide(&operator, None).is_ok());
        assert!(public.decide(&operator, None).is_ok());
    }

    /// A typing user's message is expected (its agent worth starting) only where any message
    /// of theirs would be answered: DMs, `reply: always` places, bot-opened threads — never a
    /// mention-only channel, a prefix place, a silent place, a `perConversation` channel
    /// (the answer moves to a new thread), the bot itself or someone access control keeps out.
    #[test]
    fn a_message_is_expected_only_where_any_message_would_be_answered() {
        let p = with_places(
            "places:\n  - {name: lounge, match: {channel: c1}, reply: always}\n  - {name: quiet, match: {channel: c2}, reply: never}\n  - {name: tpc, match: {channel: c3}, reply: always, threads: perConversation}\n  - {name: dm-prefix, match: {dm: true, platform: misskey}, reply: prefix}\n",
        );
        let typing = |channel: &str, dm: bool| Typing {
            origin: Origin {
                platform: PlatformKind::Discord,
                channel_id: channel.into(),
                guild_id: (!dm).then(|| "g1".to_owned()),
                user_id: "u1".into(),
                username: String::new(),
                is_dm: dm,
            },
            location: Default::default(),
        };
        assert!(p.expects_message(&typing("d1", true), Some("bot")));
        assert!(p.expects_message(&typing("c1", false), Some("bot")));
        assert!(
            !p.expects_message(&typing("c9", false), Some("bot")),
            "mention-only"
        );
        assert!(
            !p.expects_message(&typing("c2", false), Some("bot")),
            "silent"
        );
        assert!(
            !p.expects_message(&typing("c3", false), Some("bot")),
            "moves to a thread"
        );
        assert!(
            !p.expects_message(&typing("d1", true), Some("u1")),
            "the bot itself"
        );
        let mut misskey_dm = typing("chat:u1", true);
        misskey_dm.origin.platform = PlatformKind::Misskey;
        assert!(!p.expects_message(&misskey_dm, None), "a prefix place");
        // In a thread of the thread-per-conversation channel the conversation stays put.
        let mut in_thread = typing("t1", false);
        in_thread.location.thread_parent_id = Some("c3".into());
        in_thread.location.thread = Some(Box::new(crate::platform::ThreadInfo {
            started_by_bot: true,
            ..Default::default()
        }));
        let p3 = with_places(
            "places:\n  - {name: tpc, match: {parent: c3}, threads: perConversation}\n",
        );
        assert!(p3.expects_message(&in_thread, Some("bot")));
        in_thread.location.thread.as_mut().unwrap().started_by_bot = false;
        assert!(
            !p3.expects_message(&in_thread, Some("bot")),
            "someone else's thread"
        );
        let dms_off = policy(|p, _| p.discord.allow_dm = false);
        assert!(!dms_off.expects_message(&typing("d1", true), None));
        let whitelist = policy(|_, a| a.reply_to = ReplyTo::Whitelist);
        assert!(
            !whitelist.expects_message(&typing("d1", true), None),
            "not whitelisted"
        );
    }
}
