-- rw_force_unlock: remove every hold, whoever holds it (administrative),
-- and wake the queue. Runs after queue.lua and rw.lua.
--
-- Returns  1 when something was held, 0 when it was free.
--
-- The fence key is untouched: later tokens are still larger.
refresh()
if redis.call('DEL', KEYS[1], KEYS[7]) > 0 then
  wake()
  return 1
end
return 0
