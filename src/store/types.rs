//! Value types of the store's public API: workspace keys, memory and reminder rows, patches,
//! statistics. Types that the Skill API returns derive `Serialize` (camelCase, RFC 3339 times) so
//! handlers can put them into a response as they are.

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize, Serializer};

use super::StoreError;

/// Longest memory content accepted, in characters (memory-save).
pub const MAX_CONTENT_CHARS: usize = 4000;
/// Longest reminder message accepted, in characters.
pub const MAX_REMINDER_CHARS: usize = 4000;
/// Most ids a single `relatedTo` / `supersedes` list may hold.
pub const MAX_REFERENCES: usize = 50;
/// Longest id (memory, patch, reminder) accepted, e.g. from an import.
pub const MAX_ID_LEN: usize = 128;
/// Longest platform name or user id inside a [`WorkspaceKey`], in bytes.
const MAX_KEY_PART_LEN: usize = 128;

/// The owner of memories and reminders: one user on one platform, written `platform/userId`.
///
/// Both parts are non-empty, contain no `/`, `\`, whitespace or control characters, are not `.` or
/// `..`, and are at most 128 bytes, so the key is unambiguous and safe as a path component.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WorkspaceKey {
    platform: String,
    user_id: String,
}

impl WorkspaceKey {
    /// Builds a key, validating both parts.
    pub fn new(platform: &str, user_id: &str) -> Result<Self, StoreError> {
        validate_key_part("platform", platform)?;
        validate_key_part("user id", user_id)?;
        Ok(Self {
            platform: platform.to_owned(),
            user_id: user_id.to_owned(),
        })
    }

    /// The platform part (`discord`, `misskey`, ...).
    pub fn platform(&self) -> &str {
        &self.platform
    }

    /// The user id part.
    pub fn user_id(&self) -> &str {
        &self.user_id
    }
}

fn validate_key_part(what: &str, part: &str) -> Result<(), StoreError> {
    let bad_char = part
        .chars()
        .any(|c| c == '/' || c == '\\' || c.is_whitespace() || c.is_control());
    if part.is_empty() || part.len() > MAX_KEY_PART_LEN || bad_char || part == "." || part == ".." {
        return Err(StoreError::Invalid(format!(
            "invalid workspace {what} {part:?}: must be 1..={MAX_KEY_PART_LEN} bytes without '/', '\\', whitespace or control characters"
        )));
    }
    Ok(())
}

impl fmt::Display for WorkspaceKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.platform, self.user_id)
    }
}

impl FromStr for WorkspaceKey {
    type Err = StoreError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.split_once('/') {
            Some((platform, user)) => Self::new(platform, user),
            None => Err(StoreError::Invalid(format!(
                "invalid workspace key {s:?}: expected platform/userId"
            ))),
        }
    }
}

impl Serialize for WorkspaceKey {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// Which memories a caller may see. DM contexts include private memories; everything else sees
/// only public ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Guild channels, public notes, slash commands outside DMs.
    PublicOnly,
    /// Direct messages with the workspace owner.
    IncludePrivate,
}

impl Scope {
    /// The scope for a conversation: private memories only in DMs.
    pub fn for_dm(is_dm: bool) -> Self {
        if is_dm {
            Scope::IncludePrivate
        } else {
            Scope::PublicOnly
        }
    }

    /// Whether private memories are in scope (a direct message).
    pub fn includes_private(self) -> bool {
        self == Scope::IncludePrivate
    }

    pub(crate) fn allows(self, visibility: Visibility) -> bool {
        visibility == Visibility::Public || self.includes_private()
    }
}

/// Who may see a memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Visibility {
    /// Visible in every context of the workspace owner.
    Public,
    /// Visible only in DMs with the workspace owner.
    Private,
}

/// How important a memory is; high-importance memories go into every prompt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Importance {
    /// Always included in the prompt.
    High,
    /// Found by search only.
    Normal,
}

macro_rules! text_enum {
    ($ty:ident { $($variant:ident => $text:literal),+ $(,)? }) => {
        impl $ty {
            /// The lowercase name stored in the database and used in JSON.
            pub fn as_str(self) -> &'static str {
                match self { $($ty::$variant => $text),+ }
            }
        }

        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl FromStr for $ty {
            type Err = StoreError;

            fn from_str(s: &str) -> Result<Self, Self::Err> {
                match s {
                    $($text => Ok($ty::$variant),)+
                    other => Err(StoreError::Invalid(format!(
                        concat!("invalid ", stringify!($ty), " {:?}"), other
                    ))),
                }
            }
        }
    };
}

