//! Where each setting's value came from (its default, the TOML file, its
//! variable or its flag), and the error that names it.

use std::collections::HashMap;
use std::fmt;

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
pub(super) enum Source {
    Default,
    /// The TOML file at this path.
    File(String),
    /// This environment variable or flag.
    Named(String),
}

/// The source of each setting by key; a key missing here was set in code.
#[derive(Debug, Default)]
pub(super) struct Sources(pub(super) HashMap<String, Source>);

impl Sources {
    pub(super) fn describe(&self, key: &str) -> String {
        match self.0.get(key) {
            Some(Source::Default) => format!("default of {key}"),
            Some(Source::File(path)) => format!("`{key}` in {path}"),
            Some(Source::Named(name)) => name.clone(),
            None => key.to_string(),
        }
    }

    /// Set by the file, the environment or a flag (not a default).
    pub(super) fn given(&self, key: &str) -> bool {
        matches!(self.0.get(key), Some(Source::File(_) | Source::Named(_)))
    }
}
