//! Private `redis-server` child processes: dev mode (README: "Set up"), and
//! the test suite, which starts its own servers the same way.
//!
//! Each server listens on a free loopback port (over TLS only, for a
//! server started with [`ServerTls`]), with no persistence, in its own
//! temporary directory. It is stopped when its handle is dropped,
//! and on Linux it is also asked (PR_SET_PDEATHSIG) to exit if latchkey
//! itself dies without running destructors (SIGKILL), so no orphan is left.
//! A directory such a death leaves behind goes when the next server starts
//! (see `ServerDir` below).

use std::fs::{File, TryLockError};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::config::tls::{RedisTls, SettingFile};

const INSTALL_HINT: &str = "redis-server was not found on PATH. latchkey's dev mode (no \
LATCHKEY_REDIS_URL set) starts private redis-server processes. Install it with \
`sudo apt-get install -y redis-server` (Debian/Ubuntu) or `brew install redis` (macOS), \
or point latchkey at an existing Redis with LATCHKEY_REDIS_URL=redis://host:6379.";

/// Finds `redis-server` on PATH, or explains how to install it.
pub fn redis_server_binary() -> Result<PathBuf, String> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join("redis-server"))
        .find(|candidate| candidate.is_file())
        .ok_or_else(|| INSTALL_HINT.to_string())
}

/// TLS for a server the tests start: its certificate and key, the CA
/// that signed them and the client certificates, and whether clients must
/// show one. Such a server listens over TLS only, and speaks TLS to its
/// master (replication), its Sentinel's masters and its cluster bus.
#[derive(Debug, Clone)]
pub struct ServerTls {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
    /// A client certificate and key signed by `ca`: what the readiness
    /// probe and `redis-cli` show (and what latchkey may show).
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
    /// `tls-auth-clients yes`: a client without a certificate is refused.
    pub auth_clients: bool,
}

impl ServerTls {
    /// The client side: the CA and the client certificate.
    pub fn client(&self) -> RedisTls {
        RedisTls::load(
            Some(SettingFile::new(&self.ca, "the test CA")),
            Some((
                SettingFile::new(&self.client_cert, "the test client certificate"),
                SettingFile::new(&self.client_key, "the test client key"),
            )),
        )
        .expect("the test TLS files are valid")
    }

    fn server_args(&self, port: u16) -> Vec<String> {
        let path = |p: &PathBuf| p.display().to_string();
        let auth = if self.auth_clients { "yes" } else { "no" };
        [
            ("--port", "0".to_string()),
            ("--tls-port", port.to_string()),
            ("--tls-cert-file", path(&self.cert)),
            ("--tls-key-file", path(&self.key)),
            ("--tls-ca-cert-file", path(&self.ca)),
            ("--tls-auth-clients", auth.to_string()),
            ("--tls-replication", "yes".to_string()),
            ("--tls-cluster", "yes".to_string()),
        ]
        .into_iter()
        .flat_map(|(flag, value)| [flag.to_string(), value])
        .collect()
    }

    /// `redis-cli`'s flags to reach such a server.
    fn redis_cli_args(&self) -> Vec<String> {
        let path = |p: &PathBuf| p.display().to_string();
        vec![
            "--tls".into(),
            "--cacert".into(),
            path(&self.ca),
            "--cert".into(),
            path(&self.client_cert),
            "--key".into(),
            path(&self.client_key),
        ]
    }
}

/// One running redis-server child (a data node, or a Sentinel).
pub struct RedisServer {
    child: Option<Child>,
    port: u16,
    dir: ServerDir,
    extra_args: Vec<String>,
    /// For a Sentinel: the config file it owns (Sentinels rewrite it).
    sentinel_conf: Option<String>,
    /// Set: the server listens over TLS only.
    tls: Option<ServerTls>,
}

impl RedisServer {
    /// Starts a server on a free loopback port.
    pub fn start() -> Result<RedisServer, String> {
        Self::start_with(&[])
    }

