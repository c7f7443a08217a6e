//! Readiness checks that components register (platform connected, database writable, agent
//! command found); `/readyz` runs them all.
//!
//! A check either gates readiness (a failure makes `/readyz` 503) or only degrades it
//! ([`Readiness::register_degrading`]: the model provider failing — the daemon still answers
//! every user, in words, so it is not taken out of service, but `/readyz` says `degraded`).

use crate::sync::RecoverRw;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use serde::Serialize;

/// A boxed future returned by a readiness check.
pub type CheckFuture = Pin<Box<dyn Future<Output = Result<(), String>> + Send>>;

type CheckFn = Arc<dyn Fn() -> CheckFuture + Send + Sync>;

/// One registered check: its name, what it reports in every answer, whether it only degrades,
/// and the check.
type Entry = (String, Option<String>, bool, CheckFn);

/// How long one check may take before it counts as failed.
const CHECK_TIMEOUT: Duration = Duration::from_secs(2);

/// The set of registered readiness checks.
#[derive(Clone, Default)]
pub struct Readiness {
    checks: Arc<RwLock<Vec<Entry>>>,
}

impl std::fmt::Debug for Readiness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Readiness").finish_non_exhaustive()
    }
}

/// The outcome of one check.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct CheckReport {
    /// The check's name, e.g. `database`.
    pub name: String,
    /// True when ready.
    pub ok: bool,
    /// Why not, when not ready.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// What the check covers, ready or not (e.g. which mechanisms confine the agents).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub info: Option<String>,
    /// Its failure degrades the daemon without making it unready (shown only when true).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub degrades: bool,
}

/// What `/readyz` says of a set of reports (draining aside).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Every check passed.
    Ready,
    /// Every gating check passed, a degrading one did not.
    Degraded,
    /// A gating check failed.
    NotReady,
}

impl Verdict {
    /// The verdict of `reports`.
    pub fn of(reports: &[CheckReport]) -> Verdict {
        if reports.iter().any(|r| !r.ok && !r.degrades) {
            Verdict::NotReady
        } else if reports.iter().any(|r| !r.ok) {
            Verdict::Degraded
        } else {
            Verdict::Ready
        }
    }

    /// Whether the daemon serves (ready or degraded).
    pub fn serves(self) -> bool {
        self != Verdict::NotReady
    }

    /// The `status` of `/readyz`.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Ready => "ready",
            Verdict::Degraded => "degraded",
            Verdict::NotReady => "not_ready",
        }
    }
}

impl Readiness {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a check. It is run on every `/readyz` request, so keep it cheap.
    pub fn register<F, Fut>(&self, name: impl Into<String>, check: F)
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), String>> + Send + 'static,
    {
        self.register_described(name, None, check);
    }

    /// Adds a check whose reports also carry `info` (what it covers), ready or not.
    pub fn register_described<F, Fut>(
        &self,
        name: impl Into<String>,
        info: Option<String>,
        check: F,
    ) where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), String>> + Send + 'static,
    {
        self.push(name.into(), info, false, check);
    }

    /// Adds a check whose failure degrades the daemon without making it unready (`/readyz`
    /// answers 200 with `status: degraded`).
    pub fn register_degrading<F, Fut>(&self, name: impl Into<String>, check: F)
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), String>> + Send + 'static,
    {
        self.push(name.into(), None, true, check);
    }

    fn push<F, Fut>(&self, name: String, info: Option<String>, degrades: bool, check: F)
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), String>> + Send + 'static,
    {
        let check: CheckFn = Arc::new(move || Box::pin(check()));
        self.checks
            .write_locked()
            .push((name, info, degrades, check));
    }

    /// Runs every check (concurrently, each bounded by a timeout).
    pub async fn run(&self) -> Vec<CheckReport> {
        let checks: Vec<Entry> = self.checks.read_locked().clone();
        let mut set = tokio::task::JoinSet::new();
        for (index, (name, info, degrades, check)) in checks.into_iter().enumerate() {
            let fut = check();
            set.spawn(async move {
                let result = match tokio::time::timeout(CHECK_TIMEOUT, fut).await {
                    Ok(r) => r,
                    Err(_) => Err(format!("check timed out after {CHECK_TIMEOUT:?}")),
                };
                (
                    index,
                    CheckReport {
                        name,
                        ok: result.is_ok(),
                        detail: result.err(),
                        info,
                        degrades,
                    },
                )
            });
        }
        let mut reports = Vec::new();
        while let Some(joined) = set.join_next().await {
            match joined {
                Ok(report) => reports.push(report),
                Err(e) => tracing::error!(error = %e, "readiness check panicked"),
            }
        }
        reports.sort_by_key(|(index, _)| *index);
        reports.into_iter().map(|(_, r)| r).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn runs_checks_in_registration_order() {
        let r = Readiness::new();
        r.register("a", || async { Ok(()) });
        r.register("b", || async { Err("down".to_owned()) });
        let reports = r.run().await;
        assert_eq!(reports.len(), 2);
        assert_eq!(reports[0].name, "a");
        assert!(reports[0].ok);
        assert_eq!(reports[1].detail.as_deref(), Some("down"));
    }

    #[tokio::test]
    async fn a_failing_degrading_check_degrades_but_a_gating_one_makes_unready() {
        let r = Readiness::new();
        r.register("store", || async { Ok(()) });
        r.register_degrading("model", || async { Err("unreachable".to_owned()) });
        let reports = r.run().await;
        assert!(reports[1].degrades && !reports[1].ok);
        assert_eq!(Verdict::of(&reports), Verdict::Degraded);
        assert!(Verdict::of(&reports).serves());
        r.register("platforms", || async { Err("none enabled".to_owned()) });
        let reports = r.run().await;
        assert_eq!(Verdict::of(&reports), Verdict::NotReady);
        assert!(!Verdict::of(&reports).serves());
        let json = serde_json::to_value(&reports).unwrap();
        assert_eq!(json[1]["degrades"], true);
        assert!(json[0].get("degrades").is_none(), "{json}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_hanging_check_times_out() {
        let r = Readiness::new();
        r.register("slow", || async {
            tokio::time::sleep(Duration::from_secs(60)).await;
            Ok(())
        });
        let reports = r.run().await;
        assert!(!reports[0].ok);
        assert!(reports[0].detail.as_deref().unwrap().contains("timed out"));
    }
}
