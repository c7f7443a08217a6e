//! A process tree's memory, for the benches that run the real agent: every descendant of a
//! process, and each one's resident memory from `/proc/{pid}/status`.
#![allow(dead_code)]

use std::collections::BTreeMap;

/// One process's `VmRSS` and `RssAnon` in KiB (0 when it is gone).
pub fn rss_kb(pid: u32) -> u64 {
    status_kb(pid, "VmRSS:")
}

fn status_kb(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

/// Every descendant of `pid`.
pub fn descendants(pid: u32) -> Vec<u32> {
    let mut parents: Vec<(u32, u32)> = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(p) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat")) else {
            continue;
        };
        let ppid = stat
            .rsplit(')')
            .next()
            .and_then(|rest| rest.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok());
        if let Some(ppid) = ppid {
            parents.push((p, ppid));
        }
    }
    let mut out = Vec::new();
    let mut frontier = vec![pid];
    while let Some(p) = frontier.pop() {
        for (child, parent) in &parents {
            if *parent == p {
                out.push(*child);
                frontier.push(*child);
            }
        }
    }
    out
}

/// What the processes of one command use.
#[derive(Debug, Clone, Copy, Default)]
pub struct Usage {
    /// How many processes.
    pub processes: usize,
    /// `VmRSS`, KiB.
    pub rss_kb: u64,
    /// `RssAnon` (heap and other private memory), KiB.
    pub anon_kb: u64,
    /// User and system CPU time so far, milliseconds.
    pub cpu_ms: u64,
}

/// User plus system CPU time of `pid` so far, in milliseconds (`/proc/{pid}/stat`, clock ticks
/// of 10 ms).
pub fn cpu_ms(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            let rest = s.rsplit(')').next()?.to_owned();
            let fields: Vec<&str> = rest.split_whitespace().collect();
            // After the command: state is field 3, utime 14 and stime 15 (1-based).
            let utime: u64 = fields.get(11)?.parse().ok()?;
            let stime: u64 = fields.get(12)?.parse().ok()?;
            Some((utime + stime) * 10)
        })
        .unwrap_or(0)
}

/// The descendants of `pid` by command name (`/proc/{pid}/comm`) — what an agent's memory and
/// CPU time are made of.
pub fn usage_by_command(pid: u32) -> BTreeMap<String, Usage> {
    let mut out: BTreeMap<String, Usage> = BTreeMap::new();
    for p in descendants(pid) {
        let name = std::fs::read_to_string(format!("/proc/{p}/comm"))
            .map(|s| s.trim().to_owned())
            .unwrap_or_else(|_| "?".into());
        let entry = out.entry(name).or_default();
        entry.processes += 1;
        entry.rss_kb += rss_kb(p);
        entry.anon_kb += status_kb(p, "RssAnon:");
        entry.cpu_ms += cpu_ms(p);
    }
    out
}
