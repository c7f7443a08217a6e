//! Prometheus metrics of the Skill API: calls by skill and status, and latency.
//!
//! The integrator owns the shared `prometheus_client` registry and the `/metrics` endpoint;
//! [`SkillApiMetrics::new`] only registers this module's families into it. Label values are
//! bounded: skill names come from the skill registry (unknown names are recorded as
//! [`UNKNOWN_SKILL_LABEL`]) and statuses from the fixed status table ([`KNOWN_STATUSES`]), so
//! [`SkillApiMetrics::with_skills`] creates every `(skill, status)` counter at 0 at start-up.
//! The latency histograms appear with a skill's first call.
//!
//! A registered skill's series are resolved once (its counter of every known status at
//! [`SkillApiMetrics::with_skills`], its histogram at its first call) and kept by name, so
//! recording a call is one map lookup and atomic updates: no label strings are built and no
//! family is searched per call. Other names and statuses go through the families.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// The `skill` label used for names that are not registered skills.
pub const UNKNOWN_SKILL_LABEL: &str = "unknown";

/// Every status a skill call ends with: 200, and those of `SkillError::status_and_code`.
pub const KNOWN_STATUSES: [u16; 11] = [200, 400, 401, 403, 404, 405, 413, 429, 500, 502, 503];

/// Labels of `skill_calls_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SkillStatusLabels {
    /// Registered skill name or [`UNKNOWN_SKILL_LABEL`].
    pub skill: String,
    /// HTTP status code, e.g. `"200"`.
    pub status: String,
}

/// Labels of `skill_api_request_duration_seconds`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SkillLabels {
    /// Registered skill name or [`UNKNOWN_SKILL_LABEL`].
    pub skill: String,
}

type HistogramFamily = Family<SkillLabels, Histogram, fn() -> Histogram>;

/// The series of one skill, resolved from the families (handles share their values).
#[derive(Debug)]
struct SkillSeries {
    /// `skill_calls_total` of each status of [`KNOWN_STATUSES`], in that order.
    calls: [Counter; KNOWN_STATUSES.len()],
    /// `skill_api_request_duration_seconds`, created by the first call.
    duration: OnceLock<Histogram>,
}

/// Handles to the Skill API's metric families. Cloning shares them.
#[derive(Clone, Debug)]
pub struct SkillApiMetrics {
    calls: Family<SkillStatusLabels, Counter>,
    duration: HistogramFamily,
    /// The series of every skill named to [`with_skills`](Self::with_skills), by name.
    series: Arc<HashMap<String, SkillSeries>>,
    /// Hourly counts kept for `air-friends stats` (see [`super::call_log`]).
    call_log: Option<super::call_log::CallLog>,
}

fn duration_histogram() -> Histogram {
    // 5 ms .. ~41 s.
    Histogram::new(exponential_buckets(0.005, 2.0, 14))
}

impl SkillApiMetrics {
    /// Creates the families and registers them as `skill_calls_total{skill,status}` and
    /// `skill_api_request_duration_seconds{skill}`.
    pub fn new(registry: &mut Registry) -> Self {
        let calls = Family::<SkillStatusLabels, Counter>::default();
        let duration: HistogramFamily = Family::new_with_constructor(duration_histogram);
        registry.register(
            "skill_calls",
            "Skill API calls by skill and HTTP status",
            calls.clone(),
        );
        registry.register(
            "skill_api_request_duration_seconds",
            "Skill API request duration by skill",
            duration.clone(),
        );
        Self {
            calls,
            duration,
            series: Arc::default(),
            call_log: None,
        }
    }

