//! One interaction end to end: workspace and staging folder, session
//! registration with a caller token, prompt assembly, the agent run with the typing indicator,
//! and the finish — a short error reply when the user got nothing, never on top of a real
//! answer — then unregistration and clean-up.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

pub use super::context::PromptSettings;
use super::context::{
    PromptParts, Sources, assemble, assemble_followup, assemble_resumed, gather, shown_ids,
};
use super::continuity::{Continuity, Prepared};
use super::inbox::Inbox;
use super::launch::Launcher;
use super::metrics::ConversationMetrics;
use super::notices::{Notice, Notices};
use super::prompts::Personas;
use super::router::MessageHandler;
use super::warm::{ConversationKey, Take, Unprompted, WarmAgent, WarmPool};
use super::workspace::SessionDirs;
use crate::agent::{AgentSpec, LiveAgent, Outcome, PromptImage, ResponseProbe, TurnSpec};
use crate::attachments::{Attachments, Received, Turn};
use crate::gateway::{Budget, ModelTurn, ProblemKind};
use crate::places::{LivePlaces, Place};
use crate::platform::{
    IncomingMessage, MessageId, PlatformAdapter, PlatformKind, PlatformRegistry,
};
use crate::session::{SessionContext, SessionHandle, SessionId, SessionPurpose, TerminationSignal};
use crate::store::Store;
use crate::store::WorkspaceKey;
use crate::text::estimate_tokens;
use tokio::time::Instant;

/// The `turns_total` outcome of a turn that ended without an answer because every model
/// request of it failed (the user got the failure's text).
pub const MODEL_FAILED: &str = "model_failed";

/// How often the typing indicator is refreshed (Discord shows it for about 10 s).
const TYPING_EVERY: Duration = Duration::from_secs(8);

/// The pipeline behind the router (cloning shares everything it holds).
#[derive(Clone)]
pub struct Interactions {
    /// Platform adapters.
    pub platforms: PlatformRegistry,
    /// Starts agent sessions (registry, folders, socket, egress, environment, runner).
    pub launcher: Arc<Launcher>,
    /// Daily token budgets: checked before an agent is started.
    pub budget: Budget,
    /// Memories (for the prompt).
    pub store: Store,
    /// The system prompt of each place (the shared one, or the place's persona).
    pub personas: Arc<Personas>,
    /// The `places:` rules: each message's persona, model, skills, attachments, warm agents
    /// and memory access.
    pub places: Arc<LivePlaces>,
    /// Prompt sizes.
    pub prompt: PromptSettings,
    /// The retry prompt (quotes send-reply and react-message).
    pub retry_prompt: Option<String>,
    /// Where turn outcomes and latencies are counted.
    pub metrics: ConversationMetrics,
    /// Agents kept between a conversation's turns (`agent.warm`); `None` when off.
    pub warm: Option<WarmPool>,
    /// Fetches the current message's attachments (`attachments`); `None` when off.
    pub attachments: Option<Attachments>,
    /// What a user is told when no answer can come, in the place's language
    /// (`prompts/texts/`).
    pub notices: Arc<Notices>,
    /// Where a message is marked answered as soon as its user received something; `None`
    /// without an inbox.
    pub inbox: Option<Inbox>,
    /// Each conversation's agent session kept on disk and resumed by its next cold start
    /// (`agent.continuity`); `None` when off.
    pub continuity: Option<Continuity>,
}

impl std::fmt::Debug for Interactions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Interactions").finish_non_exhaustive()
    }
}

#[async_trait]
impl MessageHandler for Interactions {
    async fn handle(&self, msg: IncomingMessage) -> &'static str {
        let Some(platform) = self.platforms.get(msg.platform) else {
            tracing::error!(platform = %msg.platform, "no adapter for this platform");
            return "failed";
        };
        let place = self.places.current().of(&msg);
        let mut timer = self
            .metrics
            .session_started(msg.platform.as_str(), &place.name);
        let outcome = self.run(platform.as_ref(), &msg, &place).await;
        timer.outcome(outcome);
        outcome
    }

    async fn prestart(&self, typing: crate::platform::Typing) {
        self.start_for_typing(typing).await;
    }
}

