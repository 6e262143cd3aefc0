//! API keys, namespaces and roles (README "API keys and namespaces").
//!
//! Keys are configured as SHA-256 hashes, each bound to one namespace and
//! one role. A request names its key in `Authorization: Bearer <key>`; the
//! [`Scope`] extractor finds it (comparing against every configured hash
//! in constant time), and every object name the request uses becomes a
//! [`ScopedName`] of the key's namespace. With no key configured the
//! service is open: every request is an admin of the default namespace.
//!
//! A namespace is part of every Redis key and channel of its objects
//! (`{prefix}{namespace}:{name}:…`, see `Store::key_of`), so the same name
//! in two namespaces is two objects, and nothing a request of one
//! namespace sends can reach another's.

use std::sync::Arc;

use axum::extract::FromRequestParts;
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::error::ApiError;
use crate::http::extract::check_name;
use crate::state::AppState;

/// The operations only the admin role may use (403 `forbidden` for a
/// client key); the OpenAPI document documents their 403 from this list,
/// and the tests check it against what each operation answers.
pub const ADMIN_OPERATIONS: [&str; 9] = [
    "force_unlock_lock",
    "force_unlock_fair_lock",
    "force_unlock_rwlock",
    "configure_semaphore",
    "delete_semaphore",
    "set_latch",
    "delete_latch",
    "configure_rate_limiter",
    "delete_rate_limiter",
];

/// 401 `unauthorized`: no key was sent.
pub fn no_key() -> ApiError {
    ApiError::unauthorized("send an API key as `Authorization: Bearer <key>`")
}

/// 401 `unauthorized`: the key sent is not configured.
pub fn unknown_key() -> ApiError {
    ApiError::unauthorized("the API key is not known")
}

/// 401 `unauthorized`: several `Authorization` fields. A request is served
/// with one key or none, never with whichever of several comes first.
pub fn several_keys() -> ApiError {
    ApiError::unauthorized("send one Authorization header, not several")
}

/// 403 `forbidden`: a client key on an admin operation.
pub fn admin_only() -> ApiError {
    ApiError::forbidden("this operation needs an API key with the admin role")
}

/// What a key may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Acquire, wait, heartbeat, release, count down, read state.
    Client,
    /// Also force unlock, and configure and delete semaphores, latches
    /// and rate limiters.
    Admin,
}

/// One configured key: its hash, namespace and role.
#[derive(Clone)]
struct ApiKey {
    sha256: [u8; 32],
    namespace: Arc<str>,
    role: Role,
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
    /// entry by its position, never its hash.
    pub fn parse<'a>(entries: impl IntoIterator<Item = &'a str>) -> Result<Self, String> {
        let mut keys = Vec::new();
        for (i, entry) in entries.into_iter().enumerate() {
            let entry = entry.trim();
            if entry.is_empty() || entry.starts_with('#') {
                continue;
            }
            keys.push(parse_entry(entry).map_err(|e| format!("API key entry {}: {e}", i + 1))?);
        }
        Ok(Keys(Arc::new(keys)))
    }

    /// The keys of the `api_keys` setting and of the `api_keys_file`.
    pub fn from_config(config: &crate::config::Config) -> Result<Self, String> {
        let mut entries: Vec<String> = config.api_keys.clone();
        if let Some(path) = &config.api_keys_file {
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("cannot read api_keys_file {path}: {e}"))?;
            entries.extend(text.lines().map(str::to_string));
        }
        Keys::parse(entries.iter().map(String::as_str))
    }

    /// True when no key is configured: every request is let in.
    pub fn open(&self) -> bool {
        self.0.is_empty()
    }

    /// The key whose hash is the presented key's. Every configured hash is
    /// compared, in constant time, whichever matches.
    fn find(&self, presented: &str) -> Option<&ApiKey> {
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
        other => return Err(format!("role must be client or admin, got {other:?}")),
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
            "namespace must be 1-64 characters of A-Z a-z 0-9 . _ ~ -, got {namespace:?}"
        ))
    }
}

/// The namespace a request works in, from its API key (the default
/// namespace when the service is open).
#[derive(Debug, Clone, Default)]
pub struct Scope {
    namespace: Option<Arc<str>>,
}

