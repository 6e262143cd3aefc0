-- rw_heartbeat: renew every hold a holder has on the rwlock, or renew them
-- for their session.
-- Runs after queue.lua and rw.lua (keys and common arguments there).
--
-- ARGV[5]  new lease in milliseconds, or '' to renew each hold for the
--          lease it has (a session's renewal: the session's end, ms on
--          Redis's clock)
-- ARGV[6]  only for a session's renewal: the session
-- ARGV[7]  only for a session's renewal: the version of the session's
--          state ARGV[5] comes from
--
-- Returns  {1, token, hold_count, lease_ms, mode, read_count, write_count}
--          (mode 'w' when the holder writes; lease_ms: what that hold has
--          left now), or {0} when it holds nothing (released, expired or
--          never taken: an expired hold cannot be revived) or, for a
--          session's renewal, holds nothing in that session, or came after
--          the session's end (a stall, a retry): that ends the holder's
--          holds now, as their expiry would.
--
-- A direct heartbeat renews holds taken in a session no further than the
-- session's end; a session's renewal of an older version than the holds
-- have applied changes nothing. A hold that now ends earlier than it did
-- wakes the queue.
refresh()
local holder, lease, session, version = ARGV[2], ARGV[5], ARGV[6], ARGV[7]
local writes = redis.call('HGET', KEYS[1], 'w') == holder
local reads = redis.call('HGET', KEYS[1], 'r|' .. holder)
if (not writes and not reads) or (session and session_of(KEYS[1], holder) ~= session) then
  return {0}
end
if not session then
  extend(holder, tonumber(lease), session_end(KEYS[1], holder))
elseif newer(KEYS[1], holder, version) then
  local left = tonumber(lease) - now
  if left <= 0 then
    if writes then
      drop_writer()
    end
    if reads then
      drop_reader(holder)
    end
    expire_holds()
    wake()
    return {0}
  end
  in_session(KEYS[1], holder, session, version, left)
  extend(holder, left, nil)
end
expire_holds()
local mode = writes and 'w' or 'r'
local reply = grant_reply(mode, holder)
reply[4] = ends(mode, holder) - now
return reply
