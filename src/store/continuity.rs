//! Conversation continuity (schema v10): per conversation, the folder of its agent's own
//! session data, the agent's session id, the fingerprint its agent started with, what its
//! session was shown and how far it went. `conversation::continuity` decides from it whether a
//! stopped conversation's next agent resumes; this module only stores.

use chrono::{DateTime, Utc};
use rusqlite::{Connection, OptionalExtension, params};

use super::{Store, StoreError, from_ms, to_ms};

/// One conversation's record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContinuityRecord {
    /// The conversation's key (`platform/public|private/conversation/user`).
    pub conversation: String,
    /// The platform's name (for erasing a user's data).
    pub platform: String,
    /// The user's id on it.
    pub user_id: String,
    /// The folder's name under the state root.
    pub folder: String,
    /// The agent's session id, once a turn ended on one.
    pub acp_session: Option<String>,
    /// What the agent started with (prompts, skills, place).
    pub fingerprint: u64,
    /// The message ids its session was shown.
    pub shown: Vec<String>,
    /// Turns on the session.
    pub turns: u32,
    /// Estimated tokens of the prompts sent to it.
    pub context_tokens: u64,
    /// When it was last written.
    pub updated_at: DateTime<Utc>,
}

impl Store {
    /// The record of `conversation`, if any.
    pub async fn continuity_get(
        &self,
        conversation: &str,
    ) -> Result<Option<ContinuityRecord>, StoreError> {
        let conversation = conversation.to_owned();
        self.db.read(move |c| get(c, &conversation)).await
    }

    /// Writes `record` (replacing the conversation's).
    pub async fn continuity_put(&self, record: ContinuityRecord) -> Result<(), StoreError> {
        self.db.write(move |c| put(c, &record)).await
    }

    /// The folders of every conversation of `ws`'s user.
    pub async fn continuity_folders_of(
        &self,
        ws: &super::WorkspaceKey,
    ) -> Result<Vec<String>, StoreError> {
        let (platform, user) = (ws.platform().to_owned(), ws.user_id().to_owned());
        self.db
            .read(move |c| {
                let mut stmt = c.prepare_cached(
                    "SELECT folder FROM continuity WHERE platform = ?1 AND user_id = ?2",
                )?;
                let rows = stmt.query_map([platform, user], |r| r.get::<_, String>(0))?;
                Ok(rows.collect::<Result<Vec<_>, _>>()?)
            })
            .await
    }

    /// Deletes the record of `conversation`; returns its folder's name.
    pub async fn continuity_delete(
        &self,
        conversation: &str,
    ) -> Result<Option<String>, StoreError> {
        let conversation = conversation.to_owned();
        self.db
            .write(move |c| {
                let folder = get(c, &conversation)?.map(|r| r.folder);
                c.execute(
                    "DELETE FROM continuity WHERE conversation = ?1",
                    params![conversation],
                )?;
                Ok(folder)
            })
            .await
    }

    /// Deletes the records last written before `before`; returns their folders' names.
    pub async fn continuity_expire(
        &self,
        before: DateTime<Utc>,
    ) -> Result<Vec<String>, StoreError> {
        let before = to_ms(before);
        self.db
            .write(move |c| {
                let folders = c
                    .prepare("SELECT folder FROM continuity WHERE updated_ms < ?1")?
                    .query_map(params![before], |row| row.get::<_, String>(0))?
                    .collect::<Result<Vec<_>, _>>()?;
                c.execute(
                    "DELETE FROM continuity WHERE updated_ms < ?1",
                    params![before],
                )?;
                Ok(folders)
            })
            .await
    }

    /// Every folder name with a record (the others under the state root are left over).
    pub async fn continuity_folders(&self) -> Result<Vec<String>, StoreError> {
        self.db
            .read(|c| {
                Ok(c.prepare("SELECT folder FROM continuity")?
                    .query_map([], |row| row.get::<_, String>(0))?
                    .collect::<Result<Vec<_>, _>>()?)
            })
            .await
    }
}

