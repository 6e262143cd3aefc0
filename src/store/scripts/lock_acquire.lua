-- lock_acquire: take a reentrant lock, or re-enter it as its holder.
--
-- KEYS[1]  lock hash  {prefix}{name}:lock
--          fields: holder, count (hold count), token (fencing), lease (ms)
-- KEYS[2]  fence      {prefix}{name}:lock:fence   (counter; never expires)
-- ARGV[1]  holder id
-- ARGV[2]  lease in milliseconds
--
-- Returns  {1, token, hold_count, lease_ms}  granted (new or reentrant)
--          {0, pttl}                         held by another holder; pttl is its
--                                            remaining lease (-1 if someone removed
--                                            the TTL by hand)
--
-- Invariants: at most one holder; the hash exists only with a TTL (its
-- lease, measured by Redis's own clock); tokens come only from INCR on the
-- fence key, so they strictly increase across holders, expiries, force
-- unlocks and deletion of the hash. A reentrant acquire keeps the token.
local holder = redis.call('HGET', KEYS[1], 'holder')
if not holder then
  local token = redis.call('INCR', KEYS[2])
  redis.call('HSET', KEYS[1], 'holder', ARGV[1], 'count', 1, 'token', token, 'lease', ARGV[2])
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, token, 1, tonumber(ARGV[2])}
end
if holder == ARGV[1] then
  local count = redis.call('HINCRBY', KEYS[1], 'count', 1)
  redis.call('HSET', KEYS[1], 'lease', ARGV[2])
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, redis.call('HGET', KEYS[1], 'token'), count, tonumber(ARGV[2])}
end
return {0, redis.call('PTTL', KEYS[1])}
