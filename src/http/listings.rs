//! `GET /{kind}`: the objects of the caller's namespace, page by page,
//! each with the state its `GET /{kind}/{name}` shows (the book's "Listing
//! objects" (docs/src/who-holds-it.md)).
//!
//! Each page `SCAN`s for the kind's defining key (a lock's hold hash, a
//! configured semaphore, latch or rate limiter, a session, ...; see
//! [`crate::store::scan`] for the walk, its bounds and its guarantees),
//! then reads every name found through the very handler of
//! `GET /{kind}/{name}`, so an item is exactly what that read answers.
//! An object that went away between the scan and its read is left out.

use std::future::Future;
use std::sync::Mutex;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use futures_util::{StreamExt, stream};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::error::ApiError;
use crate::http::access::Scope;
use crate::http::extract::{ApiPath, ApiQuery, check_prefix};
use crate::http::latches::LatchStatus;
use crate::http::lock_family::{LockStatus, NamePath};
use crate::http::ratelimiters::RateLimiterStatus;
use crate::http::redlocks::RedlockStatus;
use crate::http::responses::{ListErrors, QuorumListErrors};
use crate::http::rwlocks::RwLockStatus;
use crate::http::semaphores::SemaphoreStatus;
use crate::http::sessions::SessionPath;
use crate::http::{
    fair_locks, latches, locks, ratelimiters, redlocks, rwlocks, semaphores, sessions,
};
use crate::state::AppState;
use crate::store::scan::{self, Position, Shards};
use crate::store::{Store, StoreError};

/// Items per page when `limit` is omitted.
const DEFAULT_LIMIT: u64 = 100;
/// The largest `limit`.
const MAX_LIMIT: u64 = 1000;
/// Objects read at once while a page is built.
const READS_AT_ONCE: usize = 16;

/// The query of a listing.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    /// Only names that start with this (0–256 characters of
    /// `A-Z a-z 0-9 . _ ~ : -`; default: every name).
    #[param(example = "orders-", pattern = "^[A-Za-z0-9._~:-]{0,256}$")]
    pub prefix: Option<String>,
    /// Items per page at most (1–1000, default 100). A page may hold fewer
    /// and still have a `cursor`: each page scans a bounded part of Redis.
    #[param(value_type = Option<u64>, minimum = 1, maximum = 1000, example = 100)]
    pub limit: Option<String>,
    /// The `cursor` of the previous page, unchanged (omit it for the first
    /// page).
    #[param(example = "0.0.-.1536")]
    pub cursor: Option<String>,
}

/// The query of `GET /sessions`: no prefix (session ids are secrets, so
/// they cannot be searched by).
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct PageQuery {
    /// Items per page at most (1–1000, default 100).
    #[param(value_type = Option<u64>, minimum = 1, maximum = 1000, example = 100)]
    pub limit: Option<String>,
    /// The `cursor` of the previous page, unchanged.
    #[param(example = "0.0.-.1536")]
    pub cursor: Option<String>,
}

/// A listing's query, checked.
struct Checked {
    prefix: String,
    limit: usize,
    from: Option<Position>,
}

fn check(
    prefix: Option<String>,
    limit: Option<String>,
    cursor: Option<String>,
) -> Result<Checked, ApiError> {
    let prefix = prefix.unwrap_or_default();
    check_prefix(&prefix)?;
    let limit = match limit {
        None => DEFAULT_LIMIT,
        Some(text) => {
            let n: u64 = text.parse().map_err(|_| {
                ApiError::invalid_body(format!("limit must be an integer, got {text:?}"))
            })?;
            if !(1..=MAX_LIMIT).contains(&n) {
                return Err(ApiError::out_of_range(format!(
                    "limit must be 1-{MAX_LIMIT}, got {n}"
                ))
                .with_field("limit")
                .with_range(1, MAX_LIMIT));
            }
            n
        }
    };
    let from = match cursor {
        None => None,
        Some(c) => Some(Position::decode(&c).ok_or_else(|| {
            ApiError::invalid_body(
                "invalid cursor: pass the cursor of the previous page back unchanged",
            )
        })?),
    };
    Ok(Checked {
        prefix,
        limit: limit as usize,
        from,
    })
}

/// Where a kind's defining keys are.
enum Source<'a> {
    /// The main Redis (every master of a Cluster).
    Main,
    /// Each RedLock node.
    Nodes(&'a [Store]),
}

/// How the defining keys of one kind in one namespace look: `{lead}{<name>}:{part}`.
struct KeyShape {
    lead: String,
    part: String,
}

