//! Property test: random operation sequences against an in-memory model of
//! a reentrant lock, run through HTTP on a real Redis. Deterministic seeds
//! (printed on failure) keep failures reproducible.

use serde_json::{Value, json};

use crate::helpers::*;

/// The model: who holds the lock, how often, with which token.
#[derive(Debug, Default)]
struct Model {
    held: Option<(usize, u64, u64)>,
    last_token: u64,
}

/// A small deterministic generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n
    }
}

const HOLDERS: [&str; 3] = ["alice", "bob", "carol"];

#[tokio::test]
async fn random_operation_sequences_match_the_model() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    for seed in [1u64, 0x5eed, 0xdead_beef] {
        let name = format!("model-{seed}");
        let mut rng = Rng(seed);
        let mut model = Model::default();
        for step in 0..150 {
            let who = rng.below(3) as usize;
            let holder = HOLDERS[who];
            let ctx = format!("seed {seed} step {step}");
            match rng.below(6) {
                0 | 1 => {
                    let r = app
                        .acquire(&name, json!({"holder": holder, "lease_ms": 60000}))
                        .await;
                    match &mut model.held {
                        None => {
                            assert_eq!(r.status(), 201, "{ctx}: free lock must be granted");
                            let g: Value = r.json().await.unwrap();
                            let token = g["fencing_token"].as_u64().unwrap();
                            assert!(token > model.last_token, "{ctx}: token must increase");
                            model.last_token = token;
                            model.held = Some((who, 1, token));
                            assert_eq!(g["hold_count"], 1, "{ctx}");
                        }
                        Some((owner, count, token)) if *owner == who => {
                            assert_eq!(r.status(), 201, "{ctx}: reentry");
                            let g: Value = r.json().await.unwrap();
                            *count += 1;
                            assert_eq!(g["hold_count"].as_u64(), Some(*count), "{ctx}");
                            assert_eq!(g["fencing_token"].as_u64(), Some(*token), "{ctx}");
                        }
                        Some(_) => assert_eq!(r.status(), 409, "{ctx}: held by another"),
                    }
                }
                2 => {
                    let all = rng.below(4) == 0;
                    let path = format!(
                        "/locks/{name}/holders/{holder}{}",
                        if all { "?all=true" } else { "" }
                    );
                    let r = app.client.delete(app.url(&path)).send().await.unwrap();
                    match &mut model.held {
                        Some((owner, count, _)) if *owner == who => {
                            assert_eq!(r.status(), 200, "{ctx}");
                            let body: Value = r.json().await.unwrap();
                            *count = if all { 0 } else { *count - 1 };
                            assert_eq!(body["hold_count"].as_u64(), Some(*count), "{ctx}");
                            assert_eq!(body["released"], json!(*count == 0), "{ctx}");
                            if *count == 0 {
                                model.held = None;
                            }
                        }
                        _ => assert_eq!(r.status(), 404, "{ctx}: release by a non-holder"),
                    }
                }
                3 => {
                    let r = app.heartbeat(&name, holder, json!({})).await;
                    let expected = if matches!(model.held, Some((owner, _, _)) if owner == who) {
                        200
                    } else {
                        404
                    };
                    assert_eq!(r.status(), expected, "{ctx}: heartbeat");
                }
                4 => {
                    if rng.below(3) == 0 {
                        let body: Value = app.delete_json(&format!("/locks/{name}")).await;
                        assert_eq!(
                            body["released"],
                            json!(model.held.is_some()),
                            "{ctx}: force"
                        );
                        model.held = None;
                    }
                }
                _ => {
                    let s = app.state(&name).await;
                    assert_eq!(s["locked"], json!(model.held.is_some()), "{ctx}: {s}");
                    assert_eq!(
                        s["hold_count"].as_u64(),
                        Some(model.held.map_or(0, |h| h.1)),
                        "{ctx}: {s}"
                    );
                    assert_eq!(
                        s["fencing_token"].as_u64(),
                        Some(model.last_token),
                        "{ctx}: {s}"
                    );
                }
            }
        }
    }
}
