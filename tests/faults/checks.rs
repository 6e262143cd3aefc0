//! The recorded history of a fault-injection run, and the checkers that
//! judge it. Every time is in ms since the run started, on the test's clock
//! (one machine: the same clock as Redis's). Each checker returns the
//! violations it found; the tests at the bottom plant a fault in a clean
//! history and watch each checker report it.

use std::collections::BTreeMap;

/// How a hold shares its object.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Mode {
    /// A lock, a fair lock, a write hold, a RedLock, a lock of a multi-lock set.
    Exclusive,
    /// A read hold.
    Shared,
    /// `k` permits of a semaphore.
    Permits(u64),
}

/// One grant, from the acquire's request to the end of the time it was
/// certainly valid: from its answer (`granted`) until the lease that the
/// last acknowledged acquire or heartbeat started ran out, counted from
/// when that request was sent (Redis started the lease after that), or the
/// release was sent, whichever came first.
#[derive(Debug, Clone)]
pub struct Hold {
    pub object: String,
    pub holder: String,
    pub mode: Mode,
    pub token: u64,
    /// When the holder first asked: the first request of its acquire. A
    /// retry with the same holder (after no answer, or a 503) may re-enter
    /// a hold an earlier request made unseen, and a re-entry keeps its
    /// token, so the real-time order of tokens starts from here.
    pub asked: f64,
    pub granted: f64,
    pub valid_until: f64,
}

/// One HTTP call and how long it took.
#[derive(Debug, Clone)]
pub struct Call {
    pub what: String,
    pub sent: f64,
    pub answered: f64,
    /// The HTTP status, if an answer came (a connection cut by a killed
    /// instance has none).
    pub status: Option<u16>,
    /// The wait the request asked for (0 for a request that does not wait).
    pub wait_ms: u64,
}

/// A write to the fenced resource a holder protects: rejected when a higher
/// token was already written.
#[derive(Debug, Clone)]
pub struct FencedWrite {
    pub object: String,
    pub holder: String,
    pub token: u64,
    pub at: f64,
    pub accepted: bool,
}

/// One waiter on a fair lock, from its first poll to its grant.
#[derive(Debug, Clone)]
pub struct FairWaiter {
    pub object: String,
    pub holder: String,
    pub first_sent: f64,
    /// When a 409 first told it its place (it was queued from then on).
    pub queued: Option<f64>,
    /// Until when it certainly kept its place: every poll answered (409 or
    /// 201) and the next one sent well within the queue grace.
    pub kept_until: f64,
    /// (sent, answered) of the poll that granted it.
    pub granted: Option<(f64, f64)>,
}

/// A time during which an idle prober's object (a fair lock, rwlock or
/// semaphore that one client alone uses) may not have been idle: one of
/// that client's holders may have held it, or kept a place in its queue,
/// from `from` (the request's sending) until `until` (when that certainly
/// ended: an answered release or leave, else the lease or the queue grace
/// after the last answer, and for a request without a definite answer a
/// Redis freeze more).
#[derive(Debug, Clone)]
pub struct Busy {
    pub object: String,
    pub from: f64,
    pub until: f64,
}

/// When one owner label may have held an object: from its holder's first
/// request on it until that holder's last answered request plus the lease
/// it asked for and the longest Redis freeze the nemesis makes (a request
/// without a definite answer may still run after it).
#[derive(Debug, Clone)]
pub struct MayHold {
    pub object: String,
    pub owner: String,
    pub from: f64,
    pub until: f64,
}

/// A refusal (a 409, or an SSE `waiting` event) and the owners it said
/// hold what blocks it.
#[derive(Debug, Clone)]
pub struct Refused {
    /// Every object the request named (several for a multi-lock).
    pub objects: Vec<String>,
    pub sent: f64,
    pub answered: f64,
    /// `None` when the refusal said nothing of who holds.
    pub held_by: Option<Vec<Option<String>>>,
}

/// A try (`wait_ms` 0) of an idle prober on its object, with a definite
/// answer: granted (201) or refused (409).
#[derive(Debug, Clone)]
pub struct IdleProbe {
    pub object: String,
    pub sent: f64,
    pub answered: f64,
    pub granted: bool,
    /// What a refusal said of its cause (its problem type and detail,
    /// `held_by`, `position`, `retry_after_ms`), shown with a violation.
    pub said: String,
}