impl KeyShape {
    fn new(store: &Store, scope: &Scope, part: &str) -> Self {
        let empty = match scope.namespace() {
            Some(ns) => format!("{ns}/"),
            None => String::new(),
        };
        let key = store.key_of(&empty, &[part]);
        let lead = key
            .strip_suffix(&format!("{{}}:{part}"))
            .expect("keys end in {name}:part")
            .to_string();
        KeyShape {
            lead,
            part: part.to_string(),
        }
    }

    fn pattern(&self, prefix: &str) -> String {
        format!(
            "{}{{{}*}}:{}",
            scan::glob_escape(&self.lead),
            scan::glob_escape(prefix),
            scan::glob_escape(&self.part)
        )
    }

    /// The name a key belongs to, if it is one of these keys.
    fn name<'k>(&self, key: &'k str, prefix: &str) -> Option<&'k str> {
        let name = key
            .strip_prefix(self.lead.as_str())?
            .strip_prefix('{')?
            .strip_suffix(self.part.as_str())?
            .strip_suffix("}:")?;
        let ok = name.starts_with(prefix) && crate::http::extract::check_name(name).is_ok();
        ok.then_some(name)
    }
}

/// One page of names of the kind whose defining key ends in `part`.
async fn names(
    state: &AppState,
    scope: &Scope,
    source: Source<'_>,
    part: &str,
    q: &Checked,
) -> Result<(Vec<String>, Option<String>), StoreError> {
    let shape = KeyShape::new(&state.store, scope, part);
    let pattern = shape.pattern(&q.prefix);
    let pattern = pattern.as_str();
    let page = match source {
        Source::Main => {
            let shards = state.store.shards().await?;
            let store = &state.store;
            scan::page(&shards, q.from.clone(), q.limit, |shard, at| async move {
                store.scan_step(&shard, at, pattern).await
            })
            .await?
        }
        Source::Nodes(nodes) => {
            // RedLock tolerates a minority of its nodes down: a lock held
            // on a quorum is on a reachable node too, so a node that
            // cannot be scanned is passed over (as if its scan had ended).
            // More than a minority failing in one page fails the page.
            let failed: Mutex<Vec<StoreError>> = Mutex::new(Vec::new());
            let failed_ref = &failed;
            let shards = Shards::nodes(nodes.len());
            let page = scan::page(&shards, q.from.clone(), q.limit, |shard, at| async move {
                match nodes[shard.id as usize]
                    .scan_step(&shard, at, pattern)
                    .await
                {
                    Ok(step) => Ok(step),
                    Err(e) => {
                        failed_ref.lock().expect("not poisoned").push(e);
                        Ok((0, Vec::new()))
                    }
                }
            })
            .await?;
            let mut failed = failed.into_inner().expect("not poisoned");
            if failed.len() > nodes.len() / 2 {
                return Err(failed.swap_remove(0));
            }
            page
        }
    };
    let mut names: Vec<String> = page
        .keys
        .iter()
        .filter_map(|k| shape.name(k, &q.prefix).map(str::to_string))
        .collect();
    // RedLock nodes: a name held on several nodes is listed once a page.
    names.sort();
    names.dedup();
    Ok((names, page.next.map(|p| p.encode())))
}

/// A page of `T`s: the names found, each read by `read` (concurrently,
/// in order); objects gone since the scan (404) are left out. A page is
/// several Redis calls (its `SCAN` steps, then the reads), bounded
/// together by the response timeout, as a request that does not wait is:
/// past it, 503 `backend-unavailable`.
async fn list<T, F, Fut>(
    state: &AppState,
    scope: &Scope,
    source: Source<'_>,
    part: &str,
    q: Checked,
    read: F,
) -> Result<(Vec<T>, Option<String>), ApiError>
where
    F: Fn(String) -> Fut,
    Fut: Future<Output = Result<T, ApiError>>,
{
    let page = async {
        let (found, cursor) = names(state, scope, source, part, &q).await?;
        let reads: Vec<Result<T, ApiError>> = stream::iter(found.into_iter().map(read))
            .buffered(READS_AT_ONCE)
            .collect()
            .await;
        let mut items = Vec::with_capacity(reads.len());
        for read in reads {
            match read {
                Ok(item) => items.push(item),
                Err(e) if e.status() == StatusCode::NOT_FOUND => {}
                Err(e) => return Err(e),
            }
        }
        Ok((items, cursor))
    };
    state.store.within_response_timeout(page).await
}

