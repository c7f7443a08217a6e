//! The registry of live sessions: registration (ids and caller tokens minted from the OS
//! RNG, the token published to the log redactor), lookup with idle expiry, turns of a kept
//! session, unregistration and the background reaper. All locks are `std::sync` locks held only
//! for short, non-async sections.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::ids::{CALLER_TOKEN_BYTES, SESSION_ID_BYTES, hex, random_bytes};
use super::{
    CallerToken, SessionContext, SessionError, SessionId, SessionState, TerminationSignal,
    TurnSlot, TurnSlots,
};
use crate::observability::LiveSecrets;
use crate::platform::{ChannelId, MessageId, PlatformKind};
use crate::sync::lock;

/// What [`SessionRegistry::register`] returns to the agent runner.
#[derive(Debug)]
pub struct RegisteredSession {
    /// Goes into the agent's `SESSION_ID`.
    pub session_id: SessionId,
    /// Goes into the agent's `SKILL_API_TOKEN`.
    pub caller_token: CallerToken,
    /// Read the session's state (e.g. [`SessionHandle::responded`]) when the run ends.
    pub handle: SessionHandle,
    /// Await it alongside the agent; when it fires, stop the agent.
    pub termination: TerminationSignal,
}

struct SessionEntry {
    id: SessionId,
    token: CallerToken,
    /// What changes from turn to turn: the context (its trigger message), the state, the
    /// termination signal and the turn number, replaced together by
    /// [`SessionHandle::begin_turn`].
    turn: Mutex<CurrentTurn>,
    /// The turn's state and the handlers' slots, under one lock (a handler may read another's
    /// slot in the same step) and reset together by [`SessionHandle::begin_turn`].
    state: Mutex<TurnState>,
    last_activity: Mutex<Instant>,
}

/// What the current turn has done: the session-level state and the handlers' slots.
#[derive(Default)]
struct TurnState {
    state: SessionState,
    slots: TurnSlots,
    /// Called once, when the user first receives something in this turn
    /// ([`SessionHandle::on_first_answer`]).
    on_answer: Option<AnswerHook>,
}

/// What a turn's first answer calls.
type AnswerHook = Box<dyn FnOnce() + Send>;

/// A session's current turn.
struct CurrentTurn {
    number: u64,
    context: Arc<SessionContext>,
    termination: TerminationSignal,
    /// False between [`SessionHandle::end_turn`] and the next
    /// [`begin_turn`](SessionHandle::begin_turn): a warm agent's session is then closed.
    open: bool,
    /// When the turn began (the session's registration for the first).
    began: Instant,
}

/// A shared handle to one registered session. Stays usable after the session is unregistered
/// (the runner reads the final state through it).
#[derive(Clone)]
pub struct SessionHandle {
    entry: Arc<SessionEntry>,
}

impl fmt::Debug for SessionHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SessionHandle")
            .field("id", &self.entry.id)
            .field("context", &self.context())
            .finish_non_exhaustive()
    }
}

impl SessionHandle {
    /// A session that is in no registry, for running a handler in-process on a human's behalf
    /// (user commands): it cannot be looked up, so no caller reaches it over the Skill API, and
    /// its caller token is empty and matches nothing. `label` is its id in logs.
    pub fn unregistered(label: &str, context: SessionContext) -> SessionHandle {
        SessionHandle {
            entry: Arc::new(SessionEntry {
                id: SessionId(label.to_owned()),
                token: CallerToken(String::new()),
                turn: Mutex::new(CurrentTurn {
                    number: 1,
                    context: Arc::new(context),
                    termination: TerminationSignal::default(),
                    open: true,
                    began: Instant::now(),
                }),
                state: Mutex::new(TurnState::default()),
                last_activity: Mutex::new(Instant::now()),
            }),
        }
    }

    /// The session id.
    pub fn id(&self) -> &SessionId {
        &self.entry.id
    }

