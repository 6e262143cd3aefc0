-- sem_release: a holder gives back all its permits.
-- Runs after queue.lua and sem.lua (keys and common arguments there).
--
-- ARGV[5]  only when a session ends: the session (a hold taken in another
--          session, or in none, is not released)
--
-- Returns  the permits given back, or -1 when the holder holds nothing (or
-- nothing in that session).
-- The queue is woken: the waiters the freed permits serve may go.
refresh()
local holder = ARGV[2]
-- The holder's permits, attempts and session, in one HMGET: it holds
-- permits exactly when it has a lease (p|<h> and its entry in KEYS[8] are
-- written and dropped together).
local h = redis.call('HMGET', KEYS[7], 'p|' .. holder, 'as|' .. holder, 'ss|' .. holder)
if not h[1] then
  return -1
end
if ARGV[5] and (h[3] or '') ~= ARGV[5] then
  return -1
end
redis.call('ZREM', KEYS[8], holder)
local last = last_lease()
local permits = tonumber(h[1])
if last[2] then
  -- Others hold permits: drop this holder's fields (its session's are
  -- there only with ss|<h>: in_session writes all three).
  drop_fields(holder, h, not h[3])
end
-- (When it was the last hold, expire_holds deletes the holds whole.)
expire_holds(last)
wake()
return permits
