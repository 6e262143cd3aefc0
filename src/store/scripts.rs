//! The Lua scripts, built from the files under `scripts/` at build time.
//!
//! Each script is one atomic state change (or one consistent read). They
//! are loaded into Redis at start and invoked by EVALSHA; the redis crate
//! reloads a script and retries when Redis answers NOSCRIPT (after a
//! restart or `SCRIPT FLUSH`).

use std::sync::LazyLock;

/// A named Lua script.
pub struct Script {
    name: &'static str,
    source: &'static str,
    script: redis::Script,
}

impl Script {
    fn new(name: &'static str, source: &'static str) -> Self {
        Script {
            name,
            source,
            script: redis::Script::new(source),
        }
    }

    /// The file stem, used as the metrics label.
    pub fn name(&self) -> &'static str {
        self.name
    }

    pub fn source(&self) -> &'static str {
        self.source
    }

    pub fn redis(&self) -> &redis::Script {
        &self.script
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

// A script is its files joined in order: the lock family's bodies run
// after the hooks of a lock kind (`lock_plain`, `lock_fair`), so plain and
// fair locks share every body; fair locks and read-write locks share the
// queue of waiters (`queue`); every rwlock script starts from `rw`.
scripts! {
    LOCK_ACQUIRE => "lock_acquire" = ["lock_plain", "lock_acquire"],
    LOCK_UNDO => "lock_undo" = ["lock_plain", "lock_undo"],
    LOCK_RELEASE => "lock_release" = ["lock_plain", "lock_release"],
    LOCK_FORCE_UNLOCK => "lock_force_unlock" = ["lock_plain", "lock_force_unlock"],
    LOCK_HEARTBEAT => "lock_heartbeat" = ["lock_heartbeat"],
    LOCK_STATE => "lock_state" = ["lock_state"],
    FAIR_ACQUIRE => "fair_acquire" = ["queue", "lock_fair", "lock_acquire"],
    FAIR_UNDO => "fair_undo" = ["queue", "lock_fair", "lock_undo"],
    FAIR_RELEASE => "fair_release" = ["queue", "lock_fair", "lock_release"],
    FAIR_FORCE_UNLOCK => "fair_force_unlock" = ["queue", "lock_fair", "lock_force_unlock"],
    QUEUE_LEAVE => "queue_leave" = ["queue", "queue_leave"],
    RW_ACQUIRE => "rw_acquire" = ["queue", "rw", "rw_acquire"],
    RW_UNDO => "rw_undo" = ["queue", "rw", "rw_undo"],
    RW_HEARTBEAT => "rw_heartbeat" = ["queue", "rw", "rw_heartbeat"],
    RW_RELEASE => "rw_release" = ["queue", "rw", "rw_release"],
    RW_FORCE_UNLOCK => "rw_force_unlock" = ["queue", "rw", "rw_force_unlock"],
    RW_STATE => "rw_state" = ["queue", "rw", "rw_state"],
    LATCH_SET => "latch_set" = ["latch_set"],
    LATCH_COUNT_DOWN => "latch_count_down" = ["latch_count_down"],
    LATCH_STATE => "latch_state" = ["latch_state"],
    LATCH_DELETE => "latch_delete" = ["latch_delete"],
}
