//! What every queued primitive (fair locks, read-write locks in both
//! modes, semaphores) does with its queue: a try never takes a place, a
//! long-poll keeps one for the grace, a waiter leaves at once with a
//! DELETE, hints say when a retry can succeed, a long-poll's last answer
//! states its position as of then, and every wait mode looks once more at
//! its deadline (the book: "Tries, long-polls and leaving", "A last look at
//! the deadline").

use std::time::{Duration, Instant};

use redis::AsyncCommands;
use reqwest::Response;
use serde_json::{Value, json};

use crate::helpers::*;

/// One queued primitive, as a request blocked by a holder sees it: `a`
/// holds by `hold`; waiters and tries come by `wait`, later ones by `next`
/// (paths under `/{kind}/{name}/`).
#[derive(Clone, Copy)]
struct Queued {
    label: &'static str,
    kind: &'static str,
    hold: &'static str,
    wait: &'static str,
    next: &'static str,
    /// The object's keys in Redis: `latchkey:{name}:<base>…`.
    base: &'static str,
    /// What a waiter leaving gets back (as well as `left_queue: true`).
    left: fn() -> Value,
}

const QUEUED: [Queued; 4] = [
    Queued {
        label: "fair lock",
        kind: "fair-locks",
        hold: "acquire",
        wait: "acquire",
        next: "acquire",
        base: "fair",
        left: || json!({"released": false, "hold_count": 0, "left_queue": true}),
    },
    // A reader waits behind a writer; then a writer comes.
    Queued {
        label: "rwlock, a reader waits",
        kind: "rwlocks",
        hold: "write/acquire",
        wait: "read/acquire",
        next: "write/acquire",
        base: "rw",
        left: || json!({"released": false, "hold_count": 0, "mode": "read", "left_queue": true}),
    },
    // A writer waits behind a reader; then a reader comes.
    Queued {
        label: "rwlock, a writer waits",
        kind: "rwlocks",
        hold: "read/acquire",
        wait: "write/acquire",
        next: "read/acquire",
        base: "rw",
        left: || json!({"released": false, "hold_count": 0, "mode": "write", "left_queue": true}),
    },
    // One permit.
    Queued {
        label: "semaphore",
        kind: "semaphores",
        hold: "acquire",
        wait: "acquire",
        next: "acquire",
        base: "sem",
        left: || json!({"released_permits": 0, "left_queue": true}),
    },
];

impl Queued {
    /// A fresh object of this kind named after the test and the case.
    async fn object(&self, app: &TestApp, test: &str, i: usize) -> String {
        let name = format!("{test}-{i}");
        if self.kind == "semaphores" {
            let put = app
                .client
                .put(app.url(&format!("/semaphores/{name}")))
                .json(&json!({"permits": 1}))
                .send()
                .await
                .unwrap();
            assert_eq!(put.status(), 200);
        }
        name
    }

    fn path(&self, name: &str, action: &str) -> String {
        format!("/{}/{name}/{action}", self.kind)
    }

    /// `a` takes the object for `lease_ms`.
    async fn hold(&self, app: &TestApp, name: &str, holder: &str, lease_ms: u64) {
        let body = json!({"holder": holder, "lease_ms": lease_ms});
        let held = app.post(&self.path(name, self.hold), body).await;
        assert_eq!(held.status(), 201, "{}: {holder} holds", self.label);
    }

    async fn wait(&self, app: &TestApp, name: &str, holder: &str, wait_ms: u64) -> Response {
        let body = json!({"holder": holder, "wait_ms": wait_ms});
        app.post(&self.path(name, self.wait), body).await
    }

    async fn next(&self, app: &TestApp, name: &str, holder: &str, wait_ms: u64) -> Response {
        let body = json!({"holder": holder, "wait_ms": wait_ms});
        app.post(&self.path(name, self.next), body).await
    }

    async fn delete(&self, app: &TestApp, name: &str, holder: &str) -> Response {
        let url = app.url(&self.path(name, &format!("holders/{holder}")));
        app.client.delete(url).send().await.unwrap()
    }

