//! The Skill API served on a per-session Unix socket: [`SessionSocket`].
//!
//! With the agent sandbox on, each session gets a socket of its own at
//! `{root}/{session_id}/api.sock`; the session's folder is bound into that session's sandbox
//! (and only there), where a relay forwards the agent's `http://127.0.0.1:<port>` to it. Every
//! request arriving on it carries the [`SocketSession`] extension, so the Skill API knows which
//! session is calling from the channel itself — a body naming another session is refused before
//! anything else ([`auth`](super::auth)) — and the gateway routes served on the same socket
//! check it with [`socket_session_matches`](super::socket_session_matches).
//!
//! Who can reach a socket is decided by the file system, so the folders are checked, not
//! trusted:
//! * the root is created with mode 0700 when missing and refused when it is a symbolic link,
//!   not a directory, not owned by the daemon's uid, or accessible to group or others — other
//!   local users must not be able to traverse to any session's socket;
//! * each session folder is created 0700 and checked the same way; a stale socket file left by
//!   a crashed run is removed before binding;
//! * the socket path must fit the kernel's `sun_path` (107 bytes on Linux), a typed
//!   [`SocketError::PathTooLong`] otherwise; [`prepare_root`] checks this for the longest session
//!   id so the integrator can fail at start-up instead of on the first message.
//!
//! A socket is served by the same accept loop as the TCP listener (HTTP/1.1, header-read
//! timeout, a connection cap — [`socket_max_connections`] per socket, so a hijacked agent
//! opening connections only starves itself). [`SessionSocket::close`] stops accepting, gives
//! in-flight requests [`socket_close_grace`] to finish and removes the folder; dropping a
//! socket without closing it stops the accept loop the same way and removes the folder at once,
//! so a session that ends abnormally leaves no socket behind. The folder is removed with
//! `remove_dir_all`, which does not follow symbolic links, so links the agent may have planted
//! in its (bound) folder are removed, never their targets.
//!
//! [`SocketSession`]: super::SocketSession
//! [`socket_max_connections`]: super::SkillApiSettings::socket_max_connections
//! [`socket_close_grace`]: super::SkillApiSettings::socket_close_grace

use std::fs::{self, DirBuilder, Metadata};
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

use axum::{Extension, Router};
use tokio::net::UnixListener;
use tokio::runtime::Handle;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use super::auth::SocketSession;
use super::listener::{ConnectionPolicy, run_listener};
use super::state::SkillApiSettings;
use crate::session::SessionId;
use crate::session::ids::SESSION_ID_CHARS;

/// File name of the socket inside a session's folder.
pub const SOCKET_FILE_NAME: &str = "api.sock";

/// Longest socket path the kernel accepts: Linux's `sun_path` holds 108 bytes, the final NUL
/// included.
pub const MAX_SOCKET_PATH_BYTES: usize = 107;

/// Mode of the root and of every session folder: the daemon's uid only.
const PRIVATE_MODE: u32 = 0o700;

/// Why a session socket could not be opened. Messages name the path for the operator's log;
/// they never reach the agent.
#[derive(Debug, thiserror::Error)]
pub enum SocketError {
    /// The session id cannot name a folder (not lowercase hex); registry ids always can.
    #[error("the session id {0:?} cannot name a socket folder")]
    InvalidSessionId(String),
    /// The root or a session folder is a symbolic link (it could point anywhere).
    #[error("{} is a symbolic link; the session sockets' folder must be a real directory", path.display())]
    Symlink {
        /// The offending path.
        path: PathBuf,
    },
    /// Something other than a directory is where a folder is needed.
    #[error("{} is not a directory", path.display())]
    NotADirectory {
        /// The offending path.
        path: PathBuf,
    },
    /// The folder belongs to another user, who could reach or swap the sockets.
    #[error("{} belongs to uid {owner}, not to the daemon's uid {uid}", path.display())]
    NotOwned {
        /// The offending path.
        path: PathBuf,
        /// Its owner.
        owner: u32,
        /// The daemon's effective uid.
        uid: u32,
    },
    /// The folder is accessible to group or others (`chmod 700` it).
    #[error("{} has mode {mode:04o}; it must not be accessible to group or others (chmod 700)", path.display())]
    TooOpen {
        /// The offending path.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// The socket path does not fit `sun_path`: choose a shorter `skillApi.socketDir`.
    #[error(
        "the socket path {} has {len} bytes; a Unix socket path has at most {max} (choose a shorter skillApi.socketDir)",
        path.display()
    )]
    PathTooLong {
        /// The path that does not fit.
        path: PathBuf,
        /// Its length in bytes.
        len: usize,
        /// [`MAX_SOCKET_PATH_BYTES`].
        max: usize,
    },
    /// A file-system call failed.
    #[error("cannot {action} {}: {source}", path.display())]
    Io {
        /// What was being done ("create", "listen on", ...).
        action: &'static str,
        /// On which path.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
}