impl Interactions {
    async fn run(
        &self,
        platform: &dyn PlatformAdapter,
        msg: &IncomingMessage,
        place: &Arc<Place>,
    ) -> &'static str {
        let received = Instant::now();
        // `forget-user` is erasing this user's data: nothing of theirs starts until it is done.
        if self
            .launcher
            .sessions
            .is_held(msg.platform, msg.user_id.as_str())
        {
            tracing::info!(platform = %msg.platform, "message not answered: the user's data is being erased");
            self.tell(platform, msg, place, Notice::Erasing).await;
            return "erasing";
        }
        // While this turn runs no agent is started ahead for its conversation.
        let _answering = self
            .warm
            .as_ref()
            .map(|pool| pool.answering(&ConversationKey::of(msg)));
        let workspace = match self
            .launcher
            .workspaces
            .path_for(msg.platform, msg.user_id.as_str())
        {
            Ok(w) => w,
            Err(e) => {
                tracing::warn!(platform = %msg.platform, error = %e, "cannot map the user to a workspace");
                self.tell(platform, msg, place, Notice::Error).await;
                return "failed";
            }
        };
        if let Ok(key) = WorkspaceKey::new(msg.platform.as_str(), msg.user_id.as_str())
            && self
                .budget
                .check_in(&self.store, &key, &place.grant())
                .await
                .is_err()
        {
            // The budget check logged and counted the refusal; no agent is started.
            self.tell(platform, msg, place, Notice::OutOfBudget).await;
            return "over_budget";
        }
        if let Some(full) = self.launcher.workspaces.full(&workspace).await {
            tracing::warn!(
                platform = %msg.platform,
                workspace = %workspace.display(),
                used_bytes = full.used,
                cap_bytes = full.cap,
                "workspace full (agent.sandbox.limits.maxWorkspaceMb); no agent started"
            );
            self.tell(platform, msg, place, Notice::WorkspaceFull).await;
            return "workspace_full";
        }
        let system = self.system_prompt(msg.platform, place).await;
        // Warm agents where the place keeps them.
        let warm = self.warm.as_ref().filter(|_| place.warm);
        let fingerprint = if warm.is_some() || self.continuity.is_some() {
            self.fingerprint(&system, place).await
        } else {
            0
        };
        let turn = TurnStart {
            workspace,
            system,
            fingerprint,
            received,
            warm,
        };
        if let Some(pool) = warm
            && let Take::Hit(agent) = pool
                .take_waiting(&ConversationKey::of(msg), fingerprint)
                .await
            && let Some(label) = self.warm_turn(platform, msg, place, *agent, &turn).await
        {
            return label;
        }
        self.cold_turn(platform, msg, place, turn).await
    }

    /// A turn on a fresh agent: a new Skill API session, folders, socket and environment, the
    /// whole prompt; afterwards the agent is kept warm (when that is on and the turn ended
    /// normally) or stopped with everything it held.
    async fn cold_turn(
        &self,
        platform: &dyn PlatformAdapter,
        msg: &IncomingMessage,
        place: &Arc<Place>,
        turn: TurnStart<'_>,
    ) -> &'static str {
        let TurnStart {
            workspace,
            system,
            fingerprint,
            received,
            warm,
        } = turn;
        let context = SessionContext {
            origin: msg.origin(),
            purpose: SessionPurpose::Conversation,
            place: place.grant(),
            trigger_message_id: Some(msg.message_id.clone()),
            workspace,
        };
        let resources = match self.launcher.open(context).await {
            Ok(r) => r,
            Err(e) => {
                tracing::error!(platform = %msg.platform, error = %e, "cannot start a session");
                self.tell(platform, msg, place, Notice::Error).await;
                return "failed";
            }
        };
        let session_id = resources.registered.session_id.clone();
        let handle = resources.registered.handle.clone();
        self.answered_early(&handle, msg);
        let span = tracing::info_span!("session", session_id = %session_id, platform = %msg.platform, channel = %msg.channel_id, place = %place.name);

        let outcome = async {
            let mut parts = gather(self.sources(platform, place), msg, system, &session_id).await;
            let spec = self.launcher.agent_spec(&resources, place.model.clone());
            let mut shown: HashSet<String> = shown_ids(&parts).collect();
            let turn = self.turn_watch(msg, &resources.registered.termination);
            // The downloads overlap the agent's start-up; the prompt is built once both are
            // done, knowing whether the agent takes pictures.
            let key = ConversationKey::of(msg);
            let ((started, prepared), (files, history_files)) = tokio::join!(
                self.start_on_state(spec, &key, fingerprint, &turn.terminate),
                self.receive(msg, place, &parts, None, &resources.dirs),
            );
            let mut context_tokens = 0;
            let (outcome, live) = match started {
                Ok(mut live) => {
                    parts.vision = live.accepts_images();
                    parts.files = files;
                    parts.history_files = history_files;
                    let pictures = picture_tokens(&parts);
                    let limit = self.prompt.token_limit.saturating_sub(pictures);
                    // A resumed session remembers its earlier turns: only what is new.
                    let resumed = prepared.and_then(|p| p.resume).filter(|_| live.resumed());
                    let prompt = match &resumed {
                        Some(earlier) => {
                            let prompt = assemble_resumed(&parts, &earlier.shown, limit);
                            shown.extend(earlier.shown.iter().cloned());
                            context_tokens = earlier.context_tokens;
                            prompt
                        }
                        None => assemble(&parts, limit),
                    };
                    context_tokens += estimate_tokens(&prompt) + pictures;
                    let spec_turn =
                        self.turn_spec(prompt, self.images(&parts), &turn, &handle, None);
                    self.started("cold", received);
                    (live.prompt(&spec_turn).await, Some(live))
                }
                Err(outcome) => (outcome, None),
            };
            turn.finish().await;
            let closed = match &live {
                Some(live) => close_turn(live, &handle).await,
                None => false,
            };
            if let Some(live) = &live {
                self.keep_session(msg, live, &outcome, fingerprint, &shown, context_tokens)
                    .await;
            }
            match (live, warm) {
                (Some(live), Some(pool)) if keeps_warm(&outcome) && closed => {
                    let kept = WarmAgent::new(live, resources, fingerprint, context_tokens, shown);
                    let retired = pool.put(ConversationKey::of(msg), kept);
                    self.succeed(msg, place, retired);
                }
                (live, _) => {
                    if let Some(live) = live {
                        live.stop().await;
                    }
                    resources.release().await;
                }
            }
            Some(outcome)
        }
        .instrument(span)
        .await;
        self.finish(platform, msg, place, &session_id, &handle, outcome.as_ref())
            .await
    }

    /// A turn on the conversation's warm agent: the same session with a fresh turn state, and
    /// a prompt of only what is new. `None` when the agent turned out dead or hung before
    /// anything reached the user: it is retired and the caller starts a fresh one for the
    /// same message.
    async fn warm_turn(
        &self,
        platform: &dyn PlatformAdapter,
        msg: &IncomingMessage,
        place: &Arc<Place>,
        mut agent: WarmAgent,
        start: &TurnStart<'_>,
    ) -> Option<&'static str> {
        let pool = self.warm.as_ref()?;
        let handle = agent.resources.registered.handle.clone();
        // Asked to end while it waited (nothing of it may run on): a fresh agent answers.
        if handle.termination_signal().is_requested() {
            pool.retire(agent, "terminated");
            return None;
        }
        let termination =
            handle.begin_turn_at(Some(msg.channel_id.clone()), Some(msg.message_id.clone()));
        self.answered_early(&handle, msg);
        let session_id = handle.id().clone();
        let span = tracing::info_span!("session", session_id = %session_id, platform = %msg.platform, channel = %msg.channel_id, place = %place.name, warm = true);
        // An agent started ahead gets its first prompt: the whole one, or what is new since
        // the session it resumed.
        let first = agent.first.take();
        let first_turn = first.is_some();
        let outcome = async {
            let system = if first_turn {
                start.system.clone()
            } else {
                String::new()
            };
            let mut parts = gather(self.sources(platform, place), msg, system, &session_id).await;
            let shown = (!first_turn).then_some(&agent.shown);
            (parts.files, parts.history_files) = self
                .receive(msg, place, &parts, shown, &agent.resources.dirs)
                .await;
            parts.vision = agent.live.accepts_images();
            let pictures = picture_tokens(&parts);
            let limit = self.prompt.token_limit.saturating_sub(pictures);
            let prompt = match first {
                None => assemble_followup(&parts, &agent.shown, limit),
                Some(Unprompted { resumed: None }) => assemble(&parts, limit),
                Some(Unprompted {
                    resumed: Some(earlier),
                }) => {
                    agent.context_tokens = earlier.context_tokens;
                    agent.shown.extend(earlier.shown.iter().cloned());
                    assemble_resumed(&parts, &earlier.shown, limit)
                }
            };
            agent.shown.extend(shown_ids(&parts));
            agent.context_tokens += estimate_tokens(&prompt) + pictures;
            let turn = self.turn_watch(msg, &termination);
            // A warm agent must show a sign of life as soon as a fresh one would have connected.
            let first_sign = self.launcher.runner.settings().connect_timeout;
            let spec = self.turn_spec(
                prompt,
                self.images(&parts),
                &turn,
                &handle,
                Some(first_sign),
            );
            self.started(
                if first_turn { "prestarted" } else { "warm" },
                start.received,
            );
            let outcome = agent.live.prompt(&spec).await;
            turn.finish().await;
            outcome
        }
        .instrument(span)
        .await;
        // A fresh agent would meet the same failing model: the user is told instead.
        if matches!(outcome, Outcome::Failed { .. })
            && !handle.responded()
            && model_failure(&handle).is_none()
        {
            tracing::warn!(session_id = %session_id, detail = ?outcome, "the warm agent failed before answering; starting a fresh one");
            if let Some(continuity) = &self.continuity {
                continuity.forget(&ConversationKey::of(msg)).await;
            }
            pool.retire(agent, "failed");
            return None;
        }
        self.keep_session(
            msg,
            &agent.live,
            &outcome,
            agent.fingerprint,
            &agent.shown,
            agent.context_tokens,
        )
        .await;
        if !close_turn(&agent.live, &handle).await {
            pool.retire(agent, "terminated");
        } else if keeps_warm(&outcome) {
            let retired = pool.put(ConversationKey::of(msg), agent);
            self.succeed(msg, place, retired);
        } else {
            pool.retire(agent, "failed");
        }
        Some(
            self.finish(platform, msg, place, &session_id, &handle, Some(&outcome))
                .await,
        )
    }

    /// Marks `msg` answered in the inbox as soon as the turn's first answer reaches its user.
    fn answered_early(&self, handle: &SessionHandle, msg: &IncomingMessage) {
        if let Some(hook) = self
            .inbox
            .as_ref()
            .and_then(|inbox| inbox.answered_hook(msg))
        {
            handle.on_first_answer(hook);
        }
    }

    /// The end of a turn: when nothing reached the user (and they did not cancel it), a reply
    /// in words — that their data is being erased when `forget-user --now` stopped the turn,
    /// why the model could not answer when every model request of the turn failed, the memory
    /// limit, else the generic error — and the log line.
    async fn finish(
        &self,
        platform: &dyn PlatformAdapter,
        msg: &IncomingMessage,
        place: &Place,
        session_id: &SessionId,
        handle: &SessionHandle,
        outcome: Option<&Outcome>,
    ) -> &'static str {
        let responded = handle.responded();
        let mut label = outcome.map_or("failed", Outcome::label);
        let model = model_failure(handle);
        if !responded && !cancelled_by_the_user(msg, outcome) {
            let erasing = self
                .launcher
                .sessions
                .is_held(msg.platform, msg.user_id.as_str());
            let notice = match (outcome, model) {
                _ if erasing => Notice::Erasing,
                (Some(Outcome::MemoryLimit), _) => Notice::MemoryLimit,
                (_, Some(kind)) => {
                    label = MODEL_FAILED;
                    Notice::Model(kind)
                }
                _ => Notice::Error,
            };
            self.tell(platform, msg, place, notice).await;
        }
        tracing::info!(
            session_id = %session_id,
            place = %place.name,
            outcome = label,
            responded,
            model_failure = model.map(ProblemKind::as_str),
            "interaction finished"
        );
        label
    }

    /// What the turn's agent run waits on: the Skill API's termination request bridged to a
    /// token, and the typing indicator.
    fn turn_watch(&self, msg: &IncomingMessage, signal: &TerminationSignal) -> TurnWatch {
        let terminate = CancellationToken::new();
        let done = CancellationToken::new();
        let signal = signal.clone();
        let (t, d) = (terminate.clone(), done.clone());
        let bridge = tokio::spawn(async move {
            tokio::select! {
                reason = signal.requested() => {
                    tracing::warn!(reason = %reason, "Skill API asked to terminate the agent");
                    t.cancel();
                }
                _ = d.cancelled() => {}
            }
        });
        let typing = self.spawn_typing(msg, done.clone());
        TurnWatch {
            _ends_on_drop: done.clone().drop_guard(),
            terminate,
            done,
            bridge,
            typing,
        }
    }

    /// The current message's attachments and those of the earlier messages shown with it
    /// (see [`history_with_files`]), fetched into the session's staging folder (`None` and
    /// nothing when attachments are off, everywhere or in the place).
    async fn receive(
        &self,
        msg: &IncomingMessage,
        place: &Place,
        parts: &PromptParts,
        shown: Option<&HashSet<String>>,
        dirs: &SessionDirs,
    ) -> (Option<Received>, HashMap<MessageId, Received>) {
        let Some(fetcher) = self.attachments.as_ref().filter(|_| place.attachments) else {
            return (None, HashMap::new());
        };
        let Ok(who) = WorkspaceKey::new(msg.platform.as_str(), msg.user_id.as_str()) else {
            return (None, HashMap::new());
        };
        let history = history_with_files(parts, shown);
        let turn = Turn {
            platform: msg.platform,
            who: &who,
            staging: &dirs.staging,
            workspace: &dirs.workspace,
        };
        let (current, earlier) = fetcher
            .receive_turn(&turn, &msg.attachments, &history)
            .await;
        (Some(current), earlier)
    }

    /// The pictures the prompt built from `parts` names, when the agent can see them
    /// (counted as sent).
    fn images(&self, parts: &PromptParts) -> Vec<PromptImage> {
        let (Some(files), true, Some(fetcher)) = (&parts.files, parts.vision, &self.attachments)
        else {
            return Vec::new();
        };
        let images: Vec<PromptImage> = files
            .pictures()
            .map(|p| PromptImage {
                mime: p.mime.to_owned(),
                data: p.base64.clone(),
            })
            .collect();
        fetcher.pictures_sent(images.len());
        images
    }

    fn turn_spec(
        &self,
        prompt: String,
        images: Vec<PromptImage>,
        watch: &TurnWatch,
        handle: &SessionHandle,
        first_sign_within: Option<Duration>,
    ) -> TurnSpec {
        let handle = handle.clone();
        TurnSpec {
            prompt,
            images,
            retry_prompt: self.retry_prompt.clone(),
            terminate: watch.terminate.clone(),
            shutdown: self.launcher.stop.clone(),
            probe: Arc::new(TurnProbe(handle)),
            first_sign_within,
        }
    }

    fn started(&self, start: &str, received: Instant) {
        if let Some(pool) = &self.warm {
            pool.metrics().turn_started(start, received.elapsed());
        }
    }

    /// The place's rendered system prompt (empty, logged, when it cannot be rendered).
    pub(super) async fn system_prompt(&self, platform: PlatformKind, place: &Place) -> String {
        match self
            .personas
            .library(place.persona.as_deref())
            .system_prompt()
            .await
        {
            Ok(s) => s,
            Err(e) => {
                tracing::error!(platform = %platform, error = %e, "cannot render the system prompt");
                String::new()
            }
        }
    }

    /// What a warm agent was started with: the rendered system prompt, every file of the
    /// skills folder (path, size, modification time), and its place's rule and model. A
    /// different value retires it.
    pub(super) async fn fingerprint(&self, system: &str, place: &Place) -> u64 {
        use std::hash::{Hash, Hasher};
        let skills = self.launcher.env.skills_dir.clone();
        let tree = tokio::task::spawn_blocking(move || tree_fingerprint(&skills))
            .await
            .unwrap_or_default();
        let mut h = std::collections::hash_map::DefaultHasher::new();
        system.hash(&mut h);
        tree.hash(&mut h);
        place.hash(&mut h);
        h.finish()
    }

    fn spawn_typing(
        &self,
        msg: &IncomingMessage,
        done: CancellationToken,
    ) -> Option<tokio::task::JoinHandle<()>> {
        let platform = self.platforms.get(msg.platform)?;
        let channel = msg.channel_id.clone();
        Some(tokio::spawn(async move {
            loop {
                if let Err(e) = platform.start_typing(&channel).await {
                    tracing::debug!(error = %e, "typing indicator failed");
                }
                tokio::select! {
                    _ = done.cancelled() => break,
                    _ = tokio::time::sleep(TYPING_EVERY) => {}
                }
            }
        }))
    }

    /// Where this turn's prompt parts come from.
    pub(super) fn sources<'a>(
        &'a self,
        platform: &'a dyn PlatformAdapter,
        place: &'a Place,
    ) -> Sources<'a> {
        Sources {
            platform,
            store: &self.store,
            skills_dir: &self.launcher.env.skills_dir,
            sizes: &self.prompt,
            place,
            mcp: &self.launcher.env.mcp_servers,
        }
    }

    /// The state folder of `msg`'s conversation and the session to resume there, when
    /// continuity is on (a folder that cannot be made is logged: the turn goes on without).
    pub(super) async fn prepare_continuity(
        &self,
        conversation: &ConversationKey,
        fingerprint: u64,
    ) -> Option<Prepared> {
        let continuity = self.continuity.as_ref()?;
        match continuity.prepare(conversation, fingerprint).await {
            Ok(prepared) => Some(prepared),
            Err(e) => {
                tracing::warn!(platform = %conversation.platform(), error = %e, "no state folder for the conversation; its agent starts without continuity");
                None
            }
        }
    }

    /// Starts `spec`'s agent on `conversation`'s state folder (when continuity is on), resuming
    /// its kept session where it may. An agent that cannot start on the kept state (OpenCode
    /// exits on a damaged session database) is started once more on an emptied folder, so the
    /// user still gets an answer; any failed start leaves the conversation to start afresh
    /// next time. Returns the start's result and the folder it used.
    pub(super) async fn start_on_state(
        &self,
        mut spec: AgentSpec,
        conversation: &ConversationKey,
        fingerprint: u64,
        terminate: &CancellationToken,
    ) -> (Result<LiveAgent, Outcome>, Option<Prepared>) {
        let runner = &self.launcher.runner;
        let prepared = self.prepare_continuity(conversation, fingerprint).await;
        apply_state(&mut spec, prepared.as_ref());
        let again = prepared
            .as_ref()
            .is_some_and(|p| p.resume.is_some())
            .then(|| spec.clone());
        let outcome = match runner.start(spec, terminate, &self.launcher.stop).await {
            Ok(live) => return (Ok(live), prepared),
            Err(outcome) => outcome,
        };
        let Some(continuity) = &self.continuity else {
            return (Err(outcome), prepared);
        };
        continuity.forget(conversation).await;
        let Some(mut spec) = again else {
            return (Err(outcome), prepared);
        };
        tracing::warn!(platform = %conversation.platform(), detail = ?outcome, "the agent could not start on the conversation's kept session; starting afresh on an emptied state folder");
        let emptied = self.prepare_continuity(conversation, fingerprint).await;
        apply_state(&mut spec, emptied.as_ref());
        let started = runner.start(spec, terminate, &self.launcher.stop).await;
        if started.is_err() {
            continuity.forget(conversation).await;
        }
        (started, emptied)
    }

    /// After a turn: the conversation's session is recorded for its next agent to resume, or
    /// forgotten when the turn failed.
    async fn keep_session(
        &self,
        msg: &IncomingMessage,
        live: &LiveAgent,
        outcome: &Outcome,
        fingerprint: u64,
        shown: &HashSet<String>,
        context_tokens: usize,
    ) {
        let Some(continuity) = &self.continuity else {
            return;
        };
        let conversation = ConversationKey::of(msg);
        if keeps_warm(outcome) {
            continuity
                .record(
                    &conversation,
                    live.acp_session(),
                    fingerprint,
                    shown,
                    context_tokens,
                )
                .await;
        } else {
            continuity.forget(&conversation).await;
        }
    }

    /// `notice`, in the place's language, in answer to `msg`.
    async fn tell(
        &self,
        platform: &dyn PlatformAdapter,
        msg: &IncomingMessage,
        place: &Place,
        notice: Notice,
    ) {
        let text = self.notices.text(&place.language, notice);
        if let Err(e) = platform
            .send_message(&msg.channel_id, &text, Some(&msg.message_id))
            .await
        {
            tracing::warn!(platform = %msg.platform, notice = notice.key(), error = %e, "could not tell the user why there is no answer");
        }
    }
}

