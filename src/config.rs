//! Typed settings: defaults, then an optional TOML file, then `LATCHKEY_*`
//! environment variables, then command-line flags (API.md §11).
//!
//! Every setting is first collected as text together with where it came
//! from, then parsed and validated in one place, so that a bad value stops
//! the process with a message naming the setting, its source and the fix.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

/// How latchkey reaches its main Redis deployment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RedisMode {
    Standalone,
    Sentinel,
    Cluster,
}

impl RedisMode {
    fn parse(s: &str) -> Option<Self> {
        match s {
            "standalone" => Some(Self::Standalone),
            "sentinel" => Some(Self::Sentinel),
            "cluster" => Some(Self::Cluster),
            _ => None,
        }
    }
}

/// Which browser origins may call the API (CORS).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CorsOrigins {
    /// `*`: any origin (the default, so Swagger UI and browser clients work).
    Any,
    /// Only these exact origins.
    List(Vec<String>),
    /// No CORS headers at all.
    Disabled,
}

/// The validated configuration of one latchkey process.
#[derive(Debug, Clone)]
pub struct Config {
    /// HTTP listen address; port 0 picks a free port (tests).
    pub listen: SocketAddr,
    /// Node URLs of the main Redis (one for standalone; several for
    /// Sentinel/Cluster). Empty means dev mode: latchkey starts its own.
    pub redis_urls: Vec<String>,
    pub redis_mode: RedisMode,
    pub sentinel_master: String,
    /// Independent Redis nodes for `/redlocks` (0, or at least 3).
    pub redlock_nodes: Vec<String>,
    /// Prefix of every Redis key and pub/sub channel.
    pub key_prefix: String,
    /// Largest `wait_ms` a request may ask for.
    pub max_wait_ms: u64,
    /// How long a fair-lock waiter keeps its place between polls.
    pub queue_grace_ms: u64,
    /// Open waits per instance before 429 `too-many-waiters`.
    pub max_waiters: usize,
    /// Replicas that must acknowledge each write (Redis `WAIT`); 0 = none.
    pub min_replicas: u32,
    /// `tracing` filter directive for the JSON logs.
    pub log: String,
    /// Lease used when a request omits `lease_ms`.
    pub default_lease_ms: u64,
    pub min_lease_ms: u64,
    pub max_lease_ms: u64,
    /// Pooled Redis connections per instance. Each request holds one only
    /// for the duration of one script call, never while it waits.
    pub redis_pool_size: usize,
    /// Time allowed to open a TCP (and TLS) connection to Redis.
    pub redis_connect_timeout_ms: u64,
    /// Time allowed for one Redis reply before the request answers 503.
    pub redis_response_timeout_ms: u64,
    pub cors_origins: CorsOrigins,
    /// Largest request body accepted (413 `body-too-large` above it).
    pub max_body_bytes: usize,
    /// How long a graceful shutdown may take before the process exits.
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

    /// A configuration for tests and embedding: defaults, then `overrides`
    /// given as `(setting, value)` pairs, validated like any other source.
    pub fn with_overrides(overrides: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let mut raw = Raw::defaults();
        for (key, value) in overrides {
            raw.set(key, value, Source::Override)?;
        }
        raw.finish()
    }
}