/// One round of a latch: set to `count`, counted down with `count`
/// distinct idempotency keys, each sent several times.
#[derive(Debug, Clone, Default)]
pub struct LatchRound {
    pub object: String,
    /// When the key of the last count-down was first sent.
    pub last_key_sent: f64,
    /// When a count-down of the last key was first acknowledged (from then
    /// on the latch was certainly open).
    pub opened: f64,
    /// The count read once every key but the last was acknowledged (each
    /// sent several times): 1 if each key counted once.
    pub count_before_last: Option<u64>,
    /// Every wait's (sent, answered, open) of the round's waiters.
    pub waits: Vec<(f64, f64, bool)>,
}

/// A crashed holder's permits: when they were certainly back (its lease
/// ran out, counted from its acquire's answer) and when another holder got
/// them, with the time Redis or the prober's instance was down meanwhile.
#[derive(Debug, Clone)]
pub struct PermitsBack {
    pub object: String,
    pub expired_by: f64,
    pub regained: f64,
    pub excused_ms: f64,
}

/// One admission by a rate limiter: when its request was sent (the first
/// one, for an `Idempotency-Key` sent several times) and when an answer
/// said it was admitted. Redis admitted it in between.
#[derive(Debug, Clone)]
pub struct RateGrant {
    pub permits: u64,
    pub sent: f64,
    pub answered: f64,
}

/// A rate limiter's configuration.
#[derive(Debug, Clone, Copy)]
pub struct RateLimit {
    pub rate: u64,
    pub per_ms: u64,
    pub burst: u64,
}

/// How a session heartbeat was answered, as its client saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BeatOutcome {
    /// 200, every hold of the session renewed.
    Renewed,
    /// 200 with fewer holds: it ran, and some hold was lost.
    Partial,
    /// 404: the session was gone; it did not run.
    Gone,
    /// No answer, or 503: it may have run (and changed the TTL).
    Unknown,
}

/// One session heartbeat: when it was sent, the TTL it set, its outcome.
#[derive(Debug, Clone, Copy)]
pub struct Beat {
    pub sent: f64,
    pub ttl_ms: f64,
    pub outcome: BeatOutcome,
}

/// Until when a session's holds are certainly valid after a round of
/// heartbeats sent at once (through several instances, each maybe with its
/// own TTL), given `before`, what was certain until then. Any beat that may
/// have run may have been the last (its TTL then is the session's, shorter
/// or longer), so the holds certainly last until the earliest `sent + ttl`
/// among them. A round with a beat that renewed every hold proves the
/// session and its holds alive when it ran, so that bound stands on its
/// own (it may lie past `before`); otherwise the round can only have cut
/// the validity short.
pub fn session_valid_until(before: f64, beats: &[Beat]) -> f64 {
    let ends = beats
        .iter()
        .filter(|b| b.outcome != BeatOutcome::Gone)
        .map(|b| b.sent + b.ttl_ms)
        .fold(f64::INFINITY, f64::min);
    if beats.iter().any(|b| b.outcome == BeatOutcome::Renewed) {
        ends
    } else {
        before.min(ends)
    }
}

fn overlap(a: &Hold, b: &Hold) -> bool {
    a.granted < b.valid_until && b.granted < a.valid_until
}

/// No two certainly-valid holds of one object at once by different holders,
/// unless both are read holds.
pub fn exclusive_holds(holds: &[Hold]) -> Vec<String> {
    let mut violations = Vec::new();
    for (object, holds) in by_object(holds) {
        for (i, a) in holds.iter().enumerate() {
            for b in &holds[i + 1..] {
                let both_shared = a.mode == Mode::Shared && b.mode == Mode::Shared;
                let permits = matches!(a.mode, Mode::Permits(_));
                if a.holder != b.holder && !both_shared && !permits && overlap(a, b) {
                    violations.push(format!(
                        "{object}: {} ({:?}, token {}) held {:.0}..{:.0} while {} ({:?}, token {}) held {:.0}..{:.0}",
                        a.holder, a.mode, a.token, a.granted, a.valid_until,
                        b.holder, b.mode, b.token, b.granted, b.valid_until
                    ));
                }
            }
        }
    }
    violations
}

/// Fencing tokens strictly increase in real-time order: a grant answered
/// before another holder first asked has the lower token.
pub fn fencing_order(holds: &[Hold]) -> Vec<String> {
    let mut violations = Vec::new();
    for (object, holds) in by_object(holds) {
        for a in &holds {
            for b in &holds {
                if a.holder != b.holder && a.granted < b.asked && a.token >= b.token {
                    violations.push(format!(
                        "{object}: {} got token {} at {:.0}, then {} asked at {:.0} and got token {}",
                        a.holder, a.token, a.granted, b.holder, b.asked, b.token
                    ));
                }
            }
        }
    }
    violations
}