/// Points `spec` at the conversation's state folder and the session to resume there.
fn apply_state(spec: &mut AgentSpec, prepared: Option<&Prepared>) {
    spec.state_dir = prepared.map(|p| p.folder.clone());
    spec.resume = prepared.and_then(|p| p.resume.as_ref().map(|r| r.acp_session.clone()));
}

/// What a turn starts from (the system prompt is sent when its agent is new to the
/// conversation: a cold start, or the first prompt of one started ahead).
struct TurnStart<'a> {
    workspace: PathBuf,
    system: String,
    fingerprint: u64,
    received: Instant,
    /// The pool its agent is kept in afterwards (`None`: warm agents are off here).
    warm: Option<&'a WarmPool>,
}

/// Earlier messages whose files are fetched with a turn's: at most this many.
const HISTORY_FILE_MESSAGES: usize = 5;

/// The earlier messages of `parts` whose files the agent gets: the newest recent messages
/// with attachments, then related ones, leaving out what an earlier turn of this agent was
/// shown (`shown`), at most [`HISTORY_FILE_MESSAGES`]. The newest are the ones the prompt's
/// budget keeps longest.
fn history_with_files(
    parts: &PromptParts,
    shown: Option<&HashSet<String>>,
) -> Vec<(MessageId, Vec<crate::platform::Attachment>)> {
    parts
        .recent
        .iter()
        .rev()
        .chain(&parts.related)
        .filter(|m| !m.attachments.is_empty())
        .filter(|m| shown.is_none_or(|s| !s.contains(m.message_id.as_str())))
        .take(HISTORY_FILE_MESSAGES)
        .map(|m| (m.message_id.clone(), m.attachments.clone()))
        .collect()
}

