//! The client tools: the real `latchkey` binary run as `latchkey lock … --
//! cmd` (and rwlock, semaphore, latch) against the real app.

use std::process::Output;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::process::{Child, Command};

use crate::helpers::*;

/// `latchkey ARGS…` against `app`, with no LATCHKEY_URL inherited.
fn latchkey(app: &TestApp, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_latchkey"));
    command
        .args(args)
        .env("LATCHKEY_URL", &app.base)
        .env_remove("LATCHKEY_API_KEY")
        .kill_on_drop(true);
    command
}

async fn output(app: &TestApp, args: &[&str]) -> Output {
    let output = latchkey(app, args).output().await.expect("latchkey runs");
    eprintln!(
        "latchkey {args:?}: {:?}\nstdout: {}\nstderr: {}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

fn spawn(app: &TestApp, args: &[&str]) -> Child {
    latchkey(app, args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("latchkey starts")
}

/// Waits until the command's lock is held (latchkey has acquired it).
async fn until_locked(app: &TestApp, name: &str) {
    let held = eventually(Duration::from_secs(5), || async {
        app.state(name).await["locked"] == true
    })
    .await;
    assert!(held, "latchkey acquires {name}");
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[tokio::test]
async fn lock_runs_the_command_with_the_hold_in_its_environment_and_exits_with_its_code() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    let output = output(
        &app,
        &[
            "lock",
            "orders",
            "--holder",
            "cron-1",
            "--",
            "sh",
            "-c",
            "echo \"$LATCHKEY_NAME $LATCHKEY_HOLDER $LATCHKEY_FENCING_TOKEN\"; exit 3",
        ],
    )
    .await;
    assert_eq!(output.status.code(), Some(3));
    assert_eq!(stdout(&output), "orders cron-1 1\n");
    let state = app.state("orders").await;
    assert_eq!(
        state["locked"], false,
        "released after the command: {state}"
    );
    assert_eq!(state["fencing_token"], 1);
}

#[tokio::test]
async fn a_command_ended_by_a_signal_exits_128_plus_its_number_and_releases() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    let output = output(&app, &["lock", "sig", "--", "sh", "-c", "kill -USR1 $$"]).await;
    assert_eq!(output.status.code(), Some(128 + 10));
    assert_eq!(app.state("sig").await["locked"], false);
}

#[tokio::test]
async fn the_hold_is_renewed_across_several_leases_while_the_command_runs() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    // A 600 ms lease and a command that takes 2.5 s: four leases.
    let mut child = spawn(
        &app,
        &["lock", "long", "--lease-ms", "600", "--", "sleep", "2.5"],
    );
    tokio::time::sleep(Duration::from_millis(400)).await;
    let first = app.state("long").await;
    assert_eq!(first["locked"], true, "{first}");
    for _ in 0..4 {
        tokio::time::sleep(Duration::from_millis(450)).await;
        let state = app.state("long").await;
        assert_eq!(state["locked"], true, "still held: {state}");
        assert_eq!(
            state["fencing_token"], first["fencing_token"],
            "the same hold"
        );
    }
    let status = child.wait().await.unwrap();
    assert_eq!(status.code(), Some(0));
    assert_eq!(app.state("long").await["locked"], false);
}

#[tokio::test]
async fn not_acquired_within_the_wait_exits_75_with_one_line_and_never_runs_the_command() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    app.must_acquire("busy", json!({"holder": "other"})).await;
    let started = Instant::now();
    let refused = output(
        &app,
        &[
            "lock",
            "busy",
            "--wait-ms",
            "300",
            "--",
            "sh",
            "-c",
            "echo ran",
        ],
    )
    .await;
    assert_eq!(refused.status.code(), Some(75));
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert_eq!(stdout(&refused), "", "the command never ran");
    let lines: Vec<_> = stderr(&refused).lines().map(str::to_string).collect();
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].contains("lock busy") && lines[0].contains("not acquired"),
        "{lines:?}"
    );
    // --wait-ms 0 tries once.
    let once = output(&app, &["lock", "busy", "--wait-ms", "0", "--", "true"]).await;
    assert_eq!(once.status.code(), Some(75));
}

#[tokio::test]
async fn a_wait_longer_than_the_services_longest_long_poll_is_polled_in_pieces() {
    let redis = redis();
    let app = spawn_app(Config {
        max_wait_ms: 500,
        ..test_config(&redis)
    })
    .await;
    let grant = app
        .must_acquire("slow", json!({"holder": "other", "lease_ms": 1500}))
        .await;
    assert_eq!(grant["lease_ms"], 1500);
    // The lease runs out after 1.5 s, three long-polls of the service's
    // longest (500 ms) later.
    let output = output(&app, &["lock", "slow", "--wait-ms", "5000", "--", "true"]).await;
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(app.state("slow").await["fencing_token"], 2);
}

#[tokio::test]
async fn a_lost_hold_stops_the_command_with_sigterm_and_exits_76() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    // Heartbeats every 300 ms; the command notes SIGTERM and exits.
    let mut child = spawn(
        &app,
        &[
            "lock",
            "jobs",
            "--lease-ms",
            "900",
            "--",
            "sh",
            "-c",
            "trap 'echo terminated; exit 9' TERM; sleep 30 & wait",
        ],
    );
    until_locked(&app, "jobs").await;
    let unlocked = Instant::now();
    let forced = app.delete_json("/locks/jobs").await;
    assert_eq!(forced["released"], true);
    let status = tokio::time::timeout(Duration::from_secs(5), child.wait())
        .await
        .expect("latchkey ends after the lost hold")
        .unwrap();
    // Noticed by the next heartbeat: within one interval (300 ms) plus slack.
    assert!(
        unlocked.elapsed() < Duration::from_millis(300 + 500),
        "stopped after {:?}",
        unlocked.elapsed()
    );
    assert_eq!(status.code(), Some(76));
    let output = child.wait_with_output().await.unwrap();
    assert_eq!(stdout(&output), "terminated\n", "the command got SIGTERM");
    assert!(
        stderr(&output).contains("lost the lock jobs"),
        "{}",
        stderr(&output)
    );
}

