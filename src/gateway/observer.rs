//! Model provider failures as the gateway classifies them, for a caller that can tell its
//! user what to fix: the chat console prints one line naming the cause and the fix
//! (`app::chat::console`, `tests/opencode_e2e.rs`
//! `chat_says_in_one_line_why_the_model_provider_failed`). Every user, on every platform, is
//! told in plain words by the turn (see [`health`](super::health)). The observer is explicit: set once by the composition root
//! ([`Gateway::observe_failures`](super::Gateway::observe_failures)); without one, nothing is
//! reported.

/// What went wrong with a provider, as far as the user can act on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProblemKind {
    /// The daemon has no key for the provider (its variable is unset or empty).
    KeyNotSet,
    /// The provider answered 401 or 403: the key is wrong, expired or lacks access.
    KeyRejected,
    /// The provider answered 429.
    RateLimited,
    /// The provider does not know the requested model (404, or a 400 that says so).
    ModelNotFound,
    /// The provider could not be connected to.
    Unreachable,
    /// The provider did not answer in time.
    TimedOut,
    /// The provider answered with a server error (5xx).
    ServerError,
    /// A daily token budget (`agent.budget`) is used up: the gateway refused the request.
    BudgetExhausted,
}

impl ProblemKind {
    /// Every class, in declaration order.
    pub const ALL: [ProblemKind; 8] = [
        ProblemKind::KeyNotSet,
        ProblemKind::KeyRejected,
        ProblemKind::RateLimited,
        ProblemKind::ModelNotFound,
        ProblemKind::Unreachable,
        ProblemKind::TimedOut,
        ProblemKind::ServerError,
        ProblemKind::BudgetExhausted,
    ];

    /// The class's name: the `class` label of the metrics and logs, and its section in
    /// `prompts/texts/{language}.md` (`conversation::notices`).
    pub fn as_str(self) -> &'static str {
        match self {
            ProblemKind::KeyNotSet => "key_not_set",
            ProblemKind::KeyRejected => "key_rejected",
            ProblemKind::RateLimited => "rate_limited",
            ProblemKind::ModelNotFound => "model_not_found",
            ProblemKind::Unreachable => "unreachable",
            ProblemKind::TimedOut => "timed_out",
            ProblemKind::ServerError => "server_error",
            ProblemKind::BudgetExhausted => "budget_exhausted",
        }
    }

    /// The class named `name` ([`as_str`](Self::as_str)).
    pub fn from_name(name: &str) -> Option<ProblemKind> {
        Self::ALL.into_iter().find(|kind| kind.as_str() == name)
    }

    /// What happened, for the operator (log records and `/readyz`).
    pub fn describe(self) -> &'static str {
        match self {
            ProblemKind::KeyNotSet => "the provider's key is not set",
            ProblemKind::KeyRejected => "the provider rejected the key",
            ProblemKind::RateLimited => "the provider is rate limiting",
            ProblemKind::ModelNotFound => "the provider does not offer the model",
            ProblemKind::Unreachable => "the provider is unreachable",
            ProblemKind::TimedOut => "the provider did not answer in time",
            ProblemKind::ServerError => "the provider answers with server errors",
            ProblemKind::BudgetExhausted => "a daily token budget is used up",
        }
    }

    /// What the operator can do about it.
    pub fn operator_hint(self) -> &'static str {
        match self {
            ProblemKind::KeyNotSet => {
                "set the provider's key variable (agent.providers.<id>.apiKeyEnv) in the daemon's environment and restart"
            }
            ProblemKind::KeyRejected => {
                "put a valid key in the provider's key variable and restart"
            }
            ProblemKind::RateLimited => "wait, or raise the key's limits with the provider",
            ProblemKind::ModelNotFound => "set agent.model to a model the provider offers",
            ProblemKind::Unreachable => "check agent.providers.<id>.baseUrl and the network",
            ProblemKind::TimedOut | ProblemKind::ServerError => {
                "check the provider's status; it usually passes"
            }
            ProblemKind::BudgetExhausted => "raise agent.budget, or wait for the next day",
        }
    }

    /// Whether the class says something about the provider (every class but a budget refusal,
    /// which is the daemon's own rule).
    pub fn is_about_the_provider(self) -> bool {
        self != ProblemKind::BudgetExhausted
    }
}

/// One failed request to a provider.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderFailure {
    /// Our session id (as in the logs).
    pub session_id: String,
    /// The provider's id in `agent.providers`.
    pub provider: String,
    /// The variable its key is read from.
    pub key_env: String,
    /// The request went out with the provider's anonymous key (`key_env` unset).
    pub anonymous: bool,
    /// Its configured base URL.
    pub base_url: String,
    /// The cause.
    pub kind: ProblemKind,
    /// The upstream's HTTP status, when it answered.
    pub status: Option<u16>,
}

/// Receives every classified provider failure. Called on the request's task: implementations
/// only record and return.
pub trait ProviderObserver: Send + Sync {
    /// A request of `failure.session_id` failed for `failure.kind`.
    fn provider_failed(&self, failure: &ProviderFailure);
}

/// Whether an upstream error answer (status and scrubbed body) says the model does not exist:
/// a 404 on the provider's API, or a 400 whose message says so (OpenRouter: "is not a valid
/// model ID").
pub(crate) fn is_model_not_found(status: u16, body: &[u8]) -> bool {
    if status == 404 {
        return true;
    }
    if status != 400 {
        return false;
    }
    let text = String::from_utf8_lossy(body).to_lowercase();
    text.contains("model_not_found")
        || (text.contains("model")
            && [
                "not a valid model",
                "does not exist",
                "not found",
                "unknown model",
                "no such model",
            ]
            .iter()
            .any(|phrase| text.contains(phrase)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_model_is_told_from_other_bad_requests() {
        assert!(is_model_not_found(404, b""));
        assert!(is_model_not_found(
            400,
            br#"{"error":{"message":"foo/bar is not a valid model ID"}}"#
        ));
        assert!(is_model_not_found(
            400,
            br#"{"error":{"code":"model_not_found"}}"#
        ));
        assert!(!is_model_not_found(
            400,
            br#"{"error":{"message":"max_tokens is too large"}}"#
        ));
        assert!(!is_model_not_found(500, b"model not found"));
    }
}