/// What the pictures of `parts` cost the model, when they are sent.
fn picture_tokens(parts: &PromptParts) -> usize {
    match (&parts.files, parts.vision) {
        (Some(files), true) => files.picture_tokens(),
        _ => 0,
    }
}

/// A turn the user stopped themselves: in the chat console, a cancelled session means Ctrl-C
/// (the console said so), so no error reply follows it. On Discord and Misskey a cancelled
/// session means the daemon stopped, and the user is told to try again.
fn cancelled_by_the_user(msg: &IncomingMessage, outcome: Option<&Outcome>) -> bool {
    msg.platform == PlatformKind::Console && outcome == Some(&Outcome::Cancelled)
}

/// Why the turn's model requests failed, when every one of them did (`gateway::health`).
pub(super) fn model_failure(handle: &SessionHandle) -> Option<ProblemKind> {
    handle.with_slot::<ModelTurn, _>(|turn| turn.failure())
}

/// What the agent runner asks about the turn: whether the user got an answer, and whether
/// prompting again is pointless because every model request of the turn failed.
pub(super) struct TurnProbe(pub(super) SessionHandle);

impl ResponseProbe for TurnProbe {
    fn responded(&self) -> bool {
        self.0.responded()
    }

    fn cannot_answer(&self) -> bool {
        model_failure(&self.0).is_some()
    }
}

