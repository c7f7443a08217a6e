//! Tokens the model gateway metered, per workspace and UTC day (table `llm_usage`,
//! `schema_v2.sql`): what the daily budgets (`agent.budget`) are checked against; and again per
//! place (`llm_usage_place`, `schema_v9.sql`), for a place's own limit
//! (`places[].tokensPerUserPerDay`).
//!
//! The same rows carry the voice a user's messages used ([`VoiceUsage`], `schema_v14.sql`):
//! audio transcribed and speech synthesised; and the MCP tool calls made for them
//! (`schema_v15.sql`).
//!
//! Rows are only ever added to (an upsert per metered response), so concurrent sessions of one
//! user cannot lose each other's counts: each addition is one statement on the writer thread.

use chrono::NaiveDate;
use rusqlite::{Connection, OptionalExtension, params};
use serde::Serialize;

use super::{StoreError, WorkspaceKey};

/// Token usage of one day: of one workspace, or of all of them together.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LlmUsage {
    /// Prompt (input) tokens.
    pub input_tokens: u64,
    /// Completion (output) tokens.
    pub output_tokens: u64,
    /// Metered model responses.
    pub requests: u64,
}

impl LlmUsage {
    /// Input plus output tokens: what budgets limit.
    pub fn total_tokens(&self) -> u64 {
        self.input_tokens.saturating_add(self.output_tokens)
    }
}

/// Voice usage of one day: of one workspace, or of all of them together.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct VoiceUsage {
    /// Milliseconds of audio transcribed.
    pub audio_in_ms: u64,
    /// Transcriptions made.
    pub transcriptions: u64,
    /// Milliseconds of speech synthesised.
    pub audio_out_ms: u64,
    /// Speech syntheses made.
    pub speeches: u64,
}

/// One day of a user's usage, as their data export shows it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DayUsage {
    /// The UTC day.
    pub day: NaiveDate,
    /// Model tokens and responses.
    pub tokens: LlmUsage,
    /// Audio transcribed and speech synthesised.
    pub voice: VoiceUsage,
    /// MCP tool calls forwarded.
    pub mcp_calls: u64,
}

/// The stored spelling of a day (`YYYY-MM-DD`, sorts chronologically).
fn day_text(day: NaiveDate) -> String {
    day.format("%Y-%m-%d").to_string()
}

