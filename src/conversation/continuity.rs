//! Conversation continuity (`agent.continuity`, `docs/RELIABILITY.md`): a conversation's agent
//! session outlives the agent process. Each conversation — its platform, whether it is private,
//! the conversation's id and the user — has a folder of its own under
//! `{workspace.repoPath}/agent-state/`, bound into its agent's sandbox as the agent's data
//! folder (where OpenCode keeps its session database) and nowhere else; the store keeps, per
//! conversation, that folder's name, the agent's session id, the fingerprint its agent started
//! with (prompts, skills, place), the ids of the messages the session was shown, and how far it
//! went. When a conversation's agent is gone — a restart, the idle timeout, an eviction — its
//! next cold start resumes that session ([`Continuity::prepare`]) and is prompted with only
//! what is new, like a warm turn.
//!
//! It starts afresh (the folder emptied, a new session) when the fingerprint changed, when the
//! session reached `agent.warm.maxTurns` or `maxContextTokens` (the limits a warm agent is
//! retired at), when the folder grew over `maxStateMb`, and after a turn that failed
//! ([`Continuity::forget`]); an agent that cannot start on the kept session is started once
//! more on the emptied folder (`Interactions::start_on_state`). A conversation untouched for
//! `keepDays` is forgotten with its folder ([`Continuity::expire`]). Before each start the
//! folder loses everything but the agent's session database ([`KEPT_STATE`]): no link an
//! agent planted points outside, and no configuration, instructions, plugin or program it
//! planted is there for the next process to read.
//!
//! Private and public conversations of one user never share a folder (the key says which), so
//! what a session was shown in a DM is never in an agent answering in public.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use chrono::Utc;

use super::warm::ConversationKey;
use crate::config::Config;
use crate::store::{ContinuityRecord, Store};

/// The folder under `workspace.repoPath` holding every conversation's state folder.
pub const STATE_DIR: &str = "agent-state";

/// What continuity needs of the configuration.
#[derive(Debug, Clone)]
pub struct ContinuitySettings {
    /// `{workspace.repoPath}/agent-state`.
    pub root: PathBuf,
    /// `agent.continuity.keepDays`.
    pub keep: Duration,
    /// `agent.continuity.maxStateMb`, in bytes.
    pub max_bytes: u64,
    /// `agent.warm.maxTurns`: a session this long starts afresh.
    pub max_turns: u32,
    /// `agent.warm.maxContextTokens`: ... or one sent this many estimated tokens.
    pub max_context_tokens: usize,
}

impl ContinuitySettings {
    /// The settings of `config`; `None` when continuity is off.
    pub fn of(config: &Config) -> Option<Self> {
        let c = &config.agent.continuity;
        c.enabled.then(|| Self {
            root: config.workspace.repo_path.join(STATE_DIR),
            keep: Duration::from_secs(u64::from(c.keep_days) * 86_400),
            max_bytes: c.max_state_mb.saturating_mul(1024 * 1024),
            max_turns: config.agent.warm.max_turns,
            max_context_tokens: config.agent.warm.max_context_tokens as usize,
        })
    }
}

/// The conversations' kept sessions.
#[derive(Debug, Clone)]
pub struct Continuity {
    store: Store,
    settings: ContinuitySettings,
}

/// A session to resume, and what it was already shown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resumable {
    /// The agent's session id.
    pub acp_session: String,
    /// The message ids it was shown.
    pub shown: HashSet<String>,
    /// Estimated tokens of the prompts it was sent.
    pub context_tokens: usize,
}

/// What a cold start of a conversation gets.
#[derive(Debug, Clone)]
pub struct Prepared {
    /// The conversation's state folder (made, cleaned).
    pub folder: PathBuf,
    /// The session to resume, when there is one to.
    pub resume: Option<Resumable>,
}

