//! Observability: structured logging with secret redaction, and the Prometheus registry that
//! components add their metrics to.

mod logging;
mod metrics;
mod redact;

pub use logging::{LogTarget, LoggingGuard, init_logging};
pub use metrics::Metrics;
pub use redact::{LiveSecrets, RedactingMakeWriter, Redactor};
