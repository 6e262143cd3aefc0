-- redlock_fence: raise one RedLock node's fencing counter to the token of
-- a grant, before the grant is returned. The grant's token is the largest
-- of its granting nodes' counters; once a quorum's counters are at least
-- that high, any later quorum shares a node with it and issues more.
--
-- KEYS[1]  lock hash  {prefix}{name}:redlock
-- KEYS[2]  fence      {prefix}{name}:redlock:fence  (never expires)
-- ARGV[1]  holder id
-- ARGV[2]  the grant's fencing token
--
-- Returns  the node's counter afterwards
--
-- Invariant: the counter never goes down (set to max(current, token)); the
-- holder's hold here records the grant's token, so a re-entrant acquire
-- and a heartbeat report the same token.
local token = tonumber(ARGV[2])
local current = tonumber(redis.call('GET', KEYS[2]) or '0')
if current < token then
  redis.call('SET', KEYS[2], token)
  current = token
end
if redis.call('HGET', KEYS[1], 'holder') == ARGV[1] then
  redis.call('HSET', KEYS[1], 'token', token)
end
return current