    /// Creates the `skill_calls_total` counter of every status of `skills` (and of
    /// [`UNKNOWN_SKILL_LABEL`]) at 0.
    pub fn with_skills<'a>(mut self, skills: impl IntoIterator<Item = &'a str>) -> Self {
        let mut series = HashMap::new();
        for skill in skills.into_iter().chain([UNKNOWN_SKILL_LABEL]) {
            let calls = std::array::from_fn(|i| {
                self.calls
                    .get_or_create(&SkillStatusLabels {
                        skill: skill.to_owned(),
                        status: KNOWN_STATUSES[i].to_string(),
                    })
                    .clone()
            });
            let duration = OnceLock::new();
            series.insert(skill.to_owned(), SkillSeries { calls, duration });
        }
        self.series = Arc::new(series);
        self
    }

    /// Also counts every call in `log` (for `air-friends stats`).
    #[must_use]
    pub fn with_call_log(mut self, log: super::call_log::CallLog) -> Self {
        self.call_log = Some(log);
        self
    }

    /// Records a finished call: the Prometheus families, and the call log when there is one
    /// (`code`: `OK` or the error code).
    pub fn record_call(&self, skill: &str, status: u16, code: &str, elapsed: Duration) {
        self.record(skill, status, elapsed);
        if let Some(log) = &self.call_log {
            log.record(skill, code, elapsed);
        }
    }

    /// Records one finished call in the Prometheus families.
    pub fn record(&self, skill: &str, status: u16, elapsed: Duration) {
        let Some(series) = self.series.get(skill) else {
            self.record_by_labels(skill, status, elapsed);
            return;
        };
        match KNOWN_STATUSES.iter().position(|&known| known == status) {
            Some(i) => {
                series.calls[i].inc();
            }
            None => {
                self.calls
                    .get_or_create(&SkillStatusLabels {
                        skill: skill.to_owned(),
                        status: status.to_string(),
                    })
                    .inc();
            }
        }
        series
            .duration
            .get_or_init(|| {
                self.duration
                    .get_or_create(&SkillLabels {
                        skill: skill.to_owned(),
                    })
                    .clone()
            })
            .observe(elapsed.as_secs_f64());
    }

    /// [`record`](Self::record) through the families (a name without resolved series).
    fn record_by_labels(&self, skill: &str, status: u16, elapsed: Duration) {
        self.calls
            .get_or_create(&SkillStatusLabels {
                skill: skill.to_owned(),
                status: status.to_string(),
            })
            .inc();
        self.duration
            .get_or_create(&SkillLabels {
                skill: skill.to_owned(),
            })
            .observe(elapsed.as_secs_f64());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_are_exposed_under_the_documented_names() {
        let mut registry = Registry::default();
        let metrics = SkillApiMetrics::new(&mut registry);
        metrics.record("echo", 200, Duration::from_millis(12));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encode");
        assert!(
            text.contains(r#"skill_calls_total{skill="echo",status="200"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(r#"skill_api_request_duration_seconds_count{skill="echo"} 1"#),
            "{text}"
        );
    }

    #[test]
    fn resolved_series_count_into_the_exported_families() {
        let mut registry = Registry::default();
        let metrics = SkillApiMetrics::new(&mut registry).with_skills(["echo"]);
        let encode = |registry: &Registry| {
            let mut text = String::new();
            prometheus_client::encoding::text::encode(&mut text, registry).expect("encode");
            text
        };
        assert!(
            !encode(&registry).contains("skill_api_request_duration_seconds_count"),
            "no histogram before a skill's first call"
        );
        metrics.record("echo", 200, Duration::from_millis(12));
        metrics.record("echo", 200, Duration::from_millis(3));
        metrics.record("echo", 429, Duration::from_millis(1));
        metrics.record("echo", 499, Duration::from_millis(1));
        metrics.record("not-registered", 404, Duration::from_millis(1));
        let text = encode(&registry);
        for line in [
            r#"skill_calls_total{skill="echo",status="200"} 2"#,
            r#"skill_calls_total{skill="echo",status="429"} 1"#,
            r#"skill_calls_total{skill="echo",status="499"} 1"#,
            r#"skill_calls_total{skill="not-registered",status="404"} 1"#,
            r#"skill_api_request_duration_seconds_count{skill="echo"} 4"#,
            r#"skill_api_request_duration_seconds_count{skill="not-registered"} 1"#,
        ] {
            assert!(text.contains(line), "{line} missing in\n{text}");
        }
    }

    #[test]
    fn known_label_sets_are_exported_at_zero() {
        let mut registry = Registry::default();
        SkillApiMetrics::new(&mut registry).with_skills(["echo", "send-reply"]);
        let mut text = String::new();
        prometheus_client::encoding::prometheus_text::encode(&mut text, &registry).expect("encode");
        for skill in ["echo", "send-reply", UNKNOWN_SKILL_LABEL] {
            for status in KNOWN_STATUSES {
                let line = format!(r#"skill_calls_total{{skill="{skill}",status="{status}"}} 0"#);
                assert!(text.contains(&line), "{line} missing in\n{text}");
            }
        }
    }
}