    /// The context of the current turn (platform, channel, user, trigger message, ...): a
    /// cheap shared snapshot; a call keeps the one it started with.
    pub fn context(&self) -> Arc<SessionContext> {
        Arc::clone(&lock(&self.entry.turn).context)
    }

    /// The current turn: 1 for the first, increased by each [`begin_turn`](Self::begin_turn).
    /// Part of the de-duplication key, so the same call in a later turn is a new call.
    pub fn turn(&self) -> u64 {
        lock(&self.entry.turn).number
    }

    /// When the current turn began: the session's registration for the first turn, else its
    /// [`begin_turn`](Self::begin_turn).
    pub fn turn_began(&self) -> Instant {
        lock(&self.entry.turn).began
    }

    /// Starts the next turn of a session whose agent is kept across turns: the trigger
    /// message becomes `trigger_message_id`, the state (doom-loop counters, tokens) and every
    /// handler's slot (quotas, the reaction, what was sent) start afresh, and a new
    /// termination signal replaces the previous one, which is returned for the runner to
    /// await. Counts as activity (the session does not expire between turns while its agent is
    /// kept).
    pub fn begin_turn(&self, trigger_message_id: Option<MessageId>) -> TerminationSignal {
        self.begin_turn_at(None, trigger_message_id)
    }

    /// [`begin_turn`](Self::begin_turn), the turn answering in `channel` when given: a
    /// conversation wider than one channel (a Misskey reply chain, each of whose notes is its
    /// own channel) moves its kept session to the channel of the message it answers now.
    pub fn begin_turn_at(
        &self,
        channel: Option<ChannelId>,
        trigger_message_id: Option<MessageId>,
    ) -> TerminationSignal {
        let termination = TerminationSignal::default();
        {
            let mut turn = lock(&self.entry.turn);
            let mut context = SessionContext::clone(&turn.context);
            context.trigger_message_id = trigger_message_id;
            if let Some(channel) = channel {
                context.origin.channel_id = channel;
            }
            turn.number += 1;
            turn.context = Arc::new(context);
            turn.termination = termination.clone();
            turn.open = true;
            turn.began = Instant::now();
        }
        *lock(&self.entry.state) = TurnState::default();
        self.mark_active();
        termination
    }

    /// Closes the current turn of a session whose agent is kept: until the next
    /// [`begin_turn`](Self::begin_turn), the Skill API and the model gateway refuse its calls
    /// ([`turn_is_open`](Self::turn_is_open)), so a process the agent left running delivers
    /// nothing, spends nothing and uses none of the next turn's limits. Returns whether a
    /// termination was requested during the turn (the agent must then not be kept).
    pub fn end_turn(&self) -> bool {
        let mut turn = lock(&self.entry.turn);
        turn.open = false;
        turn.termination.is_requested()
    }

    /// Whether a turn is open (always, but between [`end_turn`](Self::end_turn) and the next
    /// [`begin_turn`](Self::begin_turn)).
    pub fn turn_is_open(&self) -> bool {
        lock(&self.entry.turn).open
    }

    /// Runs `f` with the session state locked. Keep `f` short and synchronous: the lock is a
    /// `std::sync::Mutex` and must never be held across an `.await`.
    pub fn with_state<R>(&self, f: impl FnOnce(&mut SessionState) -> R) -> R {
        f(&mut lock(&self.entry.state).state)
    }

    /// Runs `f` with this turn's slot of type `T` locked (created from its `Default` on first
    /// use in a turn). Same rules as [`with_state`](Self::with_state).
    pub fn with_slot<T: TurnSlot, R>(&self, f: impl FnOnce(&mut T) -> R) -> R {
        self.with_slots(|slots| f(slots.get_mut::<T>()))
    }

    /// Runs `f` with all of this turn's slots locked, for a step that reads or updates several
    /// handlers' slots at once. Same rules as [`with_state`](Self::with_state).
    pub fn with_slots<R>(&self, f: impl FnOnce(&mut TurnSlots) -> R) -> R {
        let (result, hook) = {
            let mut state = lock(&self.entry.state);
            let result = f(&mut state.slots);
            let hook = if state.on_answer.is_some() && state.slots.answered() {
                state.on_answer.take()
            } else {
                None
            };
            (result, hook)
        };
        // Outside the lock: the hook may do anything.
        if let Some(hook) = hook {
            hook();
        }
        result
    }

