-- sem_release: a holder gives back all its permits.
-- Runs after queue.lua and sem.lua (keys and common arguments there).
--
-- ARGV[5]  only when a session ends: the session (a hold taken in another
--          session, or in none, is not released)
--
-- Returns  the permits given back, or -1 when the holder holds nothing (or
-- nothing in that session).
-- The queue is woken: the waiters the freed permits serve may go.
local holder = ARGV[2]
-- The holder's permits, attempts and session, the permits held in all and
-- the reclaim floor, in one HMGET: it holds permits exactly when it has a
-- lease (p|<h> and its entry in KEYS[8] are written and dropped
-- together).
local function read_hold()
  return redis.call('HMGET', KEYS[7], 'p|' .. holder, 'as|' .. holder, 'ss|' .. holder, 'used',
    'soonest')
end
local h = read_hold()
if refresh(h[5], h[4]) then
  h = read_hold()
end
if not h[1] then
  return -1
end
if ARGV[5] and (h[3] or '') ~= ARGV[5] then
  return -1
end
local permits = h[1] + 0
if (h[4] or 0) + 0 <= permits then
  -- The last hold: the holds and the leases go whole.
  redis.call('DEL', KEYS[7], KEYS[8])
else
  -- Others hold permits: drop this holder's lease and fields (its
  -- session's are there only with ss|<h>: in_session writes all three).
  -- The keys' TTL stays past every lease left (extend_holds).
  redis.call('ZREM', KEYS[8], holder)
  drop_fields(holder, h, not h[3])
end
wake()
return permits
