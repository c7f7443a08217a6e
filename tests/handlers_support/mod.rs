//! Shared fixtures for the skill handler tests: the real Skill API router with the registry built
//! by `handlers::build_registry` from the repository's `skills/` manifests, a temp-file `Store`,
//! a Discord-like and a Misskey-like `FakePlatform`, session helpers and a request helper.
#![allow(dead_code)]

use air_friends::platform::Origin;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use air_friends::config::{MemoryConfig, RemindersConfig, SkillsConfig};
use air_friends::conversation::workspace::Workspaces;
use air_friends::handlers::{Clock, HandlerDeps, UserCommandRunner, build_registry};
use air_friends::platform::fake::FakePlatform;
use air_friends::platform::{IncomingMessage, PlatformAdapter, PlatformRegistry};
use air_friends::session::{RegisteredSession, SessionContext};
use air_friends::skill_api::{SkillApiMetrics, SkillApiSettings, SkillApiState, router};
use air_friends::skills::{LoadedSkills, load_skills};
use air_friends::store::Store;
use axum::Router;
use axum::body::Body;
use axum::http::{Request, header};
use prometheus_client::registry::Registry;
use serde_json::{Value, json};
use tower::ServiceExt;

#[path = "../skill_api_support/response.rs"]
mod response;
pub use response::SkillResponse;

/// The repository's skills, as shipped (with their manifest rate limits).
pub fn shipped_skills() -> LoadedSkills {
    static SKILLS: OnceLock<LoadedSkills> = OnceLock::new();
    SKILLS
        .get_or_init(|| {
            load_skills(&Path::new(env!("CARGO_MANIFEST_DIR")).join("skills")).expect("skills")
        })
        .clone()
}

/// The repository's skills with `rate_limit` removed from every manifest, so tests can make
/// many calls in a row (quota and doom-loop tests); everything else is as shipped.
pub fn unlimited_skills() -> LoadedSkills {
    static SKILLS: OnceLock<LoadedSkills> = OnceLock::new();
    SKILLS
        .get_or_init(|| {
            let dir = tempfile::tempdir().expect("tempdir");
            let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("skills");
            copy_tree(&src, dir.path());
            for entry in std::fs::read_dir(dir.path()).expect("read_dir") {
                let manifest = entry.expect("entry").path().join("manifest.json");
                let text = std::fs::read_to_string(&manifest).expect("manifest");
                let mut json: Value = serde_json::from_str(&text).expect("json");
                json.as_object_mut().expect("object").remove("rate_limit");
                std::fs::write(&manifest, serde_json::to_string_pretty(&json).expect("ser"))
                    .expect("write");
            }
            load_skills(dir.path()).expect("skills")
        })
        .clone()
}

/// The repository's skills copied to a temp dir, changed by `change`, then loaded.
pub fn modified_skills(change: impl FnOnce(&Path)) -> LoadedSkills {
    let dir = tempfile::tempdir().expect("tempdir");
    copy_tree(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("skills"),
        dir.path(),
    );
    change(dir.path());
    load_skills(dir.path()).expect("skills")
}

pub fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("read_dir") {
        let entry = entry.expect("entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("type").is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy");
        }
    }
}

/// Configuration knobs of a test app.
pub struct Options {
    pub skills: SkillsConfig,
    pub reminders: RemindersConfig,
    pub memory: MemoryConfig,
    pub loaded: LoadedSkills,
    pub clock: Clock,
    /// Meaning-based recall against this endpoint: (base URL, model, dimensions).
    pub embeddings: Option<(String, String, usize)>,
    /// Voice replies (send-voice) through the speech service at this base URL (no key).
    pub speech: Option<String>,
}

impl Default for Options {
    fn default() -> Self {
        let mut skills = SkillsConfig::default();
        skills.send_file.enabled = true;
        Self {
            skills,
            reminders: RemindersConfig::default(),
            memory: MemoryConfig::default(),
            loaded: unlimited_skills(),
            clock: Clock::system(),
            embeddings: None,
            speech: None,
        }
    }
}

pub struct App {
    pub state: SkillApiState,
    pub router: Router,
    pub store: Store,
    pub discord: Arc<FakePlatform>,
    pub misskey: Arc<FakePlatform>,
    pub loaded: LoadedSkills,
    pub workspaces: PathBuf,
    /// The embedding service, when [`Options::embeddings`] was set (no background job runs:
    /// tests call `step`).
    pub semantic: Option<air_friends::embeddings::Semantic>,
    _dir: tempfile::TempDir,
}

pub async fn app() -> App {
    app_with(Options::default()).await
}

