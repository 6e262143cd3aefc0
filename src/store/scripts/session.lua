-- session: what every session script shares. A session (Consul session,
-- etcd lease) is one hash that many holds attach to; its TTL is the
-- session's, and the holds' own leases are kept aligned with it by the
-- service (each hold lives in its own object's hash slot, so no script can
-- reach them all: see the README's "Sessions").
--
-- KEYS[1]  hash {prefix}{id}:session (namespaced like every object)
--          ttl                 the session's TTL in ms (what a heartbeat
--                              renews it for)
--          v                   version: raised by every heartbeat and
--                              attach, so that an attach can tell whether
--                              a heartbeat ran while it aligned its holds
--          <kind>|<holder>|<name>  one field per attached hold; its value
--                              is the version that attached it
--
-- Invariant: the hash exists only with a TTL (PEXPIRE = ttl at creation
-- and at every heartbeat, on Redis's clock). The reserved fields hold no
-- '|', every hold field does (names and holder ids never contain one).

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
