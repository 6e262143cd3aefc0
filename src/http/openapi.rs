//! The OpenAPI document's own parts: its description ([`ApiDoc`]), which the
//! route list in the router completes, and the few adjustments utoipa cannot
//! express.

use utoipa::OpenApi;

use super::access::ADMIN_OPERATIONS;
use super::responses::examples;
use crate::config::Config;
use crate::error::Problem;

#[derive(OpenApi)]
#[openapi(
    info(
        title = "latchkey",
        description = "Redisson's distributed locks and synchronizers over plain HTTP, backed by \
            Redis. Every grant carries a lease, a fencing token and a heartbeat interval. \
            Blocking acquires long-poll up to `wait_ms`, or stream Server-Sent Events with \
            `Accept: text/event-stream`. Errors are `application/problem+json` (RFC 9457).",
        license(name = "Apache-2.0", identifier = "Apache-2.0"),
    ),
    tags(
        (name = "locks", description = "Reentrant locks, not fair (Redisson RLock)"),
        (name = "fair-locks", description = "Reentrant locks granted in order of arrival (Redisson \
            RFairLock). A waiter keeps its place by polling again with the same `holder` within \
            the queue grace (`queue_grace_ms`, default 5000) after its previous poll ended."),
        (name = "multilocks", description = "A set of up to 64 plain locks (the locks of \
            `/locks/{name}`) taken by one holder all or nothing (Redisson MultiLock, but atomic: \
            on one Redis node no other client ever sees a part of the set held; on Redis Cluster \
            the set is taken one lock at a time in sorted order and given back on conflict, so \
            observers may briefly see a part held)."),
        (name = "rwlocks", description = "Read-write locks (Redisson RReadWriteLock): shared \
            readers, each with its own lease; one writer; downgrade and sole-reader upgrade. \
            Waiters are served in arrival order across both modes, so a waiting writer is not \
            starved by new readers, and readers queued before it go first."),
        (name = "latches", description = "Count-down latches (Redisson RCountDownLatch): set a \
            count, count it down, wait for it to reach 0. A missing latch is open, count 0; a \
            latch's `ttl_ms` bounds its life. One message per count-down answers every waiter on \
            every instance. Count-downs honour an `Idempotency-Key` header."),
        (name = "semaphores", description = "Semaphores whose permits are all leased (Redisson \
            RPermitExpirableSemaphore): a crashed client's permits come back when its lease \
            ends. Configure with PUT first. Waiters are served in arrival order; a request that \
            fits may overtake waiters that need more than is available, at most 16 times per \
            waiter at the head of the queue, so large requests are never starved."),
        (name = "redlocks", description = "RedLock over independent Redis nodes \
            (`redlock_nodes`, N ≥ 3): granted when N/2+1 nodes grant within the validity \
            (`lease_ms − elapsed − drift`); every node is asked at once, each call bounded by a \
            tenth of the lease (at most 100 ms). 503 `quorum-unavailable` when too few nodes \
            answer; 503 `redlock-not-configured` on every route when no nodes are configured. \
            Read the book's \"RedLock: what it does and does not promise\" \
            (docs/src/guarantees.md) before relying on it: a plain lock with fencing tokens is \
            often the better choice."),
        (name = "sessions", description = "Sessions (Consul sessions, etcd leases): one TTL that \
            holds of every primitive attach to. Acquire with `\"session\": id` in place of \
            `lease_ms` and the hold lives as long as the session: one session heartbeat renews \
            every hold attached to it, and when the session expires or is deleted every hold is \
            released and its waiters woken. Each hold keeps its own holder id and fencing token. \
            The holds live in their own objects' Redis keys (hash slots, on a Cluster), so the \
            service makes each hold's lease end at the session's end (on Redis's clock) rather \
            than changing them all in one step: on expiry they end together (on a Cluster, give \
            or take the difference between its nodes' clocks), and \
            waiters see them end no later than their re-check bound."),
        (name = "rate-limiters", description = "Rate limiters (Redisson RRateLimiter): `rate` \
            permits per `per_ms`, at most `burst` at once, by GCRA on Redis's clock: over any \
            window of length t, at most `burst + rate × t / per_ms` permits are admitted, and a \
            limiter is a few fields in Redis whatever its rate. Configure with PUT first. A \
            request that may wait reserves its permits at once and is answered at the exact \
            time they are due (no polling), so waiters are admitted in arrival order and a large \
            request is never starved by small ones. Acquires honour an `Idempotency-Key` \
            header."),
        (name = "operations", description = "Health, readiness and metrics"),
    ),
    components(schemas(Problem)),
)]
pub(super) struct ApiDoc;

