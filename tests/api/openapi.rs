//! The OpenAPI document as Swagger UI and client generators read it:
//! every operation has its own id, and every documented error response
//! shows its own problem (status, slug and title), not one shared example.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};

use crate::helpers::{redis, spawn_app, test_config};

fn document() -> Value {
    serde_json::from_str(&latchkey::openapi_json()).expect("the document is JSON")
}

/// (method, path, operation) for every operation of the document.
fn operations(doc: &Value) -> Vec<(String, String, Value)> {
    let mut all = Vec::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for (method, operation) in item.as_object().expect("a path item") {
            all.push((method.clone(), path.clone(), operation.clone()));
        }
    }
    all
}

/// The resource an operation id must name: the path's first segment in
/// the singular, in snake case (`/fair-locks/…` → `fair_lock`).
fn resource(path: &str) -> String {
    let first = path.trim_start_matches('/').split('/').next().unwrap_or("");
    let singular = match first {
        "metrics" => first,
        _ => first
            .strip_suffix("es")
            .filter(|s| s.ends_with("ch"))
            .or_else(|| first.strip_suffix('s'))
            .unwrap_or(first),
    };
    singular.replace('-', "_")
}

/// What an operation id may say an operation does to its resource.
const ACTIONS: [&str; 12] = [
    "acquire",
    "list",
    "create",
    "heartbeat",
    "release",
    "get",
    "force_unlock",
    "configure",
    "delete",
    "set",
    "count_down",
    "wait",
];

#[test]
fn every_operation_has_a_unique_id_named_after_its_resource_and_action() {
    let doc = document();
    let mut seen: BTreeMap<String, String> = BTreeMap::new();
    for (method, path, operation) in operations(&doc) {
        let id = operation["operationId"]
            .as_str()
            .unwrap_or_else(|| panic!("{method} {path} has no operationId"))
            .to_string();
        assert!(
            id.chars().all(|c| c.is_ascii_lowercase() || c == '_') && !id.starts_with('_'),
            "{method} {path}: operationId {id:?} is not snake case"
        );
        // `<action>_<resource>`, `<action>_<resource>_<mode>` for the
        // two rwlock acquires, or `list_<resources>` (the plural) for a listing
        // and `acquire_rate_limiters` for an acquire of several limits.
        let resource = resource(&path);
        let (action, mode) = id
            .split_once(&format!("_{resource}"))
            .unwrap_or_else(|| panic!("{method} {path}: {id:?} does not name {resource:?}"));
        assert!(
            ACTIONS.contains(&action)
                && (["", "_read", "_write"].contains(&mode)
                    || (action == "list" && ["s", "es"].contains(&mode))
                    || id == "acquire_rate_limiters"),
            "{method} {path}: {id:?} is not <action>_{resource}"
        );
        if let Some(other) = seen.insert(id.clone(), format!("{method} {path}")) {
            panic!("operationId {id:?} is used by {other} and by {method} {path}");
        }
    }
    assert_eq!(seen.len(), 55, "{seen:#?}");
    assert_eq!(seen["list_fair_locks"], "get /fair-locks");
    assert_eq!(seen["list_sessions"], "get /sessions");
    assert_eq!(seen["get_whoami"], "get /whoami");
    assert_eq!(seen["acquire_lock"], "post /locks/{name}/acquire");
    assert_eq!(seen["acquire_fair_lock"], "post /fair-locks/{name}/acquire");
    assert_eq!(
        seen["release_rwlock"],
        "delete /rwlocks/{name}/holders/{holder}"
    );
}

/// Every example of a media type: its single `example`, or each of its
/// named `examples`.
fn examples_of(media: &Value) -> Vec<(String, Value)> {
    let mut found = Vec::new();
    if let Some(example) = media.get("example") {
        found.push(("example".to_string(), example.clone()));
    }
    if let Some(named) = media.get("examples").and_then(Value::as_object) {
        for (name, example) in named {
            found.push((name.clone(), example["value"].clone()));
        }
    }
    found
}

