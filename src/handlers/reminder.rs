//! set-reminder, cancel-reminder and list-reminders. All three work only in
//! direct messages and only on the session user's own reminders.
//!
//! set-reminder: one per session; `scheduledAt` at least `reminders.minIntervalMs` and at most
//! `reminders.maxDaysAhead` days ahead; at most `reminders.maxRemindersPerUser` pending (checked
//! atomically by the store, reported as 429 `QUOTA_EXCEEDED`; a repeating reminder is one).
//! With `every` (`day`, `week`, `month`: never more often than daily) it repeats at the local
//! time of `scheduledAt` in `timeZone`, else the place's zone (`places[].timeZone`, else
//! `reminders.timeZone`), until `until` or `count` deliveries, or cancelled (the whole series). The message goes through the
//! outgoing-text pipeline now; the scheduler splits it at delivery. Creating the row is enough:
//! the store wakes the scheduler. Whether the turn set one is the handler's own per-turn slot,
//! [`ReminderSlot`].

use async_trait::async_trait;
use chrono::{DateTime, Duration, SecondsFormat, Utc};
use serde::Deserialize;
use serde_json::{Value, json};

use super::common::{Deps, invalid, outgoing_text, params, require_dm, store_error, workspace_key};
use crate::config::RemindersConfig;
use crate::session::TurnSlot;
use crate::skill_api::{CallContext, SkillError, SkillHandler};
use crate::store::{NewReminder, Recurrence};
use crate::timetable::Every;

/// Whether this turn's set-reminder already succeeded (a slot of the session's turn).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReminderSlot {
    /// Set by a successful call (or one in flight): one reminder per turn.
    pub set: bool,
}

impl TurnSlot for ReminderSlot {}

/// The `set-reminder` skill: one reminder per turn, delivered by DM when due.
pub(crate) struct SetReminder(pub Deps);

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SetParams {
    scheduled_at: String,
    message: String,
    every: Option<String>,
    until: Option<String>,
    count: Option<u32>,
    time_zone: Option<String>,
}

/// Most occurrences shown after the first in set-reminder's answer.
const SHOWN_AHEAD: u32 = 2;

#[async_trait]
impl SkillHandler for SetReminder {
    fn name(&self) -> &str {
        "set-reminder"
    }

    async fn call(&self, ctx: &CallContext, raw: Value) -> Result<Value, SkillError> {
        require_dm(ctx, "set-reminder")?;
        let reserved =
            ctx.with_slot(|slot: &mut ReminderSlot| !std::mem::replace(&mut slot.set, true));
        if !reserved {
            return Err(SkillError::QuotaExceeded {
                message: "A reminder was already set in this conversation turn; only one can be \
                          set per turn. Tell the user it is set, and set further reminders when \
                          they ask again."
                    .into(),
                terminate: false,
            });
        }
        let result = self.set(ctx, raw).await;
        if result.is_err() {
            ctx.with_slot(|slot: &mut ReminderSlot| slot.set = false);
        }
        result
    }
}

impl SetReminder {
    async fn set(&self, ctx: &CallContext, raw: Value) -> Result<Value, SkillError> {
        let p: SetParams = params(raw)?;
        let config = &self.0.reminders_config;
        let scheduled_at = check_time(&p.scheduled_at, self.0.clock.now(), config)?;
        let recurrence = recurrence(&p, scheduled_at, &ctx.session().place.time_zone)?;
        let message = outgoing_text(&p.message, "/message")?;
        let reminder = self
            .0
            .store
            .create_reminder_repeating(
                NewReminder {
                    workspace: workspace_key(ctx.session())?,
                    message,
                    scheduled_at,
                },
                recurrence,
                config.max_reminders_per_user,
            )
            .await
            .map_err(|e| store_error(e, "reminder"))?;
        tracing::info!(
            session_id = %ctx.session_id(),
            reminder_id = %reminder.id,
            chars = reminder.message.chars().count(),
            every = reminder.recurrence.as_ref().map(|r| r.every.as_str()),
            "reminder set"
        );
        let mut answer = json!({
            "reminderId": reminder.id,
            "scheduledAt": utc(reminder.scheduled_at),
        });
        if let Some(rec) = &reminder.recurrence {
            answer["repeats"] = repeats(rec, None);
            let mut then = Vec::new();
            let mut at = reminder.scheduled_at;
            for delivered in 1..=SHOWN_AHEAD {
                let Some(next) = rec.next_after(at, delivered) else {
                    break;
                };
                then.push(utc(next));
                at = next;
            }
            answer["then"] = json!(then);
        }
        Ok(answer)
    }
}

