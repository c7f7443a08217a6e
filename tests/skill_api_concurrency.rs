//! The Skill API under concurrency: 200 agent sessions calling the real handlers at once over
//! HTTP must not leak into each other.
//!
//! A real listener on `127.0.0.1:0` serves the registry `build_registry` builds from the
//! repository's `skills/` (manifest rate limits removed, so per-user limits do not interfere), on
//! a temp-file `Store` and two `FakePlatform`s (Discord-like and Misskey-like). 200 sessions are
//! registered: 170 workspaces, 30 of them shared by two sessions of the same user, 30 user ids that
//! also exist on the other platform (a different workspace), a third of the sessions in DMs.
//! After a barrier every session runs, in parallel with all others:
//!
//! 1. three `memory-save`s with distinct content (the DM sessions save one of them as private);
//! 2. `memory-search "kayak"` — a word that is in every memory of every workspace;
//! 3. `memory-stats`;
//! 4. two *different* `send-reply`s at the same time.
//!
//! What must hold, whatever the interleaving: every memory is stored exactly once in its own
//! workspace; a session's search finds its own memories and nothing from any other workspace (and
//! no private memory outside a DM); stats count only the session's workspace; exactly one of the
//! two replies is delivered — into the session's own channel, threaded to its own trigger
//! message — and the other is 429 `QUOTA_EXCEEDED`; no call is a 5xx; no agent is terminated.

mod handlers_support;

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;
use std::time::Duration;

use air_friends::platform::PlatformKind;
use air_friends::platform::fake::FakePlatform;
use air_friends::skill_api::serve;
use air_friends::store::{ExportFilter, Scope, Visibility, WorkspaceKey};
use handlers_support::{App, Session, app};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::{Barrier, oneshot};
use tokio::task::JoinSet;

/// Sessions calling at once.
const SESSIONS: usize = 200;
/// Sessions `0..SOLO` each have a workspace of their own (users `u000..u139`).
const SOLO: usize = 140;
/// Sessions `SOLO..SHARED_END` are a second session of users `u000..u029`, same platform: the
/// workspace is shared with that user's first session. Sessions `SHARED_END..SESSIONS` are users
/// `u030..u059` on the *other* platform: same user id, a different workspace.
const SHARED_END: usize = 170;
/// Memories each session saves.
const SAVES: usize = 3;
/// The word every memory of every workspace contains, so a search for it would surface other
/// workspaces' memories if isolation failed.
const COMMON_WORD: &str = "kayak";

/// Who a session is, derived from its index.
#[derive(Clone, Debug)]
struct Plan {
    index: usize,
    platform: PlatformKind,
    user: String,
    dm: bool,
}

impl Plan {
    fn new(index: usize) -> Self {
        let (user_n, flip) = match index {
            i if i < SOLO => (i, false),
            i if i < SHARED_END => (i - SOLO, false),
            i => (i - SOLO, true),
        };
        let base_misskey = user_n % 4 == 3;
        let platform = if base_misskey != flip {
            PlatformKind::Misskey
        } else {
            PlatformKind::Discord
        };
        Self {
            index,
            platform,
            user: format!("u{user_n:03}"),
            dm: index.is_multiple_of(3),
        }
    }

    fn workspace(&self) -> WorkspaceKey {
        WorkspaceKey::new(self.platform.as_str(), &self.user).expect("workspace key")
    }

    /// The `n`-th memory this session saves: content, and whether it is private (one per DM
    /// session; private memories cannot be saved outside DMs).
    fn memory(&self, n: usize) -> (String, bool) {
        let content = format!(
            "marker s{:03}n{n} {} likes {COMMON_WORD} trips and green tea (note {n} of session {})",
            self.index, self.user, self.index
        );
        (content, self.dm && n == SAVES - 1)
    }

    /// The two competing replies.
    fn reply(&self, which: char) -> String {
        format!("Reply {which} from session {} to {}", self.index, self.user)
    }
}

/// Everything one session got back, checked after all sessions finished.
struct Outcome {
    plan: Plan,
    session: Session,
    /// `(skill, HTTP status, body)` of every call, in order.
    calls: Vec<(&'static str, u16, Value)>,
}

impl Outcome {
    fn of(&self, skill: &str) -> Vec<&(&'static str, u16, Value)> {
        self.calls.iter().filter(|(s, ..)| *s == skill).collect()
    }

