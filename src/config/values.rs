//! The kinds of value a setting takes (whole numbers, addresses, lists, the
//! Redis mode, CORS origins), each read the same way from a flag, a variable
//! and the TOML file: clap's value parsers and serde's adapters below give
//! the same message for the same mistake.

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

/// How latchkey reaches its main Redis deployment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RedisMode {
    Standalone,
    Sentinel,
    Cluster,
}

impl RedisMode {
    pub(super) fn parse(s: &str) -> Result<Self, String> {
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
    pub(super) fn from_list(list: Vec<String>) -> Self {
        match list.as_slice() {
            [] => Self::Disabled,
            [one] if one == "*" => Self::Any,
            [one] if one == "none" => Self::Disabled,
            _ => Self::List(list),
        }
    }
}

pub(super) fn whole<T: TryFrom<u64>>(text: &str) -> Result<T, String> {
    text.trim()
        .parse::<u64>()
        .ok()
        .and_then(|n| T::try_from(n).ok())
        .ok_or_else(|| format!("must be a whole number, got {text:?}"))
}

pub(super) fn address(text: &str) -> Result<SocketAddr, String> {
    text.trim()
        .parse()
        .map_err(|_| format!("must be an address like 0.0.0.0:8080, got {text:?}"))
}

pub(super) fn cors(text: &str) -> Result<CorsOrigins, String> {
    Ok(CorsOrigins::from_list(split_list(text)))
}

pub(super) fn split_list(text: &str) -> Vec<String> {
    clean_list(text.split(',').map(str::to_string).collect())
}

pub(super) fn clean_list(items: Vec<String>) -> Vec<String> {
    items
        .iter()
        .map(|s| s.trim())
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

pub(super) fn de_whole<'de, D: Deserializer<'de>, T: TryFrom<u64>>(d: D) -> Result<T, D::Error> {
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
pub(super) fn de_string<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    Ok(match Value::deserialize(d)? {
        Value::String(s) => s,
        other => other.to_string(),
    })
}

pub(super) fn de_address<'de, D: Deserializer<'de>>(d: D) -> Result<SocketAddr, D::Error> {
    address(&de_string(d)?).map_err(serde::de::Error::custom)
}

/// An optional file path (unset in the file is `null` here).
pub(super) fn de_path<'de, D: Deserializer<'de>>(d: D) -> Result<Option<PathBuf>, D::Error> {
    match Value::deserialize(d)? {
        Value::Null => Ok(None),
        Value::String(s) => Ok(Some(s.into())),
        other => Err(serde::de::Error::custom(format!(
            "must be a file path, got {other}"
        ))),
    }
}

pub(super) fn de_mode<'de, D: Deserializer<'de>>(d: D) -> Result<RedisMode, D::Error> {
    RedisMode::parse(&de_string(d)?).map_err(serde::de::Error::custom)
}

/// A list of strings, or one string of comma-separated items.
pub(super) fn de_list<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
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

pub(super) fn de_cors<'de, D: Deserializer<'de>>(d: D) -> Result<CorsOrigins, D::Error> {
    de_list(d).map(CorsOrigins::from_list)
}

pub(super) fn ser_cors<S: Serializer>(cors: &CorsOrigins, s: S) -> Result<S::Ok, S::Error> {
    match cors {
        CorsOrigins::Any => s.serialize_str("*"),
        CorsOrigins::Disabled => s.serialize_str("none"),
        CorsOrigins::List(origins) => origins.serialize(s),
    }
}
