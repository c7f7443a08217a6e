//! The [`Store`] methods of the reminder life cycle: create and cancel for the Skill API, and
//! what the scheduler needs (due reminders, delivery and failure records, a change signal so it
//! can sleep until the next one is due). The SQL is in `reminders`.

use chrono::{DateTime, Utc};
use tokio::sync::watch;

use super::types::{
    MAX_REMINDER_CHARS, NewReminder, Recurrence, Reminder, ReminderState, WorkspaceKey,
};
use super::{Store, StoreError, from_ms, memories, new_id, reminders, to_ms};

impl Store {
    /// Creates a pending reminder, unless the owner already has `max_pending_per_user` pending
    /// ones ([`StoreError::LimitReached`]); the check and the insert are one atomic step.
    /// Time-window rules (minimum interval, maximum horizon) are the caller's.
    pub async fn create_reminder(
        &self,
        new: NewReminder,
        max_pending_per_user: u32,
    ) -> Result<Reminder, StoreError> {
        self.create_reminder_repeating(new, None, max_pending_per_user)
            .await
    }

    /// [`Store::create_reminder`] for a reminder that repeats as `recurrence` says (`None`:
    /// once). A series is one pending reminder toward the owner's limit.
    pub async fn create_reminder_repeating(
        &self,
        new: NewReminder,
        recurrence: Option<Recurrence>,
        max_pending_per_user: u32,
    ) -> Result<Reminder, StoreError> {
        let chars = new.message.chars().count();
        if new.message.trim().is_empty() || chars > MAX_REMINDER_CHARS {
            return Err(StoreError::Invalid(format!(
                "reminder message must be 1..={MAX_REMINDER_CHARS} characters and not blank"
            )));
        }
        let now = memories::now_ms();
        let scheduled = to_ms(new.scheduled_at);
        let row = reminders::ReminderInsert {
            id: new_id("rem"),
            workspace: new.workspace,
            message: new.message,
            scheduled_at_ms: scheduled,
            created_at_ms: now,
            state: ReminderState::Pending,
            attempts: 0,
            delivered_at_ms: None,
            late: false,
            updated_at_ms: now,
            recurrence,
        };
        let r = self
            .db
            .write(move |c| reminders::create(c, &row, max_pending_per_user))
            .await?;
        self.reminders_changed.send_modify(|v| *v += 1);
        Ok(r)
    }

    /// Cancels a pending reminder owned by `ws`. [`StoreError::NotFound`] when it does not exist,
    /// is someone else's, or is no longer pending.
    pub async fn cancel_reminder(
        &self,
        ws: &WorkspaceKey,
        id: &str,
    ) -> Result<Reminder, StoreError> {
        let (ws, id) = (ws.clone(), id.to_owned());
        let now = memories::now_ms();
        let r = self
            .db
            .write(move |c| reminders::cancel(c, &ws, &id, now))
            .await?;
        self.reminders_changed.send_modify(|v| *v += 1);
        Ok(r)
    }

    /// A reminder by id (any owner, any state), for the scheduler and diagnostics.
    pub async fn get_reminder(&self, id: &str) -> Result<Option<Reminder>, StoreError> {
        let id = id.to_owned();
        self.db.read(move |c| reminders::get(c, &id)).await
    }

    /// Pending reminders of `ws`, soonest first.
    pub async fn pending_reminders(&self, ws: &WorkspaceKey) -> Result<Vec<Reminder>, StoreError> {
        let ws = ws.clone();
        self.db.read(move |c| reminders::pending(c, &ws)).await
    }

    /// Every reminder of `ws`, in any state, oldest first.
    pub async fn all_reminders(&self, ws: &WorkspaceKey) -> Result<Vec<Reminder>, StoreError> {
        let ws = ws.clone();
        self.db.read(move |c| reminders::all_of(c, &ws)).await
    }

    /// When the scheduler should next wake: the earliest `nextAttemptAt` of any pending reminder.
    pub async fn next_due_at(&self) -> Result<Option<DateTime<Utc>>, StoreError> {
        let ms = self.db.read(reminders::next_due).await?;
        ms.map(from_ms).transpose()
    }

    /// Pending reminders due at `now` (`nextAttemptAt <= now`), oldest first, at most `limit`.
    /// They stay pending until marked delivered or failed.
    pub async fn due_reminders(
        &self,
        now: DateTime<Utc>,
        limit: u32,
    ) -> Result<Vec<Reminder>, StoreError> {
        let now = to_ms(now);
        self.db.read(move |c| reminders::due(c, now, limit)).await
    }

    /// Records a successful delivery at `at` (attempts + 1; `late` when it went out late, e.g.
    /// after a restart). [`StoreError::NotFound`] unless the reminder is pending.
    pub async fn mark_reminder_delivered(
        &self,
        id: &str,
        at: DateTime<Utc>,
        late: bool,
    ) -> Result<Reminder, StoreError> {
        let id = id.to_owned();
        let at = to_ms(at);
        self.db
            .write(move |c| reminders::mark_delivered(c, &id, at, late))
            .await
    }

    /// Records the delivery at `at` of a recurring reminder's occurrence and moves the series to
    /// its `next` occurrence (pending again), or ends it (`delivered`) with `None`.
    /// [`StoreError::NotFound`] unless the reminder is pending.
    pub async fn mark_occurrence_delivered(
        &self,
        id: &str,
        at: DateTime<Utc>,
        late: bool,
        next: Option<DateTime<Utc>>,
    ) -> Result<Reminder, StoreError> {
        let id = id.to_owned();
        let (at, next) = (to_ms(at), next.map(to_ms));
        let r = self
            .db
            .write(move |c| reminders::mark_occurrence_delivered(c, &id, at, late, next))
            .await?;
        self.reminders_changed.send_modify(|v| *v += 1);
        Ok(r)
    }

    /// Moves a recurring reminder whose occurrence failed its last attempt to its `next`
    /// occurrence, keeping `error`. [`StoreError::NotFound`] unless the reminder is pending.
    pub async fn skip_reminder_occurrence(
        &self,
        id: &str,
        error: &str,
        next: DateTime<Utc>,
    ) -> Result<Reminder, StoreError> {
        let (id, error) = (id.to_owned(), error.to_owned());
        let (next, now) = (to_ms(next), memories::now_ms());
        let r = self
            .db
            .write(move |c| reminders::skip_occurrence(c, &id, &error, next, now))
            .await?;
        self.reminders_changed.send_modify(|v| *v += 1);
        Ok(r)
    }

    /// Records a failed delivery attempt (attempts + 1, `lastError`). With `retry_at` the
    /// reminder stays pending and becomes due again then; with `None` it is marked `failed`.
    pub async fn record_reminder_failure(
        &self,
        id: &str,
        error: &str,
        retry_at: Option<DateTime<Utc>>,
    ) -> Result<Reminder, StoreError> {
        let (id, error) = (id.to_owned(), error.to_owned());
        let retry = retry_at.map(to_ms);
        let now = memories::now_ms();
        let r = self
            .db
            .write(move |c| reminders::record_failure(c, &id, &error, retry, now))
            .await?;
        self.reminders_changed.send_modify(|v| *v += 1);
        Ok(r)
    }

    /// A receiver that changes whenever pending reminders are added, cancelled or rescheduled,
    /// so the scheduler can sleep until `next_due_at` and re-arm on change.
    pub fn reminder_changes(&self) -> watch::Receiver<u64> {
        self.reminders_changed.subscribe()
    }

    pub(crate) fn notify_reminders_changed(&self) {
        self.reminders_changed.send_modify(|v| *v += 1);
    }
}
