//! Where each process runs: the service, its Redis and the bare-axum
//! baseline share one core, the load generator (this process) another,
//! so the client's work never steals CPU from the server it measures.
//! Also raises this process's open-file limit (parked waiters each hold
//! a connection).

/// The cores in use and what was done to get them.
#[derive(Clone, Debug)]
pub struct Placement {
    /// Core of the service, Redis and the bare baseline (None: unpinned).
    pub server_cpu: Option<usize>,
    /// Core of the load generator (None: unpinned).
    pub client_cpu: Option<usize>,
    /// One human-readable line for the report.
    pub note: String,
}

impl Placement {
    /// Pins the calling thread (so every thread it starts later, i.e. the
    /// whole tokio runtime) to the second allowed core; the first one is
    /// kept for the children. With a single core nothing is pinned.
    pub fn apply() -> Placement {
        let allowed = allowed_cpus();
        if allowed.len() < 2 {
            return Placement {
                server_cpu: None,
                client_cpu: None,
                note: format!(
                    "only {} allowed core(s) {allowed:?}: NOT pinned, the client, the \
                     service and Redis share it, so every figure is a lower bound",
                    allowed.len()
                ),
            };
        }
        let (server, client) = (allowed[0], allowed[1]);
        match pin_current_thread(client) {
            Ok(()) => Placement {
                server_cpu: Some(server),
                client_cpu: Some(client),
                note: format!(
                    "{} allowed cores {allowed:?}: latchkey, its redis-server and the bare \
                     axum server pinned to core {server} (taskset), the load generator to \
                     core {client} (sched_setaffinity)",
                    allowed.len()
                ),
            },
            Err(e) => Placement {
                server_cpu: None,
                client_cpu: None,
                note: format!("pinning failed ({e}): NOT pinned"),
            },
        }
    }
}

/// The cores this process may run on (sched_getaffinity).
#[allow(unsafe_code)]
pub fn allowed_cpus() -> Vec<usize> {
    // SAFETY: `set` is a plain bit array owned by this frame; the kernel
    // writes at most `size_of::<cpu_set_t>()` bytes into it, and CPU_ISSET
    // only reads it with an index below CPU_SETSIZE.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Vec::new();
        }
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&cpu| libc::CPU_ISSET(cpu, &set))
            .collect()
    }
}

/// Pins the calling thread to `cpu` (threads it spawns later inherit it).
#[allow(unsafe_code)]
fn pin_current_thread(cpu: usize) -> Result<(), std::io::Error> {
    // SAFETY: `set` is a local bit array; CPU_SET writes one bit of it
    // (cpu < CPU_SETSIZE, as it came from sched_getaffinity), and the
    // kernel only reads it. pid 0 is the calling thread.
    let rc = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Raises the soft RLIMIT_NOFILE to the hard limit; returns the new soft
/// limit (what this process can now keep open).
#[allow(unsafe_code)]
pub fn raise_nofile() -> u64 {
    // SAFETY: both calls only read or write the local `limit` struct.
    unsafe {
        let mut limit: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return 0;
        }
        limit.rlim_cur = limit.rlim_max;
        libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return 0;
        }
        limit.rlim_cur as u64
    }
}