/// A semaphore's certainly-valid permits never add up past its permits.
pub fn permits_within(holds: &[Hold], permits: u64) -> Vec<String> {
    let mut violations = Vec::new();
    for (object, holds) in by_object(holds) {
        let mut edges: Vec<(f64, i64)> = Vec::new();
        for h in &holds {
            if let (Mode::Permits(k), true) = (h.mode, h.granted < h.valid_until) {
                edges.push((h.granted, k as i64));
                edges.push((h.valid_until, -(k as i64)));
            }
        }
        // Ends before starts at the same instant.
        edges.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        let mut used = 0;
        for (at, delta) in edges {
            used += delta;
            if used > permits as i64 {
                violations.push(format!(
                    "{object}: {used} permits certainly held at {at:.0}, of {permits}"
                ));
                break;
            }
        }
    }
    violations
}

/// A crashed holder's permits are back within its lease + `slack_ms`, not
/// counting the time Redis or an instance was down.
pub fn permits_come_back(records: &[PermitsBack], slack_ms: f64) -> Vec<String> {
    records
        .iter()
        .filter(|r| r.regained > r.expired_by + slack_ms + r.excused_ms)
        .map(|r| {
            format!(
                "{}: a crashed holder's permits were back by {:.0} but regained only at {:.0} ({:.0} ms excused)",
                r.object, r.expired_by, r.regained, r.excused_ms
            )
        })
        .collect()
}

/// A write rejected by the fenced resource while its hold was certainly
/// valid means a higher token was granted during that hold.
pub fn fenced_writes(writes: &[FencedWrite], holds: &[Hold]) -> Vec<String> {
    writes
        .iter()
        .filter(|w| !w.accepted)
        .filter(|w| {
            holds.iter().any(|h| {
                h.object == w.object
                    && h.holder == w.holder
                    && h.token == w.token
                    && h.granted <= w.at
                    && w.at < h.valid_until
            })
        })
        .map(|w| {
            format!(
                "{}: {} wrote with token {} at {:.0} while certainly holding, and a higher token had been written",
                w.object, w.holder, w.token, w.at
            )
        })
        .collect()
}

/// A fair lock never grants a waiter that arrived after another was queued
/// while that one still kept its place.
pub fn fair_no_barging(waiters: &[FairWaiter]) -> Vec<String> {
    let mut violations = Vec::new();
    for a in waiters {
        let Some(queued) = a.queued else { continue };
        for b in waiters {
            let Some((_, b_answered)) = b.granted else {
                continue;
            };
            if a.object == b.object
                && a.holder != b.holder
                && b.first_sent > queued
                && b_answered < a.kept_until
            {
                violations.push(format!(
                    "{}: {} arrived at {:.0}, after {} was queued at {:.0}, and was granted by {:.0} while {} kept its place until {:.0}",
                    a.object, b.holder, b.first_sent, a.holder, queued, b_answered, a.holder, a.kept_until
                ));
            }
        }
    }
    violations
}

/// No idle queue: whenever a queued primitive is free and no live waiter
/// keeps a place, a try is granted. A try refused while none of its
/// object's [`Busy`] times overlaps it (a refused try keeps nothing, so it
/// makes none) means that something nobody holds or waits for blocked it:
/// a place taken by a try, a place kept after its waiter left, or a place
/// that outlived its grace.
pub fn no_idle_queue(busy: &[Busy], probes: &[IdleProbe]) -> Vec<String> {
    probes
        .iter()
        .filter(|p| !p.granted)
        .filter(|p| {
            !busy
                .iter()
                .any(|b| b.object == p.object && b.from < p.answered && p.sent < b.until)
        })
        .map(|p| {
            // The object's busy times that ended in the 5 s before: what
            // the refusal may have been taken for.
            let before: Vec<String> = (busy.iter())
                .filter(|b| b.object == p.object && b.until <= p.sent && b.until > p.sent - 5000.0)
                .map(|b| format!("{:.0}..{:.0}", b.from, b.until))
                .collect();
            format!(
                "{}: a try sent at {:.0} was refused (answered {:.0}) while nothing held it and no waiter kept a place; it said {}; busy before it: [{}]",
                p.object,
                p.sent,
                p.answered,
                p.said,
                before.join(", ")
            )
        })
        .collect()
}

