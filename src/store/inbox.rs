//! The inbox (schema v7): one row per platform message that passed the trigger rules, keyed by
//! platform and message id, with its state — `queued` until its turn ends `answered`, `failed`
//! or `skipped` (with the reason). The first record of a message id wins, so a message is
//! answered at most once across restarts; a row still `queued` at start is a message the
//! daemon stopped or crashed before answering. The conversation layer (`conversation::inbox`)
//! decides what to do with them; this module only stores. Ids are the platforms' own strings
//! (the store sits below the platforms).

use chrono::{DateTime, Utc};
use rusqlite::{Connection, OptionalExtension, params};

use super::{Store, StoreError, from_ms, to_ms};

/// Where a recorded message stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InboxState {
    /// Handed to the router; not answered yet.
    Queued,
    /// The user got an answer.
    Answered,
    /// Its turn failed (the user was told in words).
    Failed,
    /// Not answered on purpose (rate limit, busy, too old, ...).
    Skipped,
}

impl InboxState {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            InboxState::Queued => "queued",
            InboxState::Answered => "answered",
            InboxState::Failed => "failed",
            InboxState::Skipped => "skipped",
        }
    }
}

/// A message to record.
#[derive(Debug, Clone)]
pub struct InboxRecord {
    /// The platform's name (`discord`, `misskey`, `console`).
    pub platform: String,
    /// The message's id on its platform.
    pub message_id: String,
    /// Its channel.
    pub channel_id: String,
    /// Its author.
    pub user_id: String,
    /// When the daemon received it.
    pub received_at: DateTime<Utc>,
    /// The message as the router got it (JSON), to answer it again after a restart.
    pub payload: String,
}

/// A message still queued.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueuedMessage {
    /// The platform's name.
    pub platform: String,
    /// The message's id.
    pub message_id: String,
    /// When the daemon first received it.
    pub received_at: DateTime<Utc>,
    /// How many times it was handed to the router again after a restart.
    pub attempts: u32,
    /// The message (JSON).
    pub payload: String,
}

/// Messages not answered since a time, by state and reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unanswered {
    /// `queued`, `failed` or `skipped`.
    pub state: String,
    /// Why (`None` for queued).
    pub reason: Option<String>,
    /// How many.
    pub count: u64,
}

/// One recorded message and how it ended, for the operator console.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InboxRow {
    /// The platform's name.
    pub platform: String,
    /// The message's id.
    pub message_id: String,
    /// Its channel.
    pub channel_id: String,
    /// Its author.
    pub user_id: String,
    /// When the daemon received it.
    pub received_at: DateTime<Utc>,
    /// When its state last changed (its turn's end, for a settled message).
    pub updated_at: DateTime<Utc>,
    /// `queued`, `answered`, `failed` or `skipped`.
    pub state: String,
    /// Why, for `failed` and `skipped`.
    pub reason: Option<String>,
    /// Times it was handed to the router again after a restart.
    pub attempts: u32,
    /// The message (JSON).
    pub payload: String,
}

impl Store {
    /// Records `record` as queued. False when its platform and message id were recorded before
    /// (in any state, in this run or an earlier one): it is a duplicate.
    pub async fn inbox_record(&self, record: InboxRecord) -> Result<bool, StoreError> {
        let now = to_ms(Utc::now());
        self.db.write(move |c| insert(c, &record, now)).await
    }

    /// Sets the state (and reason) of a recorded message. Recording nothing for an unknown
    /// message is not an error (it may have been pruned).
    pub async fn inbox_settle(
        &self,
        platform: &str,
        message_id: &str,
        state: InboxState,
        reason: Option<&str>,
    ) -> Result<(), StoreError> {
        let (platform, message_id) = (platform.to_owned(), message_id.to_owned());
        let reason = reason.map(str::to_owned);
        let now = to_ms(Utc::now());
        self.db
            .write(move |c| {
                c.execute(
                    "UPDATE inbox SET state = ?3, reason = ?4, updated_at_ms = ?5
                     WHERE platform = ?1 AND message_id = ?2",
                    params![platform, message_id, state.as_str(), reason, now],
                )?;
                Ok(())
            })
            .await
    }

