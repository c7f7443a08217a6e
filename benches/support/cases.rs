//! Interleaved bench cases measured side by side in one run: each case's wall times (p50,
//! p99) and the CPU the whole process spent in it (`getrusage`: user + system), per call.
#![allow(dead_code)]

use std::time::Duration;

use nix::sys::resource::{UsageWho, getrusage};

/// User + system CPU of this process so far.
pub fn cpu() -> Duration {
    let u = getrusage(UsageWho::RUSAGE_SELF).expect("getrusage");
    let us = |t: nix::sys::time::TimeVal| t.tv_sec() as u64 * 1_000_000 + t.tv_usec() as u64;
    Duration::from_micros(us(u.user_time()) + us(u.system_time()))
}

/// One case's measurements.
pub struct Case {
    pub name: &'static str,
    pub wall: Vec<Duration>,
    pub cpu: Duration,
}

impl Case {
    pub fn new(name: &'static str) -> Self {
        Case {
            name,
            wall: Vec::new(),
            cpu: Duration::ZERO,
        }
    }

    /// One call's wall time and CPU.
    pub fn add(&mut self, wall: Duration, cpu: Duration) {
        self.wall.push(wall);
        self.cpu += cpu;
    }

    /// The `q` quantile of the wall times.
    pub fn p(&mut self, q: f64) -> Duration {
        self.wall.sort();
        let i = ((self.wall.len() as f64 - 1.0) * q).round() as usize;
        self.wall[i]
    }

    pub fn cpu_per_call(&self) -> Duration {
        self.cpu / self.wall.len().max(1) as u32
    }
}

/// Prints `cases` as a Markdown table with their ratios to a baseline of `base_p50` wall time
/// and `base_cpu` CPU per call (named `base` in the header), times in ms with `decimals`.
pub fn print_table(
    cases: &mut [&mut Case],
    base: &str,
    base_p50: Duration,
    base_cpu: Duration,
    decimals: usize,
) {
    println!("| case | p50 | p99 | CPU per call | p50 / {base} | CPU / {base} |");
    println!("|---|---|---|---|---|---|");
    let ms = |d: Duration| format!("{:.*} ms", decimals, d.as_secs_f64() * 1e3);
    for case in cases.iter_mut() {
        let (p50, p99, cpu) = (case.p(0.5), case.p(0.99), case.cpu_per_call());
        println!(
            "| {} | {} | {} | {} | {:.*}× | {:.*}× |",
            case.name,
            ms(p50),
            ms(p99),
            ms(cpu),
            decimals,
            p50.as_secs_f64() / base_p50.as_secs_f64().max(1e-12),
            decimals,
            cpu.as_secs_f64() / base_cpu.as_secs_f64().max(1e-9),
        );
    }
}
