//! Attachments in: the daemon downloads the files of the message being answered, the agent
//! reads them. The agent has no network (and must not: a prompt injection could make it fetch
//! anything), so the daemon fetches — only from the platform's own servers
//! ([`origin`]), within a size cap per file and per turn and a time-out ([`download`]) — and
//! decides from the bytes what each file is ([`kind`]). Pictures are decoded and downscaled
//! for the model ([`picture`]), a few at a time across the daemon ([`slots`]), and sent as ACP
//! image blocks when the agent takes them; audio has its length read from its container
//! ([`crate::audio`]) and, when `attachments.transcription` is set, is transcribed by the voice
//! service (`voice::Transcriber`), the transcript saved beside it; short
//! text files are shown in the prompt inline; every file is saved read-only in the session's
//! staging folder under `in/` ([`save`]) and listed in the prompt ([`listing`]). A file that
//! cannot be used is listed as skipped with the reason; the turn always goes on.
//!
//! Documented for operators in `docs/ATTACHMENTS.md`.

pub mod download;
pub mod kind;
pub mod listing;
pub mod metrics;
pub mod origin;
pub mod picture;
pub mod save;
pub mod slots;

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::config::{AttachmentsConfig, Config};
use crate::platform::{Attachment, MessageId, PlatformKind};
use crate::store::WorkspaceKey;
use crate::voice::{Clip, NotHeard, Transcriber};

pub use crate::audio::{AudioError, AudioType};
pub use download::{DownloadError, Downloader};
pub use kind::{ImageType, Kind};
pub use listing::Received;
pub use metrics::AttachmentMetrics;
pub use origin::{Lookup, Origins, PublicResolver, SystemLookup};
pub use picture::Picture;
pub use slots::{MAX_CONCURRENT_PICTURES, PreparationSlots, SlotError};

/// `attachments.*` in working units.
#[derive(Debug, Clone)]
pub struct AttachmentSettings {
    /// Largest file, bytes.
    pub max_file_bytes: u64,
    /// Most bytes per turn.
    pub max_total_bytes: u64,
    /// Longest download of one file.
    pub timeout: Duration,
    /// Pictures above this many pixels are downscaled.
    pub max_image_pixels: u64,
    /// Text files up to this many bytes are shown inline.
    pub max_inline_bytes: u64,
}

impl From<&AttachmentsConfig> for AttachmentSettings {
    fn from(c: &AttachmentsConfig) -> Self {
        const MB: u64 = 1024 * 1024;
        AttachmentSettings {
            max_file_bytes: u64::from(c.max_file_mb) * MB,
            max_total_bytes: u64::from(c.max_total_mb) * MB,
            timeout: Duration::from_millis(c.timeout_ms),
            max_image_pixels: c.max_image_pixels,
            max_inline_bytes: u64::from(c.max_inline_kb) * 1024,
        }
    }
}

/// Why one attachment was not given to the agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Skip {
    /// Larger than `maxFileMb` (declared or while downloading).
    TooBig {
        /// The cap, bytes.
        limit: u64,
    },
    /// The turn's `maxTotalMb` is used up.
    TurnLimit {
        /// The cap, bytes.
        limit: u64,
    },
    /// Not from the platform's own servers (or a redirect left them).
    NotAllowed(String),
    /// The download took longer than `timeoutMs`.
    Timeout,
    /// The server answered with an error status.
    Http(u16),
    /// It claims a picture format its bytes are not.
    Mislabelled {
        /// What it claimed.
        claimed: String,
    },
    /// A picture whose bytes cannot be decoded.
    BadImage,
    /// Anything else (connection failure, saving failed).
    Failed(String),
    /// The platform gave no URL.
    NoUrl,
}

impl Skip {
    /// The metric label ([`metrics::SKIP_REASONS`]).
    pub fn label(&self) -> &'static str {
        match self {
            Skip::TooBig { .. } => "too_big",
            Skip::TurnLimit { .. } => "turn_limit",
            Skip::NotAllowed(_) => "not_allowed",
            Skip::Timeout => "timeout",
            Skip::Http(_) => "http_error",
            Skip::Mislabelled { .. } => "mislabelled",
            Skip::BadImage => "bad_image",
            Skip::Failed(_) => "failed",
            Skip::NoUrl => "no_url",
        }
    }
}

