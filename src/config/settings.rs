//! The settings: one struct whose fields are the settings, each with its
//! TOML key, its `LATCHKEY_*` variable, its flag, its default and its
//! one-line description in one place, and the range of each whole-number
//! setting. The loader ([`super::load`]), the checks ([`super::validate`])
//! and the reference ([`super::reference`]) all read them from here.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Command, FromArgMatches};
use serde::{Deserialize, Serialize};

use super::values::{
    CorsOrigins, RedisMode, address, cors, de_address, de_cors, de_list, de_mode, de_path,
    de_string, de_whole, ser_cors, whole,
};

/// The configuration of one latchkey process. Each field is a setting: its
/// TOML key is the field name (`redis_url` for `redis_urls`), its variable
/// `LATCHKEY_` + the key in upper case, its flag `--` + the key in kebab case.
#[derive(Debug, Clone, Args, Serialize, Deserialize)]
#[command(next_help_heading = "Settings")]
pub struct Config {
    /// HTTP listen address; port 0 picks a free port.
    #[arg(long, env = "LATCHKEY_LISTEN", default_value = "0.0.0.0:8080", value_parser = address)]
    #[serde(deserialize_with = "de_address")]
    pub listen: SocketAddr,
    /// Main Redis node URLs, comma-separated (several for Sentinel/Cluster); unset = dev mode.
    #[arg(
        id = "redis_url",
        long = "redis-url",
        env = "LATCHKEY_REDIS_URL",
        value_name = "URLS",
        value_delimiter = ','
    )]
    #[serde(rename = "redis_url", deserialize_with = "de_list")]
    pub redis_urls: Vec<String>,
    /// How the main Redis is deployed: standalone, sentinel or cluster.
    #[arg(long, env = "LATCHKEY_REDIS_MODE", default_value = "standalone", value_parser = RedisMode::parse)]
    #[serde(deserialize_with = "de_mode")]
    pub redis_mode: RedisMode,
    /// Master name the Sentinels know the main Redis by (Sentinel mode).
    #[arg(long, env = "LATCHKEY_SENTINEL_MASTER", default_value = "mymaster")]
    #[serde(deserialize_with = "de_string")]
    pub sentinel_master: String,
    /// Independent Redis node URLs for /redlocks, comma-separated: none, or at least 3.
    #[arg(
        long,
        env = "LATCHKEY_REDLOCK_NODES",
        value_name = "URLS",
        value_delimiter = ','
    )]
    #[serde(deserialize_with = "de_list")]
    pub redlock_nodes: Vec<String>,
    /// CA certificate(s), PEM, that rediss:// servers' certificates must chain to; unset = the system's roots.
    #[arg(long, env = "LATCHKEY_REDIS_TLS_CA_FILE", value_name = "FILE")]
    #[serde(default, deserialize_with = "de_path")]
    pub redis_tls_ca_file: Option<PathBuf>,
    /// Client certificate, PEM (its chain may follow), shown to rediss:// servers that require one; needs redis_tls_key_file.
    #[arg(long, env = "LATCHKEY_REDIS_TLS_CERT_FILE", value_name = "FILE")]
    #[serde(default, deserialize_with = "de_path")]
    pub redis_tls_cert_file: Option<PathBuf>,
    /// Private key, PEM, of redis_tls_cert_file.
    #[arg(long, env = "LATCHKEY_REDIS_TLS_KEY_FILE", value_name = "FILE")]
    #[serde(default, deserialize_with = "de_path")]
    pub redis_tls_key_file: Option<PathBuf>,
    /// Prefix of every Redis key and pub/sub channel.
    #[arg(long, env = "LATCHKEY_KEY_PREFIX", default_value = "latchkey:")]
    #[serde(deserialize_with = "de_string")]
    pub key_prefix: String,
    /// API keys: comma-separated NAMESPACE:ROLE:SHA256 entries (ROLE client or admin, SHA256 the key's SHA-256 in hex); each key once, here and in api_keys_file together. With none here or in api_keys_file the service is open to anyone.
    #[arg(
        long,
        env = "LATCHKEY_API_KEYS",
        value_name = "ENTRIES",
        value_delimiter = ','
    )]
    #[serde(deserialize_with = "de_list")]
    pub api_keys: Vec<String>,
    /// A file of API key entries, one per line (e.g. a mounted Secret); read at start.
    #[arg(long, env = "LATCHKEY_API_KEYS_FILE", value_name = "FILE")]
    pub api_keys_file: Option<String>,
    /// Largest wait_ms a request may ask for.
    #[arg(long, env = "LATCHKEY_MAX_WAIT_MS", default_value = "60000", value_parser = whole::<u64>)]
    #[serde(deserialize_with = "de_whole")]
    pub max_wait_ms: u64,
    /// How long a waiter of a fair lock or rwlock keeps its place in the queue after its poll ends.
    #[arg(long, env = "LATCHKEY_QUEUE_GRACE_MS", default_value = "5000", value_parser = whole::<u64>)]
    #[serde(deserialize_with = "de_whole")]
    pub queue_grace_ms: u64,
    /// Open waits per instance before 429 too-many-waiters.
    #[arg(long, env = "LATCHKEY_MAX_WAITERS", default_value = "10000", value_parser = whole::<usize>)]
    #[serde(deserialize_with = "de_whole")]
    pub max_waiters: usize,
    /// Replicas that must acknowledge each write (Redis WAIT); 0 = none.
    #[arg(long, env = "LATCHKEY_MIN_REPLICAS", default_value = "0", value_parser = whole::<u32>)]
    #[serde(deserialize_with = "de_whole")]
    pub min_replicas: u32,
    /// Log filter (tracing EnvFilter syntax); logs are JSON on stdout.
    #[arg(long, env = "LATCHKEY_LOG", default_value = "info")]
    #[serde(deserialize_with = "de_string")]
    pub log: String,
    /// Lease used when a request omits lease_ms.
    #[arg(long, env = "LATCHKEY_DEFAULT_LEASE_MS", default_value = "30000", value_parser = whole::<u64>)]
    #[serde(deserialize_with = "de_whole")]
    pub default_lease_ms: u64,
    /// Smallest lease_ms accepted.
    #[arg(long, env = "LATCHKEY_MIN_LEASE_MS", default_value = "500", value_parser = whole::<u64>)]
    #[serde(deserialize_with = "de_whole")]
    pub min_lease_ms: u64,
    /// Largest lease_ms accepted.
    #[arg(long, env = "LATCHKEY_MAX_LEASE_MS", default_value = "86400000", value_parser = whole::<u64>)]
    #[serde(deserialize_with = "de_whole")]
    pub max_lease_ms: u64,
    /// Redis connections per instance: shared and multiplexed (concurrent calls are pipelined on them); also the size of the dedicated pool used when min_replicas > 0.
    #[arg(long, env = "LATCHKEY_REDIS_POOL_SIZE", default_value = "4", value_parser = whole::<usize>)]
    #[serde(deserialize_with = "de_whole")]
    pub redis_pool_size: usize,
    /// Time allowed to open a TCP (and TLS) connection to Redis.
    #[arg(long, env = "LATCHKEY_REDIS_CONNECT_TIMEOUT_MS", default_value = "1000", value_parser = whole::<u64>)]
    #[serde(deserialize_with = "de_whole")]
    pub redis_connect_timeout_ms: u64,
    /// Time allowed for one Redis reply before the request answers 503.
    #[arg(long, env = "LATCHKEY_REDIS_RESPONSE_TIMEOUT_MS", default_value = "2000", value_parser = whole::<u64>)]
    #[serde(deserialize_with = "de_whole")]
    pub redis_response_timeout_ms: u64,
    /// Browser origins allowed by CORS: *, a comma-separated origin list, or none.
    #[arg(long, env = "LATCHKEY_CORS_ORIGINS", default_value = "*", value_parser = cors)]
    #[serde(serialize_with = "ser_cors", deserialize_with = "de_cors")]
    pub cors_origins: CorsOrigins,
    /// Largest request body accepted (413 body-too-large above it).
    #[arg(long, env = "LATCHKEY_MAX_BODY_BYTES", default_value = "65536", value_parser = whole::<usize>)]
    #[serde(deserialize_with = "de_whole")]
    pub max_body_bytes: usize,
    /// How long a graceful shutdown may take before the process exits.
    #[arg(long, env = "LATCHKEY_SHUTDOWN_GRACE_MS", default_value = "10000", value_parser = whole::<u64>)]
    #[serde(deserialize_with = "de_whole")]
    pub shutdown_grace_ms: u64,
}

