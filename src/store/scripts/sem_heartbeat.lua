-- sem_heartbeat: renew a holder's lease (all its permits).
-- Runs after queue.lua and sem.lua (keys and common arguments there).
--
-- ARGV[5]  new lease in milliseconds, or '' to renew for the lease it has
--
-- Returns  {1, token, permits, lease_ms, grants}, or {0} when the holder
--          holds nothing (released, expired or never granted: an expired
--          hold cannot be revived, its permits may already be taken).
refresh()
local holder, lease = ARGV[2], ARGV[5]
local current = redis.call('HGET', KEYS[7], 'l|' .. holder)
if not current then
  return {0}
end
if lease ~= '' then
  current = lease
end
redis.call('HSET', KEYS[7], 'l|' .. holder, current)
redis.call('ZADD', KEYS[8], now + tonumber(current), holder)
expire_holds()
return grant_reply(holder)
