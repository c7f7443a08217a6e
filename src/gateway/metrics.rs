//! Prometheus families of the model gateway: tokens by model (reported by the upstream, and
//! estimated for answers that reported none), requests by provider and outcome, request
//! duration by provider, budget refusals, failed model requests and the turns they ended by
//! class.
//!
//! Registered once through [`Metrics::register`](crate::observability::Metrics::register) like
//! every component's. Label values are bounded: providers are configured ids, outcomes and
//! kinds come from fixed enums, and models — named by the upstream, so not under the daemon's
//! control — are cut to [`MAX_MODEL_LABEL_CHARS`] and, past [`MAX_MODEL_LABELS`] distinct values,
//! recorded as [`OTHER_MODEL_LABEL`].
//!
//! Known label sets exist at 0 from start-up: both budget limits, and every outcome of every
//! configured provider ([`GatewayMetrics::with_providers`]; a request naming no configured
//! provider is `refused`). Token counters stay lazy: their `model` label is named by the
//! upstream at run time.

use crate::sync::Recover;
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::gateway::observer::ProblemKind;

/// Distinct `model` label values kept before further models count as [`OTHER_MODEL_LABEL`].
pub const MAX_MODEL_LABELS: usize = 64;
/// Longest `model` label value, in characters.
pub const MAX_MODEL_LABEL_CHARS: usize = 100;
/// The `model` label once [`MAX_MODEL_LABELS`] is reached.
pub const OTHER_MODEL_LABEL: &str = "other";
/// The `model` label of a response that named no model.
pub const UNKNOWN_MODEL_LABEL: &str = "unknown";
/// The `provider` label of a request naming no configured provider.
pub const UNKNOWN_PROVIDER_LABEL: &str = "unknown";

/// How one gateway request ended (`outcome` label of `llm_requests_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// A 2xx (or 1xx/3xx) response delivered in full, with usage read from it.
    Ok,
    /// A 2xx answer to a model call delivered in full that reported no usage: charged an
    /// estimate (`llm_estimated_tokens_total`).
    Estimated,
    /// The upstream answered 401 or 403: the configured key was rejected.
    KeyRejected,
    /// The upstream answered 429.
    RateLimited,
    /// The upstream answered another 4xx or 5xx.
    UpstreamError,
    /// The upstream could not be connected to.
    Unreachable,
    /// The upstream did not answer (or stopped sending) in time.
    TimedOut,
    /// The response stream broke after it started.
    StreamError,
    /// The client went away before the response was delivered.
    Aborted,
    /// Refused by the gateway: unknown session, wrong key or socket, bad path, body too large.
    Refused,
    /// Refused by the gateway: the user's or the global daily budget is used up.
    OverBudget,
    /// Refused by the gateway: the provider's key is not set in the daemon's environment.
    NoKey,
}