/// One row per setting: key (TOML key; env var is `LATCHKEY_` + upper case;
/// flag is `--` + kebab case), default (`None` = unset), and help text.
pub const SETTINGS: &[(&str, Option<&str>, &str)] = &[
    ("listen", Some("0.0.0.0:8080"), "HTTP listen address"),
    (
        "redis_url",
        None,
        "redis:// or rediss:// URL (Sentinel/Cluster: comma-separated node URLs); unset = dev mode",
    ),
    (
        "redis_mode",
        Some("standalone"),
        "standalone, sentinel or cluster",
    ),
    (
        "sentinel_master",
        Some("mymaster"),
        "master name in Sentinel mode",
    ),
    (
        "redlock_nodes",
        Some(""),
        "comma-separated independent Redis URLs for /redlocks",
    ),
    (
        "key_prefix",
        Some("latchkey:"),
        "prefix of every Redis key and channel",
    ),
    ("max_wait_ms", Some("60000"), "largest wait_ms accepted"),
    (
        "queue_grace_ms",
        Some("5000"),
        "fair-queue place kept between polls",
    ),
    (
        "max_waiters",
        Some("10000"),
        "open waits per instance before 429 too-many-waiters",
    ),
    (
        "min_replicas",
        Some("0"),
        "replicas that must acknowledge each write (Redis WAIT)",
    ),
    (
        "log",
        Some("info"),
        "log filter (tracing EnvFilter syntax); logs are JSON",
    ),
    (
        "default_lease_ms",
        Some("30000"),
        "lease when a request omits lease_ms",
    ),
    ("min_lease_ms", Some("500"), "smallest lease_ms accepted"),
    (
        "max_lease_ms",
        Some("86400000"),
        "largest lease_ms accepted",
    ),
    (
        "redis_pool_size",
        Some("32"),
        "pooled Redis connections per instance",
    ),
    (
        "redis_connect_timeout_ms",
        Some("1000"),
        "Redis connect timeout",
    ),
    (
        "redis_response_timeout_ms",
        Some("2000"),
        "Redis reply timeout (then 503)",
    ),
    (
        "cors_origins",
        Some("*"),
        "CORS: *, a comma-separated origin list, or none",
    ),
    ("max_body_bytes", Some("65536"), "largest request body"),
    (
        "shutdown_grace_ms",
        Some("10000"),
        "longest graceful shutdown",
    ),
];

/// What the command line asked for.
#[derive(Debug)]
pub enum Invocation {
    Run(Box<Config>),
    Help,
    Version,
    PrintOpenApi,
}

/// A configuration problem, worded for the operator who has to fix it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError(pub String);

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "configuration error: {}", self.0)
    }
}

impl std::error::Error for ConfigError {}

/// Where a setting's value came from, for error messages.
#[derive(Debug, Clone)]
enum Source {
    Default,
    File(String),
    Env,
    Flag,
    Override,
}

#[derive(Debug)]
struct Raw {
    values: BTreeMap<&'static str, (String, Source)>,
}

fn env_name(key: &str) -> String {
    format!("LATCHKEY_{}", key.to_ascii_uppercase())
}

fn flag_name(key: &str) -> String {
    format!("--{}", key.replace('_', "-"))
}

fn describe(key: &str, source: &Source) -> String {
    match source {
        Source::Default => format!("default of {key}"),
        Source::File(path) => format!("`{key}` in {path}"),
        Source::Env => env_name(key),
        Source::Flag => flag_name(key),
        Source::Override => key.to_string(),
    }
}

impl Raw {
    fn defaults() -> Self {
        let values = SETTINGS
            .iter()
            .filter_map(|(key, default, _)| {
                default.map(|d| (*key, (d.to_string(), Source::Default)))
            })
            .collect();
        Raw { values }
    }

