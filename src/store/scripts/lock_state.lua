-- lock_state: read a lock's public state in one consistent snapshot
-- (after holds.lua).
--
-- KEYS[1]  lock hash  {prefix}{name}:lock (fair: :fair)
-- KEYS[2]  fence      {prefix}{name}:lock:fence
-- KEYS[3], KEYS[4]  fair locks only: the queue {prefix}{name}:fair:queue
--          and its deadlines (see queue.lua); absent for plain locks
--
-- Returns  {locked (0|1), hold_count, ttl_ms, last_token, holds, queued}
--          last_token is the last fencing token issued (0 if never locked);
--          holds: {} when free, else the one hold as hold_entry (holds.lua)
--          reports it; queued: the waiters in the queue whose place has
--          not lapsed (-1 for plain locks, which keep no queue)
--
-- Read-only. Never returns the holder id or the session id: holder ids
-- are capabilities.
local queued = -1
if KEYS[3] then
  -- Every entry, less those whose place has lapsed but that no write has
  -- pruned yet (few: every write prunes); marks ('!<ticket>') of waiters
  -- that left are no entries.
  queued = redis.call('ZCARD', KEYS[3])
  for _, m in ipairs(redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', holds_now())) do
    if string.sub(m, 1, 1) ~= '!' then
      queued = queued - 1
    end
  end
end
local h = redis.call('HMGET', KEYS[1], 'holder', 'count', 'o', 't', 's')
local fence = redis.call('GET', KEYS[2]) or '0'
if not h[1] then
  return {0, 0, 0, fence, {}, queued}
end
local ttl = redis.call('PTTL', KEYS[1])
if ttl < 0 then ttl = 0 end
return {1, tonumber(h[2]), ttl, fence, {hold_entry(h[3], ttl, h[4], h[5], h[2], nil)}, queued}