fn get(c: &Connection, conversation: &str) -> Result<Option<ContinuityRecord>, StoreError> {
    let row = c
        .query_row(
            "SELECT conversation, platform, user_id, folder, acp_session, fingerprint, shown,
                    turns, context_tokens, updated_ms
             FROM continuity WHERE conversation = ?1",
            params![conversation],
            |row| {
                Ok((
                    row.get::<_, String>(0)?,
                    row.get::<_, String>(1)?,
                    row.get::<_, String>(2)?,
                    row.get::<_, String>(3)?,
                    row.get::<_, Option<String>>(4)?,
                    row.get::<_, i64>(5)?,
                    row.get::<_, String>(6)?,
                    row.get::<_, i64>(7)?,
                    row.get::<_, i64>(8)?,
                    row.get::<_, i64>(9)?,
                ))
            },
        )
        .optional()?;
    let Some((conversation, platform, user_id, folder, acp_session, fp, shown, turns, tokens, at)) =
        row
    else {
        return Ok(None);
    };
    Ok(Some(ContinuityRecord {
        conversation,
        platform,
        user_id,
        folder,
        acp_session,
        fingerprint: fp as u64,
        // A record that does not parse shows nothing as shown: the next prompt is whole.
        shown: serde_json::from_str(&shown).unwrap_or_default(),
        turns: u32::try_from(turns).unwrap_or(u32::MAX),
        context_tokens: u64::try_from(tokens).unwrap_or(0),
        updated_at: from_ms(at)?,
    }))
}

fn put(c: &Connection, r: &ContinuityRecord) -> Result<(), StoreError> {
    let shown = serde_json::to_string(&r.shown)
        .map_err(|e| StoreError::Internal(format!("continuity shown ids: {e}")))?;
    c.execute(
        "INSERT INTO continuity (conversation, platform, user_id, folder, acp_session,
                                 fingerprint, shown, turns, context_tokens, updated_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)
         ON CONFLICT (conversation) DO UPDATE SET
             folder = excluded.folder, acp_session = excluded.acp_session,
             fingerprint = excluded.fingerprint, shown = excluded.shown,
             turns = excluded.turns, context_tokens = excluded.context_tokens,
             updated_ms = excluded.updated_ms",
        params![
            r.conversation,
            r.platform,
            r.user_id,
            r.folder,
            r.acp_session,
            r.fingerprint as i64,
            shown,
            i64::from(r.turns),
            i64::try_from(r.context_tokens).unwrap_or(i64::MAX),
            to_ms(r.updated_at),
        ],
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(conversation: &str, folder: &str, at: DateTime<Utc>) -> ContinuityRecord {
        ContinuityRecord {
            conversation: conversation.into(),
            platform: "discord".into(),
            user_id: "u1".into(),
            folder: folder.into(),
            acp_session: Some("ses_1".into()),
            fingerprint: u64::MAX - 3,
            shown: vec!["m1".into(), "m2".into()],
            turns: 2,
            context_tokens: 900,
            updated_at: at,
        }
    }

    #[tokio::test]
    async fn a_record_round_trips_and_expires_with_its_folder() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("db.sqlite")).await.unwrap();
        let old = from_ms(to_ms(Utc::now()) - 86_400_000).unwrap();
        let now = from_ms(to_ms(Utc::now())).unwrap();
        store.continuity_put(record("a", "f-a", old)).await.unwrap();
        store.continuity_put(record("b", "f-b", now)).await.unwrap();
        assert_eq!(
            store.continuity_get("b").await.unwrap(),
            Some(record("b", "f-b", now))
        );
        let mut newer = record("b", "f-b", now);
        newer.turns = 3;
        newer.acp_session = None;
        store.continuity_put(newer.clone()).await.unwrap();
        assert_eq!(store.continuity_get("b").await.unwrap(), Some(newer));
        let gone = store
            .continuity_expire(from_ms(to_ms(Utc::now()) - 3_600_000).unwrap())
            .await
            .unwrap();
        assert_eq!(gone, ["f-a"]);
        assert_eq!(store.continuity_get("a").await.unwrap(), None);
        assert_eq!(store.continuity_folders().await.unwrap(), ["f-b"]);
        assert_eq!(
            store.continuity_delete("b").await.unwrap().as_deref(),
            Some("f-b")
        );
        assert_eq!(store.continuity_delete("b").await.unwrap(), None);
    }
}
