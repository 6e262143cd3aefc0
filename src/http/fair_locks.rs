//! `/fair-locks/{name}/...`: reentrant locks granted in order of arrival
//! (the book's "Fair locks" (docs/src/fair-locks.md)). The same operations
//! and bodies as `/locks`; a waiter's 409 and SSE `waiting` events carry
//! its `position`.

super::lock_family::lock_routes! {
    field: fair_locks,
    resource: "fair_lock",
    tag: "fair-locks",
    acquire: "/fair-locks/{name}/acquire",
    heartbeat: "/fair-locks/{name}/holders/{holder}/heartbeat",
    holder: "/fair-locks/{name}/holders/{holder}",
    object: "/fair-locks/{name}",
    conflict: "Held by another holder or others are queued ahead (`lock-held`), with `position` \
        (waiters ahead), `retry_after_ms` and `Retry-After`. A try (`wait_ms` 0) takes no place \
        in the queue; a long-poll keeps its place for the queue grace (default 5 s) after it \
        ends: poll again with the same `holder` within it, or leave with DELETE.",
    conflict_example: fair_lock_held,
    release: [
        "Release one hold (or every hold, with `?all=true`), or leave the queue.",
        "",
        "A holder that waits in the queue (its long-poll ended, and its place is kept for the \
        queue grace) leaves it at once: 200 with `left_queue: true`, `released: false`, and \
        nothing released; the next waiter is woken if it is now at the head. Leaving comes \
        first: a holder that both holds and waits keeps its holds (a second DELETE releases). \
        404 only for a holder that neither holds nor waits.",
    ],
    stream_example: "event: waiting\ndata: {\"retry_after_ms\":2500,\"position\":2}\n\nevent: waiting\ndata: {\"retry_after_ms\":2500,\"position\":1}\n\nevent: acquired\ndata: {\"name\":\"orders\",\"holder\":\"worker-1\",\"fencing_token\":43,\"hold_count\":1,\"lease_ms\":30000,\"expires_in_ms\":30000,\"heartbeat_interval_ms\":10000}\n\n",
}
