-- lock_state: read a lock's public state in one consistent snapshot.
--
-- KEYS[1]  lock hash  {prefix}{name}:lock
-- KEYS[2]  fence      {prefix}{name}:lock:fence
--
-- Returns  {locked (0|1), hold_count, ttl_ms, last_token}
--          last_token is the last fencing token issued (0 if never locked).
--
-- Read-only. Never returns the holder id: holder ids are capabilities.
local h = redis.call('HMGET', KEYS[1], 'holder', 'count')
local fence = redis.call('GET', KEYS[2]) or '0'
if not h[1] then
  return {0, 0, 0, fence}
end
local ttl = redis.call('PTTL', KEYS[1])
if ttl < 0 then ttl = 0 end
return {1, tonumber(h[2]), ttl, fence}