#[test]
fn every_error_response_shows_its_own_status_and_a_documented_problem_type() {
    let doc = document();
    let documented: BTreeSet<&str> = doc["components"]["schemas"]["ProblemType"]["enum"]
        .as_array()
        .expect("ProblemType lists the problem types")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let mut titles: BTreeMap<String, String> = BTreeMap::new();
    let mut checked = 0;
    for (method, path, operation) in operations(&doc) {
        for (status, response) in operation["responses"].as_object().expect("responses") {
            let Some(media) = response["content"].get("application/problem+json") else {
                assert!(
                    !status.starts_with('4') && !status.starts_with('5'),
                    "{method} {path} {status}: an error response that is not a problem document"
                );
                continue;
            };
            let examples = examples_of(media);
            assert!(
                !examples.is_empty(),
                "{method} {path} {status}: no example of its own"
            );
            for (name, example) in examples {
                let at = format!("{method} {path} {status} ({name})");
                assert_eq!(
                    example["status"].as_u64().map(|s| s.to_string()).as_deref(),
                    Some(status.as_str()),
                    "{at}: {example}"
                );
                let type_ = example["type"].as_str().unwrap_or_default().to_string();
                assert!(
                    documented.contains(type_.as_str()),
                    "{at}: {type_:?} is no documented problem type"
                );
                if !name.starts_with("example") {
                    assert_eq!(
                        format!("/problems/{name}"),
                        type_,
                        "{at}: an example is named after its slug"
                    );
                }
                let title = example["title"].as_str().unwrap_or_default().to_string();
                assert!(!title.is_empty() && example["detail"].is_string(), "{at}");
                let first = titles.entry(type_.clone()).or_insert(title.clone());
                assert_eq!(*first, title, "{at}: one title per problem type");
                checked += 1;
            }
        }
    }
    assert!(checked > 100, "only {checked} examples");
}

/// The slugs an operation documents for one status.
fn slugs(doc: &Value, method: &str, path: &str, status: &str) -> BTreeSet<String> {
    let media =
        &doc["paths"][path][method]["responses"][status]["content"]["application/problem+json"];
    examples_of(media)
        .into_iter()
        .filter_map(|(_, e)| {
            e["type"]
                .as_str()
                .map(|t| t.trim_start_matches("/problems/").to_string())
        })
        .collect()
}

#[test]
fn each_primitive_documents_the_problems_it_sends() {
    let doc = document();
    let expected: [(&str, &str, &str, &[&str]); 14] = [
        ("post", "/locks/{name}/acquire", "404", &["not-found"]),
        ("post", "/multilocks/acquire", "404", &["not-found"]),
        ("post", "/sessions/{id}/heartbeat", "404", &["not-held"]),
        (
            "post",
            "/rate-limiters/{name}/acquire",
            "429",
            &["rate-limited", "too-many-waiters"],
        ),
        (
            "post",
            "/rate-limiters/{name}/acquire",
            "404",
            &["not-found"],
        ),
        (
            "delete",
            "/locks/{name}/holders/{holder}",
            "404",
            &["not-held"],
        ),
        (
            "post",
            "/locks/{name}/acquire",
            "409",
            &["lock-held", "session-mismatch"],
        ),
        (
            "post",
            "/semaphores/{name}/acquire",
            "409",
            &["no-permits", "session-mismatch"],
        ),
        ("post", "/semaphores/{name}/acquire", "404", &["not-found"]),
        ("put", "/latches/{name}", "409", &["latch-exists"]),
        (
            "post",
            "/rwlocks/{name}/write/acquire",
            "409",
            &["lock-held", "session-mismatch", "upgrade-would-deadlock"],
        ),
        (
            "post",
            "/redlocks/{name}/acquire",
            "503",
            &[
                "backend-unavailable",
                "quorum-unavailable",
                "redlock-not-configured",
                "shutting-down",
            ],
        ),
        (
            "post",
            "/locks/{name}/acquire",
            "400",
            &["invalid-name", "invalid-body", "out-of-range"],
        ),
        (
            "post",
            "/locks/{name}/acquire",
            "429",
            &["too-many-waiters"],
        ),
    ];
    for (method, path, status, want) in expected {
        let want: BTreeSet<String> = want.iter().map(|s| s.to_string()).collect();
        assert_eq!(
            slugs(&doc, method, path, status),
            want,
            "{method} {path} {status}"
        );
    }
}