#[tokio::test]
async fn a_command_that_ignores_sigterm_after_a_lost_hold_is_killed_after_the_grace() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    let child = spawn(
        &app,
        &[
            "lock",
            "stubborn",
            "--lease-ms",
            "900",
            "--kill-after",
            "400",
            "--",
            "sh",
            "-c",
            "trap '' TERM; sleep 30",
        ],
    );
    until_locked(&app, "stubborn").await;
    app.delete_json("/locks/stubborn").await;
    let output = tokio::time::timeout(Duration::from_secs(5), child.wait_with_output())
        .await
        .expect("the command and its children are killed")
        .unwrap();
    assert_eq!(output.status.code(), Some(76));
    assert!(
        stderr(&output).contains("ended with 137"),
        "SIGKILL: {}",
        stderr(&output)
    );
}

#[tokio::test]
async fn sigterm_to_latchkey_reaches_the_command_and_the_hold_is_released() {
    use tokio::io::{AsyncBufReadExt, BufReader};
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    let mut child = spawn(
        &app,
        &[
            "lock",
            "term",
            "--",
            "sh",
            "-c",
            "trap 'echo forwarded; exit 5' TERM; echo started; sleep 30 & wait",
        ],
    );
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = tokio::time::timeout(Duration::from_secs(5), lines.next_line())
        .await
        .expect("the command starts")
        .unwrap();
    assert_eq!(first.as_deref(), Some("started"));
    assert_eq!(app.state("term").await["locked"], true);
    latchkey::child::signal(child.id().unwrap(), libc::SIGTERM);
    let status = tokio::time::timeout(Duration::from_secs(5), child.wait())
        .await
        .expect("latchkey ends")
        .unwrap();
    assert_eq!(status.code(), Some(5), "the command's own code");
    assert_eq!(
        lines.next_line().await.unwrap().as_deref(),
        Some("forwarded")
    );
    assert_eq!(app.state("term").await["locked"], false, "released");
}

#[tokio::test]
async fn a_command_that_cannot_run_exits_127_and_leaves_nothing_held() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    let output = output(&app, &["lock", "missing", "--", "/no/such/command"]).await;
    assert_eq!(output.status.code(), Some(127));
    let state = app.state("missing").await;
    assert_eq!(state["locked"], false, "{state}");
    assert_eq!(state["fencing_token"], 1, "it was acquired, then released");
}

#[tokio::test]
async fn two_commands_on_one_lock_never_overlap() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    let dir = std::env::temp_dir().join(format!("latchkey-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("overlap.log");
    let _ = std::fs::remove_file(&log);
    // Each run appends "start TOKEN", sleeps, appends "end TOKEN".
    let script = format!(
        "echo start $LATCHKEY_FENCING_TOKEN >> {0}; sleep 0.2; echo end $LATCHKEY_FENCING_TOKEN >> {0}",
        log.display()
    );
    let runs: Vec<_> = (0..4)
        .map(|_| {
            spawn(
                &app,
                &[
                    "lock",
                    "shared",
                    "--wait-ms",
                    "10000",
                    "--",
                    "sh",
                    "-c",
                    &script,
                ],
            )
        })
        .collect();
    for run in runs {
        assert_eq!(run.wait_with_output().await.unwrap().status.code(), Some(0));
    }
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 8, "{text}");
    let mut last = 0;
    for pair in lines.chunks(2) {
        let start: u64 = pair[0].strip_prefix("start ").unwrap().parse().unwrap();
        assert_eq!(pair[1], format!("end {start}"), "no overlap: {text}");
        assert!(start > last, "tokens increase: {text}");
        last = start;
    }
}

#[tokio::test]
async fn a_fair_lock_serves_waiting_commands_in_order_of_arrival() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    let grant = app
        .post(
            "/fair-locks/q/acquire",
            json!({"holder": "first", "lease_ms": 30000}),
        )
        .await;
    assert_eq!(grant.status(), 201);
    let mut waiters = Vec::new();
    for i in 0..3 {
        let holder = format!("w{i}");
        waiters.push(spawn(
            &app,
            &[
                "lock",
                "q",
                "--fair",
                "--holder",
                &holder,
                "--wait-ms",
                "10000",
                "--",
                "sh",
                "-c",
                "echo $LATCHKEY_FENCING_TOKEN",
            ],
        ));
        let expected = i + 1;
        assert!(
            eventually(Duration::from_secs(5), || async {
                app.get_json("/fair-locks/q").await["waiters"] == expected
            })
            .await,
            "waiter {i} queued"
        );
    }
    let released = app
        .client
        .delete(app.url("/fair-locks/q/holders/first"))
        .send()
        .await
        .unwrap();
    assert_eq!(released.status(), 200);
    let mut tokens = Vec::new();
    for waiter in waiters {
        let output = waiter.wait_with_output().await.unwrap();
        assert_eq!(output.status.code(), Some(0));
        tokens.push(stdout(&output).trim().parse::<u64>().unwrap());
    }
    assert_eq!(tokens, [2, 3, 4], "granted in order of arrival");
}

