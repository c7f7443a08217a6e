//! The operator's decisions about a user (schema v16), made in the console: blocked — nothing
//! they send is answered — and their own daily token budget, in place of
//! `agent.budget.tokensPerUserPerDay`.
//!
//! They are read on every message (the router asks whether its author is blocked) and before
//! every model request (the budget), so [`UserControls`] keeps them in memory: loaded when the
//! store opens, changed only through [`Store::set_user_control`], which writes the row first and
//! then the map. A row is kept through the user's erasure (`erasure::Holds::Operator`): erasing
//! their data must not lift a block.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use chrono::{DateTime, Utc};
use rusqlite::{Connection, params};

use super::types::WorkspaceKey;
use super::{Store, StoreError, from_ms, to_ms};
use crate::sync::RecoverRw;

/// The operator's decisions about one user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserControl {
    /// The platform's name (`discord`, `misskey`, `console`).
    pub platform: String,
    /// The user's id there.
    pub user_id: String,
    /// Nothing they send is answered.
    pub blocked: bool,
    /// Their daily token budget (input + output), in place of the configured one; `None`: the
    /// configured one.
    pub tokens_per_day: Option<u64>,
    /// When this was last changed.
    pub changed_at: DateTime<Utc>,
    /// Who changed it (the console session's short name).
    pub changed_by: String,
}

/// What the operator sets for a user.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ControlChange {
    /// Block (`Some(true)`), unblock (`Some(false)`), or leave as it is.
    pub blocked: Option<bool>,
    /// Set a budget (`Some(Some(n))`), go back to the configured one (`Some(None)`), or leave
    /// as it is.
    pub tokens_per_day: Option<Option<u64>>,
}

/// Every user's controls, in memory; cloning shares them. The empty default blocks nobody and
/// sets no budget (a store-less router in tests).
#[derive(Debug, Clone, Default)]
pub struct UserControls {
    by_user: Arc<RwLock<HashMap<(String, String), UserControl>>>,
}

impl UserControls {
    /// Whether `user_id` on `platform` is blocked.
    pub fn is_blocked(&self, platform: &str, user_id: &str) -> bool {
        let by_user = self.by_user.read_locked();
        by_user
            .get(&(platform.to_owned(), user_id.to_owned()))
            .is_some_and(|c| c.blocked)
    }

    /// Since when `user_id` on `platform` is blocked (the block's last change), if they are.
    pub fn blocked_since(&self, platform: &str, user_id: &str) -> Option<DateTime<Utc>> {
        let by_user = self.by_user.read_locked();
        by_user
            .get(&(platform.to_owned(), user_id.to_owned()))
            .filter(|c| c.blocked)
            .map(|c| c.changed_at)
    }

    /// The operator's daily token budget for `ws`'s user, if they set one.
    pub fn tokens_per_day(&self, ws: &WorkspaceKey) -> Option<u64> {
        let by_user = self.by_user.read_locked();
        by_user
            .get(&(ws.platform().to_owned(), ws.user_id().to_owned()))
            .and_then(|c| c.tokens_per_day)
    }

    /// Every user with a control, blocked ones first, then by platform and id.
    pub fn all(&self) -> Vec<UserControl> {
        let by_user = self.by_user.read_locked();
        let mut all: Vec<UserControl> = by_user.values().cloned().collect();
        all.sort_by(|a, b| {
            (!a.blocked, &a.platform, &a.user_id).cmp(&(!b.blocked, &b.platform, &b.user_id))
        });
        all
    }

    fn replace(&self, rows: Vec<UserControl>) {
        let mut by_user = self.by_user.write_locked();
        *by_user = rows
            .into_iter()
            .map(|c| ((c.platform.clone(), c.user_id.clone()), c))
            .collect();
    }

    fn set(&self, control: Option<UserControl>, key: (String, String)) {
        let mut by_user = self.by_user.write_locked();
        match control {
            Some(control) => by_user.insert(key, control),
            None => by_user.remove(&key),
        };
    }
}

impl Store {
    /// The operator's decisions about users, in memory (see the module docs).
    pub fn controls(&self) -> &UserControls {
        &self.controls
    }

    /// Reads every user's controls from the database into [`controls`](Self::controls) (at
    /// open).
    pub(super) async fn load_controls(&self) -> Result<(), StoreError> {
        let rows = self.db.read(all).await?;
        self.controls.replace(rows);
        Ok(())
    }

    /// Changes what the operator decided about `ws`'s user (`by`: who), and answers what now
    /// holds for them (`None`: nothing, the row is gone).
    pub async fn set_user_control(
        &self,
        ws: &WorkspaceKey,
        change: ControlChange,
        by: &str,
    ) -> Result<Option<UserControl>, StoreError> {
        let (platform, user_id, by) = (
            ws.platform().to_owned(),
            ws.user_id().to_owned(),
            by.to_owned(),
        );
        let key = (platform.clone(), user_id.clone());
        let now = to_ms(Utc::now());
        let control = self
            .db
            .write(move |c| apply(c, &platform, &user_id, change, now, &by))
            .await?;
        self.controls.set(control.clone(), key);
        Ok(control)
    }
}

