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

/// The descendants of `pid` by command name (`/proc/{pid}/comm`): (processes, `VmRSS`,
/// `RssAnon`) in KiB — what an agent's memory is made of.
pub fn memory_by_command(pid: u32) -> BTreeMap<String, (usize, u64, u64)> {
    let mut out: BTreeMap<String, (usize, u64, u64)> = BTreeMap::new();
    for p in descendants(pid) {
        let name = std::fs::read_to_string(format!("/proc/{p}/comm"))
            .map(|s| s.trim().to_owned())
            .unwrap_or_else(|_| "?".into());
        let entry = out.entry(name).or_default();
        entry.0 += 1;
        entry.1 += rss_kb(p);
        entry.2 += status_kb(p, "RssAnon:");
    }
    out
}
