-- session_attach: attach holds to a session (after session.lua; keys
-- there), in O(1) of the session's holds. The session's expiry is not
-- changed.
--
-- ARGV[1..n]  the holds' fields, '<kind>|<holder>|<name>'
--
-- Returns  {1, ttl, pttl, version, end} (the version the holds were
--          attached at: the service renews the holds with that version up
--          to the session's end, ms on this clock, when another heartbeat
--          or attach ran since it read the session), or {0} when the
--          session does not exist
if redis.call('EXISTS', KEYS[1]) == 0 then
  return {0}
end
local version = redis.call('HINCRBY', KEYS[1], 'v', 1)
for _, field in ipairs(ARGV) do
  redis.call('HSET', KEYS[1], field, version)
end
local ttl = tonumber(redis.call('HGET', KEYS[1], 'ttl'))
return {1, ttl, math.max(redis.call('PTTL', KEYS[1]), 0), version, ends()}
