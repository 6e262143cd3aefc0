-- rw_state: a read-write lock's public state in one consistent snapshot.
-- Runs after queue.lua and rw.lua. Read-only: holds whose lease ended
-- are left out, not removed.
--
-- Returns  {mode ('w', 'r' or ''), readers, writer_hold_count, ttl_ms,
--          last_token, queued, holds}: queued is the queue's length
--          (queue_length), holds at most 100 live holds (hold_entries).
--          Never a holder id or session id: holder ids are capabilities.
local h = redis.call('HMGET', KEYS[1], 'w', 'wc', 'wd')
local fence = redis.call('GET', KEYS[2]) or '0'
local writing = h[1] and tonumber(h[3]) > now
local readers = redis.call('ZCOUNT', KEYS[7], '(' .. now, '+inf')
local last = 0
if writing then
  last = tonumber(h[3])
end
local reader = redis.call('ZRANGE', KEYS[7], -1, -1, 'WITHSCORES')
if reader[2] and tonumber(reader[2]) > last then
  last = tonumber(reader[2])
end
local ttl = math.max(last - now, 0)
local queued, holds = queue_length(), hold_entries(100)
if writing then
  return {'w', readers, tonumber(h[2]), ttl, fence, queued, holds}
elseif readers > 0 then
  return {'r', readers, 0, ttl, fence, queued, holds}
end
return {'', 0, 0, 0, fence, queued, holds}
