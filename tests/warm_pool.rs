//! The warm-agent pool on real agent processes (the scripted fake ACP agent): a kept agent is
//! handed back only to its own conversation, the least recently used is stopped at the cap,
//! idle agents expire, agents that are old or started with other prompts are retired, and the
//! pool's shutdown stops every process and releases every Skill API session and staging folder.
//! Through the whole pipeline: `warm_agents.rs`.

mod common;

use air_friends::platform::Origin;
use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use air_friends::agent::{
    AgentRunner, AgentSpec, ApprovalRules, Outcome, PermissionGate, RunnerSettings, TurnSpec,
};
use air_friends::conversation::warm::{
    AheadOf, ConversationKey, SessionResources, Take, WarmAgent, WarmMetrics, WarmPool,
    WarmSettings,
};
use air_friends::conversation::workspace::Workspaces;
use air_friends::platform::PlatformKind;
use air_friends::session::{SessionContext, SessionRegistry};
use common::poll::eventually;
use serde_json::json;
use tokio_util::sync::CancellationToken;

struct World {
    dir: tempfile::TempDir,
    runner: AgentRunner,
    sessions: SessionRegistry,
    workspaces: Workspaces,
}

impl World {
    fn new() -> World {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("skills")).unwrap();
        std::fs::write(
            dir.path().join("script.json"),
            json!({"turns": [{"steps": []}]}).to_string(),
        )
        .unwrap();
        let runner = AgentRunner::new(
            RunnerSettings {
                command: common::fake_agent().display().to_string(),
                args: vec![],
                model: None,
                connect_timeout: Duration::from_secs(10),
                idle_timeout: Duration::from_secs(10),
                max_turn: Duration::from_secs(20),
                kill_grace: Duration::from_millis(500),
            },
            PermissionGate::new(
                ApprovalRules {
                    skills_dir: std::fs::canonicalize(dir.path().join("skills")).unwrap(),
                    entrypoints: vec![],
                    command_prefixes: vec![],
                    skills_mounted_in_workspace: false,
                },
                false,
            ),
        );
        let workspaces = Workspaces::new(&dir.path().join("workspaces"));
        World {
            dir,
            runner,
            sessions: SessionRegistry::new(Duration::from_secs(600)),
            workspaces,
        }
    }

    /// A started agent for `user`'s DM, as the conversation pipeline keeps it after a turn.
    async fn agent(&self, user: &str, fingerprint: u64) -> WarmAgent {
        let workspace = self
            .workspaces
            .path_for(PlatformKind::Console, user)
            .unwrap();
        let registered = self
            .sessions
            .register(SessionContext {
                place: Default::default(),
                origin: Origin {
                    platform: PlatformKind::Console,
                    channel_id: format!("dm-{user}").into(),
                    guild_id: None,
                    user_id: user.into(),
                    username: user.into(),
                    is_dm: true,
                },
                purpose: Default::default(),
                trigger_message_id: Some("m1".into()),
                workspace: workspace.clone(),
            })
            .unwrap();
        let session_id = registered.session_id.as_str().to_owned();
        let dirs = self
            .workspaces
            .prepare(PlatformKind::Console, user, &registered.session_id)
            .await
            .unwrap();
        let env = BTreeMap::from([
            ("PATH".to_owned(), "/usr/bin:/bin".to_owned()),
            (
                "FAKE_ACP_SCRIPT".to_owned(),
                self.dir.path().join("script.json").display().to_string(),
            ),
        ]);
        let never = CancellationToken::new();
        let live = self
            .runner
            .start(
                AgentSpec {
                    session_id,
                    workspace,
                    dm: true,
                    api_socket_dir: None,
                    env,
                    model: None,
                    skills: None,
                    state_dir: None,
                    resume: None,
                    mcp_servers: Vec::new(),
                },
                &never,
                &never,
            )
            .await
            .expect("the fake agent starts");
        let resources = SessionResources {
            registered,
            dirs,
            socket: None,
            egress: None,
            sessions: self.sessions.clone(),
            workspaces: self.workspaces.clone(),
        };
        WarmAgent::new(live, resources, fingerprint, 0, HashSet::new())
    }
}

fn key(user: &str) -> ConversationKey {
    ConversationKey::new(PlatformKind::Console, &format!("dm-{user}"), user, true)
}