    async fn release(&self, app: &TestApp, name: &str, holder: &str) {
        let released = self.delete(app, name, holder).await;
        assert_eq!(released.status(), 200, "{}: {holder} releases", self.label);
    }

    /// The slug of its "not acquired" answer.
    fn busy(&self) -> &'static str {
        if self.kind == "semaphores" {
            "no-permits"
        } else {
            "lock-held"
        }
    }

    /// Whether its 409s carry `position`.
    fn positions(&self) -> bool {
        self.kind != "rwlocks"
    }

    async fn waiters(&self, app: &TestApp, name: &str) -> u64 {
        let state = app.get_json(&format!("/{}/{name}", self.kind)).await;
        state["waiters"].as_u64().expect("waiters")
    }

    async fn wait_for_waiters(&self, app: &TestApp, name: &str, n: u64) {
        let reached = eventually(Duration::from_secs(3), || async {
            self.waiters(app, name).await == n
        })
        .await;
        assert!(reached, "{}: expected {n} waiter(s)", self.label);
    }
}

fn with_grace(redis: &latchkey::devredis::RedisServer, queue_grace_ms: u64) -> Config {
    Config {
        queue_grace_ms,
        ..test_config(redis)
    }
}

async fn queue_exists(redis: &latchkey::devredis::RedisServer, name: &str, base: &str) -> bool {
    let mut conn = redis_conn(redis).await;
    conn.exists(format!("latchkey:{{{name}}}:{base}:queue"))
        .await
        .unwrap()
}

/// The issue's scenario: A holds; B tries (409); A releases; C tries and
/// is granted at once — B's try took no place.
#[tokio::test]
async fn a_try_takes_no_place_so_a_try_after_the_release_is_granted() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    // Per primitive: C's status, and whether B's try left a queue behind.
    let mut seen = Vec::new();
    for (i, q) in QUEUED.iter().enumerate() {
        let name = q.object(&app, "try", i).await;
        q.hold(&app, &name, "a", 30000).await;
        let refused = assert_problem(q.wait(&app, &name, "b", 0).await, 409, q.busy()).await;
        if q.positions() {
            assert_eq!(refused["position"], 0, "{}: {refused}", q.label);
        }
        let recorded = queue_exists(&redis, &name, q.base).await;
        q.release(&app, &name, "a").await;
        let c = q.next(&app, &name, "c", 0).await.status().as_u16();
        seen.push((q.label, c, recorded));
    }
    assert!(
        seen.iter().all(|&(_, c, recorded)| c == 201 && !recorded),
        "(primitive, C's status, B's try queued): {seen:?}"
    );
}

/// A long-poll keeps its place for the grace after its 409 (so another
/// holder's try is refused), and polling again takes it.
#[tokio::test]
async fn a_long_poll_keeps_its_place_for_the_grace_after_its_409() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    for (i, q) in QUEUED.iter().enumerate() {
        let name = q.object(&app, "poll", i).await;
        q.hold(&app, &name, "a", 30000).await;
        assert_problem(q.wait(&app, &name, "w", 200).await, 409, q.busy()).await;
        q.release(&app, &name, "a").await;
        let c = assert_problem(q.next(&app, &name, "c", 0).await, 409, q.busy()).await;
        if q.positions() {
            assert_eq!(c["position"], 1, "{}: behind w: {c}", q.label);
        }
        let again = q.wait(&app, &name, "w", 1000).await;
        assert_eq!(again.status(), 201, "{}: w's place was kept", q.label);
    }
}

