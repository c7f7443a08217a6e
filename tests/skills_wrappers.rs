//! The 15 skill wrappers end to end, as the agent's bash tool runs them.
//!
//! Each test starts the **real Skill API** (`skill_api::serve` on `127.0.0.1:0`) with the real
//! handler registry built from the repository's `skills/` manifests (shipped rate limits, send-file
//! enabled), a Discord-like `FakePlatform` and a temp-file `Store`. It registers a guild or DM
//! session for user `alice`, creates her workspace and the session's staging folder
//! `tmp/<sessionId>/`, and runs `sh skills/<name>/scripts/<name> …` with the environment the
//! daemon gives its agent (`AIR_FRIENDS_BIN` = this build's binary, `SESSION_ID`,
//! `SKILL_API_TOKEN`, `SKILL_API_URL`, `AGENT_WORKSPACE`, `TMPDIR`, `AIR_FRIENDS_SKILLS_DIR`;
//! cwd = the workspace; nothing else inherited but `PATH`).
//!
//! Per skill: one happy path (payload files written first; exit 0, the JSON on stdout with the
//! `data` fields, the effect on the fake platform or the store, the payload file gone)
//! and at least one error path (the documented code and exit status, the JSON error on stderr;
//! client-side errors also carry a corrected invocation of the skill's script). Calls within a
//! session are ordered so the per-session quotas make sense.

mod common;
mod handlers_support;

use std::path::{Path, PathBuf};
use std::process::Stdio;

use air_friends::platform::fake::{Call, Op};
use air_friends::platform::{FileSource, ReactionEmoji};
use air_friends::skill_api::serve;
use air_friends::store::{
    Importance, NewMemory, NewReminder, ReminderState, Scope, Visibility, WorkspaceKey,
};
use chrono::{DateTime, Duration, SecondsFormat, Utc};
use handlers_support::{App, Options, Session, app_with, shipped_skills};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// The user every session answers.
const USER: &str = "alice";

/// Every skill this file covers; must be exactly the packages under `skills/`.
const COVERED: [&str; 15] = [
    "cancel-reminder",
    "edit-reply",
    "fetch-context",
    "get-message",
    "list-reminders",
    "memory-export",
    "memory-patch",
    "memory-save",
    "memory-search",
    "memory-stats",
    "react-message",
    "send-file",
    "send-reply",
    "send-voice",
    "set-reminder",
];

/// Text full of things a shell would expand or mangle; it must arrive byte for byte.
const SHELLY: &str = "It's $HOME and ${USER}, $(whoami) and `id`; \"quotes\" | > < & 日本語";

// ----- harness --------------------------------------------------------------------------------

/// A running Skill API with the real handlers, and how to reach it.
struct Harness {
    app: App,
    url: String,
    stop: Option<oneshot::Sender<()>>,
    server: Option<JoinHandle<std::io::Result<()>>>,
}

impl Harness {
    async fn start() -> Harness {
        Self::start_with(None).await
    }

    /// The harness with send-voice speaking through the speech service at `speech`.
    async fn start_with(speech: Option<String>) -> Harness {
        let mut options = Options {
            loaded: shipped_skills(),
            speech,
            ..Options::default()
        };
        options.skills.send_file.enabled = true;
        let app = app_with(options).await;
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let (stop, stopped) = oneshot::channel::<()>();
        let server = tokio::spawn(serve(listener, app.state.clone(), async move {
            let _ = stopped.await;
        }));
        Harness {
            app,
            url,
            stop: Some(stop),
            server: Some(server),
        }
    }