    /// Calls `hook` once, as soon as the user has received something in the current turn (a
    /// reply, a reaction, a file: a slot [answered](TurnSlot::answered)); at once when that has
    /// already happened. The next [`begin_turn`](Self::begin_turn) drops a hook not called.
    /// The conversation marks its message answered with it, so a crash later in the turn does
    /// not answer the message again after a restart.
    pub fn on_first_answer(&self, hook: impl FnOnce() + Send + 'static) {
        let mut state = lock(&self.entry.state);
        if state.slots.answered() {
            drop(state);
            hook();
        } else {
            state.on_answer = Some(Box::new(hook));
        }
    }

    /// A copy of the current state.
    pub fn state(&self) -> SessionState {
        lock(&self.entry.state).state.clone()
    }

    /// Whether the user has received a reply, reaction or file in this turn: whether any
    /// handler's slot [answered](TurnSlot::answered).
    pub fn responded(&self) -> bool {
        lock(&self.entry.state).slots.answered()
    }

    /// This session's termination signal (of the current turn).
    pub fn termination_signal(&self) -> TerminationSignal {
        lock(&self.entry.turn).termination.clone()
    }

    /// Asks the agent runner to stop this session's agent now. The Skill API itself defers this
    /// until the response of the triggering call has been sent (see `CallContext`).
    pub fn request_termination(&self, reason: &str) -> bool {
        let fired = self.termination_signal().fire(reason);
        if fired {
            tracing::warn!(session_id = %self.entry.id, reason, "session termination requested");
        }
        fired
    }

    /// Constant-time check of a presented caller token.
    pub(crate) fn token_matches(&self, presented: &[u8]) -> bool {
        let token = self.entry.token.expose_secret().as_bytes();
        // An unregistered session's empty token matches nothing, not even an empty key.
        !token.is_empty() && super::constant_time_eq(token, presented)
    }

    fn last_activity(&self) -> Instant {
        *lock(&self.entry.last_activity)
    }

    /// Marks the session active now (an authenticated call arrived).
    pub(crate) fn mark_active(&self) {
        *lock(&self.entry.last_activity) = Instant::now();
    }
}

/// A user whose data is being erased: while it lives, no session registers for them
/// ([`SessionRegistry::hold_user`]). Dropping it lets them in again.
#[must_use = "the hold ends when this is dropped"]
pub struct UserHold {
    inner: Arc<RegistryInner>,
    user: (PlatformKind, String),
}

impl fmt::Debug for UserHold {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UserHold")
            .field("platform", &self.user.0)
            .finish_non_exhaustive()
    }
}

impl Drop for UserHold {
    fn drop(&mut self) {
        lock(&self.inner.held).remove(&self.user);
    }
}

struct RegistryInner {
    sessions: Mutex<HashMap<SessionId, SessionHandle>>,
    /// Users whose data is being erased (see [`UserHold`]).
    held: Mutex<HashSet<(PlatformKind, String)>>,
    timeout: Duration,
    /// The log redactor's set of live secrets: holds the caller token of every registered
    /// session, so no log line (agent stderr, gate decisions) can carry one.
    live_tokens: LiveSecrets,
}

/// The shared registry of live sessions. Cloning shares it.
#[derive(Clone)]
pub struct SessionRegistry {
    inner: Arc<RegistryInner>,
}

impl fmt::Debug for SessionRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SessionRegistry")
            .field("sessions", &self.len())
            .field("timeout", &self.inner.timeout)
            .finish()
    }
}

impl SessionRegistry {
    /// A registry whose sessions expire after `session_timeout` without an authenticated call.
    /// Its caller tokens are tracked in a set of its own; the daemon uses
    /// [`with_live_tokens`](Self::with_live_tokens) so the log redactor sees them.
    pub fn new(session_timeout: Duration) -> Self {
        Self::with_live_tokens(session_timeout, LiveSecrets::new())
    }