/// A waiter that gives up leaves at once: its DELETE answers 200 with
/// `left_queue`, the next try is granted, and a second DELETE is 404.
#[tokio::test]
async fn a_waiter_leaves_the_queue_at_once_with_a_delete() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    for (i, q) in QUEUED.iter().enumerate() {
        let name = q.object(&app, "leave", i).await;
        q.hold(&app, &name, "a", 30000).await;
        assert_problem(q.wait(&app, &name, "w", 200).await, 409, q.busy()).await;
        let left = q.delete(&app, &name, "w").await;
        assert_eq!(left.status(), 200, "{}: the waiter leaves", q.label);
        let body: Value = left.json().await.unwrap();
        assert_eq!(body, (q.left)(), "{}", q.label);
        assert_problem(q.delete(&app, &name, "w").await, 404, "not-held").await;
        q.release(&app, &name, "a").await;
        assert!(
            !queue_exists(&redis, &name, q.base).await,
            "{}: nothing queued",
            q.label
        );
        let c = q.next(&app, &name, "c", 0).await;
        assert_eq!(c.status(), 201, "{}: C is granted at once", q.label);
    }
}

/// The waiter behind one that leaves is woken if it is now at the head:
/// granted at once, not when the leaver's place would have lapsed.
#[tokio::test]
async fn leaving_wakes_the_waiter_now_at_the_head() {
    let redis = redis();
    let app = spawn_app(with_grace(&redis, 30000)).await;
    for (i, q) in QUEUED.iter().enumerate() {
        let name = q.object(&app, "wake", i).await;
        q.hold(&app, &name, "a", 30000).await;
        assert_problem(q.wait(&app, &name, "silent", 200).await, 409, q.busy()).await;
        // (A reader behind a silent reader would share the lock with it:
        // the next waiter comes by `next`.)
        let body = json!({"holder": "next", "wait_ms": 8000});
        let next = app.spawn_post(&q.path(&name, q.next), body);
        q.wait_for_waiters(&app, &name, 1).await;
        q.release(&app, &name, "a").await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(
            !next.is_finished(),
            "{}: the silent head keeps its turn",
            q.label
        );
        let left = Instant::now();
        assert_eq!(q.delete(&app, &name, "silent").await.status(), 200);
        let granted = next.await.unwrap();
        assert_eq!(
            granted.status(),
            201,
            "{}: the new head is granted",
            q.label
        );
        assert!(
            left.elapsed() < Duration::from_secs(3),
            "{}: woken by the leave, after {:?}",
            q.label,
            left.elapsed()
        );
    }
}

/// Leaving comes first: a holder that holds permits and waits for more
/// keeps its permits when it leaves; a second DELETE gives them back.
#[tokio::test]
async fn a_holder_that_also_waits_leaves_first_and_keeps_what_it_holds() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    let put = app
        .client
        .put(app.url("/semaphores/both"))
        .json(&json!({"permits": 3}))
        .send()
        .await
        .unwrap();
    assert_eq!(put.status(), 200);
    for holder in ["x", "h"] {
        let body = json!({"holder": holder, "lease_ms": 30000});
        let taken = app.post("/semaphores/both/acquire", body).await;
        assert_eq!(taken.status(), 201);
    }
    let more = json!({"holder": "h", "permits": 2, "wait_ms": 200});
    assert_problem(
        app.post("/semaphores/both/acquire", more).await,
        409,
        "no-permits",
    )
    .await;
    let left = app.delete_json("/semaphores/both/holders/h").await;
    assert_eq!(left, json!({"released_permits": 0, "left_queue": true}));
    let state = app.get_json("/semaphores/both").await;
    assert_eq!(
        (&state["holders"], &state["available"]),
        (&json!(2), &json!(1))
    );
    let released = app.delete_json("/semaphores/both/holders/h").await;
    assert_eq!(
        released,
        json!({"released_permits": 1, "left_queue": false})
    );
}

