//! The settings as a Markdown reference (`latchkey --print-config-reference`,
//! committed as `docs/src/reference/settings.md`), generated from the same
//! definitions the loader reads ([`Config`]'s fields: key, variable, flag,
//! default, description) and the ranges the checks hold values to, so that
//! it cannot drift from either.

use clap::{Args, Command};

use super::settings::Config;

/// The reference page: a short preface and one table, a row per setting.
pub fn markdown() -> String {
    let ranges = Config::default().ranges();
    let mut page = String::from(
        "# Settings\n\
         \n\
         <!-- Generated from the settings' definitions by \
         `latchkey --print-config-reference`; a test fails when this file differs. -->\n\
         \n\
         Settings come from defaults, then an optional TOML file (`--config FILE` or \
         `LATCHKEY_CONFIG`; see `latchkey.example.toml`), then `LATCHKEY_*` environment \
         variables, then flags; each later source overrides the earlier ones. List settings \
         take a comma-separated string, or a TOML array in the file. Every value is checked \
         at start: a bad one stops the process with a message naming the setting and where \
         its value came from.\n\
         \n\
         | TOML key | variable | flag | default | allowed | description |\n\
         | --- | --- | --- | --- | --- | --- |\n",
    );
    for arg in Config::augment_args(Command::new("latchkey")).get_arguments() {
        let key = arg.get_id().as_str();
        let code = |text: &str| format!("`{text}`");
        let variable = arg.get_env().map(|env| code(&env.to_string_lossy()));
        let flag = arg.get_long().map(|long| code(&format!("--{long}")));
        let defaults: Vec<String> = (arg.get_default_values().iter())
            .map(|value| value.to_string_lossy().into_owned())
            .collect();
        let default = match defaults.as_slice() {
            [] => "unset".to_string(),
            values => code(&values.join(",")),
        };
        let allowed = match ranges.iter().find(|(at, ..)| *at == key) {
            Some((_, _, low, u64::MAX)) => format!("at least {low}"),
            Some((_, _, low, high)) => format!("{low} to {high}"),
            None if key == "default_lease_ms" => "`min_lease_ms` to `max_lease_ms`".into(),
            None => String::new(),
        };
        let description = arg.get_help().map(ToString::to_string).unwrap_or_default();
        let row = [
            code(key),
            variable.unwrap_or_default(),
            flag.unwrap_or_default(),
            default,
            allowed,
            description,
        ]
        .map(|cell| cell.replace('|', "\\|"));
        page.push_str(&format!("| {} |\n", row.join(" | ")));
    }
    page
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::settings::setting_keys;

    #[test]
    fn the_reference_has_a_row_per_setting_and_ranges_only_of_settings() {
        let page = markdown();
        let keys = setting_keys();
        for key in &keys {
            let variable = format!("LATCHKEY_{}", key.to_uppercase());
            assert!(
                page.contains(&format!("| `{key}` | `{variable}` |")),
                "{key}: {page}"
            );
        }
        for (key, ..) in Config::default().ranges() {
            assert!(keys.iter().any(|k| k == key), "{key} is no setting");
        }
        assert!(
            page.contains("| `max_lease_ms` | `LATCHKEY_MAX_LEASE_MS` | `--max-lease-ms` | `86400000` | 1 to 31536000000 |"),
            "{page}"
        );
    }
}