/// The document with this server's configured bounds on every `wait_ms`
/// (`0..=max_wait_ms`) and `lease_ms` (`min_lease_ms..=max_lease_ms`), body
/// field or query parameter, so that a client keeping to the served document
/// (Swagger UI, a generated client, a fuzzer) is never answered 400
/// `out-of-range` for them.
pub(super) fn with_bounds(mut doc: serde_json::Value, config: &Config) -> serde_json::Value {
    use serde_json::Value;
    fn visit(value: &mut Value, config: &Config) {
        match value {
            Value::Object(map) => {
                let parameter = map.get("name").and_then(Value::as_str).map(str::to_owned);
                for (key, child) in map.iter_mut() {
                    let field = match (key.as_str(), &parameter) {
                        ("schema", Some(name)) => name.as_str(),
                        (key, _) => key,
                    };
                    let bounds = match field {
                        "wait_ms" => Some((0, config.max_wait_ms)),
                        "lease_ms" => Some((config.min_lease_ms, config.max_lease_ms)),
                        _ => None,
                    };
                    match bounds {
                        Some((minimum, maximum)) if child.get("maximum").is_some() => {
                            child["minimum"] = minimum.into();
                            child["maximum"] = maximum.into();
                        }
                        _ => visit(child, config),
                    }
                }
            }
            Value::Array(items) => items.iter_mut().for_each(|item| visit(item, config)),
            _ => {}
        }
    }
    visit(&mut doc, config);
    // A session's TTL has the bounds of a lease (a latch's `ttl_ms` has
    // its own).
    for body in ["SessionRequest", "SessionCreateRequest"] {
        let pointer = format!("/components/schemas/{body}/properties/ttl_ms");
        if let Some(ttl) = doc.pointer_mut(&pointer) {
            ttl["minimum"] = config.min_lease_ms.into();
            ttl["maximum"] = config.max_lease_ms.into();
        }
    }
    doc
}

/// Three adjustments utoipa cannot express, applied to the generated document:
///
/// - utoipa keeps responses in status order, which would put an acquire's
///   `200 text/event-stream` before its `201 application/json`. Swagger UI's
///   "Try it out" must default to JSON, so JSON successes come first.
/// - An optional body is generated as `oneOf: [null, Schema]`; it becomes
///   the schema itself with `required: false`, with the schema's example on
///   the media type, so Swagger UI pre-fills a valid request.
/// - A multi-lock's `names` get `uniqueItems: true`; an acquire body
///   may not have both `lease_ms` and `session` (`not: {required: …}`).
/// - Links from a grant and from a creation to what follows ([`add_links`]).
pub(super) fn polish(doc: utoipa::openapi::OpenApi) -> serde_json::Value {
    use serde_json::{Map, Value};
    let mut doc = serde_json::to_value(doc).expect("the OpenAPI document serializes");
    let examples: Map<String, Value> = doc["components"]["schemas"]
        .as_object()
        .map(|schemas| {
            schemas
                .iter()
                .filter_map(|(name, s)| s.get("example").map(|e| (name.clone(), e.clone())))
                .collect()
        })
        .unwrap_or_default();
    // A multi-lock's `names` are distinct (utoipa has no `uniqueItems`),
    // and an acquire names a lease or a session, not both.
    if let Some(schemas) = doc["components"]["schemas"].as_object_mut() {
        for schema in schemas.values_mut() {
            if let Some(names) = schema.pointer_mut("/properties/names") {
                names["uniqueItems"] = Value::Bool(true);
            }
            let has = |field: &str| schema["properties"].get(field).is_some();
            if has("lease_ms") && has("session") {
                // Both given and not null (serde reads null as omitted).
                schema["not"] = serde_json::json!({
                    "required": ["lease_ms", "session"],
                    "properties": {
                        "lease_ms": {"type": "integer"},
                        "session": {"type": "string"},
                    },
                });
            }
        }
    }
    add_security(&mut doc);
    let Some(paths) = doc["paths"].as_object_mut() else {
        return doc;
    };
    for operation in paths
        .values_mut()
        .filter_map(Value::as_object_mut)
        .flat_map(|p| p.values_mut())
    {
        if let Some(responses) = operation
            .get_mut("responses")
            .and_then(Value::as_object_mut)
        {
            let json_first = |(status, r): &(String, Value)| {
                let json = r["content"].get("application/json").is_some();
                (!(status.starts_with('2') && json), status.clone())
            };
            let mut entries: Vec<(String, Value)> = std::mem::take(responses).into_iter().collect();
            entries.sort_by_key(json_first);
            responses.extend(entries);
        }
        if let Some(media) = operation.pointer_mut("/requestBody/content/application~1json") {
            let reference = media["schema"]["oneOf"]
                .as_array()
                .and_then(|alternatives| {
                    alternatives
                        .iter()
                        .find(|s| s.get("$ref").is_some())
                        .cloned()
                });
            if let Some(reference) = reference {
                let name = reference["$ref"]
                    .as_str()
                    .unwrap_or("")
                    .rsplit('/')
                    .next()
                    .unwrap_or("");
                if let Some(example) = examples.get(name) {
                    media["example"] = example.clone();
                }
                media["schema"] = reference;
                operation["requestBody"]["required"] = Value::Bool(false);
            }
        }
    }
    add_links(&mut doc);
    doc
}

