//! What the console's *Users* and *Conversations* pages count: per user and UTC day, the model
//! tokens the gateway metered (`llm_usage`) and the messages the router recorded (`inbox`), with
//! the name each user last wrote under; and the recorded messages per hour.
//!
//! Only counts and names: no message text leaves this module (a direct message's text is never
//! shown by the console).

use std::collections::{BTreeMap, HashMap};

use chrono::{DateTime, NaiveDate, Utc};
use rusqlite::{Connection, params};

use super::{Store, StoreError, from_ms, to_ms};

/// One user's activity on one UTC day.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UserDay {
    /// Model tokens (input and output) the gateway metered for them.
    pub tokens: u64,
    /// Messages recorded for an answer.
    pub messages: u64,
    /// Of those, answered.
    pub answered: u64,
    /// Of those, not answered (skipped or failed: rate limit, busy, blocked, errors).
    pub unanswered: u64,
}

/// One user's activity over the days asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserActivity {
    /// `discord`, `misskey`, `console`.
    pub platform: String,
    /// Their id there.
    pub user_id: String,
    /// The name they last wrote under, when a recorded message had one.
    pub name: Option<String>,
    /// By UTC day; days without any activity left out.
    pub days: BTreeMap<NaiveDate, UserDay>,
}

impl UserActivity {
    /// Their tokens over every day.
    pub fn tokens(&self) -> u64 {
        self.days.values().map(|d| d.tokens).sum()
    }

    /// Their messages over every day.
    pub fn messages(&self) -> u64 {
        self.days.values().map(|d| d.messages).sum()
    }
}

impl Store {
    /// Every user with tokens or messages since `since` (a UTC day), the most tokens first,
    /// then the most messages.
    pub async fn user_activity(&self, since: NaiveDate) -> Result<Vec<UserActivity>, StoreError> {
        self.db.read(move |c| user_activity(c, since)).await
    }

    /// Messages recorded for an answer per hour since `since`, oldest first; hours without any
    /// left out.
    pub async fn messages_per_hour(
        &self,
        since: DateTime<Utc>,
    ) -> Result<Vec<(DateTime<Utc>, u64)>, StoreError> {
        let since = to_ms(since);
        self.db.read(move |c| messages_per_hour(c, since)).await
    }
}

type Key = (String, String);

fn user_activity(c: &Connection, since: NaiveDate) -> Result<Vec<UserActivity>, StoreError> {
    let mut users: HashMap<Key, UserActivity> = HashMap::new();
    let day_text = since.format("%Y-%m-%d").to_string();
    let mut stmt = c.prepare_cached(
        "SELECT workspace, day, input_tokens + output_tokens FROM llm_usage WHERE day >= ?1",
    )?;
    let mut rows = stmt.query(params![day_text])?;
    while let Some(r) = rows.next()? {
        let workspace: String = r.get(0)?;
        let day: String = r.get(1)?;
        let (Some((platform, user_id)), Ok(day)) = (
            workspace.split_once('/'),
            NaiveDate::parse_from_str(&day, "%Y-%m-%d"),
        ) else {
            continue;
        };
        let tokens = count(r.get(2)?);
        user(&mut users, platform.to_owned(), user_id.to_owned())
            .days
            .entry(day)
            .or_default()
            .tokens += tokens;
    }
    let since_ms = to_ms(since.and_hms_opt(0, 0, 0).unwrap_or_default().and_utc());
    let mut stmt = c.prepare_cached(
        "SELECT platform, user_id, date(received_at_ms / 1000, 'unixepoch'), count(*),
                sum(state = 'answered'), sum(state IN ('skipped', 'failed'))
         FROM inbox WHERE received_at_ms >= ?1 GROUP BY 1, 2, 3",
    )?;
    let mut rows = stmt.query(params![since_ms])?;
    while let Some(r) = rows.next()? {
        let day: String = r.get(2)?;
        let Ok(day) = NaiveDate::parse_from_str(&day, "%Y-%m-%d") else {
            continue;
        };
        let (messages, answered, unanswered) =
            (count(r.get(3)?), count(r.get(4)?), count(r.get(5)?));
        let d = user(&mut users, r.get(0)?, r.get(1)?)
            .days
            .entry(day)
            .or_default();
        d.messages += messages;
        d.answered += answered;
        d.unanswered += unanswered;
    }
    // The name of each user's latest message that has one (SQLite returns the row of the
    // max()); a payload that is not JSON is passed over.
    let mut stmt = c.prepare_cached(
        "SELECT platform, user_id, name, max(at) FROM (
             SELECT platform, user_id, received_at_ms AS at,
                    CASE WHEN json_valid(payload) THEN json_extract(payload, '$.username') END AS name
             FROM inbox WHERE received_at_ms >= ?1)
         WHERE name IS NOT NULL AND name <> '' GROUP BY 1, 2",
    )?;
    let mut rows = stmt.query(params![since_ms])?;
    while let Some(r) = rows.next()? {
        let name: Option<String> = r.get::<_, Option<String>>(2).unwrap_or(None);
        user(&mut users, r.get(0)?, r.get(1)?).name = name.filter(|n| !n.is_empty());
    }
    let mut users: Vec<UserActivity> = users.into_values().collect();
    users.sort_by(|a, b| {
        (b.tokens(), b.messages(), &a.platform, &a.user_id).cmp(&(
            a.tokens(),
            a.messages(),
            &b.platform,
            &b.user_id,
        ))
    });
    Ok(users)
}