impl SocketError {
    fn io(action: &'static str, path: &Path) -> impl FnOnce(io::Error) -> Self {
        let path = path.to_path_buf();
        move |source| Self::Io {
            action,
            path,
            source,
        }
    }
}

/// Makes sure the sockets' root is a private folder of ours — created with mode 0700 when
/// missing; refused when it is a symbolic link, not a directory, not owned by the daemon's uid
/// or accessible to group or others — and that a session socket under it fits `sun_path`.
/// Returns its canonical (absolute) path. [`SessionSocket::bind`] calls it; the integrator may
/// call it at start-up to report a bad `skillApi.socketDir` before the first session.
pub fn prepare_root(root: &Path) -> Result<PathBuf, SocketError> {
    match fs::symlink_metadata(root) {
        Ok(_) => {}
        Err(error) if error.kind() == io::ErrorKind::NotFound => {
            DirBuilder::new()
                .recursive(true)
                .mode(PRIVATE_MODE)
                .create(root)
                .map_err(SocketError::io("create", root))?;
        }
        Err(error) => return Err(SocketError::io("inspect", root)(error)),
    }
    check_private_dir(root)?;
    let canonical = fs::canonicalize(root).map_err(SocketError::io("resolve", root))?;
    let longest = canonical
        .join("0".repeat(SESSION_ID_CHARS))
        .join(SOCKET_FILE_NAME);
    check_fits(&longest)?;
    Ok(canonical)
}

/// `path` (not followed if it is a link) is a directory of ours that only we can use.
fn check_private_dir(path: &Path) -> Result<Metadata, SocketError> {
    let meta = fs::symlink_metadata(path).map_err(SocketError::io("inspect", path))?;
    let path_buf = || path.to_path_buf();
    if meta.file_type().is_symlink() {
        return Err(SocketError::Symlink { path: path_buf() });
    }
    if !meta.is_dir() {
        return Err(SocketError::NotADirectory { path: path_buf() });
    }
    let uid = nix::unistd::geteuid().as_raw();
    if meta.uid() != uid {
        return Err(SocketError::NotOwned {
            path: path_buf(),
            owner: meta.uid(),
            uid,
        });
    }
    let mode = meta.mode() & 0o7777;
    if mode & 0o077 != 0 {
        return Err(SocketError::TooOpen {
            path: path_buf(),
            mode,
        });
    }
    Ok(meta)
}

fn check_fits(path: &Path) -> Result<(), SocketError> {
    let len = path.as_os_str().len();
    if len > MAX_SOCKET_PATH_BYTES {
        return Err(SocketError::PathTooLong {
            path: path.to_path_buf(),
            len,
            max: MAX_SOCKET_PATH_BYTES,
        });
    }
    Ok(())
}

/// Removes whatever is at `path` (a stale socket, or anything else left in our private folder).
fn remove_stale(path: &Path) -> Result<(), SocketError> {
    let removed = match fs::symlink_metadata(path) {
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(error) => Err(error),
        Ok(meta) if meta.is_dir() => fs::remove_dir_all(path),
        Ok(_) => fs::remove_file(path),
    };
    removed.map_err(SocketError::io("remove the stale", path))
}

