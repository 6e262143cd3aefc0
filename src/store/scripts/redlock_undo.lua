-- redlock_undo: give back what one acquire attempt granted on one RedLock
-- node (a try without a quorum, a grant whose validity ran out, or one
-- whose client is gone).
--
-- KEYS[1]  lock hash  {prefix}{name}:redlock
-- KEYS[2]  tombstone  {prefix}{name}:redlock:undone:<attempt id>
-- ARGV[1]  holder id
-- ARGV[2]  attempt id
-- ARGV[3]  how long the tombstone lives, in ms
--
-- Returns  1 when the attempt's hold was removed, else 0
--
-- Invariants: only the hold that this very attempt created is removed (a
-- re-entrant try that failed never drops the hold the holder already had);
-- the tombstone makes a copy of the attempt that arrives late grant
-- nothing.
redis.call('SET', KEYS[2], '1', 'PX', ARGV[3])
local h = redis.call('HMGET', KEYS[1], 'holder', 'attempt')
if h[1] == ARGV[1] and h[2] == ARGV[2] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