text_enum!(Visibility { Public => "public", Private => "private" });
text_enum!(Importance { High => "high", Normal => "normal" });
text_enum!(ReminderState {
    Pending => "pending",
    Delivered => "delivered",
    Cancelled => "cancelled",
    Failed => "failed",
});

/// A memory to append.
#[derive(Debug, Clone)]
pub struct NewMemory {
    /// The workspace (platform and user) the memory belongs to.
    pub workspace: WorkspaceKey,
    /// Text, 1..=4000 characters, never changed afterwards.
    pub content: String,
    /// Initial visibility.
    pub visibility: Visibility,
    /// Initial importance.
    pub importance: Importance,
}

/// The current view of a memory: its immutable content plus all patches folded in.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Memory {
    /// `mem_…`.
    pub id: String,
    /// Owner (`platform/userId`).
    pub workspace: WorkspaceKey,
    /// Immutable text.
    pub content: String,
    /// Current visibility.
    pub visibility: Visibility,
    /// Current importance.
    pub importance: Importance,
    /// Disabled memories are kept but never searched or prompted.
    pub enabled: bool,
    /// Ids of related memories in the same workspace.
    pub related_to: Vec<String>,
    /// Ids of memories this one replaces.
    pub supersedes: Vec<String>,
    /// When the memory was saved.
    pub created_at: DateTime<Utc>,
    /// When the last patch was applied (= `created_at` without patches).
    pub updated_at: DateTime<Utc>,
}

/// The prompt's important-memory candidates ([`super::Store::prompt_memories`]).
#[derive(Debug, Clone, PartialEq)]
pub struct PromptMemories {
    /// Best first, at most the limit asked for.
    pub memories: Vec<Memory>,
    /// Enabled high-importance memories visible in the scope, in all.
    pub total: u64,
}

/// A search hit: the memory and its score (higher is better).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ScoredMemory {
    /// The memory.
    #[serde(flatten)]
    pub memory: Memory,
    /// Text relevance (FTS5 bm25, sign flipped so higher is better).
    pub score: f64,
}

/// Metadata changes to a memory; `None` leaves a field as it is. Lists replace the old list.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MemoryPatch {
    /// Enable or disable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// New visibility.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub visibility: Option<Visibility>,
    /// New importance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub importance: Option<Importance>,
    /// New list of related memory ids (must exist in the same workspace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub related_to: Option<Vec<String>>,
    /// New list of superseded memory ids (must exist in the same workspace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub supersedes: Option<Vec<String>>,
}

impl MemoryPatch {
    /// True when the patch changes nothing.
    pub fn is_empty(&self) -> bool {
        self.enabled.is_none()
            && self.visibility.is_none()
            && self.importance.is_none()
            && self.related_to.is_none()
            && self.supersedes.is_none()
    }
}

/// A stored patch: what changed, on which memory, when.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PatchRecord {
    /// `pat_…`.
    pub patch_id: String,
    /// The patched memory.
    pub memory_id: String,
    /// The changes.
    pub changes: MemoryPatch,
    /// When the patch was recorded; patches fold in this order.
    pub created_at: DateTime<Utc>,
}

/// Counts for one visibility (or the summary of the visible ones).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct VisibilityStats {
    /// All memories.
    pub total: u64,
    /// Enabled memories.
    pub enabled: u64,
    /// Disabled memories.
    pub disabled: u64,
    /// Memories of high importance (enabled or not).
    pub high_importance: u64,
    /// Memories of normal importance (enabled or not).
    pub normal_importance: u64,
}

impl VisibilityStats {
    fn add(&mut self, other: &VisibilityStats) {
        self.total += other.total;
        self.enabled += other.enabled;
        self.disabled += other.disabled;
        self.high_importance += other.high_importance;
        self.normal_importance += other.normal_importance;
    }
}

/// Memory statistics of a workspace as seen from one context.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MemoryStats {
    /// Public memories.
    pub public: VisibilityStats,
    /// Private memories; `None` outside DMs.
    pub private: Option<VisibilityStats>,
    /// Sum of the blocks shown.
    pub summary: VisibilityStats,
}