    /// Stops the server and waits for it (and every detached skill execution) to finish.
    async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(server) = self.server.take() {
            server.await.expect("join").expect("serve");
        }
    }

    /// A guild-channel session of `alice` answering a fresh message of hers.
    fn guild(&self) -> Session {
        staged(self.app.guild_session(USER))
    }

    /// A DM session of `alice` answering a fresh DM of hers.
    fn dm(&self) -> Session {
        staged(self.app.dm_session(USER))
    }

    fn key(&self) -> WorkspaceKey {
        WorkspaceKey::new("discord", USER).expect("key")
    }

    /// Saves a memory of `alice` directly in the store; returns its id.
    async fn memory(
        &self,
        content: &str,
        visibility: Visibility,
        importance: Importance,
    ) -> String {
        self.app
            .store
            .save_memory(NewMemory {
                workspace: self.key(),
                content: content.into(),
                visibility,
                importance,
            })
            .await
            .expect("save memory")
            .id
    }

    /// Creates a pending reminder of `user` directly in the store; returns its id.
    async fn reminder(&self, user: &str, message: &str, days: i64) -> String {
        self.app
            .store
            .create_reminder(
                NewReminder {
                    workspace: WorkspaceKey::new("discord", user).expect("key"),
                    message: message.into(),
                    scheduled_at: whole_seconds(Utc::now() + Duration::days(days)),
                },
                20,
            )
            .await
            .expect("create reminder")
            .id
    }

    /// Runs `sh skills/<skill>/scripts/<skill> args…` as the session's agent would.
    async fn run(&self, session: &Session, skill: &str, args: &[&str]) -> Run {
        let mut command = self.agent_shell(session);
        command.arg(script(skill)).args(args);
        Run::collect(command, format!("{skill} {args:?}"), skill).await
    }

    /// Follows the corrected example of a client error the way the agent would: writes each
    /// `(file name, text)` payload to `$TMPDIR/$SESSION_ID/<file name>` (the example must name
    /// that path), then runs the example's command line with `sh -c`, so the shell expands
    /// `$TMPDIR/$SESSION_ID`; `skills/…` is resolved against the skills root, as SKILL.md says.
    async fn follow_correction(
        &self,
        session: &Session,
        failed: &Run,
        payloads: &[(&str, &str)],
    ) -> Run {
        let message = failed.message();
        let (_, example) = message
            .rsplit_once("Corrected example: ")
            .unwrap_or_else(|| panic!("{}: no corrected example: {message}", failed.what));
        let invocation = format!("skills/{0}/scripts/{0}", failed.skill);
        assert!(
            example.starts_with(&invocation),
            "{}: the example runs another script: {example}",
            failed.what
        );
        for (name, text) in payloads {
            assert!(
                example.contains(&format!("\"$TMPDIR/$SESSION_ID/{name}\"")),
                "{}: the example does not name {name}: {example}",
                failed.what
            );
            payload(session, name, text);
        }
        let line = format!("'{}'/{example}", env!("CARGO_MANIFEST_DIR"));
        let mut command = self.agent_shell(session);
        command.arg("-c").arg(&line);
        Run::collect(command, format!("sh -c {line:?}"), &failed.skill).await
    }

    /// `sh` with the environment and working directory of the session's agent.
    fn agent_shell(&self, session: &Session) -> tokio::process::Command {
        let workspace = &session.context.workspace;
        let mut command = tokio::process::Command::new("sh");
        command
            .current_dir(workspace)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", "/nonexistent/agent-home")
            .env("AIR_FRIENDS_BIN", env!("CARGO_BIN_EXE_air-friends"))
            .env("AIR_FRIENDS_SKILLS_DIR", skills_dir())
            .env("SESSION_ID", session.registered.session_id.as_str())
            .env(
                "SKILL_API_TOKEN",
                session.registered.caller_token.expose_secret(),
            )
            .env("SKILL_API_URL", &self.url)
            .env("AGENT_WORKSPACE", workspace)
            .env("TMPDIR", workspace.join("tmp"))
            .stdin(Stdio::null());
        command
    }
}

/// Creates the session's staging folder `{workspace}/tmp/{sessionId}/`, as the daemon does.
fn staged(session: Session) -> Session {
    std::fs::create_dir_all(stage_dir(&session)).expect("staging dir");
    session
}

fn stage_dir(session: &Session) -> PathBuf {
    session
        .context
        .workspace
        .join("tmp")
        .join(session.registered.session_id.as_str())
}

/// Writes a payload file the way the agent's file tool does: `$TMPDIR/$SESSION_ID/<name>`.
/// Returns that path (absolute, as the shell expands it).
fn payload(session: &Session, name: &str, text: &str) -> String {
    let path = stage_dir(session).join(name);
    std::fs::write(&path, text).expect("write payload");
    path.display().to_string()
}

fn skills_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("skills")
}

fn script(skill: &str) -> PathBuf {
    skills_dir().join(skill).join("scripts").join(skill)
}

fn whole_seconds(at: DateTime<Utc>) -> DateTime<Utc> {
    DateTime::from_timestamp(at.timestamp(), 0).expect("timestamp")
}

