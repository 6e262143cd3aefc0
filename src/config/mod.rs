//! Typed settings: defaults, then an optional TOML file, then `LATCHKEY_*`
//! environment variables, then command-line flags.
//!
//! - [`settings`]: [`Config`], one struct whose fields are the settings:
//!   key, variable, flag, default, description and range in one place.
//! - [`values`]: the kinds of value a setting takes, read alike from a
//!   flag, a variable and the file.
//! - [`load`]: sources and precedence: clap reads the flags and the
//!   variables (and writes `--help`), the TOML file is laid under them.
//! - [`sources`]: where each value came from, for messages.
//! - [`validate`]: ranges and cross-field rules, checked by hand in one
//!   place; a bad value stops the process with a message naming the
//!   setting and where its value came from (the file, the variable or the
//!   flag).
//! - [`keys`], [`tls`]: the API keys and the Redis TLS files the settings
//!   name, read and checked at start.
//! - [`reference`]: the settings as a Markdown table
//!   (`latchkey --print-config-reference`).

pub mod keys;
pub mod load;
pub mod reference;
pub mod settings;
pub mod sources;
pub mod tls;
pub mod validate;
pub mod values;

#[cfg(test)]
mod tests;

pub use load::{Invocation, from_process, usage};
pub use settings::Config;
pub use sources::ConfigError;
pub use validate::redact;
pub use values::{CorsOrigins, RedisMode};
