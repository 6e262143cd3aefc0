-- redlock_state: one RedLock node's view of a lock (never the holder id).
--
-- KEYS[1]  lock hash  {prefix}{name}:redlock
--
-- Returns  {locked (0 or 1), remaining lease in ms (0 when free)}
local ttl = redis.call('PTTL', KEYS[1])
if ttl == -2 then
  return {0, 0}
end
return {1, math.max(ttl, 0)}