/// A refusal's `held_by` names only owners that could hold one of the
/// request's objects while it ran: each entry is the label of a holder that
/// may have held that object at some time between the request's sending and
/// its answer. Every worker labels its holds, so an empty label (`null`) is
/// a violation too.
pub fn held_by_could_hold(may_hold: &[MayHold], refusals: &[Refused]) -> Vec<String> {
    let mut violations = Vec::new();
    for r in refusals {
        let Some(held_by) = &r.held_by else {
            violations.push(format!(
                "{:?}: a refusal answered at {:.0} does not say who holds (no held_by)",
                r.objects, r.answered
            ));
            continue;
        };
        for entry in held_by {
            let Some(owner) = entry else {
                violations.push(format!(
                    "{:?}: a refusal answered at {:.0} names a hold without an owner label",
                    r.objects, r.answered
                ));
                continue;
            };
            let could = may_hold.iter().any(|m| {
                &m.owner == owner
                    && r.objects.contains(&m.object)
                    && m.from < r.answered
                    && r.sent < m.until
            });
            if !could {
                violations.push(format!(
                    "{:?}: a refusal sent at {:.0} (answered {:.0}) names {owner:?}, which could not hold it then",
                    r.objects, r.sent, r.answered
                ));
            }
        }
    }
    violations
}

/// Latches: no waiter released before the count-down that opened the latch
/// was sent; repeated count-downs with one key counted once; no wait that
/// was open when the latch opened ended closed later than `wake_slack_ms`
/// after it opened (a lost wake-up), and none that began after it opened
/// answered closed.
pub fn latch_rounds(rounds: &[LatchRound], wake_slack_ms: f64) -> Vec<String> {
    let mut violations = Vec::new();
    for r in rounds {
        if r.count_before_last != Some(1) {
            violations.push(format!(
                "{}: count {:?} after every key but the last was sent (several times each); expected 1",
                r.object, r.count_before_last
            ));
        }
        for &(sent, answered, open) in &r.waits {
            if open && answered < r.last_key_sent {
                violations.push(format!(
                    "{}: a waiter was released at {answered:.0}, before the last count-down was sent at {:.0}",
                    r.object, r.last_key_sent
                ));
            }
            if !open && sent > r.opened {
                violations.push(format!(
                    "{}: a wait sent at {sent:.0}, after the latch opened at {:.0}, answered closed",
                    r.object, r.opened
                ));
            } else if !open && answered > r.opened + wake_slack_ms {
                violations.push(format!(
                    "{}: a wait (sent {sent:.0}) answered closed at {answered:.0}, though the latch opened at {:.0}: a lost wake-up",
                    r.object, r.opened
                ));
            }
        }
    }
    violations
}

/// A rate limiter never admitted more than `burst + rate × t / per_ms`
/// permits in a window of length t. Sound under any reply timing: the
/// admissions certainly inside a window `[from, to]` are those whose
/// request was sent at or after `from` and answered by `to`; every window
/// from a sending to an answer is checked.
pub fn rate_within(grants: &[RateGrant], limit: RateLimit) -> Vec<String> {
    let mut by_sent: Vec<&RateGrant> = grants.iter().collect();
    by_sent.sort_by(|a, b| a.sent.total_cmp(&b.sent));
    let mut violations = Vec::new();
    for (i, first) in by_sent.iter().enumerate() {
        let from = first.sent;
        let mut later: Vec<&RateGrant> = by_sent[i..].to_vec();
        later.sort_by(|a, b| a.answered.total_cmp(&b.answered));
        let mut inside = 0;
        for g in later {
            inside += g.permits;
            let allowed = limit.burst as f64
                + limit.rate as f64 * (g.answered - from).max(0.0) / limit.per_ms as f64;
            if inside as f64 > allowed + 1e-9 {
                violations.push(format!(
                    "{inside} permits admitted within [{from:.1}, {:.1}] ms; at most {allowed:.2} may be",
                    g.answered
                ));
                break;
            }
        }
    }
    violations
}

/// Every answer came by its deadline: a wait by `wait_ms` plus the last
/// re-check (100 ms), a request that does not wait within the Redis response
/// timeout, each plus `slack_ms`.
pub fn deadlines(calls: &[Call], response_timeout_ms: f64, slack_ms: f64) -> Vec<String> {
    calls
        .iter()
        .filter(|c| c.status.is_some())
        .filter(|c| {
            let bound = (c.wait_ms as f64 + 100.0).max(response_timeout_ms) + slack_ms;
            c.answered - c.sent > bound
        })
        .map(|c| {
            format!(
                "{} (wait_ms {}) answered {:?} after {:.0} ms (sent at {:.0})",
                c.what,
                c.wait_ms,
                c.status,
                c.answered - c.sent,
                c.sent
            )
        })
        .collect()
}