/// Every acquire that takes a `session` documents its 409
/// `session-mismatch` (the holder holds the object outside the session, or
/// in another one).
#[test]
fn every_acquire_in_a_session_documents_session_mismatch() {
    let doc = document();
    for path in [
        "/locks/{name}/acquire",
        "/fair-locks/{name}/acquire",
        "/rwlocks/{name}/read/acquire",
        "/rwlocks/{name}/write/acquire",
        "/semaphores/{name}/acquire",
        "/multilocks/acquire",
        "/redlocks/{name}/acquire",
    ] {
        assert!(
            slugs(&doc, "post", path, "409").contains("session-mismatch"),
            "{path}"
        );
    }
}

/// Every bounded `field` (a request body field or a query parameter whose
/// schema has a maximum) in a document: (where, minimum, maximum).
fn bounds(doc: &Value, field: &str) -> Vec<(String, Value, Value)> {
    let mut found = Vec::new();
    let mut stack = vec![(String::new(), doc)];
    while let Some((at, value)) = stack.pop() {
        match value {
            Value::Object(map) => {
                let schema = map.get("schema").filter(|s| s.get("maximum").is_some());
                if let Some(schema) =
                    schema.filter(|_| map.get("name").and_then(Value::as_str) == Some(field))
                {
                    found.push((
                        at.clone(),
                        schema["minimum"].clone(),
                        schema["maximum"].clone(),
                    ));
                }
                for (key, child) in map {
                    if key == field && child.get("maximum").is_some() {
                        found.push((
                            format!("{at}/{key}"),
                            child["minimum"].clone(),
                            child["maximum"].clone(),
                        ));
                    }
                    stack.push((format!("{at}/{key}"), child));
                }
            }
            Value::Array(items) => {
                for (i, child) in items.iter().enumerate() {
                    stack.push((format!("{at}/{i}"), child));
                }
            }
            _ => {}
        }
    }
    found
}

/// A deployment serves the bounds it enforces: a client (Swagger UI,
/// Schemathesis, a generated client) that keeps to the served document is
/// never answered 400 `out-of-range` for a `wait_ms` or `lease_ms`.
#[tokio::test]
async fn the_served_document_states_this_servers_wait_and_lease_bounds() {
    let redis = redis();
    let mut config = test_config(&redis);
    config.max_wait_ms = 300;
    config.min_lease_ms = 1_000;
    config.max_lease_ms = 120_000;
    let app = spawn_app(config).await;
    let served: Value = app.get_json("/openapi.json").await;
    let waits = bounds(&served, "wait_ms");
    let leases = bounds(&served, "lease_ms");
    assert!(
        waits.len() >= 4 && leases.len() >= 4,
        "{waits:?} {leases:?}"
    );
    for (at, minimum, maximum) in waits {
        assert_eq!(
            (minimum, maximum),
            (json!(0), json!(300)),
            "wait_ms at {at}"
        );
    }
    for (at, minimum, maximum) in leases {
        assert_eq!(
            (minimum, maximum),
            (json!(1000), json!(120000)),
            "lease_ms at {at}"
        );
    }
    // What the document allows is accepted, and one past it is not.
    let allowed = app
        .post(
            "/locks/bounds/acquire",
            json!({"wait_ms": 300, "lease_ms": 120000}),
        )
        .await;
    assert_eq!(allowed.status(), 201);
    let past = app
        .post("/locks/bounds2/acquire", json!({"wait_ms": 301}))
        .await;
    assert_eq!(past.status(), 400);
}

