//! Catch-up cursors (schema v8): per platform and feed, the newest message the daemon saw and
//! when the bot was last addressed there. The conversation layer (`conversation::catch_up`)
//! keeps them in memory, saves them in batches, and reads the recently addressed ones back after
//! a start; this module only stores. A save never moves a cursor back: the newer message (by
//! its time) and the later addressing win.

use chrono::{DateTime, Utc};
use rusqlite::{Connection, params};

use super::{Store, StoreError, from_ms, to_ms};

/// One feed's cursor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CatchUpCursor {
    /// The platform's name (`discord`, `misskey`).
    pub platform: String,
    /// The feed, in the platform's terms (a channel id, `chat:{user}`, `mentions`).
    pub feed: String,
    /// The newest message seen in the feed.
    pub last_id: String,
    /// When that message was created.
    pub last_at: DateTime<Utc>,
    /// When the bot was last addressed in the feed.
    pub addressed_at: DateTime<Utc>,
}

impl Store {
    /// Saves `cursors` in one transaction, each moving only forward.
    pub async fn catch_up_save(&self, cursors: Vec<CatchUpCursor>) -> Result<(), StoreError> {
        if cursors.is_empty() {
            return Ok(());
        }
        self.db
            .write(move |c| {
                for cursor in &cursors {
                    save(c, cursor)?;
                }
                Ok(())
            })
            .await
    }

    /// The cursors of feeds where the bot was addressed since `since`, most recently addressed
    /// first.
    pub async fn catch_up_active(
        &self,
        since: DateTime<Utc>,
    ) -> Result<Vec<CatchUpCursor>, StoreError> {
        let since = to_ms(since);
        self.db.read(move |c| active(c, since)).await
    }

    /// Deletes the cursors of feeds last addressed before `before`; returns how many.
    pub async fn catch_up_prune(&self, before: DateTime<Utc>) -> Result<usize, StoreError> {
        let before = to_ms(before);
        self.db
            .write(move |c| {
                Ok(c.execute(
                    "DELETE FROM catch_up_cursors WHERE addressed_at_ms < ?1",
                    params![before],
                )?)
            })
            .await
    }
}

fn save(c: &Connection, cursor: &CatchUpCursor) -> Result<(), StoreError> {
    c.execute(
        "INSERT INTO catch_up_cursors (platform, feed, last_id, last_at_ms, addressed_at_ms)
         VALUES (?1, ?2, ?3, ?4, ?5)
         ON CONFLICT (platform, feed) DO UPDATE SET
             last_id = CASE WHEN excluded.last_at_ms >= last_at_ms
                            THEN excluded.last_id ELSE last_id END,
             last_at_ms = max(last_at_ms, excluded.last_at_ms),
             addressed_at_ms = max(addressed_at_ms, excluded.addressed_at_ms)",
        params![
            cursor.platform,
            cursor.feed,
            cursor.last_id,
            to_ms(cursor.last_at),
            to_ms(cursor.addressed_at)
        ],
    )?;
    Ok(())
}

fn active(c: &Connection, since: i64) -> Result<Vec<CatchUpCursor>, StoreError> {
    let mut stmt = c.prepare(
        "SELECT platform, feed, last_id, last_at_ms, addressed_at_ms FROM catch_up_cursors
         WHERE addressed_at_ms >= ?1 ORDER BY addressed_at_ms DESC, platform, feed",
    )?;
    let rows = stmt.query_map(params![since], |r| {
        Ok((
            r.get::<_, String>(0)?,
            r.get::<_, String>(1)?,
            r.get::<_, String>(2)?,
            r.get::<_, i64>(3)?,
            r.get::<_, i64>(4)?,
        ))
    })?;
    let mut out = Vec::new();
    for row in rows {
        let (platform, feed, last_id, last_at, addressed_at) = row?;
        out.push(CatchUpCursor {
            platform,
            feed,
            last_id,
            last_at: from_ms(last_at)?,
            addressed_at: from_ms(addressed_at)?,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Duration;

    fn cursor(
        feed: &str,
        last: &str,
        at: DateTime<Utc>,
        addressed: DateTime<Utc>,
    ) -> CatchUpCursor {
        CatchUpCursor {
            platform: "discord".into(),
            feed: feed.into(),
            last_id: last.into(),
            last_at: at,
            addressed_at: addressed,
        }
    }

    #[tokio::test]
    async fn a_cursor_only_moves_forward_and_old_feeds_are_left_out_then_pruned() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("db.sqlite")).await.unwrap();
        let now = Utc::now();
        let hour = Duration::hours(1);
        store
            .catch_up_save(vec![
                cursor("c1", "m5", now, now - hour),
                cursor("c2", "m1", now - hour * 30, now - hour * 30),
            ])
            .await
            .unwrap();
        // An older message and an older addressing (a stale save) change nothing.
        store
            .catch_up_save(vec![cursor("c1", "m3", now - hour, now - hour * 2)])
            .await
            .unwrap();
        let active = store.catch_up_active(now - hour * 24).await.unwrap();
        assert_eq!(active.len(), 1, "c2 was last addressed 30 hours ago");
        assert_eq!(
            (active[0].feed.as_str(), active[0].last_id.as_str()),
            ("c1", "m5")
        );
        assert_eq!(to_ms(active[0].addressed_at), to_ms(now - hour));
        // A newer message moves it on.
        store
            .catch_up_save(vec![cursor("c1", "m9", now + hour, now)])
            .await
            .unwrap();
        let active = store.catch_up_active(now - hour * 24).await.unwrap();
        assert_eq!(active[0].last_id, "m9");
        assert_eq!(store.catch_up_prune(now - hour * 24).await.unwrap(), 1);
        assert_eq!(
            store.catch_up_active(now - hour * 100).await.unwrap().len(),
            1
        );
        store.close().await.unwrap();
    }
}
