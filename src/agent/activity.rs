//! What a running agent is doing, as the runner reads it from the ACP stream, for a caller
//! that shows progress: the chat console's status line (`app::chat::console`, tested in
//! `tests/chat_console.rs`). The runner reports through an explicit [`ActivityObserver`]
//! given to it at construction ([`AgentRunner::with_activity_observer`]); without one,
//! nothing is reported. Agent text is never passed on, only what kind of work is under way.
//!
//! [`AgentRunner::with_activity_observer`]: super::AgentRunner::with_activity_observer

use std::sync::Arc;

use serde_json::Value;

/// One change in what a session's agent is doing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Activity {
    /// The agent process is being started and connected.
    Started,
    /// A prompt is with the agent (the model is working), or a tool call just ended.
    Thinking,
    /// The agent is running a tool.
    Tool {
        /// The tool call's title as the agent gave it (e.g. `bash`).
        title: String,
        /// Its command line, when it runs one.
        command: Option<String>,
    },
    /// The session is over (whatever its outcome).
    Ended,
}

/// Receives every [`Activity`] of every session the runner runs. Called on the runner's task:
/// implementations only record and return.
pub trait ActivityObserver: Send + Sync {
    /// `session_id` (ours, as in the logs) is now doing `activity`.
    fn activity(&self, session_id: &str, activity: &Activity);
}

/// The runner's optional observer.
#[derive(Clone, Default)]
pub(crate) struct ActivityReporter(Option<Arc<dyn ActivityObserver>>);

impl std::fmt::Debug for ActivityReporter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("ActivityReporter")
            .field(&self.0.is_some())
            .finish()
    }
}

impl ActivityReporter {
    pub(crate) fn new(observer: Arc<dyn ActivityObserver>) -> Self {
        Self(Some(observer))
    }

    pub(crate) fn report(&self, session_id: &str, activity: Activity) {
        if let Some(observer) = &self.0 {
            observer.activity(session_id, &activity);
        }
    }
}

/// The activity a `session/update` notification's params announce, if any: a tool call that
/// starts or runs is [`Activity::Tool`], one that ended (or agent text) is
/// [`Activity::Thinking`].
pub(crate) fn of_update(params: &Value) -> Option<Activity> {
    let update = params.get("update")?;
    match update.get("sessionUpdate").and_then(Value::as_str)? {
        "tool_call" | "tool_call_update" => {
            match update.get("status").and_then(Value::as_str) {
                Some("completed" | "failed") => Some(Activity::Thinking),
                // An update without title is progress of a call already announced.
                _ => update
                    .get("title")
                    .and_then(Value::as_str)
                    .map(|title| Activity::Tool {
                        title: title.to_owned(),
                        command: super::gate::command_of(update),
                    }),
            }
        }
        "agent_message_chunk" | "agent_thought_chunk" => Some(Activity::Thinking),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tool_calls_and_their_end_are_read_from_updates() {
        let start = json!({"update": {"sessionUpdate": "tool_call", "toolCallId": "c1",
            "title": "bash", "status": "pending", "rawInput": {"command": "ls -l"}}});
        assert_eq!(
            of_update(&start),
            Some(Activity::Tool {
                title: "bash".into(),
                command: Some("ls -l".into())
            })
        );
        let done = json!({"update": {"sessionUpdate": "tool_call_update", "toolCallId": "c1",
            "status": "completed"}});
        assert_eq!(of_update(&done), Some(Activity::Thinking));
        let progress = json!({"update": {"sessionUpdate": "tool_call_update", "toolCallId": "c1",
            "status": "in_progress"}});
        assert_eq!(of_update(&progress), None);
        let plan = json!({"update": {"sessionUpdate": "plan", "entries": []}});
        assert_eq!(of_update(&plan), None);
    }
}
