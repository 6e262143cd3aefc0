//! The child processes: a private redis-server, the real latchkey release
//! binary, and this benchmark re-executed as the bare-axum baseline. Each
//! is started through `sh -c` so that its open-file limit is raised to the
//! hard limit first (parked waiters hold one socket each), and through
//! `taskset` when a core was chosen for the servers. Every child is killed
//! when its handle is dropped.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{ChildStdout, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How long a child may take to start listening.
const START_TIMEOUT: Duration = Duration::from_secs(20);

/// A running child process, killed on drop.
pub struct Child {
    inner: std::process::Child,
}

impl Child {
    pub fn pid(&self) -> u32 {
        self.inner.id()
    }

    /// Resident set size of the child (VmRSS), in KiB.
    pub fn rss_kib(&self) -> Result<u64, String> {
        let path = format!("/proc/{}/status", self.pid());
        let status = std::fs::read_to_string(&path).map_err(|e| format!("{path}: {e}"))?;
        status
            .lines()
            .find_map(|line| line.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .ok_or_else(|| format!("no VmRSS in {path}"))
    }

    /// Kills the child now (it is dropped anyway).
    pub fn stop(mut self) {
        self.kill();
    }

    fn kill(&mut self) {
        let _ = self.inner.kill();
        let _ = self.inner.wait();
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        self.kill();
    }
}

/// `program args…` with the open-file limit raised, pinned to `cpu`.
/// The shell `exec`s, so the child's pid is the program's own.
fn command(cpu: Option<usize>, program: &Path, args: &[&str]) -> Command {
    let exec = match cpu {
        Some(cpu) => format!("exec taskset -c {cpu} \"$0\" \"$@\""),
        None => "exec \"$0\" \"$@\"".to_string(),
    };
    let mut command = Command::new("sh");
    command
        .arg("-c")
        .arg(format!("ulimit -n \"$(ulimit -Hn)\"; {exec}"))
        .arg(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    command
}

fn spawn(mut command: Command, what: &str) -> Result<Child, String> {
    command
        .spawn()
        .map(|inner| Child { inner })
        .map_err(|e| format!("cannot start {what}: {e}"))
}

/// A free loopback port (someone may take it before we use it; the caller
/// retries on failure).
fn free_port() -> Result<u16, String> {
    let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("no free port: {e}"))?;
    listener
        .local_addr()
        .map(|a| a.port())
        .map_err(|e| e.to_string())
}

/// A private redis-server without persistence, and its URL.
pub fn start_redis(cpu: Option<usize>) -> Result<(Child, String), String> {
    let mut last_error = String::new();
    for _ in 0..5 {
        let port = free_port()?.to_string();
        let dir = std::env::temp_dir();
        let dir = dir.to_string_lossy();
        let args = [
            "--port",
            &port,
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--daemonize",
            "no",
            "--dir",
            &dir,
            "--logfile",
            "",
        ];
        let child = spawn(
            command(cpu, Path::new("redis-server"), &args),
            "redis-server",
        )?;
        let started = Instant::now();
        while started.elapsed() < START_TIMEOUT {
            if ping(&port) {
                return Ok((child, format!("redis://127.0.0.1:{port}/")));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        last_error = format!("redis-server on port {port} did not answer PING");
    }
    Err(last_error)
}

fn ping(port: &str) -> bool {
    let Ok(mut stream) = TcpStream::connect(format!("127.0.0.1:{port}")) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
    let mut reply = [0u8; 7];
    stream.write_all(b"PING\r\n").is_ok()
        && stream.read_exact(&mut reply).is_ok()
        && &reply == b"+PONG\r\n"
}

/// A running latchkey and the base URL it answers on.
pub struct Service {
    pub child: Child,
    pub base: String,
}

/// Starts the release binary on a free port of its own choosing (it logs
/// the address), against `redis_url`, with its log level at info and,
/// when given, `(max_waiters, max_wait_ms)`; every other setting is left
/// at its default.
pub fn start_service(
    cpu: Option<usize>,
    redis_url: &str,
    limits: Option<(usize, u64)>,
) -> Result<Service, String> {
    start_service_with(cpu, redis_url, limits, &[])
}

/// [`start_service`] with extra `LATCHKEY_*` settings (the RedLock nodes).
pub fn start_service_with(
    cpu: Option<usize>,
    redis_url: &str,
    limits: Option<(usize, u64)>,
    settings: &[(&str, String)],
) -> Result<Service, String> {
    // Another build of the service (an ablation: a patched or differently
    // built binary) may be measured in its place.
    let binary = std::env::var_os("LATCHKEY_BENCH_BINARY")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_latchkey")));
    start_build(cpu, &binary, redis_url, limits, settings)
}

/// [`start_service_with`] for the build at `binary`.
pub fn start_build(
    cpu: Option<usize>,
    binary: &Path,
    redis_url: &str,
    limits: Option<(usize, u64)>,
    settings: &[(&str, String)],
) -> Result<Service, String> {
    let mut command = command(cpu, binary, &[]);
    // Only the settings below: nothing from the caller's environment.
    for (key, _) in std::env::vars().filter(|(k, _)| k.starts_with("LATCHKEY_")) {
        command.env_remove(key);
    }
    command
        .env("LATCHKEY_LISTEN", "127.0.0.1:0")
        .env("LATCHKEY_REDIS_URL", redis_url)
        .env("LATCHKEY_LOG", "info")
        .stdout(Stdio::piped());
    if let Some((max_waiters, max_wait_ms)) = limits {
        command
            .env("LATCHKEY_MAX_WAITERS", max_waiters.to_string())
            .env("LATCHKEY_MAX_WAIT_MS", max_wait_ms.to_string());
    }
    for (key, value) in settings {
        command.env(key, value);
    }
    let mut child = spawn(command, "latchkey")?;
    let stdout = child.inner.stdout.take().ok_or("no stdout pipe")?;
    let addr = listening_addr(stdout)?;
    Ok(Service {
        child,
        base: format!("http://{addr}"),
    })
}

/// Reads latchkey's JSON log until its "latchkey listening" line, then
/// keeps draining it on a thread (warnings and errors go to stderr).
fn listening_addr(stdout: ChildStdout) -> Result<SocketAddr, String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut tx = Some(tx);
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let Ok(json) = serde_json::from_str::<serde_json::Value>(&line) else {
                continue;
            };
            let fields = &json["fields"];
            if fields["message"] == "latchkey listening" {
                if let Some(tx) = tx.take() {
                    let _ = tx.send(fields["addr"].as_str().unwrap_or("").to_string());
                }
            } else if matches!(json["level"].as_str(), Some("WARN" | "ERROR")) {
                eprintln!("[latchkey] {line}");
            }
        }
    });
    let addr = rx
        .recv_timeout(START_TIMEOUT)
        .map_err(|_| "latchkey did not log \"latchkey listening\" (see stderr)".to_string())?;
    addr.parse()
        .map_err(|e| format!("latchkey logged a bad address {addr:?}: {e}"))
}

/// Re-executes this benchmark as the bare-axum server (see [`crate::bare`]),
/// with the stack floor on the Redis at `redis_url` if one is given, and
/// returns it with its base URL.
pub fn start_bare(
    cpu: Option<usize>,
    marker: &str,
    redis_url: Option<&str>,
) -> Result<(Child, String), String> {
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    let args: Vec<&str> = [marker].into_iter().chain(redis_url).collect();
    let mut command = command(cpu, &exe, &args);
    command.stdin(Stdio::piped()).stdout(Stdio::piped());
    let mut child = spawn(command, "the bare axum server")?;
    let stdout = child.inner.stdout.take().ok_or("no stdout pipe")?;
    let mut line = String::new();
    BufReader::new(stdout)
        .read_line(&mut line)
        .map_err(|e| format!("bare server: {e}"))?;
    let addr = line
        .trim()
        .strip_prefix("listening ")
        .ok_or_else(|| format!("bare server said {line:?}"))?;
    Ok((child, format!("http://{addr}")))
}
