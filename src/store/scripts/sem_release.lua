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
if not redis.call('ZSCORE', KEYS[8], holder) then
  return -1
end
if ARGV[5] and session_of(KEYS[7], holder) ~= ARGV[5] then
  return -1
end
local permits = drop_holder(holder)
expire_holds()
wake()
return permits
