//! The Lua scripts, one file each under `scripts/`, embedded at build time.
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
    ($($ident:ident => $file:literal),* $(,)?) => {
        $(
            pub static $ident: LazyLock<Script> = LazyLock::new(|| {
                Script::new($file, include_str!(concat!("scripts/", $file, ".lua")))
            });
        )*
        /// Every script, for loading at start and the readiness check.
        pub static ALL: LazyLock<Vec<&'static Script>> = LazyLock::new(|| vec![$(&*$ident),*]);
    };
}

scripts! {
    LOCK_ACQUIRE => "lock_acquire",
    LOCK_UNDO => "lock_undo",
    LOCK_HEARTBEAT => "lock_heartbeat",
    LOCK_RELEASE => "lock_release",
    LOCK_FORCE_UNLOCK => "lock_force_unlock",
    LOCK_STATE => "lock_state",
}