#[tokio::test]
async fn rwlock_readers_share_and_a_writer_waits_for_them() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    let readers: Vec<_> = (0..2)
        .map(|_| {
            spawn(
                &app,
                &[
                    "rwlock",
                    "doc",
                    "--read",
                    "--wait-ms",
                    "0",
                    "--",
                    "sleep",
                    "0.8",
                ],
            )
        })
        .collect();
    assert!(
        eventually(Duration::from_secs(5), || async {
            app.get_json("/rwlocks/doc").await["readers"] == 2
        })
        .await,
        "both readers hold at once"
    );
    let writer = output(
        &app,
        &[
            "rwlock",
            "doc",
            "--write",
            "--wait-ms",
            "5000",
            "--",
            "sh",
            "-c",
            "echo writing",
        ],
    )
    .await;
    assert_eq!(writer.status.code(), Some(0));
    assert_eq!(stdout(&writer), "writing\n");
    for reader in readers {
        assert_eq!(
            reader.wait_with_output().await.unwrap().status.code(),
            Some(0)
        );
    }
    let state = app.get_json("/rwlocks/doc").await;
    assert_eq!(state["mode"], Value::Null, "all released: {state}");
    let usage = output(&app, &["rwlock", "doc", "--", "true"]).await;
    assert_eq!(
        usage.status.code(),
        Some(64),
        "--read or --write is required"
    );
}

#[tokio::test]
async fn semaphore_commands_hold_their_permits_and_give_them_back() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    let unconfigured = output(&app, &["semaphore", "pool", "--", "true"]).await;
    assert_eq!(unconfigured.status.code(), Some(64));
    assert!(
        stderr(&unconfigured).contains("404"),
        "{}",
        stderr(&unconfigured)
    );
    let put = app
        .client
        .put(app.url("/semaphores/pool"))
        .json(&json!({"permits": 3}))
        .send()
        .await
        .unwrap();
    assert_eq!(put.status(), 200);
    let holding = spawn(
        &app,
        &["semaphore", "pool", "--permits", "2", "--", "sleep", "0.8"],
    );
    assert!(
        eventually(Duration::from_secs(5), || async {
            app.get_json("/semaphores/pool").await["available"] == 1
        })
        .await
    );
    let refused = output(
        &app,
        &[
            "semaphore",
            "pool",
            "--permits",
            "2",
            "--wait-ms",
            "0",
            "--",
            "true",
        ],
    )
    .await;
    assert_eq!(refused.status.code(), Some(75), "only one permit is left");
    let too_many = output(&app, &["semaphore", "pool", "--permits", "4", "--", "true"]).await;
    assert_eq!(
        too_many.status.code(),
        Some(64),
        "more than the semaphore has"
    );
    assert_eq!(
        holding.wait_with_output().await.unwrap().status.code(),
        Some(0)
    );
    assert_eq!(app.get_json("/semaphores/pool").await["available"], 3);
}

#[tokio::test]
async fn latch_wait_returns_when_the_latch_opens_and_count_down_counts_a_key_once() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    let put = app
        .client
        .put(app.url("/latches/ready"))
        .json(&json!({"count": 2}))
        .send()
        .await
        .unwrap();
    assert_eq!(put.status(), 201);
    let closed = output(&app, &["latch", "wait", "ready", "--wait-ms", "200"]).await;
    assert_eq!(closed.status.code(), Some(75));
    let waiter = spawn(&app, &["latch", "wait", "ready"]);
    for _ in 0..2 {
        let once = output(
            &app,
            &["latch", "count-down", "ready", "--idempotency-key", "job-7"],
        )
        .await;
        assert_eq!(once.status.code(), Some(0));
        assert_eq!(
            serde_json::from_str::<Value>(&stdout(&once)).unwrap(),
            json!({"count": 1, "open": false}),
            "the same key counts once"
        );
    }
    let opened = output(&app, &["latch", "count-down", "ready"]).await;
    assert_eq!(opened.status.code(), Some(0));
    let waited = tokio::time::timeout(Duration::from_secs(5), waiter.wait_with_output())
        .await
        .expect("the waiter returns when the latch opens")
        .unwrap();
    assert_eq!(waited.status.code(), Some(0));
    assert_eq!(
        serde_json::from_str::<Value>(&stdout(&waited)).unwrap(),
        json!({"count": 0, "open": true})
    );
    let gone = output(&app, &["latch", "count-down", "ready"]).await;
    assert_eq!(gone.status.code(), Some(64), "an opened latch is gone");
}

#[tokio::test]
async fn an_unreachable_service_exits_69() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    let output = Command::new(env!("CARGO_BIN_EXE_latchkey"))
        .args(["lock", "x", "--url", &url, "--wait-ms", "0", "--", "true"])
        .output()
        .await
        .unwrap();
    assert_eq!(output.status.code(), Some(69));
    assert!(
        stderr(&output).contains("cannot reach latchkey"),
        "{}",
        stderr(&output)
    );
}

#[tokio::test]
async fn the_api_key_comes_from_latchkey_api_key() {
    use sha2::{Digest, Sha256};
    let redis = redis();
    let hash: String = Sha256::digest(b"cli-key-0123456789")
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let app = spawn_app(Config {
        api_keys: vec![format!("cron:client:{hash}")],
        ..test_config(&redis)
    })
    .await;
    let refused = output(&app, &["lock", "keyed", "--", "true"]).await;
    assert_eq!(refused.status.code(), Some(64));
    assert!(stderr(&refused).contains("401"), "{}", stderr(&refused));
    let granted = latchkey(
        &app,
        &[
            "lock",
            "keyed",
            "--",
            "sh",
            "-c",
            "echo $LATCHKEY_FENCING_TOKEN",
        ],
    )
    .env("LATCHKEY_API_KEY", "cli-key-0123456789")
    .output()
    .await
    .unwrap();
    assert_eq!(granted.status.code(), Some(0), "{}", stderr(&granted));
    assert_eq!(stdout(&granted), "1\n");
}