    /// Marks a message answered while it is still `queued` (its turn goes on): a later settle
    /// gives its final state, and this never overwrites one.
    pub async fn inbox_mark_answered(
        &self,
        platform: &str,
        message_id: &str,
    ) -> Result<(), StoreError> {
        self.update_one(
            platform,
            message_id,
            "UPDATE inbox SET state = 'answered', updated_at_ms = ?3
             WHERE platform = ?1 AND message_id = ?2 AND state = 'queued'",
        )
        .await
    }

    /// Every message still queued, oldest first.
    pub async fn inbox_queued(&self) -> Result<Vec<QueuedMessage>, StoreError> {
        self.db.read(queued).await
    }

    /// Counts one more attempt at a queued message (before it is handed to the router again).
    pub async fn inbox_count_attempt(
        &self,
        platform: &str,
        message_id: &str,
    ) -> Result<(), StoreError> {
        self.update_one(
            platform,
            message_id,
            "UPDATE inbox SET attempts = attempts + 1, updated_at_ms = ?3
             WHERE platform = ?1 AND message_id = ?2",
        )
        .await
    }

    /// Runs `sql` (an `UPDATE` of one record: `?1` platform, `?2` message id, `?3` now).
    async fn update_one(
        &self,
        platform: &str,
        message_id: &str,
        sql: &'static str,
    ) -> Result<(), StoreError> {
        let (platform, message_id) = (platform.to_owned(), message_id.to_owned());
        let now = to_ms(Utc::now());
        self.db
            .write(move |c| {
                c.execute(sql, params![platform, message_id, now])?;
                Ok(())
            })
            .await
    }

    /// Deletes the records of messages received before `before`; returns how many.
    pub async fn inbox_prune(&self, before: DateTime<Utc>) -> Result<usize, StoreError> {
        let before = to_ms(before);
        self.db
            .write(move |c| {
                Ok(c.execute(
                    "DELETE FROM inbox WHERE received_at_ms < ?1",
                    params![before],
                )?)
            })
            .await
    }

    /// The `limit` latest recorded messages, newest first; only those in `state` when given.
    pub async fn inbox_recent(
        &self,
        state: Option<InboxState>,
        limit: u32,
    ) -> Result<Vec<InboxRow>, StoreError> {
        self.db
            .read(move |c| recent(c, state.map(InboxState::as_str), limit))
            .await
    }

    /// Messages received since `since` that were not answered, by state and reason.
    pub async fn inbox_unanswered_since(
        &self,
        since: DateTime<Utc>,
    ) -> Result<Vec<Unanswered>, StoreError> {
        let since = to_ms(since);
        self.db.read(move |c| unanswered(c, since)).await
    }

