//! The checks a configuration must pass before the service starts: the
//! values' ranges, the cross-field rules, and the files the settings name
//! (TLS material, API keys), read now. Each message names the setting and
//! where its value came from.

use std::path::Path;

use super::keys::Keys;
use super::settings::Config;
use super::sources::{ConfigError, Sources};
use super::tls::{RedisTls, SettingFile};
use super::values::{CorsOrigins, RedisMode};

impl Config {
    /// The TLS files of `rediss://` connections, read and checked (see
    /// [`RedisTls::load`]); errors name the setting's key.
    pub fn redis_tls(&self) -> Result<RedisTls, ConfigError> {
        self.load_redis_tls(&Sources::default())
    }

    pub(super) fn load_redis_tls<'a>(&'a self, sources: &Sources) -> Result<RedisTls, ConfigError> {
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

    pub(super) fn check(&self, sources: &Sources) -> Result<(), ConfigError> {
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
        if let Err(e) = Keys::load(self, &sources.describe("api_keys")) {
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
        for (key, value, low, high) in self.ranges() {
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
