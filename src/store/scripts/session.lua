-- session: what every session script shares. A session (Consul session,
-- etcd lease) is one hash that many holds attach to; its TTL is the
-- session's, and the holds' own leases are kept aligned with it by the
-- service (each hold lives in its own object's hash slot, so no script can
-- reach them all: see the book's "Sessions" (docs/src/sessions.md)).
--
-- KEYS[1]  hash {prefix}{id}:session (namespaced like every object)
--          ttl                 the session's TTL in ms (what a heartbeat
--                              renews it for)
--          v                   version: raised by every heartbeat and
--                              attach. Every renewal of a hold by the
--                              session carries the version its lease comes
--                              from, and a hold ignores renewals older than
--                              the newest it applied, so a slow heartbeat
--                              never outruns a later one
--          o                   the session's owner label (absent when it
--                              has none): a hold taken in the session by
--                              an acquire that sends none records it
--          <kind>|<holder>|<name>  one field per attached hold; its value
--                              is the version that attached it
--
-- Invariant: the hash exists only with a TTL (PEXPIRE = ttl at creation
-- and at every heartbeat, on Redis's clock). The reserved fields (RESERVED
-- of them, and o when there is one) hold no '|', every hold field does (names and holder ids never
-- contain one). What an acquire reads and writes here costs the same
-- however many holds the session has: only heartbeats and deletion read
-- the holds.

local RESERVED = 2

-- When the session ends: its expiry, ms since the Unix epoch on Redis's
-- clock (what its holds' scripts count their leases to).
local function ends()
  return math.max(redis.call('PEXPIRETIME', KEYS[1]), 0)
end

-- How many holds are attached (O(1)).
local function count()
  return redis.call('HLEN', KEYS[1]) - RESERVED - redis.call('HEXISTS', KEYS[1], 'o')
end

-- The attached holds as {field, value, ...}.
local function holds()
  local all = redis.call('HGETALL', KEYS[1])
  local found = {}
  for i = 1, #all, 2 do
    if string.find(all[i], '|', 1, true) then
      found[#found + 1] = all[i]
      found[#found + 1] = all[i + 1]
    end
  end
  return found
end
