//! Typed settings: defaults, then an optional TOML file, then `LATCHKEY_*`
//! environment variables, then command-line flags.
//!
//! [`Config`] is one struct: clap reads its flags and environment variables
//! (and writes `--help` from the doc comments), serde reads the TOML file
//! under them. Cross-field rules are checked by hand in one place, and a bad
//! value stops the process with a message naming the setting and where its
//! value came from (the file, the variable or the flag).

use std::collections::HashMap;
use std::ffi::OsString;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::parser::ValueSource;
use clap::{Args, Command, CommandFactory, FromArgMatches, Parser};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use crate::store::tls::{RedisTls, SettingFile};

/// How latchkey reaches its main Redis deployment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RedisMode {
    Standalone,
    Sentinel,
    Cluster,
}

impl RedisMode {
    fn parse(s: &str) -> Result<Self, String> {
        match s.trim() {
            "standalone" => Ok(Self::Standalone),
            "sentinel" => Ok(Self::Sentinel),
            "cluster" => Ok(Self::Cluster),
            _ => Err(format!(
                "must be standalone, sentinel or cluster, got {s:?}"
            )),
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

impl CorsOrigins {
    /// `*`, `none` (or nothing), or a list of origins.
    fn from_list(list: Vec<String>) -> Self {
        match list.as_slice() {
            [] => Self::Disabled,
            [one] if one == "*" => Self::Any,
            [one] if one == "none" => Self::Disabled,
            _ => Self::List(list),
        }
    }
}

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

/// The command line: the settings plus what is not a setting.
#[derive(Debug, Parser)]
#[command(
    name = "latchkey",
    version,
    about = "latchkey: distributed locks and synchronizers over HTTP, backed by Redis",
    after_help = "Settings: defaults < TOML file (--config or LATCHKEY_CONFIG) < environment < flags.\n\
                  `latchkey serve [settings]` is the same as `latchkey [settings]`.\n\
                  Client tools: latchkey lock|rwlock|semaphore|latch --help."
)]
struct Cli {
    /// TOML file of settings (keys as in latchkey.example.toml).
    #[arg(long, env = "LATCHKEY_CONFIG", value_name = "FILE")]
    config: Option<String>,
    /// Print the OpenAPI document and exit.
    #[arg(long)]
    print_openapi: bool,
    #[command(flatten)]
    settings: Config,
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

    /// The TLS files of `rediss://` connections, read and checked (see
    /// [`RedisTls::load`]); errors name the setting's key.
    pub fn redis_tls(&self) -> Result<RedisTls, ConfigError> {
        self.load_redis_tls(&Sources::default())
    }

