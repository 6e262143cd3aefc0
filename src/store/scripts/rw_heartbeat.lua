-- rw_heartbeat: renew every hold a holder has on the rwlock.
-- Runs after queue.lua and rw.lua (keys and common arguments there).
--
-- ARGV[5]  new lease in milliseconds, or '' to renew each hold for the
--          lease it has
--
-- Returns  {1, token, hold_count, lease_ms, mode, read_count, write_count}
--          (mode 'w' when the holder writes), or {0} when it holds nothing
--          (released, expired or never taken: an expired hold cannot be
--          revived).
refresh()
local holder, lease = ARGV[2], ARGV[5]
local writes = redis.call('HGET', KEYS[1], 'w') == holder
local reads = redis.call('HGET', KEYS[1], 'r|' .. holder)
if not writes and not reads then
  return {0}
end
if writes then
  local l = (lease ~= '') and lease or redis.call('HGET', KEYS[1], 'wl')
  redis.call('HSET', KEYS[1], 'wl', l, 'wd', now + tonumber(l))
end
if reads then
  local l = (lease ~= '') and lease or redis.call('HGET', KEYS[1], 'rl|' .. holder)
  redis.call('HSET', KEYS[1], 'rl|' .. holder, l)
  redis.call('ZADD', KEYS[7], now + tonumber(l), holder)
end
expire_holds()
return grant_reply(writes and 'w' or 'r', holder)