/// No 5xx but the documented 503s, and nothing else unexpected.
pub fn statuses(calls: &[Call]) -> Vec<String> {
    calls
        .iter()
        .filter(|c| matches!(c.status, Some(s) if s >= 500 && s != 503))
        .map(|c| format!("{} answered {:?} at {:.0}", c.what, c.status, c.answered))
        .collect()
}

fn by_object(holds: &[Hold]) -> BTreeMap<String, Vec<Hold>> {
    let mut map: BTreeMap<String, Vec<Hold>> = BTreeMap::new();
    for h in holds {
        map.entry(h.object.clone()).or_default().push(h.clone());
    }
    map
}

#[cfg(test)]
mod planted {
    //! Each checker on a clean history, then on the same history with one
    //! fault planted: it must pass the first and report the second.

    use super::*;

    fn hold(holder: &str, mode: Mode, token: u64, asked: f64, granted: f64, until: f64) -> Hold {
        Hold {
            object: "x".into(),
            holder: holder.into(),
            mode,
            token,
            asked,
            granted,
            valid_until: until,
        }
    }

    #[test]
    fn owners_that_could_not_hold_and_unlabelled_holds_are_reported() {
        let may_hold = [
            MayHold {
                object: "x".into(),
                owner: "web-1".into(),
                from: 0.0,
                until: 100.0,
            },
            MayHold {
                object: "y".into(),
                owner: "web-2".into(),
                from: 50.0,
                until: 300.0,
            },
        ];
        let refused = |objects: &[&str], sent, answered, held_by: &[Option<&str>]| Refused {
            objects: objects.iter().map(|o| o.to_string()).collect(),
            sent,
            answered,
            held_by: Some(held_by.iter().map(|o| o.map(String::from)).collect()),
        };
        let clean = [
            refused(&["x"], 90.0, 95.0, &[Some("web-1")]),
            refused(&["x", "y"], 150.0, 160.0, &[Some("web-2")]),
            refused(&["x"], 200.0, 210.0, &[]),
        ];
        assert_eq!(held_by_could_hold(&may_hold, &clean), Vec::<String>::new());
        let planted = [
            // web-1's last request could not hold x any more by then.
            refused(&["x"], 150.0, 160.0, &[Some("web-1")]),
            // web-2 held y, never x.
            refused(&["x"], 60.0, 70.0, &[Some("web-2")]),
            // Every worker labels its holds.
            refused(&["x"], 60.0, 70.0, &[None]),
            // A refusal must say who holds.
            Refused {
                held_by: None,
                ..refused(&["x"], 60.0, 70.0, &[])
            },
        ];
        for p in &planted {
            assert_eq!(
                held_by_could_hold(&may_hold, std::slice::from_ref(p)).len(),
                1,
                "{p:?}"
            );
        }
    }

    #[test]
    fn overlapping_exclusive_holds_are_reported() {
        let clean = [
            hold("a", Mode::Exclusive, 1, 0.0, 5.0, 100.0),
            hold("b", Mode::Exclusive, 2, 50.0, 120.0, 200.0),
            hold("r1", Mode::Shared, 3, 200.0, 210.0, 300.0),
            hold("r2", Mode::Shared, 4, 205.0, 215.0, 300.0),
        ];
        assert_eq!(exclusive_holds(&clean), Vec::<String>::new());
        let mut planted = clean.to_vec();
        planted.push(hold("w", Mode::Exclusive, 5, 250.0, 260.0, 400.0));
        assert_eq!(
            exclusive_holds(&planted).len(),
            2,
            "the writer overlaps both readers"
        );
    }

    /// A session's holds (one holder, several objects) are valid until
    /// the TTL after the session's last full heartbeat: another holder
    /// granted one of them before then is reported, after then is not.
    #[test]
    fn a_session_hold_overlapping_another_holders_is_reported() {
        let in_session = |object: &str, mode: Mode, token: u64| Hold {
            object: object.into(),
            ..hold("f-sess-1", mode, token, 0.0, 5.0, 1000.0)
        };
        let session = [
            in_session("x", Mode::Exclusive, 1),
            in_session("s", Mode::Permits(1), 1),
        ];
        let after = |object: &str, mode: Mode, granted: f64| Hold {
            object: object.into(),
            ..hold("other", mode, 2, granted - 10.0, granted, granted + 500.0)
        };
        let mut clean = session.to_vec();
        clean.push(after("x", Mode::Exclusive, 1100.0));
        clean.push(after("s", Mode::Permits(1), 900.0));
        assert_eq!(exclusive_holds(&clean), Vec::<String>::new());
        assert_eq!(fencing_order(&clean), Vec::<String>::new());
        assert_eq!(permits_within(&clean, 2), Vec::<String>::new());
        let mut planted = session.to_vec();
        planted.push(after("x", Mode::Exclusive, 900.0));
        planted.push(after("s", Mode::Permits(2), 900.0));
        assert_eq!(exclusive_holds(&planted).len(), 1);
        assert_eq!(permits_within(&planted, 2).len(), 1);
    }