impl Config {
    /// True when no Redis URL was given: latchkey runs its own redis-servers.
    pub fn dev_mode(&self) -> bool {
        self.redis_urls.is_empty()
    }

    pub fn redis_connect_timeout(&self) -> Duration {
        Duration::from_millis(self.redis_connect_timeout_ms)
    }

    pub fn redis_response_timeout(&self) -> Duration {
        Duration::from_millis(self.redis_response_timeout_ms)
    }

    /// Each whole-number setting with a fixed range: its key, its value and
    /// the lowest and highest value allowed. The checks hold the values to
    /// them ([`super::validate`]; `default_lease_ms` to
    /// `min_lease_ms..=max_lease_ms` after these) and the reference shows
    /// them.
    pub(super) fn ranges(&self) -> [(&'static str, u64, u64, u64); 11] {
        #[rustfmt::skip]
        let ranges = [
            ("min_lease_ms", self.min_lease_ms, 1, u64::MAX),
            ("max_lease_ms", self.max_lease_ms, 1, 365 * 86_400_000),
            ("redis_response_timeout_ms", self.redis_response_timeout_ms, 10, 60_000),
            ("min_replicas", self.min_replicas.into(), 0, 100),
            ("max_wait_ms", self.max_wait_ms, 0, 86_400_000),
            ("queue_grace_ms", self.queue_grace_ms, 100, 3_600_000),
            ("max_waiters", self.max_waiters as u64, 1, 10_000_000),
            ("redis_pool_size", self.redis_pool_size as u64, 1, 4096),
            ("redis_connect_timeout_ms", self.redis_connect_timeout_ms, 10, 60_000),
            ("max_body_bytes", self.max_body_bytes as u64, 1024, 16 * 1024 * 1024),
            ("shutdown_grace_ms", self.shutdown_grace_ms, 0, 600_000),
        ];
        ranges
    }
}

impl Default for Config {
    /// Every setting at its default (dev mode), ignoring the environment.
    fn default() -> Self {
        let command = without_env(Config::augment_args(Command::new("latchkey")));
        let matches = command
            .try_get_matches_from(["latchkey"])
            .expect("the defaults parse");
        Config::from_arg_matches(&matches).expect("the defaults parse")
    }
}

pub(super) fn without_env(command: Command) -> Command {
    command.mut_args(|arg| arg.env(None::<&str>))
}

/// The TOML keys of all settings (clap's argument ids).
pub(super) fn setting_keys() -> Vec<String> {
    Config::augment_args(Command::new("latchkey"))
        .get_arguments()
        .map(|arg| arg.get_id().to_string())
        .collect()
}
