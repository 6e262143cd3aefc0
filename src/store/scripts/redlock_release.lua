-- redlock_release: drop a holder's hold on one RedLock node.
--
-- KEYS[1]  lock hash  {prefix}{name}:redlock
-- ARGV[1]  holder id
-- ARGV[2]  only when a session ends: the session (a hold taken in another
--          session, or in none, is not removed)
--
-- Returns  1 when this holder's hold was removed, 0 when it held nothing here
--          (or nothing in that session)
--
-- Invariant: only the holder removes its hold (another holder's hold on
-- this node is never touched).
local h = redis.call('HMGET', KEYS[1], 'holder', 's')
if h[1] ~= ARGV[1] or (ARGV[2] and h[2] ~= ARGV[2]) then
  return 0
end
redis.call('DEL', KEYS[1])
return 1
