//! API keys: the `api_keys` and `api_keys_file` entries parsed and checked
//! at start, and a presented key found by its hash (the book's "API keys
//! and namespaces" (docs/src/api-keys.md)).
//!
//! Keys are configured as SHA-256 hashes, each bound to one namespace and
//! one role. Reading and checking them is configuration; the HTTP side
//! (`http::access`) only asks [`Keys::find`] which key a request presented.

use std::sync::Arc;

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::settings::Config;

/// What a key may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Acquire, wait, heartbeat, release, count down, read state.
    Client,
    /// Also force unlock, and configure and delete semaphores, latches
    /// and rate limiters.
    Admin,
}

impl Role {
    /// As an entry names it (and `GET /whoami` says it).
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Client => "client",
            Role::Admin => "admin",
        }
    }
}

/// One configured key: its hash, namespace and role.
#[derive(Clone)]
pub struct ApiKey {
    sha256: [u8; 32],
    namespace: Arc<str>,
    role: Role,
}

impl ApiKey {
    /// The namespace the key works in.
    pub fn namespace(&self) -> &Arc<str> {
        &self.namespace
    }

    /// What the key may do.
    pub fn role(&self) -> Role {
        self.role
    }
}

/// The configured keys; none means the service is open.
#[derive(Clone, Default)]
pub struct Keys(Arc<Vec<ApiKey>>);

impl std::fmt::Debug for Keys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Keys({} configured)", self.0.len())
    }
}

impl Keys {
    /// Parses `NAMESPACE:ROLE:SHA256` entries (the SHA-256 of the key in
    /// hex; blank lines and `#` comments are skipped). Errors name the
    /// entry by its position (`entry 2`), never its hash.
    pub fn parse<'a>(entries: impl IntoIterator<Item = &'a str>) -> Result<Self, String> {
        let entries = entries.into_iter().enumerate();
        Keys::parse_placed(entries.map(|(i, entry)| (format!("entry {}", i + 1), entry)))
    }

    /// The keys of the `api_keys` setting (`setting` says where it was
    /// given, e.g. its variable) and of the `api_keys_file`, read now.
    /// Errors name an entry by where it is (`entry 2 of
    /// LATCHKEY_API_KEYS`, `line 7 of /keys/file`), never its hash.
    pub fn load(config: &Config, setting: &str) -> Result<Self, String> {
        let mut entries: Vec<(String, String)> = (config.api_keys.iter().enumerate())
            .map(|(i, entry)| (format!("entry {} of {setting}", i + 1), entry.clone()))
            .collect();
        if let Some(path) = &config.api_keys_file {
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("cannot read api_keys_file {path}: {e}"))?;
            let lines = text.lines().enumerate();
            entries
                .extend(lines.map(|(i, line)| (format!("line {} of {path}", i + 1), line.into())));
        }
        Keys::parse_placed(
            entries
                .iter()
                .map(|(at, entry)| (at.clone(), entry.as_str())),
        )
    }

    /// [`Keys::load`] naming the setting by its key.
    pub fn from_config(config: &Config) -> Result<Self, String> {
        Keys::load(config, "api_keys")
    }

    /// Parses entries, each with where it was configured (for messages),
    /// and checks that every key is bound once ([`bound_once`]).
    fn parse_placed<'a>(
        entries: impl IntoIterator<Item = (String, &'a str)>,
    ) -> Result<Self, String> {
        let mut keys = Vec::new();
        let mut places = Vec::new();
        for (at, entry) in entries {
            let entry = entry.trim();
            if entry.is_empty() || entry.starts_with('#') {
                continue;
            }
            keys.push(parse_entry(entry).map_err(|e| format!("API key {at}: {e}"))?);
            places.push(at);
        }
        bound_once(&keys, &places)?;
        Ok(Keys(Arc::new(keys)))
    }

    /// True when no key is configured: every request is let in.
    pub fn open(&self) -> bool {
        self.0.is_empty()
    }

    /// The key whose hash is the presented key's. Every configured hash is
    /// compared, in constant time, whichever matches.
    pub fn find(&self, presented: &str) -> Option<&ApiKey> {
        let digest: [u8; 32] = Sha256::digest(presented.as_bytes()).into();
        let mut found = None;
        for key in self.0.iter() {
            if bool::from(key.sha256.ct_eq(&digest)) {
                found = Some(key);
            }
        }
        found
    }
}

/// Every key is bound to one namespace and one role: a hash configured
/// twice — for two namespaces, two roles, or the same binding repeated —
/// is a configuration error (the service would otherwise pick one of the
/// bindings, and a key given out as one tenant's client could act as
/// another's admin). The message names each clashing entry by its
/// namespace:role and place, and shows only the first 8 hex digits of
/// the hash.
fn bound_once(keys: &[ApiKey], places: &[String]) -> Result<(), String> {
    let mut by_hash: std::collections::HashMap<[u8; 32], Vec<usize>> = Default::default();
    for (i, key) in keys.iter().enumerate() {
        by_hash.entry(key.sha256).or_default().push(i);
    }
    let mut clashes: Vec<&Vec<usize>> = by_hash.values().filter(|at| at.len() > 1).collect();
    if clashes.is_empty() {
        return Ok(());
    }
    clashes.sort();
    let clashes: Vec<String> = clashes
        .into_iter()
        .map(|at| {
            let prefix: String = keys[at[0]].sha256[..4]
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            let entries: Vec<String> = (at.iter())
                .map(|&i| {
                    let key = &keys[i];
                    format!("{}:{} ({})", key.namespace, key.role.as_str(), places[i])
                })
                .collect();
            let times = match at.len() {
                2 => "twice".to_string(),
                n => format!("{n} times"),
            };
            format!(
                "the API key whose SHA-256 begins {prefix} is configured {times}: {}",
                entries.join(", ")
            )
        })
        .collect();
    Err(format!(
        "{}; a key must be bound to one namespace and one role: keep one entry for it",
        clashes.join("; ")
    ))
}