#[tokio::test]
async fn a_hold_that_cannot_be_renewed_is_lost_when_its_lease_ends_by_the_clients_clock() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    let child = spawn(
        &app,
        &[
            "lock",
            "unreachable",
            "--lease-ms",
            "1200",
            "--",
            "sh",
            "-c",
            "trap 'echo terminated; exit 9' TERM; sleep 30 & wait",
        ],
    );
    until_locked(&app, "unreachable").await;
    // The service goes away: no heartbeat can succeed any more.
    let stopped = Instant::now();
    app.shutdown.cancel();
    let output = tokio::time::timeout(Duration::from_secs(5), child.wait_with_output())
        .await
        .expect("latchkey and its command end once the lease is over")
        .unwrap();
    let after = stopped.elapsed();
    assert_eq!(output.status.code(), Some(76));
    // Lost when the lease ends (at most 1.2 s after the last renewal).
    assert!(after < Duration::from_millis(1200 + 500), "after {after:?}");
    assert_eq!(stdout(&output), "terminated\n");
    assert!(
        stderr(&output).contains("no heartbeat succeeded before the lease ended"),
        "{}",
        stderr(&output)
    );
}

#[tokio::test]
async fn a_lost_hold_stops_every_process_the_command_started() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    // A script whose child keeps running unless it is signalled too.
    let child = spawn(
        &app,
        &[
            "lock",
            "tree",
            "--lease-ms",
            "900",
            "--",
            "sh",
            "-c",
            "sleep 30; echo finished",
        ],
    );
    until_locked(&app, "tree").await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    app.delete_json("/locks/tree").await;
    // The output pipe closes only when the `sleep` holding it ends too.
    let output = tokio::time::timeout(Duration::from_secs(5), child.wait_with_output())
        .await
        .expect("the whole process group is stopped")
        .unwrap();
    assert_eq!(output.status.code(), Some(76));
    assert_eq!(stdout(&output), "", "the script never finished");
}

/// A queued primitive a `latchkey` command can wait on, blocked by another
/// holder: the issue's scenario of a waiter that gives up, run for each.
struct Queued {
    /// What the assertions call it.
    what: &'static str,
    /// The command's arguments before the wait's (`lock NAME --fair`).
    args: Vec<String>,
    /// The blocker's acquire path.
    block: String,
    /// The blocker's release path.
    unblock: String,
    /// The path of a try by a third holder after the blocker released.
    try_path: String,
    /// The object's state path (for its `waiters`).
    state: String,
}

impl Queued {
    /// Fair lock, the write and the read side of a read-write lock (a
    /// write try after either: it is refused while anyone is queued
    /// ahead), and a semaphore of one permit.
    async fn all(app: &TestApp, prefix: &str) -> Vec<Queued> {
        let fair = format!("{prefix}-fair");
        let write = format!("{prefix}-write");
        let read = format!("{prefix}-read");
        let sem = format!("{prefix}-sem");
        let put = app
            .client
            .put(app.url(&format!("/semaphores/{sem}")))
            .json(&json!({"permits": 1}))
            .send()
            .await
            .unwrap();
        assert_eq!(put.status(), 200);
        let args = |list: &[&str]| list.iter().map(|a| a.to_string()).collect();
        vec![
            Queued {
                what: "fair lock",
                args: args(&["lock", &fair, "--fair"]),
                block: format!("/fair-locks/{fair}/acquire"),
                unblock: format!("/fair-locks/{fair}/holders/blocker"),
                try_path: format!("/fair-locks/{fair}/acquire"),
                state: format!("/fair-locks/{fair}"),
            },
            Queued {
                what: "rwlock write",
                args: args(&["rwlock", &write, "--write"]),
                block: format!("/rwlocks/{write}/read/acquire"),
                unblock: format!("/rwlocks/{write}/holders/blocker?mode=read"),
                try_path: format!("/rwlocks/{write}/write/acquire"),
                state: format!("/rwlocks/{write}"),
            },
            Queued {
                what: "rwlock read",
                args: args(&["rwlock", &read, "--read"]),
                block: format!("/rwlocks/{read}/write/acquire"),
                unblock: format!("/rwlocks/{read}/holders/blocker?mode=write"),
                try_path: format!("/rwlocks/{read}/write/acquire"),
                state: format!("/rwlocks/{read}"),
            },
            Queued {
                what: "semaphore",
                args: args(&["semaphore", &sem]),
                block: format!("/semaphores/{sem}/acquire"),
                unblock: format!("/semaphores/{sem}/holders/blocker"),
                try_path: format!("/semaphores/{sem}/acquire"),
                state: format!("/semaphores/{sem}"),
            },
        ]
    }

    async fn block(&self, app: &TestApp) {
        let grant = app
            .post(&self.block, json!({"holder": "blocker", "lease_ms": 30000}))
            .await;
        assert_eq!(grant.status(), 201, "{}: the blocker holds", self.what);
    }