    /// The state and reason of one recorded message (`None` when it was never recorded).
    pub async fn inbox_state(
        &self,
        platform: &str,
        message_id: &str,
    ) -> Result<Option<(String, Option<String>)>, StoreError> {
        let (platform, message_id) = (platform.to_owned(), message_id.to_owned());
        self.db
            .read(move |c| {
                Ok(c.query_row(
                    "SELECT state, reason FROM inbox WHERE platform = ?1 AND message_id = ?2",
                    params![platform, message_id],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .optional()?)
            })
            .await
    }
}

fn insert(c: &Connection, r: &InboxRecord, now: i64) -> Result<bool, StoreError> {
    let inserted = c.execute(
        "INSERT OR IGNORE INTO inbox
             (platform, message_id, channel_id, user_id, received_at_ms, state, attempts,
              updated_at_ms, payload)
         VALUES (?1, ?2, ?3, ?4, ?5, 'queued', 0, ?6, ?7)",
        params![
            r.platform,
            r.message_id,
            r.channel_id,
            r.user_id,
            to_ms(r.received_at),
            now,
            r.payload
        ],
    )?;
    Ok(inserted == 1)
}

fn queued(c: &Connection) -> Result<Vec<QueuedMessage>, StoreError> {
    let mut stmt = c.prepare(
        "SELECT platform, message_id, received_at_ms, attempts, payload FROM inbox
         WHERE state = 'queued' ORDER BY received_at_ms, message_id",
    )?;
    let rows = stmt.query_map([], |r| {
        Ok((
            r.get::<_, String>(0)?,
            r.get::<_, String>(1)?,
            r.get::<_, i64>(2)?,
            r.get::<_, i64>(3)?,
            r.get::<_, String>(4)?,
        ))
    })?;
    let mut out = Vec::new();
    for row in rows {
        let (platform, message_id, received, attempts, payload) = row?;
        out.push(QueuedMessage {
            platform,
            message_id,
            received_at: from_ms(received)?,
            attempts: u32::try_from(attempts).unwrap_or(u32::MAX),
            payload,
        });
    }
    Ok(out)
}

fn recent(c: &Connection, state: Option<&str>, limit: u32) -> Result<Vec<InboxRow>, StoreError> {
    let mut stmt = c.prepare_cached(
        "SELECT platform, message_id, channel_id, user_id, received_at_ms, updated_at_ms, state,
                reason, attempts, payload
         FROM inbox WHERE ?1 IS NULL OR state = ?1
         ORDER BY received_at_ms DESC LIMIT ?2",
    )?;
    let rows = stmt.query_map(params![state, limit], |r| {
        Ok((
            (r.get::<_, String>(0)?, r.get::<_, String>(1)?),
            (r.get::<_, String>(2)?, r.get::<_, String>(3)?),
            (r.get::<_, i64>(4)?, r.get::<_, i64>(5)?),
            (r.get::<_, String>(6)?, r.get::<_, Option<String>>(7)?),
            (r.get::<_, i64>(8)?, r.get::<_, String>(9)?),
        ))
    })?;
    let mut out = Vec::new();
    for row in rows {
        let (
            (platform, message_id),
            (channel_id, user_id),
            (received, updated),
            (state, reason),
            (attempts, payload),
        ) = row?;
        out.push(InboxRow {
            platform,
            message_id,
            channel_id,
            user_id,
            received_at: from_ms(received)?,
            updated_at: from_ms(updated)?,
            state,
            reason,
            attempts: u32::try_from(attempts).unwrap_or(0),
            payload,
        });
    }
    Ok(out)
}

fn unanswered(c: &Connection, since: i64) -> Result<Vec<Unanswered>, StoreError> {
    let mut stmt = c.prepare(
        "SELECT state, reason, COUNT(*) FROM inbox
         WHERE received_at_ms >= ?1 AND state != 'answered'
         GROUP BY state, reason ORDER BY state, reason",
    )?;
    let rows = stmt.query_map(params![since], |r| {
        Ok(Unanswered {
            state: r.get(0)?,
            reason: r.get(1)?,
            count: u64::try_from(r.get::<_, i64>(2)?).unwrap_or(0),
        })
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Duration;

    #[tokio::test]
    async fn the_latest_messages_come_newest_first_and_by_state() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("db.sqlite")).await.unwrap();
        let now = Utc::now();
        for (i, id) in ["m1", "m2", "m3"].iter().enumerate() {
            store
                .inbox_record(record(id, now - Duration::minutes(10 - i as i64)))
                .await
                .unwrap();
        }
        store
            .inbox_settle(
                "discord",
                "m2",
                InboxState::Failed,
                Some("model_unreachable"),
            )
            .await
            .unwrap();
        let all = store.inbox_recent(None, 10).await.unwrap();
        let ids: Vec<&str> = all.iter().map(|r| r.message_id.as_str()).collect();
        assert_eq!(ids, ["m3", "m2", "m1"]);
        let failed = store
            .inbox_recent(Some(InboxState::Failed), 10)
            .await
            .unwrap();
        assert_eq!(failed.len(), 1);
        assert_eq!(failed[0].reason.as_deref(), Some("model_unreachable"));
        assert_eq!(store.inbox_recent(None, 2).await.unwrap().len(), 2);
    }

    fn record(id: &str, received_at: DateTime<Utc>) -> InboxRecord {
        InboxRecord {
            platform: "discord".into(),
            message_id: id.into(),
            channel_id: "c".into(),
            user_id: "u".into(),
            received_at,
            payload: format!("{{\"id\":\"{id}\"}}"),
        }
    }

    #[tokio::test]
    async fn a_message_id_is_recorded_once_and_settles_out_of_the_queue() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("db.sqlite")).await.unwrap();
        let now = Utc::now();
        assert!(store.inbox_record(record("m1", now)).await.unwrap());
        assert!(
            !store.inbox_record(record("m1", now)).await.unwrap(),
            "the second record of the same id is a duplicate"
        );
        assert!(store.inbox_record(record("m2", now)).await.unwrap());
        let queued = store.inbox_queued().await.unwrap();
        assert_eq!(queued.len(), 2);
        assert_eq!(queued[0].payload, "{\"id\":\"m1\"}");
        store
            .inbox_settle("discord", "m1", InboxState::Answered, None)
            .await
            .unwrap();
        store.inbox_count_attempt("discord", "m2").await.unwrap();
        let queued = store.inbox_queued().await.unwrap();
        assert_eq!(queued.len(), 1);
        assert_eq!(
            (queued[0].message_id.as_str(), queued[0].attempts),
            ("m2", 1)
        );
        store
            .inbox_settle("discord", "m2", InboxState::Skipped, Some("too_old"))
            .await
            .unwrap();
        assert_eq!(
            store.inbox_state("discord", "m2").await.unwrap(),
            Some(("skipped".into(), Some("too_old".into())))
        );
        let unanswered = store
            .inbox_unanswered_since(now - Duration::hours(24))
            .await
            .unwrap();
        assert_eq!(
            unanswered,
            vec![Unanswered {
                state: "skipped".into(),
                reason: Some("too_old".into()),
                count: 1
            }]
        );
        store.close().await.unwrap();
    }

    #[tokio::test]
    async fn an_early_answer_leaves_the_queue_and_never_overwrites_a_final_state() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("db.sqlite")).await.unwrap();
        let now = Utc::now();
        store.inbox_record(record("m1", now)).await.unwrap();
        store.inbox_record(record("m2", now)).await.unwrap();
        store.inbox_mark_answered("discord", "m1").await.unwrap();
        assert_eq!(
            store.inbox_state("discord", "m1").await.unwrap(),
            Some(("answered".into(), None))
        );
        assert_eq!(store.inbox_queued().await.unwrap().len(), 1);
        store
            .inbox_settle("discord", "m2", InboxState::Failed, Some("timed_out"))
            .await
            .unwrap();
        store.inbox_mark_answered("discord", "m2").await.unwrap();
        assert_eq!(
            store.inbox_state("discord", "m2").await.unwrap(),
            Some(("failed".into(), Some("timed_out".into())))
        );
        store.close().await.unwrap();
    }

    #[tokio::test]
    async fn old_records_are_pruned_and_their_ids_forgotten() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("db.sqlite")).await.unwrap();
        let now = Utc::now();
        store
            .inbox_record(record("old", now - Duration::days(8)))
            .await
            .unwrap();
        store.inbox_record(record("new", now)).await.unwrap();
        let pruned = store.inbox_prune(now - Duration::days(7)).await.unwrap();
        assert_eq!(pruned, 1);
        assert_eq!(store.inbox_state("discord", "old").await.unwrap(), None);
        assert!(store.inbox_state("discord", "new").await.unwrap().is_some());
        store.close().await.unwrap();
    }
}
