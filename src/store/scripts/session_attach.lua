-- session_attach: attach holds to a session (after session.lua; keys
-- there). The session's expiry is not changed: the service then sets each
-- hold's lease to the session's remaining TTL.
--
-- ARGV[1..n]  the holds' fields, '<kind>|<holder>|<name>'
--
-- Returns  {1, pttl, version} (the version the holds were attached at), or
--          {0} when the session does not exist
if redis.call('EXISTS', KEYS[1]) == 0 then
  return {0}
end
local version = redis.call('HINCRBY', KEYS[1], 'v', 1)
for _, field in ipairs(ARGV) do
  redis.call('HSET', KEYS[1], field, version)
end
return {1, redis.call('PTTL', KEYS[1]), version}