/// The name of the API-key scheme in the document.
const SCHEME: &str = "api_key";

/// Declares the API-key scheme and, on every operation but the operations
/// endpoints', the bearer requirement with its 401, and on the
/// admin-only operations ([`ADMIN_OPERATIONS`]) the 403.
fn add_security(doc: &mut serde_json::Value) {
    use serde_json::{Value, json};
    doc["components"]["securitySchemes"] = json!({
        SCHEME: {
            "type": "http",
            "scheme": "bearer",
            "description": "An API key (`Authorization: Bearer <key>`, in one header), configured \
                on the server as its SHA-256 with one namespace and one role (`client`, or `admin` \
                for force unlock and configuring or deleting semaphores, latches and rate limiters). \
                A server with no key configured is open and serves this document without the \
                requirement."
        }
    });
    let problem = |description: &str, examples: Value| {
        json!({
            "description": description,
            "content": {"application/problem+json": {
                "schema": {"$ref": "#/components/schemas/Problem"},
                "examples": examples,
            }},
        })
    };
    let unauthorized = problem(
        "No API key, an unknown one, or more than one `Authorization` header \
         (`unauthorized`); `WWW-Authenticate: Bearer`",
        json!({"unauthorized": {"value": examples::unauthorized()}}),
    );
    let forbidden = problem(
        "The API key's role is `client`; this operation needs `admin` (`forbidden`)",
        json!({"forbidden": {"value": examples::forbidden()}}),
    );
    for operation in doc["paths"]
        .as_object_mut()
        .into_iter()
        .flat_map(|paths| paths.values_mut())
        .filter_map(Value::as_object_mut)
        .flat_map(|item| item.values_mut())
    {
        let open = operation["tags"]
            .as_array()
            .is_some_and(|tags| tags.iter().any(|t| t == "operations"));
        if open {
            continue;
        }
        let admin = operation["operationId"]
            .as_str()
            .is_some_and(|id| ADMIN_OPERATIONS.contains(&id));
        operation["security"] = json!([{ SCHEME: [] }]);
        operation["responses"]["401"] = unauthorized.clone();
        if admin {
            operation["responses"]["403"] = forbidden.clone();
        }
    }
}

