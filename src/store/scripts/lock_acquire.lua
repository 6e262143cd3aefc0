-- lock_acquire: take a reentrant lock, or re-enter it as its holder.
--
-- KEYS[1]  lock hash  {prefix}{name}:lock
--          fields: holder, count (hold count), token (fencing), lease (ms),
--          and one 'a:<attempt id>' per hold still counted, whose value is
--          the hold count that attempt reached (see lock_undo)
-- KEYS[2]  fence      {prefix}{name}:lock:fence   (counter; never expires)
-- KEYS[3]  tombstone  {prefix}{name}:lock:undone:<attempt id>
-- ARGV[1]  holder id
-- ARGV[2]  lease in milliseconds
-- ARGV[3]  attempt id (unique per try)
--
-- Returns  {1, token, hold_count, lease_ms}  granted (new or reentrant)
--          {0, pttl}                         held by another holder; pttl is its
--                                            remaining lease (-1 if someone removed
--                                            the TTL by hand)
--          {-1}                              this attempt was already given up
--                                            (lock_undo ran first): nothing granted
--
-- Invariants: at most one holder; the hash exists only with a TTL (its
-- lease, measured by Redis's own clock); tokens come only from INCR on the
-- fence key, so they strictly increase across holders, expiries, force
-- unlocks and deletion of the hash. A reentrant acquire keeps the token.
-- Running the same attempt twice grants once: the second run returns the
-- first one's grant (so a caller may repeat a try whose reply was lost).
if redis.call('EXISTS', KEYS[3]) == 1 then
  return {-1}
end
local attempt = 'a:' .. ARGV[3]
local h = redis.call('HMGET', KEYS[1], 'holder', 'count', 'token', 'lease', attempt)
if not h[1] then
  local token = redis.call('INCR', KEYS[2])
  redis.call('HSET', KEYS[1], 'holder', ARGV[1], 'count', 1, 'token', token,
    'lease', ARGV[2], attempt, 1)
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, token, 1, tonumber(ARGV[2])}
end
if h[1] ~= ARGV[1] then
  return {0, redis.call('PTTL', KEYS[1])}
end
if h[5] then
  return {1, h[3], tonumber(h[2]), tonumber(h[4])}
end
local count = redis.call('HINCRBY', KEYS[1], 'count', 1)
redis.call('HSET', KEYS[1], 'lease', ARGV[2], attempt, count)
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return {1, h[3], count, tonumber(ARGV[2])}
