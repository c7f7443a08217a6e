//! Daily token budgets (`agent.budget`, a place's own `places[].tokensPerUserPerDay`, and a
//! user's own set by the operator in the console, `store::controls`):
//! checked before an agent starts (by the interaction flow) and before every model request the
//! gateway forwards, so a running agent cannot spend past the limit either.
//!
//! Usage is what the gateway metered into the store (`Store::llm_usage_on`), per UTC day; a
//! limit is reached when the day's input + output tokens are at least the limit, so `0` allows
//! nothing and a request in flight can overshoot by at most its own size. The check logs the
//! refusal (one warn line naming the limit) and counts it in `llm_budget_refusals_total`;
//! callers only answer the user.
//!
//! A store that cannot be read lets the request through (logged as an error): the budget is a
//! spending guard, and a broken database is an outage the operator already sees.

use chrono::{NaiveDate, Utc};

use super::metrics::GatewayMetrics;
use crate::config::BudgetConfig;
use crate::session::PlaceGrant;
use crate::store::{Store, WorkspaceKey};

/// Which daily limit was reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BudgetLimit {
    /// `agent.budget.tokensPerUserPerDay`.
    PerUser,
    /// `agent.budget.tokensPerDay` (all users together).
    Total,
    /// `places[].tokensPerUserPerDay` (the user, in that place).
    Place,
    /// The budget the operator set for this user in the console (in place of
    /// `agent.budget.tokensPerUserPerDay`; `store::controls`).
    Operator,
}

impl BudgetLimit {
    /// The metric label and configuration spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            BudgetLimit::PerUser => "user",
            BudgetLimit::Total => "total",
            BudgetLimit::Place => "place",
            BudgetLimit::Operator => "operator",
        }
    }

    /// The configuration key.
    pub fn config_key(self) -> &'static str {
        match self {
            BudgetLimit::PerUser => "agent.budget.tokensPerUserPerDay",
            BudgetLimit::Total => "agent.budget.tokensPerDay",
            BudgetLimit::Place => "places[].tokensPerUserPerDay",
            BudgetLimit::Operator => "the user's budget set in the console",
        }
    }
}

/// A daily budget is used up.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{} reached: {used} of {limit} tokens used today", .limit_kind.config_key())]
pub struct BudgetExceeded {
    /// Which limit.
    pub limit_kind: BudgetLimit,
    /// Tokens used today (of the user, or of everyone for [`BudgetLimit::Total`]).
    pub used: u64,
    /// The configured limit.
    pub limit: u64,
}

/// The configured budgets and the metrics their refusals count in. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Budget {
    per_user: Option<u64>,
    total: Option<u64>,
    metrics: GatewayMetrics,
}

impl Budget {
    /// The budgets of `config`.
    pub fn new(config: &BudgetConfig, metrics: GatewayMetrics) -> Self {
        Self {
            per_user: config.tokens_per_user_per_day,
            total: config.tokens_per_day,
            metrics,
        }
    }

    /// `Ok` when `workspace` may use the model today in the place of `grant`: the place's own
    /// limit, then [`check`](Self::check)'s. Without any limit set it reads nothing.
    pub async fn check_in(
        &self,
        store: &Store,
        workspace: &WorkspaceKey,
        grant: &PlaceGrant,
    ) -> Result<(), BudgetExceeded> {
        let day = Utc::now().date_naive();
        match self.used_up(store, workspace, Some(grant), day).await {
            Some((kind, used, limit)) => Err(self.refused(kind, workspace, used, limit)),
            None => Ok(()),
        }
    }

    /// Whether [`check_in`](Self::check_in) would refuse, without counting or logging a
    /// refusal (an agent started ahead of a message that may never come).
    pub async fn would_refuse(
        &self,
        store: &Store,
        workspace: &WorkspaceKey,
        grant: &PlaceGrant,
    ) -> bool {
        let day = Utc::now().date_naive();
        self.used_up(store, workspace, Some(grant), day)
            .await
            .is_some()
    }

    /// The first limit used up on `day` (the place's, when `grant` is given, then the user's
    /// and the total): which, how much was used, and the limit. A usage that cannot be read is
    /// logged and that limit not checked.
    async fn used_up(
        &self,
        store: &Store,
        workspace: &WorkspaceKey,
        grant: Option<&PlaceGrant>,
        day: NaiveDate,
    ) -> Option<(BudgetLimit, u64, u64)> {
        if let Some((grant, limit)) =
            grant.and_then(|g| g.tokens_per_user_per_day.map(|limit| (g, limit)))
        {
            match store
                .llm_usage_in_place_on(day, workspace, &grant.name)
                .await
            {
                Ok(usage) => {
                    let used = usage.total_tokens();
                    if used >= limit {
                        return Some((BudgetLimit::Place, used, limit));
                    }
                }
                Err(error) => tracing::error!(
                    %workspace,
                    place = %grant.name,
                    limit = BudgetLimit::Place.as_str(),
                    error = %error,
                    "token budget not checked: the usage could not be read"
                ),
            }
        }
        // The operator's budget for this user replaces the configured one.
        let per_user = match store.controls().tokens_per_day(workspace) {
            Some(limit) => (BudgetLimit::Operator, Some(limit)),
            None => (BudgetLimit::PerUser, self.per_user),
        };
        let limits = [
            (per_user.0, per_user.1, Some(workspace)),
            (BudgetLimit::Total, self.total, None),
        ];
        for (limit_kind, limit, scope) in limits {
            let Some(limit) = limit else { continue };
            match store.llm_usage_on(day, scope).await {
                Ok(usage) if usage.total_tokens() >= limit => {
                    return Some((limit_kind, usage.total_tokens(), limit));
                }
                Ok(_) => {}
                Err(error) => tracing::error!(
                    %workspace,
                    limit = limit_kind.as_str(),
                    error = %error,
                    "token budget not checked: the usage could not be read"
                ),
            }
        }
        None
    }

    /// Counts and logs a refusal.
    fn refused(
        &self,
        limit_kind: BudgetLimit,
        workspace: &WorkspaceKey,
        used: u64,
        limit: u64,
    ) -> BudgetExceeded {
        self.metrics.record_budget_refusal(limit_kind.as_str());
        tracing::warn!(
            %workspace,
            limit = limit_kind.as_str(),
            used,
            allowed = limit,
            "token budget used up: refused"
        );
        BudgetExceeded {
            limit_kind,
            used,
            limit,
        }
    }

    /// `Ok` when `workspace` may use the model today; otherwise which limit is used up.
    pub async fn check(
        &self,
        store: &Store,
        workspace: &WorkspaceKey,
    ) -> Result<(), BudgetExceeded> {
        self.check_on(store, workspace, Utc::now().date_naive())
            .await
    }

    /// [`check`](Self::check) against the usage of `day`.
    pub async fn check_on(
        &self,
        store: &Store,
        workspace: &WorkspaceKey,
        day: NaiveDate,
    ) -> Result<(), BudgetExceeded> {
        match self.used_up(store, workspace, None, day).await {
            Some((kind, used, limit)) => Err(self.refused(kind, workspace, used, limit)),
            None => Ok(()),
        }
    }
}
