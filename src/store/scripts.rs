//! The Lua scripts, built from the files under `scripts/` at build time.
//!
//! Each script is one atomic state change (or one consistent read). They
//! are loaded into Redis at start, as function libraries called by
//! `FCALL` ([`library`]) where Redis allows functions, else into its
//! script cache and invoked by `EVALSHA`; the store loads one again and
//! retries when Redis lacks it (after a restart without persistence,
//! `FUNCTION FLUSH` or `SCRIPT FLUSH`).
//!
//! The files never name the publishing command: they call
//! `redis.call(PUBLISH, channel, message)`, and each script is built twice,
//! behind a one-line prelude that sets `PUBLISH` ([`Publish`]). Standalone
//! and Sentinel deployments run the `PUBLISH` variant; a Redis Cluster runs
//! the `SPUBLISH` one, so a message stays on the shard that owns its
//! channel's slot (every channel shares its object's hash tag, so that is
//! the shard the script runs on) instead of being broadcast to every node.
//!
//! What Redis runs leaves out the shared functions the script never calls
//! ([`unused`]): Lua defines every top-level function on every call.
//!
//! Each script is also a Redis function library ([`library`]), which
//! defines its functions once, when it is loaded: where Redis allows
//! functions (Redis 7, and a user that may `FCALL` and `FUNCTION LOAD`),
//! the store calls the library's function instead of the script.

use std::sync::LazyLock;

pub mod library;
mod unused;

pub use library::Library;

/// Which publishing command a script's `PUBLISH` stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Publish {
    /// `PUBLISH`: classic pub/sub (standalone, Sentinel).
    Classic,
    /// `SPUBLISH`: sharded pub/sub (Redis Cluster, Redis 7 or later).
    Sharded,
}

impl Publish {
    fn prelude(self) -> &'static str {
        // A top-level `local`: Redis 7 forbids scripts to make globals.
        match self {
            Publish::Classic => "local PUBLISH = 'PUBLISH'\n",
            Publish::Sharded => "local PUBLISH = 'SPUBLISH'\n",
        }
    }
}

/// A named Lua script, in both [`Publish`] variants.
pub struct Script {
    name: &'static str,
    /// The files, joined (without the prelude).
    body: &'static str,
    classic: Variant,
    sharded: Variant,
}

struct Variant {
    source: String,
    script: redis::Script,
    library: Library,
}

impl Variant {
    fn new(publish: Publish, body: &str, flags: &[&str]) -> Self {
        let source = format!(
            "{}{}",
            publish.prelude(),
            unused::without_unused_functions(body)
        );
        Variant {
            script: redis::Script::new(&source),
            library: library::library(&source, flags),
            source,
        }
    }
}

/// The commands a script may call and still be a read (Redis's
/// `no-writes` flag for its function).
const READS: &[&str] = &[
    "EXISTS",
    "GET",
    "HEXISTS",
    "HGET",
    "HGETALL",
    "HLEN",
    "HMGET",
    "PEXPIRETIME",
    "PTTL",
    "TIME",
    "ZCARD",
    "ZCOUNT",
    "ZRANGE",
    "ZRANGEBYSCORE",
    "ZRANK",
    "ZSCORE",
];

/// Whether every `redis.call` in `source` (what Redis runs) names a
/// command of [`READS`]: then the script only reads, and its function is
/// flagged `no-writes`, which Redis runs where it refuses writes (out of
/// memory, too few replicas, a failed save). Any other call, one whose
/// command is not a literal, or a `PUBLISH`, makes it a write.
pub fn only_reads(source: &str) -> bool {
    source.split("redis.call(").skip(1).all(|call| {
        let quoted = call
            .strip_prefix('\'')
            .and_then(|rest| rest.split_once('\''))
            .map(|(command, _)| command);
        quoted.is_some_and(|c| READS.contains(&c.to_ascii_uppercase().as_str()))
    })
}

impl Script {
    fn new(name: &'static str, body: &'static str) -> Self {
        // Without a flag, Redis refuses a function whole where it refuses
        // writes; the store then runs the script, which Redis stops only
        // at its first write (see `Store::call_function`).
        let flags: &[&str] = if only_reads(&unused::without_unused_functions(body)) {
            &["no-writes"]
        } else {
            &[]
        };
        Script {
            name,
            body,
            classic: Variant::new(Publish::Classic, body, flags),
            sharded: Variant::new(Publish::Sharded, body, flags),
        }
    }