/// Why a start has no state folder (logged; the turn goes on without continuity).
#[derive(Debug, thiserror::Error)]
pub enum ContinuityError {
    /// The record could not be read or written.
    #[error("the conversation's record: {0}")]
    Store(#[from] crate::store::StoreError),
    /// The folder could not be made or cleaned.
    #[error("the conversation's state folder {path}: {source}")]
    Folder {
        /// The folder.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// The key of a conversation's record: platform, private or public, conversation, user.
pub fn key_of(conversation: &ConversationKey) -> String {
    format!(
        "{}/{}/{}/{}",
        conversation.platform(),
        if conversation.is_dm() {
            "private"
        } else {
            "public"
        },
        conversation.channel(),
        conversation.user()
    )
}

impl Continuity {
    /// Continuity over `store` with `settings`.
    pub fn new(store: Store, settings: ContinuitySettings) -> Self {
        Self { store, settings }
    }

    /// The state folder of `conversation` for an agent started with `fingerprint`, and
    /// the session to resume there when it may be (see the module documentation).
    pub async fn prepare(
        &self,
        conversation: &ConversationKey,
        fingerprint: u64,
    ) -> Result<Prepared, ContinuityError> {
        let key = key_of(conversation);
        let record = self.store.continuity_get(&key).await?;
        let s = &self.settings;
        let candidate = record.as_ref().and_then(|r| {
            let fresh_enough = r.fingerprint == fingerprint
                && r.turns < s.max_turns
                && (r.context_tokens as usize) < s.max_context_tokens;
            r.acp_session
                .clone()
                .filter(|_| fresh_enough)
                .map(|acp_session| Resumable {
                    acp_session,
                    shown: r.shown.iter().cloned().collect(),
                    context_tokens: r.context_tokens as usize,
                })
        });
        let name = record
            .as_ref()
            .map_or_else(|| crate::store::new_id("st"), |r| r.folder.clone());
        let fresh = |name: String| ContinuityRecord {
            conversation: key.clone(),
            platform: conversation.platform().as_str().to_owned(),
            user_id: conversation.user().to_owned(),
            folder: name,
            acp_session: None,
            fingerprint,
            shown: Vec::new(),
            turns: 0,
            context_tokens: 0,
            updated_at: Utc::now(),
        };
        // Named before it is made, so an expiry meanwhile never takes it for a stray folder.
        if record.is_none() {
            self.store.continuity_put(fresh(name.clone())).await?;
        }
        let folder = s.root.join(&name);
        let (root, max_bytes, keep) = (s.root.clone(), s.max_bytes, candidate.is_some());
        let path = folder.clone();
        let kept = tokio::task::spawn_blocking(move || ready_folder(&root, &path, keep, max_bytes))
            .await
            .map_err(|e| ContinuityError::Folder {
                path: folder.clone(),
                source: std::io::Error::other(e),
            })?
            .map_err(|source| ContinuityError::Folder {
                path: folder.clone(),
                source,
            })?;
        if keep && !kept {
            tracing::info!(conversation = %key, max_bytes, "the conversation's state folder is over agent.continuity.maxStateMb; starting afresh");
        }
        if record.is_some() && !kept {
            self.store.continuity_put(fresh(name)).await?;
        }
        Ok(Prepared {
            folder,
            resume: candidate.filter(|_| kept),
        })
    }

    /// Records that `conversation`'s session `acp_session` (started with `fingerprint`)
    /// has now been shown `shown` and sent `context_tokens`: one more turn on it.
    pub async fn record(
        &self,
        conversation: &ConversationKey,
        acp_session: &str,
        fingerprint: u64,
        shown: &HashSet<String>,
        context_tokens: usize,
    ) {
        let key = key_of(conversation);
        let result = async {
            let Some(mut record) = self.store.continuity_get(&key).await? else {
                return Ok(());
            };
            let same = record.acp_session.as_deref() == Some(acp_session);
            record.turns = if same {
                record.turns.saturating_add(1)
            } else {
                1
            };
            record.acp_session = Some(acp_session.to_owned());
            record.fingerprint = fingerprint;
            record.shown = shown.iter().cloned().collect();
            record.shown.sort();
            record.context_tokens = context_tokens as u64;
            record.updated_at = Utc::now();
            self.store.continuity_put(record).await
        }
        .await;
        if let Err(e) = result {
            tracing::warn!(conversation = %key, error = %e, "could not record the conversation's agent session; its next agent starts afresh");
        }
    }

    /// Forgets `conversation`'s session after a turn that failed: the next start is
    /// afresh (the folder is emptied then).
    pub async fn forget(&self, conversation: &ConversationKey) {
        let key = key_of(conversation);
        let result = async {
            let Some(mut record) = self.store.continuity_get(&key).await? else {
                return Ok(());
            };
            record.acp_session = None;
            record.updated_at = Utc::now();
            self.store.continuity_put(record).await
        }
        .await;
        if let Err(e) = result {
            tracing::warn!(conversation = %key, error = %e, "could not forget the conversation's agent session");
        }
    }

    /// Runs [`expire`](Self::expire) now and every `every` until `stop`.
    pub async fn run_expiry(self, every: Duration, stop: tokio_util::sync::CancellationToken) {
        loop {
            match self.expire().await {
                Ok(0) => {}
                Ok(removed) => {
                    tracing::info!(removed, "expired conversations' state folders removed")
                }
                Err(e) => {
                    tracing::warn!(error = %e, "could not expire the conversations' state folders")
                }
            }
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(every) => {}
            }
        }
    }

    /// Forgets the conversations untouched for `keepDays`, and deletes their folders and any
    /// folder under the root that no record names; returns how many folders went.
    pub async fn expire(&self) -> Result<usize, ContinuityError> {
        let before = Utc::now()
            - chrono::Duration::from_std(self.settings.keep).unwrap_or(chrono::Duration::MAX);
        self.store.continuity_expire(before).await?;
        let named: HashSet<String> = self.store.continuity_folders().await?.into_iter().collect();
        let root = self.settings.root.clone();
        tokio::task::spawn_blocking(move || remove_unnamed(&root, &named))
            .await
            .map_err(|e| ContinuityError::Folder {
                path: self.settings.root.clone(),
                source: std::io::Error::other(e),
            })?
            .map_err(|source| ContinuityError::Folder {
                path: self.settings.root.clone(),
                source,
            })
    }
}

/// Makes `folder` (under `root`, made 0700) ready for an agent: kept when `keep` and not over
/// `max_bytes` (returns true), else emptied (false). A kept folder loses everything but the
/// session database ([`prune`]).
fn ready_folder(root: &Path, folder: &Path, keep: bool, max_bytes: u64) -> std::io::Result<bool> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(root)?;
    let kept = keep && folder.is_dir() && { prune(folder)? <= max_bytes };
    if !kept {
        match std::fs::remove_dir_all(folder) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        std::fs::DirBuilder::new().mode(0o700).create(folder)?;
    }
    Ok(kept)
}

/// What an agent keeps in its state folder between starts (paths under the folder, which is
/// its `$XDG_DATA_HOME`): OpenCode's session database and its journal files — what resuming a
/// session needs, and nothing OpenCode reads as configuration, instructions, plugins or
/// programs.
pub const KEPT_STATE: [&str; 3] = [
    "opencode/opencode.db",
    "opencode/opencode.db-wal",
    "opencode/opencode.db-shm",
];

/// Removes everything under `dir` but the regular files of [`KEPT_STATE`] (never following a
/// link: a link or special file at a kept path goes too); returns the bytes of what is left.
/// Whatever a hijacked turn planted — configuration, instructions, a plugin, a program, a link
/// pointing out — is gone before the next start.
fn prune(dir: &Path) -> std::io::Result<u64> {
    prune_within(dir, dir)
}

/// [`prune`] of `folder`, `root` itself or a folder on the way to a kept file (so the walk is
/// never deeper than [`KEPT_STATE`]'s paths), each path judged relative to `root`.
fn prune_within(root: &Path, folder: &Path) -> std::io::Result<u64> {
    let mut bytes = 0;
    for entry in std::fs::read_dir(folder)? {
        let path = entry?.path();
        let relative = path
            .strip_prefix(root)
            .map(|r| r.to_string_lossy().into_owned())
            .unwrap_or_default();
        let on_the_way = KEPT_STATE
            .iter()
            .any(|kept| kept.starts_with(&format!("{relative}/")));
        let kind = std::fs::symlink_metadata(&path)?;
        if kind.is_file() && KEPT_STATE.contains(&relative.as_str()) {
            bytes += kind.len();
        } else if kind.is_dir() && on_the_way {
            bytes += prune_within(root, &path)?;
        } else if kind.is_dir() {
            std::fs::remove_dir_all(&path)?;
        } else {
            std::fs::remove_file(&path)?;
        }
    }
    Ok(bytes)
}

/// Deletes the folders under `root` not in `named`; returns how many.
fn remove_unnamed(root: &Path, named: &HashSet<String>) -> std::io::Result<usize> {
    let entries = match std::fs::read_dir(root) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e),
    };
    let mut removed = 0;
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if named.contains(&name) {
            continue;
        }
        let path = entry.path();
        if std::fs::symlink_metadata(&path)?.is_dir() {
            std::fs::remove_dir_all(&path)?;
        } else {
            std::fs::remove_file(&path)?;
        }
        removed += 1;
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::platform::PlatformKind;

    fn message(channel: &str, user: &str, dm: bool) -> ConversationKey {
        ConversationKey::new(PlatformKind::Discord, channel, user, dm)
    }

    async fn continuity(dir: &Path, max_bytes: u64) -> Continuity {
        let store = Store::open(&dir.join("db.sqlite")).await.unwrap();
        Continuity::new(
            store,
            ContinuitySettings {
                root: dir.join(STATE_DIR),
                keep: Duration::from_secs(86_400),
                max_bytes,
                max_turns: 3,
                max_context_tokens: 10_000,
            },
        )
    }

    #[tokio::test]
    async fn a_recorded_session_is_resumed_until_something_changes() {
        let dir = tempfile::tempdir().unwrap();
        let c = continuity(dir.path(), 1 << 20).await;
        let msg = message("c1", "u1", false);
        let first = c.prepare(&msg, 7).await.unwrap();
        assert_eq!(first.resume, None, "nothing to resume yet");
        assert!(first.folder.is_dir());
        std::fs::create_dir_all(first.folder.join("opencode")).unwrap();
        std::fs::write(first.folder.join("opencode/opencode.db"), "sessions").unwrap();
        let shown = HashSet::from(["m1".to_owned()]);
        c.record(&msg, "ses_a", 7, &shown, 500).await;

        let again = c.prepare(&msg, 7).await.unwrap();
        assert_eq!(again.folder, first.folder);
        assert_eq!(
            again.resume,
            Some(Resumable {
                acp_session: "ses_a".into(),
                shown: shown.clone(),
                context_tokens: 500
            })
        );
        assert!(again.folder.join("opencode/opencode.db").is_file(), "kept");

        // Another fingerprint: afresh, the folder emptied.
        let changed = c.prepare(&msg, 8).await.unwrap();
        assert_eq!(changed.resume, None);
        assert!(!changed.folder.join("opencode/opencode.db").exists());
    }

    #[tokio::test]
    async fn private_and_public_never_share_and_limits_start_afresh() {
        let dir = tempfile::tempdir().unwrap();
        let c = continuity(dir.path(), 100).await;
        let public = message("c1", "u1", false);
        let private = message("c1", "u1", true);
        let a = c.prepare(&public, 1).await.unwrap();
        let b = c.prepare(&private, 1).await.unwrap();
        assert_ne!(a.folder, b.folder);
        c.record(&public, "ses_p", 1, &HashSet::new(), 10).await;
        assert_eq!(c.prepare(&private, 1).await.unwrap().resume, None);

        // Over maxTurns: afresh.
        for _ in 0..3 {
            c.record(&public, "ses_p", 1, &HashSet::new(), 10).await;
        }
        assert_eq!(c.prepare(&public, 1).await.unwrap().resume, None);

        // Over the size cap: afresh.
        c.record(&public, "ses_q", 1, &HashSet::new(), 10).await;
        std::fs::create_dir_all(a.folder.join("opencode")).unwrap();
        std::fs::write(a.folder.join("opencode/opencode.db"), vec![0u8; 200]).unwrap();
        assert_eq!(c.prepare(&public, 1).await.unwrap().resume, None);
        assert!(!a.folder.join("opencode/opencode.db").exists());

        // A failed turn: afresh.
        c.record(&public, "ses_r", 1, &HashSet::new(), 10).await;
        c.forget(&public).await;
        assert_eq!(c.prepare(&public, 1).await.unwrap().resume, None);
    }

    #[tokio::test]
    async fn only_the_session_database_is_kept_and_unknown_folders_expire() {
        let dir = tempfile::tempdir().unwrap();
        let c = continuity(dir.path(), 1 << 20).await;
        let msg = message("c1", "u1", false);
        let p = c.prepare(&msg, 1).await.unwrap();
        c.record(&msg, "ses_a", 1, &HashSet::new(), 10).await;
        std::fs::create_dir_all(p.folder.join("opencode/plugin")).unwrap();
        std::fs::write(p.folder.join("opencode/opencode.db"), b"kept").unwrap();
        std::fs::write(p.folder.join("opencode/plugin/evil.js"), b"planted").unwrap();
        std::fs::write(p.folder.join("opencode.json"), b"{}").unwrap();
        std::os::unix::fs::symlink("/etc", p.folder.join("opencode/etc")).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", p.folder.join("passwd")).unwrap();
        // A link where the database belongs is no database.
        std::os::unix::fs::symlink("/etc/passwd", p.folder.join("opencode/opencode.db-wal"))
            .unwrap();
        let again = c.prepare(&msg, 1).await.unwrap();
        assert!(again.resume.is_some());
        let mut left: Vec<String> = walkdir(&p.folder);
        left.sort();
        assert_eq!(left, ["opencode", "opencode/opencode.db"]);
        assert!(
            std::path::Path::new("/etc/passwd").exists(),
            "the target is untouched"
        );

        let stray = dir.path().join(STATE_DIR).join("st_left_over");
        std::fs::create_dir(&stray).unwrap();
        assert_eq!(c.expire().await.unwrap(), 1);
        assert!(!stray.exists());
        assert!(p.folder.is_dir(), "a recorded folder stays");
    }

    /// Every path under `dir`, relative.
    fn walkdir(dir: &Path) -> Vec<String> {
        let mut out = Vec::new();
        let mut stack = vec![dir.to_path_buf()];
        while let Some(d) = stack.pop() {
            for entry in std::fs::read_dir(&d).unwrap().flatten() {
                let path = entry.path();
                out.push(path.strip_prefix(dir).unwrap().display().to_string());
                if std::fs::symlink_metadata(&path).unwrap().is_dir() {
                    stack.push(path);
                }
            }
        }
        out
    }
}
