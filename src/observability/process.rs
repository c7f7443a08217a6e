//! The standard `process_*` metrics (CPU seconds, resident and virtual memory, open and maximum
//! file descriptors, start time), read from `/proc/self` on every scrape.
//!
//! `prometheus-client` has no process collector, so this is the small Linux one: names, types
//! and units follow the Prometheus conventions (the ones Go's `client_golang` exports), so the
//! usual dashboards and alerts work unchanged. The daemon makes itself non-dumpable
//! (`agent::sandbox`), which only restricts *other* processes: a process may always read its own
//! `/proc/self` entries, `fd/` included.

use std::path::{Path, PathBuf};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

/// One reading of the process's resource use.
#[derive(Debug, Clone, PartialEq)]
pub struct ProcessStats {
    /// User plus system CPU time, in seconds.
    pub cpu_seconds: f64,
    /// Resident set size, in bytes.
    pub resident_memory_bytes: u64,
    /// Virtual memory size, in bytes.
    pub virtual_memory_bytes: u64,
    /// When the process started, in seconds since the Unix epoch.
    pub start_time_seconds: f64,
    /// File descriptors open now.
    pub open_fds: u64,
    /// The soft `RLIMIT_NOFILE`; `None` when unlimited.
    pub max_fds: Option<u64>,
}

/// Why `/proc` could not be read or understood.
#[derive(Debug, thiserror::Error)]
pub enum ProcError {
    /// A file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A file did not have the documented layout (proc(5)).
    #[error("unexpected content in {0}")]
    Format(&'static str),
}

/// The kernel's clock ticks per second and page size (`sysconf`), needed to read
/// `/proc/self/stat`.
#[derive(Debug, Clone, Copy)]
struct Units {
    ticks_per_second: f64,
    page_size: u64,
}

impl Units {
    fn of_this_system() -> Self {
        use nix::unistd::{SysconfVar, sysconf};
        let get = |var, fallback| match sysconf(var) {
            Ok(Some(v)) if v > 0 => v as u64,
            _ => fallback,
        };
        Self {
            ticks_per_second: get(SysconfVar::CLK_TCK, 100) as f64,
            page_size: get(SysconfVar::PAGE_SIZE, 4096),
        }
    }
}

impl ProcessStats {
    /// Reads this process's figures from `/proc`.
    pub fn read() -> Result<Self, ProcError> {
        Self::read_from(Path::new("/proc"), Units::of_this_system())
    }