impl MemoryStats {
    pub(crate) fn new(public: VisibilityStats, private: Option<VisibilityStats>) -> Self {
        let mut summary = public;
        if let Some(p) = &private {
            summary.add(p);
        }
        Self {
            public,
            private,
            summary,
        }
    }
}

/// What `export_memories` returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExportFilter {
    /// Private memories only with [`Scope::IncludePrivate`].
    pub scope: Scope,
    /// `None` exports every importance.
    pub importance: Option<Importance>,
    /// Skip disabled memories.
    pub enabled_only: bool,
}

impl ExportFilter {
    /// Every memory visible in `scope`, enabled or not, of every importance.
    pub fn all(scope: Scope) -> Self {
        Self {
            scope,
            importance: None,
            enabled_only: false,
        }
    }
}

/// Life cycle of a reminder.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReminderState {
    /// Waiting for its time (or for a retry).
    Pending,
    /// Sent to the user.
    Delivered,
    /// Cancelled by its owner.
    Cancelled,
    /// Gave up after the last retry.
    Failed,
}

/// A reminder to create.
#[derive(Debug, Clone)]
pub struct NewReminder {
    /// Owner; the reminder is delivered by DM to this user.
    pub workspace: WorkspaceKey,
    /// Text to deliver.
    pub message: String,
    /// When to deliver it.
    pub scheduled_at: DateTime<Utc>,
}

/// A stored reminder.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Reminder {
    /// `rem_…`.
    pub id: String,
    /// Owner (`platform/userId`).
    pub workspace: WorkspaceKey,
    /// Platform to deliver on (the workspace's platform).
    pub platform: String,
    /// User to DM (the workspace's user id).
    pub user_id: String,
    /// Text to deliver.
    pub message: String,
    /// When it is due.
    pub scheduled_at: DateTime<Utc>,
    /// When it was created.
    pub created_at: DateTime<Utc>,
    /// Current state.
    pub state: ReminderState,
    /// Delivery attempts so far (successful or not).
    pub attempts: u32,
    /// When a pending reminder is next tried (`scheduledAt`, or later after a failure).
    pub next_attempt_at: DateTime<Utc>,
    /// When it was delivered.
    pub delivered_at: Option<DateTime<Utc>>,
    /// Delivered late (e.g. it fell due while the daemon was down).
    pub late: bool,
    /// Last delivery error, if any.
    pub last_error: Option<String>,
    /// How it repeats; `None` for a one-time reminder.
    pub recurrence: Option<Recurrence>,
    /// Occurrences delivered so far (a one-time reminder: 0, then 1).
    pub occurrences: u32,
}

/// How a recurring reminder repeats: every day, week or month at the wall-clock time of its
/// first occurrence in a time zone, until an end date or a number of deliveries (or cancelled).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Recurrence {
    /// How often.
    #[serde(serialize_with = "every_name")]
    pub every: crate::timetable::Every,
    /// The IANA zone whose wall clock it keeps.
    pub time_zone: String,
    /// The first occurrence.
    pub first_at: DateTime<Utc>,
    /// No occurrence after this.
    pub until: Option<DateTime<Utc>>,
    /// At most this many deliveries.
    pub count: Option<u32>,
}

fn every_name<S: serde::Serializer>(
    every: &crate::timetable::Every,
    s: S,
) -> Result<S::Ok, S::Error> {
    s.serialize_str(every.as_str())
}

impl Recurrence {
    /// The repetition it follows; `None` when its zone is unknown (a row written by a build
    /// with another zone database).
    pub fn repeat(&self) -> Option<crate::timetable::Repeat> {
        Some(crate::timetable::Repeat {
            every: self.every,
            zone: crate::timetable::zone(&self.time_zone).ok()?,
            first: self.first_at,
        })
    }

    /// The occurrence after `after`, unless the series ends before it: `delivered` deliveries
    /// reached `count`, or it would fall after `until`.
    pub fn next_after(&self, after: DateTime<Utc>, delivered: u32) -> Option<DateTime<Utc>> {
        if self.count.is_some_and(|count| delivered >= count) {
            return None;
        }
        let (_, next) = self.repeat()?.next_after(after)?;
        self.until.is_none_or(|until| next <= until).then_some(next)
    }
}