    /// Starts a server with extra `redis-server` arguments
    /// (e.g. `["--replicaof", "127.0.0.1", "6379"]`).
    pub fn start_with(extra_args: &[&str]) -> Result<RedisServer, String> {
        Self::start_kind(extra_args, None, None)
    }

    /// [`RedisServer::start_with`], listening over TLS only (tests).
    pub fn start_tls(tls: &ServerTls, extra_args: &[&str]) -> Result<RedisServer, String> {
        Self::start_kind(extra_args, None, Some(tls.clone()))
    }

    /// Starts a Sentinel that monitors the master on `master_port` under
    /// `name`, with quorum 1 and a 1 s down-after time (tests only: one
    /// Sentinel is not a safe production setup). With `tls`, the Sentinel
    /// and the master both speak TLS only.
    pub fn start_sentinel(
        name: &str,
        master_port: u16,
        tls: Option<&ServerTls>,
    ) -> Result<RedisServer, String> {
        let conf = format!(
            "sentinel monitor {name} 127.0.0.1 {master_port} 1\n\
             sentinel down-after-milliseconds {name} 1000\n\
             sentinel failover-timeout {name} 5000\n\
             sentinel parallel-syncs {name} 1\n"
        );
        Self::start_kind(&[], Some(conf), tls.cloned())
    }

    fn start_kind(
        extra_args: &[&str],
        sentinel_conf: Option<String>,
        tls: Option<ServerTls>,
    ) -> Result<RedisServer, String> {
        let binary = redis_server_binary()?;
        let mut last_error = String::new();
        // A free port can be taken by someone else between our probe and
        // redis-server's bind (and a directory's making can lose a race
        // with a sweep, see ServerDir::create); try a few.
        for _ in 0..5 {
            let port = free_port()?;
            let dir = match ServerDir::create(port) {
                Ok(dir) => dir,
                Err(e) => {
                    last_error = e;
                    continue;
                }
            };
            let mut server = RedisServer {
                child: None,
                port,
                dir,
                extra_args: extra_args.iter().map(|s| s.to_string()).collect(),
                sentinel_conf: sentinel_conf.clone(),
                tls: tls.clone(),
            };
            match server.spawn(&binary) {
                Ok(()) => return Ok(server),
                Err(e) => last_error = e,
            }
        }
        Err(last_error)
    }