/// An object name as the client gave it, and as the store keys it.
#[derive(Debug, Clone)]
pub struct ScopedName {
    /// The name as the client sent it (what answers show).
    pub name: String,
    /// `namespace/name`, or the name itself in the default namespace:
    /// what the primitives and the store are given. `/` is never part of
    /// a name, so the store can tell the two apart.
    pub key: String,
}

impl ScopedName {
    /// Another name (already checked) in the same namespace.
    pub fn sibling(&self, name: String) -> ScopedName {
        let namespace = &self.key[..self.key.len() - self.name.len()];
        ScopedName {
            key: format!("{namespace}{name}"),
            name,
        }
    }
}

impl Scope {
    /// Checks `name` and scopes it to this namespace.
    pub fn name(&self, name: String) -> Result<ScopedName, ApiError> {
        check_name(&name)?;
        let key = self.key(&name);
        Ok(ScopedName { name, key })
    }

    /// Checks every name of a set and scopes them.
    pub fn names(&self, names: &[String]) -> Result<Vec<String>, ApiError> {
        names
            .iter()
            .map(|name| {
                check_name(name)?;
                Ok(self.key(name))
            })
            .collect()
    }

    fn key(&self, name: &str) -> String {
        match &self.namespace {
            Some(namespace) => format!("{namespace}/{name}"),
            None => name.to_string(),
        }
    }
}

/// The role and namespace of the request's key, or 401 (also for more
/// than one `Authorization` field, whatever they say).
fn authenticate(parts: &Parts, keys: &Keys) -> Result<(Scope, Role), ApiError> {
    if keys.open() {
        return Ok((Scope::default(), Role::Admin));
    }
    let mut fields = parts.headers.get_all(AUTHORIZATION).iter();
    let (field, more) = (fields.next(), fields.next());
    if more.is_some() {
        return Err(several_keys());
    }
    let presented = field
        .and_then(|value| value.to_str().ok())
        .and_then(|value| {
            let (scheme, token) = value.split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
        });
    let Some(presented) = presented else {
        return Err(no_key());
    };
    match keys.find(presented) {
        Some(key) => Ok((
            Scope {
                namespace: Some(key.namespace.clone()),
            },
            key.role,
        )),
        None => Err(unknown_key()),
    }
}

impl FromRequestParts<AppState> for Scope {
    type Rejection = ApiError;

    /// Any role: the request's namespace.
    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        authenticate(parts, &state.keys).map(|(scope, _)| scope)
    }
}

/// The request's namespace, for an operation only the admin role may use
/// (403 `forbidden` for a client key).
#[derive(Debug, Clone)]
pub struct Admin(pub Scope);

impl FromRequestParts<AppState> for Admin {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        match authenticate(parts, &state.keys)? {
            (scope, Role::Admin) => Ok(Admin(scope)),
            (_, Role::Client) => Err(admin_only()),
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
        ] {
            let error = Keys::parse([entry]).expect_err(entry);
            assert!(error.contains(says), "{entry}: {error}");
            assert!(error.starts_with("API key entry 1:"), "{error}");
            assert!(!error.contains(HASH_OF_SECRET), "{error}");
        }
    }

    #[test]
    fn names_are_scoped_to_the_namespace_and_back() {
        let open = Scope::default();
        assert_eq!(open.name("orders".into()).unwrap().key, "orders");
        let team = Scope {
            namespace: Some("team-a".into()),
        };
        let scoped = team.name("orders".into()).unwrap();
        assert_eq!(
            (scoped.name.as_str(), scoped.key.as_str()),
            ("orders", "team-a/orders")
        );
        assert!(team.name("a/b".into()).is_err(), "a slash is no name");
        assert_eq!(
            team.names(&["x".into(), "y".into()]).unwrap(),
            ["team-a/x", "team-a/y"]
        );
        assert_eq!(scoped.sibling("s1".into()).key, "team-a/s1");
        assert_eq!(
            open.name("o".into()).unwrap().sibling("s1".into()).key,
            "s1"
        );
    }
}
