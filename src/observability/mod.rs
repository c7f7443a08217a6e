//! Observability: structured logging with secret redaction, the Prometheus registry that
//! components add their metrics to, and the `process_*` metrics read from `/proc`.

mod logging;
mod metrics;
mod process;
mod redact;

pub use logging::{LogTarget, LoggingGuard, init_logging};
pub use metrics::{Format, Metrics};
pub use process::{ProcError, ProcessStats};
pub use redact::{LiveSecrets, RedactingMakeWriter, Redactor};
