-- lock_release: drop one hold (or all holds) of a holder.
-- Runs after a kind's hooks (lock_plain or lock_fair); ARGV[1..4] are theirs.
--
-- KEYS[1]  lock hash  {prefix}{name}:lock (fair: :fair)
-- ARGV[2]  holder id
-- ARGV[5]  '1' to release every reentrant hold, '0' to release one
--
-- Returns  {-1}            not held by this holder
--          {1, 0}          the lock became free (waiters were notified)
--          {0, hold_count} still held by this holder, hold_count remaining
--
-- Invariant: the lock is free exactly when the hold count reaches 0; every
-- transition to free notifies the waiters. Holds are released latest
-- first: the attempt record of the hold dropped ('a:<id>' at the old
-- count) goes with it, so lock_undo never gives back a released hold.
local h = redis.call('HMGET', KEYS[1], 'holder', 'count')
if h[1] ~= ARGV[2] then
  return {-1}
end
local count = tonumber(h[2]) - 1
if ARGV[5] == '1' or count <= 0 then
  redis.call('DEL', KEYS[1])
  on_free()
  return {1, 0}
end
local fields = redis.call('HGETALL', KEYS[1])
for i = 1, #fields, 2 do
  if string.sub(fields[i], 1, 2) == 'a:' and tonumber(fields[i + 1]) > count then
    redis.call('HDEL', KEYS[1], fields[i])
  end
end
redis.call('HSET', KEYS[1], 'count', count)
return {0, count}
