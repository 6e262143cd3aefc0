-- redlock_state: one RedLock node's view of a lock (never the holder id),
-- after holds.lua.
--
-- KEYS[1]  lock hash  {prefix}{name}:redlock
--
-- Returns  {locked (0 or 1), remaining lease in ms (0 when free), holds,
--           attempt}: holds is {} when free, else the node's hold as
--           hold_entry reports it; attempt is the id of the try that
--           created the hold ('' when free), which every node's part of
--           one acquire shares: the service tells by it which nodes hold
--           the same hold, and never shows it
local h = redis.call('HMGET', KEYS[1], 'holder', 'o', 't', 's', 'attempt')
local ttl = redis.call('PTTL', KEYS[1])
if ttl == -2 or not h[1] then
  return {0, 0, {}, ''}
end
ttl = math.max(ttl, 0)
return {1, ttl, {hold_entry(h[2], ttl, h[3], h[4], 1, nil)}, h[5] or ''}
