//! Termination signals: how the Skill API asks the agent runner to stop a session's agent.

use std::sync::{Arc, Mutex};

use tokio_util::sync::CancellationToken;

use crate::sync::lock;

/// Fired when the Skill API asks the agent runner to stop a session's agent.
///
/// The first reason wins; firing is idempotent. Cloning shares the same signal.
#[derive(Clone, Debug, Default)]
pub struct TerminationSignal {
    token: CancellationToken,
    reason: Arc<Mutex<Option<String>>>,
}

impl TerminationSignal {
    /// Waits until termination is requested and returns the reason.
    pub async fn requested(&self) -> String {
        self.token.cancelled().await;
        self.reason().unwrap_or_default()
    }

    /// Whether termination has been requested.
    pub fn is_requested(&self) -> bool {
        self.token.is_cancelled()
    }

    /// The reason, once requested.
    pub fn reason(&self) -> Option<String> {
        lock(&self.reason).clone()
    }

    /// Requests termination. Returns `false` when it had already been requested.
    pub(crate) fn fire(&self, reason: &str) -> bool {
        {
            let mut slot = lock(&self.reason);
            if slot.is_some() {
                return false;
            }
            *slot = Some(reason.to_owned());
        }
        self.token.cancel();
        true
    }
}