    fn load_redis_tls<'a>(&'a self, sources: &Sources) -> Result<RedisTls, ConfigError> {
        let file = |key: &str, path: Option<&'a Path>| {
            path.map(|path| SettingFile::new(path, sources.describe(key)))
        };
        let ca = file("redis_tls_ca_file", self.redis_tls_ca_file.as_deref());
        let cert = file("redis_tls_cert_file", self.redis_tls_cert_file.as_deref());
        let key = file("redis_tls_key_file", self.redis_tls_key_file.as_deref());
        let client = match (cert, key) {
            (Some(cert), Some(key)) => Some((cert, key)),
            (None, None) => None,
            (Some(given), None) | (None, Some(given)) => {
                return Err(ConfigError(format!(
                    "{} is set without the other of redis_tls_cert_file and redis_tls_key_file; \
                     a client certificate needs both",
                    given.setting
                )));
            }
        };
        let given = ca.iter().chain(client.iter().map(|(cert, _)| cert)).next();
        if let Some(given) = given
            && !self
                .redis_urls
                .iter()
                .chain(&self.redlock_nodes)
                .any(|url| url.starts_with("rediss://"))
        {
            return Err(ConfigError(format!(
                "{} is set, but no Redis URL uses TLS; give rediss:// URLs or unset it",
                given.setting
            )));
        }
        RedisTls::load(ca, client).map_err(ConfigError)
    }

    /// Checks a configuration built in code (tests, embedding) by the same
    /// rules as one read from the process; errors name the setting's key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.check(&Sources::default())
    }

    fn check(&self, sources: &Sources) -> Result<(), ConfigError> {
        let fail = |message: String| Err(ConfigError(message));
        let range = |key: &str, value: u64, min: u64, max: u64| {
            if (min..=max).contains(&value) {
                Ok(())
            } else {
                fail(format!(
                    "{} must be between {min} and {max}, got {value}",
                    sources.describe(key)
                ))
            }
        };

        let redis_url = sources.describe("redis_url");
        if self.redis_urls.is_empty() && sources.given("redis_url") {
            return fail(format!(
                "{redis_url} is set but empty; unset it for dev mode or give a redis:// URL"
            ));
        }
        for url in &self.redis_urls {
            check_redis_url(url, &redis_url)?;
        }
        if self.redis_mode == RedisMode::Standalone && self.redis_urls.len() > 1 {
            return fail(format!(
                "{redis_url} has {} URLs, but redis_mode is standalone (one URL); \
                 set LATCHKEY_REDIS_MODE=sentinel or cluster for several",
                self.redis_urls.len()
            ));
        }
        let redlock = sources.describe("redlock_nodes");
        for url in &self.redlock_nodes {
            check_redis_url(url, &redlock)?;
        }
        if matches!(self.redlock_nodes.len(), 1 | 2) {
            return fail(format!(
                "{redlock} lists {} node(s); RedLock needs at least 3 independent nodes (an odd number is best), or none",
                self.redlock_nodes.len()
            ));
        }

        self.load_redis_tls(sources)?;

        let prefix = &self.key_prefix;
        if prefix.is_empty()
            || prefix.len() > 64
            || !prefix
                .bytes()
                .all(|b| b.is_ascii_graphic() && !b"{}*?[]\\".contains(&b))
        {
            return fail(format!(
                "{} must be 1-64 printable ASCII characters without braces, glob characters or spaces, got {prefix:?}",
                sources.describe("key_prefix")
            ));
        }

        // The key file is read here too, so that a bad or clashing entry
        // in it stops the start like one in the setting.
        if let Err(e) = crate::http::access::Keys::load(self, &sources.describe("api_keys")) {
            return fail(e);
        }

        if let Err(e) = tracing_subscriber::EnvFilter::try_new(&self.log) {
            return fail(format!(
                "{} {:?} is not a valid log filter: {e}",
                sources.describe("log"),
                self.log
            ));
        }

        if let CorsOrigins::List(origins) = &self.cors_origins {
            for origin in origins {
                let ok = (origin.starts_with("http://") || origin.starts_with("https://"))
                    && axum::http::HeaderValue::from_str(origin).is_ok();
                if !ok {
                    return fail(format!(
                        "cors_origins entry {origin:?} must be an origin like https://app.example.com"
                    ));
                }
            }
        }

        let (min, max) = (self.min_lease_ms, self.max_lease_ms);
        #[rustfmt::skip]
        let ranges: [(&str, u64, u64, u64); 11] = [
            ("min_lease_ms", min, 1, u64::MAX),
            ("max_lease_ms", max, 1, 365 * 86_400_000),
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
        for (key, value, low, high) in ranges {
            range(key, value, low, high)?;
        }
        if min > max {
            return fail(format!(
                "min_lease_ms ({min}) is larger than max_lease_ms ({max})"
            ));
        }
        range("default_lease_ms", self.default_lease_ms, min, max)
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

/// What the command line asked for.
#[derive(Debug)]
pub enum Invocation {
    /// Serve with this configuration; log the warnings once logging is up.
    Run {
        config: Box<Config>,
        warnings: Vec<String>,
    },
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
    /// The TOML file at this path.
    File(String),
    /// This environment variable or flag.
    Named(String),
}

/// The source of each setting by key; a key missing here was set in code.
#[derive(Debug, Default)]
struct Sources(HashMap<String, Source>);

impl Sources {
    fn describe(&self, key: &str) -> String {
        match self.0.get(key) {
            Some(Source::Default) => format!("default of {key}"),
            Some(Source::File(path)) => format!("`{key}` in {path}"),
            Some(Source::Named(name)) => name.clone(),
            None => key.to_string(),
        }
    }

    /// Set by the file, the environment or a flag (not a default).
    fn given(&self, key: &str) -> bool {
        matches!(self.0.get(key), Some(Source::File(_) | Source::Named(_)))
    }
}

/// The command line parser, with environment values kept out of `--help`
/// (a Redis URL may hold a password).
fn command() -> Command {
    Cli::command().mut_args(|arg| arg.hide_env_values(true))
}

fn without_env(command: Command) -> Command {
    command.mut_args(|arg| arg.env(None::<&str>))
}

/// The TOML keys of all settings (clap's argument ids).
fn setting_keys() -> Vec<String> {
    Config::augment_args(Command::new("latchkey"))
        .get_arguments()
        .map(|arg| arg.get_id().to_string())
        .collect()
}

/// Help text listing every setting with its flag, variable and default.
pub fn usage() -> String {
    command().render_help().to_string()
}

/// Parses `args` (with the program name first) and the environment the
/// `command` captured into what the process should do. `read_file` reads
/// the TOML file.
fn parse(
    command: Command,
    args: Vec<OsString>,
    read_file: impl Fn(&str) -> std::io::Result<String>,
) -> Result<Invocation, ConfigError> {
    let mut args = args;
    // `latchkey serve …` is `latchkey …` (the client tools are the other
    // subcommands).
    if args.get(1).is_some_and(|arg| arg == "serve") {
        args.remove(1);
    }
    let matches = match command.clone().try_get_matches_from(&args) {
        Ok(matches) => matches,
        Err(e) => return clap_error(e, &command, &args),
    };
    let cli = Cli::from_arg_matches(&matches).map_err(|e| ConfigError(e.to_string()))?;
    if cli.print_openapi {
        return Ok(Invocation::PrintOpenApi);
    }
    let mut sources = Sources::default();
    for arg in command.get_arguments() {
        let key = arg.get_id().as_str();
        let source = match matches.value_source(key) {
            Some(ValueSource::DefaultValue) => Source::Default,
            Some(ValueSource::EnvVariable) => {
                Source::Named(arg.get_env().unwrap_or_default().to_string_lossy().into())
            }
            Some(_) => Source::Named(format!("--{}", arg.get_long().unwrap_or(key))),
            None => continue,
        };
        sources.0.insert(key.to_string(), source);
    }
    let mut config = cli.settings;
    if let Some(path) = cli.config {
        let text = read_file(&path)
            .map_err(|e| ConfigError(format!("cannot read config file {path}: {e}")))?;
        config = apply_file(config, &mut sources, &path, &text)?;
    }
    config.redis_urls = clean_list(config.redis_urls);
    config.redlock_nodes = clean_list(config.redlock_nodes);
    config.check(&sources)?;
    Ok(Invocation::Run {
        config: Box::new(config),
        warnings: Vec::new(),
    })
}

/// Lays the TOML file's settings over `config` where neither a variable nor
/// a flag set them.
fn apply_file(
    config: Config,
    sources: &mut Sources,
    path: &str,
    text: &str,
) -> Result<Config, ConfigError> {
    let table: toml::Table = text
        .parse()
        .map_err(|e| ConfigError(format!("cannot parse config file {path}: {e}")))?;
    let keys = setting_keys();
    let mut merged = serde_json::to_value(&config).expect("a Config serializes");
    for (key, value) in table {
        if !keys.contains(&key) {
            return Err(ConfigError(format!(
                "unknown setting `{key}` in {path}; known settings: {}",
                keys.join(", ")
            )));
        }
        if sources.given(&key) {
            continue;
        }
        merged[&key] = serde_json::to_value(value).expect("a TOML value serializes");
        // One key at a time, so that an error names the key at fault.
        serde_json::from_value::<Config>(merged.clone())
            .map_err(|e| ConfigError(format!("`{key}` in {path} {e}")))?;
        sources.0.insert(key, Source::File(path.to_string()));
    }
    Ok(serde_json::from_value(merged).expect("every key was checked"))
}

/// Turns clap's verdict into an invocation or an error that names where the
/// bad value came from (clap's own message names only the flag).
fn clap_error(
    e: clap::Error,
    command: &Command,
    args: &[OsString],
) -> Result<Invocation, ConfigError> {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    let invalid_arg = match e.get(ContextKind::InvalidArg) {
        Some(ContextValue::String(arg)) => arg.split_whitespace().next().map(str::to_string),
        _ => None,
    };
    let message = match (e.kind(), invalid_arg) {
        (ErrorKind::DisplayHelp, _) => return Ok(Invocation::Help),
        (ErrorKind::DisplayVersion, _) => return Ok(Invocation::Version),
        (ErrorKind::UnknownArgument, Some(arg)) if arg.starts_with('-') => {
            match e.get(ContextKind::SuggestedArg) {
                Some(ContextValue::String(known)) => {
                    format!("unknown flag {arg}; did you mean {known}?")
                }
                _ => format!("unknown flag {arg}; see latchkey --help"),
            }
        }
        (ErrorKind::UnknownArgument, Some(arg)) => {
            format!("unexpected argument {arg:?}; see latchkey --help")
        }
        (ErrorKind::ValueValidation, Some(flag)) => {
            // clap takes a variable's value only when the flag is absent.
            let on_command_line = args.iter().any(|a| {
                let a = a.to_string_lossy();
                a == flag || a.starts_with(&format!("{flag}="))
            });
            let env = command
                .get_arguments()
                .find(|arg| arg.get_long().is_some_and(|l| flag == format!("--{l}")))
                .and_then(|arg| arg.get_env());
            let source = match env {
                Some(name) if !on_command_line => name.to_string_lossy().into_owned(),
                _ => flag,
            };
            let reason = std::error::Error::source(&e)
                .map(ToString::to_string)
                .unwrap_or_default();
            format!("{source} {reason}")
        }
        _ => {
            let text = e.render().to_string();
            let first_line = text.lines().next().unwrap_or_default();
            first_line.trim_start_matches("error: ").to_string()
        }
    };
    Err(ConfigError(message))
}

/// Warnings for `LATCHKEY_*` variables that are no setting, each naming
/// the closest known variable.
fn unknown_variables(known: &[String], names: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut unknown: Vec<String> = names
        .into_iter()
        .filter(|name| name.starts_with("LATCHKEY_") && !known.contains(name))
        .filter(|name| !crate::cli::VARIABLES.contains(&name.as_str()))
        .collect();
    unknown.sort();
    unknown
        .into_iter()
        .map(|name| {
            let closest = known
                .iter()
                .min_by_key(|k| strsim::levenshtein(k, &name))
                .expect("there are settings");
            format!("unknown setting {name}; did you mean {closest}?")
        })
        .collect()
}

/// [`parse`] over the real process arguments, environment and file system.
pub fn from_process() -> Result<Invocation, ConfigError> {
    let command = command();
    let known: Vec<String> = command
        .get_arguments()
        .filter_map(|arg| arg.get_env())
        .map(|name| name.to_string_lossy().into_owned())
        .collect();
    let mut invocation = parse(command, std::env::args_os().collect(), |path| {
        std::fs::read_to_string(path)
    })?;
    if let Invocation::Run { warnings, .. } = &mut invocation {
        let names = std::env::vars_os().filter_map(|(name, _)| name.into_string().ok());
        *warnings = unknown_variables(&known, names);
    }
    Ok(invocation)
}

// Value parsers (flags and variables) and serde adapters (the file) that
// give the same message for the same mistake.

fn whole<T: TryFrom<u64>>(text: &str) -> Result<T, String> {
    text.trim()
        .parse::<u64>()
        .ok()
        .and_then(|n| T::try_from(n).ok())
        .ok_or_else(|| format!("must be a whole number, got {text:?}"))
}

fn address(text: &str) -> Result<SocketAddr, String> {
    text.trim()
        .parse()
        .map_err(|_| format!("must be an address like 0.0.0.0:8080, got {text:?}"))
}

fn cors(text: &str) -> Result<CorsOrigins, String> {
    Ok(CorsOrigins::from_list(split_list(text)))
}

fn split_list(text: &str) -> Vec<String> {
    clean_list(text.split(',').map(str::to_string).collect())
}

fn clean_list(items: Vec<String>) -> Vec<String> {
    items
        .iter()
        .map(|s| s.trim())
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

fn de_whole<'de, D: Deserializer<'de>, T: TryFrom<u64>>(d: D) -> Result<T, D::Error> {
    let value = Value::deserialize(d)?;
    let number = match &value {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    };
    number
        .and_then(|n| T::try_from(n).ok())
        .ok_or_else(|| serde::de::Error::custom(format!("must be a whole number, got {value}")))
}

/// A string; a number is taken as its text.
fn de_string<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    Ok(match Value::deserialize(d)? {
        Value::String(s) => s,
        other => other.to_string(),
    })
}

fn de_address<'de, D: Deserializer<'de>>(d: D) -> Result<SocketAddr, D::Error> {
    address(&de_string(d)?).map_err(serde::de::Error::custom)
}

/// An optional file path (unset in the file is `null` here).
fn de_path<'de, D: Deserializer<'de>>(d: D) -> Result<Option<PathBuf>, D::Error> {
    match Value::deserialize(d)? {
        Value::Null => Ok(None),
        Value::String(s) => Ok(Some(s.into())),
        other => Err(serde::de::Error::custom(format!(
            "must be a file path, got {other}"
        ))),
    }
}

fn de_mode<'de, D: Deserializer<'de>>(d: D) -> Result<RedisMode, D::Error> {
    RedisMode::parse(&de_string(d)?).map_err(serde::de::Error::custom)
}

/// A list of strings, or one string of comma-separated items.
fn de_list<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    let list = match Value::deserialize(d)? {
        Value::String(s) => vec![s],
        Value::Array(items) => items
            .into_iter()
            .map(|item| match item {
                Value::String(s) => Ok(s),
                other => Err(serde::de::Error::custom(format!(
                    "list items must be strings, got {other}"
                ))),
            })
            .collect::<Result<_, _>>()?,
        other => {
            return Err(serde::de::Error::custom(format!(
                "must be a string or a list of strings, got {other}"
            )));
        }
    };
    Ok(split_list(&list.join(",")))
}

fn de_cors<'de, D: Deserializer<'de>>(d: D) -> Result<CorsOrigins, D::Error> {
    de_list(d).map(CorsOrigins::from_list)
}

fn ser_cors<S: Serializer>(cors: &CorsOrigins, s: S) -> Result<S::Ok, S::Error> {
    match cors {
        CorsOrigins::Any => s.serialize_str("*"),
        CorsOrigins::Disabled => s.serialize_str("none"),
        CorsOrigins::List(origins) => origins.serialize(s),
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Parses flags and an optional file, ignoring the process environment
    /// (environment variables are tested through the binary in tests/api).
    fn run(args: &[&str], file: Option<&str>) -> Result<Config, ConfigError> {
        let args = std::iter::once("latchkey")
            .chain(args.iter().copied())
            .map(OsString::from)
            .collect();
        let file = file.map(str::to_string);
        match parse(without_env(command()), args, |_| {
            file.clone()
                .ok_or_else(|| std::io::Error::other("no such file"))
        })? {
            Invocation::Run { config, .. } => Ok(*config),
            other => panic!("expected a run, got {other:?}"),
        }
    }

    #[test]
    fn defaults_match_the_contract() {
        let c = Config::default();
        assert_eq!(c.listen.to_string(), "0.0.0.0:8080");
        assert!(c.dev_mode());
        assert_eq!(c.redis_mode, RedisMode::Standalone);
        assert_eq!(c.sentinel_master, "mymaster");
        assert!(c.redlock_nodes.is_empty());
        assert_eq!(
            (
                &c.redis_tls_ca_file,
                &c.redis_tls_cert_file,
                &c.redis_tls_key_file
            ),
            (&None, &None, &None)
        );
        assert_eq!(c.key_prefix, "latchkey:");
        assert_eq!(c.max_wait_ms, 60_000);
        assert_eq!(c.queue_grace_ms, 5_000);
        assert_eq!(c.max_waiters, 10_000);
        assert_eq!(c.min_replicas, 0);
        assert_eq!(c.log, "info");
        assert_eq!(
            (c.min_lease_ms, c.default_lease_ms, c.max_lease_ms),
            (500, 30_000, 86_400_000)
        );
        assert_eq!(c.redis_pool_size, 4);
        assert_eq!(
            (c.redis_connect_timeout_ms, c.redis_response_timeout_ms),
            (1000, 2000)
        );
        assert_eq!(c.cors_origins, CorsOrigins::Any);
        assert_eq!(c.max_body_bytes, 65_536);
        assert_eq!(c.shutdown_grace_ms, 10_000);
        c.validate().unwrap();
        assert_eq!(run(&[], None).unwrap().max_waiters, 10_000);
    }

    #[test]
    fn flags_override_the_file_which_overrides_the_defaults() {
        let file = "max_wait_ms = 1000\nmax_waiters = 7\nkey_prefix = \"file:\"\n";
        let c = run(&["--config", "x.toml", "--max-wait-ms", "3000"], Some(file)).unwrap();
        assert_eq!(c.max_wait_ms, 3000);
        assert_eq!(c.max_waiters, 7);
        assert_eq!(c.key_prefix, "file:");
        assert_eq!(c.queue_grace_ms, 5000);
    }

    #[test]
    fn serve_is_the_server_with_its_settings() {
        let c = run(&["serve", "--max-wait-ms", "3000"], None).unwrap();
        assert_eq!(c.max_wait_ms, 3000);
        assert!(run(&["serve", "serve"], None).is_err());
    }

    #[test]
    fn flag_with_equals_sign_is_accepted() {
        let c = run(&["--redis-url=redis://127.0.0.1:7000/0"], None).unwrap();
        assert_eq!(c.redis_urls, vec!["redis://127.0.0.1:7000/0".to_string()]);
        assert!(!c.dev_mode());
    }

    #[test]
    fn lists_come_comma_separated_or_as_toml_arrays() {
        let c = run(
            &["--redlock-nodes", " redis://a:1, redis://b:2,redis://c:3,"],
            None,
        )
        .unwrap();
        assert_eq!(
            c.redlock_nodes,
            ["redis://a:1", "redis://b:2", "redis://c:3"]
        );
        let file = "redis_mode = \"cluster\"\n\
                    redis_url = [\"redis://a:1\", \"redis://b:2\"]\n\
                    cors_origins = [\"https://a.example\", \"https://b.example\"]\n";
        let c = run(&["--config", "f"], Some(file)).unwrap();
        assert_eq!(c.redis_mode, RedisMode::Cluster);
        assert_eq!(c.redis_urls, ["redis://a:1", "redis://b:2"]);
        assert_eq!(
            c.cors_origins,
            CorsOrigins::List(vec!["https://a.example".into(), "https://b.example".into()])
        );
        let c = run(&["--cors-origins", "none"], None).unwrap();
        assert_eq!(c.cors_origins, CorsOrigins::Disabled);
    }

    #[test]
    fn several_urls_need_sentinel_or_cluster_mode() {
        let err = run(&["--redis-url", "redis://a:1,redis://b:2"], None).unwrap_err();
        assert!(err.0.contains("redis_mode is standalone"), "{err}");
        assert!(
            run(
                &[
                    "--redis-url",
                    "redis://a:1,redis://b:2",
                    "--redis-mode",
                    "sentinel"
                ],
                None
            )
            .is_ok()
        );
    }

    #[test]
    fn lease_range_with_min_above_max_is_rejected() {
        let err = run(&["--min-lease-ms", "5000", "--max-lease-ms", "1000"], None).unwrap_err();
        assert!(
            err.0
                .contains("min_lease_ms (5000) is larger than max_lease_ms (1000)"),
            "{err}"
        );
    }

    #[test]
    fn unparsable_redis_url_is_rejected_without_leaking_the_password() {
        let err = run(&["--redis-url", "http://user:secret@host"], None).unwrap_err();
        assert!(err.0.contains("--redis-url"), "{err}");
        assert!(!err.0.contains("secret"), "{err}");
        let err = run(
            &["--config", "f"],
            Some("redis_url = \"http://u:secret@h\""),
        )
        .unwrap_err();
        assert!(err.0.contains("`redis_url` in f"), "{err}");
        assert!(!err.0.contains("secret"), "{err}");
    }

    #[test]
    fn one_or_two_redlock_nodes_are_a_configuration_error() {
        let err = run(&["--redlock-nodes", "redis://a:1,redis://b:2"], None).unwrap_err();
        assert!(err.0.contains("at least 3"), "{err}");
        let ok = run(
            &["--redlock-nodes", "redis://a:1,redis://b:2,redis://c:3"],
            None,
        )
        .unwrap();
        assert_eq!(ok.redlock_nodes.len(), 3);
    }

    #[test]
    fn bad_values_name_the_setting_and_its_source() {
        let err = run(&["--max-waiters", "lots"], None).unwrap_err();
        assert!(
            err.0.contains("--max-waiters must be a whole number"),
            "{err}"
        );
        let err = run(&["--config", "f.toml"], Some("max_wait_ms = -5")).unwrap_err();
        assert!(
            err.0
                .contains("`max_wait_ms` in f.toml must be a whole number"),
            "{err}"
        );
        let err = run(&["--redis-mode", "solo"], None).unwrap_err();
        assert!(err.0.contains("--redis-mode must be standalone"), "{err}");
        let err = run(&["--config", "f"], Some("listen = \"nowhere\"")).unwrap_err();
        assert!(err.0.contains("`listen` in f must be an address"), "{err}");
        let err = run(&["--shutdown-grace-ms", "700000"], None).unwrap_err();
        assert!(
            err.0
                .contains("--shutdown-grace-ms must be between 0 and 600000"),
            "{err}"
        );
        let err = run(&["--config", "f"], Some("queue_grace_ms = 5")).unwrap_err();
        assert!(
            err.0.contains("`queue_grace_ms` in f must be between"),
            "{err}"
        );
    }

    #[test]
    fn a_flag_set_value_is_not_checked_against_the_file() {
        // The file's bad value is overridden, so it never counts.
        let c = run(
            &["--config", "f", "--max-waiters", "3"],
            Some("max_waiters = \"lots\""),
        )
        .unwrap();
        assert_eq!(c.max_waiters, 3);
    }

    #[test]
    fn unknown_settings_are_rejected() {
        assert!(
            run(&["--no-such-thing", "1"], None)
                .unwrap_err()
                .0
                .contains("unknown flag")
        );
        assert!(
            run(&["--config", "f"], Some("colour = \"red\""))
                .unwrap_err()
                .0
                .contains("unknown setting")
        );
    }

    #[test]
    fn unknown_variables_are_reported_with_the_closest_setting() {
        let known = vec![
            "LATCHKEY_MAX_WAITERS".to_string(),
            "LATCHKEY_MAX_WAIT_MS".to_string(),
        ];
        let warnings = unknown_variables(
            &known,
            // The client tools' variables (a shell may set LATCHKEY_URL for
            // them, and a command run under a lock gets the others) are no
            // typo of a setting.
            [
                "LATCHKEY_MAX_WAITERZ",
                "LATCHKEY_MAX_WAITERS",
                "HOME",
                "LATCHKEY_URL",
                "LATCHKEY_FENCING_TOKEN",
                "LATCHKEY_SESSION",
            ]
            .map(String::from),
        );
        assert_eq!(
            warnings,
            ["unknown setting LATCHKEY_MAX_WAITERZ; did you mean LATCHKEY_MAX_WAITERS?"]
        );
    }

    #[test]
    fn key_prefix_with_braces_or_globs_is_rejected() {
        assert!(run(&["--key-prefix", "a{b}"], None).is_err());
        assert!(run(&["--key-prefix", "a*"], None).is_err());
        assert!(run(&["--key-prefix", "app1:"], None).is_ok());
    }

    #[test]
    fn the_example_file_is_valid_and_lists_every_setting() {
        let text = include_str!("../latchkey.example.toml");
        let c = run(&["--config", "latchkey.example.toml"], Some(text)).unwrap();
        assert!(c.dev_mode());
        assert_eq!(c.max_wait_ms, 60_000);
        for key in setting_keys() {
            assert!(
                text.contains(&format!("{key} =")),
                "example file lacks {key}"
            );
        }
    }

    #[test]
    fn help_lists_every_flag_variable_and_default() {
        let help = usage();
        for arg in command().get_arguments() {
            if let Some(long) = arg.get_long() {
                assert!(help.contains(&format!("--{long}")), "{long}: {help}");
            }
            if let Some(env) = arg.get_env() {
                assert!(help.contains(env.to_str().unwrap()), "{env:?}: {help}");
            }
        }
        assert!(help.contains("[default: 86400000]"), "{help}");
    }

    #[test]
    fn tls_files_need_a_rediss_url_and_a_client_certificate_needs_its_key() {
        let err = run(
            &[
                "--redis-url",
                "rediss://h:1",
                "--redis-tls-cert-file",
                "client.pem",
            ],
            None,
        )
        .unwrap_err();
        assert!(
            err.0.contains("--redis-tls-cert-file is set without"),
            "{err}"
        );
        let err = run(
            &["--config", "f"],
            Some("redis_url = \"redis://h:1\"\nredis_tls_ca_file = \"ca.pem\""),
        )
        .unwrap_err();
        assert!(
            err.0
                .contains("`redis_tls_ca_file` in f is set, but no Redis URL uses TLS"),
            "{err}"
        );
        let err = run(&["--redis-tls-ca-file", "ca.pem"], None).unwrap_err();
        assert!(err.0.contains("no Redis URL uses TLS"), "dev mode: {err}");
    }

    #[test]
    fn missing_or_unparsable_tls_files_stop_the_start_naming_the_setting() {
        let dir = std::env::temp_dir().join(format!("latchkey-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let junk = dir.join("junk.pem");
        std::fs::write(&junk, "not a certificate\n").unwrap();
        let junk = junk.to_str().unwrap();
        let missing = dir.join("missing.pem");
        let missing = missing.to_str().unwrap();
        // A RedLock node's rediss:// URL is enough for the files to apply.
        let tls = ["--redlock-nodes", "rediss://a:1,rediss://b:1,rediss://c:1"];
        let with = |extra: &[&str]| run(&[&tls[..], extra].concat(), None);

        let err = with(&["--redis-tls-ca-file", missing]).unwrap_err();
        assert!(
            err.0.contains("--redis-tls-ca-file: cannot read") && err.0.contains(missing),
            "{err}"
        );
        let err = with(&["--redis-tls-ca-file", junk]).unwrap_err();
        assert!(
            err.0.contains("--redis-tls-ca-file: ") && err.0.contains("holds no PEM certificate"),
            "{err}"
        );
        let err = with(&["--redis-tls-cert-file", junk, "--redis-tls-key-file", junk]).unwrap_err();
        assert!(
            err.0.contains("--redis-tls-cert-file: ") && err.0.contains("no PEM certificate"),
            "{err}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A key's hash configured twice — two namespaces, two roles, or the
    /// same binding repeated; in the setting, the key file, or one in each —
    /// stops the start, naming each clashing entry (its namespace:role and
    /// where it is) but never the whole hash.
    #[test]
    fn an_api_key_configured_twice_stops_the_start_naming_the_entries() {
        const H: &str = "2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b";
        const OTHER: &str = "0000000000000000000000000000000000000000000000000000000000000001";
        let keys = |list: String| run(&["--api-keys", &list], None);
        let says = |result: Result<Config, ConfigError>, entries: &[&str]| {
            let err = result.expect_err("a key configured twice is refused").0;
            for entry in entries {
                assert!(err.contains(entry), "{entry:?} not named in: {err}");
            }
            assert!(err.contains(&H[..8]), "{err}");
            assert!(!err.contains(&H[..16]), "the hash is shown: {err}");
            assert!(
                !err.to_lowercase().contains(&H[..16]),
                "the hash is shown: {err}"
            );
        };
        says(
            keys(format!("red:client:{H},blue:admin:{H}")),
            &[
                "red:client (entry 1 of --api-keys)",
                "blue:admin (entry 2 of --api-keys)",
            ],
        );
        says(
            keys(format!("red:client:{H},red:admin:{H}")),
            &[
                "red:client (entry 1 of --api-keys)",
                "red:admin (entry 2 of --api-keys)",
            ],
        );
        says(
            keys(format!(
                "red:client:{H},team:client:{OTHER},red:client:{}",
                H.to_uppercase()
            )),
            &[
                "red:client (entry 1 of --api-keys)",
                "red:client (entry 3 of --api-keys)",
            ],
        );
        assert!(keys(format!("red:client:{H},blue:admin:{OTHER}")).is_ok());

        // An appended line of a mounted key file, against the setting.
        let dir = std::env::temp_dir().join(format!("latchkey-keys-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("keys");
        std::fs::write(
            &file,
            format!("# team keys\nteam:client:{OTHER}\n\nblue:admin:{H}\n"),
        )
        .unwrap();
        let file = file.to_str().unwrap();
        let toml = format!("api_keys = [\"red:client:{H}\"]\n");
        says(
            run(
                &["--config", "x.toml", "--api-keys-file", file],
                Some(&toml),
            ),
            &[
                "red:client (entry 1 of `api_keys` in x.toml)",
                &format!("blue:admin (line 4 of {file})"),
            ],
        );
        // Within the file alone.
        std::fs::write(file, format!("red:client:{H}\nred:client:{H}\n")).unwrap();
        says(
            run(&["--api-keys-file", file], None),
            &[
                &format!("red:client (line 1 of {file})"),
                &format!("red:client (line 2 of {file})"),
            ],
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn default_lease_outside_the_range_is_rejected() {
        let err = run(&["--max-lease-ms", "10000"], None).unwrap_err();
        assert!(err.0.contains("default_lease_ms"), "{err}");
    }
}