    /// A session whose TTL is cut short by one of two heartbeats sent at
    /// once through two instances: its holds are certainly valid only
    /// until the shorter TTL runs out from that heartbeat's sending, so
    /// another holder granted after that is no violation (though the
    /// longer TTL would still run), and one granted before it is.
    #[test]
    fn a_shortened_sessions_hold_overlapping_another_holders_is_reported() {
        let beat = |sent: f64, ttl_ms: f64, outcome: BeatOutcome| Beat {
            sent,
            ttl_ms,
            outcome,
        };
        // Created at 0 with a TTL of 1000; at 300 and 310 two heartbeats
        // at once, one keeping a long TTL, one cutting it to 400.
        let overlapping = [
            beat(300.0, 1500.0, BeatOutcome::Renewed),
            beat(310.0, 400.0, BeatOutcome::Renewed),
        ];
        let until = session_valid_until(1000.0, &overlapping);
        assert_eq!(until, 710.0);
        // A later round renews again: the bound stands on its own.
        assert_eq!(
            session_valid_until(until, &[beat(600.0, 1500.0, BeatOutcome::Renewed)]),
            2100.0
        );
        // A round that failed may still have cut the TTL, never extended it.
        let failed = [
            beat(600.0, 300.0, BeatOutcome::Unknown),
            beat(600.0, 1500.0, BeatOutcome::Gone),
        ];
        assert_eq!(session_valid_until(until, &failed), 710.0);
        assert_eq!(session_valid_until(2000.0, &failed), 900.0);

        let in_session = Hold {
            object: "x".into(),
            ..hold("f-sess-1", Mode::Exclusive, 1, 0.0, 5.0, until)
        };
        let other = |granted: f64| {
            hold(
                "other",
                Mode::Exclusive,
                2,
                granted - 10.0,
                granted,
                granted + 500.0,
            )
        };
        let clean = [in_session.clone(), other(750.0)];
        assert_eq!(exclusive_holds(&clean), Vec::<String>::new());
        assert_eq!(fencing_order(&clean), Vec::<String>::new());
        let planted = [in_session, other(650.0)];
        assert_eq!(exclusive_holds(&planted).len(), 1);
    }

    #[test]
    fn tokens_out_of_real_time_order_are_reported() {
        let clean = [
            hold("a", Mode::Exclusive, 1, 0.0, 5.0, 100.0),
            hold("b", Mode::Exclusive, 2, 50.0, 120.0, 200.0),
            // Concurrent requests may be granted in either order.
            hold("c", Mode::Shared, 4, 300.0, 320.0, 400.0),
            hold("d", Mode::Shared, 3, 301.0, 321.0, 400.0),
            // f first asked before c's grant; its answer came from a retry
            // (sent at 350) re-entering the hold its first request made.
            hold("f", Mode::Shared, 3, 310.0, 360.0, 400.0),
        ];
        assert_eq!(fencing_order(&clean), Vec::<String>::new());
        let mut planted = clean.to_vec();
        planted.push(hold("e", Mode::Exclusive, 2, 500.0, 510.0, 600.0));
        assert!(!fencing_order(&planted).is_empty());
    }

    #[test]
    fn permits_past_the_limit_are_reported() {
        let clean = [
            hold("a", Mode::Permits(2), 1, 0.0, 5.0, 100.0),
            hold("b", Mode::Permits(1), 2, 0.0, 6.0, 100.0),
            hold("c", Mode::Permits(1), 3, 90.0, 100.0, 200.0),
        ];
        assert_eq!(permits_within(&clean, 3), Vec::<String>::new());
        let mut planted = clean.to_vec();
        planted.push(hold("d", Mode::Permits(1), 4, 40.0, 50.0, 60.0));
        assert_eq!(permits_within(&planted, 3).len(), 1);
    }

