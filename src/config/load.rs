//! Sources and precedence: defaults, then an optional TOML file, then
//! `LATCHKEY_*` environment variables, then command-line flags. clap reads
//! the flags and the variables (and writes `--help` from the settings' doc
//! comments); the file is laid under them, key by key, so that an error
//! names the key at fault.

use std::ffi::OsString;

use clap::parser::ValueSource;
use clap::{Command, CommandFactory, FromArgMatches, Parser};

use super::settings::{Config, setting_keys};
use super::sources::{ConfigError, Source, Sources};
use super::values::clean_list;

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
    /// Print every setting (key, variable, flag, default, range) as Markdown and exit.
    #[arg(long)]
    print_config_reference: bool,
    #[command(flatten)]
    settings: Config,
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
    PrintConfigReference,
}

/// The command line parser, with environment values kept out of `--help`
/// (a Redis URL may hold a password).
pub(super) fn command() -> Command {
    Cli::command().mut_args(|arg| arg.hide_env_values(true))
}

/// Help text listing every setting with its flag, variable and default.
pub fn usage() -> String {
    command().render_help().to_string()
}

/// Parses `args` (with the program name first) and the environment the
/// `command` captured into what the process should do. `read_file` reads
/// the TOML file.
pub(super) fn parse(
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
    if cli.print_config_reference {
        return Ok(Invocation::PrintConfigReference);
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
pub(super) fn apply_file(
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
pub(super) fn clap_error(
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

/// Variables the client tools read or set (the book's "Client tools"
/// (docs/src/client-tools.md)), which the server knows are not its own
/// settings.
pub const CLIENT_VARIABLES: [&str; 6] = [
    "LATCHKEY_URL",
    "LATCHKEY_SESSION",
    "LATCHKEY_API_KEY",
    "LATCHKEY_NAME",
    "LATCHKEY_HOLDER",
    "LATCHKEY_FENCING_TOKEN",
];

/// Warnings for `LATCHKEY_*` variables that are no setting, each naming
/// the closest known variable.
pub(super) fn unknown_variables(
    known: &[String],
    names: impl IntoIterator<Item = String>,
) -> Vec<String> {
    let mut unknown: Vec<String> = names
        .into_iter()
        .filter(|name| name.starts_with("LATCHKEY_") && !known.contains(name))
        .filter(|name| !CLIENT_VARIABLES.contains(&name.as_str()))
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
