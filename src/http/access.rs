//! API keys, namespaces and roles over HTTP (the book's "API keys and
//! namespaces" (docs/src/api-keys.md)).
//!
//! Keys are configured as SHA-256 hashes, each bound to one namespace and
//! one role ([`Keys`], read and checked with the rest of the
//! configuration). A request names its key in `Authorization: Bearer <key>`; the
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

use crate::config::keys::{Keys, Role};
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
    /// The key's namespace (`None`: the default namespace of an open
    /// server).
    pub fn namespace(&self) -> Option<&str> {
        self.namespace.as_deref()
    }

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
                namespace: Some(key.namespace().clone()),
            },
            key.role(),
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

/// The request's namespace and role, for `GET /whoami`.
#[derive(Debug, Clone)]
pub struct Caller(pub Scope, pub Role);

impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        authenticate(parts, &state.keys).map(|(scope, role)| Caller(scope, role))
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
