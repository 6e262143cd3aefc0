-- session_heartbeat: renew a session (after session.lua; keys there). The
-- service then renews every hold returned up to the session's end, with
-- this heartbeat's version.
--
-- ARGV[1]  new ttl in ms, or '' to renew for the ttl it has
--
-- Returns  {1, ttl, version, end, field, value, ...} with every attached
--          hold (end: when the session now ends, ms on Redis's clock),
--          or {0} when the session does not exist (expired, deleted, or
--          never created: an expired session cannot be revived)
if redis.call('EXISTS', KEYS[1]) == 0 then
  return {0}
end
local ttl = ARGV[1]
if ttl == '' then
  ttl = redis.call('HGET', KEYS[1], 'ttl')
else
  redis.call('HSET', KEYS[1], 'ttl', ttl)
end
local version = redis.call('HINCRBY', KEYS[1], 'v', 1)
redis.call('PEXPIRE', KEYS[1], ttl)
local reply = {1, tonumber(ttl), version, ends()}
for _, item in ipairs(holds()) do
  reply[#reply + 1] = item
end
return reply