fn apply(
    c: &Connection,
    platform: &str,
    user_id: &str,
    change: ControlChange,
    now: i64,
    by: &str,
) -> Result<Option<UserControl>, StoreError> {
    let current = c
        .query_row(
            "SELECT blocked, tokens_per_day FROM user_controls WHERE platform = ?1 AND user_id = ?2",
            params![platform, user_id],
            |r| Ok((r.get::<_, bool>(0)?, r.get::<_, Option<i64>>(1)?)),
        )
        .ok();
    let (was_blocked, was_budget) = current.unwrap_or((false, None));
    let blocked = change.blocked.unwrap_or(was_blocked);
    let budget = match change.tokens_per_day {
        Some(budget) => budget.map(|n| i64::try_from(n).unwrap_or(i64::MAX)),
        None => was_budget,
    };
    if !blocked && budget.is_none() {
        c.execute(
            "DELETE FROM user_controls WHERE platform = ?1 AND user_id = ?2",
            params![platform, user_id],
        )?;
        return Ok(None);
    }
    c.execute(
        "INSERT INTO user_controls (platform, user_id, blocked, tokens_per_day, changed_at_ms, changed_by)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)
         ON CONFLICT (platform, user_id) DO UPDATE SET blocked = excluded.blocked,
             tokens_per_day = excluded.tokens_per_day, changed_at_ms = excluded.changed_at_ms,
             changed_by = excluded.changed_by",
        params![platform, user_id, blocked, budget, now, by],
    )?;
    Ok(Some(UserControl {
        platform: platform.to_owned(),
        user_id: user_id.to_owned(),
        blocked,
        tokens_per_day: budget.and_then(|n| u64::try_from(n).ok()),
        changed_at: from_ms(now)?,
        changed_by: by.to_owned(),
    }))
}

fn all(c: &Connection) -> Result<Vec<UserControl>, StoreError> {
    let mut stmt = c.prepare(
        "SELECT platform, user_id, blocked, tokens_per_day, changed_at_ms, changed_by
         FROM user_controls",
    )?;
    let rows = stmt.query_map([], |r| {
        Ok((
            r.get::<_, String>(0)?,
            r.get::<_, String>(1)?,
            r.get::<_, bool>(2)?,
            r.get::<_, Option<i64>>(3)?,
            r.get::<_, i64>(4)?,
            r.get::<_, String>(5)?,
        ))
    })?;
    let mut out = Vec::new();
    for row in rows {
        let (platform, user_id, blocked, budget, at, by) = row?;
        out.push(UserControl {
            platform,
            user_id,
            blocked,
            tokens_per_day: budget.and_then(|n| u64::try_from(n).ok()),
            changed_at: from_ms(at)?,
            changed_by: by,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ws(user: &str) -> WorkspaceKey {
        WorkspaceKey::new("discord", user).unwrap()
    }

    #[tokio::test]
    async fn a_block_and_a_budget_are_kept_across_a_reopen_and_lifted_rows_go() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("air.db");
        let store = Store::open(&path).await.unwrap();
        let block = ControlChange {
            blocked: Some(true),
            ..ControlChange::default()
        };
        let set = store
            .set_user_control(&ws("42"), block, "op-1")
            .await
            .unwrap()
            .unwrap();
        assert!(set.blocked);
        let budget = ControlChange {
            tokens_per_day: Some(Some(500)),
            ..ControlChange::default()
        };
        store
            .set_user_control(&ws("7"), budget, "op-1")
            .await
            .unwrap();
        assert!(store.controls().is_blocked("discord", "42"));
        assert!(!store.controls().is_blocked("misskey", "42"));
        assert!(!store.controls().is_blocked("discord", "7"));
        assert_eq!(store.controls().tokens_per_day(&ws("7")), Some(500));
        store.close().await.unwrap();

        let store = Store::open(&path).await.unwrap();
        assert!(store.controls().is_blocked("discord", "42"));
        assert_eq!(store.controls().tokens_per_day(&ws("7")), Some(500));
        let all = store.controls().all();
        assert_eq!(all.len(), 2);
        assert_eq!(all[0].user_id, "42", "blocked users first");
        assert_eq!(all[0].changed_by, "op-1");

        let unblock = ControlChange {
            blocked: Some(false),
            ..ControlChange::default()
        };
        let gone = store
            .set_user_control(&ws("42"), unblock, "op-2")
            .await
            .unwrap();
        assert_eq!(gone, None, "nothing left to hold: the row goes");
        assert!(!store.controls().is_blocked("discord", "42"));
        // Unblocking keeps a budget that was set.
        let both = ControlChange {
            blocked: Some(true),
            tokens_per_day: None,
        };
        store
            .set_user_control(&ws("7"), both, "op-2")
            .await
            .unwrap();
        let kept = store
            .set_user_control(&ws("7"), unblock, "op-2")
            .await
            .unwrap()
            .unwrap();
        assert_eq!((kept.blocked, kept.tokens_per_day), (false, Some(500)));
        store.close().await.unwrap();
        let store = Store::open(&path).await.unwrap();
        assert_eq!(store.controls().all().len(), 1);
        store.close().await.unwrap();
    }
}
