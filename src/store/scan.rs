//! Listing keys page by page with `SCAN` (the book's "Listing objects"
//! (docs/src/who-holds-it.md)): never `KEYS`, a bounded number of `SCAN`
//! calls per page, on every master of a Redis Cluster in a stable order.
//!
//! A listing walks *shards*: the one server of a standalone or Sentinel
//! deployment (its master), each master of a Cluster (ordered by the first
//! slot it serves), or each RedLock node. A [`Position`] says where the
//! next page starts: which shard, that server's `SCAN` cursor, and — when
//! one `SCAN` step matched more keys than a page had room for — where in
//! that step the page stopped: the step's keys are handed out in the order
//! of a 64-bit hash of each key, and the position keeps the hash of the
//! last one handed out (the step is run again and the keys up to that
//! hash are skipped). A hash, not the key: a cursor must never carry a
//! key's text, since a session's key holds its id.
//!
//! Cluster topology: the position carries a fingerprint of the slot
//! layout (which ranges each master serves, without node ids) and the id
//! of the node being scanned. A failover (same layout, another node
//! serving the shard) restarts that shard's scan from its start: the
//! promoted replica has the same keys but its own `SCAN` cursors. A
//! changed layout (resharding) restarts the whole listing from the first
//! shard, since keys may have moved to a shard already scanned: objects
//! may then appear again, but none present throughout is missed.

use redis::Value;
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};

use super::backend::Conn;
use super::{Store, StoreError};

/// Matched keys a single `SCAN` step examines (its `COUNT`).
pub const SCAN_COUNT: usize = 500;

/// `SCAN` steps at most per page and shard source: a page may hold fewer
/// items than asked for (and still have a next cursor) when the keys it
/// walked past did not match.
pub const STEPS_PER_PAGE: usize = 16;

/// Where a listing resumes. Encoded into the opaque `cursor` of a page.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Position {
    /// Fingerprint of the Cluster's slot layout (0 elsewhere).
    pub layout: u64,
    /// The shard being scanned: the first slot its master serves (Cluster),
    /// the node's index (RedLock nodes), 0 otherwise.
    pub shard: u32,
    /// The node id of the Cluster master being scanned (`-` elsewhere).
    pub node: String,
    /// That server's `SCAN` cursor.
    pub scan: u64,
    /// The hash ([`order_of`]) of the last key handed out of the step at
    /// `scan`, when that step matched more keys than its page had room for.
    pub after: Option<u64>,
}

impl Position {
    /// The cursor string a client gets. Opaque to clients; its format is
    /// `layout.shard.node.scan[.after]` (hex layout).
    pub fn encode(&self) -> String {
        let mut s = format!(
            "{:x}.{}.{}.{}",
            self.layout, self.shard, self.node, self.scan
        );
        if let Some(after) = self.after {
            s.push_str(&format!(".{after:016x}"));
        }
        s
    }

    /// `None` for anything [`Position::encode`] cannot have produced.
    pub fn decode(s: &str) -> Option<Position> {
        let mut parts = s.splitn(5, '.');
        let layout = u64::from_str_radix(parts.next()?, 16).ok()?;
        let shard = parts.next()?.parse().ok()?;
        let node = parts.next()?;
        let scan = parts.next()?.parse().ok()?;
        let node_ok = !node.is_empty()
            && node.len() <= 64
            && node.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
        if !node_ok {
            return None;
        }
        let after = match parts.next() {
            Some(a) if a.len() == 16 => Some(u64::from_str_radix(a, 16).ok()?),
            Some(_) => return None,
            None => None,
        };
        Some(Position {
            layout,
            shard,
            node: node.to_string(),
            scan,
            after,
        })
    }
}

/// One server a listing scans.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shard {
    /// See [`Position::shard`].
    pub id: u32,
    /// See [`Position::node`].
    pub node: String,
    /// A Cluster master's address (`None`: the store's own server).
    addr: Option<(String, u16)>,
}

/// The shards of a store, in listing order, and their layout fingerprint.
#[derive(Debug, Clone)]
pub struct Shards {
    pub layout: u64,
    pub list: Vec<Shard>,
}

