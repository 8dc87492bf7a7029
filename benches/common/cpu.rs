//! The machine's busy CPU time: shared by the root package's benches and, by path, the
//! compiler's.

use std::time::Duration;

/// The machine's busy CPU time so far (every core, every process), from /proc/stat.
pub fn busy() -> Duration {
    let stat = std::fs::read_to_string("/proc/stat").unwrap();
    let f: Vec<u64> = stat
        .lines()
        .next()
        .unwrap()
        .split_whitespace()
        .skip(1)
        .map(|x| x.parse().unwrap())
        .collect();
    // user, nice, system, irq, softirq, steal; in clock ticks (100 a second).
    Duration::from_millis((f[0] + f[1] + f[2] + f[5] + f[6] + f[7]) * 10)
}