/// The repetition `p` asks for, first at `first`, in `p.timeZone` or the place's `zone`;
/// `None` without `every`. The repetition's flags without `every`, an unknown zone or an end
/// before the first time are `INVALID_PARAMS` naming the flag.
fn recurrence(
    p: &SetParams,
    first: DateTime<Utc>,
    zone: &str,
) -> Result<Option<Recurrence>, SkillError> {
    let Some(every) = &p.every else {
        for (set, path) in [
            (p.until.is_some(), "/until"),
            (p.count.is_some(), "/count"),
            (p.time_zone.is_some(), "/timeZone"),
        ] {
            if set {
                return Err(invalid(
                    path,
                    "goes with --every (day, week or month); without it the reminder is sent once",
                ));
            }
        }
        return Ok(None);
    };
    let every: Every = every.parse().map_err(|e: String| invalid("/every", e))?;
    let time_zone = p.time_zone.as_deref().unwrap_or(zone).trim().to_owned();
    crate::timetable::zone(&time_zone).map_err(|e| invalid("/timeZone", e.to_string()))?;
    let until = match &p.until {
        None => None,
        Some(raw) => {
            let until = DateTime::parse_from_rfc3339(raw.trim())
                .map_err(|_| {
                    invalid(
                        "/until",
                        format!("{raw:?} is not an ISO 8601 date-time like 2030-06-30T23:59:59Z"),
                    )
                })?
                .with_timezone(&Utc);
            if until < first {
                return Err(invalid(
                    "/until",
                    format!(
                        "{} is before the first time {}; pick a later end",
                        utc(until),
                        utc(first)
                    ),
                ));
            }
            Some(until)
        }
    };
    Ok(Some(Recurrence {
        every,
        time_zone,
        first_at: first,
        until,
        count: p.count,
    }))
}

/// How a reminder repeats, as the skills answer it (`delivered` for a listed one).
fn repeats(rec: &Recurrence, delivered: Option<u32>) -> Value {
    let mut out = json!({"every": rec.every.as_str(), "timeZone": rec.time_zone});
    if let Some(until) = rec.until {
        out["until"] = json!(utc(until));
    }
    if let Some(count) = rec.count {
        out["count"] = json!(count);
    }
    if let Some(delivered) = delivered {
        out["delivered"] = json!(delivered);
    }
    out
}

/// Parses `scheduledAt` (RFC 3339 / ISO 8601 with an offset, normally `Z`) and applies the time
/// window of `reminders`.
fn check_time(
    raw: &str,
    now: DateTime<Utc>,
    config: &RemindersConfig,
) -> Result<DateTime<Utc>, SkillError> {
    let at = DateTime::parse_from_rfc3339(raw.trim())
        .map_err(|_| {
            invalid(
                "/scheduledAt",
                format!(
                    "{raw:?} is not an ISO 8601 date-time; use the form 2030-01-31T09:00:00Z \
                     (UTC, with the Z)"
                ),
            )
        })?
        .with_timezone(&Utc);
    let min_ms = i64::try_from(config.min_interval_ms).unwrap_or(i64::MAX);
    let earliest = now + Duration::milliseconds(min_ms);
    if at < earliest {
        return Err(invalid(
            "/scheduledAt",
            format!(
                "{} is too soon: reminders must be at least {} second(s) in the future (it is \
                 now {}); pick a later time",
                utc(at),
                config.min_interval_ms.div_ceil(1000),
                utc(now)
            ),
        ));
    }
    let latest = now + Duration::days(i64::from(config.max_days_ahead));
    if at > latest {
        return Err(invalid(
            "/scheduledAt",
            format!(
                "{} is too far ahead: reminders can be at most {} days in the future (until {}); \
                 pick an earlier time",
                utc(at),
                config.max_days_ahead,
                utc(latest)
            ),
        ));
    }
    Ok(at)
}