    fn read_from(proc: &Path, units: Units) -> Result<Self, ProcError> {
        let read = |rel: &str| {
            let path = proc.join(rel);
            std::fs::read_to_string(&path).map_err(|source| ProcError::Read { path, source })
        };
        let stat = parse_stat(&read("self/stat")?)?;
        let boot_time = parse_boot_time(&read("stat")?)?;
        let max_fds = parse_max_open_files(&read("self/limits")?)?;
        let fd_dir = proc.join("self/fd");
        let open_fds = std::fs::read_dir(&fd_dir)
            .map_err(|source| ProcError::Read {
                path: fd_dir.clone(),
                source,
            })?
            .count() as u64;
        Ok(Self {
            cpu_seconds: (stat.utime + stat.stime) as f64 / units.ticks_per_second,
            resident_memory_bytes: stat.rss_pages.saturating_mul(units.page_size),
            virtual_memory_bytes: stat.vsize,
            start_time_seconds: boot_time as f64 + stat.starttime as f64 / units.ticks_per_second,
            open_fds,
            max_fds,
        })
    }
}

/// The fields of `/proc/self/stat` this collector uses (proc(5), fields 14, 15, 22, 23, 24).
#[derive(Debug, PartialEq, Eq)]
struct Stat {
    utime: u64,
    stime: u64,
    starttime: u64,
    vsize: u64,
    rss_pages: u64,
}

fn parse_stat(text: &str) -> Result<Stat, ProcError> {
    const BAD: ProcError = ProcError::Format("/proc/self/stat");
    // The command name (field 2) is in parentheses and may itself hold spaces or `)`: the
    // numbered fields start after the last `)`, with field 3 (state) first.
    let (_, rest) = text.rsplit_once(')').ok_or(BAD)?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |n: usize| -> Result<u64, ProcError> {
        fields
            .get(n - 3)
            .and_then(|f| f.parse().ok())
            .ok_or(ProcError::Format("/proc/self/stat"))
    };
    Ok(Stat {
        utime: field(14)?,
        stime: field(15)?,
        starttime: field(22)?,
        vsize: field(23)?,
        rss_pages: field(24)?,
    })
}

/// `btime` of `/proc/stat`: boot time in seconds since the epoch.
fn parse_boot_time(text: &str) -> Result<u64, ProcError> {
    text.lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
        .ok_or(ProcError::Format("/proc/stat"))
}

/// The soft limit of the `Max open files` row of `/proc/self/limits`; `None` when unlimited.
fn parse_max_open_files(text: &str) -> Result<Option<u64>, ProcError> {
    const BAD: ProcError = ProcError::Format("/proc/self/limits");
    let row = text
        .lines()
        .find_map(|l| l.strip_prefix("Max open files"))
        .ok_or(BAD)?;
    match row.split_whitespace().next().ok_or(BAD)? {
        "unlimited" => Ok(None),
        soft => soft.parse().map(Some).map_err(|_| BAD),
    }
}

/// Encodes [`ProcessStats`] on every scrape. Register it in a registry without a prefix: the
/// names are the conventional `process_*` ones.
#[derive(Debug, Default)]
pub struct ProcessCollector;

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let stats = match ProcessStats::read() {
            Ok(s) => s,
            Err(e) => {
                // A scrape still serves every other family.
                tracing::warn!(error = %e, "process metrics unavailable");
                return Ok(());
            }
        };
        let cpu = ConstCounter::new(stats.cpu_seconds);
        cpu.encode(encoder.encode_descriptor(
            "process_cpu_seconds",
            "Total user and system CPU time spent in seconds",
            None,
            cpu.metric_type(),
        )?)?;
        let gauges = [
            (
                "process_resident_memory_bytes",
                "Resident memory size in bytes",
                Some(stats.resident_memory_bytes as f64),
            ),
            (
                "process_virtual_memory_bytes",
                "Virtual memory size in bytes",
                Some(stats.virtual_memory_bytes as f64),
            ),
            (
                "process_open_fds",
                "Number of open file descriptors",
                Some(stats.open_fds as f64),
            ),
            (
                "process_max_fds",
                "Maximum number of open file descriptors",
                stats.max_fds.map(|v| v as f64),
            ),
            (
                "process_start_time_seconds",
                "Start time of the process since unix epoch in seconds",
                Some(stats.start_time_seconds),
            ),
        ];
        for (name, help, value) in gauges {
            let Some(value) = value else { continue };
            let gauge = ConstGauge::new(value);
            gauge.encode(encoder.encode_descriptor(name, help, None, gauge.metric_type())?)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_read_after_a_command_name_with_spaces_and_parentheses() {
        // proc(5) layout; the name `a) b` must not shift the fields.
        let line = "42 (a) b) S 1 42 42 0 -1 4194560 500 0 0 0 250 75 0 0 20 0 8 0 12345 \
                    104857600 2560 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0";
        assert_eq!(
            parse_stat(line).unwrap(),
            Stat {
                utime: 250,
                stime: 75,
                starttime: 12345,
                vsize: 104_857_600,
                rss_pages: 2560,
            }
        );
        assert!(parse_stat("42 (truncated) S 1 2").is_err());
    }

    #[test]
    fn boot_time_and_the_soft_fd_limit_are_parsed() {
        assert_eq!(
            parse_boot_time("cpu  1 2 3\nbtime 1700000000\nprocesses 9\n").unwrap(),
            1_700_000_000
        );
        let limits = "Limit                     Soft Limit           Hard Limit           Units     \n\
                      Max processes             63711                63711                processes \n\
                      Max open files            1024                 524288               files     \n";
        assert_eq!(parse_max_open_files(limits).unwrap(), Some(1024));
        assert_eq!(
            parse_max_open_files("Max open files            unlimited unlimited files\n").unwrap(),
            None
        );
        assert!(parse_max_open_files("Max processes 1 1\n").is_err());
    }

    #[test]
    fn this_process_reads_plausible_values() {
        let held = std::fs::File::open("/proc/self/stat").unwrap();
        let stats = ProcessStats::read().unwrap();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        // Started in the past, and not before this test binary could have been built.
        assert!(stats.start_time_seconds <= now + 1.0, "{stats:?}");
        assert!(stats.start_time_seconds > now - 3600.0, "{stats:?}");
        // A running test binary uses some memory and more address space than resident memory.
        assert!(stats.resident_memory_bytes > 1 << 20, "{stats:?}");
        assert!(
            stats.virtual_memory_bytes >= stats.resident_memory_bytes,
            "{stats:?}"
        );
        // stdin/stdout/stderr and the file held open above.
        assert!(stats.open_fds >= 4, "{stats:?}");
        assert!(
            stats.max_fds.is_none_or(|max| max >= stats.open_fds),
            "{stats:?}"
        );
        assert!(
            stats.cpu_seconds >= 0.0 && stats.cpu_seconds < now,
            "{stats:?}"
        );
        drop(held);
    }

    #[test]
    fn collector_exports_the_conventional_names() {
        let mut registry = prometheus_client::registry::Registry::default();
        registry.register_collector(Box::new(ProcessCollector));
        let mut text = String::new();
        prometheus_client::encoding::prometheus_text::encode(&mut text, &registry).unwrap();
        for (name, kind) in [
            ("process_cpu_seconds_total", "counter"),
            ("process_resident_memory_bytes", "gauge"),
            ("process_virtual_memory_bytes", "gauge"),
            ("process_open_fds", "gauge"),
            ("process_max_fds", "gauge"),
            ("process_start_time_seconds", "gauge"),
        ] {
            assert!(
                text.contains(&format!("# TYPE {name} {kind}\n")),
                "{name} in\n{text}"
            );
            let value = text
                .lines()
                .find_map(|l| l.strip_prefix(&format!("{name} ")))
                .unwrap_or_else(|| panic!("no {name} sample in\n{text}"));
            assert!(value.parse::<f64>().unwrap() >= 0.0, "{name} {value}");
        }
    }
}