    /// The file stem, used as the metrics label.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The script's files, joined, without the prelude (what it calls).
    pub fn body(&self) -> &'static str {
        self.body
    }

    fn variant(&self, publish: Publish) -> &Variant {
        match publish {
            Publish::Classic => &self.classic,
            Publish::Sharded => &self.sharded,
        }
    }

    /// The full text Redis runs (`SCRIPT LOAD`): the prelude and the body
    /// without the functions it does not call.
    pub fn source(&self, publish: Publish) -> &str {
        &self.variant(publish).source
    }

    pub fn redis(&self, publish: Publish) -> &redis::Script {
        &self.variant(publish).script
    }

    /// The script as a function library (`FUNCTION LOAD`, `FCALL`).
    pub fn library(&self, publish: Publish) -> &Library {
        &self.variant(publish).library
    }
}

macro_rules! scripts {
    ($($ident:ident => $name:literal = [$($part:literal),+]),* $(,)?) => {
        $(
            pub static $ident: LazyLock<Script> = LazyLock::new(|| {
                Script::new($name, concat!($(include_str!(concat!("scripts/", $part, ".lua")), "\n"),+))
            });
        )*
        /// Every script, for loading at start and the readiness check.
        pub static ALL: LazyLock<Vec<&'static Script>> = LazyLock::new(|| vec![$(&*$ident),*]);
    };
}