/// While a waiter that stopped polling keeps its place ahead of a free
/// object, a try is refused with the time until that place lapses — never
/// 0, which would say that an immediate retry can succeed.
#[tokio::test]
async fn while_a_silent_waiter_keeps_its_place_the_hint_is_when_it_lapses() {
    let redis = redis();
    let app = spawn_app(with_grace(&redis, 4000)).await;
    for (i, q) in QUEUED.iter().enumerate() {
        let name = q.object(&app, "hint", i).await;
        q.hold(&app, &name, "a", 30000).await;
        assert_problem(q.wait(&app, &name, "silent", 200).await, 409, q.busy()).await;
        q.release(&app, &name, "a").await;
        let refused = q.next(&app, &name, "c", 0).await;
        assert_eq!(refused.headers()["retry-after"], "2", "{}", q.label);
        let problem = assert_problem(refused, 409, q.busy()).await;
        let hint = problem["retry_after_ms"].as_u64().unwrap();
        assert!(
            hint > 1000 && hint <= 2000,
            "{}: the silent waiter's place lapses in about 4 s (the hint is capped at half the grace): {problem}",
            q.label
        );
    }
}

/// A long-poll's final 409 states its position as of its answer, not as
/// of its last wake-up: three waiters ahead when it arrived, two when its
/// wait ended.
#[tokio::test]
async fn a_long_polls_final_409_states_its_position_when_answered() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    for (i, q) in QUEUED.iter().enumerate().filter(|(_, q)| q.positions()) {
        let name = q.object(&app, "position", i).await;
        q.hold(&app, &name, "a", 30000).await;
        let mut ahead = Vec::new();
        for n in 0..3 {
            let body = json!({"holder": format!("w{n}"), "wait_ms": 10000, "lease_ms": 30000});
            ahead.push(app.spawn_post(&q.path(&name, q.wait), body));
            q.wait_for_waiters(&app, &name, n + 1).await;
        }
        let last = app.spawn_post(
            &q.path(&name, q.wait),
            json!({"holder": "last", "wait_ms": 1500}),
        );
        q.wait_for_waiters(&app, &name, 4).await;
        q.release(&app, &name, "a").await;
        assert_eq!(ahead.remove(0).await.unwrap().status(), 201, "{}", q.label);
        let problem = assert_problem(last.await.unwrap(), 409, q.busy()).await;
        assert_eq!(problem["position"], 2, "{}: {problem}", q.label);
    }
}

/// What a waiter finds when it looks at its deadline: the object was freed
/// without a wake message (its keys deleted in Redis; the holder's lease
/// would end only in 30 s, long after the waiter's re-check), so only a
/// last look can grant it.
async fn freed_silently(redis: &latchkey::devredis::RedisServer, keys: &[String]) {
    let mut conn = redis_conn(redis).await;
    let _: () = conn.del(keys).await.unwrap();
}

#[tokio::test]
async fn a_lock_waiter_looks_once_more_at_its_deadline() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    app.must_acquire("relay", json!({"holder": "a", "lease_ms": 30000}))
        .await;
    // The first waiter asks Redis for its group; the second waits for its
    // turn to (the baton) when its deadline comes.
    let lead = app.spawn_post(
        "/locks/relay/acquire",
        json!({"holder": "lead", "wait_ms": 8000}),
    );
    app.wait_for_waiters("relay", 1).await;
    let behind = app.spawn_post(
        "/locks/relay/acquire",
        json!({"holder": "behind", "wait_ms": 1000}),
    );
    app.wait_for_waiters("relay", 2).await;
    freed_silently(&redis, &["latchkey:{relay}:lock".to_string()]).await;
    let behind = behind.await.unwrap();
    assert_eq!(behind.status(), 201, "{:?}", behind.text().await);
    app.release("relay", "behind").await;
    assert_eq!(lead.await.unwrap().status(), 201);

    // The group's only waiter, at its own deadline.
    app.must_acquire("alone", json!({"holder": "a", "lease_ms": 30000}))
        .await;
    let waiter = app.spawn_post(
        "/locks/alone/acquire",
        json!({"holder": "w", "wait_ms": 1000}),
    );
    app.wait_for_waiters("alone", 1).await;
    freed_silently(&redis, &["latchkey:{alone}:lock".to_string()]).await;
    let waiter = waiter.await.unwrap();
    assert_eq!(waiter.status(), 201, "{:?}", waiter.text().await);
}

