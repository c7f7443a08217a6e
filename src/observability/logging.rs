//! Tracing subscriber set-up: JSON lines (default) or pretty output on stdout, level from the
//! configuration (`logging.level`, overridden by `LOG_LEVEL` at load time) unless `RUST_LOG`
//! is set (less what the daemon reports better itself: `REPORTED_ELSEWHERE`), every line passed
//! through the [`Redactor`](super::Redactor).

use tracing_subscriber::EnvFilter;
use tracing_subscriber::util::SubscriberInitExt;

use super::{RedactingMakeWriter, Redactor};
use crate::config::{LogFormat, LoggingConfig};

/// Library records that repeat what the daemon reports itself, turned off unless `RUST_LOG`
/// says otherwise: serenity's gateway shard and shard runner log each close of the gateway
/// connection (as errors for a rejected token or a refused intent) and echo it. The Discord
/// adapter reports a refusal as one record naming the fix, and every connection change as
/// `Discord shard stage changed`. (A filter directive cannot turn off only some of a target's
/// records: tracing's `EnvFilter` span directives can enable, never disable.)
const REPORTED_ELSEWHERE: &str =
    "serenity::gateway::shard=off,serenity::gateway::bridge::shard_runner=off";

/// Keeps the subscriber installed; dropping it does nothing today but keeps the call site
/// honest if a buffered writer is added.
#[must_use = "keep the guard alive for the life of the process"]
#[derive(Debug)]
pub struct LoggingGuard(());

/// Where log lines go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogTarget {
    /// Standard output (the daemon: journald / log shippers read it).
    Stdout,
    /// Standard error (interactive commands whose stdout is the product).
    Stderr,
}

/// Installs the global tracing subscriber. `rust_log` is the `RUST_LOG` value, if set.
pub fn init_logging(
    config: &LoggingConfig,
    rust_log: Option<String>,
    redactor: Redactor,
    target: LogTarget,
) -> anyhow::Result<LoggingGuard> {
    let filter = match rust_log.filter(|s| !s.trim().is_empty()) {
        Some(spec) => EnvFilter::try_new(&spec)
            .map_err(|e| anyhow::anyhow!("RUST_LOG {spec:?} is not a valid filter: {e}"))?,
        None => EnvFilter::try_new(format!("{},{REPORTED_ELSEWHERE}", config.level))
            .map_err(|e| anyhow::anyhow!("logging.level {:?}: {e}", config.level))?,
    };
    let writer = RedactingMakeWriter::new(
        redactor,
        tracing_subscriber::fmt::writer::BoxMakeWriter::new(match target {
            LogTarget::Stdout => {
                tracing_subscriber::fmt::writer::BoxMakeWriter::new(std::io::stdout)
            }
            LogTarget::Stderr => {
                tracing_subscriber::fmt::writer::BoxMakeWriter::new(std::io::stderr)
            }
        }),
    );
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer);
    let result = match config.format {
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(false)
            .finish()
            .try_init(),
        LogFormat::Pretty => builder.with_ansi(false).finish().try_init(),
    };
    result.map_err(|e| anyhow::anyhow!("cannot install the log subscriber: {e}"))?;
    Ok(LoggingGuard(()))
}
