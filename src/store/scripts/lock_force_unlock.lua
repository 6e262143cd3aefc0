-- lock_force_unlock: remove the lock whoever holds it (administrative).
-- Runs after a kind's hooks (lock_plain or lock_fair); ARGV[1..4] are theirs.
--
-- KEYS[1]  lock hash  {prefix}{name}:lock (fair: :fair)
--
-- Returns  1 when a hold was removed (waiters were notified), 0 when free.
--
-- Invariant: the fence key is untouched, so the next holder's token is
-- still larger than every token issued before.
if redis.call('DEL', KEYS[1]) == 1 then
  on_free()
  return 1
end
return 0