/// One session's Skill API socket, served until [`close`](Self::close)d or dropped.
#[derive(Debug)]
pub struct SessionSocket {
    /// The session the socket serves (what every request's [`SocketSession`] says).
    session_id: String,
    /// `{root}/{session_id}`: bound into the session's sandbox; removed on close/drop.
    dir: PathBuf,
    /// `{dir}/api.sock`.
    path: PathBuf,
    /// Stops the accept loop (which then drains its connections).
    stop: CancellationToken,
    /// The accept loop, awaited by [`close`](Self::close).
    accept: Option<JoinHandle<()>>,
    /// Whether the folder has been removed already.
    removed: bool,
}

impl SessionSocket {
    /// Creates `{root}` (see [`prepare_root`]) and `{root}/{session_id}/` (0700), listens on
    /// `{root}/{session_id}/api.sock` (a stale file there is removed first) and serves `app`
    /// on it in a task of `tasks`, with `settings`' header-read timeout,
    /// [`socket_max_connections`](SkillApiSettings::socket_max_connections) and
    /// [`socket_close_grace`](SkillApiSettings::socket_close_grace). Every request served
    /// carries [`SocketSession`]`(session_id)`. With a `runtime`, the listener, its accept loop
    /// and its connections live there ([`SkillApiState::serve_on`]), else on the caller's. On
    /// error nothing is left listening and a folder this call created is removed.
    ///
    /// [`SkillApiState::serve_on`]: super::SkillApiState::serve_on
    pub async fn bind(
        root: &Path,
        session_id: &SessionId,
        app: Router,
        settings: &SkillApiSettings,
        tasks: &TaskTracker,
        runtime: Option<&Handle>,
    ) -> Result<Self, SocketError> {
        let id = session_id.as_str();
        if id.is_empty()
            || !id
                .bytes()
                .all(|b| b.is_ascii_digit() || b.is_ascii_lowercase())
        {
            return Err(SocketError::InvalidSessionId(id.to_owned()));
        }
        let root = prepare_root(root)?;
        let dir = root.join(id);
        let path = dir.join(SOCKET_FILE_NAME);
        check_fits(&path)?;
        let created = match DirBuilder::new().mode(PRIVATE_MODE).create(&dir) {
            Ok(()) => true,
            // Left by a run that crashed with this very id; used only if it passes the checks.
            Err(error) if error.kind() == io::ErrorKind::AlreadyExists => false,
            Err(error) => return Err(SocketError::io("create", &dir)(error)),
        };
        let listener = check_private_dir(&dir)
            .and_then(|_| remove_stale(&path))
            .and_then(|()| {
                // The listener registers with the reactor of the runtime it is created in.
                let _serving = runtime.map(Handle::enter);
                UnixListener::bind(&path).map_err(SocketError::io("listen on", &path))
            });
        let listener = match listener {
            Ok(listener) => listener,
            Err(error) => {
                if created {
                    let _ = fs::remove_dir_all(&dir);
                }
                return Err(error);
            }
        };

        let stop = CancellationToken::new();
        let policy = ConnectionPolicy {
            header_read_timeout: settings.header_read_timeout,
            max_connections: settings.socket_max_connections,
            drain_timeout: Some(settings.socket_close_grace),
        };
        let app = app.layer(Extension(SocketSession(id.to_owned())));
        let span = tracing::info_span!("session_socket", session_id = %session_id);
        let accept_loop =
            run_listener(listener, app, policy, stop.clone().cancelled_owned()).instrument(span);
        let accept = match runtime {
            Some(runtime) => tasks.spawn_on(accept_loop, runtime),
            None => tasks.spawn(accept_loop),
        };
        tracing::info!(
            session_id = %session_id,
            path = %path.display(),
            max_connections = settings.socket_max_connections,
            "session socket listening"
        );
        Ok(Self {
            session_id: id.to_owned(),
            dir,
            path,
            stop,
            accept: Some(accept),
            removed: false,
        })
    }

