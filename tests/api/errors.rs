//! Every bad input gets the right 4xx problem+json (docs/src/errors.md).

use serde_json::json;

use crate::helpers::*;

#[tokio::test]
async fn invalid_names_are_rejected() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    let long = "x".repeat(257);
    for name in [
        "%7Bbraces%7D",
        "a%20b",
        "caf%C3%A9",
        "semi;colon",
        long.as_str(),
    ] {
        let response = app
            .client
            .post(app.url(&format!("/locks/{name}/acquire")))
            .send()
            .await
            .unwrap();
        assert_problem(response, 400, "invalid-name").await;
        let response = app
            .client
            .get(app.url(&format!("/locks/{name}")))
            .send()
            .await
            .unwrap();
        assert_problem(response, 400, "invalid-name").await;
    }
    let ok = "x".repeat(256);
    assert_eq!(
        app.client
            .get(app.url(&format!("/locks/{ok}")))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    let response = app
        .client
        .delete(app.url("/locks/ok/holders/bad%20holder"))
        .send()
        .await
        .unwrap();
    assert_problem(response, 400, "invalid-name").await;
}

#[tokio::test]
async fn invalid_holders_in_the_body_are_rejected() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    for holder in [
        json!(""),
        json!("has space"),
        json!("h".repeat(129)),
        json!("{x}"),
    ] {
        let response = app.acquire("h", json!({"holder": holder})).await;
        assert_problem(response, 400, "invalid-body").await;
    }
    let response = app.acquire("h", json!({"holder": 42})).await;
    assert_problem(response, 400, "invalid-body").await;
}

#[tokio::test]
async fn out_of_range_durations_are_rejected() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    for body in [
        json!({"lease_ms": 499}),
        json!({"lease_ms": 86_400_001u64}),
        json!({"lease_ms": -1}),
        json!({"lease_ms": 0}),
        json!({"wait_ms": 60_001}),
        json!({"wait_ms": -5}),
    ] {
        let problem =
            assert_problem(app.acquire("r", body.clone()).await, 400, "out-of-range").await;
        assert!(
            problem["detail"].as_str().unwrap().contains("_ms"),
            "{body} → {problem}"
        );
    }
    let huge = app
        .client
        .post(app.url("/locks/r/acquire"))
        .header("content-type", "application/json")
        .body(r#"{"lease_ms": 100000000000000000000000000}"#)
        .send()
        .await
        .unwrap();
    assert_problem(huge, 400, "out-of-range").await;
    let heartbeat = app.heartbeat("r", "h", json!({"lease_ms": 10})).await;
    assert_problem(heartbeat, 400, "out-of-range").await;
    // The limits are configuration.
    let tight = spawn_app(Config {
        max_wait_ms: 1000,
        min_lease_ms: 100,
        ..test_config(&redis)
    })
    .await;
    let problem = assert_problem(
        tight.acquire("r", json!({"wait_ms": 1001})).await,
        400,
        "out-of-range",
    )
    .await;
    // A client that waits longer than one long-poll learns the bound from
    // the answer and polls in pieces that fit.
    assert_eq!(problem["field"], "wait_ms", "{problem}");
    assert_eq!(problem["minimum"], 0, "{problem}");
    assert_eq!(problem["maximum"], 1000, "{problem}");
    let problem = assert_problem(
        tight.acquire("r", json!({"lease_ms": 99})).await,
        400,
        "out-of-range",
    )
    .await;
    assert_eq!(problem["minimum"], 100, "{problem}");
    assert_eq!(
        tight.acquire("r", json!({"lease_ms": 100})).await.status(),
        201
    );
}

#[tokio::test]
async fn malformed_json_and_wrong_types_are_invalid_body() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    for raw in [
        "{",
        "[]",
        "\"text\"",
        r#"{"lease_ms": 1.5}"#,
        r#"{"lease_ms": "1000"}"#,
        r#"{"lease": 1000}"#,
        r#"{"holder": null, "extra": true}"#,
    ] {
        let response = app
            .client
            .post(app.url("/locks/j/acquire"))
            .header("content-type", "application/json")
            .body(raw)
            .send()
            .await
            .unwrap();
        assert_problem(response, 400, "invalid-body").await;
    }
}

/// A body is a JSON object: an array is refused whatever its length (serde
/// would read a struct from an array of its fields, in order).
#[tokio::test]
async fn an_array_body_is_invalid_whatever_its_length() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    for path in [
        "/sessions",
        "/locks/j/acquire",
        "/rwlocks/j/read/acquire",
        "/semaphores/j/acquire",
        "/multilocks/acquire",
        "/latches/j/count-down",
    ] {
        for n in 1..=8 {
            let raw = format!("[{}]", vec!["null"; n].join(","));
            let response = app
                .client
                .post(app.url(path))
                .header("content-type", "application/json")
                .body(raw.clone())
                .send()
                .await
                .unwrap();
            let status = response.status();
            assert_eq!(status, 400, "{path} with {raw}: {status}");
            assert_problem(response, 400, "invalid-body").await;
        }
    }
}

