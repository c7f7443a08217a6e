//! The Prometheus registry shared by all components and its text encoding for `/metrics`.
//!
//! Components register their own metric families at construction time through
//! [`Metrics::register`]; the ops listener encodes the registry on each scrape.

use std::sync::{Arc, Mutex};

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::Registry;

/// Shared handle to the metrics registry.
#[derive(Clone)]
pub struct Metrics {
    registry: Arc<Mutex<Registry>>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// A registry with the `air_friends_` prefix and the process-level metrics
    /// (`build_info`, `start_time_seconds`).
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("air_friends");
        registry.register(
            "build",
            "Version of the running daemon",
            Info::new(vec![("version", env!("CARGO_PKG_VERSION"))]),
        );
        let started: Gauge<f64, std::sync::atomic::AtomicU64> = Gauge::default();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0);
        started.set(now);
        registry.register(
            "start_time_seconds",
            "Start time of the process since the Unix epoch",
            started,
        );
        Self {
            registry: Arc::new(Mutex::new(registry)),
        }
    }

    /// Lets a component register its metric families.
    pub fn register(&self, f: impl FnOnce(&mut Registry)) {
        let mut registry = self
            .registry
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        f(&mut registry);
    }

    /// The registry in the OpenMetrics / Prometheus text format.
    pub fn encode(&self) -> Result<String, std::fmt::Error> {
        let registry = self
            .registry
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut out = String::new();
        encode(&mut out, &registry)?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::metrics::counter::Counter;

    #[test]
    fn registered_metrics_appear_in_the_encoding() {
        let metrics = Metrics::new();
        let counter: Counter = Counter::default();
        metrics.register(|r| r.register("things", "Things seen", counter.clone()));
        counter.inc_by(3);
        let text = metrics.encode().unwrap();
        assert!(text.contains("air_friends_things_total 3"), "{text}");
        assert!(text.contains("air_friends_build_info{version=\""), "{text}");
        assert!(text.trim_end().ends_with("# EOF"));
    }
}