#[tokio::test]
async fn a_queued_waiter_looks_once_more_at_its_deadline() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    for (i, q) in QUEUED.iter().enumerate() {
        let name = q.object(&app, "look", i).await;
        q.hold(&app, &name, "a", 30000).await;
        let body = json!({"holder": "w", "wait_ms": 1000});
        let waiter = app.spawn_post(&q.path(&name, q.wait), body);
        q.wait_for_waiters(&app, &name, 1).await;
        // Its holds, not a semaphore's configuration.
        let holds: &[&str] = match q.kind {
            "semaphores" => &[":holds", ":leases"],
            _ => &["", ":readers"],
        };
        let holds: Vec<String> = (holds.iter())
            .map(|part| format!("latchkey:{{{name}}}:{}{part}", q.base))
            .collect();
        freed_silently(&redis, &holds).await;
        let waiter = waiter.await.unwrap();
        assert_eq!(
            waiter.status(),
            201,
            "{}: {:?}",
            q.label,
            waiter.text().await
        );
    }
}

#[tokio::test]
async fn a_multi_lock_waiter_looks_once_more_at_its_deadline() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    app.must_acquire("m1", json!({"holder": "a", "lease_ms": 30000}))
        .await;
    let waiter = app.spawn_post(
        "/multilocks/acquire",
        json!({"names": ["m1", "m2"], "holder": "w", "wait_ms": 1000}),
    );
    app.wait_for_waiters("m1", 1).await;
    freed_silently(&redis, &["latchkey:{m1}:lock".to_string()]).await;
    let waiter = waiter.await.unwrap();
    assert_eq!(waiter.status(), 201, "{:?}", waiter.text().await);
}

/// A semaphore holder waiting in several places (for 1 and for 2 permits)
/// leaves them all with one DELETE; an rwlock holder leaves only the mode
/// it names.
#[tokio::test]
async fn a_delete_leaves_every_place_the_holder_waits_in_and_only_those() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    let put = app
        .client
        .put(app.url("/semaphores/several"))
        .json(&json!({"permits": 2}))
        .send()
        .await
        .unwrap();
    assert_eq!(put.status(), 200);
    let hold = json!({"holder": "x", "permits": 2, "lease_ms": 30000});
    assert_eq!(
        app.post("/semaphores/several/acquire", hold).await.status(),
        201
    );
    for permits in [1, 2] {
        let wait = json!({"holder": "w", "permits": permits, "wait_ms": 100});
        let refused = app.post("/semaphores/several/acquire", wait).await;
        assert_problem(refused, 409, "no-permits").await;
    }
    // Another holder whose id ends like this one's keeps its place.
    let other = json!({"holder": "aw", "wait_ms": 100});
    let refused = app.post("/semaphores/several/acquire", other).await;
    assert_problem(refused, 409, "no-permits").await;
    let left = app.delete_json("/semaphores/several/holders/w").await;
    assert_eq!(left, json!({"released_permits": 0, "left_queue": true}));
    let mut conn = redis_conn(&redis).await;
    let queue: Vec<String> = conn
        .zrange("latchkey:{several}:sem:queue", 0, -1)
        .await
        .unwrap();
    assert_eq!(queue, ["1|aw"]);

    app.post("/rwlocks/modes/read/acquire", json!({"holder": "r"}))
        .await;
    let wait = json!({"holder": "w", "wait_ms": 100});
    let refused = app.post("/rwlocks/modes/write/acquire", wait).await;
    assert_problem(refused, 409, "lock-held").await;
    let other_mode = app
        .client
        .delete(app.url("/rwlocks/modes/holders/w?mode=read"))
        .send()
        .await
        .unwrap();
    assert_problem(other_mode, 404, "not-held").await;
    let left = app.delete_json("/rwlocks/modes/holders/w?mode=write").await;
    assert_eq!(
        left,
        json!({"released": false, "hold_count": 0, "mode": "write", "left_queue": true})
    );
}