fn pool(max_processes: usize, idle: Duration, max_turns: u32) -> WarmPool {
    WarmPool::new(
        WarmSettings {
            idle,
            max_processes,
            max_turns,
            max_context_tokens: 64_000,
            start_ahead: true,
        },
        WarmMetrics::unregistered(),
    )
}

fn alive(pid: u32) -> bool {
    // A reaped process has no /proc entry; an unreaped one would be a zombie ("Z").
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit(')').next().map(|rest| rest.trim().to_owned()))
        .is_some_and(|rest| !rest.starts_with('Z'))
}

async fn until_gone(pid: u32) {
    let what = format!("agent {pid} gone");
    eventually(Duration::from_secs(3), &what, || !alive(pid)).await;
}

/// What the agent held: its session id and staging folder.
fn held(agent: &WarmAgent) -> (String, std::path::PathBuf) {
    (
        agent.resources.registered.session_id.as_str().to_owned(),
        agent.resources.dirs.staging.clone(),
    )
}

fn released(world: &World, (session, staging): &(String, std::path::PathBuf)) {
    assert!(
        world.sessions.lookup(session).is_none(),
        "session still registered"
    );
    assert!(!Path::new(staging).exists(), "staging folder left behind");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_is_handed_back_only_to_its_own_conversation() {
    let w = World::new();
    let pool = pool(4, Duration::from_secs(60), 20);
    let a = w.agent("alice", 7).await;
    let pid = a.live.pid().unwrap();
    pool.put(key("alice"), a);
    assert!(matches!(pool.take(&key("bob"), 7), Take::Miss("none")));
    match pool.take(&key("alice"), 7) {
        Take::Hit(agent) => {
            assert_eq!(agent.live.pid(), Some(pid), "the same process");
            agent.retire().await;
        }
        Take::Miss(reason) => panic!("missed: {reason}"),
    }
    assert!(
        matches!(pool.take(&key("alice"), 7), Take::Miss("none")),
        "taken once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_cap_the_least_recently_used_agent_is_stopped() {
    let w = World::new();
    let pool = pool(1, Duration::from_secs(60), 20);
    let a = w.agent("alice", 7).await;
    let (a_pid, a_held) = (a.live.pid().unwrap(), held(&a));
    pool.put(key("alice"), a);
    let b = w.agent("bob", 7).await;
    pool.put(key("bob"), b);
    assert_eq!(pool.len(), 1);
    until_gone(a_pid).await;
    let stop = CancellationToken::new();
    stop.cancel();
    // The shutdown waits for the eviction's clean-up too.
    pool.clone().run(stop).await.unwrap();
    released(&w, &a_held);
    assert!(matches!(pool.take(&key("alice"), 7), Take::Miss("none")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_agents_expire() {
    let w = World::new();
    let pool = pool(4, Duration::from_millis(200), 20);
    let stop = CancellationToken::new();
    let service = tokio::spawn(pool.clone().run(stop.clone()));
    let a = w.agent("alice", 7).await;
    let (pid, a_held) = (a.live.pid().unwrap(), held(&a));
    pool.put(key("alice"), a);
    until_gone(pid).await;
    assert!(pool.is_empty());
    stop.cancel();
    service.await.unwrap().unwrap();
    released(&w, &a_held);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changed_prompts_or_skills_and_old_agents_are_retired() {
    let w = World::new();
    let pool = pool(4, Duration::from_secs(60), 1);
    let a = w.agent("alice", 7).await;
    let pid = a.live.pid().unwrap();
    pool.put(key("alice"), a);
    assert!(matches!(pool.take(&key("alice"), 8), Take::Miss("changed")));
    until_gone(pid).await;

    // One turn is the limit here: after it the agent is not kept.
    let mut b = w.agent("bob", 7).await;
    let pid = b.live.pid().unwrap();
    let turn = TurnSpec {
        prompt: "hi".into(),
        images: Vec::new(),
        retry_prompt: None,
        terminate: CancellationToken::new(),
        shutdown: CancellationToken::new(),
        probe: Arc::new(|| false),
        first_sign_within: None,
    };
    assert_eq!(
        b.live.prompt(&turn).await,
        Outcome::NoResponse { retried: false }
    );
    pool.put(key("bob"), b);
    assert!(pool.is_empty());
    until_gone(pid).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_stops_every_agent_and_releases_its_session() {
    let w = World::new();
    let pool = pool(4, Duration::from_secs(60), 20);
    let stop = CancellationToken::new();
    let service = tokio::spawn(pool.clone().run(stop.clone()));
    let mut pids = Vec::new();
    let mut helds = Vec::new();
    for user in ["alice", "bob", "carol"] {
        let agent = w.agent(user, 7).await;
        pids.push(agent.live.pid().unwrap());
        helds.push(held(&agent));
        pool.put(key(user), agent);
    }
    assert_eq!(pool.len(), 3);
    stop.cancel();
    tokio::time::timeout(Duration::from_secs(5), service)
        .await
        .expect("stopped within the grace")
        .unwrap()
        .unwrap();
    for pid in pids {
        assert!(!alive(pid), "agent {pid} outlived the pool");
    }
    for h in &helds {
        released(&w, h);
    }
    // An agent handed back after the shutdown is stopped at once.
    let late = w.agent("dave", 7).await;
    let pid = late.live.pid().unwrap();
    pool.put(key("dave"), late);
    assert!(pool.is_empty());
    until_gone(pid).await;
}

/// An agent started ahead of a message takes a place only when one is free, never for a
/// conversation that has an agent, and is the first to go when the pool needs room — before
/// older agents that served a conversation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_started_ahead_take_only_free_places_and_go_first() {
    let w = World::new();
    let pool = pool(2, Duration::from_secs(60), 20);
    let alice = w.agent("alice", 7).await;
    let alice_pid = alice.live.pid().unwrap();
    pool.put(key("alice"), alice);
    assert!(
        pool.begin_ahead(&key("alice"), AheadOf::Typing).is_none(),
        "alice has an agent"
    );
    let ahead = pool
        .begin_ahead(&key("bob"), AheadOf::Typing)
        .expect("a free place");
    assert!(
        pool.begin_ahead(&key("bob"), AheadOf::Typing).is_none(),
        "one start at a time per conversation"
    );
    assert!(
        pool.begin_ahead(&key("carol"), AheadOf::Typing).is_none(),
        "the reserved place counts against the cap"
    );
    let mut bob = w.agent("bob", 7).await;
    bob.first = Some(Default::default());
    let bob_pid = bob.live.pid().unwrap();
    pool.put_ahead(ahead, bob);
    assert_eq!(pool.len(), 2);
    // A conversation's agent comes back: the unused one goes, not the older alice.
    let dave = w.agent("dave", 7).await;
    pool.put(key("dave"), dave);
    until_gone(bob_pid).await;
    assert!(alive(alice_pid));
    assert!(matches!(pool.take(&key("bob"), 7), Take::Miss("none")));
    match pool.take(&key("alice"), 7) {
        Take::Hit(agent) => agent.retire().await,
        Take::Miss(reason) => panic!("alice's agent went: {reason}"),
    }
    // A conversation being answered gets no agent for its typing (its own comes back), but
    // a successor when its agent was retired.
    let answering = pool.answering(&key("frank"));
    assert!(pool.begin_ahead(&key("frank"), AheadOf::Typing).is_none());
    drop(
        pool.begin_ahead(&key("frank"), AheadOf::Successor)
            .expect("a successor"),
    );
    drop(answering);
    drop(
        pool.begin_ahead(&key("frank"), AheadOf::Typing)
            .expect("answered no more"),
    );
    // A message waits for its conversation's agent being started ahead.
    let ahead = pool
        .begin_ahead(&key("erin"), AheadOf::Typing)
        .expect("a free place");
    let waiter = {
        let pool = pool.clone();
        tokio::spawn(
            async move { matches!(pool.take_waiting(&key("erin"), 7).await, Take::Hit(_)) },
        )
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!waiter.is_finished(), "the message waits for the start");
    let erin = w.agent("erin", 7).await;
    pool.put_ahead(ahead, erin);
    assert!(waiter.await.unwrap(), "and gets the agent started for it");
    let stop = CancellationToken::new();
    stop.cancel();
    pool.clone().run(stop).await.unwrap();
}