impl std::fmt::Display for Skip {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Skip::TooBig { limit } => write!(f, "larger than the {} limit", listing::size(*limit)),
            Skip::TurnLimit { limit } => write!(
                f,
                "the {} of attachments one message may bring is used up",
                listing::size(*limit)
            ),
            Skip::NotAllowed(why) => write!(f, "not downloaded: {why}"),
            Skip::Timeout => f.write_str("the download took too long"),
            Skip::Http(status) => write!(f, "the server answered HTTP {status}"),
            Skip::Mislabelled { claimed } => {
                write!(f, "it says it is {claimed} but its bytes are not a picture")
            }
            Skip::BadImage => f.write_str("the picture is damaged and could not be read"),
            Skip::Failed(why) => f.write_str(why),
            Skip::NoUrl => f.write_str("the platform gave no download link"),
        }
    }
}

/// A saved attachment.
#[derive(Debug, Clone)]
pub struct SavedFile {
    /// Path relative to the workspace (the agent's working directory), `/`-separated.
    pub path: String,
    /// MIME type: sniffed for pictures, else as declared (`text/plain` / `application/octet-stream`
    /// when nothing was).
    pub mime: String,
    /// Size in bytes as saved.
    pub size: u64,
    /// What the agent gets besides the file.
    pub content: Content,
}

/// What an attachment becomes in the prompt.
#[derive(Debug, Clone)]
pub enum Content {
    /// A picture, ready for an image block.
    Picture(Picture),
    /// Text short enough to show inline.
    Text(String),
    /// Audio of the current message: its length and what the agent is told it says.
    Audio(Audio),
    /// A file only (text too long to show, or any other type).
    File,
}

/// An audio file of the message being answered.
#[derive(Debug, Clone)]
pub struct Audio {
    /// Its format, from its bytes.
    pub format: AudioType,
    /// Its length read from the container, or why it could not be read.
    pub duration: Result<Duration, AudioError>,
    /// What became of its transcription.
    pub hearing: Hearing,
}

/// What became of an audio file's transcription.
#[derive(Debug, Clone)]
pub enum Hearing {
    /// `attachments.transcription` is not set.
    Off,
    /// The transcript, saved beside the audio at `path` (relative to the workspace).
    Heard {
        /// What was said.
        text: String,
        /// Where the transcript is saved.
        path: String,
    },
    /// Why there is no transcript.
    NotHeard(NotHeard),
}

/// One attachment, saved or skipped.
#[derive(Debug, Clone)]
pub struct IncomingFile {
    /// The sender's file name.
    pub name: String,
    /// The MIME type the platform reported.
    pub declared_mime: Option<String>,
    /// The declared size (0 when unknown).
    pub declared_size: u64,
    /// The file, or why there is none.
    pub result: Result<SavedFile, Skip>,
}

/// Fetches and prepares attachments; one per daemon.
#[derive(Debug, Clone)]
pub struct Attachments {
    downloader: Downloader,
    origins: Arc<HashMap<PlatformKind, Origins>>,
    settings: AttachmentSettings,
    metrics: AttachmentMetrics,
    /// Bounds the pictures decoded at once across every conversation (`slots.rs`).
    slots: PreparationSlots,
    /// Transcribes the current message's audio (`attachments.transcription`).
    transcriber: Option<Transcriber>,
}