    fn data(&self, skill: &str) -> &Value {
        let calls = self.of(skill);
        let (_, status, body) = calls.first().expect("call made");
        assert_eq!(
            *status, 200,
            "session {} {skill}: {body:#}",
            self.plan.index
        );
        &body["data"]
    }
}

fn fake(app: &App, platform: PlatformKind) -> &Arc<FakePlatform> {
    match platform {
        PlatformKind::Misskey => &app.misskey,
        _ => &app.discord,
    }
}

/// Registers the session of `plan`, answering a fresh message in its own channel.
fn register(app: &App, plan: &Plan) -> Session {
    let fake = fake(app, plan.platform);
    let incoming = if plan.dm {
        fake.push_incoming_dm(&plan.user, "hello bot")
    } else {
        let channel = match plan.platform {
            PlatformKind::Misskey => format!("note:n{}", plan.index),
            _ => format!("chan-{}", plan.index),
        };
        fake.push_incoming(&channel, &plan.user, "hello bot")
    };
    assert_eq!(incoming.is_dm, plan.dm);
    app.session_for(&incoming)
}

/// One skill call over HTTP with the session's own credentials.
async fn call(
    client: &reqwest::Client,
    base: &str,
    session: &Session,
    skill: &'static str,
    parameters: Value,
) -> (&'static str, u16, Value) {
    let response = client
        .post(format!("{base}/api/skill/{skill}"))
        .bearer_auth(session.registered.caller_token.expose_secret())
        .json(&json!({
            "sessionId": session.registered.session_id.as_str(),
            "parameters": parameters,
        }))
        .send()
        .await
        .unwrap_or_else(|e| panic!("{skill}: request failed: {e}"));
    let status = response.status().as_u16();
    let body: Value = response
        .json()
        .await
        .unwrap_or_else(|e| panic!("{skill}: body is not JSON: {e}"));
    (skill, status, body)
}

/// The whole interaction of one session (see the module documentation).
async fn run_session(
    client: reqwest::Client,
    base: String,
    plan: Plan,
    session: Session,
    start: Arc<Barrier>,
) -> Outcome {
    start.wait().await;
    let mut calls = Vec::new();
    for n in 0..SAVES {
        let (content, private) = plan.memory(n);
        let parameters = json!({
            "content": content,
            "visibility": if private { "private" } else { "public" },
            "importance": if n == 0 { "high" } else { "normal" },
        });
        calls.push(call(&client, &base, &session, "memory-save", parameters).await);
    }
    let search = json!({"query": COMMON_WORD, "limit": 50});
    calls.push(call(&client, &base, &session, "memory-search", search).await);
    calls.push(call(&client, &base, &session, "memory-stats", json!({})).await);
    let (a, b) = tokio::join!(
        call(
            &client,
            &base,
            &session,
            "send-reply",
            json!({"message": plan.reply('A')})
        ),
        call(
            &client,
            &base,
            &session,
            "send-reply",
            json!({"message": plan.reply('B')})
        ),
    );
    calls.push(a);
    calls.push(b);
    Outcome {
        plan,
        session,
        calls,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_hundred_parallel_sessions_stay_isolated_and_keep_their_quotas() {
    let app = app().await;
    let plans: Vec<Plan> = (0..SESSIONS).map(Plan::new).collect();

    // What each workspace is sent, known before anything runs: content -> private?
    let mut planned: BTreeMap<WorkspaceKey, BTreeMap<String, bool>> = BTreeMap::new();
    for plan in &plans {
        for n in 0..SAVES {
            let (content, private) = plan.memory(n);
            planned
                .entry(plan.workspace())
                .or_default()
                .insert(content, private);
        }
    }
    assert_eq!(
        planned.len(),
        170,
        "170 workspaces, 30 shared by two sessions"
    );
    let sessions: Vec<Session> = plans.iter().map(|plan| register(&app, plan)).collect();

    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    let server = tokio::spawn(serve(listener, app.state.clone(), async move {
        let _ = stop_rx.await;
    }));

    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .expect("client");
    let start = Arc::new(Barrier::new(SESSIONS));
    let mut running = JoinSet::new();
    for (plan, session) in plans.iter().cloned().zip(sessions) {
        running.spawn(run_session(
            client.clone(),
            base.clone(),
            plan,
            session,
            start.clone(),
        ));
    }
    let mut outcomes: Vec<Outcome> = running.join_all().await;
    outcomes.sort_by_key(|o| o.plan.index);

    // No call failed on the server side.
    let server_errors: Vec<String> = outcomes
        .iter()
        .flat_map(|o| {
            o.calls.iter().filter(|(_, status, _)| *status >= 500).map(
                move |(skill, status, body)| {
                    format!("session {} {skill}: {status} {body}", o.plan.index)
                },
            )
        })
        .collect();
    assert!(server_errors.is_empty(), "5xx answers: {server_errors:#?}");

    let mut save_ids = HashSet::new();
    let mut replied_triggers = BTreeSet::new();
    for o in &outcomes {
        let (plan, index) = (&o.plan, o.plan.index);
        let ws = plan.workspace();
        let workspace_memories = &planned[&ws];

        // Every save succeeded with its own id and the content that was sent.
        let saves = o.of("memory-save");
        assert_eq!(saves.len(), SAVES);
        for (n, (_, status, body)) in saves.into_iter().enumerate() {
            assert_eq!(*status, 200, "session {index} save {n}: {body:#}");
            let (content, private) = plan.memory(n);
            assert_eq!(body["data"]["content"], content.as_str());
            let visibility = if private { "private" } else { "public" };
            assert_eq!(body["data"]["visibility"], visibility);
            let id = body["data"]["id"].as_str().expect("id").to_owned();
            assert!(save_ids.insert(id), "session {index}: memory id reused");
        }

        // Search: only this workspace's memories, all of this session's own, no private outside
        // a DM.
        let search = o.data("memory-search");
        let found: Vec<(&str, &str)> = search["memories"]
            .as_array()
            .expect("memories")
            .iter()
            .map(|m| {
                (
                    m["content"].as_str().expect("content"),
                    m["visibility"].as_str().expect("visibility"),
                )
            })
            .collect();
        assert_eq!(search["count"], found.len());
        for (content, visibility) in &found {
            assert!(
                workspace_memories.contains_key(*content),
                "session {index} ({ws}) found a memory of another workspace: {content:?}"
            );
            if !plan.dm {
                assert_eq!(
                    *visibility, "public",
                    "session {index} (not a DM) found a private memory: {content:?}"
                );
            }
        }
        for n in 0..SAVES {
            let (content, _) = plan.memory(n);
            assert!(
                found.iter().any(|(c, _)| *c == content),
                "session {index} did not find its own saved memory {content:?}; found {found:?}"
            );
        }

        // Stats: at least this session's own memories, at most what its workspace was sent.
        let stats = o.data("memory-stats");
        let visible_in_ws = workspace_memories
            .values()
            .filter(|private| plan.dm || !**private)
            .count();
        let total = stats["summary"]["total"].as_u64().expect("total");
        let total = usize::try_from(total).expect("fits");
        assert!(
            (SAVES..=visible_in_ws).contains(&total),
            "session {index} ({ws}): stats count {total} memories, expected {SAVES}..={visible_in_ws}"
        );
        assert_eq!(
            stats["private"].is_null(),
            !plan.dm,
            "session {index}: private block only in DMs: {stats:#}"
        );

        // Exactly one of the two simultaneous replies went out; the other hit the quota.
        let replies = o.of("send-reply");
        let (winners, losers): (Vec<_>, Vec<_>) = replies
            .into_iter()
            .partition(|(_, status, _)| *status == 200);
        assert_eq!(
            (winners.len(), losers.len()),
            (1, 1),
            "session {index}: one reply sent, one refused: {:#?}",
            o.of("send-reply")
        );
        let (_, _, refused) = losers[0];
        assert_eq!(losers[0].1, 429, "session {index}: {refused:#}");
        assert_eq!(refused["code"], "QUOTA_EXCEEDED", "session {index}");
        let message_id = winners[0].2["data"]["messageId"]
            .as_str()
            .expect("messageId");
        let sent = fake(&app, plan.platform).sent();
        let record = sent
            .iter()
            .find(|r| r.message_id == message_id)
            .unwrap_or_else(|| panic!("session {index}: reply {message_id} not on the platform"));
        assert_eq!(
            record.channel_id,
            o.session.context.origin.channel_id.as_str(),
            "session {index}: reply went to another channel"
        );
        assert_eq!(
            record.reply_to.as_deref(),
            Some(o.session.trigger().as_str()),
            "session {index}: reply not threaded to its own trigger"
        );
        assert!(
            record.text == plan.reply('A') || record.text == plan.reply('B'),
            "session {index}: delivered someone else's text {:?}",
            record.text
        );
        assert!(
            replied_triggers.insert((plan.platform.as_str(), o.session.trigger())),
            "session {index}: trigger answered twice"
        );
        assert!(
            !o.session.terminated(),
            "session {index}: agent terminated after only two send-reply attempts"
        );
    }

    // The platforms received exactly one message per session, nothing more.
    let delivered = app.discord.sent().len() + app.misskey.sent().len();
    assert_eq!(delivered, SESSIONS, "one delivered reply per session");

    // The store holds every memory exactly once, each in the workspace it was sent to.
    let mut stored_total = 0;
    for (ws, memories) in &planned {
        let filter = ExportFilter::all(Scope::IncludePrivate);
        let stored = app.store.export_memories(ws, filter).await.expect("export");
        let mut contents: Vec<&str> = stored.iter().map(|m| m.content.as_str()).collect();
        contents.sort_unstable();
        let expected: Vec<&str> = memories.keys().map(String::as_str).collect();
        assert_eq!(
            contents, expected,
            "{ws}: stored memories differ from those sent"
        );
        for memory in &stored {
            assert_eq!(memory.workspace, *ws);
            assert_eq!(
                memory.visibility == Visibility::Private,
                memories[&memory.content],
                "{ws}: visibility of {:?}",
                memory.content
            );
        }
        stored_total += stored.len();
    }
    assert_eq!(stored_total, SESSIONS * SAVES);

    stop_tx.send(()).expect("server alive");
    server
        .await
        .expect("server task")
        .expect("serve stopped cleanly");
}