/// One listing route per kind, with its page type: the `GET /{kind}`
/// handler reads each object through the kind's `GET /{kind}/{name}`
/// handler (`$module::state`).
macro_rules! listing {
    (
        $handler:ident, $page:ident, $status:ty, $module:ident,
        path: $path:literal, op: $op:literal, tag: $tag:expr, part: $part:literal,
        errors: $errors:ty, source: |$state:ident| $source:expr,
        example: $example:tt $(,)?
    ) => {
        #[doc = concat!("A page of `GET ", $path, "`.")]
        #[derive(Debug, Serialize, ToSchema)]
        #[schema(example = json!({"items": [$example], "cursor": "0.0.-.1536"}))]
        pub struct $page {
            #[doc = concat!("What `GET ", $path, "/{name}` shows of each object.")]
            pub items: Vec<$status>,
            /// Pass it back as `cursor` for the next page; `null` at the
            /// end of the listing.
            pub cursor: Option<String>,
        }

        #[doc = concat!("List the caller's namespace's objects (`GET ", $path, "/{name}` of each), by name prefix, page by page.")]
        ///
        /// Each page scans a bounded part of Redis (`SCAN`), so a page may
        /// hold fewer than `limit` items and still have a `cursor`: follow
        /// it until it is `null`. An object that exists for the whole
        /// listing appears at least once; one can appear twice (see the
        /// book's "Listing objects" (docs/src/who-holds-it.md)).
        #[utoipa::path(
            get,
            path = $path,
            operation_id = $op,
            tag = $tag,
            params(ListQuery),
            responses(
                (status = 200, description = "A page of objects", body = $page),
                $errors,
            )
        )]
        pub async fn $handler(
            State($state): State<AppState>,
            scope: Scope,
            ApiQuery(query): ApiQuery<ListQuery>,
        ) -> Result<Json<$page>, ApiError> {
            let q = check(query.prefix, query.limit, query.cursor)?;
            let source = $source;
            let (items, cursor) = list(&$state, &scope, source, $part, q, |name| {
                let (state, scope) = ($state.clone(), scope.clone());
                async move {
                    $module::state(State(state), scope, ApiPath(NamePath { name }))
                        .await
                        .map(|Json(status)| status)
                }
            })
            .await?;
            Ok(Json($page { items, cursor }))
        }
    };
}

listing!(
    list_locks, LockPage, LockStatus, locks,
    path: "/locks", op: "list_locks", tag: "locks", part: "lock",
    errors: ListErrors, source: |state| Source::Main,
    example: {"name": "orders", "locked": true, "hold_count": 1, "ttl_ms": 24500, "fencing_token": 42, "waiters": 0},
);

listing!(
    list_fair_locks, FairLockPage, LockStatus, fair_locks,
    path: "/fair-locks", op: "list_fair_locks", tag: "fair-locks", part: "fair",
    errors: ListErrors, source: |state| Source::Main,
    example: {"name": "orders", "locked": true, "hold_count": 1, "ttl_ms": 24500, "fencing_token": 42, "waiters": 2},
);

listing!(
    list_rwlocks, RwLockPage, RwLockStatus, rwlocks,
    path: "/rwlocks", op: "list_rwlocks", tag: rwlocks::TAG, part: "rw",
    errors: ListErrors, source: |state| Source::Main,
    example: {"name": "catalog", "mode": "read", "readers": 3, "writer_hold_count": 0, "ttl_ms": 24500, "fencing_token": 42, "waiters": 1},
);

listing!(
    list_semaphores, SemaphorePage, SemaphoreStatus, semaphores,
    path: "/semaphores", op: "list_semaphores", tag: "semaphores", part: "sem",
    errors: ListErrors, source: |state| Source::Main,
    example: {"name": "exports", "permits": 3, "available": 1, "holders": 2, "waiters": 0},
);

listing!(
    list_latches, LatchPage, LatchStatus, latches,
    path: "/latches", op: "list_latches", tag: latches::TAG, part: "latch",
    errors: ListErrors, source: |state| Source::Main,
    example: {"name": "batch-42", "count": 2, "open": false},
);

listing!(
    list_rate_limiters, RateLimiterPage, RateLimiterStatus, ratelimiters,
    path: "/rate-limiters", op: "list_rate_limiters", tag: ratelimiters::TAG, part: "rl",
    errors: ListErrors, source: |state| Source::Main,
    example: {"name": "api-calls", "rate": 10, "per_ms": 1000, "burst": 10, "available": 7},
);