/// Why [`Attachments`] could not be built.
#[derive(Debug, thiserror::Error)]
#[error("cannot build the attachment downloader: {0}")]
pub struct BuildError(#[from] reqwest::Error);

impl Attachments {
    /// A fetcher for the platforms of `origins`; names resolve through `lookup`.
    pub fn new(
        settings: AttachmentSettings,
        origins: HashMap<PlatformKind, Origins>,
        lookup: Arc<dyn Lookup>,
        metrics: AttachmentMetrics,
    ) -> Result<Self, BuildError> {
        let resolver = PublicResolver::new(origins.values(), lookup);
        Ok(Attachments {
            downloader: Downloader::new(resolver, settings.timeout)?,
            origins: Arc::new(origins),
            settings,
            metrics,
            slots: PreparationSlots::default(),
            transcriber: None,
        })
    }

    /// The fetcher with the current message's audio transcribed by `transcriber`.
    pub fn with_transcriber(mut self, transcriber: Option<Transcriber>) -> Self {
        self.transcriber = transcriber;
        self
    }

    /// The fetcher `config` describes (`None` when `attachments.enabled` is false), for the
    /// enabled platforms.
    pub fn from_config(
        config: &Config,
        metrics: AttachmentMetrics,
    ) -> Result<Option<Self>, BuildError> {
        let a = &config.attachments;
        if !a.enabled {
            return Ok(None);
        }
        let extra: Vec<_> = a
            .allow_hosts
            .iter()
            .filter_map(|h| crate::egress::parse_allow_entry(h).ok())
            .collect();
        // Each enabled platform's file sources, from its facts.
        let mut origins = HashMap::new();
        for facts in crate::config::PLATFORMS {
            if let Ok(kind) = facts.key.parse::<PlatformKind>()
                && (facts.enabled)(&config.platforms)
            {
                let sources = (facts.files)(&config.platforms);
                origins.insert(kind, Origins::of_sources(&sources, &extra));
            }
        }
        Self::new(a.into(), origins, Arc::new(SystemLookup), metrics).map(Some)
    }

    /// The settings in force.
    pub fn settings(&self) -> &AttachmentSettings {
        &self.settings
    }

    /// Counts `n` pictures that went to the model as image blocks.
    pub fn pictures_sent(&self, n: usize) {
        self.metrics.images_sent(n as u64);
    }

    /// Downloads and prepares `files` of a `platform` message from `who` into `staging/in/`,
    /// in order, within the per-turn cap. `workspace` is what listed paths are relative to.
    /// Never fails: what cannot be used is in the result as skipped.
    pub async fn receive(
        &self,
        platform: PlatformKind,
        who: &WorkspaceKey,
        files: &[Attachment],
        staging: &Path,
        workspace: &Path,
    ) -> Received {
        let turn = Turn {
            platform,
            who,
            staging,
            workspace,
        };
        self.receive_turn(&turn, files, &[]).await.0
    }

    /// [`receive`](Self::receive) for the message being answered, then the files of earlier
    /// messages shown with it (`history`: message id and its files, in the order they should
    /// be fetched), all within one per-turn cap. History files are saved and listed, never
    /// decoded, transcribed, inlined or sent as images: the agent opens the ones it needs.
    /// Returns the current message's files and each history message's, keyed by message id.
    pub async fn receive_turn(
        &self,
        turn: &Turn<'_>,
        current: &[Attachment],
        history: &[(MessageId, Vec<Attachment>)],
    ) -> (Received, HashMap<MessageId, Received>) {
        let started = std::time::Instant::now();
        let mut used = 0u64;
        let now = self.batch(turn, current, true, &mut used).await;
        let mut earlier = HashMap::new();
        for (id, files) in history {
            let r = self.batch(turn, files, false, &mut used).await;
            earlier.insert(id.clone(), r);
        }
        if !current.is_empty() || !history.is_empty() {
            self.metrics.step(started.elapsed().as_secs_f64());
        }
        (now, earlier)
    }

    async fn batch(
        &self,
        turn: &Turn<'_>,
        files: &[Attachment],
        for_prompt: bool,
        used: &mut u64,
    ) -> Received {
        let platform = turn.platform;
        let mut out = Vec::with_capacity(files.len());
        for file in files {
            let result = self.one(turn, file, for_prompt, used).await;
            match &result {
                Ok(saved) => {
                    self.metrics.fetched();
                    tracing::info!(platform = %platform, name = %file.filename, mime = %saved.mime, bytes = saved.size, "attachment saved");
                }
                Err(skip) => {
                    self.metrics.skipped(skip.label());
                    tracing::info!(platform = %platform, name = %file.filename, reason = skip.label(), detail = %skip, "attachment skipped");
                }
            }
            out.push(IncomingFile {
                name: file.filename.clone(),
                declared_mime: file.mime.clone(),
                declared_size: file.size,
                result,
            });
        }
        Received {
            folder: relative(turn.workspace, &turn.staging.join(save::INCOMING_DIR)),
            files: out,
        }
    }

    async fn one(
        &self,
        turn: &Turn<'_>,
        file: &Attachment,
        for_prompt: bool,
        used: &mut u64,
    ) -> Result<SavedFile, Skip> {
        let platform = turn.platform;
        let s = &self.settings;
        if file.url.trim().is_empty() {
            return Err(Skip::NoUrl);
        }
        if file.size > s.max_file_bytes {
            return Err(Skip::TooBig {
                limit: s.max_file_bytes,
            });
        }
        let left = s.max_total_bytes.saturating_sub(*used);
        if file.size > left || left == 0 {
            return Err(Skip::TurnLimit {
                limit: s.max_total_bytes,
            });
        }
        let Some(origins) = self.origins.get(&platform) else {
            return Err(Skip::NotAllowed(
                "this platform's files are not fetched".into(),
            ));
        };
        let limit = s.max_file_bytes.min(left);
        let bytes = match self.downloader.get(origins, &file.url, limit).await {
            Ok(b) => b,
            Err(DownloadError::TooBig { .. }) if limit < s.max_file_bytes => {
                return Err(Skip::TurnLimit {
                    limit: s.max_total_bytes,
                });
            }
            Err(e) => return Err(skip_of(e, s.max_file_bytes)),
        };
        *used += bytes.len() as u64;
        self.metrics.downloaded(bytes.len() as u64);
        let (saved, bytes) = self
            .prepare_downloaded(bytes, file, for_prompt, turn.staging, turn.workspace)
            .await;
        let mut saved = saved?;
        if let Content::Audio(audio) = &mut saved.content {
            audio.hearing = self.hear(turn, file, audio, bytes).await;
        }
        Ok(saved)
    }

    /// The transcript of the current message's `audio` (its downloaded `bytes`), saved beside
    /// it in `in/`; or why there is none.
    async fn hear(
        &self,
        turn: &Turn<'_>,
        file: &Attachment,
        audio: &Audio,
        bytes: Vec<u8>,
    ) -> Hearing {
        let Some(transcriber) = &self.transcriber else {
            return Hearing::Off;
        };
        let clip = Clip {
            bytes,
            file_name: format!("voice.{}", audio.format.extension()),
            mime: audio.format.mime(),
            duration: audio.duration.clone().map_err(|e| e.to_string()),
        };
        let heard = match transcriber.transcribe(turn.who, clip).await {
            Ok(heard) => heard,
            Err(why) => return Hearing::NotHeard(why),
        };
        let (staging, name) = (turn.staging.to_path_buf(), format!("{}.txt", file.filename));
        let text = heard.text.clone();
        let saved =
            tokio::task::spawn_blocking(move || save::save(&staging, &name, text.as_bytes())).await;
        let workspace = turn.workspace.to_path_buf();
        match saved {
            Ok(Ok(path)) => Hearing::Heard {
                text: heard.text,
                path: relative(&workspace, &path),
            },
            _ => {
                tracing::warn!(name = %file.filename, "the transcript could not be saved beside the audio");
                Hearing::Heard {
                    text: heard.text,
                    path: String::new(),
                }
            }
        }
    }

    /// Classifies, prepares and saves downloaded `bytes` off the async workers; the current
    /// message's files (`for_prompt`), which may be decoded, wait for a preparation slot.
    /// Gives the bytes back with the result (an audio file goes on to be transcribed).
    async fn prepare_downloaded(
        &self,
        bytes: Vec<u8>,
        file: &Attachment,
        for_prompt: bool,
        staging: &Path,
        workspace: &Path,
    ) -> (Result<SavedFile, Skip>, Vec<u8>) {
        let s = &self.settings;
        // Files of earlier messages are only saved: no picture is decoded, no text inlined.
        let (max_pixels, max_inline) = if for_prompt {
            (Some(s.max_image_pixels), s.max_inline_bytes)
        } else {
            (None, 0)
        };
        let (name, mime) = (file.filename.clone(), file.mime.clone());
        let (staging, workspace) = (staging.to_path_buf(), workspace.to_path_buf());
        let job = move || {
            let prepared = prepare(
                &bytes,
                &name,
                mime.as_deref(),
                max_pixels,
                max_inline,
                &staging,
                &workspace,
            );
            (prepared, bytes)
        };
        let done = if for_prompt {
            self.slots.run(job).await
        } else {
            tokio::task::spawn_blocking(job)
                .await
                .map_err(|_| SlotError::JobFailed)
        };
        done.unwrap_or_else(|_| {
            (
                Err(Skip::Failed("preparing the file failed".into())),
                Vec::new(),
            )
        })
    }
}

fn skip_of(e: DownloadError, max_file: u64) -> Skip {
    match e {
        DownloadError::NotAllowed(n) => Skip::NotAllowed(n.to_string()),
        DownloadError::PrivateAddress | DownloadError::Redirects => Skip::NotAllowed(e.to_string()),
        DownloadError::BadRedirect => Skip::Failed(e.to_string()),
        DownloadError::TooBig { .. } => Skip::TooBig { limit: max_file },
        DownloadError::Timeout => Skip::Timeout,
        DownloadError::Status(s) => Skip::Http(s.as_u16()),
        DownloadError::Failed => Skip::Failed("the download failed".into()),
    }
}

/// Whose message the files are and where they go.
#[derive(Debug, Clone, Copy)]
pub struct Turn<'a> {
    /// The platform the files come from.
    pub platform: PlatformKind,
    /// The sender, whose day a transcription counts in.
    pub who: &'a WorkspaceKey,
    /// The session's staging folder (files go to its `in/`).
    pub staging: &'a Path,
    /// What listed paths are relative to.
    pub workspace: &'a Path,
}