    #[test]
    fn permits_that_come_back_late_are_reported() {
        let on_time = PermitsBack {
            object: "s".into(),
            expired_by: 1000.0,
            regained: 1800.0,
            excused_ms: 0.0,
        };
        let excused = PermitsBack {
            regained: 4000.0,
            excused_ms: 2500.0,
            ..on_time.clone()
        };
        assert_eq!(
            permits_come_back(&[on_time.clone(), excused], 1000.0),
            Vec::<String>::new()
        );
        let late = PermitsBack {
            regained: 2100.0,
            ..on_time
        };
        assert_eq!(permits_come_back(&[late], 1000.0).len(), 1);
    }

    #[test]
    fn a_stale_write_during_a_valid_hold_is_reported() {
        let holds = [hold("a", Mode::Exclusive, 1, 0.0, 5.0, 100.0)];
        let write = |at: f64, accepted: bool| FencedWrite {
            object: "x".into(),
            holder: "a".into(),
            token: 1,
            at,
            accepted,
        };
        // Rejected after its hold ended: fencing doing its job.
        assert_eq!(
            fenced_writes(&[write(10.0, true), write(150.0, false)], &holds),
            Vec::<String>::new()
        );
        assert_eq!(fenced_writes(&[write(50.0, false)], &holds).len(), 1);
    }

    #[test]
    fn a_later_waiter_granted_first_is_reported() {
        let a = FairWaiter {
            object: "f".into(),
            holder: "a".into(),
            first_sent: 0.0,
            queued: Some(10.0),
            kept_until: 500.0,
            granted: Some((500.0, 510.0)),
        };
        let b_after = FairWaiter {
            holder: "b".into(),
            first_sent: 20.0,
            queued: Some(30.0),
            kept_until: 600.0,
            granted: Some((600.0, 610.0)),
            ..a.clone()
        };
        // A waiter that arrived before `a` was queued may go first.
        let c_before = FairWaiter {
            holder: "c".into(),
            first_sent: 5.0,
            queued: None,
            kept_until: 5.0,
            granted: Some((5.0, 300.0)),
            ..a.clone()
        };
        assert_eq!(
            fair_no_barging(&[a.clone(), b_after.clone(), c_before]),
            Vec::<String>::new()
        );
        let barging = FairWaiter {
            granted: Some((400.0, 450.0)),
            ..b_after
        };
        assert_eq!(fair_no_barging(&[a, barging]).len(), 1);
    }

    #[test]
    fn a_try_granted_while_an_earlier_waiter_keeps_its_place_is_reported() {
        let queued = FairWaiter {
            object: "f".into(),
            holder: "a".into(),
            first_sent: 0.0,
            queued: Some(10.0),
            kept_until: 500.0,
            granted: None,
        };
        // A try arrives (and is granted) only when it is sent: after the
        // place of `a` was taken, it must not go first.
        let try_after = FairWaiter {
            holder: "t".into(),
            first_sent: 100.0,
            queued: None,
            kept_until: 100.0,
            granted: Some((100.0, 105.0)),
            ..queued.clone()
        };
        assert_eq!(
            fair_no_barging(&[queued.clone(), try_after.clone()]).len(),
            1
        );
        // Once that place is no longer certainly kept, a try may go.
        let try_later = FairWaiter {
            first_sent: 600.0,
            granted: Some((600.0, 605.0)),
            ..try_after
        };
        assert_eq!(fair_no_barging(&[queued, try_later]), Vec::<String>::new());
    }

    #[test]
    fn a_try_refused_while_nothing_is_held_or_queued_is_reported() {
        let busy = |from: f64, until: f64| Busy {
            object: "q".into(),
            from,
            until,
        };
        let busy = [busy(0.0, 100.0), busy(300.0, 400.0)];
        let probe = |object: &str, sent: f64, answered: f64, granted: bool| IdleProbe {
            object: object.into(),
            sent,
            answered,
            granted,
            said: String::new(),
        };
        let clean = [
            // Refused while something was held or queued.
            probe("q", 50.0, 60.0, false),
            probe("q", 390.0, 410.0, false),
            probe("q", 250.0, 310.0, false),
            // Granted while idle.
            probe("q", 150.0, 160.0, true),
        ];
        assert_eq!(no_idle_queue(&busy, &clean), Vec::<String>::new());
        for planted in [
            probe("q", 150.0, 160.0, false),
            probe("q", 400.0, 450.0, false),
            // Another object's busy time excuses nothing.
            probe("other", 50.0, 60.0, false),
        ] {
            let mut history = clean.to_vec();
            history.push(planted.clone());
            assert_eq!(no_idle_queue(&busy, &history).len(), 1, "{planted:?}");
        }
    }

