//! Holder ids and session ids are capabilities, owner labels are not
//! secrets but stay out of metrics and info logs: one run of the real
//! binary with every primitive held (some holds in a session, a waiter
//! queued), then everything an operator or another client can read —
//! every state read, every listing, `/sessions`, `/whoami`, the console
//! page, `/metrics` and the info log — is collected and searched.

use std::time::Duration;

use serde_json::{Value, json};

use crate::helpers::{self, *};

#[tokio::test]
async fn no_holder_id_or_session_id_is_shown_anywhere_and_no_owner_in_metrics_or_logs() {
    let redis = redis();
    let nodes = [helpers::redis(), helpers::redis(), helpers::redis()];
    let node_urls: Vec<String> = nodes.iter().map(|n| n.url()).collect();
    let node_urls = node_urls.join(",");
    let env = [("LATCHKEY_REDLOCK_NODES", node_urls.as_str())];
    let (mut child, base, client) = ready_binary(&redis.url(), &env).await;
    let post = |path: String, body: Value| {
        let request = client.post(format!("{base}{path}")).json(&body);
        async move { request.send().await.unwrap() }
    };
    let put = |path: &str, body: Value| client.put(format!("{base}{path}")).json(&body).send();

    let created = post(
        "/sessions".into(),
        json!({"ttl_ms": 30000, "owner": "OWNER-session"}),
    )
    .await;
    assert_eq!(created.status(), 201);
    let created: Value = created.json().await.unwrap();
    let session = created["session"].as_str().unwrap().to_string();

    assert_eq!(
        put("/semaphores/s-sem", json!({"permits": 2}))
            .await
            .unwrap()
            .status(),
        200
    );
    assert!(
        put("/latches/s-latch", json!({"count": 2}))
            .await
            .unwrap()
            .status()
            .is_success()
    );
    assert!(
        put("/rate-limiters/s-rate", json!({"rate": 10, "per_ms": 1000}))
            .await
            .unwrap()
            .status()
            .is_success()
    );
    let holds = [
        ("/locks/s-lock/acquire", "HOLDER-lock"),
        ("/fair-locks/s-fair/acquire", "HOLDER-fair"),
        ("/rwlocks/s-rw/read/acquire", "HOLDER-read"),
        ("/semaphores/s-sem/acquire", "HOLDER-sem"),
        ("/redlocks/s-red/acquire", "HOLDER-red"),
    ];
    for (path, holder) in holds {
        let body = json!({"holder": holder, "lease_ms": 30000, "owner": format!("OWNER-{holder}")});
        let answer = post(path.into(), body).await;
        assert_eq!(answer.status(), 201, "{path}");
    }
    // Holds in the session, with and without their own label.
    let in_session = [
        (
            "/locks/s-lock-2/acquire",
            json!({"holder": "HOLDER-in-session", "session": session}),
        ),
        (
            "/rwlocks/s-rw-2/write/acquire",
            json!({"holder": "HOLDER-in-session", "session": session, "owner": "OWNER-in-session"}),
        ),
    ];
    for (path, body) in in_session {
        assert_eq!(post(path.into(), body).await.status(), 201, "{path}");
    }
    let multi = json!({"names": ["s-m1", "s-m2"], "holder": "HOLDER-multi", "lease_ms": 30000, "owner": "OWNER-multi"});
    assert_eq!(
        post("/multilocks/acquire".into(), multi).await.status(),
        201
    );
    // Waiters queued behind the fair lock and the write of the rwlock, each
    // long-polling while everything is read.
    let fair_waiter = tokio::spawn(post(
        "/fair-locks/s-fair/acquire".into(),
        json!({"holder": "HOLDER-fair-waiter", "wait_ms": 3000, "owner": "OWNER-fair-waiter"}),
    ));
    let rw_waiter = tokio::spawn(post(
        "/rwlocks/s-rw/write/acquire".into(),
        json!({"holder": "HOLDER-rw-waiter", "wait_ms": 3000}),
    ));
    // A refusal, which names the owner that holds.
    let refused = post(
        "/locks/s-lock/acquire".into(),
        json!({"holder": "HOLDER-refused"}),
    )
    .await;
    assert_eq!(refused.status(), 409);
    let refused: Value = refused.json().await.unwrap();
    assert_eq!(
        refused["held_by"],
        json!(["OWNER-HOLDER-lock"]),
        "{refused}"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;

    let mut shown = Vec::new();
    let mut reads = vec![
        "/locks/s-lock".to_string(),
        "/locks/s-lock-2".into(),
        "/locks/s-m1".into(),
        "/fair-locks/s-fair".into(),
        "/rwlocks/s-rw".into(),
        "/rwlocks/s-rw-2".into(),
        "/semaphores/s-sem".into(),
        "/latches/s-latch".into(),
        "/redlocks/s-red".into(),
        "/rate-limiters/s-rate".into(),
        "/sessions".into(),
        "/whoami".into(),
        "/console".into(),
    ];
    for kind in [
        "locks",
        "fair-locks",
        "rwlocks",
        "semaphores",
        "latches",
        "redlocks",
        "rate-limiters",
    ] {
        reads.push(format!("/{kind}?prefix=s-"));
    }
    for path in &reads {
        let answer = client.get(format!("{base}{path}")).send().await.unwrap();
        assert_eq!(answer.status(), 200, "{path}");
        shown.push((path.clone(), answer.text().await.unwrap()));
    }
    let metrics = client.get(format!("{base}/metrics")).send().await.unwrap();
    let metrics = metrics.text().await.unwrap();

    // What the reads must show: each owner label where its hold is.
    let text_of = |path: &str| &shown.iter().find(|(p, _)| p == path).unwrap().1;
    for (path, owner) in [
        ("/locks/s-lock", "OWNER-HOLDER-lock"),
        ("/locks/s-m1", "OWNER-multi"),
        ("/fair-locks/s-fair", "OWNER-HOLDER-fair"),
        ("/rwlocks/s-rw", "OWNER-HOLDER-read"),
        ("/rwlocks/s-rw-2", "OWNER-in-session"),
        ("/semaphores/s-sem", "OWNER-HOLDER-sem"),
        ("/redlocks/s-red", "OWNER-HOLDER-red"),
        ("/locks?prefix=s-", "OWNER-HOLDER-lock"),
        ("/sessions", "OWNER-session"),
    ] {
        assert!(
            text_of(path).contains(owner),
            "{path} lacks {owner}: {}",
            text_of(path)
        );
    }
    let fair: Value = serde_json::from_str(text_of("/fair-locks/s-fair")).unwrap();
    assert_eq!(fair["queued"], 1, "{fair}");

    let ids: Vec<&str> = holds
        .iter()
        .map(|(_, h)| *h)
        .chain([
            "HOLDER-in-session",
            "HOLDER-multi",
            "HOLDER-fair-waiter",
            "HOLDER-rw-waiter",
            "HOLDER-refused",
            &session,
        ])
        .collect();
    // Ids and labels share a stem ("HOLDER-lock" is inside
    // "OWNER-HOLDER-lock"): look for the id as it would appear in JSON, a
    // whole string or a value in a line.
    let quoted = |id: &str| format!("\"{id}\"");
    for (path, text) in &shown {
        for id in &ids {
            assert!(
                !text.contains(&quoted(id)),
                "{path} shows the id {id}: {text}"
            );
        }
    }
    for id in &ids {
        assert!(!metrics.contains(id), "/metrics shows {id}");
    }
    assert!(!metrics.contains("OWNER-"), "/metrics shows an owner label");

    let _ = fair_waiter.await;
    let _ = rw_waiter.await;
    let log = log_when_killed(&mut child);
    assert!(log.contains("latchkey listening"), "{log}");
    assert!(!log.contains(&session), "the session id in the log:\n{log}");
    for id in &ids {
        assert!(!log.contains(&quoted(id)), "{id} in the info log:\n{log}");
    }
    assert!(
        !log.contains("OWNER-"),
        "an owner label in the info log:\n{log}"
    );
}