/// Below HTTP, on each queued primitive: a try (no time left given)
/// records nothing; a long-poll's try keeps its place even with no time
/// left (its last try at the deadline); leaving takes the place out.
#[tokio::test]
async fn below_http_a_try_records_nothing_and_a_waiters_last_try_keeps_its_place() {
    use latchkey::coord::locks::{LockKind, Locks};
    use latchkey::coord::rwlocks::{Mode, RwLocks};
    use latchkey::coord::semaphores::Semaphores;
    use latchkey::coord::{Attempt, AttemptId};

    let redis = redis();
    let store = test_store(&redis).await;
    let mut conn = redis_conn(&redis).await;
    let queued = |base: &str| format!("t:{{q}}:{base}:queue");
    fn place<T: std::fmt::Debug>(tried: Attempt<T>) -> Option<u64> {
        match tried {
            Attempt::Blocked(blocked) => blocked.place.map(|p| p.ticket),
            other => panic!("expected to be blocked, got {other:?}"),
        }
    }

    let fair = Locks::new(store.clone(), LockKind::Fair { grace_ms: 5000 });
    let lease = 30000;
    fair.try_acquire("q", "a", lease, None, &AttemptId::new())
        .await
        .unwrap();
    let tried = fair
        .try_acquire("q", "b", lease, None, &AttemptId::new())
        .await
        .unwrap();
    assert_eq!(place(tried), None);
    let exists: bool = conn.exists(queued("fair")).await.unwrap();
    assert!(!exists, "a try records nothing");
    let last = fair
        .try_acquire("q", "w", lease, Some(0), &AttemptId::new())
        .await
        .unwrap();
    assert!(place(last).is_some());
    let left = fair
        .leave_or_release("q", "w", false)
        .await
        .unwrap()
        .unwrap();
    assert!(left.left_queue && !left.released);

    let rw = RwLocks::new(store.clone(), 5000);
    let (write, read) = (Mode::Write, Mode::Read);
    rw.try_acquire("q", "a", write, lease, None, &AttemptId::new())
        .await
        .unwrap();
    let tried = rw
        .try_acquire("q", "b", read, lease, None, &AttemptId::new())
        .await
        .unwrap();
    assert_eq!(place(tried), None);
    let exists: bool = conn.exists(queued("rw")).await.unwrap();
    assert!(!exists, "a try records nothing");
    let last = rw
        .try_acquire("q", "w", read, lease, Some(0), &AttemptId::new())
        .await
        .unwrap();
    assert!(place(last).is_some());
    let left = rw
        .leave_or_release("q", "w", None, false)
        .await
        .unwrap()
        .unwrap();
    assert!(left.left_queue && left.mode == Mode::Read);

    let sems = Semaphores::new(store, 5000);
    sems.set("q", 1).await.unwrap();
    sems.try_acquire("q", "a", 1, lease, None, &AttemptId::new())
        .await
        .unwrap();
    let tried = sems
        .try_acquire("q", "b", 1, lease, None, &AttemptId::new())
        .await
        .unwrap();
    assert_eq!(place(tried), None);
    let exists: bool = conn.exists(queued("sem")).await.unwrap();
    assert!(!exists, "a try records nothing");
    let last = sems
        .try_acquire("q", "w", 1, lease, Some(0), &AttemptId::new())
        .await
        .unwrap();
    assert!(place(last).is_some());
    let left = sems.leave_or_release("q", "w").await.unwrap().unwrap();
    assert!(left.left_queue && left.released_permits == 0);
}