fn iso(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// The outcome of one wrapper run.
struct Run {
    what: String,
    skill: String,
    code: i32,
    stdout: String,
    stderr: String,
}

impl Run {
    async fn collect(mut command: tokio::process::Command, what: String, skill: &str) -> Run {
        let out = command.output().await.expect("run sh");
        Run {
            what,
            skill: skill.to_owned(),
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// Asserts success (exit 0, nothing on stderr, `{"success": true, "data": …}` on stdout) and
    /// returns `data`.
    fn ok(&self) -> Value {
        assert_eq!(
            self.code, 0,
            "{}: exit {}\nstderr: {}",
            self.what, self.code, self.stderr
        );
        assert_eq!(self.stderr, "", "{}", self.what);
        let body: Value = serde_json::from_str(self.stdout.trim())
            .unwrap_or_else(|e| panic!("{}: stdout is not JSON ({e}): {}", self.what, self.stdout));
        assert_eq!(body["success"], true, "{}: {body}", self.what);
        body["data"].clone()
    }

    /// Asserts a failure with `code` and `exit` (nothing on stdout, one JSON error object on
    /// stderr with a non-empty message) and returns the error object.
    fn err(&self, exit: i32, code: &str) -> Value {
        assert_eq!(
            self.code, exit,
            "{}: exit {}\nstdout: {}\nstderr: {}",
            self.what, self.code, self.stdout, self.stderr
        );
        assert_eq!(self.stdout, "", "{}", self.what);
        let body: Value = serde_json::from_str(self.stderr.trim())
            .unwrap_or_else(|e| panic!("{}: stderr is not JSON ({e}): {}", self.what, self.stderr));
        assert_eq!(body["success"], false, "{}: {body}", self.what);
        assert_eq!(body["code"], code, "{}: {body}", self.what);
        assert!(
            body["error"].as_str().is_some_and(|m| !m.trim().is_empty()),
            "{}: no error message: {body}",
            self.what
        );
        body
    }

    /// A client-side (usage) error: as [`err`](Self::err), and the message contains a corrected
    /// invocation of this skill's script. Returns the message.
    fn client_err(&self, exit: i32, code: &str) -> String {
        let body = self.err(exit, code);
        let message = body["error"].as_str().unwrap_or_default().to_owned();
        let invocation = format!("skills/{0}/scripts/{0}", self.skill);
        assert!(
            message.contains(&invocation),
            "{}: the message has no corrected invocation ({invocation}): {message}",
            self.what
        );
        assert!(
            !message.contains("/nonexistent/agent-home"),
            "{}: shell-expanded text echoed: {message}",
            self.what
        );
        message
    }

    /// The `details` of an `INVALID_PARAMS` error, as `(path, problem)` pairs.
    fn details(&self) -> Vec<(String, String)> {
        let body: Value = serde_json::from_str(self.stderr.trim()).expect("stderr JSON");
        body["details"]
            .as_array()
            .unwrap_or_else(|| panic!("{}: no details: {body}", self.what))
            .iter()
            .map(|d| {
                (
                    d["path"].as_str().unwrap_or_default().to_owned(),
                    d["problem"].as_str().unwrap_or_default().to_owned(),
                )
            })
            .collect()
    }

    fn message(&self) -> String {
        let body: Value = serde_json::from_str(self.stderr.trim()).expect("stderr JSON");
        body["error"].as_str().unwrap_or_default().to_owned()
    }
}

fn assert_consumed(path: &str) {
    assert!(
        !Path::new(path).exists(),
        "the payload file {path} is deleted after a successful call"
    );
}

fn assert_kept(path: &str) {
    assert!(
        Path::new(path).exists(),
        "the payload file {path} is kept after an error, for a corrected retry"
    );
}

fn str_of<'a>(v: &'a Value, key: &str) -> &'a str {
    v[key]
        .as_str()
        .unwrap_or_else(|| panic!("{key} is not a string in {v}"))
}

// ----- coverage -------------------------------------------------------------------------------

#[test]
fn every_skill_package_has_wrapper_tests_here() {
    let mut packages: Vec<String> = std::fs::read_dir(skills_dir())
        .expect("skills dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    packages.sort();
    assert_eq!(packages, COVERED, "add wrapper tests for new skills");
    assert_eq!(air_friends::handlers::BUILTIN_SKILLS, COVERED);
    for skill in COVERED {
        let text = std::fs::read_to_string(script(skill)).expect("script");
        assert!(text.starts_with("#!/bin/sh"), "{skill}: POSIX sh script");
        assert!(
            text.contains(&format!(
                "exec \"${{AIR_FRIENDS_BIN:-air-friends}}\" skill {skill} \"$@\""
            )),
            "{skill}: the wrapper execs the client for its own skill"
        );
    }
}

// ----- memory ---------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_save() {
    let h = Harness::start().await;
    let guild = h.guild();

    // Happy: a public, high-importance memory in a guild channel.
    let text = format!("Alice's favourite cake is strawberry. {SHELLY}\n");
    let file = payload(&guild, "memory.md", &text);
    let run = h
        .run(
            &guild,
            "memory-save",
            &["--content-file", &file, "--importance", "high"],
        )
        .await;
    let data = run.ok();
    let id = str_of(&data, "id");
    assert!(id.starts_with("mem_"), "{data}");
    assert_eq!(data["content"], text.trim());
    assert_eq!(data["visibility"], "public");
    assert_eq!(data["importance"], "high");
    assert!(
        DateTime::parse_from_rfc3339(str_of(&data, "createdAt")).is_ok(),
        "{data}"
    );
    assert_consumed(&file);
    let stored = h
        .app
        .store
        .get_memory(&h.key(), id, Scope::PublicOnly)
        .await
        .expect("get")
        .expect("saved");
    assert_eq!(stored.content, text.trim());
    assert_eq!(stored.importance, Importance::High);
    assert!(stored.enabled);

    // Error: a private memory outside a DM is 403 FORBIDDEN_CONTEXT (exit 1); nothing is saved.
    let file = payload(&guild, "secret.md", "Alice is afraid of spiders.");
    let run = h
        .run(
            &guild,
            "memory-save",
            &["--content-file", &file, "--visibility", "private"],
        )
        .await;
    run.err(1, "FORBIDDEN_CONTEXT");
    assert!(
        run.message().contains("direct message"),
        "{}",
        run.message()
    );
    assert_kept(&file);
    let stats = h
        .app
        .store
        .memory_stats(&h.key(), Scope::IncludePrivate)
        .await
        .expect("stats");
    assert_eq!(stats.summary.total, 1, "only the public memory exists");

    // The same private memory is fine in a DM.
    let dm = h.dm();
    let file = payload(&dm, "secret.md", "Alice is afraid of spiders.");
    let data = h
        .run(
            &dm,
            "memory-save",
            &["--content-file", &file, "--visibility", "private"],
        )
        .await
        .ok();
    assert_eq!(data["visibility"], "private");
    assert_consumed(&file);
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_search() {
    let h = Harness::start().await;
    let public = h
        .memory(
            "Alice's cat is called Mochi",
            Visibility::Public,
            Importance::Normal,
        )
        .await;
    let private = h
        .memory(
            "Alice secretly wants a second cat",
            Visibility::Private,
            Importance::High,
        )
        .await;
    h.memory(
        "Alice plays the cello",
        Visibility::Public,
        Importance::Normal,
    )
    .await;

    // Happy (guild): only public, enabled memories are found.
    let guild = h.guild();
    let file = payload(&guild, "query.md", "CAT mochi");
    let data = h
        .run(
            &guild,
            "memory-search",
            &["--query-file", &file, "--limit", "5"],
        )
        .await
        .ok();
    assert_eq!(data["count"], 1, "{data}");
    let hit = &data["memories"][0];
    assert_eq!(hit["id"], public.as_str());
    assert_eq!(hit["content"], "Alice's cat is called Mochi");
    assert_eq!(hit["visibility"], "public");
    assert_eq!(hit["importance"], "normal");
    assert!(
        hit["score"].is_number() && hit["createdAt"].is_string(),
        "{hit}"
    );
    assert_consumed(&file);

    // In a DM the private memory is visible too.
    let dm = h.dm();
    let file = payload(&dm, "query.md", "cat");
    let data = h
        .run(&dm, "memory-search", &["--query-file", &file])
        .await
        .ok();
    let mut ids: Vec<&str> = data["memories"]
        .as_array()
        .expect("memories")
        .iter()
        .map(|m| m["id"].as_str().expect("id"))
        .collect();
    ids.sort_unstable();
    let mut expected = vec![public.as_str(), private.as_str()];
    expected.sort_unstable();
    assert_eq!(ids, expected);
    assert_eq!(data["count"], 2);

    // Error: the legacy free-text flag is refused by the client (exit 2).
    let run = h
        .run(&guild, "memory-search", &["--query", "cat $HOME"])
        .await;
    let message = run.client_err(2, "SKILL_LEGACY_FLAG");
    assert!(message.contains("--query-file"), "{message}");
    // ... and its corrected example works once the payload file is written.
    let data = h
        .follow_correction(&guild, &run, &[("query.md", "mochi")])
        .await
        .ok();
    assert_eq!(data["count"], 1, "{data}");
    assert_eq!(data["memories"][0]["id"], public.as_str());
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_patch() {
    let h = Harness::start().await;
    let id = h
        .memory("Alice likes jazz", Visibility::Public, Importance::Normal)
        .await;
    let other = h
        .memory(
            "Alice went to a jazz bar",
            Visibility::Public,
            Importance::Normal,
        )
        .await;
    let guild = h.guild();

    // Error first: no change at all is 400 INVALID_PARAMS (the memory stays as it is).
    let run = h.run(&guild, "memory-patch", &["--memory-id", &id]).await;
    run.err(1, "INVALID_PARAMS");
    assert!(run.message().len() > 10);
    assert!(
        run.details()
            .iter()
            .any(|(_, problem)| problem.contains("--enabled")),
        "{:?}",
        run.details()
    );

    // Happy: disable, raise importance, relate.
    let data = h
        .run(
            &guild,
            "memory-patch",
            &[
                "--memory-id",
                &id,
                "--no-enabled",
                "--importance",
                "high",
                "--related-to",
                &other,
            ],
        )
        .await
        .ok();
    assert!(str_of(&data, "patchId").starts_with("pat_"), "{data}");
    assert_eq!(data["memoryId"], id.as_str());
    assert_eq!(
        data["changes"],
        json!({"enabled": false, "importance": "high", "relatedTo": [other]})
    );
    let stored = h
        .app
        .store
        .get_memory(&h.key(), &id, Scope::PublicOnly)
        .await
        .expect("get")
        .expect("memory");
    assert!(!stored.enabled);
    assert_eq!(stored.importance, Importance::High);
    assert_eq!(stored.related_to, [other]);
    assert_eq!(stored.content, "Alice likes jazz", "content is immutable");
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_stats() {
    let h = Harness::start().await;
    h.memory("public high", Visibility::Public, Importance::High)
        .await;
    h.memory("public normal", Visibility::Public, Importance::Normal)
        .await;
    h.memory("private normal", Visibility::Private, Importance::Normal)
        .await;

    // Happy (guild): the private block is withheld.
    let guild = h.guild();
    let data = h.run(&guild, "memory-stats", &[]).await.ok();
    assert_eq!(
        data["public"],
        json!({"total": 2, "enabled": 2, "disabled": 0, "highImportance": 1, "normalImportance": 1})
    );
    assert_eq!(data["private"], Value::Null);
    assert_eq!(data["summary"]["total"], 2);

    // In a DM it is included.
    let dm = h.dm();
    let data = h.run(&dm, "memory-stats", &[]).await.ok();
    assert_eq!(data["private"]["total"], 1, "{data}");
    assert_eq!(data["summary"]["total"], 3, "{data}");

    // Error: the skill has no flags.
    let run = h.run(&guild, "memory-stats", &["--verbose"]).await;
    let message = run.client_err(2, "SKILL_UNKNOWN_FLAG");
    assert!(message.contains("takes no flags"), "{message}");
    let data = h.follow_correction(&guild, &run, &[]).await.ok();
    assert_eq!(data["public"]["total"], 2, "{data}");
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_export() {
    let h = Harness::start().await;
    h.memory("Alice's cat is Mochi", Visibility::Public, Importance::High)
        .await;
    h.memory(
        "Alice's diary code",
        Visibility::Private,
        Importance::Normal,
    )
    .await;
    let guild = h.guild();

    // Error first: a format that does not exist is refused by the client (exit 2), nothing sent.
    let run = h.run(&guild, "memory-export", &["--format", "csv"]).await;
    let message = run.client_err(2, "SKILL_USAGE");
    assert!(message.contains("markdown"), "{message}");
    assert_eq!(h.app.discord.call_count(Op::SendDmFiles), 0);
    // The corrected example (Markdown) works.
    let data = h.follow_correction(&guild, &run, &[]).await.ok();
    assert_eq!(data["format"], "markdown");
    assert_eq!(data["delivered"], true);
    assert_eq!(
        h.app.discord.take_calls().len(),
        1,
        "one DM delivery, nothing else"
    );
    let markdown = h.app.discord.file_deliveries();

    // Happy: asked in public, delivered by DM, public memories only.
    let data = h
        .run(&guild, "memory-export", &["--format", "json"])
        .await
        .ok();
    assert_eq!(data["delivered"], true);
    assert_eq!(data["count"], 1);
    assert_eq!(data["format"], "json");
    let calls = h.app.discord.calls_of(Op::SendDmFiles);
    let [
        Call::SendDmFiles {
            user_id,
            files,
            caption,
        },
    ] = calls.as_slice()
    else {
        panic!("one DM file delivery expected: {calls:?}");
    };
    assert_eq!(user_id, USER);
    assert!(
        caption
            .as_deref()
            .is_some_and(|c| c.contains("public only"))
    );
    let [file] = files.as_slice() else {
        panic!("one export file: {files:?}")
    };
    let FileSource::Bytes(bytes) = &file.source else {
        panic!("export is generated in memory")
    };
    let content = String::from_utf8_lossy(bytes);
    assert!(content.contains("Alice's cat is Mochi"), "{content}");
    assert!(!content.contains("diary"), "no private memory: {content}");
    let delivered = h.app.discord.file_deliveries();
    assert_eq!(delivered.len(), 2);
    assert_eq!(delivered[..1], markdown[..]);
    assert_eq!(delivered[1].channel_id, h.app.discord.dm_channel_id(USER));
    assert_eq!(data["messageId"], delivered[1].message_ids[0].as_str());
    h.shutdown().await;
}

// ----- replies --------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_reply() {
    let h = Harness::start().await;
    let guild = h.guild();

    // Error first: no payload flag (exit 2); it does not use up the one reply of the session.
    let run = h.run(&guild, "send-reply", &[]).await;
    let message = run.client_err(2, "SKILL_MISSING_PAYLOAD");
    assert!(message.contains("--message-file"), "{message}");

    // Happy, by following the corrected example: tags stripped, literal \n unescaped,
    // shell-looking text untouched, threaded to the trigger.
    let text = format!("<reply>Hello!\\n{SHELLY}</reply>");
    let data = h
        .follow_correction(&guild, &run, &[("message.md", &text)])
        .await
        .ok();
    let file = stage_dir(&guild).join("message.md").display().to_string();
    let id = str_of(&data, "messageId");
    assert_eq!(data["messageIds"], json!([id]));
    assert!(
        DateTime::parse_from_rfc3339(str_of(&data, "timestamp")).is_ok(),
        "{data}"
    );
    assert_consumed(&file);
    let sent = h.app.discord.sent();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].message_id, id);
    assert_eq!(sent[0].channel_id, "guild-chan");
    assert_eq!(sent[0].text, format!("Hello!\n{SHELLY}"));
    assert_eq!(sent[0].reply_to, Some(guild.trigger()));

    // A second reply in the same session is 429 QUOTA_EXCEEDED pointing to edit-reply.
    let file = payload(&guild, "again.md", "one more thing");
    let run = h
        .run(&guild, "send-reply", &["--message-file", &file])
        .await;
    run.err(1, "QUOTA_EXCEEDED");
    assert!(
        run.message()
            .contains(&format!("edit-reply --message-id {id}")),
        "{}",
        run.message()
    );
    assert_kept(&file);
    assert_eq!(h.app.discord.sent().len(), 1);
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edit_reply() {
    let h = Harness::start().await;
    let guild = h.guild();
    let file = payload(&guild, "reply.md", "The answer is 41.");
    let reply = h
        .run(&guild, "send-reply", &["--message-file", &file])
        .await
        .ok();
    let reply_id = str_of(&reply, "messageId").to_owned();

    // Error: the user's own message was not sent by this session: 404 NOT_FOUND (edit 1 of 2).
    let file = payload(&guild, "edit.md", "hijacked");
    let run = h
        .run(
            &guild,
            "edit-reply",
            &["--message-id", &guild.trigger(), "--message-file", &file],
        )
        .await;
    run.err(1, "NOT_FOUND");
    assert_kept(&file);
    assert_eq!(h.app.discord.call_count(Op::EditMessage), 0);

    // Happy: the reply is edited in place (edit 2 of 2).
    let file = payload(&guild, "edit.md", "<reply>The answer is 42.</reply>");
    let data = h
        .run(
            &guild,
            "edit-reply",
            &["--message-id", &reply_id, "--message-file", &file],
        )
        .await
        .ok();
    assert_eq!(data["messageId"], reply_id.as_str());
    assert_eq!(data["previousMessageId"], reply_id.as_str());
    assert_consumed(&file);
    let edits = h.app.discord.calls_of(Op::EditMessage);
    assert!(
        matches!(edits.as_slice(), [Call::EditMessage { message_id, text, .. }]
            if *message_id == reply_id && text == "The answer is 42."),
        "{edits:?}"
    );
    let history = h.app.discord.history("guild-chan");
    let edited = history
        .iter()
        .find(|m| m.message_id == reply_id)
        .expect("reply in history");
    assert_eq!(edited.content, "The answer is 42.");
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_message() {
    let h = Harness::start().await;
    let guild = h.guild();
    let file = payload(&guild, "reply.md", "Noted: tea at five.");
    let reply = h
        .run(&guild, "send-reply", &["--message-file", &file])
        .await
        .ok();

    // Happy: without --message-id it reads the session's last reply.
    let data = h.run(&guild, "get-message", &[]).await.ok();
    assert_eq!(data["messageId"], reply["messageId"]);
    assert_eq!(data["content"], "Noted: tea at five.");
    assert_eq!(data["userId"], "bot");
    assert_eq!(data["isBot"], true);
    assert!(data["username"].is_string() && data["timestamp"].is_string());

    // With an id: the user's trigger message.
    let data = h
        .run(&guild, "get-message", &["--message-id", &guild.trigger()])
        .await
        .ok();
    assert_eq!(data["content"], "hello bot");
    assert_eq!(data["userId"], USER);
    assert_eq!(data["isBot"], false);

    // Error: an id that is not in the conversation is 404 NOT_FOUND.
    let run = h
        .run(&guild, "get-message", &["--message-id", "no-such-message"])
        .await;
    run.err(1, "NOT_FOUND");
    assert!(
        run.message().contains("no-such-message"),
        "{}",
        run.message()
    );
    h.shutdown().await;
}

// ----- files, context, reactions ----------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_file() {
    let h = Harness::start().await;
    let guild = h.guild();
    let ws = &guild.context.workspace;
    std::fs::create_dir_all(ws.join("out")).expect("mkdir");
    std::fs::write(ws.join("out/chart.png"), b"\x89PNG fake chart").expect("file");
    let outside = ws.parent().expect("parent").join("secret.txt");
    std::fs::write(&outside, "another user's secret").expect("secret");

    // Error first (a refused call does not use up the one file send): traversal out of the
    // workspace is 400 INVALID_PARAMS pointing at the entry; nothing is read or sent.
    let run = h
        .run(&guild, "send-file", &["--file-paths", "../secret.txt"])
        .await;
    run.err(1, "INVALID_PARAMS");
    assert_eq!(
        run.details().first().map(|(path, _)| path.as_str()),
        Some("/filePaths/0"),
        "{:?}",
        run.details()
    );
    assert!(run.message().len() > 10);
    assert_eq!(h.app.discord.call_count(Op::SendFiles), 0);

    // Happy: one message with the file and the caption, threaded to the trigger.
    let caption = payload(&guild, "caption.md", "Here is your chart $HOME");
    let data = h
        .run(
            &guild,
            "send-file",
            &["--file-paths", "out/chart.png", "--caption-file", &caption],
        )
        .await
        .ok();
    assert_eq!(data["filesCount"], 1);
    let id = str_of(&data, "messageId");
    assert_eq!(data["messageIds"], json!([id]));
    assert!(str_of(&data, "nextAction").contains("send-reply"), "{data}");
    assert_consumed(&caption);
    let delivered = h.app.discord.file_deliveries();
    assert_eq!(delivered.len(), 1);
    assert_eq!(delivered[0].channel_id, "guild-chan");
    assert_eq!(delivered[0].filenames, ["chart.png"]);
    assert_eq!(
        delivered[0].caption.as_deref(),
        Some("Here is your chart $HOME")
    );
    assert_eq!(delivered[0].reply_to, Some(guild.trigger()));
    assert_eq!(delivered[0].message_ids, [id]);
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_voice() {
    use common::fake_speech::{Answer, FakeSpeech};
    let speech = FakeSpeech::start(Answer::Text(String::new())).await;
    let h = Harness::start_with(Some(speech.base_url.clone())).await;
    let guild = h.guild();

    // Error first: no payload flag (exit 2); the reply of the session is not used up.
    let run = h.run(&guild, "send-voice", &[]).await;
    let message = run.client_err(2, "SKILL_MISSING_PAYLOAD");
    assert!(message.contains("--text-file"), "{message}");

    // Happy, by following the corrected example: the text reaches the speech service byte for
    // byte, and one voice file goes out threaded to the trigger.
    let text = format!("See you soon. {SHELLY}");
    let data = h
        .follow_correction(&guild, &run, &[("text.md", &text)])
        .await
        .ok();
    let file = stage_dir(&guild).join("text.md").display().to_string();
    assert_consumed(&file);
    assert!(
        data["durationSecs"].as_f64().is_some_and(|d| d > 0.0),
        "{data}"
    );
    assert_eq!(speech.speech_requests()[0].1["input"], text.as_str());
    let delivered = h.app.discord.file_deliveries();
    assert_eq!(delivered.len(), 1);
    assert_eq!(delivered[0].filenames, ["voice-message.ogg"]);
    assert_eq!(delivered[0].reply_to, Some(guild.trigger()));
    assert_eq!(delivered[0].message_ids, [str_of(&data, "messageId")]);

    // The one reply is used: a second voice reply, or a text one, is 429 QUOTA_EXCEEDED.
    let file = payload(&guild, "again.md", "one more thing");
    let run = h.run(&guild, "send-voice", &["--text-file", &file]).await;
    run.err(1, "QUOTA_EXCEEDED");
    assert_kept(&file);
    let run = h
        .run(&guild, "send-reply", &["--message-file", &file])
        .await;
    run.err(1, "QUOTA_EXCEEDED");
    assert!(h.app.discord.sent().is_empty());
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fetch_context() {
    let h = Harness::start().await;
    h.app
        .discord
        .push_user_message("guild-chan", "bob", "anyone up for ramen tonight?");
    h.app
        .discord
        .push_user_message("guild-chan", "carol", "I'd rather have sushi");
    let guild = h.guild();

    // Happy: the recent messages, oldest first, ending with the trigger.
    let data = h
        .run(
            &guild,
            "fetch-context",
            &["--type", "recent_messages", "--limit", "3"],
        )
        .await
        .ok();
    let contents: Vec<&str> = data["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .map(|m| m["content"].as_str().expect("content"))
        .collect();
    assert_eq!(
        contents,
        [
            "anyone up for ramen tonight?",
            "I'd rather have sushi",
            "hello bot"
        ]
    );
    let last = &data["messages"][2];
    assert_eq!(last["messageId"], guild.trigger().as_str());
    assert_eq!(last["userId"], USER);
    assert_eq!(last["isBot"], false);
    assert!(last["username"].is_string() && last["timestamp"].is_string());

    // Happy: a keyword search, the keywords from a payload file.
    let file = payload(&guild, "query.md", "RAMEN");
    let data = h
        .run(
            &guild,
            "fetch-context",
            &["--type", "search_messages", "--query-file", &file],
        )
        .await
        .ok();
    assert_eq!(data["messages"].as_array().map(Vec::len), Some(1), "{data}");
    assert_eq!(data["messages"][0]["userId"], "bob");
    assert_consumed(&file);
    assert!(matches!(
        h.app.discord.calls_of(Op::SearchMessages).as_slice(),
        [Call::SearchMessages { query, .. }] if query == "RAMEN"
    ));

    // Happy: the user's profile.
    let data = h
        .run(&guild, "fetch-context", &["--type", "user_info"])
        .await
        .ok();
    assert_eq!(data["userId"], USER);
    assert_eq!(data["platform"], "discord");
    assert_eq!(data["isDm"], false);

    // Error: a type outside the enum is a usage error listing the valid ones (exit 2).
    let run = h
        .run(&guild, "fetch-context", &["--type", "everything"])
        .await;
    let message = run.client_err(2, "SKILL_USAGE");
    assert!(message.contains("recent_messages"), "{message}");
    let data = h.follow_correction(&guild, &run, &[]).await.ok();
    assert_eq!(data["messages"].as_array().map(Vec::len), Some(3), "{data}");
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn react_message() {
    let h = Harness::start().await;
    let guild = h.guild();

    // Error first: not an emoji is 400 INVALID_PARAMS; no reaction is attempted.
    let run = h
        .run(&guild, "react-message", &["--emoji", "thumbsup"])
        .await;
    run.err(1, "INVALID_PARAMS");
    assert_eq!(
        run.details().first().map(|(path, _)| path.as_str()),
        Some("/emoji")
    );
    assert_eq!(h.app.discord.call_count(Op::AddReaction), 0);

    // Happy: the reaction lands on the trigger message.
    let data = h
        .run(&guild, "react-message", &["--emoji", "👍"])
        .await
        .ok();
    assert_eq!(data["emoji"], "👍");
    assert_eq!(data["messageId"], guild.trigger().as_str());
    assert_eq!(
        h.app.discord.reactions("guild-chan", &guild.trigger()),
        [ReactionEmoji::Unicode("👍".into())]
    );
    h.shutdown().await;
}

// ----- reminders ------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_reminder() {
    let h = Harness::start().await;
    let at = iso(whole_seconds(Utc::now() + Duration::days(1)));

    // Error: reminders are DM-only; in a guild 403 FORBIDDEN_CONTEXT, nothing stored.
    let guild = h.guild();
    let file = payload(&guild, "reminder.md", "Water the plants");
    let run = h
        .run(
            &guild,
            "set-reminder",
            &["--scheduled-at", &at, "--message-file", &file],
        )
        .await;
    run.err(1, "FORBIDDEN_CONTEXT");
    assert_kept(&file);
    assert!(
        h.app
            .store
            .pending_reminders(&h.key())
            .await
            .expect("pending")
            .is_empty()
    );

    // Happy (DM): stored as pending, text processed like every outgoing text.
    let dm = h.dm();
    let file = payload(
        &dm,
        "reminder.md",
        "<note>Water the plants</note>\\nand $HOME's ferns",
    );
    let data = h
        .run(
            &dm,
            "set-reminder",
            &["--scheduled-at", &at, "--message-file", &file],
        )
        .await
        .ok();
    let id = str_of(&data, "reminderId");
    assert!(id.starts_with("rem_"), "{data}");
    assert_eq!(data["scheduledAt"], at.as_str());
    assert_consumed(&file);
    let stored = h
        .app
        .store
        .get_reminder(id)
        .await
        .expect("get")
        .expect("stored");
    assert_eq!(stored.state, ReminderState::Pending);
    assert_eq!(stored.user_id, USER);
    assert_eq!(stored.message, "Water the plants\nand $HOME's ferns");
    assert_eq!(iso(stored.scheduled_at), at);
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_reminder() {
    let h = Harness::start().await;
    let mine = h.reminder(USER, "call mum", 2).await;
    let bobs = h.reminder("bob", "bob's dentist", 2).await;
    let dm = h.dm();

    // Error: someone else's reminder is 404 NOT_FOUND and stays pending.
    let run = h
        .run(&dm, "cancel-reminder", &["--reminder-id", &bobs])
        .await;
    run.err(1, "NOT_FOUND");
    assert!(
        run.message().contains("list-reminders"),
        "{}",
        run.message()
    );
    let bob = h.app.store.get_reminder(&bobs).await.expect("get");
    assert_eq!(bob.map(|r| r.state), Some(ReminderState::Pending));

    // Happy: her own.
    let data = h
        .run(&dm, "cancel-reminder", &["--reminder-id", &mine])
        .await
        .ok();
    assert_eq!(
        data,
        json!({"reminderId": mine, "cancelled": true, "series": false})
    );
    let stored = h.app.store.get_reminder(&mine).await.expect("get");
    assert_eq!(stored.map(|r| r.state), Some(ReminderState::Cancelled));
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_reminders() {
    let h = Harness::start().await;
    let later = h.reminder(USER, "renew passport", 30).await;
    let sooner = h.reminder(USER, "call mum", 1).await;
    h.reminder("bob", "bob's dentist", 1).await;

    // Happy (DM): her pending reminders, soonest first; not bob's.
    let dm = h.dm();
    let data = h.run(&dm, "list-reminders", &[]).await.ok();
    assert_eq!(data["count"], 2, "{data}");
    let reminders = data["reminders"].as_array().expect("reminders");
    assert_eq!(reminders[0]["id"], sooner.as_str());
    assert_eq!(reminders[0]["message"], "call mum");
    assert_eq!(reminders[1]["id"], later.as_str());
    for r in reminders {
        for key in ["scheduledAt", "createdAt"] {
            let at = str_of(r, key);
            assert!(
                DateTime::parse_from_rfc3339(at).is_ok() && at.ends_with('Z'),
                "{r}"
            );
        }
    }

    // Error: DM-only; in a guild 403 FORBIDDEN_CONTEXT.
    let guild = h.guild();
    let run = h.run(&guild, "list-reminders", &[]).await;
    run.err(1, "FORBIDDEN_CONTEXT");
    assert!(
        run.message().contains("direct message"),
        "{}",
        run.message()
    );
    h.shutdown().await;
}