/// Every operation that takes a JSON body answers a body of another media
/// type with 415 `unsupported-media-type`, and documents it (heartbeats did
/// not: a client generated from the document had no 415 to expect).
#[tokio::test]
async fn every_operation_with_a_body_answers_and_documents_415() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    let doc = document();
    let mut checked = 0;
    for (method, path, operation) in operations(&doc) {
        if operation.get("requestBody").is_none() {
            continue;
        }
        let url = app.url(
            &path
                .replace("{name}", "media")
                .replace("{holder}", "someone"),
        );
        let response = app
            .client
            .request(method.to_uppercase().parse().expect("a method"), url)
            .header("content-type", "text/plain")
            .body("{}")
            .send()
            .await
            .expect("an answer");
        assert_eq!(response.status(), 415, "{method} {path}");
        assert_eq!(
            slugs(&doc, &method, &path, "415"),
            BTreeSet::from(["unsupported-media-type".to_string()]),
            "{method} {path} documents its 415"
        );
        checked += 1;
    }
    assert_eq!(checked, 22, "operations with a body");
}

/// What a client (or Schemathesis's stateful phase) does after a grant is
/// linked from it: an acquire's 201 links to the heartbeat, release and
/// state of the same resource with the holder from the answer, and creating
/// a semaphore or a latch links to what can be done with it. Every link
/// names an existing operation and only parameters it has.
#[test]
fn grants_and_creations_link_to_what_follows() {
    let doc = document();
    let by_id: BTreeMap<String, Value> = operations(&doc)
        .into_iter()
        .map(|(_, _, o)| (o["operationId"].as_str().unwrap_or_default().to_string(), o))
        .collect();
    let expected: [(&str, &str, &[&str]); 12] = [
        (
            "configure_rate_limiter",
            "200",
            &[
                "acquire_rate_limiter",
                "get_rate_limiter",
                "delete_rate_limiter",
            ],
        ),
        ("acquire_rate_limiter", "200", &["get_rate_limiter"]),
        (
            "acquire_lock",
            "201",
            &["heartbeat_lock", "release_lock", "get_lock"],
        ),
        (
            "acquire_fair_lock",
            "201",
            &["heartbeat_fair_lock", "release_fair_lock", "get_fair_lock"],
        ),
        (
            "acquire_rwlock_read",
            "201",
            &["heartbeat_rwlock", "release_rwlock", "get_rwlock"],
        ),
        (
            "acquire_rwlock_write",
            "201",
            &["heartbeat_rwlock", "release_rwlock", "get_rwlock"],
        ),
        (
            "acquire_semaphore",
            "201",
            &["heartbeat_semaphore", "release_semaphore", "get_semaphore"],
        ),
        (
            "acquire_redlock",
            "201",
            &["heartbeat_redlock", "release_redlock", "get_redlock"],
        ),
        (
            "configure_semaphore",
            "200",
            &["acquire_semaphore", "get_semaphore", "delete_semaphore"],
        ),
        (
            "set_latch",
            "201",
            &[
                "count_down_latch",
                "wait_latch",
                "get_latch",
                "delete_latch",
            ],
        ),
        ("acquire_multilock", "201", &[]),
        (
            "create_session",
            "201",
            &["heartbeat_session", "get_session", "delete_session"],
        ),
    ];
    for (id, status, targets) in expected {
        let links = &by_id[id]["responses"][status]["links"];
        let linked: BTreeSet<&str> = links
            .as_object()
            .map(|l| {
                l.values()
                    .filter_map(|v| v["operationId"].as_str())
                    .collect()
            })
            .unwrap_or_default();
        assert_eq!(linked, targets.iter().copied().collect(), "links of {id}");
        for link in links.as_object().into_iter().flat_map(|l| l.values()) {
            let target = &by_id[link["operationId"].as_str().unwrap()];
            let parameters: BTreeSet<&str> = target["parameters"]
                .as_array()
                .map(|p| p.iter().filter_map(|p| p["name"].as_str()).collect())
                .unwrap_or_default();
            for (name, value) in link["parameters"].as_object().expect("link parameters") {
                assert!(
                    parameters.contains(name.as_str()),
                    "{id} → {link}: no parameter {name}"
                );
                assert!(value.is_string(), "{id} → {link}");
            }
            let by = if parameters.contains("name") {
                ("name", "$request.path.name")
            } else {
                ("id", "$response.body#/session")
            };
            assert_eq!(link["parameters"][by.0], by.1, "{id} → {link}");
        }
    }
}