/// Whether a turn that ended this way leaves an agent worth keeping: it finished its turn
/// (answered or not). Failures, timeouts, terminations and cancellations retire it.
fn keeps_warm(outcome: &Outcome) -> bool {
    matches!(
        outcome,
        Outcome::Responded { .. } | Outcome::NoResponse { .. }
    )
}

/// A turn's termination bridge and typing indicator.
struct TurnWatch {
    terminate: CancellationToken,
    done: CancellationToken,
    bridge: tokio::task::JoinHandle<()>,
    typing: Option<tokio::task::JoinHandle<()>>,
    /// Ends both tasks if the turn is dropped before [`finish`](Self::finish) (its future
    /// cancelled): the typing indicator never outlives its turn.
    _ends_on_drop: tokio_util::sync::DropGuard,
}

impl TurnWatch {
    /// Stops both and waits for them.
    async fn finish(self) {
        let TurnWatch {
            done,
            bridge,
            typing,
            ..
        } = self;
        done.cancel();
        let _ = bridge.await;
        if let Some(t) = typing {
            let _ = t.await;
        }
    }
}

/// Paths, sizes and modification times of every file under `dir` (sorted; unreadable
/// entries skipped), hashed.
fn tree_fingerprint(dir: &std::path::Path) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    let mut stack = vec![dir.to_path_buf()];
    let mut files = Vec::new();
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for entry in entries.flatten() {
            let Ok(meta) = entry.metadata() else {
                continue;
            };
            if meta.is_dir() {
                stack.push(entry.path());
            } else {
                files.push((entry.path(), meta.len(), meta.modified().ok()));
            }
        }
    }
    files.sort();
    files.hash(&mut h);
    h.finish()
}

