-- lock_force_unlock: remove the lock whoever holds it (administrative).
--
-- KEYS[1]  lock hash  {prefix}{name}:lock
-- ARGV[1]  wake channel {prefix}{name}:lock:wake
--
-- Returns  1 when a hold was removed (waiters were notified), 0 when free.
--
-- Invariant: the fence key is untouched, so the next holder's token is
-- still larger than every token issued before.
if redis.call('DEL', KEYS[1]) == 1 then
  redis.call('PUBLISH', ARGV[1], 'free')
  return 1
end
return 0