    /// Like [`new`](Self::new), publishing every live session's caller token into
    /// `live_tokens` (the log redactor's [`Redactor::live_secrets`]) from registration until the
    /// session is unregistered or expires.
    ///
    /// [`Redactor::live_secrets`]: crate::observability::Redactor::live_secrets
    pub fn with_live_tokens(session_timeout: Duration, live_tokens: LiveSecrets) -> Self {
        Self {
            inner: Arc::new(RegistryInner {
                sessions: Mutex::new(HashMap::new()),
                held: Mutex::new(HashSet::new()),
                timeout: session_timeout,
                live_tokens,
            }),
        }
    }

    /// The idle timeout.
    pub fn session_timeout(&self) -> Duration {
        self.inner.timeout
    }

    /// Holds `user` of `platform` while their data is erased: from now until the hold is
    /// dropped, [`register`](Self::register) refuses them ([`SessionError::UserHeld`]) and
    /// [`is_held`](Self::is_held) says so. `None` when they are held already (an erasure of
    /// theirs is under way).
    pub fn hold_user(&self, platform: PlatformKind, user: &str) -> Option<UserHold> {
        let key = (platform, user.to_owned());
        // Under the sessions lock, as `register` checks: a session is either registered before
        // the hold (and `of_user` finds it) or refused.
        let _sessions = lock(&self.inner.sessions);
        lock(&self.inner.held)
            .insert(key.clone())
            .then(|| UserHold {
                inner: Arc::clone(&self.inner),
                user: key,
            })
    }

    /// Whether `user` of `platform` is held ([`hold_user`](Self::hold_user)).
    pub fn is_held(&self, platform: PlatformKind, user: &str) -> bool {
        // Asked for every message and session: nothing to build while no one is held.
        let held = lock(&self.inner.held);
        !held.is_empty() && held.contains(&(platform, user.to_owned()))
    }

    /// The live sessions started for `user` of `platform` (their conversations' agents, warm or
    /// in a turn, and their maintenance runs).
    pub fn of_user(&self, platform: PlatformKind, user: &str) -> Vec<SessionHandle> {
        lock(&self.inner.sessions)
            .values()
            .filter(|handle| {
                let context = handle.context();
                context.origin.platform == platform && context.origin.user_id.as_str() == user
            })
            .cloned()
            .collect()
    }

    /// Registers a session and mints its id and caller token from the OS RNG. Refused while
    /// the context's user is held ([`hold_user`](Self::hold_user)).
    pub fn register(&self, context: SessionContext) -> Result<RegisteredSession, SessionError> {
        let caller_token = CallerToken(hex(&random_bytes::<CALLER_TOKEN_BYTES>()?));
        // Scrubbed from logs before the token can reach anyone.
        self.inner.live_tokens.insert(caller_token.expose_secret());
        let termination = TerminationSignal::default();
        let mut sessions = lock(&self.inner.sessions);
        if self.is_held(context.origin.platform, context.origin.user_id.as_str()) {
            drop(sessions);
            self.inner.live_tokens.remove(caller_token.expose_secret());
            return Err(SessionError::UserHeld);
        }
        let session_id = loop {
            let bytes = random_bytes::<SESSION_ID_BYTES>().inspect_err(|_| {
                self.inner.live_tokens.remove(caller_token.expose_secret());
            })?;
            let id = SessionId(hex(&bytes));
            if !sessions.contains_key(&id) {
                break id;
            }
        };
        let handle = SessionHandle {
            entry: Arc::new(SessionEntry {
                id: session_id.clone(),
                token: caller_token.clone(),
                turn: Mutex::new(CurrentTurn {
                    number: 1,
                    context: Arc::new(context),
                    termination: termination.clone(),
                    open: true,
                    began: Instant::now(),
                }),
                state: Mutex::new(TurnState::default()),
                last_activity: Mutex::new(Instant::now()),
            }),
        };
        sessions.insert(session_id.clone(), handle.clone());
        drop(sessions);
        tracing::debug!(session_id = %session_id, "skill api session registered");
        Ok(RegisteredSession {
            session_id,
            caller_token,
            handle,
            termination,
        })
    }