    /// The session's folder, holding the socket: bind it into the session's sandbox.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The socket itself (`{dir}/api.sock`).
    pub fn socket_path(&self) -> &Path {
        &self.path
    }

    /// Stops accepting (the socket file goes away with the folder), lets in-flight requests
    /// finish within [`socket_close_grace`](SkillApiSettings::socket_close_grace) (then drops
    /// their connections) and removes the folder.
    pub async fn close(mut self) {
        self.stop.cancel();
        if let Some(accept) = self.accept.take()
            && let Err(error) = accept.await
        {
            tracing::warn!(session_id = %self.session_id, error = %error, "session socket task failed");
        }
        self.remove_dir();
    }

    fn remove_dir(&mut self) {
        if std::mem::replace(&mut self.removed, true) {
            return;
        }
        match fs::remove_dir_all(&self.dir) {
            Ok(()) => tracing::debug!(session_id = %self.session_id, "session socket removed"),
            Err(error) if error.kind() == io::ErrorKind::NotFound => {}
            Err(error) => tracing::warn!(
                session_id = %self.session_id,
                path = %self.dir.display(),
                error = %error,
                "cannot remove the session socket folder"
            ),
        }
    }
}

impl Drop for SessionSocket {
    /// Without [`close`](Self::close): the accept loop stops (and drains its connections on its
    /// own) and the folder is removed at once, so nothing can connect any more.
    fn drop(&mut self) {
        self.stop.cancel();
        self.remove_dir();
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt, symlink};
    use std::time::Duration;

    use super::*;
    use crate::platform::Origin;
    use crate::platform::PlatformKind;
    use crate::session::{SessionContext, SessionRegistry};

    fn session_id() -> SessionId {
        SessionRegistry::new(Duration::from_secs(60))
            .register(SessionContext {
                place: Default::default(),
                origin: Origin {
                    platform: PlatformKind::Console,
                    channel_id: "c".into(),
                    guild_id: None,
                    user_id: "u".into(),
                    username: "n".into(),
                    is_dm: true,
                },
                purpose: Default::default(),
                trigger_message_id: None,
                workspace: "/tmp/ws".into(),
            })
            .expect("register")
            .session_id
    }

    fn is_socket(path: &Path) -> bool {
        fs::symlink_metadata(path).is_ok_and(|meta| meta.file_type().is_socket())
    }

    fn mode(path: &Path) -> u32 {
        fs::symlink_metadata(path).expect("stat").mode() & 0o7777
    }

    async fn bind(root: &Path) -> Result<SessionSocket, SocketError> {
        bind_on(root, &session_id(), &TaskTracker::new()).await
    }

    async fn bind_on(
        root: &Path,
        id: &SessionId,
        tasks: &TaskTracker,
    ) -> Result<SessionSocket, SocketError> {
        SessionSocket::bind(
            root,
            id,
            Router::new(),
            &SkillApiSettings::default(),
            tasks,
            None,
        )
        .await
    }

    /// Every task of `tasks` (the accept loop) ends within a bound.
    async fn assert_tasks_end(tasks: TaskTracker) {
        tasks.close();
        tokio::time::timeout(Duration::from_secs(5), tasks.wait())
            .await
            .expect("accept task ended");
    }

    #[tokio::test]
    async fn root_and_session_folder_are_created_private_with_the_socket_inside() {
        let temp = tempfile::tempdir().expect("tempdir");
        let root = temp.path().join("run");
        let socket = bind(&root).await.expect("bind");
        assert_eq!(mode(&root), 0o700, "root");
        assert_eq!(mode(socket.dir()), 0o700, "session folder");
        assert_eq!(
            socket.dir().parent(),
            Some(fs::canonicalize(&root).unwrap().as_path())
        );
        assert!(
            is_socket(socket.socket_path()),
            "a socket is listening there"
        );
        socket.close().await;
    }