impl Shards {
    /// `n` standalone servers (RedLock nodes), each a shard numbered by
    /// its place in the configuration.
    pub fn nodes(n: usize) -> Shards {
        Shards {
            layout: 0,
            list: (0..n as u32)
                .map(|id| Shard {
                    id,
                    node: "-".into(),
                    addr: None,
                })
                .collect(),
        }
    }
}

/// One page of keys and where the next one starts (`None`: the end).
#[derive(Debug, Default)]
pub struct KeyPage {
    pub keys: Vec<String>,
    pub next: Option<Position>,
}

/// Escapes the glob characters of `text` for a `SCAN … MATCH` pattern.
pub fn glob_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// FNV-1a, for the layout fingerprint (stable across processes and
/// versions, unlike the standard hasher).
fn fnv(words: impl IntoIterator<Item = u64>) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for w in words {
        for b in w.to_le_bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

/// Where a key comes in the order a split `SCAN` step is handed out in
/// (FNV-1a of its bytes): what a cursor keeps instead of the key.
pub fn order_of(key: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in key.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// The masters of a `CLUSTER SLOTS` reply, ordered by the first slot each
/// serves, with the layout's fingerprint.
fn shards_of_slots(reply: &[Value]) -> Result<Shards, StoreError> {
    let bad = || StoreError::Unexpected("CLUSTER SLOTS: unexpected reply".into());
    // (start, end, node id, host, port) per range.
    let mut ranges = Vec::new();
    for range in reply {
        let Value::Array(parts) = range else {
            return Err(bad());
        };
        let (Some(Value::Int(start)), Some(Value::Int(end)), Some(Value::Array(master))) =
            (parts.first(), parts.get(1), parts.get(2))
        else {
            return Err(bad());
        };
        let text = |v: Option<&Value>| match v {
            Some(Value::BulkString(b)) => String::from_utf8(b.clone()).ok(),
            Some(Value::SimpleString(s)) => Some(s.clone()),
            _ => None,
        };
        let host = text(master.first()).ok_or_else(bad)?;
        let Some(Value::Int(port)) = master.get(1) else {
            return Err(bad());
        };
        let id = text(master.get(2)).ok_or_else(bad)?;
        ranges.push((*start as u32, *end as u32, id, host, *port as u16));
    }
    ranges.sort();
    let mut list: Vec<Shard> = Vec::new();
    for (start, _, id, host, port) in &ranges {
        if !list.iter().any(|s| &s.node == id) {
            list.push(Shard {
                id: *start,
                node: id.clone(),
                addr: Some((host.clone(), *port)),
            });
        }
    }
    let first_slot_of =
        |id: &str| u64::from(list.iter().find(|s| s.node == id).map_or(0, |s| s.id));
    let layout = fnv(ranges
        .iter()
        .flat_map(|(start, end, id, ..)| [u64::from(*start), u64::from(*end), first_slot_of(id)]))
    .max(1);
    Ok(Shards { layout, list })
}

impl Store {
    /// The servers a listing of this store scans: its master, or every
    /// master of a Cluster.
    pub async fn shards(&self) -> Result<Shards, StoreError> {
        if !self.inner.cluster {
            return Ok(Shards {
                layout: 0,
                list: vec![Shard {
                    id: 0,
                    node: "-".into(),
                    addr: None,
                }],
            });
        }
        let mut cmd = redis::cmd("CLUSTER");
        cmd.arg("SLOTS");
        let reply: Vec<Value> = self.raw(&cmd).await?;
        shards_of_slots(&reply)
    }

    /// One `SCAN cursor MATCH pattern COUNT n` on `shard`: the next cursor
    /// (0 at the end) and the keys it matched.
    pub async fn scan_step(
        &self,
        shard: &Shard,
        cursor: u64,
        pattern: &str,
    ) -> Result<(u64, Vec<String>), StoreError> {
        let mut cmd = redis::cmd("SCAN");
        cmd.arg(cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(SCAN_COUNT);
        let deadline = self.deadline();
        let mut conn = self.conn(deadline, false, None).await?;
        let value = match (&shard.addr, &mut conn) {
            (Some((host, port)), Conn::Cluster(cluster)) => {
                let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress {
                    host: host.clone(),
                    port: *port,
                });
                Self::by(deadline, cluster.route_command(cmd, routing)).await
            }
            _ => Self::by(deadline, cmd.query_async(&mut conn)).await,
        }
        .map_err(|e| self.fail(&mut conn, e))?;
        redis::from_redis_value::<(u64, Vec<String>)>(value)
            .map_err(|e| StoreError::Unexpected(format!("SCAN: {e}")))
    }
}

/// Scans `shards` (each through `scan`, one `SCAN` step per call) from
/// `from` for up to `limit` keys, in at most
/// [`STEPS_PER_PAGE`] steps. `from` on a shard that no longer exists, or
/// with another layout, restarts as the module docs say.
pub async fn page<F, Fut>(
    shards: &Shards,
    from: Option<Position>,
    limit: usize,
    scan: F,
) -> Result<KeyPage, StoreError>
where
    F: Fn(Shard, u64) -> Fut,
    Fut: Future<Output = Result<(u64, Vec<String>), StoreError>>,
{
    let Some(first) = shards.list.first() else {
        return Ok(KeyPage::default());
    };
    let start = |shard: &Shard| Position {
        layout: shards.layout,
        shard: shard.id,
        node: shard.node.clone(),
        scan: 0,
        after: None,
    };
    let mut at = match from {
        Some(p) if p.layout != shards.layout => start(first),
        Some(p) => match shards.list.iter().find(|s| s.id == p.shard) {
            Some(s) if s.node == p.node => p,
            // Failover: the shard is served by another node now.
            Some(s) => start(s),
            None => start(first),
        },
        None => start(first),
    };
    let mut keys: Vec<String> = Vec::new();
    for _ in 0..STEPS_PER_PAGE {
        let index = shards
            .list
            .iter()
            .position(|s| s.id == at.shard)
            .expect("positions name listed shards");
        let shard = &shards.list[index];
        let (next, found) = scan(shard.clone(), at.scan).await?;
        let mut found: Vec<(u64, String)> = found.into_iter().map(|k| (order_of(&k), k)).collect();
        found.sort();
        found.dedup();
        if let Some(after) = at.after {
            found.retain(|(order, _)| *order > after);
        }
        let mut found: Vec<String> = found.into_iter().map(|(_, k)| k).collect();
        let room = limit - keys.len();
        if found.len() > room {
            if keys.is_empty() {
                // This step alone fills the page: hand out its first keys
                // and run it again next time for the rest.
                found.truncate(room);
                at.after = found.last().map(|k| order_of(k));
                keys.extend(found);
            }
            // Otherwise the step is run again next page, whole.
            return Ok(KeyPage {
                keys,
                next: Some(at),
            });
        }
        keys.extend(found);
        at = if next != 0 {
            Position {
                scan: next,
                after: None,
                ..at
            }
        } else {
            match shards.list.get(index + 1) {
                Some(s) => start(s),
                None => return Ok(KeyPage { keys, next: None }),
            }
        };
        if keys.len() == limit {
            break;
        }
    }
    Ok(KeyPage {
        keys,
        next: Some(at),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_round_trip_and_garbage_is_refused() {
        let p = Position {
            layout: 0xabc,
            shard: 5461,
            node: "e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca".into(),
            scan: 1536,
            after: Some(0x0123_4567_89ab_cdef),
        };
        assert_eq!(Position::decode(&p.encode()), Some(p));
        let plain = Position {
            node: "-".into(),
            ..Position::default()
        };
        assert_eq!(plain.encode(), "0.0.-.0");
        assert_eq!(Position::decode("0.0.-.0"), Some(plain));
        for bad in [
            "",
            "x",
            "0.0.-",
            "g.0.-.0",
            "0.x.-.0",
            "0..0",
            "0.0.-.-1",
            "0.0.-.0.",
            "0.0.a b.0",
        ] {
            assert_eq!(Position::decode(bad), None, "{bad:?}");
        }
    }

    /// Shards `(first slot, node)` of layout `layout`.
    fn shards(layout: u64, list: &[(u32, &str)]) -> Shards {
        Shards {
            layout,
            list: list
                .iter()
                .map(|(id, node)| Shard {
                    id: *id,
                    node: node.to_string(),
                    addr: None,
                })
                .collect(),
        }
    }

    /// A fake server per shard node: `steps[node]` is its SCAN, one
    /// `(next cursor, keys)` per cursor value (0, then 1, ...).
    type Servers = Vec<(&'static str, Vec<(u64, Vec<&'static str>)>)>;

    async fn run(
        shards: &Shards,
        from: Option<Position>,
        limit: usize,
        servers: &Servers,
    ) -> KeyPage {
        page(shards, from, limit, |shard, at| async move {
            let (_, steps) = servers.iter().find(|(n, _)| *n == shard.node).unwrap();
            let (next, keys) = &steps[at as usize];
            Ok((*next, keys.iter().map(|k| k.to_string()).collect()))
        })
        .await
        .unwrap()
    }

    fn all_pages(shards: &Shards, limit: usize, servers: &Servers) -> (Vec<String>, usize) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let (mut keys, mut pages, mut from) = (Vec::new(), 0, None);
        loop {
            let p = rt.block_on(run(shards, from, limit, servers));
            assert!(p.keys.len() <= limit, "{p:?}");
            keys.extend(p.keys);
            pages += 1;
            match p.next {
                Some(next) => from = Some(next),
                None => return (keys, pages),
            }
        }
    }

    #[test]
    fn a_split_steps_cursor_carries_a_hash_never_the_key() {
        let servers: Servers = vec![(
            "n1",
            vec![(0, vec!["ns:{5e55i0n}:session", "ns:{other}:session"])],
        )];
        let layout = shards(0, &[(0, "n1")]);
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let first = rt.block_on(run(&layout, None, 1, &servers));
        let cursor = first.next.expect("a second page").encode();
        assert!(
            !cursor.contains("5e55i0n") && !cursor.contains("other"),
            "{cursor}"
        );
        let second = rt.block_on(run(&layout, Position::decode(&cursor), 1, &servers));
        let mut both = [first.keys, second.keys].concat();
        both.sort();
        assert_eq!(both, ["ns:{5e55i0n}:session", "ns:{other}:session"]);
    }

    #[test]
    fn pages_walk_every_shard_and_split_a_step_larger_than_the_page() {
        let servers: Servers = vec![
            ("n1", vec![(1, vec!["a", "b", "c"]), (0, vec!["d"])]),
            ("n2", vec![(0, vec!["e"])]),
        ];
        let layout = shards(7, &[(0, "n1"), (8192, "n2")]);
        for limit in [1, 2, 3, 5, 100] {
            let (mut keys, _) = all_pages(&layout, limit, &servers);
            // A split step's keys come in hash order: each exactly once.
            keys.sort();
            assert_eq!(keys, ["a", "b", "c", "d", "e"], "limit {limit}");
        }
        let (_, pages) = all_pages(&layout, 1, &servers);
        assert_eq!(pages, 5);
    }

    #[test]
    fn a_failover_restarts_its_shard_and_a_new_layout_restarts_the_listing() {
        let servers: Servers = vec![
            ("n1", vec![(1, vec!["a"]), (0, vec!["b"])]),
            ("n2", vec![(1, vec!["c"]), (0, vec!["d"])]),
            ("r2", vec![(1, vec!["c"]), (0, vec!["d"])]),
        ];
        let before = shards(7, &[(0, "n1"), (8192, "n2")]);
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        // In the middle of n2's scan.
        let at = Position {
            layout: 7,
            shard: 8192,
            node: "n2".into(),
            scan: 1,
            after: None,
        };
        let same = rt.block_on(run(&before, Some(at.clone()), 10, &servers));
        assert_eq!(same.keys, ["d"]);
        // n2 failed over to r2: its shard is scanned again from the start.
        let failed_over = shards(7, &[(0, "n1"), (8192, "r2")]);
        let again = rt.block_on(run(&failed_over, Some(at.clone()), 10, &servers));
        assert_eq!(again.keys, ["c", "d"]);
        // Resharded: the whole listing again.
        let resharded = shards(9, &[(0, "n1"), (5000, "n2")]);
        let restarted = rt.block_on(run(&resharded, Some(at), 10, &servers));
        assert_eq!(restarted.keys, ["a", "b", "c", "d"]);
    }

    #[test]
    fn glob_characters_are_escaped() {
        assert_eq!(glob_escape("a*b?[c]\\d"), "a\\*b\\?\\[c\\]\\\\d");
        assert_eq!(glob_escape("plain.name~x:y-z_"), "plain.name~x:y-z_");
    }
}