    /// The live session with this id. An idle-expired session is removed and reported absent.
    /// Takes the id as presented (authentication looks the caller's text up here).
    pub fn lookup(&self, session_id: &str) -> Option<SessionHandle> {
        let now = Instant::now();
        let mut sessions = lock(&self.inner.sessions);
        let handle = sessions.get(session_id)?.clone();
        if self.expired(&handle, now) {
            sessions.remove(session_id);
            drop(sessions);
            self.forget_token(&handle);
            tracing::debug!(session_id, "skill api session expired");
            return None;
        }
        Some(handle)
    }

    /// Marks the session active now. Returns `false` for an unknown or expired session.
    pub fn touch(&self, session_id: &SessionId) -> bool {
        match self.lookup(session_id.as_str()) {
            Some(handle) => {
                handle.mark_active();
                true
            }
            None => false,
        }
    }

    /// Removes the session (the runner calls this when the run ends). Further calls answer 401.
    pub fn unregister(&self, session_id: &SessionId) -> Option<SessionHandle> {
        let removed = lock(&self.inner.sessions).remove(session_id);
        if let Some(handle) = &removed {
            self.forget_token(handle);
            tracing::debug!(session_id = %session_id, "skill api session unregistered");
        }
        removed
    }

    /// Asks the runner to stop the session's agent. Returns `false` for an unknown session or
    /// when termination was already requested.
    pub fn request_termination(&self, session_id: &SessionId, reason: &str) -> bool {
        self.lookup(session_id.as_str())
            .is_some_and(|handle| handle.request_termination(reason))
    }

    /// The termination signal of a live session.
    pub fn termination_signal(&self, session_id: &SessionId) -> Option<TerminationSignal> {
        self.lookup(session_id.as_str())
            .map(|handle| handle.termination_signal())
    }

    /// Number of registered (possibly expired but not yet reaped) sessions.
    pub fn len(&self) -> usize {
        lock(&self.inner.sessions).len()
    }

    /// Whether no session is registered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Removes every idle-expired session now; returns how many were removed.
    pub fn reap_expired(&self) -> usize {
        let now = Instant::now();
        let mut sessions = lock(&self.inner.sessions);
        let expired: Vec<SessionId> = sessions
            .iter()
            .filter(|(_, handle)| self.expired(handle, now))
            .map(|(id, _)| id.clone())
            .collect();
        let removed: Vec<SessionHandle> = expired
            .iter()
            .filter_map(|id| sessions.remove(id))
            .collect();
        drop(sessions);
        for handle in &removed {
            self.forget_token(handle);
        }
        let reaped = removed.len();
        if reaped > 0 {
            tracing::debug!(reaped, "reaped idle skill api sessions");
        }
        reaped
    }