fn utc(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// The `cancel-reminder` skill: cancels one of the user's pending reminders.
pub(crate) struct CancelReminder(pub Deps);

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct CancelParams {
    reminder_id: String,
}

#[async_trait]
impl SkillHandler for CancelReminder {
    fn name(&self) -> &str {
        "cancel-reminder"
    }

    async fn call(&self, ctx: &CallContext, raw: Value) -> Result<Value, SkillError> {
        require_dm(ctx, "cancel-reminder")?;
        let p: CancelParams = params(raw)?;
        let reminder = self
            .0
            .store
            .cancel_reminder(&workspace_key(ctx.session())?, &p.reminder_id)
            .await
            .map_err(|e| {
                store_error(
                    e,
                    &format!(
                        "reminder {} is not a pending reminder of this user (list-reminders \
                         shows the ones that can be cancelled)",
                        p.reminder_id
                    ),
                )
            })?;
        Ok(json!({
            "reminderId": reminder.id,
            "cancelled": true,
            "series": reminder.recurrence.is_some(),
        }))
    }
}

/// The `list-reminders` skill: the user's pending reminders.
pub(crate) struct ListReminders(pub Deps);

#[async_trait]
impl SkillHandler for ListReminders {
    fn name(&self) -> &str {
        "list-reminders"
    }

    fn read_only(&self) -> bool {
        true
    }

    async fn call(&self, ctx: &CallContext, _raw: Value) -> Result<Value, SkillError> {
        require_dm(ctx, "list-reminders")?;
        let pending = self
            .0
            .store
            .pending_reminders(&workspace_key(ctx.session())?)
            .await
            .map_err(|e| store_error(e, "reminders"))?;
        let reminders: Vec<Value> = pending
            .iter()
            .map(|r| {
                let mut listed = json!({
                    "id": r.id,
                    "message": r.message,
                    "scheduledAt": utc(r.scheduled_at),
                    "createdAt": utc(r.created_at),
                });
                if let Some(rec) = &r.recurrence {
                    listed["repeats"] = repeats(rec, Some(r.occurrences));
                }
                listed
            })
            .collect();
        Ok(json!({"count": reminders.len(), "reminders": reminders}))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2030-01-01T00:00:00Z")
            .map(|d| d.with_timezone(&Utc))
            .unwrap_or_default()
    }

    #[test]
    fn the_time_window_is_enforced() {
        let config = RemindersConfig::default();
        assert!(check_time("2030-01-01T00:00:30Z", now(), &config).is_err());
        assert!(check_time("2030-01-01T00:01:00Z", now(), &config).is_ok());
        assert!(check_time("2031-01-02T00:00:00Z", now(), &config).is_ok());
        assert!(check_time("2031-01-03T00:00:01Z", now(), &config).is_err());
        assert!(check_time("tomorrow", now(), &config).is_err());
        // Offsets are converted to UTC.
        assert_eq!(
            check_time("2030-01-01T10:00:00+09:00", now(), &config)
                .map(utc)
                .ok(),
            Some("2030-01-01T01:00:00Z".to_owned())
        );
    }

    fn set(
        every: Option<&str>,
        until: Option<&str>,
        count: Option<u32>,
        zone: Option<&str>,
    ) -> SetParams {
        SetParams {
            scheduled_at: "2030-01-01T09:00:00Z".into(),
            message: "stretch".into(),
            every: every.map(Into::into),
            until: until.map(Into::into),
            count,
            time_zone: zone.map(Into::into),
        }
    }

    fn problem(result: Result<Option<Recurrence>, SkillError>) -> (String, String) {
        let Err(SkillError::InvalidParams { details }) = result else {
            panic!("expected INVALID_PARAMS");
        };
        (details[0].path.clone(), details[0].problem.clone())
    }

    #[test]
    fn a_repetition_takes_the_places_zone_unless_named_and_its_flags_need_every() {
        let first = DateTime::parse_from_rfc3339("2030-01-01T09:00:00Z")
            .unwrap()
            .to_utc();
        assert_eq!(
            recurrence(&set(None, None, None, None), first, "UTC").ok(),
            Some(None)
        );
        let weekly = recurrence(&set(Some("week"), None, Some(3), None), first, "Asia/Tokyo")
            .unwrap()
            .unwrap();
        assert_eq!(
            (weekly.every, weekly.time_zone.as_str(), weekly.count),
            (Every::Week, "Asia/Tokyo", Some(3))
        );
        let named = recurrence(
            &set(Some("day"), None, None, Some("Europe/Berlin")),
            first,
            "UTC",
        )
        .unwrap()
        .unwrap();
        assert_eq!(named.time_zone, "Europe/Berlin");
        for (params, path) in [
            (
                set(None, Some("2030-02-01T00:00:00Z"), None, None),
                "/until",
            ),
            (set(None, None, Some(2), None), "/count"),
            (set(None, None, None, Some("UTC")), "/timeZone"),
            (set(Some("hour"), None, None, None), "/every"),
            (set(Some("day"), None, None, Some("Mars/Base")), "/timeZone"),
            (
                set(Some("day"), Some("2029-12-31T00:00:00Z"), None, None),
                "/until",
            ),
            (set(Some("day"), Some("soon"), None, None), "/until"),
        ] {
            assert_eq!(problem(recurrence(&params, first, "UTC")).0, path);
        }
    }

    #[test]
    fn too_soon_explains_the_minimum() {
        let Err(SkillError::InvalidParams { details }) =
            check_time("2029-12-31T00:00:00Z", now(), &RemindersConfig::default())
        else {
            panic!("expected INVALID_PARAMS");
        };
        assert_eq!(details[0].path, "/scheduledAt");
        assert!(details[0].problem.contains("60 second"), "{details:?}");
    }
}
