//! The Prometheus registry shared by all components and its text encoding for `/metrics`.
//!
//! Components register their own metric families at construction time through
//! [`Metrics::register`] (all named `air_friends_*`); the standard `process_*` families come
//! from the [`ProcessCollector`], read at scrape time. The ops listener encodes both on each
//! scrape in the format the scraper asks for ([`Format::negotiate`]): OpenMetrics for
//! Prometheus itself, the classic text format (0.0.4) for everything else — `curl` and
//! `promtool check metrics`, which parses only the classic format (it has no `info` type and
//! reads an OpenMetrics counter's `_total` sample as a separate, untyped family).
//!
//! Every family is exported once it holds a sample, so components create the label sets they
//! know at start-up with value 0 (`rate()` and `increase()` then see the first event); the
//! `connected_gauge_follows_the_connection_state` and `known_label_sets_are_exported_at_zero`
//! tests of the components show it.

use crate::sync::Recover;
use std::sync::{Arc, Mutex};

use prometheus_client::encoding::{prometheus_text, text};
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::Registry;

use super::process::ProcessCollector;

/// The exposition formats `/metrics` serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// OpenMetrics 1.0 (`# EOF`-terminated; counters declared without `_total`).
    OpenMetrics,
    /// The classic Prometheus text format, version 0.0.4.
    PrometheusText,
}

impl Format {
    /// OpenMetrics when the `Accept` header offers `application/openmetrics-text` (Prometheus
    /// does), else the classic text format — what Go's `promhttp` handler does too.
    pub fn negotiate(accept: Option<&str>) -> Self {
        let offers_openmetrics = accept.is_some_and(|accept| {
            accept.split(',').any(|range| {
                let mut parts = range.split(';').map(str::trim);
                let media = parts.next().unwrap_or_default();
                let refused = parts.any(|p| {
                    p.strip_prefix("q=")
                        .and_then(|q| q.parse::<f32>().ok())
                        .is_some_and(|q| q <= 0.0)
                });
                media.eq_ignore_ascii_case("application/openmetrics-text") && !refused
            })
        });
        if offers_openmetrics {
            Format::OpenMetrics
        } else {
            Format::PrometheusText
        }
    }

    /// The response's `Content-Type`.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
            Format::PrometheusText => prometheus_text::CONTENT_TYPE,
        }
    }
}

/// The daemon's families (prefixed) and the process ones (conventional names, no prefix).
#[derive(Debug)]
struct Registries {
    daemon: Registry,
    process: Registry,
}

/// Shared handle to the metrics registry.
#[derive(Clone)]
pub struct Metrics {
    registries: Arc<Mutex<Registries>>,
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
    /// A registry with the `air_friends_` prefix holding `air_friends_build_info`, beside the
    /// `process_*` collector.
    pub fn new() -> Self {
        let mut daemon = Registry::with_prefix("air_friends");
        daemon.register(
            "build",
            "Version of the running daemon (always 1)",
            Info::new(vec![("version", env!("CARGO_PKG_VERSION"))]),
        );
        let mut process = Registry::default();
        process.register_collector(Box::new(ProcessCollector));
        Self {
            registries: Arc::new(Mutex::new(Registries { daemon, process })),
        }
    }

    /// Lets a component register its metric families.
    pub fn register(&self, f: impl FnOnce(&mut Registry)) {
        let mut registries = self.registries.locked();
        f(&mut registries.daemon);
    }

    /// Every family in `format`.
    pub fn encode(&self, format: Format) -> Result<String, std::fmt::Error> {
        let registries = self.registries.locked();
        let mut out = String::new();
        match format {
            Format::OpenMetrics => {
                text::encode_registry(&mut out, &registries.daemon)?;
                text::encode_registry(&mut out, &registries.process)?;
                text::encode_eof(&mut out)?;
            }
            Format::PrometheusText => {
                prometheus_text::encode(&mut out, &registries.daemon)?;
                prometheus_text::encode(&mut out, &registries.process)?;
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::metrics::counter::Counter;

    #[test]
    fn registered_metrics_appear_in_both_formats() {
        let metrics = Metrics::new();
        let counter: Counter = Counter::default();
        metrics.register(|r| r.register("things", "Things seen", counter.clone()));
        counter.inc_by(3);

        let open = metrics.encode(Format::OpenMetrics).unwrap();
        assert!(
            open.contains("# TYPE air_friends_things counter\n"),
            "{open}"
        );
        assert!(open.contains("air_friends_things_total 3\n"), "{open}");
        assert!(open.contains("# TYPE air_friends_build info\n"), "{open}");
        assert!(open.contains("air_friends_build_info{version=\""), "{open}");
        assert!(open.contains("# TYPE process_open_fds gauge\n"), "{open}");
        assert!(open.trim_end().ends_with("# EOF"));
        assert_eq!(open.matches("# EOF").count(), 1);

        // The classic format names the counter family by its sample and has no `info` type.
        let classic = metrics.encode(Format::PrometheusText).unwrap();
        assert!(
            classic.contains("# TYPE air_friends_things_total counter\n"),
            "{classic}"
        );
        assert!(
            classic.contains("air_friends_things_total 3\n"),
            "{classic}"
        );
        assert!(
            classic.contains("# TYPE air_friends_build_info gauge\n"),
            "{classic}"
        );
        assert!(
            classic.contains("# TYPE process_open_fds gauge\n"),
            "{classic}"
        );
        assert!(!classic.contains("# EOF"), "{classic}");
    }

    #[test]
    fn openmetrics_is_served_only_to_scrapers_that_ask_for_it() {
        // Prometheus 2.x's scrape `Accept` header.
        let prometheus = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert_eq!(Format::negotiate(Some(prometheus)), Format::OpenMetrics);
        assert_eq!(
            Format::negotiate(Some("Application/OpenMetrics-Text; version=1.0.0")),
            Format::OpenMetrics
        );
        for classic in [
            None,
            Some("*/*"),
            Some("text/plain;version=0.0.4"),
            Some("text/plain, application/openmetrics-text;q=0"),
        ] {
            assert_eq!(
                Format::negotiate(classic),
                Format::PrometheusText,
                "{classic:?}"
            );
        }
    }
}
