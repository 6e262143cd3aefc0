-- redlock_release: drop a holder's hold on one RedLock node.
--
-- KEYS[1]  lock hash  {prefix}{name}:redlock
-- ARGV[1]  holder id
--
-- Returns  1 when this holder's hold was removed, 0 when it held nothing here
--
-- Invariant: only the holder removes its hold (another holder's hold on
-- this node is never touched).
if redis.call('HGET', KEYS[1], 'holder') ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
return 1
