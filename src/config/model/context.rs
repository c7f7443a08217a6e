//! What the agent is given about a conversation: memory (with maintenance and embeddings), the
//! prompt's context budget (`context`) and users' attachments (`attachments`).

use serde::{Deserialize, Serialize};

/// Conversation context.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct MemoryConfig {
    /// Recent channel messages included in the prompt.
    pub recent_message_limit: u32,
    /// Related messages (keyword search of the channel) included in guild prompts.
    pub related_message_limit: u32,
    /// Longest memory content accepted by memory-save, in characters.
    pub max_content_chars: u32,
    /// Meaning-based recall: an OpenAI-compatible `/embeddings` endpoint. `null` (the
    /// default): memory-search is full-text only.
    pub embeddings: Option<EmbeddingsConfig>,
    /// Consolidation: an agent run in quiet hours merges a workspace's old memories into
    /// summaries (off by default).
    pub maintenance: MaintenanceConfig,
}

/// `memory.maintenance`: memory consolidation. In the quiet hours, each workspace with more
/// than `minMemories` enabled memories and no run within `intervalHours` gets an agent run of
/// its own (the same runner and sandbox, the `maintenance.md` prompt, memory skills only, no
/// message and nothing sent to anyone) that saves merged summaries superseding the memories
/// they replace. Public and private memories are consolidated in separate runs; memories newer
/// than `minAgeDays` are left alone; nothing is deleted (superseded memories are disabled).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct MaintenanceConfig {
    /// Run the job at all.
    pub enabled: bool,
    /// Only log (and answer the agent) what would be saved and disabled; nothing is written.
    pub dry_run: bool,
    /// Daily window of the daemon's local time, `"HH:MM-HH:MM"` (may cross midnight; equal
    /// ends mean all day).
    pub quiet_hours: crate::config::QuietHours,
    /// A workspace is maintained once it has more enabled memories than this.
    pub min_memories: u32,
    /// At most one run per workspace in this many hours.
    pub interval_hours: u32,
    /// Memories younger than this many days are never merged or disabled.
    pub min_age_days: u32,
    /// Most memories shown to one run (the oldest first); the rest wait for the next run.
    pub max_memories_per_run: u32,
}

impl Default for MaintenanceConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            dry_run: false,
            quiet_hours: crate::config::QuietHours::default(),
            min_memories: 200,
            interval_hours: 168,
            min_age_days: 7,
            max_memories_per_run: 200,
        }
    }
}

impl Default for MemoryConfig {
    fn default() -> Self {
        Self {
            recent_message_limit: 20,
            related_message_limit: 5,
            max_content_chars: 4_000,
            embeddings: None,
            maintenance: MaintenanceConfig::default(),
        }
    }
}

/// `memory.embeddings`: each memory gets a vector in the background (a save never waits for
/// it), and memory-search ranks by full-text rank and vector similarity together. With the
/// service down, search is full text and says so.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct EmbeddingsConfig {
    /// A provider of `agent.providers` whose `baseUrl` and key to use (e.g. `openai`); or
    /// leave empty and set `baseUrl`.
    pub provider: String,
    /// API root serving `POST {baseUrl}/embeddings` (when `provider` is empty).
    pub base_url: String,
    /// Variable holding the key (when `provider` is empty; empty = no key).
    pub api_key_env: String,
    /// Model name sent to the endpoint.
    pub model: String,
    /// Length of the vectors the model returns.
    pub dimensions: u32,
    /// Longest wait for the endpoint; a search falls back to full text after it.
    pub timeout_ms: u64,
    /// Memories embedded per request in the background.
    pub batch_size: u32,
}

impl Default for EmbeddingsConfig {
    fn default() -> Self {
        Self {
            provider: String::new(),
            base_url: String::new(),
            api_key_env: String::new(),
            model: String::new(),
            dimensions: 0,
            timeout_ms: 3_000,
            batch_size: 32,
        }
    }
}

/// `context`: budgets inside the prompt (`agent.tokenLimit` is the whole).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ContextConfig {
    /// Estimated tokens the important memories may take. When more exist, the most recently
    /// saved or used are shown and the prompt says how many more the memory-search skill can
    /// find. 0 shows none (only the count).
    pub important_memories_budget: u32,
}

impl Default for ContextConfig {
    fn default() -> Self {
        Self {
            important_memories_budget: 2_000,
        }
    }
}

