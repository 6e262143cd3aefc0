-- redlock_heartbeat: renew a holder's lease on one RedLock node, or renew
-- it for its session.
--
-- KEYS[1]  lock hash  {prefix}{name}:redlock (fields: redlock_acquire.lua)
-- ARGV[1]  holder id
-- ARGV[2]  new lease in milliseconds, or '' to renew for the lease it has
--          (a session's renewal: the session's end, ms on the session's
--          Redis clock; the lease here is what is left of it on this
--          node's clock)
-- ARGV[3]  only for a session's renewal: the session
-- ARGV[4]  only for a session's renewal: the version of the session's
--          state ARGV[2] comes from
--
-- Returns  {1, token, lease_ms, shortened}  renewed (lease_ms: what the hold
--                                has left here now; shortened: 1 when it now
--                                ends earlier than it did, so the service
--                                wakes the waiters)
--          {0}                   not held here by this holder (released,
--                                expired, lost with the node's data, or
--                                never taken), or for a session's renewal
--                                not in that session
--          {0, 1}                a session's renewal that came after the
--                                session's end (a stall, a retry): the
--                                hold here ended now, as its expiry would
--                                (the service wakes the waiters)
--
-- Invariants: only the holder extends its hold; an expired hold cannot be
-- revived (the hash is gone); a hold taken in a session is renewed by a
-- direct heartbeat no further than the session's end (se), and a session's
-- renewal of an older version than the hold has applied changes nothing.
local h = redis.call('HMGET', KEYS[1], 'holder', 'token', 'lease', 's', 'sv', 'se')
local session = ARGV[3]
if h[1] ~= ARGV[1] or (session and h[4] ~= session) then
  return {0}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local before = redis.call('PTTL', KEYS[1])
local lease = ARGV[2]
if session then
  if tonumber(ARGV[4]) < tonumber(h[5] or '0') then
    return {1, tonumber(h[2]), math.max(before, 0), 0}
  end
  lease = tonumber(lease) - now
  if lease <= 0 then
    redis.call('DEL', KEYS[1])
    return {0, 1}
  end
  redis.call('HSET', KEYS[1], 'sv', ARGV[4], 'se', ARGV[2])
elseif lease == '' then
  lease = h[3]
end
redis.call('HSET', KEYS[1], 'lease', lease)
lease = tonumber(lease)
if h[6] and not session then
  lease = math.max(math.min(lease, tonumber(h[6]) - now), 1)
end
redis.call('PEXPIRE', KEYS[1], lease)
local shortened = 0
if before > lease then
  shortened = 1
end
return {1, tonumber(h[2]), lease, shortened}
