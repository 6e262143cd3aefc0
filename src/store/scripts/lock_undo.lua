-- lock_undo: give back exactly what one acquire attempt granted, if
-- anything (its client is gone, or was told the attempt failed).
-- Runs after a kind's hooks (lock_plain or lock_fair); ARGV[1..4] are theirs.
--
-- KEYS[1]  lock hash  {prefix}{name}:lock (fair: :fair)
-- KEYS[2]  fence (unused here; the family's keys are the same everywhere)
-- KEYS[3]  tombstone  {prefix}{name}:lock:undone:<attempt id>
-- ARGV[2]  holder id
-- ARGV[5]  attempt id
-- ARGV[6]  tombstone lifetime in milliseconds
--
-- Returns  1  the attempt's hold was given back (the lock may now be free;
--             waiters were notified if so)
--          0  the attempt holds nothing (never granted, already released,
--             expired or undone); a tombstone now makes sure that, should
--             the attempt still reach Redis, it grants nothing
--
-- Invariant: never touches another attempt's hold, even of the same
-- holder id: a hold is counted for an attempt exactly while its
-- 'a:<attempt id>' field exists (lock_release removes the fields of the
-- holds it drops, latest first).
local attempt = 'a:' .. ARGV[5]
local h = redis.call('HMGET', KEYS[1], 'holder', 'count', attempt)
if h[1] ~= ARGV[2] or not h[3] then
  redis.call('SET', KEYS[3], '1', 'PX', ARGV[6])
  return 0
end
local count = tonumber(h[2]) - 1
if count <= 0 then
  redis.call('DEL', KEYS[1])
  on_free()
  return 1
end
-- The attempts above this one keep their holds; each now sits one lower.
local fields = redis.call('HGETALL', KEYS[1])
local mine = tonumber(h[3])
for i = 1, #fields, 2 do
  local level = tonumber(fields[i + 1])
  if string.sub(fields[i], 1, 2) == 'a:' and level > mine then
    redis.call('HSET', KEYS[1], fields[i], level - 1)
  end
end
redis.call('HDEL', KEYS[1], attempt)
redis.call('HSET', KEYS[1], 'count', count)
return 1
