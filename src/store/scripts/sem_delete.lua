-- sem_delete: remove a semaphore: its configuration, every hold and the
-- queue. Waiters look again and find it gone (404). The fence key is
-- untouched: a semaphore set again later still issues larger tokens.
-- Runs after queue.lua and sem.lua.
--
-- Returns  1 when it was configured, 0 otherwise.
local existed = redis.call('EXISTS', KEYS[1])
redis.call('DEL', KEYS[1], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8])
wake_all()
return existed
