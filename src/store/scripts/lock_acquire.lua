-- lock_acquire: take a reentrant lock, or re-enter it as its holder.
-- Runs after a kind's hooks (lock_plain or lock_fair), which say who may
-- take a free lock and what a waiter is told; ARGV[1..4] are theirs.
--
-- KEYS[1]  lock hash  {prefix}{name}:lock (fair: :fair)
--          fields: holder, count (hold count), token (fencing), lease (ms),
--          and one 'a:<attempt id>' per hold still counted, whose value is
--          the hold count that attempt reached (see lock_undo)
-- KEYS[2]  fence      {prefix}{name}:lock:fence   (counter; never expires)
-- KEYS[3]  tombstone  {prefix}{name}:lock:undone:<attempt id>
-- ARGV[2]  holder id
-- ARGV[5]  lease in milliseconds
-- ARGV[6]  attempt id (unique per try)
--
-- Returns  {1, token, hold_count, lease_ms}  granted (new or reentrant)
--          {0, retry_after_ms, ...}          must wait: the hook's reply
--                                            (plain: the holder's remaining
--                                            lease, -1 if someone removed the
--                                            TTL by hand)
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
local holder, lease = ARGV[2], ARGV[5]
local attempt = 'a:' .. ARGV[6]
local h = redis.call('HMGET', KEYS[1], 'holder', 'count', 'token', 'lease', attempt)
if not h[1] then
  local wait = admit(holder)
  if wait then
    return wait
  end
  local token = redis.call('INCR', KEYS[2])
  redis.call('HSET', KEYS[1], 'holder', holder, 'count', 1, 'token', token,
    'lease', lease, attempt, 1)
  redis.call('PEXPIRE', KEYS[1], lease)
  on_grant(holder)
  return {1, token, 1, tonumber(lease)}
end
if h[1] ~= holder then
  return on_blocked(holder, redis.call('PTTL', KEYS[1]))
end
if h[5] then
  return {1, h[3], tonumber(h[2]), tonumber(h[4])}
end
local count = redis.call('HINCRBY', KEYS[1], 'count', 1)
redis.call('HSET', KEYS[1], 'lease', lease, attempt, count)
redis.call('PEXPIRE', KEYS[1], lease)
return {1, h[3], count, tonumber(lease)}