    /// Reaps expired sessions every `interval` until `cancel` fires. Spawn it on the
    /// application's `TaskTracker`.
    pub async fn run_reaper(self, interval: Duration, cancel: CancellationToken) {
        let mut ticker = tokio::time::interval(interval.max(Duration::from_millis(1)));
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = cancel.cancelled() => break,
                _ = ticker.tick() => {
                    self.reap_expired();
                }
            }
        }
    }

    /// Stops scrubbing the token of a session that is gone (it no longer authenticates).
    fn forget_token(&self, handle: &SessionHandle) {
        self.inner
            .live_tokens
            .remove(handle.entry.token.expose_secret());
    }

    fn expired(&self, handle: &SessionHandle, now: Instant) -> bool {
        now.saturating_duration_since(handle.last_activity()) >= self.inner.timeout
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::platform::Origin;
    use crate::platform::PlatformKind;
    use std::collections::HashSet;
    use std::path::PathBuf;

    /// A handler's slot that answered the user (as a successful reply would).
    #[derive(Default)]
    struct Answered(bool);

    impl TurnSlot for Answered {
        fn answered(&self) -> bool {
            self.0
        }
    }

    /// A guild conversation's context (also for the other session tests).
    pub(crate) fn context() -> SessionContext {
        SessionContext {
            place: Default::default(),
            origin: Origin {
                platform: PlatformKind::Discord,
                channel_id: "c1".into(),
                guild_id: Some("g1".into()),
                user_id: "u1".into(),
                username: "alice".into(),
                is_dm: false,
            },
            purpose: Default::default(),
            trigger_message_id: Some("m1".into()),
            workspace: PathBuf::from("/tmp/ws"),
        }
    }

    #[test]
    fn a_new_turn_resets_quotas_and_the_trigger_and_arms_a_new_termination() {
        let registry = SessionRegistry::new(Duration::from_secs(60));
        let r = registry.register(context()).unwrap();
        r.handle.with_slot(|a: &mut Answered| a.0 = true);
        r.handle.with_state(|s| {
            s.record_attempt("send-reply");
        });
        assert!(r.handle.request_termination("quota"));
        assert!(r.termination.is_requested());
        let next = r.handle.begin_turn(Some("m2".into()));
        assert_eq!(r.handle.turn(), 2);
        assert_eq!(r.handle.context().trigger_message_id, Some("m2".into()));
        assert_eq!(r.handle.state(), SessionState::default(), "quotas reset");
        assert!(
            !r.handle.with_slot(|a: &mut Answered| a.0),
            "handler slots reset"
        );
        assert!(!next.is_requested(), "the new turn is not terminated");
        assert!(registry.request_termination(&r.session_id, "again"));
        assert!(
            next.is_requested(),
            "the registry fires the current turn's signal"
        );
        assert_eq!(
            r.handle.context().origin.channel_id,
            "c1",
            "the rest is kept"
        );
    }

    /// A kept session answering the next note of a Misskey chain moves to that note's channel
    /// for the turn; the rest of its context stays.
    #[test]
    fn a_turn_may_move_the_session_to_another_channel_of_its_conversation() {
        let registry = SessionRegistry::new(Duration::from_secs(60));
        let r = registry.register(context()).unwrap();
        r.handle
            .begin_turn_at(Some("note:n2".into()), Some("n2".into()));
        let context = r.handle.context();
        assert_eq!(context.origin.channel_id, "note:n2");
        assert_eq!(context.trigger_message_id, Some("n2".into()));
        assert_eq!(context.origin.user_id, "u1");
        r.handle.begin_turn(Some("n3".into()));
        assert_eq!(r.handle.context().origin.channel_id, "note:n2", "kept");
    }

    #[test]
    fn ids_and_tokens_have_the_required_entropy_and_are_distinct() {
        let registry = SessionRegistry::new(Duration::from_secs(60));
        let mut seen = HashSet::new();
        for _ in 0..200 {
            let s = registry.register(context()).expect("register");
            let id = s.session_id.as_str();
            let token = s.caller_token.expose_secret();
            assert_eq!(id.len(), SESSION_ID_BYTES * 2, "128 bits as hex");
            assert_eq!(token.len(), CALLER_TOKEN_BYTES * 2, "256 bits as hex");
            assert!(id.bytes().all(|b| b.is_ascii_hexdigit()), "URL-safe");
            assert!(token.bytes().all(|b| b.is_ascii_hexdigit()));
            assert_ne!(id, token);
            assert!(seen.insert(id.to_owned()), "session id repeated");
            assert!(seen.insert(token.to_owned()), "token repeated");
        }
        // Crude entropy check: over 200 tokens every hex digit appears, roughly uniformly.
        let mut counts = [0usize; 16];
        for value in &seen {
            for b in value.bytes() {
                counts[char::from(b).to_digit(16).unwrap_or(0) as usize] += 1;
            }
        }
        let total: usize = counts.iter().sum();
        for c in counts {
            let share = c as f64 / total as f64;
            assert!((0.04..0.09).contains(&share), "digit share {share}");
        }
    }

    /// A session made for a user command is in no registry and its empty token matches no key,
    /// not even an empty one.
    #[test]
    fn an_unregistered_session_cannot_be_looked_up_or_authenticated() {
        let registry = SessionRegistry::new(Duration::from_secs(60));
        let handle = SessionHandle::unregistered("user-command", context());
        assert_eq!(handle.id().as_str(), "user-command");
        assert!(registry.lookup("user-command").is_none());
        assert!(!handle.token_matches(b""));
        assert!(!handle.token_matches(b"anything"));
        assert_eq!(handle.context().origin.user_id, context().origin.user_id);
    }

    #[test]
    fn token_never_appears_in_debug_output() {
        let registry = SessionRegistry::new(Duration::from_secs(60));
        let s = registry.register(context()).expect("register");
        let secret = s.caller_token.expose_secret().to_owned();
        for text in [
            format!("{s:?}"),
            format!("{:?}", s.handle),
            format!("{:?}", s.caller_token),
            format!("{registry:?}"),
        ] {
            assert!(!text.contains(&secret), "{text}");
        }
    }

    #[test]
    fn token_check_accepts_only_the_exact_token() {
        let registry = SessionRegistry::new(Duration::from_secs(60));
        let s = registry.register(context()).expect("register");
        let token = s.caller_token.expose_secret();
        assert!(s.handle.token_matches(token.as_bytes()));
        assert!(!s.handle.token_matches(&token.as_bytes()[1..]));
        assert!(!s.handle.token_matches(b""));
        let mut wrong = token.as_bytes().to_vec();
        wrong[0] ^= 1;
        assert!(!s.handle.token_matches(&wrong));
    }

    #[tokio::test(start_paused = true)]
    async fn idle_sessions_expire_and_touch_keeps_them_alive() {
        let registry = SessionRegistry::new(Duration::from_secs(10));
        let a = registry.register(context()).expect("register");
        let b = registry.register(context()).expect("register");
        tokio::time::advance(Duration::from_secs(6)).await;
        assert!(registry.touch(&a.session_id));
        tokio::time::advance(Duration::from_secs(6)).await;
        assert!(registry.lookup(a.session_id.as_str()).is_some());
        assert!(
            registry.lookup(b.session_id.as_str()).is_none(),
            "b idle 12 s"
        );
        assert!(!registry.touch(&b.session_id));
    }

    #[tokio::test(start_paused = true)]
    async fn reaper_removes_expired_sessions_and_stops_on_cancel() {
        let registry = SessionRegistry::new(Duration::from_secs(10));
        let s = registry.register(context()).expect("register");
        let cancel = CancellationToken::new();
        let reaper = tokio::spawn(
            registry
                .clone()
                .run_reaper(Duration::from_secs(1), cancel.clone()),
        );
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(registry.len(), 1);
        tokio::time::sleep(Duration::from_secs(7)).await;
        assert_eq!(registry.len(), 0, "reaped without any lookup");
        assert!(registry.lookup(s.session_id.as_str()).is_none());
        cancel.cancel();
        reaper.await.expect("reaper stops cleanly");
    }

    #[test]
    fn the_first_answer_of_a_turn_calls_its_hook_once_and_a_new_turn_drops_it() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let registry = SessionRegistry::new(Duration::from_secs(60));
        let s = registry.register(context()).expect("register");
        let calls = Arc::new(AtomicUsize::new(0));
        let counter = calls.clone();
        s.handle.on_first_answer(move || {
            counter.fetch_add(1, Ordering::SeqCst);
        });
        s.handle.with_slot(|a: &mut Answered| a.0 = false);
        assert_eq!(calls.load(Ordering::SeqCst), 0, "nothing answered yet");
        s.handle.with_slot(|a: &mut Answered| a.0 = true);
        s.handle.with_slot(|a: &mut Answered| a.0 = true);
        assert_eq!(calls.load(Ordering::SeqCst), 1, "once");
        // Set after the answer: called at once.
        let counter = calls.clone();
        s.handle.on_first_answer(move || {
            counter.fetch_add(1, Ordering::SeqCst);
        });
        assert_eq!(calls.load(Ordering::SeqCst), 2);
        // A hook of a turn that never answered is dropped by the next turn.
        s.handle.begin_turn(Some("m2".into()));
        let counter = calls.clone();
        s.handle.on_first_answer(move || {
            counter.fetch_add(1, Ordering::SeqCst);
        });
        s.handle.begin_turn(Some("m3".into()));
        s.handle.with_slot(|a: &mut Answered| a.0 = true);
        assert_eq!(calls.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn termination_fires_once_with_the_first_reason() {
        let registry = SessionRegistry::new(Duration::from_secs(60));
        let s = registry.register(context()).expect("register");
        assert!(!s.termination.is_requested());
        assert!(registry.request_termination(&s.session_id, "doom loop"));
        assert!(!registry.request_termination(&s.session_id, "again"));
        assert!(s.termination.is_requested());
        assert_eq!(s.termination.reason().as_deref(), Some("doom loop"));
        assert!(!registry.request_termination(&SessionId::for_test("nope"), "x"));
    }

    #[test]
    fn unregistered_sessions_are_gone_but_handles_still_read_state() {
        let registry = SessionRegistry::new(Duration::from_secs(60));
        let s = registry.register(context()).expect("register");
        s.handle.with_slot(|a: &mut Answered| a.0 = true);
        assert!(registry.unregister(&s.session_id).is_some());
        assert!(registry.lookup(s.session_id.as_str()).is_none());
        assert!(s.handle.responded());
    }

    #[tokio::test(start_paused = true)]
    async fn caller_tokens_are_live_secrets_from_register_until_unregister_or_expiry() {
        let live = LiveSecrets::new();
        let redactor_view = live.clone();
        let registry = SessionRegistry::with_live_tokens(Duration::from_secs(10), live);
        let a = registry.register(context()).expect("register");
        let b = registry.register(context()).expect("register");
        let c = registry.register(context()).expect("register");
        assert_eq!(redactor_view.len(), 3, "every registered token is scrubbed");
        registry.unregister(&a.session_id);
        assert_eq!(
            redactor_view.len(),
            2,
            "an unregistered session's token is dropped"
        );
        tokio::time::advance(Duration::from_secs(11)).await;
        assert!(registry.lookup(b.session_id.as_str()).is_none());
        assert_eq!(redactor_view.len(), 1, "expired on lookup");
        assert_eq!(registry.reap_expired(), 1);
        assert!(redactor_view.is_empty(), "expired by the reaper");
        drop(c);
    }

    /// A held user gets no new session (an erasure of their data is under way), their live
    /// sessions are found, another user is not affected, a second hold is refused, and the
    /// hold ends with its guard.
    #[test]
    fn a_held_user_gets_no_session_until_the_hold_is_dropped() {
        let registry = SessionRegistry::new(Duration::from_secs(60));
        let live = registry.register(context()).expect("register");
        let mut bob = context();
        bob.origin.user_id = "u2".into();
        let hold = registry
            .hold_user(PlatformKind::Discord, "u1")
            .expect("hold");
        assert!(registry.hold_user(PlatformKind::Discord, "u1").is_none());
        assert!(registry.is_held(PlatformKind::Discord, "u1"));
        assert!(!registry.is_held(PlatformKind::Misskey, "u1"));
        assert!(matches!(
            registry.register(context()),
            Err(SessionError::UserHeld)
        ));
        let theirs = registry.of_user(PlatformKind::Discord, "u1");
        assert_eq!(theirs.len(), 1);
        assert_eq!(theirs[0].id(), &live.session_id);
        assert!(registry.register(bob).is_ok(), "another user is not held");
        drop(hold);
        assert!(registry.register(context()).is_ok());
        assert_eq!(registry.of_user(PlatformKind::Discord, "u1").len(), 2);
    }
}