listing!(
    list_redlocks, RedlockPage, RedlockStatus, redlocks,
    path: "/redlocks", op: "list_redlocks", tag: redlocks::TAG, part: "redlock",
    errors: QuorumListErrors,
    source: |state| Source::Nodes(
        state.redlocks.as_ref().ok_or_else(ApiError::redlock_not_configured)?.nodes()
    ),
    example: {"name": "nightly-report", "locked_on": 3, "total": 3, "nodes": [{"node": 0, "reachable": true, "locked": true, "ttl_ms": 24500}]},
);

/// A session as `GET /sessions` lists it: what `GET /sessions/{id}`
/// shows, without the id (a capability), with the session's owner label.
#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({"owner": "web-7 pid 4242", "ttl_ms": 30000, "expires_in_ms": 24500, "holds": 5}))]
pub struct SessionItem {
    /// The session's owner label (`null` when it has none).
    pub owner: Option<String>,
    pub ttl_ms: u64,
    /// When the session ends without a heartbeat, in ms.
    pub expires_in_ms: u64,
    /// Holds attached.
    pub holds: u64,
}

/// A page of `GET /sessions`.
#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({"items": [{"owner": null, "ttl_ms": 30000, "expires_in_ms": 24500, "holds": 5}], "cursor": null}))]
pub struct SessionPage {
    /// Each session as `GET /sessions/{id}` shows it, without its id.
    #[schema(value_type = Vec<SessionItem>)]
    pub items: Vec<serde_json::Map<String, serde_json::Value>>,
    /// Pass it back as `cursor` for the next page; `null` at the end.
    pub cursor: Option<String>,
}

/// List the caller's namespace's sessions, without their ids.
///
/// Session ids are capabilities, so no listing shows them and none can
/// filter by them (no `prefix`). Each item is what `GET /sessions/{id}`
/// shows, minus the id. Paged like every listing.
#[utoipa::path(
    get,
    path = "/sessions",
    operation_id = "list_sessions",
    tag = sessions::TAG,
    params(PageQuery),
    responses(
        (status = 200, description = "A page of sessions", body = SessionPage),
        ListErrors,
    )
)]
pub async fn list_sessions(
    State(state): State<AppState>,
    scope: Scope,
    ApiQuery(query): ApiQuery<PageQuery>,
) -> Result<Json<SessionPage>, ApiError> {
    let q = check(None, query.limit, query.cursor)?;
    let (items, cursor) = list(&state, &scope, Source::Main, "session", q, |id| {
        let (state, scope) = (state.clone(), scope.clone());
        async move {
            let Json(status) =
                sessions::state(State(state), scope, ApiPath(SessionPath { id })).await?;
            Ok(without_id(status))
        }
    })
    .await?;
    Ok(Json(SessionPage { items, cursor }))
}

/// A session's state as a listing shows it: no `session` (the id), and an
/// `owner` (null when the state has none).
fn without_id(status: impl Serialize) -> serde_json::Map<String, serde_json::Value> {
    let mut item = match serde_json::to_value(status) {
        Ok(serde_json::Value::Object(map)) => map,
        _ => serde_json::Map::new(),
    };
    item.remove("session");
    item.entry("owner").or_insert(serde_json::Value::Null);
    item
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listed_session_shows_no_id() {
        let item = without_id(serde_json::json!({"session": "s3cret", "ttl_ms": 1, "holds": 0}));
        assert_eq!(
            serde_json::Value::Object(item),
            serde_json::json!({"ttl_ms": 1, "holds": 0, "owner": null})
        );
    }

    #[test]
    fn queries_are_checked() {
        let ok = check(
            Some("a.b".into()),
            Some("1000".into()),
            Some("0.0.-.12".into()),
        )
        .unwrap();
        assert_eq!((ok.prefix.as_str(), ok.limit), ("a.b", 1000));
        assert_eq!(check(None, None, None).unwrap().limit, 100);
        for (prefix, limit, cursor, status) in [
            (Some("a*"), None, None, 400),
            (Some("a/b"), None, None, 400),
            (None, Some("0"), None, 400),
            (None, Some("1001"), None, 400),
            (None, Some("x"), None, 400),
            (None, None, Some("nope"), 400),
        ] {
            let e = check(
                prefix.map(String::from),
                limit.map(String::from),
                cursor.map(String::from),
            )
            .err()
            .expect("refused");
            assert_eq!(e.status().as_u16(), status);
        }
    }
}