    fn spawn(&mut self, binary: &Path) -> Result<(), String> {
        let log = self.dir.path.join("redis.log");
        let mut command = Command::new(binary);
        if let Some(conf) = &self.sentinel_conf {
            let path = self.dir.path.join("sentinel.conf");
            std::fs::write(&path, conf)
                .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
            command.arg(&path).arg("--sentinel");
        } else {
            command.args(["--save", ""]).args(["--appendonly", "no"]);
        }
        match &self.tls {
            Some(tls) => command.args(tls.server_args(self.port)),
            None => command.args(["--port", &self.port.to_string()]),
        };
        command
            .args(["--bind", "127.0.0.1"])
            .args(["--daemonize", "no"])
            .args(["--protected-mode", "yes"])
            .arg("--dir")
            .arg(&self.dir.path)
            .arg("--logfile")
            .arg(&log)
            .args(&self.extra_args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        crate::child::die_with_parent(&mut command);
        let child = command
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", binary.display()))?;
        self.child = Some(child);
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(10) {
            if self.ask(&["PING"]).as_deref() == Some("PONG") {
                return Ok(());
            }
            if let Some(Ok(Some(status))) = self.child.as_mut().map(Child::try_wait) {
                self.child = None;
                return Err(format!(
                    "redis-server on port {} exited ({status}): {}",
                    self.port,
                    self.log_tail()
                ));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        self.stop();
        Err(format!(
            "redis-server on port {} did not answer PING within 10 s",
            self.port
        ))
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:port/`, or `rediss://…` for a TLS server.
    pub fn url(&self) -> String {
        let scheme = if self.tls.is_some() {
            "rediss"
        } else {
            "redis"
        };
        format!("{scheme}://127.0.0.1:{}/", self.port)
    }

    /// A client for this server (with the test CA and client certificate
    /// for a TLS server), as the default user.
    pub fn client(&self) -> redis::Client {
        let tls = self.tls.as_ref().map(ServerTls::client).unwrap_or_default();
        tls.client(self.url()).expect("a valid URL")
    }

    /// Sends one command and returns its answer as text, or `None` if the
    /// server does not answer it within 500 ms (start-up probes).
    fn ask(&self, command: &[&str]) -> Option<String> {
        let timeout = Duration::from_millis(500);
        let mut conn = self.client().get_connection_with_timeout(timeout).ok()?;
        conn.set_read_timeout(Some(timeout)).ok()?;
        let (name, args) = command.split_first()?;
        redis::cmd(name).arg(args).query(&mut conn).ok()
    }

    /// Kills the server (as a crash would: no shutdown save).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same port, with an empty dataset.
    pub fn restart(&mut self) -> Result<(), String> {
        self.stop();
        let binary = redis_server_binary()?;
        let started = Instant::now();
        // The port may linger briefly after the kill.
        loop {
            match self.spawn(&binary) {
                Ok(()) => return Ok(()),
                Err(e) if started.elapsed() > Duration::from_secs(10) => return Err(e),
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }

    /// Freezes the server (SIGSTOP): connections stay open but nothing is
    /// answered, as with a stalled host. Tests use it for fault injection.
    pub fn pause(&self) {
        self.signal("-STOP");
    }

    /// Lets a paused server run again (SIGCONT).
    pub fn resume(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, signal: &str) {
        if let Some(child) = &self.child {
            let _ = Command::new("kill")
                .arg(signal)
                .arg(child.id().to_string())
                .status();
        }
    }

    /// Kills the server's client connections of one `CLIENT KILL TYPE`
    /// (`normal`, `pubsub`, ...) but the one asking, as a network blip or
    /// an operator would; returns how many were killed. Fault injection.
    pub async fn kill_clients(&self, kind: &str) -> redis::RedisResult<i64> {
        let mut conn = self.client().get_multiplexed_async_connection().await?;
        redis::cmd("CLIENT")
            .arg("KILL")
            .arg("TYPE")
            .arg(kind)
            .arg("SKIPME")
            .arg("yes")
            .query_async(&mut conn)
            .await
    }

    /// The last lines of the server's log, for failure messages.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(self.dir.path.join("redis.log")).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "--- redis-server :{} log ---\n{}",
                self.port,
                self.log_tail()
            );
        }
        self.stop();
        // (The directory goes with the field, after the server stopped.)
    }
}

/// A Redis Cluster built with `redis-cli --cluster create` (tests): `n`
/// masters without replicas, or with one replica each
/// ([`RedisCluster::start_with_replicas`]).
pub struct RedisCluster {
    pub nodes: Vec<RedisServer>,
}

impl RedisCluster {
    pub fn start(n: usize) -> Result<RedisCluster, String> {
        Self::start_on(n, 0, 2000, None)
    }

    /// [`RedisCluster::start`] with every node, and the cluster bus, over
    /// TLS only.
    pub fn start_tls(n: usize, tls: &ServerTls) -> Result<RedisCluster, String> {
        Self::start_on(n, 0, 2000, Some(tls))
    }

    /// `masters` masters, each with one replica, and a 1 s
    /// `cluster-node-timeout`, so that a replica takes over a killed master
    /// within a few seconds (failover tests). `redis-cli` decides which
    /// node replicates which master: ask the cluster (`CLUSTER NODES`).
    pub fn start_with_replicas(masters: usize) -> Result<RedisCluster, String> {
        Self::start_on(masters * 2, 1, 1000, None)
    }

    fn start_on(
        n: usize,
        replicas: usize,
        node_timeout_ms: u64,
        tls: Option<&ServerTls>,
    ) -> Result<RedisCluster, String> {
        let node_timeout = node_timeout_ms.to_string();
        let args = [
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "nodes.conf",
            "--cluster-node-timeout",
            &node_timeout,
        ];
        let nodes = (0..n)
            .map(|_| RedisServer::start_kind(&args, None, tls.cloned()))
            .collect::<Result<Vec<_>, _>>()?;
        let mut create = Command::new("redis-cli");
        if let Some(tls) = tls {
            create.args(tls.redis_cli_args());
        }
        create.args(["--cluster", "create"]);
        for node in &nodes {
            create.arg(format!("127.0.0.1:{}", node.port()));
        }
        let output = create
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .output()
            .map_err(|e| format!("cannot run redis-cli (package redis-tools): {e}"))?;
        if !output.status.success() {
            return Err(format!(
                "redis-cli --cluster create failed: {}",
                String::from_utf8_lossy(&output.stdout)
            ));
        }
        let started = Instant::now();
        for node in &nodes {
            while !node
                .ask(&["CLUSTER", "INFO"])
                .is_some_and(|info| info.contains("cluster_state:ok"))
            {
                if started.elapsed() > Duration::from_secs(20) {
                    return Err("cluster did not reach cluster_state:ok within 20 s".into());
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        // `cluster_state:ok` comes before the replicas are known everywhere:
        // `redis-cli` makes them replicas last, and the news spreads by
        // gossip. Wait until every node lists every replica and each replica
        // has synchronized with its master, so a failover test can find a
        // replica and that replica can take over.
        let expected = n / (replicas + 1) * replicas;
        for node in &nodes {
            while !node.ask(&["CLUSTER", "NODES"]).is_some_and(|table| {
                table
                    .lines()
                    .filter(|line| {
                        line.split_whitespace()
                            .nth(2)
                            .is_some_and(|f| f.contains("slave"))
                    })
                    .count()
                    == expected
            }) || !node.ask(&["INFO", "replication"]).is_some_and(|info| {
                info.contains("role:master") || info.contains("master_link_status:up")
            }) {
                if started.elapsed() > Duration::from_secs(30) {
                    return Err(format!(
                        "the cluster's {expected} replicas were not known everywhere and in sync within 30 s"
                    ));
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        Ok(RedisCluster { nodes })
    }

    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }
}

/// Dev mode's servers: one main node and three independent RedLock nodes.
pub struct DevRedis {
    main: RedisServer,
    redlock: Vec<RedisServer>,
}

impl DevRedis {
    pub fn start() -> Result<DevRedis, String> {
        let main = RedisServer::start()?;
        let redlock = (0..3)
            .map(|_| RedisServer::start())
            .collect::<Result<Vec<_>, _>>()?;
        Ok(DevRedis { main, redlock })
    }

    pub fn main_url(&self) -> String {
        self.main.url()
    }

    pub fn redlock_urls(&self) -> Vec<String> {
        self.redlock.iter().map(RedisServer::url).collect()
    }
}

fn free_port() -> Result<u16, String> {
    let listener =
        TcpListener::bind("127.0.0.1:0").map_err(|e| format!("cannot find a free port: {e}"))?;
    listener
        .local_addr()
        .map(|a| a.port())
        .map_err(|e| format!("cannot find a free port: {e}"))
}

/// What every server directory's name starts with:
/// `latchkey-redis-<pid>-<port>` (and `….new` while it is made).
const DIR_PREFIX: &str = "latchkey-redis-";

/// The file in a server directory that its process keeps locked.
const OWNER_FILE: &str = "owner";

/// A server's own directory (its log; a Sentinel's config file), in the
/// system's temporary directory, removed when dropped.
///
/// A process killed without running destructors (SIGKILL) cannot remove
/// its directories, but the kernel drops its file locks when it dies. So
/// the process that makes a directory holds an exclusive lock on the
/// `owner` file in it (`flock`, by an open file that its children do not
/// inherit) for as long as the directory is in use, and whoever starts a
/// server first removes every server directory whose lock it can take: a
/// dead process's. The lock, not the process id in the name, says who is
/// alive, so processes in other PID namespaces that share the directory
/// (containers) are told apart. A directory without an `owner` file (made
/// by an older latchkey) is left alone: nothing tells whether its process
/// still runs.
struct ServerDir {
    path: PathBuf,
    /// Locked until dropped (closing the file releases the lock).
    _owner: File,
}

impl ServerDir {
    /// Makes the directory of a server on `port`, after removing the ones
    /// dead processes left.
    fn create(port: u16) -> Result<ServerDir, String> {
        let root = std::env::temp_dir();
        sweep(&root);
        let path = root.join(format!("{DIR_PREFIX}{}-{port}", std::process::id()));
        // Made under another name and moved into place once its owner file
        // is locked, so no sweep sees it there unlocked. (A sweep may take
        // the staging directory between the file's creation and its lock:
        // then the move fails, and the caller tries another port.)
        let staging = path.with_extension("new");
        let cannot = |what: &str, path: &Path, e: std::io::Error| {
            format!("cannot {what} {}: {e}", path.display())
        };
        std::fs::create_dir_all(&staging).map_err(|e| cannot("create", &staging, e))?;
        let owner_path = staging.join(OWNER_FILE);
        let owner = File::create(&owner_path).map_err(|e| cannot("create", &owner_path, e))?;
        match owner.try_lock() {
            // Where locks are not supported, no sweep can take it either.
            Ok(()) | Err(TryLockError::Error(_)) => {}
            Err(TryLockError::WouldBlock) => {
                return Err(format!("{} is in use", staging.display()));
            }
        }
        std::fs::rename(&staging, &path).map_err(|e| {
            let _ = std::fs::remove_dir_all(&staging);
            cannot("create", &path, e)
        })?;
        Ok(ServerDir {
            path,
            _owner: owner,
        })
    }
}

impl Drop for ServerDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// Removes the server directories in `root` whose owner file no live
/// process holds locked (see [`ServerDir`]). Best effort: what cannot be
/// read, locked or removed (another user's) is left.
fn sweep(root: &Path) {
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    for entry in entries.flatten() {
        if !entry.file_name().to_string_lossy().starts_with(DIR_PREFIX) {
            continue;
        }
        let dir = entry.path();
        // No owner file: an older latchkey's, or one being made.
        let Ok(owner) = File::open(dir.join(OWNER_FILE)) else {
            continue;
        };
        if owner.try_lock().is_ok() {
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sweep_removes_only_the_directories_no_live_process_holds() {
        let root = std::env::temp_dir().join(format!("latchkey-sweep-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let made = |name: &str, owner: bool| {
            let dir = root.join(name);
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("redis.log"), "log").unwrap();
            let file = owner.then(|| File::create(dir.join(OWNER_FILE)).unwrap());
            (dir, file)
        };
        // A dead process's: its owner file is there, and nobody holds it.
        let (dead, _) = made("latchkey-redis-1-1000", true);
        let (dead_staging, _) = made("latchkey-redis-1-1001.new", true);
        // A live one's: locked, here by this test (another open file of the
        // same process conflicts as another process's would).
        let (live, held) = made("latchkey-redis-2-2000", true);
        held.as_ref().unwrap().try_lock().unwrap();
        // An older latchkey's (no owner file), and not a server's at all.
        let (older, _) = made("latchkey-redis-3-3000", false);
        let (other, _) = made("something-else", true);
        sweep(&root);
        assert!(!dead.exists() && !dead_staging.exists());
        assert!(live.join("redis.log").exists());
        assert!(older.exists() && other.exists());
        // Once its process lets go (dies), the live one goes too.
        drop(held);
        sweep(&root);
        assert!(!live.exists());
        std::fs::remove_dir_all(&root).unwrap();
    }
}
