//! Child processes: the dev-mode redis-servers and the command that
//! `latchkey lock … -- cmd` runs. The only unsafe code of the crate lives
//! here, each block a single async-signal-safe libc call.

use std::process::Command;

/// Asks the kernel to SIGTERM the child when the thread that spawned it
/// exits, so a killed latchkey leaves no orphan: no redis-server in dev
/// mode, and no command still running under a hold nobody renews. Because
/// it is tied to the spawning *thread*, spawn from a long-lived thread (the
/// main thread, or a test's own thread), never from a pooled one.
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
pub fn die_with_parent(command: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs in the forked child before exec and only
    // calls prctl, which is async-signal-safe and touches no shared state.
    unsafe {
        command.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
            Ok(())
        });
    }
}

#[cfg(not(target_os = "linux"))]
pub fn die_with_parent(_: &mut Command) {}

/// Sends `signal` (e.g. `libc::SIGTERM`) to the process `pid`; false when it
/// is gone already.
pub fn signal(pid: u32, signal: i32) -> bool {
    kill(libc::pid_t::try_from(pid).ok(), signal)
}

/// Sends `signal` to every process of the process group `pgid` (a child
/// started with `process_group(0)` leads a group whose id is its pid);
/// false when none is left.
pub fn signal_group(pgid: u32, signal: i32) -> bool {
    kill(libc::pid_t::try_from(pgid).ok().map(|id| -id), signal)
}

#[allow(unsafe_code)]
fn kill(target: Option<libc::pid_t>, signal: i32) -> bool {
    match target {
        // 0 and -1 would signal latchkey's own group or every process.
        Some(target) if target != 0 && target != -1 => {
            // SAFETY: kill(2) takes plain integers and touches no memory of ours.
            unsafe { libc::kill(target, signal) == 0 }
        }
        _ => false,
    }
}