    #[test]
    fn latch_faults_are_reported() {
        let clean = LatchRound {
            object: "l".into(),
            last_key_sent: 100.0,
            opened: 110.0,
            count_before_last: Some(1),
            waits: vec![
                (0.0, 50.0, false),
                (50.0, 112.0, true),
                (120.0, 121.0, true),
            ],
        };
        assert_eq!(
            latch_rounds(std::slice::from_ref(&clean), 500.0),
            Vec::<String>::new()
        );
        let early = LatchRound {
            waits: vec![(50.0, 90.0, true)],
            ..clean.clone()
        };
        let counted_twice = LatchRound {
            count_before_last: Some(0),
            ..clean.clone()
        };
        let lost_wake_up = LatchRound {
            waits: vec![(50.0, 2050.0, false)],
            ..clean.clone()
        };
        let stale = LatchRound {
            waits: vec![(200.0, 201.0, false)],
            ..clean
        };
        for planted in [early, counted_twice, lost_wake_up, stale] {
            assert_eq!(
                latch_rounds(std::slice::from_ref(&planted), 500.0).len(),
                1,
                "{planted:?}"
            );
        }
    }

    #[test]
    fn admissions_past_the_rate_are_reported() {
        let limit = RateLimit {
            rate: 10,
            per_ms: 1000,
            burst: 2,
        };
        let grant = |sent: f64, answered: f64| RateGrant {
            permits: 1,
            sent,
            answered,
        };
        // The burst at once, then one every 100 ms.
        let mut clean = vec![grant(0.0, 1.0), grant(0.0, 1.0)];
        clean.extend((1..=10).map(|k| grant(100.0 * k as f64 - 1.0, 100.0 * k as f64 + 1.0)));
        assert_eq!(rate_within(&clean, limit), Vec::<String>::new());
        let mut one_more = clean.clone();
        one_more.push(grant(500.0, 501.0));
        let mut over_the_burst = clean.clone();
        over_the_burst.push(grant(0.0, 1.0));
        let mut larger = clean;
        larger[5].permits = 2;
        for planted in [one_more, over_the_burst, larger] {
            assert!(!rate_within(&planted, limit).is_empty(), "{planted:?}");
        }
    }

    /// What `rate_stall_loop` looks for: a waiter admitted late, after a
    /// Redis stall across its reserved time, whose permits a background
    /// give-back then returns to the limiter, where they are taken again.
    #[test]
    fn permits_given_back_after_a_stalled_waiter_was_admitted_are_reported() {
        // 20 a second (one every 50 ms), 160 at once (8 s).
        let limit = RateLimit {
            rate: 20,
            per_ms: 1000,
            burst: 160,
        };
        let grant = |permits: u64, sent: f64, answered: f64| RateGrant {
            permits,
            sent,
            answered,
        };
        // All 160 at 0 ms; a waiter for 6, due at 300 ms, answered only at
        // 3000 ms (Redis paused from 100 to 2900 ms); at 6000 ms every
        // permit available is taken: 5700 ms' worth, 114.
        let clean = vec![
            grant(160, 0.0, 1.0),
            grant(6, 2.0, 3000.0),
            grant(114, 6000.0, 6001.0),
        ];
        assert_eq!(rate_within(&clean, limit), Vec::<String>::new());
        // The waiter's 6 permits given back after its answer: 120 then.
        let mut given_back = clean;
        given_back[2].permits = 120;
        assert!(!rate_within(&given_back, limit).is_empty());
    }

    #[test]
    fn late_answers_and_5xx_are_reported() {
        let call = |wait_ms: u64, took: f64, status: u16| Call {
            what: "op".into(),
            sent: 0.0,
            answered: took,
            status: Some(status),
            wait_ms,
        };
        let clean = [
            call(0, 900.0, 200),
            call(2000, 2300.0, 409),
            call(0, 1400.0, 503),
        ];
        assert_eq!(deadlines(&clean, 1000.0, 500.0), Vec::<String>::new());
        assert_eq!(statuses(&clean), Vec::<String>::new());
        assert_eq!(deadlines(&[call(0, 1600.0, 503)], 1000.0, 500.0).len(), 1);
        assert_eq!(
            deadlines(&[call(2000, 2700.0, 409)], 1000.0, 500.0).len(),
            1
        );
        assert_eq!(statuses(&[call(0, 10.0, 500)]).len(), 1);
    }
}