/// Closes a turn whose agent may be kept: the session refuses calls until the next turn, and
/// whatever the agent left running is ended. False when a termination was requested during
/// the turn: that agent must not be kept.
async fn close_turn(live: &LiveAgent, handle: &SessionHandle) -> bool {
    let terminated = handle.end_turn();
    live.end_turn().await;
    !terminated
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};

    /// A turn dropped before its end (its future cancelled) still stops its typing indicator
    /// and termination bridge.
    #[tokio::test]
    async fn a_dropped_turn_stops_its_background_tasks() {
        let done = CancellationToken::new();
        let (typing_ended, bridge_ended) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicBool::new(false)),
        );
        let task = |flag: Arc<AtomicBool>, done: CancellationToken| {
            tokio::spawn(async move {
                loop {
                    tokio::select! {
                        _ = done.cancelled() => break,
                        _ = tokio::time::sleep(Duration::from_millis(5)) => {}
                    }
                }
                flag.store(true, Ordering::SeqCst);
            })
        };
        let watch = TurnWatch {
            _ends_on_drop: done.clone().drop_guard(),
            terminate: CancellationToken::new(),
            bridge: task(bridge_ended.clone(), done.clone()),
            typing: Some(task(typing_ended.clone(), done.clone())),
            done,
        };
        drop(watch);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while !(typing_ended.load(Ordering::SeqCst) && bridge_ended.load(Ordering::SeqCst)) {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the tasks outlived their turn"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}