/// A DELETE answered `left_queue: true` must leave the holder queued
/// nowhere, even when its own long-poll is still open when the DELETE
/// lands (a client that gives up sends its DELETE while its waiting
/// connection is still being torn down, or on another instance). Seen: the
/// leave's own wake message names tickets without the open waiter's, so
/// the waiter tries again at once and takes a new place at the tail; when
/// its client then goes away, that place is kept for the grace, and a try
/// on the free object is refused with nobody waiting.
#[tokio::test]
async fn a_delete_during_the_holders_open_long_poll_leaves_no_place_behind() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    let mut seen = Vec::new();
    for (i, q) in QUEUED.iter().enumerate() {
        let name = q.object(&app, "open", i).await;
        q.hold(&app, &name, "a", 30000).await;
        // x waits ahead (its long-poll ended; its place is kept).
        assert_problem(q.wait(&app, &name, "x", 100).await, 409, q.busy()).await;
        let body = json!({"holder": "w", "wait_ms": 10000});
        let open = app.spawn_post(&q.path(&name, q.wait), body);
        q.wait_for_waiters(&app, &name, 1).await;
        let left = q.delete(&app, &name, "w").await;
        assert_eq!(left.status(), 200, "{}", q.label);
        let left: Value = left.json().await.unwrap();
        assert_eq!(left, (q.left)(), "{}", q.label);
        tokio::time::sleep(Duration::from_millis(300)).await;
        // The client goes away; x leaves too; a lets go.
        open.abort();
        q.wait_for_waiters(&app, &name, 0).await;
        assert_eq!(q.delete(&app, &name, "x").await.status(), 200);
        q.release(&app, &name, "a").await;
        let c = q.next(&app, &name, "c", 0).await;
        let status = c.status().as_u16();
        let body = c.text().await.unwrap();
        seen.push((q.label, status, body));
    }
    assert!(
        seen.iter().all(|(_, status, _)| *status == 201),
        "(primitive, C's status, body) after w left: {seen:#?}"
    );
}

/// A long-poll whose last look at its deadline is cut short — Redis
/// stalls, so the look's outcome is unknown and its 409 says what the
/// waiter knew — keeps its place for the grace like any other long-poll
/// that ends without a grant. Here the stalled look reaches Redis once it
/// runs again, after the holder's lease ended, and is granted; its
/// give-back, sent after the deadline, must put the waiter back at its
/// ticket, so that the waiter's next poll (sent during the stall, well
/// within the grace) is granted before `b`, who came after it.
#[tokio::test]
async fn a_last_look_cut_short_by_a_stall_keeps_the_waiters_place() {
    let redis = redis();
    // Long enough for a's next poll to outlast the stall.
    let config = Config {
        redis_response_timeout_ms: 5000,
        ..test_config(&redis)
    };
    let app = spawn_app(config).await;
    let mut seen = Vec::new();
    for (i, q) in QUEUED.iter().enumerate() {
        let name = q.object(&app, "stalled-look", i).await;
        let held = Instant::now();
        q.hold(&app, &name, "h", 2500).await;
        let first = app.spawn_post(
            &q.path(&name, q.wait),
            json!({"holder": "a", "wait_ms": 1500, "lease_ms": 30000}),
        );
        q.wait_for_waiters(&app, &name, 1).await;
        let behind = app.spawn_post(
            &q.path(&name, q.next),
            json!({"holder": "b", "wait_ms": 5000, "lease_ms": 30000}),
        );
        q.wait_for_waiters(&app, &name, 2).await;
        // Stalled from before a's deadline (about 1.5 s after it asked)
        // until after h's lease ended (2.5 s after it was taken).
        tokio::time::sleep(Duration::from_millis(1000).saturating_sub(held.elapsed())).await;
        redis.pause();
        let first = first.await.unwrap();
        let first_status = first.status().as_u16();
        let again = app.spawn_post(
            &q.path(&name, q.wait),
            json!({"holder": "a", "wait_ms": 4000, "lease_ms": 30000}),
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
        tokio::time::sleep(Duration::from_millis(2800).saturating_sub(held.elapsed())).await;
        redis.resume();
        let again = again.await.unwrap().status().as_u16();
        let behind = behind.await.unwrap().status().as_u16();
        seen.push((q.label, first_status, again, behind));
    }
    assert!(
        seen.iter()
            .all(|&(_, first, again, behind)| (first, again, behind) == (409, 201, 409)),
        "(primitive, a's first answer, a's next poll, b's long-poll): {seen:?}"
    );
}
