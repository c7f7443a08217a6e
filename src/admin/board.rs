//! What every agent is doing and has done, for the console: an [`ActivityObserver`] the runner
//! reports to (the same reports the chat console's status line reads). *Now* shows the running
//! turns; each turn's timeline — when it started, thought, ran which tool — is kept while it
//! runs and, once it ended, among the latest [`KEPT_TURNS`] (in memory, since the start), with
//! the message it answered, its model tokens and the skills it called, so *Conversations* can
//! show them beside the message.
//!
//! Only the kind of work is kept — thinking, or which tool — never the agent's text; a
//! direct message's turn keeps no command line either. Who, where and which message are read
//! from the session registry ([`Board::attach`]) when a turn starts and ends.

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, OnceLock};

use chrono::{DateTime, Utc};
use tokio::time::Instant;

use crate::agent::{Activity, ActivityObserver};
use crate::session::SessionRegistry;
use crate::sync::lock;

/// Finished turns kept for *Conversations* and their timelines.
pub const KEPT_TURNS: usize = 500;
/// Steps kept per turn (the first ones; a turn that loops on a tool stops growing).
const KEPT_STEPS: usize = 100;

/// One running session as the board knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Running {
    /// Our session id.
    pub session_id: String,
    /// When its turn started (wall clock, for the page).
    pub since: DateTime<Utc>,
    /// How long it has run.
    pub elapsed_ms: u64,
    /// What it is doing: `starting`, `thinking`, or the tool's title.
    pub doing: String,
    /// The tool's command line, when it runs one.
    pub command: Option<String>,
}

/// One step of a turn: what the agent began doing, and when (from the turn's start).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// Milliseconds since the turn started.
    pub at_ms: u64,
    /// `starting`, `thinking`, or the tool's title.
    pub doing: String,
    /// The tool's command line (never a direct message's).
    pub command: Option<String>,
    /// The skill the tool ran (its script under `skills/<name>/scripts/`), a direct message's
    /// too: a skill's name is not the conversation's.
    pub skill: Option<String>,
}

/// A turn, running or ended, with its timeline.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TurnRecord {
    /// Our session id.
    pub session_id: String,
    /// `discord`, `misskey`, `console` (empty when the session was not found).
    pub platform: String,
    /// The message it answers, when it answers one.
    pub message_id: Option<String>,
    /// Who it answers (their name, else their id).
    pub user: String,
    /// The `places:` rule.
    pub place: String,
    /// A direct message (or not known): no command lines.
    pub dm: bool,
    /// When it started.
    pub since: DateTime<Utc>,
    /// How long it ran (so far, for a running one).
    pub took_ms: u64,
    /// Model tokens its requests used.
    pub tokens: u64,
    /// Whether it has ended.
    pub ended: bool,
    /// What it did, in order.
    pub steps: Vec<Step>,
}

impl TurnRecord {
    /// The skills its steps ran (a tool whose command runs `skills/<name>/scripts/...`), in
    /// order, repeats included.
    pub fn skill_calls(&self) -> Vec<String> {
        self.steps.iter().filter_map(|s| s.skill.clone()).collect()
    }
}

/// The skill a command line runs, if it runs one's script.
fn skill_of(command: &str) -> Option<String> {
    let at = command.find("skills/")?;
    let rest = &command[at + "skills/".len()..];
    let (name, tail) = rest.split_once('/')?;
    (tail.starts_with("scripts/") && !name.is_empty()).then(|| name.to_owned())
}

#[derive(Debug)]
struct Entry {
    started: Instant,
    activity: Activity,
    record: TurnRecord,
}

/// The board.
#[derive(Debug, Default)]
pub struct Board {
    entries: Mutex<HashMap<String, Entry>>,
    finished: Mutex<VecDeque<TurnRecord>>,
    sessions: OnceLock<SessionRegistry>,
}

impl Board {
    /// Reads who, where and which message from `sessions` (once, when the daemon runs).
    pub fn attach(&self, sessions: SessionRegistry) {
        let _ = self.sessions.set(sessions);
    }

    /// The running sessions, longest-running first.
    pub fn running(&self) -> Vec<Running> {
        let mut out: Vec<Running> = lock(&self.entries)
            .iter()
            .map(|(id, e)| {
                let (doing, command) = doing(&e.activity);
                Running {
                    session_id: id.clone(),
                    since: e.record.since,
                    elapsed_ms: millis(e.started),
                    doing,
                    command,
                }
            })
            .collect();
        out.sort_by(|a, b| {
            b.elapsed_ms
                .cmp(&a.elapsed_ms)
                .then(a.session_id.cmp(&b.session_id))
        });
        out
    }

    /// The ended turns kept, newest first.
    pub fn finished(&self) -> Vec<TurnRecord> {
        lock(&self.finished).iter().rev().cloned().collect()
    }

    /// The turn of `session_id`: the running one, else the latest that ended.
    pub fn turn(&self, session_id: &str) -> Option<TurnRecord> {
        if let Some(e) = lock(&self.entries).get(session_id) {
            let mut record = e.record.clone();
            record.took_ms = millis(e.started);
            return Some(record);
        }
        lock(&self.finished)
            .iter()
            .rev()
            .find(|r| r.session_id == session_id)
            .cloned()
    }