    fn set(&mut self, key: &str, value: &str, source: Source) -> Result<(), ConfigError> {
        let Some((known, _, _)) = SETTINGS.iter().find(|(k, _, _)| *k == key) else {
            return Err(ConfigError(format!(
                "unknown setting `{key}` (from {}); known settings: {}",
                describe(key, &source),
                SETTINGS
                    .iter()
                    .map(|(k, _, _)| *k)
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        };
        self.values.insert(known, (value.to_string(), source));
        Ok(())
    }

    fn apply_toml(&mut self, path: &str, text: &str) -> Result<(), ConfigError> {
        let table: toml::Table = text
            .parse()
            .map_err(|e| ConfigError(format!("cannot parse config file {path}: {e}")))?;
        for (key, value) in table {
            let text = match value {
                toml::Value::String(s) => s,
                toml::Value::Integer(i) => i.to_string(),
                toml::Value::Boolean(b) => b.to_string(),
                toml::Value::Array(items) => items
                    .iter()
                    .map(|v| match v {
                        toml::Value::String(s) => Ok(s.clone()),
                        other => Err(ConfigError(format!(
                            "`{key}` in {path}: list items must be strings, got {other}"
                        ))),
                    })
                    .collect::<Result<Vec<_>, _>>()?
                    .join(","),
                other => {
                    return Err(ConfigError(format!(
                        "`{key}` in {path}: expected a string, integer or list, got {other}"
                    )));
                }
            };
            self.set(&key, &text, Source::File(path.to_string()))?;
        }
        Ok(())
    }

    fn get(&self, key: &'static str) -> Option<&(String, Source)> {
        self.values.get(key)
    }

    fn text(&self, key: &'static str) -> &str {
        self.get(key).map(|(v, _)| v.as_str()).unwrap_or("")
    }

    fn int(&self, key: &'static str, min: u64, max: u64) -> Result<u64, ConfigError> {
        let (value, source) = self.get(key).expect("every integer setting has a default");
        let parsed: u64 = value.trim().parse().map_err(|_| {
            ConfigError(format!(
                "{} must be a whole number, got {value:?}",
                describe(key, source)
            ))
        })?;
        if parsed < min || parsed > max {
            return Err(ConfigError(format!(
                "{} must be between {min} and {max}, got {parsed}",
                describe(key, source)
            )));
        }
        Ok(parsed)
    }

    fn finish(self) -> Result<Config, ConfigError> {
        let listen_src = self.get("listen").expect("default");
        let listen: SocketAddr = listen_src.0.trim().parse().map_err(|_| {
            ConfigError(format!(
                "{} must be an address like 0.0.0.0:8080, got {:?}",
                describe("listen", &listen_src.1),
                listen_src.0
            ))
        })?;

        let mode_src = self.get("redis_mode").expect("default");
        let redis_mode = RedisMode::parse(mode_src.0.trim()).ok_or_else(|| {
            ConfigError(format!(
                "{} must be standalone, sentinel or cluster, got {:?}",
                describe("redis_mode", &mode_src.1),
                mode_src.0
            ))
        })?;

        let redis_urls = match self.get("redis_url") {
            None => Vec::new(),
            Some((value, source)) => {
                let urls = split_list(value);
                if urls.is_empty() {
                    return Err(ConfigError(format!(
                        "{} is set but empty; unset it for dev mode or give a redis:// URL",
                        describe("redis_url", source)
                    )));
                }
                for url in &urls {
                    check_redis_url(url, &describe("redis_url", source))?;
                }
                if redis_mode == RedisMode::Standalone && urls.len() != 1 {
                    return Err(ConfigError(format!(
                        "{} has {} URLs, but redis_mode is standalone (one URL); \
                         set LATCHKEY_REDIS_MODE=sentinel or cluster for several",
                        describe("redis_url", source),
                        urls.len()
                    )));
                }
                urls
            }
        };
        let (nodes_text, nodes_source) = self.get("redlock_nodes").expect("default");
        let redlock_nodes = split_list(nodes_text);
        for url in &redlock_nodes {
            check_redis_url(url, &describe("redlock_nodes", nodes_source))?;
        }
        if matches!(redlock_nodes.len(), 1 | 2) {
            return Err(ConfigError(format!(
                "{} lists {} node(s); RedLock needs at least 3 independent nodes (an odd number is best), or none",
                describe("redlock_nodes", nodes_source),
                redlock_nodes.len()
            )));
        }

        let (prefix, prefix_source) = self.get("key_prefix").expect("default");
        if prefix.is_empty()
            || prefix.len() > 64
            || !prefix
                .bytes()
                .all(|b| b.is_ascii_graphic() && !b"{}*?[]\\".contains(&b))
        {
            return Err(ConfigError(format!(
                "{} must be 1-64 printable ASCII characters without braces, glob characters or spaces, got {prefix:?}",
                describe("key_prefix", prefix_source)
            )));
        }

        let log = self.text("log").to_string();
        if let Err(e) = tracing_subscriber::EnvFilter::try_new(&log) {
            return Err(ConfigError(format!(
                "LATCHKEY_LOG {log:?} is not a valid log filter: {e}"
            )));
        }

        let min_lease_ms = self.int("min_lease_ms", 1, u64::MAX)?;
        let max_lease_ms = self.int("max_lease_ms", 1, 365 * 86_400_000)?;
        if min_lease_ms > max_lease_ms {
            return Err(ConfigError(format!(
                "min_lease_ms ({min_lease_ms}) is larger than max_lease_ms ({max_lease_ms})"
            )));
        }
        let default_lease_ms = self.int("default_lease_ms", min_lease_ms, max_lease_ms)?;

        let redis_response_timeout_ms = self.int("redis_response_timeout_ms", 10, 60_000)?;
        let min_replicas = self.int("min_replicas", 0, 100)? as u32;

        let cors_text = self.text("cors_origins").trim();
        let cors_origins = match cors_text {
            "*" => CorsOrigins::Any,
            "" | "none" => CorsOrigins::Disabled,
            list => {
                let origins = split_list(list);
                for origin in &origins {
                    let ok = (origin.starts_with("http://") || origin.starts_with("https://"))
                        && axum::http::HeaderValue::from_str(origin).is_ok();
                    if !ok {
                        return Err(ConfigError(format!(
                            "cors_origins entry {origin:?} must be an origin like https://app.example.com"
                        )));
                    }
                }
                CorsOrigins::List(origins)
            }
        };

        Ok(Config {
            listen,
            redis_urls,
            redis_mode,
            sentinel_master: self.text("sentinel_master").to_string(),
            redlock_nodes,
            key_prefix: prefix.clone(),
            max_wait_ms: self.int("max_wait_ms", 0, 86_400_000)?,
            queue_grace_ms: self.int("queue_grace_ms", 100, 3_600_000)?,
            max_waiters: self.int("max_waiters", 1, 10_000_000)? as usize,
            min_replicas,
            log,
            default_lease_ms,
            min_lease_ms,
            max_lease_ms,
            redis_pool_size: self.int("redis_pool_size", 1, 4096)? as usize,
            redis_connect_timeout_ms: self.int("redis_connect_timeout_ms", 10, 60_000)?,
            redis_response_timeout_ms,
            cors_origins,
            max_body_bytes: self.int("max_body_bytes", 1024, 16 * 1024 * 1024)? as usize,
            shutdown_grace_ms: self.int("shutdown_grace_ms", 0, 600_000)?,
        })
    }
}

fn split_list(text: &str) -> Vec<String> {
    text.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

fn check_redis_url(url: &str, what: &str) -> Result<(), ConfigError> {
    if !(url.starts_with("redis://") || url.starts_with("rediss://")) {
        return Err(ConfigError(format!(
            "{what}: {:?} must start with redis:// or rediss://",
            redact(url)
        )));
    }
    redis::parse_redis_url(url).ok_or_else(|| {
        ConfigError(format!(
            "{what}: {:?} is not a valid Redis URL",
            redact(url)
        ))
    })?;
    Ok(())
}

/// A URL safe to print: any password is replaced by `***`.
pub fn redact(url: &str) -> String {
    match url.split_once("://") {
        Some((scheme, rest)) => match rest.rsplit_once('@') {
            Some((_, host)) => format!("{scheme}://***@{host}"),
            None => url.to_string(),
        },
        None => url.to_string(),
    }
}

/// Help text listing every setting with its env var and flag.
pub fn usage() -> String {
    let mut out = String::from(
        "latchkey: distributed locks and synchronizers over HTTP, backed by Redis\n\n\
         USAGE: latchkey [--config FILE] [--SETTING VALUE]...\n\
         \x20      latchkey --print-openapi   print the OpenAPI document and exit\n\n\
         Settings: defaults < TOML file (--config or LATCHKEY_CONFIG) < environment < flags.\n\n",
    );
    for (key, default, help) in SETTINGS {
        out.push_str(&format!(
            "  {:<34} {:<38} {}{}\n",
            flag_name(key),
            env_name(key),
            help,
            match default {
                Some(d) if !d.is_empty() => format!(" [default: {d}]"),
                _ => String::new(),
            }
        ));
    }
    out
}

/// Parses the command line and environment into what the process should do.
/// `args` excludes the program name. `read_file` reads the TOML file.
pub fn parse(
    args: &[String],
    env: &HashMap<String, String>,
    read_file: impl Fn(&str) -> std::io::Result<String>,
) -> Result<Invocation, ConfigError> {
    let mut flags: Vec<(String, String)> = Vec::new();
    let mut config_file = env.get("LATCHKEY_CONFIG").cloned();
    let mut i = 0;
    while i < args.len() {
        let arg = &args[i];
        match arg.as_str() {
            "-h" | "--help" => return Ok(Invocation::Help),
            "-V" | "--version" => return Ok(Invocation::Version),
            "--print-openapi" => return Ok(Invocation::PrintOpenApi),
            _ => {}
        }
        let Some(stripped) = arg.strip_prefix("--") else {
            return Err(ConfigError(format!(
                "unexpected argument {arg:?}; see latchkey --help"
            )));
        };
        let (name, value) = match stripped.split_once('=') {
            Some((n, v)) => (n.to_string(), v.to_string()),
            None => {
                i += 1;
                let value = args
                    .get(i)
                    .ok_or_else(|| ConfigError(format!("flag --{stripped} needs a value")))?;
                (stripped.to_string(), value.clone())
            }
        };
        if name == "config" {
            config_file = Some(value);
        } else {
            flags.push((name.replace('-', "_"), value));
        }
        i += 1;
    }

    let mut raw = Raw::defaults();
    if let Some(path) = config_file {
        let text = read_file(&path)
            .map_err(|e| ConfigError(format!("cannot read config file {path}: {e}")))?;
        raw.apply_toml(&path, &text)?;
    }
    for (key, _, _) in SETTINGS {
        if let Some(value) = env.get(&env_name(key)) {
            raw.set(key, value, Source::Env)?;
        }
    }
    for (key, value) in flags {
        if !SETTINGS.iter().any(|(k, _, _)| *k == key) {
            return Err(ConfigError(format!(
                "unknown flag --{}; see latchkey --help",
                key.replace('_', "-")
            )));
        }
        raw.set(&key, &value, Source::Flag)?;
    }
    raw.finish().map(|c| Invocation::Run(Box::new(c)))
}

/// [`parse`] over the real process arguments, environment and file system.
pub fn from_process() -> Result<Invocation, ConfigError> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let env: HashMap<String, String> = std::env::vars().collect();
    parse(&args, &env, |p| std::fs::read_to_string(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(args: &[&str], env: &[(&str, &str)], file: Option<&str>) -> Result<Config, ConfigError> {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        let env: HashMap<String, String> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let file = file.map(str::to_string);
        match parse(&args, &env, |_| {
            file.clone()
                .ok_or_else(|| std::io::Error::other("no such file"))
        })? {
            Invocation::Run(c) => Ok(*c),
            other => panic!("expected a run, got {other:?}"),
        }
    }

    #[test]
    fn defaults_match_the_contract() {
        let c = run(&[], &[], None).unwrap();
        assert_eq!(c.listen.to_string(), "0.0.0.0:8080");
        assert!(c.dev_mode());
        assert_eq!(c.key_prefix, "latchkey:");
        assert_eq!(c.max_wait_ms, 60_000);
        assert_eq!(c.queue_grace_ms, 5_000);
        assert_eq!(c.max_waiters, 10_000);
        assert_eq!(c.min_replicas, 0);
        assert_eq!(
            (c.min_lease_ms, c.default_lease_ms, c.max_lease_ms),
            (500, 30_000, 86_400_000)
        );
        assert_eq!(c.cors_origins, CorsOrigins::Any);
    }

    #[test]
    fn flags_override_env_which_overrides_the_file() {
        let file = "max_wait_ms = 1000\nmax_waiters = 7\nkey_prefix = \"file:\"\n";
        let c = run(
            &["--config", "x.toml", "--max-wait-ms", "3000"],
            &[
                ("LATCHKEY_MAX_WAIT_MS", "2000"),
                ("LATCHKEY_MAX_WAITERS", "9"),
            ],
            Some(file),
        )
        .unwrap();
        assert_eq!(c.max_wait_ms, 3000);
        assert_eq!(c.max_waiters, 9);
        assert_eq!(c.key_prefix, "file:");
    }

    #[test]
    fn flag_with_equals_sign_is_accepted() {
        let c = run(&["--redis-url=redis://127.0.0.1:7000/0"], &[], None).unwrap();
        assert_eq!(c.redis_urls, vec!["redis://127.0.0.1:7000/0".to_string()]);
        assert!(!c.dev_mode());
    }

    #[test]
    fn lease_range_with_min_above_max_is_rejected() {
        let err = run(
            &[],
            &[
                ("LATCHKEY_MIN_LEASE_MS", "5000"),
                ("LATCHKEY_MAX_LEASE_MS", "1000"),
            ],
            None,
        )
        .unwrap_err();
        assert!(
            err.0
                .contains("min_lease_ms (5000) is larger than max_lease_ms (1000)"),
            "{err}"
        );
    }

    #[test]
    fn unparsable_redis_url_is_rejected_without_leaking_the_password() {
        let err = run(
            &[],
            &[("LATCHKEY_REDIS_URL", "http://user:secret@host")],
            None,
        )
        .unwrap_err();
        assert!(err.0.contains("LATCHKEY_REDIS_URL"), "{err}");
        assert!(!err.0.contains("secret"), "{err}");
    }

    #[test]
    fn one_or_two_redlock_nodes_are_a_configuration_error() {
        let err = run(
            &[],
            &[("LATCHKEY_REDLOCK_NODES", "redis://a:1,redis://b:2")],
            None,
        )
        .unwrap_err();
        assert!(err.0.contains("at least 3"), "{err}");
        let ok = run(
            &[],
            &[(
                "LATCHKEY_REDLOCK_NODES",
                "redis://a:1,redis://b:2,redis://c:3",
            )],
            None,
        )
        .unwrap();
        assert_eq!(ok.redlock_nodes.len(), 3);
    }

    #[test]
    fn bad_numbers_name_the_setting_and_its_source() {
        let err = run(&["--max-waiters", "lots"], &[], None).unwrap_err();
        assert!(
            err.0.contains("--max-waiters must be a whole number"),
            "{err}"
        );
        let err = run(&["--config", "f.toml"], &[], Some("max_wait_ms = -5")).unwrap_err();
        assert!(
            err.0
                .contains("`max_wait_ms` in f.toml must be a whole number"),
            "{err}"
        );
    }

    #[test]
    fn unknown_settings_are_rejected() {
        assert!(
            run(&["--no-such-thing", "1"], &[], None)
                .unwrap_err()
                .0
                .contains("unknown flag")
        );
        assert!(
            run(&["--config", "f"], &[], Some("colour = \"red\""))
                .unwrap_err()
                .0
                .contains("unknown setting")
        );
    }

    #[test]
    fn key_prefix_with_braces_or_globs_is_rejected() {
        assert!(run(&["--key-prefix", "a{b}"], &[], None).is_err());
        assert!(run(&["--key-prefix", "a*"], &[], None).is_err());
        assert!(run(&["--key-prefix", "app1:"], &[], None).is_ok());
    }

    #[test]
    fn the_example_file_is_valid_and_lists_every_setting() {
        let text = include_str!("../latchkey.example.toml");
        let c = run(&["--config", "latchkey.example.toml"], &[], Some(text)).unwrap();
        assert!(c.dev_mode());
        assert_eq!(c.max_wait_ms, 60_000);
        for (key, _, _) in SETTINGS {
            assert!(
                text.contains(&format!("{key} =")),
                "example file lacks {key}"
            );
        }
    }

    #[test]
    fn default_lease_outside_the_range_is_rejected() {
        let err = run(&["--max-lease-ms", "10000"], &[], None).unwrap_err();
        assert!(err.0.contains("default_lease_ms"), "{err}");
    }
}