fn parse_entry(entry: &str) -> Result<ApiKey, String> {
    let mut parts = entry.rsplitn(3, ':');
    let (hash, role, namespace) = match (parts.next(), parts.next(), parts.next()) {
        (Some(hash), Some(role), Some(namespace)) => (hash, role, namespace),
        _ => return Err("must be NAMESPACE:ROLE:SHA256".into()),
    };
    check_namespace(namespace)?;
    let role = match role {
        "client" => Role::Client,
        "admin" => Role::Admin,
        other => {
            return Err(format!(
                "role must be client or admin, got {:?}",
                shown(other)
            ));
        }
    };
    if hash.len() != 64 || !hash.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(
            "the key's SHA-256 must be 64 hex digits (printf %s \"$KEY\" | sha256sum)".into(),
        );
    }
    let mut sha256 = [0u8; 32];
    for (i, byte) in sha256.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hash[2 * i..2 * i + 2], 16).expect("hex digits");
    }
    Ok(ApiKey {
        sha256,
        namespace: namespace.into(),
        role,
    })
}

/// 1–64 characters of `A-Z a-z 0-9 . _ ~ -`.
fn check_namespace(namespace: &str) -> Result<(), String> {
    let ok = (1..=64).contains(&namespace.len())
        && namespace
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._~-".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "namespace must be 1-64 characters of A-Z a-z 0-9 . _ ~ -, got {:?}",
            shown(namespace)
        ))
    }
}

/// A misplaced part of an entry as a message may show it: its first 8
/// characters only when it is longer than 12 (a hash put where a role or
/// namespace belongs is never shown whole).
fn shown(part: &str) -> String {
    match part.char_indices().nth(12) {
        None => part.to_string(),
        Some(_) => {
            let head: String = part.chars().take(8).collect();
            format!("{head}…")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HASH_OF_SECRET: &str = "2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b";

    #[test]
    fn entries_parse_and_keys_are_found_by_their_hash() {
        let keys =
            Keys::parse(["# team A", "", &format!("team-a:client:{HASH_OF_SECRET}")]).unwrap();
        let key = keys.find("secret").expect("the key of that hash");
        assert_eq!(&*key.namespace, "team-a");
        assert_eq!(key.role, Role::Client);
        assert!(keys.find("Secret").is_none());
        assert!(!keys.open());
        assert!(Keys::parse([]).unwrap().open());
    }

    #[test]
    fn bad_entries_are_refused_without_showing_them() {
        for (entry, says) in [
            ("team-a:client", "NAMESPACE:ROLE:SHA256"),
            (&format!("team-a:root:{HASH_OF_SECRET}") as &str, "role"),
            ("team-a:admin:abc", "64 hex digits"),
            (&format!("team a:admin:{HASH_OF_SECRET}"), "namespace"),
            (&format!(":admin:{HASH_OF_SECRET}"), "namespace"),
            // The role and the hash swapped, and a hash before the
            // namespace: the message must not echo the hash either.
            (&format!("team-a:{HASH_OF_SECRET}:admin"), "role"),
            (
                &format!("{HASH_OF_SECRET}:team-a:admin:{HASH_OF_SECRET}"),
                "namespace",
            ),
        ] {
            let error = Keys::parse([entry]).expect_err(entry);
            assert!(error.contains(says), "{entry}: {error}");
            assert!(error.starts_with("API key entry 1:"), "{error}");
            assert!(!error.contains(HASH_OF_SECRET), "{error}");
        }
    }

    #[test]
    fn a_key_bound_twice_is_refused_naming_the_entries_not_the_hash() {
        let h = HASH_OF_SECRET;
        for (entries, named) in [
            (
                vec![format!("red:client:{h}"), format!("blue:admin:{h}")],
                ["red:client (entry 1)", "blue:admin (entry 2)"],
            ),
            (
                vec![format!("red:client:{h}"), format!("red:client:{h}")],
                ["red:client (entry 1)", "red:client (entry 2)"],
            ),
            (
                vec![
                    format!("red:client:{h}"),
                    "# the same, in capitals".into(),
                    format!("red:admin:{}", h.to_uppercase()),
                ],
                ["red:client (entry 1)", "red:admin (entry 3)"],
            ),
        ] {
            let error = Keys::parse(entries.iter().map(String::as_str)).expect_err("refused");
            for entry in named {
                assert!(error.contains(entry), "{entry:?} not named in: {error}");
            }
            assert!(error.contains(&h[..8]), "{error}");
            assert!(!error.to_lowercase().contains(&h[..16]), "{error}");
        }
    }
}