/// The document an open server (no API key configured) serves: no
/// security requirement and no 401/403, since it answers neither.
pub(super) fn without_security(mut doc: serde_json::Value) -> serde_json::Value {
    if let Some(schemes) = doc["components"].as_object_mut() {
        schemes.remove("securitySchemes");
    }
    for operation in doc["paths"]
        .as_object_mut()
        .into_iter()
        .flat_map(|paths| paths.values_mut())
        .filter_map(serde_json::Value::as_object_mut)
        .flat_map(|item| item.values_mut())
        .filter_map(serde_json::Value::as_object_mut)
    {
        operation.remove("security");
        if let Some(responses) = operation
            .get_mut("responses")
            .and_then(serde_json::Value::as_object_mut)
        {
            responses.remove("401");
            responses.remove("403");
        }
    }
    doc
}

/// OpenAPI links, so that Swagger UI, client generators and Schemathesis's
/// stateful tests know what follows an answer: an acquire's 201 links to
/// the heartbeat, release and state of the same resource with the holder
/// from the answer (and a rwlock's release with the mode acquired), and
/// creating a semaphore or a latch (`configure_…`, `set_…`) links to every
/// operation on it that takes no holder, and creating a session
/// (`create_session`) to every operation on it, with the id from the
/// answer. A multi-lock's follow-ups take their set in the body, which a
/// link cannot build, so it has none.
fn add_links(doc: &mut serde_json::Value) {
    use serde_json::{Map, Value, json};
    struct Operation {
        id: String,
        resource: String,
        parameters: Vec<String>,
        status: &'static str,
    }
    let mut operations = Vec::new();
    for (path, item) in doc["paths"].as_object().into_iter().flatten() {
        for operation in item.as_object().into_iter().flat_map(|o| o.values()) {
            let id = operation["operationId"].as_str().unwrap_or_default();
            let parameters = operation["parameters"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|p| p["name"].as_str().map(str::to_owned))
                .collect();
            let status = match operation["responses"].get("201") {
                Some(_) => "201",
                None => "200",
            };
            operations.push(Operation {
                id: id.to_owned(),
                resource: path
                    .trim_start_matches('/')
                    .split('/')
                    .next()
                    .unwrap_or("")
                    .to_owned(),
                parameters,
                status,
            });
        }
    }
    let has = |o: &Operation, p: &str| o.parameters.iter().any(|q| q == p);
    let mut links: Vec<(String, &'static str, Map<String, Value>)> = Vec::new();
    for from in operations
        .iter()
        .filter(|o| has(o, "name") || o.id.starts_with("create_"))
    {
        let action = from.id.split('_').next().unwrap_or("");
        let mode = ["read", "write"]
            .into_iter()
            .find(|m| from.id.ends_with(&format!("_{m}")));
        let targets = operations
            .iter()
            .filter(|to| to.resource == from.resource && to.id != from.id);
        let mut found = Map::new();
        for to in targets {
            let to_action = to.id.split('_').next().unwrap_or("");
            let linked = match action {
                "acquire" => matches!(to_action, "heartbeat" | "release" | "get"),
                "configure" | "set" => has(to, "name") && !has(to, "holder"),
                "create" => has(to, "id"),
                _ => false,
            };
            if !linked {
                continue;
            }
            let mut parameters = Map::new();
            if has(to, "name") {
                parameters.insert("name".into(), json!("$request.path.name"));
            }
            // The only creation whose object is named by the answer: a
            // session.
            if has(to, "id") {
                parameters.insert("id".into(), json!("$response.body#/session"));
            }
            if has(to, "holder") {
                parameters.insert("holder".into(), json!("$response.body#/holder"));
            }
            if let Some(mode) = mode.filter(|_| has(to, "mode")) {
                parameters.insert("mode".into(), json!(mode));
            }
            found.insert(
                to.id.clone(),
                json!({"operationId": to.id, "parameters": parameters}),
            );
        }
        if !found.is_empty() {
            links.push((from.id.clone(), from.status, found));
        }
    }
    for item in doc["paths"]
        .as_object_mut()
        .into_iter()
        .flat_map(|p| p.values_mut())
    {
        for operation in item
            .as_object_mut()
            .into_iter()
            .flat_map(|o| o.values_mut())
        {
            let id = operation["operationId"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            if let Some((_, status, found)) = links.iter().find(|(from, _, _)| *from == id) {
                operation["responses"][*status]["links"] = Value::Object(found.clone());
            }
        }
    }
}