    /// The command's arguments with these after the object's.
    fn command<'a>(&'a self, more: &[&'a str]) -> Vec<&'a str> {
        let mut all: Vec<&str> = self.args.iter().map(String::as_str).collect();
        all.extend_from_slice(more);
        all
    }

    /// Until the command waits on the object.
    async fn until_waiting(&self, app: &TestApp) {
        let waiting = eventually(Duration::from_secs(5), || async {
            app.get_json(&self.state).await["waiters"] == 1
        })
        .await;
        assert!(waiting, "{}: the command waits", self.what);
    }

    /// The blocker releases; then a try by a third holder must be granted
    /// at once: the command that gave up left no place behind.
    async fn assert_no_place_left(&self, app: &TestApp) {
        let released = app
            .client
            .delete(app.url(&self.unblock))
            .send()
            .await
            .unwrap();
        assert_eq!(
            released.status(),
            200,
            "{}: the blocker releases",
            self.what
        );
        let tried = app
            .post(&self.try_path, json!({"holder": "third", "wait_ms": 0}))
            .await;
        let status = tried.status();
        let body: Value = tried.json().await.unwrap();
        assert_eq!(
            status, 201,
            "{}: a try after the release is granted at once, the command that gave up \
             left its queue: {body}",
            self.what
        );
    }
}

#[tokio::test]
async fn a_command_whose_wait_ends_leaves_the_queue_it_waited_in() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    for queued in Queued::all(&app, "timeout").await {
        queued.block(&app).await;
        let refused = output(
            &app,
            &queued.command(&["--wait-ms", "400", "--", "sh", "-c", "echo ran"]),
        )
        .await;
        assert_eq!(refused.status.code(), Some(75), "{}", queued.what);
        assert_eq!(stdout(&refused), "", "{}: never ran", queued.what);
        queued.assert_no_place_left(&app).await;
    }
}

#[tokio::test]
async fn sigint_or_sigterm_while_waiting_leaves_the_queue_and_exits_128_plus_the_signal() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    let queued = Queued::all(&app, "signal").await;
    let signals = [libc::SIGINT, libc::SIGTERM, libc::SIGINT, libc::SIGTERM];
    for (queued, signal) in queued.iter().zip(signals) {
        queued.block(&app).await;
        // Without a bound on the wait, and with a holder of its own.
        let child = spawn(
            &app,
            &queued.command(&["--holder", "gives-up", "--", "sh", "-c", "echo ran"]),
        );
        queued.until_waiting(&app).await;
        latchkey::child::signal(child.id().unwrap(), signal);
        let output = tokio::time::timeout(Duration::from_secs(5), child.wait_with_output())
            .await
            .expect("latchkey ends when signalled")
            .unwrap();
        queued.assert_no_place_left(&app).await;
        assert_eq!(
            output.status.code(),
            Some(128 + signal),
            "{}: {:?} {}",
            queued.what,
            output.status,
            stderr(&output)
        );
        assert_eq!(stdout(&output), "", "{}: never ran", queued.what);
        assert!(
            stderr(&output).contains("interrupted while waiting"),
            "{}: {}",
            queued.what,
            stderr(&output)
        );
    }
}

#[tokio::test]
async fn ls_lists_every_page_as_a_table_or_json_and_status_shows_one_object() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    for i in 0..5 {
        app.must_acquire(&format!("ls-lock-{i}"), json!({"lease_ms": 60000}))
            .await;
    }
    app.must_acquire("other", json!({"lease_ms": 60000})).await;
    let put = app
        .client
        .put(app.url("/semaphores/ls-sem"))
        .json(&json!({"permits": 4}))
        .send()
        .await
        .unwrap();
    assert!(put.status().is_success(), "{}", put.status());

    // A table, every page followed (--limit caps the total, not a page).
    let table = output(&app, &["ls", "locks", "--prefix", "ls-lock-"]).await;
    assert_eq!(table.status.code(), Some(0));
    let text = stdout(&table);
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines[0].starts_with("NAME") && lines[0].contains("LOCKED"),
        "{text}"
    );
    assert_eq!(lines.len(), 6, "a header and five locks: {text}");
    for i in 0..5 {
        assert!(text.contains(&format!("ls-lock-{i} ")), "{text}");
    }
    assert!(!text.contains("other"), "{text}");
    let capped = output(&app, &["ls", "lock", "--limit", "2", "--json"]).await;
    let items: Value = serde_json::from_str(&stdout(&capped)).expect("JSON");
    assert_eq!(items.as_array().unwrap().len(), 2, "{items}");

    let json_out = output(&app, &["ls", "semaphores", "--json"]).await;
    let items: Value = serde_json::from_str(&stdout(&json_out)).expect("JSON");
    assert_eq!(items[0]["name"], "ls-sem");
    assert_eq!(items[0]["permits"], 4);

    let status = output(&app, &["status", "semaphore", "ls-sem"]).await;
    assert_eq!(status.status.code(), Some(0));
    let text = stdout(&status);
    assert!(text.lines().next().unwrap().contains("PERMITS"), "{text}");
    assert!(text.contains("ls-sem"), "{text}");
    let status = output(&app, &["status", "locks", "ls-lock-1", "--json"]).await;
    let object: Value = serde_json::from_str(&stdout(&status)).expect("JSON");
    assert_eq!(object["locked"], true);

    // A semaphore never configured: refused (64), and an unknown kind.
    let missing = output(&app, &["status", "semaphores", "nope"]).await;
    assert_eq!(missing.status.code(), Some(64), "{}", stderr(&missing));
    let unknown = output(&app, &["ls", "mutexes"]).await;
    assert_eq!(unknown.status.code(), Some(64));
    assert!(
        stderr(&unknown).contains("unknown kind"),
        "{}",
        stderr(&unknown)
    );
}

