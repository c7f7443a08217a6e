//! CPU time of this process's threads by name (`/proc/self/task/*/stat`): the benches split a
//! call's CPU between the server's threads, the store's writer and checkpointer and the load
//! generator.

use std::time::Duration;

/// CPU time (user + system) used so far by this process's threads named `name`, from
/// `/proc/self/task/*/stat` (clock ticks: 10 ms; a case runs long enough for hundreds).
pub fn thread_cpu(name: &str) -> Duration {
    let tick = 1.0 / 100.0;
    let mut ticks = 0u64;
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return Duration::ZERO;
    };
    for task in tasks.flatten() {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if comm.trim_end() != name {
            continue;
        }
        let stat = std::fs::read_to_string(task.path().join("stat")).unwrap_or_default();
        // Fields after the `(comm)`: state is field 3, utime 14, stime 15.
        let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        for f in [11, 12] {
            ticks += fields
                .get(f)
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0);
        }
    }
    Duration::from_secs_f64(ticks as f64 * tick)
}