/// Classifies, prepares and saves one downloaded file (blocking). `max_pixels`: `None`
/// keeps a picture as a file, undecoded, and audio as a file, unread (an earlier message's).
fn prepare(
    bytes: &[u8],
    name: &str,
    declared: Option<&str>,
    max_pixels: Option<u64>,
    max_inline: u64,
    staging: &Path,
    workspace: &Path,
) -> Result<SavedFile, Skip> {
    let declared = declared.map(kind::essence).filter(|m| !m.is_empty());
    let (mime, content) = match kind::classify(bytes, declared.as_deref(), name) {
        Kind::Image(t) => match max_pixels {
            Some(max) => {
                let picture = picture::prepare(bytes, t, max).map_err(|_| Skip::BadImage)?;
                (t.mime().to_owned(), Content::Picture(picture))
            }
            None => (t.mime().to_owned(), Content::File),
        },
        Kind::Audio(format) if max_pixels.is_some() => (
            format.mime().to_owned(),
            Content::Audio(Audio {
                format,
                duration: crate::audio::duration(bytes, format),
                hearing: Hearing::Off,
            }),
        ),
        Kind::Audio(format) => (format.mime().to_owned(), Content::File),
        Kind::Mislabelled { claimed } => return Err(Skip::Mislabelled { claimed }),
        Kind::Text(text) => (
            declared.unwrap_or_else(|| "text/plain".into()),
            if bytes.len() as u64 <= max_inline {
                Content::Text(text)
            } else {
                Content::File
            },
        ),
        Kind::Other => (
            declared.unwrap_or_else(|| "application/octet-stream".into()),
            Content::File,
        ),
    };
    let path = save::save(staging, name, bytes)
        .map_err(|e| Skip::Failed(format!("the file could not be saved: {e}")))?;
    let workspace = workspace
        .canonicalize()
        .unwrap_or_else(|_| workspace.to_path_buf());
    Ok(SavedFile {
        path: relative(&workspace, &path),
        mime,
        size: bytes.len() as u64,
        content,
    })
}