#[tokio::test]
async fn the_owner_label_shows_in_ls_and_status_and_names_who_holds_it_when_refused() {
    let redis = redis();
    // Long-polls of at most 300 ms: a longer wait is several tries.
    let app = spawn_app(Config {
        max_wait_ms: 300,
        ..test_config(&redis)
    })
    .await;
    let mut holding = spawn(
        &app,
        &[
            "lock",
            "owned",
            "--owner",
            "cron\tnightly",
            "--",
            "sleep",
            "30",
        ],
    );
    until_locked(&app, "owned").await;
    // Control characters are replaced.
    assert_eq!(
        app.state("owned").await["holds"][0]["owner"],
        "cron?nightly"
    );

    let ls = output(&app, &["ls", "locks"]).await;
    let text = stdout(&ls);
    assert!(text.lines().next().unwrap().ends_with("OWNERS"), "{text}");
    assert!(
        text.contains("owned") && text.contains("cron?nightly"),
        "{text}"
    );
    let status = output(&app, &["status", "lock", "owned"]).await;
    let text = stdout(&status);
    assert!(
        text.lines()
            .any(|l| l.starts_with("OWNER") || l.contains(" OWNER")),
        "{text}"
    );
    assert!(text.lines().any(|l| l.contains("cron?nightly")), "{text}");

    // Refused at once: exit 75, naming the owner.
    let refused = output(&app, &["lock", "owned", "--wait-ms", "0", "--", "true"]).await;
    assert_eq!(refused.status.code(), Some(75));
    assert!(
        stderr(&refused).contains("held by \"cron?nightly\""),
        "{}",
        stderr(&refused)
    );
    // While it keeps waiting it says so (once: the owner stays the same).
    let waited = output(&app, &["lock", "owned", "--wait-ms", "1500", "--", "true"]).await;
    assert_eq!(waited.status.code(), Some(75));
    let said = stderr(&waited);
    let waiting = "lock owned: waiting; held by \"cron?nightly\"";
    assert_eq!(said.matches(waiting).count(), 1, "{said}");

    holding.kill().await.unwrap();
    // The default label: host, pid and the command.
    let script = format!(
        "{} status lock default-owner --json",
        env!("CARGO_BIN_EXE_latchkey")
    );
    let shown = output(&app, &["lock", "default-owner", "--", "sh", "-c", &script]).await;
    assert_eq!(shown.status.code(), Some(0), "{}", stderr(&shown));
    let object: Value = serde_json::from_str(&stdout(&shown)).expect("JSON");
    let owner = object["holds"][0]["owner"].as_str().expect("an owner");
    assert!(owner.contains(" pid "), "{owner}");
    assert!(owner.ends_with(&format!(" sh -c {script}")), "{owner}");
}

/// `latchkey rate NAME --configure …` as run: exits 0 and prints the
/// configuration.
async fn configure_rate(app: &TestApp, name: &str, rate: &str, per_ms: &str) {
    let configured = output(
        app,
        &[
            "rate",
            name,
            "--configure",
            "--rate",
            rate,
            "--per-ms",
            per_ms,
        ],
    )
    .await;
    assert_eq!(configured.status.code(), Some(0));
    let config: Value = serde_json::from_str(&stdout(&configured)).unwrap();
    assert_eq!(config["rate"].to_string(), rate, "{config}");
    assert_eq!(config["per_ms"].to_string(), per_ms, "{config}");
}

/// The milliseconds a refused `latchkey rate` says the permits come in
/// (its one stderr line: "... not admitted within the wait; 1 permit(s)
/// come in N ms").
fn come_in_ms(refused: &Output) -> u64 {
    let text = stderr(refused);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].contains("not admitted"), "{lines:?}");
    let (_, after) = lines[0].split_once("come in ").expect("says when");
    after
        .trim_end_matches(" ms")
        .parse()
        .unwrap_or_else(|_| panic!("a number of ms: {lines:?}"))
}

#[tokio::test]
async fn rate_admits_runs_the_command_and_refuses_with_75_saying_when_the_permits_come() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    // One permit a minute (burst: the rate).
    configure_rate(&app, "api", "1", "60000").await;
    let admitted = output(&app, &["rate", "api", "--", "sh", "-c", "echo ran; exit 4"]).await;
    assert_eq!(admitted.status.code(), Some(4), "the command's code");
    assert_eq!(stdout(&admitted), "ran\n");
    let refused = output(&app, &["rate", "api", "--", "sh", "-c", "echo ran"]).await;
    assert_eq!(refused.status.code(), Some(75));
    assert_eq!(stdout(&refused), "", "the command never ran");
    let ms = come_in_ms(&refused);
    assert!(ms > 0 && ms <= 60_000, "{ms}");
    assert!(stderr(&refused).contains("rate limiter api"));
    // Without a command: 75 when refused.
    let bare = output(&app, &["rate", "api"]).await;
    assert_eq!(bare.status.code(), Some(75));
    // A wait the permits come after (the service says so at once) ends at
    // once, not at its end.
    let started = Instant::now();
    let short = output(&app, &["rate", "api", "--wait-ms", "30000"]).await;
    assert_eq!(short.status.code(), Some(75));
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    // No such limiter, and more permits than the burst: refused (64).
    let missing = output(&app, &["rate", "nope"]).await;
    assert_eq!(missing.status.code(), Some(64));
    assert!(stderr(&missing).contains("404"), "{}", stderr(&missing));
    let too_many = output(&app, &["rate", "api", "--permits", "2"]).await;
    assert_eq!(too_many.status.code(), Some(64));
    assert!(stderr(&too_many).contains("400"), "{}", stderr(&too_many));
    let state = app.get_json("/rate-limiters/api").await;
    assert_eq!(state["available"], 0, "one permit taken in all: {state}");
}

