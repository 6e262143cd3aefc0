-- lock_force_unlock: remove the lock whoever holds it (administrative);
-- see force_unlock in lock.lua. Runs after a kind's hooks; ARGV[1..4] are
-- theirs.
--
-- KEYS[1]  lock hash
-- ARGV[1]  wake channel
--
-- Returns  1 when a hold was removed (waiters were notified), 0 when free.
return force_unlock(KEYS[1], ARGV[1])