pub async fn app_with(options: Options) -> App {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(&dir.path().join("test.db"))
        .await
        .expect("store");
    let discord = Arc::new(FakePlatform::discord());
    let misskey = Arc::new(FakePlatform::misskey());
    let platforms = PlatformRegistry::new()
        .with(discord.clone() as Arc<dyn PlatformAdapter>)
        .with(misskey.clone() as Arc<dyn PlatformAdapter>);
    let semantic = options.embeddings.as_ref().map(|(url, model, dims)| {
        let client = air_friends::embeddings::EmbeddingClient::new(
            url,
            None,
            model,
            *dims,
            std::time::Duration::from_secs(2),
        )
        .expect("embedding client");
        air_friends::embeddings::Semantic::new(client, store.clone(), 32)
    });
    store
        .set_embedding_queue(semantic.is_some())
        .await
        .expect("embedding queue");
    let speaker = options.speech.as_ref().map(|url| {
        let mut config = air_friends::config::Config::default();
        config.speech = Some(air_friends::config::SpeechConfig {
            base_url: url.clone(),
            max_chars: 200,
            ..Default::default()
        });
        air_friends::voice::Speaker::from_config(
            &config,
            &air_friends::config::ProcessEnv,
            Some(store.clone()),
            air_friends::voice::VoiceMetrics::unregistered(),
        )
        .expect("speaker")
        .expect("configured")
    });
    let deps = HandlerDeps {
        store: store.clone(),
        platforms,
        skills_config: options.skills,
        reminders_config: options.reminders,
        memory_config: options.memory,
        clock: options.clock,
        semantic: semantic.clone(),
        speaker,
    };
    let registry = build_registry(deps, &options.loaded).expect("registry");
    let state = SkillApiState::new(
        SkillApiSettings::default(),
        registry,
        SkillApiMetrics::new(&mut Registry::default()),
    );
    let workspaces = dir.path().join("workspaces");
    App {
        router: router(state.clone()),
        state,
        store,
        discord,
        misskey,
        loaded: options.loaded,
        workspaces,
        semantic,
        _dir: dir,
    }
}

/// A registered session plus what the test needs to check its effects.
pub struct Session {
    pub registered: RegisteredSession,
    pub context: SessionContext,
}

impl Session {
    pub fn trigger(&self) -> String {
        self.context
            .trigger_message_id
            .as_ref()
            .expect("trigger")
            .to_string()
    }

    pub fn terminated(&self) -> bool {
        self.registered.termination.is_requested()
    }
}

impl App {
    /// A session answering `incoming` (a message pushed into a fake), with a workspace dir.
    pub fn session_for(&self, incoming: &IncomingMessage) -> Session {
        let workspace = self
            .workspaces
            .join(incoming.platform.as_str())
            .join(incoming.user_id.as_str());
        std::fs::create_dir_all(&workspace).expect("workspace");
        let context = SessionContext {
            place: Default::default(),
            origin: Origin {
                platform: incoming.platform,
                channel_id: incoming.channel_id.clone(),
                guild_id: incoming.guild_id.clone(),
                user_id: incoming.user_id.clone(),
                username: incoming.username.clone(),
                is_dm: incoming.is_dm,
            },
            purpose: Default::default(),
            trigger_message_id: Some(incoming.message_id.clone()),
            workspace,
        };
        let registered = self
            .state
            .sessions()
            .register(context.clone())
            .expect("register");
        Session {
            registered,
            context,
        }
    }

    /// A Discord guild-channel session of `user` (public context).
    pub fn guild_session(&self, user: &str) -> Session {
        let incoming = self.discord.push_incoming("guild-chan", user, "hello bot");
        self.session_for(&incoming)
    }

    /// A Discord DM session of `user`.
    pub fn dm_session(&self, user: &str) -> Session {
        self.discord.add_user(user, user, user);
        let incoming = self.discord.push_incoming_dm(user, "hello bot");
        self.session_for(&incoming)
    }

    /// A session without a trigger message (e.g. started by the system).
    pub fn triggerless_session(&self, user: &str, is_dm: bool) -> Session {
        self.discord.add_user(user, user, user);
        let mut incoming = if is_dm {
            self.discord.push_incoming_dm(user, "x")
        } else {
            self.discord.push_incoming("guild-chan", user, "x")
        };
        incoming.message_id = String::new().into();
        let mut context = self.session_for(&incoming).context;
        context.trigger_message_id = None;
        self.register(context)
    }

    /// Registers a session with exactly this context.
    pub fn register(&self, context: SessionContext) -> Session {
        let registered = self
            .state
            .sessions()
            .register(context.clone())
            .expect("register");
        Session {
            registered,
            context,
        }
    }

    pub fn user_commands(&self) -> UserCommandRunner {
        UserCommandRunner::new(
            self.state.clone(),
            &self.loaded,
            Workspaces::new(&self.workspaces),
        )
    }

    /// Saves a memory through memory-save in `session`; returns its id.
    pub async fn save_memory(&self, session: &Session, content: &str, visibility: &str) -> String {
        let r = self
            .call(
                session,
                "memory-save",
                json!({"content": content, "visibility": visibility}),
            )
            .await;
        r.data()["id"].as_str().expect("id").to_owned()
    }

    /// POSTs a skill call with the session's own token and reads the whole response (so a
    /// pending termination fires).
    pub async fn call(&self, session: &Session, skill: &str, params: Value) -> SkillResponse {
        let body = json!({
            "sessionId": session.registered.session_id.as_str(),
            "parameters": params,
        });
        let request = Request::builder()
            .method("POST")
            .uri(format!("/api/skill/{skill}"))
            .header(
                header::AUTHORIZATION,
                format!("Bearer {}", session.registered.caller_token.expose_secret()),
            )
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(body.to_string()))
            .expect("request");
        let response = self
            .router
            .clone()
            .oneshot(request)
            .await
            .expect("infallible");
        SkillResponse::read(response).await
    }
}