#[tokio::test]
async fn rate_with_a_wait_is_admitted_when_the_permits_come() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    // One permit every 500 ms.
    configure_rate(&app, "paced", "1", "500").await;
    let first = output(&app, &["rate", "paced", "--wait-ms", "0"]).await;
    assert_eq!(first.status.code(), Some(0));
    let refused = output(&app, &["rate", "paced", "--wait-ms", "0"]).await;
    assert_eq!(refused.status.code(), Some(75));
    assert!(come_in_ms(&refused) <= 500);
    let waited = output(
        &app,
        &[
            "rate",
            "paced",
            "--wait-ms",
            "5000",
            "--",
            "echo",
            "admitted",
        ],
    )
    .await;
    assert_eq!(waited.status.code(), Some(0), "{}", stderr(&waited));
    assert_eq!(stdout(&waited), "admitted\n");
}

#[tokio::test]
async fn rate_keys_draw_from_buckets_of_their_own() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    configure_rate(&app, "per-user", "1", "60000").await;
    let alice = output(&app, &["rate", "per-user", "--key", "alice"]).await;
    assert_eq!(alice.status.code(), Some(0), "{}", stderr(&alice));
    let again = output(&app, &["rate", "per-user", "--key", "alice"]).await;
    assert_eq!(again.status.code(), Some(75));
    assert!(stderr(&again).contains("\"alice\""), "{}", stderr(&again));
    come_in_ms(&again);
    let bob = output(&app, &["rate", "per-user", "--key", "bob"]).await;
    assert_eq!(bob.status.code(), Some(0), "bob's bucket is his own");
    let shared = output(&app, &["rate", "per-user"]).await;
    assert_eq!(shared.status.code(), Some(0), "and the shared one its own");
    let alice_state = app.get_json("/rate-limiters/per-user?key=alice").await;
    assert_eq!(alice_state["available"], 0, "{alice_state}");
}

/// `latchkey session ARGS… -- sh -c SCRIPT`, started; `$LK` in the script
/// is this latchkey binary. Returns the child and the session id, which
/// the script must print on its first line.
async fn session_running(
    app: &TestApp,
    args: &[&str],
    script: &str,
) -> (
    Child,
    String,
    tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
) {
    use tokio::io::AsyncBufReadExt;
    let mut all = vec!["session"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--", "sh", "-c", script]);
    let mut command = latchkey(app, &all);
    command
        .env("LK", env!("CARGO_BIN_EXE_latchkey"))
        .stdout(std::process::Stdio::piped());
    let mut child = command.spawn().expect("latchkey starts");
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let id = tokio::time::timeout(Duration::from_secs(5), lines.next_line())
        .await
        .expect("the script prints the session id")
        .unwrap()
        .expect("a line");
    assert!(!id.is_empty());
    (child, id, lines)
}

#[tokio::test]
async fn a_session_runs_a_script_whose_nested_locks_it_renews_and_releases_at_its_end() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    // A 900 ms TTL; the script holds a lock in the session for 2.5 s
    // (about three TTLs): only the session's heartbeats renew it.
    let script = r#"echo "$LATCHKEY_SESSION"
"$LK" lock nested --session "$LATCHKEY_SESSION" --owner nested-job -- sleep 2.5 || exit 100
exit 3"#;
    let (mut child, id, _lines) = session_running(&app, &["--ttl-ms", "900"], script).await;
    until_locked(&app, "nested").await;
    // A third party takes a hold in the session too, which nobody releases
    // but the session's end.
    let extra = app
        .must_acquire("extra", json!({"holder": "third", "session": id}))
        .await;
    assert!(extra["lease_ms"].as_u64().unwrap() <= 900, "{extra}");
    let first = app.state("nested").await;
    for _ in 0..4 {
        let state = app.state("nested").await;
        assert_eq!(state["locked"], true, "still held: {state}");
        assert_eq!(state["fencing_token"], first["fencing_token"], "one hold");
        assert_eq!(
            state["holds"][0]["session"], true,
            "in the session: {state}"
        );
        assert_eq!(state["holds"][0]["owner"], "nested-job", "{state}");
        assert_eq!(app.state("extra").await["locked"], true);
        let session = app.get_json(&format!("/sessions/{id}")).await;
        assert_eq!(session["holds"], 2, "{session}");
        tokio::time::sleep(Duration::from_millis(450)).await;
    }
    let status = tokio::time::timeout(Duration::from_secs(10), child.wait())
        .await
        .expect("the script ends")
        .unwrap();
    assert_eq!(status.code(), Some(3), "the script's code");
    assert_eq!(app.state("nested").await["locked"], false);
    assert_eq!(
        app.state("extra").await["locked"],
        false,
        "released by the session's end"
    );
    let gone = app
        .client
        .get(app.url(&format!("/sessions/{id}")))
        .send()
        .await
        .unwrap();
    assert_eq!(gone.status(), 404, "the session was deleted");
}

