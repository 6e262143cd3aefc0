use std::ffi::OsString;

use super::load::{command, parse, unknown_variables};
use super::settings::{setting_keys, without_env};
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
    let text = include_str!("../../latchkey.example.toml");
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