// A script is its files joined in order: the lock family's operations
// (`lock`) run after the hooks of a lock kind (`lock_plain`, `lock_fair`),
// so plain locks, fair locks and multi-locks (`multi`) share every body;
// fair locks, read-write locks and semaphores share the queue of waiters
// (`queue`); every rwlock script starts from `rw`, every semaphore script
// from `sem`, each after the session fields of their holders' holds
// (`hold_session`) and the reclaim floor of their leases (`leases`), and
// followed by what both do before they read (`queue_refresh`); the scripts that honour an `Idempotency-Key` start
// from its record's helpers (`idempotency`); the scripts that record or
// show holds' owner labels and grant times join `holds` first. A queued primitive's DELETE of
// a holder (`*_leave`) is its release script with one file before the
// body: a holder that waits leaves the queue instead of releasing.
scripts! {
    LOCK_ACQUIRE => "lock_acquire" = ["holds", "lock_plain", "lock", "lock_acquire"],
    LOCK_UNDO => "lock_undo" = ["holds", "lock_plain", "lock", "lock_undo"],
    LOCK_RELEASE => "lock_release" = ["holds", "lock_plain", "lock", "lock_release"],
    LOCK_FORCE_UNLOCK => "lock_force_unlock" = ["holds", "lock_plain", "lock", "lock_force_unlock"],
    LOCK_HEARTBEAT => "lock_heartbeat" = ["holds", "lock_plain", "lock", "lock_heartbeat"],
    LOCK_STATE => "lock_state" = ["holds", "lock_state"],
    FAIR_ACQUIRE => "fair_acquire" = ["holds", "queue", "lock_fair", "lock", "lock_acquire"],
    FAIR_UNDO => "fair_undo" = ["holds", "queue", "lock_fair", "lock", "lock_undo"],
    FAIR_RELEASE => "fair_release" = ["holds", "queue", "lock_fair", "lock", "lock_release"],
    FAIR_FORCE_UNLOCK => "fair_force_unlock" = ["holds", "queue", "lock_fair", "lock", "lock_force_unlock"],
    FAIR_HEARTBEAT => "fair_heartbeat" = ["holds", "queue", "lock_fair", "lock", "lock_heartbeat"],
    FAIR_LEAVE => "fair_leave" = ["holds", "queue", "lock_fair", "lock", "fair_leave", "lock_release"],
    MULTI_ACQUIRE => "multi_acquire" = ["holds", "lock_plain", "lock", "multi", "multi_acquire"],
    MULTI_UNDO => "multi_undo" = ["holds", "lock_plain", "lock", "multi", "multi_undo"],
    MULTI_HEARTBEAT => "multi_heartbeat" = ["holds", "lock_plain", "lock", "multi", "multi_heartbeat"],
    MULTI_RELEASE => "multi_release" = ["holds", "lock_plain", "lock", "multi", "multi_release"],
    QUEUE_LEAVE => "queue_leave" = ["queue", "queue_leave"],
    RW_ACQUIRE => "rw_acquire" = ["queue", "hold_session", "holds", "leases", "rw", "queue_refresh", "rw_acquire"],
    RW_UNDO => "rw_undo" = ["queue", "hold_session", "holds", "leases", "rw", "queue_refresh", "rw_undo"],
    RW_HEARTBEAT => "rw_heartbeat" = ["queue", "hold_session", "holds", "leases", "rw", "queue_refresh", "rw_heartbeat"],
    RW_RELEASE => "rw_release" = ["queue", "hold_session", "holds", "leases", "rw", "queue_refresh", "rw_release"],
    RW_FORCE_UNLOCK => "rw_force_unlock" = ["queue", "hold_session", "holds", "leases", "rw", "queue_refresh", "rw_force_unlock"],
    RW_LEAVE => "rw_leave" = ["queue", "hold_session", "holds", "leases", "rw", "queue_refresh", "rw_leave", "rw_release"],
    RW_STATE => "rw_state" = ["queue", "hold_session", "holds", "leases", "rw", "queue_refresh", "rw_state"],
    SEM_SET => "sem_set" = ["queue", "hold_session", "holds", "leases", "sem", "queue_refresh", "sem_set"],
    SEM_ACQUIRE => "sem_acquire" = ["queue", "hold_session", "holds", "leases", "sem", "queue_refresh", "sem_acquire"],
    SEM_UNDO => "sem_undo" = ["queue", "hold_session", "holds", "leases", "sem", "queue_refresh", "sem_undo"],
    SEM_HEARTBEAT => "sem_heartbeat" = ["queue", "hold_session", "holds", "leases", "sem", "queue_refresh", "sem_heartbeat"],
    SEM_RELEASE => "sem_release" = ["queue", "hold_session", "holds", "leases", "sem", "queue_refresh", "sem_release"],
    SEM_LEAVE => "sem_leave" = ["queue", "hold_session", "holds", "leases", "sem", "queue_refresh", "sem_leave", "sem_release"],
    SEM_STATE => "sem_state" = ["queue", "hold_session", "holds", "leases", "sem", "queue_refresh", "sem_state"],
    SEM_DELETE => "sem_delete" = ["queue", "hold_session", "holds", "leases", "sem", "queue_refresh", "sem_delete"],
    // RedLock: each runs on one RedLock node, except `redlock_wake` (main Redis).
    REDLOCK_ACQUIRE => "redlock_acquire" = ["holds", "redlock_acquire"],
    REDLOCK_FENCE => "redlock_fence" = ["redlock_fence"],
    REDLOCK_UNDO => "redlock_undo" = ["redlock_undo"],
    REDLOCK_HEARTBEAT => "redlock_heartbeat" = ["redlock_heartbeat"],
    REDLOCK_RELEASE => "redlock_release" = ["redlock_release"],
    REDLOCK_STATE => "redlock_state" = ["holds", "redlock_state"],
    REDLOCK_WAKE => "redlock_wake" = ["redlock_wake"],
    LATCH_SET => "latch_set" = ["latch_set"],
    LATCH_COUNT_DOWN => "latch_count_down" = ["idempotency", "latch_count_down"],
    LATCH_STATE => "latch_state" = ["latch_state"],
    LATCH_DELETE => "latch_delete" = ["latch_delete"],
    // Sessions: every script starts from `session`.
    SESSION_CREATE => "session_create" = ["session", "session_create"],
    SESSION_HEARTBEAT => "session_heartbeat" = ["session", "session_heartbeat"],
    SESSION_ATTACH => "session_attach" = ["session", "session_attach"],
    SESSION_STATE => "session_state" = ["session", "session_state"],
    SESSION_DETACH => "session_detach" = ["session", "session_detach"],
    SESSION_DELETE => "session_delete" = ["session", "session_delete"],
    // Rate limiters: every script but the delete starts from `rl`; those
    // that answer an Idempotency-Key also read its record (`rl_record`).
    RL_SET => "rl_set" = ["rl_shared", "rl", "rl_set"],
    RL_ACQUIRE => "rl_acquire" = ["idempotency", "rl_shared", "rl", "rl_record", "rl_acquire"],
    RL_SLOT => "rl_slot" = ["idempotency", "rl_shared", "rl", "rl_record", "rl_slot"],
    RL_STATE => "rl_state" = ["rl_shared", "rl", "rl_state"],
    RL_GIVE_BACK => "rl_give_back" = ["rl_shared", "rl", "rl_give_back"],
    RL_KEY_ACQUIRE => "rl_key_acquire" = ["idempotency", "rl_keyed", "rl", "rl_record", "rl_acquire"],
    RL_KEY_SLOT => "rl_key_slot" = ["idempotency", "rl_keyed", "rl", "rl_record", "rl_slot"],
    RL_KEY_STATE => "rl_key_state" = ["rl_keyed", "rl", "rl_state"],
    RL_KEY_GIVE_BACK => "rl_key_give_back" = ["rl_keyed", "rl", "rl_give_back"],
    RL_MULTI => "rl_multi" = ["rl_shared", "rl", "rl_multi"],
    RL_DELETE => "rl_delete" = ["rl_delete"],
}