#[tokio::test]
async fn a_lost_session_stops_the_command_with_sigterm_and_exits_76() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    let script = r#"echo "$LATCHKEY_SESSION"
trap 'echo terminated; exit 9' TERM; sleep 30 & wait"#;
    let (mut child, id, mut lines) = session_running(&app, &["--ttl-ms", "900"], script).await;
    let deleted = app.delete_json(&format!("/sessions/{id}")).await;
    assert_eq!(deleted["released"], 0, "{deleted}");
    let status = tokio::time::timeout(Duration::from_secs(5), child.wait())
        .await
        .expect("latchkey ends after the lost session")
        .unwrap();
    assert_eq!(status.code(), Some(76));
    assert_eq!(
        lines.next_line().await.unwrap().as_deref(),
        Some("terminated"),
        "the command got SIGTERM"
    );
}

#[tokio::test]
async fn a_hold_in_a_session_comes_from_latchkey_session_and_excludes_a_lease() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    let created = app.post("/sessions", json!({"ttl_ms": 5000})).await;
    assert_eq!(created.status(), 201);
    let id = created.json::<Value>().await.unwrap()["session"]
        .as_str()
        .unwrap()
        .to_string();
    // The session from the environment.
    let mut command = latchkey(&app, &["lock", "env-held", "--", "sleep", "0.3"]);
    command.env("LATCHKEY_SESSION", &id);
    let child = command.spawn().unwrap();
    until_locked(&app, "env-held").await;
    assert_eq!(app.state("env-held").await["holds"][0]["session"], true);
    assert_eq!(
        child.wait_with_output().await.unwrap().status.code(),
        Some(0)
    );
    assert_eq!(app.state("env-held").await["locked"], false, "released");
    // (A hold released directly counts until the session's next heartbeat.)
    let beat = app
        .post(&format!("/sessions/{id}/heartbeat"), json!({}))
        .await;
    let beat: Value = beat.json().await.unwrap();
    assert_eq!(beat["holds"], 0, "{beat}");
    // A lease and a session: a bad command line.
    let both = output(
        &app,
        &[
            "lock",
            "x",
            "--session",
            &id,
            "--lease-ms",
            "1000",
            "--",
            "true",
        ],
    )
    .await;
    assert_eq!(both.status.code(), Some(64));
    // No such session: refused.
    let unknown = output(&app, &["lock", "x", "--session", "nope", "--", "true"]).await;
    assert_eq!(unknown.status.code(), Some(64), "{}", stderr(&unknown));
}

/// A TCP proxy in front of `app` that drops the answer to the first
/// acquire it sees (a connection whose first bytes are `POST …/acquire`):
/// the request reaches the service, which acts on it, and then the
/// connection is closed before any byte of the answer reaches the client.
/// Every other connection is passed through. Returns its base URL.
async fn answer_dropping_proxy(app: &TestApp) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let upstream = app.base.trim_start_matches("http://").to_string();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a free port");
    let port = listener.local_addr().expect("bound").port();
    let dropped = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    tokio::spawn(async move {
        while let Ok((mut inbound, _)) = listener.accept().await {
            let upstream = upstream.clone();
            let dropped = dropped.clone();
            tokio::spawn(async move {
                let Ok(mut outbound) = tokio::net::TcpStream::connect(&upstream).await else {
                    return;
                };
                let mut first = vec![0; 16 * 1024];
                let Ok(n @ 1..) = inbound.read(&mut first).await else {
                    return;
                };
                let head = String::from_utf8_lossy(&first[..n]).into_owned();
                let request_line = head.lines().next().unwrap_or_default();
                let acquire =
                    request_line.starts_with("POST ") && request_line.contains("/acquire ");
                if outbound.write_all(&first[..n]).await.is_err() {
                    return;
                }
                if acquire && !dropped.swap(true, std::sync::atomic::Ordering::SeqCst) {
                    let (mut from_client, _to_client) = inbound.into_split();
                    let (mut from_app, mut to_app) = outbound.into_split();
                    // The rest of the request, if any, goes on; the
                    // first byte of the answer ends both connections.
                    let rest = tokio::spawn(async move {
                        let _ = tokio::io::copy(&mut from_client, &mut to_app).await;
                    });
                    let mut answer = [0u8; 1];
                    let _ = from_app.read(&mut answer).await;
                    rest.abort();
                    return;
                }
                let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
            });
        }
    });
    format!("http://127.0.0.1:{port}")
}

#[tokio::test]
async fn rate_does_not_take_permits_twice_when_an_answer_is_lost() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    // Five permits, refilled over ten minutes: none come back during the test.
    configure_rate(&app, "lost-answer", "5", "600000").await;
    let proxy = answer_dropping_proxy(&app).await;
    let ran = latchkey(&app, &["rate", "lost-answer", "--wait-ms", "1000"])
        .env("LATCHKEY_URL", &proxy)
        .output()
        .await
        .expect("latchkey runs");
    eprintln!("{:?}: {}", ran.status, String::from_utf8_lossy(&ran.stderr));
    // Exit 0 (the repeat was counted once) or a failure are both honest;
    // two permits taken for one `latchkey rate` are not.
    let state = app.get_json("/rate-limiters/lost-answer").await;
    assert_eq!(state["available"], 4, "one permit taken: {state}");
}

#[tokio::test]
async fn a_nested_lock_with_a_lease_of_its_own_runs_inside_a_session() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    // A script written for leases of its own, run in a session: its
    // explicit --lease-ms asks for a hold outside the session.
    let script = r#"echo "$LATCHKEY_SESSION"
"$LK" lock own-lease --lease-ms 5000 -- true"#;
    let (mut child, _id, _lines) = session_running(&app, &["--ttl-ms", "3000"], script).await;
    let status = tokio::time::timeout(Duration::from_secs(10), child.wait())
        .await
        .expect("the session's command ends")
        .unwrap();
    assert_eq!(status.code(), Some(0), "the nested lock ran its command");
}
