-- sem_release: a holder gives back all its permits.
-- Runs after queue.lua and sem.lua (keys and common arguments there).
--
-- Returns  the permits given back, or -1 when the holder holds nothing.
-- The queue is woken: the waiters the freed permits serve may go.
refresh()
local holder = ARGV[2]
if not redis.call('ZSCORE', KEYS[8], holder) then
  return -1
end
local permits = drop_holder(holder)
expire_holds()
wake()
return permits
