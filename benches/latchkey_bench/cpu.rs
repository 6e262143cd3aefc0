//! How busy each core and each of our processes was over a window, from
//! /proc/stat and /proc/<pid>/stat (both in the same clock ticks): tells
//! which side was the bottleneck, and how much of a core's load was not
//! ours (other work on the machine).

/// (busy, total) jiffies of every `cpuN` line, indexed by N.
#[derive(Clone, Debug, Default)]
struct Snapshot(Vec<(u64, u64)>);

impl Snapshot {
    fn now() -> Snapshot {
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

    /// (busy, total) ticks of `cpu` between `self` and `later`.
    fn delta(&self, later: &Snapshot, cpu: usize) -> Option<(u64, u64)> {
        match (self.0.get(cpu), later.0.get(cpu)) {
            (Some(&(b0, t0)), Some(&(b1, t1))) if t1 > t0 => Some((b1.saturating_sub(b0), t1 - t0)),
            _ => None,
        }
    }
}

/// User + system ticks of a whole process (all its threads).
fn process_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // After "pid (comm) ": state is field 3, utime 14, stime 15.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    Some(fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?)
}

/// The cores and processes to watch.
#[derive(Clone, Debug)]
pub struct Watch {
    pub cores: Vec<usize>,
    pub processes: Vec<(&'static str, u32)>,
}

/// One reading of everything a [`Watch`] covers.
pub struct Sample {
    cpus: Snapshot,
    processes: Vec<Option<u64>>,
}

impl Watch {
    /// "core N" for each core, then each process's name.
    pub fn labels(&self) -> Vec<String> {
        let cores = self.cores.iter().map(|c| format!("core {c}"));
        cores
            .chain(self.processes.iter().map(|(name, _)| name.to_string()))
            .collect()
    }

    pub fn sample(&self) -> Sample {
        Sample {
            cpus: Snapshot::now(),
            processes: self
                .processes
                .iter()
                .map(|&(_, pid)| process_ticks(pid))
                .collect(),
        }
    }

    /// Per label, the percent of one core used between `a` and `b`.
    pub fn between(&self, a: &Sample, b: &Sample) -> Vec<f64> {
        let per_core = |cpu: usize| a.cpus.delta(&b.cpus, cpu);
        let ticks = self
            .cores
            .first()
            .and_then(|&c| per_core(c))
            .map(|(_, t)| t);
        let cores = self
            .cores
            .iter()
            .map(|&c| per_core(c).map(|(busy, _)| busy));
        let procs = a
            .processes
            .iter()
            .zip(&b.processes)
            .map(|(x, y)| Some(y.as_ref()? - x.as_ref()?));
        cores
            .chain(procs)
            .map(|used| match (used, ticks) {
                (Some(used), Some(ticks)) => 100.0 * used as f64 / ticks as f64,
                _ => f64::NAN,
            })
            .collect()
    }
}