/// The activity of `platform`'s `user_id`, added when new.
fn user(
    users: &mut HashMap<Key, UserActivity>,
    platform: String,
    user_id: String,
) -> &mut UserActivity {
    users
        .entry((platform.clone(), user_id.clone()))
        .or_insert_with(|| UserActivity {
            platform,
            user_id,
            name: None,
            days: BTreeMap::new(),
        })
}

fn messages_per_hour(c: &Connection, since: i64) -> Result<Vec<(DateTime<Utc>, u64)>, StoreError> {
    const HOUR_MS: i64 = 3_600_000;
    let mut stmt = c.prepare_cached(
        "SELECT received_at_ms / ?2, count(*) FROM inbox WHERE received_at_ms >= ?1
         GROUP BY 1 ORDER BY 1",
    )?;
    let mut rows = stmt.query(params![since, HOUR_MS])?;
    let mut out = Vec::new();
    while let Some(r) = rows.next()? {
        let hour: i64 = r.get(0)?;
        out.push((from_ms(hour * HOUR_MS)?, count(r.get(1)?)));
    }
    Ok(out)
}

fn count(n: Option<i64>) -> u64 {
    n.and_then(|n| u64::try_from(n).ok()).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{InboxRecord, InboxState, WorkspaceKey};

    fn record(id: &str, user: &str, at: DateTime<Utc>, payload: &str) -> InboxRecord {
        InboxRecord {
            platform: "discord".into(),
            message_id: id.into(),
            channel_id: "c".into(),
            user_id: user.into(),
            received_at: at,
            payload: payload.into(),
        }
    }

    #[tokio::test]
    async fn users_are_counted_per_day_named_by_their_latest_message_and_ranked_by_tokens() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("air.db")).await.unwrap();
        let now = Utc::now();
        let today = now.date_naive();
        let yesterday = now - chrono::Duration::days(1);
        let at = |m: i64| now - chrono::Duration::minutes(m);
        store
            .inbox_record(record("1", "ann", yesterday, r#"{"username":"Ann Old"}"#))
            .await
            .unwrap();
        store
            .inbox_record(record("2", "ann", at(5), r#"{"username":"Ann"}"#))
            .await
            .unwrap();
        store
            .inbox_record(record("3", "ann", at(4), "not json"))
            .await
            .unwrap();
        store
            .inbox_record(record("4", "bob", at(3), r#"{"username":"Bob"}"#))
            .await
            .unwrap();
        store
            .inbox_settle("discord", "2", InboxState::Answered, None)
            .await
            .unwrap();
        store
            .inbox_settle("discord", "3", InboxState::Skipped, Some("blocked"))
            .await
            .unwrap();
        let bob = WorkspaceKey::new("discord", "bob").unwrap();
        store.add_llm_usage(&bob, today, 99, 1).await.unwrap();
        let carol = WorkspaceKey::new("misskey", "carol").unwrap();
        store.add_llm_usage(&carol, today, 9, 1).await.unwrap();

        let users = store
            .user_activity(today - chrono::Days::new(6))
            .await
            .unwrap();
        let order: Vec<&str> = users.iter().map(|u| u.user_id.as_str()).collect();
        assert_eq!(order, ["bob", "carol", "ann"], "most tokens first");
        let ann = &users[2];
        // Named by the latest message that had a name (the latest is unreadable).
        assert_eq!(ann.name.as_deref(), Some("Ann"));
        assert_eq!(ann.messages(), 3);
        let day = ann.days[&today];
        assert_eq!((day.messages, day.answered, day.unanswered), (2, 1, 1));
        assert_eq!(ann.days[&yesterday.date_naive()].messages, 1);
        assert_eq!(users[0].name.as_deref(), Some("Bob"));
        assert_eq!(users[0].tokens(), 100);
        assert_eq!(users[1].name, None, "no message recorded");

        let hours = store
            .messages_per_hour(now - chrono::Duration::hours(2))
            .await
            .unwrap();
        assert_eq!(hours.iter().map(|(_, n)| n).sum::<u64>(), 3);
        store.close().await.unwrap();
    }
}