impl Outcome {
    /// Every outcome, in declaration order.
    pub const ALL: [Outcome; 12] = [
        Outcome::Ok,
        Outcome::Estimated,
        Outcome::KeyRejected,
        Outcome::RateLimited,
        Outcome::UpstreamError,
        Outcome::Unreachable,
        Outcome::TimedOut,
        Outcome::StreamError,
        Outcome::Aborted,
        Outcome::Refused,
        Outcome::OverBudget,
        Outcome::NoKey,
    ];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Estimated => "estimated",
            Outcome::KeyRejected => "key_rejected",
            Outcome::RateLimited => "rate_limited",
            Outcome::UpstreamError => "upstream_error",
            Outcome::Unreachable => "unreachable",
            Outcome::TimedOut => "timed_out",
            Outcome::StreamError => "stream_error",
            Outcome::Aborted => "aborted",
            Outcome::Refused => "refused",
            Outcome::OverBudget => "over_budget",
            Outcome::NoKey => "no_key",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TokenLabels {
    model: String,
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    provider: String,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ProviderLabels {
    provider: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ClassLabels {
    class: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LimitLabels {
    limit: &'static str,
}

type HistogramFamily = Family<ProviderLabels, Histogram, fn() -> Histogram>;

/// Handles to the gateway's families. Cloning shares them.
#[derive(Clone, Debug)]
pub struct GatewayMetrics {
    tokens: Family<TokenLabels, Counter>,
    estimated_tokens: Family<TokenLabels, Counter>,
    requests: Family<RequestLabels, Counter>,
    duration: HistogramFamily,
    budget_refusals: Family<LimitLabels, Counter>,
    model_failures: Family<ClassLabels, Counter>,
    model_turns_ended: Family<ClassLabels, Counter>,
    models: Arc<Mutex<HashSet<String>>>,
}

fn duration_histogram() -> Histogram {
    // 10 ms .. ~160 s: model requests take seconds to minutes.
    Histogram::new(exponential_buckets(0.01, 2.0, 15))
}

impl GatewayMetrics {
    /// Creates the families and registers them as `llm_tokens_total{model,kind}`,
    /// `llm_estimated_tokens_total{model,kind}`, `llm_requests_total{provider,outcome}`,
    /// `llm_request_duration_seconds{provider}`, `llm_budget_refusals_total{limit}`,
    /// `model_failures_total{class}` and `model_turns_ended_total{class}` (all prefixed
    /// `air_friends_` by the shared registry).
    pub fn new(registry: &mut Registry) -> Self {
        let tokens = Family::<TokenLabels, Counter>::default();
        let estimated_tokens = Family::<TokenLabels, Counter>::default();
        let requests = Family::<RequestLabels, Counter>::default();
        let duration: HistogramFamily = Family::new_with_constructor(duration_histogram);
        let budget_refusals = Family::<LimitLabels, Counter>::default();
        for limit in ["user", "total", "place", "operator"] {
            drop(budget_refusals.get_or_create(&LimitLabels { limit }));
        }
        let model_failures = Family::<ClassLabels, Counter>::default();
        let model_turns_ended = Family::<ClassLabels, Counter>::default();
        for kind in ProblemKind::ALL {
            let labels = ClassLabels {
                class: kind.as_str(),
            };
            drop(model_failures.get_or_create(&labels));
            drop(model_turns_ended.get_or_create(&labels));
        }
        drop(requests.get_or_create(&RequestLabels {
            provider: UNKNOWN_PROVIDER_LABEL.to_owned(),
            outcome: Outcome::Refused.as_str(),
        }));
        registry.register(
            "llm_tokens",
            "Model tokens the upstream reported, by model and kind (input|output)",
            tokens.clone(),
        );
        registry.register(
            "llm_estimated_tokens",
            "Model tokens charged by estimate for answers that reported no usage (or were cut short), by model and kind (input|output)",
            estimated_tokens.clone(),
        );
        registry.register(
            "llm_requests",
            "Model gateway requests by provider and outcome",
            requests.clone(),
        );
        registry.register(
            "llm_request_duration_seconds",
            "Model gateway request duration (until the response ended) by provider",
            duration.clone(),
        );
        registry.register(
            "llm_budget_refusals",
            "Sessions and model requests refused over a daily token budget, by limit (user|total)",
            budget_refusals.clone(),
        );
        registry.register(
            "model_failures",
            "Model requests that failed, by class (gateway::ProblemKind: unreachable, timed_out, key_rejected, ...)",
            model_failures.clone(),
        );
        registry.register(
            "model_turns_ended",
            "Turns ended early because every model request of theirs failed for agent.modelFailureGraceMs, by class",
            model_turns_ended.clone(),
        );
        Self {
            tokens,
            estimated_tokens,
            requests,
            duration,
            budget_refusals,
            model_failures,
            model_turns_ended,
            models: Arc::default(),
        }
    }

    /// Creates the `llm_requests_total` counter of every outcome of `providers` at 0.
    pub fn with_providers<'a>(self, providers: impl IntoIterator<Item = &'a str>) -> Self {
        for provider in providers {
            for outcome in Outcome::ALL {
                drop(self.requests.get_or_create(&RequestLabels {
                    provider: provider.to_owned(),
                    outcome: outcome.as_str(),
                }));
            }
        }
        self
    }

    /// Counts the tokens one answer reported.
    pub fn record_tokens(&self, model: Option<&str>, input: u64, output: u64) {
        self.count_tokens(&self.tokens, model, input, output);
    }

    /// Counts the tokens one answer was charged by estimate (beyond what it reported).
    pub fn record_estimated_tokens(&self, model: Option<&str>, input: u64, output: u64) {
        self.count_tokens(&self.estimated_tokens, model, input, output);
    }

    fn count_tokens(
        &self,
        family: &Family<TokenLabels, Counter>,
        model: Option<&str>,
        input: u64,
        output: u64,
    ) {
        let model = self.model_label(model);
        for (kind, n) in [("input", input), ("output", output)] {
            family
                .get_or_create(&TokenLabels {
                    model: model.clone(),
                    kind,
                })
                .inc_by(n);
        }
    }

    /// Counts one finished request and its duration.
    pub fn record_request(&self, provider: &str, outcome: Outcome, elapsed: Duration) {
        self.requests
            .get_or_create(&RequestLabels {
                provider: provider.to_owned(),
                outcome: outcome.as_str(),
            })
            .inc();
        self.duration
            .get_or_create(&ProviderLabels {
                provider: provider.to_owned(),
            })
            .observe(elapsed.as_secs_f64());
    }

    /// Counts one budget refusal (`limit` is `user` or `total`).
    pub(crate) fn record_budget_refusal(&self, limit: &'static str) {
        self.budget_refusals
            .get_or_create(&LimitLabels { limit })
            .inc();
    }

    /// Counts one model request that failed for `kind`.
    pub(crate) fn record_model_failure(&self, kind: ProblemKind) {
        self.model_failures
            .get_or_create(&ClassLabels {
                class: kind.as_str(),
            })
            .inc();
    }

    /// Counts one turn ended early because its model requests all failed for `kind`.
    pub(crate) fn record_model_turn_ended(&self, kind: ProblemKind) {
        self.model_turns_ended
            .get_or_create(&ClassLabels {
                class: kind.as_str(),
            })
            .inc();
    }

    fn model_label(&self, model: Option<&str>) -> String {
        let Some(model) = model.filter(|m| !m.is_empty()) else {
            return UNKNOWN_MODEL_LABEL.to_owned();
        };
        let model: String = model.chars().take(MAX_MODEL_LABEL_CHARS).collect();
        let mut seen = self.models.locked();
        if seen.contains(&model) {
            model
        } else if seen.len() < MAX_MODEL_LABELS {
            seen.insert(model.clone());
            model
        } else {
            OTHER_MODEL_LABEL.to_owned()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encoded(registry: &Registry) -> String {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, registry).expect("encode");
        text
    }

    #[test]
    fn families_are_exposed_under_the_documented_names() {
        let mut registry = Registry::with_prefix("air_friends");
        let metrics = GatewayMetrics::new(&mut registry);
        metrics.record_tokens(Some("m1"), 10, 5);
        metrics.record_estimated_tokens(Some("m1"), 7, 3);
        metrics.record_request(
            "openrouter",
            Outcome::RateLimited,
            Duration::from_millis(20),
        );
        metrics.record_budget_refusal("user");
        let text = encoded(&registry);
        for line in [
            r#"air_friends_llm_tokens_total{model="m1",kind="input"} 10"#,
            r#"air_friends_llm_tokens_total{model="m1",kind="output"} 5"#,
            r#"air_friends_llm_estimated_tokens_total{model="m1",kind="input"} 7"#,
            r#"air_friends_llm_estimated_tokens_total{model="m1",kind="output"} 3"#,
            r#"air_friends_llm_requests_total{provider="openrouter",outcome="rate_limited"} 1"#,
            r#"air_friends_llm_request_duration_seconds_count{provider="openrouter"} 1"#,
            r#"air_friends_llm_budget_refusals_total{limit="user"} 1"#,
        ] {
            assert!(text.contains(line), "{line} missing in\n{text}");
        }
    }

    #[test]
    fn known_label_sets_are_exported_at_zero() {
        let mut registry = Registry::with_prefix("air_friends");
        GatewayMetrics::new(&mut registry).with_providers(["openrouter", "anthropic"]);
        let text = encoded(&registry);
        let mut lines = vec![
            r#"air_friends_llm_budget_refusals_total{limit="user"} 0"#.to_owned(),
            r#"air_friends_llm_budget_refusals_total{limit="total"} 0"#.to_owned(),
            r#"air_friends_llm_budget_refusals_total{limit="place"} 0"#.to_owned(),
            r#"air_friends_llm_budget_refusals_total{limit="operator"} 0"#.to_owned(),
            r#"air_friends_llm_requests_total{provider="unknown",outcome="refused"} 0"#.to_owned(),
        ];
        for provider in ["openrouter", "anthropic"] {
            for outcome in Outcome::ALL {
                lines.push(format!(
                    r#"air_friends_llm_requests_total{{provider="{provider}",outcome="{}"}} 0"#,
                    outcome.as_str()
                ));
            }
        }
        for line in lines {
            assert!(text.contains(&line), "{line} missing in\n{text}");
        }
        // Tokens are per model, named only at run time.
        assert!(!text.contains("llm_tokens_total{"), "{text}");
    }

    #[test]
    fn every_outcome_is_listed_once() {
        for (i, outcome) in Outcome::ALL.into_iter().enumerate() {
            // Fails to compile when a variant is added: list it in `Outcome::ALL` too.
            match outcome {
                Outcome::Ok
                | Outcome::Estimated
                | Outcome::KeyRejected
                | Outcome::RateLimited
                | Outcome::UpstreamError
                | Outcome::Unreachable
                | Outcome::TimedOut
                | Outcome::StreamError
                | Outcome::Aborted
                | Outcome::Refused
                | Outcome::OverBudget
                | Outcome::NoKey => {}
            }
            assert!(!Outcome::ALL[..i].contains(&outcome), "{outcome:?} twice");
        }
    }

    #[test]
    fn model_labels_are_bounded() {
        let mut registry = Registry::default();
        let metrics = GatewayMetrics::new(&mut registry);
        for i in 0..MAX_MODEL_LABELS + 10 {
            metrics.record_tokens(Some(&format!("model-{i}")), 1, 0);
        }
        metrics.record_tokens(Some(&"x".repeat(500)), 1, 0);
        metrics.record_tokens(None, 1, 0);
        let text = encoded(&registry);
        assert!(
            text.contains(&format!(
                r#"llm_tokens_total{{model="{OTHER_MODEL_LABEL}",kind="input"}} 11"#
            )),
            "{text}"
        );
        assert!(text.contains(r#"model="unknown""#), "{text}");
        assert!(!text.contains(&"x".repeat(MAX_MODEL_LABEL_CHARS + 1)));
        let distinct = text
            .lines()
            .filter(|l| l.starts_with("llm_tokens_total{") && l.contains("kind=\"input\""))
            .count();
        assert_eq!(distinct, MAX_MODEL_LABELS + 2, "{text}");
    }
}
