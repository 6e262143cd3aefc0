-- lock_heartbeat: renew a holder's lease.
--
-- KEYS[1]  lock hash  {prefix}{name}:lock
-- ARGV[1]  holder id
-- ARGV[2]  new lease in milliseconds, or '' to renew for the lease it has
--
-- Returns  {1, token, hold_count, lease_ms}  renewed
--          {0}                               not held by this holder
--                                            (released, expired or never taken)
--
-- Invariant: only the current holder can extend the lease; an expired hold
-- cannot be revived (the hash is gone, so the holder no longer matches).
local h = redis.call('HMGET', KEYS[1], 'holder', 'count', 'token', 'lease')
if h[1] ~= ARGV[1] then
  return {0}
end
local lease = ARGV[2]
if lease == '' then
  lease = h[4]
else
  redis.call('HSET', KEYS[1], 'lease', lease)
end
redis.call('PEXPIRE', KEYS[1], lease)
return {1, h[3], tonumber(h[2]), tonumber(lease)}
