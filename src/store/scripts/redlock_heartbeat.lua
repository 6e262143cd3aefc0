-- redlock_heartbeat: renew a holder's lease on one RedLock node.
--
-- KEYS[1]  lock hash  {prefix}{name}:redlock
-- ARGV[1]  holder id
-- ARGV[2]  new lease in milliseconds, or '' to renew for the lease it has
--
-- Returns  {1, token, lease_ms}  renewed
--          {0}                   not held here by this holder (released,
--                                expired, lost with the node's data, or
--                                never taken)
--
-- Invariant: only the holder extends its hold; an expired hold cannot be
-- revived (the hash is gone).
local h = redis.call('HMGET', KEYS[1], 'holder', 'token', 'lease')
if h[1] ~= ARGV[1] then
  return {0}
end
local lease = ARGV[2]
if lease == '' then
  lease = h[3]
else
  redis.call('HSET', KEYS[1], 'lease', lease)
end
redis.call('PEXPIRE', KEYS[1], lease)
return {1, tonumber(h[2]), tonumber(lease)}
