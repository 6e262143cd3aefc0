-- sem_heartbeat: renew a holder's lease (all its permits), or renew it for
-- its session.
-- Runs after queue.lua and sem.lua (keys and common arguments there).
--
-- ARGV[5]  new lease in milliseconds, or '' to renew for the lease it has
--          (a session's renewal: the session's end, ms on Redis's clock)
-- ARGV[6]  only for a session's renewal: the session
-- ARGV[7]  only for a session's renewal: the version of the session's
--          state ARGV[5] comes from
--
-- Returns  {1, token, permits, lease_ms, grants} (lease_ms: what the hold
--          has left now), or {0} when the holder holds nothing (released,
--          expired or never granted: an expired hold cannot be revived, its
--          permits may already be taken) or, for a session's renewal,
--          nothing in that session, or the renewal came after the
--          session's end (a stall, a retry): that ends the hold now, as
--          its expiry would.
--
-- A direct heartbeat renews a hold taken in a session no further than the
-- session's end; a session's renewal of an older version than the hold has
-- applied changes nothing. A hold that now ends earlier than it did wakes
-- the queue.
refresh()
local holder, lease, session, version = ARGV[2], ARGV[5], ARGV[6], ARGV[7]
local current = redis.call('HGET', KEYS[7], 'l|' .. holder)
if not current or (session and session_of(KEYS[7], holder) ~= session) then
  return {0}
end
if not session then
  if lease == '' then
    lease = current
  end
  redis.call('HSET', KEYS[7], 'l|' .. holder, lease)
  local deadline = now + tonumber(lease)
  local cap = session_end(KEYS[7], holder)
  local ttl = lease
  if cap then
    deadline = math.max(math.min(deadline, cap), now + 1)
    ttl = nil
  end
  set_deadline(holder, deadline, ttl)
elseif newer(KEYS[7], holder, version) then
  local left = tonumber(lease) - now
  if left <= 0 then
    drop_holder(holder)
    expire_holds()
    wake()
    return {0}
  end
  redis.call('HSET', KEYS[7], 'l|' .. holder, left)
  in_session(KEYS[7], holder, session, version, left)
  set_deadline(holder, now + left)
end
local reply = grant_reply(holder)
reply[4] = tonumber(redis.call('ZSCORE', KEYS[8], holder)) - now
return reply
