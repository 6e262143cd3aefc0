//! How busy each core was over a window, from /proc/stat: tells which
//! side (the pinned servers or the load generator) was the bottleneck.

/// (busy, total) jiffies of every `cpuN` line, indexed by N.
#[derive(Clone, Debug, Default)]
pub struct Snapshot(Vec<(u64, u64)>);

impl Snapshot {
    pub fn now() -> Snapshot {
        let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
        let mut cpus = Vec::new();
        for line in stat.lines() {
            let mut fields = line.split_whitespace();
            let Some(n) = fields.next().and_then(|f| f.strip_prefix("cpu")) else {
                continue;
            };
            let Ok(n) = n.parse::<usize>() else {
                continue; // the "cpu" total line
            };
            // user nice system idle iowait irq softirq steal (guest is in user)
            let v: Vec<u64> = fields.take(8).filter_map(|f| f.parse().ok()).collect();
            if v.len() == 8 {
                let total: u64 = v.iter().sum();
                cpus.resize(cpus.len().max(n + 1), (0, 0));
                cpus[n] = (total - v[3] - v[4], total);
            }
        }
        Snapshot(cpus)
    }

    /// Percent of `cpu` busy between `self` and `later` (NaN if unknown).
    pub fn busy_percent(&self, later: &Snapshot, cpu: usize) -> f64 {
        match (self.0.get(cpu), later.0.get(cpu)) {
            (Some(&(b0, t0)), Some(&(b1, t1))) if t1 > t0 => {
                100.0 * b1.saturating_sub(b0) as f64 / (t1 - t0) as f64
            }
            _ => f64::NAN,
        }
    }
}
