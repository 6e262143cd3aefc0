-- latch_delete: remove a latch whatever its count (administrative).
--
-- KEYS[1]  latch  {prefix}{name}:latch
-- ARGV[1]  wake channel {prefix}{name}:latch:wake
--
-- Returns  1 when a closed latch was removed (its waiters were told it is
--          open), 0 when it was already open.
--
-- Invariant: as for a count-down to 0, waiters see a deleted latch open.
if redis.call('DEL', KEYS[1]) == 1 then
  redis.call(PUBLISH, ARGV[1], '0|0')
  return 1
end
return 0