/// SQLite integers are signed; counts beyond `i64::MAX` saturate.
fn to_sql(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn from_sql(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

/// Adds one metered response's tokens to `(ws, day)`.
pub(crate) fn add(
    conn: &Connection,
    ws: &WorkspaceKey,
    day: NaiveDate,
    input: u64,
    output: u64,
) -> Result<(), StoreError> {
    conn.prepare_cached(
        "INSERT INTO llm_usage (workspace, day, input_tokens, output_tokens, requests)
         VALUES (?1, ?2, ?3, ?4, 1)
         ON CONFLICT (workspace, day) DO UPDATE SET
             input_tokens  = min(input_tokens + excluded.input_tokens, 9223372036854775807),
             output_tokens = min(output_tokens + excluded.output_tokens, 9223372036854775807),
             requests      = requests + 1",
    )?
    .execute(params![
        ws.to_string(),
        day_text(day),
        to_sql(input),
        to_sql(output)
    ])?;
    Ok(())
}

/// Adds `voice` to `(ws, day)`.
pub(crate) fn add_voice(
    conn: &Connection,
    ws: &WorkspaceKey,
    day: NaiveDate,
    voice: VoiceUsage,
) -> Result<(), StoreError> {
    conn.prepare_cached(
        "INSERT INTO llm_usage (workspace, day, audio_in_ms, transcriptions, audio_out_ms, speeches)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)
         ON CONFLICT (workspace, day) DO UPDATE SET
             audio_in_ms    = min(audio_in_ms + excluded.audio_in_ms, 9223372036854775807),
             transcriptions = min(transcriptions + excluded.transcriptions, 9223372036854775807),
             audio_out_ms   = min(audio_out_ms + excluded.audio_out_ms, 9223372036854775807),
             speeches       = min(speeches + excluded.speeches, 9223372036854775807)",
    )?
    .execute(params![
        ws.to_string(),
        day_text(day),
        to_sql(voice.audio_in_ms),
        to_sql(voice.transcriptions),
        to_sql(voice.audio_out_ms),
        to_sql(voice.speeches)
    ])?;
    Ok(())
}

/// Adds `calls` MCP tool calls to `(ws, day)`.
pub(crate) fn add_mcp_calls(
    conn: &Connection,
    ws: &WorkspaceKey,
    day: NaiveDate,
    calls: u64,
) -> Result<(), StoreError> {
    conn.prepare_cached(
        "INSERT INTO llm_usage (workspace, day, mcp_calls) VALUES (?1, ?2, ?3)
         ON CONFLICT (workspace, day) DO UPDATE SET
             mcp_calls = min(mcp_calls + excluded.mcp_calls, 9223372036854775807)",
    )?
    .execute(params![ws.to_string(), day_text(day), to_sql(calls)])?;
    Ok(())
}

/// MCP tool calls on `day` of `ws`.
pub(crate) fn mcp_calls_on(
    conn: &Connection,
    day: NaiveDate,
    ws: &WorkspaceKey,
) -> Result<u64, StoreError> {
    Ok(conn
        .prepare_cached("SELECT mcp_calls FROM llm_usage WHERE workspace = ?1 AND day = ?2")?
        .query_row(params![ws.to_string(), day_text(day)], |r| {
            r.get::<_, i64>(0)
        })
        .optional()?
        .map_or(0, from_sql))
}

/// Voice usage on `day` of `ws`, or of every workspace when `None`.
pub(crate) fn voice_on(
    conn: &Connection,
    day: NaiveDate,
    ws: Option<&WorkspaceKey>,
) -> Result<VoiceUsage, StoreError> {
    let row = |r: &rusqlite::Row<'_>| -> rusqlite::Result<VoiceUsage> {
        Ok(VoiceUsage {
            audio_in_ms: from_sql(r.get(0)?),
            transcriptions: from_sql(r.get(1)?),
            audio_out_ms: from_sql(r.get(2)?),
            speeches: from_sql(r.get(3)?),
        })
    };
    let sums = "SELECT coalesce(sum(audio_in_ms), 0), coalesce(sum(transcriptions), 0),
                       coalesce(sum(audio_out_ms), 0), coalesce(sum(speeches), 0)
                FROM llm_usage WHERE day = ?1";
    Ok(match ws {
        Some(ws) => conn
            .prepare_cached(&format!("{sums} AND workspace = ?2"))?
            .query_row(params![day_text(day), ws.to_string()], row)?,
        None => conn
            .prepare_cached(sums)?
            .query_row(params![day_text(day)], row)?,
    })
}

/// Adds one metered response's tokens to `(ws, place, day)`.
pub(crate) fn add_in_place(
    conn: &Connection,
    ws: &WorkspaceKey,
    place: &str,
    day: NaiveDate,
    input: u64,
    output: u64,
) -> Result<(), StoreError> {
    conn.prepare_cached(
        "INSERT INTO llm_usage_place (workspace, place, day, input_tokens, output_tokens, requests)
         VALUES (?1, ?2, ?3, ?4, ?5, 1)
         ON CONFLICT (workspace, place, day) DO UPDATE SET
             input_tokens  = min(input_tokens + excluded.input_tokens, 9223372036854775807),
             output_tokens = min(output_tokens + excluded.output_tokens, 9223372036854775807),
             requests      = requests + 1",
    )?
    .execute(params![
        ws.to_string(),
        place,
        day_text(day),
        to_sql(input),
        to_sql(output)
    ])?;
    Ok(())
}

/// Usage on `day` of `ws` in `place`.
pub(crate) fn in_place_on(
    conn: &Connection,
    day: NaiveDate,
    ws: &WorkspaceKey,
    place: &str,
) -> Result<LlmUsage, StoreError> {
    Ok(conn
        .prepare_cached(
            "SELECT input_tokens, output_tokens, requests FROM llm_usage_place
             WHERE workspace = ?1 AND place = ?2 AND day = ?3",
        )?
        .query_row(params![ws.to_string(), place, day_text(day)], |r| {
            Ok(LlmUsage {
                input_tokens: from_sql(r.get(0)?),
                output_tokens: from_sql(r.get(1)?),
                requests: from_sql(r.get(2)?),
            })
        })
        .optional()?
        .unwrap_or_default())
}

/// Usage on `day` of `ws`, or of every workspace when `None`.
pub(crate) fn on(
    conn: &Connection,
    day: NaiveDate,
    ws: Option<&WorkspaceKey>,
) -> Result<LlmUsage, StoreError> {
    let row = |r: &rusqlite::Row<'_>| -> rusqlite::Result<LlmUsage> {
        Ok(LlmUsage {
            input_tokens: from_sql(r.get(0)?),
            output_tokens: from_sql(r.get(1)?),
            requests: from_sql(r.get(2)?),
        })
    };
    let usage = match ws {
        Some(ws) => conn
            .prepare_cached(
                "SELECT input_tokens, output_tokens, requests FROM llm_usage
                 WHERE workspace = ?1 AND day = ?2",
            )?
            .query_row(params![ws.to_string(), day_text(day)], row)
            .optional()?
            .unwrap_or_default(),
        None => conn
            .prepare_cached(
                "SELECT coalesce(sum(input_tokens), 0), coalesce(sum(output_tokens), 0),
                        coalesce(sum(requests), 0)
                 FROM llm_usage WHERE day = ?1",
            )?
            .query_row(params![day_text(day)], row)?,
    };
    Ok(usage)
}

/// Every day of usage of `ws`, oldest first: tokens, voice and MCP tool calls.
pub(crate) fn days_of(conn: &Connection, ws: &WorkspaceKey) -> Result<Vec<DayUsage>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT day, input_tokens, output_tokens, requests,
                audio_in_ms, transcriptions, audio_out_ms, speeches, mcp_calls
         FROM llm_usage WHERE workspace = ?1 ORDER BY day",
    )?;
    let rows = stmt.query_map([ws.to_string()], |r| {
        Ok((
            r.get::<_, String>(0)?,
            LlmUsage {
                input_tokens: from_sql(r.get(1)?),
                output_tokens: from_sql(r.get(2)?),
                requests: from_sql(r.get(3)?),
            },
            VoiceUsage {
                audio_in_ms: from_sql(r.get(4)?),
                transcriptions: from_sql(r.get(5)?),
                audio_out_ms: from_sql(r.get(6)?),
                speeches: from_sql(r.get(7)?),
            },
            from_sql(r.get(8)?),
        ))
    })?;
    let mut out = Vec::new();
    for row in rows {
        let (day, tokens, voice, mcp_calls) = row?;
        let day = NaiveDate::parse_from_str(&day, "%Y-%m-%d")
            .map_err(|e| StoreError::Internal(format!("corrupt usage day {day:?}: {e}")))?;
        out.push(DayUsage {
            day,
            tokens,
            voice,
            mcp_calls,
        });
    }
    Ok(out)
}