/// `path` relative to `base` when inside it (else as is), `/`-separated.
fn relative(base: &Path, path: &Path) -> String {
    let base_canon = base.canonicalize().unwrap_or_else(|_| base.to_path_buf());
    path.strip_prefix(&base_canon)
        .or_else(|_| path.strip_prefix(base))
        .unwrap_or(path)
        .to_string_lossy()
        .into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::dns::{Addrs, Resolving};
    use std::net::SocketAddr;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Answers every name with one address and counts the lookups.
    struct Answer(SocketAddr, Arc<AtomicUsize>);

    impl Lookup for Answer {
        fn lookup(&self, _host: String) -> Resolving {
            self.1.fetch_add(1, Ordering::SeqCst);
            let addr = self.0;
            Box::pin(async move { Ok(Box::new(std::iter::once(addr)) as Addrs) })
        }
    }

    /// DNS rebinding through the whole fetcher: an allowed public host whose name resolves to
    /// a loopback listener is refused by the fetcher's own resolver, and nothing connects to
    /// the listener.
    #[tokio::test]
    async fn an_allowed_host_resolving_to_loopback_is_never_connected_to() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let target = listener.local_addr().unwrap();
        let connections = Arc::new(AtomicUsize::new(0));
        let counted = connections.clone();
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                counted.fetch_add(1, Ordering::SeqCst);
                drop(socket);
            }
        });
        let lookups = Arc::new(AtomicUsize::new(0));
        let extra = vec![
            crate::egress::parse_allow_entry(&format!("files.example.net:{}", target.port()))
                .unwrap(),
        ];
        let fetcher = Attachments::new(
            AttachmentSettings::from(&AttachmentsConfig::default()),
            [(
                PlatformKind::Misskey,
                Origins::misskey("misskey.example", true, &extra),
            )]
            .into(),
            Arc::new(Answer(target, lookups.clone())),
            AttachmentMetrics::unregistered(),
        )
        .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let file = Attachment {
            id: "1".into(),
            url: format!("https://files.example.net:{}/cat.png", target.port()),
            mime: Some("image/png".into()),
            filename: "cat.png".into(),
            size: 10,
        };
        let who = WorkspaceKey::new("misskey", "u1").unwrap();
        let got = fetcher
            .receive(PlatformKind::Misskey, &who, &[file], dir.path(), dir.path())
            .await;
        assert_eq!(
            got.files[0].result.as_ref().unwrap_err(),
            &Skip::NotAllowed("the link's server has no public address".into())
        );
        assert!(
            lookups.load(Ordering::SeqCst) >= 1,
            "the fetcher's resolver was asked"
        );
        assert_eq!(connections.load(Ordering::SeqCst), 0);
    }
}
