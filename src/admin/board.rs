//! What every running agent is doing, for the console's *Now* page: an [`ActivityObserver`]
//! the runner reports to (the same reports the chat console's status line reads). Only the kind
//! of work is kept — thinking, or which tool — never the agent's text; an entry leaves when its
//! session ends.

use std::collections::HashMap;
use std::sync::Mutex;

use chrono::{DateTime, Utc};
use tokio::time::Instant;

use crate::agent::{Activity, ActivityObserver};
use crate::sync::lock;

/// One running session as the board knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Running {
    /// Our session id.
    pub session_id: String,
    /// When its agent started (wall clock, for the page).
    pub since: DateTime<Utc>,
    /// How long it has run.
    pub elapsed_ms: u64,
    /// What it is doing: `starting`, `thinking`, or the tool's title.
    pub doing: String,
    /// The tool's command line, when it runs one.
    pub command: Option<String>,
}

#[derive(Debug)]
struct Entry {
    since: DateTime<Utc>,
    started: Instant,
    activity: Activity,
}

/// The board.
#[derive(Debug, Default)]
pub struct Board {
    entries: Mutex<HashMap<String, Entry>>,
}

impl Board {
    /// The running sessions, longest-running first.
    pub fn running(&self) -> Vec<Running> {
        let mut out: Vec<Running> = lock(&self.entries)
            .iter()
            .map(|(id, e)| {
                let (doing, command) = match &e.activity {
                    Activity::Started => ("starting".to_owned(), None),
                    Activity::Thinking | Activity::Ended => ("thinking".to_owned(), None),
                    Activity::Tool { title, command } => (title.clone(), command.clone()),
                };
                Running {
                    session_id: id.clone(),
                    since: e.since,
                    elapsed_ms: e.started.elapsed().as_millis() as u64,
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
}

impl ActivityObserver for Board {
    fn activity(&self, session_id: &str, activity: &Activity) {
        let mut entries = lock(&self.entries);
        if *activity == Activity::Ended {
            entries.remove(session_id);
            return;
        }
        entries
            .entry(session_id.to_owned())
            .and_modify(|e| e.activity = activity.clone())
            .or_insert_with(|| Entry {
                since: Utc::now(),
                started: Instant::now(),
                activity: activity.clone(),
            });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_shows_what_it_does_until_it_ends() {
        let board = Board::default();
        board.activity("s1", &Activity::Started);
        assert_eq!(board.running()[0].doing, "starting");
        board.activity(
            "s1",
            &Activity::Tool {
                title: "bash".into(),
                command: Some("skills/send-reply/scripts/send-reply".into()),
            },
        );
        let now = &board.running()[0];
        assert_eq!(
            (now.doing.as_str(), now.command.as_deref()),
            ("bash", Some("skills/send-reply/scripts/send-reply"))
        );
        board.activity("s1", &Activity::Thinking);
        assert_eq!(board.running()[0].doing, "thinking");
        board.activity("s1", &Activity::Ended);
        assert!(board.running().is_empty());
    }
}