    /// Who, where, which message and the tokens so far, from the session registry.
    fn describe(&self, session_id: &str, record: &mut TurnRecord) {
        let Some(handle) = self.sessions.get().and_then(|s| s.lookup(session_id)) else {
            return;
        };
        let context = handle.context();
        let origin = &context.origin;
        record.platform = origin.platform.as_str().to_owned();
        record.user = if origin.username.is_empty() {
            origin.user_id.to_string()
        } else {
            origin.username.clone()
        };
        record.place = context.place.name.to_string();
        record.dm = origin.is_dm;
        record.message_id = context.trigger_message_id.as_ref().map(|m| m.to_string());
        record.tokens = handle.with_state(|s| s.model_tokens);
    }
}

/// What an activity is, as a page names it.
fn doing(activity: &Activity) -> (String, Option<String>) {
    match activity {
        Activity::Started => ("starting".to_owned(), None),
        Activity::Thinking | Activity::Ended => ("thinking".to_owned(), None),
        Activity::Tool { title, command } => (title.clone(), command.clone()),
    }
}

fn millis(since: Instant) -> u64 {
    u64::try_from(since.elapsed().as_millis()).unwrap_or(u64::MAX)
}

impl ActivityObserver for Board {
    fn activity(&self, session_id: &str, activity: &Activity) {
        let mut entries = lock(&self.entries);
        if *activity == Activity::Ended {
            let Some(mut entry) = entries.remove(session_id) else {
                return;
            };
            drop(entries);
            self.describe(session_id, &mut entry.record);
            entry.record.took_ms = millis(entry.started);
            entry.record.ended = true;
            let mut finished = lock(&self.finished);
            finished.push_back(entry.record);
            if finished.len() > KEPT_TURNS {
                finished.pop_front();
            }
            return;
        }
        let entry = entries.entry(session_id.to_owned()).or_insert_with(|| {
            let mut record = TurnRecord {
                session_id: session_id.to_owned(),
                since: Utc::now(),
                // Until the registry says otherwise, keep no command line.
                dm: true,
                ..TurnRecord::default()
            };
            self.describe(session_id, &mut record);
            Entry {
                started: Instant::now(),
                activity: activity.clone(),
                record,
            }
        });
        entry.activity = activity.clone();
        let (what, command) = doing(activity);
        let record = &mut entry.record;
        let repeated = record
            .steps
            .last()
            .is_some_and(|s| s.doing == what && s.command == command);
        if !repeated && record.steps.len() < KEPT_STEPS {
            record.steps.push(Step {
                at_ms: millis(entry.started),
                doing: what,
                skill: command.as_deref().and_then(skill_of),
                command: command.filter(|_| !record.dm),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_shows_what_it_does_until_it_ends_and_keeps_its_timeline() {
        let board = Board::default();
        board.activity("s1", &Activity::Started);
        assert_eq!(board.running()[0].doing, "starting");
        board.activity(
            "s1",
            &Activity::Tool {
                title: "bash".into(),
                command: Some("skills/send-reply/scripts/send-reply --message-file x".into()),
            },
        );
        let now = &board.running()[0];
        assert_eq!(now.doing, "bash");
        board.activity("s1", &Activity::Thinking);
        board.activity("s1", &Activity::Thinking);
        assert_eq!(board.running()[0].doing, "thinking");
        let running = board.turn("s1").unwrap();
        assert!(!running.ended);
        board.activity("s1", &Activity::Ended);
        assert!(board.running().is_empty());
        let turn = board.turn("s1").unwrap();
        assert!(turn.ended);
        let steps: Vec<&str> = turn.steps.iter().map(|s| s.doing.as_str()).collect();
        assert_eq!(steps, ["starting", "bash", "thinking"], "repeats folded");
        // Without the registry the turn is not known to be public: no command line kept, but
        // the skill it ran is.
        assert_eq!(turn.steps[1].command, None);
        assert_eq!(turn.skill_calls(), ["send-reply"]);
        assert_eq!(board.finished().len(), 1);
        assert!(board.turn("nope").is_none());
    }

    #[test]
    fn skills_are_read_from_their_script_paths_only() {
        assert_eq!(
            skill_of("/opt/x/skills/memory-save/scripts/memory-save --content a").as_deref(),
            Some("memory-save")
        );
        assert_eq!(skill_of("cat skills/README.md"), None);
        assert_eq!(skill_of("ls skills/"), None);
        let turn = TurnRecord {
            steps: vec![
                Step {
                    at_ms: 1,
                    doing: "bash".into(),
                    command: None,
                    skill: Some("send-reply".into()),
                },
                Step {
                    at_ms: 2,
                    doing: "bash".into(),
                    command: Some("echo hi".into()),
                    skill: None,
                },
            ],
            ..TurnRecord::default()
        };
        assert_eq!(turn.skill_calls(), ["send-reply"]);
    }

    #[test]
    fn only_the_latest_turns_are_kept() {
        let board = Board::default();
        for i in 0..KEPT_TURNS + 3 {
            let id = format!("s{i}");
            board.activity(&id, &Activity::Started);
            board.activity(&id, &Activity::Ended);
        }
        let finished = board.finished();
        assert_eq!(finished.len(), KEPT_TURNS);
        assert_eq!(finished[0].session_id, format!("s{}", KEPT_TURNS + 2));
    }
}