/// `attachments`: the files of the message being answered are downloaded by the daemon (never
/// by the agent, which has no network), saved read-only in the session's staging folder under
/// `in/`, listed in the prompt; pictures also go to the model as images, short text files
/// inline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct AttachmentsConfig {
    /// `false`: attachments are only listed by name, type and size, never downloaded.
    pub enabled: bool,
    /// Largest file downloaded, in MB; a larger one is listed as skipped.
    pub max_file_mb: u32,
    /// Most bytes downloaded for one turn, in MB (files past it are listed as skipped).
    pub max_total_mb: u32,
    /// Longest download of one file (redirects included).
    pub timeout_ms: u64,
    /// Pictures with more pixels than this are downscaled (aspect kept) before they are sent
    /// to the model as images; the saved file keeps the original.
    pub max_image_pixels: u64,
    /// Text files up to this many KB are shown in the prompt inline (within the token budget).
    pub max_inline_kb: u32,
    /// Extra hosts attachments may come from, besides the platform's own (the Discord API host
    /// and CDN, the Misskey instance), e.g. a Misskey instance's object storage or media proxy.
    /// `https` only, and only when the name resolves to public addresses.
    pub allow_hosts: Vec<String>,
    /// Voice messages and other audio files are transcribed by an OpenAI-compatible
    /// `/audio/transcriptions` service (the daemon sends them; the agent has no network), and
    /// the transcript is given to the agent. Absent: audio is saved as a file only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transcription: Option<TranscriptionConfig>,
}

/// `attachments.transcription`: the speech-to-text service voice messages are sent to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct TranscriptionConfig {
    /// A provider of `agent.providers` whose `baseUrl` and key to use (e.g. `openai`); or
    /// leave empty and set `baseUrl`.
    pub provider: String,
    /// API root serving `POST {baseUrl}/audio/transcriptions` (when `provider` is empty): the
    /// OpenAI API, Groq, or a local whisper.cpp / faster-whisper server.
    pub base_url: String,
    /// Variable holding the key (when `provider` is empty; empty = no key).
    pub api_key_env: String,
    /// Model name sent to the service (`whisper-1`, `whisper-large-v3`, ...).
    pub model: String,
    /// The language spoken, as an ISO-639-1 code (`en`, `ja`); empty = the service detects it.
    pub language: String,
    /// Longest audio transcribed, in seconds (read from the file before it is sent).
    pub max_seconds: u32,
    /// Largest audio file sent, in MB (the OpenAI API takes at most 25).
    pub max_mb: u32,
    /// Minutes of audio one user may have transcribed per UTC day (null = no limit); counted
    /// with the user's tokens in the daily usage.
    pub minutes_per_user_per_day: Option<u32>,
    /// Longest wait for one transcription.
    pub timeout_ms: u64,
}

impl Default for TranscriptionConfig {
    fn default() -> Self {
        Self {
            provider: String::new(),
            base_url: String::new(),
            api_key_env: String::new(),
            model: "whisper-1".into(),
            language: String::new(),
            max_seconds: 300,
            max_mb: 25,
            minutes_per_user_per_day: None,
            timeout_ms: 60_000,
        }
    }
}

/// `speech`: the text-to-speech service the send-voice skill speaks through, an
/// OpenAI-compatible `/audio/speech` that answers Ogg Opus.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct SpeechConfig {
    /// A provider of `agent.providers` whose `baseUrl` and key to use; or leave empty and set
    /// `baseUrl`.
    pub provider: String,
    /// API root serving `POST {baseUrl}/audio/speech` (when `provider` is empty).
    pub base_url: String,
    /// Variable holding the key (when `provider` is empty; empty = no key).
    pub api_key_env: String,
    /// Model name sent to the service (`tts-1`, `gpt-4o-mini-tts`, ...).
    pub model: String,
    /// The voice (`alloy`, `nova`, ...; what the service offers).
    pub voice: String,
    /// Longest text spoken, in characters (the OpenAI API takes at most 4096).
    pub max_chars: u32,
    /// Minutes of speech one user's conversations may get per UTC day (null = no limit).
    pub minutes_per_user_per_day: Option<u32>,
    /// Longest wait for one synthesis.
    pub timeout_ms: u64,
}

impl Default for SpeechConfig {
    fn default() -> Self {
        Self {
            provider: String::new(),
            base_url: String::new(),
            api_key_env: String::new(),
            model: "tts-1".into(),
            voice: "alloy".into(),
            max_chars: 1_000,
            minutes_per_user_per_day: None,
            timeout_ms: 30_000,
        }
    }
}

impl Default for AttachmentsConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            max_file_mb: 20,
            max_total_mb: 50,
            timeout_ms: 20_000,
            max_image_pixels: 1_200_000,
            max_inline_kb: 32,
            allow_hosts: Vec::new(),
            transcription: None,
        }
    }
}