#[tokio::test]
async fn a_form_encoded_body_gets_415_telling_how_to_send_json() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    // What `curl -d '{"lease_ms":1000}'` sends without -H.
    let response = app
        .client
        .post(app.url("/locks/f/acquire"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(r#"{"lease_ms":1000}"#)
        .send()
        .await
        .unwrap();
    let problem = assert_problem(response, 415, "unsupported-media-type").await;
    assert!(
        problem["detail"]
            .as_str()
            .unwrap()
            .contains("-H 'Content-Type: application/json'")
    );
}

#[tokio::test]
async fn a_body_over_the_limit_gets_413() {
    let redis = redis();
    let app = spawn_app(Config {
        max_body_bytes: 1024,
        ..test_config(&redis)
    })
    .await;
    let big = format!(r#"{{"holder": "{}"}}"#, "x".repeat(2000));
    let response = app
        .client
        .post(app.url("/locks/big/acquire"))
        .header("content-type", "application/json")
        .body(big)
        .send()
        .await
        .unwrap();
    assert_problem(response, 413, "body-too-large").await;
}

#[tokio::test]
async fn unsupported_methods_get_405_problems_never_5xx() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    for (method, path) in [
        ("GET", "/locks/m/acquire"),
        ("PUT", "/locks/m"),
        ("PATCH", "/locks/m/holders/h"),
        ("TRACE", "/locks/m"),
        ("FOO", "/locks/m"),
        ("POST", "/healthz"),
        ("DELETE", "/metrics"),
    ] {
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let response = app
            .client
            .request(method.clone(), app.url(path))
            .send()
            .await
            .unwrap();
        assert_problem(response, 405, "method-not-allowed").await;
    }
}

#[tokio::test]
async fn unknown_routes_get_404_problems() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    for path in ["/", "/nope", "/lock", "/locks/a/b/c/d/e"] {
        let response = app.client.get(app.url(path)).send().await.unwrap();
        assert_problem(response, 404, "not-found").await;
    }
}

#[tokio::test]
async fn responses_carry_a_request_id_and_cors_headers() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    let response = app
        .client
        .get(app.url("/locks/x"))
        .header("origin", "http://localhost:3000")
        .header("x-request-id", "trace-me")
        .send()
        .await
        .unwrap();
    assert_eq!(response.headers()["x-request-id"], "trace-me");
    assert_eq!(response.headers()["access-control-allow-origin"], "*");
    let generated = app.client.get(app.url("/healthz")).send().await.unwrap();
    assert!(generated.headers().contains_key("x-request-id"));
}

/// CORS concerns browsers, which send `Origin` on every cross-origin
/// request: a request without one (curl, a backend, a same-origin page's
/// GET) is not a CORS request, and its answer carries no
/// `Access-Control-*` header. It keeps the `Vary` a CORS answer has, so
/// that a cache never hands it to a browser's cross-origin request. A
/// preflight (`OPTIONS`) is answered as one with or without `Origin`.
#[tokio::test]
async fn only_requests_with_an_origin_get_cors_headers() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    const VARY: &str = "origin, access-control-request-method, access-control-request-headers";
    for path in ["/healthz", "/locks/x", "/nope"] {
        let browser = app
            .client
            .get(app.url(path))
            .header("origin", "http://localhost:3000")
            .send()
            .await
            .unwrap();
        assert_eq!(
            browser.headers()["access-control-allow-origin"],
            "*",
            "{path}"
        );
        assert!(
            browser
                .headers()
                .contains_key("access-control-expose-headers")
        );
        assert_eq!(browser.headers()["vary"], VARY, "{path}");
        let plain = app.client.get(app.url(path)).send().await.unwrap();
        let cors: Vec<_> = plain
            .headers()
            .keys()
            .filter(|name| name.as_str().starts_with("access-control-"))
            .collect();
        assert!(cors.is_empty(), "{path}: {cors:?}");
        assert_eq!(plain.headers()["vary"], VARY, "{path}");
        assert_eq!(plain.status(), browser.status(), "{path}");
    }
    let preflight = app
        .client
        .request(reqwest::Method::OPTIONS, app.url("/locks/x/acquire"))
        .header("access-control-request-method", "POST")
        .send()
        .await
        .unwrap();
    assert!(preflight.status().is_success());
    assert!(
        preflight
            .headers()
            .contains_key("access-control-allow-methods")
    );
    // With CORS off, nothing of it is on any answer.
    let mut config = test_config(&redis);
    config.cors_origins = latchkey::config::CorsOrigins::Disabled;
    let off = spawn_app(config).await;
    let browser = off
        .client
        .get(off.url("/healthz"))
        .header("origin", "http://localhost:3000")
        .send()
        .await
        .unwrap();
    assert!(
        !browser
            .headers()
            .contains_key("access-control-allow-origin")
    );
    assert!(!browser.headers().contains_key("vary"));
}
