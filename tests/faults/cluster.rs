//! The system under test as real processes: one main Redis (AOF, fsync on
//! every write, so a restart keeps its data), three independent Redis nodes
//! for RedLock, and several latchkey instances (the release binary of this
//! build is not needed: the test uses the binary Cargo built for it).

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use latchkey::devredis::RedisServer;

/// Settings every instance runs with; the checkers' bounds derive from them.
pub const RESPONSE_TIMEOUT_MS: u64 = 1000;
pub const QUEUE_GRACE_MS: u64 = 3000;
pub const MAX_WAIT_MS: u64 = 5000;

pub struct Instance {
    pub port: u16,
    child: Option<Child>,
    env: Vec<(String, String)>,
    log: std::path::PathBuf,
}

impl Instance {
    fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("instance log");
        let mut command = Command::new(env!("CARGO_BIN_EXE_latchkey"));
        command
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .env("LATCHKEY_LISTEN", format!("127.0.0.1:{}", self.port))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log);
        self.child = Some(command.spawn().expect("start latchkey"));
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// kill -9: no shutdown, open requests are cut.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts a killed instance again on its port and waits until it is ready.
    pub async fn restart(&mut self) {
        self.kill();
        let started = Instant::now();
        loop {
            self.spawn();
            if wait_ready(&self.url(), Duration::from_secs(10)).await {
                return;
            }
            self.kill();
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "instance on port {} did not come back; see {}",
                self.port,
                self.log.display()
            );
        }
    }

    /// Resident memory of the process, in KiB.
    pub fn rss_kib(&self) -> Option<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid()?)).ok()?;
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        self.kill();
    }
}

async fn wait_ready(url: &str, within: Duration) -> bool {
    let client = reqwest::Client::new();
    let started = Instant::now();
    while started.elapsed() < within {
        let ready = client.get(format!("{url}/readyz")).send().await;
        if ready.is_ok_and(|r| r.status() == 200) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

pub struct Cluster {
    pub redis: RedisServer,
    pub instances: Vec<Instance>,
    /// Kept for their lifetime: the RedLock nodes and the logs' directory.
    _redlock_nodes: Vec<RedisServer>,
    _logs: tempdir::Dir,
}

/// A scratch directory removed on drop (logs of the instances).
pub mod tempdir {
    pub struct Dir(pub std::path::PathBuf);
    impl Dir {
        pub fn new(prefix: &str) -> Dir {
            let path = std::env::temp_dir().join(format!(
                "{prefix}-{}-{}",
                std::process::id(),
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_nanos())
                    .unwrap_or(0)
            ));
            std::fs::create_dir_all(&path).expect("scratch directory");
            Dir(path)
        }
    }
    impl Drop for Dir {
        fn drop(&mut self) {
            if !std::thread::panicking() {
                let _ = std::fs::remove_dir_all(&self.0);
            } else {
                eprintln!("instance logs kept in {}", self.0.display());
            }
        }
    }
}

impl Cluster {
    pub async fn start(instances: usize) -> Cluster {
        let redis = RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always"])
            .expect("main redis-server");
        let redlock_nodes: Vec<RedisServer> = (0..3)
            .map(|_| RedisServer::start().expect("RedLock node"))
            .collect();
        let nodes: Vec<String> = redlock_nodes.iter().map(RedisServer::url).collect();
        let dir = tempdir::Dir::new("latchkey-faults");
        let env: Vec<(String, String)> = [
            ("LATCHKEY_REDIS_URL", redis.url()),
            ("LATCHKEY_REDLOCK_NODES", nodes.join(",")),
            (
                "LATCHKEY_REDIS_RESPONSE_TIMEOUT_MS",
                RESPONSE_TIMEOUT_MS.to_string(),
            ),
            ("LATCHKEY_REDIS_CONNECT_TIMEOUT_MS", "500".to_string()),
            ("LATCHKEY_QUEUE_GRACE_MS", QUEUE_GRACE_MS.to_string()),
            ("LATCHKEY_MAX_WAIT_MS", MAX_WAIT_MS.to_string()),
            ("LATCHKEY_MIN_LEASE_MS", "200".to_string()),
            ("LATCHKEY_SHUTDOWN_GRACE_MS", "1000".to_string()),
            ("LATCHKEY_LOG", "warn".to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        let mut all = Vec::new();
        for i in 0..instances {
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .expect("a free port")
                .port();
            let mut instance = Instance {
                port,
                child: None,
                env: env.clone(),
                log: dir.0.join(format!("instance-{i}.log")),
            };
            instance.restart().await;
            all.push(instance);
        }
        Cluster {
            redis,
            instances: all,
            _redlock_nodes: redlock_nodes,
            _logs: dir,
        }
    }

    pub fn urls(&self) -> Vec<String> {
        self.instances.iter().map(Instance::url).collect()
    }

    /// A plain Redis connection to the main node (for the checks and for
    /// `CLIENT KILL`).
    pub async fn redis_conn(&self) -> redis::aio::MultiplexedConnection {
        redis::Client::open(self.redis.url())
            .expect("redis url")
            .get_multiplexed_async_connection()
            .await
            .expect("connect to the main redis")
    }
}
