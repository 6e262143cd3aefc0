//! A map of shared entries, each counted by its users: the first user of a
//! key creates the entry, the last one to leave removes it. The pub/sub
//! hub (one wake counter per channel) and the wait engine (one group per
//! object) both keep their in-process state this way.
//!
//! Counts change only under the map's lock, so an entry can never be
//! revived or leaked by a racing reader; and an entry removed by the last
//! user is handed back to the caller, so its `Drop` (which may take other
//! locks) runs after this map's lock is released, never under it.

use std::collections::HashMap;

use parking_lot::Mutex;

pub struct CountedMap<V> {
    entries: Mutex<HashMap<String, Counted<V>>>,
}

struct Counted<V> {
    value: V,
    users: usize,
}

impl<V> Default for CountedMap<V> {
    fn default() -> Self {
        CountedMap {
            entries: Mutex::new(HashMap::new()),
        }
    }
}

impl<V: Clone> CountedMap<V> {
    /// Counts one more user of `key` and returns its entry, made by `make`
    /// if there was none.
    pub fn join(&self, key: &str, make: impl FnOnce() -> V) -> V {
        let mut entries = self.entries.lock();
        let entry = entries.entry(key.to_string()).or_insert_with(|| Counted {
            value: make(),
            users: 0,
        });
        entry.users += 1;
        entry.value.clone()
    }

    /// Counts one user of `key` less; returns the entry if that was the
    /// last user (it is out of the map; drop it at leisure).
    #[must_use = "the removed entry is returned so that it is dropped outside the lock"]
    pub fn leave(&self, key: &str) -> Option<V> {
        let mut entries = self.entries.lock();
        match entries.get_mut(key) {
            Some(entry) if entry.users > 1 => {
                entry.users -= 1;
                None
            }
            Some(_) => entries.remove(key).map(|entry| entry.value),
            None => None,
        }
    }

    /// Users of `key` right now (0 when it has no entry).
    pub fn users(&self, key: &str) -> usize {
        self.entries.lock().get(key).map_or(0, |entry| entry.users)
    }

    /// Runs `f` on the entry of `key`, if any, under the lock (keep it short).
    pub fn with(&self, key: &str, f: impl FnOnce(&V)) {
        if let Some(entry) = self.entries.lock().get(key) {
            f(&entry.value);
        }
    }

    /// Runs `f` on every entry under the lock (keep it short).
    pub fn for_each(&self, mut f: impl FnMut(&V)) {
        for entry in self.entries.lock().values() {
            f(&entry.value);
        }
    }

    /// Every key with at least one user, right now.
    pub fn keys(&self) -> Vec<String> {
        self.entries.lock().keys().cloned().collect()
    }

    /// Keys with at least one user.
    pub fn len(&self) -> usize {
        self.entries.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