    #[tokio::test]
    async fn a_symlinked_root_is_refused() {
        let temp = tempfile::tempdir().expect("tempdir");
        let target = temp.path().join("elsewhere");
        fs::create_dir(&target).expect("mkdir");
        fs::set_permissions(&target, fs::Permissions::from_mode(0o700)).expect("chmod");
        let root = temp.path().join("run");
        symlink(&target, &root).expect("symlink");
        let error = bind(&root).await.expect_err("symlink refused");
        assert!(matches!(error, SocketError::Symlink { .. }), "{error:?}");
        assert_eq!(
            fs::read_dir(&target).expect("read").count(),
            0,
            "nothing created through the link"
        );
    }

    #[tokio::test]
    async fn a_root_open_to_group_or_others_is_refused() {
        let temp = tempfile::tempdir().expect("tempdir");
        let root = temp.path().join("run");
        fs::create_dir(&root).expect("mkdir");
        fs::set_permissions(&root, fs::Permissions::from_mode(0o750)).expect("chmod");
        let error = bind(&root).await.expect_err("open root refused");
        assert!(
            matches!(error, SocketError::TooOpen { mode: 0o750, .. }),
            "{error:?}"
        );
        assert_eq!(fs::read_dir(&root).expect("read").count(), 0);
    }

    #[tokio::test]
    async fn a_root_that_is_a_file_is_refused() {
        let temp = tempfile::tempdir().expect("tempdir");
        let root = temp.path().join("run");
        fs::write(&root, b"x").expect("write");
        let error = bind(&root).await.expect_err("file refused");
        assert!(
            matches!(error, SocketError::NotADirectory { .. }),
            "{error:?}"
        );
    }

    #[tokio::test]
    async fn a_socket_path_longer_than_sun_path_is_a_typed_error() {
        let temp = tempfile::tempdir().expect("tempdir");
        let root = temp.path().join("r".repeat(100));
        let error = prepare_root(&root).expect_err("too long");
        let SocketError::PathTooLong { len, max, .. } = error else {
            panic!("{error:?}");
        };
        assert_eq!(max, MAX_SOCKET_PATH_BYTES);
        assert!(len > max);
        let error = bind(&root).await.expect_err("too long");
        assert!(
            matches!(error, SocketError::PathTooLong { .. }),
            "{error:?}"
        );
        assert_eq!(
            fs::read_dir(&root).expect("read").count(),
            0,
            "no session folder left"
        );
    }

    #[tokio::test]
    async fn a_stale_socket_file_is_replaced() {
        let temp = tempfile::tempdir().expect("tempdir");
        let root = prepare_root(&temp.path().join("run")).expect("root");
        let id = session_id();
        let dir = root.join(id.as_str());
        DirBuilder::new().mode(0o700).create(&dir).expect("mkdir");
        fs::write(dir.join(SOCKET_FILE_NAME), b"stale").expect("write");
        let socket = bind_on(&root, &id, &TaskTracker::new())
            .await
            .expect("bind over the stale file");
        assert!(
            is_socket(socket.socket_path()),
            "a socket is listening there"
        );
        socket.close().await;
    }

    #[tokio::test]
    async fn close_removes_the_session_folder_and_stops_the_accept_task() {
        let temp = tempfile::tempdir().expect("tempdir");
        let tasks = TaskTracker::new();
        let socket = bind_on(&temp.path().join("run"), &session_id(), &tasks)
            .await
            .expect("bind");
        let dir = socket.dir().to_path_buf();
        assert!(dir.exists());
        socket.close().await;
        assert!(!dir.exists(), "folder removed");
        assert_tasks_end(tasks).await;
    }

    #[tokio::test]
    async fn drop_removes_the_session_folder_and_stops_the_accept_task() {
        let temp = tempfile::tempdir().expect("tempdir");
        let tasks = TaskTracker::new();
        let socket = bind_on(&temp.path().join("run"), &session_id(), &tasks)
            .await
            .expect("bind");
        let dir = socket.dir().to_path_buf();
        let path = socket.socket_path().to_path_buf();
        drop(socket);
        assert!(!dir.exists(), "folder removed on drop");
        assert!(
            tokio::net::UnixStream::connect(&path).await.is_err(),
            "nothing to connect to"
        );
        assert_tasks_end(tasks).await;
    }
}
