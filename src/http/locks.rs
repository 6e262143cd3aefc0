//! `/locks/{name}/...`: reentrant locks, not fair (the book's "Locks"
//! (docs/src/locks.md)).

super::lock_family::lock_routes! {
    field: locks,
    resource: "lock",
    tag: "locks",
    acquire: "/locks/{name}/acquire",
    heartbeat: "/locks/{name}/holders/{holder}/heartbeat",
    holder: "/locks/{name}/holders/{holder}",
    object: "/locks/{name}",
    conflict: "Held by another holder (`lock-held`), with `retry_after_ms` and `Retry-After`.",
    conflict_example: lock_held,
    release: ["Release one hold (or every hold, with `?all=true`)."],
    stream_example: "event: waiting\ndata: {\"retry_after_ms\":2500}\n\nevent: acquired\ndata: {\"name\":\"orders\",\"holder\":\"worker-1\",\"fencing_token\":43,\"hold_count\":1,\"lease_ms\":30000,\"expires_in_ms\":30000,\"heartbeat_interval_ms\":10000}\n\n",
}
